//! Wait condition handles on local AWS, for the tests of work past CloudFormation's hour
//! (`cfn_once_core::wait_condition`): a handle to name in a request's properties, the signals
//! PUT to it, and the work's lease record, read as an application would read it.
//!
//! In AWS, the `Ref` of an `AWS::CloudFormation::WaitConditionHandle` is a presigned S3 URL that
//! the stack's WaitCondition reads its signals from. Here it is presigned into the environment's
//! response bucket under `wait-handles/`, which the handler's allow-list
//! (`CFN_ONCE_RESPONSE_URL_ALLOW`) admits as it admits the ResponseURLs; the bucket is
//! versioned, so every PUT to the handle stays readable, as every PUT of an answer does.
//!
//! A handle can also be presigned as CloudFormation's are, valid 86,399 s, as if made a given
//! time ago: a stack a day old, whose handle expires seconds from now or has expired, without a
//! day's wait. The local S3 refuses an expired one with 403, as S3 does (`moto_server.py`).

use std::collections::HashMap;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use aws_sdk_dynamodb::types::AttributeValue;
use aws_sdk_s3::primitives::DateTime;
use cfn_once_core::request::{InputPolicy, RequestKey, decode};
use cfn_once_core::response_url::{AllowedPrefix, UrlPolicy};
use cfn_once_core::wait_condition::{HANDLE_PROPERTY, Signal, TIMEOUT_PROPERTY};
use cfn_once_local::provision;
use serde_json::Value;

use crate::{Sent, unique};

/// How long a handle's presigned URL is valid: as long as the ResponseURLs the tests make, far
/// past any test's wait condition timeout, so the work's deadline is always the timeout.
const HANDLE_EXPIRES_S: u64 = 7_200;

/// How long CloudFormation's WaitConditionHandle URLs are valid (`X-Amz-Expires=86399`).
pub const CLOUDFORMATION_HANDLE_EXPIRES_S: u64 = 86_399;

/// A wait condition handle: a presigned PUT URL into the environment's response bucket.
#[derive(Debug, Clone)]
pub struct WaitHandle {
    /// The presigned URL, a secret like a ResponseURL: what `CfnOnceWaitHandle` names.
    pub url: String,
    pub bucket: String,
    /// The object key the signals are PUT to.
    pub key: String,
    /// When the presigned URL expires, as its query states it (`X-Amz-Date`, to the second, plus
    /// `X-Amz-Expires`): S3 refuses it from then on.
    pub expires_at: SystemTime,
    /// The start of every URL the environment presigns (endpoint and bucket): what the handler's
    /// allow-list admits, and what decoding a request here must admit.
    allowed_prefix: String,
    /// Reads the signals back (moto's plain endpoint).
    reader: aws_sdk_s3::Client,
}

/// One PUT to a handle (a version of its object), as S3 keeps it.
#[derive(Debug, Clone)]
pub struct Put {
    pub body: Vec<u8>,
    /// When S3 stored it (moto: to the second).
    pub last_modified: Option<DateTime>,
}

impl WaitHandle {
    /// A handle named after `logical_id` (the WaitConditionHandle's), presigned by `presigner`
    /// into `bucket`, its PUTs read back with `reader`.
    pub async fn presign(
        presigner: &aws_sdk_s3::Client,
        reader: &aws_sdk_s3::Client,
        bucket: &str,
        logical_id: &str,
    ) -> Self {
        Self::presign_at(presigner, reader, bucket, logical_id, SystemTime::now(), HANDLE_EXPIRES_S).await
    }

    /// Like [`WaitHandle::presign`], but as CloudFormation presigns a handle (valid 86,399 s)
    /// `signed_ago` before now: it expires 86,399 s less `signed_ago` from now (or expired that
    /// long ago). A handle `86_399 - 40` s old is a day-old stack's, expiring in 40 s.
    pub async fn presign_signed_ago(
        presigner: &aws_sdk_s3::Client,
        reader: &aws_sdk_s3::Client,
        bucket: &str,
        logical_id: &str,
        signed_ago: Duration,
    ) -> Self {
        let signed_at = SystemTime::now().checked_sub(signed_ago).expect("a time after the epoch");
        Self::presign_at(presigner, reader, bucket, logical_id, signed_at, CLOUDFORMATION_HANDLE_EXPIRES_S).await
    }

