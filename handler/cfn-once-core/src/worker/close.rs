//! Closing a resource's work (see `wait_condition`): a Delete of a resource with a wait
//! condition, or an Update that names a new handle, ends the work of the handle it was sent in
//! its (old) properties before it is answered.
//!
//! Closing takes the work's lease under a higher fence (S3), so no poll of it can commit or
//! store state any more (S2), and commits FAILURE as its signal if nothing was committed yet
//! (S1: the signal is the committed bytes, whoever PUTs them). A signal already committed is
//! delivered if it was not. Only once the record shows the signal delivered does the request go
//! on: so a Delete is answered after its work's one signal, never before, and no work runs
//! under a deleted resource.
//!
//! The close never waits for the work's lease (L1 for the closing request): it takes the lease
//! from a poll in flight too (`AcquireRequest::preempt`). Waiting for a live lease to end does
//! not bound anything: a work polled every few seconds holds its lease again before the close's
//! backoff comes back, and one poll may run for longer than the close's own request has left.
//! Once the lease is taken, no new poll starts (the record is the close's until it commits, and
//! COMMITTED after). The poll it was taken from is refused at its next heartbeat and its lease
//! ends by the time it had written; the closing request goes on after that end, so its
//! provider does not run beside that poll, unless waiting for it would bring its own deadline
//! near: then its answer comes first.
//!
//! A close that cannot finish (the store or the handle's S3 failing) is retried, and once the
//! closing request's deadline is near it is answered FAILED saying why, rather than left for
//! CloudFormation to time out after its whole ServiceTimeout (`Worker::close_before`). Only
//! FAILED: a request is never answered SUCCESS while its work may still signal, and a close
//! whose write had an unknown outcome is not taken as not applied (a signal it committed is
//! delivered by the work's own copies, `Worker::superseded_work`). The close's calls end in
//! time for that answer (what a taker-over needs in the deadline margin), so it comes before
//! the deadline.

use super::job::{Job, Phase, describe};
use super::store::Prior;
use super::{DECISIONS_MAX, Worker};
use crate::clock::within;
use crate::lease::{LeaseRecord, LeaseState, Seen, StoreError};
use crate::request::{Request, RequestKind};
use crate::response::{Outcome, Status};
use crate::vocabulary::{Disposition, Done};
use crate::wait_condition::{WaitDeclared, WaitSpec};

/// A work a request ends, and why.
pub(super) struct Closing<'a> {
    /// The wait condition whose work ends.
    pub(super) spec: &'a WaitSpec,
    /// The FAILURE signal's Reason, if nothing was signalled yet.
    pub(super) why: &'static str,
}

/// Why a close did not finish in this delivery.
pub(super) enum Unfinished {
    /// It waits for something on its way (a signal just committed, which its committer is
    /// sending; the lease of a poll it stopped): the disposition brings the message back then.
    Waits(Disposition),
    /// It failed, saying why: retried, or answered FAILED near the request's deadline.
    Failed(String),
}

/// The work `request` ends before it is handled, if any: a Delete's, on the handle its
/// properties name; an Update's old one, when it names a different handle (or none).
pub(super) fn to_close(request: &Request) -> Option<Closing<'_>> {
    match request.kind()? {
        RequestKind::Delete => request.wait.spec().map(|spec| Closing {
            spec,
            why: "the resource was deleted while its work ran; the work was stopped and is not polled again",
        }),
        // An Update whose new declaration is refused fails, and leaves the resource (and its
        // work) as it was.
        RequestKind::Update if matches!(request.wait, WaitDeclared::Invalid(_)) => None,
        RequestKind::Update => {
            let old = request.old_wait.as_ref()?;
            // A new handle (or none) ends the old one's work; the same handle keeps it, whatever
            // the timeout says.
            (request.wait.spec().map(|spec| &spec.handle) != Some(&old.handle)).then_some(Closing {
                spec: old,
                why: "an Update named a new wait condition handle; the work for this one was stopped and is not polled again",
            })
        }
        RequestKind::Create => None,
    }
}

