//! The local two-region environment on moto: what `infra/` deploys in AWS, provisioned in
//! local regions (two customer regions, each with its ServiceToken topic and a delivery
//! dead-letter queue per subscription, and the primary and secondary handler regions whose queues
//! every topic feeds), and described in `.local/env.json`
//! so any client (tests, the drill, the operator tools, a person with the AWS CLI) can send
//! events to it.
//!
//! S3 is also served over HTTPS, as in AWS, by a [`TlsFront`] before moto with a CA of its own,
//! generated per environment: the presigned answer URLs functions PUT to and the ResponseURLs
//! the environment plays CloudFormation with are `https://` URLs on it (functions such as
//! crhelper's open an HTTPS connection whatever the URL says). The CA's certificate is a PEM
//! file (`ca_file`; `.local/` for `cfn-once local`) that the functions' processes and the
//! in-process handlers trust. Every other call (SQS, SNS, DynamoDB, and the operator tools)
//! stays on moto's plain-HTTP endpoint (`endpoint_url`), which is also allowed for ResponseURLs
//! so that tools presigning there (the drill, the soak) keep working.
//!
//! moto does not replicate global tables, so both regional handlers use the one lease table in
//! the primary region (`CFN_ONCE_TABLE_REGION`): a single strongly consistent copy, which is the
//! behaviour an MRSC table provides.

use std::collections::{BTreeMap, HashMap};
use std::path::Path;
use std::sync::Arc;

use aws_config::SdkConfig;
use aws_sdk_dynamodb::types::KeyType;
use cfn_once_core::vocabulary::Role;

use crate::provision::{self, QueuePair, QueueSettings};
use crate::tls_front::TlsFront;
use cfn_once::adapters::https::{Roots, client_config_with};
use cfn_once::config::Config;

/// Where the customer's stacks (and the ServiceToken topics) live: one topic per region, all
/// feeding the same queues. The first is the default for tools that publish.
pub const CUSTOMER_REGIONS: [&str; 2] = ["us-east-2", "eu-west-1"];
/// The first customer region.
pub const CUSTOMER_REGION: &str = CUSTOMER_REGIONS[0];
pub const PRIMARY_REGION: &str = "us-east-1";
pub const SECONDARY_REGION: &str = "us-west-2";

pub use cfn_once_ops::env_file::{DeliveryDlq, EnvFile, QueueUrls};

/// How to build the environment.
#[derive(Debug, Clone)]
pub struct EnvironmentOptions {
    /// Prefix of every resource name; make it unique per environment on a shared moto.
    pub name: String,
    /// The secondary queue's DelaySeconds: how long the primary has before the secondary acts.
    pub secondary_delay_s: u32,
    pub visibility_timeout_s: u32,
    pub max_receive_count: u32,
    pub raw_delivery: bool,
}

impl EnvironmentOptions {
    /// The environment `cfn-once local` runs, named `name`: the local queues' visibility
    /// timeout and receive count, SNS envelopes as deployed.
    pub fn local(name: String, secondary_delay_s: u32) -> Self {
        Self {
            name,
            secondary_delay_s,
            visibility_timeout_s: crate::settings::LOCAL_VISIBILITY_TIMEOUT_S,
            max_receive_count: crate::settings::LOCAL_MAX_RECEIVE_COUNT,
            raw_delivery: false,
        }
    }
}

/// A provisioned environment.
#[derive(Debug, Clone)]
pub struct LocalEnvironment {
    pub file: EnvFile,
    pub primary_queues: QueuePair,
    pub secondary_queues: QueuePair,
    /// A table in the customer region that `Custom::DynamoDBItem` may write.
    pub item_table: String,
    pub secondary_delay_s: u32,
    /// The queues' visibility timeout, which the handlers are told (as the template tells them).
    pub visibility_timeout_s: u32,
}

