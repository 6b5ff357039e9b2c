//! The soak's fleet: both handler regions as deployed, on moto.
//!
//! The queues, the topic subscriptions, the lease table, an item table and a versioned response
//! bucket are provisioned as `cfn-once local` does, with the template's parameters: the queue's
//! visibility timeout for the chosen function timeout, its `maxReceiveCount`, the secondary's
//! `DelaySeconds`. Each region then gets a local Lambda service running the function binary
//! (the same in both regions, or the secondary's own with `--secondary-binary`) with the
//! template's environment for its role and timeout (only the names of this run's resources and
//! the endpoint changed), at most `MaximumConcurrency` processes, fed by a mapping of the
//! template's `BatchSize`. The processes reach AWS through their region's fault proxy,
//! and CloudFormation's bucket through the PUT proxy (the ResponseURLs are presigned against
//! it); the harness itself talks to moto directly.

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::sync::{Arc, Mutex};

use anyhow::Context;
use cfn_once::adapters::control_table::TableControl;
use cfn_once::adapters::dynamodb_lease::DynamoLeaseStore;
use cfn_once_core::deadline::{DeadlineSource, RequestDeadline};
use cfn_once_core::settings::Settings;
use cfn_once_core::vocabulary::Role;
use cfn_once_sim::deployed::{Deployed, FunctionTimeout, SOURCE};
use tokio::task::JoinHandle;

use crate::SoakOptions;
use crate::mapping::SoakMapping;
use cfn_once_local::environment::{CUSTOMER_REGIONS, EnvironmentOptions, LocalEnvironment, s3_client};
use cfn_once_local::fault_proxy::{FaultProxy, LogMode};
use cfn_once_local::lambda_service::{FunctionSpec, LocalFunction};
use cfn_once_local::provision;
use cfn_once_local::tls_front::TlsFront;

/// One handler region: its function, its mapping and its wire.
#[derive(Debug)]
pub struct Region {
    pub role: Role,
    pub name: String,
    /// Every AWS call of this region's processes goes through it.
    pub proxy: FaultProxy,
    pub function: Arc<LocalFunction>,
    /// The function binary this region's processes run (canonical path).
    pub binary: PathBuf,
    pub mapping: Arc<SoakMapping>,
    pub sqs: aws_sdk_sqs::Client,
    pub queue_url: String,
    pub dlq_url: String,
    pub log: PathBuf,
    poller: Mutex<Option<JoinHandle<()>>>,
}

/// Everything the soak runs.
#[derive(Debug)]
pub struct Fleet {
    pub deployed: Deployed,
    pub environment: LocalEnvironment,
    pub endpoint: String,
    pub timeout: FunctionTimeout,
    pub concurrency: usize,
    pub batch_size: usize,
    /// Primary, then secondary.
    pub regions: [Region; 2],
    /// The response PUTs' wire; its log (without bodies) is how the harness, playing
    /// CloudFormation, learns that an answer came.
    pub put_proxy: FaultProxy,
    /// The harness's own S3 client, straight to moto.
    pub s3: aws_sdk_s3::Client,
    /// Presigns ResponseURLs against the PUT proxy.
    pub presign: aws_sdk_s3::Client,
    /// ServiceToken topics' clients, by customer region.
    pub sns: BTreeMap<String, aws_sdk_sns::Client>,
    /// The customer region's DynamoDB (the item table).
    pub items: aws_sdk_dynamodb::Client,
    pub lease_store: DynamoLeaseStore,
    pub control: TableControl,
    /// The handler's lease, in ms, from the template's environment.
    pub lease_ms: u64,
    /// The primary's settings as the template's environment gives them, for the rules the
    /// checks share with the handler (`Settings::head_start_ms`).
    pub settings: Settings,
    /// Kept running for the environment (`EnvFile::https_endpoint_url`).
    _front: TlsFront,
}

