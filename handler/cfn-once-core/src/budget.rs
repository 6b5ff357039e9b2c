//! The time budget: every deadline and backoff the protocol computes, in one place, so that
//! "when must this call end" and "when does this message come back" each have one answer.
//!
//! Two budgets are computed here rather than configured, because a guess in either breaks a
//! guarantee on the deployed queues:
//!
//! * **Time within an invocation.** Lambda kills an invocation at its deadline and a killed
//!   invocation fails its whole batch, so every call a delivery makes must end before it. The
//!   end of an invocation is split into phases, each long enough for the calls it holds at their
//!   own timeouts: the provider stops [`Settings::reserve_ms`] before the deadline; then the
//!   commit (one attempt and one read-back), one PUT attempt and the delivery record follow;
//!   [`Settings::batch_tail_ms`] is kept for the batch's SQS calls, which run concurrently with
//!   one timeout.
//! * **Receives before the deadline.** Every receive of a message counts towards its queue's
//!   `maxReceiveCount`, and a message received that many times goes to the dead-letter queue,
//!   answered or not. [`Settings::backoff_floor_s`] is the shortest backoff that lets a message be
//!   seen until its request's deadline ceiling within that budget, so a copy reaches the DLQ only
//!   when its request's deadline has passed (or nobody can be answered, which the handler moves
//!   there itself). The queue's `maxReceiveCount` comes from the same template value as
//!   `CFN_ONCE_MAX_RECEIVE_COUNT`, and the configuration refuses a count too small for the
//!   ceiling.
//!
//! One delivery's ends, from its request's deadline and its invocation's, are a `Budget`: when
//! deciding must stop, where every lease of the request ends at the latest (the lease cap), when
//! the provider must stop, when the commit and the PUT must give up, when the next poll comes,
//! and how long a message waits before it is seen again. Invariants kept here: every call of a
//! delivery ends by the invocation's deadline less the batch's tail; no lease or heartbeat
//! reaches past the lease cap, where a taker-over still has the deadline margin to answer
//! (L1); and no backoff wakes a message past the point where it can still be answered, nor
//! (but for the one wait that ends where the deadline margin begins) sooner than the backoff
//! floor.
//!
//! Everything here is arithmetic on plain numbers and [`Settings`]: no clock, no randomness, no
//! I/O, nothing async. The worker reads the time and draws the jitter, then asks here.

use crate::deadline::RequestDeadline;
use crate::settings::Settings;
use crate::vocabulary::Role;

/// Slack at the very end of an invocation for returning the batch response and writing metrics.
pub const RETURN_SLACK_MS: u64 = 500;

/// Receives a message may take before its deadline beyond those its own backoffs schedule: SQS's
/// occasional second delivery of a message, the one backoff shortened to reach the deadline
/// margin, and the receive that finds the deadline passed.
pub const RECEIVES_SPARE: u32 = 20;

/// The longest backoff floor accepted: a floor longer than this means the queue's
/// `maxReceiveCount` is far too small for the deadline ceiling, and quick retries (a throttled
/// store, a lost reply) would wait minutes.
pub const BACKOFF_FLOOR_S_MAX: u32 = 60;

/// SQS refuses visibility timeouts above 12 hours.
pub const VISIBILITY_S_MAX: u32 = 43_200;

/// The shortest call worth starting: with less time left, a call is not made at all.
const CALL_MS_MIN: u64 = 100;

/// The shortest provider run worth starting: with less of the invocation left after taking the
/// lease, the message is retried instead (the lease then expires and is taken over).
const RUN_MS_MIN: u64 = 1_000;

/// The last poll of a wait is scheduled this long before the lease cap
/// ([`Budget::lease_cap_ms`]), so that it still has this long to run.
const LAST_POLL_RUN_MS: u64 = 5_000;

/// The base of a failed delivery's backoff, which doubles with every receive.
pub(crate) const RETRY_BACKOFF_BASE_MS: u64 = 1_000;

/// The longest deadline margin of a request, as a divisor of its time: a quarter. The deadline
/// margin (20 s by default) is kept whole for a request of four times it (80 s) or more; a
/// request with less time keeps a quarter of it (and the skew margin, or as much as that
/// quarter if less), so that a `ServiceTimeout` of a few seconds leaves half of it or more to
/// run the provider rather than a fixed margin eating all of it.
pub const KEPT_SHARE_DIVISOR: u64 = 4;

