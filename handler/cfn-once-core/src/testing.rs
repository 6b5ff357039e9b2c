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

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicBool, AtomicU32, Ordering};
use std::sync::{Arc, Mutex, PoisonError};

use async_trait::async_trait;
use serde_json::{Value, json};

use crate::clock::{Clock, ManualClock};
use crate::config::Config;
use crate::control::{Activity, FixedActivity};
use crate::doubles::{Fault, FaultyStore, Op, RecordingSink, drive, drive_until};
use crate::lease::{LeaseState, LeaseStore};
use crate::memory_store::MemoryLeaseStore;
use crate::metrics::NoMetrics;
use crate::ownership::{Deleted, Fence, Found, Owner, WriteRefused, WriteRules, Written};
use crate::provider::{Provider, ProviderContext, ProviderError, Router, Step};
use crate::random::SplitMix64;
use crate::request::{InputPolicy, RequestKind};
use crate::response::{ResponseBody, Status};
use crate::response_url::UrlPolicy;
use crate::settings::Settings;
use crate::vocabulary::{Disposition, Done, Invocation, QueueRecord, Role};
use crate::worker::{Ports, Worker};

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

/// One CloudFormation request the kit built, to deliver once or many times.
#[derive(Debug, Clone)]
pub struct TestRequest {
    /// The request as CloudFormation sends it (its ResponseURL points into the kit's recording sink).
    pub request: Value,
    url: String,
}

impl TestRequest {
    /// The same request with a `ServiceTimeout` (seconds, 1 to 3600): its deadline.
    pub fn service_timeout_s(mut self, seconds: u64) -> Self {
        self.request["ResourceProperties"]["ServiceTimeout"] = json!(seconds.to_string());
        self
    }

    /// The same request for another logical resource of the stack (two resources of one
    /// template), `Resource` by default.
    pub fn logical_resource_id(mut self, logical_resource_id: &str) -> Self {
        self.request["LogicalResourceId"] = json!(logical_resource_id);
        self
    }
}

/// How a takeover played out, for [`ProviderTest::stale_write_after_take_over`].
#[derive(Debug, Clone)]
pub struct TakeOver {
    /// The taking-over execution's delivery: the request's answer.
    pub answer: Answer,
    /// The stale execution's delivery once it resumed: its writes were fenced out and it
    /// committed and sent nothing (a retry, or a drop as a duplicate).
    pub stale: Disposition,
}

/// What one delivery of a request came to: what the worker did with the message, and the
/// request's answer as last PUT (`None` if nothing was PUT yet).
#[derive(Debug, Clone)]
pub struct Answer {
    /// What the worker decided for this delivery: answered, re-sent, dropped as a duplicate,
    /// retried later.
    pub disposition: Disposition,
    /// The body last PUT to the request's ResponseURL.
    pub body: Option<ResponseBody>,
}

impl Answer {
    /// SUCCESS or FAILED; `None` while nothing is answered yet (the request is still in
    /// progress, or the delivery is to be retried).
    pub fn status(&self) -> Option<Status> {
        self.body.as_ref().map(|body| body.status)
    }

    /// Whether a body was PUT.
    pub fn is_answered(&self) -> bool {
        self.body.is_some()
    }

    /// The FAILED answer's Reason.
    pub fn reason(&self) -> Option<&str> {
        self.body.as_ref().and_then(|body| body.reason.as_deref())
    }

    /// The PhysicalResourceId answered; empty while nothing is answered.
    pub fn physical_resource_id(&self) -> &str {
        self.body.as_ref().map_or("", |body| body.physical_resource_id.as_str())
    }

    /// The Data answered; empty while nothing is answered.
    pub fn data(&self) -> &BTreeMap<String, Value> {
        static EMPTY: BTreeMap<String, Value> = BTreeMap::new();
        self.body.as_ref().map_or(&EMPTY, |body| &body.data)
    }

