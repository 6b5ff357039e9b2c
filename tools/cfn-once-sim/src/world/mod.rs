//! One seed's world: two regions' Lambdas running the real batch code (`cfn_once_core::batch`,
//! which runs the real `Worker` per record) on a shared virtual clock, an event source mapping
//! per region handing them batches, SQS queues with delays, visibility timeouts, receipts,
//! duplicates, a receive limit and a DLQ, and the scenario's faults, all driven by a small
//! single-threaded executor. Nothing here is random but the seed, and nothing waits on real
//! time, so a seed replays exactly. The queues' limits, the mapping's batch size and
//! concurrency, the function timeout and the handler's settings are the deployed ones
//! ([`Parameters`]).
//!
//! As Lambda runs the function: an invocation gets up to `BatchSize` records; the handler's
//! queue calls take effect when it makes them (SQS counts a new visibility from the call);
//! when it returns, the records it did not report failed are deleted; when it dies (a crash, a
//! kill at the function timeout, its region going down) nothing is deleted and every record
//! keeps the visibility it had; a panic that reaches the runtime fails the invocation in the
//! same way (the process lives on).
//!
//! The checks at the end: S1, S2, S3 as the stores and the sink observe them; `DLQ:` (a copy
//! moved to the DLQ unanswered before its deadline); `BUDGET:` (an undisturbed invocation
//! killed at its timeout); `WAIT:`; `DRAIN:` (in `stores`); and L1, owed for every request
//! that some region could still answer in time (see [`World::check_liveness`] for the rules
//! that excuse the others).
//!
//! Where things are: this file holds the world and its event loop (the scenario's events as
//! they come due, the next moment anything can happen); `setup` builds a seed's world and
//! the requests CloudFormation sends; `lambdas` the event source mappings and the function's
//! invocations; `checks` and `liveness` the invariants checked at the end (L1 in its own
//! file, with its excuses); `upgrade` the newer version of cfn-once of the `Upgrade` story;
//! `parameters` the deployed parameters every seed runs on.

use std::collections::BTreeMap;
use std::future::Future;
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::task::Wake;

use cfn_once_core::clock::Clock;
use cfn_once_core::worker::Worker;

use crate::provider::PANIC_PREFIX;
use crate::queues::{Copy, Queues, Receipt, SimQueue};
use crate::region::SkewedClock;
use crate::scenario::{Region, RequestPlan, Scenario};
use crate::shared::{Shared, T0_MS};
use crate::stores::Table;

mod checks;
mod lambdas;
mod liveness;
mod parameters;
mod setup;
mod upgrade;

pub use parameters::Parameters;

/// The simulation gives up after this much virtual time, unless a wait condition's timeout
/// comes later (`World::end_ms`).
const END_MS: u64 = 4 * 3_600_000;

/// The ServiceToken topic the simulated requests are published to.
pub const TOPIC_ARN: &str = "arn:aws:sns:us-east-2:123456789012:cfn-once-service-token";

/// What one seed produced.
#[derive(Debug, Clone)]
pub struct SeedOutcome {
    pub seed: u64,
    /// The seed's story (`Kind::name`).
    pub story: &'static str,
    pub violations: Vec<String>,
    pub coverage: BTreeMap<&'static str, u64>,
    pub trace: Vec<String>,
}

/// One invocation of the function: a batch of received copies.
struct Task {
    region: Region,
    receipts: Vec<Receipt>,
    received_at_ms: u64,
    kill_at_ms: u64,
    frozen_until_ms: u64,
    /// Polls left before this Lambda freezes, and for how long.
    freeze: Option<(u32, u64)>,
    /// Whether the Lambda was ever frozen, or its region's clock jumped while it ran: only then
    /// may it outlive its invocation.
    disturbed: bool,
    /// Whether the invocation has taken a first step; one that dies before it made no call.
    started: bool,
    flag: Arc<Flag>,
    future: Pin<Box<dyn Future<Output = Vec<bool>>>>,
}

struct Flag(AtomicBool);

impl Wake for Flag {
    fn wake(self: Arc<Self>) {
        self.0.store(true, Ordering::SeqCst);
    }
}

#[derive(Debug, Clone, Copy)]
enum Event {
    Publish(usize),
    OutageStart(Region),
    OutageEnd(Region),
    Flip(Region),
    Jump(Region, i64),
    /// Every running Lambda of the region crashes; the region stays up.
    Crash(Region),
    /// The sweeper deletes the records past their retention.
    Sweep,
    /// A newer version of cfn-once takes the request first, if no record exists yet, and
    /// answers it this long after.
    NewerTakes(usize, u64),
    /// The newer version commits, PUTs and marks delivered the request it took.
    NewerAnswers(usize),
}

