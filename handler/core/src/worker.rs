//! The protocol for one delivery: take the lease, run the provider under heartbeats, commit,
//! PUT, mark delivered; or find the request held, answered or superseded and act on that.
//!
//! Everything outside comes in through ports (`LeaseStore`, `ResponseSink`, `Clock`, `Random`),
//! so this is the code the Lambda, the local event source mapping, the tests and the simulator
//! all run. Invariants kept here:
//!
//! * S1: nothing is PUT that was not committed first, and what is PUT is the committed bytes;
//! * S2: the provider runs under its fence and is abandoned as soon as a heartbeat finds the
//!   lease taken over; a lost lease means no commit and no PUT;
//! * L1: a provider that cannot finish before the invocation's deadline (less a reserve for
//!   commit and PUT) is abandoned and answered FAILED with a Reason that says so; storage and
//!   network failures end in a retry, never in silence.
//!
//! A write whose outcome is unknown (a timeout after the store applied it, or an SDK-internal
//! retry that met its own earlier success) is resolved by the record itself: the owner or fence
//! in it tells whether the write was ours.

use std::future::Future;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::task::Poll;

use futures_util::future::BoxFuture;
use tracing::Instrument;

use crate::clock::{Clock, within};
use crate::delivery::{PutError, PutPolicy, ResponseSink, put_with_retries};
use crate::fingerprint::hex_prefix;
use crate::lease::{Acquire, AcquireRequest, Conditional, LeaseState, LeaseStore, Seen, StoreError};
use crate::provider::{Fence, ProviderContext, ProviderError, Router};
use crate::random::{Random, full_jitter_ms};
use crate::request::{InputPolicy, Request, RequestKind, decode};
use crate::response::{self, Outcome, ResponseBody, Status};

/// SQS refuses visibility timeouts above 12 hours.
pub const VISIBILITY_S_MAX: u32 = 43_200;

/// The protocol's tunables, all with units in their names.
#[derive(Debug, Clone)]
pub struct Settings {
    /// This deployment's region, recorded in the lease owner.
    pub region: String,
    pub lease_ms: u64,
    /// Margin added before a lease counts as expired, for clock skew between regions.
    pub skew_ms: u64,
    pub heartbeat_ms: u64,
    /// Time kept back before the invocation deadline to commit and PUT.
    pub reserve_ms: u64,
    pub store_attempts_max: u32,
    pub store_call_timeout_ms: u64,
    pub store_backoff_base_ms: u64,
    pub store_backoff_max_ms: u64,
    pub provider_attempts_max: u32,
    pub provider_backoff_base_ms: u64,
    pub provider_backoff_max_ms: u64,
    pub put: PutPolicy,
    /// How long a record is kept before the sweeper may delete it.
    pub retention_ms: u64,
    /// Upper bound on any backoff expressed as a visibility timeout.
    pub retry_delay_s_max: u32,
}

/// The Lambda invocation a delivery runs in.
#[derive(Debug, Clone)]
pub struct Invocation {
    /// Lambda's request id (or the local event source mapping's).
    pub id: String,
    /// When the invocation is killed, epoch ms.
    pub deadline_ms: u64,
}

/// One SQS record, as far as the protocol cares.
#[derive(Debug, Clone, Copy)]
pub struct Delivery<'a> {
    pub body: Option<&'a str>,
    /// SQS's ApproximateReceiveCount, 1 on first delivery.
    pub receive_count: u32,
}

/// What to do with the message after this delivery.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Disposition {
    /// The request needs nothing more from this message: delete it.
    Done(Done),
    /// Make the message visible again after `delay_s` and report it failed.
    Retry { delay_s: u32, why: String },
    /// Nobody can be answered; report it failed so it ends in the DLQ.
    Undeliverable { why: String },
}

/// Why a message is finished with.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Done {
    /// This delivery ran the provider, committed and PUT.
    Answered { fence: u64, status: Status },
    /// An earlier execution committed; this delivery PUT the stored bytes.
    Replayed { fence: u64 },
    /// Committed and delivered before: a duplicate, dropped.
    Duplicate,
    /// A newer attempt with the same RequestId exists: a stale delivery, dropped.
    Superseded,
}

