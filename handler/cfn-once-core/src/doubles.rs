//! Test doubles shared by the unit tests, the integration tests and the simulator.
//!
//! [`FaultyStore`] wraps any [`LeaseStore`] (the in-memory one or the real DynamoDB adapter)
//! and injects one-shot faults per operation, including the nasty one: a write that was applied
//! but reported as failed. [`RecordingSink`] stands in for S3: it records every body PUT to each
//! URL, so tests can check invariant S1 directly, and can be told to fail or hang.
//! [`CountingEcho`] is `Custom::Echo` that counts its runs and can fail transiently on cue. [`drive`] and
//! [`drive_until`] run a future to completion on a [`ManualClock`], jumping time to the next
//! timer whenever nothing else can make progress: deterministic, and as fast as the CPU.

use std::collections::{BTreeMap, VecDeque};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};

use async_trait::async_trait;

use std::future::Future;
use std::sync::atomic::{AtomicBool, AtomicU32, Ordering};
use std::task::{Context, Poll, Wake, Waker};

use crate::clock::ManualClock;
use crate::echo::Echo;
use crate::lease::{Acquire, AcquireRequest, Conditional, LeaseRecord, LeaseStore, PollRecord, StoreError};
use crate::metrics::{MetricEvent, MetricsSink};
use crate::properties::PropertyMap;
use crate::provider::{Provider, ProviderContext, ProviderError, Step};
use crate::put::{PutError, ResponseSink};
use crate::request::RequestKey;
use crate::response_url::ResponseUrl;

/// A store operation, for aiming faults.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum Op {
    /// [`LeaseStore::acquire`].
    Acquire,
    /// [`LeaseStore::close`].
    Close,
    /// [`LeaseStore::heartbeat`].
    Heartbeat,
    /// [`LeaseStore::commit`].
    Commit,
    /// [`LeaseStore::wait`].
    Wait,
    /// [`LeaseStore::mark_delivered`].
    MarkDelivered,
    /// [`LeaseStore::read`].
    Read,
    /// [`LeaseStore::leave`].
    Leave,
}

/// What goes wrong on one call.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Fault {
    /// No fault: the call is applied and answered as usual (queued before others, it lets a
    /// call through so that a later one suffers them).
    Pass,
    /// Not applied; reported as throttling.
    Transient,
    /// Not applied; reported as an unknown outcome.
    LostRequest,
    /// Applied; reported as an unknown outcome (the reply was lost).
    LostReply,
    /// Applied; the call then never returns (a process frozen mid-call).
    Hang,
    /// Not applied; the call never returns (a process frozen, or killed, before the call
    /// reached the store).
    Stall,
}

/// A [`LeaseStore`] that misbehaves on cue.
#[derive(Debug)]
pub struct FaultyStore {
    inner: Arc<dyn LeaseStore>,
    faults: Mutex<BTreeMap<Op, VecDeque<Fault>>>,
    calls: Mutex<BTreeMap<Op, u32>>,
}

impl FaultyStore {
    /// Wraps `inner`; no faults until [`FaultyStore::inject`].
    pub fn new(inner: Arc<dyn LeaseStore>) -> Self {
        Self { inner, faults: Mutex::default(), calls: Mutex::default() }
    }

    /// The next call of `op` suffers `fault` (faults queue up per operation).
    pub fn inject(&self, op: Op, fault: Fault) {
        lock(&self.faults).entry(op).or_default().push_back(fault);
    }

    /// How many times `op` was called, faulty or not.
    pub fn calls(&self, op: Op) -> u32 {
        lock(&self.calls).get(&op).copied().unwrap_or(0)
    }

