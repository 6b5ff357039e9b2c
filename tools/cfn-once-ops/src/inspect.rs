//! `cfn-once inspect`: what happened to a request. Its lease record in words (`view`), each
//! handler region's queue and DLQ counts and each customer region's delivery DLQs' (what SNS
//! could not deliver), and which copies of it sit in a DLQ and why, with the alarm a delivery
//! DLQ's arrival fires (read by holding the DLQ's messages for a moment, then releasing them). By RequestId, or the latest
//! requests of a logical resource in a stack. A request answered at once because its resource
//! has a wait condition (its answer's Data says `CfnOnceWork`) is followed by its work's record,
//! the same attempt's, which holds the provider's progress and the signal.

use anyhow::Context;
use cfn_once::adapters::dynamodb_lease::DynamoLeaseStore;
use cfn_once::system_clock::SystemClock;
use cfn_once_core::clock::Clock;
use cfn_once_core::lease::{LeaseRecord, LeaseState, LeaseStore};
use cfn_once_core::request::{RequestKey, StackArn};
use cfn_once_core::response::ResponseBody;
use cfn_once_core::wait_condition::{WORK_DATA_NAME, is_work_id};
use serde::Serialize;

use crate::dlq::{self, Depth, DlqMessage};
use crate::text::terminal_safe;
use crate::view::RecordView;
use crate::{DeliveryTarget, OpsTarget, utc};

/// Which requests to inspect.
#[derive(Debug, Clone)]
pub struct InspectOptions {
    pub stack_id: String,
    /// One request; or else the latest of `logical_id`.
    pub request_id: Option<String>,
    pub logical_id: Option<String>,
    /// How many of a logical resource's latest requests.
    pub limit: usize,
    /// Look into the DLQs for copies (holds their messages for a moment).
    pub dead_letters: bool,
}

/// What `inspect` found.
#[derive(Debug, Clone, Serialize)]
pub struct InspectReport {
    pub requests: Vec<Inspection>,
    pub queues: Vec<QueueCounts>,
    /// The delivery dead-letter queues' counts.
    pub deliveries: Vec<DeliveryCounts>,
    /// Per DLQ read (with `--dead-letters`), how many messages were held and what was left.
    pub dead_letters_read: Vec<String>,
}

/// One request.
#[derive(Debug, Clone, Serialize)]
pub struct Inspection {
    pub stack_id: String,
    pub request_id: String,
    /// `None`: no handler has taken the request yet (or the sweeper deleted its record).
    pub record: Option<RecordView>,
    /// Copies of it found in the DLQs.
    pub dead_letters: Vec<CopyView>,
}

/// A copy of a request in a DLQ.
#[derive(Debug, Clone, Serialize)]
pub struct CopyView {
    pub region: String,
    pub role: String,
    pub message_id: String,
    /// How the copy's attempt relates to the record's.
    pub attempt: String,
    pub cause: String,
    pub reason: Option<String>,
    pub sent_at: Option<String>,
    pub receive_count: Option<u32>,
    /// For a copy in a delivery DLQ: the alarm its arrival fires.
    pub alarm: Option<String>,
}

/// A customer region's delivery dead-letter queue for one handler role.
#[derive(Debug, Clone, Serialize)]
pub struct DeliveryCounts {
    /// The topic's region.
    pub region: String,
    /// Whose queue its requests missed.
    pub role: String,
    pub dlq: Depth,
    /// The alarm on its arrivals.
    pub alarm: String,
}

/// A handler region's queues.
#[derive(Debug, Clone, Serialize)]
pub struct QueueCounts {
    pub region: String,
    pub role: String,
    pub queue: Depth,
    pub dlq: Depth,
    /// Why the queue's counts could not be read (a deleted queue: the very case a delivery DLQ
    /// catches), the counts then being zeros.
    pub unreadable: Option<String>,
}

