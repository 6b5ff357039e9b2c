//! The drain check, held to both sides.

use std::sync::Arc;

use cfn_once_core::fingerprint::Fingerprint;
use cfn_once_core::lease::{Acquire, AcquireRequest, LeaseStore, RequestLabel};
use cfn_once_core::request::{RequestKey, StackArn};
use futures_util::FutureExt;

use crate::scenario::{Faults, Region, StoreMode};
use crate::shared::{Shared, T0_MS};

use super::{RegionStore, Table};

const MARGIN_MS: u64 = 20_000;

fn calm() -> Faults {
    Faults {
        window_end_ms: 0,
        store_transient: 0.0,
        store_lost_request: 0.0,
        store_lost_reply: 0.0,
        store_hang: 0.0,
        put_fail: 0.0,
        put_lost_reply: 0.0,
        put_hang: 0.0,
        crash: 0.0,
        duplicate: 0.0,
        freeze: 0.0,
        control_slow: 0.0,
        provider_lost_reply: 0.0,
        fenced_lost_reply: 0.0,
    }
}

fn key() -> RequestKey {
    RequestKey {
        stack_id: StackArn::parse("arn:aws:cloudformation:us-east-1:123456789012:stack/sim/1").expect("an ARN"),
        request_id: "request-0".into(),
    }
}

fn acquire(fingerprint: &str, sent_ms: u64, now_ms: u64) -> AcquireRequest {
    AcquireRequest {
        key: key(),
        fingerprint: Fingerprint::from_stored(fingerprint.into()),
        sent_ms,
        owner: format!("us-east-1/lambda-1/{fingerprint}"),
        now_ms,
        lease_until_ms: now_ms + 30_000,
        skew_ms: 2_000,
        expires_ms: now_ms + 86_400_000,
        poll_lag_ms: 0,
        label: RequestLabel::default(),
        preempt: false,
    }
}

/// The primary, told "standby" before its invocation started, takes a lease for attempt
/// `taken_for` (due at `deadline_of_taken_ms`) and commits under it at `commit_at_ms`,
/// after a retried deployment (attempt "newer", due in an hour) was written to the record
/// when `retried` says so. Returns the violations.
fn commit_after_drain(deadline_of_taken_ms: u64, commit_at_ms: u64, retried: bool) -> Vec<String> {
    let shared = Arc::new(Shared::new(1, calm(), None, MARGIN_MS, false));
    let table = Arc::new(Table::new(StoreMode::Mrsc, None));
    let primary = RegionStore::new(Region::Primary, Arc::clone(&table), Arc::clone(&shared));
    {
        let mut observed = shared.observed();
        observed.primary_told = Some((false, 0));
        observed.invocations_started.insert("lambda-1".into(), 1_000);
        observed.deadlines.insert(Fingerprint::from_stored("taken".into()), deadline_of_taken_ms);
        observed.deadlines.insert(Fingerprint::from_stored("newer".into()), 3_600_000);
    }
    shared.clock.set_ms(T0_MS + 1_000);
    let taken = primary.acquire(&acquire("taken", T0_MS, T0_MS + 1_000)).now_or_never().expect("ready");
    let Ok(Acquire::Acquired { fence, .. }) = taken else { panic!("not acquired: {taken:?}") };
    if retried {
        // The retried deployment, sent later, takes the record over once the lease ended.
        let newer = acquire("newer", T0_MS + 500, T0_MS + 40_000);
        let answer = table.replicas[0].acquire(&newer).now_or_never().expect("ready");
        assert!(matches!(answer, Ok(Acquire::Acquired { .. })), "{answer:?}");
    }
    shared.clock.set_ms(T0_MS + commit_at_ms);
    let _ = primary.commit(&key(), fence, b"{}", T0_MS + commit_at_ms).now_or_never().expect("ready");
    shared.observed().violations.clone()
}

#[test]
fn the_drain_check_fails_a_drained_primary_that_commits_new_work() {
    let violations = commit_after_drain(3_600_000, 60_000, false);
    assert!(violations.iter().any(|v| v.starts_with("DRAIN")), "{violations:?}");
}

#[test]
fn the_drain_check_lets_a_drained_primary_answer_its_own_attempt_near_its_deadline() {
    // Seeds 188852, 376954 and 430635: the attempt the lease was taken for is due within the
    // margin (or past due), while the record holds a retried deployment due in an hour. The
    // check used to read the record's attempt, and failed the primary for answering FAILED
    // near its own attempt's deadline, which the decision table asks of every region.
    assert_eq!(commit_after_drain(70_000, 60_000, true), Vec::<String>::new());
    assert_eq!(commit_after_drain(50_000, 60_000, true), Vec::<String>::new());
    // Far from its own attempt's deadline, the commit is new work whatever the record holds.
    let violations = commit_after_drain(3_000_000, 60_000, true);
    assert!(violations.iter().any(|v| v.starts_with("DRAIN")), "{violations:?}");
}
