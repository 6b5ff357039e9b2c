//! The lease store as each region sees it: the real in-memory store (linearizable, as MRSC) or a
//! replica per region (MREC), behind seeded faults, with every grant and commit observed for
//! invariants S1 and S3, and every stored wait for S2 (only the newest fence stores a provider's
//! work in progress, and its poll count never goes back).

use std::sync::Arc;

use async_trait::async_trait;
use cfn_once_core::clock::Clock;
use cfn_once_core::lease::{
    Acquire, AcquireRequest, Conditional, LeaseRecord, LeaseState, LeaseStore, PollRecord, StoreError,
};
use cfn_once_core::memory_store::MemoryLeaseStore;
use cfn_once_core::request::RequestKey;
use cfn_once_core::wait_condition::is_work_id;

use crate::scenario::{PlantedBug, Region, StoreMode};
use crate::shared::{GiveBack, Shared};

/// The table: one copy, or one per region.
#[derive(Debug)]
pub struct Table {
    mode: StoreMode,
    replicas: [Arc<MemoryLeaseStore>; 2],
    /// The self-check's planted bug that forgets a work's committed signal on a takeover.
    forgets_signals: bool,
}

impl Table {
    pub fn new(mode: StoreMode, planted_bug: Option<PlantedBug>) -> Self {
        let store = || {
            Arc::new(match planted_bug {
                Some(PlantedBug::UnfencedCommit) => MemoryLeaseStore::planted_commit_bug(),
                Some(PlantedBug::FormatBlind) => MemoryLeaseStore::planted_format_blind(),
                _ => MemoryLeaseStore::new(),
            })
        };
        let first = store();
        let replicas = match mode {
            StoreMode::Mrsc => [Arc::clone(&first), first],
            StoreMode::Mrec { .. } => [first, store()],
        };
        Self { mode, replicas, forgets_signals: planted_bug == Some(PlantedBug::SignalAgain) }
    }

    /// Whether any request's provider is waiting for a poll right now.
    pub fn any_waiting(&self) -> bool {
        self.replicas.iter().any(|replica| replica.snapshot().iter().any(|r| r.state == LeaseState::Waiting))
    }

    /// The sweeper: deletes every record past its retention (in every replica). Returns the
    /// keys it deleted.
    pub fn sweep(&self, now_ms: u64) -> Vec<cfn_once_core::request::RequestKey> {
        let before: std::collections::BTreeSet<_> =
            self.replicas.iter().flat_map(|replica| replica.snapshot()).map(|record| record.key).collect();
        for replica in match self.mode {
            StoreMode::Mrsc => &self.replicas[..1],
            StoreMode::Mrec { .. } => &self.replicas[..],
        } {
            replica.sweep(now_ms);
        }
        let after: std::collections::BTreeSet<_> =
            self.replicas.iter().flat_map(|replica| replica.snapshot()).map(|record| record.key).collect();
        before.difference(&after).cloned().collect()
    }

    /// Applies replication that has come due.
    /// Writes `record` as a newer version of cfn-once does, to every replica.
    pub fn put_as_newer_version(&self, record: &LeaseRecord) {
        for replica in &self.replicas {
            replica.put_as_written(record.clone());
        }
    }

    /// The record of `key` in each replica, as stored.
    pub fn stored(&self, key: &cfn_once_core::request::RequestKey) -> Vec<Option<LeaseRecord>> {
        self.replicas.iter().map(|replica| replica.get(key)).collect()
    }

    pub fn replicate(&self, to: Region, record: LeaseRecord) {
        self.replicas[to.index()].replicate(record);
    }
}

/// A region's view of the table, misbehaving on the seed's dice inside the fault window.
#[derive(Debug)]
pub struct RegionStore {
    region: Region,
    table: Arc<Table>,
    shared: Arc<Shared>,
}

/// What the dice chose for one call.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Fault {
    None,
    Transient,
    LostRequest,
    LostReply,
    Hang,
}

impl RegionStore {
    pub fn new(region: Region, table: Arc<Table>, shared: Arc<Shared>) -> Self {
        Self { region, table, shared }
    }

    fn local(&self) -> &MemoryLeaseStore {
        &self.table.replicas[self.region.index()]
    }