impl Fleet {
    /// Provisions everything and starts both regions' mappings.
    pub async fn start(endpoint: &str, options: &SoakOptions, seed: u64) -> anyhow::Result<Self> {
        let deployed = Deployed::regional().map_err(|e| anyhow::anyhow!("cannot read {SOURCE}: {e}"))?;
        let timeout = match options.function_timeout_s {
            None => deployed.default_function_timeout,
            Some(chosen) => *deployed.function_timeouts.iter().find(|t| t.timeout_s == chosen).with_context(|| {
                let allowed: Vec<String> = deployed.function_timeouts.iter().map(|t| t.timeout_s.to_string()).collect();
                format!("--function-timeout-s {chosen} is not one of the template's values ({})", allowed.join(", "))
            })?,
        };
        let concurrency = options.concurrency.unwrap_or(deployed.maximum_concurrency).max(1);
        let template_env = |role: Role| {
            deployed.environment_by_timeout.get(&(role.as_str(), timeout.timeout_s)).cloned().unwrap_or_default()
        };
        let raw_delivery = template_env(Role::Primary).get("CFN_ONCE_RAW_DELIVERY").is_some_and(|v| v == "true");
        println!("==> provisioning both regions on {endpoint} ({})", deployed.summary());
        // The environment's HTTPS face; the soak presigns its ResponseURLs for the PUT proxy.
        std::fs::create_dir_all(&options.out).with_context(|| format!("cannot create {}", options.out.display()))?;
        let front = TlsFront::start(endpoint, &options.out)?;
        let environment = LocalEnvironment::provision(
            endpoint,
            &front,
            &EnvironmentOptions {
                name: format!("soak-{seed}"),
                secondary_delay_s: u32::try_from(deployed.secondary_delay_s)?,
                visibility_timeout_s: u32::try_from(timeout.visibility_s)?,
                max_receive_count: deployed.max_receive_count,
                raw_delivery,
            },
        )
        .await?;
        let file = &environment.file;
        let put_proxy = FaultProxy::start_with(endpoint, LogMode::WithoutBodies);
        let primary_sdk = environment.sdk(&file.primary_region).await;
        let s3 = s3_client(&primary_sdk);
        let presign = s3_client(&provision::sdk_config(&put_proxy.url(), &file.primary_region).await);
        let mut sns = BTreeMap::new();
        for region in CUSTOMER_REGIONS {
            sns.insert(region.to_owned(), aws_sdk_sns::Client::new(&environment.sdk(region).await));
        }
        let items = aws_sdk_dynamodb::Client::new(&environment.sdk(&file.customer_region).await);
        let lease_store = DynamoLeaseStore::new(aws_sdk_dynamodb::Client::new(&primary_sdk), &file.table_name);
        let control = TableControl::new(
            aws_sdk_dynamodb::Client::new(&primary_sdk),
            &file.table_name,
            file.primary_region.clone(),
        );
        let settings = deployed
            .settings_with_timeout(Role::Primary, &file.primary_region, timeout.timeout_s)
            .map_err(|e| anyhow::anyhow!("the template's environment does not configure the handler: {e}"))?;
        let lease_ms = settings.lease_ms;
        let mut regions = Vec::new();
        for (role, binary) in [Role::Primary, Role::Secondary].into_iter().zip(options.binaries()) {
            let binary = std::fs::canonicalize(binary).with_context(|| format!("cannot find {}", binary.display()))?;
            let name = environment.region(role).to_owned();
            let proxy = FaultProxy::start_with(endpoint, LogMode::Off);
            let mut env = template_env(role);
            for (variable, value) in [
                ("AWS_ENDPOINT_URL", proxy.url()),
                ("AWS_ACCESS_KEY_ID", "test".to_owned()),
                ("AWS_SECRET_ACCESS_KEY", "test".to_owned()),
                ("CFN_ONCE_TABLE", file.table_name.clone()),
                ("CFN_ONCE_TABLE_REGION", file.primary_region.clone()),
                ("CFN_ONCE_TOPIC_ARNS", file.topic_arns().join(",")),
                ("CFN_ONCE_RESPONSE_URL_ALLOW", format!("{}/{}/", put_proxy.url(), file.response_bucket)),
                ("CFN_ONCE_ITEM_TABLES", environment.item_table.clone()),
            ] {
                env.insert(variable.to_owned(), value);
            }
            let log = options.out.join(format!("{}.log", role.as_str()));
            let _ = std::fs::remove_file(&log);
            let function = Arc::new(LocalFunction::new(FunctionSpec {
                name: format!("cfn-once-{}", role.as_str()),
                region: name.clone(),
                command: binary.clone(),
                args: Vec::new(),
                env,
                timeout_ms: timeout.timeout_s * 1000,
                concurrency_max: concurrency,
                memory_mb: 256,
                working_dir: None,
                log: log.clone(),
            })?);
            let sqs = aws_sdk_sqs::Client::new(&environment.sdk(&name).await);
            let queues = environment.queues(role);
            let mapping = Arc::new(
                SoakMapping::new(sqs.clone(), &queues.url, Arc::clone(&function), deployed.batch_size, concurrency)
                    .await?,
            );
            let poller = tokio::spawn(Arc::clone(&mapping).run());
            regions.push(Region {
                role,
                name,
                proxy,
                function,
                binary,
                mapping,
                sqs,
                queue_url: queues.url.clone(),
                dlq_url: queues.dlq_url.clone(),
                log,
                poller: Mutex::new(Some(poller)),
            });
        }
        let [primary, secondary]: [Region; 2] = regions.try_into().map_err(|_| anyhow::anyhow!("two regions"))?;
        Ok(Self {
            batch_size: deployed.batch_size,
            deployed,
            environment,
            endpoint: endpoint.to_owned(),
            timeout,
            concurrency,
            regions: [primary, secondary],
            put_proxy,
            s3,
            presign,
            sns,
            items,
            lease_store,
            control,
            lease_ms,
            settings,
            _front: front,
        })
    }

