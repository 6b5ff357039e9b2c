//! What happens to a message after its batch: rescheduled with ChangeMessageVisibility, or moved
//! to its queue's dead-letter queue by the handler itself.
//!
//! [`SqsQueue`] is the adapter of the core's `batch::MessageQueue` port, which the batch settles
//! records through. A record names its queue by ARN (`eventSourceARN`); the queue's URL, and the DLQ its
//! redrive policy names, are looked up once per queue ARN and cached, so the adapter works for
//! any queue the event source mapping polls, in AWS and on a local endpoint alike.
//!
//! Why the handler moves messages itself: the regional template sets the queue's
//! `maxReceiveCount` to SQS's largest value, 1000, so that backoffs never push a live request's
//! message into the DLQ (see `cfn_once_core::settings`). A message nobody can ever answer, or
//! whose request's deadline has passed, would then take a thousand receives to get there; the
//! handler sends it to the DLQ at once instead, with attributes saying why and from where.

use std::collections::HashMap;
use std::sync::Mutex;

use async_trait::async_trait;
use aws_lambda_events::event::sqs::SqsMessage;
use aws_sdk_sqs::Client;
use aws_sdk_sqs::types::{ChangeMessageVisibilityBatchRequestEntry, MessageAttributeValue, QueueAttributeName};
use cfn_once_core::batch::{MessageQueue, QueueError};
use cfn_once_core::vocabulary::DeadLetterCause;

/// Message attributes the handler puts on a message it dead-letters.
pub mod dead_letter_attribute {
    /// Why the message was dead-lettered (never contains the ResponseURL).
    pub const REASON: &str = "cfn-once-reason";
    /// The ARN of the queue it came from, where a redrive sends it back.
    pub const SOURCE_QUEUE: &str = "cfn-once-source-queue";
    /// When the request was first sent (epoch ms): the original message's SentTimestamp, or
    /// the value it carried itself if it was redriven. A redriven message carries it too, so
    /// its deadline still counts from the first send (see [`super::original_sent_ms`]).
    pub const SENT_MS: &str = "cfn-once-sent-ms";
    /// `undeliverable` or `deadline-passed` (`DeadLetterCause`).
    pub const CAUSE: &str = "cfn-once-cause";
    /// The original message's ApproximateReceiveCount when it was moved.
    pub const RECEIVE_COUNT: &str = "cfn-once-receive-count";
}

/// Longest `why` put on a dead-lettered message (SQS allows 256 KiB; operators read a line).
const REASON_BYTES_MAX: usize = 1_000;

/// The SQS adapter.
#[derive(Debug)]
pub struct SqsQueue {
    client: Client,
    /// Queue ARN to queue URL.
    urls: Mutex<HashMap<String, String>>,
    /// Queue ARN to its dead-letter queue's ARN.
    dead_letter_queues: Mutex<HashMap<String, String>>,
}

impl SqsQueue {
    /// An adapter using `client`, which must be configured for the queues' region and carry
    /// explicit timeouts (`app::sqs_client`).
    pub fn new(client: Client) -> Self {
        Self { client, urls: Mutex::default(), dead_letter_queues: Mutex::default() }
    }

    async fn queue_url(&self, queue_arn: &str) -> Result<String, QueueError> {
        if let Some(url) = cached(&self.urls, queue_arn) {
            return Ok(url);
        }
        let (account, name) = parse_queue_arn(queue_arn).ok_or_else(|| QueueError::BadArn(queue_arn.to_owned()))?;
        let output = self
            .client
            .get_queue_url()
            .queue_name(name)
            .queue_owner_aws_account_id(account)
            .send()
            .await
            .map_err(|error| QueueError::Sqs(crate::aws::brief(&error)))?;
        let url = output.queue_url.ok_or_else(|| QueueError::Sqs("GetQueueUrl returned no URL".into()))?;
        remember(&self.urls, queue_arn, &url);
        Ok(url)
    }

