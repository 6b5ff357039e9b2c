//! The functions of a functions file (`functions_file.rs`; `make local` and the demo serve
//! the examples', `examples/functions/functions.yaml`), run locally in each region as Lambda runs
//! them and served the way a deployment serves its functions: `CFN_ONCE_FUNCTIONS` routes resource
//! types to them, and the handler's own `aws-sdk-lambda` client reaches its region's copies through
//! a Lambda endpoint of their own (what `AWS_ENDPOINT_URL_LAMBDA` does in AWS), the local Invoke
//! API, and its S3 client reaches the answer buckets through the environment's HTTPS endpoint (what
//! `AWS_ENDPOINT_URL_S3` would do), so the answer URLs it presigns are `https://` URLs, as in AWS;
//! everything else stays on moto.
//!
//! Each function's folder is built once (`function_build.rs`: its requirements installed
//! beside a copy of its files, as a Lambda zip) and run in both regions, each region's copies
//! getting what Lambda gives a function ([`function_environment`]): its region, credentials and
//! the local AWS endpoint (so its own boto3 calls reach moto), its folder as `LAMBDA_TASK_ROOT`,
//! its memory, and the file's variables.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use anyhow::Context;
use aws_config::SdkConfig;
use aws_types::origin::Origin;
use aws_types::service_config::{LoadServiceConfig, ServiceConfigKey};

use crate::environment::{LocalEnvironment, s3_client};
use crate::function_build;
use crate::functions_file::{Function, FunctionsFile};
use crate::invoke_api::InvokeApi;
use crate::lambda_service::{FunctionSpec, LocalFunction};

/// The examples' functions file, from the workspace's root: what `make local` passes and the
/// demo serves. `cfn-once local` has no default, since it runs from the user's own folder.
pub const EXAMPLES_FILE: &str = "examples/functions/functions.yaml";

/// Sandboxes of one function at once in each region: as many as the handler's own invocations
/// (the regional template's `MaximumConcurrency` default), so a function never holds the
/// handler's batches back where Lambda's unreserved concurrency would not.
pub const FUNCTION_CONCURRENCY_MAX: usize = crate::settings::ESM_CONCURRENCY_MAX;

/// The credentials the functions are given: moto accepts any, and these are nobody's.
const TEST_ACCESS_KEY_ID: &str = "test";
const TEST_SECRET_ACCESS_KEY: &str = "test";
const TEST_SESSION_TOKEN: &str = "test";

/// The variables that make a function's process trust a CA file, each for the clients that
/// read it: OpenSSL (`SSL_CERT_FILE`: Python's `ssl` and everything on it, Node.js with
/// `--use-openssl-ca`, curl), requests (`REQUESTS_CA_BUNDLE`) and the AWS SDKs and CLI
/// (`AWS_CA_BUNDLE`).
pub const CA_VARIABLES: [&str; 3] = ["SSL_CERT_FILE", "REQUESTS_CA_BUNDLE", "AWS_CA_BUNDLE"];

/// [`CA_VARIABLES`], each naming `ca_file`.
fn ca_environment(ca_file: &Path) -> impl Iterator<Item = (String, String)> + '_ {
    CA_VARIABLES.into_iter().map(move |name| (name.to_owned(), ca_file.display().to_string()))
}

/// `spec` with its processes trusting the certificates of `ca_file` (and only those: the
/// variables replace the default trust store) through [`CA_VARIABLES`].
pub fn trusting(mut spec: FunctionSpec, ca_file: &Path) -> FunctionSpec {
    spec.env.extend(ca_environment(ca_file));
    spec
}

/// One region's copies of the functions.
struct Region {
    region: String,
    api: InvokeApi,
    answer_bucket: String,
}