    fn roll(&self, operation: &'static str) -> Fault {
        if self.shared.store_out() {
            self.shared.cover("store call failed in an outage");
            self.shared.fault_happened(self.region, "store call failed in an outage");
            // Half the calls are refused outright, half time out without an answer.
            let fault = if self.shared.dice(0.5) { Fault::Transient } else { Fault::LostRequest };
            self.shared.trace(Some(self.region), || format!("{operation}: store out, {fault:?}"));
            return fault;
        }
        // Dice are rolled for the late faults only while their window is open, so that every
        // other seed draws as before.
        if let Some(late) = self.shared.late_store_faults_now() {
            let fault = if self.shared.dice(late.lost_reply) {
                Fault::LostReply
            } else if self.shared.dice(late.lost_request) {
                Fault::LostRequest
            } else {
                Fault::None
            };
            if fault != Fault::None {
                self.shared.cover("store reply or request lost after the fault window");
                self.shared.fault_happened(self.region, "store reply or request lost after the fault window");
                self.shared.trace(Some(self.region), || format!("{operation}: injected late {fault:?}"));
                return fault;
            }
        }
        let faults = self.shared.faults;
        let fault = if self.shared.fault(faults.store_transient) {
            Fault::Transient
        } else if self.shared.fault(faults.store_lost_request) {
            Fault::LostRequest
        } else if self.shared.fault(faults.store_lost_reply) {
            Fault::LostReply
        } else if self.shared.fault(faults.store_hang) {
            Fault::Hang
        } else {
            Fault::None
        };
        if fault != Fault::None {
            let name = match fault {
                Fault::Transient => "store throttled",
                Fault::LostRequest => "store request lost",
                Fault::LostReply => "store write applied, reply lost",
                Fault::Hang => "store call hung",
                Fault::None => unreachable!(),
            };
            self.shared.cover(name);
            self.shared.fault_happened(self.region, name);
            self.shared.trace(Some(self.region), || format!("{operation}: injected {fault:?}"));
        }
        fault
    }

    /// Runs `apply` under the rolled fault.
    async fn call<T>(
        &self,
        operation: &'static str,
        apply: impl Future<Output = Result<T, StoreError>>,
    ) -> Result<T, StoreError> {
        match self.roll(operation) {
            Fault::None => apply.await,
            Fault::Transient => Err(StoreError::Transient("simulated throttling".into())),
            Fault::LostRequest => Err(StoreError::Ambiguous("simulated lost request".into())),
            Fault::LostReply => {
                apply.await?;
                Err(StoreError::Ambiguous("simulated lost reply".into()))
            }
            Fault::Hang => {
                apply.await?;
                std::future::pending().await
            }
        }
    }

