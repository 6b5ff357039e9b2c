//! A lease record in words, for people and for `--json`: what state the request is in, who holds
//! or held it and until when, the attempts, the committed answer (status, Reason, id; the
//! committed body carries no ResponseURL), whether it was delivered, and any work in progress.
//!
//! A wait-condition work's record (its RequestId starts with `cfn-once-work:`, see
//! `cfn_once_core::wait_condition`) is told as one: its answer is a signal to the wait
//! condition's handle (status SUCCESS or FAILURE, Reason, UniqueId), whose Data is counted, not
//! shown (it is the provider's Data, which may be meant for the template's eyes only), and the
//! handle itself is never in the record.

use cfn_once_core::lease::{LeaseRecord, LeaseState};
use cfn_once_core::response::{ResponseBody, Status};
use cfn_once_core::wait_condition::{Signal, SignalStatus, is_work_id};
use serde::Serialize;

use crate::text::terminal_safe;
use crate::{span, utc};

/// The longest text from a record (a Reason, a provider's state) shown on a line.
const TEXT_CHARS_MAX: usize = 300;

/// One request's record as the tools show it.
#[derive(Debug, Clone, Serialize)]
pub struct RecordView {
    pub stack_id: String,
    pub request_id: String,
    pub logical_resource_id: String,
    pub request_type: String,
    pub resource_type: String,
    /// `RUNNING`, `WAITING` or `COMMITTED`.
    pub state: String,
    /// The state in a sentence.
    pub summary: String,
    pub fence: u64,
    /// The region of the execution that took the current fence.
    pub holder_region: String,
    pub owner: String,
    /// Milliseconds left on a RUNNING lease (negative: expired that long ago).
    pub lease_left_ms: Option<i64>,
    /// How many attempts (deployments reusing the RequestId) took the lease.
    pub attempts: usize,
    pub attempt: String,
    pub sent_at: String,
    pub created_at: String,
    pub updated_at: String,
    /// The version of cfn-once that wrote the record last, where its stamp says so
    /// (`LeaseRecord::written_by`); `None` for a writer older than 0.2.0.
    pub written_by: Option<String>,
    /// The record's format (`lease::RECORD_FORMAT`).
    pub format: u32,
    pub sweepable_after: String,
    pub answer: Option<AnswerView>,
    /// Whether this is a resource's wait-condition work rather than CloudFormation's request.
    pub work: bool,
    /// A work's committed signal (`answer` is then `None`).
    pub signal: Option<SignalView>,
    pub delivered: bool,
    /// Why a work's committed signal will never be PUT (its handle expired or refused it).
    pub unsent: Option<String>,
    pub in_progress: Option<WaitView>,
    pub heartbeats: u64,
}

/// A wait-condition work's committed signal.
#[derive(Debug, Clone, Serialize)]
pub struct SignalView {
    /// `SUCCESS` or `FAILURE`, as the wait condition reads it.
    pub status: String,
    pub reason: String,
    /// The resource's logical id: the key of its result in the wait condition's Data.
    pub unique_id: String,
    /// The size of the work's result (the provider's Data as JSON text), which is not shown.
    pub data_bytes: usize,
    pub committed_at: String,
}

/// The committed answer.
#[derive(Debug, Clone, Serialize)]
pub struct AnswerView {
    /// `SUCCESS` or `FAILED`.
    pub status: String,
    pub physical_resource_id: String,
    pub reason: Option<String>,
    pub committed_at: String,
}

/// A provider's work in progress.
#[derive(Debug, Clone, Serialize)]
pub struct WaitView {
    pub polls: u32,
    pub waiting_since: String,
    /// Milliseconds until the next poll is due (negative: overdue).
    pub next_poll_in_ms: i64,
    pub state_bytes: usize,
    pub state: String,
}

