//! The operator's tools on local AWS: `inspect` tells a request's state in each of its states,
//! `stuck` lists the unanswered and the undelivered, and `redrive` after an outage moves the
//! dead-lettered copies back so that committed answers are delivered, once, and leaves what
//! nobody can answer. The binary is run once, with `--json`, as an operator would.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use async_trait::async_trait;
use cfn_once_core::lease::LeaseState;
use cfn_once_core::put::{PutError, ResponseSink};
use cfn_once_core::response::{ResponseBody, Status};
use cfn_once_core::response_url::ResponseUrl;
use cfn_once_core::worker::Ports;
use cfn_once_ops::OpsTarget;
use cfn_once_ops::inspect::{InspectOptions, InspectReport, inspect};
use cfn_once_ops::redrive::{RedriveOptions, redrive};
use cfn_once_ops::stuck::{StuckOptions, stuck};
use cfn_once_tests::{Sent, TwoRegions};
use serde_json::{Value, json};

const SETTINGS: [(&str, &str); 7] = [
    ("CFN_ONCE_STORE_TIMEOUT_MS", "1000"),
    ("CFN_ONCE_PUT_TIMEOUT_MS", "1000"),
    ("CFN_ONCE_PUT_ATTEMPTS_MAX", "2"),
    ("CFN_ONCE_LEASE_MS", "2000"),
    ("CFN_ONCE_HEARTBEAT_MS", "500"),
    ("CFN_ONCE_SKEW_MS", "200"),
    ("CFN_ONCE_DEADLINE_MARGIN_MS", "6000"),
];
const TIMEOUT: Duration = Duration::from_secs(60);

pub(crate) async fn inspect_one(target: &OpsTarget, sent: &Sent) -> InspectReport {
    let options = InspectOptions {
        stack_id: sent.request_key.stack_id.to_string(),
        request_id: Some(sent.request_key.request_id.clone()),
        logical_id: None,
        limit: 1,
        dead_letters: true,
    };
    inspect(target, &options).await.expect("inspect")
}

