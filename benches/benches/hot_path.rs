//! The handler's hot path in microbenchmarks: decode an SNS-wrapped CloudFormation request (JSON,
//! topic check, ResponseURL validation, fingerprint), decide what to do with it (the decision
//! table), build the response body, and write one log line as the function does
//! (tracing-subscriber's JSON format). `cargo bench -p cfn-once-bench --bench hot_path`; the
//! figures are in BENCHMARKS.md.

use std::hint::black_box;

use cfn_once_core::decision::{Activity, Situation, decide};
use cfn_once_core::lease::Seen;
use cfn_once_core::request::{InputPolicy, decode};
use cfn_once_core::response::{self, Outcome};
use cfn_once_core::response_url::UrlPolicy;
use cfn_once_core::vocabulary::Role;
use criterion::{Criterion, criterion_group, criterion_main};
use serde_json::{Value, json};

const TOPIC: &str = "arn:aws:sns:us-east-2:123456789012:cfn-once-service-token";

/// `events/sqs-sns-envelope.json`'s first record body: what SQS hands the handler.
fn envelope() -> String {
    let fixture: Value =
        serde_json::from_str(include_str!("../../events/sqs-sns-envelope.json")).expect("the fixture is JSON");
    fixture["Records"][0]["body"].as_str().expect("a record body").to_owned()
}

fn policy() -> InputPolicy {
    InputPolicy {
        topic_arns: vec![TOPIC.to_owned()],
        raw_delivery: false,
        urls: UrlPolicy::new(vec![]),
        privileged_topic_arns: vec![],
    }
}

fn hot_path(c: &mut Criterion) {
    let body = envelope();
    let policy = policy();
    let request = decode(Some(&body), &policy).expect("the fixture decodes");
    c.bench_function("decode an SNS-wrapped request", |b| b.iter(|| decode(black_box(Some(&body)), &policy)));

    let situation = Situation {
        role: Role::Primary,
        activity: Activity::Active,
        deadline_near: false,
        now_ms: 1_800_000_000_000,
        delivery_grace_ms: 5_000,
        poll_lag_ms: 0,
        head_start_until_ms: 0,
    };
    let seen = Seen::Absent;
    c.bench_function("decide", |b| b.iter(|| decide(black_box(&seen), black_box(&situation))));

    let data = [("Message", json!("hello from cfn-once")), ("Replicas", json!("3")), ("Enabled", json!("true"))]
        .into_iter()
        .map(|(k, v)| (k.to_owned(), v))
        .collect();
    let outcome = Outcome::Success { physical_resource_id: None, data, no_echo: false };
    c.bench_function("build the response body", |b| {
        b.iter(|| response::build(black_box(&request), black_box(outcome.clone())))
    });
}

/// One log line as the function writes it: JSON, inside the three spans a record's lines carry
/// (the runtime's invocation, the record, the request), into a writer that discards it.
fn log_line(c: &mut Criterion) {
    let subscriber = cfn_once::logging::json_subscriber(tracing::level_filters::LevelFilter::INFO, std::io::sink);
    tracing::subscriber::with_default(subscriber, || {
        let invoke = tracing::info_span!("Lambda runtime invoke", requestId = "8476a536-e9f4-11e8-9739-2dfe598c3fcd");
        let _invoke = invoke.enter();
        let record =
            tracing::info_span!("record", message_id = "059f36b4-87a3-44ab-83d2-661975830a7d", receive_count = 1_u64);
        let _record = record.enter();
        let request = tracing::info_span!(
            "request",
            stack_id = "arn:aws:cloudformation:us-east-2:123456789012:stack/app/6d7f2a30-0000-11ef-9f2b-0a1b2c3d4e5f",
            request_id = "5f3c1a2e-8b7d-4e6f-9a0b-1c2d3e4f5a6b",
            logical_resource_id = "Thing",
            request_type = "Create",
            fingerprint = "0123456789abcdef0123456789abcdef",
            fence = 1_u64,
        );
        let _request = request.enter();
        c.bench_function("one log line (JSON, three spans)", |b| {
            b.iter(|| tracing::info!(fence = black_box(1_u64), took_over = false, "lease acquired"))
        });
    });
}

criterion_group!(benches, hot_path, log_line);
criterion_main!(benches);