/// The protocol engine. Cheap to share: build one per process.
#[derive(Debug, Clone)]
pub struct Worker {
    store: Arc<dyn LeaseStore>,
    sink: Arc<dyn ResponseSink>,
    router: Arc<Router>,
    clock: Arc<dyn Clock>,
    random: Arc<dyn Random>,
    input: Arc<InputPolicy>,
    settings: Arc<Settings>,
}

/// How a supervised provider run ended.
enum Run {
    Finished(Outcome),
    LeaseLost,
}

/// Whether a commit took.
enum Committed {
    Yes(Vec<u8>),
    Lost,
}

impl Worker {
    /// A worker over the given ports.
    pub fn new(
        store: Arc<dyn LeaseStore>,
        sink: Arc<dyn ResponseSink>,
        router: Arc<Router>,
        clock: Arc<dyn Clock>,
        random: Arc<dyn Random>,
        input: InputPolicy,
        settings: Settings,
    ) -> Self {
        Self { store, sink, router, clock, random, input: Arc::new(input), settings: Arc::new(settings) }
    }

    /// Handles one delivery of one SQS record.
    pub async fn handle(&self, delivery: Delivery<'_>, invocation: &Invocation) -> Disposition {
        let request = match decode(delivery.body, &self.input) {
            Ok(request) => request,
            Err(error) => {
                tracing::error!(%error, "record refused");
                return Disposition::Undeliverable { why: error.to_string() };
            }
        };
        let span = tracing::info_span!(
            "request",
            stack_id = %request.key.stack_id,
            request_id = %request.key.request_id,
            logical_resource_id = %request.logical_resource_id,
            request_type = request.kind().map(RequestKind::as_str).unwrap_or("unknown"),
            fingerprint = %request.fingerprint,
            fence = tracing::field::Empty,
        );
        let disposition = self.process(&request, delivery.receive_count, invocation).instrument(span.clone()).await;
        span.in_scope(|| match &disposition {
            Disposition::Done(done) => tracing::info!(?done, "message done"),
            Disposition::Retry { delay_s, why } => tracing::warn!(delay_s, why, "message will be retried"),
            Disposition::Undeliverable { why } => tracing::error!(why, "message left for the DLQ"),
        });
        disposition
    }

    async fn process(&self, request: &Request, receive_count: u32, invocation: &Invocation) -> Disposition {
        let owner = format!(
            "{}/{}/{}",
            self.settings.region,
            invocation.id,
            hex_prefix(&self.random.next_u64().to_be_bytes(), 8)
        );
        let seen = match self.acquire(request, &owner).await {
            Ok(seen) => seen,
            Err(error) => return self.retry(receive_count, format!("could not take the lease: {error}")),
        };
        match seen {
            Seen::Mine { fence } => self.run_and_answer(request, fence, receive_count, invocation).await,
            Seen::Committed { fence, response, delivered: false } => {
                tracing::Span::current().record("fence", fence);
                tracing::info!("found a committed response that was never delivered; sending the stored bytes");
                match self.deliver(request, fence, &response).await {
                    Ok(()) => Disposition::Done(Done::Replayed { fence }),
                    Err(error) => self.retry(receive_count, error.to_string()),
                }
            }
            Seen::Committed { delivered: true, .. } => Disposition::Done(Done::Duplicate),
            Seen::Superseded => Disposition::Done(Done::Superseded),
            Seen::Held { until_ms } => {
                let wait_ms = until_ms.saturating_sub(self.clock.now_ms());
                let jitter_ms = self.random.below_or_equal(self.settings.heartbeat_ms.min(5_000));
                let delay_s = u32::try_from((wait_ms + jitter_ms).div_ceil(1000)).unwrap_or(u32::MAX).max(1);
                Disposition::Retry {
                    delay_s: delay_s.min(self.settings.retry_delay_s_max).min(VISIBILITY_S_MAX),
                    why: "another execution holds the lease".into(),
                }
            }
            // `acquire` turns these into a new attempt or an error; they never come back.
            Seen::Absent | Seen::Free => self.retry(receive_count, "the lease changed hands while acquiring".into()),
        }
    }

