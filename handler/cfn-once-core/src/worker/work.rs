//! Closing a resource's work (see `wait_condition`): a Delete of a resource with a wait
//! condition, or an Update that names a new handle, ends the work of the handle it was sent in
//! its (old) properties before it is answered.
//!
//! Closing takes the work's lease under a higher fence (S3), so no poll of it can commit or
//! store state any more (S2), and commits FAILURE as its signal if nothing was committed yet
//! (S1: the signal is the committed bytes, whoever PUTs them). A signal already committed is
//! delivered if it was not. Only once the record shows the signal delivered does the request go
//! on: so a Delete is answered after its work's one signal, never before, and no work runs
//! under a deleted resource. A poll in flight (a live lease) is waited out, not interrupted.

use super::{DECISIONS_MAX, Job, Worker, describe};
use crate::lease::{LeaseState, Seen};
use crate::request::{Request, RequestKind};
use crate::response::Outcome;
use crate::vocabulary::Disposition;
use crate::wait_condition::WaitSpec;

/// A work a request ends, and why.
pub(super) struct Closing<'a> {
    /// The wait condition whose work ends.
    pub(super) spec: &'a WaitSpec,
    /// The FAILURE signal's Reason, if nothing was signalled yet.
    pub(super) why: &'static str,
}

/// The work `request` ends before it is handled, if any: a Delete's, on the handle its
/// properties name; an Update's old one, when it names a different handle (or none).
pub(super) fn to_close(request: &Request) -> Option<Closing<'_>> {
    match request.kind()? {
        RequestKind::Delete => request.wait.spec().map(|spec| Closing {
            spec,
            why: "the resource was deleted while its work ran; the work was stopped and is not polled again",
        }),
        RequestKind::Update => {
            let old = request.old_wait.as_ref()?;
            (request.wait.spec() != Some(old)).then_some(Closing {
                spec: old,
                why: "an Update named a new wait condition handle; the work for this one was stopped and is not polled again",
            })
        }
        RequestKind::Create => None,
    }
}

impl Worker {
    /// Closes the work `job` is about: `Ok` once its signal (the work's own, or FAILURE with
    /// `why`) is committed and delivered; otherwise the disposition to come back with.
    pub(super) async fn close_work(&self, job: &Job<'_>, why: &str) -> Result<(), Disposition> {
        for _ in 0..DECISIONS_MAX {
            let record = match self.read_record(job).await {
                Ok(record) => record.filter(|record| record.state != LeaseState::Left),
                Err(error) => return Err(self.retry(job, format!("could not read the work to close it: {error}"))),
            };
            let now_ms = self.clock.now_ms();
            match record {
                Some(record) if record.state == LeaseState::Committed && record.response.is_some() => {
                    if record.delivered {
                        tracing::info!(fence = record.fence, "the work's signal is delivered; going on");
                        return Ok(());
                    }
                    let signal = record.response.unwrap_or_default();
                    let status = job.status_of(&signal);
                    if let Err(error) = self.send_answer(job, record.fence, &signal, status).await {
                        return Err(self.retry(job, error.to_string()));
                    }
                }
                Some(record)
                    if record.state == LeaseState::Running
                        && record.lease_until_ms >= now_ms.saturating_sub(self.settings.skew_ms) =>
                {
                    let until_ms = record.lease_until_ms + self.settings.skew_ms + self.jitter_ms();
                    return Err(self.come_back(job, until_ms, "the work's lease is held; closing it when it ends"));
                }
                // No work yet, work waiting for its poll, or a poller that stopped: take it.
                _ => match self.acquire(job).await {
                    Ok(Seen::Mine { fence, .. }) => {
                        tracing::Span::current().record("fence", fence);
                        let reason = format!("{}: {why}", describe(job.origin));
                        tracing::warn!(fence, "closing the work: committing FAILURE as its signal");
                        self.close_under(job, fence, reason).await?;
                    }
                    // Refused: the record changed; look again.
                    Ok(_) => {}
                    Err(error) => return Err(self.retry(job, format!("could not take the work to close it: {error}"))),
                },
            }
        }
        Err(self.retry(job, "the work's record kept changing while closing it".into()))
    }

    /// Commits FAILURE as the work's signal under `fence` and sends it.
    async fn close_under(&self, job: &Job<'_>, fence: u64, reason: String) -> Result<(), Disposition> {
        match self.commit_and_send(job, fence, Outcome::failed(reason)).await {
            Disposition::Done(_) => Ok(()),
            other => Err(other),
        }
    }
}
