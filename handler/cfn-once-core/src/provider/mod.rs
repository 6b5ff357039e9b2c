//! Providers: the resource logic, one per ResourceType, and the router that picks one.
//!
//! A provider implements [`Provider`] with its own typed `Properties` (deserialized with
//! CloudFormation's strings coerced, see `properties`), and receives a [`ProviderContext`] with
//! the request's fence, its deadline and a heartbeat-aware lease flag. It returns a
//! [`Step`]: [`Step::Done`] with a [`ProviderOutput`], or [`Step::InProgress`] with a small state
//! of its own and when to look again; or a [`ProviderError`] that becomes a FAILED Reason.
//!
//! A provider that answers in progress (the CDK's onEvent/isComplete, crhelper's poll_*) is
//! called back with [`Provider::poll`] and its state, in whichever region's delivery finds the
//! poll due, until it answers [`Step::Done`], fails, or the request's deadline nears (then the
//! answer is FAILED with how long it waited and its last state). Between polls nothing runs and
//! nobody holds the lease: the state is committed to the lease record under the fence.
//!
//! The [`Router`] applies the rules every provider would otherwise have to repeat: a Delete
//! always succeeds for a resource whose Create was refused before any provider ran, for a type
//! no provider serves and for
//! properties that could never have been created, so a stack can always be deleted; and a type
//! registered for privileged requests only is refused, before its provider runs, to any other.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use async_trait::async_trait;
use serde::de::DeserializeOwned;
use serde_json::Value;

use crate::clock::Clock;
use crate::ownership::{Fence, Owner, WriteRules};
use crate::properties::{PropertyError, from_properties};
use crate::request::{Request, RequestKind, provider_properties};
use crate::response::Outcome;
use crate::write_token::WriteScope;

mod router;
pub use router::Router;

/// What a provider gets besides its properties.
#[derive(Debug, Clone)]
pub struct ProviderContext {
    /// The fence to attach to the provider's own writes, so a store can refuse those of an
    /// execution that lost its lease.
    pub fence: Fence,
    /// The stack the resource belongs to (CloudFormation's StackId ARN).
    pub stack_id: String,
    /// CloudFormation's id for this request, shared by its copies in both regions.
    pub request_id: String,
    /// The resource's logical id in the template.
    pub logical_resource_id: String,
    /// The ResourceType that routed the request here, e.g. `Custom::Echo`.
    pub resource_type: String,
    /// Create, Update or Delete: what a [`Provider::poll`] is finishing.
    pub request_type: RequestKind,
    /// The SNS topic the request arrived through; `None` for a bare request (raw delivery).
    pub topic_arn: Option<String>,
    /// Whether that topic is privileged (`CFN_ONCE_PRIVILEGED_TOPIC_ARNS`; all are where the
    /// handler names none): only then may a request take over what is not its own (the stock
    /// `Custom::DynamoDBItem`'s `Adopt`) or reach a [`Router::register_privileged`] type.
    pub privileged: bool,
    /// When the provider must have returned (epoch ms); after it the run is abandoned and
    /// answered FAILED.
    pub deadline_ms: u64,
    /// `Some(fence)` when this execution took the request over from an earlier execution of the
    /// same attempt, which held `fence` and stopped without finishing (it crashed, ran out of
    /// time, or lost its lease): that execution may have done part of the work, so expect to
    /// find it. `None` for a first run, and for a poll that follows a finished wait (the fence
    /// grows with every poll, so the fence alone cannot tell a takeover).
    pub took_over_from: Option<u64>,
    /// What ends the run at [`ProviderContext::deadline_ms`]: the request's deadline, or this
    /// handler's own Lambda invocation. A provider that starts work it cannot take back (a
    /// synchronous Invoke keeps running after its caller hangs up) needs to know: past the
    /// request's deadline nobody runs the provider again, while a run cut at the invocation's
    /// end is answered FAILED although the work may go on.
    pub ended_by: RunEnd,
    clock: Arc<dyn Clock>,
    lease_lost: Arc<AtomicBool>,
    /// The step's writes (the run, or a poll), which the write tokens are made from.
    writes: WriteScope,
    /// The attempt's fingerprint, which the step's writes are of.
    attempt: String,
}