    /// Takes the lease, or reports what holds it. Returns `Seen::Mine` on success.
    async fn acquire(&self, request: &Request, owner: &str) -> Result<Seen, StoreError> {
        let settings = &self.settings;
        let mut last = StoreError::Transient("no attempt was made".into());
        for attempt in 1..=settings.store_attempts_max.max(1) {
            let now_ms = self.clock.now_ms();
            let acquire = AcquireRequest {
                key: request.key.clone(),
                fingerprint: request.fingerprint.clone(),
                owner: owner.to_owned(),
                now_ms,
                lease_until_ms: now_ms + settings.lease_ms,
                skew_ms: settings.skew_ms,
                expires_ms: now_ms + settings.retention_ms,
            };
            match self.store_call(self.store.acquire(&acquire)).await {
                Ok(Acquire::Acquired { fence }) => {
                    tracing::info!(fence, "lease acquired");
                    return Ok(Seen::Mine { fence });
                }
                Ok(Acquire::Refused(record)) => {
                    match record.seen_by(&request.fingerprint, owner, now_ms, settings.skew_ms) {
                        // Our own earlier attempt was applied and its reply lost.
                        mine @ Seen::Mine { .. } => return Ok(mine),
                        Seen::Free | Seen::Absent => {
                            last = StoreError::Transient("the record changed while acquiring".into())
                        }
                        other => return Ok(other),
                    }
                }
                Err(StoreError::Ambiguous(why)) => {
                    tracing::warn!(why, "acquire outcome unknown; reading the record back");
                    if let Ok(Some(record)) = self.store_call(self.store.read(&request.key)).await
                        && record.owner == owner
                        && record.state == LeaseState::Running
                    {
                        return Ok(Seen::Mine { fence: record.fence });
                    }
                    last = StoreError::Ambiguous(why);
                }
                Err(error @ StoreError::Permanent(_)) => return Err(error),
                Err(error) => last = error,
            }
            self.store_backoff(attempt).await;
        }
        Err(last)
    }

    async fn run_and_answer(
        &self,
        request: &Request,
        fence: u64,
        receive_count: u32,
        invocation: &Invocation,
    ) -> Disposition {
        tracing::Span::current().record("fence", fence);
        let run_deadline_ms = invocation.deadline_ms.saturating_sub(self.settings.reserve_ms);
        let outcome = match self.supervise(request, fence, run_deadline_ms).await {
            Run::Finished(outcome) => outcome,
            Run::LeaseLost => {
                return self
                    .retry(receive_count, "the lease was taken over while the provider ran; nothing committed".into());
            }
        };
        let body = response::build(request, outcome);
        let committed = match self.commit(request, fence, &body).await {
            Ok(Committed::Yes(bytes)) => bytes,
            Ok(Committed::Lost) => {
                return self.retry(receive_count, "the lease was taken over before the commit; nothing sent".into());
            }
            Err(error) => return self.retry(receive_count, format!("could not commit the response: {error}")),
        };
        let status = ResponseBody::parse(&committed).map(|b| b.status).unwrap_or(Status::Failed);
        tracing::info!(?status, bytes = committed.len(), "response committed");
        match self.deliver(request, fence, &committed).await {
            Ok(()) => Disposition::Done(Done::Answered { fence, status }),
            Err(error) => self.retry(receive_count, error.to_string()),
        }
    }

