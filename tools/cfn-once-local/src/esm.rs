//! A local event source mapping: what Lambda does between an SQS queue and the function.
//!
//! It long-polls the queue, hands each batch to the *same* handler function the Lambda binary
//! runs (as a `LambdaEvent<SqsEvent>` shaped like Lambda's, with a deadline), and then does what
//! Lambda does with the answer: deletes the records not listed in `batchItemFailures`; deletes
//! nothing if the handler failed, timed out, or named a record that was not in the batch. Failed
//! records come back when their visibility timeout ends (the handler may have shortened it), and
//! the queue's redrive policy moves a record that keeps failing to the DLQ; that part is SQS's
//! own behaviour, which moto implements.
//!
//! [`LocalEventSourceMapping::run`] keeps up to the mapping's concurrency of batches in the
//! handler at once (Lambda's `MaximumConcurrency`, one unless [`LocalEventSourceMapping::with_concurrency`]
//! says more), receiving the next batch while others run, so one slow request holds back only
//! its own batch. A receive is never abandoned half-way: what it returns is always invoked and
//! settled, even when the mapping is told to stop meanwhile.

use std::collections::{HashMap, HashSet};
use std::future::Future;
use std::pin::Pin;
use std::time::Duration;

use anyhow::Context;
use aws_lambda_events::event::sqs::{SqsBatchResponse, SqsEvent, SqsMessage};
use aws_sdk_sqs::Client;
use aws_sdk_sqs::error::DisplayErrorContext;
use aws_sdk_sqs::types::{DeleteMessageBatchRequestEntry, Message, MessageSystemAttributeName, QueueAttributeName};
use futures_util::StreamExt;
use futures_util::stream::FuturesUnordered;
use lambda_runtime::{Context as LambdaContext, LambdaEvent};

use cfn_once::system_clock::SystemClock;
use cfn_once_core::clock::Clock;

/// Pause after a failed poll before trying again.
const ERROR_PAUSE_MS: u64 = 1_000;
/// Pause after an empty poll, so a short long-poll wait does not spin.
const IDLE_PAUSE_MS: u64 = 50;

/// How the mapping polls and invokes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct EsmSettings {
    /// Records per batch, 1 to 10.
    pub batch_size: i32,
    /// Long-poll wait, 0 to 20 s.
    pub wait_time_s: i32,
    /// The function timeout: the invocation's deadline, after which it is abandoned.
    pub function_timeout_ms: u64,
}

/// How one poll went.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BatchReport {
    pub received: usize,
    pub deleted: usize,
    /// Records left on the queue to be seen again.
    pub failed: usize,
    pub invoke: Invoke,
}

/// How the invocation ended.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Invoke {
    /// Nothing was received, so nothing was invoked.
    Idle,
    Returned,
    /// The handler returned an error: the whole batch is retried.
    HandlerError(String),
    /// The handler ran past the function timeout and was abandoned: the whole batch is retried.
    TimedOut,
}

/// One queue, one function.
#[derive(Debug, Clone)]
pub struct LocalEventSourceMapping {
    sqs: Client,
    queue_url: String,
    queue_arn: String,
    region: String,
    settings: EsmSettings,
    /// Batches in the handler at once, at least one.
    concurrency_max: usize,
}

/// What one step of [`LocalEventSourceMapping::run`] finished.
enum Step {
    Received(anyhow::Result<Vec<Message>>),
    Settled(anyhow::Result<BatchReport>),
}

impl LocalEventSourceMapping {
    /// A mapping for the queue at `queue_url`, whose region `sqs` is configured for.
    pub async fn new(sqs: Client, queue_url: &str, settings: EsmSettings) -> anyhow::Result<Self> {
        let attributes = sqs
            .get_queue_attributes()
            .queue_url(queue_url)
            .attribute_names(QueueAttributeName::QueueArn)
            .send()
            .await
            .map_err(|e| anyhow::anyhow!("could not read the queue's ARN: {}", DisplayErrorContext(&e)))?;
        let queue_arn = attributes
            .attributes
            .and_then(|mut map| map.remove(&QueueAttributeName::QueueArn))
            .context("queue has no QueueArn attribute")?;
        let region = sqs.config().region().map(|r| r.to_string()).unwrap_or_default();
        Ok(Self { sqs, queue_url: queue_url.to_owned(), queue_arn, region, settings, concurrency_max: 1 })
    }

