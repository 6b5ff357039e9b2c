//! The entry point of a Lambda function built on cfn-once: one builder, providers registered by
//! ResourceType, then [`Handler::run`], in the shape of `lambda_runtime::run(service_fn(..))`.
//!
//! [`Handler::from_env`] installs the JSON logs, reads the configuration once (naming every
//! missing or malformed variable in one error), and [`Handler::run`] loads the AWS SDK
//! configuration once, builds the clients once and serves SQS batches until Lambda stops the
//! process. The same entry serves the lease table's sweeper: with `CFN_ONCE_MODE=sweeper` the
//! function sweeps instead, and needs only `AWS_REGION` and `CFN_ONCE_TABLE`.

use std::collections::BTreeMap;

use aws_config::SdkConfig;
use cfn_once_core::provider::{Provider, Router};
use lambda_runtime::{LambdaEvent, service_fn};

use crate::app::App;
use crate::config::{self, Config, ConfigError, Mode, SweeperConfig};

/// Why a function built on cfn-once could not start or stopped serving.
///
/// Its `Debug` is its message, so that a `main` returning `Result<(), cfn_once::Error>` prints
/// one readable line ("Error: configuration is invalid: ...").
#[derive(thiserror::Error)]
pub enum Error {
    /// The environment does not configure the function; the message names every problem.
    #[error(transparent)]
    Config(#[from] ConfigError),
    /// Something the function needs at start could not be set up (the metrics recorder, the
    /// HTTP client).
    #[error("cannot start: {0}")]
    Setup(String),
    /// The Lambda runtime stopped: the Runtime API failed, or the function was misconfigured.
    #[error("the Lambda runtime stopped: {0}")]
    Runtime(String),
    /// The function was started outside Lambda: there is no Runtime API to serve.
    #[error(
        "not running in AWS Lambda: AWS_LAMBDA_RUNTIME_API is not set. The function serves Lambda's Runtime API; deploy it (infra/regional.yaml), or run it locally under a stand-in: `cargo lambda watch` in your crate, or `make local` in cfn-once's repository for the stock providers"
    )]
    NotInLambda,
}

impl std::fmt::Debug for Error {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        std::fmt::Display::fmt(self, f)
    }
}

/// What a provider is built from when the function starts ([`Handler::provider_with`]): the AWS
/// SDK configuration the function loaded once (region, credentials, cfn-once's HTTPS client),
/// and the settings the deployment gave the function's own providers
/// (`CFN_ONCE_PROVIDER_ENVIRONMENT`, the regional template's `ProviderEnvironment`).
#[derive(Debug, Clone, Copy)]
pub struct ProviderSetup<'a> {
    sdk: &'a SdkConfig,
    environment: &'a BTreeMap<String, String>,
}

impl<'a> ProviderSetup<'a> {
    /// A setup on `sdk` with `environment` (tests and tools).
    pub fn new(sdk: &'a SdkConfig, environment: &'a BTreeMap<String, String>) -> Self {
        Self { sdk, environment }
    }

    /// The AWS SDK configuration: build clients with it (`aws_sdk_s3::Client::new(setup.sdk())`;
    /// a table written under fences with `FencedTable::new(setup.sdk(), "table")`, which makes
    /// its own client).
    pub fn sdk(&self) -> &'a SdkConfig {
        self.sdk
    }

    /// Whether the SDK's credentials are loaded anew after they expire, for a provider's own
    /// AWS calls: with `let refresh = setup.refresh()` kept in the provider,
    /// `ProviderError::from(refresh.reconsider(classify(&error)).await)` retries a refusal for
    /// expired credentials now where the SDK reloads them, and leaves it to a later invocation
    /// (`ProviderError::Deferred`) where nothing does, as inside Lambda. It looks at the
    /// credentials provider at most once a minute (`fenced::REFRESH_LOOK_KEPT_MS`).
    pub fn refresh(&self) -> crate::fenced::Refresh {
        crate::fenced::Refresh::of(self.sdk.credentials_provider())
    }

    /// A provider setting the deployment gave, e.g. `setup.var("POLICY_TABLE")`.
    pub fn var(&self, name: &str) -> Option<&'a str> {
        self.environment.get(name).map(String::as_str)
    }
}

