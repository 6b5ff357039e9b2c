//! HTTPS on the wire, as in production: the real `cfn-once-lambda` binary with every AWS call
//! and its ResponseURL PUT going to a `TlsFront` (a fresh CA of its own) before a `FaultProxy`
//! before moto. Trusting the front's CA through `SSL_CERT_FILE`, the function answers; not told
//! to trust it, the function refuses the handshake and nothing reaches the proxy. Both tests run
//! the same set-up, so the refusal cannot pass merely because the set-up is broken.

use std::path::PathBuf;
use std::time::{Duration, Instant};

use cfn_once_core::response::{ResponseBody, Status};
use cfn_once_tests::{
    Call, Exchange, FakeRuntime, FaultProxy, LambdaProcess, LocalRegion, Options, Posted, REGION, TlsFront,
};
use serde_json::Value;

const TIMEOUT: Duration = Duration::from_secs(60);

/// What one invocation through the front came to.
struct Outcome {
    /// What the function posted for the invocation.
    posted: Option<Posted>,
    /// The SQS message id of the invocation's one record.
    message_id: String,
    /// Every body PUT to the request's ResponseURL.
    responses: Vec<Vec<u8>>,
    /// Every request the proxy behind the front saw.
    exchanges: Vec<Exchange>,
    handshakes_completed: u64,
    handshakes_failed: u64,
    /// The function's log lines.
    output: Vec<String>,
    /// When the invocation was handed to the function.
    handed: Option<Instant>,
}

/// Publishes one Create of `Custom::Echo` whose ResponseURL is on the front, and hands it to the
/// function, whose `AWS_ENDPOINT_URL` is the front too; with `SSL_CERT_FILE` at the front's CA
/// if `trust_front`.
async fn invoke_through_front(trust_front: bool) -> Outcome {
    invoke_cold(trust_front, None).await
}

/// As [`invoke_through_front`], the invocation queued before the process starts (Lambda's cold
/// start: the event waits for the init), and, with `dynamodb_latency`, every DynamoDB call
/// delayed by it at the proxy (the deployed table's round trip).
async fn invoke_cold(trust_front: bool, dynamodb_latency: Option<Duration>) -> Outcome {
    let region = LocalRegion::new(Options::default()).await;
    let proxy = FaultProxy::start(&region.endpoint);
    let dir = PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join(cfn_once_tests::unique("tls"));
    std::fs::create_dir_all(&dir).expect("a directory for the CA file");
    let front = TlsFront::start(&proxy.url(), &dir).expect("a TLS front");
    assert!(front.url().starts_with("https://"), "{}", front.url());

    let mut sent = region.request("create-echo.json").await;
    region.route_response_url(&mut sent, &front.url());
    region.publish(&sent).await;

    let mut env = vec![
        ("AWS_REGION", REGION.to_owned()),
        ("AWS_ENDPOINT_URL", front.url()),
        ("AWS_ACCESS_KEY_ID", "test".to_owned()),
        ("AWS_SECRET_ACCESS_KEY", "test".to_owned()),
        ("CFN_ONCE_ROLE", "primary".to_owned()),
        ("CFN_ONCE_TABLE", region.table.clone()),
        ("CFN_ONCE_TOPIC_ARNS", region.topic_arn.clone()),
        ("CFN_ONCE_RESPONSE_URL_ALLOW", format!("{}/{}/", front.url(), region.bucket)),
        // What infra/regional.yaml tells the deployed primary of its queue's visibility timeout
        // (read by the simulator's template reader), so that the first request is measured as
        // deployed.
        ("CFN_ONCE_VISIBILITY_TIMEOUT_S", deployed_visibility_timeout_s()),
    ];
    if trust_front {
        env.push(("SSL_CERT_FILE", front.ca_file().display().to_string()));
    }
    let runtime = FakeRuntime::start();
    let (event, message_id) = region.batch_of_one(&region.esm(1).await).await;
    runtime.invoke("invocation-1", event, 60_000);
    if let Some(latency) = dynamodb_latency {
        for operation in ["GetItem", "UpdateItem", "PutItem"] {
            proxy.add_latency(cfn_once_tests::Match::Operation(operation.into()), latency);
        }
    }
    let lambda = LambdaProcess::spawn(&runtime, &env);
    let posted = runtime.posted("invocation-1", TIMEOUT);
    let outcome = Outcome {
        posted,
        message_id,
        responses: region.responses(&sent).await,
        exchanges: proxy.log(),
        handshakes_completed: front.handshakes_completed(),
        handshakes_failed: front.handshakes_failed(),
        output: lambda.output(),
        handed: runtime
            .timed_calls()
            .into_iter()
            .find_map(|(at, call, _)| matches!(call, Call::Handed(_)).then_some(at)),
    };
    drop((lambda, front));
    let _ = std::fs::remove_dir_all(dir);
    outcome
}

