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

use std::collections::BTreeMap;
use std::future::Future;
use std::panic::AssertUnwindSafe;
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, AtomicI64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::task::{Context, Poll, Wake, Waker};

use cfn_once_core::batch::{self, Record};
use cfn_once_core::clock::Clock;
use cfn_once_core::fingerprint::Fingerprint;
use cfn_once_core::metrics::NoMetrics;
use cfn_once_core::provider::Router;
use cfn_once_core::random::SplitMix64;
use cfn_once_core::request::InputPolicy;
use cfn_once_core::response::{ResponseBody, Status};
use cfn_once_core::response_url::UrlPolicy;
use cfn_once_core::settings::Settings;
use cfn_once_core::vocabulary::{Disposition, Done, Handled, Invocation, QueueRecord, Role};
use cfn_once_core::worker::{Ports, Worker};
use serde_json::json;

use crate::deployed::Deployed;
use crate::provider::{PANIC_PREFIX, SIM_TYPE, SimProvider};
use crate::queues::{Copy, Queues, Receipt, SimQueue};
use crate::region::{SimControl, SkewedClock};
use crate::scenario::{Kind, Region, RequestPlan, Scenario};
use crate::shared::{Shared, T0_MS};
use crate::sink::{SimSink, short};
use crate::stores::{RegionStore, Table};

/// The simulation gives up after this much virtual time, unless a wait condition's timeout
/// comes later (`World::end_ms`).
const END_MS: u64 = 4 * 3_600_000;

/// The ServiceToken topic the simulated requests are published to.
pub const TOPIC_ARN: &str = "arn:aws:sns:us-east-2:123456789012:cfn-once-service-token";

/// What every seed runs on: the regional template's parameters and the handler settings its
/// environment implies, per region (with the default function timeout), and per region and
/// allowed function timeout.
#[derive(Debug, Clone)]
pub struct Parameters {
    pub deployed: Deployed,
    pub settings: [Settings; 2],
    pub settings_by_timeout: BTreeMap<u64, [Settings; 2]>,
}

impl Parameters {
    /// The deployed parameters, read once per process.
    pub fn deployed() -> &'static Parameters {
        static PARAMETERS: std::sync::OnceLock<Parameters> = std::sync::OnceLock::new();
        PARAMETERS.get_or_init(|| {
            let deployed = Deployed::regional().unwrap_or_else(|e| panic!("cannot read the deployed parameters: {e}"));
            let settings = Region::BOTH.map(|region| {
                let role = if region == Region::Primary { Role::Primary } else { Role::Secondary };
                deployed.settings(role, region.name()).unwrap_or_else(|e| panic!("the template's handler: {e}"))
            });
            let settings_by_timeout = deployed
                .function_timeouts
                .iter()
                .map(|timeout| {
                    let settings = Region::BOTH.map(|region| {
                        let role = if region == Region::Primary { Role::Primary } else { Role::Secondary };
                        deployed
                            .settings_with_timeout(role, region.name(), timeout.timeout_s)
                            .unwrap_or_else(|e| panic!("the template's handler: {e}"))
                    });
                    (timeout.timeout_s, settings)
                })
                .collect();
            Parameters { deployed, settings, settings_by_timeout }
        })
    }

    /// How long before a request's deadline its last fault may happen for L1 to be owed: the
    /// deadline margin (in which whoever sees the request answers it) and one backoff floor
    /// (a copy whose invocation died just before the margin comes back a floor later), plus a
    /// second for the whole seconds visibility is set in.
    pub fn last_fault_window_ms(&self) -> u64 {
        let settings = &self.settings[0];
        settings.deadline_margin_ms + u64::from(settings.backoff_floor_s().unwrap_or(60)) * 1_000 + 1_000
    }

    /// How far before that window a clock fault still reaches, with a queue visibility timeout
    /// of `visibility_s`: what a Lambda schedules on a wrong clock outlives the fault, a lease
    /// (and its skew) by its length, a backoff by the longest backoff, and a record's shortened
    /// visibility (computed from the clock) by up to the visibility timeout.
    pub fn clock_fault_reach_ms(&self, visibility_s: u64) -> u64 {
        let settings = &self.settings[0];
        (settings.lease_ms + settings.skew_ms)
            .max(u64::from(settings.retry_delay_s_max) * 1_000)
            .max(visibility_s * 1_000)
    }
}

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

/// `epoch_ms` as a presigned URL's `X-Amz-Date` says it: `20270115T080000Z`.
fn amz_date(epoch_ms: u64) -> String {
    let text = cfn_once_core::timestamp::format_ms(epoch_ms);
    format!("{}Z", text[..19].replace(['-', ':'], ""))
}

/// The simulated stack of `seed`.
fn stack_arn(seed: u64) -> String {
    format!("arn:aws:cloudformation:us-east-2:123456789012:stack/sim/{seed}")
}

