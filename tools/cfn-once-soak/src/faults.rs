//! The soak's faults: a schedule drawn from the seed, then injected into the running fleet.
//!
//! * **Kills**: SIGKILL of one busy Lambda process (mid-provider, mid-batch), or of the next
//!   process to log "lease acquired" (just after taking a lease), "response committed" (between
//!   the commit and the PUT) or "message will be seen again" (while its batch settles). Lambda's
//!   processes die this way when they run out of memory or their host fails.
//! * **Outage**: the primary region down: its mapping stopped (no invocations) and every process
//!   killed; back after the outage. The secondary answers after its queue's delay.
//! * **Drill**: the `control#active` item flipped to the secondary and back, as `cfn-once drill`
//!   does: the primary must stop starting work and the secondary must answer.
//! * **Wire**: for a window, one fault at a time on a region's AWS calls or on the response
//!   PUTs: throttling, 5xx, connection resets, replies lost after the write applied, stalls
//!   longer than the client's timeout.
//!
//! Faults happen only during the load; once it ends everything is healed, and the checks give
//! the fleet the time liveness allows to answer what is left.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use cfn_once::system_clock::SystemClock;
use cfn_once_core::clock::Clock;
use serde::Serialize;

use crate::fleet::Fleet;
use crate::ledger::Sent;
use crate::{FaultKind, Rng, SoakOptions, sleep_until};
use cfn_once_local::fault_proxy::{Fault as WireFault, FaultProxy, Match};

/// Where a wire fault is.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Serialize)]
pub enum WireTarget {
    /// The AWS calls (DynamoDB, SQS) of a region's processes: 0 primary, 1 secondary.
    Region(usize),
    /// The response PUTs to CloudFormation's bucket.
    Puts,
}

/// What a wire fault does to one request.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Serialize)]
pub enum WireKind {
    /// DynamoDB's ThrottlingException (400).
    Throttle,
    /// A 500 (DynamoDB, SQS) or 503 (S3).
    ServerError,
    /// The connection reset before anything is forwarded.
    Reset,
    /// Forwarded and applied, then the connection reset instead of the reply.
    LostReply,
    /// Forwarded and applied, the reply held longer than the client waits.
    Stall,
}

impl WireKind {
    pub fn label(self) -> &'static str {
        match self {
            WireKind::Throttle => "throttling",
            WireKind::ServerError => "5xx",
            WireKind::Reset => "resets",
            WireKind::LostReply => "lost replies",
            WireKind::Stall => "stalls",
        }
    }
}

/// Where a kill strikes.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Serialize)]
pub enum KillPoint {
    /// A busy process, at whatever it is doing.
    Busy,
    /// The next process to log this line.
    AfterAcquire,
    AfterCommit,
    Settling,
}

impl KillPoint {
    pub fn label(self) -> &'static str {
        match self {
            KillPoint::Busy => "a busy process",
            KillPoint::AfterAcquire => "just after taking a lease",
            KillPoint::AfterCommit => "between commit and PUT",
            KillPoint::Settling => "while a batch settles",
        }
    }

    /// The log line the kill waits for.
    pub fn line(self) -> Option<&'static str> {
        match self {
            KillPoint::Busy => None,
            KillPoint::AfterAcquire => Some("lease acquired"),
            KillPoint::AfterCommit => Some("response committed"),
            KillPoint::Settling => Some("message will be seen again"),
        }
    }
}

/// One scheduled fault.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub enum Fault {
    Outage { region: usize, at_ms: u64, for_ms: u64 },
    Drill { at_ms: u64, for_ms: u64 },
    Wire { target: WireTarget, kind: WireKind, at_ms: u64, for_ms: u64 },
    Kill { region: usize, point: KillPoint, at_ms: u64 },
}

impl Fault {
    pub fn at_ms(&self) -> u64 {
        match self {
            Fault::Outage { at_ms, .. }
            | Fault::Drill { at_ms, .. }
            | Fault::Wire { at_ms, .. }
            | Fault::Kill { at_ms, .. } => *at_ms,
        }
    }
}

/// The run's faults, in time order.
#[derive(Debug, Clone)]
pub struct Schedule {
    pub seed: u64,
    pub faults: Vec<Fault>,
    pub load_ms: u64,
}

const REGION_NAMES: [&str; 2] = ["primary", "secondary"];

