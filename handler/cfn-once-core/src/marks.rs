//! The delivered marks of one batch, written after its answers.
//!
//! An answer is committed, PUT, then marked delivered in its record, best effort: a copy that
//! finds it unmarked PUTs the same bytes again (`worker::answer`). The mark is nobody's answer.
//! Yet in a batch of ten records handled side by side, a mark written as soon as its own answer
//! is PUT is one more write on the same table and the same connections as the acquires, commits
//! and PUTs of the records still on their way to their answer, and it delays them.
//!
//! So the batch's records share an [`AnswersGate`]: each record holds a [`Ticket`], and its
//! mark waits until every record of the batch has sent its answer or is done with the batch
//! (its ticket dropped, whatever ended it: an answer, a retry, a panic). The marks then go out
//! together, after the answers. The wait is bounded by [`MARK_WAIT_MS`], and by the time the
//! record's own budget leaves for the mark, so that a batch-mate whose provider runs for minutes
//! holds the others' marks back for a second at most. No write is added or removed, and none
//! moves before a PUT: only the marks' order against the other records' answers changes.

use std::future::Future;
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::task::{Context, Poll, Waker};

use crate::clock::{Clock, within};

/// The longest a record's delivered mark waits for its batch-mates' answers, in ms.
pub const MARK_WAIT_MS: u64 = 1_000;

/// The records of one batch not yet past their answer, and the marks waiting for them.
#[derive(Debug)]
pub struct AnswersGate {
    state: Mutex<GateState>,
}

#[derive(Debug)]
struct GateState {
    /// Records whose ticket has not arrived.
    pending: usize,
    /// The marks waiting for `pending` to reach zero.
    waiting: Vec<Waker>,
}

impl AnswersGate {
    /// A gate for a batch of `records`, each to be given one [`Ticket`].
    pub fn new(records: usize) -> Arc<Self> {
        Arc::new(Self { state: Mutex::new(GateState { pending: records, waiting: Vec::new() }) })
    }

    /// One record's ticket.
    pub fn ticket(self: &Arc<Self>) -> Ticket {
        Ticket { gate: Arc::clone(self), arrived: AtomicBool::new(false) }
    }

    fn state(&self) -> std::sync::MutexGuard<'_, GateState> {
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }

    fn arrive(&self) {
        let mut state = self.state();
        state.pending = state.pending.saturating_sub(1);
        if state.pending == 0 {
            for waker in state.waiting.drain(..) {
                waker.wake();
            }
        }
    }

    /// Ready once every ticket has arrived.
    fn all_arrived(&self) -> AllArrived<'_> {
        AllArrived { gate: self }
    }
}

struct AllArrived<'a> {
    gate: &'a AnswersGate,
}

impl Future for AllArrived<'_> {
    type Output = ();

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<()> {
        let mut state = self.gate.state();
        if state.pending == 0 {
            return Poll::Ready(());
        }
        if !state.waiting.iter().any(|waker| waker.will_wake(cx.waker())) {
            state.waiting.push(cx.waker().clone());
        }
        Poll::Pending
    }
}

/// One record's place in its batch's [`AnswersGate`]. It arrives when its answer is sent, or
/// when it is dropped, whichever comes first, and only once.
#[derive(Debug)]
pub struct Ticket {
    gate: Arc<AnswersGate>,
    arrived: AtomicBool,
}

impl Ticket {
    /// Says this record is past its answer.
    pub fn arrive(&self) {
        if !self.arrived.swap(true, Ordering::AcqRel) {
            self.gate.arrive();
        }
    }

    /// Arrives, then waits until every record of the batch has, or `wait_ms` has passed.
    pub async fn wait_for_batch(&self, clock: &dyn Clock, wait_ms: u64) {
        self.arrive();
        if wait_ms > 0 {
            let _ = within(clock, wait_ms, self.gate.all_arrived()).await;
        }
    }
}

impl Drop for Ticket {
    fn drop(&mut self) {
        self.arrive();
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::clock::ManualClock;
    use futures_util::FutureExt;

    #[test]
    fn a_mark_waits_for_every_record_of_its_batch() {
        let clock = ManualClock::new(0);
        let gate = AnswersGate::new(3);
        let (first, second, third) = (gate.ticket(), gate.ticket(), gate.ticket());
        let mut waiting = Box::pin(first.wait_for_batch(&clock, MARK_WAIT_MS));
        assert!((&mut waiting).now_or_never().is_none(), "two records are still on their way");
        second.arrive();
        assert!((&mut waiting).now_or_never().is_none(), "one record is still on its way");
        drop(third);
        assert!(waiting.now_or_never().is_some(), "a dropped ticket has arrived");
    }

    #[test]
    fn a_ticket_arrives_once() {
        let clock = ManualClock::new(0);
        let gate = AnswersGate::new(2);
        let (first, second) = (gate.ticket(), gate.ticket());
        first.arrive();
        first.arrive();
        drop(first);
        let mut waiting = Box::pin(second.wait_for_batch(&clock, MARK_WAIT_MS));
        assert!(waiting.as_mut().now_or_never().is_some(), "both arrived");
        let gate = AnswersGate::new(3);
        let (first, second, _third) = (gate.ticket(), gate.ticket(), gate.ticket());
        first.arrive();
        drop(first);
        let mut waiting = Box::pin(second.wait_for_batch(&clock, MARK_WAIT_MS));
        assert!(waiting.as_mut().now_or_never().is_none(), "a ticket counted twice would have opened the gate");
    }

    #[test]
    fn the_wait_is_bounded() {
        let clock = ManualClock::new(0);
        let gate = AnswersGate::new(2);
        let (first, _slow) = (gate.ticket(), gate.ticket());
        let mut waiting = Box::pin(first.wait_for_batch(&clock, MARK_WAIT_MS));
        assert!(waiting.as_mut().now_or_never().is_none());
        clock.advance_ms(MARK_WAIT_MS);
        assert!(waiting.now_or_never().is_some(), "a slow batch-mate holds a mark back MARK_WAIT_MS at most");
    }
}
