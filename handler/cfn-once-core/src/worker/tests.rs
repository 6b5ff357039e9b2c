//! The protocol, end to end in memory: in-memory store, recording sink, manual clock.

use std::collections::BTreeMap;
use std::sync::Arc;

use serde_json::{Value, json};

use super::*;
use crate::clock::{Clock, ManualClock};
use crate::control::{ActivitySource, ControlError, FixedActivity};
use crate::decision::Activity;
use crate::doubles::{
    CountingEcho, Fault, FaultyStore, Op, PutFault, RecordedMetrics, RecordingSink, drive, drive_until,
};
use crate::echo::{ECHO_TYPE, Echo};
use crate::lease::{LeaseRecord, LeaseState};
use crate::memory_store::MemoryLeaseStore;
use crate::metrics::MetricEvent;
use crate::provider::ProviderContext;
use crate::random::SplitMix64;
use crate::request::RequestKey;
use crate::response::{ResponseBody, Status, is_failed_create_id};
use crate::response_url::UrlPolicy;

#[path = "wait_tests.rs"]
mod waits;

#[path = "batch_tests.rs"]
mod batches;

#[path = "time_bounds_tests.rs"]
mod time_bounds;

#[path = "wait_condition_tests.rs"]
mod wait_conditions;

const START_MS: u64 = 1_800_000_000_000;
const TOPIC: &str = "arn:aws:sns:us-east-1:123456789012:cfn-once";
const URL: &str = "https://cloudformation-custom-resource-response-useast1.s3.amazonaws.com/k?X-Amz-Signature=one";
const OTHER_URL: &str =
    "https://cloudformation-custom-resource-response-useast1.s3.amazonaws.com/k?X-Amz-Signature=two";
const THIRD_URL: &str =
    "https://cloudformation-custom-resource-response-useast1.s3.amazonaws.com/k?X-Amz-Signature=three";

struct Harness {
    clock: ManualClock,
    memory: Arc<MemoryLeaseStore>,
    store: Arc<FaultyStore>,
    sink: Arc<RecordingSink>,
    counting: CountingEcho,
    metrics: RecordedMetrics,
}

impl Harness {
    fn new() -> Self {
        let memory = Arc::new(MemoryLeaseStore::new());
        Self {
            clock: ManualClock::new(START_MS),
            store: Arc::new(FaultyStore::new(memory.clone())),
            memory,
            sink: Arc::new(RecordingSink::new()),
            counting: CountingEcho::default(),
            metrics: RecordedMetrics::default(),
        }
    }

    fn worker(&self, region: &str) -> Worker {
        self.worker_as(region, Role::Primary, Activity::Active)
    }

    fn worker_as(&self, region: &str, role: Role, activity: Activity) -> Worker {
        self.worker_with(Settings { role, ..settings(region) }, Arc::new(FixedActivity(activity)))
    }

    /// A primary on standby that has read its control already (its records find the answer
    /// fresh, and read before acquiring); `worker_as(.., Primary, Standby)` is one whose first
    /// records come before the answer.
    fn drained_primary(&self, region: &str) -> Worker {
        let settings = Settings { role: Role::Primary, control_cache_ms: 300_000, ..settings(region) };
        let worker = self.worker_with(settings, Arc::new(FixedActivity(Activity::Standby)));
        assert_eq!(drive(&self.clock, worker.read_control()), Some(Activity::Standby));
        worker
    }

    /// A worker with these settings and this active-region control, accepting bare requests
    /// and SNS envelopes from [`TOPIC`].
    fn worker_with(&self, settings: Settings, control: Arc<dyn ActivitySource>) -> Worker {
        let router = Router::new().register(ECHO_TYPE, Echo).register("Custom::Counting", self.counting.clone());
        let ports = Ports {
            store: self.store.clone(),
            sink: self.sink.clone(),
            router: Arc::new(router),
            clock: Arc::new(self.clock.clone()),
            random: Arc::new(SplitMix64::new(7)),
            control,
            metrics: Arc::new(self.metrics.clone()),
        };
        let input = InputPolicy { topic_arns: vec![TOPIC.into()], raw_delivery: true, urls: UrlPolicy::new(vec![]) };
        Worker::new(ports, input, settings)
    }

    fn invocation(&self, budget_ms: u64) -> Invocation {
        Invocation { id: "inv".into(), deadline_ms: self.clock.now_ms() + budget_ms }
    }

    fn handle(&self, worker: &Worker, body: &str) -> Disposition {
        let invocation = self.invocation(900_000);
        drive(
            &self.clock,
            worker.handle(QueueRecord { body: Some(body), receive_count: 1, sent_ms: None }, &invocation),
        )
    }

    fn record(&self) -> LeaseRecord {
        self.memory.snapshot().into_iter().next().expect("a lease record")
    }

    fn bodies(&self, url: &str) -> Vec<ResponseBody> {
        self.sink.bodies(url).iter().map(|b| ResponseBody::parse(b).expect("valid body")).collect()
    }
}

fn settings(region: &str) -> Settings {
    crate::budget::test_settings(region)
}

fn request(kind: &str, resource_type: &str, properties: Value, url: &str) -> String {
    let mut request = json!({
        "RequestType": kind,
        "ResponseURL": url,
        "StackId": "arn:aws:cloudformation:us-east-1:123456789012:stack/demo/guid",
        "RequestId": "req-1",
        "LogicalResourceId": "Thing",
        "ResourceType": resource_type,
        "ResourceProperties": properties,
    });
    if kind != "Create" {
        request["PhysicalResourceId"] = json!("Thing-existing");
    }
    if kind == "Update" {
        request["OldResourceProperties"] = json!({});
    }
    request.to_string()
}

fn echo_create(properties: Value) -> String {
    request("Create", ECHO_TYPE, properties, URL)
}

fn answered(disposition: &Disposition) -> (u64, Status) {
    match disposition {
        Disposition::Done(Done::Answered { fence, status }) => (*fence, *status),
        other => panic!("expected an answer, got {other:?}"),
    }
}

#[test]
fn a_delivered_mark_that_fails_is_tried_again() {
    // Found by the 30-minute soak: a 5xx and then a reset on the mark left a record committed
    // and undelivered after both copies had PUT the answer.
    let h = Harness::new();
    h.store.inject(Op::MarkDelivered, Fault::LostRequest);
    h.store.inject(Op::MarkDelivered, Fault::Transient);
    let disposition = h.handle(&h.worker("us-east-1"), &echo_create(json!({"Colour": "blue"})));
    assert_eq!(answered(&disposition), (1, Status::Success));
    assert_eq!(h.bodies(URL).len(), 1);
    let record = h.record();
    assert_eq!((record.state, record.delivered), (LeaseState::Committed, true), "the mark is retried until it lands");
    assert_eq!(h.store.calls(Op::MarkDelivered), 3);
}

#[test]
fn happy_path_answers_once_with_echoed_data() {
    let h = Harness::new();
    let disposition = h.handle(&h.worker("us-east-1"), &echo_create(json!({"Colour": "blue", "Size": "5"})));
    assert_eq!(answered(&disposition), (1, Status::Success));
    let bodies = h.bodies(URL);
    assert_eq!(bodies.len(), 1);
    assert_eq!(bodies[0].data, BTreeMap::from([("Colour".into(), json!("blue")), ("Size".into(), json!("5"))]));
    let record = h.record();
    assert_eq!((record.state, record.delivered, record.fence), (LeaseState::Committed, true, 1));
    assert_eq!(h.store.calls(Op::Read), 0, "the happy path reads nothing");
    assert_eq!(h.store.calls(Op::Acquire) + h.store.calls(Op::Commit) + h.store.calls(Op::MarkDelivered), 3);
    assert_eq!(h.store.calls(Op::Heartbeat), 0, "a quick provider needs no heartbeat");
}

