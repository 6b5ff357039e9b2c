//! CloudFormation's intrinsic functions, the ones `cfn-once play` supports: what each looks
//! like (checked once, when a template is loaded, so that anything else is refused before a
//! request is sent) and what each evaluates to.
//!
//! Evaluation does no I/O: what only a played stack knows (a resource's physical id, a custom
//! resource's Data) comes through the [`Resources`] port the engine implements. Values are
//! JSON as CloudFormation builds them: strings, lists and maps; `AWS::NoValue` is `None`, and a
//! map entry or list item that evaluates to it is left out, as CloudFormation leaves it out.

use std::collections::BTreeMap;
use std::fmt;

use serde_json::Value;

use super::yaml::{Node, NodeValue};

mod cidr;
mod functions;
mod rules;
mod scan;

pub use functions::availability_zones;
pub(crate) use functions::{IMPORT_EXPORTS, IMPORT_NAME, MAP_ARGUMENTS, MAP_MAPPINGS};
pub use rules::evaluate_rule;
pub(crate) use rules::scan_rule;
pub(crate) use scan::{Mention, Place, scan};

/// What only the played stack knows, answered by the engine.
pub trait Resources {
    /// A resource's `Ref`: its physical id (a custom resource's PhysicalResourceId, a wait
    /// condition handle's URL, a made-up name for a resource nobody provisions).
    fn reference(&self, logical_id: &str) -> Result<Value, String>;
    /// A resource's attribute (a custom resource's Data, a wait condition's Data, a stub).
    fn attribute(&self, logical_id: &str, attribute: &str) -> Result<Value, String>;
}

/// The pseudo parameters' values for one play.
#[derive(Debug, Clone, PartialEq)]
pub struct Pseudo {
    pub region: String,
    pub account_id: String,
    pub stack_name: String,
    pub stack_id: String,
    pub partition: String,
    pub url_suffix: String,
}

/// Everything an expression may read.
#[derive(Clone, Copy)]
pub struct Scope<'a> {
    pub parameters: &'a BTreeMap<String, Value>,
    pub pseudo: &'a Pseudo,
    pub conditions: &'a BTreeMap<String, bool>,
    pub resources: &'a dyn Resources,
}

// By hand, so that a debug print shows which parameters are bound but never their values, a
// NoEcho one among them.
impl fmt::Debug for Scope<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Scope")
            .field("parameters", &self.parameters.keys().collect::<Vec<_>>())
            .field("pseudo", self.pseudo)
            .field("conditions", self.conditions)
            .finish_non_exhaustive()
    }
}

#[cfg(test)]
impl Pseudo {
    /// The pseudo parameters of the tests' stacks.
    pub(crate) fn for_tests(region: &str, stack_name: &str) -> Self {
        Self {
            region: region.into(),
            account_id: "123456789012".into(),
            stack_name: stack_name.into(),
            stack_id: format!("arn:aws:cloudformation:{region}:123456789012:stack/{stack_name}/1"),
            partition: "aws".into(),
            url_suffix: "amazonaws.com".into(),
        }
    }
}

/// An expression that could not be evaluated, and the template line it is on.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct EvalError {
    pub line: usize,
    pub message: String,
}

impl fmt::Display for EvalError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "line {}: {}", self.line, self.message)
    }
}

impl std::error::Error for EvalError {}

/// The pseudo parameters a play knows. `AWS::NotificationARNs` is not among them: a local play
/// has no notification topics to name.
pub const PSEUDO_PARAMETERS: &[&str] = &[
    "AWS::Region",
    "AWS::AccountId",
    "AWS::StackName",
    "AWS::StackId",
    "AWS::Partition",
    "AWS::URLSuffix",
    "AWS::NoValue",
];

/// Evaluates a value: a property, an output's value, an export's name. `None` is `AWS::NoValue`.
pub fn evaluate(node: &Node, scope: &Scope) -> Result<Option<Value>, EvalError> {
    match &node.value {
        NodeValue::Null => Ok(Some(Value::Null)),
        NodeValue::Scalar(text) => Ok(Some(Value::String(text.clone()))),
        NodeValue::Seq(items) => {
            let mut values = Vec::with_capacity(items.len());
            for item in items {
                values.extend(evaluate(item, scope)?);
            }
            Ok(Some(Value::Array(values)))
        }
        NodeValue::Map(entries) => {
            if let Some((key, argument)) = node.single_entry()
                && is_function(&key.name)
            {
                return function(&key.name, argument, key.line, scope);
            }
            let mut object = serde_json::Map::new();
            for (key, value) in entries {
                if let Some(value) = evaluate(value, scope)? {
                    object.insert(key.name.clone(), value);
                }
            }
            Ok(Some(Value::Object(object)))
        }
    }
}

