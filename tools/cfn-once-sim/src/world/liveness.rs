//! L1: every request answered by its deadline, and every handed-over work signalled by its
//! wait condition's timeout, wherever some region could still do it; the excuses when none
//! could.

use crate::scenario::{Region, RequestPlan};
use crate::sink::short;

use super::World;

impl World {
    /// L1: every request that is not superseded by a retry is answered by its deadline, when
    /// some region could still answer it. A region could, for a request due at D, unless:
    ///
    /// * it was down at some moment of D's last window (`Parameters::last_fault_window_ms`,
    ///   the deadline margin and a backoff floor): nothing of it runs;
    /// * a fault happened in it in that window (a Lambda crashed, was frozen or died with its
    ///   region; a store call or a PUT failed, hung or lost its reply): the window is the time
    ///   L1 needs after the last fault;
    /// * its copy reached its queue too late: visible (after the secondary's delay, or a late
    ///   SNS delivery) only inside that window; a ServiceTimeout shorter than the secondary's
    ///   delay and the window has no failover;
    /// * a clock was stepped (either region's: leases and backoffs cross regions) within the
    ///   window or a lease and a longest backoff before it;
    /// * its copy was held by an invocation that died before its first step, past the start of
    ///   the window: no handler code ran that could have shortened its visibility.
    ///
    /// Only when every region is excused is a missed deadline not a violation; the reasons are
    /// counted per region.
    pub(super) fn check_liveness(&self) {
        let superseded: Vec<usize> = self.scenario.requests.iter().filter_map(|plan| plan.retry_of).collect();
        let window_ms = self.parameters.last_fault_window_ms();
        let reach_ms = self.parameters.clock_fault_reach_ms(self.scenario.function_timeout.visibility_s);
        let observed = self.shared.observed();
        let mut missed = Vec::new();
        let mut excused: Vec<&'static str> = Vec::new();
        // Each request's answer is owed by its deadline; the work of one that handed it to a wait
        // condition (answered SUCCESS) is owed its signal by the wait condition's timeout. The
        // work's deadline counts from the request's sending (the handler's conservative end: a
        // wait condition that depends on the resource starts later), so an answer that came
        // late (every region that may answer down or drained until the answer's own deadline
        // came near) leaves the work no time: it is signalled FAILURE at once, which the wait
        // condition, started only then, reads long before its own timeout.
        let mut owed: Vec<(usize, &RequestPlan, String, &str, u64)> = Vec::new();
        for (index, plan) in self.scenario.requests.iter().enumerate() {
            owed.push((index, plan, format!("request {index}"), &self.urls[index], plan.deadline_ms()));
            let first_answer = observed.puts.get(&self.urls[index]).and_then(|puts| puts.first());
            let handed_over_at =
                first_answer.filter(|(_, body)| cfn_once_core::work::is_handed_over(body)).map(|(at_ms, _)| *at_ms);
            if let (Some(handle), Some(deadline_ms), Some(at_ms)) =
                (&self.handles[index], plan.work_deadline_ms(), handed_over_at)
            {
                if at_ms + window_ms <= deadline_ms {
                    owed.push((index, plan, format!("request {index}'s work"), handle, deadline_ms));
                } else {
                    excused.push("L1 excused: the answer came too late for its work's timeout");
                }
            }
        }
        for (index, plan, what, url, deadline_ms) in owed {
            if superseded.contains(&index) {
                continue;
            }
            let answered = observed.puts.get(url).is_some_and(|puts| puts.iter().any(|(at, _)| *at <= deadline_ms));
            if answered {
                continue;
            }
            let from_ms = deadline_ms.saturating_sub(window_ms);
            let clock_stepped = self
                .clock_faults()
                .iter()
                .any(|(_, stepped, back)| *stepped < deadline_ms && *back > from_ms.saturating_sub(reach_ms));
            let reasons: Vec<Option<Excuse>> =
                Region::BOTH
                    .into_iter()
                    .map(|region| {
                        let late_ms = plan.late_ms(region);
                        let delay_ms = self.scenario.delay_ms(region);
                        if self.down_within(region, from_ms, deadline_ms) {
                            Some(Excuse::Down)
                        } else if observed
                            .fault_log
                            .iter()
                            .any(|(at, r, _)| *r == region && (from_ms..deadline_ms).contains(at))
                        {
                            Some(Excuse::Fault)
                        } else if plan.sent_at_ms + late_ms + delay_ms > from_ms {
                            Some(Excuse::CopyTooLate)
                        } else if clock_stepped {
                            Some(Excuse::ClockStepped)
                        } else if self.hidden_unstarted.iter().any(|hidden| {
                            hidden.request == index && hidden.region == region && hidden.until_ms > from_ms
                        }) {
                            Some(Excuse::HiddenUnstarted)
                        } else {
                            None
                        }
                    })
                    .collect();
            if reasons.iter().all(Option::is_some) {
                excused.push("L1 excused: no region could answer in time");
                for (region, reason) in Region::BOTH.into_iter().zip(&reasons) {
                    excused.extend(reason.map(|reason| reason.counter(region)));
                }
                continue;
            }
            let able: Vec<&str> =
                Region::BOTH.into_iter().zip(&reasons).filter(|(_, r)| r.is_none()).map(|(r, _)| r.name()).collect();
            missed.push(format!(
                "L1: {what} ({}) was not answered by its deadline, though {} could have answered it",
                short(url),
                able.join(" and ")
            ));
        }
        drop(observed);
        self.report(excused, missed);
    }

