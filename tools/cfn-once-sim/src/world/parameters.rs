//! What every seed runs on: the deployed template's parameters and the handler settings they
//! imply, and the time windows the checks derive from them.

use std::collections::BTreeMap;

use cfn_once_core::settings::Settings;

use crate::deployed::Deployed;
use crate::scenario::Region;

/// What every seed runs on: the regional template's parameters and the handler settings its
/// environment implies, per region (with the default function timeout), and per region and
/// allowed function timeout.
#[derive(Debug, Clone)]
pub struct Parameters {
    pub deployed: Deployed,
    pub settings: [Settings; 2],
    pub settings_by_timeout: BTreeMap<u64, [Settings; 2]>,
}

impl Parameters {
    /// The deployed parameters, read once per process.
    pub fn deployed() -> &'static Parameters {
        static PARAMETERS: std::sync::OnceLock<Parameters> = std::sync::OnceLock::new();
        PARAMETERS.get_or_init(|| {
            let deployed = Deployed::regional().unwrap_or_else(|e| panic!("cannot read the deployed parameters: {e}"));
            let settings = Region::BOTH.map(|region| {
                deployed
                    .settings(region.role(), region.name())
                    .unwrap_or_else(|e| panic!("the template's handler: {e}"))
            });
            let settings_by_timeout = deployed
                .function_timeouts
                .iter()
                .map(|timeout| {
                    let settings = Region::BOTH.map(|region| {
                        deployed
                            .settings_with_timeout(region.role(), region.name(), timeout.timeout_s)
                            .unwrap_or_else(|e| panic!("the template's handler: {e}"))
                    });
                    (timeout.timeout_s, settings)
                })
                .collect();
            Parameters { deployed, settings, settings_by_timeout }
        })
    }

    /// How long before a request's deadline its last fault may happen for L1 to be owed: the
    /// deadline margin (in which whoever sees the request answers it) and one backoff floor
    /// (a copy whose invocation died just before the margin comes back a floor later), plus a
    /// second for the whole seconds visibility is set in.
    pub fn last_fault_window_ms(&self) -> u64 {
        let settings = &self.settings[0];
        settings.deadline_margin_ms + u64::from(settings.backoff_floor_s().unwrap_or(60)) * 1_000 + 1_000
    }

    /// How far before that window a clock fault still reaches, with a queue visibility timeout
    /// of `visibility_s`: what a Lambda schedules on a wrong clock outlives the fault, a lease
    /// (and its skew) by its length, a backoff by the longest backoff, and a record's shortened
    /// visibility (computed from the clock) by up to the visibility timeout.
    pub fn clock_fault_reach_ms(&self, visibility_s: u64) -> u64 {
        let settings = &self.settings[0];
        (settings.lease_ms + settings.skew_ms)
            .max(u64::from(settings.retry_delay_s_max) * 1_000)
            .max(visibility_s * 1_000)
    }
}
