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

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use cfn_once_core::config::FunctionRoute;
use cfn_once_core::provider::{Provider, ProviderContext, ProviderError, ProviderOutput, Step};
use cfn_once_core::request::RequestKind;
use serde_json::{Map, Value, json};

use crate::providers::answers_itself::{self, AnswerDrop, AnswerObject, DropError, ForRequest};

/// How long after an in-progress answer the next poll comes (the CDK framework's default
/// query interval).
pub const POLL_AFTER: Duration = Duration::from_secs(5);

/// What a synchronous invoke returned.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Invoked {
    /// The function's response payload.
    Response(Vec<u8>),
    /// The function failed (`X-Amz-Function-Error`): Lambda's error document.
    FunctionError(Vec<u8>),
}

/// Why an invoke did not return.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum InvokeError {
    /// The function certainly did not run, and trying again may work: throttled, the function
    /// busy being updated, a connection refused before anything was sent.
    #[error("{0}")]
    Transient(String),
    /// The function may have run: a timeout after the request was sent, a 5xx, a connection
    /// reset mid-response. A synchronous Invoke keeps running after the caller hangs up, so
    /// it is never invoked again under the same fence (see `ProviderError::Unknown`).
    #[error("{0}")]
    Unknown(String),
    /// Will not work by trying again: no such function, access denied, a payload refused.
    #[error("{0}")]
    Permanent(String),
}

/// Invokes a function synchronously (the port; `LambdaInvoker` is the AWS adapter).
#[async_trait]
pub trait FunctionInvoker: Send + Sync + std::fmt::Debug {
    /// Invokes `function` (a name or ARN) with `payload`, giving up after `timeout_ms`.
    async fn invoke(&self, function: &str, payload: Vec<u8>, timeout_ms: u64) -> Result<Invoked, InvokeError>;
}

/// The AWS Lambda Invoke API through `aws-sdk-lambda`, one attempt per call (the worker retries).
#[derive(Debug, Clone)]
pub struct LambdaInvoker {
    client: aws_sdk_lambda::Client,
}

impl LambdaInvoker {
    /// A client from the function's AWS configuration (its HTTPS client and region).
    pub fn new(sdk: &aws_config::SdkConfig) -> Self {
        let config = aws_sdk_lambda::config::Builder::from(sdk)
            .retry_config(aws_sdk_lambda::config::retry::RetryConfig::standard().with_max_attempts(1))
            .build();
        Self { client: aws_sdk_lambda::Client::from_conf(config) }
    }
}

#[async_trait]
impl FunctionInvoker for LambdaInvoker {
    async fn invoke(&self, function: &str, payload: Vec<u8>, timeout_ms: u64) -> Result<Invoked, InvokeError> {
        use aws_sdk_lambda::operation::invoke::InvokeError as Sdk;
        let call =
            self.client.invoke().function_name(function).payload(aws_sdk_lambda::primitives::Blob::new(payload)).send();
        let output = match tokio::time::timeout(Duration::from_millis(timeout_ms), call).await {
            // The request may well have been sent: the function may be running.
            Err(_) => {
                return Err(InvokeError::Unknown(format!(
                    "the Invoke of {function} had no answer within {timeout_ms} ms"
                )));
            }
            Ok(Ok(output)) => output,
            Ok(Err(error)) => {
                use crate::aws::Failure;
                let failure = crate::aws::classify(&error);
                // A function being updated or not ready yet refused the Invoke unrun, and will
                // take one shortly.
                let busy = matches!(
                    error.as_service_error(),
                    Some(Sdk::ResourceConflictException(_) | Sdk::ResourceNotReadyException(_))
                );
                let why = |text: String| format!("the Invoke of {function} failed: {text}");
                return Err(match failure {
                    _ if busy => InvokeError::Transient(why(failure.into_text())),
                    Failure::NotApplied(text) | Failure::Deferred(text) => InvokeError::Transient(why(text)),
                    Failure::Unknown(text) => InvokeError::Unknown(why(text)),
                    Failure::Permanent(text) => InvokeError::Permanent(why(text)),
                });
            }
        };
        let payload = output.payload.map(|blob| blob.into_inner()).unwrap_or_default();
        Ok(if output.function_error.is_some() { Invoked::FunctionError(payload) } else { Invoked::Response(payload) })
    }
}

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

    /// The event the CDK framework passes, with cfn-once's object and without the ResponseURL.
    fn event(
        &self,
        ctx: &ProviderContext,
        physical_resource_id: Option<&str>,
        properties: Value,
        old: Option<Value>,
    ) -> Map<String, Value> {
        let mut event = Map::new();
        let kind = match ctx.request_type {
            RequestKind::Create => "Create",
            RequestKind::Update => "Update",
            RequestKind::Delete => "Delete",
        };
        event.insert("RequestType".into(), kind.into());
        event.insert("StackId".into(), ctx.stack_id.clone().into());
        event.insert("RequestId".into(), ctx.request_id.clone().into());
        event.insert("ResourceType".into(), ctx.resource_type.clone().into());
        event.insert("LogicalResourceId".into(), ctx.logical_resource_id.clone().into());
        if let Some(id) = physical_resource_id {
            event.insert("PhysicalResourceId".into(), id.into());
        }
        event.insert("ResourceProperties".into(), properties);
        if let Some(old) = old {
            event.insert("OldResourceProperties".into(), old);
        }
        event
    }

    fn with_cfn_once(&self, ctx: &ProviderContext, mut event: Map<String, Value>) -> Vec<u8> {
        event.insert(
            "CfnOnce".into(),
            json!({
                "Fence": {"Value": ctx.fence.value, "Scope": ctx.fence.scope},
                "Region": self.region,
                "TookOverFrom": ctx.took_over_from,
                "RemainingMs": ctx.remaining_ms(),
            }),
        );
        Value::Object(event).to_string().into_bytes()
    }

    /// One Invoke of `function` with `event`, within the run's time.
    async fn invoke(
        &self,
        ctx: &ProviderContext,
        function: &str,
        event: Map<String, Value>,
    ) -> Result<Invoked, ProviderError> {
        let payload = self.with_cfn_once(ctx, event);
        self.invoker.invoke(function, payload, ctx.remaining_ms().max(1)).await.map_err(|error| match error {
            InvokeError::Transient(why) => ProviderError::Transient(why),
            // Invoked again only under a higher fence: the function may be running still.
            InvokeError::Unknown(why) => ProviderError::Unknown(why),
            InvokeError::Permanent(why) => ProviderError::Failed(why),
        })
    }

    /// One call of `function` with `event`: its answer as a JSON object, or why not.
    async fn call(
        &self,
        ctx: &ProviderContext,
        function: &str,
        event: Map<String, Value>,
    ) -> Result<Map<String, Value>, ProviderError> {
        match self.invoke(ctx, function, event).await? {
            Invoked::FunctionError(document) => Err(ProviderError::Failed(function_error(function, &document))),
            Invoked::Response(body) => match serde_json::from_slice::<Value>(&body) {
                Ok(Value::Object(answer)) => Ok(answer),
                // A handler that returns nothing (Python's None) answers `null`: an empty output.
                Ok(Value::Null) => Ok(Map::new()),
                Ok(other) => {
                    Err(ProviderError::Failed(format!("{function} answered {}, not a JSON object", kind_of(&other))))
                }
                Err(error) => {
                    Err(ProviderError::Failed(format!("{function} answered something that is not JSON: {error}")))
                }
            },
        }
    }

    /// `onEvent`, then: done, or in progress until `isComplete` says so.
    async fn on_event(&self, ctx: &ProviderContext, event: Map<String, Value>) -> Result<Step, ProviderError> {
        if self.route.answers_itself {
            return self.answered_by_itself(ctx, event).await;
        }
        let output = self.call(ctx, self.route.on_event.as_str(), event.clone()).await?;
        let output = Output::read(&self.route.on_event, &output, &event)?;
        if self.route.is_complete.is_some() || output.is_complete == Some(false) {
            return Step::in_progress(json!({"Event": event, "Output": output.to_value()}), POLL_AFTER);
        }
        Ok(output.into_step())
    }
}

