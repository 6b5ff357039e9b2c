//! Resource types answered by Lambda functions that already exist, following the AWS CDK
//! Provider framework's contract: an `onEvent` function and an optional `isComplete` one
//! (`CFN_ONCE_FUNCTIONS`), invoked synchronously in this handler's own region.
//!
//! * **Input.** `onEvent` gets the CloudFormation request as the CDK framework passes it
//!   (`RequestType`, `StackId`, `RequestId`, `ResourceType`, `LogicalResourceId`,
//!   `PhysicalResourceId` for an Update or Delete, `ResourceProperties` and, for an Update,
//!   `OldResourceProperties`; without their `ServiceToken`, as every provider's properties come,
//!   where the CDK framework leaves it in), **never the ResponseURL**, plus `CfnOnce`: the fence (`Value`,
//!   `Scope`) for fenced writes, this `Region`, `TookOverFrom` (the fence of the execution this
//!   one took over from, or null) and `RemainingMs` until the request's deadline.
//! * **Output.** An object with optional `PhysicalResourceId` (default as the CDK framework's:
//!   the RequestId for a Create, the current id otherwise), `Data` and `NoEcho`. With an
//!   `isComplete` function, or when the output says `"IsComplete": false`, the request is in
//!   progress: the event and the output so far are stored under the fence like any provider's
//!   state, and `isComplete` (or, without one, `onEvent` again) is called with the event plus
//!   the output's `PhysicalResourceId` and `Data`, from whichever region holds the due poll,
//!   until it answers `"IsComplete": true`; its `Data` is merged over the output's.
//! * **Errors.** A function error (an exception) is a FAILED answer with the error's type and
//!   message (bounded and stripped like any provider text); a function timeout is a FAILED
//!   saying so; an Invoke that certainly did not run the function (throttled, the function
//!   busy being updated, a connection refused) is retried as any transient provider error is
//!   (within the provider's retry budget and the run's time, under the same fence); an
//!   unreadable answer is a FAILED naming what was wrong. Data over CloudFormation's 4 KB
//!   limit is refused by the response builder, as for any provider.
//! * **An outcome nobody saw.** A synchronous Invoke keeps running after the caller hangs up,
//!   so one whose outcome is unknown (no answer in time after it was sent, a 5xx, a connection
//!   reset mid-response) is never invoked again under the same fence: `onEvent` and `isComplete`
//!   run again under a higher fence (`ProviderError::Unknown`: the function sees
//!   `CfnOnce.Fence` rise and `TookOverFrom` name the earlier one, so what the first run wrote
//!   through fences is refused from then on), and a function that answers by itself has its
//!   answer read from the object it was given, as after any Invoke; it runs again, with a new
//!   object under a later poll's higher fence, only once no run of it can still answer
//!   ([`FUNCTION_RUN_MS_MAX`]).
//! * **Functions that answer by themselves** (`cfn-response:` in `CFN_ONCE_FUNCTIONS`) get the
//!   CloudFormation request with, as its ResponseURL, a presigned URL of an object of cfn-once's
//!   for this execution only, in this region's answer bucket; what they PUT there is the answer
//!   (`answers_itself`). A wait for it stores the object's bucket, region and key and the event:
//!   a poll reads the object where it is, and runs the function again in its own region when
//!   that region's bucket could not be read [`UNREADABLE_POLLS_MAX`] polls in a row.
//!
//! The provider is here; beside it, `invoke.rs` (the Invoke port, its AWS adapter, and what an
//! Invoke's outcome means), `payload.rs` (the event a function is given and its answer, read)
//! and `answer_object.rs` (functions that answer by themselves).

mod answer_object;
mod invoke;
mod payload;
pub mod timeouts;

#[cfg(test)]
mod answer_object_tests;
#[cfg(test)]
mod tests;

use std::sync::Arc;

use async_trait::async_trait;
use cfn_once_core::config::FunctionRoute;
use cfn_once_core::provider::{Provider, ProviderContext, ProviderError, Step};
use serde_json::{Map, Value, json};

use self::answer_object::SelfAnswering;
pub use self::answer_object::{FUNCTION_RUN_MS_MAX, UNREADABLE_POLLS_MAX};
use self::invoke::Caller;
pub use self::invoke::{FunctionInvoker, InvokeError, Invoked, LambdaInvoker, check_at_start};
pub use self::payload::POLL_AFTER;
use self::payload::{Output, event, kind_of};
use crate::providers::answers_itself::AnswerDrop;

