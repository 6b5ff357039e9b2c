//! Reading a dead-letter queue without losing anything: every message is received and held
//! invisible (`hold_all`) while the tool looks at it, then released (visible again at once) or
//! moved. SQS cannot be searched by content, so this is the only way to tell which requests'
//! copies sit there; the queue's own counts say how many.

use anyhow::anyhow;
use aws_sdk_sqs::error::DisplayErrorContext;
use aws_sdk_sqs::types::{MessageAttributeValue, MessageSystemAttributeName};
use cfn_once::adapters::sqs_queue::dead_letter_attribute;
use cfn_once_core::vocabulary::DeadLetterCause;

use crate::{Identified, QueueTarget, identify};
// A queue's counts are read where the local queues are made; their path here stays.
pub use crate::aws::{Depth, depth};

/// How long the tools hold a DLQ message while they look at it.
pub const HOLD_S: i32 = 120;

/// One message held from a DLQ.
#[derive(Debug, Clone)]
pub struct DlqMessage {
    pub message_id: String,
    pub receipt_handle: String,
    /// The body as sent: it holds the ResponseURL, so it is re-sent but never shown.
    pub body: String,
    pub identified: Option<Identified>,
    /// `cfn-once-reason`: why the handler moved it (none: SQS moved it after maxReceiveCount).
    pub reason: Option<String>,
    pub cause: Option<DeadLetterCause>,
    /// `cfn-once-source-queue`: the queue it came from.
    pub source_queue_arn: Option<String>,
    /// When the request was first sent: `cfn-once-sent-ms`, else the DLQ message's own
    /// SentTimestamp (SQS keeps it when it moves a message).
    pub sent_ms: Option<u64>,
    /// Receives before it was moved, as the handler recorded them.
    pub receive_count: Option<u32>,
}

/// Receives that may come back empty while the DLQ's counts still show visible messages,
/// before [`hold_all`] stops and says so. SQS samples a subset of its servers on each receive,
/// so an empty answer does not mean an empty queue; a long-polled receive asks them all.
pub const EMPTY_RECEIVES_MAX: u32 = 10;

/// What [`hold_all`] held, and what the DLQ's counts said when it stopped.
#[derive(Debug, Clone, Default)]
pub struct Held {
    pub messages: Vec<DlqMessage>,
    /// The DLQ's counts once everything that could be received was held: `visible` is what was
    /// left unread (over `max`, or SQS did not hand it out), `in_flight` includes the held.
    pub left: Depth,
}

impl Held {
    /// "held 12 of the DLQ's messages; 0 visible, 12 in flight, 0 delayed left".
    pub fn summary(&self, dlq: &str) -> String {
        let left = &self.left;
        let unread = if left.visible > 0 {
            format!("; {} visible message(s) were not read: run the command again", left.visible)
        } else {
            String::new()
        };
        format!(
            "{dlq}: held {} message(s); its counts then: {} visible, {} in flight (the held among them), {} delayed{unread}",
            self.messages.len(),
            left.visible,
            left.in_flight,
            left.delayed
        )
    }
}

