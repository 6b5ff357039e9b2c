//! A CloudFormation template as `cfn-once play` plays it: its parameters, conditions,
//! resources and outputs, read from YAML or JSON, with every construct outside what a play
//! supports refused before anything is sent, naming the construct, the file and the line.
//!
//! [`Template::parse`] refuses what a play cannot do whatever the values (a transform, a null,
//! a `CreationPolicy`); [`Template::check`] refuses what cannot resolve (a `Ref`
//! to nothing, a dependency cycle, a `GetAtt` of a resource nobody provisions and the user gave
//! no stub for). Neither does any I/O but [`Template::load`]'s one read of the file.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

use super::intrinsics::{self, Mention, Place, Scope};
use super::yaml::{self, Key, Node, NodeValue};

mod checks;
mod parameters;
mod sections;
mod warnings;

pub use super::yaml::Refusal;

/// A template's sections, in the order written.
#[derive(Debug, Clone, PartialEq)]
pub struct Template {
    pub path: PathBuf,
    pub description: Option<String>,
    pub parameters: Vec<ParameterDecl>,
    pub conditions: Vec<(String, Node)>,
    pub resources: Vec<ResourceDecl>,
    pub outputs: Vec<OutputDecl>,
    /// The Mappings section as written, which every `Fn::FindInMap` is bound to when parsed.
    pub mappings: Option<Node>,
    pub rules: Vec<RuleDecl>,
}

/// A rule of the Rules section: its assertions apply when its condition holds (or it has none).
#[derive(Debug, Clone, PartialEq)]
pub struct RuleDecl {
    pub name: String,
    pub line: usize,
    pub condition: Option<Node>,
    /// Each `Assert` and its `AssertDescription`.
    pub assertions: Vec<(Node, Option<String>)>,
}

#[derive(Debug, Clone, PartialEq)]
pub struct ResourceDecl {
    pub logical_id: String,
    pub resource_type: String,
    /// The line of the logical id.
    pub line: usize,
    /// A map, empty when the template gives no Properties.
    pub properties: Node,
    pub depends_on: Vec<String>,
    pub condition: Option<String>,
    pub deletion_policy: Policy,
    pub update_replace_policy: Policy,
}

/// What a stack Delete (DeletionPolicy) or a replacement's cleanup (UpdateReplacePolicy) does
/// with the resource. `Snapshot` is refused for custom resources and wait conditions, which
/// CloudFormation cannot snapshot; on other types (none of which a play provisions) the
/// resource is deleted after its snapshot, as CloudFormation deletes it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Policy {
    Delete,
    Retain,
    /// A snapshot, then the delete.
    Snapshot,
}

#[derive(Debug, Clone, PartialEq)]
pub struct OutputDecl {
    pub name: String,
    pub line: usize,
    pub description: Option<String>,
    pub value: Node,
    pub condition: Option<String>,
    pub export_name: Option<Node>,
}

#[derive(Debug, Clone, PartialEq)]
pub struct ParameterDecl {
    pub name: String,
    pub line: usize,
    /// The Type as written.
    pub kind: String,
    pub default: Option<String>,
    pub no_echo: bool,
    pub allowed_values: Vec<String>,
    pub allowed_pattern: Option<String>,
    pub min_length: Option<usize>,
    pub max_length: Option<usize>,
    pub min_value: Option<f64>,
    pub max_value: Option<f64>,
    pub description: Option<String>,
    pub constraint_description: Option<String>,
}

pub const WAIT_HANDLE: &str = "AWS::CloudFormation::WaitConditionHandle";
pub const WAIT_CONDITION: &str = "AWS::CloudFormation::WaitCondition";
/// A nested stack's type.
pub const NESTED_STACK: &str = "AWS::CloudFormation::Stack";

/// Whether CloudFormation sends this type's requests to a ServiceToken.
pub fn is_custom(resource_type: &str) -> bool {
    resource_type.starts_with("Custom::") || resource_type == "AWS::CloudFormation::CustomResource"
}

