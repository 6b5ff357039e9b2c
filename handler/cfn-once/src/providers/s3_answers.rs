//! cfn-once's answer bucket (`CFN_ONCE_ANSWER_BUCKET`) on S3: presigned PUT URLs for functions
//! that answer by themselves, and reads of what they PUT, in this region's bucket or in the other
//! region's (a wait stores the bucket and its region; whichever region holds the due poll reads
//! the object there, with a client of that region made at its first read).
//!
//! Both go through `aws-sdk-s3`: the URLs are its presigner's (SigV4 in the query string, on the
//! function's credentials), the reads are GetObject calls, classified as every AWS call is
//! (`aws::errors`). Locally (`AWS_ENDPOINT_URL`, moto) the bucket is addressed path-style, as moto
//! serves it; in AWS, virtual-hosted. moto does not check signatures, so locally a wrong
//! signature would pass: the presigner is the SDK's own, tested by the SDK against AWS's examples.

use std::collections::HashMap;
use std::sync::{Mutex, PoisonError};
use std::time::Duration;

use async_trait::async_trait;
use aws_sdk_s3::operation::get_object::GetObjectError;
use aws_sdk_s3::presigning::PresigningConfig;

use crate::aws::{Failure, Refresh, classify, classify_read};
use crate::providers::answers_itself::{AnswerDrop, AnswerObject, DropError, UploadUrl};

/// The answer bucket of this region, and reads of the other region's.
#[derive(Debug)]
pub struct S3AnswerDrop {
    sdk: aws_config::SdkConfig,
    client: aws_sdk_s3::Client,
    bucket: String,
    region: String,
    timeout_ms: u64,
    /// How another region's S3 is reached, where not as `sdk` says with that region (a local
    /// environment's, or a test's).
    configs: HashMap<String, aws_config::SdkConfig>,
    /// Clients of other regions, made at their first read.
    others: Mutex<HashMap<String, aws_sdk_s3::Client>>,
    /// Whether expired credentials are loaded anew (else a refusal for them is deferred).
    refresh: Refresh,
}

impl S3AnswerDrop {
    /// The bucket `bucket` of `sdk`'s region on `sdk`'s credentials and endpoint; each read gives
    /// up after `timeout_ms`. Another region's bucket is read with the same configuration in
    /// that region.
    pub fn new(sdk: &aws_config::SdkConfig, bucket: &str, timeout_ms: u64) -> anyhow::Result<Self> {
        let Some(region) = sdk.region() else {
            anyhow::bail!("the answer bucket's client has no region (AWS_REGION)");
        };
        Ok(Self {
            sdk: sdk.clone(),
            client: client(sdk, timeout_ms),
            bucket: bucket.to_owned(),
            region: region.to_string(),
            timeout_ms,
            configs: HashMap::new(),
            others: Mutex::default(),
            refresh: Refresh::of(sdk.credentials_provider()),
        })
    }

    /// Reads of `region`'s bucket go through `sdk` (its endpoint and credentials) instead.
    pub fn with_region(mut self, region: &str, sdk: &aws_config::SdkConfig) -> Self {
        self.configs.insert(region.to_owned(), sdk.clone());
        self
    }

    /// The client that reads `region`'s bucket.
    fn client_in(&self, region: &str) -> aws_sdk_s3::Client {
        if region == self.region {
            return self.client.clone();
        }
        let mut others = self.others.lock().unwrap_or_else(PoisonError::into_inner);
        others
            .entry(region.to_owned())
            .or_insert_with(|| {
                let sdk = match self.configs.get(region) {
                    Some(sdk) => sdk.clone(),
                    None => self.sdk.to_builder().region(aws_config::Region::new(region.to_owned())).build(),
                };
                client(&sdk, self.timeout_ms)
            })
            .clone()
    }
}

/// An S3 client of `sdk`, one attempt per call, each cut at `timeout_ms`.
fn client(sdk: &aws_config::SdkConfig, timeout_ms: u64) -> aws_sdk_s3::Client {
    let config = aws_sdk_s3::config::Builder::from(sdk)
        // A local endpoint (moto) serves buckets by path, not by host name.
        .force_path_style(sdk.endpoint_url().is_some())
        .timeout_config(crate::aws::call_timeouts(timeout_ms))
        .retry_config(aws_config::retry::RetryConfig::standard().with_max_attempts(1))
        .build();
    aws_sdk_s3::Client::from_conf(config)
}

/// A failed S3 call as the port's error.
fn drop_error(failure: Failure) -> DropError {
    match failure {
        Failure::Deferred(text) => DropError::Deferred(text),
        Failure::Permanent(text) => DropError::Permanent(format!(
            "{text} (the function's role needs s3:GetObject on both regions' answer buckets' answers/ and s3:ListBucket on them, which the regional template grants)"
        )),
        other => DropError::Transient(other.into_text()),
    }
}

#[async_trait]
impl AnswerDrop for S3AnswerDrop {
    fn bucket(&self) -> &str {
        &self.bucket
    }

    fn region(&self) -> &str {
        &self.region
    }

    async fn upload_url(&self, key: &str, valid_for: Duration) -> Result<UploadUrl, DropError> {
        let presigning = PresigningConfig::expires_in(valid_for)
            .map_err(|error| DropError::Permanent(format!("the answer's URL cannot be presigned: {error}")))?;
        let presigned = self
            .client
            .put_object()
            .bucket(&self.bucket)
            .key(key)
            .presigned(presigning)
            .await
            .map_err(|error| classify(&error));
        let presigned = match presigned {
            Ok(presigned) => presigned,
            Err(failure) => return Err(drop_error(self.refresh.reconsider(failure).await)),
        };
        Ok(UploadUrl::new(presigned.uri().to_owned()))
    }

    async fn read(&self, object: &AnswerObject, limit: usize) -> Result<Option<Vec<u8>>, DropError> {
        let client = self.client_in(&object.region);
        let read = async {
            let object = match client.get_object().bucket(&object.bucket).key(&object.key).send().await {
                Ok(object) => object,
                Err(error) if error.as_service_error().is_some_and(GetObjectError::is_no_such_key) => return Ok(None),
                // A read: whatever its outcome, nothing changed.
                Err(error) => return Err(drop_error(self.refresh.reconsider(classify_read(&error)).await)),
            };
            // Past the limit: answer with as much as shows it is too long, without reading it.
            if object.content_length().is_some_and(|length| usize::try_from(length).map_or(true, |n| n > limit)) {
                return Ok(Some(vec![b' '; limit + 1]));
            }
            let mut body = object.body;
            let mut bytes = Vec::new();
            while let Some(chunk) = body.next().await {
                let chunk =
                    chunk.map_err(|error| DropError::Transient(format!("the answer could not be read: {error}")))?;
                bytes.extend_from_slice(&chunk);
                if bytes.len() > limit {
                    bytes.truncate(limit + 1);
                    break;
                }
            }
            Ok(Some(bytes))
        };
        match tokio::time::timeout(Duration::from_millis(self.timeout_ms), read).await {
            Ok(read) => read,
            Err(_) => Err(DropError::Transient(format!(
                "the answer bucket of {} had no answer within {} ms",
                object.region, self.timeout_ms
            ))),
        }
    }
}