    pub fn primary(&self) -> &Region {
        &self.regions[0]
    }

    pub fn secondary(&self) -> &Region {
        &self.regions[1]
    }

    /// The longest a request with `span_ms` of time (its ServiceTimeout) may wait for its answer
    /// once the last fault is over: the primary's head start, which the secondary's copy waits
    /// out before it runs anything (a fifth of the span, at most `CFN_ONCE_HEAD_START_S`:
    /// `Budget::head_start_ms`); then a crashed invocation's batch hidden for the visibility
    /// timeout, the dead holder's lease, the secondary's delay and the longest provider run the
    /// load asks for.
    pub fn liveness_bound_ms(&self, span_ms: u64) -> u64 {
        // The handler's own rule, on a request sent at 0 whose ServiceTimeout ends at `span_ms`.
        let deadline = RequestDeadline { at_ms: span_ms, source: DeadlineSource::ServiceTimeout, sent_ms: 0 };
        self.settings.head_start_ms(&deadline)
            + self.timeout.visibility_s * 1000
            + self.lease_ms
            + self.deployed.secondary_delay_s * 1000
            + crate::plan::LONGEST_RUN_MS
    }

    /// Whether the two regions run different binaries (an upgrade halfway through).
    pub fn mixed(&self) -> bool {
        self.primary().binary != self.secondary().binary
    }

    /// Which binary each region runs, in a line: its path and size.
    pub fn binaries(&self) -> String {
        let size =
            |binary: &PathBuf| std::fs::metadata(binary).map_or_else(|_| "?".to_owned(), |m| m.len().to_string());
        if self.mixed() {
            let same = match (std::fs::read(&self.primary().binary), std::fs::read(&self.secondary().binary)) {
                (Ok(a), Ok(b)) => a == b,
                _ => false,
            };
            format!(
                "primary ({}) runs {} ({} bytes); secondary ({}) runs {} ({} bytes){}",
                self.primary().name,
                self.primary().binary.display(),
                size(&self.primary().binary),
                self.secondary().name,
                self.secondary().binary.display(),
                size(&self.secondary().binary),
                if same { "; the two files are byte-identical" } else { "" },
            )
        } else {
            format!("both regions run {} ({} bytes)", self.primary().binary.display(), size(&self.primary().binary))
        }
    }

    /// What runs, in a few lines.
    pub fn describe(&self) -> String {
        let processes = if self.mixed() {
            format!(
                "of {} in the primary and {} in the secondary",
                self.primary().binary.display(),
                self.secondary().binary.display()
            )
        } else {
            format!("of {}", self.primary().binary.display())
        };
        format!(
            "fleet: {} (primary) and {} (secondary), each up to {} processes {processes} (timeout {} s), \
             mapping batch {} window {} s; queues: visibility {} s, maxReceiveCount {}, secondary delay {} s \
             (from {SOURCE})",
            self.primary().name,
            self.secondary().name,
            self.concurrency,
            self.timeout.timeout_s,
            self.batch_size,
            self.deployed.batching_window_s,
            self.timeout.visibility_s,
            self.deployed.max_receive_count,
            self.deployed.secondary_delay_s,
        )
    }

    /// Stops both mappings and every process.
    pub async fn stop(&self) {
        for region in &self.regions {
            region.mapping.stop();
        }
        for region in &self.regions {
            let poller = region.poller.lock().unwrap_or_else(std::sync::PoisonError::into_inner).take();
            if let Some(poller) = poller {
                let _ = tokio::time::timeout(std::time::Duration::from_secs(10), poller).await;
            }
            region.function.kill_all();
        }
    }
}
