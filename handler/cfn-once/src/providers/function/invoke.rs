//! Invoking a function synchronously: the port ([`FunctionInvoker`]), its AWS adapter
//! ([`LambdaInvoker`], which classifies a failed Invoke by whether the function certainly did
//! not run, may have run, or never will), and what an Invoke's outcome means for the provider
//! (`Caller`: retried, run again only under a higher fence, or FAILED). How long an Invoke
//! waits is the function's own timeout, never the run's (`timeouts.rs`).

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use async_trait::async_trait;
use cfn_once_core::provider::{ProviderContext, ProviderError};
use serde_json::{Map, Value};

use super::payload::{function_error, kind_of, with_cfn_once};
use super::timeouts::{Plan, fits, plan};
use crate::aws::{Failure, Refresh, classify, classify_read};

/// How long reading a function's configuration may take.
const CONFIGURATION_TIMEOUT_MS: u64 = 5_000;

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
    /// The function certainly did not run, and nothing this invocation can do changes that
    /// now: the Invoke was refused for credentials that expired and that nothing in this
    /// process refreshes (`aws::Refresh`). A later invocation tries again
    /// (`ProviderError::Deferred`).
    #[error("{0}")]
    Deferred(String),
    /// Will not work by trying again: no such function, access denied, a payload refused.
    #[error("{0}")]
    Permanent(String),
}

/// Invokes a function synchronously (the port; `LambdaInvoker` is the AWS adapter).
#[async_trait]
pub trait FunctionInvoker: Send + Sync + std::fmt::Debug {
    /// Invokes `function` (a name or ARN) with `payload`, giving up after `timeout_ms`.
    async fn invoke(&self, function: &str, payload: Vec<u8>, timeout_ms: u64) -> Result<Invoked, InvokeError>;

    /// `function`'s own timeout (Lambda stops it then), in ms.
    async fn timeout_ms(&self, function: &str) -> Result<u64, InvokeError>;
}

/// The AWS Lambda Invoke API through `aws-sdk-lambda`, one attempt per call (the worker retries),
/// and each function's timeout from `GetFunctionConfiguration`, read once per function and kept
/// for the life of the process (a function whose timeout changes is served with the new one by
/// the next execution environment). A call refused for expired credentials is deferred unless
/// the SDK's credentials refresh (`aws::Refresh`).
#[derive(Debug, Clone)]
pub struct LambdaInvoker {
    client: aws_sdk_lambda::Client,
    timeouts_ms: Arc<Mutex<BTreeMap<String, u64>>>,
    refresh: Refresh,
}

impl LambdaInvoker {
    /// A client from the function's AWS configuration (its HTTPS client and region).
    pub fn new(sdk: &aws_config::SdkConfig) -> Self {
        let config = aws_sdk_lambda::config::Builder::from(sdk)
            .retry_config(aws_sdk_lambda::config::retry::RetryConfig::standard().with_max_attempts(1))
            .build();
        Self {
            client: aws_sdk_lambda::Client::from_conf(config),
            timeouts_ms: Arc::default(),
            refresh: Refresh::of(sdk.credentials_provider()),
        }
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
                let failure = self.refresh.reconsider(classify(&error)).await;
                // A function being updated or not ready yet refused the Invoke unrun, and will
                // take one shortly.
                let busy = matches!(
                    error.as_service_error(),
                    Some(Sdk::ResourceConflictException(_) | Sdk::ResourceNotReadyException(_))
                );
                let why = |text: String| format!("the Invoke of {function} failed: {text}");
                return Err(match failure {
                    _ if busy => InvokeError::Transient(why(failure.into_text())),
                    Failure::NotApplied(text) => InvokeError::Transient(why(text)),
                    Failure::Deferred(text) => InvokeError::Deferred(why(text)),
                    Failure::Unknown(text) => InvokeError::Unknown(why(text)),
                    Failure::Permanent(text) => InvokeError::Permanent(why(text)),
                });
            }
        };
        let payload = output.payload.map(|blob| blob.into_inner()).unwrap_or_default();
        Ok(if output.function_error.is_some() { Invoked::FunctionError(payload) } else { Invoked::Response(payload) })
    }

    async fn timeout_ms(&self, function: &str) -> Result<u64, InvokeError> {
        if let Some(known) = self.timeouts_ms.lock().unwrap_or_else(PoisonError::into_inner).get(function) {
            return Ok(*known);
        }
        let why = |text: String| format!("could not read {function}'s configuration (its timeout): {text}");
        let call = self.client.get_function_configuration().function_name(function).send();
        let output = match tokio::time::timeout(Duration::from_millis(CONFIGURATION_TIMEOUT_MS), call).await {
            // A read: nothing ran, and it can be tried again.
            Err(_) => {
                return Err(InvokeError::Transient(why(format!("no answer within {CONFIGURATION_TIMEOUT_MS} ms"))));
            }
            Ok(Ok(output)) => output,
            Ok(Err(error)) => {
                // A read: whatever its outcome, nothing ran.
                return Err(match self.refresh.reconsider(classify_read(&error)).await {
                    Failure::Deferred(text) => InvokeError::Deferred(why(text)),
                    Failure::Permanent(text) => InvokeError::Permanent(why(format!(
                        "{text} (the handler needs lambda:GetFunctionConfiguration on the function, next to lambda:InvokeFunction)"
                    ))),
                    other => InvokeError::Transient(why(other.into_text())),
                });
            }
        };
        // Lambda's default, 3 s, when the configuration does not say.
        let timeout_ms = u64::try_from(output.timeout.unwrap_or(3)).unwrap_or(3).max(1) * 1000;
        self.timeouts_ms.lock().unwrap_or_else(PoisonError::into_inner).insert(function.to_owned(), timeout_ms);
        Ok(timeout_ms)
    }
}