impl FunctionProvider {
    fn answer_drop(&self) -> Result<&Arc<dyn AnswerDrop>, ProviderError> {
        self.answers.as_ref().ok_or_else(|| {
            ProviderError::Failed(format!(
                "{} answers by itself, but this handler has no answer bucket (CFN_ONCE_ANSWER_BUCKET)",
                self.route.on_event.as_str()
            ))
        })
    }

    /// A function that PUTs its own answer: given a fresh object's presigned URL as its
    /// ResponseURL, invoked, and its answer read from that object, now or in later polls.
    async fn answered_by_itself(
        &self,
        ctx: &ProviderContext,
        mut event: Map<String, Value>,
    ) -> Result<Step, ProviderError> {
        let function = self.route.on_event.as_str();
        let answers = self.answer_drop()?;
        let object = AnswerObject {
            bucket: answers.bucket().to_owned(),
            region: answers.region().to_owned(),
            key: answers_itself::new_key()?,
        };
        // What a later poll needs: where the answer will be, and the event, to run the function
        // again in its own region if this one cannot be reached. Never the URL.
        let wait = json!({
            "AnswerKey": object.key,
            "AnswerBucket": object.bucket,
            "AnswerRegion": object.region,
            "Event": Value::Object(event.clone()),
        });
        let url = answers.upload_url(&object.key, answers_itself::UPLOAD_URL_VALID_FOR).await.map_err(drop_error)?;
        event.insert("ResponseURL".into(), url.expose_secret().into());
        let mut wait = wait;
        let invoked = match self.invoke(ctx, function, event).await {
            Ok(invoked) => Some(invoked),
            // The function may have run, and may still PUT its answer to this object: it is read
            // where it is, as after any Invoke, and the function runs again (under a later
            // poll's higher fence, with a new object) only once it can no longer be running.
            Err(ProviderError::Unknown(why)) => {
                tracing::warn!(function, why, "the Invoke's outcome is unknown: waiting for the function's answer");
                wait[INVOKED_UNSEEN_AT_MS] = ctx.now_ms().into();
                None
            }
            Err(other) => return Err(other),
        };
        // The function has run (or may have): from here on, never invoke it again for this
        // execution; a read that fails now is tried again by the next poll.
        let read = answers.read(&object, cfn_once_core::response::BODY_BYTES_MAX).await;
        match (read, invoked) {
            (Ok(Some(answer)), _) => answers_itself::answer_from(ForRequest::of(ctx), function, &answer),
            (Ok(None), Some(Invoked::FunctionError(document))) => {
                Err(ProviderError::Failed(format!("{} before it answered", function_error(function, &document))))
            }
            (Ok(None), _) => {
                tracing::info!(function, "the function has not answered yet: waiting for its answer");
                Step::in_progress(wait, POLL_AFTER)
            }
            (Err(error), _) => {
                tracing::warn!(function, %error, "the function's answer could not be read yet: the next poll reads it");
                Step::in_progress(wait, POLL_AFTER)
            }
        }
    }

