//! Faults on the wire, end to end: the production handler (DynamoDB and SQS clients with their real
//! timeouts, the HTTPS sink, the table control) talks to moto through `cfn_once_local::fault_proxy`
//! (`tools/cfn-once-local/src/fault_proxy.rs`), which throttles, fails, resets, hangs or delays
//! chosen calls. Each case asserts what a user relies on: the request is answered exactly once (one
//! committed body, every PUT byte-identical to it), the provider ran as often as it had to, and
//! nothing that could be answered is in the DLQ. A request sent after the fault is answered once
//! too.

use std::time::{Duration, Instant};

use aws_sdk_dynamodb::config::Credentials;
use cfn_once::app::App;
use cfn_once_core::doubles::CountingEcho;
use cfn_once_core::echo::{ECHO_TYPE, Echo};
use cfn_once_core::lease::LeaseState;
use cfn_once_core::provider::Router;
use cfn_once_core::response::{ResponseBody, Status};
use cfn_once_local::provision::queue_depth;
use cfn_once_tests::{Fault, FaultProxy, LocalRegion, Match, Options, Sent, handler};
use serde_json::{Value, json};

const COUNTING_TYPE: &str = "Custom::Counting";
const TIMEOUT: Duration = Duration::from_secs(60);

/// DynamoDB's UpdateItem calls, told apart by their update expressions.
fn acquire() -> Match {
    Match::OperationWith("UpdateItem".into(), "ADD #fence :one".into())
}
fn heartbeat() -> Match {
    Match::OperationWith("UpdateItem".into(), "ADD #heartbeat :one".into())
}
fn commit() -> Match {
    Match::OperationWith("UpdateItem".into(), "#response = :response".into())
}
fn mark_delivered() -> Match {
    Match::OperationWith("UpdateItem".into(), "#delivered = :true".into())
}
fn change_visibility() -> Match {
    Match::Operation("ChangeMessageVisibility".into())
}

/// One region whose handler reaches AWS and the ResponseURL only through a fault proxy.
struct Faulty {
    region: LocalRegion,
    proxy: FaultProxy,
    app: App,
    counting: CountingEcho,
}

impl Faulty {
    async fn new(overrides: &[(&str, &str)]) -> Self {
        Self::with_sdk(overrides, |sdk| sdk).await
    }

    /// As `new`, with the handler's AWS SDK signing on a clock `skew` ahead (`behind`: behind)
    /// of true time.
    async fn with_signing_clock(overrides: &[(&str, &str)], skew: Duration, behind: bool) -> Self {
        Self::with_sdk(overrides, |sdk| sdk.time_source(SkewedClock { skew, behind })).await
    }

    /// As `new`, with the handler's AWS SDK configuration changed by `customize` (its clock, its
    /// credentials). The configuration is the function's: cfn-once's HTTP client
    /// (`adapters::https`), which tells the classification when each refused request was signed.
    async fn with_sdk(
        overrides: &[(&str, &str)],
        customize: impl FnOnce(aws_config::ConfigLoader) -> aws_config::ConfigLoader,
    ) -> Self {
        let region = LocalRegion::new(Options { visibility_timeout_s: 3, ..Options::default() }).await;
        let proxy = FaultProxy::start(&region.endpoint);
        let config = region.config_behind(&proxy.url(), overrides);
        let counting = CountingEcho::default();
        let router = Router::new().register(ECHO_TYPE, Echo).register(COUNTING_TYPE, counting.clone());
        let tls = cfn_once::adapters::https::client_config().expect("the function's TLS configuration");
        let loader = aws_config::defaults(aws_config::BehaviorVersion::latest())
            .region(aws_config::Region::new("us-east-1"))
            .endpoint_url(proxy.url())
            .credentials_provider(Credentials::new("test", "test", None, None, "wire-faults"))
            .http_client(cfn_once::adapters::https::sdk_http_client(tls));
        let sdk = customize(loader).load().await;
        let app = App::from_config(&config, &sdk, router).expect("the app");
        Self { region, proxy, app, counting }
    }

    /// A `Custom::Counting` request whose ResponseURL goes through the proxy, published.
    async fn send(&self, properties: Value) -> Sent {
        let mut sent = self.region.request("create-echo.json").await;
        sent.request["ResourceType"] = json!(COUNTING_TYPE);
        sent.request["ResourceProperties"] = properties;
        self.region.route_response_url(&mut sent, &self.proxy.url());
        self.region.publish(&sent).await;
        sent
    }

