//! A resource's work past its answer (see [`crate::wait_condition`]): its key, the answer its
//! request gets at once, and the signal its outcome becomes.

use std::collections::BTreeMap;

use serde_json::{Map, Value};

use crate::fingerprint::short_digest;
use crate::request::{Request, RequestKey, StackArn};
use crate::response::{Outcome, foreign_text};
use crate::wait_condition::{SIGNAL_BYTES_MAX, Signal, SignalStatus, WORK_DATA_NAME, WORK_ID_PREFIX, WaitSpec};

/// The longest Reason in a signal, in characters.
const SIGNAL_REASON_CHARS_MAX: usize = 1024;

/// The key of a SUCCESS signal's Data that names the resource's PhysicalResourceId.
const PHYSICAL_ID_KEY: &str = "PhysicalResourceId";

/// The key of the work of `request`'s resource on `spec`'s handle: one per stack, resource and
/// handle, so a Delete (sent the properties that named the handle) finds it, and a new handle
/// is new work.
pub fn work_key(request: &Request, spec: &WaitSpec) -> RequestKey {
    work_key_of(&request.key.stack_id, &request.logical_resource_id, spec.handle.expose_secret())
}

/// [`work_key`] from its parts, for the operator tools, which read a queued request's JSON
/// (the key is a digest: the handle cannot be read back from it).
pub fn work_key_of(stack_id: &StackArn, logical_resource_id: &str, handle: &str) -> RequestKey {
    let digest = short_digest(&[stack_id, logical_resource_id, handle]);
    RequestKey { stack_id: stack_id.clone(), request_id: format!("{WORK_ID_PREFIX}{digest}") }
}

/// For a work request ([`work_request`]) of an Update whose old properties named another
/// handle: the key of the work on that old handle, which this one replaces.
pub fn replaced_work(request: &Request) -> Option<RequestKey> {
    if !request.key.request_id.starts_with(WORK_ID_PREFIX) {
        return None;
    }
    let old = request.old_wait.as_ref()?;
    (old.handle.expose_secret() != request.response_url.expose_secret())
        .then(|| work_key_of(&request.key.stack_id, &request.logical_resource_id, old.handle.expose_secret()))
}

/// The work of `request`'s resource on `spec`'s handle, as a request of its own: keyed by
/// [`work_key`], answered by a signal to the handle, the same attempt (fingerprint) and
/// properties as CloudFormation's request.
pub fn work_request(request: &Request, spec: &WaitSpec) -> Request {
    Request { key: work_key(request, spec), response_url: spec.handle.clone(), ..request.clone() }
}

/// The answer a resource with a wait condition gets at once: SUCCESS, the default
/// PhysicalResourceId, and Data that says the work continues.
pub fn handed_over() -> Outcome {
    let data = std::iter::once((
        WORK_DATA_NAME.to_owned(),
        Value::String("continues: its result is signalled to the wait condition handle".into()),
    ))
    .collect();
    Outcome::Success { physical_resource_id: None, data, no_echo: false }
}

/// Whether committed answer bytes are a hand-over ([`handed_over`]): SUCCESS with exactly the
/// Data that says the work continues. Every delivery of a request that declares a wait
/// condition reads it to follow its committer's decision, to go on to the work or not.
pub fn is_handed_over(bytes: &[u8]) -> bool {
    let Ok(body) = crate::response::ResponseBody::parse(bytes) else {
        return false;
    };
    let Outcome::Success { data, .. } = handed_over() else {
        return false;
    };
    body.status == crate::response::Status::Success && body.data == data
}