    /// Runs the provider (with retries of transient errors) while heartbeating the lease, until
    /// it finishes, the lease is lost, or `run_deadline_ms` passes.
    async fn supervise(&self, request: &Request, fence: u64, run_deadline_ms: u64) -> Run {
        let lease_lost = Arc::new(AtomicBool::new(false));
        let context = ProviderContext::new(
            Fence { scope: fence_scope(request), value: fence },
            request,
            request.resource_type().unwrap_or_default(),
            run_deadline_ms,
            Arc::clone(&self.clock),
            Arc::clone(&lease_lost),
        );
        let work = self.run_provider(request, &context);
        let mut work = std::pin::pin!(work);
        let mut deadline = crate::clock::sleep_until_ms(self.clock.as_ref(), run_deadline_ms);
        let mut tick = self.clock.sleep_ms(self.settings.heartbeat_ms);
        let mut heartbeat: Option<BoxFuture<'_, Result<Conditional, StoreError>>> = None;

        let ended = std::future::poll_fn(|cx| {
            if let Poll::Ready(outcome) = work.as_mut().poll(cx) {
                return Poll::Ready(Some(outcome));
            }
            if deadline.as_mut().poll(cx).is_ready() {
                return Poll::Ready(None);
            }
            loop {
                if let Some(in_flight) = heartbeat.as_mut() {
                    let Poll::Ready(result) = in_flight.as_mut().poll(cx) else {
                        return Poll::Pending;
                    };
                    heartbeat = None;
                    match result {
                        Ok(Conditional::Applied) => {}
                        Ok(Conditional::Refused(_)) => {
                            lease_lost.store(true, Ordering::SeqCst);
                            return Poll::Ready(Some(Err(())));
                        }
                        // Unknown or failed: the next tick tries again; the commit condition
                        // keeps this safe even if the lease quietly expired meanwhile.
                        Err(error) => tracing::warn!(%error, "heartbeat failed; will try again"),
                    }
                }
                if tick.as_mut().poll(cx).is_pending() {
                    return Poll::Pending;
                }
                tick = self.clock.sleep_ms(self.settings.heartbeat_ms);
                let now_ms = self.clock.now_ms();
                let store = Arc::clone(&self.store);
                let key = request.key.clone();
                let lease_until_ms = now_ms + self.settings.lease_ms;
                let clock = Arc::clone(&self.clock);
                let timeout_ms = self.settings.store_call_timeout_ms;
                heartbeat = Some(Box::pin(async move {
                    within(clock.as_ref(), timeout_ms, store.heartbeat(&key, fence, lease_until_ms, now_ms))
                        .await
                        .unwrap_or_else(|| Err(StoreError::Ambiguous(format!("no answer within {timeout_ms} ms"))))
                }));
            }
        })
        .await;

        match ended {
            Some(Ok(outcome)) => Run::Finished(outcome),
            Some(Err(())) => {
                tracing::warn!("heartbeat found the lease taken over; provider abandoned");
                Run::LeaseLost
            }
            None => {
                let budget_s = run_deadline_ms.saturating_sub(self.clock.now_ms().min(run_deadline_ms)) / 1000;
                tracing::error!(budget_s, "provider did not finish before the invocation deadline; answering FAILED");
                Run::Finished(Outcome::failed(format!(
                    "{} {} did not finish before the Lambda invocation's deadline (less {} s kept to answer); \
                     raise the function timeout or make the provider faster",
                    request.resource_type().unwrap_or("the resource"),
                    request.kind().map(RequestKind::as_str).unwrap_or("request"),
                    self.settings.reserve_ms / 1000,
                )))
            }
        }
    }

    /// The provider call with bounded retries of transient errors. `Err(())` is reserved for
    /// the supervisor's lease-lost signal and never produced here.
    async fn run_provider(&self, request: &Request, context: &ProviderContext) -> Result<Outcome, ()> {
        let label = format!(
            "{} {}",
            request.resource_type().unwrap_or("the resource"),
            request.kind().map(RequestKind::as_str).unwrap_or("request")
        );
        let attempts_max = self.settings.provider_attempts_max.max(1);
        for attempt in 1..=attempts_max {
            match self.router.run(request, context).await {
                Ok(outcome) => return Ok(outcome),
                Err(ProviderError::Failed(reason)) => {
                    return Ok(Outcome::failed(format!("{label} failed: {reason}")));
                }
                Err(ProviderError::Transient(reason)) if attempt == attempts_max => {
                    return Ok(Outcome::failed(format!("{label} failed after {attempt} attempts: {reason}")));
                }
                Err(ProviderError::Transient(reason)) => {
                    tracing::warn!(attempt, reason, "provider failed transiently; retrying");
                    let delay_ms = full_jitter_ms(
                        self.random.as_ref(),
                        attempt,
                        self.settings.provider_backoff_base_ms,
                        self.settings.provider_backoff_max_ms,
                    );
                    self.clock.sleep_ms(delay_ms).await;
                }
            }
        }
        Ok(Outcome::failed(format!("{label} made no attempt")))
    }

