//! The protocol's tunables, and the budgets derived from them.
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

use crate::config::Config;
use crate::decision::Role;
use crate::delivery::PutPolicy;

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

/// The protocol's tunables, all with units in their names.
#[derive(Debug, Clone)]
pub struct Settings {
    /// This deployment's region, recorded in the lease owner.
    pub region: String,
    /// This region's role; only a primary asks the control whether it is active.
    pub role: Role,
    /// How far ahead an acquire or heartbeat sets the lease's end.
    pub lease_ms: u64,
    /// Margin added before a lease counts as expired, for clock skew between regions.
    pub skew_ms: u64,
    /// How often a running provider's lease is extended; shorter than `lease_ms`.
    pub heartbeat_ms: u64,
    /// Attempts of one lease-store operation (acquire, read, commit) before the message is
    /// retried later.
    pub store_attempts_max: u32,
    /// One lease-store call, start to answer (the SDK client makes one attempt per call; the
    /// worker retries).
    pub store_call_timeout_ms: u64,
    /// Full-jitter backoff base between lease-store attempts, doubled per attempt.
    pub store_backoff_base_ms: u64,
    /// The longest backoff between lease-store attempts.
    pub store_backoff_max_ms: u64,
    /// How long a provider that keeps failing transiently (throttling, a 5xx) is run again,
    /// from its first attempt, before the answer is FAILED; never past the run's end. Counted in
    /// time, not attempts: a throttling burst lasts seconds, whatever the backoff.
    pub provider_retry_ms: u64,
    /// Full-jitter backoff base between provider runs, doubled per attempt.
    pub provider_backoff_base_ms: u64,
    /// The longest backoff between provider runs.
    pub provider_backoff_max_ms: u64,
    /// How the response is PUT; its attempt timeout is also the delivery grace of a fresh commit.
    pub put: PutPolicy,
    /// One SQS call after the batch (ChangeMessageVisibility, or moving a message to the DLQ).
    pub queue_call_timeout_ms: u64,
    /// How long a record is kept before the sweeper may delete it.
    pub retention_ms: u64,
    /// Upper bound on any backoff expressed as a visibility timeout.
    pub retry_delay_s_max: u32,
    /// How long a standby primary leaves a message before looking again.
    pub standby_retry_s: u32,
    /// Upper bound on any request's deadline, from when it was sent.
    pub deadline_ceiling_s: u64,
    /// How close to the deadline a request counts as "near": then it is answered now.
    pub deadline_margin_ms: u64,
    /// The queue's redrive `maxReceiveCount`: receives before SQS moves a message to the DLQ.
    pub max_receive_count: u32,
    /// How long an answer of the active-region control is reused (`CachedActivity`).
    pub control_cache_ms: u64,
    /// The queue's visibility timeout: how long a crashed invocation hides its batch.
    pub visibility_timeout_s: u64,
    /// The secondary queue's delay: a primary's request due sooner than this and the margin has
    /// no failover.
    pub secondary_delay_s: u64,
}

impl Settings {
    /// The settings a deployed handler runs with: the configuration's values and the fixed
    /// retry policies. The simulator builds its settings here too, from the template's
    /// environment.
    pub fn from_config(config: &Config) -> Self {
        Self {
            region: config.region.clone(),
            role: config.role,
            lease_ms: config.lease_ms,
            skew_ms: config.skew_ms,
            heartbeat_ms: config.heartbeat_ms,
            store_attempts_max: 4,
            store_call_timeout_ms: config.store_timeout_ms,
            store_backoff_base_ms: 50,
            store_backoff_max_ms: 1_000,
            provider_retry_ms: 60_000,
            provider_backoff_base_ms: 200,
            provider_backoff_max_ms: 5_000,
            put: PutPolicy {
                attempts_max: config.put_attempts_max,
                attempt_timeout_ms: config.put_timeout_ms,
                backoff_base_ms: 200,
                backoff_max_ms: 2_000,
            },
            queue_call_timeout_ms: config.sqs_timeout_ms,
            retention_ms: config.retention_days * 86_400_000,
            retry_delay_s_max: config.retry_delay_s_max,
            standby_retry_s: config.standby_retry_s,
            deadline_ceiling_s: config.deadline_ceiling_s,
            deadline_margin_ms: config.deadline_margin_ms,
            max_receive_count: config.max_receive_count,
            control_cache_ms: config.control_cache_ms,
            visibility_timeout_s: config.visibility_timeout_s,
            secondary_delay_s: config.secondary_delay_s,
        }
    }

    /// Time a delivery that takes over near the deadline needs to answer: the acquire, then
    /// what any answer needs ([`Settings::answer_ms`]). The deadline margin must exceed it.
    pub fn take_over_answer_ms(&self) -> u64 {
        self.store_call_timeout_ms + self.answer_ms()
    }

    /// How long before a request's deadline every lease of it ends at the latest, on the
    /// holder's clock: the deadline margin and the skew margin. A taker-over sees the lease
    /// expired exactly where the margin begins, and the margin holds the time it needs to
    /// answer, so a holder crashing just before then still leaves time to answer FAILED.
    pub fn lease_end_before_deadline_ms(&self) -> u64 {
        self.deadline_margin_ms + self.skew_ms
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
}

/// See [`Settings::backoff_floor_s`]: each receive is followed by at least the floor before the
/// next (a backoff, or a visibility timeout after a crash, which is longer), so a message is
/// received at most `ceiling / floor` times before its deadline, plus [`RECEIVES_SPARE`].
pub fn backoff_floor_s(max_receive_count: u32, deadline_ceiling_s: u64) -> Option<u32> {
    let budget = u64::from(max_receive_count.checked_sub(RECEIVES_SPARE)?.max(1));
    let floor_s = u32::try_from(deadline_ceiling_s.div_ceil(budget).max(1)).ok()?;
    (floor_s <= BACKOFF_FLOOR_S_MAX && max_receive_count > RECEIVES_SPARE).then_some(floor_s)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_backoff_floor_fits_the_receive_budget() {
        assert_eq!(backoff_floor_s(1_000, 3_600), Some(4), "SQS's largest maxReceiveCount");
        assert_eq!(backoff_floor_s(100, 3_600), Some(45));
        assert_eq!(backoff_floor_s(10, 3_600), None, "the count templates used to set");
        assert_eq!(backoff_floor_s(79, 3_600), None, "a floor over a minute");
        assert_eq!(backoff_floor_s(80, 3_600), Some(60));
        for count in [80, 100, 500, 1_000] {
            let floor_s = u64::from(backoff_floor_s(count, 3_600).expect("a floor"));
            // Receives until the ceiling, one per floor, plus the spare, fit in the count.
            assert!(3_600_u64.div_ceil(floor_s) + u64::from(RECEIVES_SPARE) <= u64::from(count), "count {count}");
        }
    }
}
