//! Invoking a function synchronously: the port ([`FunctionInvoker`]), its AWS adapter
//! ([`LambdaInvoker`], which classifies a failed Invoke by whether the function certainly did
//! not run, may have run, or never will), and what an Invoke's outcome means for the provider
//! (`Caller`: retried, run again only under a higher fence, or FAILED).

use std::time::Duration;

use async_trait::async_trait;
use cfn_once_core::provider::{ProviderContext, ProviderError};
use serde_json::{Map, Value};

use super::payload::{function_error, kind_of, with_cfn_once};
use crate::aws::{Failure, classify};

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
                let failure = classify(&error);
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

/// One route's Invokes, each carrying the `CfnOnce` object of `region` and cut at the run's
/// remaining time.
#[derive(Debug, Clone, Copy)]
pub(super) struct Caller<'a> {
    /// This handler's region, as the function is told it.
    pub(super) region: &'a str,
    /// Where the Invokes go.
    pub(super) invoker: &'a dyn FunctionInvoker,
}

impl Caller<'_> {
    /// One Invoke of `function` with `event`, within the run's time.
    pub(super) async fn invoke(
        &self,
        ctx: &ProviderContext,
        function: &str,
        event: Map<String, Value>,
    ) -> Result<Invoked, ProviderError> {
        let payload = with_cfn_once(ctx, self.region, event);
        self.invoker.invoke(function, payload, ctx.remaining_ms().max(1)).await.map_err(|error| match error {
            InvokeError::Transient(why) => ProviderError::Transient(why),
            // Invoked again only under a higher fence: the function may be running still.
            InvokeError::Unknown(why) => ProviderError::Unknown(why),
            InvokeError::Permanent(why) => ProviderError::Failed(why),
        })
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
