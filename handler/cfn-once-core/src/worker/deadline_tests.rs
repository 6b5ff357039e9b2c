//! L1, the deadline: a provider bounded by it, backoffs that never wait past it, leases that
//! end where a taker-over can still answer, and a late copy counting from the publish time.

use super::*;

#[test]
fn l1_a_provider_past_the_deadline_is_answered_failed() {
    let h = Harness::new();
    let worker = h.worker("us-east-1");
    let invocation = h.invocation(20_000);
    let body = echo_create(json!({"DelayMs": "600000"}));
    let disposition =
        drive(&h.clock, worker.handle(QueueRecord { body: Some(&body), receive_count: 1, sent_ms: None }, &invocation));
    assert_eq!(answered(&disposition), (1, Status::Failed));
    let reason = h.bodies(URL)[0].reason.clone().expect("reason");
    assert!(reason.contains("did not finish before the Lambda invocation's deadline"), "{reason}");
    assert!(h.clock.now_ms() < invocation.deadline_ms, "answered before the deadline");
}

#[test]
fn l1_backoff_never_waits_past_the_deadline() {
    let h = Harness::new();
    let body = echo_create(json!({"DelayMs": "3000", "ServiceTimeout": "120"}));
    let invocation = h.invocation(900_000);
    // The copies were sent 95 s ago, so 25 s are left. East's lease ends where leases must
    // (deadline - 20 s margin - 1 s skew: in 4 s), not 10 s on; west may wait 5 s at most
    // (deadline - margin), when the lease counts as expired.
    let east = h.worker("us-east-1");
    let west = h.worker_as("us-west-2", Role::Secondary, Activity::Standby);
    let sent_ms = Some(h.clock.now_ms() - 95_000);
    let both = futures_util::future::join(
        east.handle(QueueRecord { body: Some(&body), receive_count: 1, sent_ms }, &invocation),
        west.handle(QueueRecord { body: Some(&body), receive_count: 1, sent_ms }, &invocation),
    );
    let (first, second) = drive(&h.clock, both);
    assert_eq!(answered(&first).1, Status::Success);
    assert!(matches!(second, Disposition::Retry { delay_s: 5, .. }), "{second:?}");
}

#[test]
fn l1_a_provider_is_bounded_by_the_request_deadline_too() {
    let h = Harness::new();
    let body = echo_create(json!({"DelayMs": "600000", "ServiceTimeout": "120"}));
    assert_eq!(answered(&handle_sent(&h, &h.worker("us-east-1"), &body, 0)), (1, Status::Failed));
    let reason = h.bodies(URL)[0].reason.clone().expect("reason");
    assert_eq!(
        reason,
        "Custom::Echo Create did not finish before the request's deadline, set by the resource's ServiceTimeout (less 21 s kept to answer)"
    );
    assert!(h.clock.now_ms() <= START_MS + 120_000, "answered within the ServiceTimeout");
}

/// The deployed lease, heartbeat and skew (30 s, 10 s, 2 s): a lease longer than the deadline
/// margin (20 s), which is what let a lease outlive the deadline.
fn deployed_leases(region: &str, role: Role) -> Settings {
    Settings { role, lease_ms: 30_000, heartbeat_ms: 10_000, skew_ms: 2_000, ..settings(region) }
}

#[test]
fn l1_no_lease_outlives_the_point_where_a_taker_over_can_still_answer() {
    let h = Harness::new();
    let body = echo_create(json!({"DelayMs": "600000", "ServiceTimeout": "300"}));
    let sent_ms = h.clock.now_ms();
    let deadline_ms = sent_ms + 300_000;
    let east = h.worker_with(deployed_leases("us-east-1", Role::Primary), Arc::new(FixedActivity(Activity::Active)));
    let west = h.worker_with(deployed_leases("us-west-2", Role::Secondary), Arc::new(FixedActivity(Activity::Standby)));
    // East runs a provider that will not finish, heartbeating every 10 s, and crashes 30 s
    // before the deadline, just after a heartbeat.
    let invocation = h.invocation(900_000);
    let delivery = QueueRecord { body: Some(&body), receive_count: 1, sent_ms: Some(sent_ms) };
    let crashed =
        drive_until(&h.clock, east.handle(delivery, &invocation), || h.clock.now_ms() >= deadline_ms - 30_000);
    assert!(crashed.is_none(), "east crashed mid-provider");
    let lease_until_ms = h.record().lease_until_ms;
    assert!(
        lease_until_ms + 2_000 < deadline_ms - 20_000,
        "the lease ends {} s before the deadline: a taker-over would not see it expired before the margin",
        deadline_ms.saturating_sub(lease_until_ms) / 1000
    );
    // West's copy comes back where the margin begins, and answers in it.
    h.clock.set_ms(deadline_ms - 20_000);
    let mut receive = 1;
    let done = loop {
        let invocation = h.invocation(900_000);
        let delivery = QueueRecord { body: Some(&body), receive_count: receive, sent_ms: Some(sent_ms) };
        match drive(&h.clock, west.handle(delivery, &invocation)) {
            Disposition::Retry { delay_s, .. } => h.clock.advance_ms(u64::from(delay_s) * 1000),
            other => break other,
        }
        receive += 1;
    };
    assert_eq!(answered(&done).1, Status::Failed, "{done:?}");
    assert!(h.clock.now_ms() <= deadline_ms, "answered {} ms after the deadline", h.clock.now_ms() - deadline_ms);
}

