//! Running the provider for a request whose lease this delivery holds, and answering what it
//! comes to; or, when no run fits before the request's deadline, answering FAILED without
//! running it.
//!
//! The provider runs under heartbeats that extend the lease, with its transient errors retried
//! for a time budget and its panics caught (a panic is this request's FAILED answer, never the
//! batch's failure). Invariants kept here:
//!
//! * S2: the provider runs under its fence, and is abandoned as soon as a heartbeat finds the
//!   lease taken over; a lost lease means no commit and no PUT;
//! * L1: the provider stops where its run window closes (`budget::RunWindow`: the lease cap or
//!   the invocation's end less the answer), and is then answered FAILED with a Reason that says
//!   which deadline it missed; no heartbeat extends the lease past the lease cap.

use std::future::Future;
use std::panic::AssertUnwindSafe;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::task::Poll;

use futures_util::FutureExt;
use futures_util::future::BoxFuture;

use super::job::{Acted, Job, Phase, describe, fence_scope};
use super::wait::still_in_progress;
use super::{Worker, panic_message};
use crate::budget::{RETRY_BACKOFF_BASE_MS, RunBound};
use crate::clock::within;
use crate::lease::{Conditional, PollRecord, StoreError};
use crate::metrics::MetricEvent;
use crate::ownership::Fence;
use crate::provider::{Progress, ProviderContext, ProviderError, RunEnd, Waiting};
use crate::random::full_jitter_ms;
use crate::request::Request;
use crate::response::{Outcome, foreign_text};
use crate::vocabulary::Disposition;
use crate::wait_condition::WaitDeclared;

/// The longest part of a Reason that comes from a provider (often an SDK's or a downstream
/// service's error text): enough to say what went wrong, never a page of HTML or HTTP headers.
const PROVIDER_REASON_CHARS_MAX: usize = 512;

/// How a supervised provider run ended.
enum Run {
    Finished(Outcome),
    InProgress(Waiting),
    LeaseLost,
    /// The provider's last call may have had effects nobody saw (`Again::Unknown`), or was
    /// deferred to a later invocation (`Again::Deferred`): it runs again only under a higher
    /// fence.
    Again(Again),
}

/// Why a run ends without an answer, for the provider to run again under a higher fence; the
/// reason already bounded.
enum Again {
    /// `ProviderError::Unknown`: its last call may have had effects nobody saw.
    Unknown(String),
    /// `ProviderError::Deferred`: its last call was refused for credentials that expired and
    /// that nothing in this process refreshes.
    Deferred(String),
}

/// What one run of the provider (its transient errors retried) came to.
enum Ran {
    Progress(Progress),
    /// `ProviderError::Unknown` or `ProviderError::Deferred`.
    Again(Again),
}

impl Worker {
    /// Runs the provider under `fence` (or polls its work in progress) and answers what it
    /// comes to: commits and sends the outcome, stores the wait, or retries after a lost lease.
    /// `last_chance`: whether this region may start new work (active, or the secondary), and
    /// so may run the provider inside the deadline margin rather than answer FAILED unrun.
    pub(super) async fn run_and_answer(
        &self,
        job: &Job<'_>,
        fence: u64,
        took_over: bool,
        took_over_from: Option<u64>,
        poll: Option<PollRecord>,
        last_chance: bool,
    ) -> Acted {
        tracing::Span::current().record("fence", fence);
        // A poll is of an ordinary run: a hand-over never waits.
        if job.phase == Phase::AnswerAtOnce && poll.is_none() {
            // A request its type is kept from is answered FAILED now, never SUCCESS first.
            if let Some(refused) = self.router.refuses(job.request) {
                return self.commit_and_send(job, fence, refused).await.into();
            }
            match &job.request.wait {
                WaitDeclared::Invalid(reason) => {
                    let outcome = Outcome::refused(format!("{} refused: {reason}", describe(job.request)));
                    return self.commit_and_send(job, fence, outcome).await.into();
                }
                // The answer is fixed by the request alone (see `wait_condition`): the provider
                // runs under the work.
                WaitDeclared::Valid(spec) => match self.waits_on(job, spec).await {
                    Ok(true) => {
                        let handed_over = self.commit_and_send(job, fence, crate::work::handed_over()).await;
                        return Acted::handed_over(handed_over);
                    }
                    // Nothing can be waiting on the handle: run the provider as for any request.
                    Ok(false) => {}
                    Err(error) => {
                        return self.retry(job, format!("could not read the wait condition's work: {error}")).into();
                    }
                },
                WaitDeclared::None => {}
            }
        }
        self.run_ordinary(job, fence, took_over, took_over_from, poll, last_chance).await.into()
    }

