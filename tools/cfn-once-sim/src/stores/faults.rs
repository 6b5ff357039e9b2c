//! The seeded faults a region's store calls meet (throttling, lost requests and replies,
//! hangs, outages, the late faults after the fault window), and the planted bug that forgets
//! a work's committed signal.

use cfn_once_core::lease::{AcquireRequest, LeaseRecord, LeaseState, StoreError};
use cfn_once_core::wait_condition::is_work_id;

use super::RegionStore;

/// What the dice chose for one call.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Fault {
    None,
    Transient,
    LostRequest,
    LostReply,
    Hang,
}

impl RegionStore {
    fn roll(&self, operation: &'static str) -> Fault {
        if self.shared.store_out() {
            self.shared.cover("store call failed in an outage");
            self.shared.fault_happened(self.region, "store call failed in an outage");
            // Half the calls are refused outright, half time out without an answer.
            let fault = if self.shared.dice(0.5) { Fault::Transient } else { Fault::LostRequest };
            self.shared.trace(Some(self.region), || format!("{operation}: store out, {fault:?}"));
            return fault;
        }
        // Dice are rolled for the late faults only while their window is open, so that every
        // other seed draws as before.
        if let Some(late) = self.shared.late_store_faults_now() {
            let fault = if self.shared.dice(late.lost_reply) {
                Fault::LostReply
            } else if self.shared.dice(late.lost_request) {
                Fault::LostRequest
            } else {
                Fault::None
            };
            if fault != Fault::None {
                self.shared.cover("store reply or request lost after the fault window");
                self.shared.fault_happened(self.region, "store reply or request lost after the fault window");
                self.shared.trace(Some(self.region), || format!("{operation}: injected late {fault:?}"));
                return fault;
            }
        }
        let faults = self.shared.faults;
        let fault = if self.shared.fault(faults.store_transient) {
            Fault::Transient
        } else if self.shared.fault(faults.store_lost_request) {
            Fault::LostRequest
        } else if self.shared.fault(faults.store_lost_reply) {
            Fault::LostReply
        } else if self.shared.fault(faults.store_hang) {
            Fault::Hang
        } else {
            Fault::None
        };
        if fault != Fault::None {
            let name = match fault {
                Fault::Transient => "store throttled",
                Fault::LostRequest => "store request lost",
                Fault::LostReply => "store write applied, reply lost",
                Fault::Hang => "store call hung",
                Fault::None => unreachable!(),
            };
            self.shared.cover(name);
            self.shared.fault_happened(self.region, name);
            self.shared.trace(Some(self.region), || format!("{operation}: injected {fault:?}"));
        }
        fault
    }

    /// Runs `apply` under the rolled fault.
    pub(super) async fn call<T>(
        &self,
        operation: &'static str,
        apply: impl Future<Output = Result<T, StoreError>>,
    ) -> Result<T, StoreError> {
        match self.roll(operation) {
            Fault::None => apply.await,
            Fault::Transient => Err(StoreError::Transient("simulated throttling".into())),
            Fault::LostRequest => Err(StoreError::Ambiguous("simulated lost request".into())),
            Fault::LostReply => {
                apply.await?;
                Err(StoreError::Ambiguous("simulated lost reply".into()))
            }
            Fault::Hang => {
                apply.await?;
                std::future::pending().await
            }
        }
    }

    /// The planted [`PlantedBug::SignalAgain`]: an acquire by another execution finds a work's
    /// committed signal forgotten, its lease expired, as if nothing had been committed.
    pub(super) fn forget_signal(&self, request: &AcquireRequest) {
        let Some(record) = self.local().get(&request.key) else { return };
        if is_work_id(&request.key.request_id)
            && record.state == LeaseState::Committed
            && record.owner != request.owner
            && record.fingerprint == request.fingerprint
        {
            self.local().replicate(LeaseRecord {
                state: LeaseState::Running,
                response: None,
                delivered: false,
                lease_until_ms: 0,
                updated_ms: record.updated_ms + 1,
                ..record
            });
        }
    }
}
