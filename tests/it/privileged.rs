//! Privileged topics (`CFN_ONCE_PRIVILEGED_TOPIC_ARNS`), end to end on moto: one queue fed by
//! two ServiceToken topics, the handler's production wiring (`standard_router`), and requests
//! published to each. A request through the topic that is not privileged, or a bare one under
//! raw delivery, may neither adopt an existing item with `Custom::DynamoDBItem` nor reach a
//! `CFN_ONCE_FUNCTIONS` route: it is answered FAILED once, saying which rule and which setting,
//! and the rollback Delete CloudFormation then sends succeeds without touching anything. Through
//! the privileged topic both are reached.

use std::collections::HashMap;
use std::time::Duration;

use aws_sdk_dynamodb::types::AttributeValue;
use cfn_once_core::lease::LeaseState;
use cfn_once_core::response::{ResponseBody, Status, is_failed_create_id};
use cfn_once_local::provision;
use cfn_once_tests::{LocalRegion, Options, Sent, live_request, unique};
use serde_json::json;

const ANSWER_TIMEOUT: Duration = Duration::from_secs(30);
const FUNCTION_TYPE: &str = "Custom::Reservation";

/// A region whose queue also receives a second topic's requests, and that topic.
async fn two_topics(options: Options) -> (LocalRegion, String) {
    let region = LocalRegion::new(options).await;
    let privileged = provision::create_topic(&region.sns, &unique("privileged")).await.expect("topic");
    provision::subscribe_queue(&region.sns, &privileged, &region.queue.arn, options.raw_delivery, None)
        .await
        .expect("subscription");
    (region, privileged)
}

/// The handler's configuration: both topics accepted, `privileged` alone privileged, and
/// `Custom::Reservation` routed to a function of the region.
fn config(region: &LocalRegion, privileged: &str) -> cfn_once_core::config::Config {
    region.config(&[
        ("CFN_ONCE_TOPIC_ARNS", &format!("{},{privileged}", region.topic_arn)),
        ("CFN_ONCE_PRIVILEGED_TOPIC_ARNS", privileged),
        ("CFN_ONCE_FUNCTIONS", &format!("{FUNCTION_TYPE}=reservations")),
    ])
}

/// `fixture` made live for `topic`, its `ServiceToken` naming the topic.
async fn request(region: &LocalRegion, fixture: &str, topic: &str) -> Sent {
    live_request(fixture, topic, &region.s3, &region.bucket, &region.item_table).await
}

/// Publishes `sent` to `topic`, serves the queue with the production wiring until it is
/// answered, and checks it was answered once (one PUT, the committed bytes).
async fn answer(region: &LocalRegion, privileged: &str, topic: &str, sent: &Sent) -> ResponseBody {
    let app = region.app(&config(region, privileged));
    let esm = region.esm(10).await;
    region.sns.publish().topic_arn(topic).message(sent.request.to_string()).send().await.expect("publish");
    let bytes = region.serve_until_answered(&esm, &app, sent, ANSWER_TIMEOUT).await;
    region.drain(&esm, &app, ANSWER_TIMEOUT).await;
    assert_eq!(region.responses(sent).await.len(), 1, "exactly one PUT");
    let record = region.record(sent).await.expect("lease record");
    assert_eq!((record.state, record.delivered), (LeaseState::Committed, true));
    assert_eq!(record.response.as_deref(), Some(&bytes[..]), "S1: the PUT body is the committed body");
    ResponseBody::parse(&bytes).expect("a response body")
}

/// An item that was in the table before any stack: written without cfn-once.
async fn put_foreign_item(region: &LocalRegion) {
    region
        .customer_dynamodb
        .put_item()
        .table_name(&region.item_table)
        .item("pk", AttributeValue::S("tenant#42".into()))
        .item("Plan", AttributeValue::S("someone else's".into()))
        .send()
        .await
        .expect("put the existing item");
}

async fn tenant_item(region: &LocalRegion) -> HashMap<String, AttributeValue> {
    crate::e2e::tenant_item(region).await.expect("the item is there")
}

fn plan(item: &HashMap<String, AttributeValue>) -> Option<&str> {
    item.get("Plan").and_then(|plan| plan.as_s().ok()).map(String::as_str)
}

/// The reason, checked to name the rule and the setting and never the ResponseURL.
fn refusal(body: &ResponseBody, rule: &str) -> String {
    assert_eq!(body.status, Status::Failed, "{body:?}");
    let reason = body.reason.clone().expect("a FAILED answer has a reason");
    assert!(reason.contains(rule) && reason.contains("CFN_ONCE_PRIVILEGED_TOPIC_ARNS"), "{reason}");
    assert!(!reason.contains("X-Amz-Signature") && !reason.contains("https://"), "no ResponseURL: {reason}");
    reason
}

