//! `cfn-once stuck`: the requests an operator should look at, oldest first: unanswered for
//! longer than expected (running, waiting for polls, or abandoned with an expired lease), and
//! answers committed but not delivered for longer than a delivery takes. One Scan of the lease
//! table, with the operator's credentials.
//!
//! A wait-condition work (see `cfn_once_core::wait_condition`) may rightly run for up to 12
//! hours, so its age says nothing: it is listed when its next poll is overdue (nobody came to
//! poll it: both regions down, or its messages lost), when it is older than the longest
//! wait-condition Timeout (its deadline has passed and nobody signalled it; the record does not
//! keep the Timeout, so this is the latest any work's deadline can be), or when its signal was
//! committed and not delivered.

use cfn_once::system_clock::SystemClock;
use cfn_once_core::clock::Clock;
use cfn_once_core::lease::{LeaseRecord, LeaseState};
use cfn_once_core::wait_condition::{TIMEOUT_S_MAX, is_work_id};
use serde::Serialize;

use crate::view::RecordView;
use crate::{OpsTarget, span};

/// What counts as stuck.
#[derive(Debug, Clone, Copy)]
pub struct StuckOptions {
    /// Unanswered requests older than this (since they were sent).
    pub older_than_ms: u64,
    /// Committed answers undelivered for longer than this.
    pub undelivered_ms: u64,
    /// Wait-condition works whose next poll is overdue by longer than this.
    pub poll_overdue_ms: u64,
}

/// A request that looks stuck, and why.
#[derive(Debug, Clone, Serialize)]
pub struct Stuck {
    pub why: String,
    pub age_ms: u64,
    pub record: RecordView,
}

/// The stuck requests, oldest first.
pub async fn stuck(target: &OpsTarget, options: StuckOptions) -> anyhow::Result<Vec<Stuck>> {
    let records = target.store().await.all_records().await?;
    Ok(classify(&records, SystemClock.now_ms(), options))
}

/// The rules, on records read at `now_ms`.
pub fn classify(records: &[LeaseRecord], now_ms: u64, options: StuckOptions) -> Vec<Stuck> {
    let mut stuck: Vec<Stuck> = records
        .iter()
        .filter_map(|record| {
            let sent_ms = if record.sent_ms > 0 { record.sent_ms } else { record.created_ms };
            let age_ms = now_ms.saturating_sub(sent_ms);
            if is_work_id(&record.key.request_id) {
                let why = work_why(record, now_ms, age_ms, options)?;
                return Some(Stuck { why, age_ms, record: RecordView::of(record, now_ms) });
            }
            let why = match record.state {
                LeaseState::Committed if record.delivered => return None,
                LeaseState::Committed => {
                    let undelivered_ms = now_ms.saturating_sub(record.updated_ms);
                    if undelivered_ms < options.undelivered_ms {
                        return None;
                    }
                    format!("answer committed {} ago and not delivered", span(undelivered_ms))
                }
                _ if age_ms < options.older_than_ms => return None,
                LeaseState::Running if record.lease_until_ms < now_ms => format!(
                    "unanswered after {}; its lease expired {} ago and nobody has taken it over",
                    span(age_ms),
                    span(now_ms - record.lease_until_ms)
                ),
                LeaseState::Running => format!("unanswered after {}; still running", span(age_ms)),
                LeaseState::Left => format!(
                    "unanswered after {}; a standby primary took the lease and gave it back, and no region has taken it since",
                    span(age_ms)
                ),
                LeaseState::Waiting => {
                    let polls = record.poll.as_ref().map_or(0, |poll| poll.polls);
                    format!("unanswered after {}; in progress, {polls} polls so far", span(age_ms))
                }
            };
            Some(Stuck { why, age_ms, record: RecordView::of(record, now_ms) })
        })
        .collect();
    stuck.sort_by_key(|entry| std::cmp::Reverse(entry.age_ms));
    stuck
}

