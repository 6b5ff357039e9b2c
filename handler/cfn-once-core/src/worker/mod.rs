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
//!   out its deadline ([`Worker::receive`]), the decision loop, and the dispositions that bring
//!   a message back (a retry after a failure, a backoff to a given time, the DLQ past the
//!   deadline);
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

use crate::budget::{Budget, RETRY_BACKOFF_BASE_MS};
use crate::clock::Clock;
use crate::control::{Activity, ActivitySource, CachedActivity};
use crate::deadline::RequestDeadline;
use crate::decision::{Action, FirstStep, Redundant, Situation, decide, first_step};
use crate::fingerprint::hex_prefix;
use crate::lease::{LeaseRecord, LeaseState, LeaseStore, Seen, StoreError, Viewer, left_record};
use crate::metrics::{MetricEvent, MetricsSink};
use crate::provider::Router;
use crate::put::ResponseSink;
use crate::random::{Random, full_jitter_ms};
use crate::request::{InputPolicy, Request, RequestKind, Undeliverable, decode};
use crate::response::Status;
use crate::settings::Settings;
use crate::vocabulary::{DeadLetterCause, Disposition, Done, Handled, Invocation, QueueRecord, RequestSummary, Role};
use crate::wait_condition::{Signal, SignalStatus};

mod answer;
mod run;
mod store;

use store::Prior;
mod wait;
mod work;

/// Decisions one delivery may take before it gives up and retries later: acquire, see the
/// record change under it, decide again.
const DECISIONS_MAX: u32 = 4;

/// A record decoded, before it is handled ([`Worker::receive`]).
#[derive(Debug)]
pub struct Received<'a> {
    record: QueueRecord<'a>,
    decoded: Result<Box<Decoded>, Undeliverable>,
}

impl Received<'_> {
    /// What the record is about, if it could be decoded.
    pub fn summary(&self) -> Option<RequestSummary> {
        self.decoded.as_ref().ok().map(|decoded| RequestSummary::of(&decoded.request))
    }
}

