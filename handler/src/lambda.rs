//! The Lambda entry: one SQS batch in, a partial batch response out.
//!
//! Records are handled concurrently and independently; a bad record fails only itself. The
//! response lists exactly the records to see again (`ReportBatchItemFailures`); the others are
//! deleted by the event source mapping. A record to retry later first gets its visibility
//! changed to the protocol's backoff; a record to dead-letter is sent to its queue's DLQ and then
//! reported done. Those queue calls run concurrently, each bounded by `CFN_ONCE_SQS_TIMEOUT_MS`,
//! in the tail of the invocation the worker leaves for them (`Settings::batch_tail_ms`), so the
//! batch answers before Lambda's deadline even when SQS is slow: a killed invocation would fail
//! the whole batch. The same function serves the Lambda runtime and the local event source
//! mapping.

use aws_lambda_events::event::sqs::{BatchItemFailure, SqsBatchResponse, SqsEvent, SqsMessage};
use cfn_once_core::clock::within;
use cfn_once_core::worker::{Delivery, Disposition, Invocation};
use futures_util::future::join_all;
use lambda_runtime::LambdaEvent;

use crate::adapters::sqs_queue::original_sent_ms;
use crate::app::App;

/// Visibility for a record whose move to the DLQ failed: it is moved on its next receive.
const DEAD_LETTER_RETRY_S: u32 = 60;

/// Handles one batch.
pub async fn handle(app: &App, event: LambdaEvent<SqsEvent>) -> Result<SqsBatchResponse, lambda_runtime::Error> {
    let invocation = Invocation { id: event.context.request_id.clone(), deadline_ms: event.context.deadline };
    let records = event.payload.records;
    let dispositions = join_all(records.iter().map(|record| handle_record(app, record, &invocation))).await;
    let settled =
        join_all(records.iter().zip(dispositions).map(|(record, disposition)| settle(app, record, disposition)));
    let mut response = SqsBatchResponse::default();
    response.batch_item_failures = settled.await.into_iter().flatten().collect();
    if let Some(metrics) = &app.metrics
        && let Err(error) = metrics.flush(&mut std::io::stdout().lock())
    {
        tracing::warn!(%error, "could not write the batch's metrics");
    }
    Ok(response)
}

async fn handle_record(app: &App, record: &SqsMessage, invocation: &Invocation) -> Disposition {
    let attribute = |name: &str| record.attributes.get(name).and_then(|value| value.parse::<u64>().ok());
    let receive_count =
        attribute("ApproximateReceiveCount").map_or(1, |count| u32::try_from(count).unwrap_or(u32::MAX));
    let delivery = Delivery { body: record.body.as_deref(), receive_count, sent_ms: original_sent_ms(record) };
    let span = tracing::info_span!("record", message_id = record.message_id.as_deref().unwrap_or(""), receive_count);
    let handled = tracing::Instrument::instrument(app.worker.handle_detailed(delivery, invocation), span).await;
    if let Some(observer) = &app.observer {
        observer(&handled);
    }
    handled.disposition
}

/// Does what the disposition asks of the queue, all within one SQS timeout; the batch item
/// failure to report, if the record is to be seen again.
async fn settle(app: &App, record: &SqsMessage, disposition: Disposition) -> Option<BatchItemFailure> {
    let timeout_ms = app.worker.settings().queue_call_timeout_ms;
    let work = async {
        let delay_s = match disposition {
            Disposition::Done(_) => return None,
            Disposition::Retry { delay_s, .. } => delay_s,
            Disposition::DeadLetter { why, cause } => match app.queue.dead_letter(record, &why, cause).await {
                Ok(()) => return None,
                Err(error) => {
                    tracing::error!(%error, "could not move the message to the DLQ; it is moved on a later receive");
                    DEAD_LETTER_RETRY_S
                }
            },
        };
        // Rescheduling is best effort: without it the message returns after the queue's own
        // visibility timeout, later but safely.
        if let Err(error) = app.queue.retry_after(record, delay_s).await {
            tracing::warn!(%error, "could not reschedule the message; it returns after the queue's visibility timeout");
        }
        Some(failed(record))
    };
    within(app.worker.clock().as_ref(), timeout_ms, work).await.unwrap_or_else(|| {
        tracing::warn!(
            timeout_ms,
            "SQS did not answer in time; the message returns after the queue's visibility timeout"
        );
        Some(failed(record))
    })
}

/// The record, reported failed: the event source mapping leaves it on the queue.
fn failed(record: &SqsMessage) -> BatchItemFailure {
    let mut failure = BatchItemFailure::default();
    // An empty identifier makes Lambda retry the whole batch, which is safe, only slower.
    failure.item_identifier = record.message_id.clone().unwrap_or_default();
    failure
}