impl RecordView {
    /// `record` as seen at `now_ms`.
    pub fn of(record: &LeaseRecord, now_ms: u64) -> Self {
        let signed = |ms: u64| i64::try_from(ms).unwrap_or(i64::MAX) - i64::try_from(now_ms).unwrap_or(i64::MAX);
        let work = is_work_id(&record.key.request_id);
        let committed = match (&record.response, record.state) {
            (Some(bytes), LeaseState::Committed) => Some(bytes),
            _ => None,
        };
        let signal = committed.filter(|_| work).map(|bytes| signal_view(bytes, record.updated_ms));
        let answer = committed.filter(|_| !work).map(|bytes| match ResponseBody::parse(bytes) {
            Ok(body) => AnswerView {
                status: match body.status {
                    Status::Success => "SUCCESS".into(),
                    Status::Failed => "FAILED".into(),
                },
                physical_resource_id: terminal_safe(&body.physical_resource_id, TEXT_CHARS_MAX),
                reason: body.reason.map(|reason| terminal_safe(&reason, TEXT_CHARS_MAX)),
                committed_at: utc(record.updated_ms),
            },
            Err(_) => AnswerView {
                status: "unreadable".into(),
                physical_resource_id: String::new(),
                reason: Some(format!("the stored body ({} bytes) is not a response", bytes.len())),
                committed_at: utc(record.updated_ms),
            },
        });
        let in_progress =
            record.poll.as_ref().filter(|poll| poll.fingerprint == record.fingerprint).map(|poll| WaitView {
                polls: poll.polls,
                waiting_since: utc(poll.waiting_since_ms),
                next_poll_in_ms: signed(poll.poll_at_ms),
                state_bytes: poll.state.len(),
                state: terminal_safe(&poll.state, TEXT_CHARS_MAX),
            });
        let lease_left_ms = (record.state == LeaseState::Running).then(|| signed(record.lease_until_ms));
        let holder_region = record.owner.split('/').next().unwrap_or_default().to_owned();
        let summary = if work {
            work_summary(record, lease_left_ms, signal.as_ref(), in_progress.as_ref(), &holder_region)
        } else {
            summary(record, lease_left_ms, answer.as_ref(), in_progress.as_ref(), &holder_region)
        };
        Self {
            stack_id: record.key.stack_id.to_string(),
            request_id: record.key.request_id.clone(),
            logical_resource_id: record.label.logical_resource_id.clone(),
            request_type: record.label.request_type.clone(),
            resource_type: record.label.resource_type.clone(),
            state: record.state.as_str().to_owned(),
            summary,
            fence: record.fence,
            holder_region,
            owner: record.owner.clone(),
            lease_left_ms,
            attempts: record.attempts.len(),
            attempt: record.fingerprint.as_str().to_owned(),
            sent_at: utc(record.sent_ms),
            created_at: utc(record.created_ms),
            updated_at: utc(record.updated_ms),
            written_by: record.written_by().map(str::to_owned),
            format: record.format,
            sweepable_after: utc(record.expires_ms),
            answer,
            work,
            signal,
            delivered: record.delivered,
            unsent: record.unsent.clone(),
            in_progress,
            heartbeats: record.heartbeat,
        }
    }