/// `CFN_ONCE_VISIBILITY_TIMEOUT_S` as the regional template sets it for the primary.
fn deployed_visibility_timeout_s() -> String {
    let deployed = cfn_once_sim::deployed::Deployed::regional().expect("infra/regional.yaml reads");
    deployed.environment["primary"]["CFN_ONCE_VISIBILITY_TIMEOUT_S"].clone()
}

/// The message ids the batch response reports as failed.
fn failed_ids(posted: Option<&Posted>) -> Vec<String> {
    let Some(Posted::Response(body)) = posted else { panic!("no batch response: {posted:?}") };
    let response: Value = serde_json::from_slice(body).expect("the batch response is JSON");
    let failures = response["batchItemFailures"].as_array().cloned().unwrap_or_default();
    failures.iter().map(|failure| failure["itemIdentifier"].as_str().unwrap_or_default().to_owned()).collect()
}

#[tokio::test]
async fn trusting_the_front_s_ca_the_lambda_binary_answers_over_tls() {
    let outcome = invoke_through_front(true).await;
    assert_eq!(failed_ids(outcome.posted.as_ref()), Vec::<String>::new(), "{:?}", outcome.output);
    assert_eq!(outcome.responses.len(), 1, "one PUT reached S3: {:?}", outcome.output);
    let body = ResponseBody::parse(&outcome.responses[0]).expect("a response body");
    assert_eq!(body.status, Status::Success, "{:?}", body.reason);
    // The proxy behind the front saw the lease table's calls and the PUT, in plaintext.
    let puts = outcome.exchanges.iter().filter(|exchange| exchange.method == "PUT").count();
    let dynamodb = outcome.exchanges.iter().filter(|exchange| exchange.operation.is_some()).count();
    assert_eq!(puts, 1, "{:?}", outcome.exchanges);
    assert!(dynamodb > 0, "{:?}", outcome.exchanges);
    assert!(outcome.handshakes_completed > 0, "every call came through the front");
    assert_eq!(outcome.handshakes_failed, 0);
}

#[tokio::test]
async fn not_told_to_trust_the_front_s_ca_the_lambda_binary_refuses_the_handshake() {
    let outcome = invoke_through_front(false).await;
    assert!(outcome.handshakes_failed > 0, "the function never tried the front: {:?}", outcome.output);
    assert_eq!(outcome.handshakes_completed, 0, "a handshake completed with an untrusted certificate");
    let refusal = outcome.output.iter().any(|line| line.contains("UnknownIssuer"));
    assert!(refusal, "the function does not say it refused the certificate: {:?}", outcome.output);
    assert_eq!(outcome.exchanges, Vec::new(), "a request got past the front");
    assert_eq!(outcome.responses.len(), 0, "a PUT reached S3");
    assert_eq!(failed_ids(outcome.posted.as_ref()), vec![outcome.message_id], "the record is reported failed");
}

/// The deployed table makes every write and consistent read wait for another Region: what
/// CloudFormation waits for is counted in round trips, from the cold start on (the event waits
/// for the init). A cold primary's init does not wait for the active-region control, and its
/// first record asks the control and acquires at once, so the PUT comes after two round trips
/// waited for one after the other (acquire with the control read beside it, then the commit),
/// the protocol's floor; the delivered mark comes after the PUT. The DynamoDB calls are delayed
/// 300 ms at the proxy, so that "beside" and "after" cannot be mistaken for each other.
#[tokio::test]
async fn a_cold_primary_answers_its_first_request_in_three_round_trips() {
    let outcome = invoke_cold(true, Some(Duration::from_millis(300))).await;
    assert_eq!(failed_ids(outcome.posted.as_ref()), Vec::<String>::new(), "{:?}", outcome.output);
    let handed = outcome.handed.expect("the invocation was handed out");
    let exchanges = &outcome.exchanges;
    let named = |exchange: &Exchange| exchange.operation.clone().unwrap_or_else(|| exchange.method.clone());
    let put = exchanges.iter().position(|exchange| exchange.method == "PUT").expect("the PUT");
    let control: Vec<&Exchange> = exchanges.iter().filter(|exchange| named(exchange) == "GetItem").collect();
    assert_eq!(control.len(), 1, "one control read: {:?}", exchanges.iter().map(named).collect::<Vec<_>>());
    let control_replied = control[0].replied.expect("the control read was answered");
    assert!(handed < control_replied, "the init waited for the control read before asking for the event");
    // The calls the PUT waited for one after another, from the process's start: two, the
    // second the commit (the first is the acquire or the control read beside it).
    let waited: Vec<String> =
        cfn_once_tests::waited_for(exchanges, put).into_iter().map(|i| named(&exchanges[i])).collect();
    assert!(waited.len() == 2 && waited[1] == "UpdateItem", "the acquire, the commit, then the PUT: {waited:?}");
    let first = exchanges.iter().position(|exchange| named(exchange) == "UpdateItem").expect("the acquire");
    assert!(
        control[0].arrived < exchanges[first].replied.expect("the acquire was answered"),
        "the control read went out beside the acquire"
    );
}