impl LocalEnvironment {
    /// Creates the topic, both regions' queues and DLQs (the secondary's delayed), the lease
    /// table, an item table and a versioned response bucket on moto at `endpoint_url`, whose
    /// HTTPS face is `front` (a [`TlsFront`] before it, which the caller keeps running).
    pub async fn provision(endpoint_url: &str, front: &TlsFront, options: &EnvironmentOptions) -> anyhow::Result<Self> {
        let name = &options.name;
        let primary_sdk = provision::sdk_config(endpoint_url, PRIMARY_REGION).await;
        let secondary_sdk = provision::sdk_config(endpoint_url, SECONDARY_REGION).await;
        let customer_sdk = provision::sdk_config(endpoint_url, CUSTOMER_REGION).await;

        let table_name = format!("{name}-leases");
        provision::create_lease_table(&aws_sdk_dynamodb::Client::new(&primary_sdk), &table_name).await?;
        let item_table = format!("{name}-items");
        provision::create_table(&aws_sdk_dynamodb::Client::new(&customer_sdk), &item_table, &[("pk", KeyType::Hash)])
            .await?;
        let response_bucket = format!("{name}-responses");
        provision::create_response_bucket(&s3_client(&primary_sdk), &response_bucket).await?;

        let queue_settings = |delay_s| QueueSettings {
            delay_s,
            visibility_timeout_s: options.visibility_timeout_s,
            max_receive_count: options.max_receive_count,
        };
        let primary_queues = provision::create_queue_pair(
            &aws_sdk_sqs::Client::new(&primary_sdk),
            &format!("{name}-primary"),
            queue_settings(0),
        )
        .await?;
        let secondary_queues = provision::create_queue_pair(
            &aws_sdk_sqs::Client::new(&secondary_sdk),
            &format!("{name}-secondary"),
            queue_settings(options.secondary_delay_s),
        )
        .await?;
        let mut customer_topics = BTreeMap::new();
        let mut delivery_dlqs = Vec::new();
        for region in CUSTOMER_REGIONS {
            let sdk = provision::sdk_config(endpoint_url, region).await;
            let sns = aws_sdk_sns::Client::new(&sdk);
            let sqs = aws_sdk_sqs::Client::new(&sdk);
            let topic_arn = provision::create_topic(&sns, &format!("{name}-service-token")).await?;
            // Named as infra/customer.yaml names them, with the environment as the installation.
            for (role, queues) in [("primary", &primary_queues), ("secondary", &secondary_queues)] {
                let (url, dead_letter_arn) =
                    provision::create_dead_letter_queue(&sqs, &format!("{name}-{role}-delivery-dlq")).await?;
                provision::subscribe_queue(&sns, &topic_arn, &queues.arn, options.raw_delivery, Some(&dead_letter_arn))
                    .await?;
                delivery_dlqs.push(DeliveryDlq {
                    region: region.to_owned(),
                    topic_arn: topic_arn.clone(),
                    role: role.to_owned(),
                    url,
                });
            }
            customer_topics.insert(region.to_owned(), topic_arn);
        }
        let topic_arn = customer_topics[CUSTOMER_REGION].clone();
        let file = EnvFile {
            endpoint_url: endpoint_url.to_owned(),
            https_endpoint_url: front.url(),
            ca_file: front.ca_file().to_path_buf(),
            customer_region: CUSTOMER_REGION.into(),
            primary_region: PRIMARY_REGION.into(),
            secondary_region: SECONDARY_REGION.into(),
            topic_arn,
            customer_topics,
            queues: QueueUrls {
                primary: primary_queues.url.clone(),
                secondary: secondary_queues.url.clone(),
                primary_dlq: primary_queues.dlq_url.clone(),
                secondary_dlq: secondary_queues.dlq_url.clone(),
            },
            table_name,
            response_bucket,
            item_table: item_table.clone(),
            answer_buckets: BTreeMap::new(),
            routes: BTreeMap::new(),
            delivery_dlqs,
            // Set by `cfn-once local`, the one process that listens for the signals.
            local_pid: None,
            handler: Some(cfn_once_ops::env_file::HandlerSettings {
                function_timeout_s: (crate::settings::ESM_SETTINGS.function_timeout_ms / 1_000) as u32,
                visibility_timeout_s: options.visibility_timeout_s,
                secondary_delay_s: options.secondary_delay_s,
                max_receive_count: options.max_receive_count,
                raw_delivery: options.raw_delivery,
            }),
        };
        Ok(Self {
            file,
            primary_queues,
            secondary_queues,
            item_table,
            secondary_delay_s: options.secondary_delay_s,
            visibility_timeout_s: options.visibility_timeout_s,
        })
    }

