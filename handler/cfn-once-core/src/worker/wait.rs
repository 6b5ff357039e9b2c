//! Waiting: a provider that answered in progress has its state stored under its fence
//! (`LeaseStore::wait`, which releases the lease), and its message brought back when the next
//! poll is due.
//!
//! Nobody holds the lease between polls, and the stored state is bounded (`STATE_BYTES_MAX`).
//! Polls come no sooner than the backoff floor and the last one before the deadline margin
//! (`Budget::poll_at_ms`); when no further poll fits, or the state is too big to store, the
//! request is answered FAILED instead, with how long it waited, how many polls it took and its
//! last state.

use super::Worker;
use super::job::{Job, describe};
use crate::lease::{LeaseState, PollRecord};
use crate::metrics::MetricEvent;
use crate::provider::{STATE_BYTES_MAX, Waiting};
use crate::response::{Outcome, foreign_text};
use crate::vocabulary::Disposition;

/// The longest part of a provider's last state quoted in a FAILED Reason.
const STATE_REASON_CHARS_MAX: usize = 256;

impl Worker {
    /// Stores the provider's work in progress under `fence`, which releases the lease, and brings
    /// the message back when the next poll is due. Answers FAILED instead when the state is too
    /// big to store, or when no further poll fits before the deadline margin.
    pub(super) async fn wait(
        &self,
        job: &Job<'_>,
        fence: u64,
        waiting: Waiting,
        previous: Option<&PollRecord>,
    ) -> Disposition {
        let request = job.request;
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
            return self.commit_and_send(job, fence, Outcome::failed(reason)).await;
        }
        let poll_after_ms = u64::try_from(waiting.poll_after.as_millis()).unwrap_or(u64::MAX);
        let poll = PollRecord {
            fingerprint: request.fingerprint.clone(),
            state,
            poll_at_ms: job.budget.poll_at_ms(now_ms, poll_after_ms),
            waiting_since_ms,
            polls,
        };
        if !job.budget.poll_fits(poll.poll_at_ms, now_ms) {
            let reason = still_in_progress(job, &poll, now_ms);
            tracing::error!(reason, "no poll fits before the deadline; answering FAILED");
            return self.commit_and_send(job, fence, Outcome::failed(reason)).await;
        }
        let stored = self
            .write_under_fence(
                request,
                fence,
                job.budget.work_end_ms(),
                |now_ms| self.store.wait(&request.key, fence, &poll, now_ms),
                |record| (record.state == LeaseState::Waiting && record.poll.as_ref() == Some(&poll)).then_some(()),
            )
            .await;
        match stored {
            Ok(Some(_)) => {
                let poll_in_s = poll.poll_at_ms.saturating_sub(now_ms).div_ceil(1000);
                tracing::info!(polls, poll_in_s, "provider in progress; lease released until the next poll");
                self.metrics.record(MetricEvent::Waiting);
                self.see_again(job, poll.poll_at_ms, "the provider's work is in progress; polling it again")
            }
            Ok(None) => {
                self.metrics.record(MetricEvent::FenceConflict);
                self.retry(job, "the lease was taken over before the work in progress was stored".into())
            }
            Err(error) => self.retry(job, format!("could not store the provider's work in progress: {error}")),
        }
    }
}

/// The FAILED Reason for work still in progress at the deadline: how long it waited, how many
/// polls, and the provider's last state (bounded, markup stripped).
pub(super) fn still_in_progress(job: &Job<'_>, poll: &PollRecord, now_ms: u64) -> String {
    format!(
        "{} was still in progress when {}, set by {}, came near: waited {} s over {} polls; last state: {}",
        describe(job.request),
        job.phase.deadline_name(),
        job.budget.deadline.describe(),
        now_ms.saturating_sub(poll.waiting_since_ms) / 1000,
        poll.polls,
        foreign_text(&poll.state, STATE_REASON_CHARS_MAX)
    )
}
