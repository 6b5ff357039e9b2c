//! One seed's world: two regions' Lambdas running the real `Worker` on a shared virtual clock,
//! SQS queues with delays, visibility timeouts and duplicates, and the scenario's faults, all
//! driven by a small single-threaded executor. Nothing here is random but the seed, and nothing
//! waits on real time, so a seed replays exactly.

use std::collections::BTreeMap;
use std::future::Future;
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, AtomicI64, Ordering};
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll, Wake, Waker};

use cfn_once_core::clock::Clock;
use cfn_once_core::decision::Role;
use cfn_once_core::delivery::PutPolicy;
use cfn_once_core::metrics::NoMetrics;
use cfn_once_core::provider::Router;
use cfn_once_core::random::SplitMix64;
use cfn_once_core::request::InputPolicy;
use cfn_once_core::response_url::UrlPolicy;
use cfn_once_core::worker::{Delivery, Disposition, Done, Invocation, Ports, Settings, Worker};
use serde_json::json;

use crate::provider::{SIM_TYPE, SimProvider};
use crate::region::{SimControl, SkewedClock};
use crate::scenario::{LEASE_MS, Region, SKEW_MARGIN_MS, Scenario};
use crate::shared::{Shared, T0_MS};
use crate::sink::{SimSink, short};
use crate::stores::{RegionStore, Table};

/// SQS: how long a received message stays invisible if its Lambda dies.
const VISIBILITY_TIMEOUT_MS: u64 = 60_000;
/// Lambda kills an invocation after this long.
const FUNCTION_TIMEOUT_MS: u64 = 120_000;
/// Receives before SQS moves a message to the DLQ.
const RECEIVES_MAX: u32 = 200;
/// The simulation gives up after this much virtual time.
const END_MS: u64 = 4 * 3_600_000;

/// What one seed produced.
#[derive(Debug, Clone)]
pub struct SeedOutcome {
    pub seed: u64,
    pub violations: Vec<String>,
    pub coverage: BTreeMap<&'static str, u64>,
    pub trace: Vec<String>,
}

struct Message {
    request: usize,
    region: Region,
    visible_at_ms: u64,
    receive_count: u32,
    in_flight: u32,
}

struct Task {
    region: Region,
    message: u64,
    received_at_ms: u64,
    kill_at_ms: u64,
    frozen_until_ms: u64,
    /// Polls left before this Lambda freezes, and for how long.
    freeze: Option<(u32, u64)>,
    flag: Arc<Flag>,
    future: Pin<Box<dyn Future<Output = Disposition>>>,
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
}

struct World {
    scenario: Scenario,
    shared: Arc<Shared>,
    table: Arc<Table>,
    workers: [Worker; 2],
    clocks: [Arc<SkewedClock>; 2],
    active: Arc<Mutex<Region>>,
    bodies: Vec<String>,
    urls: Vec<String>,
    messages: BTreeMap<u64, Message>,
    next_message: u64,
    tasks: BTreeMap<u64, Task>,
    next_task: u64,
    up: [bool; 2],
    events: BTreeMap<(u64, u64), Event>,
}

/// Runs one seed's scenario to the end and checks the invariants.
pub fn run(scenario: &Scenario, tracing: bool) -> SeedOutcome {
    let mut world = World::new(scenario.clone(), tracing);
    world.run();
    world.check_liveness();
    let mut observed = world.shared.observed();
    SeedOutcome {
        seed: scenario.seed,
        violations: std::mem::take(&mut observed.violations),
        coverage: std::mem::take(&mut observed.coverage),
        trace: std::mem::take(&mut observed.trace),
    }
}

/// The protocol settings the simulation runs with.
fn settings(region: Region) -> Settings {
    Settings {
        region: region.name().to_owned(),
        role: if region == Region::Primary { Role::Primary } else { Role::Secondary },
        lease_ms: LEASE_MS,
        skew_ms: SKEW_MARGIN_MS,
        heartbeat_ms: LEASE_MS / 3,
        reserve_ms: 5_000,
        store_attempts_max: 4,
        store_call_timeout_ms: 2_000,
        store_backoff_base_ms: 50,
        store_backoff_max_ms: 1_000,
        provider_attempts_max: 3,
        provider_backoff_base_ms: 200,
        provider_backoff_max_ms: 2_000,
        put: PutPolicy { attempts_max: 3, attempt_timeout_ms: 2_000, backoff_base_ms: 200, backoff_max_ms: 2_000 },
        retention_ms: 86_400_000,
        retry_delay_s_max: 60,
        standby_retry_s: 20,
        deadline_ceiling_s: 3_600,
        deadline_margin_ms: 20_000,
    }
}

