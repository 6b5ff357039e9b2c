//! Lambda's SQS event made readable as JSON before anything deserializes it, so that bytes one
//! record carries that are not JSON text (not UTF-8, a lone surrogate) fail that record alone.
//!
//! `lambda_runtime` deserializes the invocation's payload with `serde_json` before the handler
//! sees it, and `serde_json` refuses the whole payload when one string in it is not UTF-8: the
//! whole invocation would fail, and every record of the batch come back with the bad one. This
//! layer sits between the Runtime API client and that deserialization. A payload that is JSON
//! passes untouched (the usual case: one extra parse). Otherwise it finds the `Records` array's
//! elements by their brackets and quotes alone, without reading any string, keeps every record
//! that is JSON as it is, and puts in place of each other one its identity (messageId,
//! receiptHandle, eventSourceARN, attributes, read with `serde_json` skipping the body unread)
//! marked unreadable ([`UNREADABLE`]), which `sqs_records` then treats as any record it cannot
//! read. A payload without a `Records` array passes untouched, and fails as a whole.

use std::collections::BTreeMap;
use std::ops::Range;
use std::task::{Context, Poll};

use lambda_runtime::LambdaInvocation;
use lambda_runtime::tower::{Layer, Service};
use serde::{Deserialize, Serialize};

/// The member naming why a record stands for one that could not be read. Lambda's records have
/// no such member, so a record carrying it was put there by this layer.
pub const UNREADABLE: &str = "cfnOnceUnreadable";

/// The layer: wraps the runtime's deserializing service.
#[derive(Debug, Clone, Copy, Default)]
pub struct ReadableLayer;

impl<S> Layer<S> for ReadableLayer {
    type Service = Readable<S>;

    fn layer(&self, inner: S) -> Self::Service {
        Readable(inner)
    }
}

/// The service [`ReadableLayer`] makes.
#[derive(Debug, Clone)]
pub struct Readable<S>(S);

impl<S> Service<LambdaInvocation> for Readable<S>
where
    S: Service<LambdaInvocation>,
{
    type Response = S::Response;
    type Error = S::Error;
    type Future = S::Future;

    fn poll_ready(&mut self, context: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        self.0.poll_ready(context)
    }

    fn call(&mut self, mut invocation: LambdaInvocation) -> Self::Future {
        if let Some(readable) = readable(&invocation.body) {
            invocation.body = readable.into();
        }
        self.0.call(invocation)
    }
}

/// The payload with each record that is not JSON text replaced by its marked identity; `None`
/// when the payload is JSON already, or has no `Records` array to split.
pub fn readable(payload: &[u8]) -> Option<Vec<u8>> {
    if is_json_text(payload) {
        return None;
    }
    let spans = record_spans(payload)?;
    let mut out = b"{\"Records\":[".to_vec();
    for (index, span) in spans.into_iter().enumerate() {
        if index > 0 {
            out.push(b',');
        }
        let record = &payload[span];
        if is_json_text(record) {
            out.extend_from_slice(record);
        } else {
            let identity = serde_json::from_slice::<Identity>(record).unwrap_or_default();
            let stub = Stub {
                identity,
                body: String::from_utf8_lossy(record).into_owned(),
                why: "the record is not JSON text (a string in it is not UTF-8 or holds a lone surrogate)",
            };
            out.extend_from_slice(&serde_json::to_vec(&stub).ok()?);
        }
    }
    out.extend_from_slice(b"]}");
    Some(out)
}

/// Whether `bytes` parse as a `serde_json::Value`, which reads every string.
fn is_json_text(bytes: &[u8]) -> bool {
    serde_json::from_slice::<serde_json::Value>(bytes).is_ok()
}

/// What of a record names it, read without reading its body.
#[derive(Debug, Default, Deserialize, Serialize)]
#[serde(default, rename_all = "camelCase")]
struct Identity {
    #[serde(skip_serializing_if = "Option::is_none")]
    message_id: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    receipt_handle: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    event_source: Option<String>,
    #[serde(rename = "eventSourceARN", skip_serializing_if = "Option::is_none")]
    event_source_arn: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    aws_region: Option<String>,
    attributes: BTreeMap<String, String>,
}

/// What stands for an unreadable record.
#[derive(Serialize)]
struct Stub {
    #[serde(flatten)]
    identity: Identity,
    /// The record as text, for the DLQ.
    body: String,
    #[serde(rename = "cfnOnceUnreadable")]
    why: &'static str,
}

