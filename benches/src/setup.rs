//! What every run shares: moto, the tables and the response bucket, the two functions' commands.

use std::path::{Path, PathBuf};

use anyhow::Context;
use aws_sdk_dynamodb::types::KeyType;
use cfn_once_local::environment::s3_client;
use cfn_once_local::moto::MotoServer;
use cfn_once_local::provision;

/// The region both functions run in.
pub const REGION: &str = "us-east-1";
/// The topic whose envelopes the requests come in (the handler accepts only it).
pub const TOPIC_ARN: &str = "arn:aws:sns:us-east-1:123456789012:cfn-once-bench";

/// moto and the resources on it.
#[derive(Debug)]
pub struct Bench {
    moto: MotoServer,
    pub lease_table: String,
    pub idempotency_table: String,
    pub bucket: String,
    pub rust_binary: PathBuf,
    pub peer_python: PathBuf,
    /// A second Rust build run in the peer's place (`--against`): an A/B of two builds.
    pub against: Option<PathBuf>,
    pub peer_dir: PathBuf,
    log_dir: PathBuf,
    /// Checks answers directly on moto (not through a run's counting proxy).
    pub s3: aws_sdk_s3::Client,
    /// The certificate stores each function loads in production, to which each run adds its CA.
    pub stores: ProductionStores,
    /// The primary function's environment as `infra/regional.yaml` deploys it (with the
    /// variables Lambda derives from its LoggingConfig), read by the simulator's template reader.
    pub template_env: std::collections::BTreeMap<String, String>,
}

/// The trust stores the functions read in production, found where the peer's Python finds them.
/// Each run hands every side its production store plus the run's CA, so each pays for the
/// certificates it parses in production and no more.
#[derive(Debug, Clone)]
pub struct ProductionStores {
    /// OpenSSL's default file (Python's `ssl.create_default_context()`, which crhelper builds
    /// for every PUT): `ssl.get_default_verify_paths().cafile`.
    pub openssl_default: PathBuf,
    /// botocore's bundle (`botocore.httpsession.where()`), loaded per connection pool.
    pub botocore: PathBuf,
    /// The system store the Rust function read before it compiled its roots in
    /// (`--rust-roots system`): rustls-native-certs' bundle file. `None`: it parses no store
    /// (the compiled-in roots), and gets the run's CA alone.
    pub rust: Option<PathBuf>,
}

impl Bench {
    /// Starts moto and provisions the tables and a versioned bucket.
    pub async fn start(
        moto_python: &Path,
        rust_binary: &Path,
        peer_python: &Path,
        against: Option<&Path>,
        rust_system_roots: bool,
    ) -> anyhow::Result<Self> {
        for (path, hint) in [
            (rust_binary, "build it: cargo build --release -p cfn-once --bin cfn-once-lambda (make bench does)"),
            (peer_python, "create it: make bench-venv"),
            (moto_python, "create it: make venv"),
        ]
        .into_iter()
        .chain(against.map(|path| (path, "--against: build it, or name another binary")))
        {
            anyhow::ensure!(path.exists(), "{} does not exist: {hint}", path.display());
        }
        let moto = MotoServer::start(moto_python)?;
        let sdk = provision::sdk_config(moto.endpoint(), REGION).await;
        let dynamodb = aws_sdk_dynamodb::Client::new(&sdk);
        let (lease_table, idempotency_table, bucket) =
            ("bench-leases".to_owned(), "bench-idempotency".to_owned(), "bench-responses".to_owned());
        provision::create_lease_table(&dynamodb, &lease_table).await?;
        provision::create_table(&dynamodb, &idempotency_table, &[("id", KeyType::Hash)]).await?;
        let s3 = s3_client(&sdk);
        provision::create_response_bucket(&s3, &bucket).await?;
        let log_dir = PathBuf::from("target/bench-logs");
        std::fs::create_dir_all(&log_dir).with_context(|| format!("cannot create {}", log_dir.display()))?;
        let peer_dir =
            std::fs::canonicalize("benches/python").context("benches/python (run from the repository root)")?;
        let python_path = |code: &str| -> anyhow::Result<PathBuf> {
            let out = std::process::Command::new(peer_python).args(["-c", code]).output()?;
            anyhow::ensure!(out.status.success(), "{} -c {code:?} failed", peer_python.display());
            let path = PathBuf::from(String::from_utf8_lossy(&out.stdout).trim());
            anyhow::ensure!(path.is_file(), "{} is not a file", path.display());
            Ok(path)
        };
        let openssl_default = python_path("import ssl; print(ssl.get_default_verify_paths().cafile)")?;
        let botocore = python_path("from botocore.httpsession import where; print(where())")?;
        let rust = rust_system_roots.then(|| openssl_default.clone());
        let stores = ProductionStores { openssl_default, botocore, rust };
        let deployed = cfn_once_sim::deployed::Deployed::regional().map_err(anyhow::Error::msg)?;
        let template_env = deployed.environment.get("primary").cloned().unwrap_or_default();
        Ok(Self {
            moto,
            lease_table,
            idempotency_table,
            bucket,
            rust_binary: std::fs::canonicalize(rust_binary)?,
            against: against.map(std::fs::canonicalize).transpose()?,
            peer_python: std::path::absolute(peer_python)?,
            peer_dir,
            log_dir,
            s3,
            stores,
            template_env,
        })
    }

