//! The templates' evaluator, for `templates.rs` and `customer_template.rs`: a template as
//! JSON, and a stack operation's Rules, Conditions and `Fn::If`s evaluated as CloudFormation
//! does. It evaluates the functions the templates use and panics on any other, so a template
//! that starts using one fails here rather than being half-evaluated.

use std::collections::BTreeMap;

use cfn_once_tests::workspace_root;
use serde_json::{Map, Value, json};

/// `infra/<name>` as JSON, with the YAML short forms (`!Ref x`, `!GetAtt a.b`, `!Sub s`) in
/// their long forms.
pub(crate) fn template(name: &str) -> Value {
    let path = workspace_root().join("infra").join(name);
    let text = std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("cannot read {}: {e}", path.display()));
    long_form(serde_norway::from_str(&text).unwrap_or_else(|e| panic!("{name} is not YAML: {e}")))
}

fn long_form(yaml: serde_norway::Value) -> Value {
    use serde_norway::Value as Yaml;
    match yaml {
        Yaml::Null => Value::Null,
        Yaml::Bool(b) => Value::Bool(b),
        Yaml::Number(n) => serde_json::to_value(n).unwrap_or(Value::Null),
        Yaml::String(s) => Value::String(s),
        Yaml::Sequence(items) => Value::Array(items.into_iter().map(long_form).collect()),
        Yaml::Mapping(map) => Value::Object(
            map.into_iter()
                .map(|(k, v)| (k.as_str().map(str::to_owned).unwrap_or_else(|| format!("{k:?}")), long_form(v)))
                .collect(),
        ),
        Yaml::Tagged(tagged) => {
            let tag = tagged.tag.to_string();
            let name = tag.trim_start_matches('!').to_owned();
            let value = long_form(tagged.value);
            match (name.as_str(), value) {
                ("Ref" | "Condition", value) => json!({ name: value }),
                ("GetAtt", Value::String(path)) => {
                    let (resource, attribute) = path.split_once('.').expect("!GetAtt resource.attribute");
                    json!({"Fn::GetAtt": [resource, attribute]})
                }
                (_, value) => json!({ format!("Fn::{name}"): value }),
            }
        }
    }
}

/// The opt-in regions of SNS's "Opt-in Regions" table
/// (https://docs.aws.amazon.com/sns/latest/dg/sns-cross-region-delivery.html), for the tests of both
/// templates: cross-region delivery to or from one of them needs its regional principal
/// (`sns.<region>.amazonaws.com`), and SNS does not deliver from one of them to another.
pub(crate) const SNS_OPT_IN: [&str; 12] = [
    "af-south-1",
    "ap-east-1",
    "ap-south-2",
    "ap-southeast-3",
    "ap-southeast-4",
    "ap-northeast-3",
    "eu-south-1",
    "eu-south-2",
    "eu-central-2",
    "il-central-1",
    "me-south-1",
    "me-central-1",
];

/// What an expression evaluates to.
#[derive(Debug, Clone, PartialEq)]
pub(crate) enum Evaluated {
    Bool(bool),
    Text(String),
    List(Vec<String>),
}

/// One stack operation: the template, the stack's region and account, and the parameters given
/// (the rest take their defaults).
pub(crate) struct Stack<'a> {
    pub(crate) template: &'a Value,
    pub(crate) region: &'a str,
    parameters: BTreeMap<String, String>,
}

/// The account the tests deploy in.
pub(crate) const ACCOUNT: &str = "111122223333";

impl<'a> Stack<'a> {
    pub(crate) fn new(template: &'a Value, region: &'a str, parameters: &[(&str, &str)]) -> Self {
        let parameters = parameters.iter().map(|(k, v)| ((*k).to_owned(), (*v).to_owned())).collect();
        Self { template, region, parameters }
    }

    fn reference(&self, name: &str) -> Evaluated {
        match name {
            "AWS::Region" => return Evaluated::Text(self.region.to_owned()),
            "AWS::AccountId" => return Evaluated::Text(ACCOUNT.to_owned()),
            "AWS::Partition" => return Evaluated::Text("aws".to_owned()),
            "AWS::URLSuffix" => return Evaluated::Text("amazonaws.com".to_owned()),
            _ => {}
        }
        let declared = &self.template["Parameters"][name];
        assert!(declared.is_object(), "Ref to {name}, which is no parameter of the template");
        let value = self.parameters.get(name).cloned().unwrap_or_else(|| {
            // A Number parameter's default may be written as a YAML number.
            let default = &declared["Default"];
            default
                .as_str()
                .map(str::to_owned)
                .or_else(|| default.as_number().map(ToString::to_string))
                .unwrap_or_else(|| panic!("{name} has no value and no default"))
        });
        if declared["Type"] == "CommaDelimitedList" {
            Evaluated::List(value.split(',').map(|item| item.trim().to_owned()).collect())
        } else {
            Evaluated::Text(value)
        }
    }

    /// Evaluates a rule or condition expression.
    pub(crate) fn evaluate(&self, expression: &Value) -> Evaluated {
        match expression {
            Value::String(text) => Evaluated::Text(text.clone()),
            Value::Array(items) => Evaluated::List(items.iter().map(|item| self.text(item)).collect()),
            Value::Object(call) if call.len() == 1 => {
                let (function, arguments) = call.iter().next().expect("one entry");
                self.call(function, arguments)
            }
            other => panic!("cannot evaluate {other}"),
        }
    }