/// The most of a request's time the secondary leaves to the primary before starting the
/// request itself, as a divisor: a fifth, and never more than `CFN_ONCE_HEAD_START_S`
/// ([`Settings::head_start_ms`]).
pub const HEAD_START_SHARE_DIVISOR: u64 = 5;

/// Time the secondary is allowed to answer in once it starts a request the primary never
/// took, when judging whether a request has failover ([`Budget::no_failover`]): an acquire,
/// a provider that answers in about a second, a commit and a PUT, as they take on AWS.
const FAILOVER_ANSWER_MS: u64 = 2_000;

impl Settings {
    /// Time a delivery that takes over near the deadline needs to answer: the acquire, then
    /// what any answer needs ([`Settings::answer_ms`]). The deadline margin must exceed it.
    pub fn take_over_answer_ms(&self) -> u64 {
        self.store_call_timeout_ms + self.answer_ms()
    }

    /// How long before `deadline` every lease of its request ends at the latest, on the
    /// holder's clock: the request's deadline margin ([`Settings::deadline_margin_for_ms`])
    /// and the skew margin. A taker-over sees the lease expired where the margin begins, and
    /// the margin holds the time it needs to answer, so a holder crashing just before then
    /// still leaves time to answer FAILED. The skew margin is kept whole as long as the
    /// deadline margin is at least twice as long, since a taker-over waits it whole: a
    /// request of a few seconds keeps half its margin for skew (its copies come back a second
    /// apart at best, so it has no time for a takeover anyway, and its provider the time).
    pub fn lease_end_before_deadline_ms(&self, deadline: &RequestDeadline) -> u64 {
        let margin_ms = self.deadline_margin_for_ms(deadline);
        margin_ms + self.skew_ms.min(margin_ms / 2)
    }

    /// The deadline margin of `deadline`'s request: `CFN_ONCE_DEADLINE_MARGIN_MS`, or a
    /// quarter of the request's time if that is less ([`KEPT_SHARE_DIVISOR`]). Inside it,
    /// whoever sees the request uncommitted answers FAILED at once.
    pub fn deadline_margin_for_ms(&self, deadline: &RequestDeadline) -> u64 {
        if !self.proportioned_margins {
            return self.deadline_margin_ms;
        }
        self.deadline_margin_ms.min(deadline.span_ms() / KEPT_SHARE_DIVISOR)
    }

    /// How long the secondary leaves a request nobody has started to the primary, from when
    /// it was sent: a fifth of the request's time ([`HEAD_START_SHARE_DIVISOR`]), at most
    /// `CFN_ONCE_HEAD_START_S`. A primary that is up takes the lease within a second or two; a
    /// primary that is down costs a request this long, and leaves it the rest of its time.
    pub fn head_start_ms(&self, deadline: &RequestDeadline) -> u64 {
        self.head_start_s.saturating_mul(1000).min(deadline.span_ms() / HEAD_START_SHARE_DIVISOR)
    }

    /// Whether a request with `span_ms` of time, sent at `sent_ms`, has failover: whether the
    /// secondary, seeing its copy after the queue's delay and the primary's head start (and
    /// the longest jitter of the backoff that waits for it), still has
    /// `FAILOVER_ANSWER_MS` (2 s) before the request's lease cap to answer it.
    pub fn has_failover(&self, deadline: &RequestDeadline) -> bool {
        let sent_ms = deadline.sent_ms;
        let delay_ms = self.secondary_delay_s.saturating_mul(1000);
        let head_start_ms = self.head_start_ms(deadline);
        // A copy that arrives within the head start waits for its end, plus the backoff's
        // jitter and SQS's rounding of a visibility timeout up to a whole second.
        let starts_ms = if head_start_ms > delay_ms {
            sent_ms + head_start_ms + self.jitter_ms_max() + 1_000
        } else {
            sent_ms + delay_ms
        };
        let lease_cap_ms = deadline.at_ms.saturating_sub(self.lease_end_before_deadline_ms(deadline));
        starts_ms + FAILOVER_ANSWER_MS <= lease_cap_ms
    }

