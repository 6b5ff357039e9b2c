//! The decision table: what one delivery does, given the record it sees, this
//! region's role, whether this region is active, and whether the deadline is near.
//!
//! | record seen              | active              | standby primary      | standby secondary   |
//! |--------------------------|---------------------|----------------------|---------------------|
//! | none                     | acquire and run³    | leave the message    | acquire and run³    |
//! | RUNNING, lease live      | back off to its end | back off to its end  | back off to its end |
//! | RUNNING, lease expired   | take over           | take over            | take over           |
//! | COMMITTED, not delivered | PUT stored bytes¹   | PUT stored bytes¹    | PUT stored bytes¹   |
//! | COMMITTED and delivered  | drop                | drop                 | drop                |
//! | COMMITTED, other attempt | acquire and run     | as for none          | acquire and run     |
//! | WAITING, poll due²       | acquire and poll    | leave the message    | acquire and poll    |
//! | WAITING, poll not due    | back off to the poll| leave the message    | back off to the poll|
//!
//! ¹ Unless it was committed less than the delivery grace ago: the committer is most likely
//! PUTting it right now, so come back when the grace ends (or at once near the deadline). A
//! committer that crashed between commit and PUT is thus replaced after the grace, and the
//! common case costs no second PUT.
//!
//! ² A provider answered in progress: nobody holds the lease between polls. A poll is due for
//! this delivery `poll_lag_ms` after its time: no lag for the primary, a few seconds for the
//! secondary, so that the primary polls unless it missed the poll; no lag near the deadline,
//! where any region takes the lease to answer (FAILED with the last state, if still waiting).
//! A WAITING record of another attempt is one CloudFormation gave up on: as for none.
//!
//! ³ For the secondary, once the primary's head start has passed (`Situation::head_start_until_ms`:
//! a fifth of the request's time, at most `CFN_ONCE_HEAD_START_S`, counted from when it was
//! sent); before that it backs off to the head start's end. Its queue's short delay lets it see
//! a copy early enough to answer a ServiceTimeout of 30 s when the primary is down, and the
//! head start, proportioned to each request's deadline, still leaves a primary that is up to
//! start it first. Near the deadline no head start is left.
//!
//! A standby secondary otherwise acts as an active region: a copy that finds no record once
//! the head start has passed means the primary missed it. A standby primary starts no new work, except
//! that near the deadline any region answers FAILED rather than let the request time out. A
//! lease this delivery holds (`Mine`) is run (polled, if its attempt is waiting), or, near the
//! deadline, answered FAILED at once.
//! Only a standby primary needs to read the record before acting; everyone else tries to
//! acquire and learns the record from the refusal, so no delivery both reads and acquires when
//! one will do. A primary whose control has not answered yet acquires while it asks; if the
//! answer is standby, this same table, applied to the record the acquire found, says whether
//! the lease stands or is given back unused (`Worker::keep_or_leave`), so the column above
//! holds for it too.

// The table reads the control's answer; the answer's type lives with the control, which is
// lower (it names nothing of the table), and is re-exported here, where the table's callers
// have always found it.
pub use crate::control::Activity;
use crate::lease::{PollRecord, Seen};
use crate::vocabulary::Role;

/// How a delivery starts.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FirstStep {
    /// Try to acquire; a refusal returns the record.
    Acquire,
    /// Read the record first (a standby primary must not take a lease for new work).
    Read,
}

