//! Decoding one SQS record into a CloudFormation custom-resource request.
//!
//! Each record is decoded on its own, so a bad record fails only itself. The body is either an
//! SNS envelope (raw message delivery off: the request is the envelope's `Message` string) or
//! the bare request (raw delivery on). Decoding happens in stages so that as much as possible is
//! still answered:
//!
//! 1. the body must be JSON, and an envelope must come from an allow-listed TopicArn; a bare
//!    request (raw message delivery) is accepted only where raw delivery is configured, because
//!    it carries no TopicArn and anyone allowed to send to the queue could forge one;
//! 2. the request must name a ResponseURL, StackId, RequestId and LogicalResourceId, and the
//!    ResponseURL must pass the [`UrlPolicy`]; otherwise nobody can be answered and the record
//!    is [`Undeliverable`] (logged without secrets, left to the DLQ);
//! 3. the rest must parse as aws_lambda_events' `CloudFormationCustomResourceRequest`; if it
//!    does not, the request is still answered, with FAILED and the parse error as Reason.
//!
//! A request nested deeper than the JSON parser's recursion limit (128 levels) is still
//! answered: its top-level fields are read into a derived struct (`Shallow`) while serde_json
//! skips every other value without recursing (`IgnoredAny`), and it is answered FAILED saying
//! so, instead of being lost to the DLQ. Either way, where the answer goes is read from the same top-level fields by the same
//! code (the request's `Address`), so a deep request is addressed exactly as a shallow one.
//!
//! Nothing here panics on input.
//!
//! The parts: this file holds what a decoded request is ([`Request`], [`Undeliverable`], the
//! [`InputPolicy`]); `decode` strips the envelope and parses, `address` reads where the answer
//! goes (the same code for every request), `deep` reads a request nested too deep to parse, and
//! `key` is the request's key ([`RequestKey`], [`StackArn`]).

use aws_lambda_events::event::cloudformation::CloudFormationCustomResourceRequest;
use serde_json::Value;

use crate::fingerprint::Fingerprint;
use crate::response_url::{ResponseUrl, UrlPolicy, UrlRefused};
use crate::wait_condition::{self, WaitDeclared, WaitSpec};

mod address;
mod decode;
mod deep;
mod key;

pub use decode::decode;
pub use key::{RequestKey, StackArn};

/// The properties CloudFormation itself adds to every custom resource; providers never see them.
const RESERVED_PROPERTIES: [&str; 4] =
    ["ServiceToken", "ServiceTimeout", wait_condition::HANDLE_PROPERTY, wait_condition::TIMEOUT_PROPERTY];

/// CloudFormation's own limit on a PhysicalResourceId.
pub const PHYSICAL_ID_BYTES_MAX: usize = 1024;

/// Create, Update or Delete.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RequestKind {
    /// The resource is new to the stack (or replaces another).
    Create,
    /// The resource's properties changed.
    Update,
    /// The resource leaves the stack, including when a failed Create is rolled back.
    Delete,
}

impl RequestKind {
    fn parse(value: &str) -> Option<Self> {
        match value {
            "Create" => Some(Self::Create),
            "Update" => Some(Self::Update),
            "Delete" => Some(Self::Delete),
            _ => None,
        }
    }

    /// The name CloudFormation uses.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Create => "Create",
            Self::Update => "Update",
            Self::Delete => "Delete",
        }
    }
}