    async fn presign_at(
        presigner: &aws_sdk_s3::Client,
        reader: &aws_sdk_s3::Client,
        bucket: &str,
        logical_id: &str,
        signed_at: SystemTime,
        expires_s: u64,
    ) -> Self {
        let key = format!("wait-handles/{}", unique(logical_id));
        let url = provision::presigned_put_url_signed_at(presigner, bucket, &key, signed_at, expires_s)
            .await
            .expect("presign");
        let path = format!("/{bucket}/");
        let end = url.find(&path).expect("a path-style URL into the bucket") + path.len();
        let allowed_prefix = url[..end].to_owned();
        let expires_at = expiry_of(&url);
        Self { url, bucket: bucket.to_owned(), key, expires_at, allowed_prefix, reader: reader.clone() }
    }

    /// How long until the presigned URL expires (zero if it has).
    pub fn expires_in(&self) -> Duration {
        self.expires_at.duration_since(SystemTime::now()).unwrap_or_default()
    }

    /// Sleeps until the handle has expired, and a little more: S3 refuses it from then on.
    pub async fn expire(&self) {
        tokio::time::sleep(self.expires_in() + Duration::from_millis(1_500)).await;
    }

    /// Names this handle in `properties` (a request's `ResourceProperties`, or its
    /// `OldResourceProperties`), with the WaitCondition's `Timeout` of `timeout_s`, both as
    /// strings as CloudFormation sends every scalar.
    pub fn declare(&self, properties: &mut Value, timeout_s: u64) {
        properties[HANDLE_PROPERTY] = Value::String(self.url.clone());
        properties[TIMEOUT_PROPERTY] = Value::String(timeout_s.to_string());
    }

    /// Every PUT to the handle so far, oldest first.
    pub async fn puts(&self) -> Vec<Put> {
        puts(&self.reader, &self.bucket, &self.key).await
    }

    /// Every signal PUT to the handle so far, oldest first, each as its bytes and parsed (a PUT
    /// that is not a wait condition signal fails the test).
    pub async fn signals(&self) -> Vec<(Vec<u8>, Signal)> {
        self.puts()
            .await
            .into_iter()
            .map(|put| {
                let signal = Signal::parse(&put.body).unwrap_or_else(|| {
                    panic!("a PUT to the handle is not a signal: {}", String::from_utf8_lossy(&put.body))
                });
                (put.body, signal)
            })
            .collect()
    }