    /// The shortest `ServiceTimeout`, in seconds, from which every longer one has failover
    /// ([`Settings::has_failover`]): below it, a request whose primary is down goes unanswered
    /// or is answered FAILED. `None` if not even CloudFormation's longest has.
    pub fn failover_minimum_s(&self) -> Option<u64> {
        let has = |seconds: u64| {
            let deadline = RequestDeadline::of(0, Some(seconds), None, self.deadline_ceiling_s);
            self.has_failover(&deadline)
        };
        let longest_s = self.deadline_ceiling_s.min(3_600);
        if !has(longest_s) {
            return None;
        }
        // The last second without failover, counting down: every longer one has it.
        let without = (1..longest_s).rev().find(|&seconds| !has(seconds));
        Some(without.map_or(1, |seconds| seconds + 1))
    }

    /// Kept at the end of an invocation for the batch's SQS calls (concurrent, one timeout) and
    /// for returning.
    pub fn batch_tail_ms(&self) -> u64 {
        self.queue_call_timeout_ms + RETURN_SLACK_MS
    }

    /// Time an answer needs once a provider stops: a commit attempt and a read-back of its
    /// outcome, one PUT attempt, and the delivery record.
    pub fn answer_ms(&self) -> u64 {
        3 * self.store_call_timeout_ms + self.put.attempt_timeout_ms
    }

    /// Kept back before the invocation's deadline when a provider runs: the answer and the
    /// batch's tail.
    pub fn reserve_ms(&self) -> u64 {
        self.answer_ms() + self.batch_tail_ms()
    }

    /// The longest jitter added to a backoff, spreading messages that would come back together.
    pub fn jitter_ms_max(&self) -> u64 {
        self.heartbeat_ms.min(5_000)
    }

    /// How long past its time a provider's poll waits before this region takes it: none for
    /// the primary; for the secondary, the primary's jitter and one store call, so the primary
    /// polls unless it missed the poll (down, drained, or its message lost to a crash).
    pub fn poll_lag_ms(&self) -> u64 {
        match self.role {
            Role::Primary => 0,
            Role::Secondary => self.jitter_ms_max() + self.store_call_timeout_ms,
        }
    }

    /// When the delivery's own calls must all have ended, for an invocation killed at
    /// `invocation_deadline_ms`.
    pub fn work_end_ms(&self, invocation_deadline_ms: u64) -> u64 {
        invocation_deadline_ms.saturating_sub(self.batch_tail_ms())
    }

    /// The shortest backoff of a message, in seconds: short enough to look often, long enough
    /// that [`Settings::max_receive_count`] receives last until the deadline ceiling. `None`
    /// when the count is too small for any floor up to [`BACKOFF_FLOOR_S_MAX`].
    pub fn backoff_floor_s(&self) -> Option<u32> {
        backoff_floor_s(self.max_receive_count, self.deadline_ceiling_s)
    }

    /// Receives a message needs at most before its deadline, at this backoff floor.
    pub fn receives_needed(&self) -> Option<u32> {
        let floor_s = self.backoff_floor_s()?;
        u32::try_from(self.deadline_ceiling_s.div_ceil(u64::from(floor_s))).ok()?.checked_add(RECEIVES_SPARE)
    }

    /// The longest backoff of a message, in seconds: the configured one, within what SQS
    /// accepts as a visibility timeout.
    pub(crate) fn backoff_cap_s(&self) -> u32 {
        self.retry_delay_s_max.clamp(1, VISIBILITY_S_MAX)
    }

    /// The backoff floor the worker applies, in seconds: [`Settings::backoff_floor_s`], or the
    /// longest floor accepted when the receive count allows none (a configuration the
    /// configuration refuses), within the longest backoff.
    pub(crate) fn applied_backoff_floor_s(&self) -> u32 {
        self.backoff_floor_s().unwrap_or(BACKOFF_FLOOR_S_MAX).clamp(1, self.backoff_cap_s())
    }

    /// The longest backoff of a failed delivery, in ms (see [`RETRY_BACKOFF_BASE_MS`]).
    pub(crate) fn retry_backoff_max_ms(&self) -> u64 {
        u64::from(self.retry_delay_s_max) * 1000
    }

    /// How long a standby primary leaves a message before looking again, in ms (before jitter).
    pub(crate) fn standby_retry_ms(&self) -> u64 {
        u64::from(self.standby_retry_s) * 1000
    }

    /// Whether a provider that failed transiently may run again at `next_ms`: within the retry
    /// time counted from its first attempt at `started_ms`, and before its run ends at
    /// `run_end_ms` (past it, the supervisor answers FAILED without the provider's reason).
    pub(crate) fn provider_retry_fits(&self, started_ms: u64, next_ms: u64, run_end_ms: u64) -> bool {
        next_ms.saturating_sub(started_ms) <= self.provider_retry_ms && next_ms < run_end_ms
    }