impl Schedule {
    pub fn generate(seed: u64, options: &SoakOptions, load_ms: u64, fleet: &Fleet) -> Self {
        let mut rng = Rng::fork(seed, 2);
        let mut faults = Vec::new();
        // An outage and a drill per four minutes of load, in separate parts of it.
        let segments = (load_ms / 240_000).max(1);
        let segment_ms = load_ms / segments;
        let mut busy_until = 0;
        for segment in 0..segments {
            let base = segment * segment_ms;
            if options.with(FaultKind::Outage) {
                let at_ms = (base + segment_ms * rng.range(15, 35) / 100).max(busy_until);
                let for_ms = rng.range(options.outage_s * 500, options.outage_s * 1000).max(1000);
                if at_ms + for_ms < load_ms {
                    faults.push(Fault::Outage { region: 0, at_ms, for_ms });
                    busy_until = at_ms + for_ms + 5_000;
                }
            }
            if options.with(FaultKind::Drill) {
                let for_ms = rng.range(20_000, 40_000).min(segment_ms / 4);
                // Late in the segment, but inside the load and after the outage.
                let at_ms = (base + segment_ms * rng.range(55, 75) / 100)
                    .min((base + segment_ms).saturating_sub(for_ms + 2_000))
                    .max(busy_until);
                if at_ms + for_ms < load_ms {
                    faults.push(Fault::Drill { at_ms, for_ms });
                    busy_until = at_ms + for_ms + 5_000;
                }
            }
        }
        if options.with(FaultKind::Wire) {
            // One window at a time per target, about every 20 s.
            let mut next = [0u64; 3];
            let mut at_ms = rng.range(2_000, 10_000);
            while at_ms < load_ms {
                let slot = rng.below(3) as usize;
                let target = if slot == 2 { WireTarget::Puts } else { WireTarget::Region(slot) };
                let kinds: &[WireKind] = match target {
                    WireTarget::Puts => &[WireKind::ServerError, WireKind::Reset, WireKind::LostReply, WireKind::Stall],
                    WireTarget::Region(_) => &[
                        WireKind::Throttle,
                        WireKind::ServerError,
                        WireKind::Reset,
                        WireKind::LostReply,
                        WireKind::Stall,
                    ],
                };
                let kind = kinds[rng.below(kinds.len() as u64) as usize];
                let for_ms = rng.range(5_000, 15_000);
                let start = at_ms.max(next[slot]);
                if start + for_ms < load_ms {
                    faults.push(Fault::Wire { target, kind, at_ms: start, for_ms });
                    next[slot] = start + for_ms + 1_000;
                }
                at_ms += rng.range(10_000, 30_000);
            }
        }
        if options.with(FaultKind::Kill) {
            let mut at_ms = rng.exponential_ms(options.kill_every_s * 1000.0);
            while at_ms < load_ms {
                let region = usize::from(!rng.chance(0.7));
                let point = match rng.below(100) {
                    0..40 => KillPoint::Busy,
                    40..60 => KillPoint::AfterAcquire,
                    60..85 => KillPoint::AfterCommit,
                    _ => KillPoint::Settling,
                };
                faults.push(Fault::Kill { region, point, at_ms });
                at_ms += rng.exponential_ms(options.kill_every_s * 1000.0).max(200);
            }
        }
        faults.sort_by_key(Fault::at_ms);
        let _ = fleet;
        Self { seed, faults, load_ms }
    }

    pub fn describe(&self) -> String {
        let mut lines = vec![format!("faults (seed {}):", self.seed)];
        let mut kills: BTreeMap<(usize, KillPoint), usize> = BTreeMap::new();
        let mut wire: BTreeMap<(WireTarget, WireKind), (usize, u64)> = BTreeMap::new();
        for fault in &self.faults {
            match fault {
                Fault::Outage { region, at_ms, for_ms } => lines.push(format!(
                    "  +{:>4} s  {} region down for {} s",
                    at_ms / 1000,
                    REGION_NAMES[*region],
                    for_ms / 1000
                )),
                Fault::Drill { at_ms, for_ms } => {
                    lines.push(format!("  +{:>4} s  drill: the secondary active for {} s", at_ms / 1000, for_ms / 1000))
                }
                Fault::Wire { target, kind, for_ms, .. } => {
                    let entry = wire.entry((*target, *kind)).or_default();
                    entry.0 += 1;
                    entry.1 += for_ms;
                }
                Fault::Kill { region, point, .. } => *kills.entry((*region, *point)).or_default() += 1,
            }
        }
        if !wire.is_empty() {
            let windows: Vec<String> = wire
                .iter()
                .map(|((target, kind), (n, ms))| {
                    format!("{n}× {} on {} ({} s)", kind.label(), target_label(*target), ms / 1000)
                })
                .collect();
            lines.push(format!("  wire windows: {}", windows.join(", ")));
        }
        if !kills.is_empty() {
            let kills: Vec<String> = kills
                .iter()
                .map(|((region, point), n)| format!("{n}× {} ({})", point.label(), REGION_NAMES[*region]))
                .collect();
            lines.push(format!("  SIGKILLs: {}", kills.join(", ")));
        }
        lines.join("\n")
    }
}