/// Shapes a work's `outcome` into the signal bytes to commit and PUT, within
/// [`SIGNAL_BYTES_MAX`]: SUCCESS with the provider's Data and the resource's PhysicalResourceId
/// (the provider's, or the one the answer gave: the request's own, or a Create's default) as
/// JSON text, or FAILURE with the Reason. `origin` is CloudFormation's request the work
/// belongs to. A provider's PhysicalResourceId that an answer could not carry (empty, with
/// control characters, over 1,024 bytes as JSON) is signalled FAILURE saying so, as an answer
/// would be FAILED. Data too large to send is cut to the PhysicalResourceId alone, never without
/// it, and the Reason says so; the signal stays SUCCESS, since the work itself succeeded. A
/// Reason is cut by bytes, as an answer's is, so a multibyte Reason beside the longest UniqueId
/// still fits.
pub fn signal_body(origin: &Request, outcome: Outcome) -> (Vec<u8>, SignalStatus) {
    let unique_id = origin.logical_resource_id.clone();
    let signal = match outcome {
        Outcome::Success { physical_resource_id, data, .. } => {
            // A provider's id is held to an answer's rules, so that however much Data is cut,
            // the id always fits whole.
            let id = match physical_resource_id {
                Some(id) => crate::response::validate_physical_id(id),
                None => Ok(crate::response::kept_physical_id(origin)),
            };
            match id {
                Ok(id) => success(unique_id, id, data),
                Err(reason) => failure(unique_id, &reason),
            }
        }
        Outcome::Failed { reason } | Outcome::Refused { reason } => failure(unique_id, &reason),
    };
    let status = signal.status;
    (fitted(signal), status)
}

/// A SUCCESS signal whose Data is `data` with the resource's `id` under [`PHYSICAL_ID_KEY`], as
/// JSON text; when that does not fit in [`SIGNAL_BYTES_MAX`], Data is cut to the id alone and
/// the Reason says how much was cut. The id is what the stack reads to know which resource
/// the work made, so it is never what a cut drops.
fn success(unique_id: String, id: String, data: BTreeMap<String, Value>) -> Signal {
    let mut result: Map<String, Value> = data.into_iter().collect();
    result.insert(PHYSICAL_ID_KEY.into(), Value::String(id.clone()));
    let whole = Signal {
        status: SignalStatus::Success,
        reason: "the work completed".to_owned(),
        unique_id,
        data: Value::Object(result).to_string(),
    };
    if to_bytes(&whole).len() <= SIGNAL_BYTES_MAX {
        return whole;
    }
    let reason = format!(
        "the work completed; its Data ({} bytes of JSON) was cut to its {PHYSICAL_ID_KEY} alone, the rest left out: a signal carries at most {SIGNAL_BYTES_MAX} bytes",
        whole.data.len()
    );
    let data = Value::Object(std::iter::once((PHYSICAL_ID_KEY.to_owned(), Value::String(id))).collect()).to_string();
    Signal { data, reason, ..whole }
}

/// A FAILURE signal with `reason`, made fit for the stack's events.
fn failure(unique_id: String, reason: &str) -> Signal {
    Signal {
        status: SignalStatus::Failure,
        reason: foreign_text(reason, SIGNAL_REASON_CHARS_MAX),
        unique_id,
        data: "{}".into(),
    }
}

/// The signal's bytes, its Reason cut until they fit in [`SIGNAL_BYTES_MAX`]. Identifiers are
/// bounded (a LogicalResourceId and a request's PhysicalResourceId at decode time, a provider's
/// PhysicalResourceId as an answer's is: 1,024 bytes as JSON), so a signal whose Data is at most
/// the id always fits, with room for its Reason.
fn fitted(mut signal: Signal) -> Vec<u8> {
    let reason = std::mem::take(&mut signal.reason);
    signal.reason = crate::response::longest_fitting(&reason, |cut| {
        signal.reason = cut.to_owned();
        to_bytes(&signal).len() <= SIGNAL_BYTES_MAX
    });
    let bytes = to_bytes(&signal);
    debug_assert!(bytes.len() <= SIGNAL_BYTES_MAX, "identifiers are bounded");
    bytes
}

