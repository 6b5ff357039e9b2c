//! The decision table as the handlers of record format 1 shipped it (the revisions before
//! 0.1.0, which wrote no `format`), frozen: the simulator's
//! `Kind::Upgrade` runs it in the region not yet upgraded, beside this version's table in the
//! other. Never edit it to follow a change of `cfn_once_core::decision::decide`; when a release
//! changes that table, freeze the released one here instead (copied from `git show
//! <release>:handler/cfn-once-core/src/decision.rs`), adapting only the names of types that
//! moved, so that the story keeps playing the two versions side by side.

use cfn_once_core::decision::{Action, Activity, Redundant, Situation};
use cfn_once_core::lease::Seen;
use cfn_once_core::vocabulary::Role;

/// `decide` of the format-1 handlers, verbatim.
pub fn decide_format_1(seen: &Seen, situation: &Situation) -> Action {
    let Situation { role, activity, deadline_near, now_ms, delivery_grace_ms, poll_lag_ms, .. } = *situation;
    let starts_new_work = activity == Activity::Active || role == Role::Secondary || deadline_near;
    match seen {
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
