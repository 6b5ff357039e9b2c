//! What one seed simulates: the requests, the faults and the weather, all drawn from the seed.
//!
//! Probabilistic faults (store and PUT failures, crashes between steps, freezes, duplicates,
//! slow control reads) happen inside a fault window, the first few minutes of virtual time.
//! Whole-region crashes of every running Lambda happen at any moment of the run. Deadlines fall
//! anywhere: inside the window, just after it, or an hour away. L1 is owed whenever one region
//! can still answer in time; where no region can (every region faulted in the request's last
//! seconds, was down, or got its copy too late), the check says which rule excuses the request
//! (`world`).
//!
//! Besides that weather, some seeds play one of the stories a review found ([`Kind`]): a drained
//! primary whose secondary is down for the rest of the run; a provider running for minutes on
//! the longest function timeout whose Lambda then crashes; a lease-store outage of ten minutes
//! or more; a long-running provider whose primary goes down in the middle of its wait; Lambdas
//! killed in the last minute before a deadline; long-running requests batched with a slow one;
//! the secondary's copy delivered minutes late with the primary down; a drained primary whose
//! control reads are slower than their timeout; work past the hour handed to a wait condition,
//! closed mid-work by a Delete or an Update near the close's own deadline, or whose copies meet
//! lost store replies after their answer's deadline. Some providers panic, some copies arrive late,
//! many requests arrive in bursts that share a batch. The function timeout, visibility timeout,
//! receive limit, secondary delay, batch size and concurrency are the template's (`deployed`).

use cfn_once_core::random::{Random, SplitMix64};

use crate::deployed::{Deployed, FunctionTimeout};

/// The two handler regions.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum Region {
    Primary,
    Secondary,
}

impl Region {
    pub const BOTH: [Region; 2] = [Region::Primary, Region::Secondary];

    /// The AWS region it plays.
    pub fn name(self) -> &'static str {
        match self {
            Self::Primary => "us-east-1",
            Self::Secondary => "us-west-2",
        }
    }

    pub fn index(self) -> usize {
        match self {
            Self::Primary => 0,
            Self::Secondary => 1,
        }
    }

    pub fn other(self) -> Self {
        match self {
            Self::Primary => Self::Secondary,
            Self::Secondary => Self::Primary,
        }
    }
}

/// Which lease store the regions share.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum StoreMode {
    /// One linearizable copy, as a multi-Region strongly consistent table provides.
    Mrsc,
    /// A replica per region, conditions checked locally, replicated after `lag_ms`, last
    /// writer wins: DynamoDB's default global tables, which cfn-once must not use.
    Mrec { lag_ms: u64 },
}

/// How the simulation is set up besides the seed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Options {
    pub mode: StoreMode,
    /// A deliberately broken lease store: the self-check must catch it.
    pub planted_bug: Option<PlantedBug>,
}

/// The bugs the simulator's self-check plants in the lease store.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PlantedBug {
    /// Commit ignores its condition (fence mine, state RUNNING): two executions both commit.
    UnfencedCommit,
    /// A work's committed signal is forgotten when another execution takes its lease (the
    /// acquire grants it as if the signal were never committed): a takeover signals again.
    SignalAgain,
    /// The response bucket answers a PUT to an expired wait condition handle with a retryable
    /// error instead of S3's final 403, so the handler retries a signal nobody can take.
    ExpiredRetried,
    /// The provider reports a call whose answer was lost as transient (certainly not applied)
    /// instead of unknown, so the worker runs it again under the same fence while the first
    /// run goes on.
    RerunSameFence,
    /// A fenced write's retry after a lost reply reads the item that refused it as if it did not
    /// carry the write's own token, so a write that stands is taken for one refused.
    UnknownAsNotApplied,
    /// The lease store reads and writes records of a newer format as if they were its own (a
    /// handler that checks no format), so records a newer version wrote are overwritten.
    FormatBlind,
}

impl PlantedBug {
    /// The command line's spelling (`--planted-bug=<name>`).
    pub fn name(self) -> &'static str {
        match self {
            Self::UnfencedCommit => "unfenced-commit",
            Self::SignalAgain => "signal-again",
            Self::ExpiredRetried => "expired-retried",
            Self::RerunSameFence => "rerun-same-fence",
            Self::UnknownAsNotApplied => "unknown-as-not-applied",
            Self::FormatBlind => "format-blind",
        }
    }

    /// Parses [`PlantedBug::name`].
    pub fn parse(name: &str) -> Option<Self> {
        [
            Self::UnfencedCommit,
            Self::SignalAgain,
            Self::ExpiredRetried,
            Self::RerunSameFence,
            Self::UnknownAsNotApplied,
            Self::FormatBlind,
        ]
        .into_iter()
        .find(|bug| bug.name() == name)
    }
}

