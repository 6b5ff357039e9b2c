//! The Lambda entry: one SQS batch in, a partial batch response out.
//!
//! The batch itself is handled by the core (`cfn_once_core::batch`): records concurrently and
//! independently, each settled on the queue (rescheduled, or moved to the DLQ) through
//! [`SqsQueue`](crate::adapters::sqs_queue::SqsQueue). This turns Lambda's event into the core's
//! records and the result into `batchItemFailures`, listing exactly the records to see again
//! (`ReportBatchItemFailures`); the event source mapping deletes the others. The same function
//! serves the Lambda runtime and the local event source mapping.

use aws_lambda_events::event::sqs::{BatchItemFailure, SqsBatchResponse, SqsEvent, SqsMessage};
use cfn_once_core::batch::{self, Record};
use cfn_once_core::vocabulary::{Handled, Invocation, QueueRecord};
use lambda_runtime::LambdaEvent;

use crate::adapters::sqs_queue::original_sent_ms;
use crate::app::App;

/// Handles one batch.
pub async fn handle(app: &App, event: LambdaEvent<SqsEvent>) -> Result<SqsBatchResponse, lambda_runtime::Error> {
    let invocation = Invocation { id: event.context.request_id.clone(), deadline_ms: event.context.deadline };
    let messages = event.payload.records;
    let records: Vec<Record<'_, SqsMessage>> = messages.iter().map(record).collect();
    let observe = |handled: &Handled| {
        if let Some(observer) = &app.observer {
            observer(handled);
        }
    };
    let to_retry = batch::handle(&app.worker, app.queue.as_ref(), &invocation, &records, &observe).await;
    let mut response = SqsBatchResponse::default();
    response.batch_item_failures =
        messages.iter().zip(to_retry).filter(|(_, retry)| *retry).map(|(message, _)| failed(message)).collect();
    if let Some(metrics) = &app.metrics
        && let Err(error) = metrics.flush(&mut std::io::stdout().lock())
    {
        tracing::warn!(%error, "could not write the batch's metrics");
    }
    Ok(response)
}

/// What the protocol reads of one SQS record.
fn record(message: &SqsMessage) -> Record<'_, SqsMessage> {
    let attribute = |name: &str| message.attributes.get(name).and_then(|value| value.parse::<u64>().ok());
    let receive_count =
        attribute("ApproximateReceiveCount").map_or(1, |count| u32::try_from(count).unwrap_or(u32::MAX));
    Record {
        message,
        message_id: message.message_id.as_deref().unwrap_or(""),
        queue_record: QueueRecord { body: message.body.as_deref(), receive_count, sent_ms: original_sent_ms(message) },
    }
}

/// The record, reported failed: the event source mapping leaves it on the queue.
fn failed(record: &SqsMessage) -> BatchItemFailure {
    let mut failure = BatchItemFailure::default();
    // An empty identifier makes Lambda retry the whole batch, which is safe, only slower.
    failure.item_identifier = record.message_id.clone().unwrap_or_default();
    failure
}