    /// Whether a wait condition can be waiting on `spec`'s handle, so that `job` hands its work
    /// over to it. Not when the handle's presigned URL expires before the work could signal
    /// it (nothing can), nor, for an Update, when the handle already has a work: an update
    /// rollback naming the handle the resource had before, whose wait condition completed or
    /// was abandoned long ago. A rollback then runs the provider's Update and is answered
    /// with what it comes to, never FAILED for want of a wait (that would leave the stack
    /// UPDATE_ROLLBACK_FAILED). An Update that keeps its handle never gets here (`Phase::of`).
    async fn waits_on(&self, job: &Job<'_>, spec: &crate::wait_condition::WaitSpec) -> Result<bool, StoreError> {
        let now_ms = self.clock.now_ms();
        let usable_until_ms = now_ms.saturating_add(self.settings.deadline_margin_ms);
        if spec.handle.presigned_expiry_ms().is_some_and(|expiry_ms| expiry_ms <= usable_until_ms) {
            tracing::info!("the wait condition handle has expired: running the provider as for any request");
            return Ok(false);
        }
        if job.request.kind() != Some(crate::request::RequestKind::Update) {
            return Ok(true);
        }
        let work_request = crate::work::work_request(job.request, spec);
        let work = Job { request: &work_request, phase: Phase::Signal, work_after: None, ..job.clone() };
        let record = self.read_record(&work).await?;
        let fresh = record.is_none_or(|record| record.state == crate::lease::LeaseState::Left);
        if !fresh {
            tracing::info!(
                "the wait condition handle already had a work (an update rollback): running the provider as for any request"
            );
            return Ok(false);
        }
        // The old handle's work replaced this handle's: the update's rollback, even where this
        // handle's own work record was swept long ago and its URL does not say it expired.
        let Some(old) =
            job.request.old_wait.as_ref().filter(|old| old.handle.expose_secret() != spec.handle.expose_secret())
        else {
            return Ok(true);
        };
        let old_request = crate::work::work_request(job.request, old);
        let old_work = Job { request: &old_request, phase: Phase::Signal, work_after: None, ..job.clone() };
        let replaced = self
            .read_record(&old_work)
            .await?
            .is_some_and(|record| record.label.replaces == work_request.key.request_id);
        if replaced {
            tracing::info!(
                "the old properties' work replaced this handle's (an update rollback): running the provider as for any request"
            );
        }
        Ok(!replaced)
    }

