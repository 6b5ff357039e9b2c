//! The provider test kit: run a provider through the real protocol (the [`Worker`], the
//! decision table, the in-memory lease store, response building) on a manual clock, without AWS,
//! in microseconds.
//!
//! A provider author tests what CloudFormation and two regions will do to their provider:
//! Create, Update and Delete with CloudFormation's stringly properties, the Delete that follows a
//! failed Create, the same request delivered twice at once, and a takeover after a crash
//! between the provider's run and its answer. A provider that answers in progress is followed
//! through its polls: each delivery that leaves the request waiting brings the message back when
//! the worker asked, on the manual clock, until it is answered ([`ProviderTest::provider_polls`]
//! counts the polls). [`FencedMap`] stands in for a fenced table (`cfn_once::FencedTable`) in
//! the provider's own fakes.
//!
//! ```
//! use cfn_once_core::echo::Echo;
//! use cfn_once_core::kit::ProviderTest;
//! use cfn_once_core::response::Status;
//! use serde_json::json;
//!
//! let mut kit = ProviderTest::new().provider("Custom::Echo", Echo);
//! let created = kit.create("Custom::Echo", json!({"Size": "5"}));
//! assert_eq!(created.status(), Status::Success);
//! assert_eq!(created.data()["Size"], json!("5"));
//! let request = kit.create_request("Custom::Echo", json!({"Size": "6"}));
//! let both = kit.deliver_at_once(&request, 2);
//! assert_eq!(kit.provider_runs(), 2, "one run for each request, not for each copy");
//! assert_eq!(kit.puts(&request).len(), 1, "one answer for the duplicated request");
//! # let _ = both;
//!
//! // In progress for a minute, polled every 10 s: followed through its polls to the answer.
//! let waited = kit.create("Custom::Echo", json!({"InProgressForS": "60", "PollIntervalS": "10"}));
//! assert_eq!(waited.status(), Status::Success);
//! assert_eq!((waited.data()["Polls"].clone(), kit.provider_polls()), (json!("6"), 6));
//! ```

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::{Arc, Mutex, PoisonError};

use async_trait::async_trait;
use serde_json::{Value, json};

use crate::clock::{Clock, ManualClock};
use crate::config::Config;
use crate::control::FixedActivity;
use crate::decision::{Activity, Role};
use crate::lease::{LeaseState, LeaseStore};
use crate::memory_store::MemoryLeaseStore;
use crate::metrics::NoMetrics;
use crate::provider::{Fence, Provider, ProviderContext, ProviderError, Router, Step};
use crate::random::SplitMix64;
use crate::request::{InputPolicy, RequestKind};
use crate::response::{ResponseBody, Status};
use crate::response_url::UrlPolicy;
use crate::settings::Settings;
use crate::testing::{Fault, FaultyStore, Op, RecordingSink, drive, drive_until};
use crate::worker::{Delivery, Disposition, Invocation, Ports, Worker};

/// Where the kit's requests come from.
const STACK_ID: &str = "arn:aws:cloudformation:us-east-1:123456789012:stack/provider-test/guid";
/// The logical id of the resource under test.
const LOGICAL_RESOURCE_ID: &str = "Resource";
/// The function timeout the kit's invocations run with: the regional template's default.
const FUNCTION_TIMEOUT_MS: u64 = 120_000;

/// A provider under test, in the protocol it will run in.
#[derive(Debug)]
pub struct ProviderTest {
    /// Shared with the workers of a delivery, and only then.
    router: Arc<Router>,
    clock: ManualClock,
    store: Arc<FaultyStore>,
    sink: Arc<RecordingSink>,
    runs: Arc<AtomicU32>,
    polls: Arc<AtomicU32>,
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
    fn body(&self) -> &ResponseBody {
        match &self.body {
            Some(body) => body,
            None => panic!("nothing was answered for this request yet: {:?}", self.disposition),
        }
    }

    /// SUCCESS or FAILED.
    pub fn status(&self) -> Status {
        self.body().status
    }

    /// The FAILED answer's Reason.
    pub fn reason(&self) -> Option<&str> {
        self.body().reason.as_deref()
    }

    /// The PhysicalResourceId answered.
    pub fn physical_resource_id(&self) -> &str {
        &self.body().physical_resource_id
    }

    /// The Data answered.
    pub fn data(&self) -> &BTreeMap<String, Value> {
        &self.body().data
    }

    /// The fence the answer was committed under, when this delivery answered.
    pub fn fence(&self) -> Option<u64> {
        match &self.disposition {
            Disposition::Done(crate::worker::Done::Answered { fence, .. }) => Some(*fence),
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
            requests: 0,
            function_timeout_ms: FUNCTION_TIMEOUT_MS,
        }
    }

