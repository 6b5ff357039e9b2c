//! The provider test kit: run a provider through the real protocol (the [`Worker`], the
//! decision table, the in-memory lease store, response building) on a manual clock, without AWS,
//! in microseconds.
//!
//! A provider author tests what CloudFormation and two regions will do to their provider:
//! Create, Update and Delete with CloudFormation's stringly properties (and a `ServiceTimeout`,
//! or another logical resource of the stack: [`TestRequest`]'s builders), the Delete that follows
//! a failed Create, the same request delivered twice at once, a takeover after a crash between the
//! provider's run and its answer, a stale execution that writes after the takeover
//! ([`ProviderTest::stale_write_after_take_over`]: its fenced writes must be refused), a
//! takeover in the middle of a poll, and the primary region lost during a wait. A provider that
//! answers in progress is followed through its polls: each delivery that leaves the request
//! waiting brings the message back when the worker asked, on the manual clock, until it is
//! answered ([`ProviderTest::provider_polls`] counts the polls). [`FencedMap`] stands in for a
//! fenced, owned table (`cfn_once::FencedTable`) in the provider's own fakes.
//!
//! The parts, by what each plays: this file is CloudFormation and the primary region (building
//! requests, delivering them until answered); `takeover` is a crash, a frozen execution and a
//! lost region; `answer` is what the kit hands back; `gate` holds a provider call still and
//! counts the calls; `fenced_map` is the provider's own fenced table.
//!
//! ```
//! use cfn_once_core::echo::Echo;
//! use cfn_once_core::testing::ProviderTest;
//! use cfn_once_core::response::Status;
//! use serde_json::json;
//!
//! let mut kit = ProviderTest::new().provider("Custom::Echo", Echo);
//! let created = kit.create("Custom::Echo", json!({"Size": "5"}));
//! assert_eq!(created.status(), Some(Status::Success));
//! assert_eq!(created.data()["Size"], json!("5"));
//! let request = kit.create_request("Custom::Echo", json!({"Size": "6"}));
//! let both = kit.deliver_at_once(&request, 2);
//! assert_eq!(kit.provider_runs(), 2, "one run for each request, not for each copy");
//! assert_eq!(kit.puts(&request).len(), 1, "one answer for the duplicated request");
//! # let _ = both;
//!
//! // In progress for a minute, polled every 10 s: followed through its polls to the answer.
//! let waited = kit.create("Custom::Echo", json!({"InProgressForS": "60", "PollIntervalS": "10"}));
//! assert_eq!(waited.status(), Some(Status::Success));
//! assert_eq!((waited.data()["Polls"].clone(), kit.provider_polls()), (json!("6"), 6));
//! ```

use std::sync::Arc;
use std::sync::atomic::{AtomicU32, Ordering};

use serde_json::{Value, json};

use crate::clock::{Clock, ManualClock};
use crate::config::Config;
use crate::control::{Activity, FixedActivity};
use crate::doubles::{FaultyStore, RecordingSink, drive};
use crate::lease::{LeaseState, LeaseStore};
use crate::memory_store::MemoryLeaseStore;
use crate::metrics::NoMetrics;
use crate::provider::{Provider, Router};
use crate::random::SplitMix64;
use crate::request::{InputPolicy, RequestKind};
use crate::response::ResponseBody;
use crate::response_url::UrlPolicy;
use crate::settings::Settings;
use crate::vocabulary::{Disposition, Invocation, QueueRecord, Role};
use crate::worker::{Ports, Worker};

mod answer;
mod fenced_map;
mod gate;
mod takeover;

pub use answer::{Answer, TakeOver, TestRequest};
pub use fenced_map::FencedMap;
use gate::{Counted, Gate};

/// Where the kit's requests come from.
const STACK_ID: &str = "arn:aws:cloudformation:us-east-1:123456789012:stack/provider-test/guid";
/// The logical id of the resource under test.
const LOGICAL_RESOURCE_ID: &str = "Resource";
/// The function timeout the kit's invocations run with: the regional template's default.
const FUNCTION_TIMEOUT_MS: u64 = 120_000;

