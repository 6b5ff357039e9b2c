//! Hostile requests to the tools' local HTTP servers (the Runtime API of a local function's
//! sandbox, the local Invoke API, the fault proxy before moto) get a 4xx status line within a
//! few seconds, never a panic or a hang, and the server serves the next good request after
//! each. Sent as raw bytes over TCP, as a client that does not speak HTTP well would send them:
//! a header line of 1 MB, a chunk size of `ffffffffffffffff` after a first chunk (the
//! `body.len() + size` a hand-written reader overflows) with the body then stalled or flooded,
//! a request line that never ends, and a method that is not a token.

use std::collections::BTreeMap;
use std::path::Path;
use std::time::Duration;

use cfn_once_local::invoke_api::InvokeApi;
use cfn_once_local::lambda_service::{FunctionSpec, Invoked, LocalFunction};
use cfn_once_tests::{FaultProxy, Match};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

/// How long a server has to answer a hostile request.
const ANSWER_WAIT: Duration = Duration::from_secs(5);

/// A Runtime API client that prints its Runtime API's address, so the test can reach it, and
/// answers every event with the event itself.
const ECHO: &str = r#"
import os, urllib.request
api = os.environ["AWS_LAMBDA_RUNTIME_API"]
print("runtime api %s" % api, flush=True)
base = "http://%s/2018-06-01/runtime/invocation" % api
while True:
    with urllib.request.urlopen(base + "/next") as r:
        request_id = r.headers["Lambda-Runtime-Aws-Request-Id"]
        event = r.read()
    urllib.request.urlopen(urllib.request.Request("%s/%s/response" % (base, request_id), data=event, method="POST")).read()
"#;

/// The four hostile requests, each as the pieces it is written in, aimed at `path`.
fn hostile(path: &str) -> Vec<(&'static str, Vec<Vec<u8>>)> {
    let huge_header = format!("GET {path} HTTP/1.1\r\nHost: local\r\nX-Huge: {}\r\n\r\n", "a".repeat(1 << 20));
    let chunk_overflow = format!(
        "POST {path} HTTP/1.1\r\nHost: local\r\nTransfer-Encoding: chunked\r\n\r\n1\r\na\r\nffffffffffffffff\r\naaaa"
    );
    // 4 MB of request line and no line end, in pieces, the connection left open.
    let mut endless = vec![b"GET /".to_vec()];
    endless.extend(std::iter::repeat_n(vec![b'a'; 64 * 1024], 64));
    // The same chunk size, and then more data than the Lambda services take (6 MB).
    let mut chunk_flood = vec![chunk_overflow.clone().into_bytes()];
    chunk_flood.extend(std::iter::repeat_n(vec![b'a'; 64 * 1024], 112));
    let bad_method = format!("GE(T {path} HTTP/1.1\r\nHost: local\r\n\r\n");
    vec![
        ("a header line of 1 MB", vec![huge_header.into_bytes()]),
        ("chunk size ffffffffffffffff", vec![chunk_overflow.into_bytes()]),
        ("chunk size ffffffffffffffff, then 7 MB", chunk_flood),
        ("a request line that never ends", endless),
        ("a method that is not a token", vec![bad_method.into_bytes()]),
    ]
}

/// What a server did with a request: its status line, or what happened instead.
type Answer = Result<String, String>;

/// Sends `pieces` over a new connection to `address`, reading beside the writing.
async fn send_raw(address: &str, pieces: Vec<Vec<u8>>) -> Answer {
    let stream = TcpStream::connect(address).await.map_err(|error| format!("cannot connect: {error}"))?;
    let (mut read, mut write) = stream.into_split();
    // Written beside the reading: a server may answer, and close, before it has read it all.
    let writer = tokio::spawn(async move {
        for piece in pieces {
            if write.write_all(&piece).await.is_err() {
                return None;
            }
        }
        // Held open: a request that never ends does not end with a close either.
        Some(write)
    });
    let mut seen = Vec::new();
    let reading = async {
        let mut buffer = [0; 4096];
        loop {
            if let Some(end) = seen.windows(2).position(|pair| pair == b"\r\n") {
                return Ok(String::from_utf8_lossy(&seen[..end]).into_owned());
            }
            match read.read(&mut buffer).await {
                Ok(0) => return Err(format!("closed without a status line ({} bytes)", seen.len())),
                Ok(read) => seen.extend_from_slice(&buffer[..read]),
                Err(error) => return Err(format!("{error} ({} bytes read)", seen.len())),
            }
        }
    };
    let answer = match tokio::time::timeout(ANSWER_WAIT, reading).await {
        Ok(answer) => answer,
        Err(_) => Err(format!("no answer within {} s", ANSWER_WAIT.as_secs())),
    };
    writer.abort();
    answer
}

fn is_4xx(answer: &Answer) -> bool {
    answer.as_ref().is_ok_and(|line| line.starts_with("HTTP/1.1 4"))
}

