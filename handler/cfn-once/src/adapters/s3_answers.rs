//! cfn-once's answer bucket (`CFN_ONCE_ANSWER_BUCKET`) on S3: presigned PUT URLs for functions
//! that answer by themselves, and reads of what they PUT.
//!
//! Both go through `aws-sdk-s3`: the URLs are its presigner's (SigV4 in the query string, on the
//! function's credentials), the reads are GetObject calls, classified as every AWS call is
//! (`aws_errors`). Locally (`AWS_ENDPOINT_URL`, moto) the bucket is addressed path-style, as moto
//! serves it; in AWS, virtual-hosted. moto does not check signatures, so locally a wrong
//! signature would pass: the presigner is the SDK's own, tested by the SDK against AWS's examples.

use std::time::Duration;

use async_trait::async_trait;
use aws_sdk_s3::operation::get_object::GetObjectError;
use aws_sdk_s3::presigning::PresigningConfig;

use crate::adapters::aws_errors::{Failure, classify};
use crate::providers::answers_itself::{AnswerDrop, DropError, UploadUrl};

/// The answer bucket of one region.
#[derive(Debug, Clone)]
pub struct S3AnswerDrop {
    client: aws_sdk_s3::Client,
    bucket: String,
    timeout: Duration,
}

impl S3AnswerDrop {
    /// The bucket `bucket` of `sdk`'s region on `sdk`'s credentials and endpoint; each read gives
    /// up after `timeout_ms`.
    pub fn new(sdk: &aws_config::SdkConfig, bucket: &str, timeout_ms: u64) -> anyhow::Result<Self> {
        let timeout = Duration::from_millis(timeout_ms);
        let config = aws_sdk_s3::config::Builder::from(sdk)
            // A local endpoint (moto) serves buckets by path, not by host name.
            .force_path_style(sdk.endpoint_url().is_some())
            .timeout_config(crate::app::call_timeouts(timeout_ms))
            .retry_config(aws_config::retry::RetryConfig::standard().with_max_attempts(1))
            .build();
        Ok(Self { client: aws_sdk_s3::Client::from_conf(config), bucket: bucket.to_owned(), timeout })
    }
}

/// A failed S3 call as the port's error.
fn drop_error(failure: Failure) -> DropError {
    match failure {
        Failure::Permanent(text) => DropError::Permanent(format!(
            "{text} (the function's role needs s3:GetObject on the answer buckets' answers/, which the regional template grants)"
        )),
        other => DropError::Transient(other.into_text()),
    }
}

#[async_trait]
impl AnswerDrop for S3AnswerDrop {
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
            .map_err(|error| drop_error(classify(&error)))?;
        Ok(UploadUrl::new(presigned.uri().to_owned()))
    }

    async fn read(&self, key: &str, limit: usize) -> Result<Option<Vec<u8>>, DropError> {
        let read = async {
            let object = match self.client.get_object().bucket(&self.bucket).key(key).send().await {
                Ok(object) => object,
                Err(error) if error.as_service_error().is_some_and(GetObjectError::is_no_such_key) => return Ok(None),
                Err(error) => return Err(drop_error(classify(&error))),
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
        match tokio::time::timeout(self.timeout, read).await {
            Ok(read) => read,
            Err(_) => Err(DropError::Transient(format!(
                "the answer bucket had no answer within {} ms",
                self.timeout.as_millis()
            ))),
        }
    }
}
