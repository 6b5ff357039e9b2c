//! The protocol for one delivery: decide from the record and this region's role (see
//! `decision`), then take the lease, run the provider under heartbeats, commit, PUT, mark
//! delivered; or back off, leave the message to the active region, re-PUT stored bytes, or drop.
//!
//! Everything outside comes in through [`Ports`] (`LeaseStore`, `ResponseSink`, `Clock`,
//! `Random`, `ActivitySource`), so this is the code the Lambda, the local event source mapping,
//! the tests and the simulator all run. Invariants kept here:
//!
//! * S1: nothing is PUT that was not committed first, and what is PUT is the committed bytes;
//! * S2: the provider runs under its fence and is abandoned as soon as a heartbeat finds the
//!   lease taken over; a lost lease means no commit and no PUT;
//! * L1: backoff never waits past the request's deadline; near it, whoever sees the request
//!   uncommitted answers FAILED; a provider that cannot finish before the invocation's or the
//!   request's deadline (less a reserve for commit and PUT) is abandoned and answered FAILED with
//!   a Reason that says so; storage and network failures end in a retry, never in silence.
//!
//! A provider that answers in progress has its state stored under its fence (`LeaseStore::wait`,
//! which releases the lease) and its message brought back when the next poll is due; the last
//! poll comes before the deadline margin, and work still in progress then is answered FAILED
//! with how long it waited, how many polls it took and its last state.
//!
//! A write whose outcome is unknown (a timeout after the store applied it, or an SDK-internal
//! retry that met its own earlier success) is resolved by the record itself: the owner or fence
//! in it tells whether the write was ours.
//!
//! The worker's parts, one concern each:
//!
//! * this file, the dispatch: the [`Worker`] and its [`Ports`], decoding a record and working
//!   out its deadline ([`Worker::receive`]), and the decision loop;
//! * `job`: what one delivery carries through the rest: the record received, the job (its
//!   request, owner and budget), which answer it gives (its phase), and what acting came to;
//! * `see_again`: the dispositions that bring a message back (left to the active region, a
//!   retry after a failure, a backoff to a given time, the DLQ past the deadline);
//! * `leave`: a standby primary's lease, taken before the control answered, given back
//!   unused where the table gives it no right to it;
//! * `run`: running the provider under heartbeats until it finishes, the lease is lost or its
//!   run window closes, or answering FAILED without running it;
//! * `answer`: committing the answer under the fence, then sending what was committed
//!   (`Worker::send_answer`: the PUT, then the delivered mark);
//! * `wait`: storing work in progress under the fence and scheduling its next poll;
//! * `store`: lease-store calls, each bounded by its timeout and the delivery's time, retried
//!   with backoff, their unknown outcomes resolved from the record.
//!
//! Every deadline and backoff they keep is computed in `budget`, from the request's deadline,
//! the invocation's and the settings.

use std::sync::Arc;

use tracing::Instrument;

use crate::budget::Budget;
use crate::clock::Clock;
use crate::control::{Activity, ActivitySource, CachedActivity};
use crate::deadline::RequestDeadline;
use crate::decision::{Action, FirstStep, Redundant, Situation, decide, first_step};
use crate::fingerprint::hex_prefix;
use crate::lease::{LeaseStore, Seen, StoreError};
use crate::marks::Ticket;
use crate::metrics::{MetricEvent, MetricsSink};
use crate::provider::Router;
use crate::put::ResponseSink;
use crate::random::Random;
use crate::request::{InputPolicy, RequestKind, decode};
use crate::response::Status;
use crate::settings::Settings;
use crate::vocabulary::{DeadLetterCause, Disposition, Done, Handled, Invocation, QueueRecord, RequestSummary, Role};

mod answer;
mod close;
mod job;
mod leave;
mod run;
mod see_again;
mod store;
mod wait;

use job::{Acted, Decoded, Job, Phase, dropped, work_deadline};
pub use job::{Received, fence_scope};

/// Decisions one delivery may take before it gives up and retries later: acquire, see the
/// record change under it, decide again.
const DECISIONS_MAX: u32 = 4;

