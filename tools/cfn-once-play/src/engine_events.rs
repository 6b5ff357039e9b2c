//! What an operation tells: its stack and resource events as they happen (to the person
//! watching and into the report), and its end with the Outputs of the template the stack
//! stands on.

use serde_json::Value;

use super::{Engine, Notice, OutputValue, StepReport, Target};
use crate::intrinsics::{Scope, evaluate};
use crate::state::{PRESIGNED_SHOWN, StackEvent, is_presigned, shown_id};

impl Engine<'_> {
    pub(super) fn stack_event(&mut self, status: &str, reason: Option<String>) {
        let event = StackEvent {
            timestamp: now(),
            logical_resource_id: self.stack.name.clone(),
            physical_resource_id: Some(self.stack.id.clone()),
            resource_type: "AWS::CloudFormation::Stack".into(),
            resource_status: status.into(),
            resource_status_reason: reason,
            nested_in: self.nested_in.clone(),
        };
        self.push_event(event);
    }

    pub(super) fn resource_event(&mut self, id: &str, status: &str, reason: Option<String>) {
        let live = self.live.get(id).or_else(|| self.before.get(id));
        let resource_type = match (live, self.gone.get(id)) {
            (Some(live), _) => live.resource_type.clone(),
            (None, Some(gone)) => gone.clone(),
            (None, None) => self.target_decl(id).resource_type,
        };
        let physical = live.filter(|_| status != "CREATE_IN_PROGRESS").map(shown_id);
        let event = StackEvent {
            timestamp: now(),
            logical_resource_id: id.to_owned(),
            physical_resource_id: physical,
            resource_type,
            resource_status: status.into(),
            resource_status_reason: reason,
            nested_in: self.nested_in.clone(),
        };
        self.push_event(event);
    }

    fn push_event(&mut self, event: StackEvent) {
        (self.notify)(Notice::Event(event.clone()));
        if let Ok(mut log) = self.log.lock() {
            log.push(event.clone());
        }
        self.events.push(event);
    }

    /// The step's report, with the Outputs of the template the stack now stands on.
    pub(super) fn report(&self, status: &str, completed: bool) -> StepReport {
        let stands = status.ends_with("_COMPLETE") && status != "ROLLBACK_COMPLETE";
        let current = self.current.as_ref().filter(|_| stands);
        let outputs = current.map(|target| self.outputs(target, true)).unwrap_or_default();
        StepReport {
            step: self.step.clone(),
            template: current.map(|t| t.template.path.display().to_string()),
            status: status.into(),
            completed,
            outputs,
            refused: None,
        }
    }

    /// The Outputs of `target`'s template; `masked` as shown to a person (a NoEcho value as
    /// `****`), or as a parent stack reads them.
    pub(super) fn outputs(&self, target: &Target, masked: bool) -> Vec<OutputValue> {
        let view = self.view(&target.template, masked);
        let scope = Scope {
            parameters: &target.parameters,
            pseudo: &self.pseudo,
            conditions: &self.conditions,
            resources: &view,
        };
        let text = |value: Value| match value {
            Value::String(text) if is_presigned(&text) => PRESIGNED_SHOWN.to_owned(),
            Value::String(text) => text,
            Value::Array(items) => items
                .iter()
                .map(|i| i.as_str().map(str::to_owned).unwrap_or_else(|| i.to_string()))
                .collect::<Vec<_>>()
                .join(","),
            other => other.to_string(),
        };
        target
            .template
            .outputs
            .iter()
            .filter(|o| o.condition.as_ref().is_none_or(|c| self.conditions.get(c).copied().unwrap_or(false)))
            .map(|output| OutputValue {
                key: output.name.clone(),
                value: match evaluate(&output.value, &scope) {
                    Ok(Some(value)) => text(value),
                    Ok(None) => String::new(),
                    Err(error) => format!("(cannot be evaluated: {error})"),
                },
                description: output.description.clone(),
                export_name: output.export_name.as_ref().and_then(|n| evaluate(n, &scope).ok().flatten()).map(text),
            })
            .collect()
    }
}

/// Now, as CloudFormation stamps its events: UTC to the millisecond, always 24 characters.
pub(super) fn now() -> String {
    let now = aws_smithy_types::DateTime::from(std::time::SystemTime::now());
    let seconds = aws_smithy_types::DateTime::from_secs(now.secs())
        .fmt(aws_smithy_types::date_time::Format::DateTime)
        .unwrap_or_default();
    format!("{}.{:03}Z", seconds.trim_end_matches('Z'), now.subsec_nanos() / 1_000_000)
}
