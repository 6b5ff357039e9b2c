//! `cfn-once redrive`: moves dead-lettered messages back to their queue: a handler region's DLQ's
//! to that region's queue, and a customer region's delivery DLQ's (what SNS could not deliver)
//! on to the handler region's queue it missed, in another region. Safe by construction:
//! the handler answers duplicates once (a delivered answer is dropped, a committed one re-sent
//! byte for byte, a superseded attempt dropped), so a redrive can only finish what is
//! unfinished. Each message is identified and its request's record read first, to say what the
//! redriven copy will do; undeliverable ones (nobody can be answered) are left in the DLQ
//! unless asked. The re-sent copy carries when the request was first sent
//! (`cfn-once-sent-ms`), so its deadline still counts from then.

use cfn_once_core::lease::{LeaseRecord, LeaseState, LeaseStore};
use cfn_once_core::response::Status;
use cfn_once_core::vocabulary::DeadLetterCause;
use serde::Serialize;

use crate::dlq::{self, DlqMessage};
use crate::text::terminal_safe;
use crate::{OpsTarget, QueueTarget, utc};

/// How to redrive.
#[derive(Debug, Clone, Copy)]
pub struct RedriveOptions {
    /// Say what would happen; move nothing.
    pub dry_run: bool,
    /// Also move messages nobody can be answered for (they come back to the DLQ).
    pub include_undeliverable: bool,
    /// At most this many messages per DLQ.
    pub max: usize,
}

/// What happened to each message.
#[derive(Debug, Clone, Serialize)]
pub struct RedriveReport {
    pub dry_run: bool,
    /// Per DLQ, what was read of it (`dlq::Held::summary`).
    pub read: Vec<String>,
    pub messages: Vec<Redriven>,
    pub moved: usize,
    pub skipped: usize,
}

/// One DLQ message.
#[derive(Debug, Clone, Serialize)]
pub struct Redriven {
    pub region: String,
    pub role: String,
    pub message_id: String,
    pub stack_id: Option<String>,
    pub request_id: Option<String>,
    pub logical_resource_id: Option<String>,
    pub request_type: Option<String>,
    pub cause: String,
    pub sent_at: Option<String>,
    /// What the request's record says, and so what the redriven copy will do.
    pub record_says: String,
    /// `moved`, `would move`, or `left: ...`.
    pub action: String,
}

/// One DLQ to redrive: read in `queue.region`, sent on to `queue.queue_url` in `to_region`.
struct Source {
    queue: QueueTarget,
    to_region: String,
    /// How the report names the DLQ and its messages' role.
    name: String,
    role: String,
    /// For a delivery DLQ, what happened to its messages.
    cause: Option<String>,
}

/// Every DLQ of `target`: the handler regions', then the delivery DLQs'.
fn sources(target: &OpsTarget) -> anyhow::Result<Vec<Source>> {
    let mut sources: Vec<Source> = target
        .queues
        .iter()
        .map(|queue| Source {
            queue: queue.clone(),
            to_region: queue.region.clone(),
            name: format!("{} {} DLQ", queue.region, queue.role),
            role: queue.role.clone(),
            cause: None,
        })
        .collect();
    for delivery in &target.deliveries {
        let missed = target.queue_of(delivery)?;
        sources.push(Source {
            queue: delivery.as_queue(&missed.queue_url),
            to_region: missed.region.clone(),
            name: format!("{} delivery DLQ for the {} queue", delivery.region, delivery.role),
            role: format!("delivery to the {} queue", delivery.role),
            cause: Some(format!("SNS could not deliver it to the {} queue; sent on to it", delivery.role)),
        });
    }
    Ok(sources)
}

