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

/// The control item, as the region reads it (instantly consistent, as the table's item is).
#[derive(Debug)]
pub struct SimControl {
    pub region: Region,
    pub active: Arc<Mutex<Region>>,
}

#[async_trait]
impl ActivitySource for SimControl {
    async fn activity(&self) -> Result<Activity, ControlError> {
        let active = *self.active.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        Ok(if active == self.region { Activity::Active } else { Activity::Standby })
    }
}