fn to_bytes(signal: &Signal) -> Vec<u8> {
    // A struct of strings always serializes.
    serde_json::to_vec(signal).unwrap_or_default()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::wait_condition::Signal;
    use serde_json::json;

    fn request() -> Request {
        decoded(json!({
            "RequestType": "Create",
            "ResponseURL": "https://cloudformation-custom-resource-response-useast1.s3.amazonaws.com/k?X-Amz-Signature=s",
            "StackId": "arn:aws:cloudformation:us-east-1:123456789012:stack/demo/guid",
            "RequestId": "req-1",
            "LogicalResourceId": "Database",
            "ResourceType": "Custom::Echo",
            "ResourceProperties": {"A": "1"},
        }))
    }

    fn decoded(body: Value) -> Request {
        let policy = crate::request::InputPolicy {
            topic_arns: vec![],
            raw_delivery: true,
            urls: Default::default(),
            privileged_topic_arns: vec![],
        };
        crate::request::decode(Some(&body.to_string()), &policy).expect("a request")
    }

    #[test]
    fn a_signal_is_sent_whole_and_bounded() {
        let request = request();
        let success = Outcome::Success {
            physical_resource_id: Some("db-1".into()),
            data: [("Endpoint".to_owned(), json!("db.example"))].into_iter().collect(),
            no_echo: false,
        };
        let (bytes, status) = signal_body(&request, success);
        assert_eq!(status, SignalStatus::Success);
        let signal = Signal::parse(&bytes).expect("a signal");
        assert_eq!(signal.unique_id, request.logical_resource_id);
        assert_eq!(
            serde_json::from_str::<Value>(&signal.data).expect("JSON"),
            json!({"Endpoint": "db.example", "PhysicalResourceId": "db-1"})
        );

        let huge = Outcome::Success {
            physical_resource_id: None,
            data: [("Blob".to_owned(), json!("x".repeat(10_000)))].into_iter().collect(),
            no_echo: false,
        };
        let (bytes, status) = signal_body(&request, huge);
        assert!(bytes.len() <= SIGNAL_BYTES_MAX, "{}", bytes.len());
        assert_eq!(status, SignalStatus::Success);
        assert!(Signal::parse(&bytes).expect("a signal").reason.contains("left out"));

        let (bytes, status) = signal_body(&request, Outcome::failed(format!("<html>{}</html>", "e".repeat(5000))));
        assert_eq!(status, SignalStatus::Failure);
        assert!(bytes.len() <= SIGNAL_BYTES_MAX);
        let signal = Signal::parse(&bytes).expect("a signal");
        assert!(!signal.reason.contains("<html>"));
        // The same outcome gives the same bytes, wherever it is built.
        assert_eq!(signal_body(&request, Outcome::failed("x")), signal_body(&request, Outcome::failed("x")));
    }

    #[test]
    fn a_failure_signal_fits_in_bytes_with_multibyte_text_and_the_longest_unique_id() {
        let mut request = request();
        request.logical_resource_id = "L".repeat(255);
        // 1,024 characters of four bytes each, and of two, and characters JSON escapes.
        for reason in ["🦀".repeat(1_024), "é".repeat(1_024), format!("{}{}", "é".repeat(700), "\"\\".repeat(300))]
        {
            let (bytes, status) = signal_body(&request, Outcome::failed(reason.clone()));
            assert_eq!(status, SignalStatus::Failure);
            assert!(bytes.len() <= SIGNAL_BYTES_MAX, "{} bytes", bytes.len());
            let signal = Signal::parse(&bytes).expect("a signal");
            assert_eq!(signal.unique_id, request.logical_resource_id);
            assert!(signal.reason.len() > 1_000, "cut no more than it must: {} bytes", signal.reason.len());
        }
    }

    #[test]
    fn a_success_signal_names_the_resources_id_when_the_provider_chose_none() {
        let request = request();
        let success = Outcome::Success {
            physical_resource_id: None,
            data: [("InProgressForS".to_owned(), json!("45"))].into_iter().collect(),
            no_echo: false,
        };
        let (bytes, _) = signal_body(&request, success);
        let data: Value = serde_json::from_str(&Signal::parse(&bytes).expect("a signal").data).expect("JSON");
        // The id the answer gave the resource: a Create's default.
        assert_eq!(data["PhysicalResourceId"], json!(crate::response::default_physical_id(&request)));
        assert_eq!(data["InProgressForS"], json!("45"));
    }

    /// The signal of a SUCCESS whose Data is too large, parsed: its Data as JSON, and its Reason.
    fn cut(request: &Request, physical_resource_id: Option<&str>) -> (Value, String) {
        let success = Outcome::Success {
            physical_resource_id: physical_resource_id.map(str::to_owned),
            data: [("Blob".to_owned(), json!("x".repeat(10_000))), ("Endpoint".to_owned(), json!("db.example"))]
                .into_iter()
                .collect(),
            no_echo: false,
        };
        let (bytes, status) = signal_body(request, success);
        assert!(bytes.len() <= SIGNAL_BYTES_MAX, "{} bytes", bytes.len());
        assert_eq!(status, SignalStatus::Success, "the work itself succeeded");
        let signal = Signal::parse(&bytes).expect("a signal");
        assert_eq!(signal.unique_id, request.logical_resource_id);
        (serde_json::from_str(&signal.data).expect("Data is JSON"), signal.reason)
    }

    #[test]
    fn data_too_large_is_cut_to_the_resources_id_never_without_it() {
        let request = request();
        // The provider's own id, and the resource's when the provider chose none.
        let (data, reason) = cut(&request, Some("db-1"));
        assert_eq!(data, json!({"PhysicalResourceId": "db-1"}), "only the id is kept");
        assert!(reason.contains("bytes of JSON) was cut to its PhysicalResourceId alone"), "{reason}");
        assert!(reason.contains("at most 4096 bytes"), "{reason}");
        let (data, _) = cut(&request, None);
        assert_eq!(data, json!({"PhysicalResourceId": crate::response::default_physical_id(&request)}));
    }

    #[test]
    fn a_cut_keeps_the_longest_ids_whole_beside_the_longest_unique_id() {
        // An Update sent the longest PhysicalResourceId decode accepts (1,024 bytes as JSON, each
        // quote escaped once in Data's text and again in the signal's), by the longest
        // LogicalResourceId decode accepts; a provider's id is held to the same 1,024 bytes.
        let id = "\"".repeat(512);
        let request = decoded(json!({
            "RequestType": "Update",
            "ResponseURL": "https://cloudformation-custom-resource-response-useast1.s3.amazonaws.com/k?X-Amz-Signature=s",
            "StackId": "arn:aws:cloudformation:us-east-1:123456789012:stack/demo/guid",
            "RequestId": "req-2",
            "LogicalResourceId": "L".repeat(512),
            "PhysicalResourceId": id,
            "ResourceType": "Custom::Echo",
            "ResourceProperties": {"A": "2"},
            "OldResourceProperties": {"A": "1"},
        }));
        // The request's own id, and a provider's of the same length.
        for chosen in [None, Some(id.as_str())] {
            let (data, reason) = cut(&request, chosen);
            assert_eq!(data, json!({"PhysicalResourceId": id}));
            assert!(!reason.ends_with(" [truncated]"), "the Reason fits whole beside them: {reason}");
        }
    }

    #[test]
    fn a_providers_id_an_answer_could_not_carry_is_signalled_failure() {
        let request = request();
        let cases = [
            ("x".repeat(1_025), "of 1025 bytes"),
            ("\"".repeat(600), "of 1200 bytes"),
            ("db\u{1}".to_owned(), "control characters"),
            (String::new(), "an empty PhysicalResourceId"),
        ];
        for (id, expected) in cases {
            for data in [json!("small"), json!("x".repeat(10_000))] {
                let success = Outcome::Success {
                    physical_resource_id: Some(id.clone()),
                    data: [("Blob".to_owned(), data)].into_iter().collect(),
                    no_echo: false,
                };
                let (bytes, status) = signal_body(&request, success);
                assert!(bytes.len() <= SIGNAL_BYTES_MAX, "{} bytes", bytes.len());
                assert_eq!(status, SignalStatus::Failure, "{id:?}");
                let signal = Signal::parse(&bytes).expect("a signal");
                assert!(signal.reason.contains(expected), "{id:?}: {}", signal.reason);
            }
        }
    }
}
