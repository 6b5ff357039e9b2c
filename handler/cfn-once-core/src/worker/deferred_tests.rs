//! A provider's call deferred to a later invocation (`ProviderError::Deferred`: credentials
//! that expired and that nothing in this process refreshes), as the lease store's deferral: the
//! run ends unanswered, the message comes back, and a later delivery runs the provider again
//! under a higher fence; near the deadline, FAILED saying the credentials expired.

use super::*;

/// One delivery of `body`, its copy sent at `sent_ms`, received for the `receive_count`th time.
fn deliver(h: &Harness, worker: &Worker, body: &str, sent_ms: u64, receive_count: u32) -> Disposition {
    let invocation = h.invocation(900_000);
    let record = QueueRecord { body: Some(body), receive_count, sent_ms: Some(sent_ms) };
    drive(&h.clock, worker.handle(record, &invocation))
}

#[test]
fn a_deferred_provider_call_is_left_to_a_later_invocation_and_runs_under_a_higher_fence() {
    let h = Harness::new();
    h.counting.defer(1);
    let body = request("Create", "Custom::Counting", json!({"A": "1"}), URL);
    let sent_ms = h.clock.now_ms();
    let first = deliver(&h, &h.worker("us-east-1"), &body, sent_ms, 1);
    let delay_s = match &first {
        Disposition::Retry { delay_s, why } if why.contains("credentials that expired") => *delay_s,
        other => panic!("a deferral comes back later: {other:?}"),
    };
    assert!(h.sink.all().is_empty(), "nothing answered on a deferral");
    assert_eq!(h.record().lease_until_ms, 0, "the lease was ended, for the next run to take over at once");
    assert_eq!(h.counting.runs(), vec![(1, None)], "not retried within the invocation");
    h.clock.advance_ms(u64::from(delay_s) * 1000);
    assert_eq!(answered(&deliver(&h, &h.worker("us-east-1"), &body, sent_ms, 2)), (2, Status::Success));
    assert_eq!(h.counting.runs(), vec![(1, None), (2, Some(1))], "never twice under one fence");
    assert_eq!(h.bodies(URL).len(), 1);
}

#[test]
fn a_deferral_with_no_time_to_run_again_is_answered_failed_saying_the_credentials_expired() {
    let h = Harness::new();
    h.counting.defer(1);
    // 24 s left of a ServiceTimeout of 104 s: its 20 s deadline margin begins before a second
    // run could take the lease (a backoff floor of 4 s and the skew margin away).
    let body = request("Create", "Custom::Counting", json!({"A": "1", "ServiceTimeout": "104"}), URL);
    assert_eq!(answered(&handle_sent(&h, &h.worker("us-east-1"), &body, 80_000)), (1, Status::Failed));
    let reason = h.bodies(URL)[0].reason.clone().unwrap_or_default();
    assert!(reason.contains("refused for credentials that expired"), "{reason}");
    assert!(reason.contains("ExpiredTokenException"), "{reason}");
    assert_eq!(h.counting.runs(), vec![(1, None)]);
}

/// Credentials that never come back: every delivery comes back while a run still fits (never
/// into the margin, where the answer could no longer say why), and the last one answers FAILED
/// saying the credentials expired, before the deadline; no copy goes to the DLQ.
#[test]
fn credentials_that_stay_expired_end_in_failed_saying_so_before_the_deadline() {
    for service_timeout_s in [60, 300, 3_600] {
        let h = Harness::new();
        h.counting.defer(u32::MAX);
        let properties = json!({"A": "1", "ServiceTimeout": service_timeout_s.to_string()});
        let body = request("Create", "Custom::Counting", properties, URL);
        let sent_ms = h.clock.now_ms();
        let deadline_ms = sent_ms + service_timeout_s * 1000;
        let mut receive_count = 1;
        let answer = loop {
            match deliver(&h, &h.worker("us-east-1"), &body, sent_ms, receive_count) {
                Disposition::Retry { delay_s, why } => {
                    assert!(why.contains("credentials that expired"), "{why}");
                    h.clock.advance_ms(u64::from(delay_s) * 1000);
                }
                Disposition::Done(Done::Answered { status, .. }) => break status,
                other => panic!("ServiceTimeout {service_timeout_s}: {other:?}"),
            }
            receive_count += 1;
            assert!(receive_count < 1_000, "ServiceTimeout {service_timeout_s}: still deferring");
        };
        assert_eq!(answer, Status::Failed);
        assert!(h.clock.now_ms() < deadline_ms, "ServiceTimeout {service_timeout_s}: answered past the deadline");
        let reason = h.bodies(URL)[0].reason.clone().unwrap_or_default();
        assert!(
            reason.contains("refused for credentials that expired"),
            "ServiceTimeout {service_timeout_s}: {reason}"
        );
        let runs = h.counting.runs();
        assert!(runs.len() > 1, "ServiceTimeout {service_timeout_s}: tried again before answering: {runs:?}");
        assert!(runs.windows(2).all(|pair| pair[1].0 > pair[0].0), "each run under a higher fence: {runs:?}");
    }
}
