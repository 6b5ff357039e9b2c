//! cfn-once's answer bucket (`CFN_ONCE_ANSWER_BUCKET`) on S3: presigned PUT URLs for functions
//! that answer by themselves, and reads of what they PUT.
//!
//! Both are SigV4 query-string signatures (`aws-sigv4`, the signer the SDK itself uses) on the
//! function's own credentials, sent on the process's one TLS configuration (`https`): the stock
//! function carries no S3 SDK, which would cost more of its 3 MB zip than the rest of this
//! feature. A URL is `https://<bucket>.s3.<region>.amazonaws.com/<key>`, or path style under the
//! configured endpoint (`AWS_ENDPOINT_URL`, moto locally). moto does not check signatures, so
//! locally a wrong signature would pass: `presigned_urls_match_the_aws_documentation_example`
//! checks the signer against AWS's published example instead.

use std::time::{Duration, SystemTime};

use async_trait::async_trait;
use aws_credential_types::provider::{ProvideCredentials, SharedCredentialsProvider};
use aws_sigv4::http_request::{
    PayloadChecksumKind, PercentEncodingMode, SignableBody, SignableRequest, SignatureLocation, SigningSettings,
    UriPathNormalizationMode, sign,
};
use aws_smithy_runtime_api::client::identity::Identity;
use bytes::Bytes;
use http::StatusCode;
use http_body_util::{BodyExt, Full, Limited};
use hyper_rustls::HttpsConnector;
use hyper_util::client::legacy::Client;
use hyper_util::client::legacy::connect::HttpConnector;

use crate::adapters::https::chain;
use crate::providers::answers_itself::{AnswerDrop, DropError, UploadUrl};

/// How long cfn-once's own read URL is valid: one read.
const READ_URL_VALID_FOR: Duration = Duration::from_secs(60);

/// The answer bucket of this region.
#[derive(Debug, Clone)]
pub struct S3AnswerDrop {
    region: String,
    /// Everything before the key: the bucket's virtual-hosted origin, or `<endpoint>/<bucket>`.
    base: String,
    credentials: Option<SharedCredentialsProvider>,
    client: Client<HttpsConnector<HttpConnector>, Full<Bytes>>,
    timeout: Duration,
}

impl S3AnswerDrop {
    /// The bucket `bucket` of `sdk`'s region on `sdk`'s credentials and endpoint; each read gives
    /// up after `timeout_ms`.
    pub fn new(sdk: &aws_config::SdkConfig, bucket: &str, timeout_ms: u64) -> anyhow::Result<Self> {
        let region = sdk.region().map(|region| region.to_string()).unwrap_or_default();
        let base = match sdk.endpoint_url() {
            Some(endpoint) => format!("{}/{bucket}", endpoint.trim_end_matches('/')),
            None => format!("https://{bucket}.s3.{region}.amazonaws.com"),
        };
        let tls = crate::adapters::https::client_config().map_err(anyhow::Error::msg)?;
        let timeout = Duration::from_millis(timeout_ms);
        let client = crate::adapters::https::hyper_client(&tls, Some(timeout));
        Ok(Self { region, base, credentials: sdk.credentials_provider(), client, timeout })
    }

    async fn presigned(&self, method: &str, key: &str, valid_for: Duration) -> Result<String, DropError> {
        let Some(provider) = &self.credentials else {
            return Err(DropError::Permanent("the function has no AWS credentials to sign with".into()));
        };
        let credentials = provider
            .provide_credentials()
            .await
            .map_err(|error| DropError::Transient(format!("the function's credentials are not available: {error}")))?;
        presign(
            method,
            &format!("{}/{key}", self.base),
            &self.region,
            &credentials.into(),
            SystemTime::now(),
            valid_for,
        )
        .map_err(DropError::Permanent)
    }

    async fn get(&self, url: String, limit: usize) -> Result<Option<Vec<u8>>, DropError> {
        let request = http::Request::get(url)
            .body(Full::new(Bytes::new()))
            .map_err(|error| DropError::Permanent(format!("the read could not be built: {error}")))?;
        let response =
            self.client.request(request).await.map_err(|error| {
                DropError::Transient(format!("the answer bucket could not be read: {}", chain(&error)))
            })?;
        let status = response.status();
        let body = Limited::new(response.into_body(), limit + 1).collect().await;
        match status {
            StatusCode::OK => match body {
                Ok(body) => Ok(Some(body.to_bytes().to_vec())),
                // Past the limit: answer with as much as shows it is too long.
                Err(_) => Ok(Some(vec![b' '; limit + 1])),
            },
            StatusCode::NOT_FOUND => Ok(None),
            status if status.is_server_error() || status == StatusCode::TOO_MANY_REQUESTS => {
                Err(DropError::Transient(format!("the answer bucket answered {status}")))
            }
            status => Err(DropError::Permanent(format!(
                "the answer bucket answered {status} (the function's role needs s3:GetObject on its answers/ and s3:ListBucket, which the regional template grants)"
            ))),
        }
    }
}

