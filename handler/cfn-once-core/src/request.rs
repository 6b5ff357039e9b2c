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

use aws_lambda_events::event::cloudformation::CloudFormationCustomResourceRequest;
use serde_json::{Map, Value};

use crate::aws_names::is_region;
use crate::fingerprint::Fingerprint;
use crate::response_url::{ResponseUrl, UrlPolicy, UrlRefused};
use crate::wait_condition::{self, WaitDeclared, WaitSpec};

/// The properties CloudFormation itself adds to every custom resource; providers never see them.
const RESERVED_PROPERTIES: [&str; 4] =
    ["ServiceToken", "ServiceTimeout", wait_condition::HANDLE_PROPERTY, wait_condition::TIMEOUT_PROPERTY];

/// Upper bounds on identifiers, as serialized JSON, so any answer fits in 4096 bytes.
const STACK_ID_BYTES_MAX: usize = 512;
const REQUEST_ID_BYTES_MAX: usize = 256;
const LOGICAL_ID_BYTES_MAX: usize = 512;
/// CloudFormation's own limit on a PhysicalResourceId.
pub const PHYSICAL_ID_BYTES_MAX: usize = 1024;

/// What identifies one request: CloudFormation's StackId and RequestId.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct RequestKey {
    /// CloudFormation's StackId: the stack's ARN.
    pub stack_id: StackArn,
    /// CloudFormation's RequestId, which it may reuse when it retries a failed deployment.
    pub request_id: String,
}

/// A CloudFormation stack's ARN, as CloudFormation sends it in `StackId`:
/// `arn:<partition>:cloudformation:<region>:<account>:stack/<name>/<id>`.
///
/// Every request key holds one, and the only way to make one is [`StackArn::parse`], so a
/// request's lease record can never be keyed like an item of another kind in the lease table
/// (the active-region control's partition, `control#active`, is no stack ARN): the key spaces
/// are disjoint by construction.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct StackArn(String);

impl StackArn {
    /// Parses a stack ARN; `None` for anything else.
    pub fn parse(text: &str) -> Option<Self> {
        let rest = text.strip_prefix("arn:")?;
        let parts: Vec<&str> = rest.splitn(5, ':').collect();
        let [partition, service, region, account, resource] = parts.as_slice() else {
            return None;
        };
        let (name, id) = resource.strip_prefix("stack/")?.split_once('/')?;
        let name_ok = name.len() <= 128
            && name.starts_with(|c: char| c.is_ascii_alphabetic())
            && name.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'-');
        let id_ok = !id.is_empty() && id.len() <= 128 && id.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'-');
        let partition_ok =
            partition.starts_with("aws") && partition.bytes().all(|b| b.is_ascii_lowercase() || b == b'-');
        let account_ok = account.len() == 12 && account.bytes().all(|b| b.is_ascii_digit());
        (partition_ok && *service == "cloudformation" && is_region(region) && account_ok && name_ok && id_ok)
            .then(|| Self(text.to_owned()))
    }

    /// The ARN's text.
    pub fn as_str(&self) -> &str {
        &self.0
    }

    /// The region in the ARN: the stack's region.
    pub fn region(&self) -> &str {
        self.0.split(':').nth(3).unwrap_or_default()
    }
}

impl std::ops::Deref for StackArn {
    type Target = str;

    fn deref(&self) -> &str {
        &self.0
    }
}