    /// The visibility to give a received record at `now_ms`, in seconds, so that if its
    /// invocation dies the record comes back while its request can still be answered: `Some` for
    /// a record whose deadline margin begins within the queue's visibility timeout (a crash would
    /// hide it past that), `None` for every other.
    pub(crate) fn visibility_if_lost_s(&self, deadline: &RequestDeadline, now_ms: u64) -> Option<u32> {
        if now_ms >= deadline.at_ms {
            return None;
        }
        let latest_wake_ms = deadline.latest_wake_ms(self.deadline_margin_for_ms(deadline));
        let visibility_ms = self.visibility_timeout_s.saturating_mul(1000);
        if latest_wake_ms >= now_ms.saturating_add(visibility_ms) {
            return None;
        }
        let delay_s = u32::try_from(latest_wake_ms.saturating_sub(now_ms) / 1000).unwrap_or(u32::MAX);
        let delay_s = delay_s.max(self.applied_backoff_floor_s());
        (u64::from(delay_s) < self.visibility_timeout_s).then_some(delay_s)
    }
}

/// See [`Settings::backoff_floor_s`]: each receive is followed by at least the floor before the
/// next (a backoff, or a visibility timeout after a crash, which is longer), so a message is
/// received at most `ceiling / floor` times before its deadline, plus [`RECEIVES_SPARE`].
pub fn backoff_floor_s(max_receive_count: u32, deadline_ceiling_s: u64) -> Option<u32> {
    let budget = u64::from(max_receive_count.checked_sub(RECEIVES_SPARE)?.max(1));
    let floor_s = u32::try_from(deadline_ceiling_s.div_ceil(budget).max(1)).ok()?;
    (floor_s <= BACKOFF_FLOOR_S_MAX && max_receive_count > RECEIVES_SPARE).then_some(floor_s)
}

/// The timeout of one call that must end by `end_ms`: its own, `call_timeout_ms`, or what is
/// left if that is less. `None` when less than a useful slice of time is left: the call is not
/// made at all.
pub(crate) fn call_timeout_ms(call_timeout_ms: u64, end_ms: u64, now_ms: u64) -> Option<u64> {
    let left_ms = end_ms.saturating_sub(now_ms);
    (left_ms >= CALL_MS_MIN).then(|| call_timeout_ms.min(left_ms))
}

/// Whether another call, after a backoff of `delay_ms` from `now_ms`, could still start with a
/// useful slice of time before `end_ms`.
pub(crate) fn call_fits_after(delay_ms: u64, end_ms: u64, now_ms: u64) -> bool {
    now_ms + delay_ms + CALL_MS_MIN <= end_ms
}

/// One delivery's time: its request's deadline and its invocation's, and every end derived
/// from the two.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Budget<'a> {
    settings: &'a Settings,
    /// The request's deadline.
    pub(crate) deadline: RequestDeadline,
    /// When the invocation is killed, epoch ms.
    invocation_deadline_ms: u64,
    /// The shortest backoff of this delivery's message, in seconds (see [`Budget::for_work`]).
    floor_s: u32,
}

/// How long a provider may run, and which deadline ends it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct RunWindow {
    /// When the provider must stop, epoch ms.
    pub(crate) end_ms: u64,
    /// What ends it.
    pub(crate) bound: RunBound,
    /// How much of that deadline is kept back from the run to answer, for the Reason.
    pub(crate) kept_ms: u64,
}

/// Which deadline ends a provider's run first.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum RunBound {
    /// The request's: its lease cap, after which a taker-over answers in the margin.
    Request,
    /// The invocation's, less the time the answer and the batch's tail need.
    Invocation,
}

impl RunWindow {
    /// Whether the lease was taken where no lease may reach any more: answer without running.
    pub(crate) fn closed(&self, now_ms: u64) -> bool {
        self.bound == RunBound::Request && self.end_ms <= now_ms
    }

    /// Whether taking the lease used up the invocation (a slow store): rather than answer FAILED
    /// for want of time that a later invocation has, let the lease expire and be taken over.
    pub(crate) fn too_short(&self, now_ms: u64) -> bool {
        self.bound == RunBound::Invocation && self.end_ms < now_ms + RUN_MS_MIN
    }
}

