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

use std::future::Future;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::task::Poll;

use std::panic::AssertUnwindSafe;

use futures_util::FutureExt;
use futures_util::future::BoxFuture;
use tracing::Instrument;

use crate::clock::{Clock, within};
use crate::control::{ActivitySource, CachedActivity};
use crate::deadline::RequestDeadline;
use crate::decision::{Action, Activity, FirstStep, Role, Situation, decide, first_step};
use crate::delivery::{PutError, ResponseSink, put_with_retries};
use crate::fingerprint::hex_prefix;
use crate::lease::{
    Acquire, AcquireRequest, Conditional, LeaseRecord, LeaseState, LeaseStore, PollRecord, RequestLabel, Seen,
    StoreError, Viewer,
};
use crate::metrics::{MetricEvent, MetricsSink};
use crate::provider::{Fence, Progress, ProviderContext, ProviderError, Router, STATE_BYTES_MAX, Waiting};
use crate::random::{Random, full_jitter_ms};
use crate::request::{InputPolicy, Request, RequestKind, Undeliverable, decode};
use crate::response::{self, Outcome, ResponseBody, Status, foreign_text};
use crate::settings::BACKOFF_FLOOR_S_MAX;
pub use crate::settings::Settings;

/// The shortest call worth starting: with less time left, a call is not made at all.
const CALL_MS_MIN: u64 = 100;

/// The longest part of a Reason that comes from a provider (often an SDK's or a downstream
/// service's error text): enough to say what went wrong, never a page of HTML or HTTP headers.
const PROVIDER_REASON_CHARS_MAX: usize = 512;

/// The shortest provider run worth starting: with less of the invocation left after taking the
/// lease, the message is retried instead (the lease then expires and is taken over).
const RUN_MS_MIN: u64 = 1_000;

/// SQS refuses visibility timeouts above 12 hours.
pub const VISIBILITY_S_MAX: u32 = 43_200;

/// Decisions one delivery may take before it gives up and retries later: acquire, see the
/// record change under it, decide again.
const DECISIONS_MAX: u32 = 4;

/// The last poll of a wait is scheduled this long before the point where leases must end for
/// the deadline (`Job::lease_cap_ms`), so that it still has this long to run.
const LAST_POLL_RUN_MS: u64 = 5_000;

/// The longest part of a provider's last state quoted in a FAILED Reason.
const STATE_REASON_CHARS_MAX: usize = 256;

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
    /// The record's body: an SNS envelope or a bare request; `None` dead-letters the record.
    pub body: Option<&'a str>,
    /// SQS's ApproximateReceiveCount, 1 on first delivery.
    pub receive_count: u32,
    /// SQS's SentTimestamp (epoch ms): when the request was sent; a queue delay does not move
    /// it. `None` counts from now.
    pub sent_ms: Option<u64>,
}

/// A delivery's result with what it was about, for reports and logs.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Handled {
    /// `None` when the record could not be decoded.
    pub request: Option<RequestSummary>,
    /// What to do with the message.
    pub disposition: Disposition,
}

/// The identifying parts of a request.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RequestSummary {
    /// CloudFormation's StackId.
    pub stack_id: String,
    /// CloudFormation's RequestId.
    pub request_id: String,
    /// The resource's logical id in the template.
    pub logical_resource_id: String,
    /// Create, Update or Delete; `None` when the request did not say in a readable way.
    pub request_type: Option<RequestKind>,
    /// The ResourceType, e.g. `Custom::Echo`; `None` when the request could not be parsed.
    pub resource_type: Option<String>,
}

impl RequestSummary {
    /// The summary of `request`.
    pub fn of(request: &Request) -> Self {
        Self {
            stack_id: request.key.stack_id.to_string(),
            request_id: request.key.request_id.clone(),
            logical_resource_id: request.logical_resource_id.clone(),
            request_type: request.kind(),
            resource_type: request.resource_type().map(str::to_owned),
        }
    }
}

/// A delivery decoded, before it is handled ([`Worker::receive`]).
#[derive(Debug)]
pub struct Received<'a> {
    delivery: Delivery<'a>,
    decoded: Result<Box<Decoded>, Undeliverable>,
}

impl Received<'_> {
    /// What the delivery is about, if it could be decoded.
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
    /// The same, or when the delivery was received if none was known.
    attempt_sent_ms: u64,
    deadline: RequestDeadline,
}

/// What to do with the message after this delivery.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Disposition {
    /// The request needs nothing more from this message: delete it.
    Done(Done),
    /// Make the message visible again after `delay_s` and report it failed.
    Retry {
        /// The visibility timeout to set, in seconds: within SQS's limit, and bounded by the
        /// backoff floor and the request's deadline.
        delay_s: u32,
        /// Why the message comes back, for the logs.
        why: String,
    },
    /// Move the message to the dead-letter queue now: nobody can be answered (no usable
    /// ResponseURL, a refused sender), or the request's deadline has passed unanswered. Only
    /// these ever reach the DLQ before its deadline; SQS's own `maxReceiveCount` is a backstop
    /// (see `settings`).
    DeadLetter {
        /// Why the message cannot be answered, for the logs.
        why: String,
        /// Which of the two it is: a redrive skips undeliverable messages unless asked.
        cause: DeadLetterCause,
    },
}

