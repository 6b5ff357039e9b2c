//! What the stack player asks of the world, as a trait: send a custom resource request and wait
//! for its answer, make a wait condition handle, read the signals sent to one. The local
//! environment's implementation is [`crate::wire::LocalCloud`] (SNS, S3 and the lease
//! table on moto, through the handlers `cfn-once local` runs); the engine's tests play against
//! a scripted one.

use async_trait::async_trait;
use serde::Serialize;
use serde_json::{Map, Value};

/// The three request types CloudFormation sends a custom resource.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub enum RequestType {
    Create,
    Update,
    Delete,
}

impl RequestType {
    pub fn as_str(self) -> &'static str {
        match self {
            RequestType::Create => "Create",
            RequestType::Update => "Update",
            RequestType::Delete => "Delete",
        }
    }
}

/// Who sends the request and about which stack.
#[derive(Debug, Clone)]
pub struct StackIdentity {
    pub name: String,
    /// `arn:aws:cloudformation:<region>:<account>:stack/<name>/<id>`, the same for the stack's
    /// whole life.
    pub id: String,
}

/// One request to a custom resource, as CloudFormation would send it (the wire adds
/// `RequestId`, `ResponseURL` and `StackId`).
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(rename_all = "PascalCase")]
pub struct CfnRequest {
    pub request_type: RequestType,
    pub logical_resource_id: String,
    pub resource_type: String,
    pub service_token: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub physical_resource_id: Option<String>,
    /// Every scalar a string, `ServiceToken` included, as CloudFormation sends them.
    pub resource_properties: Value,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub old_resource_properties: Option<Value>,
    /// How long CloudFormation waits for the answer (`ServiceTimeout`, 1–3600 s, default 3600).
    #[serde(skip)]
    pub service_timeout_s: u64,
}

/// Which handler answered and under which fence, read back from the lease record.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Answerer {
    pub region: String,
    pub fence: u64,
}

/// An answer read from the ResponseURL.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Answer {
    pub success: bool,
    pub reason: Option<String>,
    pub physical_resource_id: Option<String>,
    pub data: Map<String, Value>,
    pub no_echo: bool,
    /// None when the answer came from somewhere the lease table does not know (a fake).
    pub answered_by: Option<Answerer>,
    /// How many times the answer was PUT (exactly once is the product's promise).
    pub puts: usize,
    pub elapsed_ms: u64,
}

/// What became of a request.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub enum Outcome {
    Answered(Answer),
    /// No answer within the request's ServiceTimeout.
    TimedOut,
}

/// One signal read from a wait condition handle.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Signal {
    pub success: bool,
    pub unique_id: String,
    pub reason: String,
    pub data: String,
}

/// What the player needs from AWS.
#[async_trait]
pub trait Cloud: Send + Sync {
    /// Sends `request` as CloudFormation does and waits up to its ServiceTimeout for the
    /// answer; `progress` hears a line now and then while it waits.
    async fn send(
        &self,
        stack: &StackIdentity,
        request: &CfnRequest,
        progress: &(dyn Fn(String) + Send + Sync),
    ) -> anyhow::Result<Outcome>;

    /// A new wait condition handle for `logical_id`: its URL, which is its physical id.
    async fn create_handle(&self, stack: &StackIdentity, logical_id: &str) -> anyhow::Result<String>;

    /// Every signal sent to `handle` so far, in the order they arrived.
    async fn signals(&self, handle: &str) -> anyhow::Result<Vec<Signal>>;
}

/// Parses a wait condition signal's body; `None` when it is not one.
pub fn parse_signal(body: &[u8]) -> Option<Signal> {
    let value: Value = serde_json::from_slice(body).ok()?;
    let text = |field: &str| value.get(field).and_then(Value::as_str).map(str::to_owned);
    let status = text("Status")?;
    Some(Signal {
        success: status == "SUCCESS",
        unique_id: text("UniqueId")?,
        reason: text("Reason").unwrap_or_default(),
        data: text("Data").unwrap_or_default(),
    })
}