impl<'a> Budget<'a> {
    /// The budget of a delivery of a request due at `deadline`, in an invocation killed at
    /// `invocation_deadline_ms`.
    pub(crate) fn new(settings: &'a Settings, deadline: RequestDeadline, invocation_deadline_ms: u64) -> Self {
        Self { settings, deadline, invocation_deadline_ms, floor_s: settings.applied_backoff_floor_s() }
    }

    /// The budget of a delivery of a work (see `wait_condition`), due at `deadline` up to 12
    /// hours after it was sent: its backoff floor is long enough that the receives its message
    /// has left (it has had `receive_count`) last until the deadline, so a work's message never
    /// reaches the queue's `maxReceiveCount` (and the DLQ) before its work's timeout. With the
    /// template's 1000 receives, 12 hours of polls come at least 44 s apart.
    pub(crate) fn for_work(
        settings: &'a Settings,
        deadline: RequestDeadline,
        invocation_deadline_ms: u64,
        receive_count: u32,
        now_ms: u64,
    ) -> Self {
        let left = settings.max_receive_count.saturating_sub(receive_count).saturating_sub(RECEIVES_SPARE).max(1);
        let spread_s = deadline.at_ms.saturating_sub(now_ms).div_ceil(1000).div_ceil(u64::from(left));
        let cap_s = settings.backoff_cap_s();
        let floor_s = u32::try_from(spread_s).unwrap_or(cap_s).max(settings.applied_backoff_floor_s()).min(cap_s);
        Self { settings, deadline, invocation_deadline_ms, floor_s }
    }

    /// When this delivery's own calls must have ended: the invocation's deadline less the
    /// batch's tail ([`Settings::work_end_ms`]).
    pub(crate) fn work_end_ms(&self) -> u64 {
        self.settings.work_end_ms(self.invocation_deadline_ms)
    }

    /// Store calls made while deciding end in time for an answer to follow.
    pub(crate) fn decide_end_ms(&self) -> u64 {
        self.work_end_ms().saturating_sub(self.settings.answer_ms())
    }

    /// Time left for this delivery's own calls.
    pub(crate) fn time_left_ms(&self, now_ms: u64) -> u64 {
        self.work_end_ms().saturating_sub(now_ms)
    }

    /// How long the active-region control may take to answer: one store call, within the time
    /// left, and within a quarter of what is left of the request's run before its lease cap (at
    /// least a useful call's time), so a slow control costs a request of a few seconds a
    /// quarter of its run, not the 3 s its provider needed. A control that does not answer in
    /// time is one that failed: the last known answer stands.
    pub(crate) fn control_timeout_ms(&self, now_ms: u64) -> u64 {
        let run_quarter_ms = (self.lease_cap_ms().saturating_sub(now_ms) / 4).max(CALL_MS_MIN);
        self.settings.store_call_timeout_ms.min(self.time_left_ms(now_ms)).min(run_quarter_ms)
    }

    /// Whether the request's deadline is within the margin: then it is answered now.
    pub(crate) fn deadline_near(&self, now_ms: u64) -> bool {
        self.deadline.is_near(now_ms, self.settings.deadline_margin_for_ms(&self.deadline))
    }

    /// Until when the secondary leaves this request to the primary, if nobody has started it:
    /// the primary's head start, counted from when the request was sent.
    pub(crate) fn head_start_end_ms(&self) -> u64 {
        self.deadline.sent_ms.saturating_add(self.settings.head_start_ms(&self.deadline))
    }

    /// The lag this delivery gives a due poll: the region's own, none near the deadline.
    pub(crate) fn poll_lag_ms(&self, now_ms: u64) -> u64 {
        if self.deadline_near(now_ms) { 0 } else { self.settings.poll_lag_ms() }
    }

    /// The latest a lease of this request may end, on the holder's clock: the deadline less the
    /// deadline margin and the skew margin. A taker-over sees it expired where the margin
    /// begins, with the margin's time left to answer FAILED; no lease or heartbeat reaches past
    /// it (L1).
    pub(crate) fn lease_cap_ms(&self) -> u64 {
        // A millisecond less: a lease counts as expired once it ended more than the skew margin
        // ago, and that must be true at the margin's first moment.
        self.deadline.at_ms.saturating_sub(self.settings.lease_end_before_deadline_ms(&self.deadline)).saturating_sub(1)
    }