/// Redrives every DLQ of `target`.
pub async fn redrive(target: &OpsTarget, options: RedriveOptions) -> anyhow::Result<RedriveReport> {
    let store = target.store().await;
    let mut report =
        RedriveReport { dry_run: options.dry_run, read: Vec::new(), messages: Vec::new(), moved: 0, skipped: 0 };
    for source in sources(target)? {
        let queue = &source.queue;
        let sqs = target.sqs(queue).await;
        let to = target.sqs_in(&source.to_region).await;
        let held = dlq::hold_all(&sqs, queue, options.max).await?;
        report.read.push(held.summary(&source.name));
        let held = held.messages;
        let mut leave = Vec::new();
        for message in &held {
            let record = match &message.identified {
                Some(found) => store.read(&found.key).await?,
                None => None,
            };
            let work = match message.identified.as_ref().and_then(|found| found.work_key.as_ref()) {
                Some(key) => store.read(key).await?,
                None => None,
            };
            let (record_says, deliverable) = expectation(message, record.as_ref(), work.as_ref());
            let undeliverable = !deliverable || message.cause == Some(DeadLetterCause::Undeliverable);
            let action = if undeliverable && !options.include_undeliverable {
                leave.push(message.clone());
                report.skipped += 1;
                "left: nobody can be answered (--include-undeliverable moves it anyway)".to_owned()
            } else if options.dry_run {
                leave.push(message.clone());
                "would move".to_owned()
            } else {
                dlq::move_back(&sqs, queue, &to, &queue.queue_url, message).await?;
                report.moved += 1;
                "moved".to_owned()
            };
            let found = message.identified.as_ref();
            report.messages.push(Redriven {
                region: queue.region.clone(),
                role: source.role.clone(),
                message_id: message.message_id.clone(),
                stack_id: found.map(|found| terminal_safe(&found.key.stack_id, 300)),
                request_id: found.map(|found| terminal_safe(&found.key.request_id, 300)),
                logical_resource_id: found.map(|found| terminal_safe(&found.logical_resource_id, 300)),
                request_type: found.map(|found| terminal_safe(&found.request_type, 20)),
                cause: match &source.cause {
                    Some(cause) => cause.clone(),
                    None => message.cause.map_or("moved by SQS (maxReceiveCount)", DeadLetterCause::as_str).to_owned(),
                },
                sent_at: message.sent_ms.map(utc),
                record_says,
                action,
            });
        }
        dlq::release(&sqs, queue, &leave).await?;
    }
    Ok(report)
}

/// What the record says about `message`'s request (and `work`, the record of the work a request
/// with a wait condition hands past its answer), and whether anyone can be answered.
fn expectation(message: &DlqMessage, record: Option<&LeaseRecord>, work: Option<&LeaseRecord>) -> (String, bool) {
    let Some(found) = &message.identified else {
        return ("unreadable: it names no request".into(), false);
    };
    let Some(record) = record.filter(|record| record.state != LeaseState::Left) else {
        return ("no handler took it yet: the redriven copy runs it if its deadline allows".into(), true);
    };
    if record.fingerprint != found.fingerprint {
        return if record.supersedes(&found.fingerprint, message.sent_ms.unwrap_or(0)) {
            ("superseded by a newer attempt with the same RequestId: the redriven copy is dropped".into(), true)
        } else {
            ("a newer attempt than the record's: the redriven copy runs it".into(), true)
        };
    }
    let handed_over = found.work_key.is_some()
        && record.state == LeaseState::Committed
        && record.response.as_deref().map(cfn_once_core::response::status_of) == Some(Status::Success);
    let says = match (record.state, record.delivered) {
        (LeaseState::Committed, true) if handed_over => match work.map(|work| (work.state, work.delivered)) {
            Some((LeaseState::Committed, true)) => "answered, and its work signalled: the redriven copy is dropped",
            Some((LeaseState::Committed, false)) => {
                "answered; its work's signal committed but not delivered: the redriven copy PUTs the stored signal"
            }
            Some((LeaseState::Waiting, _)) => {
                "answered; its work is in progress (waiting for a poll): the redriven copy joins the polls"
            }
            _ => "answered; its work has not signalled yet: the redriven copy goes on to the work",
        },
        (LeaseState::Committed, true) => "answered and delivered: the redriven copy is dropped",
        (LeaseState::Committed, false) => "answered but not delivered: the redriven copy PUTs the stored answer",
        (LeaseState::Waiting, _) => "in progress (waiting for a poll): the redriven copy joins the polls",
        (LeaseState::Running, _) => "running or abandoned: the redriven copy backs off or takes over",
        (LeaseState::Left, _) => "no handler took it yet: the redriven copy runs it if its deadline allows",
    };
    let late = message.cause == Some(DeadLetterCause::DeadlinePassed) && record.state != LeaseState::Committed;
    let says = if late {
        format!("{says}; its deadline has passed, so without a committed answer it returns to the DLQ")
    } else {
        says.to_owned()
    };
    (says, true)
}

