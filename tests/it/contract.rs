//! The lease store contract: the same cases against the in-memory store and the DynamoDB store
//! (on moto, through the SDK's client as the function configures it). Both must make the same
//! decisions, because the unit tests and the simulator trust
//! the in-memory store to behave like the table.

use std::sync::Arc;

use cfn_once_core::fingerprint::Fingerprint;
use cfn_once_core::lease::{
    Acquire, AcquireRequest, Conditional, LeaseRecord, LeaseState, LeaseStore, PollRecord, RequestLabel, Seen, Viewer,
    admits, left_record,
};
use cfn_once_core::memory_store::MemoryLeaseStore;
use cfn_once_core::request::RequestKey;
use cfn_once_tests::{LocalRegion, Options, REGION, unique};

const T0: u64 = 1_800_000_000_000;
const LEASE_MS: u64 = 10_000;
const SKEW_MS: u64 = 1_000;

fn key() -> RequestKey {
    RequestKey {
        stack_id: cfn_once_core::request::StackArn::parse(
            "arn:aws:cloudformation:us-east-2:123456789012:stack/contract/guid",
        )
        .expect("a stack ARN"),
        request_id: unique("request"),
    }
}

fn fp(name: &str) -> Fingerprint {
    Fingerprint::from_stored(format!("{name:0>32}"))
}

fn acquire(key: &RequestKey, fingerprint: &str, owner: &str, now_ms: u64) -> AcquireRequest {
    sent_at(key, fingerprint, owner, now_ms, T0)
}

/// An acquire by an attempt sent at `sent_ms`.
fn sent_at(key: &RequestKey, fingerprint: &str, owner: &str, now_ms: u64, sent_ms: u64) -> AcquireRequest {
    AcquireRequest {
        key: key.clone(),
        fingerprint: fp(fingerprint),
        sent_ms,
        owner: owner.into(),
        now_ms,
        lease_until_ms: now_ms + LEASE_MS,
        skew_ms: SKEW_MS,
        expires_ms: now_ms + 86_400_000,
        poll_lag_ms: 0,
        label: RequestLabel {
            logical_resource_id: "Thing".into(),
            request_type: "Create".into(),
            resource_type: "Custom::Echo".into(),
            replaces: String::new(),
        },
        preempt: false,
    }
}

