//! The soak's load: many stacks deploying at once, each resource's requests sent as
//! CloudFormation sends them (`../shared/CLOUDFORMATION.md`): the next request of a resource only
//! once the previous one was answered, an Update with the current PhysicalResourceId and the
//! old properties, a rollback Delete after a failed Create with the id of the FAILED answer, a
//! retried deployment reusing a RequestId with a new ResponseURL. Requests go through the
//! ServiceToken topic of the stack's region with a ResponseURL presigned against the PUT proxy,
//! and a share of them is published twice.
//!
//! The harness learns that an answer came from the PUT proxy's log (as CloudFormation learns it
//! from its bucket) and reads the body from S3 to decide the next request; the checks
//! ([`crate::soak::verify`]) read everything again from what landed.

use std::collections::{BTreeMap, HashMap};
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::time::Duration;

use cfn_once::clock::SystemClock;
use cfn_once_core::clock::Clock;
use serde_json::{Value, json};

use crate::local::environment::CUSTOMER_REGIONS;
use crate::local::provision;
use crate::soak::fleet::Fleet;
use crate::soak::{FaultKind, Rng, SoakOptions};

/// The longest a provider of the load runs or waits in progress.
pub const LONGEST_RUN_MS: u64 = 60_000;
/// How long a presigned ResponseURL lives, as CloudFormation's do.
const URL_LIFETIME_S: u64 = 7200;
/// CloudFormation's default and largest ServiceTimeout.
const SERVICE_TIMEOUT_MAX_S: u64 = 3600;
/// Messages on the topic that are no CloudFormation request at all: every region's handler must
/// move them to its DLQ, and nothing else may be there.
pub const UNDELIVERABLE: usize = 3;
/// What the undeliverable messages say, so the DLQ check knows them.
pub const UNDELIVERABLE_MARK: &str = "soak: not a CloudFormation request";

/// What a resource of the load is.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, serde::Serialize)]
pub enum Class {
    /// `Custom::Echo`, answered at once.
    EchoFast,
    /// `Custom::Echo` with `DelayMs` of 2 to 25 s: heartbeats, kills mid-provider.
    EchoSlow,
    /// `Custom::Echo` in progress for 10 to 60 s, polled.
    LongRunning,
    /// `Custom::DynamoDBItem`: fenced, owned writes to the item table.
    Item,
    /// Properties no provider accepts, or a type none serves: FAILED, then the rollback Delete.
    Invalid,
    /// A provider that panics: FAILED, and its rollback Delete panics too.
    Panic,
    /// A deployment that fails and is retried with the same RequestId and a new ResponseURL;
    /// then a late copy of the first attempt.
    Retry,
}

impl Class {
    pub const ALL: [Class; 7] =
        [Class::EchoFast, Class::EchoSlow, Class::LongRunning, Class::Item, Class::Invalid, Class::Panic, Class::Retry];

    pub fn label(self) -> &'static str {
        match self {
            Class::EchoFast => "echo",
            Class::EchoSlow => "echo, slow",
            Class::LongRunning => "in progress, polled",
            Class::Item => "DynamoDBItem",
            Class::Invalid => "invalid",
            Class::Panic => "panicking",
            Class::Retry => "retried deployment",
        }
    }

    fn logical_prefix(self) -> &'static str {
        match self {
            Class::EchoFast => "Echo",
            Class::EchoSlow => "SlowEcho",
            Class::LongRunning => "LongEcho",
            Class::Item => "Item",
            Class::Invalid => "Invalid",
            Class::Panic => "Panicky",
            Class::Retry => "Retried",
        }
    }

    /// How often the class is drawn.
    fn weight(self) -> u64 {
        match self {
            Class::EchoFast => 40,
            Class::EchoSlow => 14,
            Class::LongRunning => 8,
            Class::Item => 18,
            Class::Invalid => 8,
            Class::Panic => 5,
            Class::Retry => 7,
        }
    }
}

/// The answer a request must get.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub enum Expect {
    Success,
    /// FAILED, with this in its Reason.
    Failed(String),
}