/// What to do next.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Action {
    /// Try to take the lease: nothing is stored, the lease expired, or this is a new attempt.
    Acquire,
    /// Run the provider under this fence: poll its work in progress if there is some, or call
    /// it afresh.
    Run {
        /// The fencing token this delivery's lease holds.
        fence: u64,
        /// Whether an earlier execution of this attempt held the lease before (and may have
        /// run the provider).
        took_over: bool,
        /// Whether that execution stopped mid-run, rather than with a stored wait.
        interrupted: bool,
        /// The work in progress to poll.
        poll: Option<PollRecord>,
    },
    /// Holding the lease near the deadline: commit FAILED without running the provider.
    /// `took_over` says an earlier execution may have run it.
    FailWithoutRunning {
        /// The fencing token to commit the FAILED answer under.
        fence: u64,
        /// Whether an earlier execution may have run the provider, so its rollback Delete must
        /// still reach the provider.
        took_over: bool,
        /// The work still in progress, for the Reason.
        poll: Option<PollRecord>,
    },
    /// PUT the committed bytes and mark them delivered.
    Deliver {
        /// The fencing token the response was committed under, needed to mark it delivered.
        fence: u64,
        /// The committed response body, PUT byte for byte.
        response: Vec<u8>,
    },
    /// Nothing left to do for this message.
    Drop(Redundant),
    /// Someone holds the lease: come back when it ends.
    BackOff {
        /// When to look again, epoch ms: the end of the holder's lease (skew included), or of
        /// a fresh commit's delivery grace.
        until_ms: u64,
    },
    /// The provider's work is in progress: come back when the next poll is due for this
    /// delivery.
    AwaitPoll {
        /// When the poll is due for this delivery, epoch ms.
        until_ms: u64,
    },
    /// Standby: leave the message for the active region, and look again later.
    Leave,
}

/// Why a delivery has nothing left to do: its message repeats what is already done.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Redundant {
    /// The request was committed and delivered before: this message is a duplicate.
    Duplicate,
    /// A newer attempt with the same RequestId exists: this message is a stale one.
    Superseded,
}

/// The first step for this region.
pub fn first_step(role: Role, activity: Activity) -> FirstStep {
    match (role, activity) {
        (Role::Primary, Activity::Standby) => FirstStep::Read,
        _ => FirstStep::Acquire,
    }
}

/// Everything about this delivery the table looks at, besides the record.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Situation {
    /// This region's configured role.
    pub role: Role,
    /// Whether this region is active; only a standby primary holds back new work.
    pub activity: Activity,
    /// Whether the request's deadline is within the margin: then any region answers now, and a
    /// fresh commit is PUT without waiting for its grace.
    pub deadline_near: bool,
    /// The current time, epoch ms, to judge whether a fresh commit's grace has ended.
    pub now_ms: u64,
    /// How long a fresh commit is left to its committer to PUT.
    pub delivery_grace_ms: u64,
    /// How long past its time a poll must be before this delivery takes it (see the table's
    /// note ²); the acquire carries the same lag.
    pub poll_lag_ms: u64,
    /// Until when this delivery leaves a request nobody has started to the primary, epoch ms
    /// (see the table's note ³): the primary's head start for a secondary's copy of
    /// CloudFormation's request, 0 for every other delivery.
    pub head_start_until_ms: u64,
}

impl Situation {
    /// Whether this delivery is a secondary's within the primary's head start, away from the
    /// deadline: it reads the record rather than acquire, and starts nothing new.
    pub fn within_head_start(&self) -> bool {
        !self.deadline_near && self.now_ms < self.head_start_until_ms
    }
}

/// A decision table: this version's is [`decide`]; the simulator also runs a copy frozen at
/// the last release beside it, as the two regions do during an upgrade
/// (`Worker::with_decision_table`).
pub type DecisionTable = fn(&Seen, &Situation) -> Action;

