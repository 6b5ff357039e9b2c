//! Record formats across versions: a record of a format newer than this handler's is never
//! written, deleted or acted on, by the in-memory store, the DynamoDB store on moto, the sweeper
//! and the control item's reader and writer alike; a record of format 1 (no `format`
//! attribute, as the revisions before 0.1.0 wrote it) is read and written, and leaves in this handler's format.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::{Duration, Instant};

use aws_sdk_dynamodb::types::AttributeValue;
use cfn_once_core::fingerprint::Fingerprint;
use cfn_once_core::lease::{
    Acquire, AcquireRequest, Conditional, LeaseRecord, LeaseStore, PollRecord, RECORD_FORMAT, RequestLabel, StoreError,
    left_record,
};
use cfn_once_core::memory_store::MemoryLeaseStore;
use cfn_once_core::request::RequestKey;
use cfn_once_tests::{LocalRegion, Options, REGION, unique};

const T0: u64 = 1_800_000_000_000;
const NEWER: u32 = RECORD_FORMAT + 1;

fn key() -> RequestKey {
    RequestKey {
        stack_id: cfn_once_core::request::StackArn::parse(
            "arn:aws:cloudformation:us-east-2:123456789012:stack/formats/guid",
        )
        .expect("a stack ARN"),
        request_id: unique("request"),
    }
}

fn acquire(key: &RequestKey, fingerprint: &str, now_ms: u64, preempt: bool) -> AcquireRequest {
    AcquireRequest {
        key: key.clone(),
        fingerprint: Fingerprint::from_stored(format!("{fingerprint:0>32}")),
        sent_ms: now_ms,
        owner: format!("us-east-1/{fingerprint}"),
        now_ms,
        lease_until_ms: now_ms + 10_000,
        skew_ms: 1_000,
        expires_ms: now_ms + 86_400_000,
        poll_lag_ms: 0,
        label: RequestLabel::default(),
        preempt,
    }
}

/// Every write and read of the port, on a record of a newer format: each refused with
/// `NewerFormat`, naming it.
async fn every_call_leaves_a_newer_record_alone(store: &dyn LeaseStore, key: &RequestKey, fence: u64) {
    let newer = |result: Result<(), StoreError>, call: &str| match result {
        Err(StoreError::NewerFormat { format, settled: false }) => assert_eq!(format, NEWER, "{call}"),
        other => panic!("{call} on a record of a newer format: {other:?}"),
    };
    let poll = PollRecord {
        fingerprint: Fingerprint::from_stored(format!("{:0>32}", "a")),
        state: "{}".into(),
        poll_at_ms: T0,
        waiting_since_ms: T0,
        polls: 1,
    };
    let now = T0 + 60_000;
    // A new attempt, the same one, and a close would each take it: none may.
    for (call, request) in [
        ("acquire by a new attempt", acquire(key, "b", now, false)),
        ("acquire by the same attempt", acquire(key, "a", now, false)),
    ] {
        newer(store.acquire(&request).await.map(drop), call);
    }
    newer(store.close(&acquire(key, "c", now, true), b"closed").await.map(drop), "close");
    newer(store.heartbeat(key, fence, now + 10_000, now).await.map(drop), "heartbeat");
    newer(store.commit(key, fence, b"{}", now).await.map(drop), "commit");
    newer(store.wait(key, fence, &poll, now).await.map(drop), "wait");
    newer(store.mark_delivered(key, fence, None, now).await.map(drop), "mark_delivered");
    let mut left = left_record(key, fence, None, now, now + 1);
    left.fence = fence;
    newer(store.leave(&left).await.map(drop), "leave");
    newer(store.read(key).await.map(drop), "read");
}

#[tokio::test]
async fn the_memory_store_never_writes_deletes_or_reads_a_record_of_a_newer_format() {
    let store = MemoryLeaseStore::new();
    let key = key();
    assert!(matches!(store.acquire(&acquire(&key, "a", T0, false)).await, Ok(Acquire::Acquired { fence: 1, .. })));
    let planted = LeaseRecord { format: NEWER, expires_ms: T0, ..store.get(&key).expect("the record") };
    store.put_as_written(planted.clone());
    every_call_leaves_a_newer_record_alone(&store, &key, 1).await;
    assert_eq!(store.sweep(T0 + 86_400_000), 0, "the sweep keeps it, though it expired");
    assert_eq!(store.get(&key), Some(planted), "untouched");
}

/// The item of `key` as stored.
async fn item_of(client: &aws_sdk_dynamodb::Client, table: &str, key: &RequestKey) -> HashMap<String, AttributeValue> {
    cfn_once_tests::lease_item(client, table, key).await.expect("the item")
}