/// One request of a resource's life.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Step {
    Create,
    Update,
    Delete,
    /// The retried deployment's Create: the first attempt's RequestId, a new ResponseURL.
    RetryCreate,
}

/// A resource and its planned life.
#[derive(Debug, Clone)]
pub struct ResourcePlan {
    pub index: usize,
    pub stack: usize,
    pub class: Class,
    /// When its Create is sent, ms after the start.
    pub start_ms: u64,
    pub steps: Vec<Step>,
}

/// A stack: its region and ServiceTimeout.
#[derive(Debug, Clone)]
pub struct StackPlan {
    pub stack_id: String,
    pub region: &'static str,
    /// None: the template sets none (CloudFormation waits 3600 s).
    pub service_timeout_s: Option<u64>,
}

/// The whole load, drawn from the seed.
#[derive(Debug, Clone)]
pub struct Plan {
    pub seed: u64,
    pub stacks: Vec<StackPlan>,
    pub resources: Vec<ResourcePlan>,
    pub load_ms: u64,
    pub duplicate_share: f64,
    /// When the undeliverable messages are published, ms after the start.
    pub undeliverable_ms: Vec<u64>,
    /// Bursts: when, and how many stacks.
    pub bursts: Vec<(u64, usize)>,
}

impl Plan {
    /// Draws stacks and resources until their lives add up to `options.requests` requests.
    pub fn generate(seed: u64, options: &SoakOptions, fleet: &Fleet) -> Self {
        let mut rng = Rng::fork(seed, 1);
        let load_ms = (options.minutes * 60_000.0) as u64;
        // Creates start in the first 70% of the load, so their lives mostly end inside it.
        let window_ms = load_ms * 7 / 10;
        let account = "123456789012";
        let mut stacks = Vec::new();
        let mut resources = Vec::new();
        let mut planned = 0;
        let bursts: Vec<(u64, usize)> =
            (0..(1 + load_ms / 120_000)).map(|_| (rng.below(window_ms.max(1)), 0)).collect();
        let mut bursts = bursts;
        let classes: Vec<Class> =
            Class::ALL.into_iter().filter(|class| *class != Class::Panic || options.with(FaultKind::Panic)).collect();
        let total_weight: u64 = classes.iter().map(|c| c.weight()).sum();
        while planned < options.requests {
            let stack = stacks.len();
            let region = CUSTOMER_REGIONS[rng.below(CUSTOMER_REGIONS.len() as u64) as usize];
            let name = format!("soak-{seed}-{stack}");
            let stack_id = format!("arn:aws:cloudformation:{region}:{account}:stack/{name}/{}", rng.uuid());
            let min_s = options.service_timeout_min_s.clamp(1, SERVICE_TIMEOUT_MAX_S);
            let service_timeout_s = match rng.below(4) {
                0 => Some(rng.range(min_s, min_s.max(300))),
                1 | 2 => Some(rng.range(min_s.max(600), 1800)),
                _ => None,
            };
            stacks.push(StackPlan { stack_id, region, service_timeout_s });
            // A StackSet rolling out starts many stacks within seconds.
            let start_ms = if rng.chance(0.3) && !bursts.is_empty() {
                let burst = rng.below(bursts.len() as u64) as usize;
                bursts[burst].1 += 1;
                bursts[burst].0 + rng.below(3_000)
            } else {
                rng.below(window_ms.max(1))
            };
            for _ in 0..rng.range(1, 4) {
                let mut draw = rng.below(total_weight);
                let class = *classes
                    .iter()
                    .find(|class| {
                        if draw < class.weight() {
                            true
                        } else {
                            draw -= class.weight();
                            false
                        }
                    })
                    .unwrap_or(&Class::EchoFast);
                let steps = steps(class, &mut rng);
                planned += steps.len();
                resources.push(ResourcePlan {
                    index: resources.len(),
                    stack,
                    class,
                    start_ms: start_ms + rng.below(2_000),
                    steps,
                });
            }
        }
        let undeliverable_ms = (0..UNDELIVERABLE).map(|_| rng.below(window_ms.max(1))).collect();
        let _ = fleet;
        Self { seed, stacks, resources, load_ms, duplicate_share: options.duplicate_share, undeliverable_ms, bursts }
    }