#[test]
fn echo_answers_the_physical_id_it_is_given_on_create_and_update() {
    let h = Harness::new();
    let worker = h.worker("us-east-1");
    h.handle(&worker, &echo_create(json!({"PhysicalId": "network-1"})));
    let update = request("Update", ECHO_TYPE, json!({"PhysicalId": "network-2"}), OTHER_URL);
    h.handle(&worker, &update.replace("req-1", "req-2"));
    assert_eq!(h.bodies(URL)[0].physical_resource_id, "network-1");
    assert_eq!(h.bodies(OTHER_URL)[0].physical_resource_id, "network-2", "a new id: CloudFormation replaces");
    let plain = request("Update", ECHO_TYPE, json!({}), THIRD_URL);
    h.handle(&worker, &plain.replace("req-1", "req-3"));
    assert_eq!(h.bodies(THIRD_URL)[0].physical_resource_id, "Thing-existing", "without it, the id is kept");
}

#[test]
fn s1_duplicates_are_dropped_and_the_provider_runs_once() {
    let h = Harness::new();
    let worker = h.worker("us-east-1");
    let body = request("Create", "Custom::Counting", json!({"A": "1"}), URL);
    assert_eq!(answered(&h.handle(&worker, &body)), (1, Status::Success));
    assert_eq!(h.handle(&worker, &body), Disposition::Done(Done::Duplicate));
    assert_eq!(h.handle(&h.worker("us-west-2"), &body), Disposition::Done(Done::Duplicate));
    assert_eq!(h.counting.calls(), 1);
    assert_eq!(h.sink.bodies(URL).len(), 1);
}

#[test]
fn s1_concurrent_duplicates_run_the_provider_once() {
    let h = Harness::new();
    let (east, west) = (h.worker("us-east-1"), h.worker("us-west-2"));
    let body = request("Create", "Custom::Counting", json!({"DelayMs": "4000"}), URL);
    let invocation = h.invocation(900_000);
    let both = futures_util::future::join(
        east.handle(QueueRecord { body: Some(&body), receive_count: 1, sent_ms: None }, &invocation),
        west.handle(QueueRecord { body: Some(&body), receive_count: 1, sent_ms: None }, &invocation),
    );
    let (first, second) = drive(&h.clock, both);
    assert_eq!(answered(&first), (1, Status::Success));
    assert!(matches!(second, Disposition::Retry { delay_s, .. } if (1..=16).contains(&delay_s)), "{second:?}");
    // The retried copy comes back later and finds the answer delivered.
    assert_eq!(h.handle(&west, &body), Disposition::Done(Done::Duplicate));
    assert_eq!(h.counting.calls(), 1);
    assert_eq!(h.sink.bodies(URL).len(), 1);
    assert!(h.store.calls(Op::Heartbeat) >= 1, "a 4 s provider is heartbeated every 3 s");
}

#[test]
fn crash_after_acquire_is_taken_over_with_a_higher_fence() {
    let h = Harness::new();
    let body = echo_create(json!({"DelayMs": "60000"}));
    let invocation = h.invocation(900_000);
    let crashed = drive_until(
        &h.clock,
        h.worker("us-east-1").handle(QueueRecord { body: Some(&body), receive_count: 1, sent_ms: None }, &invocation),
        || h.memory.snapshot().first().is_some_and(|r| r.state == LeaseState::Running),
    );
    assert!(crashed.is_none(), "the worker was dropped mid-provider");
    // The lease is live: a second delivery backs off.
    assert!(matches!(h.handle(&h.worker("us-west-2"), &body), Disposition::Retry { .. }));
    h.clock.advance_ms(10_000 + 1_000 + 1);
    // Now it is expired past the skew margin; the provider is fast this time.
    let disposition = h.handle(&h.worker("us-west-2"), &echo_create(json!({"DelayMs": "60000"})));
    // Same request, same fingerprint: the takeover runs the 60 s provider under heartbeats.
    assert_eq!(answered(&disposition), (2, Status::Success));
    assert_eq!(h.record().fence, 2);
    assert_eq!(h.sink.bodies(URL).len(), 1);
}

#[test]
fn crash_between_commit_and_put_replays_the_stored_bytes() {
    let h = Harness::new();
    let body = echo_create(json!({"K": "v"}));
    h.sink.inject(PutFault::Hang);
    let invocation = h.invocation(900_000);
    let crashed = drive_until(
        &h.clock,
        h.worker("us-east-1").handle(QueueRecord { body: Some(&body), receive_count: 1, sent_ms: None }, &invocation),
        || h.memory.snapshot().first().is_some_and(|r| r.state == LeaseState::Committed),
    );
    assert!(crashed.is_none());
    assert!(h.sink.all().is_empty(), "nothing was PUT before the crash");
    let committed = h.record().response.expect("committed bytes");
    // Just committed: the committer is presumably PUTting it, so the copy waits the grace
    // (one PUT attempt's timeout, 2 s here) rather than PUT a second time.
    let early = h.handle(&h.worker("us-west-2"), &body);
    assert!(matches!(&early, Disposition::Retry { why, .. } if why.contains("just committed")), "{early:?}");
    h.clock.advance_ms(2_000);
    assert_eq!(h.handle(&h.worker("us-west-2"), &body), Disposition::Done(Done::Replayed { fence: 1 }));
    assert_eq!(h.sink.bodies(URL), vec![committed]);
    assert!(h.record().delivered);
}

#[test]
fn lost_replies_are_resolved_by_reading_the_record() {
    let h = Harness::new();
    h.store.inject(Op::Acquire, Fault::LostReply);
    h.store.inject(Op::Commit, Fault::LostReply);
    let disposition = h.handle(&h.worker("us-east-1"), &echo_create(json!({})));
    assert_eq!(answered(&disposition), (1, Status::Success), "the applied acquire and commit are recognised as ours");
    assert_eq!(h.record().fence, 1, "no second acquire happened");
    assert_eq!(h.store.calls(Op::Read), 2);
    assert_eq!(h.sink.bodies(URL).len(), 1);
}

#[test]
fn lost_requests_and_throttling_are_retried() {
    let h = Harness::new();
    h.store.inject(Op::Acquire, Fault::Transient);
    h.store.inject(Op::Acquire, Fault::LostRequest);
    h.store.inject(Op::Commit, Fault::LostRequest);
    h.store.inject(Op::Commit, Fault::Transient);
    let disposition = h.handle(&h.worker("us-east-1"), &echo_create(json!({})));
    assert_eq!(answered(&disposition), (1, Status::Success));
    assert_eq!(h.store.calls(Op::Acquire), 3);
    assert_eq!(h.store.calls(Op::Commit), 3);
}

