//! A record as one delivery sees it (the "record seen" column of the decision table), and the
//! acquire condition every lease store evaluates atomically.

use super::{AcquireRequest, LeaseRecord, LeaseState, PollRecord};
use crate::fingerprint::Fingerprint;

/// A record as one delivery sees it: the "record seen" column of the decision table.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Seen {
    /// Nothing stored yet.
    Absent,
    /// Someone holds a live lease until `until_ms` (skew margin included).
    Held {
        /// When the lease counts as expired, epoch ms: where a backoff aims.
        until_ms: u64,
    },
    /// RUNNING, but the lease expired past the skew margin: free to take over.
    Expired,
    /// A finished attempt with another fingerprint: this delivery is a new attempt (a reused
    /// RequestId).
    NewAttempt,
    /// This execution holds it: it acquired, or an acquire whose reply was lost turned out to
    /// be its own. `took_over` is true unless no earlier execution of this attempt can have run
    /// its provider (only then may a failed Create skip the provider on its rollback Delete).
    Mine {
        /// The fencing token this execution holds.
        fence: u64,
        /// Whether an earlier execution of this attempt may have run its provider.
        took_over: bool,
        /// Whether that execution may have stopped mid-run (see [`Acquire::Acquired`]).
        ///
        /// [`Acquire::Acquired`]: super::Acquire::Acquired
        interrupted: bool,
        /// The attempt's work in progress: poll it instead of calling the provider afresh.
        poll: Option<PollRecord>,
    },
    /// The provider answered in progress; nobody holds the lease until the poll at
    /// `poll_at_ms` (the waiter's clock).
    Waiting {
        /// When the next poll is due, epoch ms.
        poll_at_ms: u64,
    },
    /// Answered at `committed_ms` (the committer's clock): PUT the stored bytes unless already
    /// delivered.
    Committed {
        /// The fencing token the response was committed under.
        fence: u64,
        /// The committed response body, to PUT byte for byte.
        response: Vec<u8>,
        /// Whether it was already PUT: then the message is a duplicate.
        delivered: bool,
        /// When it was committed, epoch ms on the committer's clock.
        committed_ms: u64,
    },
    /// A newer attempt with the same RequestId exists: this delivery is stale.
    Superseded,
}

/// A delivery looking at a record: the attempt it carries, when that was sent, and who looks.
#[derive(Debug, Clone, Copy)]
pub struct Viewer<'a> {
    /// The attempt this delivery carries; a different one on the record is another attempt.
    pub fingerprint: &'a Fingerprint,
    /// When that attempt was sent, epoch ms: one sent before the record's attempt is stale.
    pub sent_ms: u64,
    /// This execution's owner string, to recognise a lease it already holds.
    pub owner: &'a str,
}

impl Seen {
    /// How `record` (or its absence) looks to `viewer`.
    pub fn of(record: Option<&LeaseRecord>, viewer: &Viewer<'_>, now_ms: u64, skew_ms: u64) -> Self {
        record.map_or(Self::Absent, |record| record.seen_by(viewer, now_ms, skew_ms))
    }
}

impl LeaseRecord {
    /// The work in progress stored for `fingerprint`'s attempt, if any.
    pub fn poll_for(&self, fingerprint: &Fingerprint) -> Option<PollRecord> {
        self.poll.as_ref().filter(|poll| poll.fingerprint == *fingerprint).cloned()
    }

    /// When the stored poll is due (0 if a WAITING record lost its poll fields: due now).
    fn poll_at_ms(&self) -> u64 {
        self.poll.as_ref().map_or(0, |poll| poll.poll_at_ms)
    }

    /// Whether this record's attempt is newer than the attempt `fingerprint`, sent at `sent_ms`:
    /// that attempt held the lease before, or was sent before this one. CloudFormation retries a
    /// deployment (reusing the RequestId) only after the earlier one failed, so the later-sent
    /// attempt is the one it waits for.
    pub fn supersedes(&self, fingerprint: &Fingerprint, sent_ms: u64) -> bool {
        self.fingerprint != *fingerprint && (self.attempts.contains(fingerprint) || sent_ms < self.sent_ms)
    }

