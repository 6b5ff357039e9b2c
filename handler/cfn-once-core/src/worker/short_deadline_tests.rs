//! Deadlines as users set them: every `ServiceTimeout` CloudFormation accepts, from 1 s, with
//! the margins proportioned to each request's time; and the secondary's head start, which gives
//! a request with a short deadline its failover.

use super::waits::deliver;
use super::*;

/// The ServiceTimeouts users write to fail fast, and the default's neighbours.
const SERVICE_TIMEOUTS_S: [u64; 10] = [1, 2, 5, 10, 20, 30, 60, 90, 300, 3_600];

/// The secondary as deployed: its queue delays a copy 5 s, and it leaves a request nobody
/// started to the primary for a fifth of its time, at most 60 s.
fn deployed_secondary(h: &Harness) -> Worker {
    let settings = Settings { role: Role::Secondary, secondary_delay_s: 5, head_start_s: 60, ..settings("us-west-2") };
    h.worker_with(settings, Arc::new(FixedActivity(Activity::Standby)))
}

#[test]
fn a_quick_provider_is_answered_success_at_every_service_timeout_deletes_included() {
    for service_timeout_s in SERVICE_TIMEOUTS_S {
        for kind in ["Create", "Update", "Delete"] {
            let h = Harness::new();
            let body = request(kind, ECHO_TYPE, json!({"ServiceTimeout": service_timeout_s.to_string()}), URL);
            // A warm handler sees the copy a fifth of a second after CloudFormation sent it.
            let done = handle_sent(&h, &h.worker("us-east-1"), &body, 200);
            assert_eq!(answered(&done), (1, Status::Success), "{kind} with a ServiceTimeout of {service_timeout_s} s");
        }
    }
}

#[test]
fn the_margins_shrink_with_the_request_and_stay_whole_from_four_times_their_sum() {
    let settings = settings("us-east-1");
    let check = |service_timeout_s: u64, kept_ms: u64, margin_ms: u64| {
        let deadline = RequestDeadline::of(0, Some(service_timeout_s), None, 3_600);
        assert_eq!(
            (settings.lease_end_before_deadline_ms(&deadline), settings.deadline_margin_for_ms(&deadline)),
            (kept_ms, margin_ms),
            "a ServiceTimeout of {service_timeout_s} s"
        );
    };
    // The harness's margin is 20 s and its skew margin 1 s: whole from 80 s.
    check(1, 375, 250);
    check(5, 1_875, 1_250);
    check(30, 8_500, 7_500);
    check(79, 20_750, 19_750);
    check(80, 21_000, 20_000);
    check(3_600, 21_000, 20_000);
}

#[test]
fn a_copy_in_the_last_quarter_of_a_short_deadline_is_answered_failed_without_running() {
    let h = Harness::new();
    let body = request("Create", "Custom::Counting", json!({"ServiceTimeout": "4"}), URL);
    // 3.5 s into 4 s: less than the quarter kept to answer is left.
    assert_eq!(answered(&handle_sent(&h, &h.worker("us-east-1"), &body, 3_500)), (1, Status::Failed));
    assert_eq!(h.counting.calls(), 0);
}

#[test]
fn the_secondary_leaves_a_request_nobody_started_to_the_primary_for_its_head_start() {
    let h = Harness::new();
    let secondary = deployed_secondary(&h);
    let body = request("Create", "Custom::Counting", json!({}), URL);
    let sent_ms = h.clock.now_ms();
    h.clock.advance_ms(5_000);
    // CloudFormation's hour: a head start of 60 s, of which 55 s are left (and the jitter).
    let first = deliver(&h, &secondary, &body, sent_ms, 1);
    let Disposition::Retry { delay_s, why } = &first else { panic!("expected a backoff, got {first:?}") };
    assert!((55..=58).contains(delay_s), "{first:?}");
    assert_eq!(why, "the primary's head start has not ended");
    assert_eq!((h.store.calls(Op::Read), h.store.calls(Op::Acquire), h.counting.calls()), (1, 0, 0));
    // The primary answers meanwhile: the secondary's next look drops its copy.
    let primary = h.worker("us-east-1");
    assert_eq!(answered(&deliver(&h, &primary, &body, sent_ms, 1)), (1, Status::Success));
    h.clock.advance_ms(u64::from(*delay_s) * 1_000);
    assert_eq!(deliver(&h, &secondary, &body, sent_ms, 2), Disposition::Done(Done::Duplicate));
    assert_eq!(h.counting.calls(), 1);
}