impl Template {
    /// Reads and parses the template at `path`.
    pub fn load(path: &Path) -> Result<Template, Refusal> {
        let text = std::fs::read_to_string(path)
            .map_err(|error| Refusal::new(path, 1, "template", format!("cannot read the template: {error}")))?;
        Template::parse(path, &text)
    }

    /// Parses a template and refuses any construct a play does not support.
    pub fn parse(path: &Path, text: &str) -> Result<Template, Refusal> {
        let root = yaml::parse(path, text)?;
        sections::refuse_nulls(path, &root, "")?;
        let refuse = |line, construct: &str, why: &str| Refusal::new(path, line, construct, why.to_string());
        let Some(sections) = root.as_map() else {
            return Err(refuse(root.line, "template", "a template is a map of sections (Parameters, Resources, ...)"));
        };
        let mut template = Template {
            path: path.to_path_buf(),
            description: None,
            parameters: Vec::new(),
            conditions: Vec::new(),
            resources: Vec::new(),
            outputs: Vec::new(),
            mappings: None,
            rules: Vec::new(),
        };
        for (key, value) in sections {
            let line = key.line;
            match key.name.as_str() {
                "AWSTemplateFormatVersion" => {
                    if value.as_str() != Some("2010-09-09") {
                        return Err(refuse(
                            line,
                            "AWSTemplateFormatVersion",
                            "the only version CloudFormation knows is 2010-09-09",
                        ));
                    }
                }
                "Description" => template.description = Some(scalar_text(path, key, value)?),
                "Metadata" => {}
                "Parameters" => {
                    for (name, body) in entries(path, key, value)? {
                        template.parameters.push(parameters::parameter(path, name, body)?);
                    }
                }
                "Conditions" => {
                    for (name, body) in entries(path, key, value)? {
                        intrinsics::scan(path, body, Place::Condition, &mut |_| {})?;
                        template.conditions.push((name.name.clone(), body.clone()));
                    }
                }
                "Resources" => {
                    for (name, body) in entries(path, key, value)? {
                        if template.parameters.iter().any(|p| p.name == name.name) {
                            return Err(refuse(
                                name.line,
                                &format!("resource {}", name.name),
                                "a parameter has the same name: logical ids are unique in a template",
                            ));
                        }
                        template.resources.push(resource(path, name, body)?);
                    }
                }
                "Outputs" => {
                    for (name, body) in entries(path, key, value)? {
                        template.outputs.push(output(path, name, body)?);
                    }
                }
                "Mappings" => template.mappings = Some(sections::mappings(path, key, value)?),
                "Transform" => {
                    return Err(refuse(
                        line,
                        "Transform",
                        "a transform (a macro, AWS::Serverless, AWS::LanguageExtensions) runs inside CloudFormation: play the processed template instead",
                    ));
                }
                "Rules" => template.rules = sections::rules(path, key, value)?,
                "Hooks" => {
                    return Err(refuse(line, "Hooks", "hooks run inside CloudFormation: play a copy without them"));
                }
                other => return Err(refuse(line, other, "not a CloudFormation template section")),
            }
        }
        if template.resources.is_empty() {
            return Err(refuse(root.line, "Resources", "a template declares at least one resource"));
        }
        template.bind_mappings()?;
        Ok(template)
    }

    pub fn resource(&self, logical_id: &str) -> Option<&ResourceDecl> {
        self.resources.iter().find(|resource| resource.logical_id == logical_id)
    }

    pub(crate) fn parameter(&self, name: &str) -> Option<&ParameterDecl> {
        self.parameters.iter().find(|parameter| parameter.name == name)
    }

    /// The resources `logical_id` waits for: its DependsOn, and every resource its properties
    /// name by `Ref`, `Fn::GetAtt` or `Fn::Sub`, in either branch of an `Fn::If`.
    pub fn dependencies(&self, logical_id: &str) -> BTreeSet<String> {
        let Some(resource) = self.resource(logical_id) else { return BTreeSet::new() };
        let mut found: BTreeSet<String> =
            resource.depends_on.iter().filter(|id| self.resource(id).is_some()).cloned().collect();
        // The properties were scanned when the template was parsed; a scan cannot fail here.
        let _ = intrinsics::scan(&self.path, &resource.properties, Place::Value, &mut |mention| {
            if let Mention::Ref { name, .. } | Mention::GetAtt { logical_id: name, .. } = mention
                && self.resource(name).is_some()
            {
                found.insert(name.to_string());
            }
        });
        found
    }