/// Why a wait-condition work looks stuck at `now_ms`, if it does (see the module's header).
fn work_why(record: &LeaseRecord, now_ms: u64, age_ms: u64, options: StuckOptions) -> Option<String> {
    let polls = record.poll.as_ref().map_or(0, |poll| poll.polls);
    if record.state == LeaseState::Committed {
        let undelivered_ms = now_ms.saturating_sub(record.updated_ms);
        return (!record.delivered && undelivered_ms >= options.undelivered_ms).then(|| {
            format!("wait condition work: its signal was committed {} ago and not delivered", span(undelivered_ms))
        });
    }
    if age_ms > TIMEOUT_S_MAX * 1000 {
        return Some(format!(
            "wait condition work unsignalled after {}, longer than any wait condition's Timeout (12 h): its deadline has passed and no region signalled it; {polls} polls so far",
            span(age_ms)
        ));
    }
    // When something should have happened: the next poll, or the end of a poll's lease.
    let due_ms = match (record.state, &record.poll) {
        (LeaseState::Running, _) if record.lease_until_ms >= now_ms => return None,
        (LeaseState::Running, _) => record.lease_until_ms,
        (_, Some(poll)) => poll.poll_at_ms,
        (_, None) => record.updated_ms,
    };
    let overdue_ms = now_ms.saturating_sub(due_ms);
    if overdue_ms < options.poll_overdue_ms {
        return None;
    }
    Some(match record.state {
        LeaseState::Running => format!(
            "wait condition work: a poll's lease expired {} ago and nobody has taken it over; {polls} polls so far",
            span(overdue_ms)
        ),
        _ => format!(
            "wait condition work: its next poll is {} overdue and no region has taken it; {polls} polls so far",
            span(overdue_ms)
        ),
    })
}

/// The list as text.
pub fn render(stuck: &[Stuck]) -> String {
    if stuck.is_empty() {
        return "nothing stuck".into();
    }
    let mut out = Vec::new();
    for entry in stuck {
        out.push(format!("- {}", entry.why));
        out.extend(entry.record.render().lines().map(|line| format!("  {line}")));
    }
    out.join("\n")
}

#[cfg(test)]
mod tests {
    use cfn_once_core::fingerprint::Fingerprint;
    use cfn_once_core::lease::{LeaseRecord, LeaseState, PollRecord, RequestLabel};
    use cfn_once_core::request::RequestKey;

    use super::*;

    const NOW: u64 = 1_800_000_000_000;

    fn record(id: &str, state: LeaseState, sent_ago_ms: u64) -> LeaseRecord {
        LeaseRecord {
            format: cfn_once_core::lease::RECORD_FORMAT,
            key: RequestKey {
                stack_id: cfn_once_core::request::StackArn::parse(
                    "arn:aws:cloudformation:us-east-2:123456789012:stack/s/g",
                )
                .expect("a stack ARN"),
                request_id: id.into(),
            },
            fence: 1,
            owner: "us-east-1/inv/n".into(),
            lease_until_ms: NOW + 10_000,
            heartbeat: 0,
            state,
            fingerprint: Fingerprint::from_stored("a".into()),
            attempts: [Fingerprint::from_stored("a".into())].into(),
            sent_ms: NOW - sent_ago_ms,
            response: (state == LeaseState::Committed).then(|| b"{}".to_vec()),
            delivered: false,
            unsent: None,
            created_ms: NOW - sent_ago_ms,
            updated_ms: NOW - sent_ago_ms,
            expires_ms: NOW + 1,
            poll: None,
            label: RequestLabel::default(),
            writer: None,
        }
    }

    #[test]
    fn the_unanswered_and_the_undelivered_oldest_first() {
        let options = StuckOptions { older_than_ms: 600_000, undelivered_ms: 60_000, poll_overdue_ms: 600_000 };
        let abandoned =
            LeaseRecord { lease_until_ms: NOW - 5_000, ..record("abandoned", LeaseState::Running, 900_000) };
        let waiting = LeaseRecord {
            poll: Some(PollRecord {
                fingerprint: Fingerprint::from_stored("a".into()),
                state: "{}".into(),
                poll_at_ms: NOW + 4_000,
                waiting_since_ms: NOW - 700_000,
                polls: 7,
            }),
            ..record("waiting", LeaseState::Waiting, 700_000)
        };
        let records = [
            record("young", LeaseState::Running, 30_000),
            record("running", LeaseState::Running, 800_000),
            abandoned,
            waiting,
            record("undelivered", LeaseState::Committed, 120_000),
            record("fresh commit", LeaseState::Committed, 10_000),
            LeaseRecord { delivered: true, ..record("delivered", LeaseState::Committed, 3_000_000) },
        ];
        let stuck = classify(&records, NOW, options);
        let listed: Vec<(&str, &str)> =
            stuck.iter().map(|s| (s.record.request_id.as_str(), s.why.split(';').next().unwrap_or(""))).collect();
        assert_eq!(
            listed,
            [
                ("abandoned", "unanswered after 15 min 0 s"),
                ("running", "unanswered after 13 min 20 s"),
                ("waiting", "unanswered after 11 min 40 s"),
                ("undelivered", "answer committed 2 min 0 s ago and not delivered"),
            ]
        );
        assert!(stuck[0].why.ends_with("its lease expired 5 s ago and nobody has taken it over"));
        assert!(stuck[2].why.ends_with("in progress, 7 polls so far"));
    }

