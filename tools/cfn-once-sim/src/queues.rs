//! The two regions' SQS queues, as the event source mapping and the handler's batch code see
//! them: every copy of a request with its visibility, receive count and current receipt, and
//! the [`MessageQueue`] port the real `cfn_once_core::batch` settles records through.
//!
//! SQS as modelled here: a receive makes a message invisible for the queue's visibility timeout
//! and hands out a new receipt; a message is received whenever it is visible, whether or not an
//! earlier receiver is still working on it; ChangeMessageVisibility counts from the moment of the
//! call, and with a receipt that a later receive replaced it is refused, as is a delete (the
//! message then stays and is received again). A message received more than `maxReceiveCount`
//! times goes to the DLQ.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};

use async_trait::async_trait;
use cfn_once_core::batch::{MessageQueue, QueueError};
use cfn_once_core::clock::Clock;
use cfn_once_core::vocabulary::DeadLetterCause;

use crate::scenario::Region;
use crate::shared::Shared;

/// One copy of a request on one region's queue.
#[derive(Debug, Clone)]
pub struct Copy {
    pub request: usize,
    pub region: Region,
    /// SQS's SentTimestamp: when SNS delivered this copy (later than the publish for a late copy).
    pub sent_ms: u64,
    pub visible_at_ms: u64,
    pub receive_count: u32,
    /// Which receive's receipt is current (0: never received).
    pub receipt: u64,
}

/// A received message as the handler holds it: which copy, under which receipt.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Receipt {
    pub message: u64,
    pub receipt: u64,
}

/// A copy the handler moved to the DLQ: when, which request, by which region.
#[derive(Debug, Clone, Copy)]
pub struct DeadLettered {
    pub at_ms: u64,
    pub request: usize,
    pub region: Region,
}

/// Both regions' queues.
#[derive(Debug, Default)]
pub struct Queues {
    pub copies: BTreeMap<u64, Copy>,
    pub next_id: u64,
    /// Moves to the DLQ by the handler, for the world to check.
    pub dead_lettered: Vec<DeadLettered>,
}

impl Queues {
    pub fn add(&mut self, copy: Copy) {
        self.copies.insert(self.next_id, copy);
        self.next_id += 1;
    }

    /// Receives up to `count` visible copies from `region`'s queue at `now_ms`, each hidden for
    /// `visibility_ms`, oldest first. Copies over `max_receive_count` receives are removed and
    /// returned apart (SQS moved them to the DLQ).
    pub fn receive(
        &mut self,
        region: Region,
        now_ms: u64,
        count: usize,
        visibility_ms: u64,
        max_receive_count: u32,
    ) -> (Vec<Receipt>, Vec<usize>) {
        let mut visible: Vec<(u64, u64)> = self
            .copies
            .iter()
            .filter(|(_, copy)| copy.region == region && copy.visible_at_ms <= now_ms)
            .map(|(id, copy)| (copy.visible_at_ms, *id))
            .collect();
        visible.sort_unstable();
        let mut received = Vec::new();
        let mut redriven = Vec::new();
        for (_, id) in visible.into_iter().take(count) {
            let Some(copy) = self.copies.get_mut(&id) else { continue };
            copy.receive_count += 1;
            if copy.receive_count > max_receive_count {
                redriven.push(copy.request);
                self.copies.remove(&id);
                continue;
            }
            copy.receipt += 1;
            copy.visible_at_ms = now_ms + visibility_ms;
            received.push(Receipt { message: id, receipt: copy.receipt });
        }
        (received, redriven)
    }

    /// The copy, if `receipt` is still its current one.
    fn current(&mut self, receipt: Receipt) -> Option<&mut Copy> {
        self.copies.get_mut(&receipt.message).filter(|copy| copy.receipt == receipt.receipt)
    }

    /// The event source mapping deletes a record its batch reported done; a stale receipt
    /// deletes nothing.
    pub fn delete(&mut self, receipt: Receipt) -> bool {
        if self.current(receipt).is_some() {
            self.copies.remove(&receipt.message);
            return true;
        }
        false
    }

    /// The earliest moment a copy of `region` becomes visible after `now_ms`.
    pub fn next_visible_ms(&self, region: Region, now_ms: u64) -> Option<u64> {
        self.copies
            .values()
            .filter(|copy| copy.region == region && copy.visible_at_ms > now_ms)
            .map(|copy| copy.visible_at_ms)
            .min()
    }

    /// Whether `region` has a copy visible at `now_ms`.
    pub fn any_visible(&self, region: Region, now_ms: u64) -> bool {
        self.copies.values().any(|copy| copy.region == region && copy.visible_at_ms <= now_ms)
    }
}

/// One region's queue behind the batch code's port.
#[derive(Debug)]
pub struct SimQueue {
    pub region: Region,
    pub queues: Arc<Mutex<Queues>>,
    pub shared: Arc<Shared>,
}

impl SimQueue {
    fn queues(&self) -> MutexGuard<'_, Queues> {
        self.queues.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

#[async_trait]
impl MessageQueue for SimQueue {
    type Message = Receipt;

    async fn retry_after(&self, message: &Receipt, delay_s: u32) -> Result<(), QueueError> {
        let now_ms = self.shared.clock.now_ms();
        let mut queues = self.queues();
        let Some(copy) = queues.current(*message) else {
            return Err(QueueError::Sqs("the receipt handle was replaced by a later receive".into()));
        };
        copy.visible_at_ms = now_ms + u64::from(delay_s) * 1_000;
        let request = copy.request;
        drop(queues);
        self.shared.trace(Some(self.region), || format!("request {request}'s copy visible again in {delay_s} s"));
        Ok(())
    }

    async fn set_visibility(&self, messages: &[(&Receipt, u32)]) -> Result<(), QueueError> {
        let now_ms = self.shared.clock.now_ms();
        let mut queues = self.queues();
        for (message, delay_s) in messages {
            if let Some(copy) = queues.current(**message) {
                copy.visible_at_ms = now_ms + u64::from(*delay_s) * 1_000;
            }
        }
        drop(queues);
        self.shared.cover("visibility shortened for records near their deadline");
        self.shared.trace(Some(self.region), || {
            format!("{} records near their deadline: visibility shortened", messages.len())
        });
        Ok(())
    }

    async fn dead_letter(&self, message: &Receipt, _why: &str, _cause: DeadLetterCause) -> Result<(), QueueError> {
        let at_ms = self.shared.elapsed_ms();
        let mut queues = self.queues();
        let Some(copy) = queues.copies.get(&message.message) else {
            return Err(QueueError::Sqs("no such message".into()));
        };
        let dead = DeadLettered { at_ms, request: copy.request, region: self.region };
        queues.dead_lettered.push(dead);
        Ok(())
    }
}
