//! The soak's load as drawn from the seed, before anything is sent: stacks in the customer
//! regions with their ServiceTimeouts, resources of each [`Class`] and the requests of each one's
//! life ([`Step`]) as CloudFormation would send them, bursts of stacks at once, and the
//! undeliverable messages. What was sent is the [ledger](crate::ledger)'s; sending it is
//! the [load](crate::load)'s.

use std::collections::BTreeMap;

use crate::{FaultKind, Rng, SoakOptions};
use cfn_once_local::environment::CUSTOMER_REGIONS;

/// The longest a provider of the load runs or waits in progress.
pub const LONGEST_RUN_MS: u64 = 60_000;
/// CloudFormation's default and largest ServiceTimeout.
pub(crate) const SERVICE_TIMEOUT_MAX_S: u64 = 3600;
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

    pub(crate) fn logical_prefix(self) -> &'static str {
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
    pub fn generate(seed: u64, options: &SoakOptions) -> Self {
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
