//! One Lambda invocation's batch of SQS records: every record handled on its own, and each
//! settled on its queue (rescheduled, or moved to the DLQ) through the [`MessageQueue`] port.
//!
//! The event source mapping hands a function up to ten records at once, and this is the code
//! that decides, for all of them together, when each message's visibility changes. The Lambda
//! (`cfn_once::lambda`), the local event source mapping and the simulator all run it, so what
//! the simulator shows about batches is what the deployed function does.
//!
//! Records are handled concurrently and independently; a bad record fails only itself. Each
//! disposition says what the queue must do with its message: nothing (the event source mapping
//! deletes it when the batch returns), make it visible again after a delay and report it failed,
//! or send it to the DLQ and report it done. Three rules keep L1 with batches:
//!
//! * **A record is settled when it is decided**, not when its slowest batch-mate is done: SQS
//!   counts a new visibility from the call that sets it, so a backoff set after the batch would
//!   bring its message back late by however long the batch ran.
//! * **A crash near a deadline leaves a copy.** A killed or crashed invocation leaves every
//!   record of its batch invisible for the queue's visibility timeout, minutes, against a
//!   deadline margin of seconds. A record whose deadline margin begins within that timeout gets
//!   its visibility shortened when it is received (`Worker::visibility_if_lost_s`), all such
//!   records in one call, so if the invocation dies the record comes back in time to be
//!   answered. Each record's own settling waits for that call, so it cannot undo a backoff.
//! * **A panic stays in its record.** The worker turns a provider's panic into that request's
//!   FAILED answer; a panic anywhere else in one record's handling (a bug) makes only that
//!   record retry. Nothing unwinds into the batch, which Lambda would fail as a whole.
//!
//! The records' answers come before their bookkeeping: each record's delivered mark waits until
//! the batch's other records have sent their answers (a second at most, [`crate::marks`]).
//!
//! Every queue call is bounded by `Settings::queue_call_timeout_ms` and runs in time the worker
//! leaves for it (`Settings::batch_tail_ms`), so the batch answers before Lambda's deadline even
//! when SQS is slow: a killed invocation would fail the whole batch.

use std::panic::AssertUnwindSafe;

use async_trait::async_trait;
use futures_util::FutureExt;
use futures_util::stream::{FuturesOrdered, StreamExt};

use crate::clock::within;
use crate::marks::AnswersGate;
use crate::vocabulary::{DeadLetterCause, Disposition, Handled, Invocation, QueueRecord};
use crate::worker::{Received, Worker, panic_message};

/// Visibility for a record whose move to the DLQ failed: it is moved on its next receive.
pub const DEAD_LETTER_RETRY_S: u32 = 60;

/// The queue a batch's records came from, as far as settling them goes. Every method is one
/// bounded piece of work.
#[async_trait]
pub trait MessageQueue: Send + Sync + std::fmt::Debug {
    /// One received message, as the adapter needs it to address the queue (SQS: the Lambda
    /// event's record, with its receipt handle and queue ARN).
    type Message: Send + Sync;

    /// Makes the message visible again after `delay_s` seconds.
    async fn retry_after(&self, message: &Self::Message, delay_s: u32) -> Result<(), QueueError>;

    /// Sends the message's body to its queue's dead-letter queue, saying `why`. The batch then
    /// reports the message done, so the event source mapping deletes the original.
    async fn dead_letter(&self, message: &Self::Message, why: &str, cause: DeadLetterCause) -> Result<(), QueueError>;

    /// Sets the visibility of several messages at once, in one call where the queue has one
    /// (SQS: ChangeMessageVisibilityBatch, up to ten entries): each visible again after its
    /// delay in seconds unless changed again.
    async fn set_visibility(&self, messages: &[(&Self::Message, u32)]) -> Result<(), QueueError>;
}

/// A queue call that did not happen. A failed reschedule means the message reappears after the
/// queue's own visibility timeout instead, which is later but safe; a failed move means the
/// message is rescheduled and moved on a later receive.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum QueueError {
    /// The record lacks a field the call needs.
    #[error("record has no {0}")]
    Missing(&'static str),
    /// The record's queue ARN cannot be read.
    #[error("eventSourceARN {0:?} is not an SQS queue ARN")]
    BadArn(String),
    /// The queue has no dead-letter queue to move a message to.
    #[error("queue {0} has no redrive policy naming a dead-letter queue")]
    NoDeadLetterQueue(String),
    /// SQS refused the call or did not answer.
    #[error("SQS call failed: {0}")]
    Sqs(String),
}

/// One record of the batch: the queue's message and what the protocol reads of it.
#[derive(Debug)]
pub struct Record<'a, M> {
    /// The message, for the queue calls that settle it.
    pub message: &'a M,
    /// The queue's id of the message, for the logs.
    pub message_id: &'a str,
    /// Body, receive count and send time.
    pub queue_record: QueueRecord<'a>,
}