/// Receives every message of `queue`'s DLQ (at most `max`), holding each invisible for
/// [`HOLD_S`]. Release or move them before the hold ends, or they reappear by themselves. An
/// empty receive is not taken as an empty queue: reading goes on, long-polled, until the
/// queue's counts show nothing visible, at most [`EMPTY_RECEIVES_MAX`] empty receives in a row.
pub async fn hold_all(sqs: &aws_sdk_sqs::Client, queue: &QueueTarget, max: usize) -> anyhow::Result<Held> {
    let mut held = Vec::new();
    let mut empty_receives = 0;
    loop {
        if held.len() >= max {
            break;
        }
        let output = sqs
            .receive_message()
            .queue_url(&queue.dlq_url)
            .max_number_of_messages(10)
            .visibility_timeout(HOLD_S)
            // After an empty answer, a long poll, which asks every SQS server of the queue.
            .wait_time_seconds(if empty_receives == 0 { 0 } else { 1 })
            .message_system_attribute_names(MessageSystemAttributeName::All)
            .message_attribute_names("All")
            .send()
            .await
            .map_err(|e| anyhow!("ReceiveMessage on {}: {}", queue.dlq_url, DisplayErrorContext(&e)))?;
        let messages = output.messages.unwrap_or_default();
        if messages.is_empty() {
            empty_receives += 1;
            if depth(sqs, &queue.dlq_url).await?.visible == 0 || empty_receives >= EMPTY_RECEIVES_MAX {
                break;
            }
            continue;
        }
        empty_receives = 0;
        for message in messages {
            let attributes = message.message_attributes.clone().unwrap_or_default();
            let text = |name: &str| attributes.get(name).and_then(|value| value.string_value.clone());
            let own_sent_ms = message
                .attributes
                .as_ref()
                .and_then(|a| a.get(&MessageSystemAttributeName::SentTimestamp))
                .and_then(|value| value.parse::<u64>().ok());
            let body = message.body.clone().unwrap_or_default();
            held.push(DlqMessage {
                message_id: message.message_id.clone().unwrap_or_default(),
                receipt_handle: message.receipt_handle.clone().unwrap_or_default(),
                identified: identify(&body),
                body,
                reason: text(dead_letter_attribute::REASON),
                cause: text(dead_letter_attribute::CAUSE).as_deref().and_then(DeadLetterCause::parse),
                source_queue_arn: text(dead_letter_attribute::SOURCE_QUEUE),
                sent_ms: text(dead_letter_attribute::SENT_MS).and_then(|v| v.parse().ok()).or(own_sent_ms),
                receive_count: text(dead_letter_attribute::RECEIVE_COUNT).and_then(|v| v.parse().ok()),
            });
        }
    }
    let left = depth(sqs, &queue.dlq_url).await?;
    Ok(Held { messages: held, left })
}

/// Makes held messages visible again at once.
pub async fn release(sqs: &aws_sdk_sqs::Client, queue: &QueueTarget, messages: &[DlqMessage]) -> anyhow::Result<()> {
    for message in messages {
        sqs.change_message_visibility()
            .queue_url(&queue.dlq_url)
            .receipt_handle(&message.receipt_handle)
            .visibility_timeout(0)
            .send()
            .await
            .map_err(|e| anyhow!("ChangeMessageVisibility on {}: {}", queue.dlq_url, DisplayErrorContext(&e)))?;
    }
    Ok(())
}

/// Sends `message`'s body to `queue_url` with `to`, a client of that queue's region (for a
/// delivery DLQ another region than the DLQ's, whose client is `sqs`), carrying when the request
/// was first sent, then deletes it from `queue`'s DLQ. A crash between the two leaves a copy in
/// both, which is safe: duplicates are answered once.
pub async fn move_back(
    sqs: &aws_sdk_sqs::Client,
    queue: &QueueTarget,
    to: &aws_sdk_sqs::Client,
    queue_url: &str,
    message: &DlqMessage,
) -> anyhow::Result<()> {
    let mut send = to.send_message().queue_url(queue_url).message_body(&message.body);
    if let Some(sent_ms) = message.sent_ms {
        let attribute = MessageAttributeValue::builder()
            .data_type("String")
            .string_value(sent_ms.to_string())
            .build()
            .map_err(|e| anyhow!("message attribute: {e}"))?;
        send = send.message_attributes(dead_letter_attribute::SENT_MS, attribute);
    }
    send.send().await.map_err(|e| anyhow!("SendMessage to {queue_url}: {}", DisplayErrorContext(&e)))?;
    sqs.delete_message()
        .queue_url(&queue.dlq_url)
        .receipt_handle(&message.receipt_handle)
        .send()
        .await
        .map_err(|e| anyhow!("DeleteMessage on {}: {}", queue.dlq_url, DisplayErrorContext(&e)))?;
    Ok(())
}
