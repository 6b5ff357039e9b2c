//! S1 through local AWS: the same request delivered three times, two of them at once to two
//! handler instances, runs the provider once and is answered with identical bytes.

use std::sync::Arc;
use std::time::{Duration, Instant};

use cfn_once::adapters::http_sink::HttpResponseSink;
use cfn_once::app::App;
use cfn_once::providers::standard_router;
use cfn_once_core::doubles::CountingEcho;
use cfn_once_core::lease::LeaseState;
use cfn_once_core::response::{ResponseBody, Status};
use cfn_once_local::esm::LocalEventSourceMapping;
use cfn_once_local::provision::queue_depth;
use cfn_once_tests::{LocalRegion, Options, handler};
use serde_json::json;

const COUNTED_TYPE: &str = "Custom::Counted";

#[tokio::test]
async fn three_deliveries_two_instances_one_provider_run_one_answer() {
    let region = LocalRegion::new(Options::default()).await;
    let config = region.config(&[("CFN_ONCE_LEASE_MS", "2000"), ("CFN_ONCE_HEARTBEAT_MS", "500")]);
    let counted = CountingEcho::default();
    let instance = || {
        let sink = Arc::new(HttpResponseSink::new(config.put_timeout_ms).expect("http client"));
        region.app_with_router(
            &config,
            region.lease_store(),
            sink,
            standard_router(&config, &region.sdk).register(COUNTED_TYPE, counted.clone()),
        )
    };
    let (first, second) = (instance(), instance());
    let (first_esm, second_esm) = (region.esm(1).await, region.esm(1).await);

    let mut sent = region.request("create-echo.json").await;
    sent.request["ResourceType"] = json!(COUNTED_TYPE);
    // Slow enough that both instances hold a copy while the provider runs.
    sent.request["ResourceProperties"]["DelayMs"] = json!("1500");
    for _ in 0..3 {
        region.publish(&sent).await;
    }

    let started = Instant::now();
    let ((first_received, first_backed_off), (second_received, second_backed_off)) =
        tokio::join!(serve(&region, &first, first_esm, started), serve(&region, &second, second_esm, started));
    assert!(first_received >= 1 && second_received >= 1, "both instances got a copy");
    assert!(first_backed_off + second_backed_off >= 1, "a copy arrived while the lease was held, and backed off");

    assert_eq!(counted.calls(), 1, "the provider ran once");
    let versions = region.responses(&sent).await;
    assert!(!versions.is_empty());
    assert!(versions.windows(2).all(|pair| pair[0] == pair[1]), "S1: every PUT carried the same bytes");
    assert_eq!(versions.len(), 1, "copies arriving after delivery were dropped, not re-sent");
    let record = region.record(&sent).await.expect("record");
    assert_eq!(
        (record.fence, record.state, record.delivered),
        (1, LeaseState::Committed, true),
        "one acquire, one commit"
    );
    assert_eq!(record.response.as_deref(), Some(&versions[0][..]));
    assert_eq!(ResponseBody::parse(&versions[0]).expect("body").status, Status::Success);
}

/// Polls as one handler instance until the queue is empty; returns (received, backed off).
async fn serve(region: &LocalRegion, app: &App, esm: LocalEventSourceMapping, started: Instant) -> (usize, usize) {
    let (mut received, mut backed_off) = (0, 0);
    loop {
        let report = esm.poll_once(&handler(app)).await.expect("poll");
        received += report.received;
        backed_off += report.failed;
        if queue_depth(&region.sqs, &region.queue.url).await.expect("depth") == 0 {
            return (received, backed_off);
        }
        assert!(started.elapsed() < Duration::from_secs(40), "duplicates were not settled in 40 s");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}
