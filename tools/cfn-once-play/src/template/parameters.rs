//! A template's parameters: their declarations as read, and the values a play binds to them,
//! checked against the constraints as CloudFormation checks them.

use std::collections::BTreeMap;
use std::path::Path;

use serde_json::Value;

use super::{ParameterDecl, Refusal, Template, attributes, name_of, scalar_text};
use crate::yaml::{Key, Node};

impl Template {
    /// The parameters' values: those given, else the defaults, each checked against its
    /// declaration's constraints. List types become JSON lists of strings. A NoEcho value is
    /// never put in a message.
    pub fn bind_parameters(&self, given: &BTreeMap<String, String>) -> Result<BTreeMap<String, Value>, String> {
        let file = self.path.display();
        if let Some(name) = given.keys().find(|name| self.parameter(name).is_none()) {
            return Err(format!("{file}: parameter {name} is not declared in the template: check its spelling"));
        }
        let mut bound = BTreeMap::new();
        for parameter in &self.parameters {
            let name = &parameter.name;
            let Some(raw) = given.get(name).or(parameter.default.as_ref()) else {
                return Err(format!(
                    "{file}:{}: parameter {name} has no value and no Default: give one with --parameter {name}=VALUE",
                    parameter.line
                ));
            };
            let value = if is_list(&parameter.kind) {
                // CloudFormation trims the spaces around each member of a list.
                let items: Vec<String> = raw.split(',').map(|item| item.trim().to_string()).collect();
                items
                    .iter()
                    .try_for_each(|item| parameter.validate(item))
                    .map_err(|why| format!("{file}:{}: parameter {name}: {why}", parameter.line))?;
                Value::Array(items.into_iter().map(Value::String).collect())
            } else {
                parameter.validate(raw).map_err(|why| format!("{file}:{}: parameter {name}: {why}", parameter.line))?;
                Value::String(raw.clone())
            };
            bound.insert(name.clone(), value);
        }
        Ok(bound)
    }
}

impl ParameterDecl {
    /// Checks one value (one member of a list type) against the declaration's constraints.
    fn validate(&self, value: &str) -> Result<(), String> {
        let shown = if self.no_echo { "the value (NoEcho)".to_string() } else { format!("{value:?}") };
        let hint = self.constraint_description.as_ref().map_or(String::new(), |text| format!(" ({})", text.trim()));
        let numeric = matches!(self.kind.as_str(), "Number" | "List<Number>");
        if numeric {
            let number = value.trim().parse::<f64>().ok().filter(|number| number.is_finite());
            let Some(number) = number else { return Err(format!("{shown} is not a number")) };
            if self.min_value.is_some_and(|min| number < min) || self.max_value.is_some_and(|max| number > max) {
                return Err(format!(
                    "{shown} is outside MinValue {:?} .. MaxValue {:?}{hint}",
                    self.min_value, self.max_value
                ));
            }
        } else {
            let length = value.chars().count();
            if self.min_length.is_some_and(|min| length < min) || self.max_length.is_some_and(|max| length > max) {
                return Err(format!(
                    "{shown} has {length} characters, outside MinLength {:?} .. MaxLength {:?}{hint}",
                    self.min_length, self.max_length
                ));
            }
        }
        if !self.allowed_values.is_empty() && !self.allowed_values.iter().any(|allowed| allowed == value) {
            return Err(format!("{shown} is not one of the AllowedValues {}{hint}", self.allowed_values.join(", ")));
        }
        if let Some(pattern) = &self.allowed_pattern
            && !full_match(pattern, value)?
        {
            return Err(format!("{shown} does not match the AllowedPattern {pattern}{hint}"));
        }
        Ok(())
    }
}

/// Whether `pattern` matches all of `value`, as CloudFormation (Java's `matches`) applies an
/// AllowedPattern.
fn full_match(pattern: &str, value: &str) -> Result<bool, String> {
    let regex = regress::Regex::new(&format!("^(?:{pattern})$")).map_err(|error| {
        format!("AllowedPattern {pattern} is not a regular expression cfn-once play can read: {error}")
    })?;
    Ok(regex.find(value).is_some())
}

fn is_list(kind: &str) -> bool {
    let kind = ssm_value_type(kind).unwrap_or(kind);
    kind == "CommaDelimitedList" || kind.starts_with("List<")
}

