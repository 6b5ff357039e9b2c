//! Creating the local stand-ins for what `infra/` deploys in AWS: the lease table, queues with
//! DLQs, the ServiceToken topic and its subscriptions, and a versioned bucket that plays
//! CloudFormation's response bucket. Shared by `cfn-once demo` and the end-to-end tests.

use std::time::Duration;

use anyhow::Context;
use aws_config::{BehaviorVersion, Region, SdkConfig};
use aws_sdk_dynamodb::types::{AttributeDefinition, BillingMode, KeySchemaElement, KeyType, ScalarAttributeType};
use aws_sdk_s3::presigning::PresigningConfig;
use aws_sdk_s3::types::{BucketVersioningStatus, ObjectVersion, VersioningConfiguration};
use aws_sdk_sqs::types::QueueAttributeName;

use cfn_once::adapters::dynamodb_lease::KEY_ATTRIBUTES;

/// SDK configuration for a local endpoint: fixed test credentials, the given region.
pub async fn sdk_config(endpoint_url: &str, region: &str) -> SdkConfig {
    aws_config::defaults(BehaviorVersion::latest())
        .region(Region::new(region.to_owned()))
        .endpoint_url(endpoint_url)
        .credentials_provider(aws_sdk_sqs::config::Credentials::new("test", "test", None, None, "cfn-once-local"))
        .load()
        .await
}

/// Creates a lease table with the key schema the DynamoDB lease store expects.
pub async fn create_lease_table(dynamodb: &aws_sdk_dynamodb::Client, name: &str) -> anyhow::Result<()> {
    let (pk, sk) = KEY_ATTRIBUTES;
    create_table(dynamodb, name, &[(pk, KeyType::Hash), (sk, KeyType::Range)]).await
}

/// Creates a table whose key attributes are all strings.
pub async fn create_table(
    dynamodb: &aws_sdk_dynamodb::Client,
    name: &str,
    key: &[(&str, KeyType)],
) -> anyhow::Result<()> {
    let mut call = dynamodb.create_table().table_name(name).billing_mode(BillingMode::PayPerRequest);
    for (attribute, key_type) in key {
        call = call
            .attribute_definitions(
                AttributeDefinition::builder()
                    .attribute_name(*attribute)
                    .attribute_type(ScalarAttributeType::S)
                    .build()?,
            )
            .key_schema(KeySchemaElement::builder().attribute_name(*attribute).key_type(key_type.clone()).build()?);
    }
    call.send().await.map_err(|e| sdk_error("CreateTable", &e))?;
    Ok(())
}

/// A queue and its dead-letter queue.
#[derive(Debug, Clone)]
pub struct QueuePair {
    pub url: String,
    pub arn: String,
    pub dlq_url: String,
    pub dlq_arn: String,
}

/// How a queue behaves.
#[derive(Debug, Clone, Copy)]
pub struct QueueSettings {
    pub delay_s: u32,
    pub visibility_timeout_s: u32,
    /// Receives before a message moves to the DLQ.
    pub max_receive_count: u32,
}

/// Creates `name` and `name-dlq`, with a redrive policy between them.
pub async fn create_queue_pair(
    sqs: &aws_sdk_sqs::Client,
    name: &str,
    settings: QueueSettings,
) -> anyhow::Result<QueuePair> {
    let dlq_url = sqs
        .create_queue()
        .queue_name(format!("{name}-dlq"))
        .send()
        .await
        .map_err(|e| sdk_error("CreateQueue", &e))?
        .queue_url
        .context("CreateQueue returned no URL")?;
    let dlq_arn = queue_arn(sqs, &dlq_url).await?;
    let redrive =
        serde_json::json!({"deadLetterTargetArn": dlq_arn, "maxReceiveCount": settings.max_receive_count.to_string()});
    let url = sqs
        .create_queue()
        .queue_name(name)
        .attributes(QueueAttributeName::DelaySeconds, settings.delay_s.to_string())
        .attributes(QueueAttributeName::VisibilityTimeout, settings.visibility_timeout_s.to_string())
        .attributes(QueueAttributeName::RedrivePolicy, redrive.to_string())
        .send()
        .await
        .map_err(|e| sdk_error("CreateQueue", &e))?
        .queue_url
        .context("CreateQueue returned no URL")?;
    let arn = queue_arn(sqs, &url).await?;
    Ok(QueuePair { url, arn, dlq_url, dlq_arn })
}

/// The ARN of the queue at `url`.
pub async fn queue_arn(sqs: &aws_sdk_sqs::Client, url: &str) -> anyhow::Result<String> {
    sqs.get_queue_attributes()
        .queue_url(url)
        .attribute_names(QueueAttributeName::QueueArn)
        .send()
        .await
        .map_err(|e| sdk_error("GetQueueAttributes", &e))?
        .attributes
        .and_then(|mut attributes| attributes.remove(&QueueAttributeName::QueueArn))
        .context("queue has no ARN")
}

