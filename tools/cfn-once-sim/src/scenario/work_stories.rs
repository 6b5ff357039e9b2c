//! The stories of work handed to a wait condition: past the hour under failovers, closed
//! mid-work near the close's own deadline, its copies meeting lost store replies after the
//! answer's deadline, and a resource's life over a year.

use crate::deployed::Deployed;

use super::{Draw, Drawn, LateStoreFaults, Region, RequestPlan, WaitPlan};

/// Tells [`Kind::LongWork`]'s story on the weather drawn before it.
pub(super) fn long_work(draw: &Draw, drawn: &mut Drawn, window_end_ms: u64) {
    let Drawn { requests, outages, flips, crashes, .. } = drawn;
    requests.retain(|plan| plan.retry_of.is_none());
    let first = &mut requests[0];
    // Sent in the fault window or just after it.
    first.sent_at_ms = draw.below(window_end_ms + 60_000);
    let timeout_s = if draw.chance(0.5) { draw.between(3_600, 43_200) } else { draw.between(300, 3_600) };
    first.wait_condition_s = Some(timeout_s);
    first.late = draw.chance(0.15).then(|| (Region::Secondary, draw.between(5_000, 600_000)));
    let in_progress_ms = if draw.chance(0.25) {
        // Outlives its timeout: signalled FAILURE before it.
        timeout_s * 1_000 + draw.below(3_600_000)
    } else {
        draw.between(1_000, timeout_s * 1_000 * 9 / 10)
    };
    first.wait = Some(WaitPlan {
        in_progress_ms,
        poll_interval_s: draw.between(1, 900),
        poll_work_ms: if draw.chance(0.2) { draw.between(5_000, 40_000) } else { draw.below(2_000) },
    });
    let (sent_ms, work_end_ms) = (first.sent_at_ms, first.sent_at_ms + in_progress_ms.min(timeout_s * 1_000));
    let mid_work = |draw: &Draw| draw.between(sent_ms + 1_000, work_end_ms.max(sent_ms + 2_000));
    // Failovers: the primary down for a while, or for good, in the middle of the work.
    if draw.chance(0.5) {
        let down_ms = mid_work(draw);
        let up_ms = if draw.chance(0.5) { u64::MAX / 4 } else { down_ms + draw.between(60_000, 7_200_000) };
        outages.push((Region::Primary, down_ms, up_ms));
    }
    if draw.chance(0.2) {
        let down_ms = mid_work(draw);
        outages.push((Region::Secondary, down_ms, down_ms + draw.between(60_000, 3_600_000)));
    }
    // Drills: the active region flipped (and maybe back) while the work runs.
    for _ in 0..draw.below(4) {
        flips.push((mid_work(draw), draw.region()));
    }
    // Lambdas killed at any moment of the work.
    for _ in 0..draw.below(5) {
        crashes.push((mid_work(draw), draw.region()));
    }
    // A Delete (a rollback, a stack deletion) while the work may still run.
    if draw.chance(0.3) {
        let wait_condition_s = requests[0].wait_condition_s;
        requests.push(RequestPlan {
            wait_condition_s,
            delete_of: Some(0),
            ..RequestPlan::plain(mid_work(draw), draw.below(2_000), draw.between(300, 3_600))
        });
    }
}