pub fn target_label(target: WireTarget) -> &'static str {
    match target {
        WireTarget::Region(0) => "the primary's AWS calls",
        WireTarget::Region(_) => "the secondary's AWS calls",
        WireTarget::Puts => "the response PUTs",
    }
}

/// A window of time a fault covered, for the report and the picture.
#[derive(Debug, Clone, Serialize)]
pub struct Window {
    pub what: String,
    /// "outage", "drill" or "wire".
    pub kind: &'static str,
    pub start_ms: u64,
    pub end_ms: u64,
}

/// What was actually injected.
#[derive(Debug, Clone, Default, Serialize)]
pub struct Injected {
    pub windows: Vec<Window>,
    /// Wire faults applied to requests, by target and kind.
    pub wire: BTreeMap<String, u64>,
    /// Busy processes killed (attempts with nobody busy are not counted).
    pub busy_kills: u64,
    pub busy_kill_misses: u64,
    /// Kills armed on log lines, by point.
    pub armed: BTreeMap<String, u64>,
    /// When each kill happened or was armed, ms since the start.
    pub kill_times_ms: Vec<u64>,
    /// Processes killed by the outages.
    pub outage_kills: u64,
}

/// The worst fault a request saw while it waited for its answer.
pub(crate) fn fault_seen(request: &Sent, answered_ms: u64, injected: &Injected, started_ms: u64) -> &'static str {
    let (from, to) = (request.published_ms.saturating_sub(started_ms), answered_ms.saturating_sub(started_ms));
    let overlaps = |kind: &str| injected.windows.iter().any(|w| w.kind == kind && w.start_ms <= to && w.end_ms >= from);
    if overlaps("outage") {
        "primary region down"
    } else if overlaps("drill") {
        "drill (secondary active)"
    } else if injected.kill_times_ms.iter().any(|at| (from..=to).contains(at)) {
        "a SIGKILL in the fleet"
    } else if overlaps("wire") {
        "wire faults"
    } else {
        "no fault"
    }
}