    /// Evaluates the Rules ([`Template::check_rules`]: a failing assertion refuses the
    /// operation, as CloudFormation refuses it before any resource is touched), then every
    /// condition, each after the conditions it names. Both read only parameters and pseudo
    /// parameters, and both are evaluated before a create or update sends anything.
    pub fn resolve_conditions(&self, scope: &Scope) -> Result<BTreeMap<String, bool>, Refusal> {
        self.check_rules(scope)?;
        let mut resolved = BTreeMap::new();
        for index in self.condition_order()? {
            let (name, body) = &self.conditions[index];
            let value = {
                let local = Scope { conditions: &resolved, ..*scope };
                intrinsics::evaluate_condition(body, &local).map_err(|error| {
                    Refusal::new(&self.path, error.line, &format!("condition {name}"), error.message)
                })?
            };
            resolved.insert(name.clone(), value);
        }
        Ok(resolved)
    }
}

fn entries<'a>(path: &Path, key: &Key, value: &'a Node) -> Result<&'a [(Key, Node)], Refusal> {
    match &value.value {
        NodeValue::Map(entries) => Ok(entries),
        NodeValue::Null => Ok(&[]),
        _ => Err(Refusal::new(path, key.line, &key.name, "must be a map of names to declarations".to_string())),
    }
}

fn scalar_text(path: &Path, key: &Key, value: &Node) -> Result<String, Refusal> {
    match &value.value {
        NodeValue::Scalar(text) => Ok(text.clone()),
        NodeValue::Null => Ok(String::new()),
        _ => Err(Refusal::new(path, key.line, &key.name, "must be text".to_string())),
    }
}

/// CloudFormation's logical ids, parameter and output names: letters and digits only.
fn name_of(path: &Path, key: &Key, what: &str) -> Result<String, Refusal> {
    if key.name.is_empty() || !key.name.chars().all(|c| c.is_ascii_alphanumeric()) {
        return Err(Refusal::new(
            path,
            key.line,
            &format!("{what} {}", key.name),
            "a name holds letters and digits only".to_string(),
        ));
    }
    Ok(key.name.clone())
}

fn attributes<'a>(path: &Path, key: &Key, body: &'a Node, what: &str) -> Result<&'a [(Key, Node)], Refusal> {
    body.as_map().ok_or_else(|| {
        Refusal::new(
            path,
            key.line,
            &format!("{what} {}", key.name),
            "a declaration is a map of attributes".to_string(),
        )
    })
}

