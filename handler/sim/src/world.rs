//! One seed's world: two regions' Lambdas running the real `Worker` on a shared virtual clock,
//! SQS queues with delays, visibility timeouts, duplicates, a receive limit and a DLQ, and the
//! scenario's faults, all driven by a small single-threaded executor. Nothing here is random but
//! the seed, and nothing waits on real time, so a seed replays exactly. The queues' limits, the
//! function timeout and the handler's settings are the deployed ones ([`Parameters`]).

use std::collections::BTreeMap;
use std::future::Future;
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, AtomicI64, Ordering};
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll, Wake, Waker};

use cfn_once_core::clock::Clock;
use cfn_once_core::decision::Role;
use cfn_once_core::metrics::NoMetrics;
use cfn_once_core::provider::Router;
use cfn_once_core::random::SplitMix64;
use cfn_once_core::request::InputPolicy;
use cfn_once_core::response::{ResponseBody, Status};
use cfn_once_core::response_url::UrlPolicy;
use cfn_once_core::worker::{Delivery, Disposition, Done, Invocation, Ports, Settings, Worker};
use serde_json::json;

use crate::deployed::Deployed;
use crate::provider::{SIM_TYPE, SimProvider};
use crate::region::{SimControl, SkewedClock};
use crate::scenario::{Kind, Region, Scenario};
use crate::shared::{Shared, T0_MS};
use crate::sink::{SimSink, short};
use crate::stores::{RegionStore, Table};

/// The simulation gives up after this much virtual time.
const END_MS: u64 = 4 * 3_600_000;

/// What every seed runs on: the regional template's parameters and the handler settings its
/// environment implies, per region.
#[derive(Debug, Clone)]
pub struct Parameters {
    pub deployed: Deployed,
    pub settings: [Settings; 2],
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
            Parameters { deployed, settings }
        })
    }
}

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
    /// Whether the Lambda was ever frozen, or its region's clock jumped while it ran: only then
    /// may it outlive its invocation.
    disturbed: bool,
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
    /// Every running Lambda of the region crashes; the region stays up.
    Crash(Region),
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
    /// A lease and the skew margin: how long a frozen Lambda must stay frozen to lose it.
    lease_and_skew_ms: u64,
}

/// Runs one seed's scenario to the end and checks the invariants.
pub fn run(scenario: &Scenario, parameters: &Parameters, tracing: bool) -> SeedOutcome {
    let mut world = World::new(scenario.clone(), parameters, tracing);
    world.run();
    world.check_liveness();
    world.check_wait_survived();
    let mut observed = world.shared.observed();
    SeedOutcome {
        seed: scenario.seed,
        violations: std::mem::take(&mut observed.violations),
        coverage: std::mem::take(&mut observed.coverage),
        trace: std::mem::take(&mut observed.trace),
    }
}