    /// Requests the plan sends (without duplicates).
    pub fn requests(&self) -> usize {
        self.resources.iter().map(|r| r.steps.len()).sum()
    }

    pub fn describe(&self) -> String {
        let mut by_class: BTreeMap<Class, usize> = BTreeMap::new();
        for resource in &self.resources {
            *by_class.entry(resource.class).or_default() += 1;
        }
        let classes: Vec<String> = by_class.iter().map(|(class, n)| format!("{n} {}", class.label())).collect();
        let bursts: Vec<String> = self.bursts.iter().map(|(at, n)| format!("{n} stacks at +{} s", at / 1000)).collect();
        format!(
            "load: {} requests for {} resources of {} stacks ({}); bursts: {}; {:.0}% published twice; {UNDELIVERABLE} undeliverable messages",
            self.requests(),
            self.resources.len(),
            self.stacks.len(),
            classes.join(", "),
            if bursts.is_empty() { "none".to_owned() } else { bursts.join(", ") },
            self.duplicate_share * 100.0,
        )
    }
}

/// A resource's requests, as CloudFormation would send them given the answers its properties
/// get.
fn steps(class: Class, rng: &mut Rng) -> Vec<Step> {
    let mut steps = vec![Step::Create];
    match class {
        Class::EchoFast | Class::Item => {
            if rng.chance(0.5) {
                steps.push(Step::Update);
            }
            if rng.chance(0.6) {
                steps.push(Step::Delete);
            }
        }
        Class::EchoSlow | Class::LongRunning => {
            if rng.chance(0.5) {
                steps.push(Step::Delete);
            }
        }
        // The failed Create's rollback.
        Class::Invalid | Class::Panic => steps.push(Step::Delete),
        Class::Retry => {
            steps.push(Step::RetryCreate);
            if rng.chance(0.5) {
                steps.push(Step::Delete);
            }
        }
    }
    steps
}

/// One request attempt as sent: what the checks compare with what landed.
#[derive(Debug, Clone)]
pub struct Sent {
    pub resource: usize,
    pub class: Class,
    pub step: Step,
    pub kind: &'static str,
    pub stack_id: String,
    pub request_id: String,
    pub logical_id: String,
    /// The response object's key; the ResponseURL is presigned for it.
    pub key: String,
    /// The URL's X-Amz-Signature, which must never appear in a log.
    pub signature: String,
    pub published_ms: u64,
    pub deadline_ms: u64,
    pub expect: Expect,
    /// Times the topic delivered it (2 for a duplicate).
    pub copies: u32,
    /// For `Custom::DynamoDBItem`: the item's `Value` this request sets.
    pub item_value: Option<String>,
    /// For a superseded attempt: when its late copy was published (no PUT may follow it).
    pub late_copy_ms: Option<u64>,
}

/// Everything sent, and when answers came (from the PUT proxy's log).
#[derive(Debug)]
pub struct Ledger {
    pub started_ms: u64,
    /// No player waits past this.
    pub end_ms: u64,
    sent: Mutex<Vec<Sent>>,
    /// Every PUT S3 accepted, per object key: when it reached the PUT proxy, ms (S3's own
    /// LastModified has a resolution of one second, as in AWS).
    answers: Mutex<HashMap<String, Vec<u64>>>,
    seen: AtomicUsize,
    pub duplicates: AtomicU64,
    pub undeliverable: AtomicU64,
}

fn lock<T>(mutex: &Mutex<T>) -> MutexGuard<'_, T> {
    mutex.lock().unwrap_or_else(PoisonError::into_inner)
}

impl Ledger {
    pub fn new(started_ms: u64, length_ms: u64) -> Self {
        Self {
            started_ms,
            end_ms: started_ms + length_ms,
            sent: Mutex::default(),
            answers: Mutex::default(),
            seen: AtomicUsize::new(0),
            duplicates: AtomicU64::new(0),
            undeliverable: AtomicU64::new(0),
        }
    }

