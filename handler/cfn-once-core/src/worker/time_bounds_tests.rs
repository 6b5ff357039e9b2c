//! Every call of a delivery ends by the invocation's deadline less the batch's tail, whatever
//! hangs: the end-to-end pins for the time budget in `budget` (whose own tests pin its
//! formulas).

use super::*;

const BUDGET_MS: u64 = 30_000;

/// Handles `body` in a 30 s invocation; the disposition and how much of the invocation was
/// left when it returned.
fn run(h: &Harness, body: &str) -> (Disposition, u64) {
    let worker = h.worker("us-east-1");
    let invocation = h.invocation(BUDGET_MS);
    let delivery = QueueRecord { body: Some(body), receive_count: 1, sent_ms: None };
    let disposition = drive(&h.clock, worker.handle(delivery, &invocation));
    (disposition, invocation.deadline_ms.saturating_sub(h.clock.now_ms()))
}

fn tail_ms() -> u64 {
    settings("us-east-1").batch_tail_ms()
}

#[test]
fn a_provider_out_of_time_is_answered_before_the_tail() {
    let h = Harness::new();
    let (disposition, left_ms) = run(&h, &echo_create(json!({"DelayMs": "600000"})));
    assert_eq!(answered(&disposition), (1, Status::Failed));
    assert!(left_ms >= tail_ms(), "returned with {left_ms} ms left");
    assert!(h.record().delivered, "committed, PUT and recorded in time");
}

#[test]
fn a_hung_commit_gives_up_in_time() {
    let h = Harness::new();
    for _ in 0..10 {
        h.store.inject(Op::Commit, Fault::Hang);
        h.store.inject(Op::Read, Fault::Hang);
    }
    let (disposition, left_ms) = run(&h, &echo_create(json!({"DelayMs": "600000"})));
    assert!(matches!(disposition, Disposition::Retry { .. }), "{disposition:?}");
    assert!(left_ms >= tail_ms(), "returned with {left_ms} ms left");
}

#[test]
fn a_hung_put_gives_up_in_time() {
    let h = Harness::new();
    for _ in 0..10 {
        h.sink.inject(PutFault::Hang);
    }
    let (disposition, left_ms) = run(&h, &echo_create(json!({"DelayMs": "600000"})));
    assert!(matches!(disposition, Disposition::Retry { .. }), "{disposition:?}");
    assert!(left_ms >= tail_ms(), "returned with {left_ms} ms left");
}

#[test]
fn a_hung_delivery_record_gives_up_in_time() {
    let h = Harness::new();
    h.store.inject(Op::MarkDelivered, Fault::Hang);
    let (disposition, left_ms) = run(&h, &echo_create(json!({"DelayMs": "600000"})));
    assert_eq!(answered(&disposition), (1, Status::Failed), "answered; only the record was lost");
    assert!(left_ms >= tail_ms(), "returned with {left_ms} ms left");
}

#[test]
fn a_hung_acquire_gives_up_in_time_and_leaves_the_provider_unstarted() {
    let h = Harness::new();
    for _ in 0..20 {
        h.store.inject(Op::Acquire, Fault::Hang);
        h.store.inject(Op::Read, Fault::Hang);
    }
    let (disposition, left_ms) = run(&h, &request("Create", "Custom::Counting", json!({}), URL));
    assert!(matches!(disposition, Disposition::Retry { .. }), "{disposition:?}");
    assert!(left_ms >= tail_ms(), "returned with {left_ms} ms left");
    assert_eq!(h.counting.calls(), 0);
}