    /// Runs the provider under `fence` (or polls its work in progress) and answers what it
    /// comes to.
    async fn run_ordinary(
        &self,
        job: &Job<'_>,
        fence: u64,
        took_over: bool,
        took_over_from: Option<u64>,
        poll: Option<PollRecord>,
        last_chance: bool,
    ) -> Disposition {
        let mut window = job.budget.run_window();
        let now_ms = self.clock.now_ms();
        if window.closed(now_ms) {
            // The lease was taken where no lease may reach any more: run in what is left of the
            // margin as a last chance (never for a poll, whose wait is over there, nor in a
            // drained primary, which starts no new work), or answer without running.
            match job.budget.last_chance_window(now_ms).filter(|_| last_chance && poll.is_none()) {
                Some(last_chance) => {
                    tracing::info!(
                        end_ms = last_chance.end_ms,
                        "inside the deadline margin: running the provider as a last chance"
                    );
                    window = last_chance;
                }
                None => return self.fail_without_running(job, fence, took_over, poll, None).await,
            }
        }
        if window.too_short(now_ms) {
            // Taking the lease used up this invocation (a slow store): rather than answer FAILED
            // for want of time that a later invocation has, let the lease expire and be taken over.
            return self.retry(job, "too little of this invocation was left to run the provider".into());
        }
        let (end, advice) = match window.bound {
            RunBound::Request => {
                (format!("{}, set by {}", job.phase.deadline_name(), job.budget.deadline.describe()), "")
            }
            RunBound::Invocation => (
                "the Lambda invocation's deadline".to_owned(),
                "; raise the function timeout or make the provider faster",
            ),
        };
        let reason = format!(
            "{} did not finish before {end} (less {} s kept to answer){advice}",
            describe(job.request),
            window.kept_ms.div_ceil(1000)
        );
        let ended_by = match window.bound {
            RunBound::Request => RunEnd::RequestDeadline,
            RunBound::Invocation => RunEnd::Invocation,
        };
        let run_end = (window.end_ms, ended_by);
        let outcome = match self.supervise(job, fence, took_over_from, poll.as_ref(), run_end, reason).await {
            Run::Finished(outcome) => outcome,
            Run::InProgress(waiting) => return self.wait(job, fence, waiting, poll.as_ref()).await,
            Run::LeaseLost => {
                self.metrics.record(MetricEvent::FenceConflict);
                return self.retry(job, "the lease was taken over while the provider ran; nothing committed".into());
            }
            Run::Again(again) => return self.run_again_under_a_higher_fence(job, fence, again).await,
        };
        self.commit_and_send(job, fence, outcome).await
    }

    /// After a provider call whose outcome is unknown, or that was deferred: the provider never
    /// runs again under `fence` (a Lambda Invoke whose answer was lost keeps running, and two
    /// runs under one fence cannot be told apart by fenced writes; a deferred run may have done
    /// part of its work before the call that was refused). This delivery ends its lease and
    /// comes back, and the next delivery takes the lease under a higher fence (a takeover,
    /// which the provider is told of) and runs it again: at once after an unknown outcome, and
    /// after a deferral with the backoff of a retry (as the lease store's deferral), never later
    /// than a run still fits before the lease cap, so that the Reason of a last FAILED is the
    /// deferral's. Where the deadline leaves no time for that run, the answer is FAILED saying
    /// the outcome is unknown, or that the credentials expired.
    async fn run_again_under_a_higher_fence(&self, job: &Job<'_>, fence: u64, again: Again) -> Disposition {
        let now_ms = self.clock.now_ms();
        // The next run takes the lease after the backoff floor; a run needs at least a minimum
        // before the lease cap. Without that, answer now.
        let floor_ms = u64::from(self.settings.applied_backoff_floor_s()) * 1000;
        let next_run_ms = now_ms + self.settings.skew_ms + floor_ms;
        if job.budget.deadline_near(next_run_ms) || job.budget.run_window().closed(next_run_ms) {
            let what = match &again {
                Again::Unknown(unknown) => format!("the outcome of its last call is unknown ({unknown})"),
                Again::Deferred(deferred) => format!(
                    "its last call was refused for credentials that expired ({deferred}), which nothing in this invocation can refresh"
                ),
            };
            let reason = format!(
                "{}: {what}, and no time is left before {}, set by {}, to run it again under a higher fence",
                describe(job.request),
                job.phase.deadline_name(),
                job.budget.deadline.describe()
            );
            tracing::error!(reason, "provider to run again near the deadline; answering FAILED");
            return self.commit_and_send(job, fence, Outcome::failed(reason)).await;
        }
        tracing::warn!(fence, "the provider runs again only under a higher fence; ending this lease");
        // A lease that ends now is taken over at once; if this write fails, the lease ends
        // by itself at its time, and the takeover waits for that.
        let end_ms = job.budget.decide_end_ms();
        let ended = self
            .write_under_fence(
                job.request,
                fence,
                end_ms,
                |now_ms| self.store.heartbeat(&job.request.key, fence, 0, now_ms),
                |record| (record.lease_until_ms == 0).then_some(()),
            )
            .await;
        let free_ms = match ended {
            Ok(_) => now_ms,
            Err(error) => {
                tracing::warn!(fence, %error, "could not end the lease; it ends by itself");
                job.budget.lease_until_ms(now_ms) + self.settings.skew_ms
            }
        };
        match again {
            Again::Unknown(unknown) => self.see_again(
                job,
                free_ms + self.jitter_ms(),
                &format!("the provider's outcome is unknown ({unknown}); it runs again under a higher fence"),
            ),
            Again::Deferred(deferred) => {
                let delay_ms = full_jitter_ms(
                    self.random.as_ref(),
                    job.receive_count.saturating_sub(1),
                    RETRY_BACKOFF_BASE_MS,
                    self.settings.retry_backoff_max_ms(),
                );
                // Back while a run still fits: before the lease cap, less the skew margin the
                // takeover waits and a second the backoff's rounding to whole seconds may add.
                let latest_ms = job
                    .budget
                    .lease_cap_ms()
                    .min(job.budget.deadline.latest_wake_ms(self.settings.deadline_margin_for_ms(&job.budget.deadline)))
                    .saturating_sub(self.settings.skew_ms + 1_000);
                let until_ms = free_ms.max(now_ms + delay_ms).min(latest_ms.max(free_ms));
                self.see_again(
                    job,
                    until_ms,
                    &format!(
                        "the provider's call was refused for credentials that expired ({deferred}); a later invocation runs it again under a higher fence"
                    ),
                )
            }
        }
    }