    /// The end of a lease taken at `now_ms`: a lease's length, cut at the cap. A lease taken at
    /// or past the cap (a delivery answering inside the margin, which runs no provider) ends at
    /// the cap too, so it is already expired for everyone else: a holder that freezes or dies
    /// there blocks nobody, and any other delivery still in time takes it over under a higher
    /// fence and answers. Two answering deliveries may then take it from each other, which
    /// costs the earlier one a refused commit (the fence keeps one answer), never the answer.
    pub(crate) fn lease_until_ms(&self, now_ms: u64) -> u64 {
        (now_ms + self.settings.lease_ms).min(self.lease_cap_ms())
    }

    /// The end a heartbeat at `now_ms` extends the lease to: never past the request's lease
    /// cap, however long the provider runs.
    pub(crate) fn heartbeat_lease_until_ms(&self, now_ms: u64) -> u64 {
        (now_ms + self.settings.lease_ms).min(self.lease_cap_ms().max(now_ms))
    }

    /// How long the provider may run: until this execution's lease must end for the request's
    /// deadline (a taker-over then still has the margin to answer), or, for the invocation,
    /// until early enough for the answer (commit, PUT, record) and the batch's tail, whichever
    /// comes first.
    pub(crate) fn run_window(&self) -> RunWindow {
        let request_end_ms = self.lease_cap_ms();
        let invocation_end_ms = self.work_end_ms().saturating_sub(self.settings.answer_ms());
        if request_end_ms <= invocation_end_ms {
            let kept_ms = self.settings.lease_end_before_deadline_ms(&self.deadline);
            RunWindow { end_ms: request_end_ms, bound: RunBound::Request, kept_ms }
        } else {
            let kept_ms = self.invocation_deadline_ms.saturating_sub(invocation_end_ms);
            RunWindow { end_ms: invocation_end_ms, bound: RunBound::Invocation, kept_ms }
        }
    }

    /// A run for a request whose lease cap has passed, as a last chance rather than a FAILED
    /// without trying: until half the request's deadline margin is left (the other half is
    /// for the commit and the PUT, which take milliseconds when nothing fails), within the
    /// invocation's window too. `None` when less than a useful run is left. Nobody else starts
    /// the provider in the margin, and a region that takes the lease over (it is not extended
    /// past the cap) answers FAILED, which the fence keeps the only commit if it comes first.
    pub(crate) fn last_chance_window(&self, now_ms: u64) -> Option<RunWindow> {
        let margin_ms = self.settings.deadline_margin_for_ms(&self.deadline);
        let request_end_ms = self.deadline.at_ms.saturating_sub(margin_ms / 2);
        let invocation_end_ms = self.work_end_ms().saturating_sub(self.settings.answer_ms());
        let (end_ms, bound) = if request_end_ms <= invocation_end_ms {
            (request_end_ms, RunBound::Request)
        } else {
            (invocation_end_ms, RunBound::Invocation)
        };
        let kept_ms = match bound {
            RunBound::Request => self.deadline.at_ms - end_ms,
            RunBound::Invocation => self.invocation_deadline_ms.saturating_sub(end_ms),
        };
        (end_ms >= now_ms + CALL_MS_MIN).then_some(RunWindow { end_ms, bound, kept_ms })
    }

    /// When the commit's calls must end: in time for one PUT attempt and the delivery record.
    pub(crate) fn commit_end_ms(&self) -> u64 {
        let settings = self.settings;
        self.work_end_ms().saturating_sub(settings.put.attempt_timeout_ms + settings.store_call_timeout_ms)
    }

    /// When the last PUT attempt must end: in time to record the delivery.
    pub(crate) fn put_stop_at_ms(&self) -> u64 {
        self.work_end_ms().saturating_sub(self.settings.store_call_timeout_ms)
    }

    /// When the next poll of work in progress comes, for a provider that asked to be polled
    /// after `poll_after_ms` at `now_ms`: no sooner than the backoff floor, and no later than
    /// [`LAST_POLL_RUN_MS`] before the lease cap, so the last poll still has time to run.
    pub(crate) fn poll_at_ms(&self, now_ms: u64, poll_after_ms: u64) -> u64 {
        let floor_ms = u64::from(self.floor_s) * 1000;
        let after_ms = poll_after_ms.max(floor_ms);
        let last_poll_ms = self.lease_cap_ms().saturating_sub(LAST_POLL_RUN_MS);
        now_ms.saturating_add(after_ms).min(last_poll_ms)
    }

