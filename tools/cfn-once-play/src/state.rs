//! The stack as the player holds it between requests: each resource's physical id, the
//! properties it was last sent, the Data it answered, and the events a person reads, as
//! `describe-stack-events` shows them.

use std::collections::BTreeMap;

use serde::Serialize;
use serde_json::{Map, Value};

use crate::cloud::{Answerer, CfnRequest, StackIdentity};
use crate::intrinsics::Resources;
use crate::template::{NESTED_STACK, Policy, ResourceDecl, Template, WAIT_CONDITION, WAIT_HANDLE, is_custom};

/// What the engine tells the person watching: the events, and lines of progress.
#[derive(Debug, Clone)]
pub enum Notice {
    Event(StackEvent),
    /// A line of progress (still waiting, a fault injected).
    Progress(String),
    /// A NoEcho parameter's value, bound when a nested stack was played: whatever prints or
    /// writes the play masks it from now on.
    Secret(serde_json::Value),
}

/// What the player does with a resource of a type.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub enum Kind {
    /// A custom resource: sent through the ServiceToken topic.
    Custom,
    /// A wait condition handle: a presigned URL, made here.
    Handle,
    /// A wait condition: waits for its handle's signals.
    Wait,
    /// A nested stack: a stack of its own, played from its template.
    Nested,
    /// Any other type: not provisioned; its Ref is a made-up name.
    Other,
}

impl Kind {
    pub fn of(resource_type: &str) -> Self {
        match resource_type {
            _ if is_custom(resource_type) => Kind::Custom,
            WAIT_HANDLE => Kind::Handle,
            WAIT_CONDITION => Kind::Wait,
            NESTED_STACK => Kind::Nested,
            _ => Kind::Other,
        }
    }
}

/// A resource of the stack.
#[derive(Debug, Clone)]
pub struct Live {
    pub resource_type: String,
    pub kind: Kind,
    /// The physical id: the answered one, a handle's URL, or a made-up one.
    pub physical_id: String,
    /// The resolved properties last applied (for a custom resource, exactly as sent).
    pub properties: Value,
    /// The answered Data (a wait condition's: `Data` as JSON text keyed by UniqueId).
    pub data: Map<String, Value>,
    pub no_echo: bool,
    pub deletion_policy: Policy,
    pub update_replace_policy: Policy,
    /// The ServiceTimeout of its requests, from its properties.
    pub service_timeout_s: u64,
    pub service_token: Option<String>,
}

/// A stack event, as CloudFormation's console and `describe-stack-events` list them.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct StackEvent {
    /// UTC, RFC 3339 with milliseconds.
    pub timestamp: String,
    pub logical_resource_id: String,
    /// Never a handle's URL: a presigned URL is a secret, as a ResponseURL is.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub physical_resource_id: Option<String>,
    pub resource_type: String,
    pub resource_status: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub resource_status_reason: Option<String>,
    /// For a nested stack's event, the logical ids of the nested stack resources it is inside,
    /// outermost first (empty for the stack played).
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub nested_in: Vec<String>,
}

/// One request a resource got, and what became of it: the history the closing report shows.
#[derive(Debug, Clone, Serialize)]
pub struct RequestRecord {
    /// The stack operation (`create`, `update`, `update2`, ..., `delete`) and its phase.
    pub step: String,
    pub phase: String,
    pub request: CfnRequest,
    /// SUCCESS, FAILED, or TIMED OUT.
    pub outcome: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub answered_physical_id: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub answered_by: Option<Answerer>,
    pub puts: usize,
    pub elapsed_ms: u64,
}

/// CloudFormation's stand-in for a physical id nobody answered: the stack's name, the logical
/// id and a suffix, stable for one stack and resource so a replay names the same thing.
pub fn made_up_id(stack: &StackIdentity, logical_id: &str) -> String {
    let digest = cfn_once_core::fingerprint::short_digest(&[&stack.id, logical_id]).to_uppercase();
    format!("{}-{logical_id}-{}", stack.name, &digest[..12])
}

/// Where a physical id is shown: a handle's URL is replaced by words.
pub fn shown_id(live: &Live) -> String {
    match live.kind {
        Kind::Handle => "(a presigned handle URL, not shown)".into(),
        _ => live.physical_id.clone(),
    }
}

/// `value` with every presigned URL in it (a wait condition handle a resource is given, say)
/// replaced by words: what the report keeps of a request, printed or written as JSON.
pub fn without_presigned_urls(value: &Value) -> Value {
    match value {
        Value::String(text) if is_presigned(text) => Value::String(PRESIGNED_SHOWN.into()),
        Value::Array(items) => Value::Array(items.iter().map(without_presigned_urls).collect()),
        Value::Object(map) => Value::Object(map.iter().map(|(k, v)| (k.clone(), without_presigned_urls(v))).collect()),
        other => other.clone(),
    }
}