/// A decoded request and when it was sent.
#[derive(Debug)]
struct Decoded {
    request: Request,
    /// The earliest of the publish time and the copy's send times, if any was known.
    sent_ms: Option<u64>,
    /// The same, or when the record was received if none was known.
    attempt_sent_ms: u64,
    deadline: RequestDeadline,
    /// The deadline of the work the request hands past its answer, if it does.
    work_deadline: Option<RequestDeadline>,
}

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
            let work_deadline = (Phase::of(&request) == Phase::HandOver)
                .then(|| request.wait.spec())
                .flatten()
                .map(|spec| work_deadline(attempt_sent_ms, spec));
            Box::new(Decoded { request, sent_ms, attempt_sent_ms, deadline, work_deadline })
        });
        Received { record, decoded }
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
        let Received { record, decoded } = received;
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
        let disposition = self.process(&decoded, record, invocation).instrument(span.clone()).await;
        span.in_scope(|| match &disposition {
            Disposition::Done(done) => tracing::info!(?done, "message done"),
            Disposition::Retry { delay_s, why } => tracing::info!(delay_s, why, "message will be seen again"),
            Disposition::DeadLetter { why, cause } => {
                tracing::error!(why, cause = cause.as_str(), "message goes to the DLQ")
            }
        });
        Handled { request: Some(RequestSummary::of(request)), disposition }
    }

    async fn process(&self, decoded: &Decoded, record: QueueRecord<'_>, invocation: &Invocation) -> Disposition {
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
        };
        // A Delete, or an Update that names a new handle, first closes the work it ends: no
        // poll of it commits after this, and its handle has its one signal before the answer.
        if let Some(closing) = work::to_close(request) {
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
            let work_request = crate::work::work_request(request, closing.spec);
            // The close keeps the closing request's deadline: its answer is what is owed.
            let close = Job { request: &work_request, phase: Phase::Work, work_after: None, ..job.clone() };
            if let Err(disposition) = self.close_work(&close, closing.why).await {
                return disposition;
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
                        match self.keep_or_give_back(&job, activity, found).await {
                            Some(seen) => (activity, seen),
                            None => return self.leave_message(&job),
                        }
                    }
                }
            }
            // A secondary's decisions do not depend on it: see `decision`.
            Role::Secondary => (Activity::Standby, self.first_look(&job, Activity::Standby).await),
        };
        let acted = self.act(&job, activity, seen).await;
        // A resource with a wait condition: once its answer (SUCCESS, handed over) is
        // delivered, every delivery of its message goes on to the work, until the work's signal
        // is delivered too. Whether it was handed over is read from the committed answer, so
        // every delivery follows the decision its committer made (`Worker::waits_on`).
        match (job.phase, acted.answered, acted.handed_over, request.wait.spec()) {
            (Phase::HandOver, Some(Status::Success), true, Some(spec)) => {
                let work_request = crate::work::work_request(request, spec);
                let now_ms = self.clock.now_ms();
                let deadline = decoded.work_deadline.unwrap_or_else(|| work_deadline(decoded.attempt_sent_ms, spec));
                let budget = Budget::for_work(settings, deadline, invocation.deadline_ms, record.receive_count, now_ms);
                let work = Job { request: &work_request, phase: Phase::Work, budget, work_after: None, ..job.clone() };
                let seen = self.first_look(&work, activity).await;
                self.act(&work, activity, seen).await.disposition
            }
            _ => acted.disposition,
        }
    }

    /// Decides on `seen` (the record as this delivery first found it) and acts, deciding again
    /// when the record changed under it.
    async fn act(&self, job: &Job<'_>, activity: Activity, mut seen: Result<Seen, StoreError>) -> Acted {
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
                    return self.run_and_answer(job, fence, took_over, took_over_from, poll).await;
                }
                Action::FailWithoutRunning { fence, took_over, poll } => {
                    return self.fail_without_running(job, fence, took_over, poll).await.into();
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
                Action::Drop(Redundant::Superseded) if job.phase == Phase::Work => {
                    return self.superseded_work(job).await.into();
                }
                Action::Drop(redundant) => return Disposition::Done(dropped(redundant)).into(),
                Action::BackOff { until_ms } => {
                    let why = if matches!(current, Seen::Committed { .. }) {
                        "just committed by another execution, which is sending it"
                    } else {
                        self.metrics.record(MetricEvent::LeaseContended);
                        "another execution holds the lease"
                    };
                    return self.come_back(job, until_ms + self.jitter_ms(), why).into();
                }
                Action::AwaitPoll { until_ms } => {
                    return self
                        .come_back(job, until_ms + self.jitter_ms(), "the provider's work is in progress")
                        .into();
                }
                Action::Leave => return self.leave_message(job).into(),
            }
        }
        self.retry(job, "the record kept changing while deciding".into()).into()
    }

    /// Takes the lease the table decided to take on the record as this delivery saw it. The
    /// store grants an acquire on what the record holds when the acquire arrives, which may
    /// have changed since: an expired lease seen at one moment may be a stored wait with its
    /// poll due at the next (a delivery frozen between its read and its acquire). Every other
    /// column of the table takes that lease too, but a standby primary starts no new work, so
    /// for it a lease granted on a record the table gives it no right to is given back unused
    /// (`keep_or_give_back`; seed 413998293349042 of the third fresh range: a drained primary
    /// polled a wait after deciding to take over an expired lease). `None`: given back.
    async fn acquire_as_decided(&self, job: &Job<'_>, activity: Activity) -> Option<Result<Seen, StoreError>> {
        if self.settings.role == Role::Primary && activity == Activity::Standby {
            let found = self.acquire_finding(job).await;
            return self.keep_or_give_back(job, activity, found).await;
        }
        Some(self.acquire(job).await)
    }

    /// The table's first step for `activity`: acquire, or read first (a standby primary).
    async fn first_look(&self, job: &Job<'_>, activity: Activity) -> Result<Seen, StoreError> {
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
        }
    }

    /// After an acquire made before the control answered: the record to decide on, or `None`
    /// where the acquire took a lease the table gives a standby primary no right to (new work:
    /// no record, another attempt's, a wait to poll), which was then given back (see
    /// `give_back`) and the message is left. A lease the table would have taken anyway (an
    /// expired one; anything near the deadline) stands, and so does every lease of an active
    /// region.
    async fn keep_or_give_back(
        &self,
        job: &Job<'_>,
        activity: Activity,
        found: Result<(Seen, Prior), StoreError>,
    ) -> Option<Result<Seen, StoreError>> {
        let (seen, prior) = match found {
            Ok(found) => found,
            Err(error) => return Some(Err(error)),
        };
        let Seen::Mine { fence, .. } = seen else {
            return Some(Ok(seen));
        };
        if activity == Activity::Active {
            return Some(Ok(seen));
        }
        let situation = self.situation(job, activity);
        let left = match prior {
            Prior::Known(prior) => {
                let before = Seen::of(prior.as_deref(), &job.viewer(), situation.now_ms, self.settings.skew_ms);
                if (self.decide)(&before, &situation) == Action::Acquire {
                    return Some(Ok(seen));
                }
                let expires_ms = situation.now_ms + self.settings.retention_ms;
                Some(left_record(&job.request.key, fence, prior.as_deref(), situation.now_ms, expires_ms))
            }
            Prior::Unknown if situation.deadline_near => return Some(Ok(seen)),
            Prior::Unknown => None,
        };
        self.give_back(job, fence, left).await;
        None
    }

    /// Gives back the lease `fence` took and ran nothing under: writes `left`, the record as the
    /// acquire found it ([`LeaseStore::leave`]), so every delivery after decides as if it had
    /// never been taken. Where what it found is not known (its reply was lost), the lease is
    /// ended instead (a heartbeat to 0): whoever comes next takes it over, told that an
    /// execution may have run, which is the safe side. A give-back that fails leaves the lease
    /// to end by itself: later deliveries wait for its end, nothing runs twice.
    async fn give_back(&self, job: &Job<'_>, fence: u64, left: Option<LeaseRecord>) {
        let (request, end_ms) = (job.request, job.budget.decide_end_ms());
        let outcome = match &left {
            Some(left) => {
                let applied = |record: &LeaseRecord| (record.state != LeaseState::Running).then_some(());
                self.write_under_fence(request, fence, end_ms, |_| self.store.leave(left), applied).await
            }
            None => {
                let write = |now_ms| self.store.heartbeat(&request.key, fence, 0, now_ms);
                self.write_under_fence(request, fence, end_ms, write, |record| {
                    (record.lease_until_ms == 0).then_some(())
                })
                .await
            }
        };
        match outcome {
            Ok(Some(_)) => tracing::info!(fence, "lease given back unused: this region is on standby"),
            Ok(None) => tracing::info!(fence, "lease already gone when giving it back"),
            Err(error) => tracing::warn!(fence, %error, "could not give the lease back; it ends by itself"),
        }
    }

    /// Leaves the message to the active region, to be looked at again later (standby).
    fn leave_message(&self, job: &Job<'_>) -> Disposition {
        let until_ms = self.clock.now_ms() + self.settings.standby_retry_ms() + self.jitter_ms();
        self.come_back(job, until_ms, "this region is on standby; the active region answers")
    }

    /// A primary's warning that `job`'s request has no failover: its deadline comes before the
    /// secondary's copy, delayed by the secondary queue, could still be answered. The
    /// secondary's copy then finds the deadline near or passed, so if this region fails, the
    /// request goes unanswered or FAILED.
    fn warn_if_no_failover(&self, job: &Job<'_>) {
        let settings = &self.settings;
        if job.budget.no_failover(job.attempt_sent_ms) {
            tracing::warn!(
                deadline_s = job.budget.deadline.at_ms.saturating_sub(job.attempt_sent_ms) / 1000,
                secondary_delay_s = settings.secondary_delay_s,
                deadline_margin_ms = settings.deadline_margin_ms,
                "this request's deadline comes before the secondary region could answer it: if this region fails, it has no failover; give the resource a ServiceTimeout of at least the secondary's delay plus the deadline margin"
            );
            self.metrics.record(MetricEvent::ShortServiceTimeout);
        }
    }

    /// Spreads messages that would otherwise come back together.
    fn jitter_ms(&self) -> u64 {
        self.random.below_or_equal(self.settings.jitter_ms_max())
    }

    /// A retry after a failure: the delay grows with the receive count, with full jitter.
    fn retry(&self, job: &Job<'_>, why: String) -> Disposition {
        let delay_ms = full_jitter_ms(
            self.random.as_ref(),
            job.receive_count.saturating_sub(1),
            RETRY_BACKOFF_BASE_MS,
            self.settings.retry_backoff_max_ms(),
        );
        self.come_back(job, self.clock.now_ms() + delay_ms, &why)
    }

    /// Brings the message back at `until_ms`, within the deadline and the backoff floor
    /// (`Budget::backoff_s`). Past the deadline, an unresolved message goes to the dead-letter
    /// queue instead. A message that hands a work past its answer is kept by the work's
    /// deadline once the answer's has passed (L1 for the work): whatever its answer came to,
    /// which the next look finds out, the copy may be the work's only one left.
    fn come_back(&self, job: &Job<'_>, until_ms: u64, why: &str) -> Disposition {
        let now_ms = self.clock.now_ms();
        let (budget, deadline_name) = match job.work_after {
            Some(work) if now_ms >= job.budget.deadline.at_ms => (work, Phase::Work.deadline_name()),
            _ => (job.budget, job.phase.deadline_name()),
        };
        let deadline = &budget.deadline;
        if now_ms >= deadline.at_ms {
            return Disposition::DeadLetter {
                why: format!("{}; {}, set by {}, has passed", why, deadline_name, deadline.describe()),
                cause: DeadLetterCause::DeadlinePassed,
            };
        }
        Disposition::Retry { delay_s: budget.backoff_s(until_ms, now_ms), why: why.to_owned() }
    }
}

