//! NoEcho: no value a template marks `NoEcho: true`, and no Data a provider answers with
//! `NoEcho: true`, appears in what `cfn-once play` prints or writes: the event lines, the
//! summary, the `--json` report (its requests and Outputs), the `--plan` preview. Each shows
//! `****` instead.
//!
//! CloudFormation masks a NoEcho parameter "as asterisks (*****) for any calls that describe the
//! stack or stack events" ("Parameters",
//! https://docs.aws.amazon.com/AWSCloudFormation/latest/UserGuide/parameters-section-structure.html),
//! and a provider's NoEcho answer masks its Data "when it's retrieved by using the Fn::GetAtt
//! function" (the response's NoEcho; its Data is otherwise "visible through APIs that surface
//! property values (such as DescribeStackEvents)",
//! https://docs.aws.amazon.com/AWSCloudFormation/latest/UserGuide/crpg-ref-responses.html).
//! The provider itself is sent the value in clear, as CloudFormation sends it: masking is only
//! in what a person or a file gets. play masks more than CloudFormation: the same page says
//! NoEcho does not mask the Outputs section, which play masks too (a play's output lands in
//! terminals and CI logs), and play masks a value wherever its text appears (a reason that
//! echoes it, a value built with `Fn::Sub`), so a short NoEcho value masks every place its
//! text occurs.

use std::collections::BTreeSet;
use std::sync::{Arc, Mutex};

use async_trait::async_trait;
use serde_json::{Map, Value};

use crate::cloud::{CfnRequest, Cloud, Outcome, Signal, StackIdentity};
use crate::engine::Target;
use crate::run::PlayReport;
use crate::state::StackEvent;

/// What a masked value is shown as.
pub const MASK: &str = "****";

/// The texts to mask: NoEcho parameters' values, and the Data of NoEcho answers as they come.
/// Clones share one set, so the [`Watching`] cloud adds to what the printer masks.
#[derive(Debug, Clone, Default)]
pub struct Secrets {
    texts: Arc<Mutex<BTreeSet<String>>>,
}

impl Secrets {
    /// The values bound to every NoEcho parameter of `targets`.
    pub fn of_parameters(targets: &[Target]) -> Self {
        let secrets = Self::default();
        for target in targets {
            for declared in target.template.parameters.iter().filter(|p| p.no_echo) {
                if let Some(value) = target.parameters.get(&declared.name) {
                    secrets.add_value(value);
                }
            }
        }
        secrets
    }

    /// Adds every scalar in `value` (and a list's items joined with commas, as `Fn::Join`
    /// and CloudFormation's list parameters write them).
    pub fn add_value(&self, value: &Value) {
        match value {
            Value::String(text) => self.add(text),
            Value::Number(number) => self.add(&number.to_string()),
            Value::Bool(flag) => self.add(&flag.to_string()),
            Value::Array(items) => {
                items.iter().for_each(|item| self.add_value(item));
                let texts: Option<Vec<&str>> = items.iter().map(Value::as_str).collect();
                if let Some(texts) = texts {
                    self.add(&texts.join(","));
                }
            }
            Value::Object(map) => map.values().for_each(|item| self.add_value(item)),
            Value::Null => {}
        }
    }

    /// Adds each value of a NoEcho answer's Data.
    pub fn add_data(&self, data: &Map<String, Value>) {
        data.values().for_each(|value| self.add_value(value));
    }

    fn add(&self, text: &str) {
        if !text.is_empty() && text != MASK {
            self.texts.lock().expect("the secrets' lock").insert(text.to_owned());
        }
    }

    /// `text` with every secret in it replaced by `****`, the longest first (so a secret that
    /// holds another is masked whole).
    pub fn text(&self, text: &str) -> String {
        let texts = self.texts.lock().expect("the secrets' lock");
        let mut ordered: Vec<&String> = texts.iter().collect();
        ordered.sort_by_key(|secret| std::cmp::Reverse(secret.len()));
        ordered.iter().fold(text.to_owned(), |masked, secret| masked.replace(secret.as_str(), MASK))
    }

    /// Every string in `value` masked (map keys are names, not values, and stay).
    pub fn value(&self, value: &Value) -> Value {
        match value {
            Value::String(text) => Value::String(self.text(text)),
            Value::Array(items) => Value::Array(items.iter().map(|item| self.value(item)).collect()),
            Value::Object(map) => Value::Object(map.iter().map(|(k, v)| (k.clone(), self.value(v))).collect()),
            other => other.clone(),
        }
    }

    /// An event as it may be shown: its physical id and reason masked.
    pub fn event(&self, event: &StackEvent) -> StackEvent {
        let mut shown = event.clone();
        shown.physical_resource_id = event.physical_resource_id.as_deref().map(|id| self.text(id));
        shown.resource_status_reason = event.resource_status_reason.as_deref().map(|r| self.text(r));
        shown
    }

    fn request(&self, request: &CfnRequest) -> CfnRequest {
        let mut shown = request.clone();
        shown.resource_properties = self.value(&request.resource_properties);
        shown.old_resource_properties = request.old_resource_properties.as_ref().map(|p| self.value(p));
        shown.physical_resource_id = request.physical_resource_id.as_deref().map(|id| self.text(id));
        shown
    }

    /// A report as it may be printed or written: events, requests and Outputs masked.
    pub fn report(&self, report: &PlayReport) -> PlayReport {
        let mut shown = report.clone();
        shown.events = report.events.iter().map(|event| self.event(event)).collect();
        for records in shown.resources.values_mut() {
            for record in records {
                record.request = self.request(&record.request);
                record.reason = record.reason.as_deref().map(|r| self.text(r));
                record.answered_physical_id = record.answered_physical_id.as_deref().map(|id| self.text(id));
            }
        }
        for step in &mut shown.steps {
            for output in &mut step.outputs {
                output.value = self.text(&output.value);
                output.export_name = output.export_name.as_deref().map(|name| self.text(name));
            }
        }
        shown
    }
}

/// A [`Cloud`] that hears every answer on its way to the engine and adds a NoEcho answer's
/// Data to the secrets before anything can print it.
pub struct Watching<'a> {
    pub inner: &'a dyn Cloud,
    pub secrets: Secrets,
}

impl std::fmt::Debug for Watching<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Watching").finish_non_exhaustive()
    }
}

#[async_trait]
impl Cloud for Watching<'_> {
    async fn send(
        &self,
        stack: &StackIdentity,
        request: &CfnRequest,
        progress: &(dyn Fn(String) + Send + Sync),
    ) -> anyhow::Result<Outcome> {
        let outcome = self.inner.send(stack, request, progress).await?;
        if let Outcome::Answered(answer) = &outcome
            && answer.no_echo
        {
            self.secrets.add_data(&answer.data);
        }
        Ok(outcome)
    }

    async fn create_handle(&self, stack: &StackIdentity, logical_id: &str) -> anyhow::Result<String> {
        self.inner.create_handle(stack, logical_id).await
    }

    async fn signals(&self, handle: &str) -> anyhow::Result<Vec<Signal>> {
        self.inner.signals(handle).await
    }
}
