//! Custom resources you already have: a Python Lambda function written for the CDK Provider
//! framework (`examples/functions/cdk-provider`, `on_event` and `is_complete` under
//! `awslambdaric`, its work past the answer signalled to a wait condition too) and functions
//! that PUT their own answer as `cfnresponse` does (`examples/functions/cfn-response`, and a slow
//! one written here), answered exactly once through cfn-once on moto, each handler region
//! invoking its own region's copy through the real `aws-sdk-lambda` client and the local Invoke
//! API, and reading self-answers from its own region's answer bucket on moto through presigned
//! URLs.

use std::path::PathBuf;
use std::sync::Arc;
use std::time::{Duration, Instant};

use cfn_once::adapters::s3_answers::S3AnswerDrop;
use cfn_once::providers::function::{FunctionInvoker, FunctionProvider, LambdaInvoker};
use cfn_once_core::aws_names::FunctionRef;
use cfn_once_core::config::FunctionRoute;
use cfn_once_core::lease::LeaseState;
use cfn_once_core::provider::Router;
use cfn_once_core::response::{ResponseBody, Status};
use cfn_once_core::wait_condition::{HANDLE_PROPERTY, SignalStatus, WORK_DATA_NAME};
use cfn_once_core::worker::Ports;
use cfn_once_local::environment::{https_sdk_config, s3_client};
use cfn_once_local::functions::trusting;
use cfn_once_local::invoke_api::InvokeApi;
use cfn_once_local::lambda_service::{FunctionSpec, LocalFunction};
use cfn_once_tests::{FaultProxy, Sent, TwoRegions};
use serde_json::{Value, json};

const TYPE: &str = "Custom::Reservation";
const DELAY_S: u32 = 2;
/// Fast leases and timeouts, so that takeovers happen within a test's seconds.
pub(crate) const SETTINGS: [(&str, &str); 7] = [
    ("CFN_ONCE_STORE_TIMEOUT_MS", "1000"),
    ("CFN_ONCE_PUT_TIMEOUT_MS", "1500"),
    ("CFN_ONCE_LEASE_MS", "3000"),
    ("CFN_ONCE_HEARTBEAT_MS", "1000"),
    ("CFN_ONCE_SKEW_MS", "200"),
    ("CFN_ONCE_STANDBY_RETRY_S", "1"),
    ("CFN_ONCE_DEADLINE_MARGIN_MS", "6000"),
];

/// The handler's Lambda timeout, in seconds, that the functions of [`functions_in`] (10 s each)
/// need with [`SETTINGS`] (7 s kept to answer): 10 s, 25 s for Lambda's slack and a run's start,
/// and 7 s (`local::settings::handler_timeout_ms`).
const HANDLER_TIMEOUT_FOR_THE_FUNCTIONS_S: &str = "42";

/// A handler timeout too short for the functions of [`functions_in`]: its run window (5 s once
/// 7 s are kept to answer) is shorter than the work of a function asked to sleep 8 s.
const HANDLER_TIMEOUT_TOO_SHORT_S: &str = "12";

/// One region's copies of the CDK-style function: `on-event` and `is-complete`, each a Python
/// process under awslambdaric, logging into `dir`.
async fn functions_in(region: &str, dir: &std::path::Path) -> InvokeApi {
    let code = cfn_once_tests::workspace_root().join("examples/functions/cdk-provider");
    let function = |name: &str, handler: &str| {
        let log = dir.join(format!("{region}-{name}.log"));
        let spec = FunctionSpec::python(name, region, &cfn_once_tests::python(), &code, handler, log);
        LocalFunction::new(FunctionSpec { timeout_ms: 10_000, concurrency_max: 4, ..spec })
            .expect("the function's log opens")
    };
    InvokeApi::start(vec![function("on-event", "app.on_event"), function("is-complete", "app.is_complete")])
        .await
        .expect("the Invoke API starts")
}

/// The router a region's handler runs: `Custom::Reservation` to this region's functions.
async fn router(region: &str, api: &InvokeApi) -> Router {
    let sdk = aws_config::defaults(aws_config::BehaviorVersion::latest())
        .region(aws_config::Region::new(region.to_owned()))
        .credentials_provider(aws_sdk_lambda::config::Credentials::new("testing", "testing", None, None, "tests"))
        .endpoint_url(api.endpoint())
        .load()
        .await;
    let route = FunctionRoute {
        resource_type: TYPE.to_owned(),
        on_event: FunctionRef::parse("on-event", region).expect("a name"),
        is_complete: Some(FunctionRef::parse("is-complete", region).expect("a name")),
        answers_itself: false,
    };
    let invoker: Arc<dyn FunctionInvoker> = Arc::new(LambdaInvoker::new(&sdk));
    Router::new().register(TYPE, FunctionProvider::new(route, region, invoker))
}

/// Both regions on moto, each routing `Custom::Reservation` to its own copies of the function
/// (logging into the returned folder).
async fn two_regions_with_functions(label: &str) -> (PathBuf, InvokeApi, InvokeApi, TwoRegions) {
    two_regions_with_functions_and(label, &[]).await
}

/// Like [`two_regions_with_functions`], the handlers configured with `more` besides [`SETTINGS`].
async fn two_regions_with_functions_and(
    label: &str,
    more: &[(&str, &str)],
) -> (PathBuf, InvokeApi, InvokeApi, TwoRegions) {
    let dir = std::env::temp_dir().join(cfn_once_tests::unique(label));
    std::fs::create_dir_all(&dir).expect("a temporary directory");
    let primary_api = functions_in("us-east-1", &dir).await;
    let secondary_api = functions_in("us-west-2", &dir).await;
    let settings: Vec<(&str, &str)> = SETTINGS.iter().chain(more).copied().collect();
    let regions = TwoRegions::with_ports(
        DELAY_S,
        &settings,
        with_router(router("us-east-1", &primary_api).await),
        with_router(router("us-west-2", &secondary_api).await),
    )
    .await;
    (dir, primary_api, secondary_api, regions)
}