    /// The ARN of the DLQ in `queue_arn`'s redrive policy.
    async fn dead_letter_queue(&self, queue_arn: &str) -> Result<String, QueueError> {
        if let Some(arn) = cached(&self.dead_letter_queues, queue_arn) {
            return Ok(arn);
        }
        let url = self.queue_url(queue_arn).await?;
        let output = self
            .client
            .get_queue_attributes()
            .queue_url(url)
            .attribute_names(QueueAttributeName::RedrivePolicy)
            .send()
            .await
            .map_err(|error| QueueError::Sqs(crate::aws::brief(&error)))?;
        let policy = output.attributes.and_then(|mut attributes| attributes.remove(&QueueAttributeName::RedrivePolicy));
        let arn = policy
            .as_deref()
            .and_then(|policy| serde_json::from_str::<serde_json::Value>(policy).ok())
            .and_then(|policy| policy.get("deadLetterTargetArn")?.as_str().map(str::to_owned))
            .ok_or_else(|| QueueError::NoDeadLetterQueue(queue_arn.to_owned()))?;
        remember(&self.dead_letter_queues, queue_arn, &arn);
        Ok(arn)
    }
}

#[async_trait]
impl MessageQueue for SqsQueue {
    type Message = SqsMessage;

    async fn retry_after(&self, record: &SqsMessage, delay_s: u32) -> Result<(), QueueError> {
        let queue_arn = record.event_source_arn.as_deref().ok_or(QueueError::Missing("eventSourceARN"))?;
        let receipt_handle = record.receipt_handle.as_deref().ok_or(QueueError::Missing("receiptHandle"))?;
        let queue_url = self.queue_url(queue_arn).await?;
        self.client
            .change_message_visibility()
            .queue_url(queue_url)
            .receipt_handle(receipt_handle)
            .visibility_timeout(i32::try_from(delay_s).unwrap_or(i32::MAX))
            .send()
            .await
            .map_err(|error| QueueError::Sqs(crate::aws::brief(&error)))?;
        Ok(())
    }

    async fn set_visibility(&self, records: &[(&SqsMessage, u32)]) -> Result<(), QueueError> {
        // The batch's records all come from one queue (one event source mapping per function).
        let Some((first, _)) = records.first() else { return Ok(()) };
        let queue_arn = first.event_source_arn.as_deref().ok_or(QueueError::Missing("eventSourceARN"))?;
        let queue_url = self.queue_url(queue_arn).await?;
        for chunk in records.chunks(10) {
            let mut entries = Vec::with_capacity(chunk.len());
            for (index, (record, delay_s)) in chunk.iter().enumerate() {
                let receipt_handle = record.receipt_handle.as_deref().ok_or(QueueError::Missing("receiptHandle"))?;
                let entry = ChangeMessageVisibilityBatchRequestEntry::builder()
                    .id(index.to_string())
                    .receipt_handle(receipt_handle)
                    .visibility_timeout(i32::try_from(*delay_s).unwrap_or(i32::MAX))
                    .build()
                    .map_err(|error| QueueError::Sqs(error.to_string()))?;
                entries.push(entry);
            }
            let output = self
                .client
                .change_message_visibility_batch()
                .queue_url(&queue_url)
                .set_entries(Some(entries))
                .send()
                .await
                .map_err(|error| QueueError::Sqs(crate::aws::brief(&error)))?;
            if let Some(failure) = output.failed.first() {
                return Err(QueueError::Sqs(format!(
                    "{} of {} entries refused, e.g. {}: {}",
                    output.failed.len(),
                    chunk.len(),
                    failure.code,
                    failure.message.as_deref().unwrap_or("no message")
                )));
            }
        }
        Ok(())
    }

    async fn dead_letter(&self, record: &SqsMessage, why: &str, cause: DeadLetterCause) -> Result<(), QueueError> {
        let queue_arn = record.event_source_arn.as_deref().ok_or(QueueError::Missing("eventSourceARN"))?;
        let dead_letter_url = self.queue_url(&self.dead_letter_queue(queue_arn).await?).await?;
        let string = |value: &str| {
            MessageAttributeValue::builder()
                .data_type("String")
                .string_value(value)
                .build()
                .map_err(|error| QueueError::Sqs(error.to_string()))
        };
        let mut send = self
            .client
            .send_message()
            .queue_url(dead_letter_url)
            .message_body(record.body.clone().unwrap_or_default())
            .message_attributes(dead_letter_attribute::REASON, string(bounded(why))?)
            .message_attributes(dead_letter_attribute::SOURCE_QUEUE, string(queue_arn)?)
            .message_attributes(dead_letter_attribute::CAUSE, string(cause.as_str())?);
        if let Some(sent_ms) = original_sent_ms(record) {
            send = send.message_attributes(dead_letter_attribute::SENT_MS, string(&sent_ms.to_string())?);
        }
        if let Some(count) = record.attributes.get("ApproximateReceiveCount") {
            send = send.message_attributes(dead_letter_attribute::RECEIVE_COUNT, string(count)?);
        }
        send.send().await.map_err(|error| QueueError::Sqs(crate::aws::brief(&error)))?;
        Ok(())
    }
}