    pub fn moto_endpoint(&self) -> &str {
        self.moto.endpoint()
    }

    pub fn log_dir(&self) -> &Path {
        &self.log_dir
    }

    /// The machine and the versions, for BENCHMARKS.md.
    pub async fn environment(&self) -> Vec<(String, String)> {
        let output = |program: &Path, args: &[&str]| {
            std::process::Command::new(program)
                .args(args)
                .output()
                .ok()
                .map(|o| {
                    String::from_utf8_lossy(if o.stdout.is_empty() { &o.stderr } else { &o.stdout }).trim().to_owned()
                })
                .unwrap_or_else(|| "?".into())
        };
        let cpu = std::fs::read_to_string("/proc/cpuinfo")
            .ok()
            .and_then(|info| {
                info.lines()
                    .find(|l| l.starts_with("model name"))
                    .map(|l| l.split(':').nth(1).unwrap_or("").trim().to_owned())
            })
            .unwrap_or_else(|| "?".into());
        let cores = std::thread::available_parallelism().map_or(0, usize::from);
        let kernel = std::fs::read_to_string("/proc/sys/kernel/osrelease").unwrap_or_default().trim().to_owned();
        let memory = std::fs::read_to_string("/proc/meminfo")
            .ok()
            .and_then(|m| {
                m.lines().next().map(|l| l.split_whitespace().nth(1).unwrap_or("0").parse::<u64>().unwrap_or(0))
            })
            .map_or("?".into(), |kib| format!("{} GiB", kib / 1024 / 1024));
        let packages = output(
            &self.peer_python,
            &[
                "-c",
                "import importlib.metadata as m; print(', '.join(f'{p} {m.version(p)}' for p in ['crhelper','aws-lambda-powertools','awslambdaric','boto3']))",
            ],
        );
        vec![
            ("machine".into(), format!("{cpu}, {cores} cores, {memory}, Linux {kernel}")),
            ("rust".into(), output(Path::new("rustc"), &["--version"])),
            ("python".into(), output(&self.peer_python, &["--version"])),
            ("peer packages".into(), packages),
            ("moto".into(), output(Path::new(".venv/bin/python"), &["-c", "import moto; print(moto.__version__)"])),
            (
                "rust function".into(),
                // The path from the checkout's root: the same on every machine.
                format!(
                    "{} ({} bytes)",
                    from_root(&self.rust_binary).display(),
                    std::fs::metadata(&self.rust_binary).map_or(0, |m| m.len())
                ),
            ),
        ]
    }
}

/// `path` from the checkout's root (made absolute first: it may be given relative to the working
/// folder); as given if it is outside the checkout.
fn from_root(path: &Path) -> PathBuf {
    let path = path.canonicalize().unwrap_or_else(|_| path.to_path_buf());
    path.strip_prefix(cfn_once_tests::workspace_root()).map(Path::to_path_buf).unwrap_or(path)
}
