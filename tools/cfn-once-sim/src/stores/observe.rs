//! What a region's store calls are checked for (S2 for waits, S3 for grants, S1 for commits,
//! DRAIN for a drained primary's leases) and counted as.

use cfn_once_core::fingerprint::Fingerprint;
use cfn_once_core::lease::{AcquireRequest, LeaseRecord, LeaseState, PollRecord};
use cfn_once_core::request::RequestKey;
use cfn_once_core::wait_condition::is_work_id;

use crate::scenario::Region;
use crate::shared::GiveBack;

use super::RegionStore;

impl RegionStore {
    /// Counts how an acquire over a provider's work in progress came about.
    pub(super) fn cover_poll_taken(&self, before: Option<&LeaseRecord>, request: &AcquireRequest) {
        let Some(before) = before else { return };
        if before.poll_for(&request.fingerprint).is_none() {
            return;
        }
        match before.state {
            LeaseState::Waiting => {
                self.shared.cover("due poll taken");
                if !before.owner.starts_with(self.region.name()) {
                    self.shared.cover("due poll taken by the other region");
                }
            }
            LeaseState::Running => self.shared.cover("lease taken over in the middle of a poll"),
            LeaseState::Committed | LeaseState::Left => {}
        }
    }

    /// Counts a grant that took the lease from a run still in flight (its lease live at the
    /// request's time, the skew allowed): a close stopping a poll.
    pub(super) fn cover_preempted(&self, before: Option<&LeaseRecord>, request: &AcquireRequest) {
        let live = |record: &LeaseRecord| {
            record.state == LeaseState::Running
                && record.lease_until_ms >= request.now_ms.saturating_sub(request.skew_ms)
        };
        if before.is_some_and(live) {
            self.shared.cover("close: took the work's lease from a poll in flight");
        }
    }

    /// S3: the fences granted for a key only grow.
    pub(super) fn check_grant(&self, key: &RequestKey, fence: u64) {
        let previous = self.shared.observed().grants.insert(key.clone(), fence).unwrap_or(0);
        if fence <= previous {
            self.shared.violation(format!(
                "S3: fence {fence} granted to {} after fence {previous} for {:?}",
                self.region.name(),
                key.request_id
            ));
        }
    }

    /// S1: an attempt is committed once, whoever commits it (a commit, or a close that commits
    /// the work's signal).
    pub(super) fn check_commit(&self, key: &RequestKey, fingerprint: &Fingerprint, fence: u64) {
        let mut observed = self.shared.observed();
        let commits = observed.commits.entry((key.clone(), fingerprint.clone())).or_default();
        commits.push(fence);
        let count = commits.len();
        drop(observed);
        if count > 1 {
            self.shared.violation(format!(
                "S1: attempt {fingerprint} of {:?} committed {count} times (fence {fence} by {})",
                key.request_id,
                self.region.name()
            ));
        }
    }

    /// S2 for waits: the stored work in progress comes from the newest fence granted, and its
    /// poll count never goes back for the same attempt.
    pub(super) fn check_wait(&self, key: &RequestKey, fence: u64, poll: &PollRecord) {
        let mut observed = self.shared.observed();
        let granted = observed.grants.get(key).copied().unwrap_or(0);
        let previous = observed.waits.insert(key.clone(), (poll.fingerprint.clone(), poll.polls));
        drop(observed);
        if fence < granted {
            self.shared
                .violation(format!("S2: a wait under fence {fence} was stored after fence {granted} was granted"));
        }
        if let Some((fingerprint, polls)) = previous
            && fingerprint == poll.fingerprint
            && polls > poll.polls
        {
            self.shared.violation(format!(
                "S2: the poll count of {:?} went back from {polls} to {}",
                key.request_id, poll.polls
            ));
        }
    }

