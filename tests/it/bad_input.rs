//! Bad input through local AWS: a malformed record fails only itself and is moved to the DLQ at
//! once, with why and from where; a ResponseURL outside the policy is refused, nothing is sent
//! to it, and it goes to the DLQ too.

use std::io::ErrorKind;
use std::net::TcpListener;
use std::time::{Duration, Instant};

use cfn_once::adapters::sqs_queue::dead_letter_attribute::{REASON, RECEIVE_COUNT, SOURCE_QUEUE};
use cfn_once_core::response::{ResponseBody, Status};
use cfn_once_local::esm::Invoke;
use cfn_once_local::provision::queue_depth;
use cfn_once_tests::{LocalRegion, Options, handler};
use serde_json::json;

#[tokio::test]
async fn a_malformed_record_fails_only_itself_and_is_moved_to_the_dlq() {
    let region = LocalRegion::new(Options::default()).await;
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
        assert_eq!(report.failed, 0, "nothing is left to come back: two answered, one dead-lettered");
        received += report.received;
        assert!(started.elapsed() < Duration::from_secs(10));
    }
    for sent in [&first, &second] {
        let versions = region.responses(sent).await;
        assert_eq!(versions.len(), 1);
        assert_eq!(ResponseBody::parse(&versions[0]).expect("body").status, Status::Success);
    }
    // The handler moved it on its first receive: the queue's maxReceiveCount (1000, as
    // deployed) would take a thousand receives.
    assert_eq!(queue_depth(&region.sqs, &region.queue.url).await.expect("depth"), 0);
    let dead = dead_letters(&region).await;
    assert_eq!(dead.len(), 1);
    assert_eq!(dead[0].body.as_deref(), Some("{ not json"));
    let attributes = dead[0].message_attributes.clone().unwrap_or_default();
    let attribute = |name: &str| attributes.get(name).and_then(|a| a.string_value.clone()).unwrap_or_default();
    assert!(attribute(REASON).contains("not JSON"), "{attributes:?}");
    assert_eq!(attribute(SOURCE_QUEUE), region.queue.arn);
    assert_eq!(attribute(RECEIVE_COUNT), "1");
}

/// Every message in the region's DLQ, with its attributes.
async fn dead_letters(region: &LocalRegion) -> Vec<aws_sdk_sqs::types::Message> {
    let received = region
        .sqs
        .receive_message()
        .queue_url(&region.queue.dlq_url)
        .max_number_of_messages(10)
        .message_attribute_names("All")
        .send()
        .await
        .expect("receive from the DLQ");
    received.messages.unwrap_or_default()
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
    let mut received = 0;
    let started = Instant::now();
    while received < 3 {
        received += esm.poll_once(&handler(&app)).await.expect("poll").received;
        assert!(started.elapsed() < Duration::from_secs(10));
    }
    assert_eq!(listener.accept().map(|_| ()).map_err(|e| e.kind()), Err(ErrorKind::WouldBlock), "nothing connected");
    for sent in [&local, &foreign, &wrong_port] {
        assert!(region.record(sent).await.is_none(), "no lease was taken for an unanswerable request");
        assert!(region.responses(sent).await.is_empty());
    }
    let dead = dead_letters(&region).await;
    assert_eq!(dead.len(), 3, "nobody can be answered: all three are in the DLQ");
    for message in dead {
        let body = message.body.unwrap_or_default();
        let reason = message.message_attributes.unwrap_or_default().remove(REASON).and_then(|a| a.string_value);
        let reason = reason.unwrap_or_default();
        assert!(reason.contains("ResponseURL"), "{reason}");
        // The host may be named; the path and the signature (the secret part) never are.
        assert!(!reason.contains("X-Amz-Signature") && !reason.contains("/collect"), "{reason}");
        assert!(body.contains("ResponseURL"), "the body is kept whole for inspection");
    }
}