/// Waits until `sent`'s record is in `state`.
async fn until_state(regions: &TwoRegions, sent: &Sent, state: LeaseState) {
    let started = Instant::now();
    while regions.record(sent).await.is_none_or(|record| record.state != state) {
        assert!(started.elapsed() < TIMEOUT, "never reached {state:?}");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

#[tokio::test]
async fn inspect_tells_a_request_in_each_of_its_states() {
    let mut regions = TwoRegions::new(2, &SETTINGS).await;
    let target = OpsTarget::from_env_file(&regions.env.file);

    // Delivered.
    let delivered = regions.request("create-echo.json").await;
    regions.publish(&delivered).await;
    regions.wait_for_answer(&delivered, Instant::now(), TIMEOUT).await;
    let report = inspect_one(&target, &delivered).await;
    println!("--- delivered\n{}", report.render());
    let view = report.requests[0].record.as_ref().expect("a record");
    assert_eq!((view.state.as_str(), view.delivered, view.fence), ("COMMITTED", true, 1));
    assert_eq!(view.answer.as_ref().map(|a| a.status.as_str()), Some("SUCCESS"));
    assert_eq!((view.logical_resource_id.as_str(), view.request_type.as_str()), ("Greeting", "Create"));
    assert!(view.summary.starts_with("answered SUCCESS and delivered"), "{}", view.summary);

    // Superseded: CloudFormation retried the deployment with the same RequestId.
    let mut retried = delivered.clone();
    retried.request["ResourceProperties"]["Message"] = json!("second attempt");
    retried.key = format!("{}-retry", delivered.key);
    let url = cfn_once_local::provision::presigned_put_url(
        &regions.s3,
        &regions.env.file.response_bucket,
        &retried.key,
        7_200,
    )
    .await
    .expect("URL");
    retried.request["ResponseURL"] = Value::String(url);
    regions.publish(&retried).await;
    regions.wait_for_answer(&retried, Instant::now(), TIMEOUT).await;
    let report = inspect_one(&target, &delivered).await;
    println!("--- superseded\n{}", report.render());
    let view = report.requests[0].record.as_ref().expect("a record");
    assert_eq!((view.attempts, view.fence), (2, 2));
    assert!(report.render().contains("2 attempts reused this RequestId; copies of the earlier ones are superseded"));

    // Waiting between polls.
    let waiting = regions.request("create-echo-long.json").await;
    regions.publish(&waiting).await;
    until_state(&regions, &waiting, LeaseState::Waiting).await;
    let report = inspect_one(&target, &waiting).await;
    println!("--- waiting\n{}", report.render());
    let view = report.requests[0].record.as_ref().expect("a record");
    let wait = view.in_progress.as_ref().expect("work in progress");
    assert_eq!(view.state, "WAITING");
    assert!(wait.state.contains("\"PollIntervalS\":5"), "{}", wait.state);
    assert!(view.summary.contains("nobody holds the lease until the next poll"), "{}", view.summary);

    // Running, by the primary.
    let mut running = regions.request("create-echo.json").await;
    running.request["ResourceProperties"]["DelayMs"] = json!("8000");
    regions.publish(&running).await;
    until_state(&regions, &running, LeaseState::Running).await;
    let report = inspect_one(&target, &running).await;
    println!("--- running\n{}", report.render());
    let view = report.requests[0].record.as_ref().expect("a record");
    assert_eq!((view.state.as_str(), view.holder_region.as_str()), ("RUNNING", "us-east-1"));
    assert!(view.lease_left_ms.is_some_and(|left| left > 0), "{view:?}");
    assert!(view.summary.contains("us-east-1 is running the provider"), "{}", view.summary);

    // By logical id: the latest requests of the resource, newest first.
    let latest = inspect(
        &target,
        &InspectOptions {
            stack_id: running.request_key.stack_id.to_string(),
            request_id: None,
            logical_id: Some("Greeting".into()),
            limit: 5,
            dead_letters: false,
        },
    )
    .await
    .expect("inspect by logical id");
    let ids: Vec<&str> = latest.requests.iter().map(|r| r.request_id.as_str()).collect();
    assert_eq!(ids.first(), Some(&running.request_key.request_id.as_str()), "{ids:?}");
    assert!(ids.contains(&delivered.request_key.request_id.as_str()));

    // No ResponseURL anywhere in what the tool says.
    for sent in [&delivered, &retried, &waiting, &running] {
        let url = sent.request["ResponseURL"].as_str().expect("url");
        let text = inspect_one(&target, sent).await;
        assert!(!text.render().contains(url) && !serde_json::to_string(&text).expect("json").contains(url));
    }
    regions.stop().await;
}

/// S3 as seen from the primary: down while `down` is set.
#[derive(Debug)]
struct Outage {
    inner: Arc<dyn ResponseSink>,
    down: Arc<AtomicBool>,
}

#[async_trait]
impl ResponseSink for Outage {
    async fn put(&self, url: &ResponseUrl, body: &[u8]) -> Result<(), PutError> {
        if self.down.load(Ordering::SeqCst) {
            return Err(PutError::Retryable("simulated S3 outage: 503".into()));
        }
        self.inner.put(url, body).await
    }
}

#[tokio::test]
async fn after_an_outage_redrive_delivers_committed_answers_once_and_leaves_the_undeliverable() {
    let down = Arc::new(AtomicBool::new(true));
    let outage = Arc::clone(&down);
    let mut regions = TwoRegions::with_primary(2, &SETTINGS, move |ports| Ports {
        sink: Arc::new(Outage { inner: ports.sink.clone(), down: outage }),
        ..ports
    })
    .await;
    // The secondary region is down too, for the whole outage.
    regions.secondary.kill().await;
    let target = OpsTarget::from_env_file(&regions.env.file);

    // A request whose answer is committed but cannot be PUT before its 12 s deadline...
    let mut late = regions.request("create-echo.json").await;
    late.request["ResourceProperties"]["ServiceTimeout"] = json!("12");
    regions.publish(&late).await;
    // ...and one nobody can ever answer (its ResponseURL is not an S3 URL).
    let mut lost = regions.request("create-echo.json").await;
    lost.request["ResponseURL"] = json!("https://evil.example.com/steal?X-Amz-Signature=x");
    regions.publish(&lost).await;

    let dlq_depth = || async {
        let file = &regions.env.file;
        cfn_once_local::provision::queue_depth(&regions.sqs_primary, &file.queues.primary_dlq).await.expect("depth")
    };
    let started = Instant::now();
    while dlq_depth().await < 2 {
        assert!(started.elapsed() < TIMEOUT, "both copies never reached the primary's DLQ");
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    let record = regions.record(&late).await.expect("record");
    assert_eq!((record.state, record.delivered), (LeaseState::Committed, false), "committed, not delivered");
    assert!(regions.responses(&late).await.is_empty(), "nothing reached S3 during the outage");

    let report = inspect_one(&target, &late).await;
    println!("--- committed, not delivered, its copy in the DLQ\n{}", report.render());
    let copies = &report.requests[0].dead_letters;
    assert_eq!(copies.len(), 1, "{copies:?}");
    assert_eq!((copies[0].cause.as_str(), copies[0].attempt.as_str()), ("deadline-passed", "this record's attempt"));
    assert_eq!(dlq_depth().await, 2, "inspect released what it held");

    let options = StuckOptions { older_than_ms: 60_000, undelivered_ms: 1_000, poll_overdue_ms: 600_000 };
    let listed = stuck(&target, options).await.expect("stuck");
    println!("--- stuck\n{}", cfn_once_ops::stuck::render(&listed));
    assert!(
        listed.iter().any(|s| s.record.request_id == late.request_key.request_id && s.why.contains("not delivered"))
    );

    // The outage ends. A dry run moves nothing and says what would happen.
    down.store(false, Ordering::SeqCst);
    let options = RedriveOptions { dry_run: true, include_undeliverable: false, max: 100 };
    let dry = redrive(&target, options).await.expect("dry run");
    println!("--- redrive --dry-run\n{}", dry.render());
    assert_eq!((dry.moved, dry.skipped, dry.messages.len()), (0, 1, 2));
    let late_entry =
        dry.messages.iter().find(|m| m.request_id.as_deref() == Some(&late.request_key.request_id)).expect("late");
    assert_eq!(late_entry.record_says, "answered but not delivered: the redriven copy PUTs the stored answer");
    assert_eq!(dlq_depth().await, 2, "a dry run moves nothing");

    let done = redrive(&target, RedriveOptions { dry_run: false, ..options }).await.expect("redrive");
    println!("--- redrive\n{}", done.render());
    assert_eq!((done.moved, done.skipped), (1, 1));
    let (body, _) = regions.wait_for_answer(&late, Instant::now(), TIMEOUT).await;
    assert_eq!(ResponseBody::parse(&body).expect("body").status, Status::Success);
    assert!(regions.record(&late).await.expect("record").delivered);

    // The secondary comes back; its copy finds the answer delivered. One PUT in all.
    regions.secondary.start();
    regions.drain(TIMEOUT).await;
    let puts = regions.responses(&late).await.len();
    println!("PUTs for the redriven request: {puts}; DLQ left holding {} (the undeliverable one)", dlq_depth().await);
    assert_eq!(puts, 1, "delivered once");
    assert_eq!(dlq_depth().await, 1, "the undeliverable copy stays");

    // The operator binary, as an operator runs it, agrees.
    let env_file = std::env::temp_dir().join(format!("{}-env.json", late.request_key.request_id));
    regions.env.file.write(&env_file).expect("env file");
    let binary = sibling_binary("cfn-once");
    let output = std::process::Command::new(&binary)
        .args(["inspect", "--env"])
        .arg(&env_file)
        .args(["--stack-id", &late.request_key.stack_id, "--request-id", &late.request_key.request_id, "--json"])
        .output()
        .unwrap_or_else(|error| panic!("{}: {error} (build it: cargo build --workspace --bins)", binary.display()));
    assert!(output.status.success(), "{}", String::from_utf8_lossy(&output.stderr));
    let json: Value = serde_json::from_slice(&output.stdout).expect("--json prints JSON");
    let record = &json["requests"][0]["record"];
    assert_eq!((record["state"].as_str(), record["delivered"].as_bool()), (Some("COMMITTED"), Some(true)));
    let url = late.request["ResponseURL"].as_str().expect("url");
    assert!(!String::from_utf8_lossy(&output.stdout).contains(url));
    let _ = std::fs::remove_file(env_file);
    regions.stop().await;
}

/// A resource with a wait condition: `inspect` shows its request answered at once and, beside
/// it, its work, WAITING between polls and then COMMITTED with the signal it sent; `stuck` leaves
/// the work out while its polls come on time (its age says nothing: it may rightly take 12
/// hours) and lists it once a poll is overdue. The handle is shown nowhere.
#[tokio::test]
async fn inspect_and_stuck_tell_a_wait_condition_work_by_its_polls_and_its_signal() {
    use cfn_once_core::lease::LeaseStore;
    use cfn_once_local::long_work::{self, LongWork};

    let mut regions = TwoRegions::new(2, &SETTINGS).await;
    let target = OpsTarget::from_env_file(&regions.env.file);
    let store = cfn_once::adapters::dynamodb_lease::DynamoLeaseStore::new(
        regions.dynamodb.clone(),
        &regions.env.file.table_name,
    );
    let send = |in_progress_s: &str| {
        let regions = &regions;
        let in_progress_s = in_progress_s.to_owned();
        async move {
            let mut sent = regions.request(long_work::EVENT).await;
            let properties = &mut sent.request["ResourceProperties"];
            properties["ServiceTimeout"] = json!("30");
            properties["InProgressForS"] = json!(in_progress_s);
            properties["PollIntervalS"] = json!("4");
            properties["CfnOnceWaitTimeout"] = json!("120");
            let work = LongWork::send(&regions.env, sent.request.clone(), &sent.key).await.expect("sent");
            (sent, work)
        }
    };
    let until = |key: &cfn_once_core::request::RequestKey, check: fn(&cfn_once_core::lease::LeaseRecord) -> bool| {
        let (store, key) = (&store, key.clone());
        async move {
            let started = Instant::now();
            loop {
                if let Some(record) = store.read(&key).await.expect("read").filter(check) {
                    return record;
                }
                assert!(started.elapsed() < TIMEOUT, "the work's record never got there");
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
        }
    };
    let shown = |report: &InspectReport| format!("{}{}", report.render(), serde_json::to_string(report).expect("JSON"));

    // Waiting between polls: the request's record, answered at once, then its work's.
    let (sent, work) = send("10").await;
    until(&work.work_key, |record| {
        record.state == LeaseState::Waiting && record.poll.as_ref().is_some_and(|p| p.polls >= 1)
    })
    .await;
    let report = inspect_one(&target, &sent).await;
    println!("--- a work between polls, by the request's id\n{}", report.render());
    assert_eq!(report.requests.len(), 2, "the request and its work");
    let answer = report.requests[0].record.as_ref().expect("the request's record");
    assert!(!answer.work && answer.delivered, "{answer:?}");
    assert_eq!(answer.answer.as_ref().map(|a| a.status.as_str()), Some("SUCCESS"));
    let waiting = report.requests[1].record.as_ref().expect("the work's record");
    assert_eq!(waiting.request_id, work.work_key.request_id);
    assert!(waiting.request_id.starts_with("cfn-once-work:") && waiting.work, "{waiting:?}");
    assert_eq!((waiting.state.as_str(), waiting.logical_resource_id.as_str()), ("WAITING", "Backfill"));
    assert!(waiting.in_progress.as_ref().is_some_and(|wait| wait.polls >= 1), "{waiting:?}");
    assert!(waiting.summary.contains("the wait condition waits for the signal"), "{}", waiting.summary);
    assert!(report.render().contains("work      the wait condition work of Backfill"));
    assert!(!shown(&report).contains("BackfillHandle/") && !shown(&report).contains("X-Amz-Signature"));

    // Everything older than 0 s counts as old; a work whose polls come on time is still not stuck.
    let options = StuckOptions { older_than_ms: 0, undelivered_ms: 60_000, poll_overdue_ms: 30_000 };
    let listed = stuck(&target, options).await.expect("stuck");
    println!("--- stuck while the work waits\n{}", cfn_once_ops::stuck::render(&listed));
    assert!(!listed.iter().any(|entry| entry.record.work), "{listed:?}");

    // Signalled and delivered: shown by the logical id too.
    let arrivals = work.wait(&regions.s3, &regions.env.file.response_bucket, TIMEOUT).await.expect("watched");
    assert!(arrivals.signalled_after.is_some(), "signalled");
    until(&work.work_key, |record| record.delivered).await;
    let by_logical_id = InspectOptions {
        stack_id: sent.request_key.stack_id.to_string(),
        request_id: None,
        logical_id: Some("Backfill".into()),
        limit: 5,
        dead_letters: false,
    };
    let report = inspect(&target, &by_logical_id).await.expect("inspect");
    println!("--- the work signalled, by the logical id\n{}", report.render());
    let signalled = report
        .requests
        .iter()
        .filter_map(|inspection| inspection.record.as_ref())
        .find(|view| view.request_id == work.work_key.request_id)
        .expect("the work");
    assert_eq!((signalled.state.as_str(), signalled.delivered), ("COMMITTED", true));
    let signal = signalled.signal.as_ref().expect("its signal");
    assert_eq!(
        (signal.status.as_str(), signal.unique_id.as_str(), signal.reason.as_str()),
        ("SUCCESS", "Backfill", "the work completed")
    );
    assert!(signalled.summary.starts_with("signalled SUCCESS to the wait condition and delivered"));
    assert_eq!(
        report.requests.iter().filter(|inspection| inspection.request_id == work.work_key.request_id).count(),
        1
    );

    // A second work, and both regions stop while it waits: once its poll is overdue, it is stuck.
    let (_, stopped) = send("60").await;
    let record = until(&stopped.work_key, |record| record.state == LeaseState::Waiting).await;
    regions.stop().await;
    let poll_at_ms = record.poll.as_ref().expect("a poll").poll_at_ms;
    while cfn_once_tests::now_ms() < poll_at_ms + 2_000 {
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    let options = StuckOptions { poll_overdue_ms: 1_000, ..options };
    let listed = stuck(&target, options).await.expect("stuck");
    println!("--- stuck with both regions stopped\n{}", cfn_once_ops::stuck::render(&listed));
    let works: Vec<&str> =
        listed.iter().filter(|entry| entry.record.work).map(|entry| entry.record.request_id.as_str()).collect();
    assert_eq!(works, [stopped.work_key.request_id.as_str()], "only the stopped work, not the signalled one");
    let entry = listed.iter().find(|entry| entry.record.work).expect("the stopped work");
    assert!(
        entry.why.starts_with("wait condition work: its next poll is") && entry.why.contains("overdue"),
        "{}",
        entry.why
    );

    // The operator binary says so in its help.
    let help =
        std::process::Command::new(sibling_binary("cfn-once")).args(["stuck", "--help"]).output().expect("cfn-once");
    let help = String::from_utf8_lossy(&help.stdout);
    assert!(help.contains("--poll-overdue-s") && help.contains("wait-condition work"), "{help}");
}

/// A binary of the workspace in the same target directory as this test binary.
fn sibling_binary(name: &str) -> std::path::PathBuf {
    let test_binary = std::env::current_exe().expect("the test binary's path");
    let profile_dir = test_binary.parent().and_then(|deps| deps.parent()).expect("a target directory");
    profile_dir.join(format!("{name}{}", std::env::consts::EXE_SUFFIX))
}

/// SQS answers a receive from a sample of its servers, so an empty answer does not mean an
/// empty queue. Played here by the proxy, which answers the first two receives on the DLQ with
/// no messages while 25 are there: every one must still be read, and the summary says so.
#[tokio::test]
async fn reading_a_dlq_does_not_stop_at_an_empty_receive() {
    let regions = TwoRegions::new(1, &SETTINGS).await;
    let mut target = OpsTarget::from_env_file(&regions.env.file);
    let dlq_url = regions.env.file.queues.primary_dlq.clone();
    for index in 0..25 {
        regions
            .sqs_primary
            .send_message()
            .queue_url(&dlq_url)
            .message_body(format!("{{\"not\": \"a request\", \"index\": {index}}}"))
            .send()
            .await
            .expect("a message in the DLQ");
    }
    let proxy = cfn_once_tests::FaultProxy::start(&regions.env.file.endpoint_url);
    let dlq_name = dlq_url.rsplit('/').next().expect("a queue name").to_owned();
    proxy.inject(
        cfn_once_tests::Match::OperationWith("ReceiveMessage".into(), dlq_name),
        cfn_once_tests::Fault::Respond {
            status: 200,
            content_type: "application/x-amz-json-1.0".into(),
            body: "{}".into(),
        },
        2,
    );
    target.endpoint_url = Some(proxy.url());
    let queue = target.queues[0].clone();
    let sqs = target.sqs(&queue).await;
    let held = cfn_once_ops::dlq::hold_all(&sqs, &queue, 1_000).await.expect("hold");
    let summary = held.summary("primary DLQ");
    println!("{summary}");
    assert_eq!(held.messages.len(), 25, "{summary}");
    assert_eq!(held.left.visible, 0, "{summary}");
    assert!(summary.starts_with("primary DLQ: held 25 message(s); its counts then: 0 visible"), "{summary}");
    cfn_once_ops::dlq::release(&sqs, &queue, &held.messages).await.expect("release");
}