/// The decision table.
pub fn decide(seen: &Seen, situation: &Situation) -> Action {
    let Situation { role, activity, deadline_near, now_ms, delivery_grace_ms, poll_lag_ms, head_start_until_ms } =
        *situation;
    let starts_new_work = activity == Activity::Active || role == Role::Secondary || deadline_near;
    match seen {
        Seen::Absent | Seen::NewAttempt if situation.within_head_start() => {
            Action::BackOff { until_ms: head_start_until_ms }
        }
        Seen::Absent | Seen::NewAttempt if starts_new_work => Action::Acquire,
        Seen::Absent | Seen::NewAttempt => Action::Leave,
        Seen::Held { until_ms } => Action::BackOff { until_ms: *until_ms },
        Seen::Expired => Action::Acquire,
        Seen::Mine { fence, took_over, poll, .. } if deadline_near => {
            Action::FailWithoutRunning { fence: *fence, took_over: *took_over, poll: poll.clone() }
        }
        Seen::Mine { fence, took_over, interrupted, poll } => {
            Action::Run { fence: *fence, took_over: *took_over, interrupted: *interrupted, poll: poll.clone() }
        }
        Seen::Waiting { .. } if deadline_near => Action::Acquire,
        Seen::Waiting { .. } if !starts_new_work => Action::Leave,
        Seen::Waiting { poll_at_ms } => {
            let due_ms = poll_at_ms.saturating_add(poll_lag_ms);
            if now_ms >= due_ms { Action::Acquire } else { Action::AwaitPoll { until_ms: due_ms } }
        }
        Seen::Committed { delivered: false, committed_ms, .. }
            if !deadline_near && now_ms < committed_ms.saturating_add(delivery_grace_ms) =>
        {
            Action::BackOff { until_ms: committed_ms.saturating_add(delivery_grace_ms) }
        }
        Seen::Committed { fence, response, delivered: false, .. } => {
            Action::Deliver { fence: *fence, response: response.clone() }
        }
        Seen::Committed { delivered: true, .. } => Action::Drop(Redundant::Duplicate),
        Seen::Superseded => Action::Drop(Redundant::Superseded),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use Activity::{Active, Standby};
    use Role::{Primary, Secondary};

    const COLUMNS: [(Role, Activity); 4] =
        [(Primary, Active), (Secondary, Active), (Primary, Standby), (Secondary, Standby)];

    const NOW_MS: u64 = 100_000;
    const GRACE_MS: u64 = 5_000;
    const LAG_MS: u64 = 8_000;

    /// One row of the table: the seen record, then the action for each column in `COLUMNS`.
    fn row(seen: Seen, deadline_near: bool, expected: [Action; 4]) {
        row_in_head_start(seen, deadline_near, 0, expected);
    }

    /// A row where the secondary's copies are within the primary's head start until
    /// `head_start_until_ms` (the worker gives the primary none).
    fn row_in_head_start(seen: Seen, deadline_near: bool, head_start_until_ms: u64, expected: [Action; 4]) {
        for ((role, activity), expected) in COLUMNS.into_iter().zip(expected) {
            let situation = Situation {
                role,
                activity,
                deadline_near,
                now_ms: NOW_MS,
                delivery_grace_ms: GRACE_MS,
                poll_lag_ms: if role == Secondary && !deadline_near { LAG_MS } else { 0 },
                head_start_until_ms: if role == Secondary { head_start_until_ms } else { 0 },
            };
            assert_eq!(
                decide(&seen, &situation),
                expected,
                "{seen:?}, {role:?} {activity:?}, deadline near: {deadline_near}"
            );
        }
    }

    fn all(action: Action) -> [Action; 4] {
        [action.clone(), action.clone(), action.clone(), action]
    }

    #[test]
    fn the_table_far_from_the_deadline() {
        use Action::*;
        row(Seen::Absent, false, [Acquire, Acquire, Leave, Acquire]);
        row(Seen::Held { until_ms: 9 }, false, all(BackOff { until_ms: 9 }));
        row(Seen::Expired, false, all(Acquire));
        let bytes = b"{}".to_vec();
        let committed =
            |delivered, committed_ms| Seen::Committed { fence: 2, response: bytes.clone(), delivered, committed_ms };
        // Committed long enough ago that its committer should have PUT it: PUT it.
        row(committed(false, NOW_MS - GRACE_MS), false, all(Deliver { fence: 2, response: bytes.clone() }));
        // Committed just now: its committer is PUTting it; look again after the grace.
        row(committed(false, NOW_MS - 1), false, all(BackOff { until_ms: NOW_MS - 1 + GRACE_MS }));
        row(committed(true, NOW_MS - 1), false, all(Drop(Redundant::Duplicate)));
        row(Seen::NewAttempt, false, [Acquire, Acquire, Leave, Acquire]);
        row(Seen::Superseded, false, all(Drop(Redundant::Superseded)));
        row(
            Seen::Mine { fence: 3, took_over: true, interrupted: true, poll: None },
            false,
            all(Run { fence: 3, took_over: true, interrupted: true, poll: None }),
        );
        let poll = Some(waiting());
        row(
            Seen::Mine { fence: 4, took_over: true, interrupted: false, poll: poll.clone() },
            false,
            all(Run { fence: 4, took_over: true, interrupted: false, poll: poll.clone() }),
        );
    }

    fn waiting() -> PollRecord {
        PollRecord {
            fingerprint: crate::fingerprint::Fingerprint::from_stored("a".into()),
            state: "{}".into(),
            poll_at_ms: NOW_MS,
            waiting_since_ms: 0,
            polls: 2,
        }
    }

    #[test]
    fn a_wait_is_polled_when_due_and_the_primary_goes_first() {
        use Action::*;
        // Due now: the primary polls; the secondary gives it the lag first.
        row(
            Seen::Waiting { poll_at_ms: NOW_MS },
            false,
            [Acquire, AwaitPoll { until_ms: NOW_MS + LAG_MS }, Leave, AwaitPoll { until_ms: NOW_MS + LAG_MS }],
        );
        // Due for everybody.
        row(Seen::Waiting { poll_at_ms: NOW_MS - LAG_MS }, false, [Acquire, Acquire, Leave, Acquire]);
        // Not due yet.
        row(
            Seen::Waiting { poll_at_ms: NOW_MS + 1 },
            false,
            [
                AwaitPoll { until_ms: NOW_MS + 1 },
                AwaitPoll { until_ms: NOW_MS + 1 + LAG_MS },
                Leave,
                AwaitPoll { until_ms: NOW_MS + 1 + LAG_MS },
            ],
        );
        // Near the deadline anyone takes it, due or not, to answer.
        row(Seen::Waiting { poll_at_ms: NOW_MS + 60_000 }, true, all(Acquire));
        row(
            Seen::Mine { fence: 5, took_over: true, interrupted: false, poll: Some(waiting()) },
            true,
            all(FailWithoutRunning { fence: 5, took_over: true, poll: Some(waiting()) }),
        );
    }

    #[test]
    fn the_secondary_leaves_a_request_nobody_started_to_the_primary_for_its_head_start() {
        use Action::*;
        let until_ms = NOW_MS + 4_000;
        let wait = BackOff { until_ms };
        row_in_head_start(Seen::Absent, false, until_ms, [Acquire, wait.clone(), Leave, wait.clone()]);
        row_in_head_start(Seen::NewAttempt, false, until_ms, [Acquire, wait.clone(), Leave, wait]);
        // What someone started is not the head start's business.
        row_in_head_start(Seen::Expired, false, until_ms, all(Acquire));
        row_in_head_start(Seen::Held { until_ms: 9 }, false, until_ms, all(BackOff { until_ms: 9 }));
        // Once it has passed, or near the deadline, the secondary starts the request.
        row_in_head_start(Seen::Absent, false, NOW_MS, [Acquire, Acquire, Leave, Acquire]);
        row_in_head_start(Seen::Absent, true, until_ms, all(Acquire));
    }

    #[test]
    fn near_the_deadline_every_region_answers() {
        use Action::*;
        row(Seen::Absent, true, all(Acquire));
        row(Seen::NewAttempt, true, all(Acquire));
        row(
            Seen::Mine { fence: 3, took_over: true, interrupted: true, poll: None },
            true,
            all(FailWithoutRunning { fence: 3, took_over: true, poll: None }),
        );
        row(
            Seen::Mine { fence: 1, took_over: false, interrupted: false, poll: None },
            true,
            all(FailWithoutRunning { fence: 1, took_over: false, poll: None }),
        );
        // A live holder answers by the deadline itself: its run is bounded by it.
        row(Seen::Held { until_ms: 9 }, true, all(BackOff { until_ms: 9 }));
        row(Seen::Superseded, true, all(Drop(Redundant::Superseded)));
        let fresh = Seen::Committed { fence: 2, response: b"{}".to_vec(), delivered: false, committed_ms: NOW_MS };
        row(fresh, true, all(Deliver { fence: 2, response: b"{}".to_vec() }));
    }

    #[test]
    fn only_a_standby_primary_reads_first() {
        assert_eq!(first_step(Primary, Active), FirstStep::Acquire);
        assert_eq!(first_step(Primary, Standby), FirstStep::Read);
        assert_eq!(first_step(Secondary, Active), FirstStep::Acquire);
        assert_eq!(first_step(Secondary, Standby), FirstStep::Acquire);
    }
}