#[tokio::test]
async fn the_dynamodb_store_and_the_sweeper_never_write_or_delete_a_record_of_a_newer_format() {
    let region = LocalRegion::new(Options::default()).await;
    let store: Arc<dyn LeaseStore> = region.lease_store();
    let client = cfn_once::app::dynamodb_client(&region.sdk, 5_000, REGION);
    let key = key();
    assert!(matches!(store.acquire(&acquire(&key, "a", T0, false)).await, Ok(Acquire::Acquired { fence: 1, .. })));
    assert_eq!(item_of(&client, &region.table, &key).await["format"], AttributeValue::N(RECORD_FORMAT.to_string()));
    // A newer version rewrites it: its format, a field this version does not know, expired.
    client
        .update_item()
        .table_name(&region.table)
        .key("pk", AttributeValue::S(key.stack_id.to_string()))
        .key("sk", AttributeValue::S(key.request_id.clone()))
        .update_expression("SET #format = :newer, future_field = :x, expires_ms = :expired")
        .expression_attribute_names("#format", "format")
        .expression_attribute_values(":newer", AttributeValue::N(NEWER.to_string()))
        .expression_attribute_values(":x", AttributeValue::S("meaning only a newer version knows".into()))
        .expression_attribute_values(":expired", AttributeValue::N(T0.to_string()))
        .send()
        .await
        .expect("the newer version's write");
    let planted = item_of(&client, &region.table, &key).await;
    every_call_leaves_a_newer_record_alone(store.as_ref(), &key, 1).await;
    let sweeper = cfn_once::app::sweeper_client(&region.sdk);
    let report =
        cfn_once::sweeper::sweep(&sweeper, &region.table, T0 + 86_400_000, Instant::now() + Duration::from_secs(30))
            .await
            .expect("the sweep");
    println!("sweep past its expiry: {report:?}");
    assert_eq!(report.deleted, 0, "the sweeper deleted a record of a newer format");
    assert_eq!(item_of(&client, &region.table, &key).await, planted, "untouched");
    // The newer version finishes it: `delivered` says so in every format.
    client
        .update_item()
        .table_name(&region.table)
        .key("pk", AttributeValue::S(key.stack_id.to_string()))
        .key("sk", AttributeValue::S(key.request_id.clone()))
        .update_expression("SET delivered = :true")
        .expression_attribute_values(":true", AttributeValue::Bool(true))
        .send()
        .await
        .expect("the newer version's write");
    assert!(
        matches!(store.read(&key).await, Err(StoreError::NewerFormat { format: NEWER, settled: true })),
        "a finished request of a newer format reads as settled"
    );
}

#[tokio::test]
async fn a_record_of_format_1_is_read_written_and_left_in_this_format() {
    let region = LocalRegion::new(Options::default()).await;
    let store: Arc<dyn LeaseStore> = region.lease_store();
    let client = cfn_once::app::dynamodb_client(&region.sdk, 5_000, REGION);
    let key = key();
    assert!(matches!(store.acquire(&acquire(&key, "a", T0, false)).await, Ok(Acquire::Acquired { fence: 1, .. })));
    // As the revisions before 0.1.0 wrote it: no format.
    client
        .update_item()
        .table_name(&region.table)
        .key("pk", AttributeValue::S(key.stack_id.to_string()))
        .key("sk", AttributeValue::S(key.request_id.clone()))
        .update_expression("REMOVE #format")
        .expression_attribute_names("#format", "format")
        .send()
        .await
        .expect("REMOVE format");
    assert_eq!(store.read(&key).await.expect("read").expect("a record").format, 1);
    assert_eq!(store.commit(&key, 1, b"{}", T0 + 1).await.expect("commit"), Conditional::Applied);
    assert_eq!(store.read(&key).await.expect("read").expect("a record").format, RECORD_FORMAT);
}

#[tokio::test]
async fn the_control_item_of_a_newer_format_is_neither_read_nor_flipped() {
    use cfn_once::adapters::control_table::TableControl;

    let region = LocalRegion::new(Options::default()).await;
    let client = cfn_once::app::dynamodb_client(&region.sdk, 5_000, REGION);
    let control = TableControl::new(client.clone(), &region.table, REGION);
    control.set_active_region("us-west-2", T0, "test").await.expect("flip");
    client
        .update_item()
        .table_name(&region.table)
        .key("pk", AttributeValue::S("control#active".into()))
        .key("sk", AttributeValue::S("control".into()))
        .update_expression("SET #format = :newer")
        .expression_attribute_names("#format", "format")
        .expression_attribute_values(":newer", AttributeValue::N("3".into()))
        .send()
        .await
        .expect("the newer version's write");
    let read = control.active_region().await.expect_err("a newer control item is not read");
    assert!(read.0.contains("format 3"), "{read}");
    let flip = control.set_active_region(REGION, T0 + 1, "test").await.expect_err("nor flipped");
    assert!(flip.0.contains("newer version"), "{flip}");
}
