//! A batch as Lambda hands it: several records in one invocation, settled through the queue
//! port as `batch::handle` decides, on the worker's in-memory harness (`worker::tests`).

use std::sync::{Arc, Mutex};

use async_trait::async_trait;
use serde_json::{Value, json};

use crate::batch::{self, MessageQueue, QueueError, Record};
use crate::clock::{Clock, ManualClock};
use crate::control::{Activity, FixedActivity};
use crate::doubles::{Op, RecordingSink, drive, drive_until};
use crate::echo::{ECHO_TYPE, Echo};
use crate::marks::MARK_WAIT_MS;
use crate::metrics::MetricEvent;
use crate::provider::{Provider, ProviderContext, ProviderError, Router, Step};
use crate::put::{PutError, ResponseSink};
use crate::random::SplitMix64;
use crate::request::InputPolicy;
use crate::response::Status;
use crate::response_url::ResponseUrl;
use crate::response_url::UrlPolicy;
use crate::vocabulary::{DeadLetterCause, QueueRecord};
use crate::worker::tests::{Harness, request, settings};
use crate::worker::{Ports, Worker};

/// A queue call, with when it was made.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Call {
    Retry { message: u32, delay_s: u32 },
    DeadLetter { message: u32 },
    SetVisibility(Vec<(u32, u32)>),
}

/// Records every queue call and the clock's time at it.
#[derive(Debug)]
struct RecordingQueue {
    clock: ManualClock,
    calls: Mutex<Vec<(u64, Call)>>,
}

impl RecordingQueue {
    fn new(clock: &ManualClock) -> Self {
        Self { clock: clock.clone(), calls: Mutex::new(Vec::new()) }
    }

    fn record(&self, call: Call) {
        self.calls.lock().expect("calls").push((self.clock.now_ms(), call));
    }

    fn calls(&self) -> Vec<(u64, Call)> {
        self.calls.lock().expect("calls").clone()
    }
}

#[async_trait]
impl MessageQueue for RecordingQueue {
    type Message = u32;

    async fn retry_after(&self, message: &u32, delay_s: u32) -> Result<(), QueueError> {
        self.record(Call::Retry { message: *message, delay_s });
        Ok(())
    }

    async fn dead_letter(&self, message: &u32, _why: &str, _cause: DeadLetterCause) -> Result<(), QueueError> {
        self.record(Call::DeadLetter { message: *message });
        Ok(())
    }

    async fn set_visibility(&self, messages: &[(&u32, u32)]) -> Result<(), QueueError> {
        self.record(Call::SetVisibility(messages.iter().map(|(message, delay_s)| (**message, *delay_s)).collect()));
        Ok(())
    }
}

/// A provider that panics, as users' code does.
#[derive(Debug)]
struct Panics;

#[async_trait]
impl Provider for Panics {
    type Properties = serde_json::Value;

    async fn create(&self, _ctx: &ProviderContext, _properties: Self::Properties) -> Result<Step, ProviderError> {
        let items: Vec<u32> = Vec::new();
        // An index out of bounds: the most ordinary panic there is.
        let first = items[0];
        panic!("unreachable after {first}")
    }

    async fn update(
        &self,
        ctx: &ProviderContext,
        _id: &str,
        properties: Self::Properties,
        _old: Option<Self::Properties>,
    ) -> Result<Step, ProviderError> {
        self.create(ctx, properties).await
    }

    async fn delete(
        &self,
        _ctx: &ProviderContext,
        _id: &str,
        _properties: Self::Properties,
    ) -> Result<Step<()>, ProviderError> {
        panic!("<b>delete</b> is not written yet\u{7}")
    }
}

fn worker_with_panics(h: &Harness) -> Worker {
    worker_with_sink(h, h.sink.clone())
}

fn worker_with_sink(h: &Harness, sink: Arc<dyn ResponseSink>) -> Worker {
    let router = Router::new().register(ECHO_TYPE, Echo).register("Custom::Panics", Panics);
    let ports = Ports {
        store: h.store.clone(),
        sink,
        router: Arc::new(router),
        clock: Arc::new(h.clock.clone()),
        random: Arc::new(SplitMix64::new(7)),
        control: Arc::new(FixedActivity(Activity::Active)),
        metrics: Arc::new(h.metrics.clone()),
    };
    let input = InputPolicy {
        topic_arns: vec![],
        raw_delivery: true,
        urls: UrlPolicy::new(vec![]),
        privileged_topic_arns: vec![],
    };
    Worker::new(ports, input, settings("us-east-1"))
}