/// Work in progress of attempt `fingerprint`, due at `poll_at_ms`.
fn poll(fingerprint: &str, poll_at_ms: u64, polls: u32) -> PollRecord {
    PollRecord {
        fingerprint: fp(fingerprint),
        state: format!(r#"{{"operation":"op-{polls}","note":"ünïcode \"quoted\""}}"#),
        poll_at_ms,
        waiting_since_ms: T0,
        polls,
    }
}

async fn fence_of(store: &dyn LeaseStore, request: &AcquireRequest) -> Option<u64> {
    match store.acquire(request).await.expect("acquire") {
        Acquire::Acquired { fence, .. } => Some(fence),
        Acquire::Refused(_) => None,
    }
}

async fn first_acquire_grants_fence_one(store: Arc<dyn LeaseStore>) {
    let key = key();
    assert_eq!(store.read(&key).await.expect("read"), None);
    assert_eq!(fence_of(store.as_ref(), &acquire(&key, "a", "east/1", T0)).await, Some(1));
    let record = store.read(&key).await.expect("read").expect("record");
    assert_eq!((record.fence, record.state, record.owner.as_str()), (1, LeaseState::Running, "east/1"));
    assert_eq!((record.lease_until_ms, record.heartbeat, record.delivered), (T0 + LEASE_MS, 0, false));
    assert_eq!(record.fingerprint, fp("a"));
    assert_eq!(record.attempts, [fp("a")].into());
    assert_eq!((record.response, record.created_ms, record.expires_ms), (None, T0, T0 + 86_400_000));
    let label = (record.label.logical_resource_id.as_str(), record.label.request_type.as_str());
    assert_eq!((label, record.label.resource_type.as_str()), (("Thing", "Create"), "Custom::Echo"));
}

async fn a_refusal_returns_the_record_as_it_was(store: Arc<dyn LeaseStore>) {
    let key = key();
    fence_of(store.as_ref(), &acquire(&key, "a", "east/1", T0)).await;
    let before = store.read(&key).await.expect("read").expect("record");
    match store.acquire(&acquire(&key, "a", "west/1", T0 + 5_000)).await.expect("acquire") {
        Acquire::Refused(record) => assert_eq!(*record, before, "ALL_OLD is the stored record"),
        Acquire::Acquired { fence, .. } => panic!("a live lease was granted again (fence {fence})"),
    }
    assert_eq!(store.read(&key).await.expect("read").expect("record"), before, "a refused acquire changes nothing");
}

async fn expiry_respects_the_skew_margin(store: Arc<dyn LeaseStore>) {
    let key = key();
    fence_of(store.as_ref(), &acquire(&key, "a", "east/1", T0)).await;
    // lease_until = T0 + 10 000; expired only when lease_until < now - 1 000.
    assert_eq!(fence_of(store.as_ref(), &acquire(&key, "a", "west/1", T0 + LEASE_MS + SKEW_MS)).await, None);
    assert_eq!(fence_of(store.as_ref(), &acquire(&key, "a", "west/1", T0 + LEASE_MS + SKEW_MS + 1)).await, Some(2));
    let record = store.read(&key).await.expect("read").expect("record");
    assert_eq!((record.owner.as_str(), record.created_ms), ("west/1", T0), "created_ms survives a takeover");
}

async fn commit_and_heartbeat_are_fenced(store: Arc<dyn LeaseStore>) {
    let key = key();
    fence_of(store.as_ref(), &acquire(&key, "a", "east/1", T0)).await;
    assert_eq!(store.heartbeat(&key, 1, T0 + 20_000, T0 + 3_000).await.expect("heartbeat"), Conditional::Applied);
    let record = store.read(&key).await.expect("read").expect("record");
    assert_eq!((record.lease_until_ms, record.heartbeat), (T0 + 20_000, 1));

    assert_eq!(fence_of(store.as_ref(), &acquire(&key, "a", "west/1", T0 + 40_000)).await, Some(2));
    let stale_heartbeat = store.heartbeat(&key, 1, T0 + 60_000, T0 + 40_001).await.expect("heartbeat");
    assert!(matches!(stale_heartbeat, Conditional::Refused(Some(ref r)) if r.fence == 2), "{stale_heartbeat:?}");
    let stale_commit = store.commit(&key, 1, b"stale", T0 + 40_002).await.expect("commit");
    assert!(
        matches!(stale_commit, Conditional::Refused(Some(ref r)) if r.fence == 2 && r.response.is_none()),
        "{stale_commit:?}"
    );

    let bytes = b"\x00\xff{\"Status\":\"SUCCESS\"}".to_vec();
    assert_eq!(store.commit(&key, 2, &bytes, T0 + 41_000).await.expect("commit"), Conditional::Applied);
    let again = store.commit(&key, 2, b"other", T0 + 41_001).await.expect("commit");
    assert!(
        matches!(again, Conditional::Refused(Some(ref r)) if r.state == LeaseState::Committed && r.response.as_deref() == Some(&bytes[..])),
        "S1: a second commit never replaces the first: {again:?}"
    );
    let refused = store.heartbeat(&key, 2, T0 + 90_000, T0 + 41_002).await.expect("heartbeat");
    assert!(matches!(refused, Conditional::Refused(_)), "no heartbeat after commit");
}

async fn operations_on_an_absent_record_are_refused(store: Arc<dyn LeaseStore>) {
    let key = key();
    assert_eq!(store.heartbeat(&key, 1, T0, T0).await.expect("heartbeat"), Conditional::Refused(None));
    assert_eq!(store.commit(&key, 1, b"x", T0).await.expect("commit"), Conditional::Refused(None));
    assert_eq!(store.mark_delivered(&key, 1, None, T0).await.expect("mark"), Conditional::Refused(None));
    assert_eq!(store.read(&key).await.expect("read"), None, "refused writes create nothing");
}

async fn delivery_is_marked_only_once_committed(store: Arc<dyn LeaseStore>) {
    let key = key();
    fence_of(store.as_ref(), &acquire(&key, "a", "east/1", T0)).await;
    assert!(matches!(store.mark_delivered(&key, 1, None, T0 + 1).await.expect("mark"), Conditional::Refused(Some(_))));
    store.commit(&key, 1, b"{}", T0 + 2).await.expect("commit");
    assert!(
        matches!(store.mark_delivered(&key, 2, None, T0 + 3).await.expect("mark"), Conditional::Refused(Some(_))),
        "wrong fence"
    );
    assert_eq!(store.mark_delivered(&key, 1, None, T0 + 4).await.expect("mark"), Conditional::Applied);
    assert_eq!(store.mark_delivered(&key, 1, None, T0 + 5).await.expect("mark"), Conditional::Applied, "idempotent");
    let record = store.read(&key).await.expect("read").expect("record");
    assert!(record.delivered);
    assert_eq!(
        record.seen_by(&Viewer { fingerprint: &fp("a"), sent_ms: T0, owner: "west/1" }, T0 + 6, SKEW_MS),
        Seen::Committed { fence: 1, response: b"{}".to_vec(), delivered: true, committed_ms: T0 + 5 }
    );
}

async fn a_new_attempt_replaces_a_finished_one(store: Arc<dyn LeaseStore>) {
    let key = key();
    fence_of(store.as_ref(), &acquire(&key, "a", "east/1", T0)).await;
    store.commit(&key, 1, b"first", T0 + 1).await.expect("commit");
    store.mark_delivered(&key, 1, None, T0 + 2).await.expect("mark");
    assert_eq!(fence_of(store.as_ref(), &acquire(&key, "b", "east/2", T0 + 3)).await, Some(2));
    let record = store.read(&key).await.expect("read").expect("record");
    assert_eq!(
        (record.fingerprint.clone(), record.state, record.response.clone(), record.delivered),
        (fp("b"), LeaseState::Running, None, false)
    );
    assert_eq!(record.attempts, [fp("a"), fp("b")].into());
    // The old attempt is superseded: refused even after the new one finishes or expires.
    assert_eq!(fence_of(store.as_ref(), &acquire(&key, "a", "west/1", T0 + 4)).await, None);
    assert_eq!(fence_of(store.as_ref(), &acquire(&key, "a", "west/1", T0 + 999_999)).await, None);
    assert_eq!(
        store.read(&key).await.expect("read").expect("record").seen_by(
            &Viewer { fingerprint: &fp("a"), sent_ms: T0, owner: "west/1" },
            T0,
            SKEW_MS
        ),
        Seen::Superseded
    );
}

async fn an_older_attempt_never_takes_over_a_newer_one(store: Arc<dyn LeaseStore>) {
    let key = key();
    // The retried deployment ("b", sent later) reached the table first, then its Lambda died.
    assert_eq!(fence_of(store.as_ref(), &sent_at(&key, "b", "east/1", T0, T0 + 10)).await, Some(1));
    let late = T0 + LEASE_MS + SKEW_MS + 1;
    // The original ("a", sent earlier, never seen by the table) must not take over from it...
    assert_eq!(fence_of(store.as_ref(), &sent_at(&key, "a", "west/1", late, T0)).await, None);
    let record = store.read(&key).await.expect("read").expect("record");
    assert_eq!(record.sent_ms, T0 + 10);
    assert_eq!(
        record.seen_by(&Viewer { fingerprint: &fp("a"), sent_ms: T0, owner: "west/1" }, late, SKEW_MS),
        Seen::Superseded
    );
    // ...while the newer attempt itself may, and so may a later one.
    assert_eq!(fence_of(store.as_ref(), &sent_at(&key, "b", "west/2", late, T0 + 10)).await, Some(2));
    store.commit(&key, 2, b"b", late).await.expect("commit");
    assert_eq!(fence_of(store.as_ref(), &sent_at(&key, "a", "west/3", late, T0)).await, None);
    assert_eq!(fence_of(store.as_ref(), &sent_at(&key, "c", "west/4", late, T0 + 20)).await, Some(3));
}

async fn s3_fences_strictly_increase(store: Arc<dyn LeaseStore>) {
    let key = key();
    let mut fences = Vec::new();
    for round in 0..12u64 {
        let now = T0 + round * (LEASE_MS + SKEW_MS + 1);
        fences.push(
            fence_of(store.as_ref(), &acquire(&key, "a", &format!("owner/{round}"), now)).await.expect("takeover"),
        );
    }
    assert!(fences.windows(2).all(|pair| pair[0] < pair[1]), "{fences:?}");
    assert_eq!(fences.first(), Some(&1));
}

async fn concurrent_acquires_grant_one_lease(store: Arc<dyn LeaseStore>) {
    let key = key();
    let attempts = (0..12).map(|i| {
        let store = Arc::clone(&store);
        let request = acquire(&key, "a", &format!("racer/{i}"), T0);
        async move { fence_of(store.as_ref(), &request).await }
    });
    let granted: Vec<u64> = futures_util::future::join_all(attempts).await.into_iter().flatten().collect();
    assert_eq!(granted, vec![1], "exactly one racer wins");
}

async fn a_wait_stores_the_state_releases_the_lease_and_is_fenced(store: Arc<dyn LeaseStore>) {
    let key = key();
    fence_of(store.as_ref(), &acquire(&key, "a", "east/1", T0)).await;
    let first = poll("a", T0 + 30_000, 0);
    assert_eq!(store.wait(&key, 1, &first, T0 + 1_000).await.expect("wait"), Conditional::Applied);
    let record = store.read(&key).await.expect("read").expect("record");
    assert_eq!((record.state, record.fence, record.lease_until_ms), (LeaseState::Waiting, 1, T0 + 1_000));
    assert_eq!(record.poll.as_ref(), Some(&first), "the state is stored exactly");
    // Waiting is not running: no heartbeat, commit or second wait under the old fence.
    assert!(matches!(store.heartbeat(&key, 1, T0 + 9_000, T0 + 2_000).await.expect("hb"), Conditional::Refused(_)));
    assert!(matches!(store.commit(&key, 1, b"x", T0 + 2_000).await.expect("commit"), Conditional::Refused(_)));
    assert!(matches!(store.wait(&key, 1, &first, T0 + 2_000).await.expect("wait"), Conditional::Refused(_)));
    // Not due: refused, with the record. Due: a new fence, and the state to poll with.
    match store.acquire(&acquire(&key, "a", "west/1", T0 + 29_999)).await.expect("acquire") {
        Acquire::Refused(refused) => assert_eq!(*refused, record),
        other => panic!("a poll not due was granted: {other:?}"),
    }
    let lagging = AcquireRequest { poll_lag_ms: 5_000, ..acquire(&key, "a", "west/1", T0 + 34_999) };
    assert!(matches!(store.acquire(&lagging).await.expect("acquire"), Acquire::Refused(_)), "not past the lag");
    match store.acquire(&acquire(&key, "a", "west/1", T0 + 30_000)).await.expect("acquire") {
        Acquire::Acquired { fence, took_over, interrupted, poll, .. } => {
            assert_eq!(
                (fence, took_over, interrupted, poll),
                (2, true, false, Some(first.clone())),
                "a due poll interrupts nobody"
            )
        }
        other => panic!("a due poll was refused: {other:?}"),
    }
    let polling = store.read(&key).await.expect("read").expect("record");
    assert_eq!(
        (polling.state, polling.poll.as_ref()),
        (LeaseState::Running, Some(&first)),
        "kept for a crash mid-poll"
    );
    // S2: the stale holder cannot store its state over the poller's.
    let stale = poll("a", T0 + 99_000, 7);
    assert!(matches!(store.wait(&key, 1, &stale, T0 + 31_000).await.expect("wait"), Conditional::Refused(_)));
    let second = poll("a", T0 + 60_000, 1);
    assert_eq!(store.wait(&key, 2, &second, T0 + 31_000).await.expect("wait"), Conditional::Applied);
    assert_eq!(store.read(&key).await.expect("read").expect("record").poll, Some(second.clone()));
    // The last poll commits; the commit clears the work in progress.
    fence_of(store.as_ref(), &acquire(&key, "a", "east/2", T0 + 60_000)).await;
    assert_eq!(store.commit(&key, 3, b"done", T0 + 61_000).await.expect("commit"), Conditional::Applied);
    let done = store.read(&key).await.expect("read").expect("record");
    assert_eq!((done.state, done.poll, done.response), (LeaseState::Committed, None, Some(b"done".to_vec())));
}

async fn a_new_attempt_replaces_a_wait_at_once(store: Arc<dyn LeaseStore>) {
    let key = key();
    fence_of(store.as_ref(), &acquire(&key, "a", "east/1", T0)).await;
    store.wait(&key, 1, &poll("a", T0 + 600_000, 0), T0).await.expect("wait");
    // CloudFormation gave up on attempt a and retried the deployment: b need not wait for a's poll.
    match store.acquire(&sent_at(&key, "b", "east/2", T0 + 1_000, T0 + 1_000)).await.expect("acquire") {
        Acquire::Acquired { fence, took_over, interrupted, poll, .. } => {
            assert_eq!((fence, took_over, interrupted, poll), (2, false, false, None))
        }
        other => panic!("{other:?}"),
    }
    let record = store.read(&key).await.expect("read").expect("record");
    let viewer = Viewer { fingerprint: &fp("a"), sent_ms: T0, owner: "east/9" };
    assert_eq!(record.seen_by(&viewer, T0 + 700_000, SKEW_MS), Seen::Superseded, "a's poll is dropped");
}

async fn the_store_decides_as_admits_says(store: Arc<dyn LeaseStore>) {
    // Reachable states, built through the store's own operations.
    async fn state(store: &dyn LeaseStore, which: &str) -> RequestKey {
        let key = key();
        match which {
            "absent" => {}
            "running a" => {
                fence_of(store, &acquire(&key, "a", "east/1", T0)).await;
            }
            "committed a" => {
                fence_of(store, &acquire(&key, "a", "east/1", T0)).await;
                store.commit(&key, 1, b"a", T0).await.expect("commit");
            }
            "waiting a" => {
                fence_of(store, &acquire(&key, "a", "east/1", T0)).await;
                store.wait(&key, 1, &poll("a", T0 + LEASE_MS + SKEW_MS, 0), T0).await.expect("wait");
            }
            "left" => {
                let Acquire::Acquired { fence, prior, .. } =
                    store.acquire(&acquire(&key, "z", "east/0", T0)).await.expect("acquire")
                else {
                    panic!("an absent record refused an acquire")
                };
                let left = left_record(&key, fence, prior.as_deref(), T0, T0 + 86_400_000);
                assert_eq!(store.leave(&left).await.expect("leave"), Conditional::Applied);
            }
            "running b after a" | "committed b after a" => {
                fence_of(store, &acquire(&key, "a", "east/1", T0)).await;
                store.commit(&key, 1, b"a", T0).await.expect("commit");
                fence_of(store, &acquire(&key, "b", "east/2", T0)).await;
                if which == "committed b after a" {
                    store.commit(&key, 2, b"b", T0).await.expect("commit");
                }
            }
            other => unreachable!("{other}"),
        }
        key
    }
    let mut checked = 0;
    let states =
        ["absent", "left", "running a", "committed a", "waiting a", "running b after a", "committed b after a"];
    for which in states {
        for fingerprint in ["a", "b", "c"] {
            for now in [T0 + 1, T0 + LEASE_MS + SKEW_MS, T0 + LEASE_MS + SKEW_MS + 1] {
                for (sent, lag) in [(T0 - 1, 0), (T0 - 1, 1), (T0, 0), (T0, 1)] {
                    let key = state(store.as_ref(), which).await;
                    let request =
                        AcquireRequest { poll_lag_ms: lag, ..sent_at(&key, fingerprint, "racer/1", now, sent) };
                    let before = store.read(&key).await.expect("read");
                    let expected = admits(before.as_ref(), &request);
                    let granted = fence_of(store.as_ref(), &request).await.is_some();
                    assert_eq!(
                        granted,
                        expected,
                        "state {which:?}, fingerprint {fingerprint}, now {}, sent {sent}, poll lag {lag}",
                        now - T0
                    );
                    checked += 1;
                }
            }
            // A close's preempting acquire, on every state, while every lease is live.
            let key = state(store.as_ref(), which).await;
            let request = AcquireRequest { preempt: true, ..sent_at(&key, fingerprint, "closer/1", T0 + 1, T0) };
            let before = store.read(&key).await.expect("read");
            let expected = admits(before.as_ref(), &request);
            assert_eq!(
                fence_of(store.as_ref(), &request).await.is_some(),
                expected,
                "state {which:?}, preempting {fingerprint}"
            );
            checked += 1;
        }
    }
    assert_eq!(checked, 252 + 21);
}

async fn a_close_takes_the_record_and_commits_its_signal_in_one_write(store: Arc<dyn LeaseStore>) {
    let key = key();
    // A poll in flight: its attempt's wait, then a live lease over it.
    fence_of(store.as_ref(), &acquire(&key, "a", "poller/1", T0)).await;
    store.wait(&key, 1, &poll("a", T0 + 1_000, 3), T0).await.expect("wait");
    assert_eq!(fence_of(store.as_ref(), &acquire(&key, "a", "poller/2", T0 + 1_000)).await, Some(2));
    let closing = AcquireRequest { preempt: true, ..acquire(&key, "d", "closer/1", T0 + 2_000) };
    match store.close(&closing, b"{\"Status\":\"FAILURE\"}").await.expect("close") {
        Acquire::Acquired { fence, poll, .. } => assert_eq!((fence, poll), (3, None)),
        other => panic!("the close was refused: {other:?}"),
    }
    let record = store.read(&key).await.expect("read").expect("record");
    assert_eq!((record.fence, record.state, record.owner.as_str()), (3, LeaseState::Committed, "closer/1"));
    assert_eq!(record.response.as_deref(), Some(&b"{\"Status\":\"FAILURE\"}"[..]));
    assert_eq!((record.delivered, record.poll), (false, None), "committed, no work in progress left");
    assert!(record.attempts.contains(&fp("a")) && record.fingerprint == fp("d"));
    // The poll it took the record from can do nothing any more, and nothing closes it twice.
    assert!(matches!(
        store.heartbeat(&key, 2, T0 + 40_000, T0 + 3_000).await.expect("heartbeat"),
        Conditional::Refused(_)
    ));
    assert!(matches!(store.commit(&key, 2, b"late", T0 + 3_000).await.expect("commit"), Conditional::Refused(_)));
    let again = AcquireRequest { owner: "closer/2".into(), ..closing.clone() };
    assert!(matches!(store.close(&again, b"other").await.expect("close"), Acquire::Refused(_)));
    // A record swept (or never written) is closed under fence 1.
    let other = RequestKey { request_id: "swept".into(), ..key.clone() };
    let fresh = AcquireRequest { preempt: true, ..acquire(&other, "d", "closer/3", T0) };
    assert!(matches!(store.close(&fresh, b"x").await.expect("close"), Acquire::Acquired { fence: 1, .. }));
}

async fn a_signal_that_will_never_be_sent_is_recorded_with_why(store: Arc<dyn LeaseStore>) {
    let key = key();
    fence_of(store.as_ref(), &acquire(&key, "a", "east/1", T0)).await;
    store.commit(&key, 1, b"{}", T0 + 1).await.expect("commit");
    let why = "not sent: the wait condition handle's presigned URL expired at 2027-01-16T07:59:59.000Z";
    assert_eq!(store.mark_delivered(&key, 1, Some(why), T0 + 2).await.expect("mark"), Conditional::Applied);
    let record = store.read(&key).await.expect("read").expect("record");
    assert_eq!((record.delivered, record.unsent.as_deref()), (true, Some(why)), "nothing left to send, and why");
    // A later attempt starts afresh: the reason belongs to the bytes it was about.
    fence_of(store.as_ref(), &acquire(&key, "b", "east/2", T0 + 3)).await;
    let record = store.read(&key).await.expect("read").expect("record");
    assert_eq!((record.delivered, record.unsent), (false, None));
}

/// The work an Update's new work replaced is kept as the first write named it: a poll or a
/// close (whose requests name none) never changes it, and a record given back unused leaves it
/// to be set by the next acquire.
async fn a_work_keeps_the_work_it_replaced(store: Arc<dyn LeaseStore>) {
    let key = key();
    let naming = |request: AcquireRequest, replaces: &str| AcquireRequest {
        label: RequestLabel { replaces: replaces.into(), ..request.label.clone() },
        ..request
    };
    // Given back unused before anything named it: the next acquire sets it.
    let first = naming(acquire(&key, "a", "east/1", T0), "");
    fence_of(store.as_ref(), &first).await;
    let left = left_record(&key, 1, None, T0 + 1, T0 + 86_400_000);
    assert_eq!(store.leave(&left).await.expect("leave"), Conditional::Applied);
    fence_of(store.as_ref(), &naming(acquire(&key, "a", "east/2", T0 + 2), "cfn-once-work:old")).await;
    let replaced = |record: Option<LeaseRecord>| record.expect("a record").label.replaces;
    assert_eq!(replaced(store.read(&key).await.expect("read")), "cfn-once-work:old");
    // A close by a request that names none keeps it.
    let close = AcquireRequest { preempt: true, ..naming(acquire(&key, "z", "west/3", T0 + 3), "") };
    assert!(matches!(store.close(&close, b"closed").await.expect("close"), Acquire::Acquired { .. }));
    assert_eq!(replaced(store.read(&key).await.expect("read")), "cfn-once-work:old");
}

async fn a_preempting_acquire_takes_a_live_lease_and_fences_its_holder_out(store: Arc<dyn LeaseStore>) {
    let key = key();
    assert_eq!(fence_of(store.as_ref(), &acquire(&key, "a", "poller/1", T0)).await, Some(1));
    // An ordinary acquire waits for the live lease; a close's takes it under the next fence.
    assert_eq!(fence_of(store.as_ref(), &acquire(&key, "b", "closer/1", T0 + 1_000)).await, None);
    let preempting = AcquireRequest { preempt: true, ..acquire(&key, "b", "closer/1", T0 + 1_000) };
    match store.acquire(&preempting).await.expect("acquire") {
        Acquire::Acquired { fence, prior, .. } => {
            assert_eq!(fence, 2);
            let prior = prior.expect("the record it took");
            assert_eq!((prior.owner.as_str(), prior.lease_until_ms), ("poller/1", T0 + LEASE_MS));
        }
        other => panic!("the close was refused: {other:?}"),
    }
    // The holder it took from can no longer extend, park or commit anything.
    assert!(matches!(
        store.heartbeat(&key, 1, T0 + 40_000, T0 + 2_000).await.expect("heartbeat"),
        Conditional::Refused(_)
    ));
    assert!(matches!(
        store.wait(&key, 1, &poll("a", T0 + 50_000, 1), T0 + 2_000).await.expect("wait"),
        Conditional::Refused(_)
    ));
    assert!(matches!(store.commit(&key, 1, b"late", T0 + 2_000).await.expect("commit"), Conditional::Refused(_)));
    assert_eq!(store.commit(&key, 2, b"closed", T0 + 2_001).await.expect("commit"), Conditional::Applied);
    // Once its signal is committed, not even a close takes the record again.
    let again = AcquireRequest { preempt: true, owner: "closer/2".into(), ..preempting };
    assert_eq!(fence_of(store.as_ref(), &again).await, None);
    let record = store.read(&key).await.expect("read").expect("record");
    assert_eq!((record.fence, record.response.as_deref()), (2, Some(&b"closed"[..])));
}

/// What every later delivery sees of `record`, and whether the store grants each acquire on
/// it: the table's inputs, for a lease given back to compare with the record it was taken from.
fn as_everyone_sees(record: Option<&LeaseRecord>) -> Vec<(Seen, bool)> {
    let mut views = Vec::new();
    for fingerprint in ["a", "b", "c"] {
        for now in [T0 + 1, T0 + 40_000, T0 + 700_000] {
            for (sent, lag) in [(T0 - 1, 0), (T0, 0), (T0 + 5, 9_000)] {
                let request = AcquireRequest { poll_lag_ms: lag, ..sent_at(&key(), fingerprint, "later/1", now, sent) };
                let viewer = Viewer { fingerprint: &request.fingerprint, sent_ms: sent, owner: "later/1" };
                // The fence a committed answer is marked delivered under is the record's own:
                // one above the committer's after a give-back, which changes nobody's decision.
                let seen = match Seen::of(record, &viewer, now, SKEW_MS) {
                    Seen::Committed { response, delivered, committed_ms, .. } => {
                        Seen::Committed { fence: 0, response, delivered, committed_ms }
                    }
                    seen => seen,
                };
                views.push((seen, admits(record, &request)));
            }
        }
    }
    views
}

async fn a_lease_given_back_unused_is_as_if_never_taken(store: Arc<dyn LeaseStore>) {
    // A primary on standby acquired before its control answered: the records it may take so
    // (no record, another attempt's answer, a wait whose poll is due), each given back.
    for which in ["absent", "committed a", "waiting a"] {
        let key = key();
        match which {
            "absent" => {}
            "committed a" => {
                fence_of(store.as_ref(), &acquire(&key, "a", "east/1", T0)).await;
                store.commit(&key, 1, b"a's answer", T0 + 100).await.expect("commit");
            }
            _ => {
                fence_of(store.as_ref(), &acquire(&key, "a", "east/1", T0)).await;
                store.wait(&key, 1, &poll("a", T0 + 30_000, 2), T0 + 100).await.expect("wait");
            }
        }
        let before = store.read(&key).await.expect("read");
        let taker = if which == "committed a" { "b" } else { "a" };
        let request = sent_at(&key, taker, "east/2", T0 + 40_000, T0 + 1);
        let Acquire::Acquired { fence, prior, .. } = store.acquire(&request).await.expect("acquire") else {
            panic!("{which}: the acquire was refused")
        };
        assert_eq!(prior.as_deref(), before.as_ref(), "{which}: the acquire reports the record it found");
        let left = left_record(&key, fence, prior.as_deref(), T0 + 40_010, T0 + 86_400_000);
        // Not under a fence it does not hold.
        let stale = LeaseRecord { fence: fence - 1, ..left.clone() };
        assert!(matches!(store.leave(&stale).await.expect("leave"), Conditional::Refused(Some(_))), "{which}");
        assert_eq!(store.leave(&left).await.expect("leave"), Conditional::Applied, "{which}");
        let after = store.read(&key).await.expect("read").expect("a record stays");
        match &before {
            Some(before) => assert_eq!(after, LeaseRecord { fence, ..before.clone() }, "{which}: restored exactly"),
            None => assert_eq!((after.state, after.fence), (LeaseState::Left, fence), "{which}"),
        }
        assert_eq!(
            as_everyone_sees(Some(&after)),
            as_everyone_sees(before.as_ref()),
            "{which}: every later delivery decides as if the lease had never been taken"
        );
        // Given back once: not twice, and the next acquire gets the next fence, as on the record
        // it was taken from (the same takeover and poll flags).
        assert!(matches!(store.leave(&left).await.expect("leave"), Conditional::Refused(_)), "{which}");
        match store.acquire(&AcquireRequest { owner: "west/1".into(), ..request.clone() }).await.expect("acquire") {
            Acquire::Acquired { fence: next, took_over, interrupted, poll, .. } => {
                let had_poll = before.as_ref().and_then(|record| record.poll_for(&request.fingerprint));
                let same = before.as_ref().is_some_and(|record| record.fingerprint == request.fingerprint);
                assert_eq!((next, took_over, interrupted, poll), (fence + 1, same, false, had_poll), "{which}");
            }
            other => panic!("{which}: the acquire after the give-back was refused: {other:?}"),
        }
    }
}

macro_rules! contract {
    ($($case:ident),* $(,)?) => {
        mod memory {
            $(
                #[tokio::test]
                async fn $case() {
                    super::$case(std::sync::Arc::new(super::MemoryLeaseStore::new())).await;
                }
            )*
        }
        mod dynamodb {
            $(
                #[tokio::test]
                async fn $case() {
                    let region = super::LocalRegion::new(super::Options::default()).await;
                    super::$case(region.lease_store()).await;
                }
            )*
        }
    };
}

contract!(
    first_acquire_grants_fence_one,
    a_refusal_returns_the_record_as_it_was,
    expiry_respects_the_skew_margin,
    commit_and_heartbeat_are_fenced,
    operations_on_an_absent_record_are_refused,
    delivery_is_marked_only_once_committed,
    a_new_attempt_replaces_a_finished_one,
    an_older_attempt_never_takes_over_a_newer_one,
    s3_fences_strictly_increase,
    concurrent_acquires_grant_one_lease,
    a_wait_stores_the_state_releases_the_lease_and_is_fenced,
    a_new_attempt_replaces_a_wait_at_once,
    the_store_decides_as_admits_says,
    a_lease_given_back_unused_is_as_if_never_taken,
    a_preempting_acquire_takes_a_live_lease_and_fences_its_holder_out,
    a_signal_that_will_never_be_sent_is_recorded_with_why,
    a_close_takes_the_record_and_commits_its_signal_in_one_write,
    a_work_keeps_the_work_it_replaced,
);

/// The active-region control reads what the drill's flip writes: no item (the primary is
/// active), then the secondary named.
#[tokio::test]
async fn the_control_item_reads_what_the_drill_flips() {
    use cfn_once::adapters::control_table::TableControl;
    use cfn_once_core::control::ActivitySource;
    use cfn_once_core::decision::Activity;

    let region = LocalRegion::new(Options::default()).await;
    let client = cfn_once::app::dynamodb_client(&region.sdk, 5_000, REGION);
    let primary = TableControl::new(client, &region.table, REGION);
    assert_eq!(primary.active_region().await.expect("read"), None);
    assert_eq!(primary.activity().await.expect("read"), Activity::Active, "no item: the primary is active");
    primary.set_active_region("us-west-2", 1_000, "test").await.expect("flip");
    assert_eq!(primary.active_region().await.expect("read").as_deref(), Some("us-west-2"));
    assert_eq!(primary.activity().await.expect("read"), Activity::Standby);
}