impl Worker {
    /// Closes the work `closing` names before `job`'s request goes on. `Ok(None)`: closed, go
    /// on. `Ok(Some(why))`: the close could not finish and the request's deadline is near: the
    /// request is answered FAILED saying why (the decision table answers FAILED in the margin
    /// anyway; this only keeps the close from holding that answer past the deadline). `Err`:
    /// the disposition to come back with.
    pub(super) async fn close_before(
        &self,
        job: &Job<'_>,
        closing: &Closing<'_>,
    ) -> Result<Option<String>, Disposition> {
        let work_request = crate::work::work_request(job.request, closing.spec);
        // The close keeps the closing request's deadline: its answer is what is owed.
        let close = Job { request: &work_request, phase: Phase::Signal, work_after: None, ..job.clone() };
        // Its calls end where the request's own FAILED answer must begin to come before the
        // deadline: an acquire, a commit and a PUT, what a taker-over needs in the margin. A
        // call cut there has an unknown outcome, which only that FAILED answer follows. Past
        // that point (a copy that arrived too late for any answer in time) nothing is gained
        // by skipping the close: it stops the work first, bounded by its own calls.
        let end_ms = job.budget.deadline.at_ms.saturating_sub(self.settings.take_over_answer_ms());
        let left_ms = end_ms.saturating_sub(self.clock.now_ms());
        let closed = if left_ms == 0 {
            self.close_work(&close, closing.why).await
        } else {
            within(self.clock.as_ref(), left_ms, self.close_work(&close, closing.why)).await.unwrap_or_else(|| {
                Err(Unfinished::Failed(format!(
                    "it did not finish within the {} s the request's deadline left it",
                    left_ms.div_ceil(1000)
                )))
            })
        };
        match closed {
            Ok(()) => Ok(None),
            Err(Unfinished::Waits(disposition)) => Err(disposition),
            Err(Unfinished::Failed(why)) if job.budget.deadline_near(self.clock.now_ms()) => {
                tracing::error!(why, "the work could not be closed and the deadline is near; answering FAILED");
                Ok(Some(why))
            }
            Err(Unfinished::Failed(why)) => Err(self.retry(&close, why)),
        }
    }

    /// Closes the work `job` is about: `Ok` once its signal (the work's own, or FAILURE with
    /// `why`) is committed and delivered; otherwise why not.
    pub(super) async fn close_work(&self, job: &Job<'_>, why: &str) -> Result<(), Unfinished> {
        // The signal a close commits, the same bytes from whichever region closes.
        let reason = format!("{}: {why}", describe(job.origin));
        let (failure, _) = crate::work::signal_body(job.origin, Outcome::failed(reason));
        for _ in 0..DECISIONS_MAX {
            let record = match self.read_record(job).await {
                Ok(record) => record.filter(|record| record.state != LeaseState::Left),
                // A newer version of cfn-once finished the work: nothing is left to close.
                Err(StoreError::NewerFormat { settled: true, .. }) => return Ok(()),
                Err(error) => return Err(Unfinished::Failed(format!("could not read the work to close it: {error}"))),
            };
            let now_ms = self.clock.now_ms();
            match record {
                Some(record) if record.state == LeaseState::Committed && record.response.is_some() => {
                    if record.delivered {
                        tracing::info!(fence = record.fence, "the work's signal is delivered; going on");
                        return Ok(());
                    }
                    self.send_found_signal(job, &record).await?;
                }
                // No work yet, work waiting for its poll, a poller that stopped, or a poll in
                // flight: take it, whatever its lease, and commit FAILURE as its signal in the
                // same write.
                record => match self.close_with(job, &failure).await {
                    Ok((Seen::Mine { fence, .. }, prior)) => {
                        tracing::Span::current().record("fence", fence);
                        tracing::warn!(fence, "work closed: FAILURE committed as its signal");
                        if let Err(error) = self.send_answer(job, fence, &failure, Status::Failed).await {
                            return Err(Unfinished::Failed(format!(
                                "could not send the work's FAILURE signal to its wait condition handle: {error}"
                            )));
                        }
                        let stopped_until_ms = self.stopped_poll_ends_ms(&prior, record.as_ref(), now_ms);
                        let now_ms = self.clock.now_ms();
                        if let Some(until_ms) = stopped_until_ms
                            && now_ms < until_ms
                            && !job.budget.deadline_near(until_ms)
                        {
                            let why = "the work's poll in flight was stopped; going on once its lease has ended";
                            return Err(Unfinished::Waits(self.see_again(job, until_ms + self.jitter_ms(), why)));
                        }
                    }
                    // Refused: the record changed (committed meanwhile); look again.
                    Ok(_) => {}
                    Err(error) => {
                        return Err(Unfinished::Failed(format!("could not take the work to close it: {error}")));
                    }
                },
            }
        }
        Err(Unfinished::Failed("the work's record kept changing while closing it".into()))
    }

