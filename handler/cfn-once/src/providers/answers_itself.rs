//! Functions that answer CloudFormation by themselves (`cfn-response`, crhelper): they PUT their
//! answer to the event's ResponseURL.
//!
//! Such a function is never given CloudFormation's ResponseURL. Each execution gets instead a
//! presigned PUT URL of a fresh object of cfn-once's own bucket in this region
//! (`CFN_ONCE_ANSWER_BUCKET`, key `answers/<32 random hex>`), so an execution that lost its lease
//! and PUTs late writes an object no later execution reads. After the Invoke returns, cfn-once
//! reads that object; when the function has not PUT it yet (it may answer after its invocation
//! ends), the request waits for it as a long-running provider's does: the object's place (its
//! bucket, that bucket's region and its key, an [`AnswerObject`]) is the stored state, and
//! whichever region holds the due poll reads the object *where it is*, in the other region's
//! bucket if need be. What lands there is checked (at most 4096 bytes of JSON, for this
//! request's StackId, RequestId and LogicalResourceId, a Status of SUCCESS or FAILED, a
//! PhysicalResourceId) and becomes the answer cfn-once commits and PUTs to CloudFormation once,
//! as any provider's.

use std::time::Duration;

use async_trait::async_trait;
use cfn_once_core::provider::{ProviderContext, ProviderError, ProviderOutput, Step};
use cfn_once_core::response::BODY_BYTES_MAX;
use serde_json::{Map, Value};

/// How long a presigned URL stays valid: a request's latest deadline (CloudFormation waits at
/// most an hour, `CFN_ONCE_DEADLINE_CEILING_S`). A URL signed with the function's temporary
/// credentials also ends when they do.
pub const UPLOAD_URL_VALID_FOR: Duration = Duration::from_secs(3_600);

/// The prefix of every answer object; the template's lifecycle rule expires them.
pub const ANSWER_PREFIX: &str = "answers/";

/// A presigned PUT URL of one answer object: a bearer credential for that object until it
/// expires, so it is kept out of every log line and error (`Debug` shows none of it).
#[derive(Clone, PartialEq, Eq)]
pub struct UploadUrl(String);

impl UploadUrl {
    /// Wraps a presigned URL.
    pub fn new(url: String) -> Self {
        Self(url)
    }

    /// The URL itself, for the function's event only.
    pub fn expose_secret(&self) -> &str {
        &self.0
    }
}

impl std::fmt::Debug for UploadUrl {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("UploadUrl(<redacted>)")
    }
}

/// Why the answer bucket could not be used.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum DropError {
    /// Worth trying again: a 5xx, throttling, a network failure, a timeout.
    #[error("{0}")]
    Transient(String),
    /// Refused for credentials that expired and that nothing in this process refreshes
    /// (`aws::Refresh`): a later invocation tries again (`ProviderError::Deferred`).
    #[error("{0}")]
    Deferred(String),
    /// Will not work by trying again: access denied, no such bucket, credentials missing.
    #[error("{0}")]
    Permanent(String),
}

/// Where one execution's answer lands: an object of the answer bucket of one region. The wait
/// stores it, so that a poll from either region reads the object where it is.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AnswerObject {
    /// The answer bucket the function was given a URL of.
    pub bucket: String,
    /// That bucket's region: the region that ran the function.
    pub region: String,
    /// The object's key (`answers/` and 32 random hex digits).
    pub key: String,
}

/// Where functions that answer by themselves PUT their answers (the port; `S3AnswerDrop` in
/// `providers::s3_answers` is cfn-once's bucket of this region, reading the other's too).
#[async_trait]
pub trait AnswerDrop: Send + Sync + std::fmt::Debug {
    /// This region's answer bucket, where [`AnswerDrop::upload_url`] points.
    fn bucket(&self) -> &str;
    /// This region.
    fn region(&self) -> &str;
    /// A URL a function can PUT the object `key` of this region's bucket to, for `valid_for`.
    async fn upload_url(&self, key: &str, valid_for: Duration) -> Result<UploadUrl, DropError>;
    /// The object `object` of either region's bucket (its first `limit` bytes and one more, so
    /// that a longer one shows), or `None` while nobody has PUT it.
    async fn read(&self, object: &AnswerObject, limit: usize) -> Result<Option<Vec<u8>>, DropError>;
}

