//! The sections and values of a template that CDK writes and a hand-written template seldom
//! has: `Mappings` (and the binding of every `Fn::FindInMap` to them), `Rules` (read here,
//! evaluated with the parameters before anything is sent), the exports `Fn::ImportValue` reads,
//! and the refusal of null values.
//!
//! Nulls: CloudFormation refuses a template with a null anywhere ("[/Resources/R/Properties/P]
//! 'null' values are not allowed in templates", as reported in
//! https://github.com/aws-cloudformation/cfn-lint/issues/38 and
//! https://github.com/aws-cloudformation/cloudformation-coverage-roadmap/issues/1378; the User
//! Guide does not list this check), so play refuses it too, with the same path, before anything
//! else is read.

use std::collections::BTreeMap;
use std::path::Path;

use super::{Refusal, RuleDecl, Template, entries, name_of, scalar_text};
use crate::intrinsics::{self, IMPORT_EXPORTS, IMPORT_NAME, MAP_ARGUMENTS, MAP_MAPPINGS, Scope};
use crate::yaml::{Key, Node, NodeValue};

/// Refuses the first null value of the document, naming its path as CloudFormation does.
pub(super) fn refuse_nulls(path: &Path, node: &Node, pointer: &str) -> Result<(), Refusal> {
    match &node.value {
        NodeValue::Null => Err(Refusal::new(
            path,
            node.line,
            &format!("[{}]", if pointer.is_empty() { "/" } else { pointer }),
            "'null' values are not allowed in templates (CloudFormation's words): write a value, or leave the key out"
                .to_string(),
        )),
        NodeValue::Scalar(_) => Ok(()),
        NodeValue::Seq(items) => items
            .iter()
            .enumerate()
            .try_for_each(|(index, item)| refuse_nulls(path, item, &format!("{pointer}/{index}"))),
        NodeValue::Map(entries) => {
            entries.iter().try_for_each(|(key, value)| refuse_nulls(path, value, &format!("{pointer}/{}", key.name)))
        }
    }
}

/// Checks a Mappings section: each mapping a map of top-level keys, each a map of second-level
/// keys to text or a list of text ("Mappings" in the User Guide,
/// https://docs.aws.amazon.com/AWSCloudFormation/latest/UserGuide/mappings-section-structure.html:
/// the values are strings or lists of strings, and cannot hold parameters or functions).
pub(super) fn mappings(path: &Path, key: &Key, value: &Node) -> Result<Node, Refusal> {
    for (name, mapping) in entries(path, key, value)? {
        name_of(path, name, "mapping")?;
        for (top, keys) in entries(path, name, mapping)? {
            for (second, leaf) in entries(path, top, keys)? {
                let plain = match &leaf.value {
                    NodeValue::Scalar(_) => true,
                    NodeValue::Seq(items) => items.iter().all(|item| item.as_str().is_some()),
                    _ => false,
                };
                if !plain {
                    return Err(Refusal::new(
                        path,
                        second.line,
                        &format!("mapping {}.{}.{}", name.name, top.name, second.name),
                        "a mapping's value is text or a list of text, never a function".to_string(),
                    ));
                }
            }
        }
    }
    Ok(value.clone())
}

/// Reads a Rules section.
pub(super) fn rules(path: &Path, key: &Key, value: &Node) -> Result<Vec<RuleDecl>, Refusal> {
    let mut rules = Vec::new();
    for (name, body) in entries(path, key, value)? {
        let rule_name = name_of(path, name, "rule")?;
        let mut rule = RuleDecl { name: rule_name, line: name.line, condition: None, assertions: Vec::new() };
        for (attribute, node) in super::attributes(path, name, body, "rule")? {
            match attribute.name.as_str() {
                "RuleCondition" => {
                    intrinsics::scan_rule(path, node, &mut |_| {})?;
                    rule.condition = Some(node.clone());
                }
                "Assertions" => {
                    let Some(items) = node.as_seq() else {
                        return Err(Refusal::new(path, attribute.line, "Assertions", "must be a list".to_string()));
                    };
                    for item in items {
                        let (mut assert, mut description) = (None, None);
                        for (field, field_value) in item.as_map().unwrap_or_default() {
                            match field.name.as_str() {
                                "Assert" => {
                                    intrinsics::scan_rule(path, field_value, &mut |_| {})?;
                                    assert = Some(field_value.clone());
                                }
                                "AssertDescription" => description = Some(scalar_text(path, field, field_value)?),
                                other => {
                                    return Err(Refusal::new(
                                        path,
                                        field.line,
                                        other,
                                        "not an assertion's field (Assert, AssertDescription)".to_string(),
                                    ));
                                }
                            }
                        }
                        let Some(assert) = assert else {
                            return Err(Refusal::new(
                                path,
                                item.line,
                                "Assertions",
                                "each assertion has an Assert".to_string(),
                            ));
                        };
                        rule.assertions.push((assert, description));
                    }
                }
                other => {
                    return Err(Refusal::new(
                        path,
                        attribute.line,
                        other,
                        "not a rule's field (RuleCondition, Assertions)".to_string(),
                    ));
                }
            }
        }
        if rule.assertions.is_empty() {
            return Err(Refusal::new(
                path,
                name.line,
                &format!("rule {}", rule.name),
                "a rule must include Assertions".to_string(),
            ));
        }
        rules.push(rule);
    }
    Ok(rules)
}

