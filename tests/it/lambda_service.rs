//! The local Lambda service (`cfn_once_local::lambda_service`) behaves as Lambda does for
//! the things `make soak` relies on: one invocation at a time per process, warm processes
//! reused, a concurrency limit, the deadline header, processes killed at their timeout or on
//! purpose and replaced. The function is a minimal Runtime API client in Python (the standard
//! library only), so these tests check the service, not cfn-once's handler.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use cfn_once_local::lambda_service::{FunctionSpec, Invoked, LocalFunction};
use serde_json::{Value, json};

const CLIENT: &str = r#"
import json, os, time, urllib.request
base = "http://%s/2018-06-01/runtime/invocation" % os.environ["AWS_LAMBDA_RUNTIME_API"]
while True:
    with urllib.request.urlopen(base + "/next") as r:
        request_id = r.headers["Lambda-Runtime-Aws-Request-Id"]
        deadline_ms = int(r.headers["Lambda-Runtime-Deadline-Ms"])
        event = json.loads(r.read())
    print("handling %s" % event.get("n"), flush=True)
    time.sleep(event.get("sleep_ms", 0) / 1000)
    if event.get("fail"):
        url, body = "%s/%s/error" % (base, request_id), {"errorMessage": "asked to fail"}
    else:
        url = "%s/%s/response" % (base, request_id)
        body = {"n": event.get("n"), "pid": os.getpid(), "left_ms": deadline_ms - int(time.time() * 1000)}
    urllib.request.urlopen(urllib.request.Request(url, data=json.dumps(body).encode(), method="POST")).read()
"#;

fn function(concurrency_max: usize, timeout_ms: u64) -> Arc<LocalFunction> {
    let dir = std::env::temp_dir().join(cfn_once_tests::unique("lambda-service"));
    std::fs::create_dir_all(&dir).expect("temp dir");
    let script = dir.join("client.py");
    std::fs::write(&script, CLIENT).expect("client");
    Arc::new(
        LocalFunction::new(FunctionSpec {
            name: "test-function".into(),
            region: "us-east-1".into(),
            command: cfn_once_tests::python(),
            args: vec![script.display().to_string()],
            env: BTreeMap::new(),
            timeout_ms,
            concurrency_max,
            memory_mb: 256,
            working_dir: None,
            log: dir.join("function.log"),
        })
        .expect("function"),
    )
}

fn response(outcome: &Invoked) -> Value {
    match outcome {
        Invoked::Response(body) => serde_json::from_slice(body).expect("JSON response"),
        other => panic!("expected a response, got {other:?}"),
    }
}

fn event(value: Value) -> Vec<u8> {
    value.to_string().into_bytes()
}

#[tokio::test]
async fn a_warm_process_is_reused_and_sees_its_deadline() {
    let function = function(2, 30_000);
    let first = response(&function.invoke(event(json!({"n": 1}))).await);
    let second = response(&function.invoke(event(json!({"n": 2}))).await);
    assert_eq!(first["pid"], second["pid"], "the second invocation got a new process");
    let left_ms = second["left_ms"].as_i64().expect("left_ms");
    assert!((20_000..=30_000).contains(&left_ms), "Lambda-Runtime-Deadline-Ms left {left_ms} ms of a 30 s timeout");
    let stats = function.stats();
    assert_eq!((stats.invocations, stats.cold_starts), (2, 1));
}

#[tokio::test]
async fn no_more_processes_than_the_concurrency_limit_run_at_once() {
    let function = function(2, 30_000);
    let calls: Vec<_> = (0..5)
        .map(|n| {
            let function = Arc::clone(&function);
            tokio::spawn(async move { response(&function.invoke(event(json!({"n": n, "sleep_ms": 400}))).await) })
        })
        .collect();
    let mut pids = std::collections::BTreeSet::new();
    for call in calls {
        pids.insert(call.await.expect("invocation")["pid"].to_string());
    }
    assert_eq!(pids.len(), 2, "processes used: {pids:?}");
    assert_eq!(function.stats().cold_starts, 2);
}

#[tokio::test]
async fn a_killed_process_fails_its_invocation_and_is_replaced() {
    let function = function(1, 30_000);
    let pid = response(&function.invoke(event(json!({"n": 1}))).await)["pid"].clone();
    let busy = {
        let function = Arc::clone(&function);
        tokio::spawn(async move { function.invoke(event(json!({"n": 2, "sleep_ms": 5_000}))).await })
    };
    while function.busy() == 0 {
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    assert!(function.kill_busy(|_| 0), "nothing was busy");
    assert_eq!(busy.await.expect("invocation"), Invoked::Crashed);
    let next = response(&function.invoke(event(json!({"n": 3}))).await);
    assert_ne!(next["pid"], pid, "the killed process answered again");
    let stats = function.stats();
    assert_eq!((stats.killed, stats.crashed, stats.cold_starts), (1, 1, 2));
}

#[tokio::test]
async fn an_invocation_past_the_timeout_is_killed_with_its_process() {
    let function = function(1, 1_000);
    assert_eq!(function.invoke(event(json!({"n": 1, "sleep_ms": 3_000}))).await, Invoked::TimedOut);
    assert_eq!(response(&function.invoke(event(json!({"n": 2}))).await)["n"], 2);
    let stats = function.stats();
    assert_eq!((stats.timed_out, stats.cold_starts), (1, 2));
}

#[tokio::test]
async fn a_kill_armed_on_a_log_line_strikes_the_process_that_prints_it() {
    let function = function(1, 30_000);
    function.kill_on_line("handling 7", 1);
    assert_eq!(response(&function.invoke(event(json!({"n": 6}))).await)["n"], 6);
    assert_eq!(function.invoke(event(json!({"n": 7, "sleep_ms": 2_000}))).await, Invoked::Crashed);
    // Fired once: the next process printing it lives.
    assert_eq!(response(&function.invoke(event(json!({"n": 7}))).await)["n"], 7);
    assert_eq!(function.kills_on_lines().get("handling 7"), Some(&1));
}

#[tokio::test]
async fn a_handler_error_is_reported_as_one() {
    let function = function(1, 30_000);
    match function.invoke(event(json!({"n": 1, "fail": true}))).await {
        Invoked::Error(body) => assert!(String::from_utf8_lossy(&body).contains("asked to fail")),
        other => panic!("expected an error, got {other:?}"),
    }
}
