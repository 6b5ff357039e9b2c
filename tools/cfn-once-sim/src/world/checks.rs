//! The invariants checked as copies reach the DLQ and at the end of a seed: DLQ, WAIT, SIGNAL,
//! COUNT, UPDATE and EXPIRED (L1 is in `liveness`, S1-S3 and DRAIN in the stores).

use std::collections::BTreeMap;

use cfn_once_core::response::{ResponseBody, Status};

use crate::scenario::{Kind, Region, RequestPlan};
use crate::sink::short;

use super::World;

impl World {
    /// Counts what an end-of-seed check saw and reports what it found broken, once it has let
    /// go of the observations (both take them).
    pub(super) fn report(&self, covered: Vec<&'static str>, violations: Vec<String>) {
        for name in covered {
            self.shared.cover(name);
        }
        for violation in violations {
            self.shared.violation(violation);
        }
    }

    /// Checks the handler's moves to the DLQ since the last look.
    pub(super) fn check_dead_letters(&mut self) {
        let moved = std::mem::take(&mut self.queues().dead_lettered);
        for dead in moved {
            self.shared.cover("message moved to the DLQ by the handler");
            self.dead_lettered(dead.request, "the handler", dead.region);
        }
    }

    /// A copy of `request` reached the DLQ: allowed only once nobody can be answered (never, in
    /// the simulation) or its request was answered or its deadline has passed. The handler
    /// judges "passed" by its own clock, which may run ahead by up to the skew margin (more,
    /// if it was stepped: a fault), so a move that early is not a violation.
    pub(super) fn dead_lettered(&self, request: usize, by: &str, region: Region) {
        let elapsed_ms = self.shared.elapsed_ms();
        let plan = &self.scenario.requests[request];
        // A resource with a wait condition whose answer handed its work over is owed its signal
        // too, until its timeout; until then, only its answer, by the answer's deadline.
        let deadline_ms = if self.handed_over(request) { plan.owed_until_ms() } else { plan.deadline_ms() };
        let answered = self.done_with(request);
        let superseded = self.scenario.requests.iter().any(|other| other.retry_of == Some(request));
        self.shared.trace(None, || format!("a copy of request {request} moved to the DLQ by {by}"));
        let skew_ms = self.parameters.settings[region.index()].skew_ms;
        if elapsed_ms + skew_ms < deadline_ms && !answered && !superseded {
            if self.clock_off_at(region, elapsed_ms) && by == "the handler" {
                self.shared.cover("copy dead-lettered early by a region whose clock was stepped");
                return;
            }
            self.shared.violation(format!(
                "DLQ: a copy of request {request} was moved to the DLQ by {by} {} s before its deadline, unanswered",
                (deadline_ms - elapsed_ms) / 1_000
            ));
        }
    }

    /// Whether `request` names a wait condition and its answer handed its work over.
    fn handed_over(&self, request: usize) -> bool {
        let observed = self.shared.observed();
        let answer = observed.puts.get(&self.urls[request]).and_then(|puts| puts.first());
        self.handles[request].is_some() && answer.is_some_and(|(_, body)| cfn_once_core::work::is_handed_over(body))
    }

    /// Whether nothing more is owed for `request`: it was answered, and if it handed work to a
    /// wait condition, the work was signalled.
    fn done_with(&self, request: usize) -> bool {
        let answered = self.shared.observed().puts.get(&self.urls[request]).is_some_and(|puts| !puts.is_empty());
        let signalled = || {
            let handle = self.handles[request].as_deref().unwrap_or_default();
            self.shared.observed().puts.get(handle).is_some_and(|puts| !puts.is_empty())
        };
        answered && (!self.handed_over(request) || signalled())
    }

    /// Whether `region`'s clock was stepped away from true time at `elapsed_ms`.
    fn clock_off_at(&self, region: Region, elapsed_ms: u64) -> bool {
        self.clock_faults().iter().any(|(r, from, to)| *r == region && (*from..*to).contains(&elapsed_ms))
    }

