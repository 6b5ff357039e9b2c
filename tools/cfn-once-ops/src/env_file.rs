//! `.local/env.json`: what `cfn-once local` writes about the environment it serves, read by
//! every client of it (the operator's commands, the drill, the player, tests).

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use anyhow::Context;
use serde::{Deserialize, Serialize};

/// `.local/env.json`: everything a client needs to talk to the environment.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct EnvFile {
    /// moto's own endpoint, plain HTTP: every service, for the handlers and the operator tools.
    pub endpoint_url: String,
    /// The TLS front before moto: where the environment's S3 URLs (answer URLs, ResponseURLs)
    /// point.
    pub https_endpoint_url: String,
    /// The PEM file of the CA that signed the front's certificate: what a client trusts for
    /// `https_endpoint_url` (`SSL_CERT_FILE`, `AWS_CA_BUNDLE`, `REQUESTS_CA_BUNDLE`).
    pub ca_file: PathBuf,
    pub customer_region: String,
    pub primary_region: String,
    pub secondary_region: String,
    /// The first customer region's topic (`customer_region`'s).
    pub topic_arn: String,
    /// Every customer region's ServiceToken topic, by region.
    #[serde(default)]
    pub customer_topics: BTreeMap<String, String>,
    pub queues: QueueUrls,
    pub table_name: String,
    pub response_bucket: String,
    /// The table `Custom::DynamoDBItem` may write (`CFN_ONCE_ITEM_TABLES`), in the customer
    /// region: read it with a plain GetItem or Scan to see what the provider left.
    #[serde(default)]
    pub item_table: String,
    /// Each handler region's answer bucket, by region: where functions that answer by
    /// themselves PUT (through presigned URLs), when functions are served.
    #[serde(default)]
    pub answer_buckets: BTreeMap<String, String>,
    /// The resource types served by functions, each with its functions by kind (`on-event`,
    /// `is-complete`, `cfn-response`), as the functions file says.
    #[serde(default)]
    pub routes: BTreeMap<String, BTreeMap<String, String>>,
    /// Each customer region's delivery dead-letter queues: where SNS moves what it cannot
    /// deliver to a regional queue (`infra/customer.yaml`'s subscriptions), one per topic and
    /// handler role. None in files written before there were any.
    #[serde(default)]
    pub delivery_dlqs: Vec<DeliveryDlq>,
    /// The process id of the `cfn-once local` serving the environment, which crashes and
    /// restores its primary region on SIGUSR1 and SIGUSR2 (`cfn_once_local::signals`); none in files
    /// written by older versions or by tests that run the regions themselves.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub local_pid: Option<u32>,
    /// What both regions' handlers were told about their queues (as `infra/regional.yaml` tells
    /// the function), which `cfn-once check` holds the queues to; none in files written before.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub handler: Option<HandlerSettings>,
}

/// The settings a regional stack gives its function and queue from one parameter each: what the
/// queues must agree with.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct HandlerSettings {
    /// The function's timeout (the local event source mapping's).
    pub function_timeout_s: u32,
    /// `CFN_ONCE_VISIBILITY_TIMEOUT_S`: the queues' visibility timeout.
    pub visibility_timeout_s: u32,
    /// `CFN_ONCE_SECONDARY_DELAY_S`: the secondary queue's delay, which the primary counts
    /// failover from.
    pub secondary_delay_s: u32,
    /// `CFN_ONCE_MAX_RECEIVE_COUNT`: the queues' redrive `maxReceiveCount`.
    pub max_receive_count: u32,
    /// `CFN_ONCE_RAW_DELIVERY`: the subscriptions' `RawMessageDelivery`.
    pub raw_delivery: bool,
}

/// A subscription's dead-letter queue, in its topic's region.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct DeliveryDlq {
    /// The topic's region, where the queue is.
    pub region: String,
    pub topic_arn: String,
    /// The role whose queue the subscription delivers to: `primary` or `secondary`.
    pub role: String,
    pub url: String,
}

impl DeliveryDlq {
    /// The queue's name, the last part of its URL.
    pub fn name(&self) -> &str {
        self.url.rsplit('/').next().unwrap_or_default()
    }

    /// The alarm `infra/customer.yaml` sets on its arrivals (`<queue name>-arrivals`).
    pub fn alarm(&self) -> String {
        format!("{}-arrivals", self.name())
    }
}

/// The four queues, by URL.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct QueueUrls {
    pub primary: String,
    pub secondary: String,
    pub primary_dlq: String,
    pub secondary_dlq: String,
}

impl EnvFile {
    /// Reads an env file written by `cfn-once local`.
    pub fn read(path: &Path) -> anyhow::Result<Self> {
        let text = std::fs::read_to_string(path)
            .with_context(|| format!("cannot read {}: is `make local` running?", path.display()))?;
        serde_json::from_str(&text).with_context(|| format!("{} is not a cfn-once env file", path.display()))
    }

    /// Every customer region's topic (at least `topic_arn`, for files written before there
    /// were several).
    pub fn topic_arns(&self) -> Vec<String> {
        if self.customer_topics.is_empty() {
            vec![self.topic_arn.clone()]
        } else {
            self.customer_topics.values().cloned().collect()
        }
    }

    /// Writes it, creating the directory.
    pub fn write(&self, path: &Path) -> anyhow::Result<()> {
        if let Some(parent) = path.parent() {
            std::fs::create_dir_all(parent).with_context(|| format!("cannot create {}", parent.display()))?;
        }
        std::fs::write(path, serde_json::to_string_pretty(self)? + "\n")
            .with_context(|| format!("cannot write {}", path.display()))
    }
}