/// Tells [`Kind::CloseMidWork`]'s story on the weather drawn before it.
pub(super) fn close_mid_work(draw: &Draw, drawn: &mut Drawn, window_end_ms: u64, deployed: &Deployed) {
    let Drawn { requests, outages, flips, .. } = drawn;
    requests.retain(|plan| plan.retry_of.is_none());
    let first = &mut requests[0];
    first.sent_at_ms = draw.below(window_end_ms + 60_000);
    first.late = None;
    first.panic_percent = 0;
    let timeout_s = draw.between(1_800, 43_200);
    first.wait_condition_s = Some(timeout_s);
    // Polled at the floor (it asks every second), polls that outlast a lease, or both.
    let (at_floor, long_polls) = match draw.below(3) {
        0 => (true, false),
        1 => (false, true),
        _ => (true, true),
    };
    first.wait = Some(WaitPlan {
        in_progress_ms: timeout_s * 1_000,
        poll_interval_s: if at_floor { 1 } else { draw.between(1, 60) },
        poll_work_ms: if long_polls { draw.between(20_000, 45_000) } else { draw.below(2_000) },
    });
    let close_ms = first.sent_at_ms + draw.between(120_000, 1_800_000);
    // The closing region: the primary, or the secondary once the primary is down for
    // good or drained from shortly before the close on. Its ServiceTimeout leaves
    // little more than that region needs to see its copy and answer.
    let by_secondary = draw.chance(0.5);
    let reach_s = if by_secondary { deployed.secondary_delay_s } else { 0 };
    let service_timeout_s = reach_s + draw.between(25, 120);
    if by_secondary {
        let from_ms = close_ms.saturating_sub(draw.below(60_000));
        if draw.chance(0.5) {
            outages.push((Region::Primary, from_ms, u64::MAX / 4));
        } else {
            flips.retain(|(at_ms, _)| *at_ms < from_ms);
            flips.push((from_ms, Region::Secondary));
        }
    }
    let plan = requests[0].clone();
    let update = draw.chance(0.5);
    let work_ms = draw.below(2_000);
    requests.push(RequestPlan {
        // An Update's new work is short and ends well before its own timeout.
        wait: update.then(|| WaitPlan {
            in_progress_ms: draw.between(5_000, 300_000),
            poll_interval_s: draw.between(1, 60),
            poll_work_ms: draw.below(2_000),
        }),
        wait_condition_s: if update { Some(draw.between(900, 3_600)) } else { plan.wait_condition_s },
        delete_of: (!update).then_some(0),
        update_of: update.then_some(0),
        ..RequestPlan::plain(close_ms, work_ms, service_timeout_s)
    });
}

/// Tells [`Kind::LostRepliesAfterHandOver`]'s story on the weather drawn before it.
pub(super) fn lost_replies_after_hand_over(draw: &Draw, drawn: &mut Drawn, window_end_ms: u64) {
    let Drawn { requests, outages, late_store_faults, .. } = drawn;
    requests.retain(|plan| plan.retry_of.is_none());
    let first = &mut requests[0];
    // After the fault window, so that only the late faults touch it.
    first.sent_at_ms = window_end_ms + draw.below(30_000);
    first.service_timeout_s = draw.between(30, 300);
    first.panic_percent = 0;
    first.late = draw.chance(0.3).then(|| (Region::Secondary, draw.between(5_000, 300_000)));
    let timeout_s = draw.between(1_800, 43_200);
    first.wait_condition_s = Some(timeout_s);
    first.wait = Some(WaitPlan {
        in_progress_ms: draw.between(60_000, timeout_s * 1_000 * 9 / 10),
        poll_interval_s: draw.between(1, 600),
        poll_work_ms: draw.below(2_000),
    });
    let answer_deadline_ms = first.deadline_ms();
    let from_ms = answer_deadline_ms.saturating_sub(draw.below(first.service_timeout_s * 500));
    *late_store_faults = Some(LateStoreFaults {
        from_ms,
        to_ms: answer_deadline_ms + draw.between(60_000, 2_400_000),
        lost_reply: 0.2 + draw.probability(0.4),
        lost_request: draw.probability(0.2),
    });
    // The copy that keeps the work alive may be the secondary's alone.
    if draw.chance(0.5) {
        let down_ms = answer_deadline_ms + draw.below(1_200_000);
        outages.push((Region::Primary, down_ms, u64::MAX / 4));
    }
}