/// One delivery being handled: the request and what is known about this delivery of it.
#[derive(Clone)]
struct Job<'a> {
    /// What this job answers: CloudFormation's request, or the work a resource handed past its
    /// answer (keyed and addressed as its own request, see `wait_condition`).
    request: &'a Request,
    /// CloudFormation's request, which the provider is told about (the same as `request`
    /// unless this job is a work).
    origin: &'a Request,
    /// Which answer this job gives.
    phase: Phase,
    receive_count: u32,
    /// When the request was sent, if the record said.
    sent_ms: Option<u64>,
    /// When the request was sent, or when this delivery began if the record did not say.
    attempt_sent_ms: u64,
    /// This execution, as recorded in the lease: region, invocation and a nonce.
    owner: String,
    /// The request's deadline, the invocation's, and every end this delivery's calls keep.
    budget: Budget<'a>,
    /// For the answer of a request that hands a work past it (`Phase::HandOver`): the work's
    /// budget, which keeps the message once the answer's deadline has passed (`come_back`).
    work_after: Option<Budget<'a>>,
}

impl Job<'_> {
    fn viewer(&self) -> Viewer<'_> {
        Viewer { fingerprint: &self.request.fingerprint, sent_ms: self.attempt_sent_ms, owner: &self.owner }
    }

    /// The status committed `bytes` carry: an answer's, or a signal's (FAILURE as FAILED).
    fn status_of(&self, bytes: &[u8]) -> Status {
        match self.phase {
            Phase::Work => match Signal::parse(bytes).map(|signal| signal.status) {
                Some(SignalStatus::Success) => Status::Success,
                _ => Status::Failed,
            },
            Phase::Answer | Phase::HandOver => crate::response::status_of(bytes),
        }
    }
}