fn with_router(router: Router) -> impl FnOnce(Ports) -> Ports {
    move |ports| Ports { router: Arc::new(router), ..ports }
}

/// A live request of `Custom::Reservation` with `properties`.
async fn reservation(regions: &TwoRegions, fixture: &str, properties: Value) -> Sent {
    let mut sent = regions.request(fixture).await;
    sent.request["ResourceType"] = json!(TYPE);
    sent.request["ResourceProperties"] = properties;
    sent
}

pub(crate) fn logs(dir: &std::path::Path) -> String {
    let mut all = String::new();
    for entry in std::fs::read_dir(dir).expect("the log folder") {
        all.push_str(&std::fs::read_to_string(entry.expect("an entry").path()).unwrap_or_default());
    }
    all
}

/// The signature of `sent`'s ResponseURL: what no function may see.
pub(crate) fn signature(sent: &Sent) -> String {
    url_signature(sent.request["ResponseURL"].as_str().expect("a ResponseURL")).to_owned()
}

/// The `X-Amz-Signature` of a presigned URL.
fn url_signature(url: &str) -> &str {
    url.split("X-Amz-Signature=").nth(1).expect("a presigned URL").split('&').next().unwrap_or_default()
}

#[tokio::test]
async fn a_function_slower_than_a_short_handler_window_runs_once_in_a_handler_sized_for_it() {
    let (_dir, primary_api, secondary_api, mut regions) = two_regions_with_functions_and(
        "functions-sized",
        &[("CFN_ONCE_HANDLER_TIMEOUT_S", HANDLER_TIMEOUT_FOR_THE_FUNCTIONS_S)],
    )
    .await;
    let started = Instant::now();
    // 8 s of work: longer than a 12 s handler's run window, within the function's own 10 s.
    let slow = reservation(&regions, "create-echo.json", json!({"Name": "fa", "SleepS": "8"})).await;
    regions.publish(&slow).await;
    let (body, _) = regions.wait_for_answer(&slow, started, Duration::from_secs(90)).await;
    let created = ResponseBody::parse(&body).expect("body");
    assert_eq!(created.status, Status::Success, "{:?}", created.reason);
    assert_eq!(created.physical_resource_id, "reservation-fa");
    regions.drain(Duration::from_secs(60)).await;
    assert_eq!(regions.responses(&slow).await.len(), 1, "answered once");
    assert_eq!(
        primary_api.invokes("on-event") + secondary_api.invokes("on-event"),
        1,
        "the function ran once: its Invoke waited for it, however short the handler's window would have been"
    );
    regions.stop().await;
}

#[tokio::test]
async fn a_handler_too_short_for_its_function_never_invokes_it_and_says_which_timeout_to_raise() {
    let (_dir, primary_api, secondary_api, mut regions) = two_regions_with_functions_and(
        "functions-short",
        &[("CFN_ONCE_HANDLER_TIMEOUT_S", HANDLER_TIMEOUT_TOO_SHORT_S)],
    )
    .await;
    let started = Instant::now();
    let slow = reservation(&regions, "create-echo.json", json!({"Name": "go", "SleepS": "8"})).await;
    regions.publish(&slow).await;
    let (body, _) = regions.wait_for_answer(&slow, started, Duration::from_secs(90)).await;
    let refused = ResponseBody::parse(&body).expect("body");
    assert_eq!(refused.status, Status::Failed);
    let reason = refused.reason.as_deref().unwrap_or_default();
    assert!(reason.contains("on-event was not invoked: its timeout of 10 s outlasts the"), "{reason}");
    assert!(reason.contains("FunctionTimeoutSeconds"), "{reason}");
    regions.drain(Duration::from_secs(60)).await;
    assert_eq!(regions.responses(&slow).await.len(), 1, "answered once");
    assert_eq!(
        primary_api.invokes("on-event") + secondary_api.invokes("on-event"),
        0,
        "never invoked where the handler's end could cut it off, so never run again under a higher fence"
    );
    regions.stop().await;
}

