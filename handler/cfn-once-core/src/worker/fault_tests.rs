//! S1 and S2 under faults: duplicates and concurrent copies run the provider once, crashes are
//! taken over under a higher fence, lost replies are resolved from the record, a lost lease
//! commits nothing, and failed or lost PUTs re-send the committed bytes.

use super::*;

#[test]
fn a_delivered_mark_that_fails_is_tried_again() {
    // Found by the 30-minute soak: a 5xx and then a reset on the mark left a record committed
    // and undelivered after both copies had PUT the answer.
    let h = Harness::new();
    h.store.inject(Op::MarkDelivered, Fault::LostRequest);
    h.store.inject(Op::MarkDelivered, Fault::Transient);
    let disposition = h.handle(&h.worker("us-east-1"), &echo_create(json!({"Colour": "blue"})));
    assert_eq!(answered(&disposition), (1, Status::Success));
    assert_eq!(h.bodies(URL).len(), 1);
    let record = h.record();
    assert_eq!((record.state, record.delivered), (LeaseState::Committed, true), "the mark is retried until it lands");
    assert_eq!(h.store.calls(Op::MarkDelivered), 3);
}

#[test]
fn s1_duplicates_are_dropped_and_the_provider_runs_once() {
    let h = Harness::new();
    let worker = h.worker("us-east-1");
    let body = request("Create", "Custom::Counting", json!({"A": "1"}), URL);
    assert_eq!(answered(&h.handle(&worker, &body)), (1, Status::Success));
    assert_eq!(h.handle(&worker, &body), Disposition::Done(Done::Duplicate));
    assert_eq!(h.handle(&h.worker("us-west-2"), &body), Disposition::Done(Done::Duplicate));
    assert_eq!(h.counting.calls(), 1);
    assert_eq!(h.sink.bodies(URL).len(), 1);
}

#[test]
fn s1_concurrent_duplicates_run_the_provider_once() {
    let h = Harness::new();
    let (east, west) = (h.worker("us-east-1"), h.worker("us-west-2"));
    let body = request("Create", "Custom::Counting", json!({"DelayMs": "4000"}), URL);
    let invocation = h.invocation(900_000);
    let both = futures_util::future::join(
        east.handle(QueueRecord { body: Some(&body), receive_count: 1, sent_ms: None }, &invocation),
        west.handle(QueueRecord { body: Some(&body), receive_count: 1, sent_ms: None }, &invocation),
    );
    let (first, second) = drive(&h.clock, both);
    assert_eq!(answered(&first), (1, Status::Success));
    assert!(matches!(second, Disposition::Retry { delay_s, .. } if (1..=16).contains(&delay_s)), "{second:?}");
    // The retried copy comes back later and finds the answer delivered.
    assert_eq!(h.handle(&west, &body), Disposition::Done(Done::Duplicate));
    assert_eq!(h.counting.calls(), 1);
    assert_eq!(h.sink.bodies(URL).len(), 1);
    assert!(h.store.calls(Op::Heartbeat) >= 1, "a 4 s provider is heartbeated every 3 s");
}

#[test]
fn crash_after_acquire_is_taken_over_with_a_higher_fence() {
    let h = Harness::new();
    let body = echo_create(json!({"DelayMs": "60000"}));
    let invocation = h.invocation(900_000);
    let crashed = drive_until(
        &h.clock,
        h.worker("us-east-1").handle(QueueRecord { body: Some(&body), receive_count: 1, sent_ms: None }, &invocation),
        || h.memory.snapshot().first().is_some_and(|r| r.state == LeaseState::Running),
    );
    assert!(crashed.is_none(), "the worker was dropped mid-provider");
    // The lease is live: a second delivery backs off.
    assert!(matches!(h.handle(&h.worker("us-west-2"), &body), Disposition::Retry { .. }));
    h.clock.advance_ms(10_000 + 1_000 + 1);
    // Now it is expired past the skew margin; the provider is fast this time.
    let disposition = h.handle(&h.worker("us-west-2"), &echo_create(json!({"DelayMs": "60000"})));
    // Same request, same fingerprint: the takeover runs the 60 s provider under heartbeats.
    assert_eq!(answered(&disposition), (2, Status::Success));
    assert_eq!(h.record().fence, 2);
    assert_eq!(h.sink.bodies(URL).len(), 1);
}

#[test]
fn crash_between_commit_and_put_replays_the_stored_bytes() {
    let h = Harness::new();
    let body = echo_create(json!({"K": "v"}));
    h.sink.inject(PutFault::Hang);
    let invocation = h.invocation(900_000);
    let crashed = drive_until(
        &h.clock,
        h.worker("us-east-1").handle(QueueRecord { body: Some(&body), receive_count: 1, sent_ms: None }, &invocation),
        || h.memory.snapshot().first().is_some_and(|r| r.state == LeaseState::Committed),
    );
    assert!(crashed.is_none());
    assert!(h.sink.all().is_empty(), "nothing was PUT before the crash");
    let committed = h.record().response.expect("committed bytes");
    // Just committed: the committer is presumably PUTting it, so the copy waits the grace
    // (one PUT attempt's timeout, 2 s here) rather than PUT a second time.
    let early = h.handle(&h.worker("us-west-2"), &body);
    assert!(matches!(&early, Disposition::Retry { why, .. } if why.contains("just committed")), "{early:?}");
    h.clock.advance_ms(2_000);
    assert_eq!(h.handle(&h.worker("us-west-2"), &body), Disposition::Done(Done::Replayed { fence: 1 }));
    assert_eq!(h.sink.bodies(URL), vec![committed]);
    assert!(h.record().delivered);
}

