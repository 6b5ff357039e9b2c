//! `cfn-once soak`: the deployed artifact run as Lambda runs it, as a fleet, under load and
//! faults, and every answer read back from where it landed.
//!
//! * **Fleet** ([`fleet`]): moto, the two handler regions provisioned with the parameters of
//!   `infra/regional.yaml` (queue visibility, redrive, the secondary's delay, batch size, maximum
//!   concurrency, the function's timeout and environment, read by the simulator's reader of the
//!   template), and per region a local Lambda service running the `cfn-once-lambda` binary as real
//!   processes ([`cfn_once_local::lambda_service`]) fed by an event source mapping ([`mapping`]).
//!   Each region may run a binary of its own (`--secondary-binary`): a fleet halfway through an
//!   upgrade, one region on the old version and one on the new (`make upgrade-check`).
//!   Every AWS call the processes make goes through a per-region fault proxy, and every response
//!   PUT through another one, in front of a versioned bucket.
//! * **Load** ([`load`]): stacks deploying at once, as CloudFormation orders their requests,
//!   drawn from the seed beforehand ([`plan`]) and each attempt written down as it is sent
//!   ([`ledger`]).
//! * **Faults** ([`faults`]): a seeded schedule of SIGKILLs, a region outage, a drill's flip and
//!   wire faults, printed with the result.
//! * **Checks** ([`verify`]): from what landed (every version of every response object, the
//!   tables, the DLQs, the processes' logs), never from the harness's own bookkeeping.
//! * **Report** ([`report`]): a one-screen summary, `soak-report.md` and a picture.
//! * **Golden records** ([`golden`]): the lease table's items as one version of the function
//!   wrote them, kept from a soak of that version's binary (`make golden-records`); the
//!   fixtures `tests/it/golden/` holds today's handler to.

pub mod faults;
pub mod fleet;
pub mod golden;
pub mod ledger;
pub mod load;
pub mod machine;
pub mod mapping;
pub mod plan;
pub mod report;
pub mod verify;

use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use anyhow::Context;
use cfn_once::system_clock::SystemClock;
use cfn_once_core::clock::Clock;

use cfn_once_local::moto::MotoServer;

/// A small seeded generator (SplitMix64): the same seed draws the same load and faults.
#[derive(Debug, Clone)]
pub struct Rng(u64);

impl Rng {
    pub fn new(seed: u64) -> Self {
        Self(seed)
    }

    /// A generator of its own for `stream` (a resource, a fault), independent of draw order.
    pub fn fork(seed: u64, stream: u64) -> Self {
        let mut rng = Self(seed ^ stream.wrapping_mul(0xA076_1D64_78BD_642F));
        rng.next_u64();
        rng
    }

    pub fn next_u64(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }

    /// Uniform in `0..bound` (0 when `bound` is 0).
    pub fn below(&mut self, bound: u64) -> u64 {
        if bound == 0 { 0 } else { self.next_u64() % bound }
    }

    /// Uniform in `low..=high`.
    pub fn range(&mut self, low: u64, high: u64) -> u64 {
        low + self.below(high.saturating_sub(low) + 1)
    }

    /// Uniform in `[0, 1)`.
    pub fn unit(&mut self) -> f64 {
        (self.next_u64() >> 11) as f64 / (1u64 << 53) as f64
    }

    pub fn chance(&mut self, probability: f64) -> bool {
        self.unit() < probability
    }

    /// An exponentially distributed wait with this mean.
    pub fn exponential_ms(&mut self, mean_ms: f64) -> u64 {
        (-(1.0 - self.unit()).ln() * mean_ms) as u64
    }

    /// A lowercase hex string of `chars` characters.
    pub fn hex(&mut self, chars: usize) -> String {
        let mut out = String::with_capacity(chars);
        while out.len() < chars {
            out.push_str(&format!("{:016x}", self.next_u64()));
        }
        out.truncate(chars);
        out
    }

    /// A UUID-shaped id, as CloudFormation's RequestIds are.
    pub fn uuid(&mut self) -> String {
        let h = self.hex(32);
        format!("{}-{}-{}-{}-{}", &h[..8], &h[8..12], &h[12..16], &h[16..20], &h[20..])
    }
}