/// Inspects the requests `options` names.
pub async fn inspect(target: &OpsTarget, options: &InspectOptions) -> anyhow::Result<InspectReport> {
    let store = target.store().await;
    let records: Vec<(RequestKey, Option<LeaseRecord>)> = match (&options.request_id, &options.logical_id) {
        (Some(request_id), _) => {
            let stack_id = StackArn::parse(&options.stack_id).with_context(|| {
                format!("{:?} is not a stack ARN: name the stack by its StackId (arn:aws:cloudformation:...:stack/<name>/<id>)", options.stack_id)
            })?;
            let key = RequestKey { stack_id, request_id: request_id.clone() };
            let record = store.read(&key).await?;
            vec![(key, record)]
        }
        (None, Some(logical_id)) => {
            let mut records: Vec<LeaseRecord> = store
                .records_of_stack(&options.stack_id)
                .await?
                .into_iter()
                .filter(|record| record.label.logical_resource_id == *logical_id)
                .collect();
            records.sort_by_key(|record| std::cmp::Reverse(record.sent_ms.max(record.created_ms)));
            records.into_iter().take(options.limit.max(1)).map(|record| (record.key.clone(), Some(record))).collect()
        }
        (None, None) => anyhow::bail!("name a request: --request-id ID, or --logical-id ID for its latest requests"),
    };
    let records = with_works(&store, records).await?;
    let now_ms = SystemClock.now_ms();
    let mut queues = Vec::new();
    let mut held: Vec<(usize, DlqMessage)> = Vec::new();
    let mut dead_letters_read = Vec::new();
    for (index, queue) in target.queues.iter().enumerate() {
        let sqs = target.sqs(queue).await;
        let (depth, unreadable) = match dlq::depth(&sqs, &queue.queue_url).await {
            Ok(depth) => (depth, None),
            // The SDK's error, without its debug dump of the response.
            Err(error) => {
                let text = error.to_string();
                let short = text.split(" (ServiceError").next().unwrap_or_default();
                (Depth::default(), Some(terminal_safe(short, 200)))
            }
        };
        queues.push(QueueCounts {
            region: queue.region.clone(),
            role: queue.role.clone(),
            queue: depth,
            dlq: dlq::depth(&sqs, &queue.dlq_url).await?,
            unreadable,
        });
        if options.dead_letters {
            let read = dlq::hold_all(&sqs, queue, 10_000).await?;
            dead_letters_read.push(read.summary(&format!("{} {} DLQ", queue.region, queue.role)));
            let messages = read.messages;
            let released = dlq::release(&sqs, queue, &messages).await;
            held.extend(messages.into_iter().map(|message| (index, message)));
            released?;
        }
    }
    let mut deliveries = Vec::new();
    let mut undelivered: Vec<(usize, DlqMessage)> = Vec::new();
    for (index, delivery) in target.deliveries.iter().enumerate() {
        let sqs = target.sqs_in(&delivery.region).await;
        let queue = delivery.as_queue("");
        deliveries.push(DeliveryCounts {
            region: delivery.region.clone(),
            role: delivery.role.clone(),
            dlq: dlq::depth(&sqs, &delivery.dlq_url).await?,
            alarm: delivery.alarm.clone(),
        });
        if options.dead_letters {
            let read = dlq::hold_all(&sqs, &queue, 10_000).await?;
            dead_letters_read
                .push(read.summary(&format!("{} delivery DLQ for the {} queue", delivery.region, delivery.role)));
            let messages = read.messages;
            let released = dlq::release(&sqs, &queue, &messages).await;
            undelivered.extend(messages.into_iter().map(|message| (index, message)));
            released?;
        }
    }
    let requests =
        records
            .into_iter()
            .map(|(key, record)| {
                let of_this = |message: &DlqMessage| message.identified.as_ref().is_some_and(|found| found.key == key);
                let dead_letters =
                    held.iter()
                        .filter(|(_, message)| of_this(message))
                        .map(|(index, message)| copy_view(target, *index, message, record.as_ref()))
                        .chain(undelivered.iter().filter(|(_, message)| of_this(message)).map(|(index, message)| {
                            undelivered_view(&target.deliveries[*index], message, record.as_ref())
                        }))
                        .collect();
                Inspection {
                    stack_id: key.stack_id.to_string(),
                    request_id: key.request_id,
                    record: record.as_ref().map(|record| RecordView::of(record, now_ms)),
                    dead_letters,
                }
            })
            .collect();
    Ok(InspectReport { requests, queues, deliveries, dead_letters_read })
}

/// `records`, each request that handed its work over followed by its work's record (found by
/// a Query of the stack, made only if one did): a work of the same resource and attempt.
async fn with_works(
    store: &DynamoLeaseStore,
    records: Vec<(RequestKey, Option<LeaseRecord>)>,
) -> anyhow::Result<Vec<(RequestKey, Option<LeaseRecord>)>> {
    let handed_over = |record: &LeaseRecord| {
        record.state == LeaseState::Committed
            && !is_work_id(&record.key.request_id)
            && record
                .response
                .as_deref()
                .and_then(|bytes| ResponseBody::parse(bytes).ok())
                .is_some_and(|body| body.data.contains_key(WORK_DATA_NAME))
    };
    let named: Vec<RequestKey> = records.iter().map(|(key, _)| key.clone()).collect();
    let mut stack_records: Option<Vec<LeaseRecord>> = None;
    let mut out: Vec<(RequestKey, Option<LeaseRecord>)> = Vec::with_capacity(records.len());
    for (key, record) in records {
        let works = match record.as_ref().filter(|record| handed_over(record)) {
            Some(request) => {
                if stack_records.is_none() {
                    stack_records = Some(store.records_of_stack(request.key.stack_id.as_str()).await?);
                }
                stack_records
                    .iter()
                    .flatten()
                    .filter(|work| {
                        is_work_id(&work.key.request_id)
                            && work.label.logical_resource_id == request.label.logical_resource_id
                            && work.fingerprint == request.fingerprint
                    })
                    .cloned()
                    .collect()
            }
            None => Vec::new(),
        };
        out.push((key, record));
        for work in works {
            if !named.contains(&work.key) && !out.iter().any(|(listed, _)| *listed == work.key) {
                out.push((work.key.clone(), Some(work)));
            }
        }
    }
    Ok(out)
}

