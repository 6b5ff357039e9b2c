//! A local Lambda service speaking Lambda's Invoke API, in front of functions run as Lambda runs
//! them ([`LocalFunction`]: real processes under a local Runtime API).
//!
//! moto runs Lambda functions only in Docker, which this project's machines lack; this is what the
//! real `aws-sdk-lambda` client talks to instead, with only the endpoint changed:
//! `POST /2015-03-31/functions/{FunctionName}/invocations` (a name, a partial or a full ARN; a
//! `Qualifier` is accepted and ignored: every function is `$LATEST`), with `X-Amz-Invocation-Type`
//! `RequestResponse` (the default), `Event` or `DryRun`. As Lambda answers:
//!
//! * a response: `200` with the function's payload and `X-Amz-Executed-Version: $LATEST`;
//! * a function error, a timeout, a crash: `200` with `X-Amz-Function-Error: Unhandled` and the
//!   error document Lambda writes (`errorType`, `errorMessage`): the runtime's own for an error,
//!   `Sandbox.Timedout` "Task timed out after N.NN seconds" for a timeout, `Runtime.ExitError`
//!   for a process that died;
//! * a function that does not exist: `404` `ResourceNotFoundException`;
//! * every sandbox busy (the function's reserved concurrency reached), or a throttle injected with
//!   [`InvokeApi::throttle_next`]: `429` `TooManyRequestsException`, as Lambda answers at once
//!   rather than queueing a synchronous invoke.
//!
//! `GET /2015-03-31/functions/{FunctionName}/configuration` (`GetFunctionConfiguration`) answers
//! the function's name, ARN and `Timeout` (its timeout in whole seconds, rounded up), which the
//! handler reads to wait as long as the function can run.
//!
//! Not played: signatures (any credentials are accepted), aliases and versions, `LogType: Tail`.
//! A payload over 6 MB is answered 413 (a request the server cannot read gets a 4xx, see
//! `http_server.rs`).

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex, PoisonError};

use anyhow::Context;
use hyper::body::Incoming;
use hyper::{Method, Request, Response, StatusCode};
use tokio::net::TcpListener;

use crate::http_server::{self, Body, json_reply, read_body};
use crate::lambda_service::{Invoked, LocalFunction};

const PREFIX: &str = "/2015-03-31/functions/";
/// The longest payload an Invoke carries (Lambda's synchronous payload limit is 6 MB).
const PAYLOAD_BYTES_MAX: usize = 6 * 1024 * 1024;

/// The Invoke API in front of some local functions, on a loopback port until dropped.
pub struct InvokeApi {
    endpoint: String,
    shared: Arc<Shared>,
    server: tokio::task::JoinHandle<()>,
}

struct Shared {
    functions: BTreeMap<String, Arc<LocalFunction>>,
    /// Invokes still to be refused with a 429, by function name.
    throttles: Mutex<BTreeMap<String, u32>>,
    /// Invokes answered, by function name (throttled ones included).
    invokes: Mutex<BTreeMap<String, u32>>,
}

impl std::fmt::Debug for InvokeApi {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("InvokeApi")
            .field("endpoint", &self.endpoint)
            .field("functions", &self.shared.functions.keys().collect::<Vec<_>>())
            .finish()
    }
}

impl Drop for InvokeApi {
    fn drop(&mut self) {
        self.server.abort();
    }
}

impl InvokeApi {
    /// Serves `functions` (by their names) on a free loopback port.
    pub async fn start(functions: Vec<LocalFunction>) -> anyhow::Result<Self> {
        let listener = TcpListener::bind("127.0.0.1:0").await.context("cannot bind the Invoke API's port")?;
        let endpoint = format!("http://{}", listener.local_addr()?);
        let shared = Arc::new(Shared {
            functions: functions.into_iter().map(|f| (f.spec().name.clone(), Arc::new(f))).collect(),
            throttles: Mutex::default(),
            invokes: Mutex::default(),
        });
        let serving = Arc::clone(&shared);
        let server = tokio::spawn(http_server::serve(listener, move |request| {
            let shared = Arc::clone(&serving);
            async move { Ok(answer(&shared, request).await) }
        }));
        Ok(Self { endpoint, shared, server })
    }

    /// The endpoint to give the Lambda client (`http://127.0.0.1:port`).
    pub fn endpoint(&self) -> &str {
        &self.endpoint
    }