/// A request with its own RequestId and ResponseURL.
fn nth(kind: &str, resource_type: &str, properties: Value, n: u32) -> (String, String) {
    let url =
        format!("https://cloudformation-custom-resource-response-useast1.s3.amazonaws.com/k{n}?X-Amz-Signature=s{n}");
    let mut body: Value = serde_json::from_str(&request(kind, resource_type, properties, &url)).expect("json");
    body["RequestId"] = json!(format!("req-{n}"));
    body["LogicalResourceId"] = json!(format!("Thing{n}"));
    (body.to_string(), url)
}

/// Runs one batch of `bodies` (sent `sent_ago_ms` before now) through `batch::handle`.
fn run_batch(h: &Harness, worker: &Worker, queue: &RecordingQueue, bodies: &[String], sent_ago_ms: u64) -> Vec<bool> {
    let invocation = h.invocation(900_000);
    let sent_ms = Some(h.clock.now_ms() - sent_ago_ms);
    let messages: Vec<u32> = (0..bodies.len() as u32).collect();
    let ids: Vec<String> = messages.iter().map(|m| format!("m{m}")).collect();
    let records: Vec<Record<'_, u32>> = bodies
        .iter()
        .zip(&messages)
        .zip(&ids)
        .map(|((body, message), id)| Record {
            message,
            message_id: id,
            queue_record: QueueRecord { body: Some(body), receive_count: 1, sent_ms },
        })
        .collect();
    drive(&h.clock, batch::handle(worker, queue, &invocation, &records, &|_| {}))
}

#[test]
fn l1_a_backoff_counts_from_when_its_record_was_decided_not_from_the_batch_end() {
    let h = Harness::new();
    let worker = h.worker("us-east-1");
    let queue = RecordingQueue::new(&h.clock);
    let start_ms = h.clock.now_ms();
    // A long-running request polled every 10 s, batched with a provider that takes 100 s.
    let (waits, _) = nth("Create", ECHO_TYPE, json!({"InProgressForS": "600", "PollIntervalS": "10"}), 1);
    let (slow, _) = nth("Create", ECHO_TYPE, json!({"DelayMs": "100000"}), 2);
    let to_retry = run_batch(&h, &worker, &queue, &[waits, slow], 0);
    assert_eq!(to_retry, vec![true, false], "the wait comes back; the slow one is answered");
    assert_eq!(h.clock.now_ms(), start_ms + 100_000, "the batch lasted as long as its slowest record");
    // SQS counts a visibility from the call that sets it: made when the wait was stored, the
    // next poll comes 10 s later, not 10 s after the slow batch-mate finished.
    assert_eq!(queue.calls(), vec![(start_ms, Call::Retry { message: 0, delay_s: 10 })]);
}

#[test]
fn a_panicking_provider_fails_only_its_own_request() {
    let h = Harness::new();
    let worker = worker_with_panics(&h);
    let queue = RecordingQueue::new(&h.clock);
    let (panics, panics_url) = nth("Create", "Custom::Panics", json!({}), 1);
    let (echo, echo_url) = nth("Create", ECHO_TYPE, json!({"Size": "3"}), 2);
    let (waits, _) = nth("Create", ECHO_TYPE, json!({"InProgressForS": "600", "PollIntervalS": "10"}), 3);
    let (delete, delete_url) = nth("Delete", "Custom::Panics", json!({}), 4);
    let to_retry = run_batch(&h, &worker, &queue, &[panics, echo, waits, delete], 0);
    assert_eq!(to_retry, vec![false, false, true, false], "the batch returned; only the wait is seen again");
    let failed = &h.bodies(&panics_url)[0];
    assert_eq!(failed.status, Status::Failed);
    let reason = failed.reason.as_deref().unwrap_or_default();
    assert!(
        reason.starts_with(
            "Custom::Panics Create failed: the provider panicked: index out of bounds: the len is 0 but the index is 0"
        ),
        "{reason}"
    );
    assert_eq!(h.bodies(&echo_url)[0].status, Status::Success, "the batch-mate's answer is intact");
    assert!(matches!(&queue.calls()[..], [(_, Call::Retry { message: 2, delay_s: 10 })]), "{:?}", queue.calls());
    let delete_reason = h.bodies(&delete_url)[0].reason.clone().unwrap_or_default();
    assert_eq!(
        delete_reason, "Custom::Panics Delete failed: the provider panicked: delete is not written yet",
        "markup and control characters are stripped from the panic's text"
    );
    assert!(h.metrics.events().contains(&MetricEvent::ProviderPanicked));
    // The process serves on: the next batch is handled as usual.
    let (next, next_url) = nth("Create", ECHO_TYPE, json!({}), 5);
    assert_eq!(run_batch(&h, &worker, &queue, &[next], 0), vec![false]);
    assert_eq!(h.bodies(&next_url)[0].status, Status::Success);
}

