//! A stand-in for the AWS Lambda Runtime API, so the real `cfn-once` binary can be run as Lambda
//! runs it: `lambda_runtime` polls `GET /2018-06-01/runtime/invocation/next`, gets one event
//! with its request id and deadline in headers, and posts the result to `.../response` or
//! `.../error`. Events are queued by the test; every call is recorded with when it arrived, so
//! tests can check what the runtime did and benchmarks can time it. A benchmark that names the
//! function's process (`watch`) also gets the process's CPU time at each call, read from
//! `/proc/<pid>/task/*/schedstat` in nanoseconds: a process blocked in `next` is idle, so the
//! difference between two calls is what it spent in between.

use std::collections::{BTreeMap, VecDeque};
use std::net::TcpListener;
use std::sync::{Arc, Condvar, Mutex, MutexGuard, PoisonError};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use cfn_once_local::http_server::{Body, Unanswered, json_reply, read_body};
use hyper::body::Incoming;
use hyper::{Method, Request, Response, StatusCode};
use tokio::sync::Notify;

use crate::background_server::serve_in_background;

const PREFIX: &str = "/2018-06-01/runtime";
/// The longest body the stand-in reads (a longer one is answered 413); the head's limit is
/// the tools' server's.
const BODY_BYTES_MAX: usize = 16 * 1024 * 1024;

/// What the function posted for one invocation.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Posted {
    Response(Vec<u8>),
    Error(Vec<u8>),
}

/// One call the runtime made, with when it arrived.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Call {
    /// `GET .../invocation/next`.
    Next,
    /// An event was handed out in answer to a `next`.
    Handed(String),
    /// `POST .../invocation/{id}/response` or `.../error`.
    Posted(String),
    /// `POST .../init/error`.
    InitError(Vec<u8>),
}

#[derive(Debug, Default)]
struct State {
    queued: VecDeque<(String, Vec<u8>, u64)>,
    posted: BTreeMap<String, Posted>,
    calls: Vec<(Instant, Call)>,
    /// The watched process, and its CPU time at each call (parallel to `calls`).
    watched: Option<u32>,
    cpu_ns: Vec<Option<u64>>,
}

impl State {
    fn record(&mut self, at: Instant, call: Call) {
        let cpu = self.watched.and_then(cpu_ns);
        self.calls.push((at, call));
        self.cpu_ns.push(cpu);
    }
}

/// The CPU time of every live thread of `pid`, in ns (`None` once the process is gone).
pub fn cpu_ns(pid: u32) -> Option<u64> {
    let tasks = std::fs::read_dir(format!("/proc/{pid}/task")).ok()?;
    let mut total = 0;
    for task in tasks.flatten() {
        let stat = std::fs::read_to_string(task.path().join("schedstat")).unwrap_or_default();
        total += stat.split_whitespace().next().and_then(|ns| ns.parse::<u64>().ok()).unwrap_or(0);
    }
    Some(total)
}

#[derive(Debug, Default)]
struct Shared {
    state: Mutex<State>,
    /// Told when something is posted, for the test's thread waiting in [`FakeRuntime::posted`].
    changed: Condvar,
    /// Told when an event is queued, for the server's `next` calls waiting for one.
    queued: Notify,
}

impl Shared {
    fn lock(&self) -> MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

/// The stand-in; it serves until the test process ends.
#[derive(Debug, Clone)]
pub struct FakeRuntime {
    address: String,
    shared: Arc<Shared>,
}

impl FakeRuntime {
    /// Listens on a free loopback port.
    pub fn start() -> Self {
        let listener = TcpListener::bind("127.0.0.1:0").expect("bind the fake Runtime API");
        let address = listener.local_addr().expect("address").to_string();
        let shared = Arc::new(Shared::default());
        let serving = Arc::clone(&shared);
        serve_in_background("fake-runtime-api", listener, move |request| {
            let shared = Arc::clone(&serving);
            async move { answer(request, &shared).await }
        });
        Self { address, shared }
    }

    /// `host:port`, the value of `AWS_LAMBDA_RUNTIME_API`.
    pub fn address(&self) -> &str {
        &self.address
    }

    /// Queues an invocation with `body` and a deadline `budget_ms` from now.
    pub fn invoke(&self, request_id: &str, body: impl Into<Vec<u8>>, budget_ms: u64) {
        let deadline_ms = epoch_ms() + budget_ms;
        self.shared.lock().queued.push_back((request_id.to_owned(), body.into(), deadline_ms));
        self.shared.queued.notify_waiters();
    }