    /// A poll of a function that answers by itself: the object it was to PUT, read again where
    /// it is. When it is in the other region's bucket and two polls in a row could not read it
    /// (that region is out: an outage, not a drill, which leaves its S3 readable), the function
    /// runs again here, under this poll's higher fence, with a new object: what the
    /// unreachable execution PUTs later lands where nobody reads.
    async fn look_for_answer(&self, ctx: &ProviderContext, mut state: Value) -> Result<Step, ProviderError> {
        let function = self.route.on_event.as_str();
        let answers = self.answer_drop()?;
        let text = |field: &str| state.get(field).and_then(Value::as_str).map(str::to_owned);
        let Some(key) = text("AnswerKey").filter(|key| key.starts_with(answers_itself::ANSWER_PREFIX)) else {
            return Err(ProviderError::Failed(
                "the stored state of the wait is not an answer key of cfn-once's".into(),
            ));
        };
        // A wait stored before waits kept their place is in this region's bucket.
        let object = AnswerObject {
            bucket: text("AnswerBucket").unwrap_or_else(|| answers.bucket().to_owned()),
            region: text("AnswerRegion").unwrap_or_else(|| answers.region().to_owned()),
            key,
        };
        let elsewhere = object.region != answers.region();
        match answers.read(&object, cfn_once_core::response::BODY_BYTES_MAX).await {
            Ok(Some(answer)) => answers_itself::answer_from(ForRequest::of(ctx), function, &answer),
            // An Invoke whose outcome nobody saw, and no answer since for longer than any
            // function runs: it did not run (or died unanswered). It runs again here, under this
            // poll's fence, which is higher than the Invoke's.
            Ok(None)
                if state
                    .get(INVOKED_UNSEEN_AT_MS)
                    .and_then(Value::as_u64)
                    .is_some_and(|at_ms| ctx.now_ms() >= at_ms.saturating_add(FUNCTION_RUN_MS_MAX)) =>
            {
                let Some(Value::Object(event)) = state.get("Event").cloned() else {
                    return Err(ProviderError::Failed(
                        "the stored state of the wait has no event to run the function again with".into(),
                    ));
                };
                tracing::warn!(
                    function,
                    "no answer since an Invoke whose outcome was unknown: running the function again"
                );
                self.answered_by_itself(ctx, event).await
            }
            Ok(None) => {
                if let Some(wait) = state.as_object_mut() {
                    wait.remove(UNREADABLE_POLLS);
                }
                Ok(Step::InProgress(cfn_once_core::provider::Waiting { state, poll_after: POLL_AFTER }))
            }
            Err(DropError::Transient(why)) if elsewhere => {
                let unreadable = state.get(UNREADABLE_POLLS).and_then(Value::as_u64).unwrap_or(0) + 1;
                let event = match state.get("Event") {
                    Some(Value::Object(event)) if unreadable >= UNREADABLE_POLLS_MAX => event.clone(),
                    _ => {
                        tracing::warn!(
                            function,
                            region = %object.region,
                            unreadable,
                            error = %why,
                            "the answer's region could not be read: the next poll tries again"
                        );
                        if let Some(wait) = state.as_object_mut() {
                            wait.insert(UNREADABLE_POLLS.into(), unreadable.into());
                        }
                        return Ok(Step::InProgress(cfn_once_core::provider::Waiting {
                            state,
                            poll_after: POLL_AFTER,
                        }));
                    }
                };
                tracing::warn!(
                    function,
                    region = %object.region,
                    unreadable,
                    error = %why,
                    "the answer's region could not be read {unreadable} polls in a row: running the function again in this region"
                );
                self.answered_by_itself(ctx, event).await
            }
            Err(error) => Err(drop_error(error)),
        }
    }
}

/// The wait's count of polls in a row that could not read the other region's bucket.
const UNREADABLE_POLLS: &str = "UnreadablePolls";

/// In a wait's state: when an Invoke whose outcome was unknown was sent (epoch ms), if one was.
const INVOKED_UNSEEN_AT_MS: &str = "InvokedUnseenAtMs";

/// How long after an Invoke whose outcome nobody saw its function may still answer: Lambda's
/// longest function timeout (15 minutes), and a minute for its PUT.
pub const FUNCTION_RUN_MS_MAX: u64 = 16 * 60 * 1000;

/// After this many polls in a row (one poll interval apart) could not read the other region's
/// bucket, that region is taken as out and the function runs again in the polling region.
pub const UNREADABLE_POLLS_MAX: u64 = 2;

fn drop_error(error: DropError) -> ProviderError {
    match error {
        DropError::Transient(why) => ProviderError::Transient(why),
        DropError::Permanent(why) => ProviderError::Failed(why),
    }
}

/// What onEvent answered, defaults applied.
struct Output {
    physical_resource_id: String,
    data: BTreeMap<String, Value>,
    no_echo: bool,
    is_complete: Option<bool>,
}

impl Output {
    fn read(
        function: &cfn_once_core::aws_names::FunctionRef,
        answer: &Map<String, Value>,
        event: &Map<String, Value>,
    ) -> Result<Self, ProviderError> {
        let function = function.as_str();
        let default_id = event
            .get("PhysicalResourceId")
            .or_else(|| event.get("RequestId"))
            .and_then(Value::as_str)
            .unwrap_or_default()
            .to_owned();
        let physical_resource_id = match answer.get("PhysicalResourceId") {
            None | Some(Value::Null) => default_id,
            Some(Value::String(id)) if !id.is_empty() => id.clone(),
            Some(other) => {
                return Err(ProviderError::Failed(format!(
                    "{function} answered a PhysicalResourceId that is {}, not a non-empty string",
                    kind_of(other)
                )));
            }
        };
        let data = match answer.get("Data") {
            None | Some(Value::Null) => BTreeMap::new(),
            Some(Value::Object(data)) => data.clone().into_iter().collect(),
            Some(other) => {
                return Err(ProviderError::Failed(format!(
                    "{function} answered Data that is {}, not an object",
                    kind_of(other)
                )));
            }
        };
        let flag = |name: &str| match answer.get(name) {
            None | Some(Value::Null) => Ok(None),
            Some(Value::Bool(value)) => Ok(Some(*value)),
            Some(other) => Err(ProviderError::Failed(format!(
                "{function} answered {name} that is {}, not a boolean",
                kind_of(other)
            ))),
        };
        Ok(Self {
            physical_resource_id,
            data,
            no_echo: flag("NoEcho")?.unwrap_or(false),
            is_complete: flag("IsComplete")?,
        })
    }

    fn to_value(&self) -> Value {
        json!({"PhysicalResourceId": self.physical_resource_id, "Data": self.data, "NoEcho": self.no_echo})
    }

    fn into_step(self) -> Step {
        let mut output = ProviderOutput::with_id(self.physical_resource_id);
        output.data = self.data;
        output.no_echo = self.no_echo;
        Step::Done(output)
    }
}

/// A function error document (`{"errorType", "errorMessage"}`) in words.
fn function_error(function: &str, document: &[u8]) -> String {
    let document: Value = serde_json::from_slice(document).unwrap_or(Value::Null);
    let kind = document["errorType"].as_str().unwrap_or("an error");
    let message = document["errorMessage"].as_str().unwrap_or("(no message)");
    if kind == "Sandbox.Timedout" || message.contains("Task timed out") {
        return format!("{function} timed out: {message}");
    }
    format!("{function} failed: {kind}: {message}")
}

fn kind_of(value: &Value) -> &'static str {
    match value {
        Value::Null => "null",
        Value::Bool(_) => "a boolean",
        Value::Number(_) => "a number",
        Value::String(_) => "a string",
        Value::Array(_) => "an array",
        Value::Object(_) => "an object",
    }
}