/// Why a message goes to the dead-letter queue.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum DeadLetterCause {
    /// Nobody can be answered: no usable ResponseURL, a refused sender, unreadable input.
    /// Sending it again changes nothing.
    Undeliverable,
    /// The request's deadline passed before it was answered. A redriven copy still PUTs an
    /// answer that was committed but never delivered.
    DeadlinePassed,
}

impl DeadLetterCause {
    /// The spelling put on dead-lettered messages (`cfn-once-cause`).
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Undeliverable => "undeliverable",
            Self::DeadlinePassed => "deadline-passed",
        }
    }

    /// Parses [`DeadLetterCause::as_str`].
    pub fn parse(value: &str) -> Option<Self> {
        match value {
            "undeliverable" => Some(Self::Undeliverable),
            "deadline-passed" => Some(Self::DeadlinePassed),
            _ => None,
        }
    }
}

/// Why a message is finished with.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Done {
    /// This delivery ran the provider, committed and PUT.
    Answered {
        /// The fencing token the answer was committed under.
        fence: u64,
        /// Whether the answer was SUCCESS or FAILED.
        status: Status,
    },
    /// An earlier execution committed; this delivery PUT the stored bytes.
    Replayed {
        /// The fencing token the stored answer was committed under.
        fence: u64,
    },
    /// Committed and delivered before: a duplicate, dropped.
    Duplicate,
    /// A newer attempt with the same RequestId exists: a stale delivery, dropped.
    Superseded,
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
}