/// Where decoding stopped for a record that cannot be answered at all.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum Undeliverable {
    /// The SQS record carried no body.
    #[error("record has no body")]
    NoBody,
    /// The body is not JSON; holds the parser's category and position, never the text.
    #[error("record body is not JSON ({0})")]
    NotJson(String),
    /// An SNS envelope from a topic not in `CFN_ONCE_TOPIC_ARNS`; holds its TopicArn.
    #[error("SNS notification from topic {0} refused: it is not in CFN_ONCE_TOPIC_ARNS")]
    ForeignTopic(String),
    /// The envelope's Message is not a JSON object; holds why, never the text.
    #[error("SNS notification's Message is not a JSON object ({0})")]
    MessageNotJson(String),
    /// The body is JSON but neither an SNS notification nor a CloudFormation request.
    #[error("record body is neither an SNS notification nor a CloudFormation request")]
    Unrecognised,
    /// A bare request arrived where raw message delivery is not configured, so its sender is
    /// unverified.
    #[error(
        "record body is a bare request, but raw message delivery is not configured (CFN_ONCE_RAW_DELIVERY): only SNS notifications from CFN_ONCE_TOPIC_ARNS are accepted"
    )]
    RawRefused,
    /// A field the answer is addressed with (ResponseURL, StackId, RequestId or
    /// LogicalResourceId) is absent, empty or not a string; holds its name.
    #[error("request has no usable {0}, so no response can be addressed; the record goes to the DLQ")]
    Missing(&'static str),
    /// An identifier is longer than CloudFormation ever sends, so an answer echoing it might not
    /// fit in the 4096-byte body.
    #[error("request's {field} is {bytes} bytes, longer than CloudFormation ever sends")]
    TooLong {
        /// The field's name.
        field: &'static str,
        /// Its length as serialized JSON, in bytes.
        bytes: usize,
    },
    /// The ResponseURL failed the [`UrlPolicy`], so nothing may be sent to it.
    #[error("{0}; nothing was sent")]
    Url(#[from] UrlRefused),
    /// The StackId is not a CloudFormation stack ARN: CloudFormation always sends one, and a
    /// lease record may only ever be keyed by one.
    #[error(
        "request's StackId is not a CloudFormation stack ARN (arn:aws:cloudformation:<region>:<account>:stack/<name>/<id>); the record goes to the DLQ"
    )]
    NotAStack,
}

/// Which SNS topics may send requests, and where responses may go.
#[derive(Debug, Clone)]
pub struct InputPolicy {
    /// TopicArns allowed in SNS envelopes.
    pub topic_arns: Vec<String>,
    /// Whether bare requests (SNS raw message delivery) are accepted. They carry no TopicArn,
    /// so for them the queue policy (`aws:SourceArn`) is the only check; off by default.
    pub raw_delivery: bool,
    /// Which ResponseURLs may be answered; a request naming any other is undeliverable.
    pub urls: UrlPolicy,
    /// The topics of `topic_arns` whose requests are privileged (`CFN_ONCE_PRIVILEGED_TOPIC_ARNS`):
    /// only those may reach what the handler keeps for them (`Custom::DynamoDBItem`'s `Adopt`,
    /// the routes to functions). Empty: every accepted request is privileged, a bare one too.
    pub privileged_topic_arns: Vec<String>,
}

impl InputPolicy {
    /// Whether a request that arrived through `topic_arn` (`None`: a bare request, under raw
    /// delivery) is privileged: always where no topic is named privileged, else only through
    /// one of them.
    pub fn privileged(&self, topic_arn: Option<&str>) -> bool {
        self.privileged_topic_arns.is_empty()
            || topic_arn.is_some_and(|topic| self.privileged_topic_arns.iter().any(|privileged| privileged == topic))
    }
}

/// A decoded request that can be answered.
#[derive(Debug, Clone)]
pub struct Request {
    /// StackId and RequestId: the key of the request's lease record.
    pub key: RequestKey,
    /// The resource's logical id in the template, echoed in the response.
    pub logical_resource_id: String,
    /// Where the answer is PUT; validated, and never printed.
    pub response_url: ResponseUrl,
    /// Tells this attempt apart from another that reuses its RequestId.
    pub fingerprint: Fingerprint,
    /// The parsed request, or why it could not be parsed.
    pub body: RequestBody,
    /// When SNS published the request (the envelope's `Timestamp`), epoch ms: the same for
    /// every queue's copy, and never later than any copy's SentTimestamp. `None` for a bare
    /// request (raw delivery) or an envelope without a readable Timestamp.
    pub published_ms: Option<u64>,
    /// The wait condition its (new) properties declare, taken out of them: a Create or Update
    /// with a valid one hands its provider's work past the answer, a Delete closes that work
    /// (see `wait_condition`).
    pub wait: WaitDeclared,
    /// The wait condition an Update's old properties declared, if valid: its work is closed
    /// when the Update names another handle.
    pub old_wait: Option<WaitSpec>,
    /// The SNS topic the request arrived through (the envelope's TopicArn, one of
    /// `CFN_ONCE_TOPIC_ARNS`); `None` for a bare request (raw delivery).
    pub topic_arn: Option<String>,
    /// Whether it arrived through a privileged topic ([`InputPolicy::privileged`]); providers
    /// read it as [`ProviderContext::privileged`](crate::provider::ProviderContext::privileged).
    pub privileged: bool,
}