#[test]
fn a_hung_store_call_times_out_and_is_resolved() {
    let h = Harness::new();
    h.store.inject(Op::Commit, Fault::Hang);
    let disposition = h.handle(&h.worker("us-east-1"), &echo_create(json!({})));
    assert_eq!(answered(&disposition), (1, Status::Success));
    assert_eq!(h.sink.bodies(URL).len(), 1);
}

#[test]
fn a_lost_lease_means_no_commit_and_no_put() {
    let h = Harness::new();
    let body = echo_create(json!({"DelayMs": "30000"}));
    // East's heartbeats all fail, so its lease quietly expires while its provider runs.
    for _ in 0..3 {
        h.store.inject(Op::Heartbeat, Fault::Transient);
    }
    let east = h.worker("us-east-1");
    let west = h.worker("us-west-2");
    let invocation = h.invocation(900_000);
    let east_run = east.handle(QueueRecord { body: Some(&body), receive_count: 1, sent_ms: None }, &invocation);
    let west_run = async {
        // West arrives after the lease (10 s) and skew (1 s) have passed, before east's 12 s tick.
        h.clock.sleep_ms(11_500).await;
        west.handle(
            QueueRecord { body: Some(&echo_create(json!({"DelayMs": "30000"}))), receive_count: 1, sent_ms: None },
            &invocation,
        )
        .await
    };
    // East's fourth heartbeat (at 12 s) reaches the store after west took over: it learns it lost.
    let (east_result, west_result) = drive(&h.clock, futures_util::future::join(east_run, west_run));
    assert!(
        matches!(&east_result, Disposition::Retry { why, .. } if why.contains("taken over while the provider ran")),
        "{east_result:?}"
    );
    assert_eq!(answered(&west_result), (2, Status::Success));
    assert_eq!(h.sink.bodies(URL).len(), 1, "only the fence-2 execution PUT");
}

#[test]
fn l1_a_provider_past_the_deadline_is_answered_failed() {
    let h = Harness::new();
    let worker = h.worker("us-east-1");
    let invocation = h.invocation(20_000);
    let body = echo_create(json!({"DelayMs": "600000"}));
    let disposition =
        drive(&h.clock, worker.handle(QueueRecord { body: Some(&body), receive_count: 1, sent_ms: None }, &invocation));
    assert_eq!(answered(&disposition), (1, Status::Failed));
    let reason = h.bodies(URL)[0].reason.clone().expect("reason");
    assert!(reason.contains("did not finish before the Lambda invocation's deadline"), "{reason}");
    assert!(h.clock.now_ms() < invocation.deadline_ms, "answered before the deadline");
}

#[test]
fn a_bad_property_is_answered_failed_with_a_readable_reason() {
    let h = Harness::new();
    let disposition = h.handle(&h.worker("us-east-1"), &echo_create(json!({"DelayMs": "soon"})));
    assert_eq!(answered(&disposition), (1, Status::Failed));
    let body = &h.bodies(URL)[0];
    assert_eq!(
        body.reason.as_deref(),
        Some("Custom::Echo Create failed: invalid property DelayMs: invalid value: string \"soon\", expected u64")
    );
    // Echo reads its options itself, so its code ran: the rollback Delete must reach it.
    assert_eq!(body.physical_resource_id, crate::response::default_physical_id(&decoded(&echo_create(json!({})))));
}

#[test]
fn transient_provider_errors_are_retried() {
    let h = Harness::new();
    h.counting.fail_transiently(2);
    let body = request("Create", "Custom::Counting", json!({}), URL);
    assert_eq!(answered(&h.handle(&h.worker("us-east-1"), &body)), (1, Status::Success));
    assert_eq!(h.counting.calls(), 3);

    // A throttling burst longer than a few attempts (what `make soak` found: three attempts
    // inside a 7 s burst answered a stack FAILED): retried for the retry budget, not a count.
    let h = Harness::new();
    h.counting.fail_transiently(8);
    assert_eq!(answered(&h.handle(&h.worker("us-east-1"), &body)), (1, Status::Success));
    assert_eq!(h.counting.calls(), 9);

    let h = Harness::new();
    h.counting.fail_transiently(u32::MAX);
    let started_ms = h.clock.now_ms();
    assert_eq!(answered(&h.handle(&h.worker("us-east-1"), &body)), (1, Status::Failed));
    let reason = h.bodies(URL)[0].reason.clone().expect("reason");
    assert!(reason.starts_with("Custom::Counting Create failed after "), "{reason}");
    assert!(reason.ends_with("s of transient errors: downstream throttled"), "{reason}");
    // Given up within the budget (10 s here), not after a count of attempts.
    assert!(h.clock.now_ms() - started_ms <= 10_000 + 1_000, "retried for {} ms", h.clock.now_ms() - started_ms);
    assert!(h.counting.calls() > 3, "{} calls", h.counting.calls());
}

#[test]
fn a_reused_request_id_is_a_new_attempt_and_the_old_one_is_superseded() {
    let h = Harness::new();
    let worker = h.worker("us-east-1");
    let first = echo_create(json!({"V": "1"}));
    let retried = request("Create", ECHO_TYPE, json!({"V": "2"}), OTHER_URL);
    assert_eq!(answered(&h.handle(&worker, &first)), (1, Status::Success));
    assert_eq!(answered(&h.handle(&worker, &retried)), (2, Status::Success));
    assert_eq!(h.bodies(OTHER_URL)[0].data["V"], json!("2"), "the old outcome was not replayed");
    assert_eq!(h.handle(&worker, &first), Disposition::Done(Done::Superseded));
    assert_eq!(h.handle(&worker, &retried), Disposition::Done(Done::Duplicate));
    assert_eq!((h.sink.bodies(URL).len(), h.sink.bodies(OTHER_URL).len()), (1, 1));
}

#[test]
fn deletes_that_must_succeed() {
    let h = Harness::new();
    let worker = h.worker("us-east-1");
    let mut failed_create =
        serde_json::from_str::<Value>(&request("Delete", "Custom::Counting", json!({}), URL)).expect("json");
    failed_create["PhysicalResourceId"] = json!("cfn-once-failed-create-0123456789abcdef");
    assert_eq!(answered(&h.handle(&worker, &failed_create.to_string())), (1, Status::Success));
    assert_eq!(h.counting.calls(), 0, "no provider call for a Create that failed");
    assert_eq!(h.bodies(URL)[0].physical_resource_id, "cfn-once-failed-create-0123456789abcdef");

    let h = Harness::new();
    let unknown_type = request("Delete", "Custom::Nobody", json!({}), URL);
    assert_eq!(answered(&h.handle(&h.worker("us-east-1"), &unknown_type)), (1, Status::Success));

    let h = Harness::new();
    let unknown_create = request("Create", "Custom::Nobody", json!({}), URL);
    assert_eq!(answered(&h.handle(&h.worker("us-east-1"), &unknown_create)), (1, Status::Failed));
    assert!(
        h.bodies(URL)[0]
            .reason
            .as_deref()
            .is_some_and(|r| r.contains("no provider serves ResourceType Custom::Nobody"))
    );
}

#[test]
fn a_failed_put_is_retried_by_the_next_delivery() {
    let h = Harness::new();
    let worker = h.worker("us-east-1");
    for _ in 0..3 {
        h.sink.inject(PutFault::Fail);
    }
    let body = echo_create(json!({}));
    assert!(matches!(h.handle(&worker, &body), Disposition::Retry { .. }));
    assert!(h.sink.all().is_empty());
    h.clock.advance_ms(2_000);
    assert_eq!(h.handle(&worker, &body), Disposition::Done(Done::Replayed { fence: 1 }));
    assert_eq!(h.sink.bodies(URL).len(), 1);
}