impl std::fmt::Display for StackArn {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

impl From<StackArn> for String {
    fn from(arn: StackArn) -> Self {
        arn.0
    }
}

impl PartialEq<str> for StackArn {
    fn eq(&self, other: &str) -> bool {
        self.0 == other
    }
}

impl PartialEq<&str> for StackArn {
    fn eq(&self, other: &&str) -> bool {
        self.0 == *other
    }
}

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

/// Decodes one SQS record body.
pub fn decode(body: Option<&str>, policy: &InputPolicy) -> Result<Request, Undeliverable> {
    let body = body.ok_or(Undeliverable::NoBody)?;
    let outer: Value = match serde_json::from_str(body) {
        Ok(outer) => outer,
        Err(error) if too_deep(&error) => {
            // A bare request with deep properties (an envelope itself is shallow).
            if !policy.raw_delivery {
                return Err(Undeliverable::RawRefused);
            }
            return decode_too_deep(body, policy);
        }
        Err(error) => return Err(Undeliverable::NotJson(describe_json_error(&error))),
    };
    let published_ms = published_ms(&outer);
    let mut request = match unwrap_envelope(outer, policy)? {
        Unwrapped::Request(request) => request,
        Unwrapped::TooDeep(message) => {
            return decode_too_deep(&message, policy).map(|request| Request { published_ms, ..request });
        }
    };
    let fingerprint = Fingerprint::of(&request);

    let object = request.as_object_mut().ok_or(Undeliverable::Unrecognised)?;
    let Address { key, logical_resource_id, response_url, kind, physical_resource_id } = address(object, policy)?;
    // The handles are secrets like the ResponseURL: out of the properties before anything
    // parses or prints them.
    let wait = wait_condition::take(object.get_mut("ResourceProperties"), &policy.urls);
    let old_wait = wait_condition::take(object.get_mut("OldResourceProperties"), &policy.urls).spec().cloned();

    let body = match parse_request(request) {
        Ok(parsed) => RequestBody::Valid(Box::new(parsed)),
        Err(reason) => RequestBody::Malformed { reason, kind, physical_resource_id },
    };
    Ok(Request { key, logical_resource_id, response_url, fingerprint, body, published_ms, wait, old_wait })
}

/// Where a request's answer goes, and what a FAILED answer must echo, read from its top-level
/// fields.
struct Address {
    key: RequestKey,
    logical_resource_id: String,
    response_url: ResponseUrl,
    /// The RequestType, if readable; it decides the answer's PhysicalResourceId.
    kind: Option<RequestKind>,
    /// The PhysicalResourceId sent, if any, so a FAILED answer keeps it.
    physical_resource_id: Option<String>,
}

/// Reads the [`Address`] from a request's top-level fields, or says why nobody can be answered.
/// The ResponseURL is taken out of `object`, so no later parse error or Debug print of the
/// request can contain it.
fn address(object: &mut Map<String, Value>, policy: &InputPolicy) -> Result<Address, Undeliverable> {
    let key = request_key(object)?;
    let logical_resource_id = required_id(object, "LogicalResourceId", LOGICAL_ID_BYTES_MAX)?;
    let physical_resource_id = match object.get("PhysicalResourceId") {
        Some(Value::String(id)) if !id.is_empty() => {
            check_length(id, "PhysicalResourceId", PHYSICAL_ID_BYTES_MAX)?;
            Some(id.clone())
        }
        _ => None,
    };
    let raw_url = match object.get_mut("ResponseURL") {
        Some(Value::String(url)) => std::mem::take(url),
        _ => return Err(Undeliverable::Missing("ResponseURL")),
    };
    let response_url = policy.urls.check(&raw_url)?;
    let kind = object.get("RequestType").and_then(Value::as_str).and_then(RequestKind::parse);
    Ok(Address { key, logical_resource_id, response_url, kind, physical_resource_id })
}

/// The publish time an SNS envelope carries (`Timestamp`, ISO 8601 in UTC).
fn published_ms(outer: &Value) -> Option<u64> {
    let envelope = outer.as_object().filter(|map| map.get("Type").and_then(Value::as_str) == Some("Notification"))?;
    crate::timestamp::parse_ms(envelope.get("Timestamp")?.as_str()?)
}

/// What an SQS body holds once its envelope, if any, is off.
enum Unwrapped {
    Request(Value),
    /// The envelope's Message, which nests deeper than the parser goes.
    TooDeep(String),
}

/// Strips the SNS envelope, if any, checking its TopicArn; a bare request only with raw delivery.
fn unwrap_envelope(outer: Value, policy: &InputPolicy) -> Result<Unwrapped, Undeliverable> {
    let Value::Object(map) = &outer else {
        return Err(Undeliverable::Unrecognised);
    };
    if map.contains_key("RequestType") {
        return if policy.raw_delivery { Ok(Unwrapped::Request(outer)) } else { Err(Undeliverable::RawRefused) };
    }
    let is_notification = map.get("Type").and_then(Value::as_str) == Some("Notification");
    let (Some(Value::String(topic)), Some(Value::String(message))) = (map.get("TopicArn"), map.get("Message")) else {
        return Err(Undeliverable::Unrecognised);
    };
    if !is_notification {
        return Err(Undeliverable::Unrecognised);
    }
    if !policy.topic_arns.iter().any(|allowed| allowed == topic) {
        return Err(Undeliverable::ForeignTopic(topic.clone()));
    }
    let inner: Value = match serde_json::from_str(message) {
        Ok(inner) => inner,
        Err(error) if too_deep(&error) => return Ok(Unwrapped::TooDeep(message.clone())),
        Err(error) => return Err(Undeliverable::MessageNotJson(describe_json_error(&error))),
    };
    if !inner.is_object() {
        return Err(Undeliverable::MessageNotJson("it is not an object".into()));
    }
    Ok(Unwrapped::Request(inner))
}

/// Whether the parser stopped at its recursion limit (the text may be fine JSON otherwise).
fn too_deep(error: &serde_json::Error) -> bool {
    error.is_syntax() && error.to_string().starts_with("recursion limit exceeded")
}

/// A request too deeply nested to parse: addressed from its top-level fields and answered
/// FAILED, since its properties cannot be read.
fn decode_too_deep(text: &str, policy: &InputPolicy) -> Result<Request, Undeliverable> {
    let Some(fields) = Shallow::read(text) else {
        return Err(Undeliverable::NotJson("a deeply nested value that is not a JSON object".into()));
    };
    let mut object = fields.into_object();
    if !object.contains_key("RequestType") && !object.contains_key("ResponseURL") {
        return Err(Undeliverable::Unrecognised);
    }
    let Address { key, logical_resource_id, response_url, kind, physical_resource_id } = address(&mut object, policy)?;
    let reason = format!(
        "the request nests deeper than {DEPTH_MAX} levels, so its properties cannot be read: flatten the resource's properties"
    );
    Ok(Request {
        key,
        logical_resource_id,
        response_url,
        fingerprint: Fingerprint::of_text(text),
        body: RequestBody::Malformed { reason, kind, physical_resource_id },
        published_ms: None,
        wait: WaitDeclared::None,
        old_wait: None,
    })
}

/// The top-level fields of a request an answer needs, read from text too deep to parse whole.
/// Every other value, at any depth, is skipped: serde_json skips a value it is not asked to
/// build (`IgnoredAny`) with a loop, not by recursion, so no depth is too deep, and it still
/// checks the value is well-formed JSON (`[}` is an error).
#[derive(Debug, Default, serde::Deserialize)]
struct Shallow {
    #[serde(rename = "RequestType", default)]
    request_type: Text,
    #[serde(rename = "ResponseURL", default)]
    response_url: Text,
    #[serde(rename = "StackId", default)]
    stack_id: Text,
    #[serde(rename = "RequestId", default)]
    request_id: Text,
    #[serde(rename = "LogicalResourceId", default)]
    logical_resource_id: Text,
    #[serde(rename = "PhysicalResourceId", default)]
    physical_resource_id: Text,
}

impl Shallow {
    /// The fields of `text`, if it is one well-formed JSON object.
    fn read(text: &str) -> Option<Self> {
        // An object at the top: serde would also take a struct from an array, by position.
        if !text.trim_start().starts_with('{') {
            return None;
        }
        serde_json::from_str(text).ok()
    }

