//! The example functions of `examples/functions/`, run locally in each region as Lambda runs them
//! and served the way a deployment serves its functions: `CFN_ONCE_FUNCTIONS` routes resource
//! types to them, and the handler's own `aws-sdk-lambda` client reaches its region's copies
//! through a Lambda endpoint of their own (what `AWS_ENDPOINT_URL_LAMBDA` does in AWS), the local
//! Invoke API, and its S3 client reaches the answer buckets through the environment's HTTPS
//! endpoint (what `AWS_ENDPOINT_URL_S3` would do), so the answer URLs it presigns are `https://`
//! URLs, as in AWS; everything else stays on moto. The functions' processes trust the
//! environment's CA as a Lambda runtime finds its trust store: `SSL_CERT_FILE` (OpenSSL, so
//! Python's `ssl`, `urllib`, `http.client` and urllib3), `REQUESTS_CA_BUNDLE` (requests) and
//! `AWS_CA_BUNDLE` (botocore, the AWS CLI).
//!
//! * `Custom::Reservation`: `examples/functions/cdk-provider` (the CDK Provider framework's
//!   contract), `on-event` and `is-complete`.
//! * `Custom::Greeting`: `examples/functions/cfn-response` (answers by itself, as `cfnresponse`
//!   does), `greeter`, PUTting to the region's answer bucket on moto.

use std::path::{Path, PathBuf};
use std::sync::Arc;

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

/// The variables that make a function's process trust a CA file, each for the clients that
/// read it: OpenSSL (`SSL_CERT_FILE`: Python's `ssl` and everything on it, Node.js with
/// `--use-openssl-ca`, curl), requests (`REQUESTS_CA_BUNDLE`) and the AWS SDKs and CLI
/// (`AWS_CA_BUNDLE`).
pub const CA_VARIABLES: [&str; 3] = ["SSL_CERT_FILE", "REQUESTS_CA_BUNDLE", "AWS_CA_BUNDLE"];

/// `spec` with its processes trusting the certificates of `ca_file` (and only those: the
/// variables replace the default trust store) through [`CA_VARIABLES`].
pub fn trusting(mut spec: FunctionSpec, ca_file: &Path) -> FunctionSpec {
    for name in CA_VARIABLES {
        spec.env.insert(name.to_owned(), ca_file.display().to_string());
    }
    spec
}

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
    /// The environment's HTTPS endpoint, for the handlers' S3 client.
    https_endpoint_url: String,
    /// The handlers' TLS configuration, trusting the environment's CA.
    tls: Arc<rustls::ClientConfig>,
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
                let spec = FunctionSpec::python(
                    name,
                    region,
                    python,
                    &examples.join(code),
                    handler,
                    logs.join(format!("{region}-{name}.log")),
                );
                LocalFunction::new(trusting(spec, &file.ca_file))
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
        Ok(Self {
            regions,
            logs: logs.to_path_buf(),
            https_endpoint_url: file.https_endpoint_url.clone(),
            tls: env.tls()?,
        })
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

    /// `sdk` with Lambda calls sent to `region`'s Invoke API and S3 calls to the environment's
    /// HTTPS endpoint, every other service where it was, on the handler's own HTTP client
    /// (`cfn_once::adapters::https`) trusting the environment's CA.
    pub fn sdk(&self, region: &str, sdk: &SdkConfig) -> SdkConfig {
        let sdk = services_at(sdk, self.api(region).endpoint(), &self.https_endpoint_url);
        sdk.to_builder().http_client(cfn_once::adapters::https::sdk_http_client(Arc::clone(&self.tls))).build()
    }
}

/// `sdk` with the Lambda endpoint `lambda` and the S3 endpoint `s3`, as
/// `AWS_ENDPOINT_URL_LAMBDA` and `AWS_ENDPOINT_URL_S3` set them: service-specific endpoints,
/// which the SDK reads only when the shared endpoint does not come from code, so the shared one
/// is marked as coming from the environment (it does, in AWS).
pub fn services_at(sdk: &SdkConfig, lambda: &str, s3: &str) -> SdkConfig {
    let mut builder = sdk.to_builder();
    builder.set_service_config(Some(ServiceEndpoints { lambda: lambda.to_owned(), s3: s3.to_owned() }));
    builder.insert_origin("endpoint_url", Origin::shared_environment_variable());
    builder.build()
}

/// Endpoints for Lambda and S3.
#[derive(Debug)]
struct ServiceEndpoints {
    lambda: String,
    s3: String,
}

impl LoadServiceConfig for ServiceEndpoints {
    fn load_config(&self, key: ServiceConfigKey<'_>) -> Option<String> {
        if key.env() != "AWS_ENDPOINT_URL" {
            return None;
        }
        match key.service_id() {
            "Lambda" => Some(self.lambda.clone()),
            "S3" => Some(self.s3.clone()),
            _ => None,
        }
    }
}
