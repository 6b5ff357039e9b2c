//! `cfn-once stuck`: the requests an operator should look at, oldest first: unanswered for
//! longer than expected (running, waiting for polls, or abandoned with an expired lease), and
//! answers committed but not delivered for longer than a delivery takes. One Scan of the lease
//! table, with the operator's credentials.

use cfn_once::clock::SystemClock;
use cfn_once_core::clock::Clock;
use cfn_once_core::lease::{LeaseRecord, LeaseState};
use serde::Serialize;

use crate::ops::view::RecordView;
use crate::ops::{OpsTarget, span};

/// What counts as stuck.
#[derive(Debug, Clone, Copy)]
pub struct StuckOptions {
    /// Unanswered requests older than this (since they were sent).
    pub older_than_ms: u64,
    /// Committed answers undelivered for longer than this.
    pub undelivered_ms: u64,
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
            created_ms: NOW - sent_ago_ms,
            updated_ms: NOW - sent_ago_ms,
            expires_ms: NOW + 1,
            poll: None,
            label: RequestLabel::default(),
        }
    }

    #[test]
    fn the_unanswered_and_the_undelivered_oldest_first() {
        let options = StuckOptions { older_than_ms: 600_000, undelivered_ms: 60_000 };
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
}
