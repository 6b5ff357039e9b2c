//! What the DynamoDB lease store makes of each class of failure, met through real clients: moto,
//! a port nobody listens on, a name that does not resolve, a peer that speaks no TLS, credentials
//! that cannot be loaded. Each class is the `StoreError` the worker acts on.

use std::io::{BufRead, BufReader};
use std::net::TcpListener;

use aws_sdk_dynamodb::config::Credentials;
use aws_sdk_dynamodb::types::AttributeValue;
use cfn_once::adapters::dynamodb_lease::DynamoLeaseStore;
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

/// The lease store as the function wires it (its HTTP client, `app::dynamodb_client`) on a table
/// at `endpoint`.
async fn store_at(endpoint: &str) -> DynamoLeaseStore {
    let tls = cfn_once::adapters::https::client_config().expect("the function's TLS configuration");
    let sdk = aws_config::defaults(aws_config::BehaviorVersion::latest())
        .region(aws_config::Region::new("us-east-1"))
        .endpoint_url(endpoint)
        .credentials_provider(Credentials::new("test", "test", None, None, "classes"))
        .http_client(cfn_once::adapters::https::sdk_http_client(tls))
        .load()
        .await;
    DynamoLeaseStore::new(cfn_once::app::dynamodb_client(&sdk, 1_000, "us-east-1"), "leases")
}

#[tokio::test]
async fn an_acquire_that_could_not_connect_was_not_applied() {
    let port = TcpListener::bind("127.0.0.1:0").expect("bind").local_addr().expect("address").port();
    let store = store_at(&format!("http://127.0.0.1:{port}")).await;
    let error = store.acquire(&acquire_request(&key())).await.expect_err("nobody listens");
    assert!(matches!(error, StoreError::Transient(_)), "a refused connection sent nothing: {error:?}");
}

#[tokio::test]
async fn an_acquire_whose_connection_closed_after_sending_may_have_been_applied() {
    let listener = TcpListener::bind("127.0.0.1:0").expect("bind");
    let port = listener.local_addr().expect("address").port();
    std::thread::spawn(move || {
        for stream in listener.incoming().flatten() {
            // The whole head is read, so the request was certainly sent; then the peer closes.
            let mut reader = BufReader::new(&stream);
            let mut line = String::new();
            while reader.read_line(&mut line).is_ok_and(|read| read > 0) && line != "\r\n" {
                line.clear();
            }
        }
    });
    let store = store_at(&format!("http://127.0.0.1:{port}")).await;
    let error = store.acquire(&acquire_request(&key())).await.expect_err("no answer");
    assert!(matches!(error, StoreError::Ambiguous(_)), "sent, then no answer: {error:?}");
}
