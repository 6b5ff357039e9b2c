//! Where the operator's commands look: the lease table, each handler region's queue and DLQ,
//! and the customer regions' delivery dead-letter queues; and the small helpers they share.

use anyhow::Context;
use aws_config::SdkConfig;
use cfn_once::adapters::dynamodb_lease::DynamoLeaseStore;
use cfn_once_core::fingerprint::Fingerprint;
use cfn_once_core::request::{RequestKey, StackArn};
use serde_json::Value;

use crate::env_file::EnvFile;

/// Where the tools look: the lease table and each handler region's queue and DLQ.
#[derive(Debug, Clone)]
pub struct OpsTarget {
    /// A local AWS endpoint (moto), or `None` for AWS itself.
    pub endpoint_url: Option<String>,
    /// An AWS profile for AWS itself (else the default credential chain).
    pub profile: Option<String>,
    pub table: String,
    /// The region of the table replica to read (MRSC: any replica is strongly consistent).
    pub table_region: String,
    pub queues: Vec<QueueTarget>,
    /// The customer stacks' delivery dead-letter queues: what SNS could not deliver to the
    /// queues above.
    pub deliveries: Vec<DeliveryTarget>,
}

/// One handler region's queues.
#[derive(Debug, Clone)]
pub struct QueueTarget {
    pub region: String,
    /// `primary` or `secondary`.
    pub role: String,
    pub queue_url: String,
    pub dlq_url: String,
}

/// A subscription's dead-letter queue, in its topic's region: where SNS moves a request it could
/// not deliver to `role`'s queue (`infra/customer.yaml`).
#[derive(Debug, Clone)]
pub struct DeliveryTarget {
    /// The topic's region, where the queue is.
    pub region: String,
    /// `primary` or `secondary`: whose queue the request missed.
    pub role: String,
    pub dlq_url: String,
    /// The alarm on its arrivals, `<queue name>-arrivals` as the template names it.
    pub alarm: String,
}

impl DeliveryTarget {
    /// `role=url`, as `--delivery-dlq` takes it: a customer stack's
    /// `PrimaryDeliveryDeadLetterQueueUrl` or `SecondaryDeliveryDeadLetterQueueUrl` output.
    pub fn parse(entry: &str) -> anyhow::Result<Self> {
        let (role, url) = entry
            .split_once('=')
            .with_context(|| format!("--delivery-dlq {entry:?}: write ROLE=URL, e.g. primary=https://sqs..."))?;
        let region =
            queue_region(url).with_context(|| format!("--delivery-dlq {entry:?}: no region in the queue URL"))?;
        Ok(Self::new(region, role, url))
    }

    /// As the DLQ readers (`dlq`) take a queue: this DLQ in its region, and `queue_url`, the
    /// handler region's queue the requests missed (where a redrive sends them).
    pub fn as_queue(&self, queue_url: &str) -> QueueTarget {
        QueueTarget {
            region: self.region.clone(),
            role: self.role.clone(),
            queue_url: queue_url.to_owned(),
            dlq_url: self.dlq_url.clone(),
        }
    }

    fn new(region: String, role: &str, url: &str) -> Self {
        let name = url.rsplit('/').next().unwrap_or_default();
        Self { region, role: role.to_owned(), dlq_url: url.to_owned(), alarm: format!("{name}-arrivals") }
    }
}

impl OpsTarget {
    /// The handler region's queue a delivery dead-letter queue's requests missed.
    pub fn queue_of(&self, delivery: &DeliveryTarget) -> anyhow::Result<&QueueTarget> {
        self.queues.iter().find(|queue| queue.role == delivery.role).with_context(|| {
            format!(
                "{} is the {} queue's delivery DLQ, and no --queue {}=URL names that queue",
                delivery.dlq_url, delivery.role, delivery.role
            )
        })
    }

    /// The local environment `cfn-once local` described in `env`.
    pub fn from_env_file(env: &EnvFile) -> Self {
        Self {
            endpoint_url: Some(env.endpoint_url.clone()),
            profile: None,
            table: env.table_name.clone(),
            table_region: env.primary_region.clone(),
            queues: vec![
                QueueTarget {
                    region: env.primary_region.clone(),
                    role: "primary".into(),
                    queue_url: env.queues.primary.clone(),
                    dlq_url: env.queues.primary_dlq.clone(),
                },
                QueueTarget {
                    region: env.secondary_region.clone(),
                    role: "secondary".into(),
                    queue_url: env.queues.secondary.clone(),
                    dlq_url: env.queues.secondary_dlq.clone(),
                },
            ],
            deliveries: env
                .delivery_dlqs
                .iter()
                .map(|dlq| DeliveryTarget::new(dlq.region.clone(), &dlq.role, &dlq.url))
                .collect(),
        }
    }