    /// A primary the control last told "standby" starts no new work and takes no poll until
    /// its request's deadline is near (the decision table's standby-primary column); taking
    /// over an expired lease is allowed. A control read that times out must not change that.
    /// A primary that has no fresh answer acquires while it asks, so taking such a lease is
    /// allowed too; what is checked is that it gives the lease back (`leave`, or a heartbeat
    /// that ends it) before doing anything under it: a commit, a wait or a heartbeat under a
    /// lease still to give back is the violation.
    pub(super) fn note_drained_acquire(&self, before: Option<&LeaseRecord>, request: &AcquireRequest, fence: u64) {
        if self.region != Region::Primary || before.is_some_and(|record| record.state == LeaseState::Running) {
            return;
        }
        let mut observed = self.shared.observed();
        // Every record of an invocation reads the control when the invocation starts (or is
        // answered by a read already in flight then). One that started after the control had
        // told the primary "standby" (and nothing since said "active") must act on standby: a
        // slow read keeps the last known answer. One that started before may have acted on the
        // configured fallback, or on an earlier answer.
        let invocation = request.owner.split('/').nth(1).unwrap_or_default();
        let started_ms = observed.invocations_started.get(invocation).copied();
        let told_standby = match (observed.primary_told, started_ms) {
            (Some((false, told_ms)), Some(started_ms)) => told_ms < started_ms,
            _ => false,
        };
        if let (true, Some(started_ms)) = (told_standby, started_ms) {
            let give_back = GiveBack { fence, started_ms, fingerprint: request.fingerprint.clone() };
            observed.to_give_back.insert(request.key.clone(), give_back);
        } else {
            observed.to_give_back.remove(&request.key);
        }
    }

    /// The drain check at a write under `fence` made at `now_ms` (the primary's clock): a lease
    /// still to give back must not be used, unless the request's deadline is near by then, when
    /// even a drained primary answers, or the control told the primary "active" after the
    /// invocation started (its record's read, beside the acquire, may be that answer).
    pub(super) fn check_drain(&self, key: &RequestKey, fence: u64, now_ms: u64, what: &str) {
        let observed = self.shared.observed();
        let Some(GiveBack { fence: held, started_ms, fingerprint }) = observed.to_give_back.get(key) else {
            return;
        };
        if *held != fence || observed.primary_told_active.iter().any(|told_ms| told_ms >= started_ms) {
            return;
        }
        // The deadline of the attempt the lease was taken for: the record may hold a newer
        // attempt of the same RequestId by now, whose deadline says nothing about this one.
        // A work's record is due at its wait condition's timeout (a Delete closing it, at the
        // Delete's deadline).
        let work_deadline_ms = is_work_id(&key.request_id)
            .then(|| observed.work_deadlines.get(&(fingerprint.clone(), key.request_id.clone())))
            .flatten();
        let deadline_ms = work_deadline_ms.or_else(|| observed.deadlines.get(fingerprint)).copied();
        drop(observed);
        // Near the deadline by the primary's own clock (which may be stepped), a drained primary
        // answers too.
        let primary_elapsed_ms = now_ms.saturating_sub(crate::shared::T0_MS);
        let slack_ms = self.shared.deadline_margin_ms + 1_000;
        if deadline_ms.is_some_and(|deadline_ms| primary_elapsed_ms + slack_ms < deadline_ms) {
            self.shared.violation(format!(
                "DRAIN: the primary {what} under a lease of {:?} it took for new work although the control's last answer to it was standby",
                key.request_id
            ));
        }
    }

    /// The lease of `key` under `fence` was given back (or lost): nothing to check any more.
    pub(super) fn given_back(&self, key: &RequestKey, fence: u64) {
        let mut observed = self.shared.observed();
        if observed.to_give_back.get(key).is_some_and(|give_back| give_back.fence == fence) {
            observed.to_give_back.remove(key);
            drop(observed);
            self.shared.cover("a drained primary gave back a lease it took before the control answered");
        }
    }
}
