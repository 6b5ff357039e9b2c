//! `cfn-once play --plan`: a change set's preview for custom resources. Each update (the first
//! template to the first `--update`, and so on; the create when there is no `--update`) is
//! compared template to template, the way CloudFormation's change set describes an update
//! before it runs, and nothing is sent: no local environment is connected to.
//!
//! The vocabulary is the change set's ("ResourceChange" and "ResourceChangeDetail",
//! https://docs.aws.amazon.com/AWSCloudFormation/latest/APIReference/API_ResourceChange.html,
//! https://docs.aws.amazon.com/AWSCloudFormation/latest/APIReference/API_ResourceChangeDetail.html):
//! an Action `Add`, `Modify` or `Remove`; for `Modify`, a Replacement (`True`, `False`,
//! `Conditional`) and one detail per changed property with its Evaluation (`Static`: the new
//! value is known; `Dynamic`: it depends on a `Ref` or `Fn::GetAtt` resolved only when the
//! update runs), its ChangeSource (`DirectModification`, `ParameterReference`,
//! `ResourceReference` for a `Ref`, `ResourceAttribute` for a `Fn::GetAtt`) and its
//! CausingEntity (the parameter, the resource, or `Logical.Attribute`).
//!
//! A custom resource's replacement is decided by its provider at update time: it answers the
//! Update with a new PhysicalResourceId ("If the value returned is different, CloudFormation
//! recognizes the update as a replacement and sends a delete request to the old resource",
//! https://docs.aws.amazon.com/AWSCloudFormation/latest/UserGuide/crpg-ref-requesttypes-update.html).
//! So a modified custom resource's Replacement is `Conditional` ("The resource may be
//! replaced"), and a resource that reads its `Ref` may get an Update too. The User Guide does not
//! say which Replacement value CloudFormation's change set shows for a custom resource; play
//! says `Conditional` for the reason above, and the docs (docs/play.md) say so.
//!
//! What a value only a played stack knows (a physical id, a provider's Data) is shown as
//! `{{Ref Logical}}` or `{{Logical.Attribute}}`; a `--stub` gives its value.

use std::collections::{BTreeMap, BTreeSet};

use serde::Serialize;
use serde_json::{Map, Value};

use crate::engine::Target;
use crate::intrinsics::{Mention, Place, Pseudo, Resources, Scope, evaluate, scan, to_properties};
use crate::mask::Secrets;
use crate::state::Kind;
use crate::template::{Policy, ResourceDecl, Template};
use crate::yaml::Node;

#[path = "plan_nested.rs"]
mod nested;

/// What the preview says of how a custom resource's replacement is decided.
pub const REPLACEMENT_NOTE: &str = "a custom resource's replacement is decided by its provider's answer at update time (a new \
     PhysicalResourceId answering the Update); this preview says what CloudFormation's change set would say \
     beforehand: Replacement Conditional for every modified custom resource, and nothing is sent";

/// The preview of every step.
#[derive(Debug, Clone, Serialize)]
pub struct Preview {
    pub steps: Vec<StepPreview>,
    pub note: String,
}

/// One stack operation's preview.
#[derive(Debug, Clone, Serialize)]
pub struct StepPreview {
    /// `create`, `update`, `update2`, ...
    pub step: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub from: Option<String>,
    pub to: String,
    pub resources: Vec<ResourcePreview>,
}

/// What a change set's ResourceChange says of one custom resource, and what play would send it.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(rename_all = "PascalCase")]
pub struct ResourcePreview {
    pub logical_resource_id: String,
    pub resource_type: String,
    /// `Add`, `Modify`, `Remove`, or `None` (nothing changes: no request).
    pub action: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub replacement: Option<String>,
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub details: Vec<Detail>,
    /// The requests play would send it, in words, in order.
    pub requests: Vec<String>,
    /// Why the operation would fail at this resource before anything is sent to it.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub refused: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub resource_properties: Option<Value>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub old_resource_properties: Option<Value>,
}