impl ProviderContext {
    /// A context; the worker builds these, tests may too.
    pub fn new(
        fence: Fence,
        request: &Request,
        resource_type: &str,
        deadline_ms: u64,
        clock: Arc<dyn Clock>,
        lease_lost: Arc<AtomicBool>,
    ) -> Self {
        let attempt = request.fingerprint.to_string();
        let fence_scope = fence.scope.clone();
        Self {
            fence,
            stack_id: request.key.stack_id.to_string(),
            request_id: request.key.request_id.clone(),
            logical_resource_id: request.logical_resource_id.clone(),
            resource_type: resource_type.to_owned(),
            // Providers only ever run for requests that parsed, which always have a type.
            request_type: request.kind().unwrap_or(RequestKind::Create),
            topic_arn: request.topic_arn.clone(),
            privileged: request.privileged,
            deadline_ms,
            took_over_from: None,
            ended_by: RunEnd::RequestDeadline,
            clock,
            lease_lost,
            writes: WriteScope::of_step(&fence_scope, &attempt, 0),
            attempt,
        }
    }

    /// The same context, for the poll that follows `polls` answered polls (`None`: the run): a
    /// poll's writes are its own, not the run's (see [`ProviderContext::fenced`]).
    pub fn polling(mut self, polls: Option<u32>) -> Self {
        let step = polls.map_or(0, |polls| polls.saturating_add(1));
        self.writes = WriteScope::of_step(&self.fence.scope, &self.attempt, step);
        self
    }

    /// The provider is called again for the same step (after a transient error): its writes
    /// are counted from none again, so that the same writes make the same tokens.
    pub fn restart_writes(&self) {
        self.writes.restart();
    }

    /// The same context, its run ended by `ended_by` (see [`ProviderContext::ended_by`]).
    pub fn ended_by(mut self, ended_by: RunEnd) -> Self {
        self.ended_by = ended_by;
        self
    }

    /// The same context, for an execution that took over from one that held `fence` (see
    /// [`ProviderContext::took_over_from`]).
    pub fn taking_over_from(mut self, fence: Option<u64>) -> Self {
        self.took_over_from = fence;
        self
    }

    /// The rules for this resource's writes: fenced, and owned by this resource (see
    /// `ownership`). `cfn_once::FencedTable` and the test kit's `FencedMap` take them.
    ///
    /// Every write made under them is applied once per request: the same write made again by
    /// a rerun of this step (its run or poll, after an unknown outcome, a lost lease, a
    /// transient error), in either region, carries the same token, and is refused where the
    /// item already carries it (see `cfn_once_core::fenced`).
    pub fn owned(&self) -> WriteRules {
        WriteRules::owned(&self.fence, Owner::new(&self.stack_id, &self.logical_resource_id)).made_by(&self.writes)
    }

    /// The rules for a write to a store that is not this resource's own (a counter shared by
    /// resources, say): fenced only, and once per request as [`ProviderContext::owned`]'s.
    pub fn fenced(&self) -> WriteRules {
        WriteRules::fenced(&self.fence).made_by(&self.writes)
    }

    /// The fingerprint of the request attempt this run is for: a RequestId CloudFormation sends
    /// again with other contents (a retried deployment) is another attempt.
    pub fn attempt(&self) -> &str {
        &self.attempt
    }

    /// Milliseconds left before the deadline.
    pub fn remaining_ms(&self) -> u64 {
        self.deadline_ms.saturating_sub(self.clock.now_ms())
    }

    /// The current time, epoch ms, on the injected clock (virtual in tests and the simulator).
    pub fn now_ms(&self) -> u64 {
        self.clock.now_ms()
    }

