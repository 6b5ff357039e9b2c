//! End to end through local AWS: SNS topic → SQS queue → local event source mapping → the
//! Lambda handler → DynamoDB lease table → presigned PUT into S3, read back from moto.

use std::collections::HashMap;
use std::time::Duration;

use aws_sdk_dynamodb::types::AttributeValue;

use cfn_once_core::lease::LeaseState;
use cfn_once_core::response::{ResponseBody, Status};
use cfn_once_tests::{LocalRegion, Options, Sent};
use serde_json::json;

const ANSWER_TIMEOUT: Duration = Duration::from_secs(30);

async fn answer(region: &LocalRegion, sent: &Sent) -> ResponseBody {
    let app = region.app(&region.config(&[]));
    let esm = region.esm(10).await;
    region.publish(sent).await;
    let bytes = region.serve_until_answered(&esm, &app, sent, ANSWER_TIMEOUT).await;
    region.drain(&esm, &app, ANSWER_TIMEOUT).await;
    let versions = region.responses(sent).await;
    assert_eq!(versions.len(), 1, "exactly one PUT");
    let record = region.record(sent).await.expect("lease record");
    assert_eq!((record.state, record.delivered), (LeaseState::Committed, true));
    assert_eq!(record.response.as_deref(), Some(&bytes[..]), "S1: the PUT body is the committed body");
    ResponseBody::parse(&bytes).expect("the body is CloudFormation's response JSON")
}

async fn create_update_delete(raw_delivery: bool) {
    let region = LocalRegion::new(Options { raw_delivery, ..Options::default() }).await;

    let create = region.request("create-echo.json").await;
    let body = answer(&region, &create).await;
    assert_eq!(body.status, Status::Success, "{body:?}");
    assert_eq!(body.request_id, create.request_key.request_id);
    assert_eq!(body.stack_id, create.request_key.stack_id.as_str());
    assert_eq!(body.logical_resource_id, "Greeting");
    assert!(body.physical_resource_id.starts_with("Greeting-"), "{}", body.physical_resource_id);
    assert_eq!(body.data["Message"], json!("hello from cfn-once"));
    assert_eq!(body.data["Replicas"], json!("3"));
    assert!(!body.data.contains_key("ServiceToken"), "CloudFormation's own properties are not echoed");
    let physical_id = body.physical_resource_id;

    let mut update = region.request("update-echo.json").await;
    update.request["PhysicalResourceId"] = json!(physical_id);
    let body = answer(&region, &update).await;
    assert_eq!((body.status, body.physical_resource_id.as_str()), (Status::Success, physical_id.as_str()));
    assert_eq!(body.data["Message"], json!("hello again"));

    let mut delete = region.request("delete-echo.json").await;
    delete.request["PhysicalResourceId"] = json!(physical_id);
    let body = answer(&region, &delete).await;
    assert_eq!((body.status, body.physical_resource_id.as_str()), (Status::Success, physical_id.as_str()));
}

#[tokio::test]
async fn create_update_delete_through_an_sns_envelope() {
    create_update_delete(false).await;
}

#[tokio::test]
async fn create_update_delete_with_raw_message_delivery() {
    create_update_delete(true).await;
}

#[tokio::test]
async fn a_bad_property_gets_failed_with_a_readable_reason() {
    let region = LocalRegion::new(Options::default()).await;
    let sent = region.request("create-bad-property.json").await;
    let body = answer(&region, &sent).await;
    assert_eq!(body.status, Status::Failed);
    assert_eq!(
        body.reason.as_deref(),
        Some(
            "Custom::Echo Create failed: invalid property DelayMs: invalid value: string \"five seconds\", expected u64"
        )
    );
}

#[tokio::test]
async fn the_dynamodb_item_provider_writes_and_deletes_its_item() {
    let region = LocalRegion::new(Options::default()).await;
    let create = region.request("create-dynamodb-item.json").await;
    let body = answer(&region, &create).await;
    assert_eq!(body.status, Status::Success, "{body:?}");
    let item = tenant_item(&region).await.expect("the item was written");
    assert_eq!(item["Plan"].as_s().ok().map(String::as_str), Some("enterprise"));
    assert_eq!(item["Seats"].as_n().ok().map(String::as_str), Some("250"));
    assert_eq!(item["SsoEnabled"].as_bool().ok(), Some(&true));
    assert_eq!(item["cfn_once_fence"].as_n().ok().map(String::as_str), Some("1"), "the write carries its fence");

    let mut delete = region.request("delete-dynamodb-item.json").await;
    delete.request["PhysicalResourceId"] = json!(body.physical_resource_id);
    assert_eq!(answer(&region, &delete).await.status, Status::Success);
    assert!(tenant_item(&region).await.is_none(), "Delete removed the item");
    let tombstone = stored_tenant_item(&region).await.expect("the delete's tombstone");
    let mut names: Vec<&str> = tombstone.keys().map(String::as_str).collect();
    names.sort_unstable();
    assert_eq!(
        names,
        [
            "cfn_once_deleted_ms",
            "cfn_once_expires_at",
            "cfn_once_fence",
            "cfn_once_fence_scope",
            "cfn_once_owner",
            "pk"
        ],
        "only the key, the fence and the owner remain, until TTL or the next write of the key"
    );
}

#[tokio::test]
async fn the_rollback_delete_of_an_abandoned_create_removes_what_it_wrote() {
    // A Create that wrote its item and then failed or was abandoned at its deadline answers
    // with an id other than the provider's own; the rollback Delete carries that id, and the
    // item its properties name must still go.
    let region = LocalRegion::new(Options::default()).await;
    let create = region.request("create-dynamodb-item.json").await;
    assert_eq!(answer(&region, &create).await.status, Status::Success);
    assert!(tenant_item(&region).await.is_some());
    let mut delete = region.request("delete-dynamodb-item.json").await;
    delete.request["PhysicalResourceId"] = json!("TenantSettings-0123456789abcdef");
    assert_eq!(answer(&region, &delete).await.status, Status::Success);
    assert!(tenant_item(&region).await.is_none(), "the rollback Delete removed the item");
}

/// The item the fixture's `Custom::DynamoDBItem` writes, read consistently; a deleted item's
/// tombstone (`cfn_once::fenced`) is no item.
async fn tenant_item(region: &LocalRegion) -> Option<HashMap<String, AttributeValue>> {
    stored_tenant_item(region).await.filter(|item| !item.contains_key(cfn_once::fenced::DELETED_ATTRIBUTE))
}

/// Whatever is stored at the fixture's key, tombstones included.
async fn stored_tenant_item(region: &LocalRegion) -> Option<HashMap<String, AttributeValue>> {
    let output = region
        .customer_dynamodb
        .get_item()
        .table_name(&region.item_table)
        .key("pk", AttributeValue::S("tenant#42".into()))
        .consistent_read(true)
        .send()
        .await
        .expect("get item");
    output.item
}

#[tokio::test]
async fn a_delete_for_an_id_cloudformation_generated_succeeds() {
    let region = LocalRegion::new(Options::default()).await;
    let mut delete = region.request("delete-dynamodb-item.json").await;
    delete.request["PhysicalResourceId"] = json!("cfn-once-example-TenantSettings-1XK9P2Q7ZL3M");
    let body = answer(&region, &delete).await;
    assert_eq!(
        (body.status, body.physical_resource_id.as_str()),
        (Status::Success, "cfn-once-example-TenantSettings-1XK9P2Q7ZL3M")
    );
}