    async fn call<T>(&self, op: Op, apply: impl Future<Output = Result<T, StoreError>>) -> Result<T, StoreError> {
        *lock(&self.calls).entry(op).or_default() += 1;
        let fault = lock(&self.faults).get_mut(&op).and_then(VecDeque::pop_front);
        match fault {
            None | Some(Fault::Pass) => apply.await,
            Some(Fault::Transient) => Err(StoreError::Transient(format!("injected throttling on {op:?}"))),
            Some(Fault::LostRequest) => Err(StoreError::Ambiguous(format!("injected lost request on {op:?}"))),
            Some(Fault::LostReply) => {
                apply.await?;
                Err(StoreError::Ambiguous(format!("injected lost reply on {op:?}")))
            }
            Some(Fault::Hang) => {
                apply.await?;
                std::future::pending().await
            }
            Some(Fault::Stall) => std::future::pending().await,
        }
    }
}

#[async_trait]
impl LeaseStore for FaultyStore {
    async fn acquire(&self, request: &AcquireRequest) -> Result<Acquire, StoreError> {
        self.call(Op::Acquire, self.inner.acquire(request)).await
    }

    async fn close(&self, request: &AcquireRequest, signal: &[u8]) -> Result<Acquire, StoreError> {
        self.call(Op::Close, self.inner.close(request, signal)).await
    }

    async fn heartbeat(
        &self,
        key: &RequestKey,
        fence: u64,
        lease_until_ms: u64,
        now_ms: u64,
    ) -> Result<Conditional, StoreError> {
        self.call(Op::Heartbeat, self.inner.heartbeat(key, fence, lease_until_ms, now_ms)).await
    }

    async fn commit(
        &self,
        key: &RequestKey,
        fence: u64,
        response: &[u8],
        now_ms: u64,
    ) -> Result<Conditional, StoreError> {
        self.call(Op::Commit, self.inner.commit(key, fence, response, now_ms)).await
    }

    async fn wait(
        &self,
        key: &RequestKey,
        fence: u64,
        poll: &PollRecord,
        now_ms: u64,
    ) -> Result<Conditional, StoreError> {
        self.call(Op::Wait, self.inner.wait(key, fence, poll, now_ms)).await
    }

    async fn mark_delivered(
        &self,
        key: &RequestKey,
        fence: u64,
        unsent: Option<&str>,
        now_ms: u64,
    ) -> Result<Conditional, StoreError> {
        self.call(Op::MarkDelivered, self.inner.mark_delivered(key, fence, unsent, now_ms)).await
    }

    async fn read(&self, key: &RequestKey) -> Result<Option<LeaseRecord>, StoreError> {
        self.call(Op::Read, self.inner.read(key)).await
    }

    async fn leave(&self, left: &LeaseRecord) -> Result<Conditional, StoreError> {
        self.call(Op::Leave, self.inner.leave(left)).await
    }
}

/// What a [`RecordingSink`] does with the next PUT.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PutFault {
    /// No fault: the PUT is stored (queued before others, it lets a PUT through so that a
    /// later one suffers them).
    Pass,
    /// Fails with a retryable error, nothing stored.
    Fail,
    /// Stores the body, then reports a retryable error (the reply was lost).
    LostReply,
    /// Never returns, nothing stored.
    Hang,
    /// Refused for good, nothing stored: what S3 answers a presigned URL past its expiry (403).
    Refused,
}

/// An in-memory S3 for responses: every body PUT to every URL, in order.
#[derive(Debug, Default)]
pub struct RecordingSink {
    bodies: Mutex<BTreeMap<String, Vec<Vec<u8>>>>,
    faults: Mutex<VecDeque<PutFault>>,
    /// URLs whose every PUT suffers a fault, whatever the queued ones: S3 failing for one
    /// bucket (a wait condition handle's) while the others answer.
    failing: Mutex<BTreeMap<String, PutFault>>,
}

impl RecordingSink {
    /// A sink that accepts everything.
    pub fn new() -> Self {
        Self::default()
    }

    /// The next PUT suffers `fault` (faults queue up).
    pub fn inject(&self, fault: PutFault) {
        lock(&self.faults).push_back(fault);
    }

    /// Every PUT to `url` suffers `fault` until [`RecordingSink::heal`]; [`PutFault::Fail`]
    /// says which bucket failed.
    pub fn fail_url(&self, url: &str, fault: PutFault) {
        lock(&self.failing).insert(url.to_owned(), fault);
    }