    /// Sleeps on the injected clock.
    pub async fn sleep_ms(&self, duration_ms: u64) {
        self.clock.sleep_ms(duration_ms).await;
    }

    /// True once a heartbeat found the lease taken over. The worker also stops polling the
    /// provider then; a provider doing long synchronous work can check this between steps.
    pub fn lease_lost(&self) -> bool {
        self.lease_lost.load(Ordering::SeqCst)
    }
}

/// What ends a provider's run ([`ProviderContext::ended_by`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RunEnd {
    /// The request's deadline (its lease cap): past it the request is answered FAILED and the
    /// provider never runs again for it.
    RequestDeadline,
    /// This handler's Lambda invocation, less the time kept to answer: it ends sooner than the
    /// request's deadline.
    Invocation,
}

/// A provider's answer.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct ProviderOutput {
    /// `None` keeps the default: a derived id on Create, the current id on Update.
    pub physical_resource_id: Option<String>,
    /// The resource's attributes, readable in the template with `Fn::GetAtt`; they must fit in
    /// the 4096-byte response body.
    pub data: BTreeMap<String, Value>,
    /// Ask CloudFormation to mask `data` in its console and API output.
    pub no_echo: bool,
}

impl ProviderOutput {
    /// No PhysicalResourceId of the provider's own (the default is kept: derived on Create, the
    /// current one on Update) and no Data.
    pub fn new() -> Self {
        Self::default()
    }

    /// With this PhysicalResourceId: at most 1 KB, and stable for the resource's life (a
    /// different one on Update tells CloudFormation the resource was replaced).
    pub fn with_id(physical_resource_id: impl Into<String>) -> Self {
        Self { physical_resource_id: Some(physical_resource_id.into()), ..Self::default() }
    }

    /// Adds a Data attribute, readable with `Fn::GetAtt`. The value is sent as the JSON it is:
    /// CloudFormation types Data only as a JSON object, and a template reads a top-level name;
    /// give strings where a template will use the value as one (CloudFormation's own
    /// attributes are strings).
    pub fn data(mut self, name: impl Into<String>, value: impl Into<Value>) -> Self {
        self.data.insert(name.into(), value.into());
        self
    }

    /// Asks CloudFormation to mask the Data in its console and API output.
    pub fn masked(mut self) -> Self {
        self.no_echo = true;
        self
    }
}

/// What a provider's call came to: done, or still in progress.
///
/// `Ok(output.into())` is `Ok(Step::Done(output))`.
#[derive(Debug, Clone, PartialEq)]
pub enum Step<T = ProviderOutput> {
    /// Finished: for Create and Update the resource's id and attributes, for Delete `()`.
    Done(T),
    /// Not finished: call [`Provider::poll`] with this state later.
    InProgress(Waiting),
}

impl<T> From<T> for Step<T> {
    fn from(done: T) -> Self {
        Self::Done(done)
    }
}

impl<T> Step<T> {
    /// In progress with `state` (serialized to JSON), polled again after `poll_after`: the
    /// CDK's isComplete, crhelper's `poll_*`. [`Provider::poll`] gets the state back, in
    /// whichever region's delivery finds the poll due.
    ///
    /// ```
    /// use std::time::Duration;
    /// use cfn_once_core::provider::{ProviderError, ProviderOutput, Step};
    /// use serde::{Deserialize, Serialize};
    ///
    /// #[derive(Serialize, Deserialize)]
    /// struct Pending {
    ///     operation_id: String,
    /// }
    ///
    /// fn started(operation_id: &str) -> Result<Step, ProviderError> {
    ///     // Small (at most 16 KB of JSON) and no secrets: it is kept in the lease record.
    ///     Step::in_progress(Pending { operation_id: operation_id.into() }, Duration::from_secs(30))
    /// }
    ///
    /// fn polled(state: serde_json::Value, done: bool) -> Result<Step, ProviderError> {
    ///     let pending: Pending = serde_json::from_value(state)?;
    ///     if done {
    ///         return Ok(ProviderOutput::with_id(pending.operation_id).into());
    ///     }
    ///     Step::in_progress(pending, Duration::from_secs(30))
    /// }
    /// # assert!(matches!(started("op-1"), Ok(Step::InProgress(_))));
    /// # assert!(matches!(polled(serde_json::json!({"operation_id": "op-1"}), true), Ok(Step::Done(_))));
    /// ```
    pub fn in_progress(state: impl serde::Serialize, poll_after: std::time::Duration) -> Result<Self, ProviderError> {
        Ok(Self::InProgress(Waiting { state: serde_json::to_value(state)?, poll_after }))
    }