/// How a supervised provider run ended.
enum Run {
    Finished(Outcome),
    InProgress(Waiting),
    LeaseLost,
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
        }
    }

    /// The settings this worker runs with.
    pub fn settings(&self) -> &Settings {
        &self.settings
    }

    /// The clock this worker reads and sleeps on.
    pub fn clock(&self) -> &Arc<dyn Clock> {
        &self.clock
    }

    /// Handles one delivery of one SQS record.
    pub async fn handle(&self, delivery: Delivery<'_>, invocation: &Invocation) -> Disposition {
        self.handle_detailed(delivery, invocation).await.disposition
    }

    /// Handles one delivery and says which request it was about.
    pub async fn handle_detailed(&self, delivery: Delivery<'_>, invocation: &Invocation) -> Handled {
        self.handle_received(self.receive(delivery), invocation).await
    }

    /// Decodes a delivery and works out its request's deadline, before anything is done with it
    /// (the batch shortens the visibility of records near their deadline first).
    pub fn receive<'a>(&self, delivery: Delivery<'a>) -> Received<'a> {
        let decoded = decode(delivery.body, &self.input).map(|request| {
            // The earliest of the publish time and the copy's send times: a copy SNS delivered
            // late has no more time than CloudFormation gives.
            let sent_ms = match (request.published_ms, delivery.sent_ms) {
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
            Box::new(Decoded { request, sent_ms, attempt_sent_ms, deadline })
        });
        Received { delivery, decoded }
    }

    /// The visibility to give a received record now, in seconds, so that if its invocation dies
    /// the record comes back while its request can still be answered: `Some` for a record whose
    /// deadline margin begins within the queue's visibility timeout (a crash would hide it past
    /// that), `None` for every other.
    pub fn visibility_if_lost_s(&self, received: &Received<'_>, now_ms: u64) -> Option<u32> {
        let decoded = received.decoded.as_ref().ok()?;
        let deadline = &decoded.deadline;
        if now_ms >= deadline.at_ms {
            return None;
        }
        let latest_wake_ms = deadline.latest_wake_ms(self.settings.deadline_margin_ms);
        let visibility_ms = self.settings.visibility_timeout_s.saturating_mul(1000);
        if latest_wake_ms >= now_ms.saturating_add(visibility_ms) {
            return None;
        }
        let delay_s = u32::try_from(latest_wake_ms.saturating_sub(now_ms) / 1000).unwrap_or(u32::MAX);
        let delay_s = delay_s.max(self.backoff_floor_s());
        (u64::from(delay_s) < self.settings.visibility_timeout_s).then_some(delay_s)
    }

    /// Handles a received delivery and says which request it was about.
    pub async fn handle_received(&self, received: Received<'_>, invocation: &Invocation) -> Handled {
        let Received { delivery, decoded } = received;
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
        let disposition = self.process(&decoded, delivery, invocation).instrument(span.clone()).await;
        span.in_scope(|| match &disposition {
            Disposition::Done(done) => tracing::info!(?done, "message done"),
            Disposition::Retry { delay_s, why } => tracing::info!(delay_s, why, "message will be seen again"),
            Disposition::DeadLetter { why, cause } => {
                tracing::error!(why, cause = cause.as_str(), "message goes to the DLQ")
            }
        });
        Handled { request: Some(RequestSummary::of(request)), disposition }
    }

    async fn process(&self, decoded: &Decoded, delivery: Delivery<'_>, invocation: &Invocation) -> Disposition {
        let settings = &self.settings;
        let now_ms = self.clock.now_ms();
        let request = &decoded.request;
        let job = Job {
            request,
            invocation,
            receive_count: delivery.receive_count,
            sent_ms: decoded.sent_ms,
            attempt_sent_ms: decoded.attempt_sent_ms,
            deadline: decoded.deadline,
            owner: format!(
                "{}/{}/{}",
                settings.region,
                invocation.id,
                hex_prefix(&self.random.next_u64().to_be_bytes(), 8)
            ),
            work_end_ms: settings.work_end_ms(invocation.deadline_ms),
            answer_ms: settings.answer_ms(),
        };
        let activity = match settings.role {
            Role::Primary => {
                if delivery.receive_count <= 1 {
                    self.warn_if_no_failover(&job);
                }
                // A control that answers too slowly is one that failed: the last known answer
                // stands (`CachedActivity::activity_within`).
                let timeout_ms = settings.store_call_timeout_ms.min(job.time_left_ms(now_ms));
                self.control.activity_within(timeout_ms).await
            }
            // A secondary's decisions do not depend on it: see `decision`.
            Role::Secondary => Activity::Standby,
        };

        let mut seen = match first_step(settings.role, activity) {
            FirstStep::Acquire => self.acquire(&job).await,
            FirstStep::Read => self.read(&job).await,
        };
        for _ in 0..DECISIONS_MAX {
            let current = match seen {
                Ok(current) => current,
                Err(error) => return self.retry(&job, format!("could not reach the lease store: {error}")),
            };
            let now_ms = self.clock.now_ms();
            let deadline_near = job.deadline.is_near(now_ms, settings.deadline_margin_ms);
            let situation = Situation {
                role: settings.role,
                activity,
                deadline_near,
                now_ms,
                delivery_grace_ms: settings.put.attempt_timeout_ms,
                poll_lag_ms: job.poll_lag_ms(settings, now_ms),
            };
            match decide(&current, &situation) {
                Action::Acquire => seen = self.acquire(&job).await,
                Action::Run { fence, took_over, interrupted, poll } => {
                    let took_over_from = interrupted.then(|| fence.saturating_sub(1));
                    return self.run_and_answer(&job, fence, took_over, took_over_from, poll).await;
                }
                Action::FailWithoutRunning { fence, took_over, poll } => {
                    return self.fail_without_running(&job, fence, took_over, poll).await;
                }
                Action::Deliver { fence, response } => {
                    tracing::Span::current().record("fence", fence);
                    tracing::info!("found a committed response that was never delivered; sending the stored bytes");
                    return match self.deliver(&job, fence, &response).await {
                        Ok(_) => Disposition::Done(Done::Replayed { fence }),
                        Err(error) => self.retry(&job, error.to_string()),
                    };
                }
                Action::Drop(done) => return Disposition::Done(done),
                Action::BackOff { until_ms } => {
                    let why = if matches!(current, Seen::Committed { .. }) {
                        "just committed by another execution, which is sending it"
                    } else {
                        self.metrics.record(MetricEvent::LeaseContended);
                        "another execution holds the lease"
                    };
                    return self.come_back(&job, until_ms + self.jitter_ms(), why);
                }
                Action::AwaitPoll { until_ms } => {
                    return self.come_back(&job, until_ms + self.jitter_ms(), "the provider's work is in progress");
                }
                Action::Leave => {
                    let until_ms = self.clock.now_ms() + u64::from(settings.standby_retry_s) * 1000 + self.jitter_ms();
                    return self.come_back(&job, until_ms, "this region is on standby; the active region answers");
                }
            }
        }
        self.retry(&job, "the record kept changing while deciding".into())
    }

    /// Commits and PUTs FAILED without running the provider: the request's deadline leaves no
    /// time to run it. With work in progress, the Reason says how long it waited.
    async fn fail_without_running(
        &self,
        job: &Job<'_>,
        fence: u64,
        took_over: bool,
        poll: Option<PollRecord>,
    ) -> Disposition {
        tracing::Span::current().record("fence", fence);
        let now_ms = self.clock.now_ms();
        let reason = match &poll {
            Some(poll) => still_in_progress(job, poll, now_ms),
            None => format!(
                "no region could run {} before the request's deadline, set by {}; answering FAILED rather than letting CloudFormation wait",
                describe(job.request),
                job.deadline.describe(),
            ),
        };
        let took_over = took_over || poll.is_some();
        tracing::error!(reason, took_over, "deadline near and nothing committed");
        // An execution this one took over from may have run the provider: its rollback Delete
        // must then reach the provider (see `response::build`).
        let outcome = if took_over { Outcome::failed(reason) } else { Outcome::refused(reason) };
        self.commit_and_deliver(job, fence, outcome).await
    }

    /// A primary's warning that `job`'s request has no failover: its deadline comes before the
    /// secondary's copy, delayed by the secondary queue, could still be answered. The
    /// secondary's copy then finds the deadline near or passed, so if this region fails, the
    /// request goes unanswered or FAILED.
    fn warn_if_no_failover(&self, job: &Job<'_>) {
        let settings = &self.settings;
        let secondary_answers_from_ms =
            job.attempt_sent_ms + settings.secondary_delay_s * 1000 + settings.deadline_margin_ms;
        if job.deadline.at_ms < secondary_answers_from_ms {
            tracing::warn!(
                deadline_s = job.deadline.at_ms.saturating_sub(job.attempt_sent_ms) / 1000,
                secondary_delay_s = settings.secondary_delay_s,
                deadline_margin_ms = settings.deadline_margin_ms,
                "this request's deadline comes before the secondary region could answer it: if this region fails, it has no failover; give the resource a ServiceTimeout of at least the secondary's delay plus the deadline margin"
            );
            self.metrics.record(MetricEvent::ShortServiceTimeout);
        }
    }

    /// Takes the lease, or reports the record that refused it. `Seen::Mine` on success.
    async fn acquire(&self, job: &Job<'_>) -> Result<Seen, StoreError> {
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
                lease_until_ms: job.lease_until_ms(settings, now_ms),
                skew_ms: settings.skew_ms,
                expires_ms: now_ms + settings.retention_ms,
                poll_lag_ms: job.poll_lag_ms(settings, now_ms),
                label: RequestLabel {
                    logical_resource_id: request.logical_resource_id.clone(),
                    request_type: request.kind().map(RequestKind::as_str).unwrap_or_default().to_owned(),
                    resource_type: request.resource_type().unwrap_or_default().to_owned(),
                },
            };
            match self.store_call(self.store.acquire(&acquire), job.decide_end_ms()).await {
                Ok(Acquire::Acquired { fence, took_over, interrupted, poll }) => {
                    let polls = poll.as_ref().map(|poll| poll.polls);
                    tracing::info!(fence, took_over, polls, "lease acquired");
                    self.metrics.record(MetricEvent::LeaseAcquired { fence, poll: poll.is_some() });
                    return Ok(Seen::Mine { fence, took_over, interrupted, poll });
                }
                // Includes `Mine`: our own earlier attempt was applied and its reply lost.
                Ok(Acquire::Refused(record)) => {
                    return Ok(record.seen_by(&job.viewer(), now_ms, settings.skew_ms));
                }
                Err(StoreError::Ambiguous(why)) => {
                    tracing::warn!(why, "acquire outcome unknown; reading the record back");
                    if let Ok(Some(record)) = self.store_call(self.store.read(&request.key), job.decide_end_ms()).await
                        && record.owner == owner
                        && record.state == LeaseState::Running
                    {
                        let poll = record.poll_for(&request.fingerprint);
                        // What the record held before this acquire is not known: a takeover may
                        // have interrupted an execution.
                        let took_over = record.fence > 1;
                        return Ok(Seen::Mine { fence: record.fence, took_over, interrupted: took_over, poll });
                    }
                    last = StoreError::Ambiguous(why);
                }
                Err(error @ StoreError::Permanent(_)) => return Err(error),
                Err(error) => last = error,
            }
            if !self.store_backoff(attempt, job.decide_end_ms()).await {
                break;
            }
        }
        Err(last)
    }

    /// A consistent read of the record, classified for this delivery.
    async fn read(&self, job: &Job<'_>) -> Result<Seen, StoreError> {
        let mut last = StoreError::Transient("no attempt was made".into());
        for attempt in 1..=self.settings.store_attempts_max.max(1) {
            match self.store_call(self.store.read(&job.request.key), job.decide_end_ms()).await {
                Ok(record) => {
                    let now_ms = self.clock.now_ms();
                    return Ok(Seen::of(record.as_ref(), &job.viewer(), now_ms, self.settings.skew_ms));
                }
                Err(error @ StoreError::Permanent(_)) => return Err(error),
                Err(error) => last = error,
            }
            if !self.store_backoff(attempt, job.decide_end_ms()).await {
                break;
            }
        }
        Err(last)
    }

    async fn run_and_answer(
        &self,
        job: &Job<'_>,
        fence: u64,
        took_over: bool,
        took_over_from: Option<u64>,
        poll: Option<PollRecord>,
    ) -> Disposition {
        tracing::Span::current().record("fence", fence);
        let deadline = &job.deadline;
        let settings = &self.settings;
        // The provider stops where this execution's lease must end for the request's deadline
        // (a taker-over then still has the margin to answer), or, for the invocation, early
        // enough for the answer (commit, PUT, record) and the batch's tail.
        let request_end_ms = job.lease_cap_ms(settings);
        let invocation_end_ms = job.work_end_ms.saturating_sub(job.answer_ms);
        let (run_end_ms, end, kept_ms, advice) = if request_end_ms <= invocation_end_ms {
            let kept_ms = settings.lease_end_before_deadline_ms();
            (request_end_ms, format!("the request's deadline, set by {}", deadline.describe()), kept_ms, "")
        } else {
            let advice = "; raise the function timeout or make the provider faster";
            let kept_ms = job.invocation.deadline_ms.saturating_sub(invocation_end_ms);
            (invocation_end_ms, "the Lambda invocation's deadline".to_owned(), kept_ms, advice)
        };
        let now_ms = self.clock.now_ms();
        if request_end_ms <= invocation_end_ms && run_end_ms <= now_ms {
            // The lease was taken where no lease may reach any more: answer without running.
            return self.fail_without_running(job, fence, took_over, poll).await;
        }
        if request_end_ms > invocation_end_ms && run_end_ms < now_ms + RUN_MS_MIN {
            // Taking the lease used up this invocation (a slow store): rather than answer FAILED
            // for want of time that a later invocation has, let the lease expire and be taken over.
            return self.retry(job, "too little of this invocation was left to run the provider".into());
        }
        let reason = format!(
            "{} did not finish before {end} (less {} s kept to answer){advice}",
            describe(job.request),
            kept_ms.div_ceil(1000)
        );
        let outcome = match self.supervise(job, fence, took_over_from, poll.as_ref(), run_end_ms, reason).await {
            Run::Finished(outcome) => outcome,
            Run::InProgress(waiting) => return self.wait(job, fence, waiting, poll.as_ref()).await,
            Run::LeaseLost => {
                self.metrics.record(MetricEvent::FenceConflict);
                return self.retry(job, "the lease was taken over while the provider ran; nothing committed".into());
            }
        };
        self.commit_and_deliver(job, fence, outcome).await
    }

    /// Builds the body, commits it under `fence`, and PUTs what was committed.
    async fn commit_and_deliver(&self, job: &Job<'_>, fence: u64, outcome: Outcome) -> Disposition {
        let body = response::build(job.request, outcome);
        // The commit leaves room for one PUT attempt and the delivery record.
        let commit_end_ms =
            job.work_end_ms.saturating_sub(self.settings.put.attempt_timeout_ms + self.settings.store_call_timeout_ms);
        let committed = match self.commit(job.request, fence, &body, commit_end_ms).await {
            Ok(Some(bytes)) => bytes,
            Ok(None) => {
                self.metrics.record(MetricEvent::FenceConflict);
                return self.retry(job, "the lease was taken over before the commit; nothing sent".into());
            }
            Err(error) => return self.retry(job, format!("could not commit the response: {error}")),
        };
        tracing::info!(bytes = committed.len(), "response committed");
        match self.deliver(job, fence, &committed).await {
            Ok(status) => Disposition::Done(Done::Answered { fence, status }),
            Err(error) => self.retry(job, error.to_string()),
        }
    }

    /// Stores the provider's work in progress under `fence`, which releases the lease, and brings
    /// the message back when the next poll is due. Answers FAILED instead when the state is too
    /// big to store, or when no further poll fits before the deadline margin.
    async fn wait(&self, job: &Job<'_>, fence: u64, waiting: Waiting, previous: Option<&PollRecord>) -> Disposition {
        let (settings, request) = (&self.settings, job.request);
        let now_ms = self.clock.now_ms();
        let state = waiting.state.to_string();
        let polls = previous.map_or(0, |poll| poll.polls + 1);
        let waiting_since_ms = previous.map_or(now_ms, |poll| poll.waiting_since_ms);
        if state.len() > STATE_BYTES_MAX {
            let reason = format!(
                "{} answered in progress with a state of {} bytes of JSON; at most {STATE_BYTES_MAX} bytes are kept between polls",
                describe(request),
                state.len()
            );
            return self.commit_and_deliver(job, fence, Outcome::failed(reason)).await;
        }
        let floor_ms = u64::from(self.backoff_floor_s()) * 1000;
        let after_ms = u64::try_from(waiting.poll_after.as_millis()).unwrap_or(u64::MAX).max(floor_ms);
        let last_poll_ms = job.lease_cap_ms(settings).saturating_sub(LAST_POLL_RUN_MS);
        let poll = PollRecord {
            fingerprint: request.fingerprint.clone(),
            state,
            poll_at_ms: now_ms.saturating_add(after_ms).min(last_poll_ms),
            waiting_since_ms,
            polls,
        };
        if poll.poll_at_ms < now_ms + floor_ms {
            let reason = still_in_progress(job, &poll, now_ms);
            tracing::error!(reason, "no poll fits before the deadline; answering FAILED");
            return self.commit_and_deliver(job, fence, Outcome::failed(reason)).await;
        }
        let stored = self
            .write_under_fence(
                request,
                fence,
                job.work_end_ms,
                |now_ms| self.store.wait(&request.key, fence, &poll, now_ms),
                |record| (record.state == LeaseState::Waiting && record.poll.as_ref() == Some(&poll)).then_some(()),
            )
            .await;
        match stored {
            Ok(Some(_)) => {
                let poll_in_s = poll.poll_at_ms.saturating_sub(now_ms).div_ceil(1000);
                tracing::info!(polls, poll_in_s, "provider in progress; lease released until the next poll");
                self.metrics.record(MetricEvent::Waiting);
                self.come_back(job, poll.poll_at_ms, "the provider's work is in progress; polling it again")
            }
            Ok(None) => {
                self.metrics.record(MetricEvent::FenceConflict);
                self.retry(job, "the lease was taken over before the work in progress was stored".into())
            }
            Err(error) => self.retry(job, format!("could not store the provider's work in progress: {error}")),
        }
    }

    /// Runs the provider (with retries of transient errors) while heartbeating the lease, until
    /// it finishes, the lease is lost, or `run_deadline_ms` passes (then the answer is FAILED
    /// with `late_reason`). With `poll`, the provider's work in progress is polled instead.
    async fn supervise(
        &self,
        job: &Job<'_>,
        fence: u64,
        took_over_from: Option<u64>,
        poll: Option<&PollRecord>,
        run_deadline_ms: u64,
        late_reason: String,
    ) -> Run {
        let request = job.request;
        let lease_cap_ms = job.lease_cap_ms(&self.settings);
        let lease_lost = Arc::new(AtomicBool::new(false));
        let context = ProviderContext::new(
            Fence { scope: fence_scope(request), value: fence },
            request,
            request.resource_type().unwrap_or_default(),
            run_deadline_ms,
            Arc::clone(&self.clock),
            Arc::clone(&lease_lost),
        )
        .taking_over_from(took_over_from);
        let work = self.run_provider(request, &context, poll);
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
                // Never past the request's lease cap, however long the provider runs.
                let lease_until_ms = (now_ms + self.settings.lease_ms).min(lease_cap_ms.max(now_ms));
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
            Some(Ok(Progress::Finished(outcome))) => Run::Finished(outcome),
            Some(Ok(Progress::InProgress(waiting))) => Run::InProgress(waiting),
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

    /// The provider call (or poll), transient errors retried for `provider_retry_ms`. `Err(())` is
    /// reserved for the supervisor's lease-lost signal and never produced here.
    async fn run_provider(
        &self,
        request: &Request,
        context: &ProviderContext,
        poll: Option<&PollRecord>,
    ) -> Result<Progress, ()> {
        let label = describe(request);
        let failed = |reason: String| Ok(Progress::Finished(Outcome::failed(reason)));
        let started_ms = self.clock.now_ms();
        let mut attempt = 0u32;
        loop {
            attempt += 1;
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
                Ok(progress) => return Ok(progress),
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
                    let out_of_budget = next_ms.saturating_sub(started_ms) > self.settings.provider_retry_ms;
                    if out_of_budget || next_ms >= context.deadline_ms {
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

    /// Commits `body` under `fence`, with every call ended by `end_ms`. `Some` holds the
    /// committed bytes; `None` means the lease was lost.
    async fn commit(
        &self,
        request: &Request,
        fence: u64,
        body: &[u8],
        end_ms: u64,
    ) -> Result<Option<Vec<u8>>, StoreError> {
        self.write_under_fence(
            request,
            fence,
            end_ms,
            |now_ms| self.store.commit(&request.key, fence, body, now_ms),
            // Our commit was applied; its reply was lost.
            |record| record.response.clone().filter(|_| record.state == LeaseState::Committed),
        )
        .await
        .map(|written| written.map(|stored| stored.unwrap_or_else(|| body.to_vec())))
    }

    /// One write that holds only under `fence` (commit, wait), retried with backoff, every call
    /// ended by `end_ms`. An unknown outcome is resolved from the record: `applied` says whether
    /// the record, still under our fence, shows this write (`Some`), and a record under another
    /// fence means the lease was lost (`Ok(None)`). `Ok(Some(None))` is a plain success.
    async fn write_under_fence<T, F>(
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
                Err(error @ StoreError::Permanent(_)) => return Err(error),
                Err(error) => last = error,
            }
            if !self.store_backoff(attempt, end_ms).await {
                break;
            }
        }
        Err(last)
    }

    /// PUTs the committed bytes, then records the delivery (best effort: a duplicate that
    /// finds it unrecorded only PUTs the same bytes again). Returns the status the body carries.
    async fn deliver(&self, job: &Job<'_>, fence: u64, committed: &[u8]) -> Result<Status, PutError> {
        // The last PUT attempt ends in time to record the delivery.
        let stop_at_ms = job.work_end_ms.saturating_sub(self.settings.store_call_timeout_ms);
        let put = put_with_retries(
            self.sink.as_ref(),
            &job.request.response_url,
            committed,
            self.settings.put,
            stop_at_ms,
            self.clock.as_ref(),
            self.random.as_ref(),
        )
        .await;
        let attempts = match put {
            Ok(attempts) => attempts,
            Err(error) => {
                if matches!(error, PutError::Permanent(_)) {
                    self.metrics.record(MetricEvent::DlqBound);
                }
                return Err(error);
            }
        };
        let now_ms = self.clock.now_ms();
        let status = ResponseBody::parse(committed).map(|b| b.status).unwrap_or(Status::Failed);
        let latency_ms = job.sent_ms.map(|sent_ms| now_ms.saturating_sub(sent_ms));
        self.metrics.record(MetricEvent::ResponseSent { status, latency_ms });
        tracing::info!(attempts, latency_ms, ?status, "response delivered");
        match self.store_call(self.store.mark_delivered(&job.request.key, fence, now_ms), job.work_end_ms).await {
            Ok(Conditional::Applied) => {}
            Ok(Conditional::Refused(_)) => tracing::info!("a newer attempt replaced the record; delivery not recorded"),
            Err(error) => {
                tracing::warn!(%error, "could not record the delivery; a duplicate would PUT the same bytes again")
            }
        }
        Ok(status)
    }

    /// One lease-store call, given up at its timeout or at `end_ms`, whichever is first; not
    /// made at all when less than a useful slice of time is left.
    async fn store_call<T>(
        &self,
        call: impl Future<Output = Result<T, StoreError>>,
        end_ms: u64,
    ) -> Result<T, StoreError> {
        let left_ms = end_ms.saturating_sub(self.clock.now_ms());
        if left_ms < CALL_MS_MIN {
            return Err(StoreError::Transient("no time was left in this invocation for a lease-store call".into()));
        }
        let timeout_ms = self.settings.store_call_timeout_ms.min(left_ms);
        within(self.clock.as_ref(), timeout_ms, call)
            .await
            .unwrap_or_else(|| Err(StoreError::Ambiguous(format!("no answer within {timeout_ms} ms"))))
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
        if self.clock.now_ms() + delay_ms + CALL_MS_MIN > end_ms {
            return false;
        }
        self.clock.sleep_ms(delay_ms).await;
        true
    }

    /// Spreads messages that would otherwise come back together.
    fn jitter_ms(&self) -> u64 {
        self.random.below_or_equal(self.settings.jitter_ms_max())
    }

    /// The backoff floor in seconds (see `settings`).
    fn backoff_floor_s(&self) -> u32 {
        let cap_s = self.settings.retry_delay_s_max.clamp(1, VISIBILITY_S_MAX);
        self.settings.backoff_floor_s().unwrap_or(BACKOFF_FLOOR_S_MAX).clamp(1, cap_s)
    }

    /// A retry after a failure: the delay grows with the receive count, with full jitter.
    fn retry(&self, job: &Job<'_>, why: String) -> Disposition {
        let delay_ms = full_jitter_ms(
            self.random.as_ref(),
            job.receive_count.saturating_sub(1),
            1_000,
            u64::from(self.settings.retry_delay_s_max) * 1000,
        );
        self.come_back(job, self.clock.now_ms() + delay_ms, &why)
    }

    /// Brings the message back at `until_ms`, but never later than the deadline allows (with
    /// time left to answer), and never sooner than the backoff floor, which keeps the receives
    /// before the deadline within the queue's `maxReceiveCount` (see `settings`). The one
    /// exception is the wait that ends exactly where the deadline margin begins, so a request
    /// nobody can run is still answered FAILED in it. Past the deadline, an unresolved message
    /// goes to the dead-letter queue instead.
    fn come_back(&self, job: &Job<'_>, until_ms: u64, why: &str) -> Disposition {
        let now_ms = self.clock.now_ms();
        if now_ms >= job.deadline.at_ms {
            return Disposition::DeadLetter {
                why: format!("{}; the request's deadline, set by {}, has passed", why, job.deadline.describe()),
                cause: DeadLetterCause::DeadlinePassed,
            };
        }
        Disposition::Retry { delay_s: self.backoff_s(job, until_ms, now_ms), why: why.to_owned() }
    }

    /// The visibility delay that brings a message back at `until_ms`, under the rules of
    /// [`Worker::come_back`].
    fn backoff_s(&self, job: &Job<'_>, until_ms: u64, now_ms: u64) -> u32 {
        let settings = &self.settings;
        let cap_s = settings.retry_delay_s_max.clamp(1, VISIBILITY_S_MAX);
        let floor_s = self.backoff_floor_s();
        let seconds = |ms: u64| u32::try_from(ms.div_ceil(1000)).unwrap_or(cap_s);
        let latest_wake_ms = job.deadline.latest_wake_ms(settings.deadline_margin_ms);
        if now_ms < latest_wake_ms {
            let until_ms = until_ms.min(latest_wake_ms);
            let to_margin_s = seconds(latest_wake_ms - now_ms).max(1);
            return seconds(until_ms.saturating_sub(now_ms)).clamp(floor_s.min(to_margin_s), cap_s);
        }
        // Inside the margin: look again at the floor, or when asked if that is sooner than the
        // deadline's end; the next look past the deadline dead-letters an unresolved message.
        let to_deadline_s = seconds(job.deadline.at_ms.saturating_sub(now_ms)).max(1);
        seconds(until_ms.saturating_sub(now_ms)).min(to_deadline_s).clamp(floor_s, cap_s)
    }
}

/// One delivery being handled: the request and what is known about this delivery of it.
struct Job<'a> {
    request: &'a Request,
    invocation: &'a Invocation,
    receive_count: u32,
    /// When the request was sent, if the record said.
    sent_ms: Option<u64>,
    /// When the request was sent, or when this delivery began if the record did not say.
    attempt_sent_ms: u64,
    deadline: RequestDeadline,
    /// This execution, as recorded in the lease: region, invocation and a nonce.
    owner: String,
    /// When this delivery's own calls must have ended: the invocation's deadline less the
    /// batch's tail (`Settings::work_end_ms`).
    work_end_ms: u64,
    /// Time an answer needs once the provider stops (`Settings::answer_ms`).
    answer_ms: u64,
}