#[test]
fn a_lost_put_reply_repeats_identical_bytes() {
    let h = Harness::new();
    h.sink.inject(PutFault::LostReply);
    let disposition = h.handle(&h.worker("us-east-1"), &echo_create(json!({})));
    assert_eq!(answered(&disposition), (1, Status::Success));
    let bodies = h.sink.bodies(URL);
    assert_eq!(bodies.len(), 2);
    assert_eq!(bodies[0], bodies[1], "S1: every PUT carries the same bytes");
}

#[test]
fn undeliverable_records_are_left_for_the_dlq() {
    let h = Harness::new();
    let worker = h.worker("us-east-1");
    let evil = echo_create(json!({}))
        .replace("cloudformation-custom-resource-response-useast1.s3.amazonaws.com", "evil.example.com");
    assert!(matches!(h.handle(&worker, &evil), Disposition::DeadLetter { .. }));
    assert!(matches!(h.handle(&worker, "garbage"), Disposition::DeadLetter { .. }));
    assert!(h.sink.all().is_empty());
    assert!(h.memory.snapshot().is_empty(), "no lease is taken for input nobody can be answered for");
}

#[test]
fn malformed_but_addressable_input_is_answered_failed_once() {
    let h = Harness::new();
    let mut malformed = serde_json::from_str::<Value>(&echo_create(json!({}))).expect("json");
    malformed["RequestType"] = json!("Upsert");
    let body = malformed.to_string();
    assert_eq!(answered(&h.handle(&h.worker("us-east-1"), &body)), (1, Status::Failed));
    assert_eq!(h.handle(&h.worker("us-east-1"), &body), Disposition::Done(Done::Duplicate));
    assert!(
        h.bodies(URL)[0]
            .reason
            .as_deref()
            .is_some_and(|r| r.contains("\"Upsert\" is not one of Create, Update, Delete"))
    );
}

#[test]
fn the_record_is_keyed_by_stack_and_request() {
    let h = Harness::new();
    h.handle(&h.worker("us-east-1"), &echo_create(json!({})));
    let record = h.record();
    assert_eq!(
        record.key,
        RequestKey {
            stack_id: crate::request::StackArn::parse("arn:aws:cloudformation:us-east-1:123456789012:stack/demo/guid")
                .expect("a stack ARN"),
            request_id: "req-1".into()
        }
    );
    assert!(record.owner.starts_with("us-east-1/inv/"));
    assert_eq!(record.expires_ms, START_MS + 86_400_000);
}

#[test]
fn s1_a_stale_commit_is_rejected() {
    let h = Harness::new();
    let body = echo_create(json!({"DelayMs": "30000"}));
    // Every heartbeat of east fails, so east never learns that west took over and reaches its
    // commit at 30 s holding fence 1, while west (fence 2 since 11.5 s) is still running.
    for _ in 0..20 {
        h.store.inject(Op::Heartbeat, Fault::Transient);
    }
    let (east, west) = (h.worker("us-east-1"), h.worker("us-west-2"));
    let invocation = h.invocation(900_000);
    let east_run = east.handle(QueueRecord { body: Some(&body), receive_count: 1, sent_ms: None }, &invocation);
    let west_run = async {
        h.clock.sleep_ms(11_500).await;
        west.handle(QueueRecord { body: Some(&body), receive_count: 1, sent_ms: None }, &invocation).await
    };
    let (east_result, west_result) = drive(&h.clock, futures_util::future::join(east_run, west_run));
    assert!(
        matches!(&east_result, Disposition::Retry { why, .. } if why.contains("taken over before the commit")),
        "{east_result:?}"
    );
    assert_eq!(answered(&west_result), (2, Status::Success));
    assert_eq!(h.sink.bodies(URL).len(), 1, "only the fence-2 execution PUT");
    let events = h.metrics.events();
    assert!(
        events.contains(&MetricEvent::LeaseAcquired { fence: 2, poll: false }),
        "west's takeover is counted: {events:?}"
    );
    assert!(events.contains(&MetricEvent::FenceConflict), "east's rejected commit is counted: {events:?}");
}

/// Runs `body` through `worker` as a delivery sent `sent_ago_ms` ago.
fn handle_sent(h: &Harness, worker: &Worker, body: &str, sent_ago_ms: u64) -> Disposition {
    let invocation = h.invocation(900_000);
    let sent_ms = Some(h.clock.now_ms() - sent_ago_ms);
    drive(&h.clock, worker.handle(QueueRecord { body: Some(body), receive_count: 1, sent_ms }, &invocation))
}

#[test]
fn a_standby_primary_reads_first_and_leaves_new_work() {
    let h = Harness::new();
    let standby = h.drained_primary("us-east-1");
    let body = request("Create", "Custom::Counting", json!({}), URL);
    let left = h.handle(&standby, &body);
    assert!(
        matches!(&left, Disposition::Retry { delay_s: 30..=34, why } if why == "this region is on standby; the active region answers"),
        "{left:?}"
    );
    assert_eq!((h.store.calls(Op::Read), h.store.calls(Op::Acquire)), (1, 0), "read, never acquire");
    assert!(h.memory.snapshot().is_empty() && h.sink.all().is_empty(), "no new work started");

    // The secondary's delayed copy finds no record: the primary missed it, so it runs it.
    let secondary = h.worker_as("us-west-2", Role::Secondary, Activity::Standby);
    assert_eq!(answered(&h.handle(&secondary, &body)), (1, Status::Success));
    assert!(h.record().owner.starts_with("us-west-2/"));
    // The primary's copy comes back and finds it answered.
    assert_eq!(h.handle(&standby, &body), Disposition::Done(Done::Duplicate));
    assert_eq!(h.counting.calls(), 1);
    assert_eq!(h.store.calls(Op::Acquire), 1, "only the secondary ever acquired");
}

#[test]
fn a_standby_primary_without_an_answer_acquires_while_asking_and_gives_the_lease_back() {
    let h = Harness::new();
    // A new process's first record: the control has not answered yet (test settings cache
    // nothing), so the record asks and acquires at once, and the answer is standby.
    let standby = h.worker_as("us-east-1", Role::Primary, Activity::Standby);
    let body = request("Create", "Custom::Counting", json!({}), URL);
    let left = h.handle(&standby, &body);
    assert!(
        matches!(&left, Disposition::Retry { delay_s: 30..=34, why } if why == "this region is on standby; the active region answers"),
        "{left:?}"
    );
    let calls = [Op::Acquire, Op::Leave, Op::Read, Op::Heartbeat].map(|op| h.store.calls(op));
    assert_eq!(calls, [1, 1, 0, 0], "one acquire, given back by one write; nothing read");
    assert_eq!((h.record().state, h.record().fence), (LeaseState::Left, 1), "{:?}", h.record());
    assert!(h.sink.all().is_empty() && h.counting.calls() == 0, "no new work started");

    // The secondary's delayed copy finds, as without the acquire, no record: it runs it under
    // the next fence, as a first execution (nobody ran before it).
    let secondary = h.worker_as("us-west-2", Role::Secondary, Activity::Standby);
    assert_eq!(answered(&h.handle(&secondary, &body)), (2, Status::Success));
    assert!(h.metrics.events().contains(&MetricEvent::LeaseAcquired { fence: 2, poll: false }));
    assert_eq!(h.counting.calls(), 1);
    assert_eq!(h.handle(&standby, &body), Disposition::Done(Done::Duplicate));
    assert_eq!(h.counting.calls(), 1);
}