    /// Waits for the first signal; returns it and how long after `since` it was seen.
    pub async fn wait_for_signal(&self, since: Instant, timeout: Duration) -> ((Vec<u8>, Signal), Duration) {
        loop {
            if let Some(first) = self.signals().await.into_iter().next() {
                return (first, since.elapsed());
            }
            assert!(since.elapsed() < timeout, "no signal within {timeout:?}");
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }

    /// The key of the work `sent` hands past its answer on this handle: `sent` decoded as the
    /// handler decodes it, and `cfn_once_core::work::work_key` of that.
    pub fn work_key(&self, sent: &Sent) -> RequestKey {
        let urls = UrlPolicy::new(vec![AllowedPrefix::parse(&self.allowed_prefix).expect("an allow-list entry")]);
        let policy =
            InputPolicy { topic_arns: Vec::new(), raw_delivery: true, urls, privileged_topic_arns: Vec::new() };
        let request = decode(Some(&sent.request.to_string()), &policy).expect("the request decodes");
        let spec = request.wait.spec().unwrap_or_else(|| panic!("the request declares no valid wait condition"));
        assert_eq!(spec.handle.expose_secret(), self.url, "the request names another handle");
        cfn_once_core::work::work_key(&request, spec)
    }
}

/// When a presigned URL expires, as its query states it: `X-Amz-Date` (the signing time, to the
/// second) plus `X-Amz-Expires` seconds.
fn expiry_of(url: &str) -> SystemTime {
    let (_, query) = url.split_once('?').expect("a presigned query");
    let parameter = |name: &str| {
        query
            .split('&')
            .find_map(|pair| pair.strip_prefix(name)?.strip_prefix('='))
            .unwrap_or_else(|| panic!("the presigned URL has no {name}"))
    };
    // `20270115T080000Z`, written as `2027-01-15T08:00:00Z` for `timestamp::parse_ms`.
    let date = parameter("X-Amz-Date");
    let part = |range: std::ops::Range<usize>| date.get(range).expect("an X-Amz-Date");
    let iso =
        format!("{}-{}-{}T{}:{}:{}Z", part(0..4), part(4..6), part(6..8), part(9..11), part(11..13), part(13..15));
    let signed_ms = cfn_once_core::timestamp::parse_ms(&iso).expect("an X-Amz-Date");
    let expires_s: u64 = parameter("X-Amz-Expires").parse().expect("X-Amz-Expires in seconds");
    UNIX_EPOCH + Duration::from_millis(signed_ms) + Duration::from_secs(expires_s)
}

/// Every PUT to `key` in `bucket` so far (its versions), oldest first, with when S3 stored each.
pub async fn puts(s3: &aws_sdk_s3::Client, bucket: &str, key: &str) -> Vec<Put> {
    let listing =
        s3.list_object_versions().bucket(bucket).prefix(key).send().await.expect("list the object's versions");
    let mut versions: Vec<_> =
        listing.versions.unwrap_or_default().into_iter().filter(|version| version.key() == Some(key)).collect();
    versions.sort_by_key(|version| version.last_modified);
    let mut puts = Vec::with_capacity(versions.len());
    for version in versions {
        let object = s3
            .get_object()
            .bucket(bucket)
            .key(key)
            .set_version_id(version.version_id.clone())
            .send()
            .await
            .expect("get a version of the object");
        let body = object.body.collect().await.expect("the version's body").into_bytes().to_vec();
        puts.push(Put { body, last_modified: version.last_modified });
    }
    puts
}

/// A lease record (a request's or a work's) as a plain, consistent GetItem finds it: what an
/// application reading the lease table sees, without cfn-once's own adapter.
#[derive(Clone, PartialEq)]
pub struct PlainRecord {
    pub fence: u64,
    /// `region/invocation/nonce` of the execution that last wrote it.
    pub owner: String,
    /// RUNNING, WAITING, COMMITTED or LEFT.
    pub state: String,
    /// The committed answer's bytes (a work's: its signal).
    pub response: Option<Vec<u8>>,
    pub delivered: bool,
    pub created_ms: u64,
    pub updated_ms: u64,
    /// Polls of the provider's work so far, while it is in progress.
    pub polls: Option<u64>,
    /// Create, Update or Delete: the request that wrote it (a work's: the one that started it).
    pub request_type: String,
    /// Why a work's signal, marked delivered, was never sent (its handle had expired, or refused
    /// it): `LeaseRecord::unsent`.
    pub unsent: Option<String>,
}

impl std::fmt::Debug for PlainRecord {
    /// The committed bytes as text (an answer and a signal are JSON), not a list of numbers.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PlainRecord")
            .field("fence", &self.fence)
            .field("owner", &self.owner)
            .field("state", &self.state)
            .field("response", &self.response.as_deref().map(String::from_utf8_lossy))
            .field("delivered", &self.delivered)
            .field("created_ms", &self.created_ms)
            .field("updated_ms", &self.updated_ms)
            .field("polls", &self.polls)
            .field("request_type", &self.request_type)
            .field("unsent", &self.unsent)
            .finish()
    }
}

impl PlainRecord {
    /// The region of the execution that last wrote it.
    pub fn region(&self) -> &str {
        self.owner.split('/').next().unwrap_or_default()
    }
}

/// The lease record at `key` in `table`, read with one plain, consistent GetItem.
pub async fn plain_record(dynamodb: &aws_sdk_dynamodb::Client, table: &str, key: &RequestKey) -> Option<PlainRecord> {
    Some(parse(&lease_item(dynamodb, table, key).await?))
}

/// The item at `key` in the lease table `table`, exactly as stored (one consistent GetItem).
pub async fn lease_item(
    dynamodb: &aws_sdk_dynamodb::Client,
    table: &str,
    key: &RequestKey,
) -> Option<HashMap<String, AttributeValue>> {
    dynamodb
        .get_item()
        .table_name(table)
        .key("pk", AttributeValue::S(key.stack_id.to_string()))
        .key("sk", AttributeValue::S(key.request_id.clone()))
        .consistent_read(true)
        .send()
        .await
        .expect("get the lease record")
        .item
}

fn parse(item: &HashMap<String, AttributeValue>) -> PlainRecord {
    let text = |name: &str| item.get(name).and_then(|value| value.as_s().ok()).cloned().unwrap_or_default();
    let number = |name: &str| item.get(name).and_then(|value| value.as_n().ok()).and_then(|n| n.parse::<u64>().ok());
    PlainRecord {
        fence: number("fence").unwrap_or(0),
        owner: text("owner"),
        state: text("state"),
        response: item.get("response").and_then(|value| value.as_b().ok()).map(|blob| blob.as_ref().to_vec()),
        delivered: item.get("delivered").and_then(|value| value.as_bool().ok()).copied().unwrap_or(false),
        created_ms: number("created_ms").unwrap_or(0),
        updated_ms: number("updated_ms").unwrap_or(0),
        polls: number("polls"),
        request_type: text("request_type"),
        unsent: item.get("unsent").and_then(|value| value.as_s().ok()).cloned(),
    }
}
