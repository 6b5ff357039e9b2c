//! Both regions' workers on one local environment: what `make local`, `make demo` and the
//! two-region tests run.

use std::sync::Arc;

use cfn_once_core::vocabulary::Role;
use cfn_once_core::worker::Ports;

use crate::environment::LocalEnvironment;
use crate::esm::{EsmSettings, LocalEventSourceMapping};
use crate::functions::LocalFunctions;
use crate::settings::handler_timeout_ms;
// The settings live below both this file and the environment; their old paths stay.
pub use crate::settings::{
    ESM_CONCURRENCY_MAX, ESM_SETTINGS, LOCAL_MAX_RECEIVE_COUNT, LOCAL_SETTINGS, LOCAL_SETTLE_MS,
    LOCAL_VISIBILITY_TIMEOUT_S,
};
use crate::worker::RegionalWorker;
use cfn_once::adapters::http_sink::HttpResponseSink;
use cfn_once::app::{App, Observer};

/// A primary and a secondary worker.
#[derive(Debug)]
pub struct RegionPair {
    pub primary: RegionalWorker,
    pub secondary: RegionalWorker,
}

impl RegionPair {
    /// Builds both regions' handlers with the environment's configuration plus `overrides`,
    /// each reporting to `observer(role)` if it gives one, and starts them.
    pub async fn start(
        env: &LocalEnvironment,
        overrides: &[(&str, &str)],
        observer: impl Fn(Role) -> Option<Observer>,
    ) -> anyhow::Result<Self> {
        Self::start_serving(env, overrides, observer, None).await
    }

    /// Like [`RegionPair::start`], each region also serving the functions file's types
    /// (`CFN_ONCE_FUNCTIONS`) from its own copies of `functions`, as a deployment does. Each
    /// region's mapping hands its handler up to [`ESM_CONCURRENCY_MAX`] batches at once.
    pub async fn start_serving(
        env: &LocalEnvironment,
        overrides: &[(&str, &str)],
        observer: impl Fn(Role) -> Option<Observer>,
        functions: Option<&LocalFunctions>,
    ) -> anyhow::Result<Self> {
        let mut workers = Vec::new();
        for role in [Role::Primary, Role::Secondary] {
            workers.push(
                Self::build(env, role, overrides, observer(role), |ports| ports, functions, ESM_CONCURRENCY_MAX)
                    .await?,
            );
        }
        let (mut primary, mut secondary) = {
            let mut workers = workers.into_iter();
            (workers.next().expect("the primary"), workers.next().expect("the secondary"))
        };
        primary.start();
        secondary.start();
        Ok(Self { primary, secondary })
    }

    /// One region's worker as [`RegionPair::start_serving`] builds it, not started: a fresh one
    /// to replace a crashed worker (`cfn-once local` on SIGUSR2, `cfn_once_local::signals`), keeping
    /// nothing of the old one's state, as a new Lambda execution environment keeps nothing of a
    /// dead one's.
    pub async fn serving_worker(
        env: &LocalEnvironment,
        role: Role,
        overrides: &[(&str, &str)],
        observer: Option<Observer>,
        functions: Option<&LocalFunctions>,
    ) -> anyhow::Result<RegionalWorker> {
        Self::build(env, role, overrides, observer, |ports| ports, functions, ESM_CONCURRENCY_MAX).await
    }

    /// One region's worker, not started.
    pub async fn worker(
        env: &LocalEnvironment,
        role: Role,
        overrides: &[(&str, &str)],
        observer: Option<Observer>,
    ) -> anyhow::Result<RegionalWorker> {
        Self::worker_with(env, role, overrides, observer, |ports| ports).await
    }

    /// One region's worker with some ports replaced (tests inject faults), not started.
    pub async fn worker_with(
        env: &LocalEnvironment,
        role: Role,
        overrides: &[(&str, &str)],
        observer: Option<Observer>,
        customize: impl FnOnce(Ports) -> Ports,
    ) -> anyhow::Result<RegionalWorker> {
        // One batch at a time: the tests' many workers share one moto, which ten batches per
        // region at once (the storm test's 200 requests) would overload.
        Self::build(env, role, overrides, observer, customize, None, 1).await
    }

    async fn build(
        env: &LocalEnvironment,
        role: Role,
        overrides: &[(&str, &str)],
        observer: Option<Observer>,
        customize: impl FnOnce(Ports) -> Ports,
        functions: Option<&LocalFunctions>,
        concurrency_max: usize,
    ) -> anyhow::Result<RegionalWorker> {
        let region = env.region(role);
        let mut sdk = env.sdk(region).await;
        let mut settings: Vec<(&str, String)> =
            overrides.iter().map(|(name, value)| (*name, (*value).to_owned())).collect();
        if let Some(functions) = functions {
            settings.extend(functions.settings(region));
            sdk = functions.sdk(region, &sdk);
        }
        let settings: Vec<(&str, &str)> = settings.iter().map(|(name, value)| (*name, value.as_str())).collect();
        let config = env.config(role, &settings)?;
        // What the stock function serves (handler/cfn-once/src/main.rs).
        let router = cfn_once::providers::standard_router(&config, &sdk);
        // The ResponseURL sink trusts the environment's CA, for ResponseURLs on its HTTPS face.
        let tls = env.tls()?;
        let sink = Arc::new(HttpResponseSink::with_tls(config.put_timeout_ms, &tls)?);
        let mut app = App::from_config_with(&config, &sdk, router, |ports| customize(Ports { sink, ..ports }))?;
        if let Some(observer) = observer {
            app = app.observed(observer);
        }
        // The handler's invocations are as long as its own timeout says, or as its functions
        // need: an Invoke is never cut off by the handler's end while its function may run.
        let function_timeout_ms = match (config.handler_timeout_s, functions) {
            (Some(timeout_s), _) => timeout_s * 1000,
            (None, Some(functions)) => handler_timeout_ms(functions.timeouts_ms(), config.settings().reserve_ms()),
            (None, None) => ESM_SETTINGS.function_timeout_ms,
        };
        let esm_settings = EsmSettings { function_timeout_ms, ..ESM_SETTINGS };
        let esm = LocalEventSourceMapping::new(aws_sdk_sqs::Client::new(&sdk), &env.queues(role).url, esm_settings)
            .await?
            .with_concurrency(concurrency_max);
        Ok(RegionalWorker::new(app, esm))
    }

    /// Stops both after their batches in hand.
    pub async fn stop(&mut self) {
        self.primary.stop().await;
        self.secondary.stop().await;
    }
}

/// An observer that prints one line per record handled, for `make local`.
pub fn printing_observer(region: &str, role: Role) -> Observer {
    let label = format!("{region} {:<9}", role.as_str());
    Arc::new(move |handled| println!("{}", crate::report::line(&label, handled)))
}