    /// Deployed stacks: the table, and each region's queue URL (`role=url`, e.g.
    /// `primary=https://sqs.us-east-1.amazonaws.com/123456789012/cfn-once`); each DLQ is read from
    /// its queue's redrive policy, each region from its queue URL.
    pub async fn deployed(
        table: String,
        table_region: Option<String>,
        queues: &[String],
        delivery_dlqs: &[String],
        profile: Option<String>,
        endpoint_url: Option<String>,
    ) -> anyhow::Result<Self> {
        let mut target = Self {
            endpoint_url,
            profile,
            table,
            table_region: String::new(),
            queues: Vec::with_capacity(queues.len()),
            deliveries: delivery_dlqs
                .iter()
                .map(|entry| DeliveryTarget::parse(entry))
                .collect::<anyhow::Result<_>>()?,
        };
        for entry in queues {
            let (role, url) = entry
                .split_once('=')
                .with_context(|| format!("--queue {entry:?}: write ROLE=URL, e.g. primary=https://sqs..."))?;
            let region = queue_region(url).with_context(|| format!("--queue {entry:?}: no region in the queue URL"))?;
            let sqs = aws_sdk_sqs::Client::new(&target.sdk(&region).await);
            let dlq_url = dead_letter_queue_url(&sqs, url).await?;
            target.queues.push(QueueTarget { region, role: role.to_owned(), queue_url: url.to_owned(), dlq_url });
        }
        target.table_region = match table_region {
            Some(region) => region,
            None => target.queues.first().map(|q| q.region.clone()).context("give --table-region or a --queue")?,
        };
        Ok(target)
    }

    /// SDK configuration for `region`.
    pub async fn sdk(&self, region: &str) -> SdkConfig {
        crate::aws::sdk_for(self.endpoint_url.as_deref(), self.profile.as_deref(), region).await
    }

    /// The lease table.
    pub async fn store(&self) -> DynamoLeaseStore {
        DynamoLeaseStore::new(aws_sdk_dynamodb::Client::new(&self.sdk(&self.table_region).await), &self.table)
    }

    /// An SQS client for `queue`'s region.
    pub async fn sqs(&self, queue: &QueueTarget) -> aws_sdk_sqs::Client {
        aws_sdk_sqs::Client::new(&self.sdk(&queue.region).await)
    }

    /// An SQS client for `region`.
    pub async fn sqs_in(&self, region: &str) -> aws_sdk_sqs::Client {
        aws_sdk_sqs::Client::new(&self.sdk(region).await)
    }
}

/// `https://sqs.us-east-1.amazonaws.com/...` (or `sqs.us-east-1.api.aws`) into `us-east-1`.
fn queue_region(url: &str) -> Option<String> {
    let host = url.split("://").nth(1)?.split('/').next()?;
    let mut parts = host.split('.');
    (parts.next()? == "sqs").then(|| parts.next().map(str::to_owned)).flatten()
}

/// The URL of the DLQ named by `queue_url`'s redrive policy.
async fn dead_letter_queue_url(sqs: &aws_sdk_sqs::Client, queue_url: &str) -> anyhow::Result<String> {
    let attributes = sqs
        .get_queue_attributes()
        .queue_url(queue_url)
        .attribute_names(aws_sdk_sqs::types::QueueAttributeName::RedrivePolicy)
        .send()
        .await
        .map_err(|e| {
            anyhow::anyhow!("GetQueueAttributes on {queue_url}: {}", aws_sdk_sqs::error::DisplayErrorContext(&e))
        })?
        .attributes
        .unwrap_or_default();
    let arn = attributes
        .get(&aws_sdk_sqs::types::QueueAttributeName::RedrivePolicy)
        .and_then(|policy| serde_json::from_str::<Value>(policy).ok())
        .and_then(|policy| policy.get("deadLetterTargetArn")?.as_str().map(str::to_owned))
        .with_context(|| format!("{queue_url} has no redrive policy naming a dead-letter queue"))?;
    let (account, name) = cfn_once::adapters::sqs_queue::parse_queue_arn(&arn).context("a bad DLQ ARN")?;
    let output = sqs
        .get_queue_url()
        .queue_name(name)
        .queue_owner_aws_account_id(account)
        .send()
        .await
        .map_err(|e| anyhow::anyhow!("GetQueueUrl {name}: {}", aws_sdk_sqs::error::DisplayErrorContext(&e)))?;
    output.queue_url.context("GetQueueUrl returned no URL")
}

/// What a queued message is about, read without validating it: enough to find its record.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Identified {
    pub key: RequestKey,
    pub logical_resource_id: String,
    pub request_type: String,
    /// The attempt, as the handler computes it (`Fingerprint::of` the request).
    pub fingerprint: Fingerprint,
    /// The key of the work a Create or Update with a wait condition hands past its answer
    /// (`cfn_once_core::work::work_key`); the handle itself is never kept.
    pub work_key: Option<RequestKey>,
}