/// Injects `schedule` into the fleet, from `started_ms`; returns once the load is over and
/// everything is healed.
pub async fn inject(fleet: Arc<Fleet>, schedule: Schedule, started_ms: u64) -> Injected {
    let mut injected = Injected::default();
    let mut windows = Vec::new();
    let mut rng = Rng::fork(schedule.seed, 3);
    for fault in schedule.faults.clone() {
        sleep_until(started_ms + fault.at_ms()).await;
        match fault {
            Fault::Kill { region, point, at_ms } => {
                let function = &fleet.regions[region].function;
                injected.kill_times_ms.push(at_ms);
                match point.line() {
                    None => {
                        let pick = rng.next_u64();
                        if function.kill_busy(|n| (pick % n as u64) as usize) {
                            injected.busy_kills += 1;
                        } else {
                            injected.busy_kill_misses += 1;
                        }
                    }
                    Some(line) => {
                        function.kill_on_line(line, 1);
                        *injected.armed.entry(point.label().to_owned()).or_default() += 1;
                    }
                }
            }
            Fault::Outage { region, at_ms, for_ms } => {
                let fleet = Arc::clone(&fleet);
                windows.push(tokio::spawn(async move {
                    let target = &fleet.regions[region];
                    target.mapping.pause();
                    let killed = target.function.kill_all();
                    // Anything it starts while the mapping drains its last poll dies too.
                    let until = SystemClock.now_ms() + for_ms;
                    let mut more = 0;
                    while SystemClock.now_ms() < until {
                        tokio::time::sleep(Duration::from_millis(500)).await;
                        more += target.function.kill_all();
                    }
                    target.mapping.resume();
                    let window = Window {
                        what: format!("{} region down", REGION_NAMES[region]),
                        kind: "outage",
                        start_ms: at_ms,
                        end_ms: at_ms + for_ms,
                    };
                    (window, None, (killed + more) as u64)
                }));
            }
            Fault::Drill { at_ms, for_ms } => {
                let fleet = Arc::clone(&fleet);
                windows.push(tokio::spawn(async move {
                    let secondary = fleet.secondary().name.clone();
                    let primary = fleet.primary().name.clone();
                    flip(&fleet, &secondary).await;
                    tokio::time::sleep(Duration::from_millis(for_ms)).await;
                    flip(&fleet, &primary).await;
                    let window = Window {
                        what: "drill: secondary active".into(),
                        kind: "drill",
                        start_ms: at_ms,
                        end_ms: at_ms + for_ms,
                    };
                    (window, None, 0)
                }));
            }
            Fault::Wire { target, kind, at_ms, for_ms } => {
                let fleet = Arc::clone(&fleet);
                let seed = rng.next_u64();
                windows.push(tokio::spawn(async move {
                    let proxy = match target {
                        WireTarget::Region(region) => fleet.regions[region].proxy.clone(),
                        WireTarget::Puts => fleet.put_proxy.clone(),
                    };
                    let applied = wire_window(&proxy, target, kind, for_ms, seed).await;
                    let what = format!("{} on {}", kind.label(), target_label(target));
                    let window = Window { what: what.clone(), kind: "wire", start_ms: at_ms, end_ms: at_ms + for_ms };
                    (window, Some((what, applied)), 0)
                }));
            }
        }
    }
    for window in windows {
        if let Ok((window, wire, killed)) = window.await {
            if let Some((what, applied)) = wire {
                *injected.wire.entry(what).or_default() += applied;
            }
            injected.outage_kills += killed;
            injected.windows.push(window);
        }
    }
    sleep_until(started_ms + schedule.load_ms).await;
    // Heal: no kill left armed, the primary active.
    for region in &fleet.regions {
        region.function.disarm_kills();
        region.proxy.clear();
    }
    fleet.put_proxy.clear();
    injected.windows.sort_by_key(|w| w.start_ms);
    injected
}

async fn flip(fleet: &Fleet, region: &str) {
    for _ in 0..10 {
        if fleet.control.set_active_region(region, SystemClock.now_ms(), "cfn-once soak").await.is_ok() {
            return;
        }
        tokio::time::sleep(Duration::from_millis(300)).await;
    }
    eprintln!("soak: could not flip the active region to {region}");
}

/// One fault at a time on `proxy` for `for_ms`: the next matching request gets it, then the
/// next, at most one every 250 ms. Returns how many requests it hit.
async fn wire_window(proxy: &FaultProxy, target: WireTarget, kind: WireKind, for_ms: u64, seed: u64) -> u64 {
    const DYNAMODB_OPERATIONS: [&str; 4] = ["UpdateItem", "GetItem", "PutItem", "DeleteItem"];
    let mut rng = Rng::new(seed);
    let before = proxy.injected();
    let until = SystemClock.now_ms() + for_ms;
    while SystemClock.now_ms() < until {
        proxy.clear();
        let (matcher, fault) = match (target, kind) {
            (WireTarget::Puts, WireKind::ServerError) => (Match::Put, WireFault::status(503)),
            (WireTarget::Puts, _) => (Match::Put, wire_fault(kind)),
            (WireTarget::Region(_), WireKind::Throttle) => {
                let operation = DYNAMODB_OPERATIONS[rng.below(DYNAMODB_OPERATIONS.len() as u64) as usize];
                (Match::Operation(operation.to_owned()), WireFault::dynamodb_error(400, "ThrottlingException"))
            }
            (WireTarget::Region(_), _) => (Match::Any, wire_fault(kind)),
        };
        proxy.inject(matcher, fault, 1);
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
    proxy.clear();
    proxy.injected() - before
}

fn wire_fault(kind: WireKind) -> WireFault {
    match kind {
        WireKind::Throttle => WireFault::dynamodb_error(400, "ThrottlingException"),
        WireKind::ServerError => WireFault::dynamodb_error(500, "InternalServerError"),
        WireKind::Reset => WireFault::Reset,
        WireKind::LostReply => WireFault::ForwardThenReset,
        // Longer than the store's and the PUT's attempt timeouts (3 s and 5 s).
        WireKind::Stall => WireFault::ForwardThenDelay(Duration::from_secs(7)),
    }
}