    fn call(&self, function: &str, arguments: &Value) -> Evaluated {
        let argument = |index: usize| self.evaluate(&arguments[index]);
        let all = || arguments.as_array().expect("a list of arguments").iter().map(|a| self.truth(a));
        match function {
            "Ref" => self.reference(arguments.as_str().expect("Ref takes a name")),
            "Condition" => Evaluated::Bool(self.condition(arguments.as_str().expect("a condition's name"))),
            "Fn::And" => Evaluated::Bool(all().collect::<Vec<_>>().into_iter().all(|b| b)),
            "Fn::Or" => Evaluated::Bool(all().collect::<Vec<_>>().into_iter().any(|b| b)),
            "Fn::Not" => Evaluated::Bool(!self.truth(&arguments[0])),
            "Fn::Equals" => Evaluated::Bool(argument(0) == argument(1)),
            "Fn::Contains" => Evaluated::Bool(self.list(&arguments[0]).contains(&self.text(&arguments[1]))),
            "Fn::EachMemberEquals" => {
                let expected = self.text(&arguments[1]);
                Evaluated::Bool(self.list(&arguments[0]).iter().all(|member| *member == expected))
            }
            "Fn::EachMemberIn" => {
                let allowed = self.list(&arguments[1]);
                Evaluated::Bool(self.list(&arguments[0]).iter().all(|member| allowed.contains(member)))
            }
            "Fn::Join" => {
                let separator = arguments[0].as_str().expect("a separator");
                Evaluated::Text(self.list(&arguments[1]).join(separator))
            }
            "Fn::Sub" => Evaluated::Text(self.substitute(arguments.as_str().expect("Fn::Sub of one string"))),
            other => panic!("{other} is not evaluated here: model it before the template uses it"),
        }
    }

    fn truth(&self, expression: &Value) -> bool {
        match self.evaluate(expression) {
            Evaluated::Bool(b) => b,
            other => panic!("{expression} is {other:?}, not a truth value"),
        }
    }

    fn text(&self, expression: &Value) -> String {
        match self.evaluate(expression) {
            Evaluated::Text(text) => text,
            other => panic!("{expression} is {other:?}, not a string"),
        }
    }

    fn list(&self, expression: &Value) -> Vec<String> {
        match self.evaluate(expression) {
            Evaluated::List(items) => items,
            other => panic!("{expression} is {other:?}, not a list"),
        }
    }

    /// `Fn::Sub` with parameters and pseudo parameters (no resource attributes).
    pub(crate) fn substitute(&self, text: &str) -> String {
        let mut out = String::new();
        let mut rest = text;
        while let Some(start) = rest.find("${") {
            out.push_str(&rest[..start]);
            let end = rest[start..].find('}').expect("a closing brace") + start;
            out.push_str(&self.text(&json!({"Ref": &rest[start + 2..end]})));
            rest = &rest[end + 1..];
        }
        out + rest
    }

    /// A named condition of the template.
    pub(crate) fn condition(&self, name: &str) -> bool {
        let expression = &self.template["Conditions"][name];
        assert!(!expression.is_null(), "no condition {name}");
        self.truth(expression)
    }

    /// Each rule whose condition holds and an assertion of which fails: (rule, description).
    pub(crate) fn refusals(&self) -> Vec<(String, String)> {
        let mut refused = Vec::new();
        for (name, rule) in self.template["Rules"].as_object().into_iter().flatten() {
            if rule.get("RuleCondition").is_some_and(|condition| !self.truth(condition)) {
                continue;
            }
            for assertion in rule["Assertions"].as_array().expect("Assertions") {
                if !self.truth(&assertion["Assert"]) {
                    let description = assertion["AssertDescription"].as_str().unwrap_or_default();
                    refused.push((name.clone(), description.to_owned()));
                }
            }
        }
        refused
    }

    /// `value` as deployed: each `Fn::If` replaced by its branch, `AWS::NoValue` removed, other
    /// functions left as written.
    pub(crate) fn resolve(&self, value: &Value) -> Option<Value> {
        match value {
            Value::Object(call) if call.len() == 1 && call.contains_key("Fn::If") => {
                let branches = call["Fn::If"].as_array().filter(|b| b.len() == 3).expect("Fn::If takes three");
                let chosen = if self.condition(branches[0].as_str().expect("a condition")) { 1 } else { 2 };
                self.resolve(&branches[chosen])
            }
            Value::Object(reference) if reference.get("Ref") == Some(&json!("AWS::NoValue")) => None,
            Value::Object(map) => Some(Value::Object(
                map.iter().filter_map(|(k, v)| self.resolve(v).map(|v| (k.clone(), v))).collect::<Map<_, _>>(),
            )),
            Value::Array(items) => Some(Value::Array(items.iter().filter_map(|item| self.resolve(item)).collect())),
            other => Some(other.clone()),
        }
    }

    /// Whether a resource with a `Condition` is created.
    pub(crate) fn creates(&self, resource: &Value) -> bool {
        resource.get("Condition").and_then(Value::as_str).is_none_or(|condition| self.condition(condition))
    }
}

pub(crate) fn rule_names(refusals: &[(String, String)]) -> Vec<&str> {
    refusals.iter().map(|(rule, _)| rule.as_str()).collect()
}