/// A fault the soak can leave out (`--without`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, clap::ValueEnum, serde::Serialize)]
pub enum FaultKind {
    /// SIGKILL of Lambda processes: busy ones at random, and at chosen log lines (just after
    /// taking a lease, between commit and PUT, while a batch settles).
    Kill,
    /// The primary region down (its processes killed, its mapping stopped) and back.
    Outage,
    /// The active region flipped to the secondary and back, as a drill does.
    Drill,
    /// Throttling, 5xx, resets, lost replies and stalls on DynamoDB, SQS and the response PUTs.
    Wire,
    /// Providers that panic (`Custom::Echo` with `PanicWith`).
    Panic,
}

/// What `cfn-once soak` runs.
#[derive(Debug, Clone, clap::Args)]
pub struct SoakOptions {
    /// Seed of the load and the fault schedule; the same seed sends the same requests and
    /// schedules the same faults (timing on a real machine still varies). Default: drawn from
    /// the clock, and printed.
    #[arg(long, value_name = "N")]
    pub seed: Option<u64>,
    /// Minutes of load: stacks start deploying over this time, and faults happen in it.
    #[arg(long, value_name = "MINUTES", default_value_t = 4.0)]
    pub minutes: f64,
    /// Requests to send (Creates, Updates, Deletes and retried deployments; re-published
    /// duplicates not counted).
    #[arg(long, value_name = "N", default_value_t = 2000)]
    pub requests: usize,
    /// The Lambda function the primary region runs (and the secondary, unless
    /// --secondary-binary names another): the release build of cfn-once-lambda, as deployed.
    #[arg(long, value_name = "PATH", default_value = "target/release/cfn-once-lambda")]
    pub binary: PathBuf,
    /// The Lambda function the secondary region runs, for a fleet halfway through an upgrade
    /// (one region on one version, the other on another; both get the template's environment).
    /// The report says which binary each region ran. Default: the same as --binary.
    #[arg(long, value_name = "PATH")]
    pub secondary_binary: Option<PathBuf>,
    /// The Python interpreter with moto[server] installed (`make venv` creates it).
    #[arg(long, value_name = "PATH", default_value = ".venv/bin/python")]
    pub python: PathBuf,
    /// Use the moto server at this URL instead of starting one.
    #[arg(long, value_name = "URL")]
    pub endpoint_url: Option<String>,
    /// Where to write soak-report.md, the picture, the summary and the processes' logs.
    #[arg(long, value_name = "DIR", default_value = "target/soak")]
    pub out: PathBuf,
    /// The deployment's FunctionTimeoutSeconds, one of the template's allowed values (the queue's
    /// visibility follows it, as the template pairs them). Default: the template's default.
    #[arg(long, value_name = "SECONDS")]
    pub function_timeout_s: Option<u64>,
    /// Lambda processes at once per region. Default: the template's MaximumConcurrency.
    #[arg(long, value_name = "N")]
    pub concurrency: Option<usize>,
    /// Share of requests CloudFormation's topic delivers twice (the same message published
    /// again, up to 90 s later).
    #[arg(long, value_name = "SHARE", default_value_t = 0.1)]
    pub duplicate_share: f64,
    /// The shortest ServiceTimeout a stack sets, in seconds; the others draw up to 3600.
    #[arg(long, value_name = "SECONDS", default_value_t = 180)]
    pub service_timeout_min_s: u64,
    /// Faults to leave out, comma-separated.
    #[arg(long, value_name = "KINDS", value_delimiter = ',')]
    pub without: Vec<FaultKind>,
    /// Mean seconds between two SIGKILLs of Lambda processes.
    #[arg(long, value_name = "SECONDS", default_value_t = 5.0)]
    pub kill_every_s: f64,
    /// Longest outage of the primary region, in seconds (each draws from half this to this).
    #[arg(long, value_name = "SECONDS", default_value_t = 60)]
    pub outage_s: u64,
    /// Longest wait for answers once the load and faults are over, in seconds. Default: what
    /// liveness allows after the last fault (the visibility timeout, a lease, the secondary's
    /// delay and the longest provider run), plus a minute.
    #[arg(long, value_name = "SECONDS")]
    pub drain_s: Option<u64>,
}

impl SoakOptions {
    pub fn with(&self, kind: FaultKind) -> bool {
        !self.without.contains(&kind)
    }

    /// The binary each region runs: the primary's, then the secondary's.
    pub fn binaries(&self) -> [&PathBuf; 2] {
        [&self.binary, self.secondary_binary.as_ref().unwrap_or(&self.binary)]
    }
}

/// How a soak went: the checks' findings and the report.
#[derive(Debug)]
pub struct SoakOutcome {
    pub passed: bool,
    pub last_line: String,
}