#[tokio::test]
async fn a_cdk_style_function_is_answered_once_and_never_sees_the_response_url() {
    let (dir, primary_api, _secondary_api, mut regions) = two_regions_with_functions("functions").await;
    let started = Instant::now();

    // Create: ready at once; isComplete says so on its first poll.
    let create = reservation(&regions, "create-echo.json", json!({"ServiceToken": "x", "Name": "ada"})).await;
    regions.publish(&create).await;
    let (body, _) = regions.wait_for_answer(&create, started, Duration::from_secs(60)).await;
    let created = ResponseBody::parse(&body).expect("body");
    assert_eq!(created.status, Status::Success, "{:?}", created.reason);
    assert_eq!(created.physical_resource_id, "reservation-ada");
    assert_eq!(created.data["Name"], json!("ada"));
    assert_eq!(created.data["Ready"], json!("true"));
    assert_eq!(created.data["StartedIn"], json!("us-east-1"));

    // A function error: FAILED with its message.
    let failing =
        reservation(&regions, "create-echo.json", json!({"Name": "bo", "FailWith": "the quota is exhausted"})).await;
    regions.publish(&failing).await;
    let (body, _) = regions.wait_for_answer(&failing, started, Duration::from_secs(60)).await;
    let failed = ResponseBody::parse(&body).expect("body");
    assert_eq!(failed.status, Status::Failed);
    assert!(
        failed.reason.as_deref().unwrap_or_default().contains("on-event failed: RuntimeError: the quota is exhausted"),
        "{:?}",
        failed.reason
    );

    // A throttled Invoke is tried again: two 429s, then the function runs.
    primary_api.throttle_next("on-event", 2);
    let before = primary_api.invokes("on-event");
    let throttled = reservation(&regions, "create-echo.json", json!({"Name": "cy"})).await;
    regions.publish(&throttled).await;
    let (body, _) = regions.wait_for_answer(&throttled, started, Duration::from_secs(60)).await;
    let answered = ResponseBody::parse(&body).expect("body");
    assert_eq!((answered.status, answered.physical_resource_id.as_str()), (Status::Success, "reservation-cy"));
    assert_eq!(primary_api.invokes("on-event") - before, 3, "two throttled invokes and the one that ran");

    // A function that runs past its timeout: killed by Lambda, answered FAILED saying so.
    let slow = reservation(&regions, "create-echo.json", json!({"Name": "di", "SleepS": "12"})).await;
    regions.publish(&slow).await;
    let (body, _) = regions.wait_for_answer(&slow, started, Duration::from_secs(90)).await;
    let timed_out = ResponseBody::parse(&body).expect("body");
    assert_eq!(timed_out.status, Status::Failed);
    assert!(
        timed_out
            .reason
            .as_deref()
            .unwrap_or_default()
            .contains("on-event timed out: Task timed out after 10.00 seconds"),
        "{:?}",
        timed_out.reason
    );

    // Data over CloudFormation's 4 KB: FAILED naming the limit, not a truncated answer.
    let big = reservation(&regions, "create-echo.json", json!({"Name": "ed", "BlobBytes": "5000"})).await;
    regions.publish(&big).await;
    let (body, _) = regions.wait_for_answer(&big, started, Duration::from_secs(60)).await;
    let too_big = ResponseBody::parse(&body).expect("body");
    assert_eq!(too_big.status, Status::Failed);
    assert!(too_big.reason.as_deref().unwrap_or_default().contains("4096"), "{:?}", too_big.reason);
    assert!(body.len() <= 4096);

    regions.drain(Duration::from_secs(60)).await;
    for sent in [&create, &failing, &throttled, &slow, &big] {
        assert_eq!(regions.responses(sent).await.len(), 1, "answered once");
    }
    // The functions logged every event they were given: none held a ResponseURL.
    let logged = logs(&dir);
    assert!(logged.contains("\"handler\": \"onEvent\""), "the function logged its events");
    assert!(!logged.contains("ResponseURL"), "a function saw a ResponseURL");
    for sent in [&create, &failing, &throttled, &slow, &big] {
        assert!(!logged.contains(&signature(sent)), "a function saw a ResponseURL's signature");
    }
    regions.stop().await;
}

#[tokio::test]
async fn is_complete_is_polled_from_the_secondary_when_the_primary_dies_mid_wait() {
    let (_dir, primary_api, secondary_api, mut regions) = two_regions_with_functions("functions-failover").await;
    // Ready 15 s after onEvent: isComplete says no for a while.
    let sent = reservation(&regions, "create-echo.json", json!({"Name": "cy", "ReadyInS": "15"})).await;
    let published = Instant::now();
    regions.publish(&sent).await;

    // The primary runs onEvent and polls isComplete once; then its region dies mid-wait.
    let primary_fence = loop {
        let record = regions.record(&sent).await;
        if let Some(record) =
            record.filter(|r| r.state == LeaseState::Waiting && r.poll.as_ref().is_some_and(|p| p.polls >= 1))
        {
            break record.fence;
        }
        assert!(published.elapsed() < Duration::from_secs(30), "the primary never polled");
        tokio::time::sleep(Duration::from_millis(100)).await;
    };
    regions.kill_primary().await;
    let primary_polls = primary_api.invokes("is-complete");

    let (body, took) = regions.wait_for_answer(&sent, published, Duration::from_secs(90)).await;
    let answer = ResponseBody::parse(&body).expect("body");
    let record = regions.record(&sent).await.expect("record");
    let secondary_polls = secondary_api.invokes("is-complete");
    println!(
        "onEvent: us-east-1 {} / us-west-2 {}; isComplete: us-east-1 {primary_polls} (fence {primary_fence}), \
         us-west-2 {secondary_polls} (fence {} at the commit); answered {:?} after {took:?} by {}",
        primary_api.invokes("on-event"),
        secondary_api.invokes("on-event"),
        record.fence,
        answer.status,
        record.owner.split('/').next().unwrap_or_default()
    );
    assert_eq!(answer.status, Status::Success, "{:?}", answer.reason);
    assert_eq!(answer.physical_resource_id, "reservation-cy");
    assert_eq!(answer.data["StartedIn"], json!("us-east-1"), "onEvent ran in the primary");
    assert_eq!(answer.data["CompletedIn"], json!("us-west-2"), "the secondary's isComplete said it was done");
    assert_eq!(primary_api.invokes("on-event"), 1, "onEvent ran once");
    assert_eq!(secondary_api.invokes("on-event"), 0, "the secondary did not run onEvent again");
    assert!(primary_polls >= 1 && secondary_polls >= 1);
    assert!(record.fence > primary_fence, "the secondary polled under a higher fence");
    assert!(record.owner.starts_with("us-west-2"), "{}", record.owner);
    assert!(took >= Duration::from_secs(15), "not before the reservation was ready: {took:?}");

    regions.primary.start();
    regions.drain(Duration::from_secs(60)).await;
    assert_eq!(regions.responses(&sent).await.len(), 1, "one PUT");
    assert_eq!(regions.dead_letters().await, 0);
    regions.stop().await;
}

