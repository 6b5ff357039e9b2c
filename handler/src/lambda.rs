//! The Lambda entry: one SQS batch in, a partial batch response out.
//!
//! Records are handled concurrently and independently; a bad record fails only itself. The
//! response lists exactly the records to see again (`ReportBatchItemFailures`); the others are
//! deleted by the event source mapping. A record to retry later first gets its visibility
//! changed to the protocol's backoff. The same function serves the Lambda runtime and the local
//! event source mapping.

use aws_lambda_events::event::sqs::{BatchItemFailure, SqsBatchResponse, SqsEvent, SqsMessage};
use cfn_once_core::worker::{Delivery, Disposition, Invocation};
use futures_util::future::join_all;
use lambda_runtime::LambdaEvent;

use crate::app::App;

/// Visibility for a record nobody can be answered for: back soon, so it reaches its
/// maxReceiveCount, and the DLQ, quickly.
const UNDELIVERABLE_DELAY_S: u32 = 1;

/// Handles one batch.
pub async fn handle(app: &App, event: LambdaEvent<SqsEvent>) -> Result<SqsBatchResponse, lambda_runtime::Error> {
    let invocation = Invocation { id: event.context.request_id.clone(), deadline_ms: event.context.deadline };
    let records = event.payload.records;
    let dispositions = join_all(records.iter().map(|record| handle_record(app, record, &invocation))).await;

    let mut response = SqsBatchResponse::default();
    for (record, disposition) in records.iter().zip(dispositions) {
        let delay_s = match disposition {
            Disposition::Done(_) => continue,
            Disposition::Retry { delay_s, .. } => delay_s,
            Disposition::Undeliverable { .. } => UNDELIVERABLE_DELAY_S,
        };
        if let Err(error) =
            app.queue.retry_after(record.event_source_arn.as_deref(), record.receipt_handle.as_deref(), delay_s).await
        {
            tracing::warn!(%error, "could not reschedule the message; it returns after the queue's visibility timeout");
        }
        let mut failure = BatchItemFailure::default();
        // An empty identifier makes Lambda retry the whole batch, which is safe, only slower.
        failure.item_identifier = record.message_id.clone().unwrap_or_default();
        response.batch_item_failures.push(failure);
    }
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
    let delivery = Delivery { body: record.body.as_deref(), receive_count, sent_ms: attribute("SentTimestamp") };
    let span = tracing::info_span!("record", message_id = record.message_id.as_deref().unwrap_or(""), receive_count);
    let handled = tracing::Instrument::instrument(app.worker.handle_detailed(delivery, invocation), span).await;
    if let Some(observer) = &app.observer {
        observer(&handled);
    }
    handled.disposition
}