/// The rollback Delete CloudFormation sends for a Create answered with `created`, through `topic`.
async fn rollback(region: &LocalRegion, privileged: &str, topic: &str, fixture: &str, created: &ResponseBody) {
    let mut delete = request(region, fixture, topic).await;
    delete.request["RequestType"] = json!("Delete");
    delete.request["PhysicalResourceId"] = json!(created.physical_resource_id);
    let body = answer(region, privileged, topic, &delete).await;
    assert_eq!(body.status, Status::Success, "a stack is never stuck on the rollback: {body:?}");
}

#[tokio::test]
async fn a_request_through_a_topic_that_is_not_privileged_may_not_adopt_an_existing_item() {
    let (region, privileged) = two_topics(Options::default()).await;
    put_foreign_item(&region).await;
    let plain = region.topic_arn.clone();

    let mut adopt = request(&region, "create-dynamodb-item.json", &plain).await;
    adopt.request["ResourceProperties"]["Adopt"] = json!("true");
    let refused = answer(&region, &privileged, &plain, &adopt).await;
    let reason = refusal(&refused, "Adopt: \"true\" takes over an existing item only for a privileged request");
    assert!(reason.contains(&format!("arrived through topic {plain}")), "{reason}");
    assert_eq!(plan(&tenant_item(&region).await), Some("someone else's"), "the item was not taken over");
    rollback(&region, &privileged, &plain, "create-dynamodb-item.json", &refused).await;
    let item = tenant_item(&region).await;
    assert_eq!(plan(&item), Some("someone else's"), "the rollback Delete left the existing item");
    assert!(!item.contains_key("cfn_once_owner"), "{item:?}");

    // The same resource through the privileged topic adopts it.
    let mut adopt = request(&region, "create-dynamodb-item.json", &privileged).await;
    adopt.request["ResourceProperties"]["Adopt"] = json!("true");
    let adopted = answer(&region, &privileged, &privileged, &adopt).await;
    assert_eq!((adopted.status, &adopted.data["Adopted"]), (Status::Success, &json!("true")), "{adopted:?}");
    assert_eq!(plan(&tenant_item(&region).await), Some("enterprise"));
}

#[tokio::test]
async fn a_request_through_a_topic_that_is_not_privileged_may_not_reach_a_function() {
    let (region, privileged) = two_topics(Options::default()).await;
    let plain = region.topic_arn.clone();
    let function_request = |topic: String| {
        let region = region.clone();
        async move {
            let mut sent = request(&region, "create-echo.json", &topic).await;
            sent.request["ResourceType"] = json!(FUNCTION_TYPE);
            sent
        }
    };

    let refused = answer(&region, &privileged, &plain, &function_request(plain.clone()).await).await;
    let reason = refusal(&refused, &format!("{FUNCTION_TYPE} is served for privileged requests only"));
    assert!(reason.contains(&format!("arrived through topic {plain}")), "{reason}");
    assert!(is_failed_create_id(&refused.physical_resource_id), "refused before the function: {refused:?}");
    let mut delete = function_request(plain.clone()).await;
    delete.request["RequestType"] = json!("Delete");
    delete.request["PhysicalResourceId"] = json!(refused.physical_resource_id);
    assert_eq!(answer(&region, &privileged, &plain, &delete).await.status, Status::Success, "the rollback succeeds");

    // Through the privileged topic the route is reached: the handler invokes the function, which
    // this moto does not have, and says so.
    let reached = answer(&region, &privileged, &privileged, &function_request(privileged.clone()).await).await;
    let reason = reached.reason.clone().unwrap_or_default();
    assert!(!reason.contains("CFN_ONCE_PRIVILEGED_TOPIC_ARNS") && reason.contains("reservations"), "{reached:?}");
}

#[tokio::test]
async fn a_bare_request_under_raw_delivery_is_not_privileged_once_a_topic_is_named() {
    let (region, privileged) = two_topics(Options { raw_delivery: true, ..Options::default() }).await;
    put_foreign_item(&region).await;
    // Published to the privileged topic, but raw delivery strips the envelope: nothing vouches
    // for the topic, so the request is not privileged.
    let mut adopt = request(&region, "create-dynamodb-item.json", &privileged).await;
    adopt.request["ResourceProperties"]["Adopt"] = json!("true");
    let refused = answer(&region, &privileged, &privileged, &adopt).await;
    let reason = refusal(&refused, "Adopt: \"true\" takes over an existing item only for a privileged request");
    assert!(reason.contains("arrived without a topic (raw message delivery)"), "{reason}");
    assert_eq!(plan(&tenant_item(&region).await), Some("someone else's"));
}