/// The primary down from the start: the secondary alone answers every request whose
/// ServiceTimeout is at least the failover minimum, within it.
#[test]
fn with_the_primary_down_the_secondary_answers_every_request_from_the_failover_minimum() {
    let minimum_s = {
        let h = Harness::new();
        deployed_secondary(&h).settings.failover_minimum_s().expect("failover")
    };
    assert!(minimum_s <= 30, "a ServiceTimeout of 30 s has failover (minimum {minimum_s} s)");
    for service_timeout_s in SERVICE_TIMEOUTS_S.into_iter().filter(|s| *s >= minimum_s) {
        let h = Harness::new();
        let secondary = deployed_secondary(&h);
        let body = request("Create", "Custom::Counting", json!({"ServiceTimeout": service_timeout_s.to_string()}), URL);
        let sent_ms = h.clock.now_ms();
        h.clock.advance_ms(5_000);
        let mut receive = 1;
        let done = loop {
            match deliver(&h, &secondary, &body, sent_ms, receive) {
                Disposition::Retry { delay_s, .. } => h.clock.advance_ms(u64::from(delay_s) * 1_000),
                done => break done,
            }
            receive += 1;
        };
        assert_eq!(answered(&done), (1, Status::Success), "a ServiceTimeout of {service_timeout_s} s");
        let after_ms = h.clock.now_ms() - sent_ms;
        assert!(after_ms < service_timeout_s * 1_000, "{service_timeout_s} s: answered after {after_ms} ms");
        // Once the head start is over, or at once when the queue's delay outlasted it.
        let head_start_ms = (service_timeout_s * 1_000 / 5).min(60_000);
        assert!(after_ms >= head_start_ms.min(5_000), "{service_timeout_s} s: answered after {after_ms} ms");
    }
}

#[test]
fn the_failover_minimum_follows_the_queues_delay() {
    let minimum = |secondary_delay_s: u64| {
        Settings { secondary_delay_s, head_start_s: 60, ..settings("us-west-2") }.failover_minimum_s()
    };
    // A copy seen 5 s after the send, and 2 s to answer, before the margins (a quarter, and
    // the harness's 1 s skew margin): 11 s.
    assert_eq!(minimum(5), Some(11));
    // The delay this template used to deploy: a minute, 2 s, and the whole margins.
    assert_eq!(minimum(60), Some(83));
    // SQS's longest delay leaves failover to the longest ServiceTimeouts only.
    assert_eq!(minimum(900), Some(923));
}

/// Inside the margin nobody else starts the provider: rather than a FAILED without trying, the
/// delivery that holds the lease runs it until half the margin is left.
#[test]
fn inside_the_margin_a_request_gets_a_last_chance_to_run_before_half_the_margin_is_left() {
    // The secondary's copy of a 10 s Delete, seen 5.8 s after the send (its queue's delay):
    // past the lease cap (10 s less 2.5 s and 1 s), in the first half of the 2.5 s margin.
    let h = Harness::new();
    let secondary = deployed_secondary(&h);
    let body = request("Delete", "Custom::Counting", json!({"ServiceTimeout": "10"}), URL);
    assert_eq!(answered(&handle_sent(&h, &secondary, &body, 5_800)), (1, Status::Success));
    assert_eq!(h.counting.calls(), 1);
    // A provider that does not finish by then is answered FAILED with the time it had.
    let h = Harness::new();
    let body = request("Create", "Custom::Counting", json!({"ServiceTimeout": "120", "DelayMs": "60000"}), URL);
    assert_eq!(answered(&handle_sent(&h, &h.worker("us-east-1"), &body, 105_000)), (1, Status::Failed));
    assert_eq!(h.counting.calls(), 1);
    let reason = h.bodies(URL)[0].reason.clone().expect("reason");
    assert!(
        reason.contains("did not finish before the request's deadline") && reason.contains("less 10 s"),
        "{reason}"
    );
    // Sent 105 s before the start: its deadline 15 s after it, half its margin 10 s before that.
    let stopped_ms = h.clock.now_ms() - START_MS;
    assert!((5_000..6_000).contains(&stopped_ms), "stopped with half the margin left: {stopped_ms} ms");
}

/// A drained primary starts no new work, not even as a last chance: near the deadline it
/// answers FAILED without running the provider, as before.
#[test]
fn a_drained_primary_gets_no_last_chance() {
    let h = Harness::new();
    let standby = h.drained_primary("us-east-1");
    let body = request("Delete", "Custom::Counting", json!({"ServiceTimeout": "120"}), URL);
    assert_eq!(answered(&handle_sent(&h, &standby, &body, 105_000)), (1, Status::Failed));
    assert_eq!(h.counting.calls(), 0);
}

/// Only an attempt's first execution gets a last chance: one that took the lease over inside
/// the margin answers FAILED at once, so two regions never take it from each other in turn
/// until the deadline passes.
#[test]
fn a_takeover_inside_the_margin_gets_no_last_chance() {
    let h = Harness::new();
    let body = request("Create", "Custom::Counting", json!({"ServiceTimeout": "120", "DelayMs": "60000"}), URL);
    let invocation = h.invocation(900_000);
    // East takes the lease and runs the provider, then crashes.
    let sent_ms = run_then_crash(&h, &body);
    // West sees it in the first half of the margin: a takeover, answered FAILED unrun.
    h.clock.advance_ms(103_000);
    let west = h.worker_as("us-west-2", Role::Secondary, Activity::Standby);
    let late = drive(&h.clock, west.handle(QueueRecord { body: Some(&body), receive_count: 2, sent_ms }, &invocation));
    assert_eq!(answered(&late), (2, Status::Failed));
    assert_eq!(h.counting.calls(), 1, "the provider did not run again");
    assert_eq!(h.clock.now_ms() - START_MS, 103_000, "answered at once");
}
