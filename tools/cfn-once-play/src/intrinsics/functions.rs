//! The functions CloudFormation evaluates from the template and the stack's place alone:
//! `Fn::FindInMap`, `Fn::Base64`, `Fn::Cidr`, `Fn::GetAZs`, and `Fn::ImportValue` from the
//! exports the user gives.
//!
//! `Fn::FindInMap` reads the template's Mappings and `Fn::ImportValue` the exports of the play;
//! neither is in the [`Scope`], which the engine builds. Instead each is *bound* before it is
//! evaluated: [`Template::parse`](crate::template::Template::parse) gives every
//! `Fn::FindInMap` the template's Mappings (`{Fn::FindInMap: {Arguments: [...], Mappings: {...}}}`),
//! and `Template::bind_imports` gives every `Fn::ImportValue` the exports
//! (`{Fn::ImportValue: {Name: ..., Exports: {...}}}`). A template as written never has these
//! forms: a map argument is refused when the template is read.

use serde_json::Value;

use super::{EvalError, Scope, text_value};
use crate::yaml::{Node, NodeValue};

/// The keys of a bound `Fn::FindInMap`'s argument.
pub(crate) const MAP_ARGUMENTS: &str = "Arguments";
pub(crate) const MAP_MAPPINGS: &str = "Mappings";
/// The keys of a bound `Fn::ImportValue`'s argument.
pub(crate) const IMPORT_NAME: &str = "Name";
pub(crate) const IMPORT_EXPORTS: &str = "Exports";

/// The Availability Zones `Fn::GetAZs` gives for `region`: play has no EC2 to ask, so every
/// region has the same three, `<region>a`, `<region>b` and `<region>c` (docs/play.md).
pub fn availability_zones(region: &str) -> Vec<String> {
    ["a", "b", "c"].iter().map(|zone| format!("{region}{zone}")).collect()
}

pub(super) fn function(name: &str, argument: &Node, line: usize, scope: &Scope) -> Result<Option<Value>, EvalError> {
    let fail = |message: String| Err(EvalError { line, message });
    match name {
        "Fn::Base64" => {
            let text = text_value(argument, scope, "Fn::Base64's value")?;
            Ok(Some(Value::String(aws_smithy_types::base64::encode(text.as_bytes()))))
        }
        "Fn::GetAZs" => {
            let region = text_value(argument, scope, "Fn::GetAZs's region")?;
            // "Specifying an empty string is equivalent to specifying AWS::Region" (the User Guide's Fn::GetAZs).
            let region = if region.is_empty() { scope.pseudo.region.clone() } else { region };
            Ok(Some(Value::Array(availability_zones(&region).into_iter().map(Value::String).collect())))
        }
        "Fn::Cidr" => {
            let [block, count, bits] = super::arguments::<3>(argument, "Fn::Cidr takes [ipBlock, count, cidrBits]")?;
            let block = text_value(block, scope, "Fn::Cidr's ipBlock")?;
            let count = text_value(count, scope, "Fn::Cidr's count")?;
            let bits = text_value(bits, scope, "Fn::Cidr's cidrBits")?;
            match super::cidr::cidr(&block, &count, &bits) {
                Ok(blocks) => Ok(Some(Value::Array(blocks.into_iter().map(Value::String).collect()))),
                Err(message) => fail(message),
            }
        }
        "Fn::FindInMap" => find_in_map(argument, line, scope),
        "Fn::ImportValue" => import_value(argument, line, scope),
        other => fail(format!("{other} is not evaluated by cfn-once play")),
    }
}

fn find_in_map(argument: &Node, line: usize, scope: &Scope) -> Result<Option<Value>, EvalError> {
    let fail = |message: String| Err(EvalError { line, message });
    let (Some(arguments), Some(mappings)) = (argument.get(MAP_ARGUMENTS), argument.get(MAP_MAPPINGS)) else {
        return fail(
            "Fn::FindInMap was not bound to the template's Mappings: a template read by Template::parse has them"
                .into(),
        );
    };
    let [map, top, second] =
        super::arguments::<3>(arguments, "Fn::FindInMap takes [MapName, TopLevelKey, SecondLevelKey]")?;
    let map = text_value(map, scope, "Fn::FindInMap's MapName")?;
    let top = text_value(top, scope, "Fn::FindInMap's TopLevelKey")?;
    let second = text_value(second, scope, "Fn::FindInMap's SecondLevelKey")?;
    let Some(found) = mappings.get(&map) else {
        return fail(format!("Fn::FindInMap: the template's Mappings has no mapping {map}"));
    };
    match found.get(&top).and_then(|keys| keys.get(&second)).map(|node| &node.value) {
        Some(NodeValue::Scalar(text)) => Ok(Some(Value::String(text.clone()))),
        Some(NodeValue::Seq(items)) => Ok(Some(Value::Array(
            items.iter().filter_map(|item| item.as_str()).map(|text| Value::String(text.into())).collect(),
        ))),
        _ => fail(format!("Fn::FindInMap: the mapping {map} has no {top} with a {second}")),
    }
}

fn import_value(argument: &Node, line: usize, scope: &Scope) -> Result<Option<Value>, EvalError> {
    let fail = |message: String| Err(EvalError { line, message });
    let bound = argument
        .get(IMPORT_NAME)
        .zip(argument.get(IMPORT_EXPORTS))
        .filter(|_| argument.as_map().is_some_and(|m| m.len() == 2));
    let (name_node, exports) = match bound {
        Some((name, exports)) => (name, Some(exports)),
        None => (argument, None),
    };
    let name = text_value(name_node, scope, "Fn::ImportValue's export name")?;
    match exports.and_then(|exports| exports.get(&name)).and_then(Node::as_str) {
        Some(value) => Ok(Some(Value::String(value.to_string()))),
        None => fail(format!("No export named {name} found: give its value with --import {name}=VALUE")),
    }
}