    /// PUTs to `url` are served again.
    pub fn heal(&self, url: &str) {
        lock(&self.failing).remove(url);
    }

    /// Every body PUT to `url`, in order.
    pub fn bodies(&self, url: &str) -> Vec<Vec<u8>> {
        lock(&self.bodies).get(url).cloned().unwrap_or_default()
    }

    /// Every URL that received at least one PUT, with its bodies.
    pub fn all(&self) -> BTreeMap<String, Vec<Vec<u8>>> {
        lock(&self.bodies).clone()
    }
}

#[async_trait]
impl ResponseSink for RecordingSink {
    async fn put(&self, url: &ResponseUrl, body: &[u8]) -> Result<(), PutError> {
        let failing = lock(&self.failing).get(url.expose_secret()).copied();
        if failing == Some(PutFault::Fail) {
            return Err(PutError::Retryable("injected 503 Slow Down from the URL's bucket".into()));
        }
        let fault = failing.or_else(|| lock(&self.faults).pop_front());
        let record = || lock(&self.bodies).entry(url.expose_secret().to_owned()).or_default().push(body.to_vec());
        match fault {
            None | Some(PutFault::Pass) => {
                record();
                Ok(())
            }
            Some(PutFault::Fail) => Err(PutError::Retryable("injected PUT failure".into())),
            Some(PutFault::LostReply) => {
                record();
                Err(PutError::Retryable("injected lost PUT reply".into()))
            }
            Some(PutFault::Hang) => std::future::pending().await,
            Some(PutFault::Refused) => Err(PutError::Permanent("injected 403 Forbidden".into())),
        }
    }
}

/// Every metric event recorded, in order.
#[derive(Debug, Clone, Default)]
pub struct RecordedMetrics(Arc<Mutex<Vec<MetricEvent>>>);

impl RecordedMetrics {
    /// The events so far.
    pub fn events(&self) -> Vec<MetricEvent> {
        lock(&self.0).clone()
    }
}

impl MetricsSink for RecordedMetrics {
    fn record(&self, event: MetricEvent) {
        lock(&self.0).push(event);
    }
}

/// `Custom::Echo` that counts every run (clones share the counts), records the fence of each
/// (and the fence it was told it took over from), and fails with [`ProviderError::Transient`]
/// as many times as [`CountingEcho::fail_transiently`] says first, then with
/// [`ProviderError::Unknown`] as many times as [`CountingEcho::lose_answers`] says, then with
/// [`ProviderError::Deferred`] as many times as [`CountingEcho::defer`] says.
#[derive(Debug, Clone, Default)]
pub struct CountingEcho {
    calls: Arc<AtomicU32>,
    transient_failures: Arc<AtomicU32>,
    lost_answers: Arc<AtomicU32>,
    deferrals: Arc<AtomicU32>,
    runs: Arc<Mutex<Vec<Run>>>,
}

/// One run of a [`CountingEcho`]: its fence, and the fence it was told it took over from.
pub type Run = (u64, Option<u64>);

impl CountingEcho {
    /// How many times any operation ran.
    pub fn calls(&self) -> u32 {
        self.calls.load(Ordering::SeqCst)
    }

    /// Every run's fence, and the fence it was told it took over from, in order.
    pub fn runs(&self) -> Vec<Run> {
        lock(&self.runs).clone()
    }

    /// The next `times` runs fail transiently.
    pub fn fail_transiently(&self, times: u32) {
        self.transient_failures.store(times, Ordering::SeqCst);
    }

    /// The next `times` runs do their work and then lose their answer: an outcome nobody saw.
    pub fn lose_answers(&self, times: u32) {
        self.lost_answers.store(times, Ordering::SeqCst);
    }

    /// The next `times` runs are refused for credentials that expired: nothing done, to be
    /// tried by a later invocation.
    pub fn defer(&self, times: u32) {
        self.deferrals.store(times, Ordering::SeqCst);
    }

