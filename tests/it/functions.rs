//! Custom resources you already have: a Python Lambda function written for the CDK Provider
//! framework (`examples/functions/cdk-provider`, `on_event` and `is_complete` under
//! `awslambdaric`) answered exactly once through cfn-once on moto, each handler region invoking
//! its own region's copy through the real `aws-sdk-lambda` client and the local Invoke API.

use std::path::PathBuf;
use std::sync::Arc;
use std::time::{Duration, Instant};

use cfn_once::providers::function::{FunctionInvoker, FunctionProvider, LambdaInvoker};
use cfn_once_cli::local::invoke_api::InvokeApi;
use cfn_once_cli::local::lambda_service::{FunctionSpec, LocalFunction};
use cfn_once_core::aws_names::FunctionRef;
use cfn_once_core::config::FunctionRoute;
use cfn_once_core::lease::LeaseState;
use cfn_once_core::provider::Router;
use cfn_once_core::response::{ResponseBody, Status};
use cfn_once_core::worker::Ports;
use cfn_once_tests::{Sent, TwoRegions};
use serde_json::{Value, json};

const TYPE: &str = "Custom::Reservation";
const DELAY_S: u32 = 2;
const SETTINGS: [(&str, &str); 7] = [
    ("CFN_ONCE_STORE_TIMEOUT_MS", "1000"),
    ("CFN_ONCE_PUT_TIMEOUT_MS", "1500"),
    ("CFN_ONCE_LEASE_MS", "3000"),
    ("CFN_ONCE_HEARTBEAT_MS", "1000"),
    ("CFN_ONCE_SKEW_MS", "200"),
    ("CFN_ONCE_STANDBY_RETRY_S", "1"),
    ("CFN_ONCE_DEADLINE_MARGIN_MS", "6000"),
];

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
    };
    let invoker: Arc<dyn FunctionInvoker> = Arc::new(LambdaInvoker::new(&sdk));
    Router::new().register(TYPE, FunctionProvider::new(route, region, invoker))
}

/// Both regions on moto, each routing `Custom::Reservation` to its own copies of the function
/// (logging into the returned folder).
async fn two_regions_with_functions(label: &str) -> (PathBuf, InvokeApi, InvokeApi, TwoRegions) {
    let dir = std::env::temp_dir().join(cfn_once_tests::unique(label));
    std::fs::create_dir_all(&dir).expect("a temporary directory");
    let primary_api = functions_in("us-east-1", &dir).await;
    let secondary_api = functions_in("us-west-2", &dir).await;
    let regions = TwoRegions::with_ports(
        DELAY_S,
        &SETTINGS,
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

fn logs(dir: &std::path::Path) -> String {
    let mut all = String::new();
    for entry in std::fs::read_dir(dir).expect("the log folder") {
        all.push_str(&std::fs::read_to_string(entry.expect("an entry").path()).unwrap_or_default());
    }
    all
}

fn signature(sent: &Sent) -> String {
    let url = sent.request["ResponseURL"].as_str().expect("a ResponseURL");
    url.split("X-Amz-Signature=").nth(1).expect("a presigned URL").split('&').next().unwrap_or_default().to_owned()
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