    /// Classifies this record for `viewer` at `now_ms`.
    pub fn seen_by(&self, viewer: &Viewer<'_>, now_ms: u64, skew_ms: u64) -> Seen {
        let (fingerprint, owner) = (viewer.fingerprint, viewer.owner);
        let expired = self.lease_until_ms < now_ms.saturating_sub(skew_ms);
        let held = || Seen::Held { until_ms: self.lease_until_ms.saturating_add(skew_ms) };
        if self.supersedes(fingerprint, viewer.sent_ms) {
            return Seen::Superseded;
        }
        if self.state == LeaseState::Left {
            return Seen::Absent;
        }
        if self.fingerprint != *fingerprint {
            return match self.state {
                // A newer attempt replaces one that is waiting: CloudFormation gave up on it.
                LeaseState::Committed | LeaseState::Waiting => Seen::NewAttempt,
                LeaseState::Running if expired => Seen::Expired,
                LeaseState::Running => held(),
                LeaseState::Left => Seen::Absent,
            };
        }
        match (self.state, &self.response) {
            (LeaseState::Committed, Some(response)) => {
                // Nothing but mark-delivered writes a COMMITTED record, so `updated_ms` is the
                // commit time until it is delivered.
                Seen::Committed {
                    fence: self.fence,
                    response: response.clone(),
                    delivered: self.delivered,
                    committed_ms: self.updated_ms,
                }
            }
            (LeaseState::Waiting, _) => Seen::Waiting { poll_at_ms: self.poll_at_ms() },
            // A COMMITTED record always carries its response; without one, treat it as running
            // so that nobody replays an empty answer.
            (LeaseState::Committed, None) | (LeaseState::Running | LeaseState::Left, _) => {
                if self.owner == owner {
                    // Whether this acquire took over from someone is not known here; only the
                    // first fence a record ever granted is certainly not a takeover.
                    Seen::Mine {
                        fence: self.fence,
                        took_over: self.fence > 1,
                        interrupted: self.fence > 1,
                        poll: self.poll_for(fingerprint),
                    }
                } else if expired {
                    Seen::Expired
                } else {
                    held()
                }
            }
        }
    }
}

/// Whether `record` admits `request`'s acquire: the condition every store evaluates atomically.
/// The in-memory store calls it directly; the DynamoDB adapter expresses the same rule as a
/// ConditionExpression, and the shared contract suite holds both to it.
pub fn admits(record: Option<&LeaseRecord>, request: &AcquireRequest) -> bool {
    let Some(record) = record else {
        return true;
    };
    let same_attempt = record.fingerprint == request.fingerprint;
    if record.supersedes(&request.fingerprint, request.sent_ms) {
        return false;
    }
    match record.state {
        LeaseState::Running => record.lease_until_ms < request.expired_before_ms(),
        LeaseState::Waiting => !same_attempt || record.poll_at_ms() <= request.poll_due_before_ms(),
        LeaseState::Committed => !same_attempt,
        LeaseState::Left => true,
    }
}
#[cfg(test)]
mod tests {
    use super::*;
    use crate::lease::RequestLabel;
    use crate::request::RequestKey;

    fn fp(name: &str) -> Fingerprint {
        Fingerprint::from_stored(name.to_owned())
    }

    fn record(state: LeaseState, fingerprint: &str, lease_until_ms: u64, attempts: &[&str]) -> LeaseRecord {
        LeaseRecord {
            format: crate::lease::RECORD_FORMAT,
            key: RequestKey {
                stack_id: crate::request::StackArn::parse("arn:aws:cloudformation:us-east-1:123456789012:stack/s/g")
                    .expect("an ARN"),
                request_id: "r".into(),
            },
            fence: 3,
            owner: "us-east-1/inv/1".into(),
            lease_until_ms,
            heartbeat: 0,
            state,
            fingerprint: fp(fingerprint),
            attempts: attempts.iter().map(|a| fp(a)).collect(),
            response: (state == LeaseState::Committed).then(|| b"{}".to_vec()),
            delivered: false,
            unsent: None,
            // The record's attempt was sent at 100; viewers' attempts at 100 unless a case says.
            sent_ms: 100,
            created_ms: 0,
            updated_ms: 0,
            expires_ms: 0,
            poll: None,
            label: RequestLabel::default(),
            writer: None,
        }
    }

