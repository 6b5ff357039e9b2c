//! The static side of the intrinsic functions: checked once, when a template is parsed, that
//! each function is one a play supports and written in its shape, and what names each mentions,
//! for the checks and the order of resources.

use std::path::Path;

use super::{
    CONDITION_SHAPE, GET_ATT_SHAPE, IMPORT_EXPORTS, IMPORT_NAME, MAP_ARGUMENTS, MAP_MAPPINGS, PSEUDO_PARAMETERS,
    SUB_SHAPE, SubPart, arguments, get_att_target, is_function, sub_parts,
};
use crate::yaml::Refusal;
use crate::yaml::{Node, NodeValue};

/// What a value names, found without evaluating it: for the static checks and the order of
/// resources.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Mention<'a> {
    /// A `Ref` (or `${Name}` in `Fn::Sub`) of a name that is not a pseudo parameter.
    Ref { name: &'a str, line: usize },
    /// A `Fn::GetAtt` (or `${Name.Attr}` in `Fn::Sub`).
    GetAtt { logical_id: &'a str, attribute: &'a str, line: usize },
    /// A condition named by `Condition` or `Fn::If`.
    Condition { name: &'a str, line: usize },
}

/// Where a node stands: a value (a property, an output) or a condition of the Conditions
/// section, where `Condition` is a function and `Fn::Equals` and its kin belong.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Place {
    Value,
    Condition,
}

/// Checks that every function in `node` is one `cfn-once play` supports, written in its shape,
/// and reports each name it mentions. The first unsupported construct is refused with its line.
pub(crate) fn scan<'a>(
    path: &Path,
    node: &'a Node,
    place: Place,
    found: &mut dyn FnMut(Mention<'a>),
) -> Result<(), Refusal> {
    let refuse = |line, construct: &str, why: &str| Err(Refusal::new(path, line, construct, why.to_string()));
    let entry = node.single_entry();
    if place == Place::Condition {
        let Some((key, argument)) = entry else {
            return refuse(node.line, "condition", CONDITION_SHAPE);
        };
        let line = key.line;
        return match key.name.as_str() {
            "Fn::Equals" => {
                let [left, right] = shape::<2>(path, argument, "Fn::Equals", "two values")?;
                scan(path, left, Place::Value, found)?;
                scan(path, right, Place::Value, found)
            }
            "Fn::And" | "Fn::Or" => {
                let items = argument.as_seq().unwrap_or_default();
                if !(2..=10).contains(&items.len()) {
                    return refuse(line, &key.name, "takes a list of 2 to 10 conditions");
                }
                items.iter().try_for_each(|item| scan(path, item, Place::Condition, found))
            }
            "Fn::Not" => {
                let [inner] = shape::<1>(path, argument, "Fn::Not", "a list of one condition")?;
                scan(path, inner, Place::Condition, found)
            }
            "Condition" => match argument.as_str() {
                Some(name) => {
                    found(Mention::Condition { name, line });
                    Ok(())
                }
                None => refuse(line, "Condition", "takes a condition's name"),
            },
            "Fn::If" => if_function(path, argument, line, Place::Condition, found),
            name if name.starts_with("Fn::") => refuse(line, &short_form(name), UNSUPPORTED),
            _ => refuse(node.line, "condition", CONDITION_SHAPE),
        };
    }
    match &node.value {
        NodeValue::Null | NodeValue::Scalar(_) => return Ok(()),
        NodeValue::Seq(items) => {
            return items.iter().try_for_each(|item| scan(path, item, place, found));
        }
        NodeValue::Map(_) => {}
    }
    let Some((key, argument)) = entry.filter(|(key, _)| is_function(&key.name)) else {
        let entries = node.as_map().unwrap_or_default();
        return entries.iter().try_for_each(|(_, value)| scan(path, value, place, found));
    };
    let line = key.line;
    match key.name.as_str() {
        "Ref" => match argument.as_str() {
            Some(name) => mention_name(path, name, line, "Ref", found),
            None => refuse(line, "Ref", "takes a name"),
        },
        "Fn::GetAtt" => match get_att_target(argument) {
            Some((logical_id, attribute)) => {
                found(Mention::GetAtt { logical_id, attribute, line });
                Ok(())
            }
            None => refuse(line, "Fn::GetAtt", GET_ATT_SHAPE),
        },
        "Fn::Sub" => {
            let (text, variables) = match (argument.as_str(), argument.as_seq()) {
                (Some(text), _) => (text, &[][..]),
                (_, Some([text, variables])) => match (text.as_str(), variables.as_map()) {
                    (Some(text), Some(variables)) => (text, variables),
                    _ => return refuse(line, "Fn::Sub", SUB_SHAPE),
                },
                _ => return refuse(line, "Fn::Sub", SUB_SHAPE),
            };
            for (_, value) in variables {
                scan(path, value, Place::Value, found)?;
            }
            let parts = sub_parts(text).map_err(|why| Refusal::new(path, line, "Fn::Sub", why))?;
            for part in parts {
                let SubPart::Variable(name) = part else { continue };
                if variables.iter().any(|(key, _)| key.name == name) {
                    continue;
                }
                match name.split_once('.') {
                    Some((logical_id, attribute)) => found(Mention::GetAtt { logical_id, attribute, line }),
                    None => mention_name(path, name, line, "Fn::Sub", found)?,
                }
            }
            Ok(())
        }
        "Fn::FindInMap" => find_in_map(path, argument, line, found),
        "Fn::Cidr" => {
            let items = shape::<3>(path, argument, "Fn::Cidr", "[ipBlock, count, cidrBits]")?;
            items.iter().try_for_each(|item| scan(path, item, Place::Value, found))
        }
        "Fn::Base64" | "Fn::GetAZs" => scan(path, argument, Place::Value, found),
        "Fn::ImportValue" => match argument.get(IMPORT_NAME) {
            // Bound by Template::bind_imports: only the name is an expression.
            Some(name) if argument.get(IMPORT_EXPORTS).is_some() => scan(path, name, Place::Value, found),
            _ => scan(path, argument, Place::Value, found),
        },
        "Fn::Length" | "Fn::ToJsonString" | "Fn::ForEach" => refuse(
            line,
            &short_form(&key.name),
            "needs the AWS::LanguageExtensions transform, which runs inside CloudFormation: play the processed template",
        ),
        "Fn::Join" | "Fn::Select" | "Fn::Split" => {
            let [first, second] = shape::<2>(path, argument, &key.name, "a list of two")?;
            scan(path, first, Place::Value, found)?;
            scan(path, second, Place::Value, found)
        }
        "Fn::If" => if_function(path, argument, line, Place::Value, found),
        "Fn::Equals" | "Fn::And" | "Fn::Or" | "Fn::Not" => refuse(
            line,
            &key.name,
            "a condition function belongs in the Conditions section; use Fn::If with a condition here",
        ),
        name => refuse(line, &short_form(name), UNSUPPORTED),
    }
}