impl RedriveReport {
    /// The report as text.
    pub fn render(&self) -> String {
        let mut out = Vec::new();
        for message in &self.messages {
            out.push(format!(
                "{} {} {}  {} {} {} [{}]",
                message.region,
                message.role,
                message.message_id,
                message.request_type.as_deref().unwrap_or("?"),
                message.logical_resource_id.as_deref().unwrap_or("?"),
                message.stack_id.as_deref().unwrap_or("?"),
                message.request_id.as_deref().unwrap_or("?"),
            ));
            out.push(format!(
                "    dead-lettered: {}; sent {}",
                message.cause,
                message.sent_at.as_deref().unwrap_or("?")
            ));
            out.push(format!("    record: {}", message.record_says));
            out.push(format!("    {}", message.action));
        }
        out.extend(self.read.iter().cloned());
        out.push(format!(
            "{} message(s) {}, {} left in the DLQ{}",
            if self.dry_run { self.messages.len() - self.skipped } else { self.moved },
            if self.dry_run { "would move" } else { "moved" },
            if self.dry_run { self.messages.len() } else { self.skipped },
            if self.dry_run { " (dry run: nothing moved)" } else { "" }
        ));
        out.join("\n")
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    /// A DLQ copy of a Create that names a wait condition handle.
    fn message() -> DlqMessage {
        let request = json!({
            "RequestType": "Create",
            "StackId": "arn:aws:cloudformation:us-east-1:123456789012:stack/s/g",
            "RequestId": "r-1",
            "LogicalResourceId": "Backfill",
            "ResourceProperties": {"CfnOnceWaitHandle": "https://cloudformation-waitcondition-us-east-1.s3.amazonaws.com/h?X-Amz-Signature=s"},
        });
        let body = request.to_string();
        DlqMessage {
            message_id: "m".into(),
            receipt_handle: "r".into(),
            identified: crate::identify(&body),
            body,
            reason: None,
            cause: None,
            source_queue_arn: None,
            sent_ms: Some(1),
            receive_count: None,
        }
    }

    fn record(
        key: &cfn_once_core::request::RequestKey,
        fingerprint: &cfn_once_core::fingerprint::Fingerprint,
        state: LeaseState,
        delivered: bool,
        response: &[u8],
    ) -> LeaseRecord {
        let left = cfn_once_core::lease::left_record(key, 1, None, 1, 2);
        LeaseRecord { state, delivered, fingerprint: fingerprint.clone(), response: Some(response.to_vec()), ..left }
    }

    #[test]
    fn a_copy_whose_answer_handed_its_work_over_is_told_by_the_work() {
        let message = message();
        let found = message.identified.clone().expect("identified");
        let work_key = found.work_key.clone().expect("a Create naming a handle has a work");
        assert!(cfn_once_core::wait_condition::is_work_id(&work_key.request_id));
        let body = |status: &str| {
            json!({"Status": status, "PhysicalResourceId": "p", "StackId": "s", "RequestId": "r-1", "LogicalResourceId": "Backfill", "NoEcho": false})
                .to_string()
                .into_bytes()
        };
        let answer = record(&found.key, &found.fingerprint, LeaseState::Committed, true, &body("SUCCESS"));
        let says = |work: Option<&LeaseRecord>| expectation(&message, Some(&answer), work).0;
        assert!(says(None).contains("goes on to the work"), "{}", says(None));
        let waiting = record(&work_key, &found.fingerprint, LeaseState::Waiting, false, b"");
        assert!(says(Some(&waiting)).contains("joins the polls"));
        let signalled = record(&work_key, &found.fingerprint, LeaseState::Committed, true, b"{}");
        assert!(says(Some(&signalled)).contains("signalled: the redriven copy is dropped"));
        // A FAILED answer handed nothing over.
        let failed = record(&found.key, &found.fingerprint, LeaseState::Committed, true, &body("FAILED"));
        assert!(expectation(&message, Some(&failed), None).0.starts_with("answered and delivered"));
    }
}