/// Reads the request out of an SQS body (an SNS envelope or a bare request); `None` if it names
/// no StackId and RequestId. The ResponseURL is never looked at.
pub fn identify(body: &str) -> Option<Identified> {
    let outer: Value = serde_json::from_str(body).ok()?;
    let request: Value = if outer.get("Type").and_then(Value::as_str) == Some("Notification") {
        serde_json::from_str(outer.get("Message")?.as_str()?).ok()?
    } else {
        outer
    };
    let text = |field: &str| request.get(field).and_then(Value::as_str).map(str::to_owned);
    let stack_id = StackArn::parse(&text("StackId")?)?;
    let logical_resource_id = text("LogicalResourceId").unwrap_or_default();
    let request_type = text("RequestType").unwrap_or_default();
    let handle = request
        .get("ResourceProperties")
        .and_then(|properties| properties.get(cfn_once_core::wait_condition::HANDLE_PROPERTY))
        .and_then(Value::as_str);
    let work_key = handle
        .filter(|_| matches!(request_type.as_str(), "Create" | "Update"))
        .map(|handle| cfn_once_core::work::work_key_of(&stack_id, &logical_resource_id, handle));
    Some(Identified {
        key: RequestKey { stack_id, request_id: text("RequestId")? },
        logical_resource_id,
        request_type,
        fingerprint: Fingerprint::of(&request),
        work_key,
    })
}

/// Epoch ms as `2026-11-30T09:41:07Z`, by the SDK's own RFC 3339 writer (whole seconds, so no
/// fraction); a time past year 9999, which no record of ours holds, is shown as its number.
pub fn utc(ms: u64) -> String {
    let seconds = (ms / 1000) as i64;
    aws_smithy_types::DateTime::from_secs(seconds)
        .fmt(aws_smithy_types::date_time::Format::DateTime)
        .unwrap_or_else(|_| format!("{ms} ms after the epoch"))
}

/// `12 s`, `3 min 4 s`, `2 h 5 min`.
pub fn span(ms: u64) -> String {
    let seconds = ms / 1000;
    match seconds {
        0..60 => format!("{seconds} s"),
        60..3_600 => format!("{} min {} s", seconds / 60, seconds % 60),
        _ => format!("{} h {} min", seconds / 3_600, seconds / 60 % 60),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn times_read_as_people_write_them() {
        assert_eq!(utc(0), "1970-01-01T00:00:00Z");
        assert_eq!(utc(1_800_000_000_000), "2027-01-15T08:00:00Z");
        assert_eq!(utc(951_782_400_000), "2000-02-29T00:00:00Z");
        assert_eq!(
            (span(12_999), span(184_000), span(7_500_000)),
            ("12 s".into(), "3 min 4 s".into(), "2 h 5 min".into())
        );
    }

    #[test]
    fn queue_urls_name_their_region() {
        assert_eq!(queue_region("https://sqs.us-east-1.amazonaws.com/123456789012/q").as_deref(), Some("us-east-1"));
        assert_eq!(queue_region("https://sqs.eu-west-1.api.aws/123456789012/q").as_deref(), Some("eu-west-1"));
        assert_eq!(queue_region("http://127.0.0.1:5000/123456789012/q"), None);
    }

    #[test]
    fn a_delivery_dlq_names_its_region_its_role_and_the_alarm_on_its_arrivals() {
        let url = "https://sqs.eu-west-1.amazonaws.com/123456789012/payments-primary-delivery-dlq";
        let delivery = DeliveryTarget::parse(&format!("primary={url}")).expect("parsed");
        assert_eq!((delivery.region.as_str(), delivery.role.as_str()), ("eu-west-1", "primary"));
        assert_eq!(delivery.alarm, "payments-primary-delivery-dlq-arrivals", "as infra/customer.yaml names it");
        let error = format!("{:#}", DeliveryTarget::parse(url).unwrap_err());
        assert!(error.contains("write ROLE=URL"), "{error}");
    }

    #[test]
    fn a_queued_request_is_identified_without_its_url() {
        let request = serde_json::json!({
            "RequestType": "Create", "StackId": "arn:aws:cloudformation:us-east-2:123456789012:stack/s/g", "RequestId": "r-1",
            "LogicalResourceId": "Thing", "ResponseURL": "https://secret.example/x?X-Amz-Signature=s",
        });
        let envelope = serde_json::json!({"Type": "Notification", "TopicArn": "arn:aws:sns:us-east-2:1:t", "Message": request.to_string()});
        let bare = identify(&request.to_string()).expect("bare");
        let wrapped = identify(&envelope.to_string()).expect("envelope");
        assert_eq!(bare, wrapped, "one request, however it is delivered");
        assert_eq!((bare.key.request_id.as_str(), bare.logical_resource_id.as_str()), ("r-1", "Thing"));
        assert_eq!(identify("not json"), None);
        assert_eq!(identify(r#"{"RequestType":"Create"}"#), None);
    }
}