    /// Sends the signal committed in `record` and not marked delivered: its committer may have
    /// died between the commit and the PUT. As the decision table does for an answer, a signal
    /// committed less than the delivery grace ago is left to its committer, which is most likely
    /// PUTting it right now (unless the deadline is near). `Ok` once it is delivered.
    pub(super) async fn send_found_signal(&self, job: &Job<'_>, record: &LeaseRecord) -> Result<(), Unfinished> {
        let now_ms = self.clock.now_ms();
        let grace_end_ms = record.updated_ms.saturating_add(self.settings.put.attempt_timeout_ms);
        if now_ms < grace_end_ms && !job.budget.deadline_near(now_ms) {
            let why = "the work's signal was just committed; its committer is sending it";
            return Err(Unfinished::Waits(self.see_again(job, grace_end_ms + self.jitter_ms(), why)));
        }
        let signal = record.response.as_deref().unwrap_or_default();
        let status = job.status_of(signal);
        match self.send_answer(job, record.fence, signal, status).await {
            Ok(_) => Ok(()),
            Err(error) => Err(Unfinished::Failed(format!(
                "could not send the work's signal to its wait condition handle: {error}"
            ))),
        }
    }

    /// A copy of a work that finds its attempt superseded: by a close (a Delete, or an Update
    /// naming a new handle), or by a same-handle Update's work. The record is keyed by the
    /// handle, so what the superseding execution committed is a signal for this same handle,
    /// and S1 makes any PUT of it the same bytes: one left undelivered (its committer died
    /// between the commit and the PUT, its own message hidden for the visibility timeout) is
    /// this copy's to deliver before it drops, or the work's one signal could wait past the
    /// wait condition's timeout (L1 for the work; seed 493643685497949 of the second fresh
    /// range). Everything else a superseded copy finds is someone else's to finish.
    pub(super) async fn superseded_work(&self, job: &Job<'_>) -> Disposition {
        let record = match self.read_record(job).await {
            Ok(record) => record,
            // A newer version of cfn-once finished the work: nothing is left to deliver.
            Err(StoreError::NewerFormat { settled: true, .. }) => return Disposition::Done(Done::Superseded),
            Err(error) => return self.retry(job, format!("could not read the superseded work: {error}")),
        };
        match record {
            Some(record) if record.state == LeaseState::Committed && record.response.is_some() && !record.delivered => {
                tracing::info!(
                    fence = record.fence,
                    "a superseding execution's signal was never delivered; sending it"
                );
                match self.send_found_signal(job, &record).await {
                    Ok(()) => Disposition::Done(Done::Replayed { fence: record.fence }),
                    Err(Unfinished::Waits(disposition)) => disposition,
                    Err(Unfinished::Failed(why)) => self.retry(job, why),
                }
            }
            _ => Disposition::Done(Done::Superseded),
        }
    }

    /// When the lease a close took from a poll in flight ends at the latest (skew included), if
    /// it took one: `prior` is what its acquire replaced, `read` the record read before it.
    /// Where the acquire's reply was lost, a poll may have taken the lease between the read and
    /// the acquire, so its lease is assumed to run a whole lease from now.
    fn stopped_poll_ends_ms(&self, prior: &Prior, read: Option<&LeaseRecord>, now_ms: u64) -> Option<u64> {
        let skew_ms = self.settings.skew_ms;
        let running = |record: &LeaseRecord| record.state == LeaseState::Running;
        match prior {
            Prior::Known(prior) => prior
                .as_deref()
                .filter(|prior| running(prior))
                .map(|prior| prior.lease_until_ms.saturating_add(skew_ms)),
            Prior::Unknown => Some(match read.filter(|read| running(read)) {
                Some(read) => read.lease_until_ms.saturating_add(skew_ms),
                None => now_ms.saturating_add(self.settings.lease_ms + skew_ms),
            }),
        }
        .filter(|until_ms| *until_ms > now_ms)
    }
}