/// A request SNS could not deliver to `delivery.role`'s queue, found in its delivery DLQ.
fn undelivered_view(delivery: &DeliveryTarget, message: &DlqMessage, record: Option<&LeaseRecord>) -> CopyView {
    CopyView {
        region: delivery.region.clone(),
        role: format!("delivery to the {} queue", delivery.role),
        message_id: message.message_id.clone(),
        attempt: attempt(message, record),
        cause: format!(
            "SNS could not deliver it to the {} queue (a client-side error: the queue gone or recreated, or its policy or key refusing the topic), so that region's handler never saw it; `cfn-once redrive` sends it on",
            delivery.role
        ),
        reason: None,
        sent_at: message.sent_ms.map(utc),
        receive_count: None,
        alarm: Some(delivery.alarm.clone()),
    }
}

/// How a DLQ copy's attempt relates to the record's.
fn attempt(message: &DlqMessage, record: Option<&LeaseRecord>) -> String {
    match (&message.identified, record) {
        (Some(found), Some(record)) if found.fingerprint == record.fingerprint => "this record's attempt".into(),
        (Some(found), Some(record)) if record.supersedes(&found.fingerprint, message.sent_ms.unwrap_or(0)) => {
            "an earlier attempt, superseded by the record's: a redriven copy is dropped".into()
        }
        (Some(_), Some(_)) => "an attempt the record has not seen".into(),
        (Some(_), None) => "no record: no handler took this request".into(),
        (None, _) => "unreadable".into(),
    }
}

/// How a DLQ copy relates to the record.
fn copy_view(target: &OpsTarget, index: usize, message: &DlqMessage, record: Option<&LeaseRecord>) -> CopyView {
    let queue = &target.queues[index];
    let attempt = attempt(message, record);
    CopyView {
        region: queue.region.clone(),
        role: queue.role.clone(),
        message_id: message.message_id.clone(),
        attempt,
        cause: match message.cause {
            Some(cause) => cause.as_str().into(),
            None => "moved by SQS (maxReceiveCount)".into(),
        },
        reason: message.reason.as_deref().map(|reason| terminal_safe(reason, 300)),
        sent_at: message.sent_ms.map(utc),
        receive_count: message.receive_count,
        alarm: None,
    }
}

impl InspectReport {
    /// The report as text.
    pub fn render(&self) -> String {
        let mut out = Vec::new();
        for inspection in &self.requests {
            match &inspection.record {
                Some(record) => {
                    out.push(record.render());
                    if record.attempts > 1 {
                        out.push(format!(
                            "          {} attempts reused this RequestId; copies of the earlier ones are superseded and dropped",
                            record.attempts
                        ));
                    }
                }
                None => out.push(format!(
                    "request   {} {}\nstate     no record: no handler has taken this request (not delivered yet, left by a standby primary, or swept)",
                    terminal_safe(&inspection.stack_id, 300),
                    terminal_safe(&inspection.request_id, 300)
                )),
            }
            if inspection.dead_letters.is_empty() {
                out.push("DLQ       no copy".into());
            }
            for copy in &inspection.dead_letters {
                out.push(format!(
                    "DLQ       {} {} ({}): {}; {}{}",
                    copy.region,
                    copy.role,
                    copy.message_id,
                    copy.attempt,
                    copy.cause,
                    copy.reason.as_ref().map_or(String::new(), |reason| format!(": {reason}"))
                ));
                if let Some(alarm) = &copy.alarm {
                    out.push(format!("alarm     {alarm} fires (the delivery DLQ's arrivals, infra/customer.yaml)"));
                }
            }
            out.push(String::new());
        }
        for queue in &self.queues {
            if let Some(why) = &queue.unreadable {
                out.push(format!(
                    "queues    {} {}: cannot read the queue ({why}); SNS cannot deliver to a queue that is gone",
                    queue.region, queue.role
                ));
                continue;
            }
            out.push(format!(
                "queues    {} {}: {} visible, {} in flight, {} delayed; DLQ {} messages",
                queue.region,
                queue.role,
                queue.queue.visible,
                queue.queue.in_flight,
                queue.queue.delayed,
                queue.dlq.visible + queue.dlq.in_flight + queue.dlq.delayed
            ));
        }
        for delivery in &self.deliveries {
            out.push(format!(
                "delivery  {} to the {} queue: DLQ {} messages (alarm {})",
                delivery.region,
                delivery.role,
                delivery.dlq.visible + delivery.dlq.in_flight + delivery.dlq.delayed,
                delivery.alarm
            ));
        }
        out.extend(self.dead_letters_read.iter().map(|read| format!("read      {read}")));
        out.join("\n")
    }
}