    /// Maps a finished value, leaving work in progress as it is.
    pub fn map<U>(self, done: impl FnOnce(T) -> U) -> Step<U> {
        match self {
            Self::Done(value) => Step::Done(done(value)),
            Self::InProgress(waiting) => Step::InProgress(waiting),
        }
    }
}

/// A provider's work in progress: the state it wants back, and when.
#[derive(Debug, Clone, PartialEq)]
pub struct Waiting {
    /// Whatever the provider needs to look again (an operation id, a target, a count). It is
    /// stored in the lease record, so it must stay small: over [`STATE_BYTES_MAX`] bytes of JSON
    /// the request is answered FAILED. Never put secrets in it.
    pub state: Value,
    /// How long to wait before the next poll. Polls come no sooner than the handler's backoff
    /// floor (4 s with the template's defaults, see `budget`), and the last one comes before
    /// the request's deadline margin.
    pub poll_after: std::time::Duration,
}

/// The largest state a provider may ask to be polled with, in bytes of JSON: it lives in the
/// lease record (DynamoDB items are at most 400 KB, and every write of the record costs one write
/// unit per KB).
pub const STATE_BYTES_MAX: usize = 16 * 1024;

/// Why a provider did not succeed.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ProviderError {
    /// Final: answered FAILED with this reason.
    #[error("{0}")]
    Failed(String),
    /// Certainly not applied, and worth retrying (throttling, a refused connection): the
    /// provider is called again under the same fence, with backoff, while the deadline allows.
    #[error("{0}")]
    Transient(String),
    /// Maybe applied: a call of the provider's may have had effects nobody saw (a timeout after
    /// the request was sent, a 5xx, a connection reset mid-response, a Lambda Invoke whose
    /// answer was lost while the function kept running). The provider runs again only under a
    /// higher fence, so everything the earlier run writes through fences is refused from then
    /// on; where the deadline leaves no room for that, the request is answered FAILED saying
    /// the outcome is unknown. Your code can thus run again after an outcome nobody saw, always
    /// with a higher fence: make its side effects fenced or idempotent.
    #[error("{0}")]
    Unknown(String),
    /// Certainly not applied, and nothing this invocation can do changes that now: credentials
    /// that expired and that nothing in this process can refresh (inside Lambda they come from
    /// the sandbox's environment, which a reload reads unchanged). The run ends without an
    /// answer, as for [`StoreError::Deferred`](crate::lease::StoreError::Deferred): the lease
    /// is ended and the message comes back on a later receive (with the lease store's retry
    /// backoff), when a later invocation, or the other region, runs the provider again under a
    /// higher fence. Where the deadline leaves no time for that run, the request is answered
    /// FAILED saying the credentials expired, never left to CloudFormation's timeout.
    #[error("{0}")]
    Deferred(String),
}

impl From<PropertyError> for ProviderError {
    fn from(error: PropertyError) -> Self {
        Self::Failed(error.to_string())
    }
}

impl From<serde_json::Error> for ProviderError {
    /// A state that does not (de)serialize: a bug in the provider, answered FAILED.
    fn from(error: serde_json::Error) -> Self {
        Self::Failed(format!("the provider's state does not (de)serialize: {error}"))
    }
}

