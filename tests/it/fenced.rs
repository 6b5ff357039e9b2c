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
    assert_eq!(table.get_item(key()).await, Ok(None), "a tombstone reads as no item");
    table.delete_item(&fence("request-c", 1), key()).await.expect("deleting what is gone succeeds");
}

/// S2 holds for deletes too: a stale write that arrives after a newer execution of the same
/// request deleted the item must not bring it back (a plain DeleteItem leaves no fence behind).
#[tokio::test]
async fn s2_a_stale_write_after_a_newer_delete_is_refused() {
    let region = LocalRegion::new(Options::default()).await;
    let table = FencedTable::new(region.customer_dynamodb.clone(), &region.item_table);
    table.put_item(&fence("request-a", 1), item("one")).await.expect("fence 1 writes");
    table.delete_item(&fence("request-a", 2), key()).await.expect("fence 2 deletes");
    assert_eq!(
        table.put_item(&fence("request-a", 1), item("resurrected")).await,
        Err(FencedWriteError::FencedOut { fence: 1 }),
        "the stale put under fence 1 is refused by the tombstone of fence 2"
    );
    assert_eq!(plan(&region).await, None, "the item stays deleted");
    assert_eq!(table.get_item(key()).await, Ok(None));
    let tombstone = region
        .customer_dynamodb
        .get_item()
        .table_name(&region.item_table)
        .set_key(Some(key()))
        .consistent_read(true)
        .send()
        .await
        .expect("get item")
        .item
        .expect("a tombstone is kept");
    let expires_at: u64 = tombstone[cfn_once::fenced::EXPIRES_ATTRIBUTE].as_n().expect("a number").parse().expect("n");
    let now_s = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).expect("after 1970").as_secs();
    assert!((now_s + 86_000..=now_s + 86_500).contains(&expires_at), "kept for a day: {expires_at} vs {now_s}");
    // The next request's write replaces the tombstone.
    table.put_item(&fence("request-b", 1), item("new")).await.expect("a later request writes the key again");
    assert_eq!(plan(&region).await.as_deref(), Some("new"));
    assert_eq!(
        table.get_item(key()).await.expect("read").and_then(|i| i.get("Plan")?.as_s().ok().cloned()).as_deref(),
        Some("new")
    );
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