/// When the record's request was first sent: its SentTimestamp, or the earlier time a redriven
/// message carries in `cfn-once-sent-ms` (a redrive re-sends the body, which gives it a new
/// SentTimestamp). Only ever earlier: an attribute can bring the deadline closer, never push it
/// away, and only principals the queue policy admits can send one.
pub fn original_sent_ms(record: &SqsMessage) -> Option<u64> {
    let sent_ms = record.attributes.get("SentTimestamp").and_then(|value| value.parse::<u64>().ok());
    let carried = record
        .message_attributes
        .get(dead_letter_attribute::SENT_MS)
        .and_then(|attribute| attribute.string_value.as_deref())
        .and_then(|value| value.parse::<u64>().ok());
    match (sent_ms, carried) {
        (Some(sent_ms), Some(carried)) => Some(sent_ms.min(carried)),
        (sent_ms, carried) => sent_ms.or(carried),
    }
}

/// `why` cut at a character boundary to [`REASON_BYTES_MAX`].
fn bounded(why: &str) -> &str {
    &why[..why.floor_char_boundary(REASON_BYTES_MAX)]
}

fn cached(map: &Mutex<HashMap<String, String>>, key: &str) -> Option<String> {
    map.lock().unwrap_or_else(std::sync::PoisonError::into_inner).get(key).cloned()
}

fn remember(map: &Mutex<HashMap<String, String>>, key: &str, value: &str) {
    map.lock().unwrap_or_else(std::sync::PoisonError::into_inner).insert(key.to_owned(), value.to_owned());
}

/// `arn:aws:sqs:<region>:<account>:<name>` into (account, name).
pub fn parse_queue_arn(arn: &str) -> Option<(&str, &str)> {
    let parts: Vec<&str> = arn.split(':').collect();
    match parts.as_slice() {
        ["arn", _partition, "sqs", _region, account, name] if !account.is_empty() && !name.is_empty() => {
            Some((account, name))
        }
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn queue_arns() {
        assert_eq!(parse_queue_arn("arn:aws:sqs:us-east-1:123456789012:cfn-once"), Some(("123456789012", "cfn-once")));
        assert_eq!(parse_queue_arn("arn:aws-cn:sqs:cn-north-1:1:q.fifo"), Some(("1", "q.fifo")));
        assert_eq!(parse_queue_arn("arn:aws:sns:us-east-1:1:topic"), None);
        assert_eq!(parse_queue_arn("nonsense"), None);
    }

    #[test]
    fn a_carried_sent_time_can_only_move_the_deadline_closer() {
        let record = |sent: Option<&str>, carried: Option<&str>| {
            let mut record = SqsMessage::default();
            if let Some(sent) = sent {
                record.attributes.insert("SentTimestamp".into(), sent.into());
            }
            if let Some(carried) = carried {
                let mut attribute = aws_lambda_events::event::sqs::SqsMessageAttribute::default();
                attribute.string_value = Some(carried.into());
                record.message_attributes.insert(dead_letter_attribute::SENT_MS.into(), attribute);
            }
            original_sent_ms(&record)
        };
        assert_eq!(record(Some("2000"), None), Some(2000));
        assert_eq!(record(Some("2000"), Some("1000")), Some(1000), "a redriven copy keeps its first send");
        assert_eq!(record(Some("2000"), Some("9000")), Some(2000), "never later than SQS says");
        assert_eq!(record(None, Some("1000")), Some(1000));
        assert_eq!(record(Some("2000"), Some("soon")), Some(2000));
        assert_eq!(record(None, None), None);
    }

    #[test]
    fn reasons_are_bounded_at_a_character_boundary() {
        let long = "é".repeat(REASON_BYTES_MAX);
        let cut = bounded(&long);
        assert!(cut.len() <= REASON_BYTES_MAX && cut.len() >= REASON_BYTES_MAX - 1);
        assert_eq!(bounded("short"), "short");
    }
}
