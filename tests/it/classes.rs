//! What the DynamoDB lease store makes of each class of failure, met through real clients: moto,
//! a port nobody listens on, a name that does not resolve, a peer that speaks no TLS, credentials
//! that cannot be loaded. Each class is the `StoreError` the worker acts on.

use aws_sdk_dynamodb::types::AttributeValue;
use cfn_once_core::fingerprint::Fingerprint;
use cfn_once_core::lease::{AcquireRequest, LeaseStore, StoreError};
use cfn_once_core::request::{RequestKey, StackArn};
use cfn_once_tests::{LocalRegion, Options, now_ms, unique};

fn key() -> RequestKey {
    RequestKey {
        stack_id: StackArn::parse("arn:aws:cloudformation:us-east-2:123456789012:stack/s/g").expect("a stack ARN"),
        request_id: unique("request"),
    }
}

fn acquire_request(key: &RequestKey) -> AcquireRequest {
    let now = now_ms();
    AcquireRequest {
        key: key.clone(),
        fingerprint: Fingerprint::from_stored(format!("{:032}", 7)),
        sent_ms: now,
        owner: "us-east-1/test/1".into(),
        now_ms: now,
        lease_until_ms: now + 30_000,
        skew_ms: 0,
        expires_ms: now + 86_400_000,
        poll_lag_ms: 0,
        label: Default::default(),
        preempt: false,
    }
}

#[tokio::test]
async fn a_fence_written_by_hand_at_its_largest_is_refused_permanently() {
    let region = LocalRegion::new(Options::default()).await;
    let key = key();
    let item = [
        ("pk", AttributeValue::S(key.stack_id.to_string())),
        ("sk", AttributeValue::S(key.request_id.clone())),
        ("fence", AttributeValue::N(u64::MAX.to_string())),
        ("state", AttributeValue::S("LEFT".into())),
        ("fingerprint", AttributeValue::S("left".into())),
        ("sent_ms", AttributeValue::N("0".into())),
    ];
    region
        .dynamodb
        .put_item()
        .table_name(&region.table)
        .set_item(Some(item.into_iter().map(|(name, value)| (name.to_owned(), value)).collect()))
        .send()
        .await
        .expect("the hand-written record");
    let refused = region.lease_store().acquire(&acquire_request(&key)).await.expect_err("no fence past u64::MAX");
    assert!(
        matches!(&refused, StoreError::Permanent(why) if why.contains("the largest a fence can be")),
        "{refused:?}"
    );
}