    /// The same mapping, running up to `concurrency_max` batches at once (at least one).
    pub fn with_concurrency(self, concurrency_max: usize) -> Self {
        Self { concurrency_max: concurrency_max.max(1), ..self }
    }

    /// How long one receive may wait for messages.
    pub fn long_poll(&self) -> Duration {
        Duration::from_secs(u64::try_from(self.settings.wait_time_s.clamp(0, 20)).unwrap_or(0))
    }

    /// Receives one batch (waiting up to the long-poll time), invokes `handler` with it, and
    /// settles the batch as Lambda would.
    pub async fn poll_once<F, Fut>(&self, handler: &F) -> anyhow::Result<BatchReport>
    where
        F: Fn(LambdaEvent<SqsEvent>) -> Fut,
        Fut: Future<Output = Result<SqsBatchResponse, lambda_runtime::Error>>,
    {
        let messages = self.receive().await?;
        self.settle(handler, messages).await
    }

    /// One receive of up to a batch, waiting up to the long-poll time.
    async fn receive(&self) -> anyhow::Result<Vec<Message>> {
        let received = self
            .sqs
            .receive_message()
            .queue_url(&self.queue_url)
            .max_number_of_messages(self.settings.batch_size.clamp(1, 10))
            .wait_time_seconds(self.settings.wait_time_s.clamp(0, 20))
            .message_system_attribute_names(MessageSystemAttributeName::All)
            .message_attribute_names("All")
            .send()
            .await
            .map_err(|e| anyhow::anyhow!("ReceiveMessage failed: {}", DisplayErrorContext(&e)))?;
        Ok(received.messages.unwrap_or_default())
    }

    /// Invokes `handler` with `messages` (unless there are none) and deletes what Lambda would.
    async fn settle<F, Fut>(&self, handler: &F, messages: Vec<Message>) -> anyhow::Result<BatchReport>
    where
        F: Fn(LambdaEvent<SqsEvent>) -> Fut,
        Fut: Future<Output = Result<SqsBatchResponse, lambda_runtime::Error>>,
    {
        if messages.is_empty() {
            return Ok(BatchReport { received: 0, deleted: 0, failed: 0, invoke: Invoke::Idle });
        }
        let records: Vec<SqsMessage> = messages.iter().map(|message| self.record(message)).collect();
        let handles: HashMap<String, String> =
            records.iter().filter_map(|r| Some((r.message_id.clone()?, r.receipt_handle.clone()?))).collect();

        let mut context = LambdaContext::default();
        context.request_id = format!("local-{}", SystemClock.now_ms());
        context.deadline = SystemClock.now_ms() + self.settings.function_timeout_ms;
        context.invoked_function_arn = format!("arn:aws:lambda:{}:123456789012:function:cfn-once-local", self.region);
        let mut payload = SqsEvent::default();
        payload.records = records;
        let timeout = Duration::from_millis(self.settings.function_timeout_ms);

        let (invoke, to_delete): (Invoke, Vec<&String>) =
            match tokio::time::timeout(timeout, handler(LambdaEvent::new(payload, context))).await {
                Err(_) => (Invoke::TimedOut, vec![]),
                Ok(Err(error)) => (Invoke::HandlerError(error.to_string()), vec![]),
                Ok(Ok(response)) => {
                    let failed: HashSet<&str> =
                        response.batch_item_failures.iter().map(|f| f.item_identifier.as_str()).collect();
                    if failed.iter().any(|id| !handles.contains_key(*id)) {
                        // Lambda treats an unknown or empty identifier as a failure of the batch.
                        (Invoke::Returned, vec![])
                    } else {
                        (
                            Invoke::Returned,
                            handles.iter().filter(|(id, _)| !failed.contains(id.as_str())).map(|(_, h)| h).collect(),
                        )
                    }
                }
            };
        self.delete(&to_delete).await?;
        Ok(BatchReport {
            received: handles.len(),
            deleted: to_delete.len(),
            failed: handles.len() - to_delete.len(),
            invoke,
        })
    }