#[test]
fn l1_a_lease_taken_inside_the_margin_blocks_no_other_region() {
    // The simulator's seeds 29218, 92492, 103658, 162857, 548281, 686171 and 715436: a delivery
    // that took the lease inside the margin (to answer FAILED) froze or died there, and its
    // lease, which ran a full answer's time past its taking, kept the healthy region backing off
    // until after the deadline.
    let h = Harness::new();
    let body = echo_create(json!({"ServiceTimeout": "300"}));
    let sent_ms = h.clock.now_ms() - 292_000;
    let deadline_ms = sent_ms + 300_000;
    let east = h.worker_with(deployed_leases("us-east-1", Role::Primary), Arc::new(FixedActivity(Activity::Active)));
    let west = h.worker_with(deployed_leases("us-west-2", Role::Secondary), Arc::new(FixedActivity(Activity::Standby)));
    // East takes the lease 8 s before the deadline, then dies before its commit lands.
    h.store.inject(Op::Commit, Fault::Stall);
    let invocation = h.invocation(900_000);
    let delivery = QueueRecord { body: Some(&body), receive_count: 1, sent_ms: Some(sent_ms) };
    let crashed = drive_until(&h.clock, east.handle(delivery, &invocation), || !h.memory.snapshot().is_empty());
    assert!(crashed.is_none(), "east died holding the lease");
    let taken = h.record();
    assert_eq!((taken.state, taken.fence), (LeaseState::Running, 1));
    assert!(
        taken.lease_until_ms + 2_000 < deadline_ms - 20_000,
        "a lease taken in the margin ends {} ms before the deadline: others cannot take it over",
        deadline_ms.saturating_sub(taken.lease_until_ms)
    );
    // West's copy a second later takes it over at once and answers, 7 s before the deadline.
    h.clock.advance_ms(1_000);
    let invocation = h.invocation(900_000);
    let delivery = QueueRecord { body: Some(&body), receive_count: 1, sent_ms: Some(sent_ms) };
    let done = drive(&h.clock, west.handle(delivery, &invocation));
    assert_eq!(answered(&done), (2, Status::Failed), "{done:?}");
    assert!(h.clock.now_ms() < deadline_ms);
    assert_eq!(h.sink.bodies(URL).len(), 1);
}

#[test]
fn l1_a_provider_stops_where_its_lease_must_end_and_heartbeats_never_pass_it() {
    let h = Harness::new();
    let east = h.worker_with(deployed_leases("us-east-1", Role::Primary), Arc::new(FixedActivity(Activity::Active)));
    let body = echo_create(json!({"DelayMs": "600000", "ServiceTimeout": "300"}));
    let sent_ms = h.clock.now_ms();
    assert_eq!(answered(&handle_sent(&h, &east, &body, 0)).1, Status::Failed);
    // Deadline 300 s, less the 20 s margin and the 2 s skew margin.
    assert_eq!(h.clock.now_ms(), sent_ms + 278_000 - 1, "the provider ran until its lease had to end");
    let reason = h.bodies(URL)[0].reason.clone().expect("a reason");
    assert!(reason.ends_with("(less 22 s kept to answer)"), "{reason}");
}

/// `request` in an SNS envelope published at `published_ms`.
fn envelope(request: &str, published_ms: u64) -> String {
    json!({
        "Type": "Notification",
        "MessageId": "m-1",
        "TopicArn": TOPIC,
        "Message": request,
        "Timestamp": crate::timestamp::format_ms(published_ms),
    })
    .to_string()
}

#[test]
fn l1_a_late_copy_counts_its_deadline_from_the_publish_time() {
    let h = Harness::new();
    let worker = h.worker("us-west-2");
    // Published 200 s ago with a 300 s ServiceTimeout; SNS delivered this copy only 5 s ago.
    let published_ms = h.clock.now_ms() - 200_000;
    let deadline_ms = published_ms + 300_000;
    let body = envelope(&echo_create(json!({"DelayMs": "120000", "ServiceTimeout": "300"})), published_ms);
    let done = handle_sent(&h, &worker, &body, 5_000);
    assert!(
        h.clock.now_ms() < deadline_ms,
        "answered {} s after CloudFormation stopped waiting",
        (h.clock.now_ms() - deadline_ms) / 1000
    );
    assert_eq!(answered(&done).1, Status::Failed);
    let reason = h.bodies(URL)[0].reason.clone().expect("a reason");
    assert!(reason.contains("did not finish before the request's deadline"), "{reason}");
}