/// The request itself, or why it could not be parsed (answered FAILED with that reason).
#[derive(Debug, Clone)]
pub enum RequestBody {
    /// The parsed request. Its `response_url` field is blanked: the URL lives only in
    /// [`Request::response_url`], where it cannot be printed.
    Valid(Box<CloudFormationCustomResourceRequest>),
    /// Addressable but not parseable (or nested too deeply to read): answered FAILED without
    /// running a provider.
    Malformed {
        /// Why it could not be parsed: the FAILED answer's Reason.
        reason: String,
        /// The RequestType, if readable; it decides the answer's PhysicalResourceId.
        kind: Option<RequestKind>,
        /// The PhysicalResourceId sent, if readable, so the FAILED answer keeps it.
        physical_resource_id: Option<String>,
    },
}

impl Request {
    /// Create, Update or Delete, when known.
    pub fn kind(&self) -> Option<RequestKind> {
        match &self.body {
            RequestBody::Valid(request) => Some(match request.as_ref() {
                CloudFormationCustomResourceRequest::Create(_) => RequestKind::Create,
                CloudFormationCustomResourceRequest::Update(_) => RequestKind::Update,
                CloudFormationCustomResourceRequest::Delete(_) => RequestKind::Delete,
                #[allow(unreachable_patterns)]
                _ => return None,
            }),
            RequestBody::Malformed { kind, .. } => *kind,
        }
    }

    /// The PhysicalResourceId CloudFormation sent (Update and Delete only).
    pub fn physical_resource_id(&self) -> Option<&str> {
        match &self.body {
            RequestBody::Valid(request) => match request.as_ref() {
                CloudFormationCustomResourceRequest::Update(update) => Some(&update.physical_resource_id),
                CloudFormationCustomResourceRequest::Delete(delete) => Some(&delete.physical_resource_id),
                _ => None,
            },
            RequestBody::Malformed { physical_resource_id, .. } => physical_resource_id.as_deref(),
        }
    }

    /// The resource type, e.g. `Custom::Echo`.
    pub fn resource_type(&self) -> Option<&str> {
        match &self.body {
            RequestBody::Valid(request) => Some(match request.as_ref() {
                CloudFormationCustomResourceRequest::Create(r) => &r.resource_type,
                CloudFormationCustomResourceRequest::Update(r) => &r.resource_type,
                CloudFormationCustomResourceRequest::Delete(r) => &r.resource_type,
                _ => return None,
            }),
            RequestBody::Malformed { .. } => None,
        }
    }

    /// The resource's `ServiceTimeout` in seconds, when the template set one.
    pub fn service_timeout_s(&self) -> Option<u64> {
        let properties = match &self.body {
            RequestBody::Valid(request) => match request.as_ref() {
                CloudFormationCustomResourceRequest::Create(r) => &r.resource_properties,
                CloudFormationCustomResourceRequest::Update(r) => &r.resource_properties,
                CloudFormationCustomResourceRequest::Delete(r) => &r.resource_properties,
                _ => return None,
            },
            RequestBody::Malformed { .. } => return None,
        };
        match properties.get("ServiceTimeout")? {
            Value::String(text) => text.trim().parse().ok(),
            Value::Number(number) => number.as_u64(),
            _ => None,
        }
    }
}

/// A request's resource properties without the ones CloudFormation adds.
pub fn provider_properties(properties: &Value) -> Value {
    match properties {
        Value::Object(map) => Value::Object(
            map.iter()
                .filter(|(key, _)| !RESERVED_PROPERTIES.contains(&key.as_str()))
                .map(|(key, value)| (key.clone(), value.clone()))
                .collect(),
        ),
        other => other.clone(),
    }
}

#[cfg(test)]
mod tests;