/// A function of one sandbox that echoes its events, its log in a folder of its own.
fn echo_function(name: &str) -> LocalFunction {
    let dir = std::env::temp_dir().join(cfn_once_tests::unique("hostile-http"));
    std::fs::create_dir_all(&dir).expect("a temporary directory");
    let script = dir.join("echo.py");
    std::fs::write(&script, ECHO).expect("the client script");
    LocalFunction::new(FunctionSpec {
        name: name.to_owned(),
        region: "us-east-1".to_owned(),
        command: cfn_once_tests::python(),
        args: vec![script.display().to_string()],
        env: BTreeMap::new(),
        timeout_ms: 10_000,
        concurrency_max: 1,
        memory_mb: 128,
        working_dir: None,
        log: dir.join("function.log"),
    })
    .expect("the function's log opens")
}

/// The Runtime API address the function's newest sandbox printed.
fn runtime_api(log: &Path) -> String {
    let text = std::fs::read_to_string(log).expect("the function's log");
    let line =
        text.lines().rev().find_map(|line| line.split_once("runtime api ")).expect("a sandbox printed its address");
    line.1.trim().to_owned()
}

/// Checks every case's answer and next good request, after printing them all.
fn judge(server: &str, outcomes: &[(&str, Answer, Answer)]) {
    for (case, answer, next) in outcomes {
        eprintln!("{server}: {case}: answered {answer:?}; the next good request: {next:?}");
    }
    let failed: Vec<_> = outcomes.iter().filter(|(_, answer, next)| !is_4xx(answer) || next.is_err()).collect();
    assert!(failed.is_empty(), "{server}: {failed:#?}");
}

#[tokio::test]
async fn the_runtime_api_answers_hostile_requests_with_a_4xx_and_goes_on() {
    let function = echo_function("hostile-runtime");
    let event = br#"{"n":0}"#.to_vec();
    assert_eq!(function.invoke(event.clone()).await, Invoked::Response(event));
    let mut outcomes = Vec::new();
    for (n, (case, pieces)) in hostile("/2018-06-01/runtime/invocation/hostile/response").into_iter().enumerate() {
        let answer = send_raw(&runtime_api(&function.spec().log), pieces).await;
        let event = format!(r#"{{"n":{}}}"#, n + 1).into_bytes();
        let next = match function.invoke(event.clone()).await {
            Invoked::Response(body) if body == event => Ok("the event echoed".to_owned()),
            other => Err(format!("{other:?}")),
        };
        outcomes.push((case, answer, next));
    }
    judge("Runtime API", &outcomes);
    assert_eq!(function.stats().cold_starts, 1, "the sandbox was replaced");
}

#[tokio::test]
async fn the_invoke_api_answers_hostile_requests_with_a_4xx_and_goes_on() {
    let api = InvokeApi::start(vec![echo_function("hostile-invoke")]).await.expect("the Invoke API starts");
    let address = api.endpoint().strip_prefix("http://").expect("an http endpoint").to_owned();
    let path = "/2015-03-31/functions/hostile-invoke/invocations";
    let good = format!("POST {path} HTTP/1.1\r\nHost: local\r\nContent-Length: 7\r\n\r\n{{\"n\":1}}").into_bytes();
    let mut outcomes = Vec::new();
    for (case, pieces) in hostile(path) {
        let answer = send_raw(&address, pieces).await;
        let next = send_raw(&address, vec![good.clone()]).await;
        let next = next.and_then(|line| if line == "HTTP/1.1 200 OK" { Ok(line) } else { Err(line) });
        outcomes.push((case, answer, next));
    }
    judge("Invoke API", &outcomes);
}

#[tokio::test]
async fn the_fault_proxy_answers_hostile_requests_with_a_4xx_and_goes_on() {
    let proxy = FaultProxy::start(cfn_once_tests::moto());
    let address = proxy.url().strip_prefix("http://").expect("an http URL").to_owned();
    // DynamoDB's ListTables, which moto answers 200 whatever the signature.
    let good = concat!(
        "POST / HTTP/1.1\r\nHost: local\r\nX-Amz-Target: DynamoDB_20120810.ListTables\r\n",
        "Content-Type: application/x-amz-json-1.0\r\n",
        "Authorization: AWS4-HMAC-SHA256 Credential=testing/20260101/us-east-1/dynamodb/aws4_request, ",
        "SignedHeaders=host, Signature=00\r\nContent-Length: 2\r\n\r\n{}"
    );
    let mut outcomes = Vec::new();
    for (case, pieces) in hostile("/") {
        let answer = send_raw(&address, pieces).await;
        let next = send_raw(&address, vec![good.as_bytes().to_vec()]).await;
        let next = next.and_then(|line| if line == "HTTP/1.1 200 OK" { Ok(line) } else { Err(line) });
        outcomes.push((case, answer, next));
    }
    judge("fault proxy", &outcomes);
    assert_eq!(proxy.count(&Match::Operation("ListTables".into())), 5, "{:?}", proxy.log());
}