/// The events a function was given, as it logged them (`<ms> <sandbox> {"handler": ..., "event":
/// ...}` lines).
fn events_logged(dir: &std::path::Path, handler: &str) -> Vec<Value> {
    logs(dir)
        .lines()
        .filter_map(|line| serde_json::from_str::<Value>(&line[line.find('{')?..]).ok())
        .filter(|line| line["handler"] == json!(handler))
        .map(|line| line["event"].clone())
        .collect()
}

#[tokio::test]
async fn a_cdk_style_functions_work_past_the_answer_is_signalled_once_to_its_wait_condition() {
    let (dir, primary_api, secondary_api, mut regions) = two_regions_with_functions("functions-wait").await;
    // Ready 15 s after onEvent; the answer does not wait for it.
    let handle = regions.wait_handle("ReservationHandle").await;
    let mut properties = json!({"ServiceToken": "x", "Name": "fa", "ReadyInS": "15"});
    handle.declare(&mut properties, 120);
    let sent = reservation(&regions, "create-echo.json", properties).await;
    let work_key = handle.work_key(&sent);
    let published = Instant::now();
    regions.publish(&sent).await;

    let (body, answered_after) = regions.wait_for_answer(&sent, published, Duration::from_secs(60)).await;
    let answer = ResponseBody::parse(&body).expect("body");
    assert_eq!(answer.status, Status::Success, "{:?}", answer.reason);
    let continues = answer.data.get(WORK_DATA_NAME).and_then(Value::as_str).unwrap_or_default();
    assert!(continues.starts_with("continues"), "the answer says the work continues: {answer:?}");
    assert_ne!(answer.physical_resource_id, "reservation-fa", "the answer is fixed before onEvent runs");
    assert!(answered_after < Duration::from_secs(15), "answered before the reservation was ready: {answered_after:?}");

    // The primary runs onEvent as the work and polls isComplete; then its region dies mid-work,
    // and the secondary must poll from the work's state as the primary stored it.
    let primary_fence = loop {
        let work = regions.plain_record(&work_key).await;
        if let Some(work) = work.filter(|w| w.state == "WAITING" && w.polls.is_some_and(|polls| polls >= 1)) {
            break work.fence;
        }
        assert!(published.elapsed() < Duration::from_secs(30), "the primary never polled the work");
        tokio::time::sleep(Duration::from_millis(100)).await;
    };
    regions.kill_primary().await;

    let ((_, signal), signalled_after) = handle.wait_for_signal(published, Duration::from_secs(90)).await;
    println!(
        "answered after {answered_after:?}; signalled {:?} after {signalled_after:?}; onEvent: us-east-1 {} / \
         us-west-2 {}; isComplete: us-east-1 {} (fence {primary_fence}) / us-west-2 {}",
        signal.status,
        primary_api.invokes("on-event"),
        secondary_api.invokes("on-event"),
        primary_api.invokes("is-complete"),
        secondary_api.invokes("is-complete"),
    );
    assert_eq!(signal.status, SignalStatus::Success, "{signal:?}");
    assert!(signalled_after >= Duration::from_secs(15), "not before the reservation was ready: {signalled_after:?}");
    let data: Value = serde_json::from_str(&signal.data).expect("the signal's Data is JSON text");
    assert_eq!(data["PhysicalResourceId"], json!("reservation-fa"), "onEvent's id goes to the signal: {data}");
    assert_eq!((&data["Name"], &data["Ready"]), (&json!("fa"), &json!("true")), "onEvent's and isComplete's Data");
    assert_eq!(
        (&data["StartedIn"], &data["CompletedIn"]),
        (&json!("us-east-1"), &json!("us-west-2")),
        "onEvent ran in the primary, the secondary's isComplete finished the work: {data}"
    );

    regions.primary.start();
    regions.drain(Duration::from_secs(60)).await;
    // One answer, one signal, the work's record COMMITTED and delivered with the signal's bytes.
    let (_, _, work) = crate::wait_conditions::settled(&regions, &sent, &handle).await;
    assert!(work.region() == "us-west-2" && work.fence > primary_fence, "the secondary signalled: {work:?}");
    assert_eq!(primary_api.invokes("on-event") + secondary_api.invokes("on-event"), 1, "onEvent ran once");
    assert!(primary_api.invokes("is-complete") >= 1 && secondary_api.invokes("is-complete") >= 1);

    // What the functions were given: CloudFormation's request (its RequestId, not the work's),
    // never the handle; isComplete, in both regions, onEvent's PhysicalResourceId and Data.
    let on_event = events_logged(&dir, "onEvent");
    assert_eq!(on_event.len(), 1, "{on_event:?}");
    assert_eq!(on_event[0]["RequestId"], sent.request["RequestId"], "CloudFormation's RequestId");
    assert!(on_event[0]["ResourceProperties"].get(HANDLE_PROPERTY).is_none(), "{on_event:?}");
    let is_complete = events_logged(&dir, "isComplete");
    assert!(is_complete.iter().all(|event| event["PhysicalResourceId"] == json!("reservation-fa")), "{is_complete:?}");
    assert!(is_complete.iter().all(|event| event["Data"]["StartedIn"] == json!("us-east-1")), "{is_complete:?}");
    let logged = logs(&dir);
    assert!(!logged.contains(HANDLE_PROPERTY), "a function saw the handle's property");
    assert!(!logged.contains(url_signature(&handle.url)), "a function saw the handle");
    regions.stop().await;
}

/// A function that answers by itself, as `cfnresponse` does, and logs every event it is given;
/// in the region its `SlowIn` property names it first sleeps `SlowForS` seconds.
const SLOW_RESPONDER: &str = r#"
import json, os, time, urllib.request