/// A copy hidden by an invocation that died before its first step: its batch stays invisible
/// for the visibility timeout, and no handler code ran that could have shortened it.
#[derive(Debug, Clone, Copy)]
struct HiddenUnstarted {
    request: usize,
    region: Region,
    until_ms: u64,
}

struct World {
    scenario: Scenario,
    parameters: Parameters,
    shared: Arc<Shared>,
    table: Arc<Table>,
    workers: [Worker; 2],
    /// The same workers on the last release's decision table (`Kind::Upgrade`).
    old_workers: [Worker; 2],
    clocks: [Arc<SkewedClock>; 2],
    sim_queues: [Arc<SimQueue>; 2],
    queues: Arc<Mutex<Queues>>,
    active: Arc<Mutex<Region>>,
    bodies: Vec<String>,
    urls: Vec<String>,
    /// Each request's wait condition handle, if its resource names one.
    handles: Vec<Option<String>>,
    tasks: BTreeMap<u64, Task>,
    next_task: u64,
    up: [bool; 2],
    events: BTreeMap<(u64, u64), Event>,
    /// A lease and the skew margin: how long a frozen Lambda must stay frozen to lose it.
    lease_and_skew_ms: u64,
    hidden_unstarted: Vec<HiddenUnstarted>,
    /// The answer's deadline (elapsed ms) of each request that hands a work to a wait
    /// condition, by its RequestId: a copy of it kept past that deadline is counted.
    handover_deadlines: Arc<BTreeMap<String, u64>>,
}

/// The simulated stack of `seed`.
fn stack_arn(seed: u64) -> String {
    format!("arn:aws:cloudformation:us-east-2:123456789012:stack/sim/{seed}")
}

/// The simulated stack of `seed`, as the handler reads it from a request.
fn stack_id(seed: u64) -> cfn_once_core::request::StackArn {
    cfn_once_core::request::StackArn::parse(&stack_arn(seed)).unwrap_or_else(|| panic!("the simulated stack's ARN"))
}

/// Runs one seed's scenario to the end and checks the invariants.
pub fn run(scenario: &Scenario, parameters: &Parameters, tracing: bool) -> SeedOutcome {
    quiet_provider_panics();
    let mut world = World::new(scenario.clone(), parameters, tracing);
    world.run();
    world.check_liveness();
    world.check_no_failed_for_lack_of_time();
    world.check_wait_survived();
    world.check_signals();
    world.check_long_life();
    world.check_counts();
    world.check_newer_records();
    let mut observed = world.shared.observed();
    SeedOutcome {
        seed: scenario.seed,
        story: scenario.kind.name(),
        violations: std::mem::take(&mut observed.violations),
        coverage: std::mem::take(&mut observed.coverage),
        trace: std::mem::take(&mut observed.trace),
    }
}

/// The simulated provider panics on purpose; its messages would flood stderr over a million
/// seeds. Every other panic is reported as usual.
fn quiet_provider_panics() {
    static ONCE: std::sync::Once = std::sync::Once::new();
    ONCE.call_once(|| {
        let previous = std::panic::take_hook();
        std::panic::set_hook(Box::new(move |info| {
            let message = info
                .payload()
                .downcast_ref::<String>()
                .map(String::as_str)
                .or_else(|| info.payload().downcast_ref::<&str>().copied());
            if !message.is_some_and(|message| message.starts_with(PANIC_PREFIX)) {
                previous(info);
            }
        }));
    });
}

impl World {
    /// When the simulation gives up: four hours, or two after the last deadline (of an answer
    /// or a wait condition), for a life that spans months.
    fn end_ms(&self) -> u64 {
        let owed = self.scenario.requests.iter().map(RequestPlan::owed_until_ms);
        owed.map(|at_ms| at_ms + 2 * 3_600_000).fold(END_MS, u64::max)
    }

    fn now_ms(&self) -> u64 {
        self.shared.clock.now_ms()
    }

