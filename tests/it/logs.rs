//! The ResponseURL is a credential: no log line may contain it, nor a wait condition handle
//! (`CfnOnceWaitHandle`), which is one too. Every path that touches a URL (an answer, a signal, a
//! refusal, a PUT that fails, a malformed request) runs under a capturing subscriber at TRACE,
//! the most verbose level anyone could configure.

use std::net::TcpListener;

use std::time::Duration;

use cfn_once_tests::{CapturedLogs, FakeRuntime, LambdaProcess, LocalRegion, Options, Posted};
use serde_json::{Value, json};
use tracing::instrument::WithSubscriber;

const TIMEOUT: Duration = Duration::from_secs(30);

#[tokio::test]
async fn no_log_line_contains_a_response_url() {
    let region = LocalRegion::new(Options { visibility_timeout_s: 1, ..Options::default() }).await;
    // A port nobody listens on, allow-listed so the PUT is attempted and fails.
    let closed_port = TcpListener::bind("127.0.0.1:0").expect("bind").local_addr().expect("addr").port();
    let allow = format!("{}/{}/,http://127.0.0.1:{closed_port}/", region.endpoint, region.bucket);
    let config = region.config(&[("CFN_ONCE_RESPONSE_URL_ALLOW", &allow), ("CFN_ONCE_PUT_ATTEMPTS_MAX", "2")]);
    let app = region.app(&config);
    let esm = region.esm(10).await;

    let answered = region.request("create-echo.json").await;
    let mut refused = region.request("create-echo.json").await;
    refused.request["ResponseURL"] = json!("https://attacker.example.com/steal?X-Amz-Signature=refusedsecret0001");
    let mut unreachable = region.request("create-echo.json").await;
    unreachable.request["ResponseURL"] =
        json!(format!("http://127.0.0.1:{closed_port}/bucket/key?X-Amz-Signature=unreachablesecret0002"));
    let mut malformed = region.request("create-echo.json").await;
    malformed.request["RequestType"] = json!("Upsert");
    // Resources with a wait condition: one answered and signalled, one whose handle is refused
    // (answered FAILED), one whose signal's PUT fails.
    let handle = region.wait_handle("GreetingHandle").await;
    let mut signalled = region.request("create-echo.json").await;
    handle.declare(&mut signalled.request["ResourceProperties"], 600);
    let mut refused_handle = region.request("create-echo.json").await;
    refused_handle.request["ResourceProperties"]["CfnOnceWaitHandle"] =
        json!("https://attacker.example.com/handle?X-Amz-Signature=refusedhandlesecret0003");
    refused_handle.request["ResourceProperties"]["CfnOnceWaitTimeout"] = json!("600");
    let mut unreachable_handle = region.request("create-echo.json").await;
    unreachable_handle.request["ResourceProperties"]["CfnOnceWaitHandle"] =
        json!(format!("http://127.0.0.1:{closed_port}/handles/h?X-Amz-Signature=unreachablehandlesecret0004"));
    unreachable_handle.request["ResourceProperties"]["CfnOnceWaitTimeout"] = json!("600");
    let all = [&answered, &refused, &unreachable, &malformed, &signalled, &refused_handle, &unreachable_handle];
    for sent in all {
        region.publish(sent).await;
    }

    let captured = CapturedLogs::default();
    let subscriber =
        tracing_subscriber::fmt().json().with_max_level(tracing::Level::TRACE).with_writer(captured.clone()).finish();
    let dispatch = tracing::Dispatch::new(subscriber);
    let capturing_handler = |event| cfn_once::lambda::handle(&app, event).with_subscriber(dispatch.clone());
    let mut received = 0;
    let started = std::time::Instant::now();
    while received < all.len() || handle.puts().await.is_empty() {
        assert!(started.elapsed() < TIMEOUT, "{received} records received and nothing signalled after {TIMEOUT:?}");
        received += esm.poll_once(&capturing_handler).await.expect("poll").received;
    }

    let logs = String::from_utf8(captured.bytes()).expect("utf8 logs");
    let lines: Vec<Value> = logs.lines().map(|line| serde_json::from_str(line).expect("every line is JSON")).collect();
    assert!(logs.contains("lease acquired"), "the capture saw the handler's logs");
    assert!(logs.contains(&answered.request_key.request_id), "spans carry the RequestId");
    assert!(logs.contains("record refused"), "the refusal was logged");
    assert!(logs.contains("response PUT attempt failed"), "the failing PUT was logged");
    assert!(lines.len() > 20, "only {} lines captured", lines.len());
    // The wait conditions' paths ran under the capture: a signal PUT, a refusal, a failed PUT.
    assert_eq!(handle.signals().await.len(), 1, "the work was signalled");
    assert!(logs.contains(r#""what":"signal""#), "the signal's lines were captured");
    assert!(
        logs.contains(&refused_handle.request_key.request_id)
            && logs.contains(&unreachable_handle.request_key.request_id)
    );
    let refusal = region.responses(&refused_handle).await;
    let refusal = String::from_utf8_lossy(refusal.first().expect("the refused handle's answer"));
    assert!(refusal.contains("CfnOnceWaitHandle is refused") && !refusal.contains("refusedhandlesecret"), "{refusal}");
    assert_eq!(region.responses(&unreachable_handle).await.len(), 1, "answered; its signal's PUT failed");
    let unreachable_id = &unreachable_handle.request_key.request_id;
    assert!(
        logs.lines().any(|line| line.contains("PUT attempt failed") && line.contains(unreachable_id.as_str())),
        "the failing PUT of the signal was logged"
    );

    for sent in all {
        let url = sent.request["ResponseURL"].as_str().expect("url");
        let signature = url.split("X-Amz-Signature=").nth(1).expect("signed URL");
        assert!(!logs.contains(url), "a log line contains a ResponseURL");
        assert!(!logs.contains(signature), "a log line contains a ResponseURL's signature");
        if let Some(handle) = sent.request["ResourceProperties"]["CfnOnceWaitHandle"].as_str() {
            let signature = handle.split("X-Amz-Signature=").nth(1).expect("signed handle");
            assert!(!logs.contains(handle), "a log line contains a wait condition handle");
            assert!(!logs.contains(signature), "a log line contains a wait condition handle's signature");
        }
    }
    assert!(!logs.contains("X-Amz-Signature") && !logs.contains("X-Amz-Credential"), "no presigned query in logs");
}

/// The real binary under a Runtime API at `AWS_LAMBDA_LOG_LEVEL=TRACE`: lambda_runtime logs
/// every raw event at TRACE, and a raw event carries signed ResponseURLs (and wait condition
/// handles). Nothing it, the SDK or
/// the HTTP stack logs may contain one, and an event that is not UTF-8 (which lambda_runtime's
/// TRACE line cannot print) must not stop the runtime.
#[tokio::test]
async fn the_lambda_binary_at_trace_logs_no_response_url_and_survives_bad_bytes() {
    let region = LocalRegion::new(Options::default()).await;
    let runtime = FakeRuntime::start();
    let mut env = region.lambda_env();
    env.push(("AWS_LAMBDA_LOG_LEVEL", "TRACE".to_owned()));
    let mut lambda = LambdaProcess::spawn(&runtime, &env);
    let esm = region.esm(10).await;

    let first = region.request("create-echo.json").await;
    region.publish(&first).await;
    runtime.invoke("invocation-1", region.batch_of_one(&esm).await.0, 60_000);
    assert!(matches!(runtime.posted("invocation-1", TIMEOUT), Some(Posted::Response(_))), "{:?}", lambda.output());

    // Not UTF-8, and a record with neither id nor queue: the handler reads it as an unreadable
    // record it can neither name nor move, so it fails the batch with an empty identifier
    // (src/raw_event.rs, src/lambda.rs) rather than letting Lambda delete it.
    runtime.invoke("invocation-2", b"{\"Records\": [{\"body\": \"\xff\xfe\"}]}".to_vec(), 60_000);
    let posted = runtime.posted("invocation-2", TIMEOUT);
    let Some(Posted::Response(body)) = posted else { panic!("{posted:?}: {:?}", lambda.output()) };
    let body: serde_json::Value = serde_json::from_slice(&body).expect("a JSON response");
    assert_eq!(body, serde_json::json!({"batchItemFailures": [{"itemIdentifier": ""}]}), "{:?}", lambda.output());
    assert!(lambda.is_running(), "the runtime stopped on bytes that are not UTF-8: {:?}", lambda.output());

    let second = region.request("create-echo.json").await;
    region.publish(&second).await;
    runtime.invoke("invocation-3", region.batch_of_one(&esm).await.0, 60_000);
    assert!(matches!(runtime.posted("invocation-3", TIMEOUT), Some(Posted::Response(_))), "{:?}", lambda.output());
    // A resource with a wait condition: answered and signalled in one invocation.
    let handle = region.wait_handle("GreetingHandle").await;
    let mut third = region.request("create-echo.json").await;
    handle.declare(&mut third.request["ResourceProperties"], 600);
    region.publish(&third).await;
    runtime.invoke("invocation-4", region.batch_of_one(&esm).await.0, 60_000);
    assert!(matches!(runtime.posted("invocation-4", TIMEOUT), Some(Posted::Response(_))), "{:?}", lambda.output());
    for sent in [&first, &second, &third] {
        assert_eq!(region.responses(sent).await.len(), 1, "answered once");
    }
    assert_eq!(handle.signals().await.len(), 1, "signalled once");

    let output = lambda.output();
    assert!(output.iter().any(|line| line.contains("lease acquired")), "cfn-once's own lines are there at TRACE");
    let urls = [&first, &second, &third].map(|sent| sent.request["ResponseURL"].as_str().expect("url"));
    for (what, url) in urls.into_iter().map(|url| ("ResponseURL", url)).chain([("wait condition handle", &*handle.url)])
    {
        let signature = url.split("X-Amz-Signature=").nth(1).expect("signed URL");
        let leaking: Vec<&String> = output.iter().filter(|line| line.contains(signature)).collect();
        assert!(leaking.is_empty(), "{} log line(s) carry a signed {what}: {leaking:?}", leaking.len());
    }
    assert!(!output.iter().any(|line| line.contains("X-Amz-Signature")), "no presigned query in any line");
}

/// The real binary's first log line, written at start before any invocation, says which
/// cfn-once it is (version and commit) and where it runs (role and region); and its metrics,
/// flushed after the first batch, carry the version as a dimension.
#[tokio::test]
async fn the_lambda_binary_first_says_its_version_commit_role_and_region() {
    use cfn_once_core::build::{COMMIT, VERSION};

    let region = LocalRegion::new(Options::default()).await;
    let runtime = FakeRuntime::start();
    let lambda = LambdaProcess::spawn(&runtime, &region.lambda_env());
    let started = std::time::Instant::now();
    while lambda.output().is_empty() && started.elapsed() < TIMEOUT {
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let output = lambda.output();
    let first: Value = serde_json::from_str(output.first().expect("a first line")).expect("a JSON line");
    let fields = &first["fields"];
    assert_eq!(
        (fields["version"].as_str(), fields["commit"].as_str(), fields["role"].as_str(), fields["region"].as_str()),
        (Some(VERSION), Some(COMMIT), Some("primary"), Some(cfn_once_tests::REGION)),
        "{first}"
    );
    assert_eq!(first["level"], "INFO", "{first}");
    assert_eq!(fields["message"], format!("cfn-once {VERSION} (commit {COMMIT}) starting"), "{first}");

    let esm = region.esm(10).await;
    let sent = region.request("create-echo.json").await;
    region.publish(&sent).await;
    runtime.invoke("invocation-1", region.batch_of_one(&esm).await.0, 60_000);
    assert!(matches!(runtime.posted("invocation-1", TIMEOUT), Some(Posted::Response(_))), "{:?}", lambda.output());
    let output = lambda.output();
    assert_eq!(serde_json::from_str::<Value>(&output[0]).ok().as_ref(), Some(&first), "the start line stays the first");
    let metrics: Vec<Value> = output
        .iter()
        .filter(|line| line.contains("\"_aws\""))
        .map(|line| serde_json::from_str(line).expect("EMF"))
        .collect();
    assert!(!metrics.is_empty(), "no metrics after a batch: {output:?}");
    for document in &metrics {
        assert_eq!(document["Version"].as_str(), Some(VERSION), "{document}");
        assert_eq!(
            document["_aws"]["CloudWatchMetrics"][0]["Dimensions"].as_array().map(Vec::len),
            Some(2),
            "{document}"
        );
    }
}