/// Which story a seed tells besides the random weather of its fault window.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    /// Only the fault window's weather.
    Weather,
    /// The control names the secondary from the start (the primary is drained) and the
    /// secondary region is down for the rest of the run: the primary must answer FAILED before
    /// each deadline rather than let its copies reach the DLQ.
    DrainedPrimarySecondaryDown,
    /// On the longest function timeout, a provider works for minutes (the other region's copy
    /// backs off many times meanwhile), then every Lambda of the primary crashes.
    LongProviderThenCrash,
    /// Every lease-store call fails for ten to twenty minutes.
    StoreOutage,
    /// A long-running provider's request is sent after the fault window, and the primary region
    /// goes down for good in the middle of its wait: the secondary must finish the wait and
    /// answer SUCCESS.
    OutageMidWait,
    /// After the fault window, requests whose providers run or wait up to their deadlines, and
    /// the Lambdas holding them killed in the last minute before a deadline: a crash there must
    /// still leave a copy that someone sees in time to answer (FAILED, at least).
    KillsNearDeadline,
    /// A burst of requests published at once, so they share a batch: long-running ones polled
    /// every few seconds and a slow one that takes most of the invocation. A backoff must count
    /// from when its record was decided, not from when the slowest batch-mate finished.
    SlowBatchMates,
    /// The primary region goes down just after a request is published, and SNS delivers the
    /// secondary's copy minutes late (it retries deliveries during a brownout). The deadline
    /// counts from the publish time, not from the late copy's SentTimestamp.
    LateCopy,
    /// The primary is drained from the start and the control is often slower than its
    /// timeout: a slow read must keep the last known answer, never make the primary active.
    DrainedSlowControl,
    /// A resource with a wait condition (up to 12 hours): answered at once, its work polled for
    /// hours under failovers (the primary down for a while or for good), drills (the active
    /// region flipped), Lambdas killed at any moment and late copies; some outlive their
    /// timeout, some are ended by a Delete mid-work. One signal, before the timeout, never
    /// after the Delete's answer.
    LongWork,
    /// A work polled at the floor (every few seconds) or whose polls outlast a lease, closed
    /// mid-work by a Delete or by an Update naming a new handle whose ServiceTimeout leaves
    /// little more than its region needs, in either region (the primary, or the secondary with
    /// the primary down or drained): the close is answered by its own deadline, whatever the
    /// work's poll interval or a poll's length.
    CloseMidWork,
    /// A resource with a wait condition whose short ServiceTimeout ends soon after its answer
    /// handed the work over, and a lease store that then loses replies (and requests) to every
    /// region for minutes, the primary sometimes down for good: the copies that carry the work
    /// are kept until the work's deadline, never dead-lettered by the answer's.
    LostRepliesAfterHandOver,
    /// A resource's life over a year, in compressed time: a Create with a wait condition, then
    /// Updates (keeping the handle, or naming a new one, some rolled back to the old one) and
    /// a Delete at minutes, a day, 31 days and a year after it. Handles expire a day after they
    /// are made (S3 answers 403 after), the sweeper removes records past their retention, and
    /// some handles do not say their expiry in their URL. Every Update and Delete is answered
    /// by its deadline; an Update runs its provider unless it names a new handle; a refused
    /// signal is never retried.
    LongLife,
    /// Calls whose outcome nobody saw: in the fault window, a provider run or poll that does
    /// its work and loses its answer while it goes on running for a while, and fenced writes
    /// applied whose reply is lost. The provider runs again only under a higher fence, never
    /// beside a run under the same one; a write that stands is never reported failed; each
    /// request's counter is added once.
    UnseenOutcomes,
    /// An upgrade in progress: one region runs the last release's decision table (a frozen
    /// copy) until it is upgraded mid-run, and a newer version of cfn-once takes some requests
    /// first, writing records of a format this one does not know, and answers them later. No
    /// record of an unknown format is ever overwritten or deleted; every request is answered.
    Upgrade,
}

impl Kind {
    /// The coverage counter naming the story.
    pub fn name(self) -> &'static str {
        match self {
            Self::Weather => "scenario: weather only",
            Self::DrainedPrimarySecondaryDown => "scenario: drained primary, secondary down for good",
            Self::LongProviderThenCrash => "scenario: provider for minutes on the longest timeout, then a crash",
            Self::StoreOutage => "scenario: lease-store outage of 10+ minutes",
            Self::OutageMidWait => "scenario: primary down for good in the middle of a wait",
            Self::KillsNearDeadline => "scenario: Lambdas killed in the last minute before a deadline",
            Self::SlowBatchMates => "scenario: long-running requests batched with a slow one",
            Self::LateCopy => "scenario: primary down, the secondary's copy delivered minutes late",
            Self::DrainedSlowControl => "scenario: drained primary, control slower than its timeout",
            Self::LongWork => "scenario: work past the hour, signalled to a wait condition",
            Self::CloseMidWork => "scenario: a close (Delete or new-handle Update) mid-work near its deadline",
            Self::LostRepliesAfterHandOver => "scenario: store replies lost to a handed-over request's copies",
            Self::LongLife => "scenario: a resource's life over a year: updates, rollbacks and a delete",
            Self::UnseenOutcomes => "scenario: provider calls and fenced writes whose outcome nobody saw",
            Self::Upgrade => {
                "scenario: an upgrade: the last release's decisions in one region, a newer format's records"
            }
        }
    }
}

/// One request CloudFormation sends.
#[derive(Debug, Clone)]
pub struct RequestPlan {
    /// When it is published, ms after the start.
    pub sent_at_ms: u64,
    /// How long the provider works on it.
    pub work_ms: u64,
    pub service_timeout_s: u64,
    /// A retried deployment reusing this earlier request's RequestId, with a new ResponseURL.
    pub retry_of: Option<usize>,
    /// A long-running provider: in progress this long after its first run, then done.
    pub wait: Option<WaitPlan>,
    /// Each run (or poll) of the provider panics with this probability, in percent.
    pub panic_percent: u64,
    /// SNS delivers this region's copy this long after the publish (its SentTimestamp too).
    pub late: Option<(Region, u64)>,
    /// The resource names a wait condition handle with this timeout, in seconds: its provider's
    /// work is signalled to the handle.
    pub wait_condition_s: Option<u64>,
    /// This request is the Delete of that request's resource (the same handle in its
    /// properties), sent while its work may still run.
    pub delete_of: Option<usize>,
    /// This request is an Update of that request's resource naming a new handle (its own
    /// `wait_condition_s`), sent while the old work may still run: it closes the old work and
    /// hands a new one over.
    pub update_of: Option<usize>,
    /// The request whose wait condition handle this one names, where it is not its own (an
    /// Update that keeps its handle, an update rollback naming the earlier one, a Delete).
    pub handle_from: Option<usize>,
    /// The request whose properties are this Update's `OldResourceProperties` (by default the
    /// one it updates).
    pub old_from: Option<usize>,
}