fn resource(path: &Path, key: &Key, body: &Node) -> Result<ResourceDecl, Refusal> {
    let logical_id = name_of(path, key, "resource")?;
    let mut resource_type = None;
    let mut properties = Node { value: NodeValue::Map(Vec::new()), line: key.line };
    let mut depends_on = Vec::new();
    let mut condition = None;
    let mut policies = Vec::new();
    for (attribute, value) in attributes(path, key, body, "resource")? {
        match attribute.name.as_str() {
            "Type" => resource_type = Some(scalar_text(path, attribute, value)?),
            "Properties" => {
                match &value.value {
                    NodeValue::Map(_) => properties = value.clone(),
                    NodeValue::Null => {}
                    _ => return Err(Refusal::new(path, attribute.line, "Properties", "must be a map".to_string())),
                }
                intrinsics::scan(path, value, Place::Value, &mut |_| {})?;
            }
            "DependsOn" => match (&value.value, value.as_seq()) {
                (NodeValue::Scalar(name), _) => depends_on.push(name.clone()),
                (_, Some(items)) => {
                    for item in items {
                        depends_on.push(scalar_text(path, attribute, item)?);
                    }
                }
                _ => {
                    return Err(Refusal::new(
                        path,
                        attribute.line,
                        "DependsOn",
                        "takes a resource's name or a list of them".to_string(),
                    ));
                }
            },
            "Condition" => condition = Some(scalar_text(path, attribute, value)?),
            "DeletionPolicy" | "UpdateReplacePolicy" => {
                policies.push((attribute, scalar_text(path, attribute, value)?))
            }
            "Metadata" | "Description" | "Version" => {}
            "CreationPolicy" | "UpdatePolicy" => {
                return Err(Refusal::new(
                    path,
                    attribute.line,
                    &attribute.name,
                    "outside what cfn-once play plays: play a copy without it".to_string(),
                ));
            }
            other => return Err(Refusal::new(path, attribute.line, other, "not a resource attribute".to_string())),
        }
    }
    let Some(resource_type) = resource_type else {
        return Err(Refusal::new(path, key.line, &format!("resource {logical_id}"), "declares no Type".to_string()));
    };
    let (mut deletion_policy, mut update_replace_policy) = (Policy::Delete, Policy::Delete);
    for (attribute, written) in policies {
        let policy = match written.as_str() {
            "Delete" => Policy::Delete,
            "Retain" => Policy::Retain,
            "Snapshot"
                if !is_custom(&resource_type)
                    && ![WAIT_CONDITION, WAIT_HANDLE, NESTED_STACK].contains(&resource_type.as_str()) =>
            {
                Policy::Snapshot
            }
            "Snapshot" => {
                return Err(Refusal::new(
                    path,
                    attribute.line,
                    &format!("{} Snapshot", attribute.name),
                    format!("a {resource_type} has nothing to snapshot: use Delete or Retain"),
                ));
            }
            "RetainExceptOnCreate" => {
                return Err(Refusal::new(
                    path,
                    attribute.line,
                    &format!("{} RetainExceptOnCreate", attribute.name),
                    "outside what cfn-once play plays: use Delete or Retain".to_string(),
                ));
            }
            other => {
                return Err(Refusal::new(
                    path,
                    attribute.line,
                    &format!("{} {other}", attribute.name),
                    "not a policy CloudFormation knows (Delete, Retain, Snapshot)".to_string(),
                ));
            }
        };
        if attribute.name == "DeletionPolicy" {
            deletion_policy = policy;
        } else {
            update_replace_policy = policy;
        }
    }
    Ok(ResourceDecl {
        logical_id,
        resource_type,
        line: key.line,
        properties,
        depends_on,
        condition,
        deletion_policy,
        update_replace_policy,
    })
}

fn output(path: &Path, key: &Key, body: &Node) -> Result<OutputDecl, Refusal> {
    let name = name_of(path, key, "output")?;
    let (mut value, mut description, mut condition, mut export_name) = (None, None, None, None);
    for (attribute, node) in attributes(path, key, body, "output")? {
        match attribute.name.as_str() {
            "Value" => {
                intrinsics::scan(path, node, Place::Value, &mut |_| {})?;
                value = Some(node.clone());
            }
            "Description" => description = Some(scalar_text(path, attribute, node)?),
            "Condition" => condition = Some(scalar_text(path, attribute, node)?),
            "Export" => {
                let Some((_, export)) = node.single_entry().filter(|(k, _)| k.name == "Name") else {
                    return Err(Refusal::new(path, attribute.line, "Export", "takes exactly a Name".to_string()));
                };
                intrinsics::scan(path, export, Place::Value, &mut |_| {})?;
                export_name = Some(export.clone());
            }
            other => return Err(Refusal::new(path, attribute.line, other, "not an output attribute".to_string())),
        }
    }
    let Some(value) = value else {
        return Err(Refusal::new(path, key.line, &format!("output {name}"), "declares no Value".to_string()));
    };
    Ok(OutputDecl { name, line: key.line, description, value, condition, export_name })
}

#[cfg(test)]
#[path = "template_tests.rs"]
mod tests;
