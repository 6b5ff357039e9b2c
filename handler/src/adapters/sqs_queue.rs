//! Backoff for SQS messages: ChangeMessageVisibility on the record's own queue.
//!
//! A record names its queue by ARN (`eventSourceARN`); the queue URL is looked up once per ARN
//! with GetQueueUrl and cached, so the adapter works for any queue the event source mapping
//! polls, in AWS and on a local endpoint alike.

use std::collections::HashMap;
use std::sync::Mutex;

use aws_sdk_sqs::Client;
use aws_sdk_sqs::error::DisplayErrorContext;

/// Reschedules messages on SQS.
#[derive(Debug)]
pub struct SqsQueue {
    client: Client,
    urls: Mutex<HashMap<String, String>>,
}

/// A visibility change that did not happen; the message then reappears after the queue's own
/// visibility timeout instead, which is later but still safe.
#[derive(Debug, thiserror::Error)]
pub enum QueueError {
    #[error("record has no {0}")]
    Missing(&'static str),
    #[error("eventSourceARN {0:?} is not an SQS queue ARN")]
    BadArn(String),
    #[error("SQS call failed: {0}")]
    Sqs(String),
}

impl SqsQueue {
    /// An adapter using `client`, which must be configured for the queues' region.
    pub fn new(client: Client) -> Self {
        Self { client, urls: Mutex::new(HashMap::new()) }
    }

    /// Makes the message visible again after `delay_s` seconds.
    pub async fn retry_after(
        &self,
        queue_arn: Option<&str>,
        receipt_handle: Option<&str>,
        delay_s: u32,
    ) -> Result<(), QueueError> {
        let queue_arn = queue_arn.ok_or(QueueError::Missing("eventSourceARN"))?;
        let receipt_handle = receipt_handle.ok_or(QueueError::Missing("receiptHandle"))?;
        let queue_url = self.queue_url(queue_arn).await?;
        self.client
            .change_message_visibility()
            .queue_url(queue_url)
            .receipt_handle(receipt_handle)
            .visibility_timeout(i32::try_from(delay_s).unwrap_or(i32::MAX))
            .send()
            .await
            .map_err(|error| QueueError::Sqs(DisplayErrorContext(&error).to_string()))?;
        Ok(())
    }

    async fn queue_url(&self, queue_arn: &str) -> Result<String, QueueError> {
        if let Some(url) = self.urls.lock().unwrap_or_else(std::sync::PoisonError::into_inner).get(queue_arn) {
            return Ok(url.clone());
        }
        let (account, name) = parse_queue_arn(queue_arn).ok_or_else(|| QueueError::BadArn(queue_arn.to_owned()))?;
        let output = self
            .client
            .get_queue_url()
            .queue_name(name)
            .queue_owner_aws_account_id(account)
            .send()
            .await
            .map_err(|error| QueueError::Sqs(DisplayErrorContext(&error).to_string()))?;
        let url = output.queue_url.ok_or_else(|| QueueError::Sqs("GetQueueUrl returned no URL".into()))?;
        self.urls.lock().unwrap_or_else(std::sync::PoisonError::into_inner).insert(queue_arn.to_owned(), url.clone());
        Ok(url)
    }
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
}
