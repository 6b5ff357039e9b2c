//! The simulation's shared state: virtual time, the fault dice, and everything observed for the
//! invariant checks, the coverage counters and the trace.

use std::collections::BTreeMap;
use std::sync::{Mutex, MutexGuard, PoisonError};

use cfn_once_core::clock::{Clock, ManualClock};
use cfn_once_core::fingerprint::Fingerprint;
use cfn_once_core::lease::LeaseRecord;
use cfn_once_core::random::{Random, SplitMix64};
use cfn_once_core::request::RequestKey;

use crate::scenario::{Faults, LateStoreFaults, Region};

/// Virtual time starts here (epoch ms); traces show time relative to it.
pub const T0_MS: u64 = 1_800_000_000_000;

/// What the simulation saw.
#[derive(Debug, Default)]
pub struct Observed {
    pub trace: Vec<String>,
    pub coverage: BTreeMap<&'static str, u64>,
    pub violations: Vec<String>,
    /// Highest fence granted per key.
    pub grants: BTreeMap<RequestKey, u64>,
    /// Commits applied per attempt.
    pub commits: BTreeMap<(RequestKey, Fingerprint), Vec<u64>>,
    /// The last work in progress stored per key: its attempt and poll count.
    pub waits: BTreeMap<RequestKey, (Fingerprint, u32)>,
    /// Bodies PUT per ResponseURL, with when.
    /// When each poll of a provider's work began, by item (elapsed ms).
    pub poll_starts: Vec<(String, u64)>,
    pub puts: BTreeMap<String, Vec<(u64, Vec<u8>)>>,
    /// PUTs S3 refused because their handle had expired: (elapsed ms, URL, region).
    pub refused: Vec<(u64, String, Region)>,
    /// Runs of the provider by (scope, fence): until when each may still be running (elapsed
    /// ms; `u64::MAX` while its call has not returned). A run whose answer was lost goes on a
    /// while after its caller gave up.
    pub runs: BTreeMap<(String, u64), u64>,
    /// When the sweeper removed records (elapsed ms).
    pub sweeps: Vec<u64>,
    /// The RequestIds whose provider's Update ran (at least once).
    pub updates_run: std::collections::BTreeSet<String>,
    /// The fenced downstream table: each item as its last accepted write left it.
    pub fenced: BTreeMap<String, DownstreamItem>,
    /// Writes accepted per item of the downstream table so far.
    pub fenced_versions: BTreeMap<String, u64>,
    /// ADDs applied per writer (a step of a request) and item.
    pub adds: BTreeMap<(Writer, String), u32>,
    /// Writes of runs whose answer was lost, still to be made.
    pub late_writes: Vec<LateWrite>,
    /// The records a newer version of cfn-once wrote, as it last wrote them (`Kind::Upgrade`).
    pub newer_records: BTreeMap<cfn_once_core::request::RequestKey, cfn_once_core::lease::LeaseRecord>,
    /// MREC replication in flight: (due ms, to region, record).
    pub replications: Vec<(u64, Region, LeaseRecord)>,
    /// Every fault that happened, with when (elapsed ms) and where: the evidence the L1 check
    /// reads to decide whether a region could still answer a request in time.
    pub fault_log: Vec<(u64, Region, &'static str)>,
    /// What the active-region control last answered the primary (true: active), and when
    /// (elapsed ms).
    pub primary_told: Option<(bool, u64)>,
    /// When each invocation started (elapsed ms), by its id: every record of it reads the
    /// control then.
    pub invocations_started: BTreeMap<String, u64>,
    /// Each attempt's deadline, elapsed ms, by fingerprint: for the drain check.
    pub deadlines: BTreeMap<Fingerprint, u64>,
    /// The wait condition timeout of each attempt that hands work to one, elapsed ms, by the
    /// attempt and its work's RequestId: the deadline of that work's record (an Update naming a
    /// new handle also closes its old work, whose record it takes under its own deadline).
    pub work_deadlines: BTreeMap<(Fingerprint, String), u64>,
    /// Leases a drained primary took for new work before its control answered, by key.
    pub to_give_back: BTreeMap<RequestKey, GiveBack>,
    /// When the control told the primary "active" (elapsed ms), every time: a record that asks
    /// beside its acquire may be answered "active" after its invocation started, and then keeps
    /// its lease rightly.
    pub primary_told_active: Vec<u64>,
}

/// An item of the provider's downstream table.
pub type DownstreamItem = std::collections::HashMap<String, cfn_once_core::fenced::Literal>;

/// Whose write to the downstream table it is, for COUNT: the request's scope, its attempt, and
/// the step (0: the run, `n`: its `n`th poll).
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
pub struct Writer {
    pub scope: String,
    pub attempt: String,
    pub step: u32,
}

/// A write of a run whose answer was lost, made while the run goes on after its caller gave up.
#[derive(Debug, Clone)]
pub struct LateWrite {
    /// When (elapsed ms).
    pub due_ms: u64,
    pub item: String,
    pub rules: cfn_once_core::ownership::WriteRules,
    pub writer: Writer,
    pub region: Region,
}

/// A lease a drained primary took before its control answered: it must be given back before
/// anything is done under it (the drain check), unless its own attempt's deadline is near.
#[derive(Debug, Clone)]
pub struct GiveBack {
    /// The fence the acquire took.
    pub fence: u64,
    /// When the invocation that took it started (elapsed ms).
    pub started_ms: u64,
    /// The attempt the lease was taken for. Its deadline, not that of whichever attempt the
    /// record holds later (a retried deployment reusing the RequestId), says whether a drained
    /// primary may answer it.
    pub fingerprint: Fingerprint,
}

/// Shared by every simulated component of one seed.
#[derive(Debug)]
pub struct Shared {
    pub clock: ManualClock,
    pub faults: Faults,
    /// (from, to) ms after the start: every lease-store call fails.
    pub store_outage: Option<(u64, u64)>,
    /// Lease-store faults outside the fault window.
    pub late_store_faults: Option<LateStoreFaults>,
    /// When S3 starts refusing each wait condition handle (elapsed ms), by URL.
    pub handle_expiries: BTreeMap<String, u64>,
    /// The planted bug: a PUT to an expired handle fails as if it could be retried.
    pub expired_retryable: bool,
    /// The planted bug: the provider reports a lost answer as transient.
    pub lost_answer_transient: bool,
    /// The planted bug: a fenced write's retry after a lost reply reads the item as if it did
    /// not carry the write's own token (the unknown outcome taken as "not applied").
    pub unknown_as_not_applied: bool,
    /// The planted bug: a fenced write's token is made per run (it names the fence), not per
    /// request, so a rerun of the request writes again what its earlier run wrote.
    pub token_per_run: bool,
    pub tracing: bool,
    /// The handler's deadline margin: near a deadline, even a drained primary answers.
    pub deadline_margin_ms: u64,
    dice: SplitMix64,
    observed: Mutex<Observed>,
}

impl Shared {
    pub fn new(
        seed: u64,
        faults: Faults,
        store_outage: Option<(u64, u64)>,
        deadline_margin_ms: u64,
        tracing: bool,
    ) -> Self {
        Self {
            clock: ManualClock::new(T0_MS),
            faults,
            store_outage,
            late_store_faults: None,
            handle_expiries: BTreeMap::new(),
            expired_retryable: false,
            lost_answer_transient: false,
            unknown_as_not_applied: false,
            token_per_run: false,
            tracing,
            deadline_margin_ms,
            dice: SplitMix64::new(seed ^ 0x5EED_FA17),
            observed: Mutex::new(Observed::default()),
        }
    }

