//! The stories of requests and regions a review found ([`Kind`]), and which one a seed tells:
//! each changes the weather drawn before it, and draws after it, so that every earlier story
//! draws as before.

use crate::deployed::{Deployed, FunctionTimeout};

use super::{Draw, Drawn, Region, RequestPlan, Upgrade, WaitPlan};

/// Which story a seed tells besides the random weather of its fault window.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    /// Only the fault window's weather.
    Weather,
    /// The control names the secondary from the start (the primary is drained) and the
    /// secondary region is down for the rest of the run: the primary must answer FAILED before
    /// each deadline rather than let its copies reach the DLQ.
    DrainedPrimarySecondaryDown,
    /// On the longest function timeout, a provider works for minutes (the other region's copy
    /// backs off many times meanwhile), then every Lambda of the primary crashes.
    LongProviderThenCrash,
    /// Every lease-store call fails for ten to twenty minutes.
    StoreOutage,
    /// A long-running provider's request is sent after the fault window, and the primary region
    /// goes down for good in the middle of its wait: the secondary must finish the wait and
    /// answer SUCCESS.
    OutageMidWait,
    /// After the fault window, requests whose providers run or wait up to their deadlines, and
    /// the Lambdas holding them killed in the last minute before a deadline: a crash there must
    /// still leave a copy that someone sees in time to answer (FAILED, at least).
    KillsNearDeadline,
    /// A burst of requests published at once, so they share a batch: long-running ones polled
    /// every few seconds and a slow one that takes most of the invocation. A backoff must count
    /// from when its record was decided, not from when the slowest batch-mate finished.
    SlowBatchMates,
    /// The primary region goes down just after a request is published, and SNS delivers the
    /// secondary's copy minutes late (it retries deliveries during a brownout). The deadline
    /// counts from the publish time, not from the late copy's SentTimestamp.
    LateCopy,
    /// The primary is drained from the start and the control is often slower than its
    /// timeout: a slow read must keep the last known answer, never make the primary active.
    DrainedSlowControl,
    /// A resource with a wait condition (up to 12 hours): answered at once, its work polled for
    /// hours under failovers (the primary down for a while or for good), drills (the active
    /// region flipped), Lambdas killed at any moment and late copies; some outlive their
    /// timeout, some are ended by a Delete mid-work. One signal, before the timeout, never
    /// after the Delete's answer.
    LongWork,
    /// A work polled at the floor (every few seconds) or whose polls outlast a lease, closed
    /// mid-work by a Delete or by an Update naming a new handle whose ServiceTimeout leaves
    /// little more than its region needs, in either region (the primary, or the secondary with
    /// the primary down or drained): the close is answered by its own deadline, whatever the
    /// work's poll interval or a poll's length.
    CloseMidWork,
    /// A resource with a wait condition whose short ServiceTimeout ends soon after its answer
    /// handed the work over, and a lease store that then loses replies (and requests) to every
    /// region for minutes, the primary sometimes down for good: the copies that carry the work
    /// are kept until the work's deadline, never dead-lettered by the answer's.
    LostRepliesAfterHandOver,
    /// A resource's life over a year, in compressed time: a Create with a wait condition, then
    /// Updates (keeping the handle, or naming a new one, some rolled back to the old one) and
    /// a Delete at minutes, a day, 31 days and a year after it. Handles expire a day after they
    /// are made (S3 answers 403 after), the sweeper removes records past their retention, and
    /// some handles do not say their expiry in their URL. Every Update and Delete is answered
    /// by its deadline; an Update runs its provider unless it names a new handle; a refused
    /// signal is never retried.
    LongLife,
    /// Calls whose outcome nobody saw: in the fault window, a provider run or poll that does
    /// its work and loses its answer while it goes on running for a while, and fenced writes
    /// applied whose reply is lost. The provider runs again only under a higher fence, never
    /// beside a run under the same one; a write that stands is never reported failed; each
    /// request's counter is added once.
    UnseenOutcomes,
    /// An upgrade in progress: one region runs the last release's decision table (a frozen
    /// copy) until it is upgraded mid-run, and a newer version of cfn-once takes some requests
    /// first, writing records of a format this one does not know, and answers them later. No
    /// record of an unknown format is ever overwritten or deleted; every request is answered.
    Upgrade,
}

