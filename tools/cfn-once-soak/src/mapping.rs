//! The soak's event source mapping: what Lambda's SQS poller does between a queue and a
//! function, with the template's parameters.
//!
//! It long-polls the queue for up to `BatchSize` messages (the template sets no batching window,
//! so a poll returns what is there), invokes the function with them as Lambda's SQS event while
//! fewer than `MaximumConcurrency` invocations are running, and then does what Lambda does with
//! the outcome: deletes every record not listed in `batchItemFailures` when the function returned
//! (`ReportBatchItemFailures`), and nothing when it failed, timed out or died, so those records
//! come back when their visibility ends (the handler may have shortened it). The queue's own
//! visibility timeout and redrive policy are SQS's (moto's). It can be stopped, as a region
//! going down stops its poller, and started again.

use std::collections::{BTreeMap, HashSet};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::Duration;

use aws_lambda_events::event::sqs::{SqsBatchResponse, SqsEvent};
use aws_sdk_sqs::types::{DeleteMessageBatchRequestEntry, MessageSystemAttributeName};
use tokio::sync::Semaphore;

use cfn_once_local::lambda_service::{Invoked, LocalFunction};

/// How long one receive waits for messages (Lambda's poller waits up to 20 s; a shorter wait lets
/// a stopped mapping notice sooner).
const LONG_POLL_S: i32 = 2;

/// What the mapping counted.
#[derive(Debug, Default)]
pub struct MappingStats {
    pub batches: AtomicU64,
    pub records: AtomicU64,
    pub deleted: AtomicU64,
    pub failed_invocations: AtomicU64,
    /// Receives per message id: how often SQS handed each copy out.
    pub receives: std::sync::Mutex<BTreeMap<String, u32>>,
}

/// One queue feeding one function.
#[derive(Debug)]
pub struct SoakMapping {
    sqs: aws_sdk_sqs::Client,
    queue_url: String,
    /// Builds Lambda's records from received messages (queue ARN, region).
    records: cfn_once_local::esm::LocalEventSourceMapping,
    function: Arc<LocalFunction>,
    batch_size: i32,
    concurrency: Arc<Semaphore>,
    running: AtomicBool,
    stopped: AtomicBool,
    pub stats: MappingStats,
}

impl SoakMapping {
    /// A mapping of the queue at `queue_url` onto `function`, `batch_size` records per
    /// invocation and at most `concurrency` invocations at once.
    pub async fn new(
        sqs: aws_sdk_sqs::Client,
        queue_url: &str,
        function: Arc<LocalFunction>,
        batch_size: usize,
        concurrency: usize,
    ) -> anyhow::Result<Self> {
        let settings = cfn_once_local::esm::EsmSettings {
            batch_size: i32::try_from(batch_size).unwrap_or(10),
            wait_time_s: LONG_POLL_S,
            function_timeout_ms: function.spec().timeout_ms,
        };
        let records = cfn_once_local::esm::LocalEventSourceMapping::new(sqs.clone(), queue_url, settings).await?;
        Ok(Self {
            sqs,
            queue_url: queue_url.to_owned(),
            records,
            function,
            batch_size: settings.batch_size,
            concurrency: Arc::new(Semaphore::new(concurrency)),
            running: AtomicBool::new(true),
            stopped: AtomicBool::new(false),
            stats: MappingStats::default(),
        })
    }

    /// Stops polling (a region down); invocations in flight are the caller's to kill.
    pub fn pause(&self) {
        self.running.store(false, Ordering::SeqCst);
    }

    /// Polls again.
    pub fn resume(&self) {
        self.running.store(true, Ordering::SeqCst);
    }

    /// Ends [`SoakMapping::run`] after its current poll.
    pub fn stop(&self) {
        self.stopped.store(true, Ordering::SeqCst);
    }

    /// Polls until stopped.
    pub async fn run(self: Arc<Self>) {
        while !self.stopped.load(Ordering::SeqCst) {
            if !self.running.load(Ordering::SeqCst) {
                tokio::time::sleep(Duration::from_millis(200)).await;
                continue;
            }
            let Ok(permit) = Arc::clone(&self.concurrency).acquire_owned().await else { return };
            let received = self
                .sqs
                .receive_message()
                .queue_url(&self.queue_url)
                .max_number_of_messages(self.batch_size)
                .wait_time_seconds(LONG_POLL_S)
                .message_system_attribute_names(MessageSystemAttributeName::All)
                .message_attribute_names("All")
                .send()
                .await;
            let messages = match received {
                Ok(output) => output.messages.unwrap_or_default(),
                Err(_) => {
                    tokio::time::sleep(Duration::from_millis(500)).await;
                    continue;
                }
            };
            if messages.is_empty() || !self.running.load(Ordering::SeqCst) {
                // Received while going down: the messages come back after their visibility, as
                // those of a poller that died would.
                continue;
            }
            let mapping = Arc::clone(&self);
            tokio::spawn(async move {
                mapping.invoke(messages).await;
                drop(permit);
            });
        }
    }

    async fn invoke(&self, messages: Vec<aws_sdk_sqs::types::Message>) {
        self.stats.batches.fetch_add(1, Ordering::SeqCst);
        self.stats.records.fetch_add(messages.len() as u64, Ordering::SeqCst);
        {
            let mut receives = self.stats.receives.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
            for message in &messages {
                *receives.entry(message.message_id.clone().unwrap_or_default()).or_default() += 1;
            }
        }
        let records: Vec<_> = messages.iter().map(|message| self.records.record(message)).collect();
        let handles: BTreeMap<String, String> =
            records.iter().filter_map(|r| Some((r.message_id.clone()?, r.receipt_handle.clone()?))).collect();
        let mut event = SqsEvent::default();
        event.records = records;
        let payload = serde_json::to_vec(&event).unwrap_or_default();
        let failed: HashSet<String> = match self.function.invoke(payload).await {
            Invoked::Response(body) => match serde_json::from_slice::<SqsBatchResponse>(&body) {
                Ok(response) => {
                    response.batch_item_failures.into_iter().map(|failure| failure.item_identifier).collect()
                }
                // An unreadable response fails the batch, as Lambda treats it.
                Err(_) => handles.keys().cloned().collect(),
            },
            Invoked::Error(_) | Invoked::TimedOut | Invoked::Crashed => {
                self.stats.failed_invocations.fetch_add(1, Ordering::SeqCst);
                return;
            }
        };
        // Lambda fails the whole batch when a listed identifier is unknown or empty.
        if failed.iter().any(|id| !handles.contains_key(id)) {
            return;
        }
        let done: Vec<&String> = handles.iter().filter(|(id, _)| !failed.contains(*id)).map(|(_, h)| h).collect();
        for chunk in done.chunks(10) {
            let entries: Vec<DeleteMessageBatchRequestEntry> = chunk
                .iter()
                .enumerate()
                .filter_map(|(index, handle)| {
                    DeleteMessageBatchRequestEntry::builder()
                        .id(index.to_string())
                        .receipt_handle(handle.as_str())
                        .build()
                        .ok()
                })
                .collect();
            if self
                .sqs
                .delete_message_batch()
                .queue_url(&self.queue_url)
                .set_entries(Some(entries))
                .send()
                .await
                .is_ok()
            {
                self.stats.deleted.fetch_add(chunk.len() as u64, Ordering::SeqCst);
            }
        }
    }
}
