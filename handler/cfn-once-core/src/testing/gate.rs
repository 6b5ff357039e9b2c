//! Where the kit holds a provider call still, to play an execution frozen (or dying) in the
//! middle of its work, and the wrapper that counts a provider's runs and polls.

use std::sync::atomic::{AtomicBool, AtomicU32, Ordering};
use std::sync::{Arc, Mutex, PoisonError};

use async_trait::async_trait;
use serde_json::Value;

use crate::provider::{Provider, ProviderContext, ProviderError, Step};

/// Where the kit holds a provider call still, to play an execution frozen (or dying) in the
/// middle of its work: armed, the next call waits at the gate until it is opened.
#[derive(Debug, Default)]
pub(super) struct Gate {
    armed: AtomicBool,
    waiting: AtomicBool,
    open: AtomicBool,
    waker: Mutex<Option<std::task::Waker>>,
}

impl Gate {
    /// The next call waits here until [`Gate::open`].
    pub(super) fn arm(&self) {
        self.open.store(false, Ordering::SeqCst);
        self.armed.store(true, Ordering::SeqCst);
    }

    pub(super) fn open(&self) {
        self.open.store(true, Ordering::SeqCst);
        if let Some(waker) = self.waker.lock().unwrap_or_else(PoisonError::into_inner).take() {
            waker.wake();
        }
    }

    pub(super) fn is_waiting(&self) -> bool {
        self.waiting.load(Ordering::SeqCst)
    }

    async fn pass(&self) {
        if !self.armed.swap(false, Ordering::SeqCst) {
            return;
        }
        self.waiting.store(true, Ordering::SeqCst);
        std::future::poll_fn(|cx| {
            if self.open.load(Ordering::SeqCst) {
                return std::task::Poll::Ready(());
            }
            *self.waker.lock().unwrap_or_else(PoisonError::into_inner) = Some(cx.waker().clone());
            std::task::Poll::Pending
        })
        .await;
        self.waiting.store(false, Ordering::SeqCst);
    }
}

/// A provider wrapped to count its runs and polls, and to stop at the kit's gate.
pub(super) struct Counted<P> {
    pub(super) inner: P,
    pub(super) runs: Arc<AtomicU32>,
    pub(super) polls: Arc<AtomicU32>,
    pub(super) gate: Arc<Gate>,
}

#[async_trait]
impl<P: Provider> Provider for Counted<P> {
    type Properties = P::Properties;

    async fn create(&self, ctx: &ProviderContext, properties: P::Properties) -> Result<Step, ProviderError> {
        self.runs.fetch_add(1, Ordering::SeqCst);
        self.gate.pass().await;
        self.inner.create(ctx, properties).await
    }

    async fn update(
        &self,
        ctx: &ProviderContext,
        physical_resource_id: &str,
        properties: P::Properties,
        old_properties: Option<P::Properties>,
    ) -> Result<Step, ProviderError> {
        self.runs.fetch_add(1, Ordering::SeqCst);
        self.gate.pass().await;
        self.inner.update(ctx, physical_resource_id, properties, old_properties).await
    }

    async fn delete(
        &self,
        ctx: &ProviderContext,
        physical_resource_id: &str,
        properties: P::Properties,
    ) -> Result<Step<()>, ProviderError> {
        self.runs.fetch_add(1, Ordering::SeqCst);
        self.gate.pass().await;
        self.inner.delete(ctx, physical_resource_id, properties).await
    }

    async fn poll(&self, ctx: &ProviderContext, state: Value) -> Result<Step, ProviderError> {
        self.polls.fetch_add(1, Ordering::SeqCst);
        self.gate.pass().await;
        self.inner.poll(ctx, state).await
    }
}