    /// The function called `name`, to inject faults into or read its counts.
    pub fn function(&self, name: &str) -> Option<&Arc<LocalFunction>> {
        self.shared.functions.get(name)
    }

    /// The next `times` invokes of `name` are refused with a 429, as Lambda throttles.
    pub fn throttle_next(&self, name: &str, times: u32) {
        *self.shared.throttles.lock().unwrap_or_else(PoisonError::into_inner).entry(name.to_owned()).or_default() +=
            times;
    }

    /// Invokes of `name` answered so far, throttled ones included.
    pub fn invokes(&self, name: &str) -> u32 {
        self.shared.invokes.lock().unwrap_or_else(PoisonError::into_inner).get(name).copied().unwrap_or(0)
    }
}

/// The function a path names: `/2015-03-31/functions/{name or ARN}/invocations[?Qualifier=…]`.
fn function_name(path: &str) -> Option<String> {
    let rest = path.strip_prefix(PREFIX)?;
    let (name, tail) = rest.split_once('/')?;
    if !(tail == "invocations" || tail.starts_with("invocations?")) {
        return None;
    }
    let name = percent_decode(name);
    // arn:aws:lambda:region:account:function:name[:qualifier], or account:function:name.
    let name = match name.split(':').collect::<Vec<_>>().as_slice() {
        [.., "function", name] | [.., "function", name, _] => (*name).to_owned(),
        _ => name,
    };
    Some(name)
}

/// The function whose configuration a path asks for: `/2015-03-31/functions/{name or
/// ARN}/configuration[?Qualifier=…]`.
fn configuration_of(path: &str) -> Option<String> {
    let (name, tail) = path.strip_prefix(PREFIX)?.split_once('/')?;
    (tail == "configuration" || tail.starts_with("configuration?"))
        .then(|| function_name(&format!("{PREFIX}{name}/invocations")))
        .flatten()
}

/// `GetFunctionConfiguration`'s answer for `name`, or Lambda's 404.
fn configuration(shared: &Shared, name: &str) -> Response<Body> {
    let Some(function) = shared.functions.get(name) else {
        return error(
            StatusCode::NOT_FOUND,
            "ResourceNotFoundException",
            serde_json::json!({"Type": "User", "message": format!("Function not found: {name}")}),
        );
    };
    let spec = function.spec();
    let body = serde_json::json!({
        "FunctionName": spec.name,
        "FunctionArn": format!("arn:aws:lambda:{}:123456789012:function:{}", spec.region, spec.name),
        "Timeout": spec.timeout_ms.div_ceil(1000),
        "Version": "$LATEST",
        "State": "Active",
    });
    json_reply(StatusCode::OK, &[], body.to_string())
}

fn percent_decode(text: &str) -> String {
    let bytes = text.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        let hex = || std::str::from_utf8(bytes.get(i + 1..i + 3)?).ok().and_then(|h| u8::from_str_radix(h, 16).ok());
        match (bytes[i], hex()) {
            (b'%', Some(byte)) => {
                out.push(byte);
                i += 3;
            }
            (byte, _) => {
                out.push(byte);
                i += 1;
            }
        }
    }
    String::from_utf8_lossy(&out).into_owned()
}

fn error(status: StatusCode, kind: &str, body: serde_json::Value) -> Response<Body> {
    json_reply(status, &[("x-amzn-ErrorType", kind)], body.to_string())
}

