//! The worker's lease-store calls: taking the lease, reading the record, and writes that hold
//! only under this delivery's fence (commit, wait).
//!
//! Every call is bounded by the store's call timeout and by the end the caller gives it, and is
//! not made at all when less than a useful slice of time is left (`budget::call_timeout_ms`);
//! attempts are retried with full-jitter backoff, at most `Settings::store_attempts_max`, and
//! never start past that end. A call whose outcome is unknown (a timeout after the store applied
//! it, a lost reply) is resolved by reading the record back: the owner or fence in it tells
//! whether the write was ours. A permanent failure is never retried.

use std::future::Future;

use super::Worker;
use super::job::Job;
use crate::budget::{call_fits_after, call_timeout_ms};
use crate::clock::within;
use crate::lease::{Acquire, AcquireRequest, Conditional, LeaseRecord, LeaseState, RequestLabel, Seen, StoreError};
use crate::metrics::MetricEvent;
use crate::random::full_jitter_ms;
use crate::request::{Request, RequestKey, RequestKind};

/// How an acquire takes the lease.
#[derive(Debug, Clone, Copy)]
enum Take<'a> {
    /// As the decision table allows: a record absent, expired, another attempt's, a due poll.
    Acquire,
    /// A close of a work: whatever its lease or poll, committing this signal in the same write.
    Close(&'a [u8]),
}

/// What an acquire that took the lease found before it, for giving the lease back.
#[derive(Debug)]
pub(super) enum Prior {
    /// The record as it was (`None`: there was none).
    Known(Option<Box<LeaseRecord>>),
    /// Not known: the acquire's reply was lost and the record read back showed it ours.
    Unknown,
}

impl Worker {
    /// Takes the lease, or reports the record that refused it. `Seen::Mine` on success.
    pub(super) async fn acquire(&self, job: &Job<'_>) -> Result<Seen, StoreError> {
        self.acquire_finding(job).await.map(|(seen, _)| seen)
    }

    /// [`Self::acquire`], and what a successful acquire found before it (`Prior::Known(None)`
    /// on a refusal, which changed nothing).
    pub(super) async fn acquire_finding(&self, job: &Job<'_>) -> Result<(Seen, Prior), StoreError> {
        self.acquire_as(job, Take::Acquire).await
    }

    /// Closes the work `job` is about ([`LeaseStore::close`]): takes its record even from a
    /// live holder or a wait whose poll is not due, and commits `signal` in the same write.
    /// `Seen::Mine` when the close is this delivery's.
    pub(super) async fn close_with(&self, job: &Job<'_>, signal: &[u8]) -> Result<(Seen, Prior), StoreError> {
        self.acquire_as(job, Take::Close(signal)).await
    }