/// Approximate number of messages in the queue, visible or not.
pub async fn queue_depth(sqs: &aws_sdk_sqs::Client, url: &str) -> anyhow::Result<u64> {
    let depth = depth(sqs, url).await?;
    Ok(depth.visible + depth.in_flight + depth.delayed)
}

/// A queue's counts: visible, in flight (received, not yet deleted or released), delayed.
#[derive(Debug, Clone, Copy, Default, serde::Serialize)]
pub struct Depth {
    pub visible: u64,
    pub in_flight: u64,
    pub delayed: u64,
}

/// `queue_url`'s approximate counts.
pub async fn depth(sqs: &aws_sdk_sqs::Client, queue_url: &str) -> anyhow::Result<Depth> {
    let attributes: std::collections::HashMap<QueueAttributeName, String> = sqs
        .get_queue_attributes()
        .queue_url(queue_url)
        .attribute_names(QueueAttributeName::ApproximateNumberOfMessages)
        .attribute_names(QueueAttributeName::ApproximateNumberOfMessagesNotVisible)
        .attribute_names(QueueAttributeName::ApproximateNumberOfMessagesDelayed)
        .send()
        .await
        .map_err(|e| {
            anyhow::anyhow!("GetQueueAttributes on {queue_url}: {}", aws_sdk_sqs::error::DisplayErrorContext(&e))
        })?
        .attributes
        .unwrap_or_default();
    let count = |name: QueueAttributeName| attributes.get(&name).and_then(|v| v.parse().ok()).unwrap_or(0);
    Ok(Depth {
        visible: count(QueueAttributeName::ApproximateNumberOfMessages),
        in_flight: count(QueueAttributeName::ApproximateNumberOfMessagesNotVisible),
        delayed: count(QueueAttributeName::ApproximateNumberOfMessagesDelayed),
    })
}

/// Creates the ServiceToken topic and returns its ARN.
pub async fn create_topic(sns: &aws_sdk_sns::Client, name: &str) -> anyhow::Result<String> {
    sns.create_topic()
        .name(name)
        .send()
        .await
        .map_err(|e| sdk_error("CreateTopic", &e))?
        .topic_arn
        .context("no topic ARN")
}

/// Subscribes a queue (possibly in another region) to the topic. With `dead_letter_arn`, a queue
/// in the topic's region, what SNS cannot deliver to the queue it moves there, as
/// `infra/customer.yaml`'s subscriptions do; without, SNS discards it.
pub async fn subscribe_queue(
    sns: &aws_sdk_sns::Client,
    topic_arn: &str,
    queue_arn: &str,
    raw_delivery: bool,
    dead_letter_arn: Option<&str>,
) -> anyhow::Result<()> {
    let mut subscribe = sns
        .subscribe()
        .topic_arn(topic_arn)
        .protocol("sqs")
        .endpoint(queue_arn)
        .attributes("RawMessageDelivery", raw_delivery.to_string());
    if let Some(arn) = dead_letter_arn {
        subscribe = subscribe.attributes("RedrivePolicy", serde_json::json!({"deadLetterTargetArn": arn}).to_string());
    }
    subscribe.send().await.map_err(|e| sdk_error("Subscribe", &e))?;
    Ok(())
}

/// Creates a queue with the template's dead-letter settings (14 days) and returns its URL and
/// ARN.
pub async fn create_dead_letter_queue(sqs: &aws_sdk_sqs::Client, name: &str) -> anyhow::Result<(String, String)> {
    let url = sqs
        .create_queue()
        .queue_name(name)
        .attributes(QueueAttributeName::MessageRetentionPeriod, "1209600")
        .send()
        .await
        .map_err(|e| sdk_error("CreateQueue", &e))?
        .queue_url
        .context("CreateQueue returned no URL")?;
    let arn = queue_arn(sqs, &url).await?;
    Ok((url, arn))
}

/// Creates a versioned bucket, so every PUT of a response is kept and can be counted.
pub async fn create_response_bucket(s3: &aws_sdk_s3::Client, name: &str) -> anyhow::Result<()> {
    s3.create_bucket().bucket(name).send().await.map_err(|e| sdk_error("CreateBucket", &e))?;
    s3.put_bucket_versioning()
        .bucket(name)
        .versioning_configuration(VersioningConfiguration::builder().status(BucketVersioningStatus::Enabled).build())
        .send()
        .await
        .map_err(|e| sdk_error("PutBucketVersioning", &e))?;
    Ok(())
}

/// Creates a bucket in `region` (S3 wants every region but us-east-1 named, and refuses it named).
pub async fn create_bucket_in(s3: &aws_sdk_s3::Client, name: &str, region: &str) -> anyhow::Result<()> {
    let mut create = s3.create_bucket().bucket(name);
    if region != "us-east-1" {
        create = create.create_bucket_configuration(
            aws_sdk_s3::types::CreateBucketConfiguration::builder()
                .location_constraint(aws_sdk_s3::types::BucketLocationConstraint::from(region))
                .build(),
        );
    }
    create.send().await.map_err(|e| sdk_error("CreateBucket", &e))?;
    Ok(())
}