/// A ResourceChangeDetail: one property that changes, or may.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(rename_all = "PascalCase")]
pub struct Detail {
    /// The property's name in `Properties`.
    pub name: String,
    /// `Static` or `Dynamic`.
    pub evaluation: String,
    pub change_source: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub causing_entity: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub before: Option<Value>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub after: Option<Value>,
}

/// The preview of `targets` (from [`crate::run::prepare`]): each update, or the create
/// when there is one template.
pub fn preview(
    targets: &[Target],
    steps: &[String],
    pseudo: &Pseudo,
    stubs: &BTreeMap<(String, String), String>,
) -> Result<Preview, String> {
    let mut previews = Vec::new();
    if let [only] = targets {
        previews.push(step_preview("create", None, only, pseudo, stubs)?);
    }
    for (pair, step) in targets.windows(2).zip(steps.iter().skip(1)) {
        previews.push(step_preview(step, Some(&pair[0]), &pair[1], pseudo, stubs)?);
    }
    Ok(Preview { steps: previews, note: REPLACEMENT_NOTE.to_owned() })
}

/// A custom resource as one template declares it, its properties resolved as far as a
/// template can be.
struct Side<'t> {
    decl: &'t ResourceDecl,
    properties: Result<Value, String>,
}

fn step_preview(
    step: &str,
    old: Option<&Target>,
    new: &Target,
    pseudo: &Pseudo,
    stubs: &BTreeMap<(String, String), String>,
) -> Result<StepPreview, String> {
    let before = match old {
        Some(old) => sides(old, pseudo, stubs)?,
        None => BTreeMap::new(),
    };
    let after = sides(new, pseudo, stubs)?;
    // Each nested stack's own preview, from its template on either side; one whose resources
    // or template change may change its Outputs.
    let children = nested::previews(step, old, new, &before, &after, pseudo, stubs)?;
    // Which resources may change, found to a fixed point: a resource that reads a changing
    // one may change in turn.
    let mut changing: BTreeSet<String> =
        children.iter().filter(|(_, child)| child.changes).map(|(id, _)| id.clone()).collect();
    loop {
        let mut grown = false;
        for (id, now) in &after {
            if changing.contains(id) {
                continue;
            }
            let Some(was) = before.get(id) else { continue };
            if !details(id, was, now, old, new, &changing).is_empty() {
                changing.insert(id.clone());
                grown = true;
            }
        }
        if !grown {
            break;
        }
    }
    let mut resources = Vec::new();
    for (id, now) in &after {
        if let Some(child) = children.get(id) {
            let details = before.get(id).map(|was| details(id, was, now, old, new, &changing)).unwrap_or_default();
            resources.extend(nested::entries(id, now.decl, child, details, changing.contains(id)));
            continue;
        }
        let entry = match before.get(id) {
            None => added(now),
            Some(was) => modified(id, was, now, old, new, &changing),
        };
        resources.push(entry);
    }
    for (id, was) in before.iter().filter(|(id, _)| !after.contains_key(*id)) {
        if let Some(child) = children.get(id) {
            resources.extend(nested::entries(id, was.decl, child, Vec::new(), true));
            continue;
        }
        resources.push(removed(id, was));
    }
    Ok(StepPreview {
        step: step.to_owned(),
        from: old.map(|t| t.template.path.display().to_string()),
        to: new.template.path.display().to_string(),
        resources,
    })
}