/// A provider under test, in the protocol it will run in.
///
/// ```
/// use cfn_once_core::echo::Echo;
/// use cfn_once_core::testing::ProviderTest;
/// use cfn_once_core::response::Status;
/// use serde_json::json;
///
/// let mut kit = ProviderTest::new().provider("Custom::Echo", Echo);
/// // The primary freezes just before the provider runs; the secondary takes over; the primary
/// // resumes: one answer, the taker-over's, and the stale execution commits nothing.
/// let request = kit.create_request("Custom::Echo", json!({"Size": "1"})).service_timeout_s(600);
/// let takeover = kit.stale_write_after_take_over(&request);
/// assert_eq!((takeover.answer.status(), takeover.answer.fence()), (Some(Status::Success), Some(2)));
/// assert_eq!(kit.puts(&request).len(), 1);
/// // A rollback Delete for an id the provider never returned still succeeds.
/// let rollback = kit.delete("Custom::Echo", "cfn-made-up-id", json!({}));
/// assert_eq!(rollback.status(), Some(Status::Success));
/// ```
#[derive(Debug)]
pub struct ProviderTest {
    /// Shared with the workers of a delivery, and only then.
    router: Arc<Router>,
    clock: ManualClock,
    store: Arc<FaultyStore>,
    sink: Arc<RecordingSink>,
    runs: Arc<AtomicU32>,
    polls: Arc<AtomicU32>,
    gate: Arc<Gate>,
    requests: u32,
    function_timeout_ms: u64,
}

/// Deliveries [`ProviderTest::deliver`] makes of one request while it waits for polls.
const WAITING_DELIVERIES_MAX: u32 = 1_000;

impl Default for ProviderTest {
    fn default() -> Self {
        Self::new()
    }
}

impl ProviderTest {
    /// A kit with no providers, on a manual clock.
    pub fn new() -> Self {
        Self {
            router: Arc::new(Router::new()),
            clock: ManualClock::new(1_800_000_000_000),
            store: Arc::new(FaultyStore::new(Arc::new(MemoryLeaseStore::new()))),
            sink: Arc::new(RecordingSink::new()),
            runs: Arc::new(AtomicU32::new(0)),
            polls: Arc::new(AtomicU32::new(0)),
            gate: Arc::new(Gate::default()),
            requests: 0,
            function_timeout_ms: FUNCTION_TIMEOUT_MS,
        }
    }

    /// Serves `resource_type` with `provider`; every call to it is counted.
    pub fn provider<P: Provider>(mut self, resource_type: &str, provider: P) -> Self {
        let counted = Counted {
            inner: provider,
            runs: Arc::clone(&self.runs),
            polls: Arc::clone(&self.polls),
            gate: Arc::clone(&self.gate),
        };
        // No worker outlives a delivery, so the kit holds the only reference here.
        let router = Arc::try_unwrap(self.router).unwrap_or_else(|_| unreachable!("no delivery is running"));
        self.router = Arc::new(router.register(resource_type, counted));
        self
    }

    /// Invocations end this long after they start (the function timeout), instead of 120 s.
    pub fn function_timeout_ms(mut self, timeout_ms: u64) -> Self {
        self.function_timeout_ms = timeout_ms;
        self
    }

    /// How many times any provider's create, update or delete ran.
    pub fn provider_runs(&self) -> u32 {
        self.runs.load(Ordering::SeqCst)
    }

    /// How many times any provider's poll ran.
    pub fn provider_polls(&self) -> u32 {
        self.polls.load(Ordering::SeqCst)
    }

    /// The kit's clock (shared), for fakes whose calls take time: a fake that sleeps on it
    /// takes that long in the kit's deliveries.
    pub fn clock(&self) -> ManualClock {
        self.clock.clone()
    }

    /// Moves the kit's clock forward.
    pub fn advance_ms(&self, delta_ms: u64) {
        self.clock.advance_ms(delta_ms);
    }