#[test]
fn l1_a_record_near_its_deadline_is_hidden_no_longer_than_its_margin_if_its_invocation_dies() {
    let h = Harness::new();
    let worker = h.worker("us-east-1");
    let queue = RecordingQueue::new(&h.clock);
    let start_ms = h.clock.now_ms();
    // The queue hides a dead invocation's batch for 960 s. A request due in 500 s would be
    // hidden past its deadline; one due in an hour would not.
    let (near, _) = nth("Create", ECHO_TYPE, json!({"DelayMs": "60000", "ServiceTimeout": "500"}), 1);
    let (far, _) = nth("Create", ECHO_TYPE, json!({"DelayMs": "60000"}), 2);
    let invocation = h.invocation(900_000);
    let bodies = [near, far];
    let messages = [0_u32, 1];
    let records: Vec<Record<'_, u32>> = bodies
        .iter()
        .zip(&messages)
        .map(|(body, message)| Record {
            message,
            message_id: "m",
            queue_record: QueueRecord { body: Some(body), receive_count: 1, sent_ms: Some(start_ms) },
        })
        .collect();
    // The invocation dies 30 s in, mid-provider.
    let died = drive_until(&h.clock, batch::handle(&worker, &queue, &invocation, &records, &|_| {}), || {
        h.clock.now_ms() >= start_ms + 30_000
    });
    assert!(died.is_none(), "the invocation died before it finished");
    // At receive, in one call, only the near record: back where its deadline margin begins
    // (500 s - 20 s margin), when someone can still answer it, instead of after 960 s.
    assert_eq!(queue.calls(), vec![(start_ms, Call::SetVisibility(vec![(0, 480)]))]);
}

/// A sink that notes, at each PUT, how many delivered marks the store had been sent.
#[derive(Debug)]
struct MarksAtPut {
    inner: Arc<RecordingSink>,
    store: Arc<crate::doubles::FaultyStore>,
    marks_before: Mutex<Vec<u32>>,
}

#[async_trait]
impl ResponseSink for MarksAtPut {
    async fn put(&self, url: &ResponseUrl, body: &[u8]) -> Result<(), PutError> {
        self.marks_before.lock().expect("marks").push(self.store.calls(Op::MarkDelivered));
        self.inner.put(url, body).await
    }
}

#[test]
fn a_batchs_delivered_marks_come_after_all_its_answers() {
    let h = Harness::new();
    let sink = Arc::new(MarksAtPut { inner: h.sink.clone(), store: h.store.clone(), marks_before: Mutex::default() });
    let worker = worker_with_sink(&h, sink.clone());
    let queue = RecordingQueue::new(&h.clock);
    let start_ms = h.clock.now_ms();
    let bodies: Vec<String> = (1..=4).map(|n| nth("Create", ECHO_TYPE, json!({}), n).0).collect();
    assert_eq!(run_batch(&h, &worker, &queue, &bodies, 0), vec![false; 4]);
    // Each record's mark waited for the others' answers: no PUT came after a mark.
    assert_eq!(*sink.marks_before.lock().expect("marks"), vec![0, 0, 0, 0]);
    assert_eq!(h.store.calls(Op::MarkDelivered), 4, "every answer is marked delivered");
    assert_eq!(h.clock.now_ms(), start_ms, "no record waited: the gate opened at the last answer");
    assert!(h.records().iter().all(|record| record.delivered));
}

#[test]
fn a_slow_batch_mate_holds_a_delivered_mark_back_a_second_at_most() {
    let h = Harness::new();
    let worker = h.worker("us-east-1");
    let queue = RecordingQueue::new(&h.clock);
    let start_ms = h.clock.now_ms();
    let (quick, _) = nth("Create", ECHO_TYPE, json!({}), 1);
    let (slow, _) = nth("Create", ECHO_TYPE, json!({"DelayMs": "100000"}), 2);
    assert_eq!(run_batch(&h, &worker, &queue, &[quick, slow], 0), vec![false, false]);
    let marked = |request_id: &str| {
        let record = h.records().into_iter().find(|record| record.key.request_id == request_id).expect("a record");
        (record.delivered, record.updated_ms)
    };
    assert_eq!(marked("req-1"), (true, start_ms + MARK_WAIT_MS), "the quick answer's mark waited its bound");
    assert_eq!(marked("req-2"), (true, start_ms + 100_000), "the slow one's mark came at its own answer");
}