impl RequestPlan {
    /// When the request's answer is due, ms after the start.
    pub fn deadline_ms(&self) -> u64 {
        self.sent_at_ms + self.service_timeout_s * 1_000
    }

    /// When the work's signal is due (the wait condition's timeout), if it hands work over.
    pub fn work_deadline_ms(&self) -> Option<u64> {
        self.wait_condition_s.filter(|_| self.delete_of.is_none()).map(|s| self.sent_at_ms + s * 1_000)
    }

    /// The request whose resource this one is about (itself, unless a Delete, an Update or a
    /// retry of an earlier one).
    pub fn original(&self, index: usize) -> usize {
        self.delete_of.or(self.update_of).or(self.retry_of).unwrap_or(index)
    }

    /// The request whose wait condition handle this one names: its own for a Create or an
    /// Update that names a new one, the resource's for a Delete, unless `handle_from` says.
    pub fn handle_owner(&self, index: usize) -> usize {
        self.handle_from.unwrap_or(if self.update_of.is_some() { index } else { self.original(index) })
    }

    /// Whether this is an Update whose properties declare no new wait: it keeps its handle, or
    /// names one an earlier request made (an update rollback). Its provider must run.
    pub fn updates_without_a_new_wait(&self, index: usize) -> bool {
        self.update_of.is_some() && self.handle_owner(index) != index
    }

    /// Until when a copy of the request is owed an answer or a signal.
    pub fn owed_until_ms(&self) -> u64 {
        self.work_deadline_ms().map_or(self.deadline_ms(), |work_ms| work_ms.max(self.deadline_ms()))
    }
}

/// How a long-running provider waits.
#[derive(Debug, Clone, Copy)]
pub struct WaitPlan {
    /// In progress until this long after the provider first ran.
    pub in_progress_ms: u64,
    /// The poll interval it asks for (the handler's backoff floor applies).
    pub poll_interval_s: u64,
    /// How long each poll works; sometimes longer than a lease.
    pub poll_work_ms: u64,
}

/// Fault probabilities, each applied per opportunity inside the fault window.
#[derive(Debug, Clone, Copy)]
pub struct Faults {
    pub window_end_ms: u64,
    pub store_transient: f64,
    pub store_lost_request: f64,
    pub store_lost_reply: f64,
    pub store_hang: f64,
    pub put_fail: f64,
    pub put_lost_reply: f64,
    pub put_hang: f64,
    /// Per poll of a running Lambda: it crashes between two steps.
    pub crash: f64,
    /// Per delivery: SQS hands the same message to a second Lambda at once.
    pub duplicate: f64,
    /// Per delivery: the Lambda is frozen, mid-run, for longer than a lease.
    pub freeze: f64,
    /// Per read of the active-region control: it answers later than the call's timeout.
    pub control_slow: f64,
    /// Per run or poll of the provider: it does its work and its answer is lost (an Invoke that
    /// timed out after it was sent, a reset), while it keeps running for a while: the caller
    /// sees an unknown outcome (`Kind::UnseenOutcomes`).
    pub provider_lost_reply: f64,
    /// Per fenced write of the provider: it is applied and its reply is lost.
    pub fenced_lost_reply: f64,
}

/// Lease-store faults outside the fault window, in every region: (from, to) elapsed ms, and
/// the probabilities per call of a lost reply (applied, unknown outcome) and a lost request (not
/// applied, unknown outcome).
#[derive(Debug, Clone, Copy)]
pub struct LateStoreFaults {
    pub from_ms: u64,
    pub to_ms: u64,
    pub lost_reply: f64,
    pub lost_request: f64,
}

/// Everything one seed simulates.
#[derive(Debug, Clone)]
pub struct Scenario {
    pub seed: u64,
    pub options: Options,
    pub kind: Kind,
    /// The function timeout of both regions, with the queue visibility the template pairs it
    /// with.
    pub function_timeout: FunctionTimeout,
    /// Receives before SQS moves a message to the DLQ.
    pub max_receive_count: u32,
    pub secondary_delay_ms: u64,
    /// The event source mapping's records per invocation and invocations at once per region.
    pub batch_size: usize,
    pub concurrency: usize,
    pub requests: Vec<RequestPlan>,
    pub faults: Faults,
    /// (region, from ms, to ms): the region's pollers are down and its running Lambdas die.
    pub outages: Vec<(Region, u64, u64)>,
    /// (at ms, region made active).
    pub flips: Vec<(u64, Region)>,
    /// Initial clock offsets per region, within the configured skew margin.
    pub skew_ms: [i64; 2],
    /// (at ms, region, jump): a clock stepping, possibly far beyond the skew margin, and back
    /// when the fault window ends.
    pub jumps: Vec<(u64, Region, i64)>,
    /// (at ms, region): every running Lambda of the region crashes; the region stays up. Any
    /// moment of the run, not only the fault window.
    pub crashes: Vec<(u64, Region)>,
    /// (from ms, to ms): every lease-store call fails.
    pub store_outage: Option<(u64, u64)>,
    /// Lease-store faults after the fault window (`Kind::LostRepliesAfterHandOver`).
    pub late_store_faults: Option<LateStoreFaults>,
    /// How long a wait condition handle is valid after it is made, as CloudFormation presigns
    /// them (`X-Amz-Expires=86399`); `None`: the URL says nothing and S3 never refuses it.
    pub handle_expires_s: Option<u64>,
    /// Whether the handles' URLs leave their expiry out (S3 still refuses them after it), so
    /// that only the 403 tells the handler.
    pub opaque_handles: bool,
    /// How often the sweeper deletes records past their retention, if it runs.
    pub sweep_every_ms: Option<u64>,
    /// The upgrade in progress (`Kind::Upgrade`).
    pub upgrade: Option<Upgrade>,
}