/// Evaluates a condition: `Fn::Equals`, `Fn::And`, `Fn::Or`, `Fn::Not`, `Fn::If` between
/// conditions, or `Condition` naming one already resolved in the scope.
pub fn evaluate_condition(node: &Node, scope: &Scope) -> Result<bool, EvalError> {
    let fail = |line, message: String| Err(EvalError { line, message });
    let Some((key, argument)) = node.single_entry() else {
        return fail(node.line, CONDITION_SHAPE.to_string());
    };
    let line = key.line;
    match key.name.as_str() {
        "Fn::Equals" => {
            let [left, right] = arguments::<2>(argument, "Fn::Equals takes two values")?;
            let mut sides = Vec::with_capacity(2);
            for side in [left, right] {
                match evaluate(side, scope)? {
                    Some(value) => sides.push(to_properties(value)),
                    None => return fail(side.line, "Fn::Equals of AWS::NoValue".to_string()),
                }
            }
            Ok(sides[0] == sides[1])
        }
        "Fn::And" | "Fn::Or" => {
            let items = argument.as_seq().unwrap_or_default();
            if !(2..=10).contains(&items.len()) {
                return fail(line, format!("{} takes 2 to 10 conditions", key.name));
            }
            let mut values = Vec::with_capacity(items.len());
            for item in items {
                values.push(evaluate_condition(item, scope)?);
            }
            Ok(if key.name == "Fn::And" {
                values.iter().all(|value| *value)
            } else {
                values.iter().any(|value| *value)
            })
        }
        "Fn::Not" => {
            let [inner] = arguments::<1>(argument, "Fn::Not takes a list of one condition")?;
            Ok(!evaluate_condition(inner, scope)?)
        }
        "Condition" => condition(argument, scope),
        "Fn::If" => {
            let [name, then, otherwise] = arguments::<3>(argument, "Fn::If takes [condition, value, value]")?;
            if condition(name, scope)? { evaluate_condition(then, scope) } else { evaluate_condition(otherwise, scope) }
        }
        _ => fail(line, CONDITION_SHAPE.to_string()),
    }
}

/// CloudFormation's form of a custom resource's ResourceProperties: every number and boolean
/// becomes a string, at any depth; null stays null.
pub fn to_properties(value: Value) -> Value {
    match value {
        Value::Number(number) => Value::String(number.to_string()),
        Value::Bool(flag) => Value::String(flag.to_string()),
        Value::Array(items) => Value::Array(items.into_iter().map(to_properties).collect()),
        Value::Object(object) => {
            Value::Object(object.into_iter().map(|(key, value)| (key, to_properties(value))).collect())
        }
        other => other,
    }
}

const CONDITION_SHAPE: &str = "a condition is one of Fn::Equals, Fn::And, Fn::Or, Fn::Not, Fn::If or Condition";

fn is_function(name: &str) -> bool {
    name == "Ref" || name.starts_with("Fn::")
}