    /// Commits and PUTs FAILED without running the provider: the request's deadline leaves no
    /// time to run it. With work in progress, the Reason says how long it waited; with a work
    /// the request ends that could not be closed (`unclosed`), why not.
    pub(super) async fn fail_without_running(
        &self,
        job: &Job<'_>,
        fence: u64,
        took_over: bool,
        poll: Option<PollRecord>,
        unclosed: Option<&str>,
    ) -> Disposition {
        tracing::Span::current().record("fence", fence);
        let now_ms = self.clock.now_ms();
        let reason = match (&poll, unclosed) {
            (Some(poll), _) => still_in_progress(job, poll, now_ms),
            (None, Some(why)) => format!(
                "{} failed: could not close the work of its wait condition before {}, set by {}: {why}; answering FAILED rather than letting CloudFormation wait (the provider did not run, and the work is closed before any later request of the resource goes on)",
                describe(job.request),
                job.phase.deadline_name(),
                job.budget.deadline.describe(),
            ),
            (None, None) => format!(
                "no region could run {} before {}, set by {}; answering FAILED rather than letting CloudFormation wait",
                describe(job.request),
                job.phase.deadline_name(),
                job.budget.deadline.describe(),
            ),
        };
        let took_over = took_over || poll.is_some();
        tracing::error!(reason, took_over, "deadline near and nothing committed");
        // An execution this one took over from may have run the provider: its rollback Delete
        // must then reach the provider (see `response::build`).
        let outcome = if took_over { Outcome::failed(reason) } else { Outcome::refused(reason) };
        self.commit_and_send(job, fence, outcome).await
    }