const UNSUPPORTED: &str = "outside the intrinsic functions cfn-once play evaluates (Ref, Fn::GetAtt, \
     Fn::Sub, Fn::Join, Fn::Select, Fn::Split, Fn::If, Fn::FindInMap, Fn::Base64, Fn::Cidr, Fn::GetAZs, \
     Fn::ImportValue, condition functions): play a copy of the template without it";

/// `Fn::FindInMap`: `[MapName, TopLevelKey, SecondLevelKey]` as written, or bound to the template's
/// Mappings by `Template::parse` (`{Arguments, Mappings}`). The fourth, `{DefaultValue: ...}`,
/// item exists only with the AWS::LanguageExtensions transform
/// (https://docs.aws.amazon.com/AWSCloudFormation/latest/TemplateReference/intrinsic-function-reference-findinmap-enhancements.html),
/// which play does not run.
fn find_in_map<'a>(
    path: &Path,
    argument: &'a Node,
    line: usize,
    found: &mut dyn FnMut(Mention<'a>),
) -> Result<(), Refusal> {
    let arguments = argument.get(MAP_ARGUMENTS).filter(|_| argument.get(MAP_MAPPINGS).is_some()).unwrap_or(argument);
    if let Some([_, _, _, fourth]) = arguments.as_seq()
        && fourth.get("DefaultValue").is_some()
    {
        return Err(Refusal::new(
            path,
            line,
            "Fn::FindInMap DefaultValue",
            "a default value needs the AWS::LanguageExtensions transform, which runs inside CloudFormation: play the processed template".to_string(),
        ));
    }
    let items = shape::<3>(path, arguments, "Fn::FindInMap", "[MapName, TopLevelKey, SecondLevelKey]")?;
    items.iter().try_for_each(|item| scan(path, item, Place::Value, found))
}

/// `Fn::GetAZs (!GetAZs)`: the name as it may have been written, long or short.
fn short_form(name: &str) -> String {
    format!("{name} (!{})", name.trim_start_matches("Fn::"))
}

pub(super) fn mention_name<'a>(
    path: &Path,
    name: &'a str,
    line: usize,
    function: &str,
    found: &mut dyn FnMut(Mention<'a>),
) -> Result<(), Refusal> {
    if PSEUDO_PARAMETERS.contains(&name) {
        return Ok(());
    }
    if name.starts_with("AWS::") {
        let why = if name == "AWS::NotificationARNs" {
            "a local play has no notification topics; pass the value as a parameter instead"
        } else {
            "not a pseudo parameter CloudFormation defines"
        };
        return Err(Refusal::new(path, line, &format!("{function} {name}"), why.to_string()));
    }
    found(Mention::Ref { name, line });
    Ok(())
}

fn if_function<'a>(
    path: &Path,
    argument: &'a Node,
    line: usize,
    place: Place,
    found: &mut dyn FnMut(Mention<'a>),
) -> Result<(), Refusal> {
    let [name, then, otherwise] = shape::<3>(path, argument, "Fn::If", "[condition, value, value]")?;
    let Some(name) = name.as_str() else {
        return Err(Refusal::new(path, line, "Fn::If", "its first item is a condition's name".to_string()));
    };
    found(Mention::Condition { name, line });
    scan(path, then, place, found)?;
    scan(path, otherwise, place, found)
}

fn shape<'n, const N: usize>(
    path: &Path,
    argument: &'n Node,
    name: &str,
    takes: &str,
) -> Result<[&'n Node; N], Refusal> {
    arguments::<N>(argument, "").map_err(|error| Refusal::new(path, error.line, name, format!("takes {takes}")))
}