    fn run(&self, ctx: &ProviderContext) -> Result<(), ProviderError> {
        self.calls.fetch_add(1, Ordering::SeqCst);
        lock(&self.runs).push((ctx.fence.value, ctx.took_over_from));
        let take = |counter: &AtomicU32| {
            counter.fetch_update(Ordering::SeqCst, Ordering::SeqCst, |left| left.checked_sub(1)).is_ok()
        };
        if take(&self.transient_failures) {
            return Err(ProviderError::Transient("downstream throttled".into()));
        }
        if take(&self.lost_answers) {
            return Err(ProviderError::Unknown("the downstream call timed out after it was sent".into()));
        }
        if take(&self.deferrals) {
            return Err(ProviderError::Deferred(
                "ExpiredTokenException: The security token included in the request is expired".into(),
            ));
        }
        Ok(())
    }
}

#[async_trait]
impl Provider for CountingEcho {
    type Properties = PropertyMap;

    async fn create(&self, ctx: &ProviderContext, properties: PropertyMap) -> Result<Step, ProviderError> {
        self.run(ctx)?;
        Echo.create(ctx, properties).await
    }

    async fn update(
        &self,
        ctx: &ProviderContext,
        id: &str,
        properties: PropertyMap,
        old: Option<PropertyMap>,
    ) -> Result<Step, ProviderError> {
        self.run(ctx)?;
        Echo.update(ctx, id, properties, old).await
    }

    async fn delete(
        &self,
        ctx: &ProviderContext,
        id: &str,
        properties: PropertyMap,
    ) -> Result<Step<()>, ProviderError> {
        self.run(ctx)?;
        Echo.delete(ctx, id, properties).await
    }

    async fn poll(&self, ctx: &ProviderContext, state: serde_json::Value) -> Result<Step, ProviderError> {
        self.run(ctx)?;
        Echo.poll(ctx, state).await
    }
}

/// Test doubles hold plain data; a panicking test thread cannot leave them inconsistent.
fn lock<T>(mutex: &Mutex<T>) -> MutexGuard<'_, T> {
    mutex.lock().unwrap_or_else(PoisonError::into_inner)
}

/// Upper bound on polls in [`drive`]; a run that needs more is stuck in a loop.
const POLLS_MAX: u64 = 10_000_000;

struct Flag(AtomicBool);

impl Wake for Flag {
    fn wake(self: Arc<Self>) {
        self.0.store(true, Ordering::SeqCst);
    }
}

/// Runs `future` to completion on this thread, advancing `clock` to its next timer whenever the
/// future is blocked on time alone. Panics if the future waits for something that is not a
/// timer (it would never finish).
pub fn drive<F: Future>(clock: &ManualClock, future: F) -> F::Output {
    match drive_until(clock, future, || false) {
        Some(output) => output,
        None => unreachable!("drive_until only stops early when asked to"),
    }
}

/// Like [`drive`], but drops the future (a crash) as soon as `stop` returns true, checked
/// after every poll. Returns `None` if it stopped early.
pub fn drive_until<F: Future>(clock: &ManualClock, future: F, mut stop: impl FnMut() -> bool) -> Option<F::Output> {
    let flag = Arc::new(Flag(AtomicBool::new(true)));
    let waker = Waker::from(Arc::clone(&flag));
    let mut context = Context::from_waker(&waker);
    let mut future = std::pin::pin!(future);
    for _ in 0..POLLS_MAX {
        if flag.0.swap(false, Ordering::SeqCst) {
            if let Poll::Ready(output) = future.as_mut().poll(&mut context) {
                return Some(output);
            }
            if stop() {
                return None;
            }
            continue;
        }
        match clock.next_deadline_ms() {
            Some(deadline_ms) => clock.set_ms(deadline_ms.max(clock_now(clock))),
            None => panic!("the future is blocked on something other than time and can never finish"),
        }
    }
    panic!("the future did not finish within {POLLS_MAX} polls")
}

fn clock_now(clock: &ManualClock) -> u64 {
    use crate::clock::Clock;
    clock.now_ms()
}