/// What a presigned URL is shown as.
pub const PRESIGNED_SHOWN: &str = "(a presigned URL, not shown)";

/// Whether `text` carries a SigV4 (or SigV2) query signature.
pub fn is_presigned(text: &str) -> bool {
    let lower = text.to_ascii_lowercase();
    lower.contains("x-amz-signature=") || lower.contains("&signature=") || lower.contains("?signature=")
}

/// The stack's resources as the intrinsic functions read them.
pub struct View<'a> {
    pub live: &'a BTreeMap<String, Live>,
    pub declared: &'a [ResourceDecl],
    pub stack: &'a StackIdentity,
    pub stubs: &'a BTreeMap<(String, String), String>,
    /// For Outputs shown to a person: a handle's URL and a NoEcho resource's Data are masked.
    pub masked: bool,
}

impl std::fmt::Debug for View<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("View")
            .field("resources", &self.live.keys())
            .field("masked", &self.masked)
            .finish_non_exhaustive()
    }
}

impl Resources for View<'_> {
    fn reference(&self, logical_id: &str) -> Result<Value, String> {
        if let Some(live) = self.live.get(logical_id) {
            return Ok(Value::String(if self.masked { shown_id(live) } else { live.physical_id.clone() }));
        }
        match self.declared.iter().find(|r| r.logical_id == logical_id) {
            Some(r) if Kind::of(&r.resource_type) == Kind::Other => {
                Ok(Value::String(made_up_id(self.stack, logical_id)))
            }
            Some(_) => Err(format!("{logical_id} does not exist yet or was not created")),
            None => Err(format!("unknown resource {logical_id}")),
        }
    }

    fn attribute(&self, logical_id: &str, attribute: &str) -> Result<Value, String> {
        if let Some(value) = self.stubs.get(&(logical_id.to_owned(), attribute.to_owned())) {
            return Ok(Value::String(value.clone()));
        }
        let Some(live) = self.live.get(logical_id) else {
            return Err(format!("{logical_id} does not exist yet or was not created"));
        };
        match live.data.get(attribute) {
            Some(_) if self.masked && live.no_echo => Ok(Value::String("****".into())),
            Some(value) => Ok(value.clone()),
            None => Err(format!(
                "Template error: resource {logical_id} does not support attribute type {attribute} in Fn::GetAtt \
                 (its answer's Data has no key {attribute:?})"
            )),
        }
    }
}

/// The ServiceTimeout a resource's properties ask for, within CloudFormation's 1-3600 s.
pub fn service_timeout_s(properties: &Value) -> Result<u64, String> {
    const DEFAULT_S: u64 = 3_600;
    match properties.get("ServiceTimeout") {
        None => Ok(DEFAULT_S),
        Some(value) => {
            let text = match value {
                Value::String(text) => text.clone(),
                other => other.to_string(),
            };
            match text.trim().parse::<u64>() {
                Ok(seconds) if (1..=DEFAULT_S).contains(&seconds) => Ok(seconds),
                _ => Err(format!("ServiceTimeout is {text:?}: CloudFormation accepts whole seconds from 1 to 3600")),
            }
        }
    }
}

/// A nested stack's `Parameters` property as the parameter values its template is given: a
/// map of strings (numbers and booleans as their text; a list as its items joined by commas,
/// as a CommaDelimitedList takes them). A name `template` does not declare is refused, as
/// CloudFormation refuses it ("Parameters: [X] do not exist in the template").
pub fn nested_parameters(properties: &Value, template: &Template) -> Result<BTreeMap<String, String>, String> {
    let Some(given) = properties.get("Parameters") else { return Ok(BTreeMap::new()) };
    let Value::Object(map) = given else {
        return Err("Parameters must be a map of parameter names to values".into());
    };
    let scalar = |value: &Value| match value {
        Value::String(text) => Some(text.clone()),
        Value::Number(number) => Some(number.to_string()),
        Value::Bool(flag) => Some(flag.to_string()),
        _ => None,
    };
    let unknown: Vec<&str> =
        map.keys().filter(|name| !template.parameters.iter().any(|p| &p.name == *name)).map(String::as_str).collect();
    if !unknown.is_empty() {
        return Err(format!("Parameters: [{}] do not exist in the template", unknown.join(", ")));
    }
    map.iter()
        .map(|(name, value)| {
            let text = match value {
                Value::Array(items) => {
                    items.iter().map(scalar).collect::<Option<Vec<_>>>().map(|items| items.join(","))
                }
                other => scalar(other),
            };
            text.map(|text| (name.clone(), text))
                .ok_or_else(|| format!("Parameters: the value of {name} must be a string, a number or a list of them"))
        })
        .collect()
}