    /// Commits `body` under `fence`; resolves unknown outcomes from the record.
    async fn commit(&self, request: &Request, fence: u64, body: &[u8]) -> Result<Committed, StoreError> {
        let mut last = StoreError::Transient("no attempt was made".into());
        for attempt in 1..=self.settings.store_attempts_max.max(1) {
            let now_ms = self.clock.now_ms();
            let result = match self.store_call(self.store.commit(&request.key, fence, body, now_ms)).await {
                Err(StoreError::Ambiguous(why)) => {
                    tracing::warn!(why, "commit outcome unknown; reading the record back");
                    match self.store_call(self.store.read(&request.key)).await {
                        Ok(record) => Ok(Conditional::Refused(record.map(Box::new))),
                        Err(_) => Err(StoreError::Ambiguous(why)),
                    }
                }
                other => other,
            };
            match result {
                Ok(Conditional::Applied) => return Ok(Committed::Yes(body.to_vec())),
                Ok(Conditional::Refused(Some(record))) if record.fence == fence => {
                    match (record.state, record.response) {
                        // Our commit was applied; its reply was lost.
                        (LeaseState::Committed, Some(stored)) => return Ok(Committed::Yes(stored)),
                        // Still ours and running: the commit did not happen; try again.
                        _ => last = StoreError::Transient("commit not applied".into()),
                    }
                }
                Ok(Conditional::Refused(_)) => return Ok(Committed::Lost),
                Err(error @ StoreError::Permanent(_)) => return Err(error),
                Err(error) => last = error,
            }
            self.store_backoff(attempt).await;
        }
        Err(last)
    }

    /// PUTs the committed bytes, then records the delivery (best effort: a duplicate that
    /// finds it unrecorded only PUTs the same bytes again).
    async fn deliver(&self, request: &Request, fence: u64, committed: &[u8]) -> Result<(), PutError> {
        let attempts = put_with_retries(
            self.sink.as_ref(),
            &request.response_url,
            committed,
            self.settings.put,
            self.clock.as_ref(),
            self.random.as_ref(),
        )
        .await?;
        tracing::info!(attempts, "response delivered");
        let now_ms = self.clock.now_ms();
        match self.store_call(self.store.mark_delivered(&request.key, fence, now_ms)).await {
            Ok(Conditional::Applied) => {}
            Ok(Conditional::Refused(_)) => tracing::info!("a newer attempt replaced the record; delivery not recorded"),
            Err(error) => {
                tracing::warn!(%error, "could not record the delivery; a duplicate would PUT the same bytes again")
            }
        }
        Ok(())
    }

    async fn store_call<T>(&self, call: impl Future<Output = Result<T, StoreError>>) -> Result<T, StoreError> {
        let timeout_ms = self.settings.store_call_timeout_ms;
        within(self.clock.as_ref(), timeout_ms, call)
            .await
            .unwrap_or_else(|| Err(StoreError::Ambiguous(format!("no answer within {timeout_ms} ms"))))
    }

    async fn store_backoff(&self, attempt: u32) {
        let delay_ms = full_jitter_ms(
            self.random.as_ref(),
            attempt,
            self.settings.store_backoff_base_ms,
            self.settings.store_backoff_max_ms,
        );
        self.clock.sleep_ms(delay_ms).await;
    }

    /// A retry whose delay grows with the receive count, with full jitter.
    fn retry(&self, receive_count: u32, why: String) -> Disposition {
        let delay_ms = full_jitter_ms(
            self.random.as_ref(),
            receive_count.saturating_sub(1),
            1_000,
            u64::from(self.settings.retry_delay_s_max) * 1000,
        );
        let delay_s = u32::try_from(delay_ms.div_ceil(1000)).unwrap_or(VISIBILITY_S_MAX).clamp(1, VISIBILITY_S_MAX);
        Disposition::Retry { delay_s, why }
    }
}

/// The scope providers' fenced writes are keyed by: one per request.
pub fn fence_scope(request: &Request) -> String {
    crate::fingerprint::short_digest(&[&request.key.stack_id, &request.key.request_id])
}

#[cfg(test)]
#[path = "worker_tests.rs"]
mod tests;