    /// The string fields, as an object `address` reads.
    fn into_object(self) -> Map<String, Value> {
        [
            ("RequestType", self.request_type),
            ("ResponseURL", self.response_url),
            ("StackId", self.stack_id),
            ("RequestId", self.request_id),
            ("LogicalResourceId", self.logical_resource_id),
            ("PhysicalResourceId", self.physical_resource_id),
        ]
        .into_iter()
        .filter_map(|(name, Text(value))| Some((name.to_owned(), Value::String(value?))))
        .collect()
    }
}

/// A top-level value kept when it is a string; any other value is skipped without being built.
#[derive(Debug, Default)]
struct Text(Option<String>);

impl<'de> serde::Deserialize<'de> for Text {
    fn deserialize<D: serde::Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        use serde::de::{IgnoredAny, MapAccess, SeqAccess, Visitor};
        struct Skip;
        impl<'de> Visitor<'de> for Skip {
            type Value = Text;
            fn expecting(&self, formatter: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                formatter.write_str("any JSON value")
            }
            fn visit_str<E>(self, value: &str) -> Result<Text, E> {
                Ok(Text(Some(value.to_owned())))
            }
            fn visit_string<E>(self, value: String) -> Result<Text, E> {
                Ok(Text(Some(value)))
            }
            fn visit_bool<E>(self, _: bool) -> Result<Text, E> {
                Ok(Text(None))
            }
            fn visit_i64<E>(self, _: i64) -> Result<Text, E> {
                Ok(Text(None))
            }
            fn visit_u64<E>(self, _: u64) -> Result<Text, E> {
                Ok(Text(None))
            }
            fn visit_f64<E>(self, _: f64) -> Result<Text, E> {
                Ok(Text(None))
            }
            fn visit_unit<E>(self) -> Result<Text, E> {
                Ok(Text(None))
            }
            // One level in, then each element or entry is skipped whole (iteratively).
            fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Text, A::Error> {
                while seq.next_element::<IgnoredAny>()?.is_some() {}
                Ok(Text(None))
            }
            fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Text, A::Error> {
                while map.next_entry::<IgnoredAny, IgnoredAny>()?.is_some() {}
                Ok(Text(None))
            }
        }
        deserializer.deserialize_any(Skip)
    }
}