#[async_trait]
impl Provider for FunctionProvider {
    type Properties = Value;

    async fn create(&self, ctx: &ProviderContext, properties: Value) -> Result<Step, ProviderError> {
        self.on_event(ctx, self.event(ctx, None, properties, None)).await
    }

    async fn update(
        &self,
        ctx: &ProviderContext,
        id: &str,
        properties: Value,
        old: Option<Value>,
    ) -> Result<Step, ProviderError> {
        self.on_event(ctx, self.event(ctx, Some(id), properties, Some(old.unwrap_or(Value::Object(Map::new()))))).await
    }

    async fn delete(&self, ctx: &ProviderContext, id: &str, properties: Value) -> Result<Step<()>, ProviderError> {
        Ok(self.on_event(ctx, self.event(ctx, Some(id), properties, None)).await?.map(|_| ()))
    }

    async fn poll(&self, ctx: &ProviderContext, state: Value) -> Result<Step, ProviderError> {
        if self.route.answers_itself {
            return self.look_for_answer(ctx, state).await;
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
        let answer = self.call(ctx, function.as_str(), asked).await?;
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

#[cfg(test)]
mod tests {
    use std::collections::VecDeque;
    use std::sync::Mutex;

    use cfn_once_core::aws_names::FunctionRef;
    use cfn_once_core::response::Status;
    use cfn_once_core::testing::ProviderTest;

    use super::*;

    /// A fake Lambda: answers from a script per function, and keeps every event it was given.
    #[derive(Debug, Default)]
    struct Script {
        answers: Mutex<BTreeMap<String, VecDeque<Result<Invoked, InvokeError>>>>,
        events: Mutex<Vec<(String, Value)>>,
    }

    impl Script {
        fn then(&self, function: &str, answer: Result<Invoked, InvokeError>) -> &Self {
            self.answers.lock().unwrap().entry(function.into()).or_default().push_back(answer);
            self
        }
        fn events(&self) -> Vec<(String, Value)> {
            self.events.lock().unwrap().clone()
        }
    }

    #[async_trait]
    impl FunctionInvoker for Script {
        async fn invoke(&self, function: &str, payload: Vec<u8>, _timeout_ms: u64) -> Result<Invoked, InvokeError> {
            self.events.lock().unwrap().push((function.into(), serde_json::from_slice(&payload).unwrap()));
            self.answers.lock().unwrap().get_mut(function).and_then(VecDeque::pop_front).unwrap_or_else(|| {
                Err(InvokeError::Permanent(format!("the script has no more answers for {function}")))
            })
        }
    }

    fn ok(answer: Value) -> Result<Invoked, InvokeError> {
        Ok(Invoked::Response(answer.to_string().into_bytes()))
    }

    fn kit(script: &Arc<Script>, is_complete: bool) -> ProviderTest {
        let route = FunctionRoute {
            resource_type: "Custom::Reservation".into(),
            on_event: FunctionRef::parse("on-event", "us-east-1").unwrap(),
            is_complete: is_complete.then(|| FunctionRef::parse("is-complete", "us-east-1").unwrap()),
            answers_itself: false,
        };
        let invoker: Arc<dyn FunctionInvoker> = script.clone();
        ProviderTest::new().provider("Custom::Reservation", FunctionProvider::new(route, "us-east-1", invoker))
    }

    #[test]
    fn on_event_gets_the_cdk_event_without_the_response_url_and_its_answer_is_the_answer() {
        let script = Arc::new(Script::default());
        script.then("on-event", ok(json!({"PhysicalResourceId": "r-ada", "Data": {"Size": 3}})));
        script.then("on-event", ok(json!({"Data": {"Size": 4}})));
        script.then("on-event", ok(Value::Null));
        let mut kit = kit(&script, false);
        let created = kit.create("Custom::Reservation", json!({"Name": "ada"}));
        assert_eq!(created.status(), Some(Status::Success));
        assert_eq!(created.physical_resource_id(), "r-ada");
        assert_eq!(created.data()["Size"], json!(3));
        let updated =
            kit.update("Custom::Reservation", "r-ada", json!({"Name": "ada", "Size": "4"}), json!({"Name": "ada"}));
        assert_eq!(
            (updated.status(), updated.physical_resource_id()),
            (Some(Status::Success), "r-ada"),
            "the id stays by default"
        );
        let deleted = kit.delete("Custom::Reservation", "r-ada", json!({"Name": "ada"}));
        assert_eq!(deleted.status(), Some(Status::Success));

        let events = script.events();
        assert_eq!(events.len(), 3);
        let (function, create) = &events[0];
        assert_eq!(function, "on-event");
        assert!(create.get("ResponseURL").is_none(), "the function never sees the ResponseURL: {create}");
        assert!(!create.to_string().contains("X-Amz-Signature"));
        assert_eq!(create["RequestType"], "Create");
        assert_eq!(create["ResourceType"], "Custom::Reservation");
        assert_eq!(create["ResourceProperties"]["Name"], "ada");
        assert!(create.get("PhysicalResourceId").is_none());
        assert_eq!(create["CfnOnce"]["Fence"]["Value"], 1);
        assert_eq!(create["CfnOnce"]["Region"], "us-east-1");
        assert_eq!(create["CfnOnce"]["TookOverFrom"], Value::Null);
        assert!(create["CfnOnce"]["RemainingMs"].as_u64().unwrap() > 0);
        assert_eq!(
            (events[1].1["RequestType"].as_str(), events[1].1["PhysicalResourceId"].as_str()),
            (Some("Update"), Some("r-ada"))
        );
        assert_eq!(events[1].1["OldResourceProperties"]["Name"], "ada");
        assert_eq!(events[2].1["RequestType"], "Delete");
    }

    #[test]
    fn the_properties_come_without_their_service_token() {
        let script = Arc::new(Script::default());
        script.then("on-event", ok(json!({})));
        kit(&script, false)
            .create("Custom::Reservation", json!({"ServiceToken": "arn:aws:sns:us-east-2:1:t", "Name": "al"}));
        assert_eq!(script.events()[0].1["ResourceProperties"], json!({"Name": "al"}));
    }

    #[test]
    fn a_create_without_an_id_gets_the_request_id_as_the_cdk_framework_gives() {
        let script = Arc::new(Script::default());
        script.then("on-event", ok(json!({})));
        let mut kit = kit(&script, false);
        let request = kit.create_request("Custom::Reservation", json!({"Name": "bo"}));
        let created = kit.deliver(&request);
        assert_eq!(created.physical_resource_id(), request.request["RequestId"].as_str().unwrap());
    }

    #[test]
    fn is_complete_is_polled_until_it_says_so_and_its_data_is_merged() {
        let script = Arc::new(Script::default());
        script.then("on-event", ok(json!({"PhysicalResourceId": "r-cy", "Data": {"Started": "yes", "Size": 1}})));
        script.then("is-complete", ok(json!({"IsComplete": false})));
        script.then("is-complete", ok(json!({"IsComplete": false})));
        script.then("is-complete", ok(json!({"IsComplete": true, "Data": {"Ready": "true", "Size": 2}})));
        let mut kit = kit(&script, true);
        let created = kit.create("Custom::Reservation", json!({"Name": "cy"}));
        assert_eq!(created.status(), Some(Status::Success), "{:?}", created.reason());
        assert_eq!(created.physical_resource_id(), "r-cy");
        assert_eq!(created.data()["Started"], json!("yes"));
        assert_eq!(created.data()["Ready"], json!("true"));
        assert_eq!(created.data()["Size"], json!(2), "isComplete's Data wins");
        let events = script.events();
        assert_eq!(events.iter().filter(|(f, _)| f == "is-complete").count(), 3);
        let polled = &events[1].1;
        assert_eq!(
            (polled["PhysicalResourceId"].as_str(), polled["Data"]["Started"].as_str()),
            (Some("r-cy"), Some("yes"))
        );
        assert!(polled.get("ResponseURL").is_none());
    }

    #[test]
    fn on_event_saying_not_complete_is_asked_again_when_there_is_no_is_complete() {
        let script = Arc::new(Script::default());
        script.then("on-event", ok(json!({"PhysicalResourceId": "r-di", "IsComplete": false})));
        script.then("on-event", ok(json!({"IsComplete": true, "Data": {"Done": "1"}})));
        let created = kit(&script, false).create("Custom::Reservation", json!({"Name": "di"}));
        assert_eq!((created.status(), created.physical_resource_id()), (Some(Status::Success), "r-di"));
        assert_eq!(created.data()["Done"], json!("1"));
    }

    #[test]
    fn function_errors_timeouts_and_bad_answers_are_failed_with_a_clear_reason() {
        for (answer, says) in [
            (
                Ok(Invoked::FunctionError(
                    br#"{"errorType":"RuntimeError","errorMessage":"the quota is exhausted"}"#.to_vec(),
                )),
                "on-event failed: RuntimeError: the quota is exhausted",
            ),
            (
                Ok(Invoked::FunctionError(
                    br#"{"errorType":"Sandbox.Timedout","errorMessage":"Task timed out after 3.00 seconds"}"#.to_vec(),
                )),
                "on-event timed out: Task timed out after 3.00 seconds",
            ),
            (ok(json!([1, 2])), "on-event answered an array, not a JSON object"),
            (Ok(Invoked::Response(b"<html>".to_vec())), "on-event answered something that is not JSON"),
            (ok(json!({"PhysicalResourceId": 7})), "PhysicalResourceId that is a number"),
            (ok(json!({"Data": "x"})), "Data that is a string, not an object"),
            (
                Err(InvokeError::Permanent("the Invoke of on-event failed: ResourceNotFoundException".into())),
                "ResourceNotFoundException",
            ),
            (ok(json!({"Data": {"Blob": "x".repeat(5000)}})), "4096"),
        ] {
            let script = Arc::new(Script::default());
            script.then("on-event", answer);
            let failed = kit(&script, false).create("Custom::Reservation", json!({"Name": "ed"}));
            assert_eq!(failed.status(), Some(Status::Failed), "{says}");
            assert!(failed.reason().unwrap_or_default().contains(says), "{says}: {:?}", failed.reason());
        }
    }

    #[test]
    fn a_throttled_invoke_is_tried_again() {
        let script = Arc::new(Script::default());
        script.then(
            "on-event",
            Err(InvokeError::Transient("the Invoke of on-event failed: TooManyRequestsException".into())),
        );
        script.then("on-event", Err(InvokeError::Transient("the Invoke of on-event failed: ServiceException".into())));
        script.then("on-event", ok(json!({"PhysicalResourceId": "r-fy"})));
        let created = kit(&script, false).create("Custom::Reservation", json!({"Name": "fy"}));
        assert_eq!((created.status(), created.physical_resource_id()), (Some(Status::Success), "r-fy"));
        assert_eq!(script.events().len(), 3);
    }

    #[test]
    fn an_invoke_whose_outcome_is_unknown_runs_again_only_under_a_higher_fence() {
        let script = Arc::new(Script::default());
        script.then("on-event", Err(InvokeError::Unknown("the Invoke of on-event had no answer within 900 ms".into())));
        script.then("on-event", ok(json!({"PhysicalResourceId": "r-gi"})));
        let created = kit(&script, false).create("Custom::Reservation", json!({"Name": "gi"}));
        assert_eq!((created.status(), created.physical_resource_id()), (Some(Status::Success), "r-gi"));
        let fences: Vec<(Value, Value)> = script
            .events()
            .iter()
            .map(|(_, event)| (event["CfnOnce"]["Fence"]["Value"].clone(), event["CfnOnce"]["TookOverFrom"].clone()))
            .collect();
        assert_eq!(fences, vec![(json!(1), Value::Null), (json!(2), json!(1))], "never twice under one fence");
    }

    #[test]
    fn an_is_complete_whose_outcome_is_unknown_is_polled_again_under_a_higher_fence() {
        let script = Arc::new(Script::default());
        script.then("on-event", ok(json!({"PhysicalResourceId": "r-hu"})));
        script.then("is-complete", Err(InvokeError::Unknown("the Invoke of is-complete failed: 502".into())));
        script.then("is-complete", ok(json!({"IsComplete": true})));
        let created = kit(&script, true).create("Custom::Reservation", json!({"Name": "hu"}));
        assert_eq!(created.status(), Some(Status::Success), "{:?}", created.reason());
        let fences: Vec<Value> =
            script.events().iter().map(|(_, event)| event["CfnOnce"]["Fence"]["Value"].clone()).collect();
        assert_eq!(fences, vec![json!(1), json!(2), json!(3)]);
    }

    /// A fake answer bucket: objects in memory, URLs that name their key.
    #[derive(Debug, Default)]
    struct Bucket {
        objects: Mutex<BTreeMap<String, Vec<u8>>>,
        /// An event whose answer the function PUTs only once the object was read three times.
        later: Mutex<Option<(Value, usize)>>,
    }

    #[async_trait]
    impl AnswerDrop for Bucket {
        fn bucket(&self) -> &str {
            "answers"
        }
        fn region(&self) -> &str {
            "us-east-1"
        }
        async fn upload_url(&self, key: &str, _valid_for: Duration) -> Result<answers_itself::UploadUrl, DropError> {
            Ok(answers_itself::UploadUrl::new(format!("https://answers.example/{key}?X-Amz-Signature=ours")))
        }
        async fn read(&self, object: &AnswerObject, _limit: usize) -> Result<Option<Vec<u8>>, DropError> {
            let key = object.key.as_str();
            assert_eq!((object.bucket.as_str(), object.region.as_str()), ("answers", "us-east-1"));
            let mut later = self.later.lock().unwrap();
            if let Some((event, reads)) = later.as_mut() {
                *reads += 1;
                if *reads == 3 {
                    self.put_answer(event, "FAILED", "greeting-bo");
                }
            }
            Ok(self.objects.lock().unwrap().get(key).cloned())
        }
    }

    impl Bucket {
        /// What a cfn-response function PUTs to the URL in `event`.
        fn put_answer(&self, event: &Value, status: &str, id: &str) {
            self.put(event, status, id, "told so");
        }

        fn put(&self, event: &Value, status: &str, id: &str, reason: &str) {
            let url = event["ResponseURL"].as_str().expect("a ResponseURL");
            let key = url.strip_prefix("https://answers.example/").unwrap().split('?').next().unwrap();
            let body = json!({
                "Status": status, "Reason": reason, "PhysicalResourceId": id,
                "StackId": event["StackId"], "RequestId": event["RequestId"],
                "LogicalResourceId": event["LogicalResourceId"], "Data": {"Greeting": "hello"},
            });
            self.objects.lock().unwrap().insert(key.to_owned(), body.to_string().into_bytes());
        }
    }

    /// A function that answers by itself: PUTs at once (`now`), or only when told (`later`).
    #[derive(Debug)]
    struct Responder {
        bucket: Arc<Bucket>,
        now: bool,
        fail: bool,
        /// From the second invocation on, the first one's late PUT lands right after its own.
        race: bool,
        /// The first invocation's outcome is lost: it answered (`Some(true)`) or did not run
        /// (`Some(false)`), and the caller saw neither.
        first_unseen: Option<bool>,
        events: Mutex<Vec<Value>>,
    }

    #[async_trait]
    impl FunctionInvoker for Responder {
        async fn invoke(&self, _function: &str, payload: Vec<u8>, _timeout_ms: u64) -> Result<Invoked, InvokeError> {
            let event: Value = serde_json::from_slice(&payload).unwrap();
            self.events.lock().unwrap().push(event.clone());
            let run = self.events.lock().unwrap().len();
            match self.first_unseen {
                Some(answered) if run == 1 => {
                    if answered {
                        self.bucket.put_answer(&event, "SUCCESS", "greeting-1");
                    }
                    return Err(InvokeError::Unknown("the Invoke of greeter had no answer within 900 ms".into()));
                }
                _ => {}
            }
            if self.fail {
                return Ok(Invoked::FunctionError(br#"{"errorType":"KeyError","errorMessage":"'Name'"}"#.to_vec()));
            }
            if self.now {
                let run = self.events.lock().unwrap().len();
                self.bucket.put_answer(&event, "SUCCESS", &format!("greeting-{run}"));
                if self.race && run > 1 {
                    let first = self.events.lock().unwrap()[0].clone();
                    self.bucket.put(&first, "FAILED", "greeting-1", "a stale execution's late answer");
                }
            } else {
                *self.bucket.later.lock().unwrap() = Some((event, 0));
            }
            Ok(Invoked::Response(b"null".to_vec()))
        }
    }

    fn responder_kit(now: bool, fail: bool) -> (Arc<Bucket>, Arc<Responder>, ProviderTest) {
        self_answering_kit(now, fail, true, None)
    }

    fn unseen_kit(answered: bool) -> (Arc<Responder>, ProviderTest) {
        let (_, responder, test) = self_answering_kit(true, false, false, Some(answered));
        (responder, test)
    }

    /// A self-answering route to a [`Responder`] over an in-memory answer bucket.
    fn self_answering_kit(
        now: bool,
        fail: bool,
        race: bool,
        first_unseen: Option<bool>,
    ) -> (Arc<Bucket>, Arc<Responder>, ProviderTest) {
        let bucket = Arc::new(Bucket::default());
        let responder = Arc::new(Responder {
            bucket: Arc::clone(&bucket),
            now,
            fail,
            race,
            first_unseen,
            events: Mutex::default(),
        });
        let route = FunctionRoute {
            resource_type: "Custom::Greeting".into(),
            on_event: FunctionRef::parse("greeter", "us-east-1").unwrap(),
            is_complete: None,
            answers_itself: true,
        };
        let invoker: Arc<dyn FunctionInvoker> = responder.clone();
        let answers: Arc<dyn AnswerDrop> = bucket.clone();
        let provider = FunctionProvider::new(route, "us-east-1", invoker).with_answer_drop(answers);
        (bucket, responder, ProviderTest::new().provider("Custom::Greeting", provider))
    }

    #[test]
    fn an_answer_put_by_a_function_whose_invoke_outcome_was_unknown_is_read_not_run_again() {
        // The function created the resource and answered; its Invoke's answer was lost.
        let (responder, mut kit) = unseen_kit(true);
        let created = kit.create("Custom::Greeting", json!({"Name": "ida"}));
        assert_eq!((created.status(), created.physical_resource_id()), (Some(Status::Success), "greeting-1"));
        assert_eq!(responder.events.lock().unwrap().len(), 1, "read from its object, never invoked again");
    }

    #[test]
    fn a_function_silent_since_an_unknown_invoke_runs_again_after_any_run_could_end_under_a_higher_fence() {
        let (responder, mut kit) = unseen_kit(false);
        let created = kit.create("Custom::Greeting", json!({"Name": "jo"}));
        assert_eq!((created.status(), created.physical_resource_id()), (Some(Status::Success), "greeting-2"));
        let events = responder.events.lock().unwrap().clone();
        assert_eq!(events.len(), 2);
        let (first, second) = (&events[0]["CfnOnce"]["Fence"]["Value"], &events[1]["CfnOnce"]["Fence"]["Value"]);
        assert!(second.as_u64() > first.as_u64(), "the second run's fence {second} is above the first's {first}");
        assert_ne!(events[0]["ResponseURL"], events[1]["ResponseURL"], "its own object");
    }

    #[test]
    fn a_function_that_answers_by_itself_gets_an_object_of_ours_as_its_response_url() {
        let (bucket, responder, mut kit) = responder_kit(true, false);
        let request = kit.create_request("Custom::Greeting", json!({"Name": "ada"}));
        let created = kit.deliver(&request);
        assert_eq!(created.status(), Some(Status::Success), "{:?}", created.reason());
        assert_eq!(created.physical_resource_id(), "greeting-1");
        assert_eq!(created.data()["Greeting"], json!("hello"));
        let events = responder.events.lock().unwrap().clone();
        assert_eq!(events.len(), 1, "invoked once");
        let given = events[0]["ResponseURL"].as_str().unwrap();
        assert!(given.starts_with("https://answers.example/answers/"), "{given}");
        let cloudformation = request.request["ResponseURL"].as_str().unwrap();
        assert!(!events[0].to_string().contains(cloudformation), "CloudFormation's URL is never passed on");
        assert_eq!(events[0]["ResourceProperties"]["Name"], "ada");
        assert_eq!(bucket.objects.lock().unwrap().len(), 1);
    }

    #[test]
    fn an_answer_put_after_the_invocation_is_waited_for_under_the_same_key() {
        let (_, responder, mut kit) = responder_kit(false, false);
        let failed = kit.create("Custom::Greeting", json!({"Name": "bo"}));
        assert_eq!(kit.provider_polls(), 2, "the first read after the Invoke, then two polls");
        assert_eq!(failed.status(), Some(Status::Failed));
        assert!(
            failed.reason().unwrap_or_default().contains("greeter answered FAILED: told so"),
            "{:?}",
            failed.reason()
        );
        assert_eq!(responder.events.lock().unwrap().len(), 1, "the polls read the object; the function ran once");
    }

    #[test]
    fn a_stale_executions_late_answer_lands_in_an_object_nobody_reads() {
        let (bucket, responder, mut kit) = responder_kit(true, false);
        let request = kit.create_request("Custom::Greeting", json!({"Name": "cy"}));
        // The first execution's function answers, the execution dies before its commit; the
        // taker-over invokes the function again, and the first one's late PUT lands just after.
        let answer = kit.crash_before_commit_then_take_over(&request);
        assert_eq!(responder.events.lock().unwrap().len(), 2, "one invocation per execution");
        assert_eq!(answer.status(), Some(Status::Success), "{:?}", answer.reason());
        assert_eq!(answer.physical_resource_id(), "greeting-2", "the taker-over's own answer");
        let events = responder.events.lock().unwrap().clone();
        assert_ne!(events[0]["ResponseURL"], events[1]["ResponseURL"], "an object per execution");
        assert_eq!(bucket.objects.lock().unwrap().len(), 2);
    }

    #[test]
    fn a_function_that_fails_before_answering_is_failed_with_its_error() {
        let (_, _, mut kit) = responder_kit(false, true);
        let failed = kit.create("Custom::Greeting", json!({}));
        assert_eq!(failed.status(), Some(Status::Failed));
        assert!(
            failed.reason().unwrap_or_default().contains("greeter failed: KeyError: 'Name' before it answered"),
            "{:?}",
            failed.reason()
        );
    }

    /// An object's bucket and key.
    type Place = (String, String);

    /// Answer buckets in two regions, the execution in us-east-1 and every poll after it in
    /// us-west-2 (the primary drained or gone); us-east-1's bucket readable or not from there.
    #[derive(Debug)]
    struct TwoBuckets {
        reads: Mutex<usize>,
        east_reachable: bool,
        objects: Mutex<BTreeMap<Place, Vec<u8>>>,
        /// The first execution's answer, PUT after its first read.
        late: Mutex<Option<(Place, Vec<u8>)>>,
        read_from: Mutex<Vec<String>>,
    }

    impl TwoBuckets {
        fn here(&self) -> &'static str {
            if *self.reads.lock().unwrap() == 0 { "us-east-1" } else { "us-west-2" }
        }
    }

    #[async_trait]
    impl AnswerDrop for TwoBuckets {
        fn bucket(&self) -> &str {
            if self.here() == "us-east-1" { "answers-east" } else { "answers-west" }
        }
        fn region(&self) -> &str {
            self.here()
        }
        async fn upload_url(&self, key: &str, _valid_for: Duration) -> Result<answers_itself::UploadUrl, DropError> {
            Ok(answers_itself::UploadUrl::new(format!("https://{}.example/{key}", self.bucket())))
        }
        async fn read(&self, object: &AnswerObject, _limit: usize) -> Result<Option<Vec<u8>>, DropError> {
            let first = std::mem::replace(&mut *self.reads.lock().unwrap(), 1) == 0;
            self.read_from.lock().unwrap().push(format!("{}/{}", object.region, object.bucket));
            if !first && object.region == "us-east-1" && !self.east_reachable {
                return Err(DropError::Transient("dispatch failure: connection refused".into()));
            }
            let late = if first { None } else { self.late.lock().unwrap().take() };
            if let Some((place, body)) = late {
                self.objects.lock().unwrap().insert(place, body);
            }
            Ok(self.objects.lock().unwrap().get(&(object.bucket.clone(), object.key.clone())).cloned())
        }
    }

    /// A function that answers by itself: the first invocation PUTs its answer after returning
    /// (`TwoBuckets::late`), later ones at once.
    #[derive(Debug)]
    struct Once {
        buckets: Arc<TwoBuckets>,
        events: Mutex<Vec<Value>>,
    }

    #[async_trait]
    impl FunctionInvoker for Once {
        async fn invoke(&self, _function: &str, payload: Vec<u8>, _timeout_ms: u64) -> Result<Invoked, InvokeError> {
            let event: Value = serde_json::from_slice(&payload).unwrap();
            let url = event["ResponseURL"].as_str().unwrap().strip_prefix("https://").unwrap().to_owned();
            let (host, key) = url.split_once(".example/").unwrap();
            self.events.lock().unwrap().push(event.clone());
            let body = json!({
                "Status": "SUCCESS", "PhysicalResourceId": format!("greeting-from-{host}"),
                "StackId": event["StackId"], "RequestId": event["RequestId"],
                "LogicalResourceId": event["LogicalResourceId"],
            });
            let answer = (host.to_owned(), key.to_owned());
            if self.events.lock().unwrap().len() == 1 {
                // Lands after the invocation's own read, once the polls come from elsewhere.
                *self.buckets.late.lock().unwrap() = Some((answer, body.to_string().into_bytes()));
            } else {
                self.buckets.objects.lock().unwrap().insert(answer, body.to_string().into_bytes());
            }
            Ok(Invoked::Response(b"null".to_vec()))
        }
    }

    fn two_bucket_kit(east_reachable: bool) -> (Arc<TwoBuckets>, Arc<Once>, ProviderTest) {
        let buckets = Arc::new(TwoBuckets {
            reads: Mutex::new(0),
            east_reachable,
            objects: Mutex::default(),
            late: Mutex::default(),
            read_from: Mutex::default(),
        });
        let function = Arc::new(Once { buckets: Arc::clone(&buckets), events: Mutex::default() });
        let route = FunctionRoute {
            resource_type: "Custom::Greeting".into(),
            on_event: FunctionRef::parse("greeter", "us-east-1").unwrap(),
            is_complete: None,
            answers_itself: true,
        };
        let invoker: Arc<dyn FunctionInvoker> = function.clone();
        let answers: Arc<dyn AnswerDrop> = buckets.clone();
        let provider = FunctionProvider::new(route, "us-east-1", invoker).with_answer_drop(answers);
        (buckets, function, ProviderTest::new().provider("Custom::Greeting", provider))
    }

    #[test]
    fn a_poll_from_the_other_region_reads_the_answer_where_the_function_put_it() {
        let (buckets, function, mut kit) = two_bucket_kit(true);
        let answer = kit.create("Custom::Greeting", json!({"Name": "ada"}));
        assert_eq!(answer.status(), Some(Status::Success), "{:?}", answer.reason());
        assert_eq!(answer.physical_resource_id(), "greeting-from-answers-east");
        assert_eq!(function.events.lock().unwrap().len(), 1, "the function ran once");
        let read_from = buckets.read_from.lock().unwrap().clone();
        assert!(read_from.iter().all(|place| place == "us-east-1/answers-east"), "{read_from:?}");
    }

    #[test]
    fn an_answer_in_a_region_that_cannot_be_read_is_redone_here_under_the_polls_fence() {
        let (buckets, function, mut kit) = two_bucket_kit(false);
        let answer = kit.create("Custom::Greeting", json!({"Name": "bo"}));
        assert_eq!(answer.status(), Some(Status::Success), "{:?}", answer.reason());
        assert_eq!(answer.physical_resource_id(), "greeting-from-answers-west", "the new execution's answer");
        let events = function.events.lock().unwrap().clone();
        assert_eq!(events.len(), 2, "run again once, after {UNREADABLE_POLLS_MAX} unreadable polls");
        assert!(events[1]["CfnOnce"]["Fence"]["Value"].as_u64() > events[0]["CfnOnce"]["Fence"]["Value"].as_u64());
        assert_eq!(events[1]["ResourceProperties"], events[0]["ResourceProperties"]);
        assert_eq!(events[1]["RequestType"], "Create");
        assert_ne!(events[0]["ResponseURL"], events[1]["ResponseURL"], "a new object");
        let read_from = buckets.read_from.lock().unwrap().clone();
        assert_eq!(
            read_from,
            ["us-east-1/answers-east", "us-east-1/answers-east", "us-east-1/answers-east", "us-west-2/answers-west"],
            "the execution's own read, two unreadable polls, the new execution's read"
        );
    }

    /// A function that PUTs its answer twice during its invocation, then returns.
    #[derive(Debug)]
    struct TwicePutter {
        bucket: Arc<Bucket>,
    }

    #[async_trait]
    impl FunctionInvoker for TwicePutter {
        async fn invoke(&self, _function: &str, payload: Vec<u8>, _timeout_ms: u64) -> Result<Invoked, InvokeError> {
            let event: Value = serde_json::from_slice(&payload).unwrap();
            self.bucket.put(&event, "SUCCESS", "first-put", "one");
            self.bucket.put(&event, "SUCCESS", "second-put", "two");
            Ok(Invoked::Response(b"null".to_vec()))
        }
    }

    #[test]
    fn of_two_puts_the_last_one_before_the_read_is_the_answer_and_it_is_sent_once() {
        let bucket = Arc::new(Bucket::default());
        let route = FunctionRoute {
            resource_type: "Custom::Greeting".into(),
            on_event: FunctionRef::parse("greeter", "us-east-1").unwrap(),
            is_complete: None,
            answers_itself: true,
        };
        let invoker: Arc<dyn FunctionInvoker> = Arc::new(TwicePutter { bucket: Arc::clone(&bucket) });
        let answers: Arc<dyn AnswerDrop> = bucket.clone();
        let provider = FunctionProvider::new(route, "us-east-1", invoker).with_answer_drop(answers);
        let mut kit = ProviderTest::new().provider("Custom::Greeting", provider);
        let request = kit.create_request("Custom::Greeting", json!({"Name": "gus"}));
        let answer = kit.deliver(&request);
        assert_eq!(answer.physical_resource_id(), "second-put", "the object keeps the last PUT");
        // A copy delivered later reads nothing again: the committed answer is PUT as it was.
        let again = kit.deliver(&request);
        assert_eq!(again.physical_resource_id(), "second-put");
        assert_eq!(kit.puts(&request).len(), 1, "one answer to CloudFormation");
    }
}