#[test]
fn a_standby_primary_whose_acquire_reply_was_lost_ends_the_lease_instead() {
    let h = Harness::new();
    let standby = h.worker_as("us-east-1", Role::Primary, Activity::Standby);
    let body = request("Create", "Custom::Counting", json!({}), URL);
    // The acquire is applied and its reply lost: the record read back is ours, but what it held
    // before is not known, so it cannot be written back; the lease is ended instead.
    h.store.inject(Op::Acquire, Fault::LostReply);
    let left = h.handle(&standby, &body);
    assert!(matches!(&left, Disposition::Retry { why, .. } if why.contains("standby")), "{left:?}");
    assert_eq!((h.store.calls(Op::Leave), h.store.calls(Op::Heartbeat)), (0, 1));
    let record = h.record();
    assert_eq!((record.state, record.fence, record.lease_until_ms), (LeaseState::Running, 1, 0), "{record:?}");
    assert_eq!(h.counting.calls(), 0);
    // The next region takes it over at once (told an execution may have run: the safe side).
    let secondary = h.worker_as("us-west-2", Role::Secondary, Activity::Standby);
    assert_eq!(answered(&h.handle(&secondary, &body)), (2, Status::Success));
    assert_eq!(h.counting.calls(), 1);
}

#[test]
fn an_active_primary_without_an_answer_makes_no_call_for_the_control_on_the_way() {
    let h = Harness::new();
    let active = h.worker_as("us-east-1", Role::Primary, Activity::Active);
    assert_eq!(answered(&h.handle(&active, &echo_create(json!({})))), (1, Status::Success));
    let calls = [Op::Acquire, Op::Leave, Op::Read, Op::Heartbeat].map(|op| h.store.calls(op));
    assert_eq!(calls, [1, 0, 0, 0], "the acquire went out with the control read, and stood");
}

#[test]
fn a_secondary_copy_after_the_primary_answered_costs_one_refused_acquire() {
    let h = Harness::new();
    let body = echo_create(json!({}));
    assert_eq!(answered(&h.handle(&h.worker("us-east-1"), &body)), (1, Status::Success));
    let secondary = h.worker_as("us-west-2", Role::Secondary, Activity::Standby);
    assert_eq!(h.handle(&secondary, &body), Disposition::Done(Done::Duplicate));
    assert_eq!((h.store.calls(Op::Acquire), h.store.calls(Op::Read)), (2, 0));
}

#[test]
fn a_standby_primary_takes_over_an_expired_lease() {
    let h = Harness::new();
    let body = echo_create(json!({"DelayMs": "60000"}));
    let invocation = h.invocation(900_000);
    let crashed = drive_until(
        &h.clock,
        h.worker_as("us-west-2", Role::Secondary, Activity::Active)
            .handle(QueueRecord { body: Some(&body), receive_count: 1, sent_ms: None }, &invocation),
        || h.memory.snapshot().first().is_some_and(|r| r.state == LeaseState::Running),
    );
    assert!(crashed.is_none());
    h.clock.advance_ms(11_001);
    let standby = h.worker_as("us-east-1", Role::Primary, Activity::Standby);
    assert_eq!(answered(&h.handle(&standby, &body)), (2, Status::Success), "RUNNING and expired: take over");
}

#[test]
fn l1_near_the_deadline_a_standby_primary_answers_failed_without_running() {
    let h = Harness::new();
    let standby = h.drained_primary("us-east-1");
    let body = request("Create", "Custom::Counting", json!({"ServiceTimeout": "60"}), URL);
    // Sent 30 s ago with a 60 s ServiceTimeout: 30 s left, more than the 20 s margin.
    assert!(
        matches!(handle_sent(&h, &standby, &body, 30_000), Disposition::Retry { delay_s: 10, .. }),
        "wakes at deadline - margin"
    );
    // Sent 45 s ago: 15 s left, inside the margin, and nobody has answered.
    assert_eq!(answered(&handle_sent(&h, &standby, &body, 45_000)), (1, Status::Failed));
    assert_eq!(h.counting.calls(), 0, "the provider was not started so close to the deadline");
    let reason = h.bodies(URL)[0].reason.clone().expect("reason");
    assert_eq!(
        reason,
        "no region could run Custom::Counting Create before the request's deadline, set by the resource's ServiceTimeout; \
         answering FAILED rather than letting CloudFormation wait"
    );
}

#[test]
fn l1_near_the_deadline_a_standby_primary_without_an_answer_keeps_the_lease_it_took() {
    let h = Harness::new();
    let standby = h.worker_as("us-east-1", Role::Primary, Activity::Standby);
    let body = request("Create", "Custom::Counting", json!({"ServiceTimeout": "60"}), URL);
    // 15 s left, inside the margin: the table has any region answer, so the acquire stands.
    assert_eq!(answered(&handle_sent(&h, &standby, &body, 45_000)), (1, Status::Failed));
    assert_eq!((h.store.calls(Op::Leave), h.counting.calls()), (0, 0));
}

#[test]
fn l1_backoff_never_waits_past_the_deadline() {
    let h = Harness::new();
    let body = echo_create(json!({"DelayMs": "3000", "ServiceTimeout": "120"}));
    let invocation = h.invocation(900_000);
    // The copies were sent 95 s ago, so 25 s are left. East's lease ends where leases must
    // (deadline - 20 s margin - 1 s skew: in 4 s), not 10 s on; west may wait 5 s at most
    // (deadline - margin), when the lease counts as expired.
    let east = h.worker("us-east-1");
    let west = h.worker_as("us-west-2", Role::Secondary, Activity::Standby);
    let sent_ms = Some(h.clock.now_ms() - 95_000);
    let both = futures_util::future::join(
        east.handle(QueueRecord { body: Some(&body), receive_count: 1, sent_ms }, &invocation),
        west.handle(QueueRecord { body: Some(&body), receive_count: 1, sent_ms }, &invocation),
    );
    let (first, second) = drive(&h.clock, both);
    assert_eq!(answered(&first).1, Status::Success);
    assert!(matches!(second, Disposition::Retry { delay_s: 5, .. }), "{second:?}");
}

#[test]
fn l1_a_provider_is_bounded_by_the_request_deadline_too() {
    let h = Harness::new();
    let body = echo_create(json!({"DelayMs": "600000", "ServiceTimeout": "60"}));
    assert_eq!(answered(&handle_sent(&h, &h.worker("us-east-1"), &body, 0)), (1, Status::Failed));
    let reason = h.bodies(URL)[0].reason.clone().expect("reason");
    assert_eq!(
        reason,
        "Custom::Echo Create did not finish before the request's deadline, set by the resource's ServiceTimeout (less 21 s kept to answer)"
    );
    assert!(h.clock.now_ms() <= START_MS + 60_000, "answered within the ServiceTimeout");
}