/// Runs one seed's scenario to the end and checks the invariants.
pub fn run(scenario: &Scenario, parameters: &Parameters, tracing: bool) -> SeedOutcome {
    quiet_provider_panics();
    let mut world = World::new(scenario.clone(), parameters, tracing);
    world.run();
    world.check_liveness();
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
    fn new(scenario: Scenario, parameters: &Parameters, tracing: bool) -> Self {
        let margin_ms = parameters.settings[0].deadline_margin_ms;
        let (bodies, urls, handles) = Self::requests(&scenario);
        // When S3 starts refusing each handle (elapsed ms): a day after it was presigned.
        let handle_expiries = scenario
            .handle_expires_s
            .map(|expires_s| {
                handles
                    .iter()
                    .enumerate()
                    .filter_map(|(index, handle)| {
                        let signed_ms = scenario.requests[index].sent_at_ms.saturating_sub(1_000);
                        Some((handle.clone()?, signed_ms + expires_s * 1_000))
                    })
                    .collect()
            })
            .unwrap_or_default();
        let shared = Arc::new(
            Shared::new(scenario.seed, scenario.faults, scenario.store_outage, margin_ms, tracing)
                .with_late_store_faults(scenario.late_store_faults)
                .with_handle_expiries(
                    handle_expiries,
                    scenario.options.planted_bug == Some(crate::scenario::PlantedBug::ExpiredRetried),
                )
                .with_lost_answer_transient(
                    scenario.options.planted_bug == Some(crate::scenario::PlantedBug::RerunSameFence),
                )
                .with_unknown_as_not_applied(
                    scenario.options.planted_bug == Some(crate::scenario::PlantedBug::UnknownAsNotApplied),
                ),
        );
        shared.cover(scenario.kind.name());
        shared.trace(None, || {
            let timeout = scenario.function_timeout;
            format!(
                "{}; function timeout {} s, visibility {} s, maxReceiveCount {}, secondary delay {} s, batches of {}, {} at once",
                scenario.kind.name(),
                timeout.timeout_s,
                timeout.visibility_s,
                scenario.max_receive_count,
                scenario.secondary_delay_ms / 1_000,
                scenario.batch_size,
                scenario.concurrency,
            )
        });
        if scenario.kind == Kind::LongWork {
            if scenario
                .outages
                .iter()
                .any(|(region, from, _)| *region == Region::Primary && *from > scenario.requests[0].sent_at_ms)
            {
                shared.cover("long work: the primary down in the middle of it");
            }
            if scenario.flips.iter().any(|(at, _)| *at > scenario.requests[0].sent_at_ms) {
                shared.cover("long work: the active region flipped in the middle of it");
            }
        }
        if scenario.function_timeout.timeout_s >= 900 {
            shared.cover("function timeout 900 s");
        }
        let table = Arc::new(Table::new(scenario.options.mode, scenario.options.planted_bug));
        let active = Arc::new(Mutex::new(Region::Primary));
        let clocks = Region::BOTH.map(|region| {
            Arc::new(SkewedClock {
                base: shared.clock.clone(),
                offset_ms: AtomicI64::new(scenario.skew_ms[region.index()]),
            })
        });
        let queues = Arc::new(Mutex::new(Queues::default()));
        let sim_queues = Region::BOTH
            .map(|region| Arc::new(SimQueue { region, queues: Arc::clone(&queues), shared: Arc::clone(&shared) }));
        let workers = Region::BOTH.map(|region| {
            let router = Router::new().register(SIM_TYPE, SimProvider { shared: Arc::clone(&shared), region });
            let ports = Ports {
                store: Arc::new(RegionStore::new(region, Arc::clone(&table), Arc::clone(&shared))),
                sink: Arc::new(SimSink { region, shared: Arc::clone(&shared) }),
                router: Arc::new(router),
                clock: Arc::clone(&clocks[region.index()]) as Arc<dyn Clock>,
                random: Arc::new(SplitMix64::new(scenario.seed.rotate_left(17) ^ region.index() as u64)),
                control: Arc::new(SimControl { region, active: Arc::clone(&active), shared: Arc::clone(&shared) }),
                metrics: Arc::new(NoMetrics),
            };
            let input =
                InputPolicy { topic_arns: vec![TOPIC_ARN.into()], raw_delivery: false, urls: UrlPolicy::new(vec![]) };
            let settings = parameters
                .settings_by_timeout
                .get(&scenario.function_timeout.timeout_s)
                .unwrap_or(&parameters.settings)[region.index()]
            .clone();
            Worker::new(ports, input, settings)
        });
        let old_workers = workers.clone().map(|worker| worker.with_decision_table(crate::frozen::decide_47ab05d));
        {
            let mut observed = shared.observed();
            for (index, plan) in scenario.requests.iter().enumerate() {
                let message = serde_json::from_str::<serde_json::Value>(&bodies[index])
                    .ok()
                    .and_then(|envelope| serde_json::from_str(envelope["Message"].as_str()?).ok());
                if let Some(request) = message {
                    observed.deadlines.insert(Fingerprint::of(&request), plan.deadline_ms());
                    if let (Some(work_ms), Some(handle)) = (plan.work_deadline_ms(), &handles[index]) {
                        let stack = cfn_once_core::request::StackArn::parse(&stack_arn(scenario.seed))
                            .unwrap_or_else(|| panic!("the simulated stack's ARN"));
                        let logical_id = format!("Resource{}", plan.original(index));
                        let work = cfn_once_core::work::work_key_of(&stack, &logical_id, handle);
                        observed.work_deadlines.insert((Fingerprint::of(&request), work.request_id), work_ms);
                    }
                }
            }
        }
        let mut events = BTreeMap::new();
        let mut sequence = 0;
        let mut schedule = |at_ms: u64, event: Event| {
            events.insert((T0_MS + at_ms, sequence), event);
            sequence += 1;
        };
        for (index, plan) in scenario.requests.iter().enumerate() {
            schedule(plan.sent_at_ms, Event::Publish(index));
        }
        for (region, from, to) in &scenario.outages {
            schedule(*from, Event::OutageStart(*region));
            schedule(*to, Event::OutageEnd(*region));
        }
        for (at, region) in &scenario.flips {
            schedule(*at, Event::Flip(*region));
        }
        for (at, region, jump) in &scenario.jumps {
            schedule(*at, Event::Jump(*region, *jump));
        }
        for (at, region) in &scenario.crashes {
            schedule(*at, Event::Crash(*region));
        }
        for (index, at_ms, answer_after_ms) in scenario.upgrade.iter().flat_map(|upgrade| &upgrade.newer_takes) {
            schedule(*at_ms, Event::NewerTakes(*index, *answer_after_ms));
        }
        if let Some(every_ms) = scenario.sweep_every_ms {
            let last_ms = scenario.requests.iter().map(RequestPlan::owed_until_ms).max().unwrap_or(0);
            for at_ms in (every_ms..last_ms).step_by(usize::try_from(every_ms).unwrap_or(usize::MAX)) {
                schedule(at_ms, Event::Sweep);
            }
        }
        let handover_deadlines = Arc::new(
            scenario
                .requests
                .iter()
                .enumerate()
                .filter(|(_, plan)| plan.wait_condition_s.is_some() && plan.delete_of.is_none())
                .map(|(index, plan)| {
                    let request_id = match plan.update_of {
                        Some(_) => format!("update-{index}"),
                        None => format!("request-{}", plan.original(index)),
                    };
                    (request_id, plan.deadline_ms())
                })
                .collect(),
        );
        Self {
            scenario,
            parameters: parameters.clone(),
            shared,
            table,
            workers,
            old_workers,
            clocks,
            sim_queues,
            queues,
            active,
            bodies,
            urls,
            handles,
            tasks: BTreeMap::new(),
            next_task: 0,
            up: [true, true],
            events,
            lease_and_skew_ms: parameters.settings[0].lease_ms + parameters.settings[0].skew_ms,
            hidden_unstarted: Vec::new(),
            handover_deadlines,
        }
    }

    /// The CloudFormation requests of the scenario as SNS envelopes (published at their send
    /// time), their ResponseURLs, and their wait condition handles.
    fn requests(scenario: &Scenario) -> (Vec<String>, Vec<String>, Vec<Option<String>>) {
        let mut bodies = Vec::new();
        let mut urls = Vec::new();
        let mut handles = Vec::new();
        let seed = scenario.seed;
        // A handle is presigned a second before the request that first names it is sent; its
        // URL says when it expires, as CloudFormation's do, unless the scenario leaves that out.
        let handle_of = |index: usize| {
            let expiry = match (scenario.handle_expires_s, scenario.opaque_handles) {
                (Some(expires_s), false) => {
                    let signed_ms = T0_MS + scenario.requests[index].sent_at_ms.saturating_sub(1_000);
                    format!("X-Amz-Date={}&X-Amz-Expires={expires_s}&", amz_date(signed_ms))
                }
                _ => String::new(),
            };
            format!(
                "https://cloudformation-waitcondition-us-east-2.s3.us-east-2.amazonaws.com/sim/{seed}/{index}?{expiry}X-Amz-Signature=h{index}"
            )
        };
        let mut properties_sent: Vec<serde_json::Value> = Vec::new();
        for (index, plan) in scenario.requests.iter().enumerate() {
            let original = plan.original(index);
            let url = format!(
                "https://cloudformation-custom-resource-response-useast2.s3.us-east-2.amazonaws.com/sim/{seed}/{index}?X-Amz-Signature=s{index}"
            );
            let (kind, request_id) = match (plan.delete_of, plan.update_of) {
                (Some(_), _) => ("Delete", format!("delete-{index}")),
                (None, Some(_)) => ("Update", format!("update-{index}")),
                (None, None) => ("Create", format!("request-{original}")),
            };
            // An Update's work writes an item of its own, so that its polls are told from the
            // old work's.
            let item = if plan.update_of.is_some() { index } else { original };
            let mut request = json!({
                "RequestType": kind,
                "ResponseURL": url,
                "StackId": stack_arn(seed),
                "RequestId": request_id,
                "LogicalResourceId": format!("Resource{original}"),
                "ResourceType": SIM_TYPE,
                "ResourceProperties": {
                    "WorkMs": plan.work_ms.to_string(),
                    "Item": format!("item-{item}"),
                    "ServiceTimeout": plan.service_timeout_s.to_string(),
                },
            });
            if plan.delete_of.is_some() || plan.update_of.is_some() {
                request["PhysicalResourceId"] = json!(format!("item-{original}"));
            }
            if let Some(wait) = plan.wait {
                let properties = &mut request["ResourceProperties"];
                properties["WaitMs"] = json!(wait.in_progress_ms.to_string());
                properties["PollIntervalS"] = json!(wait.poll_interval_s.to_string());
                properties["PollWorkMs"] = json!(wait.poll_work_ms.to_string());
            }
            if plan.panic_percent > 0 {
                request["ResourceProperties"]["PanicPercent"] = json!(plan.panic_percent.to_string());
            }
            // An Update names a new handle; a Delete, the one its resource was created with.
            let own = plan.handle_owner(index);
            let handle = plan.wait_condition_s.map(|timeout_s| {
                let properties = &mut request["ResourceProperties"];
                properties[cfn_once_core::wait_condition::HANDLE_PROPERTY] = json!(handle_of(own));
                properties[cfn_once_core::wait_condition::TIMEOUT_PROPERTY] = json!(timeout_s.to_string());
                handle_of(own)
            });
            properties_sent.push(request["ResourceProperties"].clone());
            if plan.update_of.is_some() {
                request["OldResourceProperties"] = properties_sent[plan.old_from.unwrap_or(original)].clone();
            }
            let envelope = json!({
                "Type": "Notification",
                "MessageId": format!("sim-{seed}-{index}"),
                "TopicArn": TOPIC_ARN,
                "Message": request.to_string(),
                "Timestamp": cfn_once_core::timestamp::format_ms(T0_MS + plan.sent_at_ms),
                "SignatureVersion": "1",
            });
            bodies.push(envelope.to_string());
            urls.push(url);
            // A request owes a signal only to a handle it is the first to name.
            handles.push(handle.filter(|_| plan.delete_of.is_none() && own == index));
        }
        (bodies, urls, handles)
    }

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

    /// Polls every runnable invocation once; true if any was polled.
    fn poll_tasks(&mut self) -> bool {
        let now_ms = self.now_ms();
        let runnable: Vec<u64> = self
            .tasks
            .iter()
            .filter(|(_, task)| task.frozen_until_ms <= now_ms && task.flag.0.load(Ordering::SeqCst))
            .map(|(id, _)| *id)
            .collect();
        for id in &runnable {
            if self.shared.fault(self.shared.faults.crash) {
                self.shared.cover("Lambda crashed between steps");
                self.crash(*id, "crashed between two steps", "Lambda crashed between steps");
                continue;
            }
            let Some(task) = self.tasks.get_mut(id) else { continue };
            task.started = true;
            task.flag.0.store(false, Ordering::SeqCst);
            let waker = Waker::from(Arc::clone(&task.flag));
            let future = &mut task.future;
            let poll =
                std::panic::catch_unwind(AssertUnwindSafe(|| future.as_mut().poll(&mut Context::from_waker(&waker))));
            if let Some((polls_left, duration_ms)) = task.freeze {
                if polls_left <= 1 {
                    task.freeze = None;
                    task.frozen_until_ms = now_ms + duration_ms;
                    let region = task.region;
                    self.shared.cover("Lambda frozen for longer than a lease");
                    self.shared.fault_happened(region, "Lambda frozen for longer than a lease");
                    self.shared.trace(Some(region), || format!("Lambda {id} frozen for {} s", duration_ms / 1000));
                } else {
                    task.freeze = Some((polls_left - 1, duration_ms));
                }
            }
            match poll {
                Ok(Poll::Ready(to_retry)) => self.complete(*id, &to_retry),
                Ok(Poll::Pending) => {}
                Err(_) => {
                    // lambda_runtime reports the invocation failed and the process serves on;
                    // the event source mapping retries the whole batch after its visibility.
                    self.shared.cover("a panic failed a whole invocation");
                    self.end_without_deleting(*id, "failed: a panic reached the Lambda runtime");
                }
            }
        }
        !runnable.is_empty()
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
                    let late_ms = plan.late.filter(|(late, _)| *late == region).map_or(0, |(_, ms)| ms);
                    if late_ms > 0 {
                        self.shared.cover("SNS delivered a copy late");
                    }
                    let delay_ms = if region == Region::Secondary { self.scenario.secondary_delay_ms } else { 0 };
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
                let deadline_ms = plan.sent_at_ms + plan.service_timeout_s * 1_000;
                (deadline_ms.saturating_sub(60_000)..deadline_ms).contains(&elapsed_ms)
            })
        })
    }

    /// The event source mappings: each region that is up receives batches of visible copies
    /// while it has concurrency left; true if any invocation started.
    fn deliver(&mut self) -> bool {
        let now_ms = self.now_ms();
        let mut started = false;
        for region in Region::BOTH {
            while self.up[region.index()]
                && self.tasks.values().filter(|task| task.region == region).count() < self.scenario.concurrency
                && self.queues().any_visible(region, now_ms)
            {
                let visibility_ms = self.scenario.function_timeout.visibility_s * 1_000;
                let (receipts, redriven) = self.queues().receive(
                    region,
                    now_ms,
                    self.scenario.batch_size,
                    visibility_ms,
                    self.scenario.max_receive_count,
                );
                for request in redriven {
                    self.shared.cover("message moved to the DLQ by SQS (maxReceiveCount)");
                    self.dead_lettered(request, "SQS, its receives used up", region);
                }
                if receipts.is_empty() {
                    continue;
                }
                if receipts.len() > 1 {
                    self.shared.cover("batch of more than one record");
                }
                if self.shared.fault(self.shared.faults.duplicate) {
                    self.shared.cover("message delivered twice at once");
                    self.start(region, vec![receipts[0]]);
                }
                self.start(region, receipts);
                started = true;
            }
        }
        started
    }

    fn start(&mut self, region: Region, receipts: Vec<Receipt>) {
        let now_ms = self.now_ms();
        let task_id = self.next_task;
        self.next_task += 1;
        let items: Vec<(Receipt, String, u32, u64, String)> = {
            let queues = self.queues();
            receipts
                .iter()
                .filter_map(|receipt| {
                    let copy = queues.copies.get(&receipt.message)?;
                    let body = self.bodies[copy.request].clone();
                    let id = format!("message-{}", receipt.message);
                    Some((*receipt, body, copy.receive_count, copy.sent_ms, id))
                })
                .collect()
        };
        self.shared.trace(Some(region), || {
            let what: Vec<String> = {
                let queues = self.queues();
                items
                    .iter()
                    .map(|(receipt, _, count, _, _)| {
                        let request = queues.copies.get(&receipt.message).map_or(0, |copy| copy.request);
                        format!("request {request} (receive {count})")
                    })
                    .collect()
            };
            format!("Lambda {task_id} receives {}", what.join(", "))
        });
        let elapsed_ms = self.shared.elapsed_ms();
        self.shared.observed().invocations_started.insert(format!("lambda-{task_id}"), elapsed_ms);
        let on_last_release =
            self.scenario.upgrade.as_ref().is_some_and(|upgrade| {
                upgrade.old_region == region && self.shared.elapsed_ms() < upgrade.upgraded_at_ms
            });
        if on_last_release {
            self.shared.cover("upgrade: an invocation on the last release's decision table");
        }
        let worker =
            if on_last_release { &self.old_workers[region.index()] } else { &self.workers[region.index()] }.clone();
        let queue = Arc::clone(&self.sim_queues[region.index()]);
        let shared = Arc::clone(&self.shared);
        let handovers = Arc::clone(&self.handover_deadlines);
        let invocation = Invocation {
            id: format!("lambda-{task_id}"),
            deadline_ms: self.clocks[region.index()].now_ms() + self.function_timeout_ms(),
        };
        let future = Box::pin(async move {
            let records: Vec<Record<'_, Receipt>> = items
                .iter()
                .map(|(receipt, body, receive_count, sent_ms, id)| Record {
                    message: receipt,
                    message_id: id,
                    queue_record: QueueRecord {
                        body: Some(body),
                        receive_count: *receive_count,
                        sent_ms: Some(*sent_ms),
                    },
                })
                .collect();
            let observe = move |handled: &Handled| observe(&shared, region, handled, &handovers);
            batch::handle(&worker, queue.as_ref(), &invocation, &records, &observe).await
        });
        let freeze = self
            .shared
            .fault(self.shared.faults.freeze)
            .then(|| (1 + self.shared.below(6) as u32, self.lease_and_skew_ms + self.shared.below(60_000)));
        self.tasks.insert(
            task_id,
            Task {
                region,
                receipts,
                received_at_ms: now_ms,
                kill_at_ms: now_ms + self.function_timeout_ms(),
                frozen_until_ms: 0,
                disturbed: freeze.is_some(),
                freeze,
                started: false,
                flag: Arc::new(Flag(AtomicBool::new(true))),
                future,
            },
        );
    }

    /// The Lambda is gone mid-run: nothing of its batch is deleted, and every copy keeps the
    /// visibility it had (the visibility timeout from its receive, unless the handler changed it).
    fn crash(&mut self, task_id: u64, why: &str, fault: &'static str) {
        if let Some(task) = self.tasks.get(&task_id) {
            self.shared.fault_happened(task.region, fault);
        }
        self.end_without_deleting(task_id, why);
    }

    fn end_without_deleting(&mut self, task_id: u64, why: &str) {
        let Some(task) = self.tasks.remove(&task_id) else { return };
        self.shared.trace(Some(task.region), || format!("Lambda {task_id} {why}"));
        if !task.started {
            let visibility_ms = self.scenario.function_timeout.visibility_s * 1_000;
            let queues = self.queues();
            let hidden: Vec<HiddenUnstarted> = task
                .receipts
                .iter()
                .filter_map(|receipt| queues.copies.get(&receipt.message))
                .map(|copy| HiddenUnstarted {
                    request: copy.request,
                    region: task.region,
                    until_ms: task.received_at_ms + visibility_ms - T0_MS,
                })
                .collect();
            drop(queues);
            self.hidden_unstarted.extend(hidden);
        }
    }

    /// The invocation returned: the event source mapping deletes every record it did not
    /// report failed.
    fn complete(&mut self, task_id: u64, to_retry: &[bool]) {
        let Some(task) = self.tasks.remove(&task_id) else { return };
        self.shared.trace(Some(task.region), || format!("Lambda {task_id} returned"));
        for (receipt, retry) in task.receipts.iter().zip(to_retry.iter().chain(std::iter::repeat(&true))) {
            if !retry && !self.queues().delete(*receipt) {
                self.shared.cover("delete with a receipt a later receive replaced");
            }
        }
    }

    /// Checks the handler's moves to the DLQ since the last look.
    fn check_dead_letters(&mut self) {
        let moved = std::mem::take(&mut self.queues().dead_lettered);
        for dead in moved {
            self.shared.cover("message moved to the DLQ by the handler");
            self.dead_lettered(dead.request, "the handler", dead.region);
        }
    }

    /// A copy of `request` reached the DLQ: allowed only once nobody can be answered (never, in
    /// the simulation) or its request was answered or its deadline has passed. The handler
    /// judges "passed" by its own clock, which may run ahead by up to the skew margin (more,
    /// if it was stepped: a fault), so a move that early is not a violation.
    fn dead_lettered(&self, request: usize, by: &str, region: Region) {
        let elapsed_ms = self.shared.elapsed_ms();
        let plan = &self.scenario.requests[request];
        // A resource with a wait condition whose answer handed its work over is owed its signal
        // too, until its timeout; until then, only its answer, by the answer's deadline.
        let deadline_ms = if self.handed_over(request) { plan.owed_until_ms() } else { plan.deadline_ms() };
        let answered = self.done_with(request);
        let superseded = self.scenario.requests.iter().any(|other| other.retry_of == Some(request));
        self.shared.trace(None, || format!("a copy of request {request} moved to the DLQ by {by}"));
        let skew_ms = self.parameters.settings[region.index()].skew_ms;
        if elapsed_ms + skew_ms < deadline_ms && !answered && !superseded {
            if self.clock_off_at(region, elapsed_ms) && by == "the handler" {
                self.shared.cover("copy dead-lettered early by a region whose clock was stepped");
                return;
            }
            self.shared.violation(format!(
                "DLQ: a copy of request {request} was moved to the DLQ by {by} {} s before its deadline, unanswered",
                (deadline_ms - elapsed_ms) / 1_000
            ));
        }
    }

    /// Whether `request` names a wait condition and its answer handed its work over.
    fn handed_over(&self, request: usize) -> bool {
        let observed = self.shared.observed();
        let answer = observed.puts.get(&self.urls[request]).and_then(|puts| puts.first());
        self.handles[request].is_some() && answer.is_some_and(|(_, body)| cfn_once_core::work::is_handed_over(body))
    }

    /// Whether nothing more is owed for `request`: it was answered, and if it handed work to a
    /// wait condition, the work was signalled.
    fn done_with(&self, request: usize) -> bool {
        let answered = self.shared.observed().puts.get(&self.urls[request]).is_some_and(|puts| !puts.is_empty());
        let signalled = || {
            let handle = self.handles[request].as_deref().unwrap_or_default();
            self.shared.observed().puts.get(handle).is_some_and(|puts| !puts.is_empty())
        };
        answered && (!self.handed_over(request) || signalled())
    }

    /// The key of the record of request `index` (a Create: its RequestId is its own).
    fn key_of(&self, index: usize) -> cfn_once_core::request::RequestKey {
        cfn_once_core::request::RequestKey {
            stack_id: cfn_once_core::request::StackArn::parse(&stack_arn(self.scenario.seed))
                .unwrap_or_else(|| panic!("the simulated stack's ARN")),
            request_id: format!("request-{index}"),
        }
    }

    /// A newer version of cfn-once got request `index` first: where no record exists yet, it
    /// takes the lease, writing a record of its own format, and answers `answer_after_ms` later.
    fn newer_takes(&mut self, index: usize, answer_after_ms: u64) {
        let key = self.key_of(index);
        if self.table.stored(&key).iter().any(Option::is_some) {
            return;
        }
        let now_ms = self.shared.clock.now_ms();
        let mut record = cfn_once_core::lease::left_record(&key, 1, None, now_ms, now_ms + 86_400_000 * 30);
        record.format = cfn_once_core::lease::RECORD_FORMAT + 1;
        record.state = cfn_once_core::lease::LeaseState::Running;
        record.owner = "newer-version".into();
        record.lease_until_ms = now_ms + answer_after_ms + 30_000;
        self.table.put_as_newer_version(&record);
        self.shared.observed().newer_records.insert(key, record);
        self.shared.cover("upgrade: a newer version took a request first");
        self.shared.trace(None, || format!("a newer version of cfn-once takes request {index}"));
        let at = (self.now_ms() + answer_after_ms, u64::MAX - index as u64);
        self.events.insert(at, Event::NewerAnswers(index));
    }

    /// FORMAT: the record a newer version wrote is as it left it, in every replica.
    fn check_newer_record(&self, key: &cfn_once_core::request::RequestKey) -> bool {
        let Some(written) = self.shared.observed().newer_records.get(key).cloned() else { return true };
        let intact = self.table.stored(key).iter().all(|stored| stored.as_ref() == Some(&written));
        if !intact {
            self.shared.violation(format!(
                "FORMAT: the record of {} a newer version wrote (format {}) was overwritten or deleted",
                key.request_id, written.format
            ));
        }
        intact
    }

    /// The newer version answers the request it took: PUTs its answer and records it delivered.
    fn newer_answers(&mut self, index: usize) {
        let key = self.key_of(index);
        if !self.check_newer_record(&key) {
            return;
        }
        let body = serde_json::json!({
            "Status": "SUCCESS",
            "Reason": "answered by a newer version of cfn-once",
            "PhysicalResourceId": format!("newer-{index}"),
            "StackId": stack_arn(self.scenario.seed),
            "RequestId": key.request_id,
            "LogicalResourceId": format!("Resource{index}"),
            "Data": {},
        })
        .to_string()
        .into_bytes();
        let now_ms = self.shared.clock.now_ms();
        let Some(mut record) = self.shared.observed().newer_records.get(&key).cloned() else { return };
        record.state = cfn_once_core::lease::LeaseState::Committed;
        record.response = Some(body.clone());
        record.delivered = true;
        record.updated_ms = now_ms;
        self.table.put_as_newer_version(&record);
        self.shared.observed().newer_records.insert(key, record);
        let elapsed_ms = self.shared.elapsed_ms();
        self.shared.observed().puts.entry(self.urls[index].clone()).or_default().push((elapsed_ms, body));
        self.shared.cover("upgrade: a newer version answered a request it took");
        self.shared.trace(None, || format!("the newer version answers request {index}"));
    }

    /// Whether `region`'s clock was stepped away from true time at `elapsed_ms`.
    fn clock_off_at(&self, region: Region, elapsed_ms: u64) -> bool {
        self.clock_faults().iter().any(|(r, from, to)| *r == region && (*from..*to).contains(&elapsed_ms))
    }

    /// The clock faults: (region, from, to) elapsed ms, a step and the step back.
    fn clock_faults(&self) -> Vec<(Region, u64, u64)> {
        self.scenario.jumps.chunks(2).filter_map(|pair| Some((pair[0].1, pair[0].0, pair.get(1)?.0))).collect()
    }

    fn function_timeout_ms(&self) -> u64 {
        self.scenario.function_timeout.timeout_s * 1_000
    }

    /// Lambda kills invocations past the function timeout. One that was neither frozen nor saw
    /// its clock jump ran past the time budget every call must keep (`settings`): a violation,
    /// since a killed invocation fails its whole batch.
    fn kill_overdue(&mut self) {
        let now_ms = self.now_ms();
        let overdue: Vec<(u64, bool)> =
            self.tasks.iter().filter(|(_, t)| t.kill_at_ms <= now_ms).map(|(id, t)| (*id, t.disturbed)).collect();
        for (id, disturbed) in overdue {
            self.shared.cover("Lambda killed at its timeout");
            if !disturbed {
                self.shared.violation(format!("BUDGET: Lambda {id} was killed at its function timeout, undisturbed"));
            }
            self.end_without_deleting(id, "killed at the function timeout");
        }
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

    /// A wait the primary's outage interrupted is finished by the secondary: the story of
    /// [`Kind::OutageMidWait`], whose wait ends long before its deadline, must end in SUCCESS.
    fn check_wait_survived(&self) {
        let superseded = self.scenario.requests.iter().any(|plan| plan.retry_of == Some(0));
        if self.scenario.kind != Kind::OutageMidWait || superseded || self.scenario.requests[0].panic_percent > 0 {
            return;
        }
        let observed = self.shared.observed();
        let last = observed.puts.get(&self.urls[0]).and_then(|puts| puts.last()).map(|(_, body)| body.clone());
        drop(observed);
        let status = last.as_deref().and_then(|body| ResponseBody::parse(body).ok()).map(|body| body.status);
        if status != Some(Status::Success) {
            self.shared.violation(format!(
                "WAIT: request 0's wait outlived the primary but was answered {status:?}, not SUCCESS, by the secondary"
            ));
        }
    }

    /// SIGNAL: a work handed to a wait condition gets one signal (one body, however often it is
    /// PUT), and a Delete of its resource, or an Update naming a new handle, is answered only
    /// after that signal: nothing is first PUT to the handle, and no poll of the work starts,
    /// after the close's answer. That the signal
    /// comes before the wait condition's timeout is L1's ([`World::check_liveness`]).
    fn check_signals(&self) {
        let observed = self.shared.observed();
        let mut violations = Vec::new();
        let mut covered: Vec<&'static str> = Vec::new();
        for (index, plan) in self.scenario.requests.iter().enumerate() {
            let Some(handle) = &self.handles[index] else { continue };
            let signals = observed.puts.get(handle).map(Vec::as_slice).unwrap_or_default();
            let mut bodies: Vec<&Vec<u8>> = signals.iter().map(|(_, body)| body).collect();
            bodies.dedup();
            if bodies.len() > 1 {
                violations.push(format!(
                    "SIGNAL: request {index}'s wait condition handle got {} different signals",
                    bodies.len()
                ));
            }
            if let Some((at_ms, body)) = signals.first() {
                let signal = cfn_once_core::wait_condition::Signal::parse(body);
                covered.push(match signal.as_ref().map(|signal| signal.status) {
                    Some(cfn_once_core::wait_condition::SignalStatus::Success) => "long work: signalled SUCCESS",
                    _ => "long work: signalled FAILURE",
                });
                if signal.is_some_and(|signal| signal.reason.contains("wait condition's timeout")) {
                    covered.push("long work: signalled FAILURE as its timeout came near");
                }
                if *at_ms > plan.deadline_ms() {
                    covered.push("long work: signalled after its ServiceTimeout");
                }
                if at_ms.saturating_sub(plan.sent_at_ms) > 6 * 3_600_000 {
                    covered.push("long work: signalled more than 6 hours after its request");
                }
            }
            let handed_over = observed
                .puts
                .get(&self.urls[index])
                .and_then(|puts| puts.first())
                .is_some_and(|(_, body)| cfn_once_core::work::is_handed_over(body));
            let expired_by = |at_ms: u64| {
                self.shared.handle_expiries.get(handle.as_str()).is_some_and(|expiry_ms| at_ms >= *expiry_ms)
            };
            let closers = self.scenario.requests.iter().enumerate();
            for (closer, what) in
                closers.filter_map(|(closer, c)| self.closes(closer, c, index).map(|what| (closer, what)))
            {
                let Some((answered_ms, answer)) = observed.puts.get(&self.urls[closer]).and_then(|puts| puts.first())
                else {
                    continue;
                };
                covered.push(if what == "Delete" {
                    "long work: its Delete answered"
                } else {
                    "long work: an Update naming a new handle answered"
                });
                let closer_plan = &self.scenario.requests[closer];
                if self.scenario.kind == Kind::CloseMidWork {
                    covered.push("close mid-work: answered");
                    if answered_ms + self.parameters.settings[0].deadline_margin_ms >= closer_plan.deadline_ms() {
                        covered.push("close mid-work: answered in its deadline margin");
                    }
                    if ResponseBody::parse(answer).is_ok_and(|body| body.status == Status::Success) {
                        covered.push("close mid-work: answered SUCCESS");
                    }
                }
                // The signal comes first. A straggler may PUT the same committed bytes again
                // later (a PUT whose reply was lost, retried): S1 holds them identical.
                match signals.first() {
                    Some((first_ms, _)) if first_ms <= answered_ms => {
                        if signals.iter().any(|(at_ms, _)| at_ms > answered_ms) {
                            covered.push("long work: the same signal PUT again after its Delete's answer");
                        }
                    }
                    Some(_) => violations.push(format!(
                        "SIGNAL: request {index}'s handle was first signalled after its {what} (request {closer}) was answered"
                    )),
                    // Owed only by a work that was handed over, and only while its handle could
                    // still take a signal: a Create answered FAILED started no work, and past its
                    // expiry S3 refuses every signal (the work is recorded done without one).
                    None if handed_over && !expired_by(*answered_ms) => violations.push(format!(
                        "SIGNAL: request {closer} (a {what}) was answered and request {index}'s work was never signalled"
                    )),
                    None => covered.push("long work: a close answered with no signal owed (no work, or its handle expired)"),
                }
                let item = format!("item-{index}");
                if observed.poll_starts.iter().any(|(polled, at_ms)| *polled == item && at_ms > answered_ms) {
                    violations.push(format!(
                        "SIGNAL: a poll of request {index}'s work started after its {what} (request {closer}) was answered"
                    ));
                }
            }
        }
        drop(observed);
        for name in covered {
            self.shared.cover(name);
        }
        for violation in violations {
            self.shared.violation(violation);
        }
    }

    /// FORMAT at the end: every record a newer version wrote is as it left it.
    fn check_newer_records(&self) {
        let keys: Vec<_> = self.shared.observed().newer_records.keys().cloned().collect();
        for key in keys {
            self.check_newer_record(&key);
        }
    }

    /// COUNT: every ADD to a counter of the provider's fenced store was applied once, however
    /// often it was sent (after a lost reply, with its token): a counter counts each provider
    /// run that added to it once.
    fn check_counts(&self) {
        let observed = self.shared.observed();
        let mut wrong = Vec::new();
        let mut added = false;
        for (item, stored) in observed.fenced.iter().filter(|(item, _)| item.starts_with("count-")) {
            added |= stored.count > 0;
            let mut tokens = stored.added.clone();
            tokens.sort();
            tokens.dedup();
            if tokens.len() != stored.added.len() {
                wrong.push(format!("COUNT: {item} counts {} ADDs of {} writes", stored.count, tokens.len()));
            }
        }
        drop(observed);
        if added {
            self.shared.cover("a counter added to");
        }
        for violation in wrong {
            self.shared.violation(violation);
        }
    }

    /// Whether request `closer` ends the work on the handle request `index` made, and how it is
    /// called: a Delete naming that handle, or an Update whose old properties name it and whose
    /// new ones name another (an Update that keeps its handle leaves its work alone).
    fn closes(&self, closer: usize, plan: &RequestPlan, index: usize) -> Option<&'static str> {
        let requests = &self.scenario.requests;
        if plan.delete_of.is_some() && plan.handle_owner(closer) == index {
            return Some("Delete");
        }
        let old = plan.old_from.unwrap_or_else(|| plan.original(closer));
        (plan.update_of.is_some() && requests[old].handle_owner(old) == index && plan.handle_owner(closer) != index)
            .then_some("Update naming a new handle")
    }

    /// A resource's later life (`Kind::LongLife`, and any seed whose handles expire):
    ///
    /// * `UPDATE:` an Update whose properties declare no new wait (it keeps its handle, or an
    ///   update rollback names the earlier one) is answered SUCCESS only after its provider's
    ///   Update ran, and never as a hand-over: no wait condition can be waiting on its handle;
    /// * `EXPIRED:` a handle S3 refuses (403, once it has expired) is never PUT to again by the
    ///   region that was refused: a refusal is final.
    fn check_long_life(&self) {
        let observed = self.shared.observed();
        let mut violations = Vec::new();
        let mut covered: Vec<&'static str> = Vec::new();
        for (index, plan) in self.scenario.requests.iter().enumerate() {
            if !plan.updates_without_a_new_wait(index) {
                continue;
            }
            let Some((_, answer)) = observed.puts.get(&self.urls[index]).and_then(|puts| puts.first()) else {
                continue;
            };
            let succeeded = ResponseBody::parse(answer).is_ok_and(|body| body.status == Status::Success);
            let ran = observed.updates_run.contains(&format!("update-{index}"));
            if cfn_once_core::work::is_handed_over(answer) {
                violations.push(format!(
                    "UPDATE: request {index}, an Update that declares no new wait, was answered as a hand-over"
                ));
            } else if succeeded && !ran {
                violations.push(format!(
                    "UPDATE: request {index}, an Update that declares no new wait, was answered SUCCESS without its provider running"
                ));
            } else if ran {
                // A rollback's old properties named another handle (the forward Update's).
                let requests = &self.scenario.requests;
                let rollback =
                    plan.old_from.is_some_and(|old| requests[old].handle_owner(old) != plan.handle_owner(index));
                covered.push(if rollback {
                    "long life: an update rollback naming the old handle ran its provider"
                } else {
                    "long life: an Update that kept its handle ran its provider"
                });
            }
        }
        // A refusal is final: the region refused does not PUT to that handle again, unless the
        // record of the refusal was swept in between (a close a month later, of a handle whose
        // URL does not say it expired, knows nothing of the earlier one).
        let mut last_refused: BTreeMap<(&str, Region), u64> = BTreeMap::new();
        for (at_ms, url, region) in &observed.refused {
            if let Some(before_ms) = last_refused.insert((url.as_str(), *region), *at_ms)
                && !observed.sweeps.iter().any(|swept_ms| (before_ms..*at_ms).contains(swept_ms))
            {
                violations.push(format!(
                    "EXPIRED: {} refused a PUT from {} at {} s and was PUT to again at {} s: a refused signal was tried again",
                    short(url),
                    region.name(),
                    before_ms / 1_000,
                    at_ms / 1_000
                ));
            }
        }
        if self.scenario.kind == Kind::LongLife {
            for (index, plan) in self.scenario.requests.iter().enumerate() {
                let answered = observed
                    .puts
                    .get(&self.urls[index])
                    .is_some_and(|puts| puts.iter().any(|(at, _)| *at <= plan.deadline_ms()));
                let age_ms = plan.sent_at_ms.saturating_sub(self.scenario.requests[0].sent_at_ms);
                if answered && index > 0 {
                    // Minutes, about a day, about a month, about a year after the Create.
                    let hours = age_ms / 3_600_000;
                    let age = [1, 48, 1_440].iter().take_while(|bound| hours > **bound).count();
                    covered.push(match (plan.delete_of.is_some(), age) {
                        (true, 0) => "long life: a Delete minutes after the Create answered",
                        (true, 1) => "long life: a Delete a day after the Create answered",
                        (true, 2) => "long life: a Delete a month after the Create answered",
                        (true, _) => "long life: a Delete a year after the Create answered",
                        (false, 0) => "long life: an Update minutes after the Create answered",
                        (false, 1) => "long life: an Update a day after the Create answered",
                        (false, 2) => "long life: an Update a month after the Create answered",
                        (false, _) => "long life: an Update a year after the Create answered",
                    });
                }
            }
        }
        drop(observed);
        for name in covered {
            self.shared.cover(name);
        }
        for violation in violations {
            self.shared.violation(violation);
        }
    }

    /// L1: every request that is not superseded by a retry is answered by its deadline, when
    /// some region could still answer it. A region could, for a request due at D, unless:
    ///
    /// * it was down at some moment of D's last window (`Parameters::last_fault_window_ms`,
    ///   the deadline margin and a backoff floor): nothing of it runs;
    /// * a fault happened in it in that window (a Lambda crashed, was frozen or died with its
    ///   region; a store call or a PUT failed, hung or lost its reply): the window is the time
    ///   L1 needs after the last fault;
    /// * its copy reached its queue too late: visible (after the secondary's delay, or a late
    ///   SNS delivery) only inside that window; a ServiceTimeout shorter than the secondary's
    ///   delay and the window has no failover;
    /// * a clock was stepped (either region's: leases and backoffs cross regions) within the
    ///   window or a lease and a longest backoff before it;
    /// * its copy was held by an invocation that died before its first step, past the start of
    ///   the window: no handler code ran that could have shortened its visibility.
    ///
    /// Only when every region is excused is a missed deadline not a violation; the reasons are
    /// counted per region.
    fn check_liveness(&self) {
        let superseded: Vec<usize> = self.scenario.requests.iter().filter_map(|plan| plan.retry_of).collect();
        let window_ms = self.parameters.last_fault_window_ms();
        let reach_ms = self.parameters.clock_fault_reach_ms(self.scenario.function_timeout.visibility_s);
        let observed = self.shared.observed();
        let mut missed = Vec::new();
        let mut excused: Vec<&'static str> = Vec::new();
        // Each request's answer is owed by its deadline; the work of one that handed it to a wait
        // condition (answered SUCCESS) is owed its signal by the wait condition's timeout. The
        // work's deadline counts from the request's sending (the handler's conservative end: a
        // wait condition that depends on the resource starts later), so an answer that came
        // late (every region that may answer down or drained until the answer's own deadline
        // came near) leaves the work no time: it is signalled FAILURE at once, which the wait
        // condition, started only then, reads long before its own timeout.
        let mut owed: Vec<(usize, &RequestPlan, String, &str, u64)> = Vec::new();
        for (index, plan) in self.scenario.requests.iter().enumerate() {
            owed.push((index, plan, format!("request {index}"), &self.urls[index], plan.deadline_ms()));
            let first_answer = observed.puts.get(&self.urls[index]).and_then(|puts| puts.first());
            let handed_over_at =
                first_answer.filter(|(_, body)| cfn_once_core::work::is_handed_over(body)).map(|(at_ms, _)| *at_ms);
            if let (Some(handle), Some(deadline_ms), Some(at_ms)) =
                (&self.handles[index], plan.work_deadline_ms(), handed_over_at)
            {
                if at_ms + window_ms <= deadline_ms {
                    owed.push((index, plan, format!("request {index}'s work"), handle, deadline_ms));
                } else {
                    excused.push("L1 excused: the answer came too late for its work's timeout");
                }
            }
        }
        for (index, plan, what, url, deadline_ms) in owed {
            if superseded.contains(&index) {
                continue;
            }
            let answered = observed.puts.get(url).is_some_and(|puts| puts.iter().any(|(at, _)| *at <= deadline_ms));
            if answered {
                continue;
            }
            let from_ms = deadline_ms.saturating_sub(window_ms);
            let clock_stepped = self
                .clock_faults()
                .iter()
                .any(|(_, stepped, back)| *stepped < deadline_ms && *back > from_ms.saturating_sub(reach_ms));
            let reasons: Vec<Option<Excuse>> =
                Region::BOTH
                    .into_iter()
                    .map(|region| {
                        let late_ms = plan.late.filter(|(late, _)| *late == region).map_or(0, |(_, ms)| ms);
                        let delay_ms = if region == Region::Secondary { self.scenario.secondary_delay_ms } else { 0 };
                        if self.down_within(region, from_ms, deadline_ms) {
                            Some(Excuse::Down)
                        } else if observed
                            .fault_log
                            .iter()
                            .any(|(at, r, _)| *r == region && (from_ms..deadline_ms).contains(at))
                        {
                            Some(Excuse::Fault)
                        } else if plan.sent_at_ms + late_ms + delay_ms > from_ms {
                            Some(Excuse::CopyTooLate)
                        } else if clock_stepped {
                            Some(Excuse::ClockStepped)
                        } else if self.hidden_unstarted.iter().any(|hidden| {
                            hidden.request == index && hidden.region == region && hidden.until_ms > from_ms
                        }) {
                            Some(Excuse::HiddenUnstarted)
                        } else {
                            None
                        }
                    })
                    .collect();
            if reasons.iter().all(Option::is_some) {
                excused.push("L1 excused: no region could answer in time");
                for (region, reason) in Region::BOTH.into_iter().zip(&reasons) {
                    excused.extend(reason.map(|reason| reason.counter(region)));
                }
                continue;
            }
            let able: Vec<&str> =
                Region::BOTH.into_iter().zip(&reasons).filter(|(_, r)| r.is_none()).map(|(r, _)| r.name()).collect();
            missed.push(format!(
                "L1: {what} ({}) was not answered by its deadline, though {} could have answered it",
                short(url),
                able.join(" and ")
            ));
        }
        drop(observed);
        for name in excused {
            self.shared.cover(name);
        }
        for violation in missed {
            self.shared.violation(violation);
        }
    }

    /// Whether `region` was down at any moment of `from_ms..to_ms` (elapsed ms).
    fn down_within(&self, region: Region, from_ms: u64, to_ms: u64) -> bool {
        self.scenario.outages.iter().any(|(r, down, up)| *r == region && *down < to_ms && *up > from_ms)
    }
}