/// Sleeps until the wall clock reads `at_ms` (at once if it is past).
async fn sleep_until(at_ms: u64) {
    let now = SystemClock.now_ms();
    if at_ms > now {
        tokio::time::sleep(Duration::from_millis(at_ms - now)).await;
    }
}

/// Waits until both regions' queues are empty (visible, in flight and delayed) or `until_ms`;
/// returns how many messages were left.
async fn drain(fleet: &fleet::Fleet, until_ms: u64) -> u64 {
    let mut reported_ms = 0;
    loop {
        let mut left = 0;
        for region in &fleet.regions {
            left += cfn_once_local::provision::queue_depth(&region.sqs, &region.queue_url).await.unwrap_or(1);
        }
        let now = SystemClock.now_ms();
        if left == 0 || now >= until_ms {
            return left;
        }
        if now - reported_ms >= 15_000 {
            println!("  answers are in; {left} messages left on the queues, waiting for the fleet to finish them");
            reported_ms = now;
        }
        tokio::time::sleep(Duration::from_secs(1)).await;
    }
}

/// Runs the soak and writes its report; `Ok(outcome)` says whether every check passed.
pub async fn run(options: &SoakOptions) -> anyhow::Result<SoakOutcome> {
    let seed = options.seed.unwrap_or_else(|| SystemClock.now_ms() % 1_000_000);
    for binary in options.binaries() {
        if !binary.exists() {
            anyhow::bail!(
                "{} does not exist: build it with `cargo build --release -p cfn-once --bin cfn-once-lambda` (make soak \
                 does; .ci/build-rev REV builds an earlier revision's)",
                binary.display()
            );
        }
    }
    std::fs::create_dir_all(&options.out).with_context(|| format!("cannot create {}", options.out.display()))?;
    let mut machine = machine::Machine::describe();
    println!("soak: seed {seed}, {} requests over {} min on {}", options.requests, options.minutes, machine.one_line());

    let moto_server;
    let endpoint = match &options.endpoint_url {
        Some(url) => url.clone(),
        None => {
            println!("==> starting moto");
            moto_server = MotoServer::start(&options.python)?;
            machine.watch_moto(Some(moto_server.pid()));
            moto_server.endpoint().to_owned()
        }
    };
    let fleet = Arc::new(fleet::Fleet::start(&endpoint, options, seed).await?);
    println!("{}", fleet.describe());

    let load_ms = (options.minutes * 60_000.0) as u64;
    let plan = plan::Plan::generate(seed, options);
    let schedule = faults::Schedule::generate(seed, options, load_ms, &fleet);
    println!("{}", plan.describe());
    println!("{}", schedule.describe());

    let drain_ms = options.drain_s.map_or_else(|| fleet.liveness_bound_ms(u64::MAX) + 60_000, |s| s * 1000);
    let started_ms = SystemClock.now_ms();
    let ledger = Arc::new(ledger::Ledger::new(started_ms, load_ms + drain_ms));
    let watcher = tokio::spawn(ledger::watch_answers(Arc::clone(&fleet), Arc::clone(&ledger)));
    let injector = tokio::spawn(faults::inject(Arc::clone(&fleet), schedule.clone(), started_ms));
    let players = tokio::spawn(load::play(Arc::clone(&fleet), Arc::clone(&ledger), plan.clone()));
    let progress = tokio::spawn(load::progress(Arc::clone(&fleet), Arc::clone(&ledger), plan.requests()));

    let injected = injector.await.context("the fault injector stopped")?;
    players.await.context("the load stopped")?;
    // What is left on the queues (copies of answered requests, the undeliverable messages on
    // their way to the DLQs, batches hidden by a killed invocation) is the fleet's to finish.
    let drained = drain(&fleet, ledger.end_ms).await;
    progress.abort();
    let ended_ms = SystemClock.now_ms();
    if drained > 0 {
        println!("==> {drained} messages still on the queues when the soak's time was up");
    }
    // Whatever the players waited for has landed or never will; the last PUTs settle.
    tokio::time::sleep(Duration::from_secs(2)).await;
    watcher.abort();
    println!("==> load done after {} s; stopping the fleet and reading what landed", (ended_ms - started_ms) / 1000);
    fleet.stop().await;

    let findings = verify::verify(&fleet, &ledger, &plan, &injected).await?;
    let report = report::Report::build(seed, options, &fleet, &ledger, &plan, &schedule, &injected, &findings, machine);
    let text = report.summary();
    println!("{text}");
    report.write(&options.out)?;
    println!("report: {}", options.out.join("soak-report.md").display());
    Ok(SoakOutcome { passed: findings.passed(), last_line: report.last_line() })
}