/// Which answer a job gives.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Phase {
    /// CloudFormation's request, answered with what its provider comes to.
    Answer,
    /// A Create or Update of a resource with a wait condition: answered SUCCESS at once,
    /// without running the provider, which runs under the work instead.
    HandOver,
    /// The work of a resource with a wait condition: its provider runs and is polled here, and
    /// its answer is the signal PUT to the handle.
    Work,
}

impl Phase {
    /// The phase of CloudFormation's `request`: a Create or Update that declares a wait
    /// condition may hand its work over, unless it is an Update that keeps its handle, which
    /// no wait condition can be waiting on any more (CloudFormation does not wait again on a
    /// wait condition that completed): that one runs as an ordinary request. Whether a
    /// hand-over happens is decided when the answer is committed (`Worker::waits_on`).
    fn of(request: &Request) -> Self {
        use crate::wait_condition::WaitDeclared;
        let keeps_handle = match (&request.wait, &request.old_wait) {
            (WaitDeclared::Valid(spec), Some(old)) => spec.handle == old.handle,
            _ => false,
        };
        let hands_over = matches!(request.kind(), Some(RequestKind::Create | RequestKind::Update))
            && !matches!(request.wait, WaitDeclared::None)
            && !(request.kind() == Some(RequestKind::Update) && keeps_handle);
        if hands_over { Self::HandOver } else { Self::Answer }
    }