    /// Serves `resource_type` with `provider`; every call to it is counted.
    pub fn provider<P: Provider>(mut self, resource_type: &str, provider: P) -> Self {
        let counted = Counted { inner: provider, runs: Arc::clone(&self.runs), polls: Arc::clone(&self.polls) };
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
    /// is in progress, the message comes back when the worker asked (the clock moves on) and is
    /// delivered again, until the request is answered or the message is given up.
    pub fn deliver(&mut self, request: &TestRequest) -> Answer {
        let worker = self.worker(Role::Primary, "us-east-1");
        let body = request.request.to_string();
        let sent_ms = Some(self.clock.now_ms());
        for receive_count in 1..=WAITING_DELIVERIES_MAX {
            let invocation = self.invocation();
            let delivery = Delivery { body: Some(&body), receive_count, sent_ms };
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

    /// Whether `request`'s record says its provider's work is in progress.
    fn waiting(&self, request: &TestRequest) -> bool {
        let key = crate::request::RequestKey {
            stack_id: crate::request::StackArn::parse(STACK_ID)
                .unwrap_or_else(|| unreachable!("the kit's StackId is a stack ARN")),
            request_id: request.request["RequestId"].as_str().unwrap_or_default().to_owned(),
        };
        let record = drive(&self.clock, self.store.read(&key));
        matches!(record, Ok(Some(record)) if record.state == LeaseState::Waiting)
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
            .map(|worker| worker.handle(Delivery { body: Some(&body), receive_count: 1, sent_ms }, &invocation));
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
        let first = primary.handle(Delivery { body: Some(&body), receive_count: 1, sent_ms }, &invocation);
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
        let delivery = Delivery { body: Some(&body), receive_count: 2, sent_ms };
        let disposition = drive(&self.clock, secondary.handle(delivery, &invocation));
        self.answer(request, disposition)
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
        Ok(config) => Settings::from_config(&config),
        Err(error) => unreachable!("the kit's own configuration is valid: {error}"),
    }
}

/// A provider wrapped to count its runs and polls.
struct Counted<P> {
    inner: P,
    runs: Arc<AtomicU32>,
    polls: Arc<AtomicU32>,
}

#[async_trait]
impl<P: Provider> Provider for Counted<P> {
    type Properties = P::Properties;

    async fn create(&self, ctx: &ProviderContext, properties: P::Properties) -> Result<Step, ProviderError> {
        self.runs.fetch_add(1, Ordering::SeqCst);
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
        self.inner.update(ctx, physical_resource_id, properties, old_properties).await
    }

    async fn delete(
        &self,
        ctx: &ProviderContext,
        physical_resource_id: &str,
        properties: P::Properties,
    ) -> Result<Step<()>, ProviderError> {
        self.runs.fetch_add(1, Ordering::SeqCst);
        self.inner.delete(ctx, physical_resource_id, properties).await
    }

    async fn poll(&self, ctx: &ProviderContext, state: Value) -> Result<Step, ProviderError> {
        self.polls.fetch_add(1, Ordering::SeqCst);
        self.inner.poll(ctx, state).await
    }
}

/// An in-memory table written under fences, with the condition `cfn_once::FencedTable` sends to
/// DynamoDB: a write is accepted unless a newer fence of the same request already wrote the
/// item. A delete leaves a tombstone holding its fence, as `FencedTable` does, so a stale write
/// cannot bring the item back. Use it behind your provider's storage trait in tests.
#[derive(Debug, Default)]
pub struct FencedMap {
    /// Each key's value (`None`: a tombstone) and the fence that wrote it.
    items: Mutex<BTreeMap<String, (Option<Value>, Fence)>>,
}

/// A fenced write refused: a newer execution of the same request already wrote the item.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error(
    "a newer execution of this request already wrote {key} (fence {newer}); this write under fence {stale} was refused"
)]
pub struct FencedOut {
    /// The item's key.
    pub key: String,
    /// The refused write's fence.
    pub stale: u64,
    /// The fence that wrote the item last.
    pub newer: u64,
}

impl FencedMap {
    /// An empty map.
    pub fn new() -> Self {
        Self::default()
    }

    /// Puts `value` at `key` under `fence`.
    pub fn put(&self, fence: &Fence, key: &str, value: Value) -> Result<(), FencedOut> {
        let mut items = self.items.lock().unwrap_or_else(PoisonError::into_inner);
        Self::admit(items.get(key).map(|(_, written)| written), fence, key)?;
        items.insert(key.to_owned(), (Some(value), fence.clone()));
        Ok(())
    }

    /// Deletes `key` under `fence`, leaving a tombstone with the fence; deleting what is not
    /// there succeeds (and leaves a tombstone too).
    pub fn delete(&self, fence: &Fence, key: &str) -> Result<(), FencedOut> {
        let mut items = self.items.lock().unwrap_or_else(PoisonError::into_inner);
        Self::admit(items.get(key).map(|(_, written)| written), fence, key)?;
        items.insert(key.to_owned(), (None, fence.clone()));
        Ok(())
    }

    /// The value at `key`; `None` if there is none, or a delete left only its tombstone.
    pub fn get(&self, key: &str) -> Option<Value> {
        self.items.lock().unwrap_or_else(PoisonError::into_inner).get(key).and_then(|(value, _)| value.clone())
    }

    /// The fence that wrote `key` last.
    pub fn fence_of(&self, key: &str) -> Option<u64> {
        self.items.lock().unwrap_or_else(PoisonError::into_inner).get(key).map(|(_, fence)| fence.value)
    }

    /// `attribute_not_exists(fence) OR scope <> :scope OR fence <= :fence`.
    fn admit(written: Option<&Fence>, fence: &Fence, key: &str) -> Result<(), FencedOut> {
        match written {
            Some(newer) if newer.scope == fence.scope && newer.value > fence.value => {
                Err(FencedOut { key: key.to_owned(), stale: fence.value, newer: newer.value })
            }
            _ => Ok(()),
        }
    }
}
