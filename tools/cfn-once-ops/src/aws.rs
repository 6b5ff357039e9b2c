//! The AWS calls the operator's commands share with the local environment: SDK configuration for
//! a local endpoint, a queue's counts, and the presigned ResponseURLs of a probe and the answers
//! PUT to them.

use std::time::Duration;

use aws_config::{BehaviorVersion, Region, SdkConfig};
use aws_sdk_s3::presigning::PresigningConfig;
use aws_sdk_s3::types::ObjectVersion;
use aws_sdk_sqs::types::QueueAttributeName;

/// SDK configuration for `region`: a local endpoint (moto, with test credentials) when
/// `endpoint_url` is given, else AWS with `profile` or the default credential chain. The one
/// loader every operator command uses.
pub async fn sdk_for(endpoint_url: Option<&str>, profile: Option<&str>, region: &str) -> SdkConfig {
    match endpoint_url {
        Some(endpoint) => sdk_config(endpoint, region).await,
        None => {
            let mut loader = aws_config::defaults(BehaviorVersion::latest()).region(Region::new(region.to_owned()));
            if let Some(profile) = profile {
                loader = loader.profile_name(profile);
            }
            loader.load().await
        }
    }
}

/// Only problems reach the terminal: the commands print their own progress. For the binaries
/// (`cfn-once`, `cfn-once-dev`).
pub fn init_terminal_logging() {
    tracing_subscriber::fmt()
        .with_max_level(tracing::Level::ERROR)
        .with_target(false)
        .with_writer(std::io::stderr)
        .init();
}

/// SDK configuration for a local endpoint: fixed test credentials, the given region.
pub async fn sdk_config(endpoint_url: &str, region: &str) -> SdkConfig {
    aws_config::defaults(BehaviorVersion::latest())
        .region(Region::new(region.to_owned()))
        .endpoint_url(endpoint_url)
        .credentials_provider(aws_sdk_sqs::config::Credentials::new("test", "test", None, None, "cfn-once-local"))
        .load()
        .await
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

/// An S3 client for a local endpoint: path-style, since bucket subdomains of 127.0.0.1 do not
/// resolve.
pub fn s3_client(sdk: &SdkConfig) -> aws_sdk_s3::Client {
    aws_sdk_s3::Client::from_conf(aws_sdk_s3::config::Builder::from(sdk).force_path_style(true).build())
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

pub fn sdk_error<E: std::error::Error + 'static, R: std::fmt::Debug>(
    operation: &str,
    error: &aws_sdk_sqs::error::SdkError<E, R>,
) -> anyhow::Error {
    anyhow::anyhow!("{operation} failed: {}", aws_sdk_sqs::error::DisplayErrorContext(error))
}