    pub fn sent(&self) -> Vec<Sent> {
        lock(&self.sent).clone()
    }

    fn record(&self, sent: Sent) -> usize {
        let mut all = lock(&self.sent);
        all.push(sent);
        all.len() - 1
    }

    fn update(&self, index: usize, change: impl FnOnce(&mut Sent)) {
        if let Some(sent) = lock(&self.sent).get_mut(index) {
            change(sent);
        }
    }

    fn answered_at(&self, key: &str) -> Option<u64> {
        lock(&self.answers).get(key).and_then(|puts| puts.first().copied())
    }

    /// When each PUT of `key` that S3 accepted reached the wire, oldest first.
    pub fn accepted_puts(&self, key: &str) -> Vec<u64> {
        let mut puts = lock(&self.answers).get(key).cloned().unwrap_or_default();
        puts.sort_unstable();
        puts
    }

    /// (sent so far, answered so far)
    pub fn counts(&self) -> (usize, usize) {
        let sent = lock(&self.sent);
        let answers = lock(&self.answers);
        (sent.len(), sent.iter().filter(|s| answers.contains_key(&s.key)).count())
    }
}

/// Follows the PUT proxy's log: the first PUT of each key that S3 accepted is when
/// CloudFormation had its answer (whether or not the sender heard the reply: a reply lost after
/// the PUT applied still delivered it).
pub async fn watch_answers(fleet: Arc<Fleet>, ledger: Arc<Ledger>) {
    /// A forwarded PUT whose upstream status is not known this long after it arrived never got
    /// one (the upstream failed).
    const SETTLED_MS: u64 = 60_000;
    let prefix = format!("/{}/", fleet.environment.file.response_bucket);
    loop {
        // The log is appended when a request arrives and completed when the upstream answers:
        // scan from the oldest entry that may still complete.
        let from = ledger.seen.load(Ordering::SeqCst);
        let new = fleet.put_proxy.log_since(from);
        let now = SystemClock.now_ms();
        let mut settled = from + new.len();
        {
            let mut answers = lock(&ledger.answers);
            for (offset, exchange) in new.iter().enumerate() {
                if exchange.method != "PUT" {
                    continue;
                }
                match exchange.upstream_status {
                    Some(status) if (200..300).contains(&status) => {
                        if let Some(key) = exchange.path.strip_prefix(&prefix) {
                            answers.entry(key.to_owned()).or_default().push(exchange.at_ms);
                        }
                    }
                    Some(_) => {}
                    None => {
                        let forwarded = !matches!(
                            exchange.fault,
                            Some(
                                crate::local::fault_proxy::Fault::Respond { .. }
                                    | crate::local::fault_proxy::Fault::Reset
                                    | crate::local::fault_proxy::Fault::Hang
                            )
                        );
                        if forwarded && now.saturating_sub(exchange.at_ms) < SETTLED_MS {
                            settled = settled.min(from + offset);
                        }
                    }
                }
            }
        }
        ledger.seen.store(settled, Ordering::SeqCst);
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// Prints a line every 15 s while the load runs.
pub async fn progress(fleet: Arc<Fleet>, ledger: Arc<Ledger>, planned: usize) {
    loop {
        tokio::time::sleep(Duration::from_secs(15)).await;
        let (sent, answered) = ledger.counts();
        let elapsed_s = (SystemClock.now_ms() - ledger.started_ms) / 1000;
        let regions: Vec<String> = fleet
            .regions
            .iter()
            .map(|region| {
                let stats = region.function.stats();
                format!(
                    "{} {}/{} busy, {} invocations, {} killed",
                    region.role.as_str(),
                    region.function.busy(),
                    fleet.concurrency,
                    stats.invocations,
                    stats.killed
                )
            })
            .collect();
        println!(
            "  +{elapsed_s:>4} s  sent {sent}/{planned}, answered {answered}, waiting {} | {}",
            sent - answered,
            regions.join(" | ")
        );
    }
}

/// Plays every resource's life; returns when each has finished or given up.
pub async fn play(fleet: Arc<Fleet>, ledger: Arc<Ledger>, plan: Plan) {
    let mut players = Vec::new();
    for resource in plan.resources.clone() {
        let (fleet, ledger) = (Arc::clone(&fleet), Arc::clone(&ledger));
        let stack = plan.stacks[resource.stack].clone();
        let share = plan.duplicate_share;
        let seed = plan.seed;
        players.push(tokio::spawn(async move {
            let rng = Rng::fork(seed, 10_000 + resource.index as u64);
            Player { fleet, ledger, stack, resource, share, rng }.play(seed).await;
        }));
    }
    for (n, at_ms) in plan.undeliverable_ms.iter().copied().enumerate() {
        let (fleet, ledger) = (Arc::clone(&fleet), Arc::clone(&ledger));
        players.push(tokio::spawn(async move {
            sleep_until(ledger.started_ms + at_ms).await;
            let body = json!({"Soak": UNDELIVERABLE_MARK, "N": n}).to_string();
            let region = CUSTOMER_REGIONS[n % CUSTOMER_REGIONS.len()];
            if publish(&fleet, region, &body).await.is_ok() {
                ledger.undeliverable.fetch_add(1, Ordering::SeqCst);
            }
        }));
    }
    for player in players {
        let _ = player.await;
    }
}

async fn sleep_until(at_ms: u64) {
    let now = SystemClock.now_ms();
    if at_ms > now {
        tokio::time::sleep(Duration::from_millis(at_ms - now)).await;
    }
}

async fn publish(fleet: &Fleet, region: &str, body: &str) -> anyhow::Result<()> {
    let topic = &fleet.environment.file.customer_topics[region];
    let sns = &fleet.sns[region];
    // moto is local: a failed publish is retried, as CloudFormation's own would be.
    let mut last = None;
    for _ in 0..5 {
        match sns.publish().topic_arn(topic).message(body).send().await {
            Ok(_) => return Ok(()),
            Err(error) => last = Some(aws_sdk_sns::error::DisplayErrorContext(error).to_string()),
        }
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
    anyhow::bail!("Publish failed: {}", last.unwrap_or_default())
}

/// The answer CloudFormation read.
#[derive(Debug, Clone)]
struct Answer {
    status: String,
    physical_resource_id: Option<String>,
}

/// One resource's life.
struct Player {
    fleet: Arc<Fleet>,
    ledger: Arc<Ledger>,
    stack: StackPlan,
    resource: ResourcePlan,
    share: f64,
    rng: Rng,
}

impl Player {
    async fn play(mut self, seed: u64) {
        sleep_until(self.ledger.started_ms + self.resource.start_ms).await;
        let class = self.resource.class;
        let index = self.resource.index;
        let logical_id = format!("{}{index}", class.logical_prefix());
        let service_token = self.fleet.environment.file.customer_topics[self.stack.region].clone();
        let item_table = self.fleet.environment.item_table.clone();
        let item_region = self.fleet.environment.file.customer_region.clone();
        let mut current = json!({});
        let mut physical: Option<String> = None;
        let mut first_attempt: Option<(String, String, usize)> = None; // (request id, message, sent index)
        let steps = self.resource.steps.clone();
        for step in steps {
            let (kind, properties, resource_type, expect, item_value) = match (class, step) {
                (_, Step::Delete) => {
                    let expect = match class {
                        Class::Panic => Expect::Failed("panicked".into()),
                        _ => Expect::Success,
                    };
                    ("Delete", current.clone(), resource_type(class, &current), expect, None)
                }
                (Class::Item, Step::Create | Step::Update) => {
                    let value = format!("v{}-{}", if step == Step::Create { 1 } else { 2 }, self.rng.hex(6));
                    let properties = json!({
                        "TableName": item_table,
                        "Region": item_region,
                        "Key": {"pk": format!("soak-{seed}-{index}")},
                        "Attributes": {"Value": value},
                    });
                    let kind = if step == Step::Create { "Create" } else { "Update" };
                    (kind, properties, "Custom::DynamoDBItem", Expect::Success, Some(value))
                }
                (Class::Invalid, Step::Create) => {
                    if self.rng.chance(0.5) {
                        // No TableName.
                        let properties = json!({"Key": {"pk": format!("soak-{seed}-{index}")}});
                        ("Create", properties, "Custom::DynamoDBItem", Expect::Failed("TableName".into()), None)
                    } else {
                        let properties = json!({"Anything": "at all"});
                        (
                            "Create",
                            properties,
                            "Custom::NobodyServesThis",
                            Expect::Failed("Custom::NobodyServesThis".into()),
                            None,
                        )
                    }
                }
                (Class::Panic, Step::Create) => {
                    let properties = json!({"PanicWith": format!("soak panic {index}")});
                    ("Create", properties, "Custom::Echo", Expect::Failed("panicked".into()), None)
                }
                (Class::Retry, Step::Create) => {
                    let properties =
                        json!({"FailWith": "the first deployment fails", "Message": format!("retried {index}")});
                    ("Create", properties, "Custom::Echo", Expect::Failed("the first deployment fails".into()), None)
                }
                (Class::Retry, Step::RetryCreate) => {
                    let properties = json!({"Message": format!("retried {index}")});
                    ("Create", properties, "Custom::Echo", Expect::Success, None)
                }
                (_, Step::Create | Step::Update | Step::RetryCreate) => {
                    let mut properties = json!({"Message": format!("{logical_id} {}", self.rng.hex(8))});
                    match class {
                        Class::EchoSlow => properties["DelayMs"] = json!(self.rng.range(2_000, 25_000).to_string()),
                        Class::LongRunning => {
                            properties["InProgressForS"] = json!(self.rng.range(10, LONGEST_RUN_MS / 1000).to_string());
                            properties["PollIntervalS"] = json!(self.rng.range(5, 15).to_string());
                        }
                        _ => {}
                    }
                    let kind = if step == Step::Update { "Update" } else { "Create" };
                    (kind, properties, "Custom::Echo", Expect::Success, None)
                }
            };
            let mut properties = properties;
            properties["ServiceToken"] = json!(service_token);
            if let Some(timeout) = self.stack.service_timeout_s {
                properties["ServiceTimeout"] = json!(timeout.to_string());
            }
            let request_id = match (step, &first_attempt) {
                (Step::RetryCreate, Some((request_id, _, _))) => request_id.clone(),
                _ => self.rng.uuid(),
            };
            let key = format!("r/{index:05}/{}-{}", kind.to_ascii_lowercase(), self.rng.hex(8));
            let Ok(url) = provision::presigned_put_url(
                &self.fleet.presign,
                &self.fleet.environment.file.response_bucket,
                &key,
                URL_LIFETIME_S,
            )
            .await
            else {
                return;
            };
            let signature = url
                .split(['?', '&'])
                .find_map(|part| part.strip_prefix("X-Amz-Signature="))
                .unwrap_or_default()
                .to_owned();
            let mut request = json!({
                "RequestType": kind,
                "ServiceToken": service_token,
                "ResponseURL": url,
                "StackId": self.stack.stack_id,
                "RequestId": request_id,
                "LogicalResourceId": logical_id,
                "ResourceType": resource_type,
                "ResourceProperties": properties,
            });
            if kind != "Create"
                && let Some(id) = &physical
            {
                request["PhysicalResourceId"] = json!(id);
            }
            if kind == "Update" {
                request["OldResourceProperties"] = current.clone();
            }
            let message = request.to_string();
            let published_ms = SystemClock.now_ms();
            let deadline_ms = published_ms + self.stack.service_timeout_s.unwrap_or(SERVICE_TIMEOUT_MAX_S) * 1000;
            let sent = self.ledger.record(Sent {
                resource: index,
                class,
                step,
                kind,
                stack_id: self.stack.stack_id.clone(),
                request_id: request_id.clone(),
                logical_id: logical_id.clone(),
                key: key.clone(),
                signature,
                published_ms,
                deadline_ms,
                expect: expect.clone(),
                copies: 1,
                item_value,
                late_copy_ms: None,
            });
            if publish(&self.fleet, self.stack.region, &message).await.is_err() {
                return;
            }
            if step == Step::Create && class == Class::Retry {
                first_attempt = Some((request_id.clone(), message.clone(), sent));
            } else if self.rng.chance(self.share) {
                let delay_ms = self.rng.below(90_000);
                let (fleet, ledger, region, message) =
                    (Arc::clone(&self.fleet), Arc::clone(&self.ledger), self.stack.region, message.clone());
                tokio::spawn(async move {
                    tokio::time::sleep(Duration::from_millis(delay_ms)).await;
                    if publish(&fleet, region, &message).await.is_ok() {
                        ledger.update(sent, |s| s.copies += 1);
                        ledger.duplicates.fetch_add(1, Ordering::SeqCst);
                    }
                });
            }
            let Some(answer) = self.wait(&key, deadline_ms).await else { return };
            // CloudFormation goes on only as the answer says.
            let expected_status = match expect {
                Expect::Success => "SUCCESS",
                Expect::Failed(_) => "FAILED",
            };
            if answer.status != expected_status {
                return;
            }
            if kind != "Delete" {
                current = request["ResourceProperties"].clone();
                if answer.physical_resource_id.is_some() {
                    physical = answer.physical_resource_id;
                }
            }
            if step == Step::RetryCreate
                && let Some((_, first_message, first_sent)) = first_attempt.take()
            {
                self.late_copy(first_message, first_sent, published_ms).await;
            }
        }
    }

    /// Publishes the first attempt again once the retried one is answered and the first
    /// attempt's own copies (the secondary's, delayed) have been handled: it is superseded and
    /// must get no PUT.
    async fn late_copy(&self, message: String, first_sent: usize, retried_ms: u64) {
        let first_published = self.ledger.sent().get(first_sent).map_or(retried_ms, |s| s.published_ms);
        let settled = first_published + self.fleet.deployed.secondary_delay_s * 1000 + 30_000;
        sleep_until(settled.max(SystemClock.now_ms() + 1_000)).await;
        let at_ms = SystemClock.now_ms();
        self.ledger.update(first_sent, |s| s.late_copy_ms = Some(at_ms));
        if publish(&self.fleet, self.stack.region, &message).await.is_ok() {
            self.ledger.update(first_sent, |s| s.copies += 1);
        }
    }

    /// Waits for the answer to `key` until the deadline (or the end of the soak), and reads it.
    async fn wait(&self, key: &str, deadline_ms: u64) -> Option<Answer> {
        let give_up_ms = deadline_ms.min(self.ledger.end_ms);
        while SystemClock.now_ms() < give_up_ms {
            if self.ledger.answered_at(key).is_some() {
                // The PUT landed; read what CloudFormation read.
                for _ in 0..20 {
                    if let Ok(object) = self
                        .fleet
                        .s3
                        .get_object()
                        .bucket(&self.fleet.environment.file.response_bucket)
                        .key(key)
                        .send()
                        .await
                    {
                        let bytes = object.body.collect().await.ok()?.into_bytes();
                        let body: Value = serde_json::from_slice(&bytes).ok()?;
                        return Some(Answer {
                            status: body["Status"].as_str().unwrap_or_default().to_owned(),
                            physical_resource_id: body["PhysicalResourceId"].as_str().map(str::to_owned),
                        });
                    }
                    tokio::time::sleep(Duration::from_millis(250)).await;
                }
                return None;
            }
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
        None
    }
}

/// The ResourceType a resource's requests carry.
fn resource_type(class: Class, current: &Value) -> &'static str {
    match class {
        Class::Item => "Custom::DynamoDBItem",
        Class::Invalid if current.get("Anything").is_some() => "Custom::NobodyServesThis",
        Class::Invalid => "Custom::DynamoDBItem",
        _ => "Custom::Echo",
    }
}
