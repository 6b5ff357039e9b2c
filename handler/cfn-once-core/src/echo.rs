//! `Custom::Echo`: returns its properties as Data.
//!
//! For tests, drills and smoke checks. Optional properties change its behaviour, each coerced
//! from CloudFormation's strings: `DelayMs` (sleep this long on the injected clock, to exercise
//! heartbeats, deadlines and takeovers), `FailWith` (fail with this Reason), `PanicWith` (panic
//! with this message, after `DelayMs`: what users' code does, for drills and soaks; cfn-once
//! answers it FAILED), `NoEcho` (ask
//! CloudFormation to mask the Data), and `InProgressForS` with `PollIntervalS` (answer in
//! progress until this many seconds after the request was first processed, polled every
//! `PollIntervalS` seconds, default 5; then answer with the usual Data plus `Polls`, the number
//! of polls it took). The waiting applies to Delete too, unless `DeleteInProgressForS` says how
//! long a Delete waits instead (`0`: a Delete of a long work's resource that answers at once).
//! `PhysicalId` answers with that PhysicalResourceId (by default cfn-once makes one on Create
//! and keeps it on Update): an Update giving a new one is, to CloudFormation, a replacement,
//! whose old id is deleted in the update's cleanup phase (`cfn-once play` shows it).

use std::time::Duration;

use async_trait::async_trait;
use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::properties::{PropertyMap, from_properties};
use crate::provider::{Provider, ProviderContext, ProviderError, ProviderOutput, Step};

/// The ResourceType Echo is registered under by default.
pub const ECHO_TYPE: &str = "Custom::Echo";

/// Seconds between polls when `PollIntervalS` is not given.
pub const POLL_INTERVAL_S_DEFAULT: u64 = 5;

/// The echo provider.
#[derive(Debug, Clone, Copy, Default)]
pub struct Echo;

#[derive(Debug, Deserialize)]
#[serde(rename_all = "PascalCase")]
struct EchoOptions {
    delay_ms: Option<u64>,
    fail_with: Option<String>,
    panic_with: Option<String>,
    #[serde(default)]
    no_echo: bool,
    physical_id: Option<String>,
    #[serde(default)]
    in_progress_for_s: u64,
    delete_in_progress_for_s: Option<u64>,
    poll_interval_s: Option<u64>,
}

/// What Echo keeps between polls: when it is done, how often to look, how many polls so far,
/// and the answer it will give.
#[derive(Debug, Serialize, Deserialize)]
#[serde(rename_all = "PascalCase")]
struct EchoWait {
    done_at_ms: u64,
    poll_interval_s: u64,
    polls: u32,
    data: PropertyMap,
    no_echo: bool,
    /// Absent in the state of versions before `PhysicalId`.
    #[serde(default)]
    physical_id: Option<String>,
}

impl EchoWait {
    fn step(self) -> Result<Step, ProviderError> {
        let poll_after = Duration::from_secs(self.poll_interval_s);
        Step::in_progress(self, poll_after)
    }
}

impl Echo {
    async fn echo(ctx: &ProviderContext, properties: PropertyMap) -> Result<Step, ProviderError> {
        let mut options: EchoOptions = from_properties(&Value::Object(properties.clone()))?;
        if ctx.request_type == crate::request::RequestKind::Delete
            && let Some(seconds) = options.delete_in_progress_for_s
        {
            options.in_progress_for_s = seconds;
        }
        if let Some(delay_ms) = options.delay_ms {
            ctx.sleep_ms(delay_ms).await;
        }
        if let Some(message) = options.panic_with {
            panic!("{message}");
        }
        if let Some(reason) = options.fail_with {
            return Err(ProviderError::Failed(reason));
        }
        if options.in_progress_for_s > 0 {
            return EchoWait {
                done_at_ms: ctx.now_ms().saturating_add(options.in_progress_for_s.saturating_mul(1000)),
                poll_interval_s: options.poll_interval_s.unwrap_or(POLL_INTERVAL_S_DEFAULT),
                polls: 0,
                data: properties,
                no_echo: options.no_echo,
                physical_id: options.physical_id,
            }
            .step();
        }
        Ok(Step::Done(ProviderOutput {
            physical_resource_id: options.physical_id,
            data: properties.into_iter().collect(),
            no_echo: options.no_echo,
        }))
    }
}

#[async_trait]
impl Provider for Echo {
    type Properties = PropertyMap;

    async fn create(&self, ctx: &ProviderContext, properties: PropertyMap) -> Result<Step, ProviderError> {
        Self::echo(ctx, properties).await
    }

    async fn update(
        &self,
        ctx: &ProviderContext,
        _physical_resource_id: &str,
        properties: PropertyMap,
        _old_properties: Option<PropertyMap>,
    ) -> Result<Step, ProviderError> {
        Self::echo(ctx, properties).await
    }

    async fn delete(
        &self,
        ctx: &ProviderContext,
        _physical_resource_id: &str,
        properties: PropertyMap,
    ) -> Result<Step<()>, ProviderError> {
        Ok(Self::echo(ctx, properties).await?.map(|_| ()))
    }

    async fn poll(&self, ctx: &ProviderContext, state: Value) -> Result<Step, ProviderError> {
        let mut wait: EchoWait = serde_json::from_value(state)?;
        wait.polls += 1;
        if ctx.now_ms() < wait.done_at_ms {
            return wait.step();
        }
        let mut data: std::collections::BTreeMap<String, Value> = wait.data.into_iter().collect();
        data.insert("Polls".to_owned(), Value::String(wait.polls.to_string()));
        Ok(Step::Done(ProviderOutput { physical_resource_id: wait.physical_id, data, no_echo: wait.no_echo }))
    }
}