    fn polled(record: LeaseRecord, polls: u32, poll_at_ms: u64) -> LeaseRecord {
        let poll = PollRecord {
            fingerprint: Fingerprint::from_stored("a".into()),
            state: "{}".into(),
            poll_at_ms,
            waiting_since_ms: record.sent_ms,
            polls,
        };
        LeaseRecord { poll: Some(poll), ..record }
    }

    #[test]
    fn a_wait_condition_work_is_stuck_when_its_poll_is_overdue_or_its_deadline_passed_not_for_its_age() {
        const HOUR_MS: u64 = 3_600_000;
        let options = StuckOptions { older_than_ms: 600_000, undelivered_ms: 60_000, poll_overdue_ms: 600_000 };
        let work = |name: &str| format!("cfn-once-work:{name}");
        let records = [
            // Five hours into a work polled every 10 minutes, its next poll due: not stuck.
            polled(record(&work("on time"), LeaseState::Waiting, 5 * HOUR_MS), 30, NOW + 200_000),
            // Due a little while ago: a poll comes late by a backoff or a visibility timeout.
            polled(record(&work("a bit late"), LeaseState::Waiting, 2 * HOUR_MS), 12, NOW - 300_000),
            // Being polled now.
            polled(record(&work("polling"), LeaseState::Running, 3 * HOUR_MS), 18, NOW - 1_000),
            // Nobody came for 20 minutes.
            polled(record(&work("overdue"), LeaseState::Waiting, 2 * HOUR_MS), 11, NOW - 1_200_000),
            // A poller stopped 15 minutes ago and nobody took over.
            LeaseRecord {
                lease_until_ms: NOW - 900_000,
                ..polled(record(&work("abandoned"), LeaseState::Running, 4 * HOUR_MS), 20, NOW - 960_000)
            },
            // Older than any wait condition's Timeout, its next poll in the future.
            polled(record(&work("past every deadline"), LeaseState::Waiting, 13 * HOUR_MS), 70, NOW + 60_000),
            // Signalled, not delivered for 2 minutes; and one delivered.
            record(&work("undelivered"), LeaseState::Committed, 120_000),
            LeaseRecord { delivered: true, ..record(&work("delivered"), LeaseState::Committed, 11 * HOUR_MS) },
            // An ordinary request waiting as long is listed, as before.
            polled(record("request", LeaseState::Waiting, 2 * HOUR_MS), 100, NOW + 4_000),
        ];
        let stuck = classify(&records, NOW, options);
        let listed: Vec<(&str, &str)> = stuck.iter().map(|s| (s.record.request_id.as_str(), s.why.as_str())).collect();
        assert_eq!(
            listed,
            [
                (
                    "cfn-once-work:past every deadline",
                    "wait condition work unsignalled after 13 h 0 min, longer than any wait condition's Timeout (12 h): its deadline has passed and no region signalled it; 70 polls so far"
                ),
                (
                    "cfn-once-work:abandoned",
                    "wait condition work: a poll's lease expired 15 min 0 s ago and nobody has taken it over; 20 polls so far"
                ),
                (
                    "cfn-once-work:overdue",
                    "wait condition work: its next poll is 20 min 0 s overdue and no region has taken it; 11 polls so far"
                ),
                ("request", "unanswered after 2 h 0 min; in progress, 100 polls so far"),
                (
                    "cfn-once-work:undelivered",
                    "wait condition work: its signal was committed 2 min 0 s ago and not delivered"
                ),
            ]
        );
        assert!(stuck.iter().filter(|s| s.record.request_id.starts_with("cfn-once-work:")).all(|s| s.record.work));
    }
}