impl Kind {
    /// The coverage counter naming the story.
    pub fn name(self) -> &'static str {
        match self {
            Self::Weather => "scenario: weather only",
            Self::DrainedPrimarySecondaryDown => "scenario: drained primary, secondary down for good",
            Self::LongProviderThenCrash => "scenario: provider for minutes on the longest timeout, then a crash",
            Self::StoreOutage => "scenario: lease-store outage of 10+ minutes",
            Self::OutageMidWait => "scenario: primary down for good in the middle of a wait",
            Self::KillsNearDeadline => "scenario: Lambdas killed in the last minute before a deadline",
            Self::SlowBatchMates => "scenario: long-running requests batched with a slow one",
            Self::LateCopy => "scenario: primary down, the secondary's copy delivered minutes late",
            Self::DrainedSlowControl => "scenario: drained primary, control slower than its timeout",
            Self::LongWork => "scenario: work past the hour, signalled to a wait condition",
            Self::CloseMidWork => "scenario: a close (Delete or new-handle Update) mid-work near its deadline",
            Self::LostRepliesAfterHandOver => "scenario: store replies lost to a handed-over request's copies",
            Self::LongLife => "scenario: a resource's life over a year: updates, rollbacks and a delete",
            Self::UnseenOutcomes => "scenario: provider calls and fenced writes whose outcome nobody saw",
            Self::Upgrade => {
                "scenario: an upgrade: the last release's decisions in one region, a newer format's records"
            }
        }
    }
}

impl Kind {
    /// The story of a seed, its first draw.
    pub(super) fn drawn(draw: &Draw) -> Self {
        match draw.below(100) {
            0..4 => Kind::DrainedPrimarySecondaryDown,
            4..8 => Kind::LongProviderThenCrash,
            8..12 => Kind::StoreOutage,
            12..16 => Kind::OutageMidWait,
            16..24 => Kind::KillsNearDeadline,
            24..30 => Kind::SlowBatchMates,
            30..34 => Kind::LateCopy,
            34..38 => Kind::DrainedSlowControl,
            38..44 => Kind::LongWork,
            // Carved out of the weather's share, so that every earlier story draws as before.
            44..48 => Kind::CloseMidWork,
            48..51 => Kind::LostRepliesAfterHandOver,
            51..55 => Kind::LongLife,
            55..60 => Kind::UnseenOutcomes,
            60..64 => Kind::Upgrade,
            _ => Kind::Weather,
        }
    }
}

/// Tells [`Kind::DrainedPrimarySecondaryDown`]'s story on the weather drawn before it.
pub(super) fn drained_primary_secondary_down(drawn: &mut Drawn) {
    let Drawn { outages, flips, .. } = drawn;
    flips.clear();
    flips.push((0, Region::Secondary));
    outages.retain(|(region, _, _)| *region == Region::Primary);
    outages.push((Region::Secondary, 0, u64::MAX / 4));
}

/// Tells [`Kind::LongProviderThenCrash`]'s story on the weather drawn before it.
pub(super) fn long_provider_then_crash(draw: &Draw, drawn: &mut Drawn, function_timeout: FunctionTimeout) {
    let Drawn { requests, crashes, .. } = drawn;
    // Long enough for the other copy to back off many times, short enough to finish
    // within one invocation after the takeover.
    let longest_ms = function_timeout.timeout_s * 1_000 * 3 / 4;
    let first = &mut requests[0];
    first.work_ms = draw.between(longest_ms / 3, longest_ms);
    first.service_timeout_s = 3_600;
    first.panic_percent = 0;
    let crash_ms = first.sent_at_ms + draw.between(60_000, first.work_ms);
    crashes.push((crash_ms, Region::Primary));
}

