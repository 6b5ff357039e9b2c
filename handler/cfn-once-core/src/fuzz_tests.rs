//! Fuzzing the two places hostile input meets the code: decoding an SQS body, and building a
//! response from whatever a provider returns. Generated inputs (JSON of any shape with the
//! request's vocabulary, SNS envelopes, byte-mutated real fixtures, deep nesting, hostile
//! identifiers) must give a `Request` (possibly `Malformed`, answered FAILED) or `Undeliverable`,
//! never a panic; and any provider output must give a valid body of at most 4,096 bytes.
//!
//! The runs are bounded (`CFN_ONCE_FUZZ_CASES` per property, 1,000 by default) and print how
//! many inputs they tried and how long that took; `make fuzz FUZZ_CASES=200000` runs longer.

use std::collections::BTreeMap;
use std::time::Instant;

use proptest::collection::{btree_map, vec};
use proptest::prelude::*;
use proptest::test_runner::{Config, TestCaseError, TestRunner};
use serde_json::{Value, json};

use crate::request::{InputPolicy, Request, RequestBody, decode};
use crate::response::{BODY_BYTES_MAX, Outcome, ResponseBody, Status, build};
use crate::response_url::UrlPolicy;

const TOPIC: &str = "arn:aws:sns:us-east-1:123456789012:cfn-once";
const URL: &str = "https://cloudformation-custom-resource-response-useast1.s3.amazonaws.com/k?X-Amz-Signature=fuzz";

fn cases() -> u32 {
    std::env::var("CFN_ONCE_FUZZ_CASES").ok().and_then(|value| value.parse().ok()).unwrap_or(1_000)
}

/// Runs `check` over `cases()` inputs from `strategy`, printing what it did.
fn fuzz<S: Strategy>(name: &str, strategy: S, check: impl Fn(S::Value) -> Result<(), TestCaseError>) {
    let cases = cases();
    let mut runner = TestRunner::new(Config { cases, failure_persistence: None, ..Config::default() });
    let started = Instant::now();
    let result = runner.run(&strategy, check);
    println!("fuzz {name}: {cases} inputs in {:.2?}", started.elapsed());
    if let Err(error) = result {
        panic!("{name}: {error}");
    }
}

fn policy(raw_delivery: bool) -> InputPolicy {
    InputPolicy {
        topic_arns: vec![TOPIC.into()],
        raw_delivery,
        urls: UrlPolicy::new(vec![]),
        privileged_topic_arns: vec![],
    }
}

/// Words a request is made of, so generated objects get past the first checks often.
const VOCABULARY: [&str; 16] = [
    "RequestType",
    "ResponseURL",
    "StackId",
    "RequestId",
    "LogicalResourceId",
    "PhysicalResourceId",
    "ResourceType",
    "ResourceProperties",
    "OldResourceProperties",
    "ServiceToken",
    "ServiceTimeout",
    "Create",
    "Update",
    "Delete",
    "Custom::Echo",
    URL,
];

fn text() -> impl Strategy<Value = String> {
    prop_oneof![
        4 => proptest::sample::select(VOCABULARY.to_vec()).prop_map(str::to_owned),
        2 => any::<String>(),
        1 => "\\PC{0,40}",
        1 => proptest::char::range('\u{0}', '\u{1f}').prop_map(|c| c.to_string().repeat(300)),
        1 => Just("é\"\\\n".repeat(200)),
    ]
}

fn json_value() -> impl Strategy<Value = Value> {
    let leaf = prop_oneof![
        Just(Value::Null),
        any::<bool>().prop_map(Value::Bool),
        any::<i64>().prop_map(Value::from),
        any::<f64>().prop_map(|f| serde_json::Number::from_f64(f).map_or(Value::Null, Value::Number)),
        text().prop_map(Value::String),
    ];
    leaf.prop_recursive(6, 128, 8, |inner| {
        prop_oneof![
            vec(inner.clone(), 0..8).prop_map(Value::Array),
            btree_map(text(), inner, 0..10).prop_map(|map| Value::Object(map.into_iter().collect())),
        ]
    })
}

/// A real request with some of its fields replaced by anything.
fn request_like() -> impl Strategy<Value = Value> {
    (btree_map(proptest::sample::select(VOCABULARY[..10].to_vec()), json_value(), 0..6), any::<bool>()).prop_map(
        |(replacements, keep_url)| {
            let mut request = json!({
                "RequestType": "Create",
                "ResponseURL": URL,
                "StackId": "arn:aws:cloudformation:us-east-1:123456789012:stack/demo/guid",
                "RequestId": "req-1",
                "LogicalResourceId": "Thing",
                "ResourceType": "Custom::Echo",
                "ResourceProperties": {"Size": "5"},
            });
            for (key, value) in replacements {
                if key == "ResponseURL" && keep_url {
                    continue;
                }
                request[key] = value;
            }
            request
        },
    )
}