/// A fresh key for one execution's answer: 128 random bits from the process's cryptographic
/// generator (aws-lc, as TLS uses), so nobody can guess another execution's object.
pub fn new_key() -> Result<String, ProviderError> {
    let mut bytes = [0u8; 16];
    rustls::crypto::aws_lc_rs::default_provider()
        .secure_random
        .fill(&mut bytes)
        .map_err(|_| ProviderError::Transient("no random bytes for the answer's object key".into()))?;
    Ok(bytes.iter().fold(String::from(ANSWER_PREFIX), |mut key, byte| {
        key.push_str(&format!("{byte:02x}"));
        key
    }))
}

/// The ids an answer must carry: the request's.
#[derive(Debug, Clone, Copy)]
pub struct ForRequest<'a> {
    /// CloudFormation's StackId.
    pub stack_id: &'a str,
    /// CloudFormation's RequestId.
    pub request_id: &'a str,
    /// The resource's logical id.
    pub logical_resource_id: &'a str,
}

impl<'a> ForRequest<'a> {
    /// The ids of the request `ctx` runs.
    pub fn of(ctx: &'a ProviderContext) -> Self {
        Self { stack_id: &ctx.stack_id, request_id: &ctx.request_id, logical_resource_id: &ctx.logical_resource_id }
    }
}