#[test]
fn lost_replies_are_resolved_by_reading_the_record() {
    let h = Harness::new();
    h.store.inject(Op::Acquire, Fault::LostReply);
    h.store.inject(Op::Commit, Fault::LostReply);
    let disposition = h.handle(&h.worker("us-east-1"), &echo_create(json!({})));
    assert_eq!(answered(&disposition), (1, Status::Success), "the applied acquire and commit are recognised as ours");
    assert_eq!(h.record().fence, 1, "no second acquire happened");
    assert_eq!(h.store.calls(Op::Read), 2);
    assert_eq!(h.sink.bodies(URL).len(), 1);
}

#[test]
fn lost_requests_and_throttling_are_retried() {
    let h = Harness::new();
    h.store.inject(Op::Acquire, Fault::Transient);
    h.store.inject(Op::Acquire, Fault::LostRequest);
    h.store.inject(Op::Commit, Fault::LostRequest);
    h.store.inject(Op::Commit, Fault::Transient);
    let disposition = h.handle(&h.worker("us-east-1"), &echo_create(json!({})));
    assert_eq!(answered(&disposition), (1, Status::Success));
    assert_eq!(h.store.calls(Op::Acquire), 3);
    assert_eq!(h.store.calls(Op::Commit), 3);
}

#[test]
fn a_hung_store_call_times_out_and_is_resolved() {
    let h = Harness::new();
    h.store.inject(Op::Commit, Fault::Hang);
    let disposition = h.handle(&h.worker("us-east-1"), &echo_create(json!({})));
    assert_eq!(answered(&disposition), (1, Status::Success));
    assert_eq!(h.sink.bodies(URL).len(), 1);
}

#[test]
fn a_lost_lease_means_no_commit_and_no_put() {
    let h = Harness::new();
    let body = echo_create(json!({"DelayMs": "30000"}));
    // East's heartbeats all fail, so its lease quietly expires while its provider runs.
    for _ in 0..3 {
        h.store.inject(Op::Heartbeat, Fault::Transient);
    }
    let east = h.worker("us-east-1");
    let west = h.worker("us-west-2");
    let invocation = h.invocation(900_000);
    let east_run = east.handle(QueueRecord { body: Some(&body), receive_count: 1, sent_ms: None }, &invocation);
    let west_run = async {
        // West arrives after the lease (10 s) and skew (1 s) have passed, before east's 12 s tick.
        h.clock.sleep_ms(11_500).await;
        west.handle(
            QueueRecord { body: Some(&echo_create(json!({"DelayMs": "30000"}))), receive_count: 1, sent_ms: None },
            &invocation,
        )
        .await
    };
    // East's fourth heartbeat (at 12 s) reaches the store after west took over: it learns it lost.
    let (east_result, west_result) = drive(&h.clock, futures_util::future::join(east_run, west_run));
    assert!(
        matches!(&east_result, Disposition::Retry { why, .. } if why.contains("taken over while the provider ran")),
        "{east_result:?}"
    );
    assert_eq!(answered(&west_result), (2, Status::Success));
    assert_eq!(h.sink.bodies(URL).len(), 1, "only the fence-2 execution PUT");
}

#[test]
fn a_failed_put_is_retried_by_the_next_delivery() {
    let h = Harness::new();
    let worker = h.worker("us-east-1");
    for _ in 0..3 {
        h.sink.inject(PutFault::Fail);
    }
    let body = echo_create(json!({}));
    assert!(matches!(h.handle(&worker, &body), Disposition::Retry { .. }));
    assert!(h.sink.all().is_empty());
    h.clock.advance_ms(2_000);
    assert_eq!(h.handle(&worker, &body), Disposition::Done(Done::Replayed { fence: 1 }));
    assert_eq!(h.sink.bodies(URL).len(), 1);
}

#[test]
fn a_lost_put_reply_repeats_identical_bytes() {
    let h = Harness::new();
    h.sink.inject(PutFault::LostReply);
    let disposition = h.handle(&h.worker("us-east-1"), &echo_create(json!({})));
    assert_eq!(answered(&disposition), (1, Status::Success));
    let bodies = h.sink.bodies(URL);
    assert_eq!(bodies.len(), 2);
    assert_eq!(bodies[0], bodies[1], "S1: every PUT carries the same bytes");
}

#[test]
fn s1_a_stale_commit_is_rejected() {
    let h = Harness::new();
    let body = echo_create(json!({"DelayMs": "30000"}));
    // Every heartbeat of east fails, so east never learns that west took over and reaches its
    // commit at 30 s holding fence 1, while west (fence 2 since 11.5 s) is still running.
    for _ in 0..20 {
        h.store.inject(Op::Heartbeat, Fault::Transient);
    }
    let (east, west) = (h.worker("us-east-1"), h.worker("us-west-2"));
    let invocation = h.invocation(900_000);
    let east_run = east.handle(QueueRecord { body: Some(&body), receive_count: 1, sent_ms: None }, &invocation);
    let west_run = async {
        h.clock.sleep_ms(11_500).await;
        west.handle(QueueRecord { body: Some(&body), receive_count: 1, sent_ms: None }, &invocation).await
    };
    let (east_result, west_result) = drive(&h.clock, futures_util::future::join(east_run, west_run));
    assert!(
        matches!(&east_result, Disposition::Retry { why, .. } if why.contains("taken over before the commit")),
        "{east_result:?}"
    );
    assert_eq!(answered(&west_result), (2, Status::Success));
    assert_eq!(h.sink.bodies(URL).len(), 1, "only the fence-2 execution PUT");
    let events = h.metrics.events();
    assert!(
        events.contains(&MetricEvent::LeaseAcquired { fence: 2, poll: false }),
        "west's takeover is counted: {events:?}"
    );
    assert!(events.contains(&MetricEvent::FenceConflict), "east's rejected commit is counted: {events:?}");
}
