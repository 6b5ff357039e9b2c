//! Time, injected.
//!
//! Every decision in the protocol that looks at time (lease expiry, heartbeat cadence, deadlines,
//! backoff) reads it through [`Clock`], so tests and the simulator can control it. Safety never
//! rests on this clock: a lease that expires too early or too late only costs liveness, because
//! every write that matters is fenced.

use std::collections::BTreeMap;
use std::future::Future;
use std::pin::Pin;
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll, Waker};

use futures_util::future::BoxFuture;

/// A source of wall-clock time (milliseconds since the Unix epoch) and of timers.
pub trait Clock: Send + Sync + std::fmt::Debug {
    /// Milliseconds since the Unix epoch.
    fn now_ms(&self) -> u64;

    /// A future that completes once `duration_ms` has passed on this clock.
    fn sleep_ms(&self, duration_ms: u64) -> BoxFuture<'static, ()>;
}

/// Sleeps until `deadline_ms` on `clock` (immediately if it has passed).
pub fn sleep_until_ms(clock: &dyn Clock, deadline_ms: u64) -> BoxFuture<'static, ()> {
    clock.sleep_ms(deadline_ms.saturating_sub(clock.now_ms()))
}

/// Runs `work` until it finishes or `timeout_ms` passes on `clock`, whichever is first.
/// `None` means the timeout won; `work` is dropped.
pub async fn within<F: Future>(clock: &dyn Clock, timeout_ms: u64, work: F) -> Option<F::Output> {
    let mut work = std::pin::pin!(work);
    let mut timer = clock.sleep_ms(timeout_ms);
    std::future::poll_fn(|cx| {
        if let Poll::Ready(output) = work.as_mut().poll(cx) {
            return Poll::Ready(Some(output));
        }
        timer.as_mut().poll(cx).map(|()| None)
    })
    .await
}

/// A clock that only moves when told to: for tests and the simulator.
///
/// Sleepers are woken in deadline order when [`ManualClock::advance_ms`] or
/// [`ManualClock::set_ms`] moves time past their deadline.
#[derive(Debug, Clone)]
pub struct ManualClock {
    inner: Arc<Mutex<ManualState>>,
}

#[derive(Debug)]
struct ManualState {
    now_ms: u64,
    next_id: u64,
    /// Pending timers by (deadline, id), so equal deadlines wake in creation order.
    sleepers: BTreeMap<(u64, u64), Option<Waker>>,
}

impl ManualClock {
    /// A clock standing at `now_ms`.
    pub fn new(now_ms: u64) -> Self {
        Self { inner: Arc::new(Mutex::new(ManualState { now_ms, next_id: 0, sleepers: BTreeMap::new() })) }
    }

    /// Moves time forward by `delta_ms` and wakes every timer that became due.
    pub fn advance_ms(&self, delta_ms: u64) {
        let now = self.now_ms().saturating_add(delta_ms);
        self.set_ms(now);
    }

    /// Sets the time (it may also jump backwards, as a real clock can) and wakes due timers.
    pub fn set_ms(&self, now_ms: u64) {
        let due: Vec<Waker> = {
            let mut state = lock(&self.inner);
            state.now_ms = now_ms;
            let mut due = Vec::new();
            for ((deadline, _), waker) in state.sleepers.iter_mut() {
                if *deadline > now_ms {
                    break;
                }
                if let Some(waker) = waker.take() {
                    due.push(waker);
                }
            }
            due
        };
        for waker in due {
            waker.wake();
        }
    }

    /// The earliest deadline among pending timers, if any: lets a simulator jump straight to
    /// the next event.
    pub fn next_deadline_ms(&self) -> Option<u64> {
        lock(&self.inner).sleepers.keys().next().map(|(deadline, _)| *deadline)
    }

    /// The earliest deadline later than `after_ms`. A simulator that holds some futures back
    /// (a frozen process) leaves their due timers pending; this skips them.
    pub fn next_deadline_after_ms(&self, after_ms: u64) -> Option<u64> {
        lock(&self.inner).sleepers.range((after_ms + 1, 0)..).next().map(|((deadline, _), _)| *deadline)
    }
}

impl Clock for ManualClock {
    fn now_ms(&self) -> u64 {
        lock(&self.inner).now_ms
    }

    fn sleep_ms(&self, duration_ms: u64) -> BoxFuture<'static, ()> {
        let mut state = lock(&self.inner);
        let deadline_ms = state.now_ms.saturating_add(duration_ms);
        let id = state.next_id;
        state.next_id += 1;
        state.sleepers.insert((deadline_ms, id), None);
        Box::pin(ManualSleep { clock: Arc::clone(&self.inner), key: (deadline_ms, id) })
    }
}

struct ManualSleep {
    clock: Arc<Mutex<ManualState>>,
    key: (u64, u64),
}

impl Future for ManualSleep {
    type Output = ();

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<()> {
        let mut state = lock(&self.clock);
        if state.now_ms >= self.key.0 {
            state.sleepers.remove(&self.key);
            return Poll::Ready(());
        }
        state.sleepers.insert(self.key, Some(cx.waker().clone()));
        Poll::Pending
    }
}

impl Drop for ManualSleep {
    fn drop(&mut self) {
        lock(&self.clock).sleepers.remove(&self.key);
    }
}

/// The clock's state is plain data; a panic while holding the lock cannot leave it inconsistent,
/// so a poisoned lock is recovered rather than propagated.
fn lock(state: &Mutex<ManualState>) -> std::sync::MutexGuard<'_, ManualState> {
    state.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::{AtomicBool, Ordering};

    #[tokio::test]
    async fn manual_sleep_completes_only_after_advance() {
        let clock = ManualClock::new(1_000);
        let done = Arc::new(AtomicBool::new(false));
        let flag = Arc::clone(&done);
        let sleep = clock.sleep_ms(500);
        let task = tokio::spawn(async move {
            sleep.await;
            flag.store(true, Ordering::SeqCst);
        });
        tokio::task::yield_now().await;
        clock.advance_ms(499);
        tokio::task::yield_now().await;
        assert!(!done.load(Ordering::SeqCst), "woke before its deadline");
        assert_eq!(clock.next_deadline_ms(), Some(1_500));
        clock.advance_ms(1);
        task.await.expect("sleeper task");
        assert!(done.load(Ordering::SeqCst));
        assert_eq!(clock.next_deadline_ms(), None, "a finished sleep leaves no timer behind");
    }

    #[test]
    fn the_next_deadline_after_a_moment_skips_due_timers() {
        let clock = ManualClock::new(100);
        let _due = clock.sleep_ms(0);
        let _later = clock.sleep_ms(50);
        assert_eq!(clock.next_deadline_ms(), Some(100));
        assert_eq!(clock.next_deadline_after_ms(100), Some(150));
        assert_eq!(clock.next_deadline_after_ms(150), None);
    }

    #[test]
    fn dropped_sleep_unregisters() {
        let clock = ManualClock::new(0);
        drop(clock.sleep_ms(10));
        assert_eq!(clock.next_deadline_ms(), None);
    }
}
