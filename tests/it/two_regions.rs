//! Two regions on local AWS: the secondary's delayed queue, takeovers across regions, the
//! drill, reused RequestIds, deadlines, and a storm with the primary restarted midway.

use std::sync::Arc;
use std::time::{Duration, Instant};

use cfn_once_core::doubles::{Fault, FaultyStore, Op, PutFault, RecordingSink};
use cfn_once_core::lease::LeaseState;
use cfn_once_core::response::{ResponseBody, Status};
use cfn_once_core::vocabulary::{Disposition, Done};
use cfn_once_ops::drill::{self, DrillOptions, DrillTarget};
use cfn_once_tests::{Sent, TwoRegions};
use serde_json::json;

/// The secondary queue's delay, short for tests (as the two-region tests of other modules use).
pub(crate) const DELAY_S: u32 = 2;
/// Short leases and calls, and a 6 s deadline margin: the two-region tests' settings (as the
/// tests of other modules use, `wait_conditions.rs` among them).
pub(crate) const SETTINGS: [(&str, &str); 8] = [
    ("CFN_ONCE_STORE_TIMEOUT_MS", "1000"),
    ("CFN_ONCE_PUT_TIMEOUT_MS", "1500"),
    ("CFN_ONCE_LEASE_MS", "2000"),
    ("CFN_ONCE_HEARTBEAT_MS", "500"),
    ("CFN_ONCE_SKEW_MS", "200"),
    ("CFN_ONCE_CONTROL_CACHE_MS", "300"),
    ("CFN_ONCE_STANDBY_RETRY_S", "1"),
    ("CFN_ONCE_DEADLINE_MARGIN_MS", "6000"),
];
const TIMEOUT: Duration = Duration::from_secs(60);

fn answered_by(region: &TwoRegions, record: &cfn_once_core::lease::LeaseRecord) -> String {
    let owner_region = record.owner.split('/').next().unwrap_or_default().to_owned();
    assert!(owner_region == region.env.file.primary_region || owner_region == region.env.file.secondary_region);
    owner_region
}

fn status(bytes: &[u8]) -> Status {
    ResponseBody::parse(bytes).expect("response body").status
}

#[tokio::test]
async fn primary_down_the_secondary_answers_once_after_the_queue_delay() {
    let mut regions = TwoRegions::new(DELAY_S, &SETTINGS).await;
    regions.kill_primary().await;
    let sent = regions.request("create-echo.json").await;
    let published = Instant::now();
    regions.publish(&sent).await;
    let (body, took) = regions.wait_for_answer(&sent, published, TIMEOUT).await;
    assert!(took >= Duration::from_secs(u64::from(DELAY_S)), "answered after {took:?}, before the queue delay");
    let record = regions.record(&sent).await.expect("record");
    assert_eq!(answered_by(&regions, &record), regions.env.file.secondary_region);
    assert_eq!((record.fence, status(&body)), (1, Status::Success));

    // The primary comes back, finds its copy answered and drops it.
    regions.primary.start();
    regions.drain(TIMEOUT).await;
    assert_eq!(regions.responses(&sent).await.len(), 1, "answered once");
    assert_eq!(regions.primary_observed.dispositions(&sent), vec![Disposition::Done(Done::Duplicate)]);
    assert_eq!(regions.dead_letters().await, 0);
    regions.stop().await;
}