impl World {
    fn new(scenario: Scenario, tracing: bool) -> Self {
        let shared = Arc::new(Shared::new(scenario.seed, scenario.faults, tracing));
        let table = Arc::new(Table::new(scenario.options.mode, scenario.options.planted_bug));
        let active = Arc::new(Mutex::new(Region::Primary));
        let clocks = Region::BOTH.map(|region| {
            Arc::new(SkewedClock {
                base: shared.clock.clone(),
                offset_ms: AtomicI64::new(scenario.skew_ms[region.index()]),
            })
        });
        let workers = Region::BOTH.map(|region| {
            let router = Router::new().register(SIM_TYPE, SimProvider { shared: Arc::clone(&shared) });
            let ports = Ports {
                store: Arc::new(RegionStore::new(region, Arc::clone(&table), Arc::clone(&shared))),
                sink: Arc::new(SimSink { region, shared: Arc::clone(&shared) }),
                router: Arc::new(router),
                clock: Arc::clone(&clocks[region.index()]) as Arc<dyn Clock>,
                random: Arc::new(SplitMix64::new(scenario.seed.rotate_left(17) ^ region.index() as u64)),
                control: Arc::new(SimControl { region, active: Arc::clone(&active) }),
                metrics: Arc::new(NoMetrics),
            };
            let input = InputPolicy { topic_arns: vec![], urls: UrlPolicy::new(vec![]) };
            Worker::new(ports, input, settings(region))
        });
        let (bodies, urls) = Self::requests(&scenario);
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
        Self {
            scenario,
            shared,
            table,
            workers,
            clocks,
            active,
            bodies,
            urls,
            messages: BTreeMap::new(),
            next_message: 0,
            tasks: BTreeMap::new(),
            next_task: 0,
            up: [true, true],
            events,
        }
    }

    /// The CloudFormation requests of the scenario, and their ResponseURLs.
    fn requests(scenario: &Scenario) -> (Vec<String>, Vec<String>) {
        let mut bodies = Vec::new();
        let mut urls = Vec::new();
        for (index, plan) in scenario.requests.iter().enumerate() {
            let original = plan.retry_of.unwrap_or(index);
            let url = format!(
                "https://cloudformation-custom-resource-response-useast2.s3.us-east-2.amazonaws.com/sim/{}/{index}?X-Amz-Signature=s{index}",
                scenario.seed
            );
            let body = json!({
                "RequestType": "Create",
                "ResponseURL": url,
                "StackId": format!("arn:aws:cloudformation:us-east-2:123456789012:stack/sim/{}", scenario.seed),
                "RequestId": format!("request-{original}"),
                "LogicalResourceId": format!("Resource{original}"),
                "ResourceType": SIM_TYPE,
                "ResourceProperties": {
                    "WorkMs": plan.work_ms.to_string(),
                    "Item": format!("item-{original}"),
                    "ServiceTimeout": plan.service_timeout_s.to_string(),
                },
            });
            bodies.push(body.to_string());
            urls.push(url);
        }
        (bodies, urls)
    }

    fn now_ms(&self) -> u64 {
        self.shared.clock.now_ms()
    }

    fn run(&mut self) {
        loop {
            if self.poll_tasks() || self.due_events() || self.deliver() {
                continue;
            }
            let Some(next_ms) = self.next_moment() else {
                return;
            };
            if next_ms > T0_MS + END_MS {
                self.shared.trace(None, || "the simulation's time is up".into());
                return;
            }
            self.shared.clock.set_ms(next_ms.max(self.now_ms()));
            self.kill_overdue();
        }
    }