/// The functions in both regions of a local environment.
pub struct LocalFunctions {
    regions: Vec<Region>,
    file: FunctionsFile,
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

/// Everything a function's processes are given besides Lambda's runtime variables
/// (`AWS_LAMBDA_RUNTIME_API`, `AWS_REGION`, ..., which `lambda_service.rs` sets): the one
/// place a function's environment is assembled. The file's variables come last, so they win
/// over the defaults here (an `AWS_ENDPOINT_URL` of the user's, say).
pub fn function_environment(
    function: &Function,
    build: &Path,
    endpoint_url: &str,
    ca_file: &Path,
) -> BTreeMap<String, String> {
    let build = build.display().to_string();
    let mut environment = BTreeMap::from([
        ("LAMBDA_TASK_ROOT".to_owned(), build.clone()),
        ("PYTHONPATH".to_owned(), build),
        ("_HANDLER".to_owned(), function.handler.clone()),
        ("AWS_ACCESS_KEY_ID".to_owned(), TEST_ACCESS_KEY_ID.to_owned()),
        ("AWS_SECRET_ACCESS_KEY".to_owned(), TEST_SECRET_ACCESS_KEY.to_owned()),
        ("AWS_SESSION_TOKEN".to_owned(), TEST_SESSION_TOKEN.to_owned()),
        // Every AWS SDK (boto3 1.28+, the JS and Rust SDKs) sends its calls here.
        ("AWS_ENDPOINT_URL".to_owned(), endpoint_url.to_owned()),
    ]);
    // The local CA, where each kind of client looks for its trust store (the answer URLs are
    // https, signed by it).
    environment.extend(ca_environment(ca_file));
    environment.extend(function.environment.clone());
    environment
}

impl LocalFunctions {
    /// Builds each function of `file` into `builds` (installing requirements with `python`,
    /// reporting to `progress`), starts its copies in both regions (under awslambdaric with
    /// `python`), logging into `logs`, and creates each region's answer bucket
    /// `<bucket_prefix>-answers-<region>` on the environment's moto.
    pub async fn start(
        env: &LocalEnvironment,
        python: &Path,
        file: &FunctionsFile,
        logs: &Path,
        builds: &Path,
        bucket_prefix: &str,
        progress: &(dyn Fn(&str) + Sync),
    ) -> anyhow::Result<Self> {
        std::fs::create_dir_all(logs).with_context(|| format!("cannot create {}", logs.display()))?;
        let mut built = Vec::new();
        for function in file.functions() {
            let build = function_build::build(&function.folder, &function.name, python, builds, progress)
                .await
                .with_context(|| format!("cannot build {} ({})", function.name, function.folder.display()))?;
            built.push((function, build));
        }
        let endpoint_url = &env.file.endpoint_url;
        let mut regions = Vec::new();
        for region in [&env.file.primary_region, &env.file.secondary_region] {
            let mut local = Vec::new();
            for (function, build) in &built {
                let log = logs.join(format!("{region}-{}.log", function.name));
                let spec = FunctionSpec::python(&function.name, region, python, build, &function.handler, log);
                local.push(LocalFunction::new(FunctionSpec {
                    env: function_environment(function, build, endpoint_url, &env.file.ca_file),
                    timeout_ms: u64::from(function.timeout_s) * 1_000,
                    memory_mb: function.memory_mb,
                    concurrency_max: FUNCTION_CONCURRENCY_MAX,
                    working_dir: Some(build.clone()),
                    ..spec
                })?);
            }
            let api = InvokeApi::start(local).await?;
            let answer_bucket = format!("{bucket_prefix}-answers-{region}");
            let s3 = s3_client(&env.sdk(region).await);
            crate::provision::create_bucket_in(&s3, &answer_bucket, region).await?;
            regions.push(Region { region: region.clone(), api, answer_bucket });
        }
        Ok(Self {
            regions,
            file: file.clone(),
            logs: logs.to_path_buf(),
            https_endpoint_url: env.file.https_endpoint_url.clone(),
            tls: env.tls()?,
        })
    }

    /// The functions file served.
    pub fn file(&self) -> &FunctionsFile {
        &self.file
    }

    /// Each region's answer bucket, by region.
    pub fn answer_buckets(&self) -> BTreeMap<String, String> {
        self.regions.iter().map(|region| (region.region.clone(), region.answer_bucket.clone())).collect()
    }

    /// Each resource type's functions, by kind (`on-event`, `is-complete`, `cfn-response`).
    pub fn routes(&self) -> BTreeMap<String, BTreeMap<String, String>> {
        self.file.routes.iter().map(|route| (route.resource_type.clone(), route.by_kind())).collect()
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

    /// The handler settings of `region` that route the file's types to its copies.
    pub fn settings(&self, region: &str) -> [(&'static str, String); 2] {
        [
            ("CFN_ONCE_FUNCTIONS", self.file.cfn_once_functions()),
            ("CFN_ONCE_ANSWER_BUCKET", self.answer_bucket(region).to_owned()),
        ]
    }

    /// Every function's own timeout, in ms (the handler's invocations are sized from them).
    pub fn timeouts_ms(&self) -> Vec<u64> {
        self.file.functions().map(|function| u64::from(function.timeout_s) * 1000).collect()
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