#[tokio::test]
async fn a_partitioned_primary_is_taken_over_and_its_late_commit_is_rejected() {
    // The primary's heartbeats never reach the table (a partition), so it does not notice when
    // its lease lapses; it keeps running the provider and tries to commit afterwards.
    let mut regions = TwoRegions::with_primary(DELAY_S, &SETTINGS, |mut ports| {
        let faulty = FaultyStore::new(ports.store.clone());
        for _ in 0..1_000 {
            faulty.inject(Op::Heartbeat, Fault::Transient);
        }
        ports.store = Arc::new(faulty);
        ports
    })
    .await;
    let mut sent = regions.request("create-echo.json").await;
    // Longer than the lease (2 s) and the secondary's delay (2 s) plus its backoff floor (4 s,
    // which keeps receives within maxReceiveCount): the secondary is back, and takes over,
    // before the partitioned primary finishes.
    sent.request["ResourceProperties"]["DelayMs"] = json!("12000");
    regions.publish(&sent).await;
    let (body, _) = regions.wait_for_answer(&sent, Instant::now(), TIMEOUT).await;
    regions.drain(TIMEOUT).await;

    let record = regions.record(&sent).await.expect("record");
    assert_eq!(answered_by(&regions, &record), regions.env.file.secondary_region, "the secondary took over");
    assert_eq!((record.fence, record.state, status(&body)), (2, LeaseState::Committed, Status::Success));
    assert_eq!(regions.responses(&sent).await, vec![body], "exactly one body was PUT");
    let primary = regions.primary_observed.dispositions(&sent);
    assert!(
        primary
            .iter()
            .any(|d| matches!(d, Disposition::Retry { why, .. } if why.contains("taken over before the commit"))),
        "the late primary's commit was rejected: {primary:?}"
    );
    assert!(!primary.iter().any(|d| matches!(d, Disposition::Done(Done::Answered { .. }))));
    regions.stop().await;
}

#[tokio::test]
async fn a_primary_crash_between_commit_and_put_is_finished_by_the_secondary() {
    let hanging = Arc::new(RecordingSink::new());
    hanging.inject(PutFault::Hang);
    let sink = Arc::clone(&hanging);
    let mut regions = TwoRegions::with_primary(DELAY_S, &SETTINGS, move |mut ports| {
        ports.sink = sink;
        ports
    })
    .await;
    let sent = regions.request("create-echo.json").await;
    regions.publish(&sent).await;
    let started = Instant::now();
    let committed = loop {
        if let Some(record) = regions.record(&sent).await.filter(|r| r.state == LeaseState::Committed) {
            break record;
        }
        assert!(started.elapsed() < TIMEOUT, "the primary never committed");
        tokio::time::sleep(Duration::from_millis(20)).await;
    };
    regions.kill_primary().await;
    assert!(regions.responses(&sent).await.is_empty() && hanging.all().is_empty(), "killed before any PUT");

    let (body, _) = regions.wait_for_answer(&sent, Instant::now(), TIMEOUT).await;
    assert_eq!(Some(body), committed.response, "the secondary PUT the stored bytes");
    let secondary = regions.secondary_observed.dispositions(&sent);
    assert_eq!(secondary.last(), Some(&Disposition::Done(Done::Replayed { fence: 1 })), "no new execution was needed");
    assert!(
        secondary[..secondary.len() - 1]
            .iter()
            .all(|d| matches!(d, Disposition::Retry { why, .. } if why.contains("just committed"))),
        "before that it only left the fresh commit to its committer: {secondary:?}"
    );
    assert_eq!(regions.responses(&sent).await.len(), 1);
    assert!(regions.record(&sent).await.expect("record").delivered);
    regions.stop().await;
}

#[tokio::test]
async fn the_drill_moves_new_work_to_the_secondary_and_back() {
    // A long lease: if the secondary had to wait out a lease of the drained primary, the probe
    // would take it; instead the drained primary never takes one.
    let settings: Vec<(&str, &str)> =
        SETTINGS.iter().copied().map(|(k, v)| if k == "CFN_ONCE_LEASE_MS" { (k, "10000") } else { (k, v) }).collect();
    let mut regions = TwoRegions::new(DELAY_S, &settings).await;
    let target = DrillTarget::from_env_file(&regions.env.file);
    let report =
        drill::run(&target, DrillOptions { settle_ms: 800, answer_timeout_ms: 60_000 }, |_| {}).await.expect("drill");
    println!("{}", report.render());
    assert!(report.passed, "{report:?}");
    let (to_secondary, back) = (&report.probes[0], &report.probes[1]);
    assert_eq!(to_secondary.answered_by.as_deref(), Some(regions.env.file.secondary_region.as_str()));
    assert_eq!(back.answered_by.as_deref(), Some(regions.env.file.primary_region.as_str()));
    assert!(to_secondary.latency_ms.is_some_and(|ms| ms < 10_000), "did not wait out a lease");

    regions.drain(TIMEOUT).await;
    let probe = |key: &str| Sent {
        request: json!({}),
        key: key.to_owned(),
        request_key: cfn_once_core::request::RequestKey {
            // Only the RequestId is compared; the drill's stack is its own.
            stack_id: cfn_once_core::request::StackArn::parse(
                "arn:aws:cloudformation:us-east-1:123456789012:stack/cfn-once-drill/probe",
            )
            .expect("a stack ARN"),
            request_id: key.trim_start_matches("cfn-once-drill/").to_owned(),
        },
    };
    let first_probe = probe(&to_secondary.response_key);
    let drained_copies = regions.primary_observed.dispositions(&first_probe);
    assert!(!drained_copies.is_empty(), "the primary saw its copy of the first probe");
    assert!(
        !drained_copies.iter().any(|d| matches!(d, Disposition::Done(Done::Answered { .. } | Done::Replayed { .. }))),
        "the drained primary did nothing for the first probe: {drained_copies:?}"
    );
    assert!(
        drained_copies.iter().any(|d| matches!(d, Disposition::Retry { why, .. } if why.contains("standby"))),
        "it left its copy as the standby: {drained_copies:?}"
    );
    assert_eq!(regions.dead_letters().await, 0);
    regions.stop().await;
}

