//! The handler's hot path in microbenchmarks: decode an SNS-wrapped CloudFormation request (JSON,
//! topic check, ResponseURL validation, fingerprint), decide what to do with it (the decision
//! table), and build the response body. `cargo bench -p cfn-once-bench --bench hot_path`; the
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
    InputPolicy { topic_arns: vec![TOPIC.to_owned()], raw_delivery: false, urls: UrlPolicy::new(vec![]) }
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

criterion_group!(benches, hot_path);
criterion_main!(benches);