    /// Counts how an acquire over a provider's work in progress came about.
    fn cover_poll_taken(&self, before: Option<&LeaseRecord>, request: &AcquireRequest) {
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

    /// S2 for waits: the stored work in progress comes from the newest fence granted, and its
    /// poll count never goes back for the same attempt.
    fn check_wait(&self, key: &RequestKey, fence: u64, poll: &PollRecord) {
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
    fn note_drained_acquire(&self, before: Option<&LeaseRecord>, request: &AcquireRequest, fence: u64) {
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
    fn check_drain(&self, key: &RequestKey, fence: u64, now_ms: u64, what: &str) {
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
    fn given_back(&self, key: &RequestKey, fence: u64) {
        let mut observed = self.shared.observed();
        if observed.to_give_back.get(key).is_some_and(|give_back| give_back.fence == fence) {
            observed.to_give_back.remove(key);
            drop(observed);
            self.shared.cover("a drained primary gave back a lease it took before the control answered");
        }
    }

    /// The planted [`PlantedBug::SignalAgain`]: an acquire by another execution finds a work's
    /// committed signal forgotten, its lease expired, as if nothing had been committed.
    fn forget_signal(&self, request: &AcquireRequest) {
        let Some(record) = self.local().get(&request.key) else { return };
        if is_work_id(&request.key.request_id)
            && record.state == LeaseState::Committed
            && record.owner != request.owner
            && record.fingerprint == request.fingerprint
        {
            self.local().replicate(LeaseRecord {
                state: LeaseState::Running,
                response: None,
                delivered: false,
                lease_until_ms: 0,
                updated_ms: record.updated_ms + 1,
                ..record
            });
        }
    }

    /// MREC: the write replicates to the other region after the lag.
    fn replicate_later(&self, key: &RequestKey) {
        if let StoreMode::Mrec { lag_ms } = self.table.mode
            && let Some(record) = self.local().get(key)
        {
            let due = self.shared.clock.now_ms() + lag_ms;
            self.shared.observed().replications.push((due, self.region.other(), record));
        }
    }
}

#[async_trait]
impl LeaseStore for RegionStore {
    async fn acquire(&self, request: &AcquireRequest) -> Result<Acquire, StoreError> {
        self.call("acquire", async {
            if self.table.forgets_signals {
                self.forget_signal(request);
            }
            let before = self.local().get(&request.key);
            let answer = self.local().acquire(request).await?;
            if let Acquire::Acquired { fence, .. } = answer {
                self.cover_poll_taken(before.as_ref(), request);
                let live = |record: &LeaseRecord| {
                    record.state == LeaseState::Running
                        && record.lease_until_ms >= request.now_ms.saturating_sub(request.skew_ms)
                };
                if request.preempt && before.as_ref().is_some_and(live) {
                    self.shared.cover("close: took the work's lease from a poll in flight");
                }
                self.note_drained_acquire(before.as_ref(), request, fence);
                let previous = self.shared.observed().grants.insert(request.key.clone(), fence).unwrap_or(0);
                if fence <= previous {
                    self.shared.violation(format!(
                        "S3: fence {fence} granted to {} after fence {previous} for {:?}",
                        self.region.name(),
                        request.key.request_id
                    ));
                }
                if fence > 1 {
                    self.shared.cover("lease taken over");
                }
                self.shared.trace(Some(self.region), || format!("lease acquired, fence {fence} ({})", request.owner));
                self.replicate_later(&request.key);
            }
            Ok(answer)
        })
        .await
    }

    async fn close(&self, request: &AcquireRequest, signal: &[u8]) -> Result<Acquire, StoreError> {
        self.call("close", async {
            let before = self.local().get(&request.key);
            let answer = self.local().close(request, signal).await?;
            if let Acquire::Acquired { fence, .. } = answer {
                let live = |record: &LeaseRecord| {
                    record.state == LeaseState::Running
                        && record.lease_until_ms >= request.now_ms.saturating_sub(request.skew_ms)
                };
                if before.as_ref().is_some_and(live) {
                    self.shared.cover("close: took the work's lease from a poll in flight");
                }
                self.note_drained_acquire(before.as_ref(), request, fence);
                self.check_drain(&request.key, fence, request.now_ms, "closed a work");
                let mut observed = self.shared.observed();
                let previous = observed.grants.insert(request.key.clone(), fence).unwrap_or(0);
                let commits = observed.commits.entry((request.key.clone(), request.fingerprint.clone())).or_default();
                commits.push(fence);
                let count = commits.len();
                drop(observed);
                if fence <= previous {
                    self.shared.violation(format!(
                        "S3: fence {fence} granted to {} after fence {previous} for {:?}",
                        self.region.name(),
                        request.key.request_id
                    ));
                }
                if count > 1 {
                    self.shared.violation(format!(
                        "S1: attempt {} of {:?} committed {count} times (fence {fence} by {})",
                        request.fingerprint,
                        request.key.request_id,
                        self.region.name()
                    ));
                }
                self.shared.trace(Some(self.region), || {
                    format!("work closed, its signal committed under fence {fence} ({})", request.owner)
                });
                self.replicate_later(&request.key);
            }
            Ok(answer)
        })
        .await
    }

    async fn heartbeat(
        &self,
        key: &RequestKey,
        fence: u64,
        lease_until_ms: u64,
        now_ms: u64,
    ) -> Result<Conditional, StoreError> {
        self.call("heartbeat", async {
            // A heartbeat to 0 ends the lease: how a lease is given back when the acquire's
            // reply was lost. Any other is the provider running under it.
            if lease_until_ms == 0 {
                self.given_back(key, fence);
            } else {
                self.check_drain(key, fence, now_ms, "heartbeat");
            }
            let answer = self.local().heartbeat(key, fence, lease_until_ms, now_ms).await?;
            match answer {
                Conditional::Applied => self.replicate_later(key),
                Conditional::Refused(_) => {
                    self.shared.cover("heartbeat found the lease lost");
                    self.shared.trace(Some(self.region), || format!("heartbeat refused for fence {fence}"));
                }
            }
            Ok(answer)
        })
        .await
    }

    async fn commit(
        &self,
        key: &RequestKey,
        fence: u64,
        response: &[u8],
        now_ms: u64,
    ) -> Result<Conditional, StoreError> {
        self.call("commit", async {
            self.check_drain(key, fence, now_ms, "committed");
            let answer = self.local().commit(key, fence, response, now_ms).await?;
            match &answer {
                Conditional::Applied => {
                    let record = self.local().get(key);
                    if let Some(record) = record {
                        let mut observed = self.shared.observed();
                        let commits = observed.commits.entry((key.clone(), record.fingerprint.clone())).or_default();
                        commits.push(fence);
                        let count = commits.len();
                        drop(observed);
                        if count > 1 {
                            self.shared.violation(format!(
                                "S1: attempt {} of {:?} committed {count} times (fence {fence} by {})",
                                record.fingerprint,
                                key.request_id,
                                self.region.name()
                            ));
                        }
                    }
                    self.shared.trace(Some(self.region), || format!("committed under fence {fence}"));
                    self.replicate_later(key);
                }
                Conditional::Refused(_) => {
                    self.shared.cover("stale commit rejected");
                    self.shared.trace(Some(self.region), || format!("commit under fence {fence} rejected"));
                }
            }
            Ok(answer)
        })
        .await
    }

    async fn wait(
        &self,
        key: &RequestKey,
        fence: u64,
        poll: &PollRecord,
        now_ms: u64,
    ) -> Result<Conditional, StoreError> {
        self.call("wait", async {
            self.check_drain(key, fence, now_ms, "stored a wait");
            let answer = self.local().wait(key, fence, poll, now_ms).await?;
            match answer {
                Conditional::Applied => {
                    self.check_wait(key, fence, poll);
                    self.shared.cover("work in progress stored, lease released");
                    self.shared.trace(Some(self.region), || {
                        let poll_in_ms = poll.poll_at_ms.saturating_sub(now_ms);
                        format!("waiting under fence {fence}: {} polls so far, next in {poll_in_ms} ms", poll.polls)
                    });
                    self.replicate_later(key);
                }
                Conditional::Refused(_) => {
                    self.shared.cover("stale wait rejected");
                    self.shared.trace(Some(self.region), || format!("wait under fence {fence} rejected"));
                }
            }
            Ok(answer)
        })
        .await
    }

    async fn mark_delivered(
        &self,
        key: &RequestKey,
        fence: u64,
        unsent: Option<&str>,
        now_ms: u64,
    ) -> Result<Conditional, StoreError> {
        self.call("mark delivered", async {
            let answer = self.local().mark_delivered(key, fence, unsent, now_ms).await?;
            if unsent.is_some() && answer == Conditional::Applied {
                self.shared.cover("a work recorded done without its signal (its handle expired or refused it)");
            }
            if answer == Conditional::Applied {
                self.replicate_later(key);
            }
            Ok(answer)
        })
        .await
    }

    async fn read(&self, key: &RequestKey) -> Result<Option<LeaseRecord>, StoreError> {
        self.call("read", self.local().read(key)).await
    }

    async fn leave(&self, left: &LeaseRecord) -> Result<Conditional, StoreError> {
        self.call("leave", async {
            let answer = self.local().leave(left).await?;
            if answer == Conditional::Applied {
                self.given_back(&left.key, left.fence);
                self.shared.trace(Some(self.region), || format!("lease under fence {} given back", left.fence));
                self.replicate_later(&left.key);
            }
            Ok(answer)
        })
        .await
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::scenario::Faults;
    use crate::shared::T0_MS;
    use cfn_once_core::fingerprint::Fingerprint;
    use cfn_once_core::lease::RequestLabel;
    use cfn_once_core::request::StackArn;
    use futures_util::FutureExt;

    const MARGIN_MS: u64 = 20_000;

    fn calm() -> Faults {
        Faults {
            window_end_ms: 0,
            store_transient: 0.0,
            store_lost_request: 0.0,
            store_lost_reply: 0.0,
            store_hang: 0.0,
            put_fail: 0.0,
            put_lost_reply: 0.0,
            put_hang: 0.0,
            crash: 0.0,
            duplicate: 0.0,
            freeze: 0.0,
            control_slow: 0.0,
            provider_lost_reply: 0.0,
            fenced_lost_reply: 0.0,
        }
    }

    fn key() -> RequestKey {
        RequestKey {
            stack_id: StackArn::parse("arn:aws:cloudformation:us-east-1:123456789012:stack/sim/1").expect("an ARN"),
            request_id: "request-0".into(),
        }
    }

    fn acquire(fingerprint: &str, sent_ms: u64, now_ms: u64) -> AcquireRequest {
        AcquireRequest {
            key: key(),
            fingerprint: Fingerprint::from_stored(fingerprint.into()),
            sent_ms,
            owner: format!("us-east-1/lambda-1/{fingerprint}"),
            now_ms,
            lease_until_ms: now_ms + 30_000,
            skew_ms: 2_000,
            expires_ms: now_ms + 86_400_000,
            poll_lag_ms: 0,
            label: RequestLabel::default(),
            preempt: false,
        }
    }

    /// The primary, told "standby" before its invocation started, takes a lease for attempt
    /// `taken_for` (due at `deadline_of_taken_ms`) and commits under it at `commit_at_ms`,
    /// after a retried deployment (attempt "newer", due in an hour) was written to the record
    /// when `retried` says so. Returns the violations.
    fn commit_after_drain(deadline_of_taken_ms: u64, commit_at_ms: u64, retried: bool) -> Vec<String> {
        let shared = Arc::new(Shared::new(1, calm(), None, MARGIN_MS, false));
        let table = Arc::new(Table::new(StoreMode::Mrsc, None));
        let primary = RegionStore::new(Region::Primary, Arc::clone(&table), Arc::clone(&shared));
        {
            let mut observed = shared.observed();
            observed.primary_told = Some((false, 0));
            observed.invocations_started.insert("lambda-1".into(), 1_000);
            observed.deadlines.insert(Fingerprint::from_stored("taken".into()), deadline_of_taken_ms);
            observed.deadlines.insert(Fingerprint::from_stored("newer".into()), 3_600_000);
        }
        shared.clock.set_ms(T0_MS + 1_000);
        let taken = primary.acquire(&acquire("taken", T0_MS, T0_MS + 1_000)).now_or_never().expect("ready");
        let Ok(Acquire::Acquired { fence, .. }) = taken else { panic!("not acquired: {taken:?}") };
        if retried {
            // The retried deployment, sent later, takes the record over once the lease ended.
            let newer = acquire("newer", T0_MS + 500, T0_MS + 40_000);
            let answer = table.replicas[0].acquire(&newer).now_or_never().expect("ready");
            assert!(matches!(answer, Ok(Acquire::Acquired { .. })), "{answer:?}");
        }
        shared.clock.set_ms(T0_MS + commit_at_ms);
        let _ = primary.commit(&key(), fence, b"{}", T0_MS + commit_at_ms).now_or_never().expect("ready");
        shared.observed().violations.clone()
    }

    #[test]
    fn the_drain_check_fails_a_drained_primary_that_commits_new_work() {
        let violations = commit_after_drain(3_600_000, 60_000, false);
        assert!(violations.iter().any(|v| v.starts_with("DRAIN")), "{violations:?}");
    }

    #[test]
    fn the_drain_check_lets_a_drained_primary_answer_its_own_attempt_near_its_deadline() {
        // Seeds 188852, 376954 and 430635: the attempt the lease was taken for is due within the
        // margin (or past due), while the record holds a retried deployment due in an hour. The
        // check used to read the record's attempt, and failed the primary for answering FAILED
        // near its own attempt's deadline, which the decision table asks of every region.
        assert_eq!(commit_after_drain(70_000, 60_000, true), Vec::<String>::new());
        assert_eq!(commit_after_drain(50_000, 60_000, true), Vec::<String>::new());
        // Far from its own attempt's deadline, the commit is new work whatever the record holds.
        let violations = commit_after_drain(3_000_000, 60_000, true);
        assert!(violations.iter().any(|v| v.starts_with("DRAIN")), "{violations:?}");
    }
}