#[tokio::test]
async fn a_reused_request_id_is_a_new_attempt_and_the_old_outcome_is_not_replayed() {
    let mut regions = TwoRegions::new(DELAY_S, &SETTINGS).await;
    let first = regions.request("create-echo.json").await;
    regions.publish(&first).await;
    let (first_body, _) = regions.wait_for_answer(&first, Instant::now(), TIMEOUT).await;
    regions.drain(TIMEOUT).await;

    // The retried deployment: same StackId and RequestId, new ResponseURL, changed properties.
    let mut retried = regions.request("create-echo.json").await;
    retried.request["RequestId"] = json!(first.request_key.request_id);
    retried.request["StackId"] = json!(first.request_key.stack_id.as_str());
    retried.request["ResourceProperties"]["Message"] = json!("second attempt");
    retried.request_key = first.request_key.clone();
    regions.publish(&retried).await;
    let (retried_body, _) = regions.wait_for_answer(&retried, Instant::now(), TIMEOUT).await;
    regions.drain(TIMEOUT).await;

    let parsed = ResponseBody::parse(&retried_body).expect("body");
    assert_eq!(parsed.data["Message"], json!("second attempt"), "processed, not replayed");
    assert_ne!(retried_body, first_body);
    assert_eq!((regions.responses(&first).await.len(), regions.responses(&retried).await.len()), (1, 1));
    assert_eq!(regions.record(&retried).await.expect("record").fence, 2);
    regions.stop().await;
}

#[tokio::test]
async fn a_request_no_region_can_run_before_its_deadline_is_answered_failed() {
    let mut regions = TwoRegions::new(DELAY_S, &SETTINGS).await;
    // The secondary is active but its worker is down; the primary is drained.
    regions.set_active(&regions.env.file.secondary_region.clone()).await;
    regions.secondary.kill().await;
    let mut sent = regions.request("create-echo.json").await;
    sent.request["ResourceProperties"]["ServiceTimeout"] = json!("12");
    let published = Instant::now();
    regions.publish(&sent).await;
    let (body, took) = regions.wait_for_answer(&sent, published, TIMEOUT).await;
    let parsed = ResponseBody::parse(&body).expect("body");
    assert_eq!(parsed.status, Status::Failed);
    assert_eq!(
        parsed.reason.as_deref(),
        Some(
            "no region could run Custom::Echo Create before the request's deadline, set by the resource's ServiceTimeout; \
             answering FAILED rather than letting CloudFormation wait"
        )
    );
    assert!(took < Duration::from_secs(12), "answered before the 12 s ServiceTimeout, after {took:?}");
    let record = regions.record(&sent).await.expect("record");
    assert_eq!(answered_by(&regions, &record), regions.env.file.primary_region);
    assert_eq!(regions.responses(&sent).await.len(), 1);
    regions.stop().await;
}