/// Everything the protocol reaches the world through.
#[derive(Debug, Clone)]
pub struct Ports {
    /// Where each request's lease record lives (DynamoDB, or in memory).
    pub store: Arc<dyn LeaseStore>,
    /// What PUTs committed responses to their ResponseURLs.
    pub sink: Arc<dyn ResponseSink>,
    /// The providers, by ResourceType.
    pub router: Arc<Router>,
    /// Time for leases, deadlines, timeouts and sleeps; a manual clock in tests.
    pub clock: Arc<dyn Clock>,
    /// Jitter and owner nonces; seeded in tests and the simulator.
    pub random: Arc<dyn Random>,
    /// The active-region control's source, asked only by a primary (a secondary's decisions do
    /// not depend on it). The worker puts it behind a [`CachedActivity`] with
    /// `Settings::control_cache_ms`: pass the source itself, not a cache.
    pub control: Arc<dyn ActivitySource>,
    /// Where protocol events are counted.
    pub metrics: Arc<dyn MetricsSink>,
}

/// The protocol engine. Cheap to share: build one per process.
#[derive(Debug, Clone)]
pub struct Worker {
    store: Arc<dyn LeaseStore>,
    sink: Arc<dyn ResponseSink>,
    router: Arc<Router>,
    clock: Arc<dyn Clock>,
    random: Arc<dyn Random>,
    /// The configured control behind its cache: one source read per time-to-live, and the
    /// last known answer when the source fails or answers too late.
    control: Arc<CachedActivity>,
    metrics: Arc<dyn MetricsSink>,
    input: Arc<InputPolicy>,
    settings: Arc<Settings>,
    /// The decision table it runs: this version's, unless a test or the simulator plays an
    /// older version's.
    decide: crate::decision::DecisionTable,
}

impl Worker {
    /// A worker over the given ports.
    pub fn new(ports: Ports, input: InputPolicy, settings: Settings) -> Self {
        let Ports { store, sink, router, clock, random, control, metrics } = ports;
        let control =
            Arc::new(CachedActivity::new(control, Arc::clone(&clock), settings.control_cache_ms, Activity::Active));
        Self {
            store,
            sink,
            router,
            clock,
            random,
            control,
            metrics,
            input: Arc::new(input),
            settings: Arc::new(settings),
            decide,
        }
    }

    /// The same worker, deciding by `table` instead of this version's table: how the simulator
    /// plays a region that still runs the last release's decisions during an upgrade.
    pub fn with_decision_table(self, table: crate::decision::DecisionTable) -> Self {
        Self { decide: table, ..self }
    }

    /// The settings this worker runs with.
    pub fn settings(&self) -> &Settings {
        &self.settings
    }

    /// The clock this worker reads and sleeps on.
    pub fn clock(&self) -> &Arc<dyn Clock> {
        &self.clock
    }