/// The resource logic for one ResourceType.
///
/// ```
/// use cfn_once_core::ownership::WriteRules;
/// use cfn_once_core::provider::{Provider, ProviderContext, ProviderError, ProviderOutput, Step};
/// use serde::Deserialize;
///
/// #[derive(Deserialize)]
/// #[serde(rename_all = "PascalCase")]
/// struct Properties {
///     name: String,
///     // CloudFormation sends "3"; it arrives as a number.
///     replicas: u32,
/// }
///
/// struct Queue;
///
/// #[async_trait::async_trait]
/// impl Provider for Queue {
///     type Properties = Properties;
///     // Every Update creates the resource again; a different id than before tells
///     // CloudFormation to replace it (it then sends a Delete of the old id).
///     const UPDATE_THROUGH_CREATE: bool = true;
///
///     async fn create(&self, ctx: &ProviderContext, properties: Properties) -> Result<Step, ProviderError> {
///         if ctx.took_over_from.is_some() {
///             // An earlier execution of this request stopped midway: expect its work.
///         }
///         let _rules: WriteRules = ctx.owned(); // for fenced, owned writes of the resource
///         Ok(ProviderOutput::with_id(format!("queue-{}", properties.name))
///             .data("Replicas", properties.replicas.to_string())
///             .into())
///     }
///
///     async fn delete(&self, _ctx: &ProviderContext, _id: &str, _properties: Properties) -> Result<Step<()>, ProviderError> {
///         // Delete only what this resource owns, and succeed whatever is there.
///         Ok(Step::Done(()))
///     }
/// }
/// ```
#[async_trait]
pub trait Provider: Send + Sync + 'static {
    /// The provider's typed properties; CloudFormation's own (`ServiceToken`, `ServiceTimeout`)
    /// are removed before deserializing.
    type Properties: DeserializeOwned + Send + Sync + 'static;

    /// Opt in to handling an Update as a Create with the new properties: the default
    /// [`Provider::update`] then calls [`Provider::create`], so the answer's PhysicalResourceId
    /// decides between an in-place update (the same id) and a replacement (a new one, after
    /// which CloudFormation deletes the old id). Without it, a provider implements `update`.
    const UPDATE_THROUGH_CREATE: bool = false;

    /// Creates the resource. It may run again for the same request after a takeover
    /// ([`ProviderContext::took_over_from`]), so it must tolerate finding its own earlier work.
    async fn create(&self, ctx: &ProviderContext, properties: Self::Properties) -> Result<Step, ProviderError>;

    /// Updates the resource `physical_resource_id`. `old_properties` is `None` when the old
    /// properties no longer deserialize.
    ///
    /// The default creates it again when [`Provider::UPDATE_THROUGH_CREATE`] opts in, and
    /// otherwise answers FAILED saying the provider does not update.
    async fn update(
        &self,
        ctx: &ProviderContext,
        physical_resource_id: &str,
        properties: Self::Properties,
        old_properties: Option<Self::Properties>,
    ) -> Result<Step, ProviderError> {
        let _ = (physical_resource_id, old_properties);
        if Self::UPDATE_THROUGH_CREATE {
            return self.create(ctx, properties).await;
        }
        Err(ProviderError::Failed(format!(
            "{} does not implement updates: implement Provider::update, or set UPDATE_THROUGH_CREATE",
            ctx.resource_type
        )))
    }

    /// Must succeed for ids this provider never issued (CloudFormation generates one when a
    /// Create got no answer) and for resources that are already gone, including one whose
    /// Create was still in progress when it was answered FAILED at the deadline.
    async fn delete(
        &self,
        ctx: &ProviderContext,
        physical_resource_id: &str,
        properties: Self::Properties,
    ) -> Result<Step<()>, ProviderError>;

    /// Looks again at work a create, update, delete or earlier poll answered
    /// [`Step::InProgress`] with `state` (`ctx.request_type` says which operation). It may run
    /// in either region, and again with the same state after a takeover, so it must be
    /// idempotent. For a Delete, a [`Step::Done`] output is ignored.
    ///
    /// The default refuses: a provider that never answers in progress need not implement it.
    async fn poll(&self, ctx: &ProviderContext, state: Value) -> Result<Step, ProviderError> {
        let _ = (ctx, state);
        Err(ProviderError::Failed("the provider answered in progress but does not implement Provider::poll".into()))
    }
}

