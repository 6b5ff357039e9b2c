//! `Custom::Sim`: a provider that works for a while (longer than a lease, sometimes), writes to
//! a fenced downstream table half way, and answers with its fence in Data, so that two
//! executions' answers differ and any double commit shows. Its writes go through the real
//! fenced-write code to a table that evaluates DynamoDB's expressions (`downstream`), which
//! checks S2, COUNT and STANDS on every write; a run whose answer was lost writes once more,
//! late.
//!
//! With `WaitMs`, it is a long-running provider: after its work it answers in progress until
//! `WaitMs` after it first ran, polled every `PollIntervalS`; each poll works `PollWorkMs`
//! (sometimes longer than a lease), writes the fenced store again, and counts itself in the
//! state, which also names the region that wrote it so a wait that moves region is counted.
//!
//! With `PanicPercent`, a run or poll panics now and then, as users' code does.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use cfn_once_core::provider::{Provider, ProviderContext, ProviderError, ProviderOutput, Step};
use serde::{Deserialize, Serialize};
use serde_json::{Value, json};

use crate::downstream::{self, Op, Write};
use crate::scenario::Region;
use crate::shared::{LateWrite, Shared, Writer};

/// The downstream item every request's provider adds to: a counter shared by resources, whose
/// other writers land between a write's attempts.
pub const SHARED_COUNTER: &str = "count-shared";

/// The ResourceType the simulation sends.
pub const SIM_TYPE: &str = "Custom::Sim";

/// How the provider's panics begin, so the simulator's panic hook can keep them off stderr.
pub const PANIC_PREFIX: &str = "simulated provider panic";

#[derive(Debug, Deserialize)]
#[serde(rename_all = "PascalCase")]
pub struct SimProperties {
    work_ms: u64,
    item: String,
    #[serde(default)]
    wait_ms: u64,
    #[serde(default)]
    poll_interval_s: u64,
    #[serde(default)]
    poll_work_ms: u64,
    /// Each run and poll panics with this probability, in percent.
    #[serde(default)]
    panic_percent: u64,
}

/// What the provider keeps between polls.
#[derive(Debug, Serialize, Deserialize)]
#[serde(rename_all = "PascalCase")]
struct SimWait {
    item: String,
    done_at_ms: u64,
    poll_interval_s: u64,
    poll_work_ms: u64,
    polls: u32,
    region: String,
    #[serde(default)]
    panic_percent: u64,
}

impl SimWait {
    fn step(&self) -> Result<Step, ProviderError> {
        Step::in_progress(self, Duration::from_secs(self.poll_interval_s))
    }
}

/// The provider, one per region.
#[derive(Debug)]
pub struct SimProvider {
    pub shared: Arc<Shared>,
    pub region: Region,
}

impl SimProvider {
    /// A fenced write of `item` by this step of the request, through the downstream table.
    async fn fenced_write(&self, ctx: &ProviderContext, step: u32, item: &str, op: Op) -> Result<(), ProviderError> {
        let writer = Writer { scope: ctx.fence.scope.clone(), attempt: ctx.attempt().to_owned(), step };
        let rules = ctx.fenced();
        downstream::write(Write { shared: &self.shared, region: self.region, rules: &rules, writer: &writer, item, op })
            .await
    }

    /// A run (or poll) under `ctx`'s fence begins: no other run of the request under the same
    /// fence may be running (OVERLAP: fenced writes cannot tell two runs under one fence apart).
    fn run_begins(&self, ctx: &ProviderContext) {
        let now_ms = self.shared.elapsed_ms();
        let run = (ctx.fence.scope.clone(), ctx.fence.value);
        let mut observed = self.shared.observed();
        let running = observed.runs.get(&run).is_some_and(|until_ms| *until_ms > now_ms);
        observed.runs.insert(run, u64::MAX);
        drop(observed);
        if running {
            self.shared.violation(format!(
                "OVERLAP: a run of the provider under fence {} began while another under the same fence was still running",
                ctx.fence.value
            ));
        }
    }

    /// The run under `ctx`'s fence returned to its caller; a run whose answer was lost goes on
    /// for `goes_on_ms` more.
    fn run_ends(&self, ctx: &ProviderContext, goes_on_ms: u64) {
        let until_ms = self.shared.elapsed_ms() + goes_on_ms;
        self.shared.observed().runs.insert((ctx.fence.scope.clone(), ctx.fence.value), until_ms);
    }

    /// Whether this run's answer is lost (the seed's fault), and then what its caller sees:
    /// an unknown outcome, or with the planted bug, a transient error. The run goes on a while
    /// and writes `item` once more before it ends, late.
    fn lost_answer(&self, ctx: &ProviderContext, step: u32, item: &str) -> Option<ProviderError> {
        if !self.shared.fault(self.shared.faults.provider_lost_reply) {
            return None;
        }
        self.shared.cover("provider's answer lost after it ran");
        self.shared.fault_happened(self.region, "provider's answer lost after it ran");
        // As long as a Lambda function may run: the Invoke's function, up to 15 minutes.
        let goes_on_ms = 1_000 + self.shared.below(900_000);
        self.run_ends(ctx, goes_on_ms);
        let late = LateWrite {
            due_ms: self.shared.elapsed_ms() + self.shared.below(goes_on_ms),
            item: item.to_owned(),
            rules: ctx.fenced(),
            writer: Writer { scope: ctx.fence.scope.clone(), attempt: ctx.attempt().to_owned(), step },
            region: self.region,
        };
        self.shared.observed().late_writes.push(late);
        let why = "simulated Invoke: no answer after it was sent".to_owned();
        Some(if self.shared.lost_answer_transient {
            ProviderError::Transient(why)
        } else {
            ProviderError::Unknown(why)
        })
    }