    /// Polls until `stop` resolves, reporting each batch to `on_batch`, with up to the mapping's
    /// concurrency of batches in the handler at once. `stop` ends the receiving; every batch in
    /// hand is still settled before this returns. Errors from SQS are reported and retried after
    /// a pause, as Lambda's poller does; an empty poll pauses briefly too.
    pub async fn run<F, Fut>(
        &self,
        handler: F,
        stop: impl Future<Output = ()>,
        mut on_batch: impl FnMut(anyhow::Result<BatchReport>),
    ) where
        F: Fn(LambdaEvent<SqsEvent>) -> Fut + Sync,
        Fut: Future<Output = Result<SqsBatchResponse, lambda_runtime::Error>> + Send,
    {
        type Pending<'a> = Pin<Box<dyn Future<Output = Step> + Send + 'a>>;
        let handler = &handler;
        let mut stop = std::pin::pin!(stop);
        let mut stopped = false;
        let mut pending: FuturesUnordered<Pending<'_>> = FuturesUnordered::new();
        let (mut receiving, mut batches) = (false, 0usize);
        let pause = tokio::time::sleep(Duration::ZERO);
        let mut pause = std::pin::pin!(pause);
        let mut paused = false;
        loop {
            if !stopped && !receiving && !paused && batches < self.concurrency_max {
                receiving = true;
                pending.push(Box::pin(async { Step::Received(self.receive().await) }));
            }
            if stopped && pending.is_empty() {
                return;
            }
            tokio::select! {
                Some(step) = pending.next(), if !pending.is_empty() => match step {
                    Step::Received(Ok(messages)) if messages.is_empty() => {
                        receiving = false;
                        on_batch(Ok(BatchReport { received: 0, deleted: 0, failed: 0, invoke: Invoke::Idle }));
                        pause.as_mut().reset(tokio::time::Instant::now() + Duration::from_millis(IDLE_PAUSE_MS));
                        paused = true;
                    }
                    Step::Received(Ok(messages)) => {
                        receiving = false;
                        batches += 1;
                        pending.push(Box::pin(async move { Step::Settled(self.settle(handler, messages).await) }));
                    }
                    Step::Received(Err(error)) => {
                        receiving = false;
                        on_batch(Err(error));
                        pause.as_mut().reset(tokio::time::Instant::now() + Duration::from_millis(ERROR_PAUSE_MS));
                        paused = true;
                    }
                    Step::Settled(report) => {
                        batches -= 1;
                        on_batch(report);
                    }
                },
                () = &mut stop, if !stopped => stopped = true,
                () = &mut pause, if paused => paused = false,
            }
        }
    }

    /// The record Lambda would hand the function for `message`, received from this mapping's queue.
    pub fn record(&self, message: &aws_sdk_sqs::types::Message) -> SqsMessage {
        let mut record = SqsMessage::default();
        record.message_id = message.message_id.clone();
        record.receipt_handle = message.receipt_handle.clone();
        record.body = message.body.clone();
        record.md5_of_body = message.md5_of_body.clone();
        record.attributes = message
            .attributes
            .as_ref()
            .map(|attributes| {
                attributes.iter().map(|(name, value)| (name.as_str().to_owned(), value.clone())).collect()
            })
            .unwrap_or_default();
        record.message_attributes = message
            .message_attributes
            .as_ref()
            .map(|attributes| {
                attributes
                    .iter()
                    .map(|(name, value)| {
                        let mut attribute = aws_lambda_events::event::sqs::SqsMessageAttribute::default();
                        attribute.string_value = value.string_value.clone();
                        attribute.data_type = Some(value.data_type.clone());
                        (name.clone(), attribute)
                    })
                    .collect()
            })
            .unwrap_or_default();
        record.event_source = Some("aws:sqs".into());
        record.event_source_arn = Some(self.queue_arn.clone());
        record.aws_region = Some(self.region.clone());
        record
    }

    async fn delete(&self, receipt_handles: &[&String]) -> anyhow::Result<()> {
        for chunk in receipt_handles.chunks(10) {
            let entries = chunk
                .iter()
                .enumerate()
                .map(|(index, handle)| {
                    DeleteMessageBatchRequestEntry::builder()
                        .id(index.to_string())
                        .receipt_handle(handle.as_str())
                        .build()
                })
                .collect::<Result<Vec<_>, _>>()?;
            self.sqs
                .delete_message_batch()
                .queue_url(&self.queue_url)
                .set_entries(Some(entries))
                .send()
                .await
                .map_err(|e| anyhow::anyhow!("DeleteMessageBatch failed: {}", DisplayErrorContext(&e)))?;
        }
        Ok(())
    }
}