impl Template {
    /// Evaluates the Rules against the bound parameters: a rule whose RuleCondition is false
    /// does not take effect; otherwise every assertion must hold. A failing one is refused with
    /// its AssertDescription, the message the template's author wrote for CloudFormation to show.
    pub fn check_rules(&self, scope: &Scope) -> Result<(), Refusal> {
        let refuse = |line, rule: &str, why: String| Refusal::new(&self.path, line, &format!("rule {rule}"), why);
        for rule in &self.rules {
            if let Some(condition) = &rule.condition {
                let applies =
                    intrinsics::evaluate_rule(condition, scope).map_err(|e| refuse(e.line, &rule.name, e.message))?;
                if !applies {
                    continue;
                }
            }
            for (assert, description) in &rule.assertions {
                let holds =
                    intrinsics::evaluate_rule(assert, scope).map_err(|e| refuse(e.line, &rule.name, e.message))?;
                if !holds {
                    let why = match description {
                        Some(text) => {
                            format!("{} (a failing assertion: CloudFormation refuses the operation)", text.trim())
                        }
                        None => "an assertion without AssertDescription failed: CloudFormation refuses the operation"
                            .to_string(),
                    };
                    return Err(refuse(assert.line, &rule.name, why));
                }
            }
        }
        Ok(())
    }

    /// Gives every `Fn::ImportValue` the exports the play knows (`--import NAME=VALUE`), and
    /// refuses one whose name is written out and not among them, before anything is sent.
    pub fn bind_imports(&mut self, exports: &BTreeMap<String, String>) -> Result<(), Refusal> {
        let exports_node = Node {
            value: NodeValue::Map(
                exports
                    .iter()
                    .map(|(name, value)| {
                        (Key { name: name.clone(), line: 0 }, Node { value: NodeValue::Scalar(value.clone()), line: 0 })
                    })
                    .collect(),
            ),
            line: 0,
        };
        let path = self.path.clone();
        let mut bind = |node: &mut Node| -> Result<(), Refusal> {
            rewrite(node, "Fn::ImportValue", &mut |argument, line| {
                if let Some(name) = argument.as_str().filter(|name| !exports.contains_key(*name)) {
                    return Err(Refusal::new(
                        &path,
                        line,
                        &format!("Fn::ImportValue {name}"),
                        format!("No export named {name} found: give its value with --import {name}=VALUE"),
                    ));
                }
                let name =
                    argument.get(IMPORT_NAME).filter(|_| argument.get(IMPORT_EXPORTS).is_some()).unwrap_or(argument);
                Ok(bound(line, [(IMPORT_NAME, name.clone()), (IMPORT_EXPORTS, exports_node.clone())]))
            })
        };
        self.each_value(&mut bind)
    }

    /// Gives every `Fn::FindInMap` the template's Mappings, refusing one that names a mapping
    /// the section does not declare.
    pub(super) fn bind_mappings(&mut self) -> Result<(), Refusal> {
        let mappings = self.mappings.clone().unwrap_or(Node { value: NodeValue::Map(Vec::new()), line: 1 });
        let path = self.path.clone();
        let mut bind = |node: &mut Node| -> Result<(), Refusal> {
            rewrite(node, "Fn::FindInMap", &mut |argument, line| {
                if argument.get(MAP_MAPPINGS).is_some() && argument.as_seq().is_none() {
                    return Err(Refusal::new(
                        &path,
                        line,
                        "Fn::FindInMap",
                        "takes a list [MapName, TopLevelKey, SecondLevelKey]".to_string(),
                    ));
                }
                if let Some(name) = argument.as_seq().and_then(|items| items.first()).and_then(Node::as_str)
                    && mappings.get(name).is_none()
                {
                    return Err(Refusal::new(
                        &path,
                        line,
                        &format!("Fn::FindInMap {name}"),
                        "names no mapping of the Mappings section".to_string(),
                    ));
                }
                Ok(bound(line, [(MAP_ARGUMENTS, argument.clone()), (MAP_MAPPINGS, mappings.clone())]))
            })
        };
        self.each_value(&mut bind)
    }

    /// Runs `visit` on every value a play evaluates: conditions, properties, outputs, exports.
    fn each_value(&mut self, visit: &mut dyn FnMut(&mut Node) -> Result<(), Refusal>) -> Result<(), Refusal> {
        for (_, body) in &mut self.conditions {
            visit(body)?;
        }
        for resource in &mut self.resources {
            visit(&mut resource.properties)?;
        }
        for output in &mut self.outputs {
            visit(&mut output.value)?;
            if let Some(export) = &mut output.export_name {
                visit(export)?;
            }
        }
        Ok(())
    }
}

/// A bound function's argument: a map of two named entries.
fn bound(line: usize, entries: [(&str, Node); 2]) -> Node {
    let entries = entries.into_iter().map(|(name, node)| (Key { name: name.to_string(), line }, node)).collect();
    Node { value: NodeValue::Map(entries), line }
}

/// Replaces the argument of every `function` in `node` (innermost first) with `replace`'s.
fn rewrite(
    node: &mut Node,
    function: &str,
    replace: &mut dyn FnMut(&Node, usize) -> Result<Node, Refusal>,
) -> Result<(), Refusal> {
    match &mut node.value {
        NodeValue::Null | NodeValue::Scalar(_) => Ok(()),
        NodeValue::Seq(items) => items.iter_mut().try_for_each(|item| rewrite(item, function, replace)),
        NodeValue::Map(entries) => {
            for (_, value) in entries.iter_mut() {
                rewrite(value, function, replace)?;
            }
            if let [(key, argument)] = entries.as_mut_slice()
                && key.name == function
            {
                *argument = replace(argument, key.line)?;
            }
            Ok(())
        }
    }
}

#[cfg(test)]
#[path = "sections_tests.rs"]
mod tests;