/// One route's Invokes, each carrying the `CfnOnce` object of `region` and waiting as long as
/// the function can run (`timeouts::plan`).
#[derive(Debug, Clone, Copy)]
pub(super) struct Caller<'a> {
    /// This handler's region, as the function is told it.
    pub(super) region: &'a str,
    /// Where the Invokes go.
    pub(super) invoker: &'a dyn FunctionInvoker,
    /// Whether the route's function answers by itself (then an Invoke it cannot wait for is
    /// cut, and its answer read from its object).
    pub(super) answers_itself: bool,
}

impl Caller<'_> {
    /// One Invoke of `function` with `event`, within the run's time.
    pub(super) async fn invoke(
        &self,
        ctx: &ProviderContext,
        function: &str,
        event: Map<String, Value>,
    ) -> Result<Invoked, ProviderError> {
        let provider_error = |error| match error {
            InvokeError::Transient(why) => ProviderError::Transient(why),
            // Invoked again only under a higher fence: the function may be running still.
            InvokeError::Unknown(why) => ProviderError::Unknown(why),
            // Nothing ran: a later invocation, whose credentials may be new, invokes it.
            InvokeError::Deferred(why) => ProviderError::Deferred(why),
            InvokeError::Permanent(why) => ProviderError::Failed(why),
        };
        let function_timeout_ms = self.invoker.timeout_ms(function).await.map_err(|error| match error {
            // Reading a configuration runs nothing.
            InvokeError::Unknown(why) => ProviderError::Transient(why),
            other => provider_error(other),
        })?;
        let timeout_ms =
            match plan(function, function_timeout_ms, ctx.remaining_ms(), ctx.ended_by, self.answers_itself) {
                Plan::Invoke { timeout_ms } => timeout_ms,
                Plan::Refuse(why) => return Err(ProviderError::Failed(why)),
            };
        let payload = with_cfn_once(ctx, self.region, event);
        self.invoker.invoke(function, payload, timeout_ms).await.map_err(provider_error)
    }

    /// One call of `function` with `event`: its answer as a JSON object, or why not.
    pub(super) async fn call(
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
}

/// Checks at start that every function of `functions` fits in a handler whose Lambda timeout is
/// `handler_timeout_s` (`timeouts::fits`). A timeout that cannot be learned now is logged and checked
/// again when the function is first invoked.
pub async fn check_at_start<'a>(
    functions: impl IntoIterator<Item = &'a str>,
    invoker: &dyn FunctionInvoker,
    handler_timeout_s: u64,
    reserve_ms: u64,
) -> Result<(), String> {
    let mut problems = Vec::new();
    for function in functions {
        match invoker.timeout_ms(function).await {
            Ok(timeout_ms) => {
                if let Err(why) = fits(function, timeout_ms, handler_timeout_s, reserve_ms) {
                    problems.push(why);
                }
            }
            Err(
                InvokeError::Permanent(why)
                | InvokeError::Transient(why)
                | InvokeError::Unknown(why)
                | InvokeError::Deferred(why),
            ) => {
                tracing::warn!(function, why, "could not learn the function's timeout at start: its first Invoke will");
            }
        }
    }
    if problems.is_empty() { Ok(()) } else { Err(problems.join("; ")) }
}