/// The byte ranges of the elements of the top-level object's `Records` array, found by
/// brackets, commas and quotes alone: no string's content is read, so bytes that are not UTF-8
/// inside one record do not hide the others. `None` when there is no such array or the
/// brackets do not balance.
fn record_spans(text: &[u8]) -> Option<Vec<Range<usize>>> {
    let (mut depth, mut index, mut last_end) = (0usize, 0usize, 0usize);
    let mut key: Option<Range<usize>> = None;
    let (mut in_records, mut found) = (false, false);
    let mut start: Option<usize> = None;
    let mut spans = Vec::new();
    while index < text.len() {
        let byte = text[index];
        if byte.is_ascii_whitespace() {
            index += 1;
            continue;
        }
        if in_records && depth == 2 && start.is_none() && byte != b',' && byte != b']' {
            start = Some(index);
        }
        match byte {
            b'"' => {
                let end = string_end(text, index)?;
                if depth == 1 {
                    key = Some(index + 1..end);
                }
                index = end + 1;
                last_end = index;
                continue;
            }
            b'[' if depth == 1 && !found && key.as_ref().is_some_and(|key| &text[key.clone()] == b"Records") => {
                in_records = true;
                found = true;
                depth += 1;
            }
            b'{' | b'[' => depth += 1,
            b']' if in_records && depth == 2 => {
                spans.extend(start.take().map(|start| start..last_end));
                in_records = false;
                depth -= 1;
            }
            b'}' | b']' => depth = depth.checked_sub(1)?,
            b',' if in_records && depth == 2 => spans.extend(start.take().map(|start| start..last_end)),
            _ => {}
        }
        index += 1;
        last_end = index;
    }
    (found && depth == 0 && !in_records).then_some(spans)
}

/// The index of the quote closing the string that opens at `open`.
fn string_end(text: &[u8], open: usize) -> Option<usize> {
    let mut index = open + 1;
    while index < text.len() {
        match text[index] {
            b'"' => return Some(index),
            b'\\' => index += 2,
            _ => index += 1,
        }
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::{Value, json};

    fn record(id: &str, body: &[u8]) -> Vec<u8> {
        let mut record = format!(
            r#"{{"messageId": "{id}", "receiptHandle": "handle-{id}", "attributes": {{"ApproximateReceiveCount": "3"}}, "eventSourceARN": "arn:aws:sqs:us-east-1:123456789012:q", "body": ""#
        )
        .into_bytes();
        record.extend_from_slice(body);
        record.extend_from_slice(br#""}"#);
        record
    }

    fn event(records: &[Vec<u8>]) -> Vec<u8> {
        let mut event = b"{ \"Records\" : [ ".to_vec();
        event.extend_from_slice(&records.join(&b" , "[..]));
        event.extend_from_slice(b" ] }\n");
        event
    }

    #[test]
    fn json_passes_untouched() {
        assert_eq!(readable(&event(&[record("a", b"{}"), record("b", b"x")])), None);
        assert_eq!(readable(b"not json at all"), None, "nothing to split: it fails as a whole");
    }

    #[test]
    fn a_record_that_is_not_utf8_is_replaced_by_its_marked_identity_alone() {
        let good = record("good", br#"{\"RequestType\":\"Create\"}"#);
        for bad_body in [&b"\xff\xfe"[..], br"\ud800", b"ok \xc3"] {
            let payload = event(&[record("bad", bad_body), good.clone(), b"[1, \"\xff\"]".to_vec()]);
            let made = readable(&payload).expect("rewritten");
            let made: Value = serde_json::from_slice(&made).expect("JSON now");
            let records = made["Records"].as_array().expect("records");
            assert_eq!(records.len(), 3);
            assert_eq!(records[1], serde_json::from_slice::<Value>(&good).expect("good"), "the good record as it was");
            let bad = &records[0];
            assert_eq!(bad["messageId"], "bad");
            assert_eq!(bad["receiptHandle"], "handle-bad");
            assert_eq!(bad["eventSourceARN"], "arn:aws:sqs:us-east-1:123456789012:q");
            assert_eq!(bad["attributes"], json!({"ApproximateReceiveCount": "3"}));
            assert!(bad[UNREADABLE].as_str().is_some_and(|why| why.contains("not JSON text")), "{bad}");
            assert!(bad["body"].as_str().is_some_and(|body| body.contains("handle-bad")), "{bad}");
            assert!(records[2][UNREADABLE].is_string(), "an element that is not a record: marked, without an id");
            assert_eq!(records[2].get("messageId"), None);
        }
    }

    #[test]
    fn spans_follow_brackets_and_quotes_not_content() {
        let text = br#"{"x": "Records", "Records": [ {"a": "],[\"{"}, 7 ,"s" ], "y": [1]}"#;
        let spans = record_spans(text).expect("spans");
        let parts: Vec<&[u8]> = spans.into_iter().map(|span| &text[span]).collect();
        assert_eq!(parts, [&br#"{"a": "],[\"{"}"#[..], b"7", br#""s""#]);
        assert_eq!(record_spans(br#"{"Records": [}"#), None, "unbalanced");
        assert_eq!(record_spans(br#"{"Other": []}"#), None, "no Records");
        assert_eq!(record_spans(br#"{"Records": []}"#), Some(vec![]));
    }
}