    fn queues(&self) -> MutexGuard<'_, Queues> {
        self.queues.lock().unwrap_or_else(PoisonError::into_inner)
    }

    fn run(&mut self) {
        loop {
            let acted = self.poll_tasks() | self.due_events() | self.deliver();
            self.check_dead_letters();
            if acted {
                continue;
            }
            let Some(next_ms) = self.next_moment() else {
                return;
            };
            if next_ms > T0_MS + self.end_ms() {
                self.shared.trace(None, || "the simulation's time is up".into());
                return;
            }
            self.shared.clock.set_ms(next_ms.max(self.now_ms()));
            self.kill_overdue();
        }
    }

    /// Applies events and replication that are due; true if any was.
    fn due_events(&mut self) -> bool {
        let now_ms = self.now_ms();
        let mut acted = false;
        let due: Vec<(u64, Region, _)> = {
            let mut observed = self.shared.observed();
            let (due, later) =
                std::mem::take(&mut observed.replications).into_iter().partition(|(at, _, _)| *at <= now_ms);
            observed.replications = later;
            due
        };
        for (_, region, record) in due {
            self.table.replicate(region, record);
            acted = true;
        }
        acted |= self.late_writes(now_ms);
        while let Some((&(at_ms, sequence), &event)) = self.events.iter().next() {
            if at_ms > now_ms {
                break;
            }
            self.events.remove(&(at_ms, sequence));
            self.apply(event);
            acted = true;
        }
        acted
    }

    /// The writes of runs whose answer was lost that have come due, made as the run makes them
    /// (a run in a region that went down since is gone, and writes nothing). True if any was.
    fn late_writes(&mut self, now_ms: u64) -> bool {
        use futures_util::FutureExt;
        let elapsed_ms = now_ms - crate::shared::T0_MS;
        let due: Vec<crate::shared::LateWrite> = {
            let mut observed = self.shared.observed();
            let (due, later) =
                std::mem::take(&mut observed.late_writes).into_iter().partition(|late| late.due_ms <= elapsed_ms);
            observed.late_writes = later;
            due
        };
        for late in &due {
            if !self.up[late.region.index()] {
                continue;
            }
            self.shared.trace(Some(late.region), || format!("a run whose answer was lost writes {} late", late.item));
            let write = crate::downstream::write(crate::downstream::Write {
                shared: &self.shared,
                region: late.region,
                rules: &late.rules,
                writer: &late.writer,
                item: &late.item,
                op: crate::downstream::Op::Put,
            });
            match write.now_or_never() {
                Some(Ok(())) => self.shared.cover("a late write of a run whose answer was lost applied"),
                Some(Err(cfn_once_core::provider::ProviderError::Failed(why)))
                    if why.starts_with("a newer execution") =>
                {
                    self.shared.cover("a late write of a run whose answer was lost refused: a newer run wrote");
                }
                // Its reply lost, it would wait to send again: the run ends here.
                _ => self.shared.cover("a late write of a run whose answer was lost left unsettled"),
            }
        }
        !due.is_empty()
    }

    fn apply(&mut self, event: Event) {
        match event {
            Event::Publish(index) => {
                let plan = self.scenario.requests[index].clone();
                self.shared.trace(None, || {
                    let deadline_s = plan.sent_at_ms / 1_000 + plan.service_timeout_s;
                    let wait = plan.wait.map_or(String::new(), |wait| {
                        format!(
                            ", then in progress for {} s polled every {} s",
                            wait.in_progress_ms / 1000,
                            wait.poll_interval_s
                        )
                    });
                    let late = plan.late.map_or(String::new(), |(region, late_ms)| {
                        format!(", the {} copy {} s late", region.name(), late_ms / 1000)
                    });
                    let panics = if plan.panic_percent > 0 {
                        format!(", panicking {}% of runs", plan.panic_percent)
                    } else {
                        String::new()
                    };
                    format!(
                        "CloudFormation sends request {index} (work {} ms{wait}{late}{panics}, deadline at {deadline_s} s)",
                        plan.work_ms
                    )
                });
                let now_ms = self.now_ms();
                for region in Region::BOTH {
                    let late_ms = plan.late_ms(region);
                    if late_ms > 0 {
                        self.shared.cover("SNS delivered a copy late");
                    }
                    let delay_ms = self.scenario.delay_ms(region);
                    self.queues().add(Copy {
                        request: index,
                        region,
                        sent_ms: now_ms + late_ms,
                        visible_at_ms: now_ms + late_ms + delay_ms,
                        receive_count: 0,
                        receipt: 0,
                    });
                }
            }
            Event::OutageStart(region) => {
                self.shared.cover("region outage");
                if self.table.any_waiting() {
                    self.shared.cover("region outage in the middle of a wait");
                }
                self.shared.trace(Some(region), || "region down: pollers stop, running Lambdas die".into());
                self.up[region.index()] = false;
                let doomed: Vec<u64> =
                    self.tasks.iter().filter(|(_, t)| t.region == region).map(|(id, _)| *id).collect();
                for id in doomed {
                    self.crash(id, "died with its region", "region outage");
                }
            }
            Event::OutageEnd(region) => {
                self.shared.trace(Some(region), || "region back".into());
                self.up[region.index()] = true;
            }
            Event::Flip(region) => {
                self.shared.cover("active region flipped");
                self.shared.trace(None, || format!("control: {} is now active", region.name()));
                *self.active.lock().unwrap_or_else(PoisonError::into_inner) = region;
            }
            Event::Jump(region, jump_ms) => {
                self.shared.cover("clock jumped");
                self.shared.trace(Some(region), || format!("clock jumps {jump_ms} ms"));
                self.clocks[region.index()].offset_ms.fetch_add(jump_ms, Ordering::SeqCst);
                for task in self.tasks.values_mut().filter(|task| task.region == region) {
                    task.disturbed = true;
                }
            }
            Event::Sweep => {
                let swept = self.table.sweep(self.shared.clock.now_ms());
                if !swept.is_empty() {
                    self.shared.cover("the sweeper removed records past their retention");
                    self.shared.trace(None, || format!("the sweeper removed {} records", swept.len()));
                }
                // S3 holds for a record's life. The sweeper deletes a record only past its
                // retention (at least a day, longer than any lease, poll or work of 12 hours),
                // when nothing that held one of its fences can act any more; a key that comes
                // back after (only a close of a work, months later) starts again at fence 1.
                let elapsed_ms = self.shared.elapsed_ms();
                let mut observed = self.shared.observed();
                for key in &swept {
                    observed.grants.remove(key);
                }
                if !swept.is_empty() {
                    observed.sweeps.push(elapsed_ms);
                }
            }
            Event::NewerTakes(index, answer_after_ms) => self.newer_takes(index, answer_after_ms),
            Event::NewerAnswers(index) => self.newer_answers(index),
            Event::Crash(region) => {
                let doomed: Vec<u64> =
                    self.tasks.iter().filter(|(_, t)| t.region == region).map(|(id, _)| *id).collect();
                if !doomed.is_empty() {
                    self.shared.cover("every Lambda of a region crashed mid-run");
                    if self.near_a_deadline(&doomed) {
                        self.shared.cover("Lambda killed in the last minute before a deadline");
                    }
                }
                for id in doomed {
                    self.crash(id, "crashed with every Lambda of its region", "every Lambda of the region crashed");
                }
            }
        }
    }

    /// Whether any of the invocations holds a copy of a request due within the next minute.
    fn near_a_deadline(&self, tasks: &[u64]) -> bool {
        let elapsed_ms = self.shared.elapsed_ms();
        let queues = self.queues();
        tasks.iter().filter_map(|id| self.tasks.get(id)).flat_map(|task| &task.receipts).any(|receipt| {
            queues.copies.get(&receipt.message).is_some_and(|copy| {
                let plan = &self.scenario.requests[copy.request];
                let deadline_ms = plan.deadline_ms();
                (deadline_ms.saturating_sub(60_000)..deadline_ms).contains(&elapsed_ms)
            })
        })
    }

    fn function_timeout_ms(&self) -> u64 {
        self.scenario.function_timeout.timeout_s * 1_000
    }

    /// The next moment anything can happen, if anything can.
    fn next_moment(&self) -> Option<u64> {
        let now_ms = self.now_ms();
        let timer = self.shared.clock.next_deadline_after_ms(now_ms);
        let event = self.events.keys().next().map(|(at, _)| *at);
        let replication = self.shared.observed().replications.iter().map(|(at, _, _)| *at).min();
        let messages = {
            let queues = self.queues();
            Region::BOTH
                .into_iter()
                .filter(|region| self.up[region.index()])
                .filter_map(|region| queues.next_visible_ms(region, now_ms))
                .min()
        };
        let tasks = self
            .tasks
            .values()
            .flat_map(|t| [Some(t.kill_at_ms), (t.frozen_until_ms > 0).then_some(t.frozen_until_ms)]);
        [timer, event, replication, messages].into_iter().chain(tasks).flatten().filter(|at| *at > now_ms).min().or(
            // A frozen task whose timer already fired, or a region about to come back: step a
            // millisecond so the loop looks again.
            (!self.tasks.is_empty()).then(|| now_ms + 1),
        )
    }
}