    /// A Create request for `resource_type` with `properties` (CloudFormation sends every scalar
    /// as a string: write `"5"`, `"true"`).
    pub fn create_request(&mut self, resource_type: &str, properties: Value) -> TestRequest {
        self.request(RequestKind::Create, resource_type, None, properties, None)
    }

    /// A request of any kind; `old_properties` only for an Update.
    pub fn request(
        &mut self,
        kind: RequestKind,
        resource_type: &str,
        physical_resource_id: Option<&str>,
        properties: Value,
        old_properties: Option<Value>,
    ) -> TestRequest {
        self.requests += 1;
        let n = self.requests;
        let url = format!(
            "https://cloudformation-custom-resource-response-useast1.s3.amazonaws.com/provider-test/{n}?X-Amz-Signature=kit{n}"
        );
        let mut request = json!({
            "RequestType": kind.as_str(),
            "ResponseURL": url,
            "StackId": STACK_ID,
            "RequestId": format!("kit-request-{n}"),
            "LogicalResourceId": LOGICAL_RESOURCE_ID,
            "ResourceType": resource_type,
            "ResourceProperties": properties,
        });
        if let Some(id) = physical_resource_id {
            request["PhysicalResourceId"] = json!(id);
        }
        if kind == RequestKind::Update {
            request["OldResourceProperties"] = old_properties.unwrap_or_else(|| json!({}));
        }
        TestRequest { request, url }
    }

    /// An Update request of the resource `physical_resource_id`, to deliver (or change first).
    pub fn update_request(
        &mut self,
        resource_type: &str,
        physical_resource_id: &str,
        properties: Value,
        old_properties: Value,
    ) -> TestRequest {
        self.request(RequestKind::Update, resource_type, Some(physical_resource_id), properties, Some(old_properties))
    }

    /// A Delete request of the resource `physical_resource_id`, to deliver (or change first).
    pub fn delete_request(
        &mut self,
        resource_type: &str,
        physical_resource_id: &str,
        properties: Value,
    ) -> TestRequest {
        self.request(RequestKind::Delete, resource_type, Some(physical_resource_id), properties, None)
    }

    /// Sends a Create and returns its answer.
    pub fn create(&mut self, resource_type: &str, properties: Value) -> Answer {
        let request = self.create_request(resource_type, properties);
        self.deliver(&request)
    }

    /// Sends an Update of the resource `physical_resource_id` and returns its answer.
    pub fn update(
        &mut self,
        resource_type: &str,
        physical_resource_id: &str,
        properties: Value,
        old_properties: Value,
    ) -> Answer {
        let request = self.request(
            RequestKind::Update,
            resource_type,
            Some(physical_resource_id),
            properties,
            Some(old_properties),
        );
        self.deliver(&request)
    }

    /// Sends a Delete of the resource `physical_resource_id` and returns its answer.
    pub fn delete(&mut self, resource_type: &str, physical_resource_id: &str, properties: Value) -> Answer {
        let request = self.request(RequestKind::Delete, resource_type, Some(physical_resource_id), properties, None);
        self.deliver(&request)
    }

    /// A delivery of `request` to the primary region, run to its end; while the provider's work
    /// is in progress, or the provider is to run again under a higher fence after an outcome
    /// nobody saw (`ProviderError::Unknown`), the message comes back when the worker asked (the
    /// clock moves on) and is delivered again, until the request is answered or the message is
    /// given up.
    pub fn deliver(&mut self, request: &TestRequest) -> Answer {
        let worker = self.worker(Role::Primary, "us-east-1");
        let body = request.request.to_string();
        let sent_ms = Some(self.clock.now_ms());
        for receive_count in 1..=WAITING_DELIVERIES_MAX {
            let invocation = self.invocation();
            let delivery = QueueRecord { body: Some(&body), receive_count, sent_ms };
            let disposition = drive(&self.clock, worker.handle(delivery, &invocation));
            match &disposition {
                Disposition::Retry { delay_s, .. } if self.waiting(request) => {
                    self.clock.advance_ms(u64::from(*delay_s) * 1000);
                }
                _ => return self.answer(request, disposition),
            }
        }
        panic!("the request was still in progress after {WAITING_DELIVERIES_MAX} deliveries")
    }

