//! `Custom::Sim`: a provider that works for a while (longer than a lease, sometimes), writes to
//! a fenced downstream store half way, and answers with its fence in Data, so that two
//! executions' answers differ and any double commit shows. The fenced store applies the same
//! condition as `cfn_once::fenced::FencedTable` and checks invariant S2 on every write.
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
use cfn_once_core::ownership::{Fence, Found, Refusal, WriteRules, Written};
use cfn_once_core::provider::{Provider, ProviderContext, ProviderError, ProviderOutput, Step};
use serde::{Deserialize, Serialize};
use serde_json::{Value, json};

use crate::scenario::Region;
use crate::shared::{FencedItem, Shared};

/// Attempts of one fenced write, as `cfn_once::fenced` makes them.
const WRITE_ATTEMPTS_MAX: u32 = 3;

/// What a fenced write does to its item.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Op {
    /// Sets it.
    Put,
    /// Adds 1 to its count (DynamoDB's `ADD`): applied twice, it counts twice.
    Add,
    /// Creates it, with the author's condition that it is absent, which the write itself makes
    /// false: a retry of a write that applied is refused by it.
    PutIfAbsent,
}

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
    /// A fenced write of `item`, as `cfn_once::FencedTable` sends it: `attribute_not_exists(fence)
    /// OR scope <> :scope OR fence <= :fence`, not where the item carries this write's token
    /// already, and the author's own condition of `op`. A reply lost after the write applied (the
    /// seed's `fenced_lost_reply`) is an unknown outcome: the write is sent again with its token,
    /// at most [`WRITE_ATTEMPTS_MAX`] times, and the item that refuses an attempt says what
    /// happened (`WriteRules::refused_write`, the core's decision, which `FencedTable` uses too).
    /// What no attempt settles is `ProviderError::Unknown`: the provider runs again under a
    /// higher fence. With the planted bug the write is sent again as if it had not applied
    /// (without its token in the condition) and a refusal is read without the token.
    fn fenced_write(&self, item: &str, fence: &Fence, op: Op) -> Result<(), ProviderError> {
        let rules = WriteRules::fenced(fence);
        let token = self.next_token(fence);
        let blind = self.shared.unknown_as_not_applied;
        for _ in 0..WRITE_ATTEMPTS_MAX {
            let found = {
                let mut observed = self.shared.observed();
                let stored = observed.fenced.get(item).cloned();
                let fence_holds = stored.as_ref().is_none_or(|s| s.scope != fence.scope || s.fence <= fence.value);
                let token_new = blind || stored.as_ref().is_none_or(|s| s.token != token);
                let author_holds = op != Op::PutIfAbsent || stored.is_none();
                if fence_holds && token_new && author_holds {
                    let mut written = stored.clone().unwrap_or_default();
                    (written.scope, written.fence, written.token) = (fence.scope.clone(), fence.value, token.clone());
                    if op == Op::Add {
                        written.count += 1;
                        written.added.push(token.clone());
                    }
                    observed.fenced.insert(item.to_owned(), written);
                    drop(observed);
                    if let Some(stored) = stored.filter(|s| s.scope == fence.scope && s.fence > fence.value) {
                        self.shared.violation(format!(
                            "S2: {item} accepted fence {} after fence {}",
                            fence.value, stored.fence
                        ));
                    }
                    if self.lost_reply() {
                        continue;
                    }
                    return Ok(());
                }
                stored
            };
            match self.refused(&rules, &token, found.as_ref()) {
                Ok(_) => {
                    self.shared.cover("fenced write stood after its reply was lost");
                    return Ok(());
                }
                Err(Refusal::Rules(_)) => {
                    self.shared.cover("stale fenced write refused");
                    return Err(ProviderError::Failed(format!(
                        "a newer execution already wrote {item}; fence {} refused",
                        fence.value
                    )));
                }
                Err(Refusal::Condition) => {
                    self.reported_failed(item, &token);
                    return Err(ProviderError::Failed(format!("the write of {item} was refused by its condition")));
                }
            }
        }
        self.shared.cover("fenced write left unknown: the provider runs again under a higher fence");
        Err(ProviderError::Unknown(format!(
            "the write of {item} was sent {WRITE_ATTEMPTS_MAX} times without an answer"
        )))
    }

    /// A write's own token, unique to it: its fence and a number.
    fn next_token(&self, fence: &Fence) -> String {
        let mut observed = self.shared.observed();
        observed.fenced_writes += 1;
        format!("{}.{}.{}", fence.scope, fence.value, observed.fenced_writes)
    }

    /// Whether the reply to a write that applied is lost (the seed's fault, in its window).
    fn lost_reply(&self) -> bool {
        let lost = self.shared.fault(self.shared.faults.fenced_lost_reply);
        if lost {
            self.shared.cover("fenced write applied, its reply lost");
            self.shared.fault_happened(self.region, "fenced write applied, its reply lost");
        }
        lost
    }

    /// What a refused attempt of the write `token` comes to, from the item that refused it; with
    /// the planted bug, read as if the item did not carry the token.
    fn refused(&self, rules: &WriteRules, token: &str, found: Option<&FencedItem>) -> Result<Written, Refusal> {
        let stored = found.map_or(Found::Absent, |found| Found::Item {
            owner: None,
            fence: Some(Fence { scope: found.scope.clone(), value: found.fence }),
        });
        let found_token = found.map(|found| found.token.as_str()).filter(|_| !self.shared.unknown_as_not_applied);
        rules.refused_write(token, &stored, found_token)
    }

    /// STANDS: a write reported failed must not be in the store.
    fn reported_failed(&self, item: &str, token: &str) {
        let stands = self.shared.observed().fenced.get(item).is_some_and(|stored| stored.token == token);
        if stands {
            self.shared.violation(format!("STANDS: a fenced write of {item} that stands was reported failed"));
        }
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
    /// an unknown outcome, or with the planted bug, a transient error.
    fn lost_answer(&self, ctx: &ProviderContext) -> Option<ProviderError> {
        if !self.shared.fault(self.shared.faults.provider_lost_reply) {
            return None;
        }
        self.shared.cover("provider's answer lost after it ran");
        self.shared.fault_happened(self.region, "provider's answer lost after it ran");
        self.run_ends(ctx, 1_000 + self.shared.below(30_000));
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

    /// Sleeps half of `work_ms`; under the fence, puts `item`, adds 1 to its counter (an ADD)
    /// and creates the run's own marker (a put whose author's condition is "absent"); sleeps
    /// the rest.
    async fn work(&self, ctx: &ProviderContext, item: &str, work_ms: u64) -> Result<(), ProviderError> {
        ctx.sleep_ms(work_ms / 2).await;
        self.fenced_write(item, &ctx.fence, Op::Put)?;
        self.fenced_write(&format!("count-{item}"), &ctx.fence, Op::Add)?;
        self.fenced_write(&format!("made-{item}-{}", ctx.fence.value), &ctx.fence, Op::PutIfAbsent)?;
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
        self.run_watched(ctx, self.run_once(ctx, properties)).await
    }

    /// Runs `once` (a run or a poll) as observed for OVERLAP, and loses its answer if the seed
    /// says so.
    async fn run_watched(
        &self,
        ctx: &ProviderContext,
        once: impl Future<Output = Result<Step, ProviderError>>,
    ) -> Result<Step, ProviderError> {
        self.run_begins(ctx);
        let step = once.await;
        if let Some(lost) = self.lost_answer(ctx) {
            return Err(lost);
        }
        self.run_ends(ctx, 0);
        step
    }

    async fn run_once(&self, ctx: &ProviderContext, properties: SimProperties) -> Result<Step, ProviderError> {
        self.maybe_panic(properties.panic_percent, &properties.item);
        self.work(ctx, &properties.item, properties.work_ms).await?;
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
        self.run_watched(ctx, self.poll_once(ctx, state)).await
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
        self.work(ctx, &wait.item, wait.poll_work_ms).await?;
        wait.polls += 1;
        wait.region = self.region.name().to_owned();
        if ctx.now_ms() >= wait.done_at_ms {
            self.shared.cover("wait finished by a poll");
            return Ok(Self::done(ctx, wait.item, wait.polls));
        }
        wait.step()
    }
}
