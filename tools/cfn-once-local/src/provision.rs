//! Creating the local stand-ins for what `infra/` deploys in AWS: the lease table, queues with
//! DLQs, the ServiceToken topic and its subscriptions, and a versioned bucket that plays
//! CloudFormation's response bucket. Shared by `cfn-once demo` and the end-to-end tests.

use anyhow::Context;
use aws_sdk_dynamodb::types::{AttributeDefinition, BillingMode, KeySchemaElement, KeyType, ScalarAttributeType};
use aws_sdk_s3::types::{BucketVersioningStatus, VersioningConfiguration};
use aws_sdk_sqs::types::QueueAttributeName;

use cfn_once::adapters::dynamodb_lease::KEY_ATTRIBUTES;
pub use cfn_once_ops::aws::{
    Depth, depth, presigned_put_url, presigned_put_url_signed_at, response_puts, response_versions, sdk_config,
    sdk_error, wait_for_response,
};

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