def handler(event, context):
    print(json.dumps({"handler": "responder", "event": event}, sort_keys=True), flush=True)
    props = event.get("ResourceProperties", {})
    region = os.environ["AWS_REGION"]
    if props.get("SlowIn") == region:
        time.sleep(float(props.get("SlowForS", "0")))
    body = json.dumps({
        "Status": "SUCCESS", "Reason": "done", "PhysicalResourceId": "late-" + props.get("Name", "x"),
        "StackId": event["StackId"], "RequestId": event["RequestId"],
        "LogicalResourceId": event["LogicalResourceId"], "NoEcho": False,
        "Data": {"AnsweredIn": region},
    }).encode()
    request = urllib.request.Request(event["ResponseURL"], data=body, method="PUT",
                                     headers={"content-type": "", "content-length": str(len(body))})
    with urllib.request.urlopen(request, timeout=10) as response:
        print(f"answer PUT in {region}: {response.status}", flush=True)
"#;

const GREETING: &str = "Custom::Greeting";

/// Both regions on moto, each routing `Custom::Greeting` to its own region's copy of a function
/// that answers by itself (`handler` of the code in `code`), with an answer bucket per region.
pub(crate) async fn two_regions_with_a_responder(
    label: &str,
    code: &std::path::Path,
    handler: &str,
) -> (PathBuf, [(InvokeApi, String, FaultProxy); 2], TwoRegions) {
    two_regions_with_a_responder_where(label, code, handler, Reach::Both).await
}

/// Whether the secondary can read the primary's answer bucket.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Reach {
    Both,
    /// The primary's region is out: from the secondary, its S3 refuses connections.
    PrimaryRegionOut,
    /// The primary's region is out: from the secondary, its S3 takes connections and never
    /// answers (each read waits out its timeout).
    PrimaryRegionSilent,
}

async fn two_regions_with_a_responder_where(
    label: &str,
    code: &std::path::Path,
    handler: &str,
    reach: Reach,
) -> (PathBuf, [(InvokeApi, String, FaultProxy); 2], TwoRegions) {
    let dir = std::env::temp_dir().join(cfn_once_tests::unique(label));
    std::fs::create_dir_all(&dir).expect("a temporary directory");
    let front = cfn_once_tests::moto_front();
    let mut regions = Vec::new();
    let mut routers = Vec::new();
    for region in ["us-east-1", "us-west-2"] {
        let log = dir.join(format!("{region}-responder.log"));
        let spec = FunctionSpec::python("responder", region, &cfn_once_tests::python(), code, handler, log);
        // The function trusts the local CA, as `cfn-once local` makes its functions do.
        let spec = trusting(FunctionSpec { timeout_ms: 30_000, ..spec }, front.ca_file());
        let function = LocalFunction::new(spec).expect("the log opens");
        let api = InvokeApi::start(vec![function]).await.expect("the Invoke API starts");
        let bucket = cfn_once_tests::unique("answers").to_lowercase();
        let moto = cfn_once_local::provision::sdk_config(cfn_once_tests::moto(), region).await;
        cfn_once_local::provision::create_bucket_in(&s3_client(&moto), &bucket, region)
            .await
            .expect("the answer bucket");
        // The answer bucket is reached over HTTPS, so the URLs presigned for the function are
        // `https://` URLs, as in AWS.
        let https = https_sdk_config(&front.url(), front.ca_file(), region).await.expect("the HTTPS client");
        // Invokes go through a fault proxy (a plain relay unless a test injects a fault).
        let proxy = FaultProxy::start(api.endpoint());
        let invoker: Arc<dyn FunctionInvoker> =
            Arc::new(LambdaInvoker::new(&cfn_once_local::provision::sdk_config(&proxy.url(), region).await));
        let route = FunctionRoute {
            resource_type: GREETING.to_owned(),
            on_event: FunctionRef::parse("responder", region).expect("a name"),
            is_complete: None,
            answers_itself: true,
        };
        let mut answers = S3AnswerDrop::new(&https, &bucket, 3_000).expect("the answer bucket's client");
        let out = match reach {
            Reach::Both => None,
            Reach::PrimaryRegionOut => Some(refusing_endpoint().await),
            Reach::PrimaryRegionSilent => Some(silent_endpoint().await),
        };
        if let Some(out) = out.filter(|_| region == "us-west-2") {
            let out = cfn_once_local::provision::sdk_config(&out, "us-east-1").await;
            answers = answers.with_region("us-east-1", &out);
        }
        let answers = Arc::new(answers);
        let provider = FunctionProvider::new(route, region, invoker).with_answer_drop(answers);
        routers.push(Router::new().register(GREETING, provider));
        regions.push((api, bucket, proxy));
    }
    let secondary_router = routers.pop().expect("two routers");
    let primary_router = routers.pop().expect("two routers");
    let two =
        TwoRegions::with_ports(DELAY_S, &SETTINGS, with_router(primary_router), with_router(secondary_router)).await;
    let regions: [(InvokeApi, String, FaultProxy); 2] =
        regions.try_into().unwrap_or_else(|_| unreachable!("two regions"));
    (dir, regions, two)
}

/// The objects of `bucket` (in `region`), with their bodies.
pub(crate) async fn answers_in(region: &str, bucket: &str) -> Vec<(String, Value)> {
    let s3 = s3_client(&cfn_once_local::provision::sdk_config(cfn_once_tests::moto(), region).await);
    let listed = s3.list_objects_v2().bucket(bucket).send().await.expect("ListObjectsV2");
    let mut objects = Vec::new();
    for object in listed.contents() {
        let key = object.key().expect("a key").to_owned();
        let body = s3.get_object().bucket(bucket).key(&key).send().await.expect("GetObject").body;
        let bytes = body.collect().await.expect("the body").into_bytes();
        objects.push((key, serde_json::from_slice(&bytes).expect("a JSON answer")));
    }
    objects
}

