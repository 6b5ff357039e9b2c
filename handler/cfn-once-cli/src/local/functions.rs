//! The example functions of `examples/functions/`, run locally in each region as Lambda runs them
//! and served the way a deployment serves its functions: `CFN_ONCE_FUNCTIONS` routes resource
//! types to them, and the handler's own `aws-sdk-lambda` client reaches its region's copies
//! through a Lambda endpoint of their own (what `AWS_ENDPOINT_URL_LAMBDA` does in AWS), the local
//! Invoke API; everything else stays on moto.
//!
//! * `Custom::Reservation`: `examples/functions/cdk-provider` (the CDK Provider framework's
//!   contract), `on-event` and `is-complete`.
//! * `Custom::Greeting`: `examples/functions/cfn-response` (answers by itself, as `cfnresponse`
//!   does), `greeter`, PUTting to the region's answer bucket on moto.

use std::path::{Path, PathBuf};

use anyhow::Context;
use aws_config::SdkConfig;
use aws_types::origin::Origin;
use aws_types::service_config::{LoadServiceConfig, ServiceConfigKey};

use crate::local::environment::{LocalEnvironment, s3_client};
use crate::local::invoke_api::InvokeApi;
use crate::local::lambda_service::{FunctionSpec, LocalFunction};

/// The resource type answered by the CDK-style example.
pub const RESERVATION_TYPE: &str = "Custom::Reservation";
/// The resource type answered by the `cfn-response` example.
pub const GREETING_TYPE: &str = "Custom::Greeting";
/// `CFN_ONCE_FUNCTIONS` for the examples, as the regional template's `Functions` would say it.
pub const ROUTES: &str = "Custom::Reservation=on-event|is-complete,Custom::Greeting=cfn-response:greeter";

/// One region's copies of the example functions.
struct Region {
    region: String,
    api: InvokeApi,
    answer_bucket: String,
}

/// The example functions in both regions of a local environment.
pub struct LocalFunctions {
    regions: Vec<Region>,
    logs: PathBuf,
}

impl std::fmt::Debug for LocalFunctions {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let regions: Vec<&str> = self.regions.iter().map(|region| region.region.as_str()).collect();
        f.debug_struct("LocalFunctions").field("regions", &regions).field("logs", &self.logs).finish()
    }
}

impl LocalFunctions {
    /// Starts each region's copies of the examples in `examples` (Python, under awslambdaric
    /// with `python`), logging into `logs`, and creates each region's answer bucket
    /// `<bucket_prefix>-answers-<region>` on the environment's moto.
    pub async fn start(
        env: &LocalEnvironment,
        python: &Path,
        examples: &Path,
        logs: &Path,
        bucket_prefix: &str,
    ) -> anyhow::Result<Self> {
        std::fs::create_dir_all(logs).with_context(|| format!("cannot create {}", logs.display()))?;
        let file = &env.file;
        let mut regions = Vec::new();
        for region in [&file.primary_region, &file.secondary_region] {
            let function = |name: &str, code: &str, handler: &str| {
                LocalFunction::new(FunctionSpec::python(
                    name,
                    region,
                    python,
                    &examples.join(code),
                    handler,
                    logs.join(format!("{region}-{name}.log")),
                ))
            };
            let api = InvokeApi::start(vec![
                function("on-event", "cdk-provider", "app.on_event")?,
                function("is-complete", "cdk-provider", "app.is_complete")?,
                function("greeter", "cfn-response", "app.handler")?,
            ])
            .await?;
            let answer_bucket = format!("{bucket_prefix}-answers-{region}");
            let s3 = s3_client(&env.sdk(region).await);
            crate::local::provision::create_bucket_in(&s3, &answer_bucket, region).await?;
            regions.push(Region { region: region.clone(), api, answer_bucket });
        }
        Ok(Self { regions, logs: logs.to_path_buf() })
    }

    fn region(&self, region: &str) -> &Region {
        self.regions.iter().find(|r| r.region == region).expect("the functions run in both regions")
    }

    /// Where the functions' processes log.
    pub fn logs(&self) -> &Path {
        &self.logs
    }

    /// The Invoke API of `region`'s copies (to count or throttle invokes).
    pub fn api(&self, region: &str) -> &InvokeApi {
        &self.region(region).api
    }

    /// The answer bucket of `region`.
    pub fn answer_bucket(&self, region: &str) -> &str {
        &self.region(region).answer_bucket
    }

    /// The handler settings of `region` that route the examples' types to its copies.
    pub fn settings(&self, region: &str) -> [(&'static str, String); 2] {
        [("CFN_ONCE_FUNCTIONS", ROUTES.to_owned()), ("CFN_ONCE_ANSWER_BUCKET", self.answer_bucket(region).to_owned())]
    }

    /// `sdk` with Lambda calls sent to `region`'s Invoke API, every other service where it was.
    pub fn sdk(&self, region: &str, sdk: &SdkConfig) -> SdkConfig {
        lambda_at(sdk, self.api(region).endpoint())
    }
}

/// `sdk` with the Lambda endpoint `endpoint`, as `AWS_ENDPOINT_URL_LAMBDA` sets it: a
/// service-specific endpoint, which the SDK reads only when the shared endpoint does not come
/// from code, so the shared one is marked as coming from the environment (it does, in AWS).
pub fn lambda_at(sdk: &SdkConfig, endpoint: &str) -> SdkConfig {
    let mut builder = sdk.to_builder();
    builder.set_service_config(Some(LambdaEndpoint(endpoint.to_owned())));
    builder.insert_origin("endpoint_url", Origin::shared_environment_variable());
    builder.build()
}

/// A Lambda-only endpoint.
#[derive(Debug)]
struct LambdaEndpoint(String);

impl LoadServiceConfig for LambdaEndpoint {
    fn load_config(&self, key: ServiceConfigKey<'_>) -> Option<String> {
        (key.service_id() == "Lambda" && key.env() == "AWS_ENDPOINT_URL").then(|| self.0.clone())
    }
}