    /// The view as indented lines.
    pub fn render(&self) -> String {
        let safe = |text: &str| terminal_safe(text, TEXT_CHARS_MAX);
        let mut lines = vec![
            format!("request   {} {}", safe(&self.stack_id), safe(&self.request_id)),
            format!(
                "resource  {} ({} {})",
                or_dash(&safe(&self.logical_resource_id)),
                or_dash(&safe(&self.resource_type)),
                or_dash(&self.request_type)
            ),
            format!("state     {}: {}", self.state, self.summary),
            format!("fence     {}, taken by {}", self.fence, safe(&self.owner)),
        ];
        if self.work {
            lines.insert(
                2,
                format!(
                    "work      the wait condition work of {}: its request was answered SUCCESS at once, and the provider's outcome is one signal to the wait condition's handle",
                    or_dash(&safe(&self.logical_resource_id))
                ),
            );
        }
        if let Some(left_ms) = self.lease_left_ms {
            lines.push(format!("lease     {} ({} heartbeats)", lease(left_ms), self.heartbeats));
        }
        if let Some(wait) = &self.in_progress {
            lines.push(format!(
                "waiting   since {}, {} polls, next poll {}; state {} bytes: {}",
                wait.waiting_since,
                wait.polls,
                due(wait.next_poll_in_ms),
                wait.state_bytes,
                wait.state
            ));
        }
        if let Some(answer) = &self.answer {
            lines.push(format!(
                "answer    {} at {}, PhysicalResourceId {}{}",
                answer.status,
                answer.committed_at,
                or_dash(&answer.physical_resource_id),
                answer.reason.as_ref().map_or(String::new(), |reason| format!(", Reason: {reason}"))
            ));
            lines.push(format!(
                "delivered {}",
                if self.delivered { "yes: PUT to CloudFormation" } else { "no: the next copy to arrive PUTs it" }
            ));
        }
        if let Some(signal) = &self.signal {
            lines.push(format!(
                "signal    {} at {}, UniqueId {}, Data {} bytes of JSON, Reason: {}",
                signal.status,
                signal.committed_at,
                or_dash(&signal.unique_id),
                signal.data_bytes,
                signal.reason
            ));
            lines.push(format!(
                "delivered {}",
                match (&self.unsent, self.delivered) {
                    (Some(why), _) => format!("never: {why}; nothing can be waiting on the handle"),
                    (None, true) => "yes: PUT to the wait condition's handle".to_owned(),
                    (None, false) => "no: the next copy to arrive PUTs it".to_owned(),
                }
            ));
        }
        lines.push(format!(
            "attempts  {} (this record's attempt {}, sent {})",
            self.attempts, self.attempt, self.sent_at
        ));
        lines.push(format!(
            "record    format {}, created {}, updated {} by {}, sweepable after {}",
            self.format,
            self.created_at,
            self.updated_at,
            self.written_by
                .as_deref()
                .map_or_else(|| "a version before 0.2.0".to_owned(), |version| format!("cfn-once {}", safe(version))),
            self.sweepable_after
        ));
        lines.join("\n")
    }
}

/// A work's committed signal bytes, read back.
fn signal_view(bytes: &[u8], committed_ms: u64) -> SignalView {
    match Signal::parse(bytes) {
        Some(signal) => SignalView {
            status: match signal.status {
                SignalStatus::Success => "SUCCESS".into(),
                SignalStatus::Failure => "FAILURE".into(),
            },
            reason: terminal_safe(&signal.reason, TEXT_CHARS_MAX),
            unique_id: terminal_safe(&signal.unique_id, TEXT_CHARS_MAX),
            data_bytes: signal.data.len(),
            committed_at: utc(committed_ms),
        },
        None => SignalView {
            status: "unreadable".into(),
            reason: format!("the stored body ({} bytes) is not a wait condition signal", bytes.len()),
            unique_id: String::new(),
            data_bytes: 0,
            committed_at: utc(committed_ms),
        },
    }
}

fn or_dash(text: &str) -> &str {
    if text.is_empty() { "-" } else { text }
}

fn lease(left_ms: i64) -> String {
    if left_ms >= 0 {
        format!("held for {} more", span(left_ms.unsigned_abs()))
    } else {
        format!("expired {} ago: the next copy to arrive takes it over", span(left_ms.unsigned_abs()))
    }
}

fn due(in_ms: i64) -> String {
    if in_ms >= 0 {
        format!("in {}", span(in_ms.unsigned_abs()))
    } else {
        format!("due {} ago", span(in_ms.unsigned_abs()))
    }
}

