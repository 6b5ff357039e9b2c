//! The rule functions of a template's `Rules` section, checked when the template is read and
//! evaluated against the parameters before anything is sent, as the User Guide's "Rules" page
//! (https://docs.aws.amazon.com/AWSCloudFormation/latest/UserGuide/rules-section-structure.html)
//! and "Rule functions" page
//! (https://docs.aws.amazon.com/AWSCloudFormation/latest/UserGuide/intrinsic-function-reference-rules.html)
//! define them: `Fn::And`, `Fn::Or` (2 to 10 conditions), `Fn::Not`, `Fn::Equals`,
//! `Fn::Contains` ("true if a specified string matches at least one value in a list of
//! strings"), `Fn::EachMemberEquals` ("true if a specified string matches all values in a
//! list"), `Fn::EachMemberIn` ("true if each member in a list of strings matches at least one
//! value in a second list of strings"), and within them only `Ref` and other rule functions
//! ("Supported functions").
//!
//! `Fn::RefAll`, `Fn::ValueOf` and `Fn::ValueOfAll` read the account's EC2 resources (every VPC
//! id of the region, a subnet's VpcId, a VPC's tags): a local play has no account to read, so a
//! template that uses them is refused, naming the function, rather than a rule silently passed.

use std::path::Path;

use super::scan::mention_name;
use super::{EvalError, Mention, Scope, arguments, evaluate, list_value, text_of, to_properties};
use crate::yaml::{Node, Refusal};

const RULE_SHAPE: &str = "a rule condition or assertion is one of Fn::And, Fn::Or, Fn::Not, Fn::Equals, \
     Fn::Contains, Fn::EachMemberEquals, Fn::EachMemberIn";

/// Checks a rule condition or assertion's shape and reports the names it mentions.
pub(crate) fn scan_rule<'a>(path: &Path, node: &'a Node, found: &mut dyn FnMut(Mention<'a>)) -> Result<(), Refusal> {
    let refuse = |line, construct: &str, why: String| Err(Refusal::new(path, line, construct, why));
    let Some((key, argument)) = node.single_entry() else {
        return refuse(node.line, "rule", RULE_SHAPE.to_string());
    };
    let line = key.line;
    match key.name.as_str() {
        "Fn::And" | "Fn::Or" => {
            let items = argument.as_seq().unwrap_or_default();
            if !(2..=10).contains(&items.len()) {
                return refuse(line, &key.name, "takes a list of 2 to 10 conditions".to_string());
            }
            items.iter().try_for_each(|item| scan_rule(path, item, found))
        }
        "Fn::Not" => match argument.as_seq() {
            Some([inner]) => scan_rule(path, inner, found),
            _ => refuse(line, "Fn::Not", "takes a list of one condition".to_string()),
        },
        "Fn::Equals" | "Fn::Contains" | "Fn::EachMemberEquals" | "Fn::EachMemberIn" => match argument.as_seq() {
            Some([left, right]) => {
                scan_value(path, left, found)?;
                scan_value(path, right, found)
            }
            _ => refuse(line, &key.name, "takes a list of two values".to_string()),
        },
        "Fn::RefAll" | "Fn::ValueOf" | "Fn::ValueOfAll" => refuse(line, &key.name, ACCOUNT_READ.to_string()),
        other => refuse(line, other, RULE_SHAPE.to_string()),
    }
}

const ACCOUNT_READ: &str = "reads the account's EC2 resources (VPC ids, a subnet's VpcId, tags), which a local \
     play has none of: play a copy of the template without this rule";

/// A value inside a rule function: text, a list, a `Ref`.
fn scan_value<'a>(path: &Path, node: &'a Node, found: &mut dyn FnMut(Mention<'a>)) -> Result<(), Refusal> {
    if let Some(items) = node.as_seq() {
        return items.iter().try_for_each(|item| scan_value(path, item, found));
    }
    let Some((key, argument)) = node.single_entry() else {
        return match node.as_map() {
            Some(_) => Err(Refusal::new(path, node.line, "rule value", "is text, a list or a Ref".to_string())),
            None => Ok(()),
        };
    };
    match key.name.as_str() {
        "Ref" => match argument.as_str() {
            Some(name) => mention_name(path, name, key.line, "Ref", found),
            None => Err(Refusal::new(path, key.line, "Ref", "takes a name".to_string())),
        },
        "Fn::RefAll" | "Fn::ValueOf" | "Fn::ValueOfAll" => {
            Err(Refusal::new(path, key.line, &key.name, ACCOUNT_READ.to_string()))
        }
        other => Err(Refusal::new(
            path,
            key.line,
            other,
            "inside a rule function only Ref and rule functions are evaluated (the User Guide's rule functions, \"Supported functions\")"
                .to_string(),
        )),
    }
}

/// Evaluates a rule condition or assertion, scanned by [`scan_rule`].
pub fn evaluate_rule(node: &Node, scope: &Scope) -> Result<bool, EvalError> {
    let fail = |line, message: String| Err(EvalError { line, message });
    let Some((key, argument)) = node.single_entry() else {
        return fail(node.line, RULE_SHAPE.to_string());
    };
    let line = key.line;
    match key.name.as_str() {
        "Fn::And" | "Fn::Or" => {
            let mut values = Vec::new();
            for item in argument.as_seq().unwrap_or_default() {
                values.push(evaluate_rule(item, scope)?);
            }
            Ok(if key.name == "Fn::And" { values.iter().all(|v| *v) } else { values.iter().any(|v| *v) })
        }
        "Fn::Not" => {
            let [inner] = arguments::<1>(argument, "Fn::Not takes a list of one condition")?;
            Ok(!evaluate_rule(inner, scope)?)
        }
        "Fn::Equals" => {
            let [left, right] = arguments::<2>(argument, "Fn::Equals takes two values")?;
            let left = evaluate(left, scope)?.map(to_properties);
            let right = evaluate(right, scope)?.map(to_properties);
            Ok(left == right)
        }
        "Fn::Contains" | "Fn::EachMemberEquals" => {
            let [list, text] = arguments::<2>(argument, "takes [list of strings, string]")?;
            let list = strings(list, scope, &format!("{}'s list", key.name))?;
            let text = evaluate(text, scope)?.as_ref().and_then(text_of);
            let Some(text) = text else { return fail(line, format!("{}'s string is not text", key.name)) };
            Ok(if key.name == "Fn::Contains" {
                list.contains(&text)
            } else {
                list.iter().all(|member| *member == text)
            })
        }
        "Fn::EachMemberIn" => {
            let [check, allowed] =
                arguments::<2>(argument, "Fn::EachMemberIn takes [strings to check, strings to match]")?;
            let check = strings(check, scope, "Fn::EachMemberIn's strings to check")?;
            let allowed = strings(allowed, scope, "Fn::EachMemberIn's strings to match")?;
            Ok(check.iter().all(|member| allowed.contains(member)))
        }
        other => fail(line, format!("{other} is not a rule function cfn-once play evaluates")),
    }
}

fn strings(node: &Node, scope: &Scope, what: &str) -> Result<Vec<String>, EvalError> {
    list_value(node, scope, what)?
        .iter()
        .map(|item| {
            text_of(item)
                .ok_or_else(|| EvalError { line: node.line, message: format!("{what} holds {item}, not text") })
        })
        .collect()
}
