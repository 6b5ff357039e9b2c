//! Decoding in stages: the body as JSON, the SNS envelope (its TopicArn checked) or a bare
//! request where raw delivery is configured, the address, the wait condition handles taken out
//! of the properties, and the request parsed, or answered FAILED with why it could not be.

use aws_lambda_events::event::cloudformation::CloudFormationCustomResourceRequest;
use serde_json::{Map, Value};

use super::address::{Address, address};
use super::deep::decode_too_deep;
use super::{InputPolicy, Request, RequestBody, RequestKind, Undeliverable};
use crate::fingerprint::Fingerprint;
use crate::wait_condition;

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
    let (unwrapped, topic_arn) = unwrap_envelope(outer, policy)?;
    let privileged = policy.privileged(topic_arn.as_deref());
    let mut request = match unwrapped {
        Unwrapped::Request(request) => request,
        Unwrapped::TooDeep(message) => {
            return decode_too_deep(&message, policy).map(|request| Request {
                published_ms,
                topic_arn,
                privileged,
                ..request
            });
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
    Ok(Request {
        key,
        logical_resource_id,
        response_url,
        fingerprint,
        body,
        published_ms,
        wait,
        old_wait,
        topic_arn,
        privileged,
    })
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
/// Returns the envelope's TopicArn beside what it held (`None` for a bare request).
fn unwrap_envelope(outer: Value, policy: &InputPolicy) -> Result<(Unwrapped, Option<String>), Undeliverable> {
    let Value::Object(map) = &outer else {
        return Err(Undeliverable::Unrecognised);
    };
    if map.contains_key("RequestType") {
        return if policy.raw_delivery {
            Ok((Unwrapped::Request(outer), None))
        } else {
            Err(Undeliverable::RawRefused)
        };
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
        Err(error) if too_deep(&error) => return Ok((Unwrapped::TooDeep(message.clone()), Some(topic.clone()))),
        Err(error) => return Err(Undeliverable::MessageNotJson(describe_json_error(&error))),
    };
    if !inner.is_object() {
        return Err(Undeliverable::MessageNotJson("it is not an object".into()));
    }
    Ok((Unwrapped::Request(inner), Some(topic.clone())))
}

/// Whether the parser stopped at its recursion limit (the text may be fine JSON otherwise).
fn too_deep(error: &serde_json::Error) -> bool {
    error.is_syntax() && error.to_string().starts_with("recursion limit exceeded")
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

/// The error's category and position, never the offending text.
fn describe_json_error(error: &serde_json::Error) -> String {
    format!("{:?} error at line {} column {}", error.classify(), error.line(), error.column())
}