    /// Whether a poll at `poll_at_ms` ([`Budget::poll_at_ms`]) is still a backoff floor away
    /// from `now_ms`; if not, no further poll fits before the deadline margin.
    pub(crate) fn poll_fits(&self, poll_at_ms: u64, now_ms: u64) -> bool {
        let floor_ms = u64::from(self.floor_s) * 1000;
        poll_at_ms >= now_ms + floor_ms
    }

    /// The visibility delay, in seconds, that brings a message back at `until_ms`, but never
    /// later than the deadline allows (with time left to answer), and never sooner than the
    /// backoff floor, which keeps the receives before the deadline within the queue's
    /// `maxReceiveCount`. The one exception is the wait that ends exactly where the deadline
    /// margin begins, so a request nobody can run is still answered FAILED in it.
    pub(crate) fn backoff_s(&self, until_ms: u64, now_ms: u64) -> u32 {
        let settings = self.settings;
        let cap_s = settings.backoff_cap_s();
        let floor_s = self.floor_s;
        let seconds = |ms: u64| u32::try_from(ms.div_ceil(1000)).unwrap_or(cap_s);
        let latest_wake_ms = self.deadline.latest_wake_ms(settings.deadline_margin_for_ms(&self.deadline));
        if now_ms < latest_wake_ms {
            let until_ms = until_ms.min(latest_wake_ms);
            let to_margin_s = seconds(latest_wake_ms - now_ms).max(1);
            return seconds(until_ms.saturating_sub(now_ms)).clamp(floor_s.min(to_margin_s), cap_s);
        }
        // Inside the margin: look again at the floor, or when asked if that is sooner than the
        // deadline's end; the next look past the deadline dead-letters an unresolved message.
        let to_deadline_s = seconds(self.deadline.at_ms.saturating_sub(now_ms)).max(1);
        // (A work's longer floor spreads its receives over hours; in the margin, the few looks
        // left come at the ordinary floor, or a quarter of a shorter margin, at least a second:
        // four or five looks whatever the margin, which the receives' spare covers.)
        let quarter_margin_s =
            u32::try_from(settings.deadline_margin_for_ms(&self.deadline) / 4_000).unwrap_or(u32::MAX).max(1);
        let margin_floor_s = floor_s.min(settings.applied_backoff_floor_s()).min(quarter_margin_s);
        seconds(until_ms.saturating_sub(now_ms)).min(to_deadline_s).clamp(margin_floor_s, cap_s)
    }

    /// Whether this request has no failover: its deadline comes before the secondary, after
    /// its queue's delay and the primary's head start, could still answer it
    /// ([`Settings::has_failover`]).
    pub(crate) fn no_failover(&self) -> bool {
        !self.settings.has_failover(&self.deadline)
    }
}

#[cfg(test)]
/// The worker tests' settings (`worker::tests` and the tests below): 2 s store calls and PUT attempts, a 1 s
/// SQS call, no head start.
pub(crate) fn test_settings(region: &str) -> Settings {
    Settings {
        region: region.into(),
        role: Role::Primary,
        lease_ms: 10_000,
        skew_ms: 1_000,
        heartbeat_ms: 3_000,
        store_attempts_max: 4,
        store_call_timeout_ms: 2_000,
        store_backoff_base_ms: 50,
        store_backoff_max_ms: 1_000,
        provider_retry_ms: 10_000,
        provider_backoff_base_ms: 100,
        provider_backoff_max_ms: 1_000,
        put: crate::put::PutPolicy {
            attempts_max: 3,
            attempt_timeout_ms: 2_000,
            backoff_base_ms: 100,
            backoff_max_ms: 1_000,
        },
        retention_ms: 86_400_000,
        retry_delay_s_max: 900,
        standby_retry_s: 30,
        deadline_ceiling_s: 3_600,
        deadline_margin_ms: 20_000,
        queue_call_timeout_ms: 1_000,
        max_receive_count: 1_000,
        control_cache_ms: 0,
        visibility_timeout_s: 960,
        secondary_delay_s: 60,
        // The worker tests' secondaries see a copy that the primary had all the time it needed
        // for; the head start's own tests (`region_tests`) set one.
        head_start_s: 0,
        proportioned_margins: true,
    }
}

#[cfg(test)]
#[path = "budget_tests.rs"]
mod tests;
