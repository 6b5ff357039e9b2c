//! Runs a stand-in's HTTP server (the fake Runtime API, the fake ARC cluster) on hyper, through
//! the tools' own `cfn_once_local::http_server`, so no stand-in parses requests by hand.
//!
//! Each server gets a thread and a single-threaded runtime of its own: the tests that use a
//! stand-in block their own thread while they wait on it (`FakeRuntime::posted`), often inside a
//! `#[tokio::test]` whose one-thread runtime would then never run a server spawned on it. The
//! listener is bound before the caller returns, so a connection made at once waits in its backlog.

use std::future::Future;

use cfn_once_local::http_server::{self, Body, Unanswered};
use hyper::body::Incoming;
use hyper::{Request, Response};

/// Serves every connection `listener` accepts with `answer` until the test process ends.
pub(crate) fn serve_in_background<A, F>(name: &str, listener: std::net::TcpListener, answer: A)
where
    A: Fn(Request<Incoming>) -> F + Clone + Send + Sync + 'static,
    F: Future<Output = Result<Response<Body>, Unanswered>> + Send + 'static,
{
    listener.set_nonblocking(true).expect("a non-blocking listener for a stand-in server");
    let serving = move || {
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .expect("a runtime for a stand-in server");
        runtime.block_on(async move {
            let listener = tokio::net::TcpListener::from_std(listener).expect("the stand-in's listener");
            http_server::serve(listener, answer).await;
        });
    };
    std::thread::Builder::new().name(name.to_owned()).spawn(serving).expect("a thread for a stand-in server");
}