    /// Virtual ms since the start.
    pub fn elapsed_ms(&self) -> u64 {
        self.clock.now_ms() - T0_MS
    }

    /// True while the lease store is out.
    pub fn store_out(&self) -> bool {
        let elapsed_ms = self.elapsed_ms();
        self.store_outage.is_some_and(|(from, to)| (from..to).contains(&elapsed_ms))
    }

    /// The same, with lease-store faults outside the fault window.
    pub fn with_late_store_faults(self, late_store_faults: Option<LateStoreFaults>) -> Self {
        Self { late_store_faults, ..self }
    }

    /// The same, with the handles' expiries, and whether the planted bug makes S3's refusal of
    /// an expired handle retryable.
    pub fn with_handle_expiries(self, handle_expiries: BTreeMap<String, u64>, expired_retryable: bool) -> Self {
        Self { handle_expiries, expired_retryable, ..self }
    }

    /// The same, with the planted bug that reports a provider's lost answer as transient.
    pub fn with_lost_answer_transient(self, lost_answer_transient: bool) -> Self {
        Self { lost_answer_transient, ..self }
    }

    /// The same, with the planted bug that takes a fenced write's unknown outcome as not applied.
    pub fn with_unknown_as_not_applied(self, unknown_as_not_applied: bool) -> Self {
        Self { unknown_as_not_applied, ..self }
    }

    /// The same, with the planted bug that makes a fenced write's token per run.
    pub fn with_token_per_run(self, token_per_run: bool) -> Self {
        Self { token_per_run, ..self }
    }

    /// Virtual time, epoch ms.
    pub fn clock_ms(&self) -> u64 {
        self.clock.now_ms()
    }

    /// Whether the late store faults' window is open now.
    pub fn late_store_faults_now(&self) -> Option<LateStoreFaults> {
        let elapsed_ms = self.elapsed_ms();
        self.late_store_faults.filter(|late| (late.from_ms..late.to_ms).contains(&elapsed_ms))
    }

    /// True with probability `p`, but only inside the fault window.
    pub fn fault(&self, p: f64) -> bool {
        self.elapsed_ms() < self.faults.window_end_ms && self.dice(p)
    }

    /// True with probability `p`.
    pub fn dice(&self, p: f64) -> bool {
        p > 0.0 && (self.dice.next_u64() as f64 / u64::MAX as f64) < p
    }

    /// A draw in `0..bound`.
    pub fn below(&self, bound: u64) -> u64 {
        self.dice.below_or_equal(bound.saturating_sub(1))
    }

    pub fn observed(&self) -> MutexGuard<'_, Observed> {
        self.observed.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Adds a trace line (only when tracing, so untraced runs stay fast).
    pub fn trace(&self, region: Option<Region>, line: impl FnOnce() -> String) {
        if self.tracing {
            let elapsed_ms = self.elapsed_ms();
            let who = region.map_or("world    ", |r| if r == Region::Primary { "primary  " } else { "secondary" });
            let text = format!("{:>7}.{:03} s  {who}  {}", elapsed_ms / 1000, elapsed_ms % 1000, line());
            self.observed().trace.push(text);
        }
    }

    /// Counts an interesting path.
    pub fn cover(&self, name: &'static str) {
        *self.observed().coverage.entry(name).or_default() += 1;
    }

    /// Records a fault in `region` now, for the L1 check.
    pub fn fault_happened(&self, region: Region, kind: &'static str) {
        let elapsed_ms = self.elapsed_ms();
        self.observed().fault_log.push((elapsed_ms, region, kind));
    }

    /// Records a broken invariant.
    pub fn violation(&self, what: String) {
        self.trace(None, || format!("VIOLATION: {what}"));
        self.observed().violations.push(what);
    }
}
