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
//!
//! Where things are: this file holds the scenario, the regions and the weather every seed draws
//! first; `stories` the stories of requests and regions, and which story a seed tells;
//! `work_stories` the stories of work handed to a wait condition (past the hour, closed
//! mid-work, its copies meeting lost store replies, a resource's life over a year); `plan` what
//! a scenario is made of (its requests, waits, faults, upgrade); `options` the store mode and
//! the planted bugs of the self-check.

use cfn_once_core::random::{Random, SplitMix64};
use cfn_once_core::vocabulary::Role;

use crate::deployed::{Deployed, FunctionTimeout};

mod options;
mod plan;
mod stories;
mod work_stories;

pub use options::{Options, PlantedBug, StoreMode};
pub use plan::{Faults, LateStoreFaults, RequestPlan, Upgrade, WaitPlan};
pub use stories::Kind;

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

    /// The role its handler is deployed with.
    pub fn role(self) -> Role {
        match self {
            Self::Primary => Role::Primary,
            Self::Secondary => Role::Secondary,
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

/// When regions go down, flip, skew, jump and crash, as `Scenario::timeline` draws them.
struct Timeline {
    outages: Vec<(Region, u64, u64)>,
    flips: Vec<(u64, Region)>,
    skew_ms: [i64; 2],
    jumps: Vec<(u64, Region, i64)>,
    crashes: Vec<(u64, Region)>,
}

/// What a seed's story may change of the weather drawn before it.
struct Drawn {
    requests: Vec<RequestPlan>,
    faults: Faults,
    outages: Vec<(Region, u64, u64)>,
    flips: Vec<(u64, Region)>,
    crashes: Vec<(u64, Region)>,
    store_outage: Option<(u64, u64)>,
    late_store_faults: Option<LateStoreFaults>,
    handle_expires_s: Option<u64>,
    opaque_handles: bool,
    sweep_every_ms: Option<u64>,
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

    /// A whole number from `low` to `high`, its logarithm uniform.
    fn log_uniform(&self, low: u64, high: u64) -> u64 {
        let (low_ln, high_ln) = ((low as f64).ln(), (high as f64).ln());
        let drawn = (low_ln + self.probability(high_ln - low_ln)).exp().round() as u64;
        drawn.clamp(low, high)
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
        let kind = Kind::drawn(&draw);
        let timeouts = &deployed.function_timeouts;
        let function_timeout = match kind {
            Kind::LongProviderThenCrash => {
                *timeouts.iter().max_by_key(|t| t.timeout_s).unwrap_or(&deployed.default_function_timeout)
            }
            _ => timeouts[draw.below(timeouts.len() as u64) as usize],
        };
        let window_end_ms = draw.between(30_000, 240_000);
        let requests = Self::weather_requests(&draw, &options);
        let faults = Self::weather_faults(&draw, window_end_ms);
        let Timeline { outages, flips, skew_ms, jumps, crashes } = Self::timeline(&draw, window_end_ms, skew_margin_ms);
        let mut drawn = Drawn {
            requests,
            faults,
            outages,
            flips,
            crashes,
            store_outage: None,
            late_store_faults: None,
            handle_expires_s: None,
            opaque_handles: false,
            sweep_every_ms: None,
        };
        Self::tell(kind, &draw, &mut drawn, (window_end_ms, function_timeout, deployed));
        // Drawn last, so that the rest of the seed is drawn as for the weather.
        let upgrade = (kind == Kind::Upgrade).then(|| stories::upgrade(&draw, &drawn.requests));
        let secondary_delay_s = Self::secondary_delay_s(&draw, kind, &options, deployed);
        let Drawn {
            requests,
            faults,
            outages,
            flips,
            crashes,
            store_outage,
            late_store_faults,
            handle_expires_s,
            opaque_handles,
            sweep_every_ms,
        } = drawn;
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
            secondary_delay_ms: secondary_delay_s * 1_000,
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

    /// The weather's requests: one to six, some at once, some slow, some in progress for
    /// minutes, a few panicking or copied late; a quarter of seeds retry one.
    fn weather_requests(draw: &Draw, options: &Options) -> Vec<RequestPlan> {
        // Deadlines fall anywhere: in the fault window, just after it, or an hour away. Where
        // faults leave no region the time to answer, the L1 check says which rule excuses it.
        // Four in ten as users write them to fail fast or by default: log-uniform from 1 s (a
        // ServiceTimeout of 1 to 10 s as likely as one of 10 to 100 s) to CloudFormation's hour.
        let service_timeout = |draw: &Draw| match draw.below(10) {
            0..4 if options.user_settings => draw.log_uniform(1, 3_600),
            0..3 => draw.between(30, 600),
            _ => draw.between(600, 3_600),
        };
        let request_count = draw.between(1, 6) as usize;
        let burst_at_ms = draw.below(60_000);
        let mut requests: Vec<RequestPlan> = Vec::with_capacity(request_count + 1);
        for _ in 0..request_count {
            // Some arrive together, as when a stack or a StackSet deploys many at once.
            let sent_at_ms = if draw.chance(0.4) { burst_at_ms } else { draw.below(60_000) };
            // Some providers outlast a lease (and need heartbeats), most are quick.
            let work_ms = if draw.chance(0.3) { draw.between(5_000, 40_000) } else { draw.below(3_000) };
            let service_timeout_s = service_timeout(draw);
            requests.push(RequestPlan {
                // Some wait for minutes, a few past their deadline.
                wait: draw.chance(0.3).then(|| WaitPlan {
                    in_progress_ms: draw.between(5_000, 3_000_000),
                    poll_interval_s: draw.between(1, 120),
                    poll_work_ms: if draw.chance(0.2) { draw.between(5_000, 40_000) } else { draw.below(2_000) },
                }),
                panic_percent: if draw.chance(0.1) { draw.between(10, 100) } else { 0 },
                late: draw.chance(0.15).then(|| (draw.region(), draw.between(5_000, 600_000))),
                ..RequestPlan::plain(sent_at_ms, work_ms, service_timeout_s)
            });
        }
        if draw.chance(0.25) {
            let original = draw.below(request_count as u64) as usize;
            let sent_at_ms = requests[original].sent_at_ms + draw.between(1_000, 120_000);
            let work_ms = draw.below(3_000);
            requests.push(RequestPlan { retry_of: Some(original), ..RequestPlan::plain(sent_at_ms, work_ms, 3_600) });
        }
        requests
    }

    /// The weather's faults: each kind's probability while the fault window lasts.
    fn weather_faults(draw: &Draw, window_end_ms: u64) -> Faults {
        Faults {
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
        }
    }

    /// When regions go down, the active region flips, clocks skew and jump, and Lambdas die.
    fn timeline(draw: &Draw, window_end_ms: u64, skew_margin_ms: u64) -> Timeline {
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
        Timeline { outages, flips, skew_ms, jumps, crashes }
    }

    /// The story `kind` tells, drawn over the weather.
    fn tell(
        kind: Kind,
        draw: &Draw,
        drawn: &mut Drawn,
        (window_end_ms, function_timeout, deployed): (u64, FunctionTimeout, &Deployed),
    ) {
        match kind {
            Kind::Weather | Kind::Upgrade => {}
            Kind::DrainedPrimarySecondaryDown => stories::drained_primary_secondary_down(drawn),
            Kind::LongProviderThenCrash => stories::long_provider_then_crash(draw, drawn, function_timeout),
            Kind::StoreOutage => stories::store_outage(draw, drawn),
            Kind::OutageMidWait => stories::outage_mid_wait(draw, drawn, window_end_ms),
            Kind::KillsNearDeadline => stories::kills_near_deadline(draw, drawn, window_end_ms, function_timeout),
            Kind::SlowBatchMates => stories::slow_batch_mates(draw, drawn, window_end_ms, function_timeout),
            Kind::LateCopy => stories::late_copy(draw, drawn, window_end_ms, deployed),
            Kind::DrainedSlowControl => stories::drained_slow_control(drawn),
            Kind::UnseenOutcomes => stories::unseen_outcomes(draw, drawn),
            Kind::LongWork => work_stories::long_work(draw, drawn, window_end_ms),
            Kind::CloseMidWork => work_stories::close_mid_work(draw, drawn, window_end_ms, deployed),
            Kind::LostRepliesAfterHandOver => work_stories::lost_replies_after_hand_over(draw, drawn, window_end_ms),
            Kind::LongLife => work_stories::long_life(draw, drawn, window_end_ms),
        }
    }

    /// The secondary queue's delay.
    fn secondary_delay_s(draw: &Draw, kind: Kind, options: &Options, deployed: &Deployed) -> u64 {
        // The secondary queue's delay as users may set it (SQS accepts 0 to 900 s), in the
        // weather; the stories time themselves on the deployed one.
        match kind {
            Kind::Weather if options.user_settings => match draw.below(10) {
                0..6 => deployed.secondary_delay_s,
                6..8 => draw.between(0, 30),
                _ => draw.between(0, 900),
            },
            _ => deployed.secondary_delay_s,
        }
    }

    /// How long after its publish a copy of a request becomes visible in `region`'s queue
    /// (the secondary's delay), besides SNS delivering it late.
    pub fn delay_ms(&self, region: Region) -> u64 {
        if region == Region::Secondary { self.secondary_delay_ms } else { 0 }
    }
}