    /// The clock faults: (region, from, to) elapsed ms, a step and the step back.
    pub(super) fn clock_faults(&self) -> Vec<(Region, u64, u64)> {
        self.scenario.jumps.chunks(2).filter_map(|pair| Some((pair[0].1, pair[0].0, pair.get(1)?.0))).collect()
    }

    /// A wait the primary's outage interrupted is finished by the secondary: the story of
    /// [`Kind::OutageMidWait`], whose wait ends long before its deadline, must end in SUCCESS.
    pub(super) fn check_wait_survived(&self) {
        let superseded = self.scenario.requests.iter().any(|plan| plan.retry_of == Some(0));
        if self.scenario.kind != Kind::OutageMidWait || superseded || self.scenario.requests[0].panic_percent > 0 {
            return;
        }
        let observed = self.shared.observed();
        let last = observed.puts.get(&self.urls[0]).and_then(|puts| puts.last()).map(|(_, body)| body.clone());
        drop(observed);
        let status = last.as_deref().and_then(|body| ResponseBody::parse(body).ok()).map(|body| body.status);
        if status != Some(Status::Success) {
            self.shared.violation(format!(
                "WAIT: request 0's wait outlived the primary but was answered {status:?}, not SUCCESS, by the secondary"
            ));
        }
    }