/// The custom resources and nested stacks `target` includes (its Condition holds), by logical id.
fn sides<'t>(
    target: &'t Target,
    pseudo: &Pseudo,
    stubs: &BTreeMap<(String, String), String>,
) -> Result<BTreeMap<String, Side<'t>>, String> {
    let template = &target.template;
    let symbolic = Symbolic { declared: &template.resources, stubs };
    let conditions = {
        let scope =
            Scope { parameters: &target.parameters, pseudo, conditions: &BTreeMap::new(), resources: &symbolic };
        template.resolve_conditions(&scope).map_err(|refusal| refusal.to_string())?
    };
    let scope = Scope { parameters: &target.parameters, pseudo, conditions: &conditions, resources: &symbolic };
    let included = |decl: &ResourceDecl| decl.condition.as_ref().is_none_or(|c| conditions.get(c) == Some(&true));
    Ok(template
        .resources
        .iter()
        .filter(|decl| matches!(Kind::of(&decl.resource_type), Kind::Custom | Kind::Nested) && included(decl))
        .map(|decl| {
            let properties = evaluate(&decl.properties, &scope)
                .map(|value| value.unwrap_or_else(|| Value::Object(Map::new())))
                .map(|value| if Kind::of(&decl.resource_type) == Kind::Custom { to_properties(value) } else { value })
                .map_err(|error| format!("Template error: {error}"));
            (decl.logical_id.clone(), Side { decl, properties })
        })
        .collect())
}

fn added(now: &Side) -> ResourcePreview {
    let mut entry = blank(now.decl, "Add");
    match &now.properties {
        Ok(properties) => {
            entry.requests.push("Create (forward phase)".into());
            entry.resource_properties = Some(properties.clone());
        }
        Err(error) => entry.refused = Some(error.clone()),
    }
    entry
}

fn removed(id: &str, was: &Side) -> ResourcePreview {
    let mut entry = blank(was.decl, "Remove");
    entry.requests.push(match was.decl.deletion_policy {
        Policy::Retain => {
            format!("nothing: DeletionPolicy Retain (DELETE_SKIPPED); {id} is left, no longer the stack's")
        }
        // Snapshot is refused for custom resources, the only ones previewed.
        Policy::Delete | Policy::Snapshot => {
            "Delete, with its last properties as ResourceProperties (cleanup phase)".into()
        }
    });
    entry.resource_properties = was.properties.as_ref().ok().cloned();
    entry
}

fn modified(
    id: &str,
    was: &Side,
    now: &Side,
    old: Option<&Target>,
    new: &Target,
    changing: &BTreeSet<String>,
) -> ResourcePreview {
    let mut entry = blank(now.decl, "None");
    let (before, after) = match (&was.properties, &now.properties) {
        (Ok(before), Ok(after)) => (before, after),
        (_, Err(error)) | (Err(error), _) => {
            entry.action = "Modify".into();
            entry.refused = Some(error.clone());
            return entry;
        }
    };
    if was.decl.resource_type != now.decl.resource_type {
        entry.action = "Modify".into();
        entry.refused = Some(format!(
            "Update of resource type is not permitted: {} to {}",
            was.decl.resource_type, now.decl.resource_type
        ));
        return entry;
    }
    if before.get("ServiceToken") != after.get("ServiceToken") {
        entry.action = "Modify".into();
        entry.refused = Some("Modifying service token is not allowed.".into());
        return entry;
    }
    entry.details = details(id, was, now, old, new, changing);
    if entry.details.is_empty() {
        return entry;
    }
    entry.action = "Modify".into();
    entry.replacement = Some("Conditional".into());
    let dynamic_only = entry.details.iter().all(|d| d.evaluation == "Dynamic");
    entry.requests.push(if dynamic_only {
        let entities: Vec<String> = entry.details.iter().map(reads).collect();
        format!("Update (forward phase) only if {} when the update runs; otherwise nothing", entities.join(" or "))
    } else {
        "Update, with the old properties as OldResourceProperties (forward phase)".into()
    });
    entry.requests.push(match now.decl.update_replace_policy {
        Policy::Delete | Policy::Snapshot => {
            "if the provider answers the Update with a new PhysicalResourceId (a replacement): Delete of \
                           the old id, with the old properties (cleanup phase)"
                .into()
        }
        Policy::Retain => "if the provider answers the Update with a new PhysicalResourceId (a replacement): nothing \
                           more, UpdateReplacePolicy Retain keeps the old one"
            .into(),
    });
    entry.resource_properties = Some(after.clone());
    entry.old_resource_properties = Some(before.clone());
    entry
}