fn function(name: &str, argument: &Node, line: usize, scope: &Scope) -> Result<Option<Value>, EvalError> {
    let fail = |message: String| Err(EvalError { line, message });
    match name {
        "Ref" => match argument.as_str() {
            Some(target) => reference(target, line, scope),
            None => fail("Ref takes a name".to_string()),
        },
        "Fn::GetAtt" => match get_att_target(argument) {
            Some((logical_id, attribute)) => attribute_of(logical_id, attribute, line, scope),
            None => fail(GET_ATT_SHAPE.to_string()),
        },
        "Fn::Sub" => substitute(argument, line, scope).map(|text| Some(Value::String(text))),
        "Fn::Join" => {
            let [delimiter, list] = arguments::<2>(argument, "Fn::Join takes [delimiter, list]")?;
            let delimiter = text_value(delimiter, scope, "Fn::Join's delimiter")?;
            let items = list_value(list, scope, "Fn::Join's list")?;
            let mut texts = Vec::with_capacity(items.len());
            for item in &items {
                match text_of(item) {
                    Some(text) => texts.push(text),
                    None => return fail(format!("Fn::Join of {item}, which is not text")),
                }
            }
            Ok(Some(Value::String(texts.join(&delimiter))))
        }
        "Fn::Select" => {
            let [index, list] = arguments::<2>(argument, "Fn::Select takes [index, list]")?;
            let index_text = text_value(index, scope, "Fn::Select's index")?;
            let Ok(position) = index_text.trim().parse::<usize>() else {
                return fail(format!("Fn::Select's index {index_text} is not a whole number"));
            };
            let items = list_value(list, scope, "Fn::Select's list")?;
            match items.get(position) {
                Some(item) => Ok(Some(item.clone())),
                None => fail(format!("Fn::Select's index {position} is past the list's {} items", items.len())),
            }
        }
        "Fn::Split" => {
            let [delimiter, source] = arguments::<2>(argument, "Fn::Split takes [delimiter, text]")?;
            let delimiter = text_value(delimiter, scope, "Fn::Split's delimiter")?;
            if delimiter.is_empty() {
                return fail("Fn::Split's delimiter is empty".to_string());
            }
            let source = text_value(source, scope, "Fn::Split's text")?;
            let parts = source.split(delimiter.as_str());
            Ok(Some(Value::Array(parts.map(|part| Value::String(part.to_string())).collect())))
        }
        "Fn::If" => {
            let [name, then, otherwise] = arguments::<3>(argument, "Fn::If takes [condition, value, value]")?;
            if condition(name, scope)? { evaluate(then, scope) } else { evaluate(otherwise, scope) }
        }
        "Fn::FindInMap" | "Fn::Base64" | "Fn::Cidr" | "Fn::GetAZs" | "Fn::ImportValue" => {
            functions::function(name, argument, line, scope)
        }
        other => fail(format!("{other} is not evaluated by cfn-once play")),
    }
}

const GET_ATT_SHAPE: &str = "Fn::GetAtt takes Logical.Attribute or [Logical, Attribute]";

/// A `Ref`'s value: a pseudo parameter, a parameter, or a resource through the engine.
fn reference(name: &str, line: usize, scope: &Scope) -> Result<Option<Value>, EvalError> {
    let pseudo = scope.pseudo;
    let text = match name {
        "AWS::NoValue" => return Ok(None),
        "AWS::Region" => &pseudo.region,
        "AWS::AccountId" => &pseudo.account_id,
        "AWS::StackName" => &pseudo.stack_name,
        "AWS::StackId" => &pseudo.stack_id,
        "AWS::Partition" => &pseudo.partition,
        "AWS::URLSuffix" => &pseudo.url_suffix,
        _ => {
            if name.starts_with("AWS::") {
                let message = format!("pseudo parameter {name} is not supported by cfn-once play");
                return Err(EvalError { line, message });
            }
            if let Some(value) = scope.parameters.get(name) {
                return Ok(Some(value.clone()));
            }
            return match scope.resources.reference(name) {
                Ok(value) => Ok(Some(value)),
                Err(message) => Err(EvalError { line, message }),
            };
        }
    };
    Ok(Some(Value::String(text.clone())))
}

fn attribute_of(logical_id: &str, attribute: &str, line: usize, scope: &Scope) -> Result<Option<Value>, EvalError> {
    match scope.resources.attribute(logical_id, attribute) {
        Ok(value) => Ok(Some(value)),
        Err(message) => Err(EvalError { line, message }),
    }
}

/// `Fn::Sub`, both forms: `${Name}` is a `Ref` (or a variable of the list form), `${Name.Attr}`
/// a `GetAtt`, `${!Text}` the literal `${Text}`.
fn substitute(argument: &Node, line: usize, scope: &Scope) -> Result<String, EvalError> {
    let fail = |message: String| EvalError { line, message };
    let (text, variables) = match (argument.as_str(), argument.as_seq()) {
        (Some(text), _) => (text, None),
        (_, Some([text, variables])) => match (text.as_str(), variables.as_map()) {
            (Some(text), Some(variables)) => (text, Some(variables)),
            _ => return Err(fail(SUB_SHAPE.to_string())),
        },
        _ => return Err(fail(SUB_SHAPE.to_string())),
    };
    let mut bound = BTreeMap::new();
    for (key, node) in variables.unwrap_or_default() {
        let value = text_value(node, scope, &format!("Fn::Sub's variable {}", key.name))?;
        bound.insert(key.name.as_str(), value);
    }
    let mut out = String::new();
    for part in sub_parts(text).map_err(fail)? {
        let name = match part {
            SubPart::Text(literal) => {
                out.push_str(&literal);
                continue;
            }
            SubPart::Variable(name) => name,
        };
        if let Some(value) = bound.get(name) {
            out.push_str(value);
            continue;
        }
        let value = match name.split_once('.') {
            Some((logical_id, attribute)) => attribute_of(logical_id, attribute, line, scope)?,
            None => reference(name, line, scope)?,
        };
        match value.as_ref().and_then(text_of) {
            Some(text) => out.push_str(&text),
            None => {
                let what = match value {
                    Some(Value::Array(_)) => "a list",
                    None => "AWS::NoValue",
                    Some(_) => "not text",
                };
                return Err(fail(format!("Fn::Sub's ${{{name}}} is {what}: Fn::Sub takes text only")));
            }
        }
    }
    Ok(out)
}