    /// The region a role runs in.
    pub fn region(&self, role: Role) -> &str {
        match role {
            Role::Primary => &self.file.primary_region,
            Role::Secondary => &self.file.secondary_region,
        }
    }

    /// The queues a role's worker polls.
    pub fn queues(&self, role: Role) -> &QueuePair {
        match role {
            Role::Primary => &self.primary_queues,
            Role::Secondary => &self.secondary_queues,
        }
    }

    /// The handler configuration for `role`, with `overrides` (e.g. shorter leases) applied.
    pub fn config(&self, role: Role, overrides: &[(&str, &str)]) -> anyhow::Result<Config> {
        let mut vars: HashMap<String, String> = HashMap::from([
            ("AWS_REGION".into(), self.region(role).to_owned()),
            ("CFN_ONCE_ROLE".into(), role.as_str().into()),
            ("CFN_ONCE_TABLE".into(), self.file.table_name.clone()),
            ("CFN_ONCE_TABLE_REGION".into(), self.file.primary_region.clone()),
            ("CFN_ONCE_TOPIC_ARNS".into(), self.file.topic_arns().join(",")),
            // The response bucket over HTTPS (what the environment presigns, as CloudFormation
            // does) and on moto's plain endpoint (what the drill and the soak presign).
            (
                "CFN_ONCE_RESPONSE_URL_ALLOW".into(),
                format!(
                    "{https}/{bucket}/,{plain}/{bucket}/",
                    https = self.file.https_endpoint_url,
                    plain = self.file.endpoint_url,
                    bucket = self.file.response_bucket
                ),
            ),
            ("CFN_ONCE_ITEM_TABLES".into(), self.item_table.clone()),
            // What the regional template tells the function about its queues.
            ("CFN_ONCE_VISIBILITY_TIMEOUT_S".into(), self.visibility_timeout_s.to_string()),
            ("CFN_ONCE_SECONDARY_DELAY_S".into(), self.secondary_delay_s.to_string()),
            // Locally the queue's delay is also the longest head start, so that a failover
            // shows within seconds (deployed, the queue's delay is 5 s and the head start 60 s;
            // either way a request with less time gets a fifth of it).
            ("CFN_ONCE_HEAD_START_S".into(), self.secondary_delay_s.to_string()),
        ]);
        for (name, value) in overrides {
            vars.insert((*name).to_owned(), (*value).to_owned());
        }
        Ok(Config::from_lookup(|name| vars.get(name).cloned())?)
    }

    /// SDK configuration for `region` on the local endpoint.
    pub async fn sdk(&self, region: &str) -> SdkConfig {
        provision::sdk_config(&self.file.endpoint_url, region).await
    }

    /// SDK configuration for `region` on the HTTPS endpoint, trusting the environment's CA:
    /// for S3 URLs as AWS makes them (`https://`) and the calls behind them.
    pub async fn https_sdk(&self, region: &str) -> anyhow::Result<SdkConfig> {
        https_sdk_config(&self.file.https_endpoint_url, &self.file.ca_file, region).await
    }

    /// The TLS client configuration the handlers use here (see [`tls_trusting`]).
    pub fn tls(&self) -> anyhow::Result<Arc<rustls::ClientConfig>> {
        tls_trusting(&self.file.ca_file)
    }
}

/// The handler's TLS client configuration with the compiled-in roots replaced by the
/// certificates of `ca_file`, as `SSL_CERT_FILE` replaces them in the deployed function
/// (`cfn_once::adapters::https`): in-process handlers share this process's environment, so they
/// are given the configuration rather than the variable.
pub fn tls_trusting(ca_file: &Path) -> anyhow::Result<Arc<rustls::ClientConfig>> {
    client_config_with(&Roots::File(ca_file.to_path_buf())).map_err(anyhow::Error::msg)
}

/// SDK configuration for `region` on the HTTPS endpoint `endpoint_url`, on the handler's HTTP
/// client trusting `ca_file`.
pub async fn https_sdk_config(endpoint_url: &str, ca_file: &Path, region: &str) -> anyhow::Result<SdkConfig> {
    let sdk = provision::sdk_config(endpoint_url, region).await;
    Ok(sdk.to_builder().http_client(cfn_once::adapters::https::sdk_http_client(tls_trusting(ca_file)?)).build())
}

pub use cfn_once_ops::aws::s3_client;