/// An upgrade in progress: which region runs the last release's decisions until when, and the
/// requests a newer version takes first.
#[derive(Debug, Clone)]
pub struct Upgrade {
    /// The region still on the last release.
    pub old_region: Region,
    /// When it is upgraded (ms after the start): from then on it runs this version.
    pub upgraded_at_ms: u64,
    /// Requests a newer version takes first: (request, when it tries, how long it takes to
    /// answer). It takes one only where no record exists yet.
    pub newer_takes: Vec<(usize, u64, u64)>,
}

struct Draw(SplitMix64);

impl Draw {
    fn below(&self, bound: u64) -> u64 {
        self.0.below_or_equal(bound.saturating_sub(1))
    }

    fn between(&self, low: u64, high: u64) -> u64 {
        low + self.0.below_or_equal(high - low)
    }

    fn chance(&self, p: f64) -> bool {
        (self.0.next_u64() as f64 / u64::MAX as f64) < p
    }

    fn probability(&self, max: f64) -> f64 {
        max * (self.0.next_u64() as f64 / u64::MAX as f64)
    }

    fn region(&self) -> Region {
        if self.chance(0.5) { Region::Primary } else { Region::Secondary }
    }
}

impl Scenario {
    /// The scenario of `seed`, on the deployed parameters; `skew_margin_ms` is the handler's.
    pub fn generate(seed: u64, options: Options, deployed: &Deployed, skew_margin_ms: u64) -> Self {
        let draw = Draw(SplitMix64::new(seed));
        let kind = match draw.below(100) {
            0..4 => Kind::DrainedPrimarySecondaryDown,
            4..8 => Kind::LongProviderThenCrash,
            8..12 => Kind::StoreOutage,
            12..16 => Kind::OutageMidWait,
            16..24 => Kind::KillsNearDeadline,
            24..30 => Kind::SlowBatchMates,
            30..34 => Kind::LateCopy,
            34..38 => Kind::DrainedSlowControl,
            38..44 => Kind::LongWork,
            // Carved out of the weather's share, so that every earlier story draws as before.
            44..48 => Kind::CloseMidWork,
            48..51 => Kind::LostRepliesAfterHandOver,
            51..55 => Kind::LongLife,
            55..60 => Kind::UnseenOutcomes,
            60..64 => Kind::Upgrade,
            _ => Kind::Weather,
        };
        let timeouts = &deployed.function_timeouts;
        let function_timeout = match kind {
            Kind::LongProviderThenCrash => {
                *timeouts.iter().max_by_key(|t| t.timeout_s).unwrap_or(&deployed.default_function_timeout)
            }
            _ => timeouts[draw.below(timeouts.len() as u64) as usize],
        };
        let window_end_ms = draw.between(30_000, 240_000);
        // Deadlines fall anywhere: in the fault window, just after it, or an hour away. Where
        // faults leave no region the time to answer, the L1 check says which rule excuses it.
        let service_timeout = |draw: &Draw| match draw.below(10) {
            0..3 => draw.between(30, 600),
            _ => draw.between(600, 3_600),
        };
        let request_count = draw.between(1, 6) as usize;
        let burst_at_ms = draw.below(60_000);
        let mut requests: Vec<RequestPlan> = Vec::with_capacity(request_count + 1);
        for _ in 0..request_count {
            requests.push(RequestPlan {
                // Some arrive together, as when a stack or a StackSet deploys many at once.
                sent_at_ms: if draw.chance(0.4) { burst_at_ms } else { draw.below(60_000) },
                // Some providers outlast a lease (and need heartbeats), most are quick.
                work_ms: if draw.chance(0.3) { draw.between(5_000, 40_000) } else { draw.below(3_000) },
                service_timeout_s: service_timeout(&draw),
                retry_of: None,
                // Some wait for minutes, a few past their deadline.
                wait: draw.chance(0.3).then(|| WaitPlan {
                    in_progress_ms: draw.between(5_000, 3_000_000),
                    poll_interval_s: draw.between(1, 120),
                    poll_work_ms: if draw.chance(0.2) { draw.between(5_000, 40_000) } else { draw.below(2_000) },
                }),
                panic_percent: if draw.chance(0.1) { draw.between(10, 100) } else { 0 },
                late: draw.chance(0.15).then(|| (draw.region(), draw.between(5_000, 600_000))),
                wait_condition_s: None,
                delete_of: None,
                update_of: None,
                handle_from: None,
                old_from: None,
            });
        }
        if draw.chance(0.25) {
            let original = draw.below(request_count as u64) as usize;
            let sent_at_ms = requests[original].sent_at_ms + draw.between(1_000, 120_000);
            let work_ms = draw.below(3_000);
            requests.push(RequestPlan {
                sent_at_ms,
                work_ms,
                service_timeout_s: 3_600,
                retry_of: Some(original),
                wait: None,
                panic_percent: 0,
                late: None,
                wait_condition_s: None,
                delete_of: None,
                update_of: None,
                handle_from: None,
                old_from: None,
            });
        }
        let mut faults = Faults {
            window_end_ms,
            store_transient: draw.probability(0.05),
            store_lost_request: draw.probability(0.03),
            store_lost_reply: draw.probability(0.05),
            store_hang: draw.probability(0.02),
            put_fail: draw.probability(0.2),
            put_lost_reply: draw.probability(0.1),
            put_hang: draw.probability(0.05),
            crash: draw.probability(0.04),
            duplicate: draw.probability(0.3),
            freeze: draw.probability(0.3),
            control_slow: draw.probability(0.2),
            // Drawn for the one story that uses them, at the end: every other seed draws as before.
            provider_lost_reply: 0.0,
            fenced_lost_reply: 0.0,
        };
        let mut outages = Vec::new();
        for _ in 0..draw.below(3) {
            let start = draw.below(window_end_ms);
            let end = (start + draw.between(1_000, 120_000)).min(window_end_ms);
            outages.push((draw.region(), start, end));
        }
        let mut flips = Vec::new();
        for _ in 0..draw.below(4) {
            flips.push((draw.below(window_end_ms + 60_000), draw.region()));
        }
        let skew = || draw.below(2 * skew_margin_ms / 2) as i64 - (skew_margin_ms / 2) as i64;
        let skew_ms = [skew(), skew()];
        let mut jumps = Vec::new();
        if draw.chance(0.2) {
            let size = draw.between(1_000, 30_000) as i64;
            let (region, jump) = (draw.region(), if draw.chance(0.5) { size } else { -size });
            jumps.push((draw.below(window_end_ms), region, jump));
            // Time sync steps the clock back when the fault window ends.
            jumps.push((window_end_ms, region, -jump));
        }
        // Lambdas die at any moment of the run, not only in the fault window.
        let mut crashes = Vec::new();
        for _ in 0..draw.below(3) {
            crashes.push((draw.below(3_700_000), draw.region()));
        }
        let mut store_outage = None;
        let mut late_store_faults = None;
        let (mut handle_expires_s, mut opaque_handles, mut sweep_every_ms) = (None, false, None);
        match kind {
            Kind::Weather => {}
            Kind::DrainedPrimarySecondaryDown => {
                flips.clear();
                flips.push((0, Region::Secondary));
                outages.retain(|(region, _, _)| *region == Region::Primary);
                outages.push((Region::Secondary, 0, u64::MAX / 4));
            }
            Kind::LongProviderThenCrash => {
                // Long enough for the other copy to back off many times, short enough to finish
                // within one invocation after the takeover.
                let longest_ms = function_timeout.timeout_s * 1_000 * 3 / 4;
                let first = &mut requests[0];
                first.work_ms = draw.between(longest_ms / 3, longest_ms);
                first.service_timeout_s = 3_600;
                first.panic_percent = 0;
                let crash_ms = first.sent_at_ms + draw.between(60_000, first.work_ms);
                crashes.push((crash_ms, Region::Primary));
            }
            Kind::StoreOutage => {
                for request in &mut requests {
                    request.service_timeout_s = 3_600;
                }
                let start_ms = draw.below(120_000);
                store_outage = Some((start_ms, start_ms + draw.between(600_000, 1_200_000)));
            }
            Kind::OutageMidWait => {
                // Sent after the fault window, so nothing but the outage touches it: the primary
                // goes down for good while the wait goes on, and the deadline is far.
                // A retried deployment of it would now be sent before it; there is none.
                requests.retain(|plan| plan.retry_of != Some(0));
                crashes.clear();
                let first = &mut requests[0];
                first.sent_at_ms = window_end_ms + draw.below(30_000);
                first.service_timeout_s = 3_600;
                first.work_ms = draw.below(3_000);
                first.panic_percent = 0;
                first.late = None;
                let in_progress_ms = draw.between(120_000, 1_200_000);
                first.wait = Some(WaitPlan {
                    in_progress_ms,
                    poll_interval_s: draw.between(1, 60),
                    poll_work_ms: draw.below(2_000),
                });
                let down_ms = first.sent_at_ms + draw.between(5_000, in_progress_ms);
                outages.push((Region::Primary, down_ms, u64::MAX / 4));
            }
            Kind::KillsNearDeadline => {
                // After the window, providers that run or wait up to their deadlines; kills
                // in the last minute before each deadline, of one region or both.
                let after_ms = window_end_ms + function_timeout.visibility_s * 1_000;
                for plan in &mut requests {
                    plan.sent_at_ms = after_ms + draw.below(60_000);
                    plan.service_timeout_s = draw.between(120, 900);
                    plan.panic_percent = 0;
                    if draw.chance(0.5) {
                        plan.work_ms = plan.service_timeout_s * 1_000 + draw.below(60_000);
                        plan.wait = None;
                    } else {
                        plan.work_ms = draw.below(3_000);
                        plan.wait = Some(WaitPlan {
                            in_progress_ms: plan.service_timeout_s * 1_000 + draw.below(60_000),
                            poll_interval_s: draw.between(1, 30),
                            poll_work_ms: if draw.chance(0.3) {
                                draw.between(5_000, 40_000)
                            } else {
                                draw.below(2_000)
                            },
                        });
                    }
                    let deadline_ms = plan.sent_at_ms + plan.service_timeout_s * 1_000;
                    for _ in 0..draw.between(1, 3) {
                        let region = if draw.chance(0.3) { None } else { Some(draw.region()) };
                        let at_ms = deadline_ms.saturating_sub(draw.between(1_000, 60_000));
                        for region in Region::BOTH.into_iter().filter(|r| region.is_none_or(|only| only == *r)) {
                            crashes.push((at_ms, region));
                        }
                    }
                }
                requests.retain(|plan| plan.retry_of.is_none());
            }
            Kind::SlowBatchMates => {
                // One burst; the secondary is down, so only the primary's batches answer.
                let at_ms = window_end_ms + draw.below(30_000);
                let invocation_ms = function_timeout.timeout_s * 1_000;
                requests.retain(|plan| plan.retry_of.is_none());
                for (index, plan) in requests.iter_mut().enumerate() {
                    plan.sent_at_ms = at_ms;
                    plan.panic_percent = 0;
                    plan.late = None;
                    if index == 0 {
                        plan.work_ms = draw.between(invocation_ms / 3, invocation_ms * 2 / 3);
                        plan.service_timeout_s = 3_600;
                        plan.wait = None;
                    } else {
                        plan.work_ms = draw.below(1_000);
                        plan.service_timeout_s = draw.between(60, 600);
                        plan.wait = Some(WaitPlan {
                            in_progress_ms: plan.service_timeout_s * 1_000 + draw.below(60_000),
                            poll_interval_s: draw.between(1, 10),
                            poll_work_ms: draw.below(1_000),
                        });
                    }
                }
                if requests.len() < 2 {
                    requests.push(RequestPlan {
                        sent_at_ms: at_ms,
                        work_ms: 0,
                        service_timeout_s: draw.between(60, 600),
                        retry_of: None,
                        wait: Some(WaitPlan { in_progress_ms: 3_600_000, poll_interval_s: 2, poll_work_ms: 0 }),
                        panic_percent: 0,
                        late: None,
                        wait_condition_s: None,
                        delete_of: None,
                        update_of: None,
                        handle_from: None,
                        old_from: None,
                    });
                }
                outages.retain(|(region, _, _)| *region == Region::Primary);
                outages.push((Region::Secondary, 0, u64::MAX / 4));
                crashes.clear();
            }
            Kind::LateCopy => {
                requests.retain(|plan| plan.retry_of != Some(0));
                let first = &mut requests[0];
                let lateness_ms = draw.between(60_000, 600_000);
                first.sent_at_ms = window_end_ms + draw.below(30_000);
                first.late = Some((Region::Secondary, lateness_ms));
                first.panic_percent = 0;
                first.service_timeout_s =
                    (lateness_ms + deployed.secondary_delay_s * 1_000) / 1_000 + draw.between(60, 900);
                first.work_ms = draw.below(3_000);
                first.wait = Some(WaitPlan {
                    in_progress_ms: first.service_timeout_s * 1_000 + 600_000,
                    poll_interval_s: draw.between(1, 60),
                    poll_work_ms: draw.below(2_000),
                });
                let down_ms = first.sent_at_ms + draw.below(2_000);
                outages.push((Region::Primary, down_ms, u64::MAX / 4));
            }
            Kind::DrainedSlowControl => {
                flips.clear();
                flips.push((0, Region::Secondary));
                faults.control_slow = 0.6;
            }
            Kind::LongWork => {
                requests.retain(|plan| plan.retry_of.is_none());
                let first = &mut requests[0];
                // Sent in the fault window or just after it.
                first.sent_at_ms = draw.below(window_end_ms + 60_000);
                let timeout_s = if draw.chance(0.5) { draw.between(3_600, 43_200) } else { draw.between(300, 3_600) };
                first.wait_condition_s = Some(timeout_s);
                first.late = draw.chance(0.15).then(|| (Region::Secondary, draw.between(5_000, 600_000)));
                let in_progress_ms = if draw.chance(0.25) {
                    // Outlives its timeout: signalled FAILURE before it.
                    timeout_s * 1_000 + draw.below(3_600_000)
                } else {
                    draw.between(1_000, timeout_s * 1_000 * 9 / 10)
                };
                first.wait = Some(WaitPlan {
                    in_progress_ms,
                    poll_interval_s: draw.between(1, 900),
                    poll_work_ms: if draw.chance(0.2) { draw.between(5_000, 40_000) } else { draw.below(2_000) },
                });
                let (sent_ms, work_end_ms) =
                    (first.sent_at_ms, first.sent_at_ms + in_progress_ms.min(timeout_s * 1_000));
                let mid_work = |draw: &Draw| draw.between(sent_ms + 1_000, work_end_ms.max(sent_ms + 2_000));
                // Failovers: the primary down for a while, or for good, in the middle of the work.
                if draw.chance(0.5) {
                    let down_ms = mid_work(&draw);
                    let up_ms = if draw.chance(0.5) { u64::MAX / 4 } else { down_ms + draw.between(60_000, 7_200_000) };
                    outages.push((Region::Primary, down_ms, up_ms));
                }
                if draw.chance(0.2) {
                    let down_ms = mid_work(&draw);
                    outages.push((Region::Secondary, down_ms, down_ms + draw.between(60_000, 3_600_000)));
                }
                // Drills: the active region flipped (and maybe back) while the work runs.
                for _ in 0..draw.below(4) {
                    flips.push((mid_work(&draw), draw.region()));
                }
                // Lambdas killed at any moment of the work.
                for _ in 0..draw.below(5) {
                    crashes.push((mid_work(&draw), draw.region()));
                }
                // A Delete (a rollback, a stack deletion) while the work may still run.
                if draw.chance(0.3) {
                    let plan = requests[0].clone();
                    requests.push(RequestPlan {
                        sent_at_ms: mid_work(&draw),
                        work_ms: draw.below(2_000),
                        service_timeout_s: draw.between(300, 3_600),
                        retry_of: None,
                        wait: None,
                        panic_percent: 0,
                        late: None,
                        delete_of: Some(0),
                        update_of: None,
                        handle_from: None,
                        old_from: None,
                        ..plan
                    });
                }
            }
            Kind::CloseMidWork => {
                requests.retain(|plan| plan.retry_of.is_none());
                let first = &mut requests[0];
                first.sent_at_ms = draw.below(window_end_ms + 60_000);
                first.late = None;
                first.panic_percent = 0;
                let timeout_s = draw.between(1_800, 43_200);
                first.wait_condition_s = Some(timeout_s);
                // Polled at the floor (it asks every second), polls that outlast a lease, or both.
                let (at_floor, long_polls) = match draw.below(3) {
                    0 => (true, false),
                    1 => (false, true),
                    _ => (true, true),
                };
                first.wait = Some(WaitPlan {
                    in_progress_ms: timeout_s * 1_000,
                    poll_interval_s: if at_floor { 1 } else { draw.between(1, 60) },
                    poll_work_ms: if long_polls { draw.between(20_000, 45_000) } else { draw.below(2_000) },
                });
                let close_ms = first.sent_at_ms + draw.between(120_000, 1_800_000);
                // The closing region: the primary, or the secondary once the primary is down for
                // good or drained from shortly before the close on. Its ServiceTimeout leaves
                // little more than that region needs to see its copy and answer.
                let by_secondary = draw.chance(0.5);
                let reach_s = if by_secondary { deployed.secondary_delay_s } else { 0 };
                let service_timeout_s = reach_s + draw.between(25, 120);
                if by_secondary {
                    let from_ms = close_ms.saturating_sub(draw.below(60_000));
                    if draw.chance(0.5) {
                        outages.push((Region::Primary, from_ms, u64::MAX / 4));
                    } else {
                        flips.retain(|(at_ms, _)| *at_ms < from_ms);
                        flips.push((from_ms, Region::Secondary));
                    }
                }
                let plan = requests[0].clone();
                let update = draw.chance(0.5);
                requests.push(RequestPlan {
                    sent_at_ms: close_ms,
                    work_ms: draw.below(2_000),
                    service_timeout_s,
                    retry_of: None,
                    // An Update's new work is short and ends well before its own timeout.
                    wait: update.then(|| WaitPlan {
                        in_progress_ms: draw.between(5_000, 300_000),
                        poll_interval_s: draw.between(1, 60),
                        poll_work_ms: draw.below(2_000),
                    }),
                    panic_percent: 0,
                    late: None,
                    wait_condition_s: if update { Some(draw.between(900, 3_600)) } else { plan.wait_condition_s },
                    delete_of: (!update).then_some(0),
                    update_of: update.then_some(0),
                    handle_from: None,
                    old_from: None,
                });
            }
            Kind::LostRepliesAfterHandOver => {
                requests.retain(|plan| plan.retry_of.is_none());
                let first = &mut requests[0];
                // After the fault window, so that only the late faults touch it.
                first.sent_at_ms = window_end_ms + draw.below(30_000);
                first.service_timeout_s = draw.between(30, 300);
                first.panic_percent = 0;
                first.late = draw.chance(0.3).then(|| (Region::Secondary, draw.between(5_000, 300_000)));
                let timeout_s = draw.between(1_800, 43_200);
                first.wait_condition_s = Some(timeout_s);
                first.wait = Some(WaitPlan {
                    in_progress_ms: draw.between(60_000, timeout_s * 1_000 * 9 / 10),
                    poll_interval_s: draw.between(1, 600),
                    poll_work_ms: draw.below(2_000),
                });
                let answer_deadline_ms = first.deadline_ms();
                let from_ms = answer_deadline_ms.saturating_sub(draw.below(first.service_timeout_s * 500));
                late_store_faults = Some(LateStoreFaults {
                    from_ms,
                    to_ms: answer_deadline_ms + draw.between(60_000, 2_400_000),
                    lost_reply: 0.2 + draw.probability(0.4),
                    lost_request: draw.probability(0.2),
                });
                // The copy that keeps the work alive may be the secondary's alone.
                if draw.chance(0.5) {
                    let down_ms = answer_deadline_ms + draw.below(1_200_000);
                    outages.push((Region::Primary, down_ms, u64::MAX / 4));
                }
            }
            Kind::LongLife => {
                const DAY_MS: u64 = 86_400_000;
                requests.retain(|plan| plan.retry_of.is_none());
                requests.truncate(1);
                handle_expires_s = Some(86_399);
                opaque_handles = draw.chance(0.3);
                sweep_every_ms = Some(DAY_MS / 4);
                let first = &mut requests[0];
                first.sent_at_ms = draw.below(window_end_ms + 60_000);
                first.service_timeout_s = draw.between(300, 3_600);
                first.late = None;
                first.panic_percent = 0;
                first.wait_condition_s = Some(draw.between(1_800, 43_200));
                first.wait = Some(WaitPlan {
                    in_progress_ms: draw.between(5_000, 1_200_000),
                    poll_interval_s: draw.between(1, 120),
                    poll_work_ms: draw.below(2_000),
                });
                let created_ms = first.sent_at_ms;
                // Operations at minutes, a day, a month and a year after the Create; the first
                // after its work has ended (a stack cannot be updated while a wait condition of
                // its creation still waits).
                let work_ms = first.wait.map_or(0, |wait| wait.in_progress_ms) + first.work_ms;
                let ages = [
                    ((work_ms + 120_000).max(300_000), (work_ms + 120_000).max(3_600_000)),
                    (DAY_MS - 7_200_000, DAY_MS + 7_200_000),
                    (31 * DAY_MS - DAY_MS / 2, 31 * DAY_MS + DAY_MS / 2),
                    (365 * DAY_MS - 5 * DAY_MS, 365 * DAY_MS + 5 * DAY_MS),
                ];
                // The Delete comes at one of those ages, or after all of them (a year and a
                // month after the Create).
                let delete_age = draw.below(ages.len() as u64 + 1) as usize;
                // The request whose properties (and handle) the resource has now.
                let mut current = 0;
                let short_wait = |draw: &Draw, service_timeout_s: u64| {
                    draw.chance(0.3).then(|| WaitPlan {
                        in_progress_ms: draw.between(5_000, service_timeout_s * 500),
                        poll_interval_s: draw.between(1, 30),
                        poll_work_ms: draw.below(2_000),
                    })
                };
                let after_all = (395 * DAY_MS, 400 * DAY_MS);
                for (age, (from_ms, to_ms)) in ages.into_iter().chain([after_all]).enumerate() {
                    let at_ms = created_ms + draw.between(from_ms, to_ms);
                    if age == delete_age {
                        let handle = requests[current].handle_owner(current);
                        requests.push(RequestPlan {
                            sent_at_ms: at_ms,
                            work_ms: draw.below(2_000),
                            service_timeout_s: draw.between(300, 3_600),
                            retry_of: None,
                            wait: None,
                            panic_percent: 0,
                            late: None,
                            wait_condition_s: requests[current].wait_condition_s,
                            delete_of: Some(0),
                            update_of: None,
                            handle_from: Some(handle),
                            old_from: None,
                        });
                        break;
                    }
                    let service_timeout_s = draw.between(300, 3_600);
                    let keeps_handle = draw.chance(0.5);
                    let index = requests.len();
                    let handle = requests[current].handle_owner(current);
                    requests.push(RequestPlan {
                        sent_at_ms: at_ms,
                        work_ms: draw.below(2_000),
                        service_timeout_s,
                        retry_of: None,
                        wait: if keeps_handle {
                            short_wait(&draw, service_timeout_s)
                        } else {
                            Some(WaitPlan {
                                in_progress_ms: draw.between(5_000, 600_000),
                                poll_interval_s: draw.between(1, 60),
                                poll_work_ms: draw.below(2_000),
                            })
                        },
                        panic_percent: 0,
                        late: None,
                        wait_condition_s: Some(draw.between(1_800, 43_200)),
                        delete_of: None,
                        update_of: Some(0),
                        handle_from: keeps_handle.then_some(handle),
                        old_from: Some(current),
                    });
                    if keeps_handle || !draw.chance(0.5) {
                        current = index;
                        continue;
                    }
                    // Another resource of the update fails: the rollback names the old handle
                    // again, its old properties the forward Update's.
                    let service_timeout_s = draw.between(300, 3_600);
                    requests.push(RequestPlan {
                        sent_at_ms: at_ms + draw.between(60_000, 900_000),
                        work_ms: draw.below(2_000),
                        service_timeout_s,
                        retry_of: None,
                        wait: short_wait(&draw, service_timeout_s),
                        panic_percent: 0,
                        late: None,
                        wait_condition_s: requests[current].wait_condition_s,
                        delete_of: None,
                        update_of: Some(0),
                        handle_from: Some(handle),
                        old_from: Some(index),
                    });
                }
            }
            Kind::UnseenOutcomes => {
                // Drawn last, so that the rest of the seed is drawn as for the weather.
                faults.provider_lost_reply = 0.05 + draw.probability(0.25);
                faults.fenced_lost_reply = 0.05 + draw.probability(0.25);
            }
            Kind::Upgrade => {}
        }
        // Drawn last, so that the rest of the seed is drawn as for the weather.
        let upgrade = (kind == Kind::Upgrade).then(|| {
            let last_sent_ms = requests.iter().map(|plan| plan.sent_at_ms).max().unwrap_or(0);
            let old_region = if draw.chance(0.5) { Region::Primary } else { Region::Secondary };
            let upgraded_at_ms = draw.between(0, last_sent_ms + 120_000);
            // A newer version takes plain requests only: one that a retried deployment reuses
            // would leave the retry to a version that cannot read its record.
            let newer_takes = requests
                .iter()
                .enumerate()
                .filter(|(index, plan)| {
                    plan.retry_of.is_none()
                        && plan.delete_of.is_none()
                        && plan.update_of.is_none()
                        && plan.wait_condition_s.is_none()
                        && !requests.iter().any(|other| other.retry_of == Some(*index))
                })
                .filter(|_| draw.chance(0.3))
                .map(|(index, plan)| {
                    let answer_s = plan.service_timeout_s.saturating_sub(60).clamp(1, 120);
                    (index, plan.sent_at_ms + draw.below(3_000), 1_000 + draw.below(answer_s * 1_000))
                })
                .collect();
            Upgrade { old_region, upgraded_at_ms, newer_takes }
        });
        Self {
            seed,
            options,
            kind,
            late_store_faults,
            handle_expires_s,
            opaque_handles,
            sweep_every_ms,
            function_timeout,
            max_receive_count: deployed.max_receive_count,
            secondary_delay_ms: deployed.secondary_delay_s * 1_000,
            batch_size: deployed.batch_size.max(1),
            concurrency: deployed.maximum_concurrency.max(1),
            requests,
            faults,
            outages,
            flips,
            skew_ms,
            jumps,
            crashes,
            store_outage,
            upgrade,
        }
    }
}