    /// SIGNAL: a work handed to a wait condition gets one signal (one body, however often it is
    /// PUT), and a Delete of its resource, or an Update naming a new handle, is answered only
    /// after that signal: nothing is first PUT to the handle, and no poll of the work starts,
    /// after the close's answer. That the signal
    /// comes before the wait condition's timeout is L1's ([`World::check_liveness`]).
    pub(super) fn check_signals(&self) {
        let observed = self.shared.observed();
        let mut violations = Vec::new();
        let mut covered: Vec<&'static str> = Vec::new();
        for (index, plan) in self.scenario.requests.iter().enumerate() {
            let Some(handle) = &self.handles[index] else { continue };
            let signals = observed.puts.get(handle).map(Vec::as_slice).unwrap_or_default();
            let mut bodies: Vec<&Vec<u8>> = signals.iter().map(|(_, body)| body).collect();
            bodies.dedup();
            if bodies.len() > 1 {
                violations.push(format!(
                    "SIGNAL: request {index}'s wait condition handle got {} different signals",
                    bodies.len()
                ));
            }
            if let Some((at_ms, body)) = signals.first() {
                let signal = cfn_once_core::wait_condition::Signal::parse(body);
                covered.push(match signal.as_ref().map(|signal| signal.status) {
                    Some(cfn_once_core::wait_condition::SignalStatus::Success) => "long work: signalled SUCCESS",
                    _ => "long work: signalled FAILURE",
                });
                if signal.is_some_and(|signal| signal.reason.contains("wait condition's timeout")) {
                    covered.push("long work: signalled FAILURE as its timeout came near");
                }
                if *at_ms > plan.deadline_ms() {
                    covered.push("long work: signalled after its ServiceTimeout");
                }
                if at_ms.saturating_sub(plan.sent_at_ms) > 6 * 3_600_000 {
                    covered.push("long work: signalled more than 6 hours after its request");
                }
            }
            let handed_over = observed
                .puts
                .get(&self.urls[index])
                .and_then(|puts| puts.first())
                .is_some_and(|(_, body)| cfn_once_core::work::is_handed_over(body));
            let expired_by = |at_ms: u64| {
                self.shared.handle_expiries.get(handle.as_str()).is_some_and(|expiry_ms| at_ms >= *expiry_ms)
            };
            let closers = self.scenario.requests.iter().enumerate();
            for (closer, what) in
                closers.filter_map(|(closer, c)| self.closes(closer, c, index).map(|what| (closer, what)))
            {
                let Some((answered_ms, answer)) = observed.puts.get(&self.urls[closer]).and_then(|puts| puts.first())
                else {
                    continue;
                };
                covered.push(if what == "Delete" {
                    "long work: its Delete answered"
                } else {
                    "long work: an Update naming a new handle answered"
                });
                let closer_plan = &self.scenario.requests[closer];
                if self.scenario.kind == Kind::CloseMidWork {
                    covered.push("close mid-work: answered");
                    if answered_ms + self.parameters.settings[0].deadline_margin_ms >= closer_plan.deadline_ms() {
                        covered.push("close mid-work: answered in its deadline margin");
                    }
                    if ResponseBody::parse(answer).is_ok_and(|body| body.status == Status::Success) {
                        covered.push("close mid-work: answered SUCCESS");
                    }
                }
                // A close that could not finish is answered FAILED in its margin (the resource
                // stays, as CloudFormation leaves it after a failed Delete): its work's FAILURE,
                // committed or not yet, may be signalled later. Only a SUCCESS is owed the order.
                if ResponseBody::parse(answer).is_ok_and(|body| body.status == Status::Failed) {
                    covered.push("long work: a close that could not finish, its Delete or Update answered FAILED");
                    continue;
                }
                // The signal comes first. A straggler may PUT the same committed bytes again
                // later (a PUT whose reply was lost, retried): S1 holds them identical.
                match signals.first() {
                    Some((first_ms, _)) if first_ms <= answered_ms => {
                        if signals.iter().any(|(at_ms, _)| at_ms > answered_ms) {
                            covered.push("long work: the same signal PUT again after its Delete's answer");
                        }
                    }
                    Some(_) => violations.push(format!(
                        "SIGNAL: request {index}'s handle was first signalled after its {what} (request {closer}) was answered"
                    )),
                    // Owed only by a work that was handed over, and only while its handle could
                    // still take a signal: a Create answered FAILED started no work, and past its
                    // expiry S3 refuses every signal (the work is recorded done without one).
                    None if handed_over && !expired_by(*answered_ms) => violations.push(format!(
                        "SIGNAL: request {closer} (a {what}) was answered and request {index}'s work was never signalled"
                    )),
                    None => covered.push("long work: a close answered with no signal owed (no work, or its handle expired)"),
                }
                let item = format!("item-{index}");
                if observed.poll_starts.iter().any(|(polled, at_ms)| *polled == item && at_ms > answered_ms) {
                    violations.push(format!(
                        "SIGNAL: a poll of request {index}'s work started after its {what} (request {closer}) was answered"
                    ));
                }
            }
        }
        drop(observed);
        self.report(covered, violations);
    }

    /// COUNT: every counter of the provider's downstream table holds the ADDs applied to it,
    /// each step of a request's once (checked on every write, `downstream`).
    pub(super) fn check_counts(&self) {
        crate::downstream::check_counts(&self.shared);
    }