    /// A record waiting for a poll at `poll_at_ms`, stored by attempt "a".
    fn waiting(poll_at_ms: u64) -> LeaseRecord {
        LeaseRecord {
            poll: Some(PollRecord {
                fingerprint: fp("a"),
                state: "{}".into(),
                poll_at_ms,
                waiting_since_ms: 0,
                polls: 1,
            }),
            ..record(LeaseState::Waiting, "a", 0, &["a"])
        }
    }

    fn acquire(fingerprint: &str, now_ms: u64) -> AcquireRequest {
        sent_at(fingerprint, now_ms, 100)
    }

    fn sent_at(fingerprint: &str, now_ms: u64, sent_ms: u64) -> AcquireRequest {
        AcquireRequest {
            key: RequestKey {
                stack_id: crate::request::StackArn::parse("arn:aws:cloudformation:us-east-1:123456789012:stack/s/g")
                    .expect("an ARN"),
                request_id: "r".into(),
            },
            fingerprint: fp(fingerprint),
            sent_ms,
            owner: "us-west-2/inv/2".into(),
            now_ms,
            lease_until_ms: now_ms + 30_000,
            skew_ms: 1_000,
            expires_ms: now_ms + 1,
            poll_lag_ms: 0,
            label: RequestLabel::default(),
            preempt: false,
        }
    }

    #[test]
    fn admits_table() {
        use LeaseState::*;
        let cases: [(&str, Option<LeaseRecord>, AcquireRequest, bool); 12] = [
            ("absent", None, acquire("a", 10_000), true),
            ("running, live", Some(record(Running, "a", 10_000, &["a"])), acquire("a", 10_000), false),
            (
                "running, expired but inside skew",
                Some(record(Running, "a", 10_000, &["a"])),
                acquire("a", 11_000),
                false,
            ),
            ("running, expired past skew", Some(record(Running, "a", 10_000, &["a"])), acquire("a", 11_001), true),
            ("committed, same attempt", Some(record(Committed, "a", 0, &["a"])), acquire("a", 99_000), false),
            ("committed, new attempt", Some(record(Committed, "a", 0, &["a"])), acquire("b", 1), true),
            ("committed, superseded attempt", Some(record(Committed, "b", 0, &["a", "b"])), acquire("a", 1), false),
            (
                "running expired, superseded attempt",
                Some(record(Running, "b", 0, &["a", "b"])),
                acquire("a", 99_000),
                false,
            ),
            ("running live, new attempt", Some(record(Running, "a", 10_000, &["a"])), acquire("b", 10_000), false),
            // An attempt sent before the record's is an older deployment, even if never seen.
            ("running expired, older attempt", Some(record(Running, "b", 0, &["b"])), sent_at("a", 99_000, 99), false),
            ("committed, older attempt", Some(record(Committed, "b", 0, &["b"])), sent_at("a", 99_000, 99), false),
            ("committed, newer attempt", Some(record(Committed, "b", 0, &["b"])), sent_at("a", 99_000, 101), true),
        ];
        for (name, record, request, expected) in cases {
            assert_eq!(admits(record.as_ref(), &request), expected, "{name}");
        }
    }

    #[test]
    fn a_preempting_acquire_takes_a_live_lease_or_a_wait_but_nothing_committed_or_newer() {
        use LeaseState::*;
        let preempting = |fingerprint: &str, now_ms| AcquireRequest { preempt: true, ..acquire(fingerprint, now_ms) };
        let cases = [
            ("running, live", Some(record(Running, "a", 10_000, &["a"])), preempting("b", 5_000), true),
            (
                "running, live, its own attempt",
                Some(record(Running, "a", 10_000, &["a"])),
                preempting("a", 5_000),
                true,
            ),
            ("waiting, poll not due", Some(waiting(50_000)), preempting("a", 5_000), true),
            ("committed, same attempt", Some(record(Committed, "a", 0, &["a"])), preempting("a", 5_000), false),
            ("committed, new attempt", Some(record(Committed, "a", 0, &["a"])), preempting("b", 5_000), true),
            (
                "running, superseded attempt",
                Some(record(Running, "b", 10_000, &["a", "b"])),
                preempting("a", 5_000),
                false,
            ),
            ("absent", None, preempting("a", 5_000), true),
        ];
        for (name, record, request, expected) in cases {
            assert_eq!(admits(record.as_ref(), &request), expected, "{name}");
            // Without preempting, nothing live is taken.
            if record.as_ref().is_some_and(|r| r.state == Running && r.lease_until_ms >= 5_000) {
                assert!(!admits(record.as_ref(), &AcquireRequest { preempt: false, ..request }), "{name}");
            }
        }
    }