#[test]
fn metrics_count_what_happened() {
    let h = Harness::new();
    let body = echo_create(json!({"DelayMs": "4000"}));
    let invocation = h.invocation(900_000);
    let sent_ms = Some(h.clock.now_ms() - 1_500);
    let (east, west) = (h.worker("us-east-1"), h.worker("us-west-2"));
    let both = futures_util::future::join(
        east.handle(QueueRecord { body: Some(&body), receive_count: 1, sent_ms }, &invocation),
        west.handle(QueueRecord { body: Some(&body), receive_count: 1, sent_ms }, &invocation),
    );
    drive(&h.clock, both);
    h.handle(&east, "not json");
    assert_eq!(
        h.metrics.events(),
        vec![
            MetricEvent::LeaseAcquired { fence: 1, poll: false },
            MetricEvent::LeaseContended,
            // Sent 1.5 s before, answered after the 4 s provider.
            MetricEvent::ResponseSent { status: Status::Success, latency_ms: Some(5_500) },
            MetricEvent::DlqBound,
        ]
    );
}

fn decoded(body: &str) -> Request {
    decode(Some(body), &InputPolicy { topic_arns: vec![], raw_delivery: true, urls: UrlPolicy::new(vec![]) })
        .expect("valid request")
}

/// The rollback Delete CloudFormation sends for a Create answered with `create_body`.
fn rollback_delete(create_body: &ResponseBody) -> String {
    let mut delete: Value =
        serde_json::from_str(&request("Delete", "Custom::Counting", json!({}), OTHER_URL)).expect("json");
    delete["RequestId"] = json!("req-rollback");
    delete["PhysicalResourceId"] = json!(create_body.physical_resource_id);
    delete.to_string()
}

#[test]
fn a_create_abandoned_at_its_deadline_is_cleaned_up_by_its_rollback_delete() {
    let h = Harness::new();
    let worker = h.worker("us-east-1");
    let body = request("Create", "Custom::Counting", json!({"DelayMs": "600000"}), URL);
    // The provider ran (and may have written) but did not finish within the invocation.
    let invocation = h.invocation(60_000);
    let disposition =
        drive(&h.clock, worker.handle(QueueRecord { body: Some(&body), receive_count: 1, sent_ms: None }, &invocation));
    assert_eq!(answered(&disposition), (1, Status::Failed));
    let failed = h.bodies(URL).remove(0);
    assert!(!is_failed_create_id(&failed.physical_resource_id), "{failed:?}");
    assert_eq!(h.counting.calls(), 1);
    assert_eq!(answered(&h.handle(&worker, &rollback_delete(&failed))).1, Status::Success);
    assert_eq!(h.counting.calls(), 2, "the rollback Delete reached the provider, which may clean up");
}

#[test]
fn a_create_failed_after_a_takeover_is_cleaned_up_by_its_rollback_delete() {
    let h = Harness::new();
    let body = request("Create", "Custom::Counting", json!({"DelayMs": "60000", "ServiceTimeout": "60"}), URL);
    let invocation = h.invocation(900_000);
    let sent_ms = Some(h.clock.now_ms());
    // East runs the provider, then crashes; by the time anyone looks again the deadline is near.
    let crashed = drive_until(
        &h.clock,
        h.worker("us-east-1").handle(QueueRecord { body: Some(&body), receive_count: 1, sent_ms }, &invocation),
        || h.counting.calls() == 1,
    );
    assert!(crashed.is_none());
    h.clock.advance_ms(45_000);
    let west = h.worker_as("us-west-2", Role::Secondary, Activity::Standby);
    let late = drive(&h.clock, west.handle(QueueRecord { body: Some(&body), receive_count: 2, sent_ms }, &invocation));
    assert_eq!(answered(&late), (2, Status::Failed), "taken over near the deadline: FAILED without running");
    assert_eq!(h.counting.calls(), 1);
    let failed = h.bodies(URL).remove(0);
    assert!(!is_failed_create_id(&failed.physical_resource_id), "east's provider ran: {failed:?}");
    assert_eq!(answered(&h.handle(&west, &rollback_delete(&failed))).1, Status::Success);
    assert_eq!(h.counting.calls(), 2, "the rollback Delete reached the provider");
}

#[test]
fn a_create_no_provider_ran_for_skips_the_provider_on_its_rollback_delete() {
    let h = Harness::new();
    let standby = h.worker_as("us-east-1", Role::Primary, Activity::Standby);
    let body = request("Create", "Custom::Counting", json!({"ServiceTimeout": "60"}), URL);
    assert_eq!(answered(&handle_sent(&h, &standby, &body, 45_000)), (1, Status::Failed));
    let failed = h.bodies(URL).remove(0);
    assert!(is_failed_create_id(&failed.physical_resource_id), "nobody ever ran it: {failed:?}");
    assert_eq!(answered(&h.handle(&h.worker("us-east-1"), &rollback_delete(&failed))).1, Status::Success);
    assert_eq!(h.counting.calls(), 0, "nothing can exist, so the provider is not asked");
}

/// The deployed lease, heartbeat and skew (30 s, 10 s, 2 s): a lease longer than the deadline
/// margin (20 s), which is what let a lease outlive the deadline.
fn deployed_leases(region: &str, role: Role) -> Settings {
    Settings { role, lease_ms: 30_000, heartbeat_ms: 10_000, skew_ms: 2_000, ..settings(region) }
}

#[test]
fn l1_no_lease_outlives_the_point_where_a_taker_over_can_still_answer() {
    let h = Harness::new();
    let body = echo_create(json!({"DelayMs": "600000", "ServiceTimeout": "300"}));
    let sent_ms = h.clock.now_ms();
    let deadline_ms = sent_ms + 300_000;
    let east = h.worker_with(deployed_leases("us-east-1", Role::Primary), Arc::new(FixedActivity(Activity::Active)));
    let west = h.worker_with(deployed_leases("us-west-2", Role::Secondary), Arc::new(FixedActivity(Activity::Standby)));
    // East runs a provider that will not finish, heartbeating every 10 s, and crashes 30 s
    // before the deadline, just after a heartbeat.
    let invocation = h.invocation(900_000);
    let delivery = QueueRecord { body: Some(&body), receive_count: 1, sent_ms: Some(sent_ms) };
    let crashed =
        drive_until(&h.clock, east.handle(delivery, &invocation), || h.clock.now_ms() >= deadline_ms - 30_000);
    assert!(crashed.is_none(), "east crashed mid-provider");
    let lease_until_ms = h.record().lease_until_ms;
    assert!(
        lease_until_ms + 2_000 < deadline_ms - 20_000,
        "the lease ends {} s before the deadline: a taker-over would not see it expired before the margin",
        deadline_ms.saturating_sub(lease_until_ms) / 1000
    );
    // West's copy comes back where the margin begins, and answers in it.
    h.clock.set_ms(deadline_ms - 20_000);
    let mut receive = 1;
    let done = loop {
        let invocation = h.invocation(900_000);
        let delivery = QueueRecord { body: Some(&body), receive_count: receive, sent_ms: Some(sent_ms) };
        match drive(&h.clock, west.handle(delivery, &invocation)) {
            Disposition::Retry { delay_s, .. } => h.clock.advance_ms(u64::from(delay_s) * 1000),
            other => break other,
        }
        receive += 1;
    };
    assert_eq!(answered(&done).1, Status::Failed, "{done:?}");
    assert!(h.clock.now_ms() <= deadline_ms, "answered {} ms after the deadline", h.clock.now_ms() - deadline_ms);
}

