//! Where a request's answer goes, and what a FAILED answer must echo, read from its top-level
//! fields: one reading for every request, however deep the rest of it nests, with every
//! identifier bounded so that any answer fits in 4096 bytes.

use serde_json::{Map, Value};

use super::key::{RequestKey, StackArn};
use super::{InputPolicy, PHYSICAL_ID_BYTES_MAX, RequestKind, Undeliverable};
use crate::response_url::ResponseUrl;

/// Upper bounds on identifiers, as serialized JSON, so any answer fits in 4096 bytes.
const STACK_ID_BYTES_MAX: usize = 512;
const REQUEST_ID_BYTES_MAX: usize = 256;
const LOGICAL_ID_BYTES_MAX: usize = 512;

/// Where a request's answer goes, and what a FAILED answer must echo, read from its top-level
/// fields.
pub(super) struct Address {
    pub(super) key: RequestKey,
    pub(super) logical_resource_id: String,
    pub(super) response_url: ResponseUrl,
    /// The RequestType, if readable; it decides the answer's PhysicalResourceId.
    pub(super) kind: Option<RequestKind>,
    /// The PhysicalResourceId sent, if any, so a FAILED answer keeps it.
    pub(super) physical_resource_id: Option<String>,
}

/// Reads the [`Address`] from a request's top-level fields, or says why nobody can be answered.
/// The ResponseURL is taken out of `object`, so no later parse error or Debug print of the
/// request can contain it.
pub(super) fn address(object: &mut Map<String, Value>, policy: &InputPolicy) -> Result<Address, Undeliverable> {
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

/// The bytes serde_json writes for `value`, counted rather than kept.
pub(super) fn serialized_len(value: &str) -> usize {
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
