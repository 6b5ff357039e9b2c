//! The time budget's own tests: the reserve, the backoff floor, looks inside a short margin.
use super::*;

fn settings(region: &str) -> Settings {
    test_settings(region)
}

#[test]
fn the_reserve_is_computed_from_the_call_timeouts() {
    let settings = settings("us-east-1");
    // Commit and its read-back, a PUT attempt, the delivery record; then the SQS tail.
    assert_eq!(settings.answer_ms(), 3 * 2_000 + 2_000);
    assert_eq!(settings.batch_tail_ms(), 1_000 + crate::budget::RETURN_SLACK_MS);
    assert_eq!(settings.reserve_ms(), settings.answer_ms() + settings.batch_tail_ms());
}

#[test]
fn inside_a_short_margin_looks_come_a_quarter_of_it_apart() {
    let settings = settings("us-east-1");
    let check = |service_timeout_s: u64, expected_s: u32| {
        let deadline = RequestDeadline::of(0, Some(service_timeout_s), None, 3_600);
        let budget = Budget::new(&settings, deadline, u64::MAX / 2);
        // Inside the margin, asked to come back at once (a refused commit's retry): at the
        // margin's floor.
        let now_ms = deadline.at_ms - settings.deadline_margin_for_ms(&deadline) + 100;
        assert_eq!(budget.backoff_s(now_ms + 100, now_ms), expected_s, "ServiceTimeout {service_timeout_s} s");
    };
    check(3_600, 4);
    check(80, 4);
    check(48, 3);
    check(29, 1);
    check(5, 1);
}

#[test]
fn the_backoff_floor_fits_the_receive_budget() {
    assert_eq!(backoff_floor_s(1_000, 3_600), Some(4), "SQS's largest maxReceiveCount");
    assert_eq!(backoff_floor_s(100, 3_600), Some(45));
    assert_eq!(backoff_floor_s(10, 3_600), None, "the count templates used to set");
    assert_eq!(backoff_floor_s(79, 3_600), None, "a floor over a minute");
    assert_eq!(backoff_floor_s(80, 3_600), Some(60));
    for count in [80, 100, 500, 1_000] {
        let floor_s = u64::from(backoff_floor_s(count, 3_600).expect("a floor"));
        // Receives until the ceiling, one per floor, plus the spare, fit in the count.
        assert!(3_600_u64.div_ceil(floor_s) + u64::from(RECEIVES_SPARE) <= u64::from(count), "count {count}");
    }
}

#[test]
fn a_slow_control_costs_a_short_request_a_quarter_of_its_run() {
    let settings = settings("us-east-1");
    let check = |service_timeout_s: u64, expected_ms: u64| {
        let deadline = RequestDeadline::of(0, Some(service_timeout_s), None, 3_600);
        let budget = Budget::new(&settings, deadline, u64::MAX / 2);
        assert_eq!(budget.control_timeout_ms(0), expected_ms, "ServiceTimeout {service_timeout_s} s");
    };
    // The harness's store calls take 2 s at most.
    check(3_600, 2_000);
    check(30, 2_000);
    // 9 s keeps 3.25 s (2.25 s and the 1 s skew margin): a quarter of 5.75 s.
    check(9, 1_437);
    check(1, 156);
}