fn summary(
    record: &LeaseRecord,
    lease_left_ms: Option<i64>,
    answer: Option<&AnswerView>,
    wait: Option<&WaitView>,
    holder: &str,
) -> String {
    match record.state {
        LeaseState::Running if wait.is_some() => match lease_left_ms {
            Some(left) if left >= 0 => format!("{holder} is polling the provider's work in progress"),
            _ => "a poll was taken and its lease expired (the poller stopped): the next copy polls again".into(),
        },
        LeaseState::Running => match lease_left_ms {
            Some(left) if left >= 0 => format!("{holder} is running the provider"),
            _ => "the provider was started and its lease expired (the execution stopped): the next copy takes over"
                .into(),
        },
        LeaseState::Waiting => "the provider answered in progress; nobody holds the lease until the next poll".into(),
        LeaseState::Left => "a primary on standby took the lease before its control answered and gave it back unused: \
             as if never taken, the fence kept"
            .into(),
        LeaseState::Committed => match (answer, record.delivered) {
            (Some(answer), true) => format!("answered {} and delivered; later copies are dropped", answer.status),
            (Some(answer), false) => {
                format!(
                    "answered {} but not delivered yet: the next copy to arrive PUTs the stored answer",
                    answer.status
                )
            }
            (None, _) => "committed without a stored answer (written by hand?)".into(),
        },
    }
}

/// [`summary`] for a wait-condition work.
fn work_summary(
    record: &LeaseRecord,
    lease_left_ms: Option<i64>,
    signal: Option<&SignalView>,
    wait: Option<&WaitView>,
    holder: &str,
) -> String {
    match record.state {
        LeaseState::Running if wait.is_some() => match lease_left_ms {
            Some(left) if left >= 0 => format!("{holder} is polling the work's provider"),
            _ => "a poll of the work was taken and its lease expired (the poller stopped): the next copy polls again"
                .into(),
        },
        LeaseState::Running => match lease_left_ms {
            Some(left) if left >= 0 => format!("{holder} is running the work's provider (or closing the work)"),
            _ => "the work's provider was started and its lease expired (the execution stopped): the next copy takes over"
                .into(),
        },
        LeaseState::Waiting => "the work's provider answered in progress; nobody holds the lease until the next poll, \
             and the wait condition waits for the signal"
            .into(),
        LeaseState::Left => "a primary on standby took the work's lease before its control answered and gave it back \
             unused: as if never taken, the fence kept"
            .into(),
        LeaseState::Committed => match (signal, record.delivered) {
            (Some(signal), true) if record.unsent.is_some() => format!(
                "signalled {} but never sent: its handle had expired or refused it; the work is done, later copies are dropped",
                signal.status
            ),
            (Some(signal), true) => {
                format!("signalled {} to the wait condition and delivered; later copies are dropped", signal.status)
            }
            (Some(signal), false) => format!(
                "signalled {} but not delivered yet: the next copy to arrive PUTs the stored signal",
                signal.status
            ),
            (None, _) => "committed without a stored signal (written by hand?)".into(),
        },
    }
}

#[cfg(test)]
mod tests {
    use cfn_once_core::fingerprint::Fingerprint;
    use cfn_once_core::lease::{PollRecord, RequestLabel};
    use cfn_once_core::request::{RequestKey, StackArn};
    use serde_json::json;

    use super::*;

    const NOW: u64 = 1_800_000_000_000;

    fn work(state: LeaseState, response: Option<Vec<u8>>, poll: Option<PollRecord>) -> LeaseRecord {
        LeaseRecord {
            format: cfn_once_core::lease::RECORD_FORMAT,
            key: RequestKey {
                stack_id: StackArn::parse("arn:aws:cloudformation:us-east-2:123456789012:stack/s/g").expect("ARN"),
                request_id: "cfn-once-work:0123456789abcdef".into(),
            },
            fence: 7,
            owner: "us-west-2/inv/n".into(),
            lease_until_ms: NOW - 1,
            heartbeat: 0,
            state,
            fingerprint: Fingerprint::from_stored("a".into()),
            attempts: [Fingerprint::from_stored("a".into())].into(),
            sent_ms: NOW - 7_200_000,
            response,
            delivered: false,
            unsent: None,
            created_ms: NOW - 7_200_000,
            updated_ms: NOW - 1_000,
            expires_ms: NOW + 1,
            poll,
            label: RequestLabel {
                logical_resource_id: "Backfill".into(),
                request_type: "Create".into(),
                resource_type: "Custom::Echo".into(),
                replaces: String::new(),
            },
            writer: None,
        }
    }