    /// For a primary, keeps the active-region control off the records' critical path: the
    /// future to spawn at start, beside the records, which renews the answer from the first one
    /// on ([`CachedActivity::keep_fresh`]). The init reads nothing (its time is the cold
    /// start's): a record that finds no fresh answer, the first one of a process among them,
    /// asks and acquires at once (see `process`). `None` for a secondary, whose decisions do not
    /// depend on the control.
    pub fn control_renewal(&self) -> Option<impl std::future::Future<Output = ()> + Send + 'static> {
        if self.settings.role != Role::Primary {
            return None;
        }
        let timeout_ms = self.settings.store_call_timeout_ms;
        let control = Arc::clone(&self.control);
        Some(async move { control.keep_fresh(timeout_ms).await })
    }

    /// Reads the active-region control now, within the store-call timeout: the records after it
    /// find the answer fresh and follow the table's first step without asking. The stock
    /// function does not call it (its init reads nothing, see [`Self::control_renewal`]); it is
    /// for embedders that want the answer before their first record, and for tests. `None` for
    /// a secondary.
    pub async fn read_control(&self) -> Option<Activity> {
        if self.settings.role != Role::Primary {
            return None;
        }
        Some(self.control.warm_up(self.settings.store_call_timeout_ms).await)
    }

    /// Handles one delivery of one SQS record.
    pub async fn handle(&self, record: QueueRecord<'_>, invocation: &Invocation) -> Disposition {
        self.handle_detailed(record, invocation).await.disposition
    }

    /// Handles one delivery and says which request it was about.
    pub async fn handle_detailed(&self, record: QueueRecord<'_>, invocation: &Invocation) -> Handled {
        self.handle_received(self.receive(record), invocation).await
    }

    /// Decodes a record and works out its request's deadline, before anything is done with it
    /// (the batch shortens the visibility of records near their deadline first).
    pub fn receive<'a>(&self, record: QueueRecord<'a>) -> Received<'a> {
        let decoded = decode(record.body, &self.input).map(|request| {
            // The earliest of the publish time and the copy's send times: a copy SNS delivered
            // late has no more time than CloudFormation gives.
            let sent_ms = match (request.published_ms, record.sent_ms) {
                (Some(published_ms), Some(sent_ms)) => Some(published_ms.min(sent_ms)),
                (published_ms, sent_ms) => published_ms.or(sent_ms),
            };
            let attempt_sent_ms = sent_ms.unwrap_or_else(|| self.clock.now_ms());
            let deadline = RequestDeadline::of(
                attempt_sent_ms,
                request.service_timeout_s(),
                request.response_url.presigned_expiry_ms(),
                self.settings.deadline_ceiling_s,
            );
            let work_deadline = (Phase::of(&request) == Phase::AnswerAtOnce)
                .then(|| request.wait.spec())
                .flatten()
                .map(|spec| work_deadline(attempt_sent_ms, spec));
            Box::new(Decoded { request, sent_ms, attempt_sent_ms, deadline, work_deadline })
        });
        Received { record, decoded, ticket: None }
    }

    /// The visibility to give a received record now, in seconds, so that if its invocation dies
    /// the record comes back while its request can still be answered: `Some` for a record whose
    /// deadline margin begins within the queue's visibility timeout (a crash would hide it past
    /// that), `None` for every other (and for a record that could not be decoded).
    pub fn visibility_if_lost_s(&self, received: &Received<'_>, now_ms: u64) -> Option<u32> {
        let decoded = received.decoded.as_ref().ok()?;
        // A request that hands its work past its answer has two deadlines: whichever is near.
        [Some(decoded.deadline), decoded.work_deadline]
            .into_iter()
            .flatten()
            .filter_map(|deadline| self.settings.visibility_if_lost_s(&deadline, now_ms))
            .min()
    }

    /// Handles a received record and says which request it was about.
    pub async fn handle_received(&self, received: Received<'_>, invocation: &Invocation) -> Handled {
        // The ticket is dropped, so arrives, when this record is done, however it ends.
        let Received { record, decoded, ticket } = received;
        let decoded = match decoded {
            Ok(decoded) => decoded,
            Err(error) => {
                tracing::error!(%error, "record refused");
                self.metrics.record(MetricEvent::DlqBound);
                let disposition =
                    Disposition::DeadLetter { why: error.to_string(), cause: DeadLetterCause::Undeliverable };
                return Handled { request: None, disposition };
            }
        };
        let request = &decoded.request;
        let span = tracing::info_span!(
            "request",
            stack_id = %request.key.stack_id,
            request_id = %request.key.request_id,
            logical_resource_id = %request.logical_resource_id,
            request_type = request.kind().map(RequestKind::as_str).unwrap_or("unknown"),
            fingerprint = %request.fingerprint,
            fence = tracing::field::Empty,
        );
        let disposition = self.process(&decoded, record, invocation, ticket.as_ref()).instrument(span.clone()).await;
        span.in_scope(|| match &disposition {
            Disposition::Done(done) => tracing::info!(?done, "message done"),
            Disposition::Retry { delay_s, why } => tracing::info!(delay_s, why, "message will be seen again"),
            Disposition::DeadLetter { why, cause } => {
                tracing::error!(why, cause = cause.as_str(), "message goes to the DLQ")
            }
        });
        Handled { request: Some(RequestSummary::of(request)), disposition }
    }

    async fn process(
        &self,
        decoded: &Decoded,
        record: QueueRecord<'_>,
        invocation: &Invocation,
        batch: Option<&Ticket>,
    ) -> Disposition {
        let settings = &self.settings;
        let now_ms = self.clock.now_ms();
        let request = &decoded.request;
        let job = Job {
            request,
            origin: request,
            phase: Phase::of(request),
            receive_count: record.receive_count,
            sent_ms: decoded.sent_ms,
            attempt_sent_ms: decoded.attempt_sent_ms,
            owner: format!(
                "{}/{}/{}",
                settings.region,
                invocation.id,
                hex_prefix(&self.random.next_u64().to_be_bytes(), 8)
            ),
            budget: Budget::new(settings, decoded.deadline, invocation.deadline_ms),
            work_after: decoded.work_deadline.map(|deadline| {
                Budget::for_work(settings, deadline, invocation.deadline_ms, record.receive_count, now_ms)
            }),
            batch,
        };
        // A Delete, or an Update that names a new handle, first closes the work it ends: no
        // poll of it commits after this, and its handle has its one signal before the answer.
        // A close that cannot finish by the deadline margin leaves the request to be answered
        // FAILED, saying why (`unclosed`).
        let mut unclosed = None;
        if let Some(closing) = close::to_close(request) {
            // As for any request: a standby primary leaves it to the active region, unless its
            // deadline is near.
            let activity = match (settings.role, self.control.fresh_now()) {
                (Role::Secondary, _) => Activity::Standby,
                (Role::Primary, Some(activity)) => activity,
                (Role::Primary, None) => self.control.activity_within(job.budget.control_timeout_ms(now_ms)).await,
            };
            let situation = self.situation(&job, activity);
            if settings.role == Role::Primary && activity == Activity::Standby && !situation.deadline_near {
                return self.leave_message(&job);
            }
            match self.close_before(&job, &closing).await {
                Ok(why) => unclosed = why,
                Err(disposition) => return disposition,
            }
        }
        let (activity, seen) = match settings.role {
            Role::Primary => {
                if record.receive_count <= 1 {
                    self.warn_if_no_failover(&job);
                }
                match self.control.fresh_now() {
                    // Known: the table's first step (a standby primary reads before acquiring).
                    Some(activity) => (activity, self.first_look(&job, activity).await),
                    // Not known yet (a new process's first records, or a thaw after longer
                    // than the time-to-live): ask and acquire at once, so the answer costs no
                    // round trip of its own, and give back a lease the answer says this region
                    // must not take. A control that answers too slowly is one that failed: the
                    // last known answer stands (`CachedActivity::activity_within`).
                    None => {
                        let timeout_ms = job.budget.control_timeout_ms(now_ms);
                        let (activity, found) = futures_util::future::join(
                            self.control.activity_within(timeout_ms),
                            self.acquire_finding(&job),
                        )
                        .await;
                        match self.keep_or_leave(&job, activity, found).await {
                            Some(seen) => (activity, seen),
                            None => return self.leave_message(&job),
                        }
                    }
                }
            }
            // A secondary's decisions do not depend on it: see `decision`.
            Role::Secondary => (Activity::Standby, self.first_look(&job, Activity::Standby).await),
        };
        let acted = self.act(&job, activity, seen, unclosed.as_deref()).await;
        // A resource with a wait condition: once its answer (SUCCESS, handed over) is
        // delivered, every delivery of its message goes on to the work, until the work's signal
        // is delivered too. Whether it was handed over is read from the committed answer, so
        // every delivery follows the decision its committer made (`Worker::waits_on`).
        match (job.phase, acted.answered, acted.handed_over, request.wait.spec()) {
            (Phase::AnswerAtOnce, Some(Status::Success), true, Some(spec)) => {
                let work_request = crate::work::work_request(request, spec);
                let now_ms = self.clock.now_ms();
                let deadline = decoded.work_deadline.unwrap_or_else(|| work_deadline(decoded.attempt_sent_ms, spec));
                let budget = Budget::for_work(settings, deadline, invocation.deadline_ms, record.receive_count, now_ms);
                let work =
                    Job { request: &work_request, phase: Phase::Signal, budget, work_after: None, ..job.clone() };
                let seen = self.first_look(&work, activity).await;
                self.act(&work, activity, seen, None).await.disposition
            }
            _ => acted.disposition,
        }
    }

    /// Decides on `seen` (the record as this delivery first found it) and acts, deciding again
    /// when the record changed under it. `unclosed` says why the work the request ends could
    /// not be closed, near its deadline: the Reason of the FAILED answer the table then gives.
    async fn act(
        &self,
        job: &Job<'_>,
        activity: Activity,
        mut seen: Result<Seen, StoreError>,
        unclosed: Option<&str>,
    ) -> Acted {
        // Whether this region starts new work far from the deadline: only then does it run a
        // provider inside the deadline margin as a last chance (a drained primary answers there
        // without running, as the table says), and only as the attempt's first execution: one
        // that took the lease over from another (which may be running its own last chance, or
        // died) answers FAILED at once, so executions in the margin never take it from each
        // other in turn until the deadline passes.
        let starts_new_work = self.settings.role == Role::Secondary || activity == Activity::Active;
        for _ in 0..DECISIONS_MAX {
            let current = match seen {
                Ok(current) => current,
                // A newer version finished it: this copy has nothing left to do.
                Err(StoreError::NewerFormat { settled: true, .. }) => return Disposition::Done(Done::Duplicate).into(),
                Err(error @ StoreError::NewerFormat { .. }) => return self.retry(job, error.to_string()).into(),
                Err(error) => return self.retry(job, format!("could not reach the lease store: {error}")).into(),
            };
            let situation = self.situation(job, activity);
            match (self.decide)(&current, &situation) {
                Action::Acquire => match self.acquire_as_decided(job, activity).await {
                    Some(found) => seen = found,
                    None => return self.leave_message(job).into(),
                },
                Action::Run { fence, took_over, interrupted, poll } => {
                    let took_over_from = interrupted.then(|| fence.saturating_sub(1));
                    let last_chance = starts_new_work && !took_over;
                    return self.run_and_answer(job, fence, took_over, took_over_from, poll, last_chance).await;
                }
                // Inside the margin, with no wait to end and no close that failed: a last chance to
                // run, where the time left allows it (`Worker::run_ordinary`).
                Action::FailWithoutRunning { fence, took_over: false, poll: None }
                    if starts_new_work
                        && unclosed.is_none()
                        && job.budget.last_chance_window(self.clock.now_ms()).is_some() =>
                {
                    return self.run_and_answer(job, fence, false, None, None, true).await;
                }
                Action::FailWithoutRunning { fence, took_over, poll } => {
                    return self.fail_without_running(job, fence, took_over, poll, unclosed).await.into();
                }
                Action::Deliver { fence, response } => {
                    tracing::Span::current().record("fence", fence);
                    tracing::info!(
                        what = job.phase.answer_name(),
                        "found a committed answer that was never delivered; sending the stored bytes"
                    );
                    let status = job.status_of(&response);
                    let handed_over = crate::work::is_handed_over(&response);
                    return match self.send_answer(job, fence, &response, status).await {
                        Ok(status) => Acted::answered(Disposition::Done(Done::Replayed { fence }), status, handed_over),
                        Err(error) => self.retry(job, error.to_string()).into(),
                    };
                }
                Action::Drop(Redundant::Duplicate) => {
                    let (status, handed_over) = match &current {
                        Seen::Committed { response, .. } => {
                            (job.status_of(response), crate::work::is_handed_over(response))
                        }
                        _ => (Status::Failed, false),
                    };
                    return Acted::answered(Disposition::Done(Done::Duplicate), status, handed_over);
                }
                Action::Drop(Redundant::Superseded) if job.phase == Phase::Signal => {
                    return self.superseded_work(job).await.into();
                }
                Action::Drop(redundant) => return Disposition::Done(dropped(redundant)).into(),
                Action::BackOff { until_ms } => {
                    let why = if matches!(current, Seen::Committed { .. }) {
                        "just committed by another execution, which is sending it"
                    } else if matches!(current, Seen::Absent | Seen::NewAttempt) {
                        "the primary's head start has not ended"
                    } else {
                        self.metrics.record(MetricEvent::LeaseContended);
                        "another execution holds the lease"
                    };
                    return self.see_again(job, until_ms + self.jitter_ms(), why).into();
                }
                Action::AwaitPoll { until_ms } => {
                    return self
                        .see_again(job, until_ms + self.jitter_ms(), "the provider's work is in progress")
                        .into();
                }
                Action::Leave => return self.leave_message(job).into(),
            }
        }
        self.retry(job, "the record kept changing while deciding".into()).into()
    }

    /// The table's first step for `activity`: acquire, or read first (a standby primary, or
    /// a secondary within the primary's head start, which must not take a lease for new work).
    async fn first_look(&self, job: &Job<'_>, activity: Activity) -> Result<Seen, StoreError> {
        if self.situation(job, activity).within_head_start() {
            return self.read(job).await;
        }
        match first_step(self.settings.role, activity) {
            FirstStep::Acquire => self.acquire(job).await,
            FirstStep::Read => self.read(job).await,
        }
    }

    /// Everything the table looks at for `job` now, besides the record.
    fn situation(&self, job: &Job<'_>, activity: Activity) -> Situation {
        let now_ms = self.clock.now_ms();
        Situation {
            role: self.settings.role,
            activity,
            deadline_near: job.budget.deadline_near(now_ms),
            now_ms,
            delivery_grace_ms: self.settings.put.attempt_timeout_ms,
            poll_lag_ms: job.budget.poll_lag_ms(now_ms),
            // Only CloudFormation's request has a head start: a work is already under way.
            head_start_until_ms: match (self.settings.role, job.phase) {
                (Role::Secondary, Phase::Answer | Phase::AnswerAtOnce) => job.budget.head_start_end_ms(),
                _ => 0,
            },
        }
    }
}

/// What a panic said: its message when it has one (`panic!` with a string or a format).
pub fn panic_message(payload: &(dyn std::any::Any + Send)) -> String {
    payload
        .downcast_ref::<&str>()
        .map(|message| (*message).to_owned())
        .or_else(|| payload.downcast_ref::<String>().cloned())
        .unwrap_or_else(|| "a panic without a message".to_owned())
}

#[cfg(test)]
pub(crate) mod tests;