    async fn acquire_as(&self, job: &Job<'_>, take: Take<'_>) -> Result<(Seen, Prior), StoreError> {
        let preempt = matches!(take, Take::Close(_));
        let (settings, request, owner) = (&self.settings, job.request, job.owner.as_str());
        let mut last = StoreError::Transient("no attempt was made".into());
        for attempt in 1..=settings.store_attempts_max.max(1) {
            let now_ms = self.clock.now_ms();
            let acquire = AcquireRequest {
                key: request.key.clone(),
                fingerprint: request.fingerprint.clone(),
                sent_ms: job.attempt_sent_ms,
                owner: owner.to_owned(),
                now_ms,
                lease_until_ms: job.budget.lease_until_ms(now_ms),
                skew_ms: settings.skew_ms,
                expires_ms: now_ms + settings.retention_ms,
                poll_lag_ms: job.budget.poll_lag_ms(now_ms),
                label: RequestLabel {
                    logical_resource_id: request.logical_resource_id.clone(),
                    request_type: request.kind().map(RequestKind::as_str).unwrap_or_default().to_owned(),
                    resource_type: request.resource_type().unwrap_or_default().to_owned(),
                    replaces: crate::work::replaced_work(request).map(|key| key.request_id).unwrap_or_default(),
                },
                preempt,
            };
            let call = async {
                match take {
                    Take::Acquire => self.store.acquire(&acquire).await,
                    Take::Close(signal) => self.store.close(&acquire, signal).await,
                }
            };
            match self.store_call(call, job.budget.decide_end_ms()).await {
                Ok(Acquire::Acquired { fence, took_over, interrupted, poll, prior }) => {
                    let polls = poll.as_ref().map(|poll| poll.polls);
                    tracing::info!(fence, took_over, polls, "lease acquired");
                    self.metrics.record(MetricEvent::LeaseAcquired { fence, poll: poll.is_some() });
                    return Ok((Seen::Mine { fence, took_over, interrupted, poll }, Prior::Known(prior)));
                }
                // Includes `Mine`: our own earlier attempt was applied and its reply lost.
                Ok(Acquire::Refused(record)) => {
                    let seen = record.seen_by(&job.viewer(), now_ms, settings.skew_ms);
                    let prior = if matches!(seen, Seen::Mine { .. }) { Prior::Unknown } else { Prior::Known(None) };
                    return Ok((seen, prior));
                }
                Err(StoreError::Ambiguous(why)) => {
                    tracing::warn!(why, "acquire outcome unknown; reading the record back");
                    // What the write leaves: RUNNING for an acquire, COMMITTED for a close.
                    let left = if preempt { LeaseState::Committed } else { LeaseState::Running };
                    if let Ok(Some(record)) =
                        self.store_call(self.store.read(&request.key), job.budget.decide_end_ms()).await
                        && record.owner == owner
                        && record.state == left
                    {
                        let poll = record.poll_for(&request.fingerprint);
                        // What the record held before this acquire is not known: a takeover may
                        // have interrupted an execution.
                        let took_over = record.fence > 1;
                        let seen = Seen::Mine { fence: record.fence, took_over, interrupted: took_over, poll };
                        return Ok((seen, Prior::Unknown));
                    }
                    last = StoreError::Ambiguous(why);
                }
                Err(error) if !error.retry_now() => return Err(error),
                Err(error) => last = error,
            }
            if !self.store_backoff(attempt, job.budget.decide_end_ms()).await {
                break;
            }
        }
        Err(last)
    }

    /// A consistent read of the record, classified for this delivery.
    pub(super) async fn read(&self, job: &Job<'_>) -> Result<Seen, StoreError> {
        let record = self.read_record(job).await?;
        Ok(Seen::of(record.as_ref(), &job.viewer(), self.clock.now_ms(), self.settings.skew_ms))
    }

    /// A consistent read of the record, as stored.
    pub(super) async fn read_record(&self, job: &Job<'_>) -> Result<Option<LeaseRecord>, StoreError> {
        let mut last = StoreError::Transient("no attempt was made".into());
        for attempt in 1..=self.settings.store_attempts_max.max(1) {
            match self.store_call(self.store.read(&job.request.key), job.budget.decide_end_ms()).await {
                Ok(record) => return Ok(record),
                Err(error) if !error.retry_now() => return Err(error),
                Err(error) => last = error,
            }
            if !self.store_backoff(attempt, job.budget.decide_end_ms()).await {
                break;
            }
        }
        Err(last)
    }