async fn answer(shared: &Shared, request: Request<Incoming>) -> Response<Body> {
    let (head, body) = request.into_parts();
    // Read whole before it is routed, as a client expects of a server that keeps its connection
    // alive.
    let payload = match read_body(body, PAYLOAD_BYTES_MAX).await {
        Ok(payload) => payload.to_vec(),
        Err(refusal) => return refusal,
    };
    let target = head.uri.path_and_query().map_or("", |target| target.as_str());
    if head.method == Method::GET
        && let Some(name) = configuration_of(target)
    {
        return configuration(shared, &name);
    }
    let Some(name) = (head.method == Method::POST).then(|| function_name(target)).flatten() else {
        return error(
            StatusCode::NOT_FOUND,
            "UnknownOperationException",
            serde_json::json!({"message": "Unknown operation"}),
        );
    };
    let Some(function) = shared.functions.get(&name) else {
        return error(
            StatusCode::NOT_FOUND,
            "ResourceNotFoundException",
            serde_json::json!({"Type": "User", "message": format!("Function not found: {name}")}),
        );
    };
    *shared.invokes.lock().unwrap_or_else(PoisonError::into_inner).entry(name.clone()).or_default() += 1;
    let injected = {
        let mut throttles = shared.throttles.lock().unwrap_or_else(PoisonError::into_inner);
        match throttles.get_mut(&name) {
            Some(left) if *left > 0 => {
                *left -= 1;
                true
            }
            _ => false,
        }
    };
    // Lambda refuses a synchronous invoke at once when the function's concurrency is in use.
    if injected || function.busy() >= function.spec().concurrency_max {
        return error(
            StatusCode::TOO_MANY_REQUESTS,
            "TooManyRequestsException",
            serde_json::json!({
                "Reason": "ReservedFunctionConcurrentInvocationLimitExceeded",
                "Type": "User",
                "message": "Rate Exceeded.",
            }),
        );
    }
    let invocation_type = head.headers.get("x-amz-invocation-type").and_then(|value| value.to_str().ok());
    match invocation_type.unwrap_or("RequestResponse") {
        "DryRun" => return json_reply(StatusCode::NO_CONTENT, &[], ""),
        "Event" => {
            let function = Arc::clone(function);
            tokio::spawn(async move {
                let _ = function.invoke(payload).await;
            });
            return json_reply(StatusCode::ACCEPTED, &[], "");
        }
        _ => {}
    }
    let timeout_s = function.spec().timeout_ms as f64 / 1000.0;
    let executed = ("X-Amz-Executed-Version", "$LATEST");
    let unhandled = [("X-Amz-Function-Error", "Unhandled"), executed];
    // The invocation runs to its end whether or not its caller waits, as in Lambda: a caller
    // that gives up (a timeout, a crash) does not take back a function already running.
    let running = Arc::clone(function);
    let invoked = tokio::spawn(async move { running.invoke(payload).await }).await.unwrap_or(Invoked::Crashed);
    match invoked {
        Invoked::Response(payload) => json_reply(StatusCode::OK, &[executed], payload),
        Invoked::Error(payload) => json_reply(StatusCode::OK, &unhandled, payload),
        Invoked::TimedOut => json_reply(
            StatusCode::OK,
            &unhandled,
            serde_json::json!({
                "errorType": "Sandbox.Timedout",
                "errorMessage": format!("Task timed out after {timeout_s:.2} seconds"),
            })
            .to_string(),
        ),
        Invoked::Crashed => json_reply(
            StatusCode::OK,
            &unhandled,
            serde_json::json!({
                "errorType": "Runtime.ExitError",
                "errorMessage": "Runtime exited without providing a reason",
            })
            .to_string(),
        ),
    }
}

#[cfg(test)]
mod tests {
    use super::function_name;

    #[test]
    fn a_function_is_named_by_its_name_or_its_arn() {
        assert_eq!(function_name("/2015-03-31/functions/on-event/invocations").as_deref(), Some("on-event"));
        assert_eq!(
            function_name(
                "/2015-03-31/functions/arn%3Aaws%3Alambda%3Aus-east-1%3A123456789012%3Afunction%3Aon-event/invocations"
            )
            .as_deref(),
            Some("on-event")
        );
        assert_eq!(
            function_name(
                "/2015-03-31/functions/arn:aws:lambda:us-east-1:123456789012:function:on-event:live/invocations"
            )
            .as_deref(),
            Some("on-event")
        );
        assert_eq!(
            function_name("/2015-03-31/functions/on-event/invocations?Qualifier=1").as_deref(),
            Some("on-event")
        );
        assert_eq!(function_name("/2015-03-31/functions/on-event/configuration"), None);
        assert_eq!(
            super::configuration_of("/2015-03-31/functions/on-event/configuration").as_deref(),
            Some("on-event")
        );
        assert_eq!(
            super::configuration_of(
                "/2015-03-31/functions/arn%3Aaws%3Alambda%3Aus-east-1%3A1%3Afunction%3Aon-event/configuration"
            )
            .as_deref(),
            Some("on-event")
        );
        assert_eq!(super::configuration_of("/2015-03-31/functions/on-event/invocations"), None);
        assert_eq!(function_name("/2018-06-01/runtime/invocation/next"), None);
    }
}