/// Why a region could not answer a request in time (see [`World::check_liveness`]).
#[derive(Debug, Clone, Copy)]
enum Excuse {
    Down,
    Fault,
    CopyTooLate,
    ClockStepped,
    HiddenUnstarted,
}

impl Excuse {
    /// The coverage counter of this excuse for `region`.
    fn counter(self, region: Region) -> &'static str {
        match (region, self) {
            (Region::Primary, Self::Down) => "L1 excused, primary: down in the last seconds",
            (Region::Primary, Self::Fault) => "L1 excused, primary: a fault in the last seconds",
            (Region::Primary, Self::CopyTooLate) => "L1 excused, primary: its copy arrived too late",
            (Region::Primary, Self::ClockStepped) => "L1 excused, primary: a clock was stepped",
            (Region::Primary, Self::HiddenUnstarted) => {
                "L1 excused, primary: its copy hidden by an invocation that died before its first step"
            }
            (Region::Secondary, Self::Down) => "L1 excused, secondary: down in the last seconds",
            (Region::Secondary, Self::Fault) => "L1 excused, secondary: a fault in the last seconds",
            (Region::Secondary, Self::CopyTooLate) => "L1 excused, secondary: its copy arrived too late",
            (Region::Secondary, Self::ClockStepped) => "L1 excused, secondary: a clock was stepped",
            (Region::Secondary, Self::HiddenUnstarted) => {
                "L1 excused, secondary: its copy hidden by an invocation that died before its first step"
            }
        }
    }
}