#[tokio::test]
async fn storm_of_200_requests_with_the_primary_killed_and_restarted_midway() {
    const REQUESTS: usize = 200;
    let mut regions = TwoRegions::new(DELAY_S, &SETTINGS).await;
    let mut sent = Vec::with_capacity(REQUESTS);
    for index in 0..REQUESTS {
        let mut request = regions.request("create-echo.json").await;
        request.request["LogicalResourceId"] = json!(format!("Storm{index}"));
        request.request["ResourceProperties"]["Message"] = json!(format!("storm {index}"));
        sent.push(request);
    }
    let started = Instant::now();
    for chunk in sent.chunks(20) {
        futures_util::future::join_all(chunk.iter().map(|request| regions.publish(request))).await;
    }
    // Midway: once half the requests are answered (by either region: under load the delayed
    // secondary may take many), kill the primary mid-batch, keep it down while the secondary's
    // copies arrive, then bring it back.
    let answered = |regions: &TwoRegions| regions.primary_observed.answered() + regions.secondary_observed.answered();
    while answered(&regions) < REQUESTS / 2 {
        let (primary, secondary) = (regions.primary_observed.answered(), regions.secondary_observed.answered());
        assert!(
            started.elapsed() < Duration::from_secs(120),
            "only {primary} + {secondary} requests answered after 120 s"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    regions.primary.kill().await;
    tokio::time::sleep(Duration::from_secs(u64::from(DELAY_S) + 2)).await;
    regions.primary.start();

    for request in &sent {
        regions.wait_for_answer(request, started, Duration::from_secs(180)).await;
    }
    regions.drain(Duration::from_secs(120)).await;
    let mut by_region = std::collections::BTreeMap::<String, usize>::new();
    let mut resent = 0;
    for request in &sent {
        // One answer each: one committed body, and every PUT carries exactly those bytes. A
        // worker killed between its PUT and recording the delivery leaves the record
        // undelivered, so another execution PUTs the same bytes again; S3 then holds two
        // identical versions, which is the same answer (S1), not a second one.
        let bodies = regions.responses(request).await;
        let record = regions.record(request).await.expect("record");
        assert_eq!((record.state, record.delivered), (LeaseState::Committed, true), "{}", request.key);
        let committed = record.response.clone().expect("committed body");
        assert!(
            !bodies.is_empty() && bodies.iter().all(|body| *body == committed),
            "{}: a PUT differs from the commit",
            request.key
        );
        assert_eq!(status(&committed), Status::Success);
        resent += usize::from(bodies.len() > 1);
        *by_region.entry(answered_by(&regions, &record)).or_default() += 1;
    }
    println!(
        "storm: {REQUESTS} requests, one answer each, in {:?}; committed by region {by_region:?}; {resent} re-sent identically after the kill",
        started.elapsed()
    );
    assert_eq!(regions.dead_letters().await, 0, "the DLQs are empty");
    regions.stop().await;
}

/// One change of the lease record as a watcher saw it: when, who wrote it, what it said.
#[derive(Debug, Clone, PartialEq)]
struct Seen {
    at: Instant,
    region: String,
    fence: u64,
    state: LeaseState,
    polls: Option<u32>,
}

/// Reads the record every 100 ms until stopped and keeps each change.
fn watch_record(regions: &TwoRegions, sent: &Sent) -> (Arc<std::sync::Mutex<Vec<Seen>>>, tokio::task::JoinHandle<()>) {
    let store = cfn_once::adapters::dynamodb_lease::DynamoLeaseStore::new(
        regions.dynamodb.clone(),
        &regions.env.file.table_name,
    );
    let key = sent.request_key.clone();
    let seen = Arc::new(std::sync::Mutex::new(Vec::<Seen>::new()));
    let log = Arc::clone(&seen);
    let task = tokio::spawn(async move {
        use cfn_once_core::lease::LeaseStore;
        loop {
            if let Ok(Some(record)) = store.read(&key).await {
                let now = Seen {
                    at: Instant::now(),
                    region: record.owner.split('/').next().unwrap_or_default().to_owned(),
                    fence: record.fence,
                    state: record.state,
                    polls: record.poll.as_ref().map(|poll| poll.polls),
                };
                let mut log = log.lock().expect("watch log");
                let changed = log.last().is_none_or(|last| (last.fence, last.state) != (now.fence, now.state));
                if changed {
                    log.push(now);
                }
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    });
    (seen, task)
}

#[tokio::test]
async fn a_wait_started_in_the_primary_is_finished_by_the_secondary_when_the_primary_dies() {
    let mut regions = TwoRegions::new(DELAY_S, &SETTINGS).await;
    let (primary, secondary) = (regions.env.file.primary_region.clone(), regions.env.file.secondary_region.clone());
    // Custom::Echo in progress for 20 s, polled every 5 s.
    let sent = regions.request("create-echo-long.json").await;
    let (seen, watcher) = watch_record(&regions, &sent);
    let published = Instant::now();
    regions.publish(&sent).await;

    // The primary answers in progress and polls once; then its region dies mid-wait.
    loop {
        let polled =
            seen.lock().expect("watch log").iter().any(|s| s.state == LeaseState::Waiting && s.polls >= Some(1));
        if polled {
            break;
        }
        assert!(published.elapsed() < TIMEOUT, "the primary never polled");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    regions.kill_primary().await;
    let killed = Instant::now();

    let (body, took) = regions.wait_for_answer(&sent, published, Duration::from_secs(90)).await;
    watcher.abort();
    let parsed = ResponseBody::parse(&body).expect("body");
    let record = regions.record(&sent).await.expect("record");

    // The timeline: the record's changes and each region's dispositions, in order.
    let mut timeline: Vec<(Instant, String)> = seen
        .lock()
        .expect("watch log")
        .iter()
        .map(|s| {
            let what = match (s.state, s.polls) {
                (LeaseState::Running, Some(polls)) => format!("took the poll after {polls} (RUNNING)"),
                (LeaseState::Running, None) => "took the lease, runs the Create (RUNNING)".to_owned(),
                (LeaseState::Waiting, Some(0)) => "answered in progress; lease released (WAITING)".to_owned(),
                (LeaseState::Waiting, polls) => format!("poll {}: still in progress (WAITING)", polls.unwrap_or(0)),
                (LeaseState::Committed, _) => "committed the answer".to_owned(),
                (LeaseState::Left, _) => "lease given back unused by a standby primary (LEFT)".to_owned(),
            };
            (s.at, format!("record    {:<9}  fence {}  {what}", s.region, s.fence))
        })
        .collect();
    for (region, observed) in [(&primary, &regions.primary_observed), (&secondary, &regions.secondary_observed)] {
        for (at, disposition) in observed.timeline(&sent) {
            timeline.push((at, format!("delivery  {region:<9}  {}", cfn_once_local::report::outcome(&disposition))));
        }
    }
    timeline.push((killed, format!("--------  {primary:<9}  region killed (its worker and pollers)")));
    timeline.sort_by_key(|(at, _)| *at);
    println!("timeline of a wait that outlived its primary:");
    for (at, line) in &timeline {
        println!("  +{:>6.2} s  {line}", at.duration_since(published).as_secs_f64());
    }
    println!(
        "answered {:?} by {} after {took:?}, Polls {}",
        parsed.status,
        answered_by(&regions, &record),
        parsed.data["Polls"]
    );

    assert_eq!(parsed.status, Status::Success);
    assert_eq!(answered_by(&regions, &record), secondary, "the secondary finished the wait");
    let log = seen.lock().expect("watch log").clone();
    let first_wait = log.iter().find(|s| s.state == LeaseState::Waiting).expect("a wait");
    assert_eq!(first_wait.region, primary, "the wait began in the primary");
    // The watcher samples every 100 ms and may miss a quick poll's RUNNING moment, but every
    // poll leaves a higher fence: some record after the kill is the secondary's, under a fence
    // above any the primary took.
    let primary_fence = log.iter().filter(|s| s.region == primary).map(|s| s.fence).max().unwrap_or(0);
    assert!(
        log.iter().any(|s| s.at > killed && s.region == secondary && s.fence > primary_fence),
        "the secondary took a poll after the kill: {log:?}"
    );
    assert!(took >= Duration::from_secs(20), "not before the provider's 20 s: {took:?}");
    let polls: u32 = parsed.data["Polls"].as_str().and_then(|p| p.parse().ok()).expect("Polls");
    assert!((3..=5).contains(&polls), "about one poll per 5 s of the 20 s: {polls}");

    // The primary comes back, finds its copy answered and drops it; nothing reaches the DLQ.
    regions.primary.start();
    regions.drain(TIMEOUT).await;
    assert_eq!(regions.responses(&sent).await.len(), 1, "answered once");
    assert_eq!(regions.dead_letters().await, 0);
    regions.stop().await;
}

#[tokio::test]
async fn every_customer_region_topic_feeds_both_regions_and_gets_one_answer_each() {
    let mut regions = TwoRegions::new(DELAY_S, &SETTINGS).await;
    let topics = regions.env.file.customer_topics.clone();
    assert_eq!(topics.keys().map(String::as_str).collect::<Vec<_>>(), ["eu-west-1", "us-east-2"]);
    assert_eq!(topics.get(&regions.env.file.customer_region), Some(&regions.env.file.topic_arn));
    let mut sent = Vec::new();
    for region in topics.keys() {
        let request = regions.request_in("create-echo.json", region).await;
        assert!(request.request_key.stack_id.starts_with(&format!("arn:aws:cloudformation:{region}:")));
        regions.publish_to_its_topic(&request).await;
        sent.push(request);
    }
    for request in &sent {
        let (body, _) = regions.wait_for_answer(request, Instant::now(), TIMEOUT).await;
        assert_eq!(status(&body), Status::Success, "{}", request.request["ServiceToken"]);
    }
    // Both regions' copies of both requests are settled: one answer each, nothing dead-lettered.
    regions.drain(TIMEOUT).await;
    for request in &sent {
        assert_eq!(regions.responses(request).await.len(), 1, "one answer for {}", request.request["ServiceToken"]);
    }
    assert_eq!(regions.dead_letters().await, 0);
    regions.stop().await;
}

/// `make demo`'s long work, shortened: a resource with a wait condition is answered SUCCESS at
/// once, its work outlives the resource's ServiceTimeout and is signalled SUCCESS once after it,
/// and the rows the demo prints say when each came, from which region, under which fence, with
/// one PUT each, read back from S3's versions and the two lease records. The handle is never
/// shown.
#[tokio::test]
async fn the_demos_long_work_is_answered_at_once_and_signalled_once_after_its_service_timeout() {
    use cfn_once_local::long_work::{self, LongWork};

    let mut regions = TwoRegions::new(DELAY_S, &SETTINGS).await;
    let mut sent = regions.request(long_work::EVENT).await;
    let properties = &mut sent.request["ResourceProperties"];
    properties["ServiceTimeout"] = json!("10");
    properties["InProgressForS"] = json!("14");
    properties["PollIntervalS"] = json!("4");
    properties["CfnOnceWaitTimeout"] = json!("90");
    let file = &regions.env.file;
    let work = LongWork::send(&regions.env, sent.request.clone(), &sent.key).await.expect("sent");
    let arrivals = work.wait(&regions.s3, &file.response_bucket, Duration::from_secs(90)).await.expect("watched");
    regions.drain(TIMEOUT).await;
    let store = cfn_once::adapters::dynamodb_lease::DynamoLeaseStore::new(regions.dynamodb.clone(), &file.table_name);
    let report = work.report(arrivals, &regions.s3, &file.response_bucket, &store).await.expect("report");
    let rows = report.render();
    println!("{rows}");
    assert!(report.passed(), "{rows}");
    let (answer, signal) = (&report.answer, &report.signal);
    assert_eq!((answer.region.as_str(), answer.fence, answer.puts), ("us-east-1", Some(1), 1), "{rows}");
    assert!(answer.after.is_some_and(|after| after < Duration::from_secs(10)), "{rows}");
    assert!(signal.after.is_some_and(|after| after >= Duration::from_secs(14)), "{rows}");
    assert_eq!((signal.region.as_str(), signal.puts), ("us-east-1", 1), "{rows}");
    // The first run and at least two polls of the 14 s work, each under a fence of its own.
    assert!(report.polls.is_some_and(|polls| polls >= 2) && signal.fence.is_some_and(|fence| fence >= 3), "{rows}");
    let lines: Vec<&str> = rows.lines().collect();
    assert!(lines[2].contains("answer  SUCCESS") && lines[2].contains(r#"Data {"CfnOnceWork":"continues"#), "{rows}");
    assert!(lines[3].contains("signal  SUCCESS") && lines[3].contains("UniqueId Backfill, Reason the work completed"));
    assert!(lines[4].contains("after its ServiceTimeout (10 s) passed, SUCCESS after"), "{rows}");
    assert!(!rows.contains("X-Amz-Signature") && !rows.contains(&work.handle_key), "the handle is not shown");
    assert_eq!(regions.dead_letters().await, 0);
    regions.stop().await;
}