    #[test]
    fn a_wait_admits_its_due_poll_and_newer_attempts_only() {
        let lagging = |now_ms, lag_ms| AcquireRequest { poll_lag_ms: lag_ms, ..acquire("a", now_ms) };
        let cases = [
            ("poll not due", waiting(5_000), acquire("a", 4_999), false),
            ("poll due", waiting(5_000), acquire("a", 5_000), true),
            ("poll due, but not past the caller's lag", waiting(5_000), lagging(12_999, 8_000), false),
            ("poll due past the caller's lag", waiting(5_000), lagging(13_000, 8_000), true),
            ("a newer attempt, poll not due", waiting(5_000), acquire("b", 1), true),
            ("an older attempt", waiting(5_000), sent_at("b", 99_000, 99), false),
        ];
        for (name, record, request, expected) in cases {
            assert_eq!(admits(Some(&record), &request), expected, "{name}");
        }
        let me = Viewer { fingerprint: &fp("a"), sent_ms: 100, owner: "us-west-2/inv/2" };
        assert_eq!(waiting(5_000).seen_by(&me, 1, 1_000), Seen::Waiting { poll_at_ms: 5_000 });
        let newer = Viewer { fingerprint: &fp("b"), sent_ms: 100, owner: "us-west-2/inv/2" };
        assert_eq!(waiting(5_000).seen_by(&newer, 1, 1_000), Seen::NewAttempt);
        // The poll fields belong to their attempt: a newer attempt that took the lease over
        // starts afresh, the same attempt after a crash mid-poll polls again.
        let running = LeaseRecord { state: LeaseState::Running, owner: "us-west-2/inv/2".into(), ..waiting(5_000) };
        assert!(matches!(running.seen_by(&me, 1, 1_000), Seen::Mine { poll: Some(_), .. }));
        let replaced = LeaseRecord { fingerprint: fp("b"), ..running };
        let newer_mine = Viewer { fingerprint: &fp("b"), ..me };
        assert!(matches!(replaced.seen_by(&newer_mine, 1, 1_000), Seen::Mine { poll: None, .. }));
    }

    #[test]
    fn seen_by_table() {
        use LeaseState::*;
        let me = "us-west-2/inv/2";
        let check = |record: LeaseRecord, fingerprint: &str, owner: &str, now_ms: u64, expected: Seen| {
            let viewer = Viewer { fingerprint: &fp(fingerprint), sent_ms: 100, owner };
            assert_eq!(record.seen_by(&viewer, now_ms, 1_000), expected);
        };
        check(record(Running, "a", 10_000, &["a"]), "a", me, 5_000, Seen::Held { until_ms: 11_000 });
        check(record(Running, "a", 10_000, &["a"]), "a", me, 11_001, Seen::Expired);
        check(record(Running, "a", 10_000, &["a"]), "b", me, 11_001, Seen::Expired);
        check(
            record(Running, "a", 10_000, &["a"]),
            "a",
            "us-east-1/inv/1",
            5_000,
            Seen::Mine { fence: 3, took_over: true, interrupted: true, poll: None },
        );
        check(
            record(Committed, "a", 0, &["a"]),
            "a",
            me,
            5_000,
            Seen::Committed { fence: 3, response: b"{}".to_vec(), delivered: false, committed_ms: 0 },
        );
        check(record(Committed, "a", 0, &["a"]), "b", me, 5_000, Seen::NewAttempt);
        check(record(Running, "a", 10_000, &["a"]), "b", me, 5_000, Seen::Held { until_ms: 11_000 });
        check(record(Committed, "b", 0, &["a", "b"]), "a", me, 5_000, Seen::Superseded);
        let older = Viewer { fingerprint: &fp("a"), sent_ms: 99, owner: me };
        assert_eq!(record(Running, "b", 0, &["b"]).seen_by(&older, 99_000, 1_000), Seen::Superseded);
    }
}
