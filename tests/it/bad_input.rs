//! Bad input through local AWS: a malformed record fails only itself and ends in the DLQ; a
//! ResponseURL outside the policy is refused and nothing is sent to it.

use std::io::ErrorKind;
use std::net::TcpListener;
use std::time::{Duration, Instant};

use cfn_once::local::esm::Invoke;
use cfn_once::local::provision::queue_depth;
use cfn_once_core::response::{ResponseBody, Status};
use cfn_once_tests::{LocalRegion, Options, handler};
use serde_json::json;

#[tokio::test]
async fn a_malformed_record_fails_only_itself_and_ends_in_the_dlq() {
    let region =
        LocalRegion::new(Options { visibility_timeout_s: 1, max_receive_count: 2, ..Options::default() }).await;
    let app = region.app(&region.config(&[]));
    let esm = region.esm(10).await;
    let (first, second) = (region.request("create-echo.json").await, region.request("update-echo.json").await);
    region.publish(&first).await;
    region.sqs.send_message().queue_url(&region.queue.url).message_body("{ not json").send().await.expect("send");
    region.publish(&second).await;

    let mut received = 0;
    let started = Instant::now();
    while received < 3 {
        let report = esm.poll_once(&handler(&app)).await.expect("poll");
        assert_eq!(report.invoke, if report.received == 0 { Invoke::Idle } else { Invoke::Returned });
        received += report.received;
        if report.received == 3 {
            assert_eq!((report.deleted, report.failed), (2, 1), "only the malformed record failed");
        }
        assert!(started.elapsed() < Duration::from_secs(10));
    }
    for sent in [&first, &second] {
        let versions = region.responses(sent).await;
        assert_eq!(versions.len(), 1);
        assert_eq!(ResponseBody::parse(&versions[0]).expect("body").status, Status::Success);
    }
    // The malformed record keeps failing until the redrive policy moves it to the DLQ.
    let started = Instant::now();
    while queue_depth(&region.sqs, &region.queue.dlq_url).await.expect("dlq depth") == 0 {
        esm.poll_once(&handler(&app)).await.expect("poll");
        assert!(started.elapsed() < Duration::from_secs(20), "the malformed record never reached the DLQ");
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    assert_eq!(queue_depth(&region.sqs, &region.queue.url).await.expect("depth"), 0);
    let dead = region.sqs.receive_message().queue_url(&region.queue.dlq_url).send().await.expect("receive");
    assert_eq!(dead.messages.unwrap_or_default()[0].body.as_deref(), Some("{ not json"));
}

#[tokio::test]
async fn a_disallowed_response_url_is_refused_and_nothing_is_sent() {
    let region = LocalRegion::new(Options::default()).await;
    let app = region.app(&region.config(&[]));
    let esm = region.esm(10).await;
    // A server that would notice any connection; it is not on the allow-list.
    let listener = TcpListener::bind("127.0.0.1:0").expect("bind");
    listener.set_nonblocking(true).expect("nonblocking");
    let port = listener.local_addr().expect("addr").port();

    let mut local = region.request("create-echo.json").await;
    local.request["ResponseURL"] = json!(format!("http://127.0.0.1:{port}/{}/x?X-Amz-Signature=abc", region.bucket));
    let mut foreign = region.request("create-echo.json").await;
    foreign.request["ResponseURL"] = json!("https://attacker.example.com/collect?X-Amz-Signature=abc");
    let mut wrong_port = region.request("create-echo.json").await;
    wrong_port.request["ResponseURL"] = json!(format!("https://127.0.0.1:{port}/x"));
    for sent in [&local, &foreign, &wrong_port] {
        region.publish(sent).await;
    }
    let mut failed = 0;
    let started = Instant::now();
    while failed < 3 {
        let report = esm.poll_once(&handler(&app)).await.expect("poll");
        assert_eq!(report.deleted, 0, "a refused request is never treated as answered");
        failed += report.failed;
        assert!(started.elapsed() < Duration::from_secs(10));
    }
    assert_eq!(listener.accept().map(|_| ()).map_err(|e| e.kind()), Err(ErrorKind::WouldBlock), "nothing connected");
    for sent in [&local, &foreign, &wrong_port] {
        assert!(region.record(sent).await.is_none(), "no lease was taken for an unanswerable request");
    }
}
