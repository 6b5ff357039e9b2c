//! The lease store port as a region's workers call it: each call under its seeded fault, on
//! the region's copy of the table, observed for the invariants.

use async_trait::async_trait;
use cfn_once_core::lease::{Acquire, AcquireRequest, Conditional, LeaseRecord, LeaseStore, PollRecord, StoreError};
use cfn_once_core::request::RequestKey;

use super::RegionStore;

#[async_trait]
impl LeaseStore for RegionStore {
    async fn acquire(&self, request: &AcquireRequest) -> Result<Acquire, StoreError> {
        self.call("acquire", async {
            if self.table.forgets_signals {
                self.forget_signal(request);
            }
            let before = self.local().get(&request.key);
            let answer = self.local().acquire(request).await?;
            if let Acquire::Acquired { fence, .. } = answer {
                self.cover_poll_taken(before.as_ref(), request);
                if request.preempt {
                    self.cover_preempted(before.as_ref(), request);
                }
                self.note_drained_acquire(before.as_ref(), request, fence);
                self.check_grant(&request.key, fence);
                if fence > 1 {
                    self.shared.cover("lease taken over");
                }
                self.shared.trace(Some(self.region), || format!("lease acquired, fence {fence} ({})", request.owner));
                self.replicate_later(&request.key);
            }
            Ok(answer)
        })
        .await
    }

    async fn close(&self, request: &AcquireRequest, signal: &[u8]) -> Result<Acquire, StoreError> {
        self.call("close", async {
            let before = self.local().get(&request.key);
            let answer = self.local().close(request, signal).await?;
            if let Acquire::Acquired { fence, .. } = answer {
                self.cover_preempted(before.as_ref(), request);
                self.note_drained_acquire(before.as_ref(), request, fence);
                self.check_drain(&request.key, fence, request.now_ms, "closed a work");
                self.check_grant(&request.key, fence);
                self.check_commit(&request.key, &request.fingerprint, fence);
                self.shared.trace(Some(self.region), || {
                    format!("work closed, its signal committed under fence {fence} ({})", request.owner)
                });
                self.replicate_later(&request.key);
            }
            Ok(answer)
        })
        .await
    }

    async fn heartbeat(
        &self,
        key: &RequestKey,
        fence: u64,
        lease_until_ms: u64,
        now_ms: u64,
    ) -> Result<Conditional, StoreError> {
        self.call("heartbeat", async {
            // A heartbeat to 0 ends the lease: how a lease is given back when the acquire's
            // reply was lost. Any other is the provider running under it.
            if lease_until_ms == 0 {
                self.given_back(key, fence);
            } else {
                self.check_drain(key, fence, now_ms, "heartbeat");
            }
            let answer = self.local().heartbeat(key, fence, lease_until_ms, now_ms).await?;
            match answer {
                Conditional::Applied => self.replicate_later(key),
                Conditional::Refused(_) => {
                    self.shared.cover("heartbeat found the lease lost");
                    self.shared.trace(Some(self.region), || format!("heartbeat refused for fence {fence}"));
                }
            }
            Ok(answer)
        })
        .await
    }

    async fn commit(
        &self,
        key: &RequestKey,
        fence: u64,
        response: &[u8],
        now_ms: u64,
    ) -> Result<Conditional, StoreError> {
        self.call("commit", async {
            self.check_drain(key, fence, now_ms, "committed");
            let answer = self.local().commit(key, fence, response, now_ms).await?;
            match &answer {
                Conditional::Applied => {
                    if let Some(record) = self.local().get(key) {
                        self.check_commit(key, &record.fingerprint, fence);
                    }
                    self.shared.trace(Some(self.region), || format!("committed under fence {fence}"));
                    self.replicate_later(key);
                }
                Conditional::Refused(_) => {
                    self.shared.cover("stale commit rejected");
                    self.shared.trace(Some(self.region), || format!("commit under fence {fence} rejected"));
                }
            }
            Ok(answer)
        })
        .await
    }

    async fn wait(
        &self,
        key: &RequestKey,
        fence: u64,
        poll: &PollRecord,
        now_ms: u64,
    ) -> Result<Conditional, StoreError> {
        self.call("wait", async {
            self.check_drain(key, fence, now_ms, "stored a wait");
            let answer = self.local().wait(key, fence, poll, now_ms).await?;
            match answer {
                Conditional::Applied => {
                    self.check_wait(key, fence, poll);
                    self.shared.cover("work in progress stored, lease released");
                    self.shared.trace(Some(self.region), || {
                        let poll_in_ms = poll.poll_at_ms.saturating_sub(now_ms);
                        format!("waiting under fence {fence}: {} polls so far, next in {poll_in_ms} ms", poll.polls)
                    });
                    self.replicate_later(key);
                }
                Conditional::Refused(_) => {
                    self.shared.cover("stale wait rejected");
                    self.shared.trace(Some(self.region), || format!("wait under fence {fence} rejected"));
                }
            }
            Ok(answer)
        })
        .await
    }

    async fn mark_delivered(
        &self,
        key: &RequestKey,
        fence: u64,
        unsent: Option<&str>,
        now_ms: u64,
    ) -> Result<Conditional, StoreError> {
        self.call("mark delivered", async {
            let answer = self.local().mark_delivered(key, fence, unsent, now_ms).await?;
            if unsent.is_some() && answer == Conditional::Applied {
                self.shared.cover("a work recorded done without its signal (its handle expired or refused it)");
            }
            if answer == Conditional::Applied {
                self.replicate_later(key);
            }
            Ok(answer)
        })
        .await
    }

    async fn read(&self, key: &RequestKey) -> Result<Option<LeaseRecord>, StoreError> {
        self.call("read", self.local().read(key)).await
    }

    async fn leave(&self, left: &LeaseRecord) -> Result<Conditional, StoreError> {
        self.call("leave", async {
            let answer = self.local().leave(left).await?;
            if answer == Conditional::Applied {
                self.given_back(&left.key, left.fence);
                self.shared.trace(Some(self.region), || format!("lease under fence {} given back", left.fence));
                self.replicate_later(&left.key);
            }
            Ok(answer)
        })
        .await
    }
}
