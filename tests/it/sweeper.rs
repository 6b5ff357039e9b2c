//! The sweeper deletes lease records past their retention, and nothing else.

use std::time::{Duration, Instant};

use cfn_once::adapters::control_table::TableControl;
use cfn_once::sweeper::sweep;
use cfn_once_core::fingerprint::Fingerprint;
use cfn_once_core::lease::{Acquire, AcquireRequest, LeaseStore};
use cfn_once_core::request::RequestKey;
use cfn_once_tests::{LocalRegion, Options, now_ms};

#[tokio::test]
async fn expired_records_are_deleted_and_live_ones_and_the_control_item_kept() {
    let region = LocalRegion::new(Options::default()).await;
    let store = region.lease_store();
    let now = now_ms();
    let mut keys = Vec::new();
    // 30 records: every third one still within its retention.
    for index in 0..30u64 {
        let key = RequestKey {
            stack_id: cfn_once_core::request::StackArn::parse(
                "arn:aws:cloudformation:us-east-2:123456789012:stack/s/g",
            )
            .expect("a stack ARN"),
            request_id: format!("r{index}"),
        };
        let expires_ms = if index % 3 == 0 { now + 86_400_000 } else { now - 1 };
        let request = AcquireRequest {
            key: key.clone(),
            fingerprint: Fingerprint::from_stored(format!("{index:032}")),
            sent_ms: now - 100_000,
            owner: "us-east-1/test/1".into(),
            now_ms: now - 100_000,
            lease_until_ms: now - 90_000,
            skew_ms: 0,
            expires_ms,
            poll_lag_ms: 0,
            label: Default::default(),
            preempt: false,
        };
        assert!(matches!(store.acquire(&request).await.expect("acquire"), Acquire::Acquired { .. }));
        keys.push((key, index % 3 == 0));
    }
    let control = TableControl::new(region.dynamodb.clone(), &region.table, "us-east-1");
    control.set_active_region("us-west-2", now, "test").await.expect("control item");

    let report =
        sweep(&region.dynamodb, &region.table, now, Instant::now() + Duration::from_secs(60)).await.expect("sweep");
    assert_eq!((report.deleted, report.kept, report.complete), (20, 0, true), "{report:?}");
    for (key, live) in &keys {
        assert_eq!(store.read(key).await.expect("read").is_some(), *live, "{key:?}");
    }
    assert_eq!(
        control.active_region().await.expect("control").as_deref(),
        Some("us-west-2"),
        "the control item is not a lease record"
    );

    let again =
        sweep(&region.dynamodb, &region.table, now, Instant::now() + Duration::from_secs(60)).await.expect("sweep");
    assert_eq!(again.deleted, 0, "nothing left to sweep");
}

#[tokio::test]
async fn a_spent_time_budget_stops_the_sweep_early() {
    let region = LocalRegion::new(Options::default()).await;
    let report = sweep(&region.dynamodb, &region.table, now_ms(), Instant::now()).await.expect("sweep");
    assert_eq!((report.scanned, report.complete), (0, false));
}
