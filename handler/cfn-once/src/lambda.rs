//! The Lambda entry: one SQS batch in, a partial batch response out.
//!
//! The batch itself is handled by the core (`cfn_once_core::batch`): records concurrently and
//! independently, each settled on the queue (rescheduled, or moved to the DLQ) through
//! [`SqsQueue`](crate::adapters::sqs_queue::SqsQueue). This turns Lambda's event into the core's
//! records and the result into `batchItemFailures`, listing exactly the records to see again
//! (`ReportBatchItemFailures`); the event source mapping deletes the others. The deployed
//! function reads Lambda's event record by record ([`handle_event`], `sqs_records`), so a record
//! it cannot read goes to the DLQ alone, as an undecodable body does; the local event source
//! mapping hands records already read ([`handle`]). Both run the same batch code below.

use aws_lambda_events::event::sqs::{BatchItemFailure, SqsBatchResponse, SqsEvent, SqsMessage};
use cfn_once_core::batch::{self, Record};
use cfn_once_core::vocabulary::{Handled, Invocation, QueueRecord};
use lambda_runtime::{Context, LambdaEvent};

use crate::adapters::sqs_queue::original_sent_ms;
use crate::app::App;
use crate::sqs_records::{ReadRecord, read_event};

/// Handles one batch whose records are already read (the local event source mapping's).
pub async fn handle(app: &App, event: LambdaEvent<SqsEvent>) -> Result<SqsBatchResponse, lambda_runtime::Error> {
    let LambdaEvent { payload, context } = event;
    Ok(handle_records(app, &context, payload.records.into_iter().map(ReadRecord::readable).collect()).await)
}

/// Handles one batch as Lambda delivers it, read record by record (`sqs_records`): a record the
/// types refuse goes to the DLQ like an undecodable body, and its batch-mates are handled. Only
/// an event without a `Records` array fails the invocation.
pub async fn handle_event(
    app: &App,
    event: LambdaEvent<serde_json::Value>,
) -> Result<SqsBatchResponse, lambda_runtime::Error> {
    let LambdaEvent { payload, context } = event;
    let records = read_event(payload)?;
    Ok(handle_records(app, &context, records).await)
}

/// The batch, whichever way its records were read.
async fn handle_records(app: &App, context: &Context, messages: Vec<ReadRecord>) -> SqsBatchResponse {
    let invocation = Invocation { id: context.request_id.clone(), deadline_ms: context.deadline };
    for unreadable in &messages {
        if let Some(why) = &unreadable.unreadable {
            let message_id = unreadable.message.message_id.as_deref().unwrap_or("");
            tracing::error!(message_id, why, "record unreadable: it goes to the DLQ, its batch-mates are handled");
        }
    }
    let records: Vec<Record<'_, SqsMessage>> = messages.iter().map(record).collect();
    let observe = |handled: &Handled| {
        if let Some(observer) = &app.observer {
            observer(handled);
        }
    };
    let to_retry = batch::handle(&app.worker, app.queue.as_ref(), &invocation, &records, &observe).await;
    let mut response = SqsBatchResponse::default();
    response.batch_item_failures = messages
        .iter()
        .zip(to_retry)
        .filter(|(_, retry)| *retry)
        .map(|(read, _)| failed(&read.message))
        .collect();
    if let Some(metrics) = &app.metrics
        && let Err(error) = metrics.flush(&mut std::io::stdout().lock())
    {
        tracing::warn!(%error, "could not write the batch's metrics");
    }
    response
}

/// What the protocol reads of one SQS record.
fn record(read: &ReadRecord) -> Record<'_, SqsMessage> {
    let message = &read.message;
    let attribute = |name: &str| message.attributes.get(name).and_then(|value| value.parse::<u64>().ok());
    let receive_count =
        attribute("ApproximateReceiveCount").map_or(1, |count| u32::try_from(count).unwrap_or(u32::MAX));
    Record {
        message,
        message_id: message.message_id.as_deref().unwrap_or(""),
        queue_record: QueueRecord { body: read.body(), receive_count, sent_ms: original_sent_ms(message) },
    }
}

/// The record, reported failed: the event source mapping leaves it on the queue.
fn failed(record: &SqsMessage) -> BatchItemFailure {
    let mut failure = BatchItemFailure::default();
    // An empty identifier makes Lambda retry the whole batch, which is safe, only slower: a
    // record whose messageId cannot be read is reported so, because a record left unreported
    // counts as done and is deleted, uncounted and unanswered. Its batch-mates are answered in
    // this invocation already; their copies coming back are duplicates, dropped, while the bad
    // record's receives count toward its queue's maxReceiveCount and so its DLQ. A function
    // error makes every message of the batch visible again
    // (https://docs.aws.amazon.com/lambda/latest/dg/services-sqs-errorhandling.html#services-sqs-batchfailurereporting);
    // an empty or null itemIdentifier is a complete failure of the batch, as the same rules read
    // for streams (https://docs.aws.amazon.com/lambda/latest/dg/services-ddb-batchfailurereporting.html);
    // the excerpt of the SQS page we could read does not list them, so the local event source
    // mapping (`cfn-once local`) plays it as a failed batch too.
    failure.item_identifier = record.message_id.clone().unwrap_or_default();
    failure
}
