//! A request SNS cannot deliver to a regional queue is not dropped in silence: it lands in the
//! subscription's delivery dead-letter queue in the topic's region, `cfn-once inspect` finds it
//! there and names the alarm its arrival fires, and `cfn-once redrive` sends it on to the queue
//! it missed, where it is answered at most once.
//!
//! What is played, and what not: the primary queue is deleted, the one client-side delivery
//! error moto raises (`moto_server.py` turns it into what SNS does: the publish succeeds, the
//! other subscription is delivered, and the message goes to the subscription's dead-letter
//! queue). A stale topic list (a queue policy that no longer admits the topic), the issue's own
//! example, takes the same path in AWS, a client-side error, but moto does not evaluate queue
//! policies, so it is not played. Nor are the alarms: moto keeps no SQS or SNS metrics, so the
//! test checks which alarm `inspect` names, not an alarm state.

use std::time::{Duration, Instant};

use cfn_once_local::provision;
use cfn_once_ops::OpsTarget;
use cfn_once_ops::redrive::{RedriveOptions, redrive};
use cfn_once_tests::TwoRegions;

const SETTINGS: [(&str, &str); 3] =
    [("CFN_ONCE_STORE_TIMEOUT_MS", "1000"), ("CFN_ONCE_PUT_TIMEOUT_MS", "1000"), ("CFN_ONCE_PUT_ATTEMPTS_MAX", "2")];
const TIMEOUT: Duration = Duration::from_secs(60);

#[tokio::test]
async fn a_request_sns_cannot_deliver_lands_in_the_delivery_dlq_is_found_and_redriven() {
    let mut regions = TwoRegions::new(2, &SETTINGS).await;
    let file = regions.env.file.clone();
    let target = OpsTarget::from_env_file(&file);
    let delivery = target
        .deliveries
        .iter()
        .find(|d| d.region == file.customer_region && d.role == "primary")
        .expect("the customer region's delivery DLQ for the primary queue")
        .clone();
    let customer_sqs = target.sqs_in(&file.customer_region).await;
    assert_eq!(provision::queue_depth(&customer_sqs, &delivery.dlq_url).await.expect("depth"), 0);

    // The primary queue is gone (deleted, or about to be recreated): SNS meets a client-side error.
    let primary_url = regions.env.primary_queues.url.clone();
    regions.sqs_primary.delete_queue().queue_url(&primary_url).send().await.expect("DeleteQueue");
    let sent = regions.request("create-echo.json").await;
    let since = Instant::now();
    regions.publish(&sent).await;

    // The secondary's copy still arrives, and after its delay the secondary answers what the
    // primary never saw.
    let (answer, after) = regions.wait_for_answer(&sent, since, TIMEOUT).await;
    println!("answered by the secondary after {after:?}");
    assert!(String::from_utf8_lossy(&answer).contains("\"Status\":\"SUCCESS\""));
    let record = regions.record(&sent).await.expect("a record");
    assert!(record.owner.starts_with(&file.secondary_region), "the secondary answered: {}", record.owner);

    // The primary's copy is in the delivery DLQ, in the topic's region, not nowhere.
    let started = Instant::now();
    while provision::queue_depth(&customer_sqs, &delivery.dlq_url).await.expect("depth") == 0 {
        assert!(started.elapsed() < TIMEOUT, "the undelivered copy never reached {}", delivery.dlq_url);
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let report = crate::ops::inspect_one(&target, &sent).await;
    let text = report.render();
    println!("--- inspect\n{text}");
    let copies = &report.requests[0].dead_letters;
    assert_eq!(copies.len(), 1, "{copies:?}");
    let copy = &copies[0];
    assert_eq!(
        (copy.region.as_str(), copy.role.as_str()),
        (file.customer_region.as_str(), "delivery to the primary queue")
    );
    assert_eq!(copy.attempt, "this record's attempt");
    let alarm = format!("{}-arrivals", delivery.dlq_url.rsplit('/').next().expect("a name"));
    assert!(alarm.ends_with("-primary-delivery-dlq-arrivals"), "{alarm}");
    assert_eq!(copy.alarm.as_deref(), Some(alarm.as_str()));
    assert!(text.contains(&format!("alarm     {alarm} fires")), "{text}");
    let response_url = sent.request["ResponseURL"].as_str().expect("a ResponseURL");
    let json = serde_json::to_string(&report).expect("JSON");
    for shown in [&text, &json] {
        assert!(!shown.contains(response_url) && !shown.contains("X-Amz-Signature"), "the ResponseURL is shown");
    }

    // The queue is back (recreated, as an operator would after fixing it), and the redrive sends
    // the copy on to it: the request was answered, so the primary drops it, and nothing is PUT
    // twice.
    regions
        .sqs_primary
        .create_queue()
        .queue_name(primary_url.rsplit('/').next().expect("a name"))
        .send()
        .await
        .expect("CreateQueue");
    let redriven = redrive(&target, RedriveOptions { dry_run: false, include_undeliverable: false, max: 100 })
        .await
        .expect("redrive");
    let text = redriven.render();
    println!("--- redrive\n{text}");
    let moved: Vec<_> = redriven.messages.iter().filter(|m| m.role == "delivery to the primary queue").collect();
    assert_eq!(moved.len(), 1, "{text}");
    assert_eq!(moved[0].action, "moved");
    assert_eq!(moved[0].record_says, "answered and delivered: the redriven copy is dropped");
    assert!(!text.contains(response_url) && !text.contains("X-Amz-Signature"), "the ResponseURL is shown");
    assert_eq!(provision::queue_depth(&customer_sqs, &delivery.dlq_url).await.expect("depth"), 0);
    regions.drain(TIMEOUT).await;
    assert_eq!(regions.responses(&sent).await.len(), 1, "answered once");
    regions.stop().await;
}