/// A resource type served by its `onEvent` (and `isComplete`) functions.
#[derive(Debug, Clone)]
pub struct FunctionProvider {
    route: FunctionRoute,
    region: String,
    invoker: Arc<dyn FunctionInvoker>,
    answers: Option<Arc<dyn AnswerDrop>>,
}

impl FunctionProvider {
    /// The provider of `route`'s type, invoking through `invoker` in `region`.
    pub fn new(route: FunctionRoute, region: impl Into<String>, invoker: Arc<dyn FunctionInvoker>) -> Self {
        Self { route, region: region.into(), invoker, answers: None }
    }

    /// Where a function that answers by itself PUTs its answers (required for such a route).
    pub fn with_answer_drop(mut self, answers: Arc<dyn AnswerDrop>) -> Self {
        self.answers = Some(answers);
        self
    }

    /// `onEvent`, then: done, or in progress until `isComplete` says so.
    async fn on_event(&self, ctx: &ProviderContext, event: Map<String, Value>) -> Result<Step, ProviderError> {
        if self.route.answers_itself {
            return self.self_answering()?.answered_by_itself(ctx, event).await;
        }
        let output = self.caller().call(ctx, self.route.on_event.as_str(), event.clone()).await?;
        let output = Output::read(&self.route.on_event, &output, &event)?;
        if self.route.is_complete.is_some() || output.is_complete == Some(false) {
            return Step::in_progress(json!({"Event": event, "Output": output.to_value()}), POLL_AFTER);
        }
        Ok(output.into_step())
    }

    /// This route's Invokes.
    fn caller(&self) -> Caller<'_> {
        Caller { region: &self.region, invoker: self.invoker.as_ref(), answers_itself: self.route.answers_itself }
    }

    /// The answer-object path of this route, which needs the answer bucket.
    fn self_answering(&self) -> Result<SelfAnswering<'_>, ProviderError> {
        let answers = self.answers.as_ref().ok_or_else(|| {
            ProviderError::Failed(format!(
                "{} answers by itself, but this handler has no answer bucket (CFN_ONCE_ANSWER_BUCKET)",
                self.route.on_event.as_str()
            ))
        })?;
        Ok(SelfAnswering { function: self.route.on_event.as_str(), caller: self.caller(), answers: answers.as_ref() })
    }
}

#[async_trait]
impl Provider for FunctionProvider {
    type Properties = Value;

    async fn create(&self, ctx: &ProviderContext, properties: Value) -> Result<Step, ProviderError> {
        self.on_event(ctx, event(ctx, None, properties, None)).await
    }

    async fn update(
        &self,
        ctx: &ProviderContext,
        id: &str,
        properties: Value,
        old: Option<Value>,
    ) -> Result<Step, ProviderError> {
        self.on_event(ctx, event(ctx, Some(id), properties, Some(old.unwrap_or(Value::Object(Map::new()))))).await
    }

    async fn delete(&self, ctx: &ProviderContext, id: &str, properties: Value) -> Result<Step<()>, ProviderError> {
        Ok(self.on_event(ctx, event(ctx, Some(id), properties, None)).await?.map(|_| ()))
    }

    async fn poll(&self, ctx: &ProviderContext, state: Value) -> Result<Step, ProviderError> {
        if self.route.answers_itself {
            return self.self_answering()?.look_for_answer(ctx, state).await;
        }
        let (Some(Value::Object(event)), Some(output)) = (state.get("Event").cloned(), state.get("Output")) else {
            return Err(ProviderError::Failed(
                "the stored state of the wait is not the event and output cfn-once stored".into(),
            ));
        };
        let function = self.route.is_complete.as_ref().unwrap_or(&self.route.on_event);
        let mut asked = event.clone();
        for field in ["PhysicalResourceId", "Data"] {
            if let Some(value) = output.get(field) {
                asked.insert(field.into(), value.clone());
            }
        }
        let answer = self.caller().call(ctx, function.as_str(), asked).await?;
        let complete = match answer.get("IsComplete") {
            Some(Value::Bool(done)) => *done,
            None | Some(Value::Null) if self.route.is_complete.is_none() => true,
            other => {
                return Err(ProviderError::Failed(format!(
                    "{} answered IsComplete that is {}, not a boolean",
                    function.as_str(),
                    other.map_or("missing", kind_of)
                )));
            }
        };
        if !complete {
            return Ok(Step::InProgress(cfn_once_core::provider::Waiting { state, poll_after: POLL_AFTER }));
        }
        let mut output = Output::read(&self.route.on_event, output.as_object().unwrap_or(&Map::new()), &event)?;
        if let Some(Value::Object(more)) = answer.get("Data") {
            output.data.extend(more.clone());
        }
        Ok(output.into_step())
    }
}