    /// Whose deadline this job keeps, for Reasons.
    fn deadline_name(self) -> &'static str {
        match self {
            Self::Work => "the work's deadline",
            Self::Answer | Self::HandOver => "the request's deadline",
        }
    }

    /// What this job's answer is called in log lines.
    fn answer_name(self) -> &'static str {
        match self {
            Self::Work => "signal",
            Self::Answer | Self::HandOver => "response",
        }
    }
}

/// What acting on a record came to: the disposition, the status of the answer this delivery
/// found delivered or delivered itself, if it did, and whether that answer handed the
/// resource's work to its wait condition.
struct Acted {
    disposition: Disposition,
    answered: Option<Status>,
    handed_over: bool,
}

impl Acted {
    fn answered(disposition: Disposition, status: Status, handed_over: bool) -> Self {
        Self { disposition, answered: Some(status), handed_over }
    }

    /// An answer this delivery committed as a hand-over (`work::handed_over`), if it was
    /// delivered.
    fn handed_over(disposition: Disposition) -> Self {
        Self { handed_over: true, ..disposition.into() }
    }
}

impl From<Disposition> for Acted {
    /// An answer this delivery committed and delivered carries its status in the disposition.
    fn from(disposition: Disposition) -> Self {
        let answered = match &disposition {
            Disposition::Done(Done::Answered { status, .. }) => Some(*status),
            _ => None,
        };
        Self { disposition, answered, handed_over: false }
    }
}

/// What a message the decision table found redundant comes to.
fn dropped(redundant: Redundant) -> Done {
    match redundant {
        Redundant::Duplicate => Done::Duplicate,
        Redundant::Superseded => Done::Superseded,
    }
}

/// The deadline of the work on `spec`'s handle of a request sent at `sent_ms`: the wait
/// condition's timeout counted from then (a wait condition that depends on the resource starts
/// its own count later, so this is the earlier end), or the handle's expiry.
fn work_deadline(sent_ms: u64, spec: &crate::wait_condition::WaitSpec) -> RequestDeadline {
    RequestDeadline::of_work(sent_ms, spec.timeout_s, spec.handle.presigned_expiry_ms())
}

/// What a panic said: its message when it has one (`panic!` with a string or a format).
pub fn panic_message(payload: &(dyn std::any::Any + Send)) -> String {
    payload
        .downcast_ref::<&str>()
        .map(|message| (*message).to_owned())
        .or_else(|| payload.downcast_ref::<String>().cloned())
        .unwrap_or_else(|| "a panic without a message".to_owned())
}

/// "Custom::Echo Create", for Reasons.
fn describe(request: &Request) -> String {
    format!(
        "{} {}",
        request.resource_type().unwrap_or("the resource"),
        request.kind().map(RequestKind::as_str).unwrap_or("request")
    )
}

/// The scope providers' fenced writes are keyed by: one per request.
pub fn fence_scope(request: &Request) -> String {
    crate::fingerprint::short_digest(&[&request.key.stack_id, &request.key.request_id])
}

#[cfg(test)]
pub(crate) mod tests;