pub(crate) async fn greeting(regions: &TwoRegions, fixture: &str, properties: Value) -> Sent {
    let mut sent = regions.request(fixture).await;
    sent.request["ResourceType"] = json!(GREETING);
    sent.request["ResourceProperties"] = properties;
    sent
}

#[tokio::test]
async fn a_function_that_answers_by_itself_is_answered_once_through_an_object_of_its_own() {
    let code = cfn_once_tests::workspace_root().join("examples/functions/cfn-response");
    let (dir, [(primary_api, primary_bucket, _primary_proxy), _], mut regions) =
        two_regions_with_a_responder("self-answering", &code, "app.handler").await;
    let started = Instant::now();

    let create = greeting(&regions, "create-echo.json", json!({"Name": "ada"})).await;
    regions.publish(&create).await;
    let (body, took) = regions.wait_for_answer(&create, started, Duration::from_secs(60)).await;
    let created = ResponseBody::parse(&body).expect("body");
    println!("Create answered {:?} in {took:?}: {}", created.status, String::from_utf8_lossy(&body));
    assert_eq!((created.status, created.physical_resource_id.as_str()), (Status::Success, "greeting-ada"));
    assert_eq!(created.data["Greeting"], json!("hello, ada"));

    // The function answers FAILED itself: FAILED with its Reason.
    let failing = greeting(&regions, "create-echo.json", json!({})).await;
    regions.publish(&failing).await;
    let (body, _) = regions.wait_for_answer(&failing, started, Duration::from_secs(60)).await;
    let failed = ResponseBody::parse(&body).expect("body");
    assert_eq!(failed.status, Status::Failed);
    assert!(failed.reason.as_deref().unwrap_or_default().contains("responder answered FAILED: Name is required"));

    let mut delete = greeting(&regions, "delete-echo.json", json!({"Name": "ada"})).await;
    delete.request["PhysicalResourceId"] = json!("greeting-ada");
    regions.publish(&delete).await;
    let (body, _) = regions.wait_for_answer(&delete, started, Duration::from_secs(60)).await;
    assert_eq!(ResponseBody::parse(&body).expect("body").status, Status::Success);

    regions.drain(Duration::from_secs(60)).await;
    for sent in [&create, &failing, &delete] {
        assert_eq!(regions.responses(sent).await.len(), 1, "answered once");
    }
    assert_eq!(primary_api.invokes("responder"), 3, "each request ran the function once");
    // Each answer went to an object of cfn-once's, one per execution, for its request.
    let objects = answers_in("us-east-1", &primary_bucket).await;
    assert_eq!(objects.len(), 3, "{objects:?}");
    assert!(objects.iter().all(|(key, _)| key.starts_with("answers/") && key.len() == "answers/".len() + 32));
    let logged = logs(&dir);
    assert!(logged.contains("answer PUT: 200"), "the function PUT its answers");
    for sent in [&create, &failing, &delete] {
        assert!(!logged.contains(&signature(sent)), "a function saw CloudFormation's ResponseURL");
    }
    regions.stop().await;
}