impl World {
    fn new(scenario: Scenario, parameters: &Parameters, tracing: bool) -> Self {
        let shared = Arc::new(Shared::new(scenario.seed, scenario.faults, scenario.store_outage, tracing));
        shared.cover(scenario.kind.name());
        shared.trace(None, || {
            let timeout = scenario.function_timeout;
            format!(
                "{}; function timeout {} s, visibility {} s, maxReceiveCount {}, secondary delay {} s",
                scenario.kind.name(),
                timeout.timeout_s,
                timeout.visibility_s,
                scenario.max_receive_count,
                scenario.secondary_delay_ms / 1_000
            )
        });
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
        let workers = Region::BOTH.map(|region| {
            let router = Router::new().register(SIM_TYPE, SimProvider { shared: Arc::clone(&shared), region });
            let ports = Ports {
                store: Arc::new(RegionStore::new(region, Arc::clone(&table), Arc::clone(&shared))),
                sink: Arc::new(SimSink { region, shared: Arc::clone(&shared) }),
                router: Arc::new(router),
                clock: Arc::clone(&clocks[region.index()]) as Arc<dyn Clock>,
                random: Arc::new(SplitMix64::new(scenario.seed.rotate_left(17) ^ region.index() as u64)),
                control: Arc::new(SimControl { region, active: Arc::clone(&active) }),
                metrics: Arc::new(NoMetrics),
            };
            let input = InputPolicy { topic_arns: vec![], raw_delivery: true, urls: UrlPolicy::new(vec![]) };
            Worker::new(ports, input, parameters.settings[region.index()].clone())
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
        for (at, region) in &scenario.crashes {
            schedule(*at, Event::Crash(*region));
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
            lease_and_skew_ms: parameters.settings[0].lease_ms + parameters.settings[0].skew_ms,
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
            let mut body = json!({
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
            if let Some(wait) = plan.wait {
                let properties = &mut body["ResourceProperties"];
                properties["WaitMs"] = json!(wait.in_progress_ms.to_string());
                properties["PollIntervalS"] = json!(wait.poll_interval_s.to_string());
                properties["PollWorkMs"] = json!(wait.poll_work_ms.to_string());
            }
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
                self.shared.trace(None, || {
                    let deadline_s = plan.sent_at_ms / 1_000 + plan.service_timeout_s;
                    let wait = plan.wait.map_or(String::new(), |wait| {
                        format!(
                            ", then in progress for {} s polled every {} s",
                            wait.in_progress_ms / 1000,
                            wait.poll_interval_s
                        )
                    });
                    format!(
                        "CloudFormation sends request {index} (work {} ms{wait}, deadline at {deadline_s} s)",
                        plan.work_ms
                    )
                });
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
                if self.table.any_waiting() {
                    self.shared.cover("region outage in the middle of a wait");
                }
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
                for task in self.tasks.values_mut().filter(|task| task.region == region) {
                    task.disturbed = true;
                }
            }
            Event::Crash(region) => {
                let doomed: Vec<u64> =
                    self.tasks.iter().filter(|(_, t)| t.region == region).map(|(id, _)| *id).collect();
                if !doomed.is_empty() {
                    self.shared.cover("every Lambda of a region crashed mid-run");
                }
                for id in doomed {
                    self.crash(id, "crashed with every Lambda of its region");
                }
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
        if message.receive_count > self.scenario.max_receive_count {
            let request = message.request;
            self.messages.remove(&message_id);
            self.shared.cover("message moved to the DLQ by SQS (maxReceiveCount)");
            self.dead_lettered(request, "SQS, its receives used up");
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
            deadline_ms: self.clocks[region.index()].now_ms() + self.function_timeout_ms(),
        };
        let future = Box::pin(async move {
            worker.handle(Delivery { body: Some(&body), receive_count, sent_ms }, &invocation).await
        });
        let freeze = self
            .shared
            .fault(self.shared.faults.freeze)
            .then(|| (1 + self.shared.below(6) as u32, self.lease_and_skew_ms + self.shared.below(60_000)));
        self.shared
            .trace(Some(region), || format!("Lambda {task_id} receives request {request} (receive {receive_count})"));
        self.tasks.insert(
            task_id,
            Task {
                region,
                message: message_id,
                received_at_ms: now_ms,
                kill_at_ms: now_ms + self.function_timeout_ms(),
                frozen_until_ms: 0,
                disturbed: freeze.is_some(),
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
            let visibility_ms = self.scenario.function_timeout.visibility_s * 1_000;
            message.visible_at_ms = message.visible_at_ms.max(task.received_at_ms + visibility_ms);
        }
    }

    fn complete(&mut self, task_id: u64, disposition: Disposition) {
        let Some(task) = self.tasks.remove(&task_id) else { return };
        let now_ms = self.now_ms();
        self.shared.trace(Some(task.region), || format!("Lambda {task_id} done: {disposition:?}"));
        match &disposition {
            Disposition::Done(Done::Answered { status: Status::Failed, .. }) => self.shared.cover("answered FAILED"),
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
            Disposition::DeadLetter { .. } => {
                let request = message.request;
                self.messages.remove(&task.message);
                self.shared.cover("message moved to the DLQ by the handler");
                self.dead_lettered(request, "the handler");
            }
        }
    }

    /// A copy of `request` reached the DLQ: allowed only once nobody can be answered (never, in
    /// the simulation) or its request was answered or its deadline has passed.
    fn dead_lettered(&self, request: usize, by: &str) {
        let now_ms = self.now_ms();
        let plan = &self.scenario.requests[request];
        let deadline_ms = T0_MS + plan.sent_at_ms + plan.service_timeout_s * 1_000;
        let answered = self.shared.observed().puts.get(&self.urls[request]).is_some_and(|puts| !puts.is_empty());
        let superseded = self.scenario.requests.iter().any(|other| other.retry_of == Some(request));
        self.shared.trace(None, || format!("a copy of request {request} moved to the DLQ by {by}"));
        if now_ms < deadline_ms && !answered && !superseded {
            self.shared.violation(format!(
                "DLQ: a copy of request {request} was moved to the DLQ by {by} {} s before its deadline, unanswered",
                (deadline_ms - now_ms) / 1_000
            ));
        }
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

    /// A wait the primary's outage interrupted is finished by the secondary: the story of
    /// [`Kind::OutageMidWait`], whose wait ends long before its deadline, must end in SUCCESS.
    fn check_wait_survived(&self) {
        let superseded = self.scenario.requests.iter().any(|plan| plan.retry_of == Some(0));
        if self.scenario.kind != Kind::OutageMidWait || superseded {
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