/// Tells [`Kind::StoreOutage`]'s story on the weather drawn before it.
pub(super) fn store_outage(draw: &Draw, drawn: &mut Drawn) {
    let Drawn { requests, store_outage, .. } = drawn;
    for request in requests.iter_mut() {
        request.service_timeout_s = 3_600;
    }
    let start_ms = draw.below(120_000);
    *store_outage = Some((start_ms, start_ms + draw.between(600_000, 1_200_000)));
}

/// Tells [`Kind::OutageMidWait`]'s story on the weather drawn before it.
pub(super) fn outage_mid_wait(draw: &Draw, drawn: &mut Drawn, window_end_ms: u64) {
    let Drawn { requests, outages, crashes, .. } = drawn;
    // Sent after the fault window, so nothing but the outage touches it: the primary
    // goes down for good while the wait goes on, and the deadline is far.
    // A retried deployment of it would now be sent before it; there is none.
    requests.retain(|plan| plan.retry_of != Some(0));
    crashes.clear();
    let first = &mut requests[0];
    first.sent_at_ms = window_end_ms + draw.below(30_000);
    first.service_timeout_s = 3_600;
    first.work_ms = draw.below(3_000);
    first.panic_percent = 0;
    first.late = None;
    let in_progress_ms = draw.between(120_000, 1_200_000);
    first.wait =
        Some(WaitPlan { in_progress_ms, poll_interval_s: draw.between(1, 60), poll_work_ms: draw.below(2_000) });
    let down_ms = first.sent_at_ms + draw.between(5_000, in_progress_ms);
    outages.push((Region::Primary, down_ms, u64::MAX / 4));
}

/// Tells [`Kind::KillsNearDeadline`]'s story on the weather drawn before it.
pub(super) fn kills_near_deadline(
    draw: &Draw,
    drawn: &mut Drawn,
    window_end_ms: u64,
    function_timeout: FunctionTimeout,
) {
    let Drawn { requests, crashes, .. } = drawn;
    // After the window, providers that run or wait up to their deadlines; kills
    // in the last minute before each deadline, of one region or both.
    let after_ms = window_end_ms + function_timeout.visibility_s * 1_000;
    for plan in requests.iter_mut() {
        plan.sent_at_ms = after_ms + draw.below(60_000);
        plan.service_timeout_s = draw.between(120, 900);
        plan.panic_percent = 0;
        if draw.chance(0.5) {
            plan.work_ms = plan.service_timeout_s * 1_000 + draw.below(60_000);
            plan.wait = None;
        } else {
            plan.work_ms = draw.below(3_000);
            plan.wait = Some(WaitPlan {
                in_progress_ms: plan.service_timeout_s * 1_000 + draw.below(60_000),
                poll_interval_s: draw.between(1, 30),
                poll_work_ms: if draw.chance(0.3) { draw.between(5_000, 40_000) } else { draw.below(2_000) },
            });
        }
        let deadline_ms = plan.deadline_ms();
        for _ in 0..draw.between(1, 3) {
            let region = if draw.chance(0.3) { None } else { Some(draw.region()) };
            let at_ms = deadline_ms.saturating_sub(draw.between(1_000, 60_000));
            for region in Region::BOTH.into_iter().filter(|r| region.is_none_or(|only| only == *r)) {
                crashes.push((at_ms, region));
            }
        }
    }
    requests.retain(|plan| plan.retry_of.is_none());
}