    /// Whether `request`'s record says its provider's work is in progress, or that its lease
    /// was ended for the provider to run again under a higher fence.
    fn waiting(&self, request: &TestRequest) -> bool {
        let key = crate::request::RequestKey {
            stack_id: crate::request::StackArn::parse(STACK_ID)
                .unwrap_or_else(|| unreachable!("the kit's StackId is a stack ARN")),
            request_id: request.request["RequestId"].as_str().unwrap_or_default().to_owned(),
        };
        let record = drive(&self.clock, self.store.read(&key));
        matches!(
            record,
            Ok(Some(record)) if record.state == LeaseState::Waiting
                || (record.state == LeaseState::Running && record.lease_until_ms == 0)
        )
    }

    /// `copies` deliveries of `request` at the same moment, in both regions (SQS delivers at
    /// least once, and the secondary's copy arrives too): the provider runs once and every PUT
    /// carries the same bytes.
    pub fn deliver_at_once(&mut self, request: &TestRequest, copies: usize) -> Vec<Answer> {
        let body = request.request.to_string();
        let invocation = self.invocation();
        let sent_ms = Some(self.clock.now_ms());
        let workers: Vec<Worker> = (0..copies)
            .map(|copy| {
                if copy % 2 == 0 {
                    self.worker(Role::Primary, "us-east-1")
                } else {
                    self.worker(Role::Secondary, "us-west-2")
                }
            })
            .collect();
        let deliveries = workers
            .iter()
            .map(|worker| worker.handle(QueueRecord { body: Some(&body), receive_count: 1, sent_ms }, &invocation));
        let dispositions = drive(&self.clock, futures_util::future::join_all(deliveries));
        dispositions.into_iter().map(|disposition| self.answer(request, disposition)).collect()
    }

    /// Every body PUT to `request`'s ResponseURL, in order, as bytes.
    pub fn puts(&self, request: &TestRequest) -> Vec<Vec<u8>> {
        self.sink.bodies(&request.url)
    }

    fn answer(&self, request: &TestRequest, disposition: Disposition) -> Answer {
        let body = self.puts(request).last().and_then(|bytes| ResponseBody::parse(bytes).ok());
        Answer { disposition, body }
    }

    fn invocation(&self) -> Invocation {
        Invocation { id: "provider-test".into(), deadline_ms: self.clock.now_ms() + self.function_timeout_ms }
    }

    /// A worker in `region` with `role`, sharing the kit's store, sink, clock and providers.
    fn worker(&self, role: Role, region: &str) -> Worker {
        Worker::new(
            Ports {
                store: self.store.clone(),
                sink: self.sink.clone(),
                router: Arc::clone(&self.router),
                clock: Arc::new(self.clock.clone()),
                random: Arc::new(SplitMix64::new(u64::from(self.requests))),
                control: Arc::new(FixedActivity(Activity::Active)),
                metrics: Arc::new(NoMetrics),
            },
            InputPolicy {
                topic_arns: vec![],
                raw_delivery: true,
                urls: UrlPolicy::new(vec![]),
                privileged_topic_arns: vec![],
            },
            settings(role, region),
        )
    }
}

/// The deployed defaults: the handler's configuration with nothing but the required variables.
fn settings(role: Role, region: &str) -> Settings {
    let vars = [
        ("AWS_REGION", region),
        ("CFN_ONCE_ROLE", role.as_str()),
        ("CFN_ONCE_TABLE", "provider-test-leases"),
        ("CFN_ONCE_TOPIC_ARNS", "arn:aws:sns:us-east-1:123456789012:provider-test"),
    ];
    let lookup = |name: &str| vars.iter().find(|(var, _)| *var == name).map(|(_, value)| (*value).to_owned());
    match Config::from_lookup(lookup) {
        Ok(config) => config.settings(),
        Err(error) => unreachable!("the kit's own configuration is valid: {error}"),
    }
}

#[cfg(test)]
mod tests;