    /// What the function posted for `request_id`, waiting up to `timeout`.
    pub fn posted(&self, request_id: &str, timeout: Duration) -> Option<Posted> {
        let started = Instant::now();
        let mut state = self.shared.lock();
        loop {
            if let Some(posted) = state.posted.get(request_id) {
                return Some(posted.clone());
            }
            let left = timeout.checked_sub(started.elapsed())?;
            state = self.shared.changed.wait_timeout(state, left).unwrap_or_else(PoisonError::into_inner).0;
        }
    }

    /// Every call so far, with when it arrived.
    pub fn calls(&self) -> Vec<(Instant, Call)> {
        self.shared.lock().calls.clone()
    }

    /// From now on, reads `pid`'s CPU time at each call.
    pub fn watch(&self, pid: u32) {
        self.shared.lock().watched = Some(pid);
    }

    /// Every call so far, with when it arrived and the watched process's CPU time then.
    pub fn timed_calls(&self) -> Vec<(Instant, Call, Option<u64>)> {
        let state = self.shared.lock();
        state.calls.iter().zip(&state.cpu_ns).map(|((at, call), cpu)| (*at, call.clone(), *cpu)).collect()
    }
}

fn epoch_ms() -> u64 {
    SystemTime::now().duration_since(UNIX_EPOCH).map_or(0, |d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX))
}

/// Answers one call. Its arrival is taken once its body is read, as a call is made when it
/// has been sent whole.
async fn answer(request: Request<Incoming>, shared: &Shared) -> Result<Response<Body>, Unanswered> {
    let (head, body) = request.into_parts();
    let body = match read_body(body, BODY_BYTES_MAX).await {
        Ok(body) => body.to_vec(),
        Err(refusal) => return Ok(refusal),
    };
    let now = Instant::now();
    let rest = head.uri.path().strip_prefix(PREFIX).unwrap_or_default();
    let accepted = || json_reply(StatusCode::ACCEPTED, &[], "{}");
    Ok(match (&head.method, rest) {
        (&Method::GET, "/invocation/next") => next(now, shared).await,
        (&Method::POST, "/init/error") => {
            shared.lock().record(now, Call::InitError(body));
            shared.changed.notify_all();
            accepted()
        }
        (&Method::POST, rest) => {
            let parts: Vec<&str> = rest.trim_start_matches('/').split('/').collect();
            match parts.as_slice() {
                ["invocation", request_id, kind @ ("response" | "error")] => {
                    let posted = if *kind == "response" { Posted::Response(body) } else { Posted::Error(body) };
                    let mut state = shared.lock();
                    state.record(now, Call::Posted((*request_id).to_owned()));
                    state.posted.insert((*request_id).to_owned(), posted);
                    drop(state);
                    shared.changed.notify_all();
                    accepted()
                }
                _ => json_reply(StatusCode::NOT_FOUND, &[], "{}"),
            }
        }
        _ => json_reply(StatusCode::NOT_FOUND, &[], "{}"),
    })
}

/// `GET .../invocation/next`, arrived at `now`: the next queued event, once there is one.
async fn next(now: Instant, shared: &Shared) -> Response<Body> {
    shared.lock().record(now, Call::Next);
    let (request_id, event, deadline_ms) = loop {
        // Registered before the queue is looked at, so an event queued in between still wakes it.
        let mut queued = std::pin::pin!(shared.queued.notified());
        queued.as_mut().enable();
        {
            let mut state = shared.lock();
            if let Some(next) = state.queued.pop_front() {
                state.record(Instant::now(), Call::Handed(next.0.clone()));
                break next;
            }
        }
        queued.await;
    };
    let deadline_ms = deadline_ms.to_string();
    let headers = [
        ("Lambda-Runtime-Aws-Request-Id", request_id.as_str()),
        ("Lambda-Runtime-Deadline-Ms", deadline_ms.as_str()),
        ("Lambda-Runtime-Invoked-Function-Arn", "arn:aws:lambda:us-east-1:123456789012:function:cfn-once"),
        ("Lambda-Runtime-Trace-Id", "Root=1-00000000-000000000000000000000000;Sampled=0"),
    ];
    json_reply(StatusCode::OK, &headers, event)
}