    /// The fence the answer was committed under, when this delivery answered.
    pub fn fence(&self) -> Option<u64> {
        match &self.disposition {
            Disposition::Done(Done::Answered { fence, .. }) => Some(*fence),
            _ => None,
        }
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

    /// The primary runs the provider for `request` and dies before it can commit the answer; the
    /// lease expires, and the secondary's copy takes the request over with a higher fence and
    /// answers. The provider runs twice (once under each fence): it must be idempotent, and
    /// writes a stale execution makes after the takeover must be fenced out.
    pub fn crash_before_commit_then_take_over(&mut self, request: &TestRequest) -> Answer {
        self.store.inject(Op::Commit, Fault::Stall);
        let commits = self.store.calls(Op::Commit);
        let primary = self.worker(Role::Primary, "us-east-1");
        let body = request.request.to_string();
        let invocation = self.invocation();
        let sent_ms = Some(self.clock.now_ms());
        let first = primary.handle(QueueRecord { body: Some(&body), receive_count: 1, sent_ms }, &invocation);
        let crashed = drive_until(&self.clock, first, || self.store.calls(Op::Commit) > commits);
        if let Some(disposition) = crashed {
            // The provider answered without reaching a commit (it was refused, say): nothing
            // crashed, so there is nothing to take over.
            return self.answer(request, disposition);
        }
        let settings = primary.settings();
        self.clock.advance_ms(settings.lease_ms + settings.skew_ms + 1);
        let secondary = self.worker(Role::Secondary, "us-west-2");
        let invocation = self.invocation();
        let delivery = QueueRecord { body: Some(&body), receive_count: 2, sent_ms };
        let disposition = drive(&self.clock, secondary.handle(delivery, &invocation));
        self.answer(request, disposition)
    }

    /// The primary runs `request` and stops at the start of its provider call, frozen (a Lambda
    /// paused by the runtime, or cut off by the network); its lease expires, the secondary's copy
    /// takes over with a higher fence, runs the provider and answers. Then the frozen execution
    /// resumes: its provider runs under the old fence, so every fenced write it makes must be
    /// refused, and it must commit and send nothing. Returns both deliveries.
    pub fn stale_write_after_take_over(&mut self, request: &TestRequest) -> TakeOver {
        let body = request.request.to_string();
        let sent_ms = Some(self.clock.now_ms());
        let primary = self.worker(Role::Primary, "us-east-1");
        let invocation = self.invocation();
        self.gate.arm();
        let mut stale =
            Box::pin(primary.handle(QueueRecord { body: Some(&body), receive_count: 1, sent_ms }, &invocation));
        let gate = Arc::clone(&self.gate);
        if let Some(disposition) = drive_until(&self.clock, &mut stale, || gate.is_waiting()) {
            // The provider was never called (the request was refused): nothing to take over.
            return TakeOver { answer: self.answer(request, disposition.clone()), stale: disposition };
        }
        let settings = primary.settings();
        self.clock.advance_ms(settings.lease_ms + settings.skew_ms + 1);
        let secondary = self.worker(Role::Secondary, "us-west-2");
        let taking_over = self.invocation();
        let delivery = QueueRecord { body: Some(&body), receive_count: 2, sent_ms };
        let disposition = drive(&self.clock, secondary.handle(delivery, &taking_over));
        let answer = self.answer(request, disposition);
        self.gate.open();
        let stale = drive(&self.clock, &mut stale);
        TakeOver { answer, stale }
    }

    /// A long-running `request`: the primary answers in progress, and at its next poll it dies
    /// in the middle of the provider's `poll`; the lease expires and the secondary takes the
    /// poll over (its context says so, [`ProviderContext::took_over_from`]), and follows the
    /// request to its answer. The poll runs again with the same state: it must be idempotent.
    pub fn take_over_mid_poll(&mut self, request: &TestRequest) -> Answer {
        let body = request.request.to_string();
        let sent_ms = Some(self.clock.now_ms());
        let primary = self.worker(Role::Primary, "us-east-1");
        let first = drive(
            &self.clock,
            primary.handle(QueueRecord { body: Some(&body), receive_count: 1, sent_ms }, &self.invocation()),
        );
        let Disposition::Retry { delay_s, .. } = &first else { return self.answer(request, first) };
        if !self.waiting(request) {
            return self.answer(request, first);
        }
        self.clock.advance_ms(u64::from(*delay_s) * 1000);
        self.gate.arm();
        let gate = Arc::clone(&self.gate);
        let invocation = self.invocation();
        let polling = primary.handle(QueueRecord { body: Some(&body), receive_count: 2, sent_ms }, &invocation);
        if let Some(disposition) = drive_until(&self.clock, polling, || gate.is_waiting()) {
            return self.answer(request, disposition);
        }
        // The poller is gone, mid-poll; the gate is left for the next call to pass.
        self.gate.open();
        let settings = primary.settings();
        self.clock.advance_ms(settings.lease_ms + settings.skew_ms + 1);
        self.follow(request, Role::Secondary, "us-west-2", sent_ms, 3)
    }

    /// A long-running `request`: the primary answers in progress, then its whole region is lost
    /// for good; the secondary's copies take the due polls (after the secondary's lag) and
    /// follow the request to its answer.
    pub fn lose_primary_during_wait(&mut self, request: &TestRequest) -> Answer {
        let body = request.request.to_string();
        let sent_ms = Some(self.clock.now_ms());
        let primary = self.worker(Role::Primary, "us-east-1");
        let first = drive(
            &self.clock,
            primary.handle(QueueRecord { body: Some(&body), receive_count: 1, sent_ms }, &self.invocation()),
        );
        if !matches!(first, Disposition::Retry { .. }) || !self.waiting(request) {
            return self.answer(request, first);
        }
        self.follow(request, Role::Secondary, "us-west-2", sent_ms, 1)
    }

    /// Delivers `request` to `region` again and again, each time after the delay the worker
    /// asked for, until it is answered or given up.
    fn follow(&mut self, request: &TestRequest, role: Role, region: &str, sent_ms: Option<u64>, first: u32) -> Answer {
        let worker = self.worker(role, region);
        let body = request.request.to_string();
        for receive_count in first..first + WAITING_DELIVERIES_MAX {
            let delivery = QueueRecord { body: Some(&body), receive_count, sent_ms };
            let disposition = drive(&self.clock, worker.handle(delivery, &self.invocation()));
            match &disposition {
                Disposition::Retry { delay_s, .. } => self.clock.advance_ms(u64::from(*delay_s) * 1000),
                _ => return self.answer(request, disposition),
            }
        }
        panic!("the request was not answered after {WAITING_DELIVERIES_MAX} deliveries")
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
            InputPolicy { topic_arns: vec![], raw_delivery: true, urls: UrlPolicy::new(vec![]) },
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

/// Where the kit holds a provider call still, to play an execution frozen (or dying) in the
/// middle of its work: armed, the next call waits at the gate until it is opened.
#[derive(Debug, Default)]
struct Gate {
    armed: AtomicBool,
    waiting: AtomicBool,
    open: AtomicBool,
    waker: Mutex<Option<std::task::Waker>>,
}

impl Gate {
    /// The next call waits here until [`Gate::open`].
    fn arm(&self) {
        self.open.store(false, Ordering::SeqCst);
        self.armed.store(true, Ordering::SeqCst);
    }

    fn open(&self) {
        self.open.store(true, Ordering::SeqCst);
        if let Some(waker) = self.waker.lock().unwrap_or_else(PoisonError::into_inner).take() {
            waker.wake();
        }
    }

    fn is_waiting(&self) -> bool {
        self.waiting.load(Ordering::SeqCst)
    }

    async fn pass(&self) {
        if !self.armed.swap(false, Ordering::SeqCst) {
            return;
        }
        self.waiting.store(true, Ordering::SeqCst);
        std::future::poll_fn(|cx| {
            if self.open.load(Ordering::SeqCst) {
                return std::task::Poll::Ready(());
            }
            *self.waker.lock().unwrap_or_else(PoisonError::into_inner) = Some(cx.waker().clone());
            std::task::Poll::Pending
        })
        .await;
        self.waiting.store(false, Ordering::SeqCst);
    }
}

/// A provider wrapped to count its runs and polls, and to stop at the kit's gate.
struct Counted<P> {
    inner: P,
    runs: Arc<AtomicU32>,
    polls: Arc<AtomicU32>,
    gate: Arc<Gate>,
}

#[async_trait]
impl<P: Provider> Provider for Counted<P> {
    type Properties = P::Properties;

    async fn create(&self, ctx: &ProviderContext, properties: P::Properties) -> Result<Step, ProviderError> {
        self.runs.fetch_add(1, Ordering::SeqCst);
        self.gate.pass().await;
        self.inner.create(ctx, properties).await
    }

    async fn update(
        &self,
        ctx: &ProviderContext,
        physical_resource_id: &str,
        properties: P::Properties,
        old_properties: Option<P::Properties>,
    ) -> Result<Step, ProviderError> {
        self.runs.fetch_add(1, Ordering::SeqCst);
        self.gate.pass().await;
        self.inner.update(ctx, physical_resource_id, properties, old_properties).await
    }

    async fn delete(
        &self,
        ctx: &ProviderContext,
        physical_resource_id: &str,
        properties: P::Properties,
    ) -> Result<Step<()>, ProviderError> {
        self.runs.fetch_add(1, Ordering::SeqCst);
        self.gate.pass().await;
        self.inner.delete(ctx, physical_resource_id, properties).await
    }

    async fn poll(&self, ctx: &ProviderContext, state: Value) -> Result<Step, ProviderError> {
        self.polls.fetch_add(1, Ordering::SeqCst);
        self.gate.pass().await;
        self.inner.poll(ctx, state).await
    }
}

/// An in-memory table written under fences and owners, with the rules `cfn_once::FencedTable`
/// sends to DynamoDB as one condition ([`WriteRules`]): a write is refused when a newer fence of
/// the same request already wrote the item, and an owned write when the item belongs to another
/// resource (or cfn-once did not write it) unless it adopts; an owned delete removes only the
/// resource's own item. A delete leaves nothing, as `FencedTable`'s does;
/// [`FencedMap::delete_leaving_tombstone`] plays its opt-in tombstone, which still refuses a
/// stale write of the same request. Use it behind your provider's storage trait in
/// tests; [`FencedMap::insert_unowned`] plays a record that existed before the stack.
///
/// ```
/// use cfn_once_core::testing::FencedMap;
/// use cfn_once_core::ownership::{Deleted, Fence, Owner, WriteRefused, WriteRules, Written};
/// use serde_json::json;
///
/// let rules = |logical: &str| WriteRules {
///     fence: Fence { scope: "request-1".into(), value: 1 },
///     owner: Some(Owner::new("arn:aws:cloudformation:us-east-1:123456789012:stack/s/g", logical)),
///     adopt: false,
/// };
/// let map = FencedMap::new();
/// map.insert_unowned("prod", json!("precious"));
/// assert_eq!(map.put(&rules("Mine"), "prod", json!("mine")), Err(WriteRefused::OwnedByAnother { owner: None }));
/// assert_eq!(map.delete(&rules("Mine"), "prod"), Ok(Deleted::NotOwned { owner: None }));
/// assert_eq!(map.get("prod"), Some(json!("precious")));
/// assert_eq!(map.put(&rules("Mine"), "new", json!(1)), Ok(Written::Created));
/// ```
#[derive(Debug, Default)]
pub struct FencedMap {
    items: Mutex<BTreeMap<String, Stored>>,
}

/// One key's state: its value (`None`: a tombstone), the fence and owner of its last write.
#[derive(Debug, Clone)]
struct Stored {
    value: Option<Value>,
    fence: Option<Fence>,
    owner: Option<Owner>,
}

impl Stored {
    fn found(stored: Option<&Stored>) -> Found {
        match stored {
            None => Found::Absent,
            Some(Stored { value: None, fence, .. }) => Found::Tombstone { fence: fence.clone() },
            Some(Stored { value: Some(_), fence, owner }) => Found::Item { owner: owner.clone(), fence: fence.clone() },
        }
    }
}

impl FencedMap {
    /// An empty map.
    pub fn new() -> Self {
        Self::default()
    }

    /// Puts `value` at `key` under `rules`: says whether the item is new, was the resource's,
    /// or was adopted; refused if a newer fence wrote it, or (owned) another resource owns it.
    pub fn put(&self, rules: &WriteRules, key: &str, value: Value) -> Result<Written, WriteRefused> {
        let mut items = self.items.lock().unwrap_or_else(PoisonError::into_inner);
        let written = rules.admits_write(&Stored::found(items.get(key)))?;
        let stored = Stored { value: Some(value), fence: Some(rules.fence.clone()), owner: rules.owner.clone() };
        items.insert(key.to_owned(), stored);
        Ok(written)
    }

    /// Deletes `key` under `rules`, leaving nothing, as `FencedTable`'s delete does. An owned
    /// delete leaves an item of another owner alone ([`Deleted::NotOwned`]); deleting what is not
    /// there succeeds.
    pub fn delete(&self, rules: &WriteRules, key: &str) -> Result<Deleted, WriteRefused> {
        let mut items = self.items.lock().unwrap_or_else(PoisonError::into_inner);
        let deleted = rules.admits_delete(&Stored::found(items.get(key)))?;
        if deleted == Deleted::Deleted || rules.owner.is_none() {
            items.remove(key);
        }
        Ok(deleted)
    }

    /// [`FencedMap::delete`], leaving a tombstone with the fence (`Write::leaving_tombstone`):
    /// a later stale write of the same request is still refused.
    pub fn delete_leaving_tombstone(&self, rules: &WriteRules, key: &str) -> Result<Deleted, WriteRefused> {
        let mut items = self.items.lock().unwrap_or_else(PoisonError::into_inner);
        let deleted = rules.admits_delete(&Stored::found(items.get(key)))?;
        if deleted == Deleted::Deleted || rules.owner.is_none() {
            let tombstone = Stored { value: None, fence: Some(rules.fence.clone()), owner: rules.owner.clone() };
            items.insert(key.to_owned(), tombstone);
        }
        Ok(deleted)
    }

    /// Puts `value` at `key` as something other than cfn-once would: no fence, no owner (a
    /// record that existed before the stack).
    pub fn insert_unowned(&self, key: &str, value: Value) {
        let stored = Stored { value: Some(value), fence: None, owner: None };
        self.items.lock().unwrap_or_else(PoisonError::into_inner).insert(key.to_owned(), stored);
    }

    /// The value at `key`; `None` if there is none, or a delete left only its tombstone.
    pub fn get(&self, key: &str) -> Option<Value> {
        self.items.lock().unwrap_or_else(PoisonError::into_inner).get(key).and_then(|stored| stored.value.clone())
    }

    /// The fence (scope and value) of the last write or delete of `key`.
    pub fn written_by(&self, key: &str) -> Option<Fence> {
        self.items.lock().unwrap_or_else(PoisonError::into_inner).get(key).and_then(|stored| stored.fence.clone())
    }

    /// The fence value of the last write or delete of `key`.
    pub fn fence_of(&self, key: &str) -> Option<u64> {
        self.written_by(key).map(|fence| fence.value)
    }

    /// The owner of the item at `key`, if it is live and owned.
    pub fn owner_of(&self, key: &str) -> Option<Owner> {
        let items = self.items.lock().unwrap_or_else(PoisonError::into_inner);
        items.get(key).filter(|stored| stored.value.is_some()).and_then(|stored| stored.owner.clone())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::echo::Echo;

    /// One call: which operation, what it was told it took over from, under which fence.
    type Seen = (&'static str, Option<u64>, u64);

    /// Echo that records, for every call, whether it was told it took over.
    #[derive(Clone, Default)]
    struct Recording {
        took_over_from: Arc<Mutex<Vec<Seen>>>,
    }

    impl Recording {
        fn seen(&self) -> Vec<Seen> {
            self.took_over_from.lock().expect("lock").clone()
        }
    }

    #[async_trait]
    impl Provider for Recording {
        type Properties = crate::properties::PropertyMap;
        const UPDATE_THROUGH_CREATE: bool = true;

        async fn create(&self, ctx: &ProviderContext, properties: Self::Properties) -> Result<Step, ProviderError> {
            self.took_over_from.lock().expect("lock").push(("create", ctx.took_over_from, ctx.fence.value));
            Echo.create(ctx, properties).await
        }

        async fn delete(
            &self,
            ctx: &ProviderContext,
            id: &str,
            properties: Self::Properties,
        ) -> Result<Step<()>, ProviderError> {
            Echo.delete(ctx, id, properties).await
        }

        async fn poll(&self, ctx: &ProviderContext, state: Value) -> Result<Step, ProviderError> {
            self.took_over_from.lock().expect("lock").push(("poll", ctx.took_over_from, ctx.fence.value));
            Echo.poll(ctx, state).await
        }
    }

    #[test]
    fn a_poll_taken_over_midway_is_told_so_and_runs_again() {
        let recording = Recording::default();
        let mut kit = ProviderTest::new().provider("Custom::Wait", recording.clone());
        let request = kit.create_request("Custom::Wait", json!({"InProgressForS": "30", "PollIntervalS": "10"}));
        let answer = kit.take_over_mid_poll(&request);
        assert_eq!(answer.status(), Some(Status::Success), "{:?}", answer.disposition);
        let seen = recording.seen();
        assert_eq!(seen[0], ("create", None, 1), "a first run takes over from nobody");
        // The primary's poll under fence 2 died before it reached the provider.
        assert_eq!(seen[1], ("poll", Some(2), 3), "the poll the secondary took from the dead poller");
        assert!(seen[2..].iter().all(|(_, from, _)| from.is_none()), "later polls follow finished waits: {seen:?}");
        assert_eq!(kit.puts(&request).len(), 1);
    }

    #[test]
    fn a_wait_survives_the_loss_of_the_primary() {
        let mut kit = ProviderTest::new().provider("Custom::Echo", Echo);
        let request =
            kit.create_request("Custom::Echo", json!({"InProgressForS": "60", "PollIntervalS": "10", "Size": "1"}));
        let answer = kit.lose_primary_during_wait(&request);
        assert_eq!((answer.status(), answer.data().get("Size")), (Some(Status::Success), Some(&json!("1"))));
        assert_eq!(kit.puts(&request).len(), 1);
        // Polled every 10 s plus the secondary's lag (it waits a few seconds for a primary).
        assert!(kit.provider_polls() >= 3, "the secondary polled it to the end: {}", kit.provider_polls());
    }

    #[test]
    fn requests_are_built_for_updates_deletes_timeouts_and_other_resources() {
        let mut kit = ProviderTest::new().provider("Custom::Echo", Echo);
        let update = kit.update_request("Custom::Echo", "id-1", json!({"A": "2"}), json!({"A": "1"}));
        assert_eq!(
            (update.request["RequestType"].clone(), update.request["OldResourceProperties"]["A"].clone()),
            (json!("Update"), json!("1"))
        );
        let delete =
            kit.delete_request("Custom::Echo", "id-1", json!({})).service_timeout_s(60).logical_resource_id("Other");
        assert_eq!(delete.request["ResourceProperties"]["ServiceTimeout"], json!("60"));
        assert_eq!(delete.request["LogicalResourceId"], json!("Other"));
        assert_eq!(kit.deliver(&delete).status(), Some(Status::Success));
        let pending = Answer { disposition: Disposition::Retry { delay_s: 5, why: "waiting".into() }, body: None };
        assert_eq!(
            (pending.status(), pending.physical_resource_id(), pending.data().len()),
            (None, "", 0),
            "no panic while pending"
        );
    }

    #[test]
    fn the_maps_delete_leaves_nothing_and_an_opt_in_tombstone_refuses_a_stale_write_of_the_request() {
        let owner = Owner::new("arn:aws:cloudformation:us-east-1:123456789012:stack/s/1", "Item");
        let rules = |value| WriteRules::owned(&Fence { scope: "request-a".into(), value }, owner.clone());
        let map = FencedMap::new();
        map.put(&rules(1), "k", json!("one")).expect("fence 1 writes");
        assert_eq!(map.delete(&rules(2), "k"), Ok(Deleted::Deleted));
        assert_eq!((map.get("k"), map.written_by("k")), (None, None), "nothing left, not even a fence");

        let map = FencedMap::new();
        map.put(&rules(1), "k", json!("one")).expect("fence 1 writes");
        assert_eq!(map.delete_leaving_tombstone(&rules(2), "k"), Ok(Deleted::Deleted));
        assert_eq!(map.get("k"), None, "a tombstone is no item");
        assert_eq!(
            map.put(&rules(1), "k", json!("resurrected")),
            Err(WriteRefused::FencedOut { fence: 1, newer: 2 }),
            "the tombstone refuses the stale write of the same request"
        );
    }
}