    /// No request is answered FAILED for lack of time while a region could have run it in
    /// time: a request of the weather whose life, from its sending to its deadline, met no
    /// fault (no outage, crash, freeze, store or PUT fault, clock step or control flip in
    /// either region, no late copy, clocks within an eighth of its time) and whose provider
    /// answers in time (its run and two seconds fit in its time less the margins kept before
    /// its deadline, `Settings::lease_end_before_deadline_ms`) must not be answered FAILED
    /// saying that no region could run it, that it did not finish before its deadline, or that
    /// no time was left to run it again.
    pub(super) fn check_no_failed_for_lack_of_time(&self) {
        if self.scenario.kind != crate::scenario::Kind::Weather {
            return;
        }
        let observed = self.shared.observed();
        let clock_faults = self.clock_faults();
        let mut violations = Vec::new();
        let mut covered = Vec::new();
        for (index, plan) in self.scenario.requests.iter().enumerate() {
            let (from_ms, to_ms) = (plan.sent_at_ms, plan.deadline_ms());
            let span_ms = to_ms - from_ms;
            let deadline =
                cfn_once_core::deadline::RequestDeadline::of(from_ms, Some(plan.service_timeout_s), None, 3_600);
            let kept_ms = self.parameters.settings[0].lease_end_before_deadline_ms(&deadline);
            let quick = plan.wait.is_none()
                && plan.panic_percent == 0
                && plan.late.is_none()
                && plan.wait_condition_s.is_none()
                && plan.work_ms + 2_000 + kept_ms <= span_ms;
            let calm = Region::BOTH.into_iter().all(|region| {
                !self.down_within(region, from_ms, to_ms)
                    && self.scenario.skew_ms[region.index()].unsigned_abs() <= span_ms / 8
            }) && !observed.fault_log.iter().any(|(at, _, _)| (from_ms..=to_ms).contains(at))
                && !self.scenario.crashes.iter().any(|(at, _)| (from_ms..=to_ms).contains(at))
                && !self.scenario.flips.iter().any(|(at, _)| *at <= to_ms)
                && !clock_faults.iter().any(|(_, stepped, back)| *stepped <= to_ms && *back >= from_ms);
            if !(quick && calm) {
                continue;
            }
            covered.push("a quick request in calm weather, checked for a FAILED for lack of time");
            let Some((_, body)) = observed.puts.get(&self.urls[index]).and_then(|puts| puts.first()) else {
                continue;
            };
            let Ok(answer) = cfn_once_core::response::ResponseBody::parse(body) else { continue };
            let reason = answer.reason.unwrap_or_default();
            let for_lack_of_time = ["no region could run", "did not finish before", "no time is left"]
                .iter()
                .any(|words| reason.contains(words));
            if answer.status == cfn_once_core::response::Status::Failed && for_lack_of_time {
                violations.push(format!(
                    "TIME: request {index} (ServiceTimeout {} s, a provider of {} ms, no fault in its life) was answered FAILED for lack of time: {reason}",
                    plan.service_timeout_s, plan.work_ms
                ));
            }
        }
        drop(observed);
        self.report(covered, violations);
    }

    /// Whether `region` was down at any moment of `from_ms..to_ms` (elapsed ms).
    fn down_within(&self, region: Region, from_ms: u64, to_ms: u64) -> bool {
        self.scenario.outages.iter().any(|(r, down, up)| *r == region && *down < to_ms && *up > from_ms)
    }
}

/// Why a region could not answer a request in time (see [`World::check_liveness`]).
#[derive(Debug, Clone, Copy)]
enum Excuse {
    Down,
    Fault,
    CopyTooLate,
    ClockStepped,
    HiddenUnstarted,
}

impl Excuse {
    /// The coverage counter of this excuse for `region`.
    fn counter(self, region: Region) -> &'static str {
        match (region, self) {
            (Region::Primary, Self::Down) => "L1 excused, primary: down in the last seconds",
            (Region::Primary, Self::Fault) => "L1 excused, primary: a fault in the last seconds",
            (Region::Primary, Self::CopyTooLate) => "L1 excused, primary: its copy arrived too late",
            (Region::Primary, Self::ClockStepped) => "L1 excused, primary: a clock was stepped",
            (Region::Primary, Self::HiddenUnstarted) => {
                "L1 excused, primary: its copy hidden by an invocation that died before its first step"
            }
            (Region::Secondary, Self::Down) => "L1 excused, secondary: down in the last seconds",
            (Region::Secondary, Self::Fault) => "L1 excused, secondary: a fault in the last seconds",
            (Region::Secondary, Self::CopyTooLate) => "L1 excused, secondary: its copy arrived too late",
            (Region::Secondary, Self::ClockStepped) => "L1 excused, secondary: a clock was stepped",
            (Region::Secondary, Self::HiddenUnstarted) => {
                "L1 excused, secondary: its copy hidden by an invocation that died before its first step"
            }
        }
    }
}
