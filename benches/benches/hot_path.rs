//! The handler's hot path in microbenchmarks: decode an SNS-wrapped CloudFormation request (JSON,
//! topic check, ResponseURL validation, fingerprint), decide what to do with it (the decision
//! table), build the response body, and sign one of the lease store's three DynamoDB calls, by
//! the wire's own signer and, for comparison, by aws-sigv4 (what the wire signed with before, and
//! still signs any other shape of request with). `cargo bench -p cfn-once-bench --bench
//! hot_path`; the figures are in BENCHMARKS.md.

use std::hint::black_box;
use std::time::SystemTime;

use aws_credential_types::Credentials;
use aws_sigv4::http_request::{SignableBody, SignableRequest, SigningSettings, sign};
use aws_smithy_runtime_api::client::identity::Identity;
use cfn_once::adapters::sigv4::{JSON_1_0, PostSigner};

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

/// An acquire's UpdateItem body, about the size of the three calls' (the commit's is larger: it
/// carries the response).
const UPDATE: &str = r##"{"TableName":"cfn-once-leases","Key":{"StackId":{"S":"arn:aws:cloudformation:us-east-2:123456789012:stack/app/6d7f2a30-0000-11ef-9f2b-0a1b2c3d4e5f"},"RequestId":{"S":"5f3c1a2e-8b7d-4e6f-9a0b-1c2d3e4f5a6b"}},"UpdateExpression":"SET #fence = if_not_exists(#fence, :zero) + :one, #owner = :owner, #lease_until = :until, #heartbeat = :zero, #state = if_not_exists(#state, :running), #fingerprint = :fp, #updated = :now, #created = if_not_exists(#created, :now), #expires = :expires ADD #attempts :fps","ConditionExpression":"attribute_not_exists(#fence) OR (#state = :running AND #lease_until < :now)","ExpressionAttributeNames":{"#fence":"fence","#owner":"owner","#lease_until":"lease_until_ms"},"ExpressionAttributeValues":{":zero":{"N":"0"},":one":{"N":"1"},":owner":{"S":"us-east-2/2026/12/02/[$LATEST]0123456789abcdef"}},"ReturnValues":"ALL_OLD","ReturnValuesOnConditionCheckFailure":"ALL_OLD"}"##;

fn signing(c: &mut Criterion) {
    let credentials = Credentials::new(
        "ASIAEXAMPLEEXAMPLE",
        "wJalrXUtnFEMI/K7MDENG+bPxRfiCYEXAMPLEKEY",
        Some("IQoJb3JpZ2luX2VjEJr//////////wEaCXVzLWVhc3QtMiJHMEUCIQDexampleexampleexampleexample==".to_owned()),
        None,
        "bench",
    );
    let host = "dynamodb.us-east-2.amazonaws.com";
    let target = "DynamoDB_20120810.UpdateItem";
    let signer = PostSigner::new("us-east-2", "dynamodb");
    let url = format!("https://{host}/");
    // Both put what they sign into a request's headers, as the wire does.
    c.bench_function("sign a lease-store call (the wire's signer)", |b| {
        b.iter(|| {
            let signed =
                signer.sign(black_box(&credentials), SystemTime::now(), host, target, black_box(UPDATE.as_bytes()));
            let mut request = http::Request::post(&url).body(()).expect("a request");
            let headers = request.headers_mut();
            headers.insert("x-amz-date", signed.amz_date.parse().expect("a header"));
            if let Some(token) = credentials.session_token() {
                headers.insert("x-amz-security-token", token.parse().expect("a header"));
            }
            headers.insert("authorization", signed.authorization.parse().expect("a header"));
            request
        })
    });
    let identity: Identity = credentials.clone().into();
    c.bench_function("sign a lease-store call (aws-sigv4)", |b| {
        b.iter(|| {
            let params = aws_sigv4::sign::v4::SigningParams::builder()
                .identity(&identity)
                .region("us-east-2")
                .name("dynamodb")
                .time(SystemTime::now())
                .settings(SigningSettings::default())
                .build()
                .expect("complete")
                .into();
            let headers = [("content-type", JSON_1_0), ("x-amz-target", target), ("host", host)];
            let signable =
                SignableRequest::new("POST", &url, headers.into_iter(), SignableBody::Bytes(UPDATE.as_bytes()))
                    .expect("signable");
            let (instructions, _) = sign(signable, &params).expect("signed").into_parts();
            let mut request = http::Request::post(&url).body(()).expect("a request");
            instructions.apply_to_request_http1x(&mut request);
            request
        })
    });
}

criterion_group!(benches, hot_path, signing);
criterion_main!(benches);