#[test]
fn l1_a_lease_taken_inside_the_margin_blocks_no_other_region() {
    // The simulator's seeds 29218, 92492, 103658, 162857, 548281, 686171 and 715436: a delivery
    // that took the lease inside the margin (to answer FAILED) froze or died there, and its
    // lease, which ran a full answer's time past its taking, kept the healthy region backing off
    // until after the deadline.
    let h = Harness::new();
    let body = echo_create(json!({"ServiceTimeout": "300"}));
    let sent_ms = h.clock.now_ms() - 292_000;
    let deadline_ms = sent_ms + 300_000;
    let east = h.worker_with(deployed_leases("us-east-1", Role::Primary), Arc::new(FixedActivity(Activity::Active)));
    let west = h.worker_with(deployed_leases("us-west-2", Role::Secondary), Arc::new(FixedActivity(Activity::Standby)));
    // East takes the lease 8 s before the deadline, then dies before its commit lands.
    h.store.inject(Op::Commit, Fault::Stall);
    let invocation = h.invocation(900_000);
    let delivery = QueueRecord { body: Some(&body), receive_count: 1, sent_ms: Some(sent_ms) };
    let crashed = drive_until(&h.clock, east.handle(delivery, &invocation), || !h.memory.snapshot().is_empty());
    assert!(crashed.is_none(), "east died holding the lease");
    let taken = h.record();
    assert_eq!((taken.state, taken.fence), (LeaseState::Running, 1));
    assert!(
        taken.lease_until_ms + 2_000 < deadline_ms - 20_000,
        "a lease taken in the margin ends {} ms before the deadline: others cannot take it over",
        deadline_ms.saturating_sub(taken.lease_until_ms)
    );
    // West's copy a second later takes it over at once and answers, 7 s before the deadline.
    h.clock.advance_ms(1_000);
    let invocation = h.invocation(900_000);
    let delivery = QueueRecord { body: Some(&body), receive_count: 1, sent_ms: Some(sent_ms) };
    let done = drive(&h.clock, west.handle(delivery, &invocation));
    assert_eq!(answered(&done), (2, Status::Failed), "{done:?}");
    assert!(h.clock.now_ms() < deadline_ms);
    assert_eq!(h.sink.bodies(URL).len(), 1);
}

#[test]
fn l1_a_provider_stops_where_its_lease_must_end_and_heartbeats_never_pass_it() {
    let h = Harness::new();
    let east = h.worker_with(deployed_leases("us-east-1", Role::Primary), Arc::new(FixedActivity(Activity::Active)));
    let body = echo_create(json!({"DelayMs": "600000", "ServiceTimeout": "300"}));
    let sent_ms = h.clock.now_ms();
    assert_eq!(answered(&handle_sent(&h, &east, &body, 0)).1, Status::Failed);
    // Deadline 300 s, less the 20 s margin and the 2 s skew margin.
    assert_eq!(h.clock.now_ms(), sent_ms + 278_000 - 1, "the provider ran until its lease had to end");
    let reason = h.bodies(URL)[0].reason.clone().expect("a reason");
    assert!(reason.ends_with("(less 22 s kept to answer)"), "{reason}");
}

/// Answers `first` at once, then takes `slow_ms` on the clock for every later read.
#[derive(Debug)]
struct SlowAfterFirst {
    clock: ManualClock,
    first: Activity,
    later: Activity,
    slow_ms: u64,
    reads: std::sync::atomic::AtomicU32,
}

#[async_trait::async_trait]
impl ActivitySource for SlowAfterFirst {
    async fn activity(&self) -> Result<Activity, ControlError> {
        if self.reads.fetch_add(1, std::sync::atomic::Ordering::SeqCst) == 0 {
            return Ok(self.first);
        }
        self.clock.sleep_ms(self.slow_ms).await;
        Ok(self.later)
    }
}

#[test]
fn a_control_slower_than_its_timeout_keeps_the_last_known_answer() {
    let h = Harness::new();
    // Drained: the control says standby, then every read takes 10 s (ARC with two endpoints
    // unreachable, 2 s each and more), well past the 2 s store-call timeout.
    let control = Arc::new(SlowAfterFirst {
        clock: h.clock.clone(),
        first: Activity::Standby,
        later: Activity::Active,
        slow_ms: 10_000,
        reads: Default::default(),
    });
    let primary = h.worker_with(Settings { control_cache_ms: 5_000, ..settings("us-east-1") }, control);
    assert_eq!(drive(&h.clock, primary.read_control()), Some(Activity::Standby));
    let left = handle_sent(&h, &primary, &echo_create(json!({})), 0);
    assert!(matches!(&left, Disposition::Retry { why, .. } if why.contains("standby")), "{left:?}");
    assert!(h.memory.snapshot().is_empty(), "a fresh standby answer: read first, no lease taken");
    // Past the time-to-live: the next record asks and acquires at once; the ask times out.
    h.clock.advance_ms(6_000);
    let (other, other_url) = batches_request(2);
    let again = handle_sent(&h, &primary, &other, 0);
    assert!(matches!(&again, Disposition::Retry { why, .. } if why.contains("standby")), "{again:?}");
    assert!(h.sink.bodies(&other_url).is_empty(), "a drained primary started new work on a timed-out control read");
    assert_eq!(h.counting.calls(), 0);
    let records = h.memory.snapshot();
    assert!(
        records.len() == 1 && records.iter().all(|record| (record.state, record.fence) == (LeaseState::Left, 1)),
        "the lease taken while asking was given back: {records:?}"
    );
}

/// A Create with its own RequestId and ResponseURL.
fn batches_request(n: u32) -> (String, String) {
    let url =
        format!("https://cloudformation-custom-resource-response-useast1.s3.amazonaws.com/k{n}?X-Amz-Signature=s{n}");
    let mut body: Value = serde_json::from_str(&request("Create", ECHO_TYPE, json!({}), &url)).expect("json");
    body["RequestId"] = json!(format!("req-{n}"));
    (body.to_string(), url)
}

/// `request` in an SNS envelope published at `published_ms`.
fn envelope(request: &str, published_ms: u64) -> String {
    json!({
        "Type": "Notification",
        "MessageId": "m-1",
        "TopicArn": TOPIC,
        "Message": request,
        "Timestamp": crate::timestamp::format_ms(published_ms),
    })
    .to_string()
}

#[test]
fn l1_a_late_copy_counts_its_deadline_from_the_publish_time() {
    let h = Harness::new();
    let worker = h.worker("us-west-2");
    // Published 200 s ago with a 300 s ServiceTimeout; SNS delivered this copy only 5 s ago.
    let published_ms = h.clock.now_ms() - 200_000;
    let deadline_ms = published_ms + 300_000;
    let body = envelope(&echo_create(json!({"DelayMs": "120000", "ServiceTimeout": "300"})), published_ms);
    let done = handle_sent(&h, &worker, &body, 5_000);
    assert!(
        h.clock.now_ms() < deadline_ms,
        "answered {} s after CloudFormation stopped waiting",
        (h.clock.now_ms() - deadline_ms) / 1000
    );
    assert_eq!(answered(&done).1, Status::Failed);
    let reason = h.bodies(URL)[0].reason.clone().expect("a reason");
    assert!(reason.contains("did not finish before the request's deadline"), "{reason}");
}

