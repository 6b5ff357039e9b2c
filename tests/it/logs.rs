//! The ResponseURL is a credential: no log line may contain it. Every path that touches a URL
//! (an answer, a refusal, a PUT that fails, a malformed request) runs under a capturing
//! subscriber at TRACE, the most verbose level anyone could configure.

use std::io::Write;
use std::net::TcpListener;
use std::sync::{Arc, Mutex};

use cfn_once_tests::{LocalRegion, Options};
use serde_json::{Value, json};
use tracing::instrument::WithSubscriber;
use tracing_subscriber::fmt::MakeWriter;

#[derive(Clone, Default)]
struct Captured(Arc<Mutex<Vec<u8>>>);

impl Write for Captured {
    fn write(&mut self, bytes: &[u8]) -> std::io::Result<usize> {
        self.0.lock().expect("log buffer").extend_from_slice(bytes);
        Ok(bytes.len())
    }

    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

impl<'a> MakeWriter<'a> for Captured {
    type Writer = Captured;

    fn make_writer(&'a self) -> Self::Writer {
        self.clone()
    }
}

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
    let all = [&answered, &refused, &unreachable, &malformed];
    for sent in all {
        region.publish(sent).await;
    }

    let captured = Captured::default();
    let subscriber =
        tracing_subscriber::fmt().json().with_max_level(tracing::Level::TRACE).with_writer(captured.clone()).finish();
    let dispatch = tracing::Dispatch::new(subscriber);
    let capturing_handler = |event| cfn_once::lambda::handle(&app, event).with_subscriber(dispatch.clone());
    let mut received = 0;
    while received < all.len() {
        received += esm.poll_once(&capturing_handler).await.expect("poll").received;
    }

    let logs = String::from_utf8(captured.0.lock().expect("log buffer").clone()).expect("utf8 logs");
    let lines: Vec<Value> = logs.lines().map(|line| serde_json::from_str(line).expect("every line is JSON")).collect();
    assert!(logs.contains("lease acquired"), "the capture saw the handler's logs");
    assert!(logs.contains(&answered.request_key.request_id), "spans carry the RequestId");
    assert!(logs.contains("record refused"), "the refusal was logged");
    assert!(logs.contains("response PUT attempt failed"), "the failing PUT was logged");
    assert!(lines.len() > 20, "only {} lines captured", lines.len());

    for sent in all {
        let url = sent.request["ResponseURL"].as_str().expect("url");
        let signature = url.split("X-Amz-Signature=").nth(1).expect("signed URL");
        assert!(!logs.contains(url), "a log line contains a ResponseURL");
        assert!(!logs.contains(signature), "a log line contains a ResponseURL's signature");
    }
    assert!(!logs.contains("X-Amz-Signature") && !logs.contains("X-Amz-Credential"), "no presigned query in logs");
}
