//! S2 on a real table (moto): a fenced write under fence t is refused once a write under a
//! higher fence of the same request was accepted; other requests are not fenced against it.

use std::collections::HashMap;

use aws_sdk_dynamodb::types::AttributeValue;
use cfn_once::fenced::{FencedTable, FencedWriteError};
use cfn_once_core::provider::Fence;
use cfn_once_tests::{LocalRegion, Options};

fn item(value: &str) -> HashMap<String, AttributeValue> {
    HashMap::from([
        ("pk".to_owned(), AttributeValue::S("tenant#1".into())),
        ("Plan".to_owned(), AttributeValue::S(value.into())),
    ])
}

fn key() -> HashMap<String, AttributeValue> {
    HashMap::from([("pk".to_owned(), AttributeValue::S("tenant#1".into()))])
}

fn fence(scope: &str, value: u64) -> Fence {
    Fence { scope: scope.into(), value }
}

async fn plan(region: &LocalRegion) -> Option<String> {
    let output = region
        .customer_dynamodb
        .get_item()
        .table_name(&region.item_table)
        .set_key(Some(key()))
        .consistent_read(true)
        .send()
        .await
        .expect("get item");
    output.item.and_then(|item| item.get("Plan")?.as_s().ok().cloned())
}

#[tokio::test]
async fn s2_a_stale_fence_is_refused_and_a_newer_one_accepted() {
    let region = LocalRegion::new(Options::default()).await;
    let table = FencedTable::new(region.customer_dynamodb.clone(), &region.item_table);

    table.put_item(&fence("request-a", 1), item("one")).await.expect("first write");
    table.put_item(&fence("request-a", 2), item("two")).await.expect("a newer fence is accepted");
    assert_eq!(
        table.put_item(&fence("request-a", 1), item("stale")).await,
        Err(FencedWriteError::FencedOut { fence: 1 }),
        "the stale execution's write is refused"
    );
    assert_eq!(plan(&region).await.as_deref(), Some("two"));
    table.put_item(&fence("request-a", 2), item("two again")).await.expect("the same fence may retry its write");
    assert_eq!(
        table.delete_item(&fence("request-a", 1), key()).await,
        Err(FencedWriteError::FencedOut { fence: 1 }),
        "a stale delete is refused too"
    );
    assert_eq!(plan(&region).await.as_deref(), Some("two again"));

    // A later request (CloudFormation's next operation) starts its own fence sequence.
    table.put_item(&fence("request-b", 1), item("three")).await.expect("another request writes");
    assert_eq!(plan(&region).await.as_deref(), Some("three"));
    table.delete_item(&fence("request-c", 1), key()).await.expect("delete");
    assert_eq!(plan(&region).await, None);
    table.delete_item(&fence("request-c", 1), key()).await.expect("deleting what is gone succeeds");
}

#[tokio::test]
async fn a_missing_table_is_named() {
    let region = LocalRegion::new(Options::default()).await;
    let table = FencedTable::new(region.customer_dynamodb.clone(), "no-such-table");
    assert_eq!(
        table.put_item(&fence("request-a", 1), item("x")).await,
        Err(FencedWriteError::NoSuchTable { table: "no-such-table".into() })
    );
}