#[test]
fn a_request_can_never_be_keyed_like_the_control_item() {
    let h = Harness::new();
    let worker = h.worker("us-east-1");
    let mut hostile: Value = serde_json::from_str(&echo_create(json!({}))).expect("json");
    hostile["StackId"] = json!("control#active");
    hostile["RequestId"] = json!("control");
    let disposition = h.handle(&worker, &hostile.to_string());
    assert!(
        matches!(&disposition, Disposition::DeadLetter { cause: DeadLetterCause::Undeliverable, why } if why.contains("not a CloudFormation stack ARN")),
        "{disposition:?}"
    );
    assert!(h.memory.snapshot().is_empty(), "nothing was written to the lease table");
    assert!(h.sink.all().is_empty(), "nothing was sent");
}

#[test]
fn a_primary_counts_requests_whose_deadline_leaves_the_secondary_no_time() {
    let h = Harness::new();
    // The secondary's copy comes 60 s late; with the 20 s margin, a 70 s ServiceTimeout leaves
    // it nothing to answer in. 90 s does.
    let primary = h.worker("us-east-1");
    let short = echo_create(json!({"ServiceTimeout": "70"}));
    h.handle(&primary, &short);
    let count = || h.metrics.events().iter().filter(|event| **event == MetricEvent::ShortServiceTimeout).count();
    assert_eq!(count(), 1);
    let (enough, _) = batches_request(2);
    let mut enough: Value = serde_json::from_str(&enough).expect("json");
    enough["ResourceProperties"]["ServiceTimeout"] = json!("90");
    h.handle(&primary, &enough.to_string());
    assert_eq!(count(), 1, "90 s leaves the secondary time to answer");
    let secondary = h.worker_as("us-west-2", Role::Secondary, Activity::Standby);
    let (third, _) = batches_request(3);
    let mut third: Value = serde_json::from_str(&third).expect("json");
    third["ResourceProperties"]["ServiceTimeout"] = json!("30");
    h.handle(&secondary, &third.to_string());
    assert_eq!(count(), 1, "only primaries count");
}

#[test]
fn a_provider_whose_outcome_is_unknown_runs_again_only_under_a_higher_fence() {
    let h = Harness::new();
    h.counting.lose_answers(1);
    let body = request("Create", "Custom::Counting", json!({"A": "1"}), URL);
    let first = h.handle(&h.worker("us-east-1"), &body);
    let delay_s = match &first {
        Disposition::Retry { delay_s, why } if why.contains("runs again under a higher fence") => *delay_s,
        other => panic!("{other:?}"),
    };
    assert!(h.sink.all().is_empty(), "nothing answered on an unknown outcome");
    assert_eq!(h.record().lease_until_ms, 0, "the lease was ended, for the next run to take over at once");
    h.clock.advance_ms(u64::from(delay_s) * 1000);
    // Either region's copy runs it again, under the next fence, told whose run it follows.
    assert_eq!(answered(&h.handle(&h.worker("us-west-2"), &body)), (2, Status::Success));
    assert_eq!(h.counting.runs(), vec![(1, None), (2, Some(1))], "never twice under one fence");
    assert_eq!(h.bodies(URL).len(), 1);
}

#[test]
fn a_transient_failure_runs_again_under_the_same_fence() {
    // Certainly not applied: nothing ran, so the same fence is right, and cheaper.
    let h = Harness::new();
    h.counting.fail_transiently(1);
    let body = request("Create", "Custom::Counting", json!({"A": "1"}), URL);
    assert_eq!(answered(&h.handle(&h.worker("us-east-1"), &body)), (1, Status::Success));
    assert_eq!(h.counting.runs(), vec![(1, None), (1, None)]);
}

#[test]
fn an_unknown_outcome_with_no_time_to_run_again_is_answered_failed_saying_so() {
    let h = Harness::new();
    h.counting.lose_answers(1);
    // A ServiceTimeout of 24 s: its 20 s deadline margin begins before a second run could
    // take the lease (a backoff floor of 4 s and the skew margin away).
    let body = request("Create", "Custom::Counting", json!({"A": "1", "ServiceTimeout": "24"}), URL);
    let answered = answered(&h.handle(&h.worker("us-east-1"), &body));
    assert_eq!(answered, (1, Status::Failed));
    let reason = h.bodies(URL)[0].reason.clone().unwrap_or_default();
    assert!(reason.contains("the outcome of its last call is unknown"), "{reason}");
    assert!(reason.contains("timed out after it was sent"), "{reason}");
    assert_eq!(h.counting.runs(), vec![(1, None)], "not run again under the same fence");
}

/// A record a newer version of cfn-once wrote (its format above this handler's): the delivery
/// neither runs the provider, nor answers, nor writes the record; it comes back later, says why,
/// and counts it. A handler of the newer version, or this one upgraded, answers it.
#[test]
fn a_record_of_a_newer_format_is_left_to_a_handler_that_knows_it() {
    let h = Harness::new();
    let worker = h.worker("us-east-1");
    let body = request("Create", "Custom::Counting", json!({"DelayMs": "4000"}), URL);
    // The newer version took the lease and went away before answering.
    let invocation = h.invocation(900_000);
    let first = worker.handle(QueueRecord { body: Some(&body), receive_count: 1, sent_ms: None }, &invocation);
    let mut first = Box::pin(first);
    let waker = futures_util::task::noop_waker();
    let _ = first.as_mut().poll(&mut std::task::Context::from_waker(&waker));
    drop(first);
    let newer = LeaseRecord { format: crate::lease::RECORD_FORMAT + 1, ..h.record() };
    h.memory.put_as_written(newer.clone());
    // Its lease has long expired: this version would take it over, were it of its format.
    h.clock.advance_ms(60_000);
    for receive_count in 1..=3 {
        let left = drive(
            &h.clock,
            worker.handle(QueueRecord { body: Some(&body), receive_count, sent_ms: None }, &h.invocation(900_000)),
        );
        assert!(
            matches!(&left, Disposition::Retry { why, .. } if why.contains("newer than this handler's")),
            "{left:?}"
        );
    }
    assert_eq!(h.record(), newer, "the record is as the newer version left it");
    assert!(h.sink.bodies(URL).is_empty(), "answered although a newer version holds the request");
    let counted = h.metrics.events().iter().filter(|event| matches!(event, MetricEvent::NewerFormat { .. })).count();
    assert_eq!(counted, 3, "each delivery that left it counted");
}

/// A request a newer version finished (its record delivered, in a newer format): a copy
/// arriving here is dropped, not backed off until the dead-letter queue, and writes nothing.
#[test]
fn a_request_a_newer_format_finished_is_dropped_here() {
    let h = Harness::new();
    let worker = h.worker("us-east-1");
    let body = request("Create", "Custom::Counting", json!({}), URL);
    assert_eq!(answered(&h.handle(&worker, &body)), (1, Status::Success));
    let finished = LeaseRecord { format: crate::lease::RECORD_FORMAT + 1, ..h.record() };
    assert!(finished.delivered);
    h.memory.put_as_written(finished.clone());
    assert_eq!(h.handle(&h.worker("us-west-2"), &body), Disposition::Done(Done::Duplicate));
    assert_eq!(h.record(), finished, "untouched");
    assert_eq!((h.counting.calls(), h.sink.bodies(URL).len()), (1, 1), "nothing run or PUT again");
}
