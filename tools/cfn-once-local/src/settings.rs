//! The local environment's settings, which the environment, the functions and both regions'
//! workers share: the local event source mapping's, the queues' (as `infra/regional.yaml` maps
//! them from the function's), and the handlers' overrides for local runs. They sit below the
//! modules that use them, so that none of those has to reach into another for a number.

use crate::esm::EsmSettings;

/// The local event source mapping's settings: batches of 10, a 1 s long poll, a 60 s function
/// timeout, unless the handler serves functions that need longer ([`handler_timeout_ms`]).
pub const ESM_SETTINGS: EsmSettings = EsmSettings { batch_size: 10, wait_time_s: 1, function_timeout_ms: 60_000 };

/// Batches the local event source mapping hands each region's handler at once: the regional
/// template's `MaximumConcurrency` default (the handler's reserved concurrency), so one slow
/// request holds back only its own batch, as in Lambda.
pub const ESM_CONCURRENCY_MAX: usize = 10;

/// The local queues' visibility timeout, as `infra/regional.yaml` maps it from the function
/// timeout: one minute over it.
pub const LOCAL_VISIBILITY_TIMEOUT_S: u32 = (ESM_SETTINGS.function_timeout_ms / 1_000) as u32 + 60;

/// The local queues' receive limit: the deployed one, which the handler assumes by default.
pub const LOCAL_MAX_RECEIVE_COUNT: u32 = cfn_once_core::config::MAX_RECEIVE_COUNT_DEFAULT;

/// Handler settings for local runs: the control is re-read every second (so a drill settles
/// quickly) and a standby primary looks again after 5 s. Everything else is the default.
pub const LOCAL_SETTINGS: [(&str, &str); 2] =
    [("CFN_ONCE_CONTROL_CACHE_MS", "1000"), ("CFN_ONCE_STANDBY_RETRY_S", "5")];

/// How long the drill waits after a flip with [`LOCAL_SETTINGS`].
pub use cfn_once_ops::drill::LOCAL_SETTLE_MS;

/// The local handler's Lambda timeout, in ms: [`ESM_SETTINGS`]'s, or longer when a function it
/// serves needs it (`function_timeouts_ms`, each function's own timeout), so that every
/// invocation can wait for a function's whole timeout with `reserve_ms` kept to answer
/// (`cfn_once::providers::function::timeouts`), as a deployment's FunctionTimeoutSeconds must.
pub fn handler_timeout_ms(function_timeouts_ms: impl IntoIterator<Item = u64>, reserve_ms: u64) -> u64 {
    function_timeouts_ms
        .into_iter()
        .map(|timeout_ms| {
            cfn_once::providers::function::timeouts::handler_timeout_needed_s(timeout_ms, reserve_ms) * 1000
        })
        .fold(ESM_SETTINGS.function_timeout_ms, u64::max)
}

#[cfg(test)]
mod tests {
    use super::handler_timeout_ms;

    #[test]
    fn the_handlers_window_grows_with_the_functions_it_serves() {
        assert_eq!(handler_timeout_ms([], 16_500), 60_000);
        assert_eq!(handler_timeout_ms([10_000, 30_000], 16_500), 72_000);
        assert_eq!(handler_timeout_ms([300_000, 10_000], 16_500), 342_000);
    }
}
