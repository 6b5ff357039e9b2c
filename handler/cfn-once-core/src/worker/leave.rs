//! A standby primary's leases given back: a primary that acquired before the active-region
//! control answered, or whose acquire met a record other than the one it decided on, keeps the
//! lease only where the decision table would have taken it anyway (an expired lease, anything
//! near the deadline). Any other lease it gives back unused, writing the record as the acquire
//! found it, so every delivery after decides as if it had never been taken.

use super::Worker;
use super::job::Job;
use super::store::Prior;
use crate::control::Activity;
use crate::decision::Action;
use crate::lease::{LeaseRecord, LeaseState, Seen, StoreError, left_record};
use crate::vocabulary::Role;

impl Worker {
    /// Takes the lease the table decided to take on the record as this delivery saw it. The
    /// store grants an acquire on what the record holds when the acquire arrives, which may
    /// have changed since: an expired lease seen at one moment may be a stored wait with its
    /// poll due at the next (a delivery frozen between its read and its acquire). Every other
    /// column of the table takes that lease too, but a standby primary starts no new work, so
    /// for it a lease granted on a record the table gives it no right to is given back unused
    /// (`keep_or_leave`; seed 413998293349042 of the third fresh range: a drained primary
    /// polled a wait after deciding to take over an expired lease). `None`: given back.
    pub(super) async fn acquire_as_decided(
        &self,
        job: &Job<'_>,
        activity: Activity,
    ) -> Option<Result<Seen, StoreError>> {
        if self.settings.role == Role::Primary && activity == Activity::Standby {
            let found = self.acquire_finding(job).await;
            return self.keep_or_leave(job, activity, found).await;
        }
        Some(self.acquire(job).await)
    }

    /// After an acquire made before the control answered: the record to decide on, or `None`
    /// where the acquire took a lease the table gives a standby primary no right to (new work:
    /// no record, another attempt's, a wait to poll), which was then given back (see
    /// `leave`) and the message is left. A lease the table would have taken anyway (an
    /// expired one; anything near the deadline) stands, and so does every lease of an active
    /// region.
    pub(super) async fn keep_or_leave(
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
        self.leave_unused(job, fence, left).await;
        None
    }

    /// Gives back the lease `fence` took and ran nothing under: writes `left`, the record as the
    /// acquire found it ([`LeaseStore::leave`]), so every delivery after decides as if it had
    /// never been taken. Where what it found is not known (its reply was lost), the lease is
    /// ended instead (a heartbeat to 0): whoever comes next takes it over, told that an
    /// execution may have run, which is the safe side. A give-back that fails leaves the lease
    /// to end by itself: later deliveries wait for its end, nothing runs twice.
    pub(super) async fn leave_unused(&self, job: &Job<'_>, fence: u64, left: Option<LeaseRecord>) {
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
}