fn blank(decl: &ResourceDecl, action: &str) -> ResourcePreview {
    ResourcePreview {
        logical_resource_id: decl.logical_id.clone(),
        resource_type: decl.resource_type.clone(),
        action: action.into(),
        replacement: None,
        details: Vec::new(),
        requests: Vec::new(),
        refused: None,
        resource_properties: None,
        old_resource_properties: None,
    }
}

/// Each property of `id` that changes (Static) or may change because it reads a resource in
/// `changing` (Dynamic).
fn details(
    id: &str,
    was: &Side,
    now: &Side,
    old: Option<&Target>,
    new: &Target,
    changing: &BTreeSet<String>,
) -> Vec<Detail> {
    let (Ok(before), Ok(after)) = (&was.properties, &now.properties) else { return Vec::new() };
    let empty = Map::new();
    let (before, after) = (before.as_object().unwrap_or(&empty), after.as_object().unwrap_or(&empty));
    let names: BTreeSet<&String> = before.keys().chain(after.keys()).collect();
    let mut found = Vec::new();
    for name in names {
        let node = property_node(&now.decl.properties, name);
        let mentions = node.map(|node| mentions(&new.template, node)).unwrap_or_default();
        if before.get(name) != after.get(name) {
            let parameter = mentions.iter().find_map(|m| match m {
                Mentioned::Parameter(p) if old.is_none_or(|old| old.parameters.get(p) != new.parameters.get(p)) => {
                    Some(p.clone())
                }
                _ => None,
            });
            found.push(Detail {
                name: name.clone(),
                evaluation: "Static".into(),
                change_source: if parameter.is_some() { "ParameterReference" } else { "DirectModification" }.into(),
                causing_entity: parameter,
                before: before.get(name).cloned(),
                after: after.get(name).cloned(),
            });
            continue;
        }
        for mention in mentions {
            let (source, entity) = match mention {
                Mentioned::Ref(target) if changing.contains(&target) && target != id => ("ResourceReference", target),
                Mentioned::GetAtt(target, attribute) if changing.contains(&target) && target != id => {
                    ("ResourceAttribute", format!("{target}.{attribute}"))
                }
                _ => continue,
            };
            found.push(Detail {
                name: name.clone(),
                evaluation: "Dynamic".into(),
                change_source: source.into(),
                causing_entity: Some(entity),
                before: before.get(name).cloned(),
                after: after.get(name).cloned(),
            });
        }
    }
    found
}

/// The node of property `name`, or the whole properties when they are one function.
fn property_node<'n>(properties: &'n Node, name: &str) -> Option<&'n Node> {
    match properties.as_map() {
        Some(entries) if properties.single_entry().is_none_or(|(k, _)| !k.name.starts_with("Fn::")) => {
            entries.iter().find(|(key, _)| key.name == name).map(|(_, node)| node)
        }
        _ => Some(properties),
    }
}

/// What a value reads that can differ between templates or at update time.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Mentioned {
    Parameter(String),
    Ref(String),
    GetAtt(String, String),
}

fn mentions(template: &Template, node: &Node) -> Vec<Mentioned> {
    let mut found = Vec::new();
    // The template was scanned when it was parsed; a scan cannot fail here.
    let _ = scan(&template.path, node, Place::Value, &mut |mention| match mention {
        Mention::Ref { name, .. } if template.resource(name).is_some() => found.push(Mentioned::Ref(name.into())),
        Mention::Ref { name, .. } => found.push(Mentioned::Parameter(name.into())),
        Mention::GetAtt { logical_id, attribute, .. } => {
            found.push(Mentioned::GetAtt(logical_id.into(), attribute.into()))
        }
        Mention::Condition { .. } => {}
    });
    found.dedup();
    found
}

/// The stack as a template alone knows it: a resource's `Ref` and attributes are names for
/// values the update will know, or a `--stub`'s value.
struct Symbolic<'a> {
    declared: &'a [ResourceDecl],
    stubs: &'a BTreeMap<(String, String), String>,
}