/// serde_json's recursion limit.
const DEPTH_MAX: usize = 128;

/// The request's key: its StackId, which must be a stack ARN, and its RequestId.
fn request_key(object: &Map<String, Value>) -> Result<RequestKey, Undeliverable> {
    let stack_id = required_id(object, "StackId", STACK_ID_BYTES_MAX)?;
    Ok(RequestKey {
        stack_id: StackArn::parse(&stack_id).ok_or(Undeliverable::NotAStack)?,
        request_id: required_id(object, "RequestId", REQUEST_ID_BYTES_MAX)?,
    })
}

fn required_id(object: &Map<String, Value>, field: &'static str, bytes_max: usize) -> Result<String, Undeliverable> {
    match object.get(field) {
        Some(Value::String(value)) if !value.is_empty() => {
            check_length(value, field, bytes_max)?;
            Ok(value.clone())
        }
        _ => Err(Undeliverable::Missing(field)),
    }
}

fn check_length(value: &str, field: &'static str, bytes_max: usize) -> Result<(), Undeliverable> {
    // Measured as serialized JSON, because that is what occupies the response body; counted
    // as serde_json writes it, without building the text.
    let bytes = serialized_len(value).saturating_sub(2);
    if bytes > bytes_max {
        return Err(Undeliverable::TooLong { field, bytes });
    }
    Ok(())
}

fn parse_request(mut request: Value) -> Result<CloudFormationCustomResourceRequest, String> {
    if let Some(object) = request.as_object_mut() {
        match object.get("RequestType") {
            Some(Value::String(kind)) if RequestKind::parse(kind).is_some() => {}
            Some(Value::String(kind)) => {
                return Err(format!("RequestType {kind:?} is not one of Create, Update, Delete"));
            }
            _ => return Err("RequestType is missing or not a string".into()),
        }
        // CloudFormation omits ResourceProperties when a resource declares none.
        object.entry("ResourceProperties").or_insert_with(|| Value::Object(Map::new()));
        if object.get("RequestType").and_then(Value::as_str) == Some("Update") {
            object.entry("OldResourceProperties").or_insert_with(|| Value::Object(Map::new()));
        }
        for field in ["ResourceProperties", "OldResourceProperties"] {
            if object.get(field).is_some_and(|value| !value.is_object()) {
                return Err(format!("{field} must be a JSON object"));
            }
        }
    }
    serde_json::from_value(request).map_err(|e| format!("request is malformed: {e}"))
}

/// The bytes serde_json writes for `value`, counted rather than kept.
fn serialized_len(value: &str) -> usize {
    struct Count(usize);
    impl std::io::Write for Count {
        fn write(&mut self, bytes: &[u8]) -> std::io::Result<usize> {
            self.0 += bytes.len();
            Ok(bytes.len())
        }
        fn flush(&mut self) -> std::io::Result<()> {
            Ok(())
        }
    }
    let mut count = Count(0);
    // Counting cannot fail, and a string always serializes.
    let _ = serde_json::to_writer(&mut count, value);
    count.0
}