/// A presigned PUT URL (SigV4, `X-Amz-Expires`), made the way CloudFormation makes its
/// ResponseURL.
pub async fn presigned_put_url(
    s3: &aws_sdk_s3::Client,
    bucket: &str,
    key: &str,
    expires_s: u64,
) -> anyhow::Result<String> {
    presigned_put(s3, bucket, key, PresigningConfig::expires_in(Duration::from_secs(expires_s))?).await
}

/// A presigned PUT URL of `key` under `presigning`.
async fn presigned_put(
    s3: &aws_sdk_s3::Client,
    bucket: &str,
    key: &str,
    presigning: PresigningConfig,
) -> anyhow::Result<String> {
    let request = s3
        .put_object()
        .bucket(bucket)
        .key(key)
        .presigned(presigning)
        .await
        .map_err(|e| sdk_error("presign PutObject", &e))?;
    Ok(request.uri().to_owned())
}

/// A presigned PUT URL (SigV4) as if signed at `signed_at`, an earlier time, and valid
/// `expires_s` from then: a URL made long before it is used, as a WaitConditionHandle's is a
/// day into its stack's life. It expires `expires_s` after `signed_at` (to the second its
/// `X-Amz-Date` states), which may be before now.
pub async fn presigned_put_url_signed_at(
    s3: &aws_sdk_s3::Client,
    bucket: &str,
    key: &str,
    signed_at: std::time::SystemTime,
    expires_s: u64,
) -> anyhow::Result<String> {
    let presigning =
        PresigningConfig::builder().start_time(signed_at).expires_in(Duration::from_secs(expires_s)).build()?;
    presigned_put(s3, bucket, key, presigning).await
}

/// Every version of `key` PUT so far, oldest first.
pub async fn response_versions(s3: &aws_sdk_s3::Client, bucket: &str, key: &str) -> anyhow::Result<Vec<Vec<u8>>> {
    let mut bodies = Vec::new();
    for version in versions(s3, bucket, key).await? {
        bodies.push(get_version(s3, bucket, key, version.version_id).await?);
    }
    Ok(bodies)
}

/// How many times `key` was PUT, without downloading anything.
pub async fn response_puts(s3: &aws_sdk_s3::Client, bucket: &str, key: &str) -> anyhow::Result<usize> {
    Ok(versions(s3, bucket, key).await?.len())
}

/// Waits up to `timeout` for the first PUT to `key` and returns its body, polling the cheap
/// version listing and downloading only once something is there. `progress` hears the whole
/// seconds waited, once each.
pub async fn wait_for_response(
    s3: &aws_sdk_s3::Client,
    bucket: &str,
    key: &str,
    timeout: Duration,
    mut progress: impl FnMut(u64),
) -> anyhow::Result<Option<Vec<u8>>> {
    let started = std::time::Instant::now();
    let mut reported_s = 0;
    while started.elapsed() < timeout {
        if let Some(first) = versions(s3, bucket, key).await?.into_iter().next() {
            return Ok(Some(get_version(s3, bucket, key, first.version_id).await?));
        }
        let waited_s = started.elapsed().as_secs();
        if waited_s > reported_s {
            reported_s = waited_s;
            progress(waited_s);
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    Ok(None)
}

/// The versions of exactly `key`, oldest first.
async fn versions(s3: &aws_sdk_s3::Client, bucket: &str, key: &str) -> anyhow::Result<Vec<ObjectVersion>> {
    let listing = s3
        .list_object_versions()
        .bucket(bucket)
        .prefix(key)
        .send()
        .await
        .map_err(|e| sdk_error("ListObjectVersions", &e))?;
    let mut versions: Vec<_> =
        listing.versions.unwrap_or_default().into_iter().filter(|v| v.key.as_deref() == Some(key)).collect();
    versions.sort_by_key(|version| version.last_modified);
    Ok(versions)
}

async fn get_version(
    s3: &aws_sdk_s3::Client,
    bucket: &str,
    key: &str,
    version_id: Option<String>,
) -> anyhow::Result<Vec<u8>> {
    let object = s3
        .get_object()
        .bucket(bucket)
        .key(key)
        .set_version_id(version_id)
        .send()
        .await
        .map_err(|e| sdk_error("GetObject", &e))?;
    Ok(object.body.collect().await?.into_bytes().to_vec())
}

fn sdk_error<E: std::error::Error + 'static, R: std::fmt::Debug>(
    operation: &str,
    error: &aws_sdk_sqs::error::SdkError<E, R>,
) -> anyhow::Error {
    anyhow::anyhow!("{operation} failed: {}", aws_sdk_sqs::error::DisplayErrorContext(error))
}