    /// One write that holds only under `fence` (commit, wait), retried with backoff, every call
    /// ended by `end_ms`. An unknown outcome is resolved from the record: `applied` says whether
    /// the record, still under our fence, shows this write (`Some`), and a record under another
    /// fence means the lease was lost (`Ok(None)`). `Ok(Some(None))` is a plain success.
    pub(super) async fn write_under_fence<T, F>(
        &self,
        request: &Request,
        fence: u64,
        end_ms: u64,
        write: impl Fn(u64) -> F,
        applied: impl Fn(&LeaseRecord) -> Option<T>,
    ) -> Result<Option<Option<T>>, StoreError>
    where
        F: Future<Output = Result<Conditional, StoreError>>,
    {
        let mut last = StoreError::Transient("no attempt was made".into());
        for attempt in 1..=self.settings.store_attempts_max.max(1) {
            let result = match self.store_call(write(self.clock.now_ms()), end_ms).await {
                Err(StoreError::Ambiguous(why)) => {
                    tracing::warn!(why, "write outcome unknown; reading the record back");
                    match self.store_call(self.store.read(&request.key), end_ms).await {
                        Ok(record) => Ok(Conditional::Refused(record.map(Box::new))),
                        Err(_) => Err(StoreError::Ambiguous(why)),
                    }
                }
                other => other,
            };
            match result {
                Ok(Conditional::Applied) => return Ok(Some(None)),
                Ok(Conditional::Refused(Some(record))) if record.fence == fence => match applied(&record) {
                    Some(value) => return Ok(Some(Some(value))),
                    // Still ours and running: the write did not happen; try again.
                    None => last = StoreError::Transient("write not applied".into()),
                },
                Ok(Conditional::Refused(_)) => return Ok(None),
                Err(error) if !error.retry_now() => return Err(error),
                Err(error) => last = error,
            }
            if !self.store_backoff(attempt, end_ms).await {
                break;
            }
        }
        Err(last)
    }

    /// Records that the answer was delivered (or, with `unsent`, that it never will be), retried
    /// with backoff until `end_ms`. The write only sets fields under the fence, so repeating it
    /// is harmless and an unknown outcome (a 5xx, a reset, a lost reply) is simply tried again: a
    /// mark that stays unrecorded makes every later copy PUT the answer again and leaves the
    /// record looking undelivered to operators.
    pub(super) async fn mark_delivered(
        &self,
        key: &RequestKey,
        fence: u64,
        unsent: Option<&str>,
        end_ms: u64,
    ) -> Result<Conditional, StoreError> {
        let mut last = StoreError::Transient("no attempt was made".into());
        for attempt in 1..=self.settings.store_attempts_max.max(1) {
            let mark = self.store.mark_delivered(key, fence, unsent, self.clock.now_ms());
            match self.store_call(mark, end_ms).await {
                Err(error) if !error.retry_now() => return Err(error),
                Err(error) => last = error,
                Ok(answer) => return Ok(answer),
            }
            if !self.store_backoff(attempt, end_ms).await {
                break;
            }
        }
        Err(last)
    }

    /// One lease-store call, given up at its timeout or at `end_ms`, whichever is first; not
    /// made at all when less than a useful slice of time is left.
    pub(super) async fn store_call<T>(
        &self,
        call: impl Future<Output = Result<T, StoreError>>,
        end_ms: u64,
    ) -> Result<T, StoreError> {
        let Some(timeout_ms) = call_timeout_ms(self.settings.store_call_timeout_ms, end_ms, self.clock.now_ms()) else {
            return Err(StoreError::Transient("no time was left in this invocation for a lease-store call".into()));
        };
        let result = within(self.clock.as_ref(), timeout_ms, call)
            .await
            .unwrap_or_else(|| Err(StoreError::Ambiguous(format!("no answer within {timeout_ms} ms"))));
        if let Err(StoreError::NewerFormat { format, settled }) = &result {
            self.metrics.record(MetricEvent::NewerFormat { format: *format });
            if *settled {
                tracing::info!(
                    format,
                    known = crate::lease::RECORD_FORMAT,
                    "the record was written by a newer version of cfn-once, which finished the request; nothing left to do"
                );
            } else {
                tracing::warn!(
                    format,
                    known = crate::lease::RECORD_FORMAT,
                    "the record was written by a newer version of cfn-once; leaving it, and the message, to a handler that knows its format"
                );
            }
        }
        result
    }

    /// Sleeps before another store attempt; false (without sleeping) if the attempt after it
    /// could not start before `end_ms`.
    async fn store_backoff(&self, attempt: u32, end_ms: u64) -> bool {
        let delay_ms = full_jitter_ms(
            self.random.as_ref(),
            attempt,
            self.settings.store_backoff_base_ms,
            self.settings.store_backoff_max_ms,
        );
        if !call_fits_after(delay_ms, end_ms, self.clock.now_ms()) {
            return false;
        }
        self.clock.sleep_ms(delay_ms).await;
        true
    }
}