    /// Panics with `percent` probability: users' code does.
    fn maybe_panic(&self, percent: u64, item: &str) {
        if percent > 0 && self.shared.dice(percent as f64 / 100.0) {
            self.shared.cover("provider panicked");
            self.shared.trace(Some(self.region), || format!("provider panics on {item}"));
            panic!("{PANIC_PREFIX} on {item}");
        }
    }

    /// Sleeps half of `work_ms`; under the fence, puts `item`, adds 1 to its counter and to
    /// the counter every request shares (ADDs), and creates the run's own marker (a put whose
    /// author's condition is "absent"); sleeps the rest.
    async fn work(&self, ctx: &ProviderContext, step: u32, item: &str, work_ms: u64) -> Result<(), ProviderError> {
        ctx.sleep_ms(work_ms / 2).await;
        self.fenced_write(ctx, step, item, Op::Put).await?;
        self.fenced_write(ctx, step, &format!("count-{item}"), Op::Add).await?;
        self.fenced_write(ctx, step, SHARED_COUNTER, Op::Add).await?;
        self.fenced_write(ctx, step, &format!("made-{item}-{}", ctx.fence.value), Op::PutIfAbsent).await?;
        ctx.sleep_ms(work_ms - work_ms / 2).await;
        Ok(())
    }

    fn done(ctx: &ProviderContext, item: String, polls: u32) -> Step {
        Step::Done(ProviderOutput {
            physical_resource_id: Some(item),
            data: BTreeMap::from([
                ("Fence".to_owned(), json!(ctx.fence.value.to_string())),
                ("Polls".to_owned(), json!(polls.to_string())),
            ]),
            no_echo: false,
        })
    }

    async fn run(&self, ctx: &ProviderContext, properties: SimProperties) -> Result<Step, ProviderError> {
        let item = properties.item.clone();
        self.run_watched(ctx, 0, &item, self.run_once(ctx, properties)).await
    }

    /// Runs `once` (a run or a poll) as observed for OVERLAP, and loses its answer if the seed
    /// says so.
    async fn run_watched(
        &self,
        ctx: &ProviderContext,
        number: u32,
        item: &str,
        once: impl Future<Output = Result<Step, ProviderError>>,
    ) -> Result<Step, ProviderError> {
        self.run_begins(ctx);
        let step = once.await;
        if let Some(lost) = self.lost_answer(ctx, number, item) {
            return Err(lost);
        }
        self.run_ends(ctx, 0);
        step
    }

    async fn run_once(&self, ctx: &ProviderContext, properties: SimProperties) -> Result<Step, ProviderError> {
        self.maybe_panic(properties.panic_percent, &properties.item);
        self.work(ctx, 0, &properties.item, properties.work_ms).await?;
        if properties.wait_ms == 0 {
            return Ok(Self::done(ctx, properties.item, 0));
        }
        self.shared.cover("provider answered in progress");
        SimWait {
            item: properties.item,
            done_at_ms: ctx.now_ms() + properties.wait_ms,
            poll_interval_s: properties.poll_interval_s,
            poll_work_ms: properties.poll_work_ms,
            polls: 0,
            region: self.region.name().to_owned(),
            panic_percent: properties.panic_percent,
        }
        .step()
    }
}

#[async_trait]
impl Provider for SimProvider {
    type Properties = SimProperties;

    async fn create(&self, ctx: &ProviderContext, properties: SimProperties) -> Result<Step, ProviderError> {
        self.run(ctx, properties).await
    }

    async fn update(
        &self,
        ctx: &ProviderContext,
        _physical_resource_id: &str,
        properties: SimProperties,
        _old_properties: Option<SimProperties>,
    ) -> Result<Step, ProviderError> {
        self.shared.observed().updates_run.insert(ctx.request_id.clone());
        self.run(ctx, properties).await
    }

    async fn delete(
        &self,
        _ctx: &ProviderContext,
        _physical_resource_id: &str,
        _properties: SimProperties,
    ) -> Result<Step<()>, ProviderError> {
        Ok(Step::Done(()))
    }

    async fn poll(&self, ctx: &ProviderContext, state: Value) -> Result<Step, ProviderError> {
        let wait: SimWait = serde_json::from_value(state.clone())?;
        self.run_watched(ctx, wait.polls + 1, &wait.item, self.poll_once(ctx, state)).await
    }
}

impl SimProvider {
    async fn poll_once(&self, ctx: &ProviderContext, state: Value) -> Result<Step, ProviderError> {
        let mut wait: SimWait = serde_json::from_value(state)?;
        let elapsed_ms = self.shared.elapsed_ms();
        self.shared.observed().poll_starts.push((wait.item.clone(), elapsed_ms));
        self.maybe_panic(wait.panic_percent, &wait.item);
        self.shared.cover("poll ran");
        if wait.region != self.region.name() {
            self.shared.cover("poll ran in the other region than the last");
        }
        self.work(ctx, wait.polls + 1, &wait.item, wait.poll_work_ms).await?;
        wait.polls += 1;
        wait.region = self.region.name().to_owned();
        if ctx.now_ms() >= wait.done_at_ms {
            self.shared.cover("wait finished by a poll");
            return Ok(Self::done(ctx, wait.item, wait.polls));
        }
        wait.step()
    }
}