impl Resources for Symbolic<'_> {
    fn reference(&self, logical_id: &str) -> Result<Value, String> {
        match self.declared.iter().any(|r| r.logical_id == logical_id) {
            true => Ok(Value::String(format!("{{{{Ref {logical_id}}}}}"))),
            false => Err(format!("unknown resource {logical_id}")),
        }
    }

    fn attribute(&self, logical_id: &str, attribute: &str) -> Result<Value, String> {
        if let Some(value) = self.stubs.get(&(logical_id.to_owned(), attribute.to_owned())) {
            return Ok(Value::String(value.clone()));
        }
        match self.declared.iter().any(|r| r.logical_id == logical_id) {
            true => Ok(Value::String(format!("{{{{{logical_id}.{attribute}}}}}"))),
            false => Err(format!("unknown resource {logical_id}")),
        }
    }
}

/// The preview with every NoEcho value masked.
pub fn masked(preview: &Preview, secrets: &Secrets) -> Preview {
    let mut shown = preview.clone();
    for resource in shown.steps.iter_mut().flat_map(|step| &mut step.resources) {
        let mask = |value: &mut Option<Value>| *value = value.as_ref().map(|v| secrets.value(v));
        mask(&mut resource.resource_properties);
        mask(&mut resource.old_resource_properties);
        for detail in &mut resource.details {
            mask(&mut detail.before);
            mask(&mut detail.after);
        }
        resource.refused = resource.refused.as_deref().map(|r| secrets.text(r));
    }
    shown
}

/// What a Dynamic detail waits on, in words.
fn reads(detail: &Detail) -> String {
    let entity = detail.causing_entity.as_deref().unwrap_or_default();
    match detail.change_source.as_str() {
        "ResourceReference" => format!("!Ref {entity} changes (if {entity} is replaced)"),
        _ => format!("!GetAtt {entity} changes"),
    }
}

/// The preview as a person reads it.
pub fn text(preview: &Preview) -> String {
    use std::fmt::Write;
    let compact = |value: &Value| serde_json::to_string(value).unwrap_or_default();
    let mut out = String::new();
    for step in &preview.steps {
        let from = step.from.as_deref().map(|f| format!(" from {f}")).unwrap_or_default();
        let _ = writeln!(
            out,
            "{}{from} to {}: what each custom resource (and nested stack) would get (nothing is sent)",
            step.step, step.to
        );
        for r in &step.resources {
            let replacement = r.replacement.as_deref().map(|v| format!(", Replacement {v}")).unwrap_or_default();
            let action = if r.action == "None" { "no change".to_owned() } else { format!("Action {}", r.action) };
            let _ = writeln!(out, "  {} ({}): {action}{replacement}", r.logical_resource_id, r.resource_type);
            for d in &r.details {
                let entity = d.causing_entity.as_deref().map(|e| format!(" {e}")).unwrap_or_default();
                let change = match d.evaluation.as_str() {
                    "Static" => format!(
                        "{} -> {}",
                        d.before.as_ref().map(compact).unwrap_or_else(|| "(absent)".into()),
                        d.after.as_ref().map(compact).unwrap_or_else(|| "(absent)".into())
                    ),
                    _ => format!("may change, if {}", reads(d)),
                };
                let _ = writeln!(out, "      {}: {change} ({}, {}{entity})", d.name, d.evaluation, d.change_source);
            }
            if let Some(refused) = &r.refused {
                let _ = writeln!(out, "      refused, nothing sent: {refused}");
            }
            for request in &r.requests {
                let _ = writeln!(out, "      sends: {request}");
            }
            if let Some(old) = &r.old_resource_properties {
                let _ = writeln!(out, "      OldResourceProperties {}", compact(old));
            }
            if let Some(new) = &r.resource_properties {
                let _ = writeln!(out, "      ResourceProperties    {}", compact(new));
            }
        }
    }
    let _ = writeln!(out, "note: {}", preview.note);
    out
}

#[cfg(test)]
#[path = "plan_tests.rs"]
mod tests;