/// Tells [`Kind::SlowBatchMates`]'s story on the weather drawn before it.
pub(super) fn slow_batch_mates(draw: &Draw, drawn: &mut Drawn, window_end_ms: u64, function_timeout: FunctionTimeout) {
    let Drawn { requests, outages, crashes, .. } = drawn;
    // One burst; the secondary is down, so only the primary's batches answer.
    let at_ms = window_end_ms + draw.below(30_000);
    let invocation_ms = function_timeout.timeout_s * 1_000;
    requests.retain(|plan| plan.retry_of.is_none());
    for (index, plan) in requests.iter_mut().enumerate() {
        plan.sent_at_ms = at_ms;
        plan.panic_percent = 0;
        plan.late = None;
        if index == 0 {
            plan.work_ms = draw.between(invocation_ms / 3, invocation_ms * 2 / 3);
            plan.service_timeout_s = 3_600;
            plan.wait = None;
        } else {
            plan.work_ms = draw.below(1_000);
            plan.service_timeout_s = draw.between(60, 600);
            plan.wait = Some(WaitPlan {
                in_progress_ms: plan.service_timeout_s * 1_000 + draw.below(60_000),
                poll_interval_s: draw.between(1, 10),
                poll_work_ms: draw.below(1_000),
            });
        }
    }
    if requests.len() < 2 {
        requests.push(RequestPlan {
            wait: Some(WaitPlan { in_progress_ms: 3_600_000, poll_interval_s: 2, poll_work_ms: 0 }),
            ..RequestPlan::plain(at_ms, 0, draw.between(60, 600))
        });
    }
    outages.retain(|(region, _, _)| *region == Region::Primary);
    outages.push((Region::Secondary, 0, u64::MAX / 4));
    crashes.clear();
}

/// Tells [`Kind::LateCopy`]'s story on the weather drawn before it.
pub(super) fn late_copy(draw: &Draw, drawn: &mut Drawn, window_end_ms: u64, deployed: &Deployed) {
    let Drawn { requests, outages, .. } = drawn;
    requests.retain(|plan| plan.retry_of != Some(0));
    let first = &mut requests[0];
    let lateness_ms = draw.between(60_000, 600_000);
    first.sent_at_ms = window_end_ms + draw.below(30_000);
    first.late = Some((Region::Secondary, lateness_ms));
    first.panic_percent = 0;
    first.service_timeout_s = (lateness_ms + deployed.secondary_delay_s * 1_000) / 1_000 + draw.between(60, 900);
    first.work_ms = draw.below(3_000);
    first.wait = Some(WaitPlan {
        in_progress_ms: first.service_timeout_s * 1_000 + 600_000,
        poll_interval_s: draw.between(1, 60),
        poll_work_ms: draw.below(2_000),
    });
    let down_ms = first.sent_at_ms + draw.below(2_000);
    outages.push((Region::Primary, down_ms, u64::MAX / 4));
}

/// Tells [`Kind::DrainedSlowControl`]'s story on the weather drawn before it.
pub(super) fn drained_slow_control(drawn: &mut Drawn) {
    let Drawn { faults, flips, .. } = drawn;
    flips.clear();
    flips.push((0, Region::Secondary));
    faults.control_slow = 0.6;
}

/// Tells [`Kind::UnseenOutcomes`]'s story on the weather drawn before it.
pub(super) fn unseen_outcomes(draw: &Draw, drawn: &mut Drawn) {
    let Drawn { faults, .. } = drawn;
    // Drawn last, so that the rest of the seed is drawn as for the weather.
    faults.provider_lost_reply = 0.05 + draw.probability(0.25);
    faults.fenced_lost_reply = 0.05 + draw.probability(0.25);
}

/// The upgrade in progress of [`Kind::Upgrade`], drawn after everything else.
pub(super) fn upgrade(draw: &Draw, requests: &[RequestPlan]) -> Upgrade {
    let last_sent_ms = requests.iter().map(|plan| plan.sent_at_ms).max().unwrap_or(0);
    let old_region = draw.region();
    let upgraded_at_ms = draw.between(0, last_sent_ms + 120_000);
    // A newer version takes plain requests only: one that a retried deployment reuses
    // would leave the retry to a version that cannot read its record.
    let newer_takes = requests
        .iter()
        .enumerate()
        .filter(|(index, plan)| {
            plan.retry_of.is_none()
                && plan.delete_of.is_none()
                && plan.update_of.is_none()
                && plan.wait_condition_s.is_none()
                && !requests.iter().any(|other| other.retry_of == Some(*index))
        })
        .filter(|_| draw.chance(0.3))
        .map(|(index, plan)| {
            let answer_s = plan.service_timeout_s.saturating_sub(60).clamp(1, 120);
            (index, plan.sent_at_ms + draw.below(3_000), 1_000 + draw.below(answer_s * 1_000))
        })
        .collect();
    Upgrade { old_region, upgraded_at_ms, newer_takes }
}