/// A registration applied to the router when the function starts, in the order given, with the
/// AWS SDK configuration the function loaded and the providers' settings.
type Registration = Box<dyn FnOnce(Router, &ProviderSetup<'_>) -> Router + Send>;

/// The function's [`Mode`] with the configuration that mode reads.
enum Configured {
    Handler(Box<Config>),
    Sweeper(SweeperConfig),
}

impl Configured {
    fn mode(&self) -> Mode {
        match self {
            Self::Handler(_) => Mode::Handler,
            Self::Sweeper(_) => Mode::Sweeper,
        }
    }
}

/// The function: its configuration and the providers it serves.
///
/// ```no_run
/// use cfn_once::Handler;
///
/// # async fn start() -> Result<(), cfn_once::Error> {
/// Handler::from_env()?.with_standard_providers().run().await
/// # }
/// ```
pub struct Handler {
    configured: Configured,
    standard: bool,
    registrations: Vec<Registration>,
}

impl std::fmt::Debug for Handler {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Handler")
            .field("mode", &self.configured.mode())
            .field("standard_providers", &self.standard)
            .field("providers", &self.registrations.len())
            .finish()
    }
}

impl Handler {
    /// Installs the JSON logs (level from `AWS_LAMBDA_LOG_LEVEL`, then `RUST_LOG`, then INFO)
    /// and reads the configuration from the environment: the `CFN_ONCE_*` variables, or with
    /// `CFN_ONCE_MODE=sweeper` the sweeper's. Every problem is named in the error, which `main`
    /// prints once. Its first log line, before any invocation, says which cfn-once this is
    /// ([`cfn_once_core::build`]: version and commit) and in which role and region it runs.
    pub fn from_env() -> Result<Self, Error> {
        crate::logging::init_json(config::log_level());
        let configured = match config::mode() {
            Ok(Mode::Sweeper) => SweeperConfig::from_env().map(Configured::Sweeper),
            Ok(Mode::Handler) => Config::from_env().map(|config| Configured::Handler(Box::new(config))),
            Err(error) => Err(error),
        }?;
        let (role, region) = match &configured {
            Configured::Handler(config) => (config.role.as_str(), config.region.as_str()),
            Configured::Sweeper(config) => ("sweeper", config.region.as_str()),
        };
        let (version, commit) = (cfn_once_core::build::VERSION, cfn_once_core::build::COMMIT);
        tracing::info!(version, commit, role, region, "cfn-once {} starting", cfn_once_core::build::DESCRIPTION);
        Ok(Self { configured, standard: false, registrations: Vec::new() })
    }

    /// A handler for requests with `config`, as [`Handler::from_env`] would read it (tests and
    /// tools that configure the function themselves).
    pub fn with_config(config: Config) -> Self {
        Self { configured: Configured::Handler(Box::new(config)), standard: false, registrations: Vec::new() }
    }

    /// Serves `resource_type` (for example `Custom::BucketPolicy`) with `provider`. A later
    /// registration of the same type replaces an earlier one, a standard provider included.
    pub fn provider<P: Provider>(self, resource_type: &str, provider: P) -> Self {
        self.provider_with(resource_type, move |_| provider)
    }

    /// Serves `resource_type` with the provider `make` builds when the function starts, from the
    /// AWS SDK configuration it loads once (region, credentials) and the settings the deployment
    /// gave its providers ([`ProviderSetup`]), for providers that call AWS.
    ///
    /// ```no_run
    /// # use cfn_once::prelude::*;
    /// # struct Inventory { table: FencedTable }
    /// # #[async_trait]
    /// # impl Provider for Inventory {
    /// #     type Properties = serde_json::Value;
    /// #     async fn create(&self, _: &ProviderContext, _: Self::Properties) -> Result<Step, ProviderError> { Ok(ProviderOutput::new().into()) }
    /// #     async fn update(&self, _: &ProviderContext, _: &str, _: Self::Properties, _: Option<Self::Properties>) -> Result<Step, ProviderError> { Ok(ProviderOutput::new().into()) }
    /// #     async fn delete(&self, _: &ProviderContext, _: &str, _: Self::Properties) -> Result<Step<()>, ProviderError> { Ok(Step::Done(())) }
    /// # }
    /// # async fn start() -> Result<(), cfn_once::Error> {
    /// Handler::from_env()?
    ///     .provider_with("Custom::Inventory", |setup| Inventory {
    ///         table: FencedTable::new(setup.sdk(), setup.var("INVENTORY_TABLE").unwrap_or("inventory")),
    ///     })
    ///     .run()
    ///     .await
    /// # }
    /// ```
    pub fn provider_with<P: Provider>(
        mut self,
        resource_type: &str,
        make: impl FnOnce(&ProviderSetup<'_>) -> P + Send + 'static,
    ) -> Self {
        let resource_type = resource_type.to_owned();
        self.registrations.push(Box::new(move |router: Router, setup: &ProviderSetup<'_>| {
            router.register(&resource_type, make(setup))
        }));
        self
    }

    /// Also serves the providers cfn-once ships: `Custom::Echo`, and `Custom::DynamoDBItem`
    /// (which writes only the tables `CFN_ONCE_ITEM_TABLES` allows; none by default).
    pub fn with_standard_providers(mut self) -> Self {
        self.standard = true;
        self
    }