const SUB_SHAPE: &str = "Fn::Sub takes a text or [text, {variables}]";

/// A piece of an `Fn::Sub` text.
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum SubPart<'a> {
    Text(String),
    Variable(&'a str),
}

/// Splits an `Fn::Sub` text into literal text and `${...}` variables.
pub(crate) fn sub_parts(text: &str) -> Result<Vec<SubPart<'_>>, String> {
    let mut parts = Vec::new();
    let mut literal = String::new();
    let mut rest = text;
    while let Some(start) = rest.find("${") {
        literal.push_str(&rest[..start]);
        let after = &rest[start + 2..];
        if let Some(escaped) = after.strip_prefix('!') {
            literal.push_str("${");
            rest = escaped;
            continue;
        }
        let Some(end) = after.find('}') else {
            return Err(format!("Fn::Sub's text has `${{` without a closing `}}`: {text}"));
        };
        let name = &after[..end];
        if name.is_empty() {
            return Err("Fn::Sub's text has an empty `${}`".to_string());
        }
        if !literal.is_empty() {
            parts.push(SubPart::Text(std::mem::take(&mut literal)));
        }
        parts.push(SubPart::Variable(name));
        rest = &after[end + 1..];
    }
    literal.push_str(rest);
    if !literal.is_empty() {
        parts.push(SubPart::Text(literal));
    }
    Ok(parts)
}

/// The logical id and attribute of `Fn::GetAtt`'s argument. An attribute may hold dots
/// (`Outputs.Name`), so the text form splits at the first dot.
pub(crate) fn get_att_target(argument: &Node) -> Option<(&str, &str)> {
    if let Some(text) = argument.as_str() {
        return text.split_once('.').filter(|(id, attr)| !id.is_empty() && !attr.is_empty());
    }
    match argument.as_seq()? {
        [logical_id, attribute] => Some((logical_id.as_str()?, attribute.as_str()?)),
        _ => None,
    }
}

fn condition(name: &Node, scope: &Scope) -> Result<bool, EvalError> {
    let Some(text) = name.as_str() else {
        return Err(EvalError { line: name.line, message: "a condition's name must be text".to_string() });
    };
    match scope.conditions.get(text) {
        Some(value) => Ok(*value),
        None => Err(EvalError { line: name.line, message: format!("condition {text} is not declared in Conditions") }),
    }
}

/// The items of a list of exactly `N` arguments.
fn arguments<'n, const N: usize>(argument: &'n Node, shape: &str) -> Result<[&'n Node; N], EvalError> {
    let items = argument.as_seq().unwrap_or_default();
    let found: Option<[&Node; N]> = items.iter().collect::<Vec<_>>().try_into().ok();
    found.ok_or_else(|| EvalError { line: argument.line, message: shape.to_string() })
}

fn text_value(node: &Node, scope: &Scope, what: &str) -> Result<String, EvalError> {
    match evaluate(node, scope)? {
        Some(value) => text_of(&value)
            .ok_or_else(|| EvalError { line: node.line, message: format!("{what} is {value}, not text") }),
        None => Err(EvalError { line: node.line, message: format!("{what} is AWS::NoValue") }),
    }
}

fn list_value(node: &Node, scope: &Scope, what: &str) -> Result<Vec<Value>, EvalError> {
    match evaluate(node, scope)? {
        Some(Value::Array(items)) => Ok(items),
        other => Err(EvalError {
            line: node.line,
            message: format!(
                "{what} is {}, not a list",
                other.map_or("AWS::NoValue".to_string(), |value| value.to_string())
            ),
        }),
    }
}

/// A string, number or boolean as text; `None` for lists, maps and null.
fn text_of(value: &Value) -> Option<String> {
    match value {
        Value::String(text) => Some(text.clone()),
        Value::Number(number) => Some(number.to_string()),
        Value::Bool(flag) => Some(flag.to_string()),
        _ => None,
    }
}

#[cfg(test)]
#[path = "intrinsics_tests.rs"]
mod tests;