    /// Whether request `closer` ends the work on the handle request `index` made, and how it is
    /// called: a Delete naming that handle, or an Update whose old properties name it and whose
    /// new ones name another (an Update that keeps its handle leaves its work alone).
    fn closes(&self, closer: usize, plan: &RequestPlan, index: usize) -> Option<&'static str> {
        let requests = &self.scenario.requests;
        if plan.delete_of.is_some() && plan.handle_owner(closer) == index {
            return Some("Delete");
        }
        let old = plan.old_from.unwrap_or_else(|| plan.original(closer));
        (plan.update_of.is_some() && requests[old].handle_owner(old) == index && plan.handle_owner(closer) != index)
            .then_some("Update naming a new handle")
    }

    /// A resource's later life (`Kind::LongLife`, and any seed whose handles expire):
    ///
    /// * `UPDATE:` an Update whose properties declare no new wait (it keeps its handle, or an
    ///   update rollback names the earlier one) is answered SUCCESS only after its provider's
    ///   Update ran, and never as a hand-over: no wait condition can be waiting on its handle;
    /// * `EXPIRED:` a handle S3 refuses (403, once it has expired) is never PUT to again by the
    ///   region that was refused: a refusal is final.
    pub(super) fn check_long_life(&self) {
        let observed = self.shared.observed();
        let mut violations = Vec::new();
        let mut covered: Vec<&'static str> = Vec::new();
        for (index, plan) in self.scenario.requests.iter().enumerate() {
            if !plan.updates_without_a_new_wait(index) {
                continue;
            }
            let Some((_, answer)) = observed.puts.get(&self.urls[index]).and_then(|puts| puts.first()) else {
                continue;
            };
            let succeeded = ResponseBody::parse(answer).is_ok_and(|body| body.status == Status::Success);
            let ran = observed.updates_run.contains(&format!("update-{index}"));
            if cfn_once_core::work::is_handed_over(answer) {
                violations.push(format!(
                    "UPDATE: request {index}, an Update that declares no new wait, was answered as a hand-over"
                ));
            } else if succeeded && !ran {
                violations.push(format!(
                    "UPDATE: request {index}, an Update that declares no new wait, was answered SUCCESS without its provider running"
                ));
            } else if ran {
                // A rollback's old properties named another handle (the forward Update's).
                let requests = &self.scenario.requests;
                let rollback =
                    plan.old_from.is_some_and(|old| requests[old].handle_owner(old) != plan.handle_owner(index));
                covered.push(if rollback {
                    "long life: an update rollback naming the old handle ran its provider"
                } else {
                    "long life: an Update that kept its handle ran its provider"
                });
            }
        }
        // A refusal is final: the region refused does not PUT to that handle again, unless the
        // record of the refusal was swept in between (a close a month later, of a handle whose
        // URL does not say it expired, knows nothing of the earlier one).
        let mut last_refused: BTreeMap<(&str, Region), u64> = BTreeMap::new();
        for (at_ms, url, region) in &observed.refused {
            if let Some(before_ms) = last_refused.insert((url.as_str(), *region), *at_ms)
                && !observed.sweeps.iter().any(|swept_ms| (before_ms..*at_ms).contains(swept_ms))
            {
                violations.push(format!(
                    "EXPIRED: {} refused a PUT from {} at {} s and was PUT to again at {} s: a refused signal was tried again",
                    short(url),
                    region.name(),
                    before_ms / 1_000,
                    at_ms / 1_000
                ));
            }
        }
        if self.scenario.kind == Kind::LongLife {
            for (index, plan) in self.scenario.requests.iter().enumerate() {
                let answered = observed
                    .puts
                    .get(&self.urls[index])
                    .is_some_and(|puts| puts.iter().any(|(at, _)| *at <= plan.deadline_ms()));
                let age_ms = plan.sent_at_ms.saturating_sub(self.scenario.requests[0].sent_at_ms);
                if answered && index > 0 {
                    // Minutes, about a day, about a month, about a year after the Create.
                    let hours = age_ms / 3_600_000;
                    let age = [1, 48, 1_440].iter().take_while(|bound| hours > **bound).count();
                    covered.push(match (plan.delete_of.is_some(), age) {
                        (true, 0) => "long life: a Delete minutes after the Create answered",
                        (true, 1) => "long life: a Delete a day after the Create answered",
                        (true, 2) => "long life: a Delete a month after the Create answered",
                        (true, _) => "long life: a Delete a year after the Create answered",
                        (false, 0) => "long life: an Update minutes after the Create answered",
                        (false, 1) => "long life: an Update a day after the Create answered",
                        (false, 2) => "long life: an Update a month after the Create answered",
                        (false, _) => "long life: an Update a year after the Create answered",
                    });
                }
            }
        }
        drop(observed);
        self.report(covered, violations);
    }
}
