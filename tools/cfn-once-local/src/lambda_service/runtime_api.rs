//! One sandbox's Runtime API, as Lambda serves it to the process in the sandbox: `GET
//! /2018-06-01/runtime/invocation/next` hands out the one invocation assigned to the sandbox
//! (its request id, its deadline in `Lambda-Runtime-Deadline-Ms`, the function's ARN), and
//! `POST .../invocation/{id}/response`, `.../invocation/{id}/error` and `.../init/error` end it.
//!
//! The sandbox ([`Sandbox`]) is what [`LocalFunction`](super::LocalFunction) and this server share:
//! the channel invocations are assigned through, the invocation in flight that an answer or the
//! process's death finishes, and the kill of its process. Served with hyper (a request the server
//! cannot read gets a 4xx, see `http_server.rs`); a body is at most Lambda's 6 MB.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};

use hyper::body::Incoming;
use hyper::{Method, Request, Response, StatusCode};
use tokio::net::TcpListener;
use tokio::sync::{mpsc, oneshot};

use super::{Invoked, lock};
use crate::http_server::{self, Body, Unanswered, json_reply, read_body};

const PREFIX: &str = "/2018-06-01/runtime";
/// The longest body the Runtime API reads (Lambda's payload limit is 6 MB).
const MESSAGE_BYTES_MAX: usize = 6 * 1024 * 1024;

/// One invocation handed to a sandbox.
pub(super) struct Assignment {
    pub(super) request_id: String,
    pub(super) payload: Vec<u8>,
    pub(super) deadline_ms: u64,
}

/// One process and its Runtime API.
pub(super) struct Sandbox {
    pub(super) id: u64,
    pub(super) assign: mpsc::Sender<Assignment>,
    /// The invocation in flight, answered by the Runtime API or by the process's death.
    pub(super) in_flight: Mutex<Option<oneshot::Sender<Invoked>>>,
    pub(super) kill: Mutex<Option<oneshot::Sender<()>>>,
    pub(super) alive: AtomicBool,
}

impl Sandbox {
    pub(super) fn finish(&self, outcome: Invoked) {
        if let Some(waiting) = lock(&self.in_flight).take() {
            let _ = waiting.send(outcome);
        }
    }

    pub(super) fn kill(&self) -> bool {
        match lock(&self.kill).take() {
            Some(kill) => kill.send(()).is_ok(),
            None => false,
        }
    }

    pub(super) fn is_alive(&self) -> bool {
        self.alive.load(Ordering::SeqCst)
    }
}

/// What the Runtime API of one sandbox holds.
struct RuntimeApi {
    /// One `next` at a time takes the sandbox's assignments.
    assignments: tokio::sync::Mutex<mpsc::Receiver<Assignment>>,
    sandbox: Arc<Sandbox>,
    arn: String,
    /// Told at the process's first `next`: it has started.
    first_next: Mutex<Option<oneshot::Sender<()>>>,
}

/// Serves one sandbox's Runtime API on `listener` until the task running it is aborted (when
/// its process ends), which closes its connections too.
pub(super) async fn serve(
    listener: TcpListener,
    assignments: mpsc::Receiver<Assignment>,
    sandbox: Arc<Sandbox>,
    arn: String,
    first_next: oneshot::Sender<()>,
) {
    let api = Arc::new(RuntimeApi {
        assignments: tokio::sync::Mutex::new(assignments),
        sandbox,
        arn,
        first_next: Mutex::new(Some(first_next)),
    });
    http_server::serve(listener, move |request| {
        let api = Arc::clone(&api);
        async move { api.answer(request).await }
    })
    .await;
}

impl RuntimeApi {
    async fn answer(&self, request: Request<Incoming>) -> Result<Response<Body>, Unanswered> {
        let (head, body) = request.into_parts();
        // Read whole before it is routed, as a client expects of a server that keeps its
        // connection alive.
        let body = match read_body(body, MESSAGE_BYTES_MAX).await {
            Ok(body) => body.to_vec(),
            Err(refusal) => return Ok(refusal),
        };
        let rest = head.uri.path().strip_prefix(PREFIX).unwrap_or_default();
        let accepted = || json_reply(StatusCode::ACCEPTED, &[], "{}");
        Ok(match (&head.method, rest) {
            (&Method::GET, "/invocation/next") => return self.next().await,
            (&Method::POST, "/init/error") => {
                self.sandbox.finish(Invoked::Error(body));
                accepted()
            }
            (&Method::POST, rest) => {
                let parts: Vec<&str> = rest.trim_start_matches('/').split('/').collect();
                match parts.as_slice() {
                    ["invocation", _request_id, "response"] => {
                        self.sandbox.finish(Invoked::Response(body));
                        accepted()
                    }
                    ["invocation", _request_id, "error"] => {
                        self.sandbox.finish(Invoked::Error(body));
                        accepted()
                    }
                    _ => json_reply(StatusCode::NOT_FOUND, &[], "{}"),
                }
            }
            _ => json_reply(StatusCode::NOT_FOUND, &[], "{}"),
        })
    }

    /// The next invocation, once one is assigned; the connection closes unanswered when the
    /// sandbox can have none.
    async fn next(&self) -> Result<Response<Body>, Unanswered> {
        if let Some(ready) = lock(&self.first_next).take() {
            let _ = ready.send(());
        }
        let Some(assignment) = self.assignments.lock().await.recv().await else { return Err(Unanswered) };
        let deadline_ms = assignment.deadline_ms.to_string();
        let headers = [
            ("Lambda-Runtime-Aws-Request-Id", assignment.request_id.as_str()),
            ("Lambda-Runtime-Deadline-Ms", deadline_ms.as_str()),
            ("Lambda-Runtime-Invoked-Function-Arn", self.arn.as_str()),
            ("Lambda-Runtime-Trace-Id", "Root=1-00000000-000000000000000000000000;Sampled=0"),
        ];
        Ok(json_reply(StatusCode::OK, &headers, assignment.payload))
    }
}
