//! What is per region: a clock with its own skew and jumps, and the view of the active-region
//! control.

use std::sync::Arc;
use std::sync::atomic::{AtomicI64, Ordering};

use async_trait::async_trait;
use cfn_once_core::clock::{Clock, ManualClock};
use cfn_once_core::control::{ActivitySource, ControlError};
use cfn_once_core::decision::Activity;
use std::sync::Mutex;

use crate::scenario::Region;
use crate::shared::Shared;

/// Virtual time seen through a region's clock: true time plus an offset that can jump.
#[derive(Debug)]
pub struct SkewedClock {
    pub base: ManualClock,
    pub offset_ms: AtomicI64,
}

impl Clock for SkewedClock {
    fn now_ms(&self) -> u64 {
        self.base.now_ms().saturating_add_signed(self.offset_ms.load(Ordering::SeqCst))
    }

    fn sleep_ms(&self, duration_ms: u64) -> futures_util::future::BoxFuture<'static, ()> {
        self.base.sleep_ms(duration_ms)
    }
}

/// The control item, as the region reads it: instantly consistent, as the table's item is, but
/// sometimes slow inside the fault window (a throttled table, or ARC's endpoints unreachable in
/// turn), slower than the call's timeout. What it last answered the primary is recorded, for the
/// drain check (`stores`): a primary told "standby" must start no new work.
#[derive(Debug)]
pub struct SimControl {
    pub region: Region,
    pub active: Arc<Mutex<Region>>,
    pub shared: Arc<Shared>,
}

#[async_trait]
impl ActivitySource for SimControl {
    async fn activity(&self) -> Result<Activity, ControlError> {
        if self.shared.fault(self.shared.faults.control_slow) {
            self.shared.cover("control read slower than its timeout");
            // A store read at its timeout: a fault like any other store call's, which a
            // request of a few seconds may not survive (L1 and TIME are excused by it).
            self.shared.fault_happened(self.region, "control read slower than its timeout");
            let latency_ms = 3_500 + self.shared.below(6_500);
            self.shared.clock.sleep_ms(latency_ms).await;
        }
        let active = *self.active.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        let answer = if active == self.region { Activity::Active } else { Activity::Standby };
        if self.region == Region::Primary {
            let elapsed_ms = self.shared.elapsed_ms();
            let mut observed = self.shared.observed();
            observed.primary_told = Some((answer == Activity::Active, elapsed_ms));
            if answer == Activity::Active {
                observed.primary_told_active.push(elapsed_ms);
            }
        }
        Ok(answer)
    }
}