#[tokio::test]
async fn a_stale_executions_late_self_answer_is_ignored() {
    let dir = std::env::temp_dir().join(cfn_once_tests::unique("slow-responder-code"));
    std::fs::create_dir_all(&dir).expect("a folder for the function");
    std::fs::write(dir.join("responder.py"), SLOW_RESPONDER).expect("the function's code");
    let (
        logs_dir,
        [(primary_api, primary_bucket, _primary_proxy), (secondary_api, secondary_bucket, _secondary_proxy)],
        mut regions,
    ) = two_regions_with_a_responder("stale-self-answer", &dir, "responder.handler").await;

    // In the primary's region the function takes 12 s; the primary dies while it runs.
    let sent =
        greeting(&regions, "create-echo.json", json!({"Name": "ed", "SlowIn": "us-east-1", "SlowForS": "12"})).await;
    let published = Instant::now();
    regions.publish(&sent).await;
    while primary_api.invokes("responder") == 0 {
        assert!(published.elapsed() < Duration::from_secs(20), "the primary never invoked the function");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let stale_fence = regions.record(&sent).await.expect("a record").fence;
    regions.kill_primary().await;

    // The secondary takes over, its region's copy answers at once.
    let (body, took) = regions.wait_for_answer(&sent, published, Duration::from_secs(60)).await;
    let answer = ResponseBody::parse(&body).expect("body");
    assert_eq!(answer.status, Status::Success, "{:?}", answer.reason);
    assert_eq!(answer.data["AnsweredIn"], json!("us-west-2"));
    let record = regions.record(&sent).await.expect("a record");
    assert!(record.fence > stale_fence && record.owner.starts_with("us-west-2"), "{record:?}");

    // The stale execution's function answers late, into its own object, which nobody reads.
    let late = loop {
        let objects = answers_in("us-east-1", &primary_bucket).await;
        if let Some(object) = objects.into_iter().next() {
            break object;
        }
        assert!(published.elapsed() < Duration::from_secs(40), "the slow function never answered");
        tokio::time::sleep(Duration::from_millis(200)).await;
    };
    println!(
        "stale execution (fence {stale_fence}) invoked us-east-1's copy, killed; us-west-2 answered under fence {} after {took:?}; \
         the late answer landed in us-east-1's {} after {:?}",
        record.fence,
        late.0,
        published.elapsed()
    );
    assert_eq!(late.1["Data"]["AnsweredIn"], json!("us-east-1"));
    let answered_from = answers_in("us-west-2", &secondary_bucket).await;
    assert_eq!(answered_from.len(), 1);
    assert_ne!(answered_from[0].0, late.0, "each execution had an object of its own");

    regions.primary.start();
    regions.drain(Duration::from_secs(60)).await;
    tokio::time::sleep(Duration::from_secs(2)).await;
    let puts = regions.responses(&sent).await;
    assert_eq!(puts.len(), 1, "one PUT to CloudFormation");
    assert_eq!(ResponseBody::parse(&puts[0]).expect("body").data["AnsweredIn"], json!("us-west-2"));
    assert_eq!((primary_api.invokes("responder"), secondary_api.invokes("responder")), (1, 1));
    assert_eq!(regions.dead_letters().await, 0);
    assert!(!logs(&logs_dir).contains(&signature(&sent)), "a function saw CloudFormation's ResponseURL");
    regions.stop().await;
}

/// An endpoint nobody listens on: connections to it are refused.
async fn refusing_endpoint() -> String {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.expect("a port");
    let address = listener.local_addr().expect("its address");
    drop(listener);
    format!("http://{address}")
}

/// An endpoint that accepts connections and never answers on them, for as long as the test runs.
async fn silent_endpoint() -> String {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.expect("a port");
    let address = listener.local_addr().expect("its address");
    tokio::spawn(async move {
        let mut held = Vec::new();
        while let Ok((connection, _)) = listener.accept().await {
            held.push(connection);
        }
    });
    format!("http://{address}")
}

/// A function that answers by itself as `cfnresponse` does, except that in the region its
/// `LateIn` property names it returns at once and PUTs its answer `LateByS` seconds later, from
/// a thread of its process (work finishing after the invocation, as a function that hands its
/// answer to a queue or a state machine does).
const LATE_RESPONDER: &str = r#"
import json, os, threading, time, urllib.request

def answer(event, region):
    body = json.dumps({
        "Status": "SUCCESS", "Reason": "done", "PhysicalResourceId": "late-" + event["ResourceProperties"].get("Name", "x"),
        "StackId": event["StackId"], "RequestId": event["RequestId"],
        "LogicalResourceId": event["LogicalResourceId"], "NoEcho": False,
        "Data": {"AnsweredIn": region},
    }).encode()
    request = urllib.request.Request(event["ResponseURL"], data=body, method="PUT",
                                     headers={"content-type": "", "content-length": str(len(body))})
    with urllib.request.urlopen(request, timeout=10) as response:
        print(f"answer PUT in {region}: {response.status}", flush=True)

def handler(event, context):
    props = event.get("ResourceProperties", {})
    region = os.environ["AWS_REGION"]
    if props.get("LateIn") == region:
        def later():
            time.sleep(float(props.get("LateByS", "0")))
            answer(event, region)
        threading.Thread(target=later).start()
        print(f"returned in {region}; the answer comes later", flush=True)
        return None
    answer(event, region)
"#;

/// Both regions with `LATE_RESPONDER`, and a Create whose function answers late in us-east-1,
/// published once the primary has invoked it; the request's ServiceTimeout is 50 s, so that the
/// code before each fix answers FAILED within the test's minute.
async fn late_self_answer(
    label: &str,
    reach: Reach,
    late_by_s: u32,
) -> (PathBuf, [(InvokeApi, String, FaultProxy); 2], TwoRegions, Sent, Instant) {
    let dir = std::env::temp_dir().join(cfn_once_tests::unique(&format!("{label}-code")));
    std::fs::create_dir_all(&dir).expect("a folder for the function");
    std::fs::write(dir.join("responder.py"), LATE_RESPONDER).expect("the function's code");
    let (log_dir, regions_apis, regions) =
        two_regions_with_a_responder_where(label, &dir, "responder.handler", reach).await;
    let sent = greeting(
        &regions,
        "create-echo.json",
        json!({"Name": "fay", "LateIn": "us-east-1", "LateByS": late_by_s.to_string(), "ServiceTimeout": "50"}),
    )
    .await;
    let published = Instant::now();
    regions.publish(&sent).await;
    let primary_api = &regions_apis[0].0;
    while primary_api.invokes("responder") == 0
        || regions.record(&sent).await.is_none_or(|r| r.state != LeaseState::Waiting)
    {
        assert!(published.elapsed() < Duration::from_secs(20), "the primary never started waiting for the answer");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    (log_dir, regions_apis, regions, sent, published)
}

/// What each region did with the request, in order, as the regions' observers saw it.
fn polls_of(regions: &TwoRegions, sent: &Sent, since: Instant) -> String {
    let mut seen: Vec<(Instant, &str, String)> = Vec::new();
    for (region, observed) in [("us-east-1", &regions.primary_observed), ("us-west-2", &regions.secondary_observed)] {
        seen.extend(observed.timeline(sent).into_iter().map(|(at, done)| (at, region, format!("{done:?}"))));
    }
    seen.sort_by_key(|(at, _, _)| *at);
    seen.iter()
        .map(|(at, region, done)| format!("\n  +{:5.1} s {region} {done}", at.duration_since(since).as_secs_f64()))
        .collect()
}

/// The request's answer, once it comes, and its record then; prints who polled what, where and
/// under which fence (`case` says what happened to the primary; `first_fence` is the fence the
/// primary's execution held).
async fn answered_after(
    regions: &TwoRegions,
    sent: &Sent,
    published: Instant,
    case: &str,
    first_fence: u64,
) -> (ResponseBody, cfn_once_core::lease::LeaseRecord) {
    let (body, took) = regions.wait_for_answer(sent, published, Duration::from_secs(60)).await;
    let answer = ResponseBody::parse(&body).expect("body");
    let record = regions.record(sent).await.expect("a record");
    println!(
        "{case}: us-east-1 invoked the function under fence {first_fence}, which returned; answered {:?} \
         (AnsweredIn {}) by {} under fence {} after {took:?}; what each region did:{}",
        answer.status,
        answer.data.get("AnsweredIn").unwrap_or(&Value::Null),
        record.owner.split('/').next().unwrap_or_default(),
        record.fence,
        polls_of(regions, sent, published)
    );
    (answer, record)
}

/// With both workers running again: the queues drain, CloudFormation got one PUT, the function
/// ran `invokes` times (primary's copy, secondary's), nothing is dead-lettered, and no function
/// saw the ResponseURL.
async fn one_put_after(
    regions: &TwoRegions,
    sent: &Sent,
    apis: [&InvokeApi; 2],
    invokes: (u32, u32),
    log_dir: &std::path::Path,
) -> ResponseBody {
    regions.drain(Duration::from_secs(60)).await;
    tokio::time::sleep(Duration::from_secs(2)).await;
    let puts = regions.responses(sent).await;
    assert_eq!(puts.len(), 1, "one PUT");
    assert_eq!((apis[0].invokes("responder"), apis[1].invokes("responder")), invokes, "the function's runs");
    assert_eq!(regions.dead_letters().await, 0);
    assert!(!logs(log_dir).contains(&signature(sent)), "a function saw CloudFormation's ResponseURL");
    ResponseBody::parse(&puts[0]).expect("body")
}

/// How the primary stops polling while its function's answer is pending in its bucket.
#[derive(Debug, Clone, Copy)]
enum PrimaryStops {
    /// A drill: the secondary becomes active (the primary's Lambda and S3 are fine).
    Drained,
    /// The primary's Lambda stops; its region's S3 is fine.
    LambdaDown,
}

/// The secondary's polls read the answer the primary's function PUT into the primary's bucket.
async fn the_secondary_reads_the_primarys_pending_answer(label: &str, stops: PrimaryStops) {
    let (
        log_dir,
        [(primary_api, primary_bucket, _primary_proxy), (secondary_api, _, _secondary_proxy)],
        mut regions,
        sent,
        published,
    ) = late_self_answer(label, Reach::Both, 8).await;
    let waiting = regions.record(&sent).await.expect("a record");
    match stops {
        PrimaryStops::Drained => regions.set_active("us-west-2").await,
        PrimaryStops::LambdaDown => regions.kill_primary().await,
    }

    let (answer, record) = answered_after(&regions, &sent, published, &format!("{stops:?}"), waiting.fence).await;
    assert_eq!(answer.status, Status::Success, "{:?}", answer.reason);
    assert_eq!(answer.data["AnsweredIn"], json!("us-east-1"), "the primary's execution's answer");
    assert!(record.owner.starts_with("us-west-2") && record.fence > waiting.fence, "{record:?}");
    assert_eq!(answers_in("us-east-1", &primary_bucket).await.len(), 1);

    match stops {
        PrimaryStops::Drained => regions.set_active("us-east-1").await,
        PrimaryStops::LambdaDown => regions.primary.start(),
    }
    one_put_after(&regions, &sent, [&primary_api, &secondary_api], (1, 0), &log_dir).await;
    regions.stop().await;
}

#[tokio::test]
async fn a_self_answer_pending_when_the_primary_is_drained_is_read_from_the_secondary() {
    the_secondary_reads_the_primarys_pending_answer("drained-self-answer", PrimaryStops::Drained).await;
}

#[tokio::test]
async fn a_self_answer_in_the_primarys_bucket_is_found_by_a_poll_the_secondary_holds() {
    the_secondary_reads_the_primarys_pending_answer("secondary-poll-self-answer", PrimaryStops::LambdaDown).await;
}

/// With the primary's region out (its Lambda stopped, its S3 unreadable from the secondary as
/// `reach` says), the secondary runs the function again, once, and that answer is the one PUT.
async fn a_pending_answer_in_a_region_out_is_redone_once(label: &str, reach: Reach) {
    let (
        log_dir,
        [(primary_api, primary_bucket, _primary_proxy), (secondary_api, secondary_bucket, _secondary_proxy)],
        mut regions,
        sent,
        published,
    ) = late_self_answer(label, reach, 20).await;
    let waiting = regions.record(&sent).await.expect("a record");
    regions.kill_primary().await;

    let (answer, record) = answered_after(&regions, &sent, published, &format!("{reach:?}"), waiting.fence).await;
    assert_eq!(answer.status, Status::Success, "{:?}", answer.reason);
    assert_eq!(answer.data["AnsweredIn"], json!("us-west-2"), "the new execution's answer");
    assert!(record.owner.starts_with("us-west-2") && record.fence > waiting.fence, "{record:?}");
    assert_eq!(secondary_api.invokes("responder"), 1, "one new execution, in the secondary's region");
    let new = answers_in("us-west-2", &secondary_bucket).await;
    assert_eq!(new.len(), 1, "{new:?}");

    // The first execution's late answer lands in us-east-1's bucket, where nobody reads.
    while answers_in("us-east-1", &primary_bucket).await.is_empty() {
        assert!(published.elapsed() < Duration::from_secs(40), "the late answer never landed");
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    regions.primary.start();
    let put = one_put_after(&regions, &sent, [&primary_api, &secondary_api], (1, 1), &log_dir).await;
    assert_eq!(put.data["AnsweredIn"], json!("us-west-2"));
    regions.stop().await;
}

#[tokio::test]
async fn a_self_answer_pending_in_a_region_that_is_out_is_redone_once_by_a_new_execution() {
    a_pending_answer_in_a_region_out_is_redone_once("region-out-self-answer", Reach::PrimaryRegionOut).await;
}

/// The same outage as the deployed read meets a silent region: every read waits out its
/// timeout (3 s, the deployed `CFN_ONCE_STORE_TIMEOUT_MS`) instead of being refused.
#[tokio::test]
async fn a_self_answer_pending_in_a_silent_region_is_redone_once_by_a_new_execution() {
    a_pending_answer_in_a_region_out_is_redone_once("silent-region-self-answer", Reach::PrimaryRegionSilent).await;
}