/// Counts what a record's delivery came to. `handovers` holds the answer's deadline of each
/// request that hands a work over, by RequestId.
fn observe(shared: &Shared, region: Region, handled: &Handled, handovers: &BTreeMap<String, u64>) {
    let request_id = handled.request.as_ref().map(|summary| summary.request_id.as_str());
    let past_answer =
        request_id.and_then(|id| handovers.get(id)).is_some_and(|deadline_ms| shared.elapsed_ms() > *deadline_ms);
    let store_failed = matches!(&handled.disposition, Disposition::Retry { why, .. } if why.contains("lease store"));
    if past_answer && store_failed {
        shared.cover("a handed-over request's copy kept past its answer's deadline after a store failure");
    }
    match &handled.disposition {
        Disposition::Done(Done::Answered { status: Status::Failed, .. }) => shared.cover("answered FAILED"),
        Disposition::Done(Done::Replayed { .. }) => shared.cover("stored answer re-sent"),
        Disposition::Done(Done::Superseded) => shared.cover("superseded attempt dropped"),
        Disposition::Retry { why, .. } if why.contains("standby") => shared.cover("drained primary left the message"),
        Disposition::Retry { why, .. } if why.contains("runs again under a higher fence") => {
            shared.cover("an outcome nobody saw: the lease ended for a run under a higher fence")
        }
        _ => {}
    }
    shared.trace(Some(region), || {
        let request = handled.request.as_ref().map_or("?", |summary| summary.request_id.as_str());
        format!("{request}: {:?}", handled.disposition)
    });
}