#[async_trait]
impl AnswerDrop for S3AnswerDrop {
    async fn upload_url(&self, key: &str, valid_for: Duration) -> Result<UploadUrl, DropError> {
        self.presigned("PUT", key, valid_for).await.map(UploadUrl::new)
    }

    async fn read(&self, key: &str, limit: usize) -> Result<Option<Vec<u8>>, DropError> {
        let url = self.presigned("GET", key, READ_URL_VALID_FOR).await?;
        match tokio::time::timeout(self.timeout, self.get(url, limit)).await {
            Ok(read) => read,
            Err(_) => Err(DropError::Transient(format!(
                "the answer bucket had no answer within {} ms",
                self.timeout.as_millis()
            ))),
        }
    }
}

/// `url` (already percent-encoded) presigned for `method` as S3 takes it: the signature in the
/// query string, the payload unsigned, the path neither normalized nor encoded twice.
fn presign(
    method: &str,
    url: &str,
    region: &str,
    identity: &Identity,
    time: SystemTime,
    valid_for: Duration,
) -> Result<String, String> {
    let mut settings = SigningSettings::default();
    settings.signature_location = SignatureLocation::QueryParams;
    settings.expires_in = Some(valid_for);
    settings.percent_encoding_mode = PercentEncodingMode::Single;
    settings.uri_path_normalization_mode = UriPathNormalizationMode::Disabled;
    settings.payload_checksum_kind = PayloadChecksumKind::NoHeader;
    let params = aws_sigv4::sign::v4::SigningParams::builder()
        .identity(identity)
        .region(region)
        .name("s3")
        .time(time)
        .settings(settings)
        .build()
        .map_err(|error| format!("the signing parameters are incomplete: {error}"))?
        .into();
    // The errors below come from the URL's shape, which cfn-once builds; none quotes the URL.
    let signable = SignableRequest::new(method, url, std::iter::empty(), SignableBody::UnsignedPayload)
        .map_err(|error| format!("the answer's URL cannot be signed: {error}"))?;
    let (instructions, _signature) =
        sign(signable, &params).map_err(|error| format!("the answer's URL cannot be signed: {error}"))?.into_parts();
    let mut request = http::Request::builder()
        .method(method)
        .uri(url)
        .body(())
        .map_err(|error| format!("the answer's URL is not a URL: {error}"))?;
    instructions.apply_to_request_http1x(&mut request);
    Ok(request.uri().to_string())
}

#[cfg(test)]
mod tests {
    use aws_credential_types::Credentials;

    use super::*;

    /// AWS's published example of a presigned URL ("Authenticating Requests: Using Query
    /// Parameters (AWS Signature Version 4)", Amazon S3 API Reference): GET of
    /// `examplebucket.s3.amazonaws.com/test.txt` on 24 May 2013, valid for a day.
    #[test]
    fn presigned_urls_match_the_aws_documentation_example() {
        let identity: Identity =
            Credentials::new("AKIAIOSFODNN7EXAMPLE", "wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY", None, None, "example")
                .into();
        let time = SystemTime::UNIX_EPOCH + Duration::from_secs(1_369_353_600);
        let url = presign(
            "GET",
            "https://examplebucket.s3.amazonaws.com/test.txt",
            "us-east-1",
            &identity,
            time,
            Duration::from_secs(86_400),
        )
        .expect("signed");
        assert!(url.starts_with("https://examplebucket.s3.amazonaws.com/test.txt?"), "{url}");
        for part in [
            "X-Amz-Algorithm=AWS4-HMAC-SHA256",
            "X-Amz-Credential=AKIAIOSFODNN7EXAMPLE%2F20130524%2Fus-east-1%2Fs3%2Faws4_request",
            "X-Amz-Date=20130524T000000Z",
            "X-Amz-Expires=86400",
            "X-Amz-SignedHeaders=host",
            "X-Amz-Signature=aeeed9bbccd4d02ee5c0109b86d86835f995330da4c265957d157751f604d404",
        ] {
            assert!(url.contains(part), "{part} in the presigned URL");
        }
    }

    #[test]
    fn a_session_token_is_part_of_the_signed_url() {
        let identity: Identity = Credentials::new("AKID", "secret", Some("token/with+chars".into()), None, "t").into();
        let url = presign(
            "PUT",
            "http://127.0.0.1:5000/answers-bucket/answers/00ff",
            "us-west-2",
            &identity,
            SystemTime::now(),
            Duration::from_secs(3_600),
        )
        .expect("signed");
        assert!(url.starts_with("http://127.0.0.1:5000/answers-bucket/answers/00ff?"), "{url}");
        assert!(url.contains("X-Amz-Security-Token=token%2Fwith%2Bchars"), "{url}");
        assert!(url.contains("X-Amz-Expires=3600"));
    }
}
