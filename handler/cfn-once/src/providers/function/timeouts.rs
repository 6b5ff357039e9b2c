//! How long a served function may run, and whether this handler can wait for it.
//!
//! A synchronous Invoke keeps running after its caller hangs up, and cfn-once runs a function
//! again (under a higher fence) when an Invoke's outcome is unknown. So an Invoke must never be
//! given up merely because cfn-once's own time ran out while the function may still be running:
//! that would run the user's code again, each run overlapping the last. Invariants kept here:
//!
//! * **An Invoke waits as long as the function can run.** Its client timeout is the function's
//!   own timeout (Lambda's `GetFunctionConfiguration`, learned once per function per process)
//!   plus [`INVOKE_SLACK_MS`] for Lambda to start it and report, never the run's window. An
//!   Invoke that has no answer by then is one whose function can no longer be running: running
//!   it again under a higher fence overlaps nothing.
//! * **No Invoke in a window that cannot wait for it.** When the function's timeout outlasts
//!   what is left of the run: if the request's deadline ends the run, the function is invoked
//!   all the same (at the deadline the request is answered FAILED and nobody runs it again); if
//!   this handler's own Lambda invocation ends it, an `onEvent` or `isComplete` function is not
//!   invoked and the request is answered FAILED saying which timeout to raise (`plan`), while
//!   a function that answers by itself is invoked and its Invoke cut just before the window
//!   closes: its answer is read from its object, wherever the function is by then.
//! * **A handler too short for its functions does not start** ([`fits`]): given its own
//!   timeout (`CFN_ONCE_HANDLER_TIMEOUT_S`), it refuses at start when a served function's
//!   timeout, the slack, the time a delivery takes before its run ([`RUN_START_MS_MAX`]) and the
//!   time kept to answer (`Settings::reserve_ms`) do not fit in it, naming both timeouts and
//!   what to set (`invoke::check_at_start` reads the timeouts).

use cfn_once_core::provider::RunEnd;

/// Time an Invoke may take beyond its function's own timeout: a cold start's initialisation
/// (up to 10 s, not counted in the function's timeout) and Lambda's report of the outcome.
pub const INVOKE_SLACK_MS: u64 = 15_000;

/// Time a delivery may take before its run starts: reading the record, taking the lease, asking
/// the active-region control (a few store calls, each within its timeout).
pub const RUN_START_MS_MAX: u64 = 10_000;

/// A function that answers by itself and outlasts the run's window has its Invoke cut this long
/// before the window closes, so that the wait for its answer is stored before the run ends.
const CUT_BEFORE_WINDOW_MS: u64 = 1_000;

/// What to do with one Invoke.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) enum Plan {
    /// Invoke, giving up after `timeout_ms`.
    Invoke { timeout_ms: u64 },
    /// Do not invoke: the run cannot wait for the function. The reason, for a FAILED answer.
    Refuse(String),
}

/// The Invoke of `function`, whose own timeout is `function_timeout_ms`, with `remaining_ms`
/// left of a run ended by `ended_by` (see the module's invariants).
pub(super) fn plan(
    function: &str,
    function_timeout_ms: u64,
    remaining_ms: u64,
    ended_by: RunEnd,
    answers_itself: bool,
) -> Plan {
    let timeout_ms = function_timeout_ms + INVOKE_SLACK_MS;
    if timeout_ms <= remaining_ms || ended_by == RunEnd::RequestDeadline {
        return Plan::Invoke { timeout_ms };
    }
    if answers_itself {
        return Plan::Invoke { timeout_ms: remaining_ms.saturating_sub(CUT_BEFORE_WINDOW_MS).max(1) };
    }
    Plan::Refuse(format!(
        "{function} was not invoked: its timeout of {} s outlasts the {} s left of this handler's Lambda invocation, which could cut it off while it may still be running; raise the handler's timeout (the regional template's FunctionTimeoutSeconds, CFN_ONCE_HANDLER_TIMEOUT_S) or lower the function's",
        function_timeout_ms.div_ceil(1000),
        remaining_ms / 1000,
    ))
}