    /// Runs the provider (with retries of transient errors) while heartbeating the lease, until
    /// it finishes, the lease is lost, or `run_deadline_ms` passes (then the answer is FAILED
    /// with `late_reason`), which `ended_by` names to the provider. With `poll`, the provider's
    /// work in progress is polled instead.
    async fn supervise(
        &self,
        job: &Job<'_>,
        fence: u64,
        took_over_from: Option<u64>,
        poll: Option<&PollRecord>,
        (run_deadline_ms, ended_by): (u64, RunEnd),
        late_reason: String,
    ) -> Run {
        let request = job.request;
        let budget = job.budget;
        let lease_lost = Arc::new(AtomicBool::new(false));
        // The provider is told about CloudFormation's request; a work's writes are fenced by
        // the work's own record.
        let context = ProviderContext::new(
            Fence { scope: fence_scope(request), value: fence },
            job.origin,
            request.resource_type().unwrap_or_default(),
            run_deadline_ms,
            Arc::clone(&self.clock),
            Arc::clone(&lease_lost),
        )
        .taking_over_from(took_over_from)
        .ended_by(ended_by)
        .polling(poll.map(|poll| poll.polls));
        let work = self.run_provider(job.origin, &context, poll);
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
                let lease_until_ms = budget.heartbeat_lease_until_ms(now_ms);
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
            Some(Ok(Ran::Progress(Progress::Finished(outcome)))) => Run::Finished(outcome),
            Some(Ok(Ran::Progress(Progress::InProgress(waiting)))) => Run::InProgress(waiting),
            Some(Ok(Ran::Again(again))) => Run::Again(again),
            Some(Err(())) => {
                tracing::warn!("heartbeat found the lease taken over; provider abandoned");
                Run::LeaseLost
            }
            None => {
                tracing::error!(late_reason, "provider did not finish in time; answering FAILED");
                Run::Finished(Outcome::failed(late_reason))
            }
        }
    }

    /// The provider call (or poll), transient errors retried for `provider_retry_ms` (a call
    /// that certainly did nothing may run again under the same fence); an unknown outcome ends
    /// the run (`Ran::Unknown`). `Err(())` is reserved for the supervisor's lease-lost signal
    /// and never produced here.
    async fn run_provider(
        &self,
        request: &Request,
        context: &ProviderContext,
        poll: Option<&PollRecord>,
    ) -> Result<Ran, ()> {
        let label = describe(request);
        let failed = |reason: String| Ok(Ran::Progress(Progress::Finished(Outcome::failed(reason))));
        let started_ms = self.clock.now_ms();
        let mut attempt = 0u32;
        loop {
            attempt += 1;
            // The same step again: the same writes make the same tokens.
            context.restart_writes();
            let call = async {
                match poll {
                    Some(poll) => self.router.poll(request, context, &poll.state).await,
                    None => self.router.run(request, context).await,
                }
            };
            // Providers are users' code, and users' code panics. Caught here, a panic is this
            // request's FAILED answer; uncaught, it would fail the whole batch (lambda_runtime
            // reports the invocation failed) and hide every record of it for the visibility
            // timeout, past the deadline margin of any request near its deadline.
            let result = match AssertUnwindSafe(call).catch_unwind().await {
                Ok(result) => result,
                Err(payload) => {
                    let message = foreign_text(&panic_message(payload.as_ref()), PROVIDER_REASON_CHARS_MAX);
                    tracing::error!(message, "the provider panicked; answering FAILED");
                    self.metrics.record(MetricEvent::ProviderPanicked);
                    return failed(format!("{label} failed: the provider panicked: {message}"));
                }
            };
            match result {
                Ok(progress) => return Ok(Ran::Progress(progress)),
                Err(ProviderError::Unknown(reason)) => {
                    let reason = foreign_text(&reason, PROVIDER_REASON_CHARS_MAX);
                    tracing::warn!(attempt, reason, "the provider's outcome is unknown");
                    return Ok(Ran::Again(Again::Unknown(reason)));
                }
                Err(ProviderError::Deferred(reason)) => {
                    let reason = foreign_text(&reason, PROVIDER_REASON_CHARS_MAX);
                    tracing::warn!(attempt, reason, "the provider's call was deferred to a later invocation");
                    return Ok(Ran::Again(Again::Deferred(reason)));
                }
                Err(ProviderError::Failed(reason)) => {
                    let reason = foreign_text(&reason, PROVIDER_REASON_CHARS_MAX);
                    return failed(format!("{label} failed: {reason}"));
                }
                Err(ProviderError::Transient(reason)) => {
                    let delay_ms = full_jitter_ms(
                        self.random.as_ref(),
                        attempt,
                        self.settings.provider_backoff_base_ms,
                        self.settings.provider_backoff_max_ms,
                    );
                    // Retried for a time budget and within the run (past its end the supervisor
                    // answers FAILED without the provider's reason).
                    let next_ms = self.clock.now_ms().saturating_add(delay_ms);
                    if !self.settings.provider_retry_fits(started_ms, next_ms, context.deadline_ms) {
                        let reason = foreign_text(&reason, PROVIDER_REASON_CHARS_MAX);
                        let spent_s = self.clock.now_ms().saturating_sub(started_ms).div_ceil(1000);
                        return failed(format!(
                            "{label} failed after {attempt} attempts in {spent_s} s of transient errors: {reason}"
                        ));
                    }
                    tracing::warn!(attempt, reason, delay_ms, "provider failed transiently; retrying");
                    self.clock.sleep_ms(delay_ms).await;
                }
            }
        }
    }
}
