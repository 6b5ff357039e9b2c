//! What passes between cfn-once and a function, shaped as the AWS CDK Provider framework shapes
//! it: the event a function is given (with cfn-once's `CfnOnce` object, never the ResponseURL),
//! and what it answers, read with the framework's defaults. Plain data: no Invoke happens here.

use std::collections::BTreeMap;
use std::time::Duration;

use cfn_once_core::aws_names::FunctionRef;
use cfn_once_core::provider::{ProviderContext, ProviderError, ProviderOutput, Step};
use cfn_once_core::request::RequestKind;
use serde_json::{Map, Value, json};

/// How long after an in-progress answer the next poll comes (the CDK framework's default
/// query interval).
pub const POLL_AFTER: Duration = Duration::from_secs(5);

/// The event the CDK framework passes, with cfn-once's object and without the ResponseURL.
pub(super) fn event(
    ctx: &ProviderContext,
    physical_resource_id: Option<&str>,
    properties: Value,
    old: Option<Value>,
) -> Map<String, Value> {
    let mut event = Map::new();
    let kind = match ctx.request_type {
        RequestKind::Create => "Create",
        RequestKind::Update => "Update",
        RequestKind::Delete => "Delete",
    };
    event.insert("RequestType".into(), kind.into());
    event.insert("StackId".into(), ctx.stack_id.clone().into());
    event.insert("RequestId".into(), ctx.request_id.clone().into());
    event.insert("ResourceType".into(), ctx.resource_type.clone().into());
    event.insert("LogicalResourceId".into(), ctx.logical_resource_id.clone().into());
    if let Some(id) = physical_resource_id {
        event.insert("PhysicalResourceId".into(), id.into());
    }
    event.insert("ResourceProperties".into(), properties);
    if let Some(old) = old {
        event.insert("OldResourceProperties".into(), old);
    }
    event
}

/// The event as the function is given it: with cfn-once's `CfnOnce` object, as JSON bytes.
pub(super) fn with_cfn_once(ctx: &ProviderContext, region: &str, mut event: Map<String, Value>) -> Vec<u8> {
    event.insert(
        "CfnOnce".into(),
        json!({
            "Fence": {"Value": ctx.fence.value, "Scope": ctx.fence.scope},
            "Region": region,
            "TookOverFrom": ctx.took_over_from,
            "RemainingMs": ctx.remaining_ms(),
        }),
    );
    Value::Object(event).to_string().into_bytes()
}

/// What onEvent answered, defaults applied.
pub(super) struct Output {
    pub(super) physical_resource_id: String,
    pub(super) data: BTreeMap<String, Value>,
    pub(super) no_echo: bool,
    pub(super) is_complete: Option<bool>,
}

impl Output {
    pub(super) fn read(
        function: &FunctionRef,
        answer: &Map<String, Value>,
        event: &Map<String, Value>,
    ) -> Result<Self, ProviderError> {
        let function = function.as_str();
        let default_id = event
            .get("PhysicalResourceId")
            .or_else(|| event.get("RequestId"))
            .and_then(Value::as_str)
            .unwrap_or_default()
            .to_owned();
        let physical_resource_id = match answer.get("PhysicalResourceId") {
            None | Some(Value::Null) => default_id,
            Some(Value::String(id)) if !id.is_empty() => id.clone(),
            Some(other) => {
                return Err(ProviderError::Failed(format!(
                    "{function} answered a PhysicalResourceId that is {}, not a non-empty string",
                    kind_of(other)
                )));
            }
        };
        let data = match answer.get("Data") {
            None | Some(Value::Null) => BTreeMap::new(),
            Some(Value::Object(data)) => data.clone().into_iter().collect(),
            Some(other) => {
                return Err(ProviderError::Failed(format!(
                    "{function} answered Data that is {}, not an object",
                    kind_of(other)
                )));
            }
        };
        let flag = |name: &str| match answer.get(name) {
            None | Some(Value::Null) => Ok(None),
            Some(Value::Bool(value)) => Ok(Some(*value)),
            Some(other) => Err(ProviderError::Failed(format!(
                "{function} answered {name} that is {}, not a boolean",
                kind_of(other)
            ))),
        };
        Ok(Self {
            physical_resource_id,
            data,
            no_echo: flag("NoEcho")?.unwrap_or(false),
            is_complete: flag("IsComplete")?,
        })
    }

    pub(super) fn to_value(&self) -> Value {
        json!({"PhysicalResourceId": self.physical_resource_id, "Data": self.data, "NoEcho": self.no_echo})
    }

    pub(super) fn into_step(self) -> Step {
        let mut output = ProviderOutput::with_id(self.physical_resource_id);
        output.data = self.data;
        output.no_echo = self.no_echo;
        Step::Done(output)
    }
}

/// A function error document (`{"errorType", "errorMessage"}`) in words.
pub(super) fn function_error(function: &str, document: &[u8]) -> String {
    let document: Value = serde_json::from_slice(document).unwrap_or(Value::Null);
    let kind = document["errorType"].as_str().unwrap_or("an error");
    let message = document["errorMessage"].as_str().unwrap_or("(no message)");
    if kind == "Sandbox.Timedout" || message.contains("Task timed out") {
        return format!("{function} timed out: {message}");
    }
    format!("{function} failed: {kind}: {message}")
}

/// What kind of JSON value `value` is, in words.
pub(super) fn kind_of(value: &Value) -> &'static str {
    match value {
        Value::Null => "null",
        Value::Bool(_) => "a boolean",
        Value::Number(_) => "a number",
        Value::String(_) => "a string",
        Value::Array(_) => "an array",
        Value::Object(_) => "an object",
    }
}