    /// Polls every runnable task once; true if any was polled.
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
                self.crash(*id, "crashed between two steps");
                continue;
            }
            let Some(task) = self.tasks.get_mut(id) else { continue };
            task.flag.0.store(false, Ordering::SeqCst);
            let waker = Waker::from(Arc::clone(&task.flag));
            let poll = task.future.as_mut().poll(&mut Context::from_waker(&waker));
            if let Some((polls_left, duration_ms)) = task.freeze {
                if polls_left <= 1 {
                    task.freeze = None;
                    task.frozen_until_ms = now_ms + duration_ms;
                    let region = task.region;
                    self.shared.cover("Lambda frozen for longer than a lease");
                    self.shared.trace(Some(region), || format!("task {id} frozen for {} s", duration_ms / 1000));
                } else {
                    task.freeze = Some((polls_left - 1, duration_ms));
                }
            }
            if let Poll::Ready(disposition) = poll {
                self.complete(*id, disposition);
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
                let plan = &self.scenario.requests[index];
                self.shared.trace(None, || format!("CloudFormation sends request {index} (work {} ms)", plan.work_ms));
                let now_ms = self.now_ms();
                for (region, delay_ms) in [(Region::Primary, 0), (Region::Secondary, self.scenario.secondary_delay_ms)]
                {
                    self.messages.insert(
                        self.next_message,
                        Message {
                            request: index,
                            region,
                            visible_at_ms: now_ms + delay_ms,
                            receive_count: 0,
                            in_flight: 0,
                        },
                    );
                    self.next_message += 1;
                }
            }
            Event::OutageStart(region) => {
                self.shared.cover("region outage");
                self.shared.trace(Some(region), || "region down: pollers stop, running Lambdas die".into());
                self.up[region.index()] = false;
                let doomed: Vec<u64> =
                    self.tasks.iter().filter(|(_, t)| t.region == region).map(|(id, _)| *id).collect();
                for id in doomed {
                    self.crash(id, "died with its region");
                }
            }
            Event::OutageEnd(region) => {
                self.shared.trace(Some(region), || "region back".into());
                self.up[region.index()] = true;
            }
            Event::Flip(region) => {
                self.shared.cover("active region flipped");
                self.shared.trace(None, || format!("control: {} is now active", region.name()));
                *self.active.lock().unwrap_or_else(std::sync::PoisonError::into_inner) = region;
            }
            Event::Jump(region, jump_ms) => {
                self.shared.cover("clock jumped");
                self.shared.trace(Some(region), || format!("clock jumps {jump_ms} ms"));
                self.clocks[region.index()].offset_ms.fetch_add(jump_ms, Ordering::SeqCst);
            }
        }
    }

    /// Hands visible messages to Lambdas in regions that are up; true if any was.
    fn deliver(&mut self) -> bool {
        let now_ms = self.now_ms();
        let ready: Vec<u64> = self
            .messages
            .iter()
            .filter(|(_, m)| m.in_flight == 0 && m.visible_at_ms <= now_ms && self.up[m.region.index()])
            .map(|(id, _)| *id)
            .collect();
        for id in &ready {
            let copies = if self.shared.fault(self.shared.faults.duplicate) {
                self.shared.cover("message delivered twice at once");
                2
            } else {
                1
            };
            for _ in 0..copies {
                self.start(*id);
            }
        }
        !ready.is_empty()
    }

    fn start(&mut self, message_id: u64) {
        let now_ms = self.now_ms();
        let Some(message) = self.messages.get_mut(&message_id) else { return };
        message.receive_count += 1;
        message.in_flight += 1;
        if message.receive_count > RECEIVES_MAX {
            let request = message.request;
            self.messages.remove(&message_id);
            self.shared.cover("message moved to the DLQ");
            self.shared.trace(None, || format!("message for request {request} moved to the DLQ"));
            return;
        }
        let (region, request, receive_count) = (message.region, message.request, message.receive_count);
        let worker = self.workers[region.index()].clone();
        let body = self.bodies[request].clone();
        let sent_ms = Some(T0_MS + self.scenario.requests[request].sent_at_ms);
        let task_id = self.next_task;
        self.next_task += 1;
        let invocation = Invocation {
            id: format!("lambda-{task_id}"),
            deadline_ms: self.clocks[region.index()].now_ms() + FUNCTION_TIMEOUT_MS,
        };
        let future = Box::pin(async move {
            worker.handle(Delivery { body: Some(&body), receive_count, sent_ms }, &invocation).await
        });
        let freeze = self
            .shared
            .fault(self.shared.faults.freeze)
            .then(|| (1 + self.shared.below(6) as u32, LEASE_MS + SKEW_MARGIN_MS + self.shared.below(60_000)));
        self.shared
            .trace(Some(region), || format!("Lambda {task_id} receives request {request} (receive {receive_count})"));
        self.tasks.insert(
            task_id,
            Task {
                region,
                message: message_id,
                received_at_ms: now_ms,
                kill_at_ms: now_ms + FUNCTION_TIMEOUT_MS,
                frozen_until_ms: 0,
                freeze,
                flag: Arc::new(Flag(AtomicBool::new(true))),
                future,
            },
        );
    }

    /// The Lambda is gone mid-run: its message comes back after the visibility timeout.
    fn crash(&mut self, task_id: u64, why: &str) {
        let Some(task) = self.tasks.remove(&task_id) else { return };
        self.shared.trace(Some(task.region), || format!("Lambda {task_id} {why}"));
        if let Some(message) = self.messages.get_mut(&task.message) {
            message.in_flight = message.in_flight.saturating_sub(1);
            message.visible_at_ms = message.visible_at_ms.max(task.received_at_ms + VISIBILITY_TIMEOUT_MS);
        }
    }

    fn complete(&mut self, task_id: u64, disposition: Disposition) {
        let Some(task) = self.tasks.remove(&task_id) else { return };
        let now_ms = self.now_ms();
        self.shared.trace(Some(task.region), || format!("Lambda {task_id} done: {disposition:?}"));
        match &disposition {
            Disposition::Done(Done::Replayed { .. }) => self.shared.cover("stored answer re-sent"),
            Disposition::Done(Done::Superseded) => self.shared.cover("superseded attempt dropped"),
            Disposition::Retry { why, .. } if why.contains("standby") => {
                self.shared.cover("drained primary left the message")
            }
            _ => {}
        }
        let Some(message) = self.messages.get_mut(&task.message) else { return };
        message.in_flight = message.in_flight.saturating_sub(1);
        match disposition {
            Disposition::Done(_) => {
                self.messages.remove(&task.message);
            }
            Disposition::Retry { delay_s, .. } => message.visible_at_ms = now_ms + u64::from(delay_s) * 1000,
            Disposition::Undeliverable { .. } => message.visible_at_ms = now_ms + 1_000,
        }
    }

    /// Lambda kills invocations past the function timeout.
    fn kill_overdue(&mut self) {
        let now_ms = self.now_ms();
        let overdue: Vec<u64> = self.tasks.iter().filter(|(_, t)| t.kill_at_ms <= now_ms).map(|(id, _)| *id).collect();
        for id in overdue {
            self.shared.cover("Lambda killed at its timeout");
            self.crash(id, "killed at the function timeout");
        }
    }

    /// The next moment anything can happen, if anything can.
    fn next_moment(&self) -> Option<u64> {
        let timer = self.shared.clock.next_deadline_after_ms(self.now_ms());
        let event = self.events.keys().next().map(|(at, _)| *at);
        let replication = self.shared.observed().replications.iter().map(|(at, _, _)| *at).min();
        let message = self
            .messages
            .values()
            .filter(|m| m.in_flight == 0 && self.up[m.region.index()])
            .map(|m| m.visible_at_ms)
            .min();
        let tasks = self
            .tasks
            .values()
            .flat_map(|t| [Some(t.kill_at_ms), (t.frozen_until_ms > 0).then_some(t.frozen_until_ms)]);
        [timer, event, replication, message]
            .into_iter()
            .chain(tasks)
            .flatten()
            .filter(|at| *at > self.now_ms())
            .min()
            .or(
                // A frozen task whose timer already fired, or a region about to come back: step a
                // millisecond so the loop looks again.
                (!self.tasks.is_empty()).then(|| self.now_ms() + 1),
            )
    }

    /// L1: every request that is not superseded by a retry was answered by its deadline.
    fn check_liveness(&self) {
        let superseded: Vec<usize> = self.scenario.requests.iter().filter_map(|plan| plan.retry_of).collect();
        let observed = self.shared.observed();
        let mut missed = Vec::new();
        for (index, plan) in self.scenario.requests.iter().enumerate() {
            if superseded.contains(&index) {
                continue;
            }
            let deadline_ms = plan.sent_at_ms + plan.service_timeout_s * 1000;
            let answered =
                observed.puts.get(&self.urls[index]).is_some_and(|puts| puts.iter().any(|(at, _)| *at <= deadline_ms));
            if !answered {
                missed.push(format!(
                    "L1: request {index} ({}) was not answered by its deadline",
                    short(&self.urls[index])
                ));
            }
        }
        drop(observed);
        for violation in missed {
            self.shared.violation(violation);
        }
    }
}