/// What an SQS record's body can be.
fn body() -> impl Strategy<Value = String> {
    prop_oneof![
        3 => request_like().prop_map(|request| request.to_string()),
        3 => (request_like(), proptest::sample::select(vec![TOPIC, "arn:aws:sns:us-east-1:999999999999:other"]))
            .prop_map(|(request, topic)| {
                json!({"Type": "Notification", "TopicArn": topic, "Message": request.to_string()}).to_string()
            }),
        2 => json_value().prop_map(|value| value.to_string()),
        2 => (request_like(), vec((any::<usize>(), any::<u8>(), 0..3u8), 1..8)).prop_map(|(request, edits)| {
            // Byte edits of a real body: replace, insert or delete at random places.
            let mut bytes = request.to_string().into_bytes();
            for (at, byte, kind) in edits {
                let at = at % (bytes.len() + 1);
                match kind {
                    0 if at < bytes.len() => bytes[at] = byte,
                    1 => bytes.insert(at, byte),
                    _ if at < bytes.len() => {
                        bytes.remove(at);
                    }
                    _ => {}
                }
            }
            String::from_utf8_lossy(&bytes).into_owned()
        }),
        1 => (0..400usize, proptest::sample::select(vec!["[", "{\"a\":"])).prop_map(|(depth, open)| {
            let close = if open == "[" { "]" } else { "}" };
            let deep = format!("{}1{}", open.repeat(depth), close.repeat(depth));
            request_like_text_with_properties(&deep)
        }),
        1 => any::<String>(),
    ]
}

fn request_like_text_with_properties(properties: &str) -> String {
    format!(
        r#"{{"RequestType":"Create","ResponseURL":"{URL}","StackId":"arn:aws:cloudformation:us-east-1:123456789012:stack/s/g","RequestId":"r","LogicalResourceId":"L","ResourceType":"Custom::Echo","ResourceProperties":{{"P":{properties}}}}}"#
    )
}

/// Checks a body built for `request` from `outcome`.
fn check_body(request: &Request, outcome: Outcome) -> Result<(), TestCaseError> {
    let bytes = build(request, outcome);
    prop_assert!(bytes.len() <= BODY_BYTES_MAX, "{} bytes", bytes.len());
    let body = ResponseBody::parse(&bytes).map_err(|e| TestCaseError::fail(format!("not a response body: {e}")))?;
    prop_assert!(!body.physical_resource_id.is_empty());
    if body.status == Status::Failed {
        prop_assert!(body.reason.as_deref().is_some_and(|reason| !reason.trim().is_empty()));
    }
    Ok(())
}

#[test]
fn decoding_any_body_answers_or_refuses_and_never_panics() {
    fuzz("decode", (body(), any::<bool>()), |(body, raw_delivery)| {
        if let Ok(request) = decode(Some(&body), &policy(raw_delivery)) {
            // Anything decoded can be answered within the limit, whatever its ids.
            let outcome = match &request.body {
                RequestBody::Valid(_) => Outcome::failed("fuzzed"),
                RequestBody::Malformed { reason, .. } => Outcome::refused(reason.clone()),
            };
            check_body(&request, outcome)?;
        }
        Ok(())
    });
}

fn outcome() -> impl Strategy<Value = Outcome> {
    prop_oneof![
        (proptest::option::of(text()), btree_map(text(), json_value(), 0..12), any::<bool>()).prop_map(
            |(physical_resource_id, data, no_echo)| Outcome::Success {
                physical_resource_id,
                data: data.into_iter().collect::<BTreeMap<_, _>>(),
                no_echo,
            }
        ),
        text().prop_map(Outcome::failed),
        "\\PC{0,9000}".prop_map(Outcome::refused),
    ]
}

/// Identifiers as hostile as decoding lets through: quotes, backslashes and control characters
/// escape to several bytes each.
fn identifier() -> impl Strategy<Value = String> {
    prop_oneof![
        2 => "\\PC{1,60}",
        1 => proptest::char::range('\u{1}', '\u{1f}').prop_flat_map(|c| (1..80usize).prop_map(move |n| c.to_string().repeat(n))),
        1 => (1..250usize).prop_map(|n| "\"\\".repeat(n)),
        1 => proptest::sample::select(VOCABULARY.to_vec()).prop_map(str::to_owned),
    ]
}

/// StackIds decoding accepts: stack ARNs, up to the longest names and ids.
fn stack_arn() -> impl Strategy<Value = String> {
    ("[A-Za-z][A-Za-z0-9-]{0,127}", "[a-z0-9-]{1,128}", proptest::sample::select(vec!["aws", "aws-cn", "aws-us-gov"]))
        .prop_map(|(name, id, partition)| {
            format!("arn:{partition}:cloudformation:us-east-1:123456789012:stack/{name}/{id}")
        })
}

/// Requests with hostile but accepted identifiers: what decoding lets through.
fn decoded_request() -> impl Strategy<Value = Request> {
    (
        proptest::sample::select(vec!["Create", "Update", "Delete"]),
        stack_arn(),
        identifier(),
        identifier(),
        identifier(),
    )
        .prop_filter_map("identifiers decoding refuses", |(kind, stack_id, logical, physical, request_id)| {
            let mut request = json!({
                "RequestType": kind,
                "ResponseURL": URL,
                "StackId": stack_id,
                "RequestId": request_id,
                "LogicalResourceId": logical,
                "ResourceType": "Custom::Echo",
                "ResourceProperties": {},
                "OldResourceProperties": {},
            });
            if kind != "Create" {
                request["PhysicalResourceId"] = json!(physical);
            }
            decode(Some(&request.to_string()), &policy(true)).ok()
        })
}

#[test]
fn any_provider_output_gives_a_body_within_the_limit() {
    fuzz("response", (decoded_request(), outcome()), |(request, outcome)| check_body(&request, outcome));
}