/// Where a provider's call left the request: answered, or waiting for a poll.
#[derive(Debug, Clone, PartialEq)]
pub enum Progress {
    /// The answer to commit.
    Finished(Outcome),
    /// In progress: store this and poll later.
    InProgress(Waiting),
}

/// The operation to run, with untyped properties.
enum Call<'a> {
    Create(&'a Value),
    Update { physical_resource_id: &'a str, properties: &'a Value, old_properties: &'a Value },
    Delete { physical_resource_id: &'a str, properties: &'a Value },
}

#[async_trait]
trait ErasedProvider: Send + Sync {
    /// Runs `call`; properties that do not deserialize are refused (no provider code runs), with
    /// a Reason starting with `label`.
    async fn call(&self, ctx: &ProviderContext, call: Call<'_>, label: &str) -> Result<Progress, ProviderError>;

    /// Polls work in progress.
    async fn poll(&self, ctx: &ProviderContext, state: Value) -> Result<Progress, ProviderError>;
}

fn success(output: ProviderOutput) -> Outcome {
    Outcome::Success { physical_resource_id: output.physical_resource_id, data: output.data, no_echo: output.no_echo }
}

fn deleted() -> Outcome {
    Outcome::Success { physical_resource_id: None, data: BTreeMap::new(), no_echo: false }
}

fn progress<T>(step: Step<T>, done: impl FnOnce(T) -> Outcome) -> Progress {
    match step {
        Step::Done(output) => Progress::Finished(done(output)),
        Step::InProgress(waiting) => Progress::InProgress(waiting),
    }
}

struct Typed<P>(P);

#[async_trait]
impl<P: Provider> ErasedProvider for Typed<P> {
    async fn call(&self, ctx: &ProviderContext, call: Call<'_>, label: &str) -> Result<Progress, ProviderError> {
        let refused =
            |error: PropertyError| Ok(Progress::Finished(Outcome::refused(format!("{label} failed: {error}"))));
        match call {
            Call::Create(properties) => {
                let properties = match from_properties(&provider_properties(properties)) {
                    Ok(properties) => properties,
                    Err(error) => return refused(error),
                };
                self.0.create(ctx, properties).await.map(|step| progress(step, success))
            }
            Call::Update { physical_resource_id, properties, old_properties } => {
                let properties = match from_properties(&provider_properties(properties)) {
                    Ok(properties) => properties,
                    Err(error) => return refused(error),
                };
                let old = match from_properties(&provider_properties(old_properties)) {
                    Ok(old) => Some(old),
                    Err(error) => {
                        tracing::warn!(%error, "old properties do not deserialize; the provider gets none");
                        None
                    }
                };
                self.0.update(ctx, physical_resource_id, properties, old).await.map(|step| progress(step, success))
            }
            Call::Delete { physical_resource_id, properties } => {
                match from_properties(&provider_properties(properties)) {
                    Ok(properties) => self
                        .0
                        .delete(ctx, physical_resource_id, properties)
                        .await
                        .map(|step| progress(step, |()| deleted())),
                    // A Create with these properties could not have succeeded, so nothing exists.
                    Err(error) => {
                        tracing::warn!(%error, "Delete with properties that never deserialized: nothing to delete");
                        Ok(Progress::Finished(deleted()))
                    }
                }
            }
        }
    }

    async fn poll(&self, ctx: &ProviderContext, state: Value) -> Result<Progress, ProviderError> {
        let step = self.0.poll(ctx, state).await?;
        Ok(match ctx.request_type {
            RequestKind::Delete => progress(step, |_| deleted()),
            RequestKind::Create | RequestKind::Update => progress(step, success),
        })
    }
}