/// The error's category and position, never the offending text.
fn describe_json_error(error: &serde_json::Error) -> String {
    format!("{:?} error at line {} column {}", error.classify(), error.line(), error.column())
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
mod tests {
    use super::*;

    #[test]
    fn lengths_are_counted_as_serialized_json() {
        for text in ["", "plain", "a\"b\\c", "\u{1}\n\t", "é→😀"] {
            assert_eq!(serialized_len(text), serde_json::to_string(text).expect("a string").len(), "{text:?}");
        }
        assert_eq!(serialized_len("a\"\u{1}"), 2 + 1 + 2 + 6);
    }

    #[test]
    fn a_stack_id_must_be_a_stack_arn() {
        for good in [
            "arn:aws:cloudformation:us-east-1:123456789012:stack/demo/guid",
            "arn:aws-cn:cloudformation:cn-north-1:123456789012:stack/My-Stack-1/5b0a3c20-5a1e-11ef-9d3f-0a1b2c3d4e5f",
            "arn:aws-us-gov:cloudformation:us-gov-west-1:123456789012:stack/s/g",
        ] {
            let arn = StackArn::parse(good).unwrap_or_else(|| panic!("{good}"));
            assert_eq!(arn.as_str(), good);
        }
        assert_eq!(
            StackArn::parse("arn:aws:cloudformation:eu-west-1:123456789012:stack/s/g")
                .map(|arn| arn.region().to_owned()),
            Some("eu-west-1".to_owned())
        );
        for bad in [
            "control#active",
            "",
            "s",
            "arn:aws:cloudformation:us-east-1:123456789012:stack/demo",
            "arn:aws:cloudformation:us-east-1:123456789012:stack//guid",
            "arn:aws:cloudformation:us-east-1:123456789012:stack/demo/guid/more",
            "arn:aws:cloudformation:us-east-1:12345:stack/demo/guid",
            "arn:aws:sqs:us-east-1:123456789012:stack/demo/guid",
            "arn:aws:cloudformation:us-east-1.evil:123456789012:stack/demo/guid",
            "arn:aws:cloudformation:us-east-1:123456789012:stack/1demo/guid",
            "arn:aws:cloudformation:us-east-1:123456789012:changeSet/demo/guid",
            "arn:aws:cloudformation:us-east-1:123456789012:stack/de mo/guid",
        ] {
            assert_eq!(StackArn::parse(bad), None, "{bad:?}");
        }
    }

    #[test]
    fn an_envelope_carries_its_publish_time() {
        let request = json!({
            "RequestType": "Create",
            "ResponseURL": "https://cloudformation-custom-resource-response-useast1.s3.amazonaws.com/k?X-Amz-Signature=x",
            "StackId": "arn:aws:cloudformation:us-east-1:123456789012:stack/demo/guid",
            "RequestId": "r",
            "LogicalResourceId": "L",
            "ResourceType": "Custom::Echo",
            "ResourceProperties": {},
        });
        let policy = InputPolicy {
            topic_arns: vec!["arn:aws:sns:us-east-1:123456789012:t".into()],
            raw_delivery: true,
            urls: UrlPolicy::new(vec![]),
        };
        let envelope = |timestamp: Value| {
            json!({"Type": "Notification", "TopicArn": "arn:aws:sns:us-east-1:123456789012:t", "Message": request.to_string(), "Timestamp": timestamp})
                .to_string()
        };
        let decoded = decode(Some(&envelope(json!("2026-12-01T10:20:57.123Z"))), &policy).expect("decoded");
        assert_eq!(decoded.published_ms, Some(1_796_120_457_123));
        let unreadable = decode(Some(&envelope(json!("yesterday"))), &policy).expect("still decoded");
        assert_eq!(unreadable.published_ms, None, "an unreadable Timestamp counts as none");
        let bare = decode(Some(&request.to_string()), &policy).expect("raw delivery");
        assert_eq!(bare.published_ms, None);
    }
    use crate::response_url::AllowedPrefix;
    use serde_json::json;

    const URL: &str =
        "https://cloudformation-custom-resource-response-useast1.s3.amazonaws.com/key?X-Amz-Signature=s3cr3t";
    const TOPIC: &str = "arn:aws:sns:us-east-1:123456789012:cfn-once";

    fn policy() -> InputPolicy {
        InputPolicy {
            topic_arns: vec![TOPIC.into()],
            raw_delivery: true,
            urls: UrlPolicy::new(vec![AllowedPrefix::parse("http://127.0.0.1:5000/r/").expect("prefix")]),
        }
    }

    fn create() -> Value {
        json!({
            "RequestType": "Create",
            "ServiceToken": TOPIC,
            "ResponseURL": URL,
            "StackId": "arn:aws:cloudformation:us-east-1:123456789012:stack/demo/guid",
            "RequestId": "e3f1c1d4-0000-4000-8000-000000000001",
            "LogicalResourceId": "Thing",
            "ResourceType": "Custom::Echo",
            "ResourceProperties": {"ServiceToken": TOPIC, "Size": "5"}
        })
    }

    fn envelope(message: &Value, topic: &str) -> String {
        json!({"Type": "Notification", "TopicArn": topic, "Message": message.to_string(), "MessageId": "m"}).to_string()
    }

    #[test]
    fn raw_and_enveloped_decode_to_the_same_request() {
        let raw = decode(Some(&create().to_string()), &policy()).expect("raw");
        let wrapped = decode(Some(&envelope(&create(), TOPIC)), &policy()).expect("envelope");
        assert_eq!(raw.fingerprint, wrapped.fingerprint);
        assert_eq!(raw.key, wrapped.key);
        assert_eq!(raw.kind(), Some(RequestKind::Create));
        assert_eq!(raw.resource_type(), Some("Custom::Echo"));
        assert!(matches!(raw.body, RequestBody::Valid(_)));
    }

    #[test]
    fn undeliverable_table() {
        let check = |body: Option<String>, expected: Undeliverable| {
            let got = decode(body.as_deref(), &policy()).map(|_| ()).expect_err("must be undeliverable");
            assert_eq!(got, expected);
        };
        check(None, Undeliverable::NoBody);
        check(Some("{not json".into()), Undeliverable::NotJson("Syntax error at line 1 column 2".into()));
        check(Some("[1]".into()), Undeliverable::Unrecognised);
        check(Some(json!({"hello": 1}).to_string()), Undeliverable::Unrecognised);
        let foreign = "arn:aws:sns:us-east-1:999999999999:other";
        check(Some(envelope(&create(), foreign)), Undeliverable::ForeignTopic(foreign.into()));
        let mut no_url = create();
        no_url.as_object_mut().expect("object").remove("ResponseURL");
        check(Some(no_url.to_string()), Undeliverable::Missing("ResponseURL"));
        let mut no_stack = create();
        no_stack["StackId"] = json!("");
        check(Some(no_stack.to_string()), Undeliverable::Missing("StackId"));
        let mut long = create();
        long["RequestId"] = json!("r".repeat(300));
        check(Some(long.to_string()), Undeliverable::TooLong { field: "RequestId", bytes: 300 });
        let mut evil = create();
        evil["ResponseURL"] = json!("https://evil.example.com/x?X-Amz-Signature=s3cr3t");
        check(Some(evil.to_string()), Undeliverable::Url(UrlRefused::Host("evil.example.com".into())));
    }

    #[test]
    fn malformed_but_addressable_requests_are_answered() {
        let mut bad_type = create();
        bad_type["RequestType"] = json!("Upsert");
        let request = decode(Some(&bad_type.to_string()), &policy()).expect("addressable");
        let RequestBody::Malformed { reason, kind, .. } = &request.body else { panic!("expected malformed") };
        assert_eq!(kind, &None);
        assert!(reason.contains("Upsert"), "{reason}");

        let mut no_type = create();
        no_type.as_object_mut().expect("object").remove("ResourceType");
        let request = decode(Some(&no_type.to_string()), &policy()).expect("addressable");
        let RequestBody::Malformed { reason, kind, .. } = &request.body else { panic!("expected malformed") };
        assert_eq!(kind, &Some(RequestKind::Create));
        assert!(reason.contains("ResourceType"), "{reason}");
        assert!(!reason.contains("s3cr3t"));
    }

    #[test]
    fn the_url_is_not_in_the_parsed_request() {
        let request = decode(Some(&create().to_string()), &policy()).expect("valid");
        let printed = format!("{request:?}");
        assert!(!printed.contains("s3cr3t") && !printed.contains("custom-resource-response"), "{printed}");
        assert_eq!(request.response_url.expose_secret(), URL);
    }

    #[test]
    fn service_timeout_and_reserved_properties() {
        let mut with_timeout = create();
        with_timeout["ResourceProperties"]["ServiceTimeout"] = json!("120");
        let request = decode(Some(&with_timeout.to_string()), &policy()).expect("valid");
        assert_eq!(request.service_timeout_s(), Some(120));
        let stripped = provider_properties(&with_timeout["ResourceProperties"]);
        assert_eq!(stripped, json!({"Size": "5"}));
    }

    #[test]
    fn bare_requests_need_raw_delivery_configured() {
        let envelopes_only = InputPolicy { raw_delivery: false, ..policy() };
        let raw = decode(Some(&create().to_string()), &envelopes_only).map(|_| ());
        assert_eq!(raw, Err(Undeliverable::RawRefused), "anyone who may send to the queue could forge one");
        assert!(decode(Some(&envelope(&create(), TOPIC)), &envelopes_only).is_ok());
    }

    /// `depth` nested arrays around a string.
    fn nested(depth: usize) -> Value {
        let text = format!("{}\"deep\"{}", "[".repeat(depth), "]".repeat(depth));
        serde_json::from_str::<Value>(&text).unwrap_or(Value::Null)
    }

    #[test]
    fn a_request_nested_too_deep_to_parse_is_still_answered() {
        let deep = format!("{}1{}", "[".repeat(200), "]".repeat(200));
        let text = create().to_string().replacen(r#""Size":"5""#, &format!(r#""Size":{deep}"#), 1);
        assert!(serde_json::from_str::<Value>(&text).is_err(), "beyond the parser's limit");
        for body in [text.clone(), json!({"Type": "Notification", "TopicArn": TOPIC, "Message": text}).to_string()] {
            let request = decode(Some(&body), &policy()).expect("addressable despite the depth");
            assert_eq!(request.key.request_id, "e3f1c1d4-0000-4000-8000-000000000001");
            assert_eq!(request.response_url.expose_secret(), URL);
            let RequestBody::Malformed { reason, kind, .. } = &request.body else { panic!("expected malformed") };
            assert_eq!(kind, &Some(RequestKind::Create));
            assert!(reason.contains("nests deeper than 128 levels"), "{reason}");
        }
        assert!(nested(100).is_array(), "depths within the limit parse as usual");
    }

    #[test]
    fn a_request_nested_100000_levels_deep_is_answered_failed_and_malformed_nesting_is_refused() {
        let with = |size: &str| create().to_string().replacen(r#""Size":"5""#, &format!(r#""Size":{size}"#), 1);
        let envelope = |text: &str| json!({"Type": "Notification", "TopicArn": TOPIC, "Message": text}).to_string();
        let arrays = format!("{}1{}", "[".repeat(100_000), "]".repeat(100_000));
        let objects = format!("{}1{}", r#"{"a":"#.repeat(100_000), "}".repeat(100_000));
        for deep in [arrays, objects] {
            let text = with(&deep);
            for body in [text.clone(), envelope(&text)] {
                let request = decode(Some(&body), &policy()).expect("addressable at any depth");
                assert_eq!(request.response_url.expose_secret(), URL);
                let RequestBody::Malformed { reason, .. } = &request.body else { panic!("expected malformed") };
                assert!(reason.contains("nests deeper than 128 levels"), "{reason}");
            }
        }
        // Brackets that do not match, shallow or deep: not JSON, so nobody can be answered.
        let shallow = with("[}");
        let deep = with(&format!("{}}}", "[".repeat(100_000)));
        for text in [shallow, deep] {
            for body in [text.clone(), envelope(&text)] {
                let refused = decode(Some(&body), &policy()).expect_err("not JSON");
                assert!(matches!(refused, Undeliverable::NotJson(_) | Undeliverable::MessageNotJson(_)), "{refused:?}");
            }
        }
        // A deep array at the top is no request, even one whose elements look like its fields.
        let array = format!(r#"["Create","{URL}",{}1{}]"#, "[".repeat(200), "]".repeat(200));
        assert!(decode(Some(&array), &policy()).is_err());
    }

    #[test]
    fn missing_resource_properties_become_empty() {
        let mut bare = create();
        bare.as_object_mut().expect("object").remove("ResourceProperties");
        let request = decode(Some(&bare.to_string()), &policy()).expect("valid");
        assert!(matches!(request.body, RequestBody::Valid(_)));
    }
}