/// Handles every record of one invocation's batch and settles each on `queue` as soon as it is
/// decided. Returns, in the records' order, whether each is to be reported failed (seen
/// again); `observe` is told every record's result.
pub async fn handle<Q>(
    worker: &Worker,
    queue: &Q,
    invocation: &Invocation,
    records: &[Record<'_, Q::Message>],
    observe: &(dyn Fn(&Handled) + Send + Sync),
) -> Vec<bool>
where
    Q: MessageQueue + ?Sized,
{
    // Each record's delivered mark waits for the batch's answers (`crate::marks`).
    let gate = AnswersGate::new(records.len());
    let received: Vec<Received<'_>> =
        records.iter().map(|record| worker.receive(record.queue_record).in_batch(gate.ticket())).collect();
    let now_ms = worker.clock().now_ms();
    let near: Vec<(&Q::Message, u32)> = records
        .iter()
        .zip(&received)
        .filter_map(|(record, received)| Some((record.message, worker.visibility_if_lost_s(received, now_ms)?)))
        .collect();
    let shortened = async {
        if near.is_empty() {
            return;
        }
        let timeout_ms = worker.settings().queue_call_timeout_ms;
        match within(worker.clock().as_ref(), timeout_ms, queue.set_visibility(&near)).await {
            Some(Ok(())) => {
                tracing::info!(records = near.len(), "visibility shortened for records near their deadline")
            }
            Some(Err(error)) => {
                tracing::warn!(%error, "could not shorten the visibility of records near their deadline")
            }
            None => tracing::warn!(
                timeout_ms,
                "SQS did not answer in time while shortening the visibility of records near their deadline"
            ),
        }
    }
    .shared();
    // The shortening starts at once, beside the records' handling, which waits for it only to
    // settle. The records run side by side in a `FuturesOrdered`, which polls only the record
    // whose call woke it (`join_all` of ten polls all ten on every wake-up: each a walk through
    // the record's spans and pending timers for nothing), and yields their results in the
    // records' order.
    let handling = records.iter().zip(received).map(|(record, received)| {
        let shortened = shortened.clone();
        async move {
            let span = tracing::info_span!(
                "record",
                message_id = record.message_id,
                receive_count = record.queue_record.receive_count
            );
            let summary = received.summary();
            let handling = worker.handle_received(received, invocation);
            let handled =
                match AssertUnwindSafe(tracing::Instrument::instrument(handling, span.clone())).catch_unwind().await {
                    Ok(handled) => handled,
                    Err(payload) => span.in_scope(|| {
                        let message = panic_message(payload.as_ref());
                        tracing::error!(message, "handling the record panicked; it is retried");
                        let delay_s = worker.settings().backoff_floor_s().unwrap_or(DEAD_LETTER_RETRY_S);
                        Handled {
                            request: summary,
                            disposition: Disposition::Retry {
                                delay_s,
                                why: format!("handling the record panicked: {message}"),
                            },
                        }
                    }),
                };
            observe(&handled);
            shortened.await;
            settle(worker, queue, record.message, handled.disposition).await
        }
    });
    let handling = handling.collect::<FuturesOrdered<_>>().collect::<Vec<bool>>();
    let ((), to_retry) = futures_util::future::join(shortened, handling).await;
    to_retry
}

/// Does what the disposition asks of the queue, all within one SQS timeout; true if the record
/// is to be reported failed (seen again).
async fn settle<Q>(worker: &Worker, queue: &Q, message: &Q::Message, disposition: Disposition) -> bool
where
    Q: MessageQueue + ?Sized,
{
    let timeout_ms = worker.settings().queue_call_timeout_ms;
    let work = async {
        let delay_s = match disposition {
            Disposition::Done(_) => return false,
            Disposition::Retry { delay_s, .. } => delay_s,
            Disposition::DeadLetter { why, cause } => match queue.dead_letter(message, &why, cause).await {
                Ok(()) => return false,
                Err(error) => {
                    tracing::error!(%error, "could not move the message to the DLQ; it is moved on a later receive");
                    DEAD_LETTER_RETRY_S
                }
            },
        };
        // Rescheduling is best effort: without it the message returns after the queue's own
        // visibility timeout, later but safely.
        if let Err(error) = queue.retry_after(message, delay_s).await {
            tracing::warn!(%error, "could not reschedule the message; it returns after the queue's visibility timeout");
        }
        true
    };
    within(worker.clock().as_ref(), timeout_ms, work).await.unwrap_or_else(|| {
        tracing::warn!(
            timeout_ms,
            "SQS did not answer in time; the message returns after the queue's visibility timeout"
        );
        true
    })
}

#[cfg(test)]
#[path = "batch_tests.rs"]
mod tests;
