//! The protocol, end to end in memory: in-memory store, recording sink, manual clock. This file
//! is the harness every test of the worker (and of the batch, `batch_tests`) runs on; the tests
//! are in the files beside it, by topic.

use std::collections::BTreeMap;
use std::sync::Arc;

use serde_json::{Value, json};

use super::*;
use crate::clock::{Clock, ManualClock};
use crate::control::{Activity, ActivitySource, ControlError, FixedActivity};
use crate::deadline::RequestDeadline;
use crate::doubles::{
    CountingEcho, Fault, FaultyStore, Op, PutFault, RecordedMetrics, RecordingSink, drive, drive_until,
};
use crate::echo::{ECHO_TYPE, Echo};
use crate::lease::{LeaseRecord, LeaseState};
use crate::memory_store::MemoryLeaseStore;
use crate::metrics::MetricEvent;
use crate::provider::ProviderContext;
use crate::random::SplitMix64;
use crate::request::{Request, RequestKey};
use crate::response::{ResponseBody, Status, is_failed_create_id};
use crate::response_url::UrlPolicy;

#[path = "answer_tests.rs"]
mod answers;

#[path = "fault_tests.rs"]
mod faults;

#[path = "region_tests.rs"]
mod regions;

#[path = "deadline_tests.rs"]
mod deadlines;

#[path = "wait_tests.rs"]
mod waits;

#[path = "time_bounds_tests.rs"]
mod time_bounds;

#[path = "wait_condition_tests.rs"]
mod wait_conditions;

#[path = "short_deadline_tests.rs"]
mod short_deadlines;

#[path = "privilege_tests.rs"]
mod privilege;

#[path = "deferred_tests.rs"]
mod deferred;

const START_MS: u64 = 1_800_000_000_000;
const TOPIC: &str = "arn:aws:sns:us-east-1:123456789012:cfn-once";
const URL: &str = "https://cloudformation-custom-resource-response-useast1.s3.amazonaws.com/k?X-Amz-Signature=one";
const OTHER_URL: &str =
    "https://cloudformation-custom-resource-response-useast1.s3.amazonaws.com/k?X-Amz-Signature=two";
const THIRD_URL: &str =
    "https://cloudformation-custom-resource-response-useast1.s3.amazonaws.com/k?X-Amz-Signature=three";

pub(crate) struct Harness {
    pub(crate) clock: ManualClock,
    memory: Arc<MemoryLeaseStore>,
    pub(crate) store: Arc<FaultyStore>,
    pub(crate) sink: Arc<RecordingSink>,
    counting: CountingEcho,
    pub(crate) metrics: RecordedMetrics,
}

impl Harness {
    pub(crate) fn new() -> Self {
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

    pub(crate) fn worker(&self, region: &str) -> Worker {
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
        let input = InputPolicy {
            topic_arns: vec![TOPIC.into()],
            raw_delivery: true,
            urls: UrlPolicy::new(vec![]),
            privileged_topic_arns: vec![],
        };
        Worker::new(ports, input, settings)
    }

    pub(crate) fn invocation(&self, budget_ms: u64) -> Invocation {
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

    /// Every lease record the store holds.
    pub(crate) fn records(&self) -> Vec<LeaseRecord> {
        self.memory.snapshot()
    }

    pub(crate) fn bodies(&self, url: &str) -> Vec<ResponseBody> {
        self.sink.bodies(url).iter().map(|b| ResponseBody::parse(b).expect("valid body")).collect()
    }
}

pub(crate) fn settings(region: &str) -> Settings {
    crate::budget::test_settings(region)
}

pub(crate) fn request(kind: &str, resource_type: &str, properties: Value, url: &str) -> String {
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

/// Runs `body` through `worker` as a delivery sent `sent_ago_ms` ago.
fn handle_sent(h: &Harness, worker: &Worker, body: &str, sent_ago_ms: u64) -> Disposition {
    let invocation = h.invocation(900_000);
    let sent_ms = Some(h.clock.now_ms() - sent_ago_ms);
    drive(&h.clock, worker.handle(QueueRecord { body: Some(body), receive_count: 1, sent_ms }, &invocation))
}

/// East takes `body`'s lease and starts its provider, then crashes holding the lease. Returns
/// the copies' send time, for later deliveries of the same message.
fn run_then_crash(h: &Harness, body: &str) -> Option<u64> {
    let invocation = h.invocation(900_000);
    let sent_ms = Some(h.clock.now_ms());
    let crashed = drive_until(
        &h.clock,
        h.worker("us-east-1").handle(QueueRecord { body: Some(body), receive_count: 1, sent_ms }, &invocation),
        || h.counting.calls() == 1,
    );
    assert!(crashed.is_none(), "east crashed before answering");
    sent_ms
}

fn decoded(body: &str) -> Request {
    decode(
        Some(body),
        &InputPolicy {
            topic_arns: vec![],
            raw_delivery: true,
            urls: UrlPolicy::new(vec![]),
            privileged_topic_arns: vec![],
        },
    )
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
