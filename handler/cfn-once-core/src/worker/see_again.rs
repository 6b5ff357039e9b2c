//! The dispositions that bring a message back: left to the active region (standby), a retry
//! after a failure with a backoff that grows with the receive count, or a backoff to a given
//! time; each within the request's deadline and the backoff floor, and to the DLQ once the
//! deadline has passed.

use super::Worker;
use super::job::{Job, Phase};
use crate::budget::RETRY_BACKOFF_BASE_MS;
use crate::metrics::MetricEvent;
use crate::random::full_jitter_ms;
use crate::vocabulary::{DeadLetterCause, Disposition};

impl Worker {
    /// Leaves the message to the active region, to be looked at again later (standby).
    pub(super) fn leave_message(&self, job: &Job<'_>) -> Disposition {
        let until_ms = self.clock.now_ms() + self.settings.standby_retry_ms() + self.jitter_ms();
        self.see_again(job, until_ms, "this region is on standby; the active region answers")
    }

    /// A primary's warning that `job`'s request has no failover: its deadline comes before the
    /// secondary, after its queue's delay and this region's head start, could still answer it
    /// (`Settings::has_failover`). If this region fails, the request goes unanswered or FAILED.
    pub(super) fn warn_if_no_failover(&self, job: &Job<'_>) {
        let settings = &self.settings;
        if job.budget.no_failover() {
            tracing::warn!(
                deadline_s = job.budget.deadline.span_ms() / 1000,
                secondary_delay_s = settings.secondary_delay_s,
                failover_minimum_s = settings.failover_minimum_s(),
                "this request's deadline comes before the secondary region could answer it: if this region fails, it has no failover; give the resource a ServiceTimeout of at least failover_minimum_s, or deploy a shorter SecondaryDelaySeconds"
            );
            self.metrics.record(MetricEvent::ShortServiceTimeout);
        }
    }

    /// Spreads messages that would otherwise come back together.
    pub(super) fn jitter_ms(&self) -> u64 {
        self.random.below_or_equal(self.settings.jitter_ms_max())
    }

    /// A retry after a failure: the delay grows with the receive count, with full jitter.
    pub(super) fn retry(&self, job: &Job<'_>, why: String) -> Disposition {
        let delay_ms = full_jitter_ms(
            self.random.as_ref(),
            job.receive_count.saturating_sub(1),
            RETRY_BACKOFF_BASE_MS,
            self.settings.retry_backoff_max_ms(),
        );
        self.see_again(job, self.clock.now_ms() + delay_ms, &why)
    }

    /// Brings the message back at `until_ms`, within the deadline and the backoff floor
    /// (`Budget::backoff_s`). Past the deadline, an unresolved message goes to the dead-letter
    /// queue instead. A message that hands a work past its answer is kept by the work's
    /// deadline once the answer's has passed (L1 for the work): whatever its answer came to,
    /// which the next look finds out, the copy may be the work's only one left.
    pub(super) fn see_again(&self, job: &Job<'_>, until_ms: u64, why: &str) -> Disposition {
        let now_ms = self.clock.now_ms();
        let (budget, deadline_name) = match job.work_after {
            Some(work) if now_ms >= job.budget.deadline.at_ms => (work, Phase::Signal.deadline_name()),
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
