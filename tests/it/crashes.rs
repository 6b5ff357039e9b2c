//! Crashes through local AWS: a Lambda dropped mid-provider is taken over once its lease
//! expires, with a higher fence; a Lambda dropped between commit and PUT leaves stored bytes
//! that the next delivery PUTs.

use std::sync::Arc;
use std::time::{Duration, Instant};

use cfn_once::app::App;
use cfn_once_core::doubles::{PutFault, RecordingSink};
use cfn_once_core::lease::{LeaseRecord, LeaseState};
use cfn_once_core::response::{ResponseBody, Status};
use cfn_once_tests::{LocalRegion, Options, Sent, handler};
use serde_json::json;

const SHORT_LEASE: [(&str, &str); 3] =
    [("CFN_ONCE_LEASE_MS", "1500"), ("CFN_ONCE_HEARTBEAT_MS", "500"), ("CFN_ONCE_SKEW_MS", "100")];

/// Starts `app` on the next batch in a task, and drops it (a crash) once the request's record
/// satisfies `crash_when`.
async fn crash_when(
    region: &LocalRegion,
    app: App,
    sent: &Sent,
    crash_when: impl Fn(&LeaseRecord) -> bool,
) -> LeaseRecord {
    let esm = region.esm(1).await;
    let app = Arc::new(app);
    let task = tokio::spawn(async move {
        loop {
            if esm.poll_once(&handler(&app)).await.expect("poll").received > 0 {
                break;
            }
        }
    });
    let started = Instant::now();
    loop {
        if let Some(record) = region.record(sent).await.filter(|record| crash_when(record)) {
            task.abort();
            let _ = task.await;
            return record;
        }
        assert!(started.elapsed() < Duration::from_secs(20), "the first Lambda never reached the crash point");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

#[tokio::test]
async fn a_crash_after_acquire_is_taken_over_with_a_higher_fence() {
    let region = LocalRegion::new(Options { visibility_timeout_s: 2, ..Options::default() }).await;
    let config = region.config(&SHORT_LEASE);
    let mut sent = region.request("create-echo.json").await;
    sent.request["ResourceProperties"]["DelayMs"] = json!("1000");
    region.publish(&sent).await;

    let crashed = crash_when(&region, region.app(&config), &sent, |r| r.state == LeaseState::Running).await;
    assert_eq!(crashed.fence, 1);

    let survivor = region.app(&config);
    let esm = region.esm(1).await;
    let bytes = region.serve_until_answered(&esm, &survivor, &sent, Duration::from_secs(30)).await;
    region.drain(&esm, &survivor, Duration::from_secs(30)).await;
    let record = region.record(&sent).await.expect("record");
    assert_eq!((record.fence, record.state), (2, LeaseState::Committed), "taken over with a higher fence");
    assert_ne!(record.owner, crashed.owner);
    assert_eq!(region.responses(&sent).await, vec![bytes.clone()], "one PUT, of the committed bytes");
    assert_eq!(ResponseBody::parse(&bytes).expect("body").status, Status::Success);
}

#[tokio::test]
async fn a_crash_between_commit_and_put_ends_with_a_put_of_the_stored_bytes() {
    let region = LocalRegion::new(Options { visibility_timeout_s: 2, ..Options::default() }).await;
    let config = region.config(&SHORT_LEASE);
    let sent = region.request("create-echo.json").await;
    region.publish(&sent).await;

    let hanging = Arc::new(RecordingSink::new());
    hanging.inject(PutFault::Hang);
    let doomed = region.app_with(&config, region.lease_store(), hanging.clone());
    let crashed = crash_when(&region, doomed, &sent, |r| r.state == LeaseState::Committed).await;
    assert!(!crashed.delivered);
    assert!(hanging.all().is_empty(), "nothing reached S3 before the crash");
    assert!(region.responses(&sent).await.is_empty());
    let stored = crashed.response.clone().expect("committed bytes");

    let survivor = region.app(&config);
    let esm = region.esm(1).await;
    region.serve_until_answered(&esm, &survivor, &sent, Duration::from_secs(30)).await;
    region.drain(&esm, &survivor, Duration::from_secs(30)).await;
    assert_eq!(region.responses(&sent).await, vec![stored], "the stored bytes, once");
    let record = region.record(&sent).await.expect("record");
    assert_eq!((record.fence, record.delivered), (1, true), "no new execution was needed");
}

#[tokio::test]
async fn lost_dynamodb_replies_are_resolved_by_reading_the_item_back() {
    use cfn_once_core::doubles::{Fault, FaultyStore, Op};
    let region = LocalRegion::new(Options::default()).await;
    let config = region.config(&[]);
    let store = Arc::new(FaultyStore::new(region.lease_store()));
    // Both writes reach the table; their replies are lost.
    store.inject(Op::Acquire, Fault::LostReply);
    store.inject(Op::Commit, Fault::LostReply);
    let sink = Arc::new(cfn_once::adapters::http_sink::HttpResponseSink::new(config.put_timeout_ms).expect("client"));
    let app = region.app_with(&config, store.clone(), sink);
    let sent = region.request("create-echo.json").await;
    region.publish(&sent).await;
    let esm = region.esm(10).await;
    region.serve_until_answered(&esm, &app, &sent, Duration::from_secs(30)).await;
    let record = region.record(&sent).await.expect("record");
    assert_eq!((record.fence, record.state, record.delivered), (1, LeaseState::Committed, true), "no second acquire");
    assert_eq!(store.calls(Op::Read), 2, "one read per unknown outcome");
    assert_eq!(store.calls(Op::Acquire), 1);
    assert_eq!(region.responses(&sent).await.len(), 1);
}
