//! Nested stacks in a change set's preview, as a change set made with `IncludeNestedStacks`
//! shows them: the `AWS::CloudFormation::Stack` resource (Add, Modify, Remove, or nothing), then
//! its own custom resources as `Nested/Logical`, previewed from its template on either side with
//! the parameters its parent passes. A nested stack whose resources or template change may
//! change its Outputs, so a resource that reads `Fn::GetAtt Nested.Outputs.NAME` may get an
//! Update (Dynamic, ResourceAttribute).
//! (<https://docs.aws.amazon.com/AWSCloudFormation/latest/UserGuide/change-sets-for-nested-stacks.html>)

use std::collections::BTreeMap;

use super::{Detail, ResourcePreview, Side, StepPreview, blank, removed, sides, step_preview};
use crate::engine::Target;
use crate::intrinsics::Pseudo;
use crate::state::nested_parameters;
use crate::template::ResourceDecl;

/// One nested stack's preview.
pub(super) struct Child {
    /// Its custom resources (and nested stacks), or why its template cannot be previewed.
    preview: Result<StepPreview, String>,
    /// Added or removed with its parent's change.
    action: &'static str,
    /// Its resources, template or parameters change: its Outputs may.
    pub(super) changes: bool,
}

/// The preview of every nested stack on either side, by logical id.
pub(super) fn previews(
    step: &str,
    old: Option<&Target>,
    new: &Target,
    before: &BTreeMap<String, Side>,
    after: &BTreeMap<String, Side>,
    pseudo: &Pseudo,
    stubs: &BTreeMap<(String, String), String>,
) -> Result<BTreeMap<String, Child>, String> {
    let mut children = BTreeMap::new();
    let ids = before
        .keys()
        .chain(after.keys())
        .filter(|id| old.is_some_and(|o| o.nested.contains_key(*id)) || new.nested.contains_key(*id));
    for id in ids {
        if children.contains_key(id) {
            continue;
        }
        let was = old.zip(before.get(id)).map(|(target, side)| bound(target, id, side));
        let now = after.get(id).map(|side| bound(new, id, side));
        let child = match (was, now) {
            (Some(Ok(was)), Some(Ok(now))) => {
                let changes =
                    was.template != now.template || was.parameters != now.parameters || was.nested != now.nested;
                let preview = step_preview(step, Some(&was), &now, pseudo, stubs)?;
                let changes = changes || preview.resources.iter().any(|r| r.action != "None");
                Child { preview: Ok(preview), action: "Modify", changes }
            }
            (None, Some(Ok(now))) => {
                Child { preview: Ok(step_preview(step, None, &now, pseudo, stubs)?), action: "Add", changes: true }
            }
            (Some(Ok(was)), None) => {
                Child { preview: Ok(gone(step, &was, pseudo, stubs)?), action: "Remove", changes: true }
            }
            (_, Some(Err(why))) | (Some(Err(why)), _) => Child { preview: Err(why), action: "Modify", changes: true },
            (_, None) => continue,
        };
        children.insert(id.clone(), child);
    }
    Ok(children)
}

/// The nested stack `id`'s template bound to the parameters its parent passes (as far as a
/// template knows them: a value only the update knows stays `{{...}}`).
fn bound(target: &Target, id: &str, side: &Side) -> Result<Target, String> {
    let source = target.nested.get(id).ok_or_else(|| format!("no template was read for the nested stack {id}"))?;
    let properties = side.properties.clone()?;
    let given = nested_parameters(&properties, &source.template)?;
    let parameters = source.template.bind_parameters(&given).map_err(|e| format!("Parameters: {e}"))?;
    Ok(Target { template: source.template.clone(), parameters, nested: source.nested.clone() })
}

/// A removed nested stack's resources, each deleted with it.
fn gone(
    step: &str,
    was: &Target,
    pseudo: &Pseudo,
    stubs: &BTreeMap<(String, String), String>,
) -> Result<StepPreview, String> {
    let resources = sides(was, pseudo, stubs)?.iter().map(|(id, side)| removed(id, side)).collect();
    Ok(StepPreview {
        step: step.to_owned(),
        from: Some(was.template.path.display().to_string()),
        to: String::new(),
        resources,
    })
}

/// The nested stack's entry, then its resources' as `id/Logical`.
pub(super) fn entries(
    id: &str,
    decl: &ResourceDecl,
    child: &Child,
    details: Vec<Detail>,
    changing: bool,
) -> Vec<ResourcePreview> {
    let action = match child.action {
        "Modify" if !changing && details.is_empty() => "None",
        action => action,
    };
    let mut entry = blank(decl, action);
    entry.details = details;
    let mut entries = Vec::new();
    match &child.preview {
        Err(why) => {
            entry.refused = Some(why.clone());
            entries.push(entry);
        }
        Ok(preview) => {
            let template = if action == "Remove" { preview.from.clone() } else { Some(preview.to.clone()) };
            let template = template.map(|t| format!(" ({t})")).unwrap_or_default();
            let what = match action {
                "Add" => format!("the nested stack's create{template}"),
                "Remove" => format!("the nested stack's delete{template}, in this stack's cleanup phase"),
                "None" => "nothing: nothing of the nested stack changes".to_owned(),
                _ => format!(
                    "the nested stack's update{template}: its forward phase in this stack's, its cleanup in this \
                     stack's cleanup phase"
                ),
            };
            entry.requests.push(format!("{what}; its resources below, as {id}/Logical"));
            entries.push(entry);
            for resource in &preview.resources {
                let mut resource = resource.clone();
                resource.logical_resource_id = format!("{id}/{}", resource.logical_resource_id);
                entries.push(resource);
            }
        }
    }
    entries
}