/// What `function` PUT, read as its answer to `request`.
pub fn answer_from(request: ForRequest<'_>, function: &str, bytes: &[u8]) -> Result<Step, ProviderError> {
    let refuse = |why: String| Err(ProviderError::Failed(format!("{function} answered by itself, but {why}")));
    if bytes.len() > BODY_BYTES_MAX {
        return refuse(format!("its answer is over CloudFormation's {BODY_BYTES_MAX}-byte limit"));
    }
    let answer = match serde_json::from_slice::<Value>(bytes) {
        Ok(Value::Object(answer)) => answer,
        Ok(_) => return refuse("its answer is not a JSON object".into()),
        Err(error) => return refuse(format!("its answer is not JSON: {error}")),
    };
    for (field, expected) in [
        ("StackId", request.stack_id),
        ("RequestId", request.request_id),
        ("LogicalResourceId", request.logical_resource_id),
    ] {
        if answer.get(field).and_then(Value::as_str) != Some(expected) {
            return refuse(format!("its answer's {field} is not this request's"));
        }
    }
    let text = |field: &str| answer.get(field).and_then(Value::as_str).filter(|text| !text.is_empty());
    let Some(physical_resource_id) = text("PhysicalResourceId") else {
        return refuse("its answer has no PhysicalResourceId".into());
    };
    match answer.get("Status").and_then(Value::as_str) {
        Some("SUCCESS") => {}
        Some("FAILED") => {
            let reason = text("Reason").unwrap_or("(it gave no Reason)");
            return Err(ProviderError::Failed(format!("{function} answered FAILED: {reason}")));
        }
        _ => return refuse("its answer's Status is neither SUCCESS nor FAILED".into()),
    }
    let data = match answer.get("Data") {
        None | Some(Value::Null) => Map::new(),
        Some(Value::Object(data)) => data.clone(),
        Some(_) => return refuse("its answer's Data is not an object".into()),
    };
    let no_echo = match answer.get("NoEcho") {
        None | Some(Value::Null) => false,
        Some(Value::Bool(flag)) => *flag,
        // cfnresponse.py sends the flag as given; a string "true" is what CloudFormation reads too.
        Some(Value::String(flag)) => flag.eq_ignore_ascii_case("true"),
        Some(_) => return refuse("its answer's NoEcho is not a boolean".into()),
    };
    let mut output = ProviderOutput::with_id(physical_resource_id);
    output.data = data.into_iter().collect();
    output.no_echo = no_echo;
    Ok(Step::Done(output))
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    fn ctx() -> ForRequest<'static> {
        ForRequest {
            stack_id: "arn:aws:cloudformation:us-east-1:123456789012:stack/s/1",
            request_id: "req-1",
            logical_resource_id: "Greeting",
        }
    }

    fn answer(changes: Value) -> Vec<u8> {
        let mut answer = json!({
            "Status": "SUCCESS",
            "Reason": "See the details in CloudWatch Log Stream: x",
            "PhysicalResourceId": "greeting-ada",
            "StackId": "arn:aws:cloudformation:us-east-1:123456789012:stack/s/1",
            "RequestId": "req-1",
            "LogicalResourceId": "Greeting",
            "NoEcho": false,
            "Data": {"Greeting": "hello, ada"},
        });
        for (field, value) in changes.as_object().expect("an object") {
            match value {
                Value::Null => answer.as_object_mut().expect("an object").remove(field),
                value => answer.as_object_mut().expect("an object").insert(field.clone(), value.clone()),
            };
        }
        answer.to_string().into_bytes()
    }

    #[test]
    fn a_cfn_response_answer_for_this_request_is_the_answer() {
        let Ok(Step::Done(output)) = answer_from(ctx(), "greeter", &answer(json!({}))) else {
            panic!("a valid answer is taken");
        };
        assert_eq!(output.physical_resource_id.as_deref(), Some("greeting-ada"));
        assert_eq!(output.data["Greeting"], json!("hello, ada"));
        assert!(!output.no_echo);
        let Ok(Step::Done(masked)) = answer_from(ctx(), "greeter", &answer(json!({"NoEcho": "true"}))) else {
            panic!("NoEcho as a string");
        };
        assert!(masked.no_echo);
    }

    #[test]
    fn a_failed_answer_is_failed_with_its_reason() {
        let failed = answer_from(ctx(), "greeter", &answer(json!({"Status": "FAILED", "Reason": "Name is required"})));
        assert_eq!(failed.err(), Some(ProviderError::Failed("greeter answered FAILED: Name is required".into())));
    }

    #[test]
    fn an_answer_for_another_request_or_malformed_or_too_long_is_refused_naming_why() {
        for (bytes, says) in [
            (answer(json!({"RequestId": "req-0"})), "its answer's RequestId is not this request's"),
            (answer(json!({"StackId": null})), "its answer's StackId is not this request's"),
            (answer(json!({"LogicalResourceId": "Other"})), "its answer's LogicalResourceId is not this request's"),
            (answer(json!({"PhysicalResourceId": ""})), "its answer has no PhysicalResourceId"),
            (answer(json!({"Status": "DONE"})), "Status is neither SUCCESS nor FAILED"),
            (answer(json!({"Data": [1]})), "its answer's Data is not an object"),
            (answer(json!({"NoEcho": 1})), "NoEcho is not a boolean"),
            (answer(json!({"Data": {"Blob": "x".repeat(4_100)}})), "over CloudFormation's 4096-byte limit"),
            (b"[]".to_vec(), "its answer is not a JSON object"),
            (b"<Error/>".to_vec(), "its answer is not JSON"),
        ] {
            let Err(ProviderError::Failed(why)) = answer_from(ctx(), "greeter", &bytes) else {
                panic!("{says}: refused");
            };
            assert!(why.starts_with("greeter answered by itself, but "), "{why}");
            assert!(why.contains(says), "{says}: {why}");
        }
    }

    #[test]
    fn keys_are_fresh_and_carry_128_random_bits() {
        let (one, two) = (new_key().expect("a key"), new_key().expect("a key"));
        assert_ne!(one, two);
        let random = one.strip_prefix(ANSWER_PREFIX).expect("the prefix");
        assert_eq!(random.len(), 32);
        assert!(random.bytes().all(|b| b.is_ascii_hexdigit()));
    }

    #[test]
    fn an_upload_url_never_shows_in_debug_output() {
        let url = UploadUrl::new("https://b.s3.amazonaws.com/answers/k?X-Amz-Signature=abc".into());
        assert_eq!(format!("{url:?}"), "UploadUrl(<redacted>)");
    }
}