/// Tells [`Kind::LongLife`]'s story on the weather drawn before it.
pub(super) fn long_life(draw: &Draw, drawn: &mut Drawn, window_end_ms: u64) {
    let Drawn { requests, handle_expires_s, opaque_handles, sweep_every_ms, .. } = drawn;
    const DAY_MS: u64 = 86_400_000;
    requests.retain(|plan| plan.retry_of.is_none());
    requests.truncate(1);
    *handle_expires_s = Some(86_399);
    *opaque_handles = draw.chance(0.3);
    *sweep_every_ms = Some(DAY_MS / 4);
    let first = &mut requests[0];
    first.sent_at_ms = draw.below(window_end_ms + 60_000);
    first.service_timeout_s = draw.between(300, 3_600);
    first.late = None;
    first.panic_percent = 0;
    first.wait_condition_s = Some(draw.between(1_800, 43_200));
    first.wait = Some(WaitPlan {
        in_progress_ms: draw.between(5_000, 1_200_000),
        poll_interval_s: draw.between(1, 120),
        poll_work_ms: draw.below(2_000),
    });
    let created_ms = first.sent_at_ms;
    // Operations at minutes, a day, a month and a year after the Create; the first
    // after its work has ended (a stack cannot be updated while a wait condition of
    // its creation still waits).
    let work_ms = first.wait.map_or(0, |wait| wait.in_progress_ms) + first.work_ms;
    let ages = [
        ((work_ms + 120_000).max(300_000), (work_ms + 120_000).max(3_600_000)),
        (DAY_MS - 7_200_000, DAY_MS + 7_200_000),
        (31 * DAY_MS - DAY_MS / 2, 31 * DAY_MS + DAY_MS / 2),
        (365 * DAY_MS - 5 * DAY_MS, 365 * DAY_MS + 5 * DAY_MS),
    ];
    // The Delete comes at one of those ages, or after all of them (a year and a
    // month after the Create).
    let delete_age = draw.below(ages.len() as u64 + 1) as usize;
    // The request whose properties (and handle) the resource has now.
    let mut current = 0;
    let short_wait = |draw: &Draw, service_timeout_s: u64| {
        draw.chance(0.3).then(|| WaitPlan {
            in_progress_ms: draw.between(5_000, service_timeout_s * 500),
            poll_interval_s: draw.between(1, 30),
            poll_work_ms: draw.below(2_000),
        })
    };
    let after_all = (395 * DAY_MS, 400 * DAY_MS);
    for (age, (from_ms, to_ms)) in ages.into_iter().chain([after_all]).enumerate() {
        let at_ms = created_ms + draw.between(from_ms, to_ms);
        if age == delete_age {
            let handle = requests[current].handle_owner(current);
            requests.push(RequestPlan {
                wait_condition_s: requests[current].wait_condition_s,
                delete_of: Some(0),
                handle_from: Some(handle),
                ..RequestPlan::plain(at_ms, draw.below(2_000), draw.between(300, 3_600))
            });
            break;
        }
        let service_timeout_s = draw.between(300, 3_600);
        let keeps_handle = draw.chance(0.5);
        let index = requests.len();
        let handle = requests[current].handle_owner(current);
        let work_ms = draw.below(2_000);
        requests.push(RequestPlan {
            wait: if keeps_handle {
                short_wait(draw, service_timeout_s)
            } else {
                Some(WaitPlan {
                    in_progress_ms: draw.between(5_000, 600_000),
                    poll_interval_s: draw.between(1, 60),
                    poll_work_ms: draw.below(2_000),
                })
            },
            wait_condition_s: Some(draw.between(1_800, 43_200)),
            update_of: Some(0),
            handle_from: keeps_handle.then_some(handle),
            old_from: Some(current),
            ..RequestPlan::plain(at_ms, work_ms, service_timeout_s)
        });
        if keeps_handle || !draw.chance(0.5) {
            current = index;
            continue;
        }
        // Another resource of the update fails: the rollback names the old handle
        // again, its old properties the forward Update's.
        let service_timeout_s = draw.between(300, 3_600);
        let sent_at_ms = at_ms + draw.between(60_000, 900_000);
        let work_ms = draw.below(2_000);
        requests.push(RequestPlan {
            wait: short_wait(draw, service_timeout_s),
            wait_condition_s: requests[current].wait_condition_s,
            update_of: Some(0),
            handle_from: Some(handle),
            old_from: Some(index),
            ..RequestPlan::plain(sent_at_ms, work_ms, service_timeout_s)
        });
    }
}
