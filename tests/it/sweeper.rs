//! The sweeper deletes lease records past their retention, and nothing else.

use std::time::{Duration, Instant};

use cfn_once::adapters::control_table::TableControl;
use cfn_once::sweeper::sweep;
use cfn_once_core::fingerprint::Fingerprint;
use cfn_once_core::lease::{Acquire, AcquireRequest, LeaseStore};
use cfn_once_core::request::RequestKey;
use cfn_once_tests::{Fault, FaultProxy, LocalRegion, Match, Options, now_ms};

/// `count` lease records in `region`'s table, the ones `live` says still within their retention.
/// Expired means expired at `now`.
async fn records(region: &LocalRegion, now: u64, count: u64, live: impl Fn(u64) -> bool) -> Vec<(RequestKey, bool)> {
    let store = region.lease_store();
    let mut keys = Vec::new();
    for index in 0..count {
        let key = RequestKey {
            stack_id: cfn_once_core::request::StackArn::parse(
                "arn:aws:cloudformation:us-east-2:123456789012:stack/s/g",
            )
            .expect("a stack ARN"),
            request_id: format!("r{index}"),
        };
        let expires_ms = if live(index) { now + 86_400_000 } else { now - 1 };
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
        keys.push((key, live(index)));
    }
    keys
}

#[tokio::test]
async fn expired_records_are_deleted_and_live_ones_and_the_control_item_kept() {
    let region = LocalRegion::new(Options::default()).await;
    let store = region.lease_store();
    let now = now_ms();
    // 30 records: every third one still within its retention.
    let keys = records(&region, now, 30, |index| index % 3 == 0).await;
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

/// The sweeper's calls through a proxy that never answers `hung`, on the client the sweeper's
/// Lambda builds: every call is cut at the stop time, a second after the start, however long the
/// client itself would wait.
async fn a_hung_call_ends_the_sweep_at_its_stop_time(hung: &str) {
    let region = LocalRegion::new(Options::default()).await;
    records(&region, now_ms(), 3, |_| false).await;
    let proxy = FaultProxy::start(&region.endpoint);
    proxy.inject(Match::Operation(hung.to_owned()), Fault::Hang, u32::MAX);
    let sdk = cfn_once_local::provision::sdk_config(&proxy.url(), "us-east-1").await;
    for client in [aws_sdk_dynamodb::Client::new(&sdk), cfn_once::app::sweeper_client(&sdk)] {
        let started = Instant::now();
        let report = tokio::time::timeout(
            Duration::from_secs(30),
            sweep(&client, &region.table, now_ms(), started + Duration::from_secs(1)),
        )
        .await
        .expect("the sweep ends at its stop time")
        .expect("a sweep cut short is not an error");
        assert!(!report.complete, "{report:?}");
        assert_eq!(report.deleted, 0, "{report:?}");
        assert!(started.elapsed() < Duration::from_secs(3), "{hung} hung: the sweep took {:?}", started.elapsed());
    }
}

#[tokio::test]
async fn a_hung_scan_ends_the_sweep_at_its_stop_time() {
    a_hung_call_ends_the_sweep_at_its_stop_time("Scan").await;
}

#[tokio::test]
async fn a_hung_delete_ends_the_sweep_at_its_stop_time() {
    a_hung_call_ends_the_sweep_at_its_stop_time("DeleteItem").await;
}
