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
    answer_by(region, &region.app(&region.config(&[])), sent).await
}

/// [`answer`], with the handler `app`.
async fn answer_by(region: &LocalRegion, app: &cfn_once::app::App, sent: &Sent) -> ResponseBody {
    let esm = region.esm(10).await;
    region.publish(sent).await;
    let bytes = region.serve_until_answered(&esm, app, sent, ANSWER_TIMEOUT).await;
    region.drain(&esm, app, ANSWER_TIMEOUT).await;
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

    // What the application's own reader finds on a live item: its attributes, and cfn-once's
    // owner, fence and write token (docs/providers.md, "Shipped providers").
    let mut names: Vec<&str> = item.keys().map(String::as_str).collect();
    names.sort_unstable();
    assert_eq!(
        names,
        [
            "Plan",
            "Regions",
            "Seats",
            "SsoEnabled",
            "cfn_once_fence",
            "cfn_once_fence_scope",
            "cfn_once_owner",
            "cfn_once_writes",
            "pk"
        ],
        "{item:?}"
    );

    let mut delete = region.request("delete-dynamodb-item.json").await;
    delete.request["PhysicalResourceId"] = json!(body.physical_resource_id);
    assert_eq!(answer(&region, &delete).await.status, Status::Success);
    // Read as the application reads it: a plain GetItem and a Scan find nothing, no tombstone.
    assert_eq!(tenant_item(&region).await, None, "Delete removed the item, leaving nothing");
    assert_eq!(scanned_items(&region).await, Vec::<HashMap<String, AttributeValue>>::new(), "a Scan finds nothing");
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

/// The item the fixture's `Custom::DynamoDBItem` writes, read as the application would: a plain,
/// consistent GetItem.
pub(crate) async fn tenant_item(region: &LocalRegion) -> Option<HashMap<String, AttributeValue>> {
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

/// Every item of the item table, as a plain Scan reads it.
async fn scanned_items(region: &LocalRegion) -> Vec<HashMap<String, AttributeValue>> {
    let output = region
        .customer_dynamodb
        .scan()
        .table_name(&region.item_table)
        .consistent_read(true)
        .send()
        .await
        .expect("scan");
    output.items.unwrap_or_default()
}

/// The rule that makes tombstones unnecessary for the shipped `Custom::DynamoDBItem`
/// (docs/providers.md, "Write your own provider"; ARCHITECTURE.md, S2): no request of it both
/// writes and deletes one key. Played through a resource's whole life on the wire: a Create, an
/// Update in place, an Update that changes the key (a replacement: CloudFormation deletes the old
/// key with a Delete of its own), that Delete, the final Delete, and a failed Create's rollback
/// Delete (an id the provider never returned). Every write to the item table is read off the wire (the proxy in
/// front of moto keeps each request's body) with its request's fence scope and its key.
#[tokio::test]
async fn a_shipped_provider_request_never_writes_a_key_it_deleted() {
    use std::collections::{BTreeMap, BTreeSet};
    use std::sync::Arc;

    use cfn_once_tests::{FaultProxy, Match};
    use serde_json::Value;

    let region = LocalRegion::new(Options::default()).await;
    let proxy = FaultProxy::start(cfn_once_tests::moto());
    let config = region.config(&[]);
    let sdk = cfn_once_local::provision::sdk_config(&proxy.url(), cfn_once_tests::REGION).await;
    let sink = Arc::new(cfn_once::adapters::http_sink::HttpResponseSink::new(config.put_timeout_ms).expect("sink"));
    let app = region.app_with_router(
        &config,
        region.lease_store(),
        sink,
        cfn_once::providers::standard_router(&config, &sdk),
    );
    let answer = |sent: Sent| {
        let (app, region) = (&app, &region);
        async move { answer_by(region, app, &sent).await }
    };
    let request = |kind: &str, id: Option<&str>, key: &str, old_key: Option<&str>| {
        let region = &region;
        let (kind, id, key, old_key) =
            (kind.to_owned(), id.map(str::to_owned), key.to_owned(), old_key.map(str::to_owned));
        async move {
            let mut sent = region.request("create-dynamodb-item.json").await;
            sent.request["RequestType"] = json!(kind);
            sent.request["ResourceProperties"]["Key"] = json!({"pk": key});
            if let Some(id) = id {
                sent.request["PhysicalResourceId"] = json!(id);
            }
            if let Some(old_key) = old_key {
                let mut old = sent.request["ResourceProperties"].clone();
                old["Key"] = json!({"pk": old_key});
                sent.request["OldResourceProperties"] = old;
            }
            sent
        }
    };

    let created = answer(request("Create", None, "tenant#42", None).await).await;
    assert_eq!(created.status, Status::Success, "{created:?}");
    let first_id = created.physical_resource_id;
    let updated = answer(request("Update", Some(&first_id), "tenant#42", Some("tenant#42")).await).await;
    assert_eq!((updated.status, updated.physical_resource_id.as_str()), (Status::Success, first_id.as_str()));
    let replaced = answer(request("Update", Some(&first_id), "tenant#43", Some("tenant#42")).await).await;
    assert_eq!(replaced.status, Status::Success, "{replaced:?}");
    assert_ne!(replaced.physical_resource_id, first_id, "a changed key is a replacement");
    let cleanup = answer(request("Delete", Some(&first_id), "tenant#42", None).await).await;
    assert_eq!(cleanup.status, Status::Success);
    let last = answer(request("Delete", Some(&replaced.physical_resource_id), "tenant#43", None).await).await;
    assert_eq!(last.status, Status::Success);
    answer(request("Create", None, "tenant#44", None).await).await;
    let rollback = answer(request("Delete", Some("TenantSettings-0123456789abcdef"), "tenant#44", None).await).await;
    assert_eq!(rollback.status, Status::Success);

    // Each request's writes and deletes of the item table, by its fence scope.
    let mut by_scope: BTreeMap<String, (BTreeSet<String>, BTreeSet<String>)> = BTreeMap::new();
    let mut operations = 0;
    for operation in ["PutItem", "UpdateItem", "DeleteItem"] {
        for body in proxy.bodies(&Match::Operation(operation.to_owned())) {
            let body: Value = serde_json::from_slice(&body).expect("a JSON request");
            if body["TableName"] != json!(region.item_table) {
                continue;
            }
            operations += 1;
            let scope = body["ExpressionAttributeValues"][":cfn_once_scope"]["S"].as_str().expect("a fenced write");
            let key = match operation {
                "PutItem" => &body["Item"]["pk"]["S"],
                _ => &body["Key"]["pk"]["S"],
            };
            let key = key.as_str().expect("the key").to_owned();
            let entry = by_scope.entry(scope.to_owned()).or_default();
            if operation == "DeleteItem" {
                entry.1.insert(key)
            } else {
                entry.0.insert(key)
            };
        }
    }
    println!("{operations} writes of the item table, by request: {by_scope:?}");
    assert_eq!(by_scope.len(), 7, "every request wrote or deleted under its own scope: {by_scope:?}");
    let deletes: usize = by_scope.values().map(|(_, deleted)| deleted.len()).sum();
    assert_eq!(deletes, 3, "three Deletes, each of one key: {by_scope:?}");
    for (scope, (written, deleted)) in &by_scope {
        assert!(written.is_disjoint(deleted), "request {scope} wrote and deleted {:?}", written.intersection(deleted));
    }
    // And the application's own reader finds nothing left of the deleted items.
    assert_eq!(scanned_items(&region).await, Vec::<HashMap<String, AttributeValue>>::new());
}