/// The shortest handler timeout, in seconds, whose invocations can wait for a function whose
/// own timeout is `function_timeout_ms`, with `reserve_ms` kept to answer.
pub fn handler_timeout_needed_s(function_timeout_ms: u64, reserve_ms: u64) -> u64 {
    (function_timeout_ms + INVOKE_SLACK_MS + RUN_START_MS_MAX + reserve_ms).div_ceil(1000)
}

/// Whether a handler whose Lambda timeout is `handler_timeout_s` can wait for `function`, whose
/// own timeout is `function_timeout_ms`, with `reserve_ms` kept to answer; if not, why, naming
/// both timeouts and what to set.
pub fn fits(function: &str, function_timeout_ms: u64, handler_timeout_s: u64, reserve_ms: u64) -> Result<(), String> {
    let needed_s = handler_timeout_needed_s(function_timeout_ms, reserve_ms);
    if needed_s <= handler_timeout_s {
        return Ok(());
    }
    let function_s = function_timeout_ms.div_ceil(1000);
    let others_s = needed_s - function_s;
    Err(format!(
        "{function}'s timeout of {function_s} s does not fit in this handler's timeout of {handler_timeout_s} s: an invocation of the handler must wait for the function's whole timeout and keep {others_s} s to start, hear Lambda's answer and answer CloudFormation, or the function could be cut off while it still runs; set the handler's timeout (the regional template's FunctionTimeoutSeconds, CFN_ONCE_HANDLER_TIMEOUT_S) to at least {needed_s} s, or the function's timeout to at most {} s",
        handler_timeout_s.saturating_sub(others_s)
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    const RESERVE_MS: u64 = 16_500;

    #[test]
    fn an_invoke_waits_for_the_function_never_for_the_window() {
        for (remaining_ms, ended_by, answers_itself, expected) in [
            // Room for the whole function: its own timeout and the slack, whatever the window.
            (400_000, RunEnd::Invocation, false, Plan::Invoke { timeout_ms: 315_000 }),
            (400_000, RunEnd::RequestDeadline, false, Plan::Invoke { timeout_ms: 315_000 }),
            // The request's deadline ends the run first: invoked all the same, once.
            (100_000, RunEnd::RequestDeadline, false, Plan::Invoke { timeout_ms: 315_000 }),
            // A function that answers by itself is cut before the window: its answer is read.
            (100_000, RunEnd::Invocation, true, Plan::Invoke { timeout_ms: 99_000 }),
        ] {
            assert_eq!(plan("on-event", 300_000, remaining_ms, ended_by, answers_itself), expected);
        }
    }

    #[test]
    fn a_function_that_outlasts_the_handlers_invocation_is_not_invoked() {
        let Plan::Refuse(why) = plan("on-event", 300_000, 103_000, RunEnd::Invocation, false) else {
            panic!("invoked in a window that cannot wait for it");
        };
        assert!(why.contains("on-event was not invoked: its timeout of 300 s outlasts the 103 s left"), "{why}");
        assert!(why.contains("FunctionTimeoutSeconds"), "{why}");
    }

    #[test]
    fn the_start_check_names_both_timeouts_and_what_to_set() {
        assert_eq!(handler_timeout_needed_s(300_000, RESERVE_MS), 342);
        assert_eq!(fits("on-event", 300_000, 900, RESERVE_MS), Ok(()));
        assert_eq!(fits("on-event", 300_000, 342, RESERVE_MS), Ok(()));
        let why = fits("on-event", 300_000, 120, RESERVE_MS).unwrap_err();
        assert!(
            why.starts_with("on-event's timeout of 300 s does not fit in this handler's timeout of 120 s"),
            "{why}"
        );
        assert!(why.contains("to at least 342 s, or the function's timeout to at most 78 s"), "{why}");
        assert!(!why.ends_with('.'));
    }
}