/// The type a Systems Manager parameter type's value has: `String` for
/// `AWS::SSM::Parameter::Value<String>`, `List<AWS::EC2::Image::Id>` for
/// `AWS::SSM::Parameter::Value<List<AWS::EC2::Image::Id>>`, `String` for
/// `AWS::SSM::Parameter::Name` (its value is the name itself); `None` for any other type. The
/// types are the User Guide's "Supported SSM parameter types"
/// (https://docs.aws.amazon.com/AWSCloudFormation/latest/UserGuide/parameters-section-structure.html#aws-ssm-parameter-types):
/// CloudFormation reads the named Systems Manager parameter when the stack is created or
/// updated; play has no Systems Manager, so the value given (--parameter, else the Default) is
/// taken as the value itself, and `Template::warnings` says so.
pub(crate) fn ssm_value_type(kind: &str) -> Option<&str> {
    if kind == "AWS::SSM::Parameter::Name" {
        return Some("String");
    }
    let inner = kind.strip_prefix("AWS::SSM::Parameter::Value<")?.strip_suffix('>')?;
    let element = inner.strip_prefix("List<").and_then(|rest| rest.strip_suffix('>')).unwrap_or(inner);
    let known = matches!(inner, "String" | "List<String>" | "CommaDelimitedList")
        || element.starts_with("AWS::EC2::")
        || element.starts_with("AWS::Route53::");
    known.then_some(inner)
}

pub(super) fn parameter(path: &Path, key: &Key, body: &Node) -> Result<ParameterDecl, Refusal> {
    let name = name_of(path, key, "parameter")?;
    let mut decl = ParameterDecl {
        name,
        line: key.line,
        kind: String::new(),
        default: None,
        no_echo: false,
        allowed_values: Vec::new(),
        allowed_pattern: None,
        min_length: None,
        max_length: None,
        min_value: None,
        max_value: None,
        description: None,
        constraint_description: None,
    };
    let number = |attribute: &Key, value: &Node| -> Result<f64, Refusal> {
        let parsed = value.as_str().and_then(|text| text.trim().parse::<f64>().ok()).filter(|n| n.is_finite());
        parsed.ok_or_else(|| Refusal::new(path, attribute.line, &attribute.name, "must be a number".to_string()))
    };
    let count = |attribute: &Key, value: &Node| -> Result<usize, Refusal> {
        value
            .as_str()
            .and_then(|text| text.trim().parse::<usize>().ok())
            .ok_or_else(|| Refusal::new(path, attribute.line, &attribute.name, "must be a whole number".to_string()))
    };
    for (attribute, value) in attributes(path, key, body, "parameter")? {
        match attribute.name.as_str() {
            "Type" => decl.kind = scalar_text(path, attribute, value)?,
            "Default" => decl.default = Some(scalar_text(path, attribute, value)?),
            "Description" => decl.description = Some(scalar_text(path, attribute, value)?),
            "ConstraintDescription" => decl.constraint_description = Some(scalar_text(path, attribute, value)?),
            "NoEcho" => decl.no_echo = scalar_text(path, attribute, value)?.eq_ignore_ascii_case("true"),
            "AllowedValues" => {
                let items = value
                    .as_seq()
                    .ok_or_else(|| Refusal::new(path, attribute.line, "AllowedValues", "must be a list".to_string()))?;
                for item in items {
                    decl.allowed_values.push(scalar_text(path, attribute, item)?);
                }
            }
            "AllowedPattern" => {
                let pattern = scalar_text(path, attribute, value)?;
                full_match(&pattern, "").map_err(|why| Refusal::new(path, attribute.line, "AllowedPattern", why))?;
                decl.allowed_pattern = Some(pattern);
            }
            "MinLength" => decl.min_length = Some(count(attribute, value)?),
            "MaxLength" => decl.max_length = Some(count(attribute, value)?),
            "MinValue" => decl.min_value = Some(number(attribute, value)?),
            "MaxValue" => decl.max_value = Some(number(attribute, value)?),
            other => return Err(Refusal::new(path, attribute.line, other, "not a parameter attribute".to_string())),
        }
    }
    let kind = decl.kind.as_str();
    let element = kind.strip_prefix("List<").and_then(|rest| rest.strip_suffix('>')).unwrap_or(kind);
    let aws_specific = element.starts_with("AWS::EC2::") || element.starts_with("AWS::Route53::");
    if kind.is_empty() {
        return Err(Refusal::new(path, key.line, &format!("parameter {}", decl.name), "declares no Type".to_string()));
    }
    if kind.starts_with("AWS::SSM::Parameter::") && ssm_value_type(kind).is_none() {
        return Err(Refusal::new(
            path,
            key.line,
            &format!("parameter type {kind}"),
            "not a Systems Manager parameter type (AWS::SSM::Parameter::Name, AWS::SSM::Parameter::Value<...>)"
                .to_string(),
        ));
    }
    let ssm = kind.starts_with("AWS::SSM::Parameter::");
    if !(matches!(kind, "String" | "Number" | "List<Number>" | "CommaDelimitedList") || aws_specific || ssm) {
        return Err(Refusal::new(path, key.line, &format!("parameter type {kind}"), "not a parameter type cfn-once play knows (String, Number, List<Number>, CommaDelimitedList, AWS::EC2::* types)".to_string()));
    }
    Ok(decl)
}