    /// The providers this handler serves, on `sdk`'s AWS configuration.
    pub fn router(self, config: &Config, sdk: &SdkConfig) -> Router {
        let router = if self.standard { crate::providers::standard_router(config, sdk) } else { Router::new() };
        let setup = ProviderSetup::new(sdk, &config.provider_environment);
        self.registrations.into_iter().fold(router, |router, register| register(router, &setup))
    }

    /// Loads the AWS SDK configuration (region, credentials, endpoint) on cfn-once's HTTPS client
    /// (`adapters::https`: one TLS configuration, compiled-in roots or `SSL_CERT_FILE`'s, which
    /// providers' clients made from the `SdkConfig` share) and serves Lambda invocations until the
    /// runtime stops.
    pub async fn run(self) -> Result<(), Error> {
        if config::lambda_runtime_api().is_none() {
            return Err(Error::NotInLambda);
        }
        let tls = crate::adapters::https::client_config().map_err(Error::Setup)?;
        let sdk = aws_config::defaults(aws_config::BehaviorVersion::latest())
            .http_client(crate::adapters::https::sdk_http_client(tls))
            .load()
            .await;
        let config = match &self.configured {
            Configured::Sweeper(config) => return run_sweeper(config, &sdk).await,
            Configured::Handler(config) => Config::clone(config),
        };
        if let Some(handler_timeout_s) = config.handler_timeout_s {
            functions_fit(&config, &sdk, handler_timeout_s).await?;
        }
        let metrics = crate::emf::install(&config.region, config.role.as_str())
            .map_err(|error| Error::Setup(error.to_string()))?;
        let router = self.router(&config, &sdk);
        let app = App::from_config(&config, &sdk, router).map_err(|error| Error::Setup(format!("{error:#}")))?;
        let app = &app.with_metrics(metrics);
        // A primary's records never wait for the active-region control (control.rs): the first
        // one asks it beside its acquire, and the answer is renewed in the background from then
        // on. The init reads nothing, so the cold start is what it was without a control.
        if let Some(renewal) = app.worker.control_renewal() {
            tokio::spawn(renewal);
        }
        // As `lambda_runtime::run`, with the payload made JSON text record by record before the
        // runtime deserializes it (`raw_event`), so a record that is not cannot fail its batch.
        lambda_runtime::Runtime::new(service_fn(move |event: LambdaEvent<_>| crate::lambda::handle_event(app, event)))
            .layer(crate::raw_event::ReadableLayer)
            .layer(lambda_runtime::layers::TracingLayer::new())
            .run()
            .await
            .map_err(|error| Error::Runtime(error.to_string()))
    }
}

/// Refuses to start a handler whose invocations, `handler_timeout_s` long, cannot wait for one of
/// its `CFN_ONCE_FUNCTIONS` `onEvent` or `isComplete` functions (`providers::function::timeouts`): such a function would be
/// cut off while it may still run, so no request of its type could be answered once.
async fn functions_fit(config: &Config, sdk: &SdkConfig, handler_timeout_s: u64) -> Result<(), Error> {
    use crate::providers::function::{LambdaInvoker, check_at_start};
    if config.functions.is_empty() {
        return Ok(());
    }
    let invoker = LambdaInvoker::new(sdk);
    // A function that answers by itself need not be waited for: its answer is read from its
    // object whenever it comes, so only the others must fit.
    let functions = config.functions.iter().filter(|route| !route.answers_itself).flat_map(|route| {
        std::iter::once(route.on_event.as_str()).chain(route.is_complete.as_ref().map(|f| f.as_str()))
    });
    check_at_start(functions, &invoker, handler_timeout_s, config.settings().reserve_ms())
        .await
        .map_err(Error::Setup)
}

/// The scheduled sweeper: one sweep per invocation, within the invocation's time.
async fn run_sweeper(config: &SweeperConfig, sdk: &SdkConfig) -> Result<(), Error> {
    use cfn_once_core::clock::Clock;
    let client = crate::app::sweeper_client(sdk);
    let (client, table) = (&client, config.table_name.as_str());
    lambda_runtime::run(service_fn(move |event: LambdaEvent<serde_json::Value>| async move {
        // Keep 10 s of the invocation to finish the page in hand and report.
        let left_ms = event.context.deadline.saturating_sub(crate::system_clock::SystemClock.now_ms());
        let stop_at = std::time::Instant::now() + std::time::Duration::from_millis(left_ms.saturating_sub(10_000));
        let report = crate::sweeper::sweep(client, table, crate::system_clock::SystemClock.now_ms(), stop_at).await?;
        tracing::info!(?report, "sweep done");
        Ok::<_, lambda_runtime::Error>(serde_json::to_value(report)?)
    }))
    .await
    .map_err(|error| Error::Runtime(error.to_string()))
}