    /// Serves the queue until it is empty and `sent` has a committed answer. (moto's queue
    /// counts are approximate, as SQS's are: an empty count alone does not end the wait.)
    async fn drain(&self, sent: &Sent) {
        let esm = self.region.esm(10).await;
        let started = Instant::now();
        loop {
            esm.poll_once(&handler(&self.app)).await.expect("poll");
            let depth = queue_depth(&self.region.sqs, &self.region.queue.url).await.expect("depth");
            let committed = self.region.record(sent).await.is_some_and(|r| r.state == LeaseState::Committed);
            if depth == 0 && committed {
                return;
            }
            assert!(started.elapsed() < TIMEOUT, "not answered and drained within {TIMEOUT:?} (depth {depth})");
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
    }

    /// Answered exactly once: one committed body, every PUT byte-identical to it; the provider
    /// ran `runs` times; the DLQ is empty.
    async fn answered_once(&self, sent: &Sent, runs: u32) -> ResponseBody {
        let record = self.region.record(sent).await.expect("a lease record");
        assert_eq!(record.state, LeaseState::Committed, "{record:?}");
        let committed = record.response.expect("committed bytes");
        let puts = self.region.responses(sent).await;
        assert!(!puts.is_empty(), "nothing was PUT");
        assert!(puts.iter().all(|put| *put == committed), "a PUT differs from the committed body");
        assert_eq!(self.counting.calls(), runs, "provider runs");
        assert_eq!(queue_depth(&self.region.sqs, &self.region.queue.dlq_url).await.expect("dlq"), 0, "DLQ");
        let body = ResponseBody::parse(&committed).expect("body");
        println!("  answered {:?}, {} PUT(s), provider ran {runs} time(s)", body.status, puts.len());
        body
    }

    /// The fault is over: a fresh request is answered once as well.
    async fn then_a_clean_request(&self, runs_before: u32) {
        self.proxy.clear();
        let sent = self.send(json!({"After": "the fault"})).await;
        self.drain(&sent).await;
        assert_eq!(self.answered_once(&sent, runs_before + 1).await.status, Status::Success);
    }

    /// What the proxy injected, for the test's output; a case whose fault never struck proves
    /// nothing, so that fails.
    fn report(&self, case: &str) {
        let log = self.proxy.log();
        let injected = log.iter().filter(|e| e.fault.is_some()).count();
        println!("wire fault: {case}: {injected} of {} call(s) faulted", log.len());
        assert!(injected > 0, "{case}: the fault never struck");
    }
}

/// A clock `skew` ahead of (or behind) true time.
#[derive(Debug)]
struct SkewedClock {
    skew: Duration,
    behind: bool,
}

impl aws_smithy_async::time::TimeSource for SkewedClock {
    fn now(&self) -> std::time::SystemTime {
        let now = std::time::SystemTime::now();
        if self.behind { now - self.skew } else { now + self.skew }
    }
}

/// Runs one case: `inject` the fault, send a request with `properties`, serve until the queue is
/// empty, and check it was answered once with `status` after `runs` provider runs.
async fn case(name: &str, properties: Value, inject: impl FnOnce(&FaultProxy), status: Status, runs: u32) -> Faulty {
    let faulty = Faulty::new(&[]).await;
    inject(&faulty.proxy);
    let sent = faulty.send(properties).await;
    faulty.drain(&sent).await;
    faulty.report(name);
    assert_eq!(faulty.answered_once(&sent, runs).await.status, status, "{name}");
    faulty.then_a_clean_request(runs).await;
    faulty
}

#[tokio::test]
async fn acquire_throttled_by_provisioned_throughput() {
    case(
        "acquire: ProvisionedThroughputExceededException x3",
        json!({}),
        |proxy| proxy.inject(acquire(), Fault::dynamodb_error(400, "ProvisionedThroughputExceededException"), 3),
        Status::Success,
        1,
    )
    .await;
}

#[tokio::test]
async fn acquire_throttled() {
    case(
        "acquire: ThrottlingException x3",
        json!({}),
        |proxy| proxy.inject(acquire(), Fault::dynamodb_error(400, "ThrottlingException"), 3),
        Status::Success,
        1,
    )
    .await;
}

#[tokio::test]
async fn acquire_meets_a_replicated_write_conflict() {
    case(
        "acquire: ReplicatedWriteConflictException x2",
        json!({}),
        |proxy| proxy.inject(acquire(), Fault::dynamodb_error(400, "ReplicatedWriteConflictException"), 2),
        Status::Success,
        1,
    )
    .await;
}

#[tokio::test]
async fn commit_throttled() {
    case(
        "commit: ProvisionedThroughputExceededException x2",
        json!({}),
        |proxy| proxy.inject(commit(), Fault::dynamodb_error(400, "ProvisionedThroughputExceededException"), 2),
        Status::Success,
        1,
    )
    .await;
}

#[tokio::test]
async fn acquire_answered_500_without_being_applied() {
    case(
        "acquire: HTTP 500, not applied",
        json!({}),
        |proxy| proxy.inject(acquire(), Fault::dynamodb_error(500, "InternalServerError"), 1),
        Status::Success,
        1,
    )
    .await;
}

#[tokio::test]
async fn commit_answered_503_after_being_applied() {
    let (status, body) = match Fault::dynamodb_error(503, "ServiceUnavailable") {
        Fault::Respond { status, body, .. } => (status, body),
        other => panic!("{other:?}"),
    };
    let content_type = "application/x-amz-json-1.0".to_owned();
    case(
        "commit: applied, then HTTP 503",
        json!({}),
        |proxy| proxy.inject(commit(), Fault::ForwardThenRespond { status, content_type, body }, 1),
        Status::Success,
        1,
    )
    .await;
}

#[tokio::test]
async fn acquire_connection_reset() {
    case("acquire: connection reset", json!({}), |proxy| proxy.inject(acquire(), Fault::Reset, 2), Status::Success, 1)
        .await;
}

#[tokio::test]
async fn acquire_applied_but_its_reply_delayed_past_the_timeout() {
    case(
        "acquire: applied, reply delayed past the client timeout",
        json!({}),
        |proxy| proxy.inject(acquire(), Fault::ForwardThenDelay(Duration::from_millis(2_500)), 1),
        Status::Success,
        1,
    )
    .await;
}

#[tokio::test]
async fn commit_applied_but_its_reply_delayed_past_the_timeout() {
    case(
        "commit: applied, reply delayed past the client timeout",
        json!({}),
        |proxy| proxy.inject(commit(), Fault::ForwardThenDelay(Duration::from_millis(2_500)), 1),
        Status::Success,
        1,
    )
    .await;
}

#[tokio::test]
async fn commit_applied_then_the_connection_reset() {
    case(
        "commit: applied, then reset",
        json!({}),
        |proxy| proxy.inject(commit(), Fault::ForwardThenReset, 1),
        Status::Success,
        1,
    )
    .await;
}

#[tokio::test]
async fn the_delivery_record_keeps_failing() {
    let faulty = case(
        "mark delivered: reset every time",
        json!({}),
        |proxy| proxy.inject(mark_delivered(), Fault::Reset, 50),
        Status::Success,
        1,
    )
    .await;
    assert!(faulty.proxy.count(&mark_delivered()) >= 1);
}

#[tokio::test]
async fn heartbeats_throttled_while_the_provider_runs() {
    case(
        "heartbeat: ThrottlingException x2 during a 2.5 s provider",
        json!({"DelayMs": "2500"}),
        |proxy| proxy.inject(heartbeat(), Fault::dynamodb_error(400, "ThrottlingException"), 2),
        Status::Success,
        1,
    )
    .await;
}

#[tokio::test]
async fn the_read_back_of_an_unknown_acquire_fails_too() {
    case(
        "acquire: applied, reply lost; its read-back throttled",
        json!({}),
        |proxy| {
            proxy.inject(acquire(), Fault::ForwardThenReset, 1);
            proxy.inject(Match::Operation("GetItem".into()), Fault::dynamodb_error(400, "ThrottlingException"), 1);
        },
        Status::Success,
        1,
    )
    .await;
}

#[tokio::test]
async fn change_message_visibility_fails_and_the_message_still_returns() {
    // Every acquire in the first invocation is throttled, so the message is to be retried; the
    // reschedule fails too, and the message comes back after the queue's visibility timeout.
    case(
        "acquire throttled x4, then ChangeMessageVisibility HTTP 500",
        json!({}),
        |proxy| {
            proxy.inject(acquire(), Fault::dynamodb_error(400, "ThrottlingException"), 4);
            proxy.inject(change_visibility(), Fault::sqs_error(500, "InternalError"), 1);
        },
        Status::Success,
        1,
    )
    .await;
}

#[tokio::test]
async fn change_message_visibility_hangs_and_the_batch_still_returns() {
    case(
        "acquire throttled x4, then ChangeMessageVisibility hangs",
        json!({}),
        |proxy| {
            proxy.inject(acquire(), Fault::dynamodb_error(400, "ThrottlingException"), 4);
            proxy.inject(change_visibility(), Fault::Hang, 1);
        },
        Status::Success,
        1,
    )
    .await;
}

#[tokio::test]
async fn response_put_answered_500() {
    case("PUT: HTTP 500 x2", json!({}), |proxy| proxy.inject(Match::Put, Fault::status(500), 2), Status::Success, 1)
        .await;
}

#[tokio::test]
async fn response_put_answered_503() {
    case("PUT: HTTP 503 x1", json!({}), |proxy| proxy.inject(Match::Put, Fault::status(503), 1), Status::Success, 1)
        .await;
}

#[tokio::test]
async fn response_put_answered_403_once() {
    // A refusal is not retried within the invocation; the next delivery PUTs the committed
    // bytes again, and the provider does not run again.
    case("PUT: HTTP 403 x1", json!({}), |proxy| proxy.inject(Match::Put, Fault::status(403), 1), Status::Success, 1)
        .await;
}

#[tokio::test]
async fn response_put_answered_400_request_timeout_is_sent_again_at_once() {
    // S3 stored nothing (it did not receive the body in time): the invocation that met it PUTs
    // again within the request's time, where a 400 used to wait for the next delivery.
    let faulty = Faulty::new(&[]).await;
    let body = concat!(
        r#"<?xml version="1.0" encoding="UTF-8"?>"#,
        "<Error><Code>RequestTimeout</Code><Message>Your socket connection to the server was not read from or ",
        "written to within the timeout period. Idle connections will be closed.</Message></Error>"
    );
    faulty.proxy.inject(Match::Put, answer(400, "application/xml", body), 1);
    let sent = faulty.send(json!({})).await;
    let case = "PUT: HTTP 400 RequestTimeout";
    answered_by_the_invocation_that_met_it(&faulty, &sent, case, Duration::from_secs(2)).await;
    assert_eq!(faulty.proxy.count(&Match::Put), 2, "the refused PUT, then the one S3 stored");
}

#[tokio::test]
async fn response_put_hangs() {
    case("PUT: hung connection", json!({}), |proxy| proxy.inject(Match::Put, Fault::Hang, 1), Status::Success, 1).await;
}

#[tokio::test]
async fn response_put_reset_after_the_body_was_sent() {
    // S3 stored the body; the reply was lost, so the PUT is repeated with the same bytes.
    let faulty = case(
        "PUT: stored, then reset",
        json!({}),
        |proxy| proxy.inject(Match::Put, Fault::ForwardThenReset, 1),
        Status::Success,
        1,
    )
    .await;
    assert!(faulty.proxy.count(&Match::Put) >= 3, "the first request's PUT was repeated");
}

#[tokio::test]
async fn the_control_item_is_read_through_faults() {
    // The primary asks the table control first; a throttled read falls back to acting as active.
    case(
        "control read: ThrottlingException",
        json!({}),
        |proxy| {
            let control = Match::OperationWith("GetItem".into(), "control#active".into());
            proxy.inject(control, Fault::dynamodb_error(400, "ThrottlingException"), 1);
        },
        Status::Success,
        1,
    )
    .await;
}

#[tokio::test]
async fn a_slow_store_during_a_long_provider_still_answers_in_time() {
    // Every commit attempt's reply arrives too late; the handler reads the record back, finds
    // its own commit applied, and PUTs it.
    let faulty = Faulty::new(&[]).await;
    faulty.proxy.inject(commit(), Fault::ForwardThenDelay(Duration::from_millis(1_500)), 1);
    faulty.proxy.inject(Match::Operation("GetItem".into()), Fault::ForwardThenDelay(Duration::from_millis(1_500)), 1);
    let sent = faulty.send(json!({"DelayMs": "1500"})).await;
    faulty.drain(&sent).await;
    faulty.report("commit and its read-back both slow");
    faulty.answered_once(&sent, 1).await;
    faulty.then_a_clean_request(1).await;
}

// One case per class of failed AWS call, as the SDKs' standard retry classifiers sort them: two
// faulted writes (the acquire and the commit, or the first two calls a wrong clock signs), then
// the request must be answered once by the invocation that met the faults, well under a second
// after they struck, with nothing in the DLQ. Before the classification read the HTTP status
// and the SDK's codes, a 500 `InternalFailure`, a `RequestTimeoutException` and an
// `ExpiredTokenException` were permanent: the message came back seconds later. The classes the
// invocation must not retry (expired credentials nothing refreshes, a signature refused without
// a skew) are left by the invocation that met them, after one attempt, and answered later.

/// Serves one invocation that receives the request, and checks it answered it: committed, PUT,
/// the DLQ empty, within `within` of the invocation's start.
async fn answered_by_the_invocation_that_met_it(faulty: &Faulty, sent: &Sent, case: &str, within: Duration) {
    let esm = faulty.region.esm(10).await;
    let started = loop {
        let started = Instant::now();
        let report = esm.poll_once(&handler(&faulty.app)).await.expect("poll");
        if report.received > 0 {
            assert_eq!(report.failed, 0, "{case}: the invocation left its record to be seen again");
            break started;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    };
    let took = started.elapsed();
    faulty.report(case);
    let committed = faulty.region.record(sent).await.is_some_and(|r| r.state == LeaseState::Committed);
    assert!(committed, "{case}: not answered by the invocation that met the fault");
    faulty.answered_once(sent, 1).await;
    println!("  {case}: answered in {} ms by the invocation that met the fault", took.as_millis());
    assert!(took < within, "{case}: answered {} ms after the invocation began", took.as_millis());
}

/// Serves one invocation that receives the request, and checks it left its record to be seen
/// again, unanswered.
async fn left_by_the_invocation_that_met_it(faulty: &Faulty, case: &str) {
    let esm = faulty.region.esm(10).await;
    loop {
        let report = esm.poll_once(&handler(&faulty.app)).await.expect("poll");
        if report.received > 0 {
            assert_eq!(report.failed, 1, "{case}: the invocation did not leave its record to be seen again");
            break;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    faulty.report(case);
}

/// Two faulted writes (the acquire's first attempt and the commit's), then the answer.
async fn two_faulted_writes(case: &str, fault: Fault) {
    let faulty = Faulty::new(&[]).await;
    faulty.proxy.inject(acquire(), fault.clone(), 1);
    faulty.proxy.inject(commit(), fault, 1);
    let sent = faulty.send(json!({})).await;
    answered_by_the_invocation_that_met_it(&faulty, &sent, case, Duration::from_secs(1)).await;
    assert_eq!(faulty.proxy.injected(), 2, "{case}: both writes were faulted");
    faulty.then_a_clean_request(1).await;
}

fn answer(status: u16, content_type: &str, body: &str) -> Fault {
    Fault::Respond { status, content_type: content_type.to_owned(), body: body.to_owned() }
}

#[tokio::test]
async fn class_500_with_a_code_nobody_named() {
    two_faulted_writes("HTTP 500 InternalFailure", Fault::dynamodb_error(500, "InternalFailure")).await;
}

#[tokio::test]
async fn class_502_with_an_empty_body() {
    two_faulted_writes("HTTP 502, empty body", answer(502, "text/plain", "")).await;
}

#[tokio::test]
async fn class_503_with_an_html_body() {
    let html = "<html><head><title>503 Service Temporarily Unavailable</title></head><body><center><h1>503 Service Temporarily Unavailable</h1></center></body></html>";
    two_faulted_writes("HTTP 503, HTML body", answer(503, "text/html", html)).await;
}

#[tokio::test]
async fn class_504_from_a_gateway() {
    two_faulted_writes("HTTP 504", answer(504, "text/plain", "Gateway Timeout")).await;
}

#[tokio::test]
async fn class_request_timeout_exception() {
    two_faulted_writes("RequestTimeoutException", Fault::dynamodb_error(400, "RequestTimeoutException")).await;
}

#[tokio::test]
async fn class_transaction_in_progress_is_an_unknown_outcome_read_back() {
    // An identical request still in progress may yet be applied: each faulted write is read
    // back (the acquire found nothing, the commit found the lease still running) and tried again.
    let faulty = Faulty::new(&[]).await;
    faulty.proxy.inject(acquire(), Fault::dynamodb_error(400, "TransactionInProgressException"), 1);
    faulty.proxy.inject(commit(), Fault::dynamodb_error(400, "TransactionInProgressException"), 1);
    let sent = faulty.send(json!({})).await;
    answered_by_the_invocation_that_met_it(&faulty, &sent, "TransactionInProgressException", Duration::from_secs(1))
        .await;
    assert_eq!(faulty.proxy.injected(), 2, "both writes were faulted");
    let reads = faulty.proxy.count(&Match::Operation("GetItem".into()));
    let control_reads = faulty.proxy.count(&Match::OperationWith("GetItem".into(), "control#active".into()));
    assert_eq!(reads - control_reads, 2, "each unknown write was read back");
    faulty.then_a_clean_request(1).await;
}

#[tokio::test]
async fn class_expired_credentials_that_nothing_refreshes_are_left_to_a_later_invocation() {
    // The function's credentials, as inside Lambda, carry no expiry: the identity cache would
    // read the same ones again, so the invocation does not retry the acquire; the message comes
    // back and a later invocation answers.
    let faulty = Faulty::new(&[]).await;
    faulty.proxy.inject(acquire(), Fault::dynamodb_error(400, "ExpiredTokenException"), 1);
    let sent = faulty.send(json!({})).await;
    left_by_the_invocation_that_met_it(&faulty, "ExpiredTokenException, static credentials").await;
    assert_eq!(faulty.proxy.count(&acquire()), 1, "the refused acquire was not retried in that invocation");
    faulty.drain(&sent).await;
    faulty.answered_once(&sent, 1).await;
}

#[tokio::test]
async fn class_expired_credentials_the_identity_cache_refreshes_are_retried_at_once() {
    let expiring = Credentials::new(
        "test",
        "test",
        Some("token".into()),
        Some(std::time::SystemTime::now() + Duration::from_secs(3_600)),
        "expiring",
    );
    let faulty = Faulty::with_sdk(&[], |sdk| sdk.credentials_provider(expiring)).await;
    faulty.proxy.inject(acquire(), Fault::dynamodb_error(400, "ExpiredTokenException"), 1);
    faulty.proxy.inject(commit(), Fault::dynamodb_error(400, "ExpiredTokenException"), 1);
    let sent = faulty.send(json!({})).await;
    let case = "ExpiredTokenException, expiring credentials";
    answered_by_the_invocation_that_met_it(&faulty, &sent, case, Duration::from_secs(1)).await;
    assert_eq!(faulty.proxy.injected(), 2, "both writes were faulted");
    faulty.then_a_clean_request(1).await;
}

#[tokio::test]
async fn class_a_signature_refused_without_a_skew_is_permanent() {
    // Signed on the service's time (the proxy's Date): the signature is wrong for some other
    // reason, which no retry corrects. The invocation does not retry it; the message comes back.
    let faulty = Faulty::new(&[]).await;
    let body = r#"{"__type":"com.amazon.coral.service#InvalidSignatureException","message":"The request signature we calculated does not match the signature you provided"}"#;
    faulty.proxy.inject(acquire(), answer(400, "application/x-amz-json-1.0", body), 1);
    let sent = faulty.send(json!({})).await;
    left_by_the_invocation_that_met_it(&faulty, "InvalidSignatureException, no skew").await;
    assert_eq!(faulty.proxy.count(&acquire()), 1, "the refused acquire was not retried in that invocation");
    faulty.drain(&sent).await;
    faulty.answered_once(&sent, 1).await;
}

#[tokio::test]
async fn class_a_skewed_clock_is_corrected_from_the_services_date() {
    // The handler's SDK signs 20 minutes ahead; the proxy refuses what AWS refuses (a signature
    // more than five minutes off its clock) with DynamoDB's answer and a Date header. The SDK
    // learns the skew from that answer, and the worker's retry is signed right.
    for behind in [false, true] {
        let faulty = Faulty::with_signing_clock(&[], Duration::from_secs(20 * 60), behind).await;
        let body = r#"{"__type":"com.amazon.coral.service#InvalidSignatureException","message":"Signature expired: injected by FaultProxy"}"#;
        let refusal = answer(400, "application/x-amz-json-1.0", body);
        // Every call signed off the proxy's clock is refused, for as long as the handler keeps
        // signing so: only the SDK's correction lets a call through.
        faulty.proxy.inject(Match::SignedOutside(Duration::from_secs(5 * 60)), refusal, u32::MAX);
        let sent = faulty.send(json!({})).await;
        let case = if behind { "clock 20 min behind" } else { "clock 20 min ahead" };
        answered_by_the_invocation_that_met_it(&faulty, &sent, case, Duration::from_secs(1)).await;
        // The first calls of the lease table's client (the control read and the acquire, sent
        // together) are refused; everything after them is signed on the corrected clock.
        assert!(faulty.proxy.injected() <= 2, "{case}: {} calls refused", faulty.proxy.injected());
    }
}