impl Job<'_> {
    /// The latest a lease of this request may end, on the holder's clock: the deadline less the
    /// deadline margin and the skew margin. A taker-over sees it expired where the margin
    /// begins, with the margin's time left to answer FAILED; no lease or heartbeat reaches past
    /// it (L1).
    fn lease_cap_ms(&self, settings: &Settings) -> u64 {
        // A millisecond less: a lease counts as expired once it ended more than the skew margin
        // ago, and that must be true at the margin's first moment.
        self.deadline.at_ms.saturating_sub(settings.lease_end_before_deadline_ms()).saturating_sub(1)
    }

    /// The end of a lease taken or extended at `now_ms`: a lease's length, cut at the cap. Past
    /// the cap (a delivery answering inside the margin), just long enough for the answer: a
    /// crash there cannot be made up for in time anyway, and a lease keeps two answering
    /// deliveries from taking it from each other in turn.
    fn lease_until_ms(&self, settings: &Settings, now_ms: u64) -> u64 {
        let cap_ms = self.lease_cap_ms(settings);
        if now_ms < cap_ms {
            (now_ms + settings.lease_ms).min(cap_ms)
        } else {
            now_ms + settings.lease_ms.min(settings.answer_ms())
        }
    }

    /// Store calls made while deciding end in time for an answer to follow.
    fn decide_end_ms(&self) -> u64 {
        self.work_end_ms.saturating_sub(self.answer_ms)
    }

    /// Time left for this delivery's own calls.
    fn time_left_ms(&self, now_ms: u64) -> u64 {
        self.work_end_ms.saturating_sub(now_ms)
    }

    fn viewer(&self) -> Viewer<'_> {
        Viewer { fingerprint: &self.request.fingerprint, sent_ms: self.attempt_sent_ms, owner: &self.owner }
    }

    /// The lag this delivery gives a due poll: the region's own, none near the deadline.
    fn poll_lag_ms(&self, settings: &Settings, now_ms: u64) -> u64 {
        if self.deadline.is_near(now_ms, settings.deadline_margin_ms) { 0 } else { settings.poll_lag_ms() }
    }
}

/// The FAILED Reason for work still in progress at the deadline: how long it waited, how many
/// polls, and the provider's last state (bounded, markup stripped).
fn still_in_progress(job: &Job<'_>, poll: &PollRecord, now_ms: u64) -> String {
    format!(
        "{} was still in progress when the request's deadline, set by {}, came near: waited {} s over {} polls; last state: {}",
        describe(job.request),
        job.deadline.describe(),
        now_ms.saturating_sub(poll.waiting_since_ms) / 1000,
        poll.polls,
        foreign_text(&poll.state, STATE_REASON_CHARS_MAX)
    )
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
#[path = "worker_tests.rs"]
mod tests;