    #[test]
    fn a_work_is_told_by_its_polls_and_then_by_its_signal() {
        let poll = PollRecord {
            fingerprint: Fingerprint::from_stored("a".into()),
            state: r#"{"Message":"copying"}"#.into(),
            poll_at_ms: NOW + 44_000,
            waiting_since_ms: NOW - 7_100_000,
            polls: 160,
        };
        let waiting = RecordView::of(&work(LeaseState::Waiting, None, Some(poll.clone())), NOW);
        assert!(waiting.work && waiting.signal.is_none() && waiting.answer.is_none());
        assert!(waiting.summary.contains("the wait condition waits for the signal"), "{}", waiting.summary);
        let text = waiting.render();
        println!("{text}");
        assert!(text.contains("work      the wait condition work of Backfill"), "{text}");
        assert!(text.contains("160 polls, next poll in 44 s"), "{text}");

        let signal = json!({
            "Status": "FAILURE",
            "Reason": "Custom::Echo Delete: the resource was deleted while its work ran; the work was stopped and is not polled again",
            "UniqueId": "Backfill",
            "Data": r#"{"Secret":"s3cr3t"}"#,
        });
        let mut committed = work(LeaseState::Committed, Some(signal.to_string().into_bytes()), Some(poll));
        let view = RecordView::of(&committed, NOW);
        let shown = view.signal.as_ref().expect("a signal");
        assert_eq!((shown.status.as_str(), shown.unique_id.as_str(), shown.data_bytes), ("FAILURE", "Backfill", 19));
        assert!(view.answer.is_none(), "a signal is not read as a CloudFormation response");
        assert!(view.summary.starts_with("signalled FAILURE but not delivered yet"), "{}", view.summary);
        let text = view.render();
        println!("{text}");
        assert!(text.contains("Reason: Custom::Echo Delete: the resource was deleted while its work ran"), "{text}");
        assert!(text.contains("delivered no: the next copy to arrive PUTs it"), "{text}");
        let json = serde_json::to_string(&view).expect("JSON");
        assert!(!text.contains("s3cr3t") && !json.contains("s3cr3t"), "the work's Data is counted, not shown");

        committed.delivered = true;
        let view = RecordView::of(&committed, NOW);
        assert!(view.summary.starts_with("signalled FAILURE to the wait condition and delivered"), "{}", view.summary);
        assert!(view.render().contains("delivered yes: PUT to the wait condition's handle"));
        committed.unsent =
            Some("not sent: the wait condition handle's presigned URL expired at 2027-01-16T07:59:59.000Z".into());
        let view = RecordView::of(&committed, NOW);
        assert!(view.summary.starts_with("signalled FAILURE but never sent"), "{}", view.summary);
        assert!(
            view.render().contains("delivered never: not sent: the wait condition handle's presigned URL expired at"),
            "{}",
            view.render()
        );
    }

    #[test]
    fn the_record_says_which_version_wrote_it_last() {
        let mut record = work(LeaseState::Running, None, None);
        let older = RecordView::of(&record, NOW).render();
        assert!(
            older.contains("record    format 2, created") && older.contains("by a version before 0.2.0"),
            "{older}"
        );
        record.writer = Some(cfn_once_core::lease::writer_stamp(record.updated_ms));
        let view = RecordView::of(&record, NOW);
        assert_eq!(view.written_by.as_deref(), Some(cfn_once_core::build::VERSION));
        let text = view.render();
        assert!(text.contains(&format!("by cfn-once {}", cfn_once_core::build::VERSION)), "{text}");
        // A stamp older than the record's last write: an older handler wrote since.
        record.updated_ms += 1;
        assert!(RecordView::of(&record, NOW).render().contains("by a version before 0.2.0"));
    }
}
