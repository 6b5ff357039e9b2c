//! Answering: the response body built, committed under the fence, then sent.
//!
//! Invariant S1 is kept here: nothing is sent that was not committed first, and what is sent is
//! the committed bytes, so any later PUT of the same request (a retry, a duplicate, the other
//! region) repeats them exactly. A commit refused because the record is under another fence
//! means the lease was lost: nothing is sent. Sending an answer is the PUT to the ResponseURL
//! (`put::put_with_retries`), then the delivered mark in the record, best effort: a duplicate
//! that finds the answer unmarked only PUTs the same bytes again. In a batch, the mark waits
//! for the batch's other answers first (`crate::marks`), so it does not delay them. Each step
//! ends in time for the next (`Budget::commit_end_ms`, `Budget::put_stop_at_ms`), all before
//! the batch's tail.

use super::Worker;
use super::job::{Job, Phase};
use crate::lease::{Conditional, LeaseState, StoreError};
use crate::marks::MARK_WAIT_MS;
use crate::metrics::MetricEvent;
use crate::put::{PutError, put_with_retries};
use crate::request::Request;
use crate::response::{self, Outcome, Status};
use crate::vocabulary::{Disposition, Done};
use crate::wait_condition::SignalStatus;

impl Worker {
    /// Builds the body, commits it under `fence`, and sends what was committed.
    pub(super) async fn commit_and_send(&self, job: &Job<'_>, fence: u64, outcome: Outcome) -> Disposition {
        let (body, status) = match job.phase {
            Phase::Signal => {
                let (body, status) = crate::work::signal_body(job.origin, outcome);
                (body, if status == SignalStatus::Success { Status::Success } else { Status::Failed })
            }
            Phase::Answer | Phase::AnswerAtOnce => response::build_with_status(job.request, outcome),
        };
        // The commit leaves room for one PUT attempt and the delivery record.
        let commit_end_ms = job.budget.commit_end_ms();
        let committed = match self.commit(job.request, fence, &body, commit_end_ms).await {
            Ok(Some(bytes)) => bytes,
            Ok(None) => {
                self.metrics.record(MetricEvent::FenceConflict);
                return self.retry(job, "the lease was taken over before the commit; nothing sent".into());
            }
            Err(error) => return self.retry(job, format!("could not commit the response: {error}")),
        };
        tracing::info!(bytes = committed.len(), what = job.phase.answer_name(), "response committed");
        // What the store holds is `body` (a reply lost after the commit reads it back), so its
        // status is the one just built.
        match self.send_answer(job, fence, &committed, status).await {
            Ok(status) => Disposition::Done(Done::Answered { fence, status }),
            Err(error) => self.retry(job, error.to_string()),
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

    /// Sends a committed answer: PUTs the committed bytes, then records the delivery, retried
    /// within the invocation (if it still cannot be recorded, a duplicate that finds it
    /// unrecorded only PUTs the same bytes again). `status` is the one `committed` carries (for
    /// the metrics and the log line); it is returned once the bytes are delivered.
    pub(super) async fn send_answer(
        &self,
        job: &Job<'_>,
        fence: u64,
        committed: &[u8],
        status: Status,
    ) -> Result<Status, PutError> {
        let work_end_ms = job.budget.work_end_ms();
        // A signal to a handle past its presigned expiry is never attempted: S3 refuses it.
        let url = &job.request.response_url;
        let expired = url.presigned_expiry_ms().filter(|expiry_ms| *expiry_ms <= self.clock.now_ms());
        if job.phase == Phase::Signal
            && let Some(expiry_ms) = expired
        {
            let why = format!(
                "not sent: the wait condition handle's presigned URL expired at {}",
                crate::timestamp::format_ms(expiry_ms)
            );
            return self.never_sent(job, fence, status, &why, work_end_ms).await;
        }
        // The last PUT attempt ends in time to record the delivery, and a signal's attempts stop
        // at its handle's expiry: an attempt past it would only be refused.
        let handle_expiry_ms = url.presigned_expiry_ms().filter(|_| job.phase == Phase::Signal);
        let stop_at_ms = job.budget.put_stop_at_ms().min(handle_expiry_ms.unwrap_or(u64::MAX));
        let put = put_with_retries(
            self.sink.as_ref(),
            url,
            committed,
            self.settings.put,
            stop_at_ms,
            self.clock.as_ref(),
            self.random.as_ref(),
        )
        .await;
        let attempts = match put {
            Ok(attempts) => attempts,
            // A handle that refuses a signal (403 once it has expired) never takes one: the
            // work is done without it, rather than retried until its message is dead-lettered
            // (which would also hold up a Delete or an Update closing the work).
            Err(PutError::Permanent(why)) if job.phase == Phase::Signal => {
                let why = format!("not sent: the wait condition handle refused it: {why}");
                return self.never_sent(job, fence, status, &why, work_end_ms).await;
            }
            Err(error) => {
                if matches!(error, PutError::Permanent(_)) {
                    self.metrics.record(MetricEvent::DlqBound);
                }
                return Err(error);
            }
        };
        let now_ms = self.clock.now_ms();
        let latency_ms = job.sent_ms.map(|sent_ms| now_ms.saturating_sub(sent_ms));
        self.metrics.record(MetricEvent::ResponseSent { status, latency_ms });
        tracing::info!(attempts, latency_ms, ?status, what = job.phase.answer_name(), "response delivered");
        // In a batch, the mark waits for the batch-mates' answers (`crate::marks`), leaving
        // time for one store call before the end this delivery keeps.
        if job.phase == Phase::Answer
            && let Some(ticket) = job.batch
        {
            let latest_ms = work_end_ms.saturating_sub(self.settings.store_call_timeout_ms);
            let wait_ms = MARK_WAIT_MS.min(latest_ms.saturating_sub(self.clock.now_ms()));
            ticket.wait_for_batch(self.clock.as_ref(), wait_ms).await;
        }
        match self.mark_delivered(&job.request.key, fence, None, work_end_ms).await {
            Ok(Conditional::Applied) => {}
            Ok(Conditional::Refused(_)) => tracing::info!("a newer attempt replaced the record; delivery not recorded"),
            Err(error) => {
                tracing::warn!(%error, "could not record the delivery; a duplicate would PUT the same bytes again")
            }
        }
        Ok(status)
    }

    /// Records a work's committed signal as one that will never be sent, and why: nothing is
    /// left to send, so every later copy drops, and a Delete or an Update closing the work goes
    /// on. `Err` only when the record could not be written, so that a later delivery tries again.
    async fn never_sent(
        &self,
        job: &Job<'_>,
        fence: u64,
        status: Status,
        why: &str,
        end_ms: u64,
    ) -> Result<Status, PutError> {
        tracing::warn!(why, ?status, "the work's signal cannot be sent; recording the work done without it");
        self.metrics.record(MetricEvent::SignalUnsent);
        match self.mark_delivered(&job.request.key, fence, Some(why), end_ms).await {
            Ok(_) => Ok(status),
            Err(error) => Err(PutError::Retryable(format!("{why}, and that could not be recorded: {error}"))),
        }
    }
}
