//! The player's requests on the real wire: published to the local environment's ServiceToken
//! topic as CloudFormation publishes them (a presigned S3 ResponseURL over HTTPS, valid two
//! hours or the ServiceTimeout and ten minutes, whichever is longer), answered by the
//! handlers `cfn-once local` runs, read back from the response bucket, and matched to the lease
//! record to say which region answered under which fence. Wait condition handles are presigned
//! URLs into the same bucket, valid 86,399 s as CloudFormation's are; their signals are the
//! versions of that object. Never logs or prints a ResponseURL or a handle.

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use anyhow::Context;
use async_trait::async_trait;
use serde_json::{Value, json};

use crate::cloud::{Answer, Answerer, CfnRequest, Cloud, Outcome, Signal, StackIdentity, parse_signal};
use crate::faults::RegionFaults;
use cfn_once::adapters::control_table::TableControl;
use cfn_once::adapters::dynamodb_lease::DynamoLeaseStore;
use cfn_once::aws::Failure;
use cfn_once::system_clock::{SystemClock, random_seed};
use cfn_once_core::clock::Clock;
use cfn_once_core::lease::LeaseStore;
use cfn_once_core::request::{RequestKey, StackArn};
use cfn_once_core::response::{ResponseBody, Status};
use cfn_once_local::environment::{EnvFile, https_sdk_config, s3_client};
use cfn_once_local::provision;

/// How long a ResponseURL stays valid at least: CloudFormation's are good for two hours.
const RESPONSE_URL_EXPIRES_S: u64 = 7_200;
/// A wait condition handle's life, as CloudFormation signs it.
const HANDLE_EXPIRES_S: u64 = 86_399;

/// The local environment of `cfn-once local`, as the player's [`Cloud`].
pub struct LocalCloud {
    file: EnvFile,
    /// Plain-HTTP S3 on moto: reading answers and signals.
    s3: aws_sdk_s3::Client,
    /// S3 over the environment's HTTPS front: the URLs handed out, as AWS makes them.
    presigner: aws_sdk_s3::Client,
    store: DynamoLeaseStore,
    /// Each customer region's SNS client, made once: every request of a play is published.
    sns: BTreeMap<String, aws_sdk_sns::Client>,
}

impl std::fmt::Debug for LocalCloud {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("LocalCloud").field("table", &self.file.table_name).finish_non_exhaustive()
    }
}

impl LocalCloud {
    /// Clients for the environment `file` describes.
    pub async fn connect(file: &EnvFile) -> anyhow::Result<Self> {
        Self::connect_publishing_at(file, &file.endpoint_url).await
    }

    /// As [`LocalCloud::connect`], with the ServiceToken topics reached at `sns_endpoint` (a
    /// fault proxy before moto, in the tests).
    pub async fn connect_publishing_at(file: &EnvFile, sns_endpoint: &str) -> anyhow::Result<Self> {
        let primary = provision::sdk_config(&file.endpoint_url, &file.primary_region).await;
        let https = https_sdk_config(&file.https_endpoint_url, &file.ca_file, &file.primary_region)
            .await
            .context("the environment's HTTPS front (is `cfn-once local` still running?)")?;
        let mut sns = BTreeMap::new();
        for region in file.customer_topics.keys().chain(std::iter::once(&file.customer_region)) {
            let client = aws_sdk_sns::Client::new(&provision::sdk_config(sns_endpoint, region).await);
            sns.insert(region.clone(), client);
        }
        Ok(Self {
            sns,
            file: file.clone(),
            s3: s3_client(&primary),
            presigner: s3_client(&https),
            store: DynamoLeaseStore::new(aws_sdk_dynamodb::Client::new(&primary), &file.table_name),
        })
    }

    /// The region of a ServiceToken topic of this environment, or why it is not one.
    fn topic_region(&self, topic: &str) -> anyhow::Result<&str> {
        let topics = self.file.topic_arns();
        if let Some((region, _)) = self.file.customer_topics.iter().find(|(_, arn)| *arn == topic) {
            return Ok(region);
        }
        if topic == self.file.topic_arn {
            return Ok(&self.file.customer_region);
        }
        anyhow::bail!(
            "ServiceToken {topic:?} is not a topic of the local environment (its topics: {})",
            topics.join(", ")
        )
    }

    async fn answerer(&self, stack_id: &str, request_id: &str) -> Option<Answerer> {
        let key = RequestKey { stack_id: StackArn::parse(stack_id)?, request_id: request_id.to_owned() };
        let record = self.store.read(&key).await.ok()??;
        let region = record.owner.split('/').next().unwrap_or_default().to_owned();
        Some(Answerer { region, fence: record.fence })
    }
}

#[async_trait]
impl Cloud for LocalCloud {
    async fn send(
        &self,
        stack: &StackIdentity,
        request: &CfnRequest,
        progress: &(dyn Fn(String) + Send + Sync),
    ) -> anyhow::Result<Outcome> {
        let region = self.topic_region(&request.service_token)?.to_owned();
        let request_id = uuid_like(random_seed(), random_seed());
        let key = format!("{}/{request_id}", stack_prefix(stack));
        let expires_s = RESPONSE_URL_EXPIRES_S.max(request.service_timeout_s + 600);
        let url = provision::presigned_put_url(&self.presigner, &self.file.response_bucket, &key, expires_s).await?;
        let mut body = json!({
            "RequestType": request.request_type.as_str(),
            "ServiceToken": request.service_token,
            "ResponseURL": url,
            "StackId": stack.id,
            "RequestId": request_id,
            "LogicalResourceId": request.logical_resource_id,
            "ResourceType": request.resource_type,
            "ResourceProperties": request.resource_properties,
        });
        if let Some(physical_id) = &request.physical_resource_id {
            body["PhysicalResourceId"] = Value::String(physical_id.clone());
        }
        if let Some(old) = &request.old_resource_properties {
            body["OldResourceProperties"] = old.clone();
        }
        let sns = self.sns.get(&region).ok_or_else(|| anyhow::anyhow!("no SNS client for {region}"))?;
        let started = Instant::now();
        let published = sns.publish().topic_arn(&request.service_token).message(body.to_string()).send().await;
        if let Err(error) = published {
            // A publish whose reply was lost may have been delivered: its copy is answered to
            // this ResponseURL, so the answer is looked for as usual (an identical copy sent
            // again would be a duplicate cfn-once answers once). Only a publish that certainly
            // sent nothing fails the request here.
            match cfn_once::aws::classify(&error) {
                Failure::Unknown(why) => {
                    progress(format!("the publish's outcome is unknown ({why}); waiting for an answer all the same"))
                }
                Failure::NotApplied(why) | Failure::Deferred(why) | Failure::Permanent(why) => {
                    anyhow::bail!("publishing the request to the ServiceToken topic: {why}")
                }
            }
        }
        let timeout = Duration::from_secs(request.service_timeout_s);
        let answer = provision::wait_for_response(&self.s3, &self.file.response_bucket, &key, timeout, |waited_s| {
            if waited_s % 15 == 0 {
                progress(format!(
                    "waiting for the answer to its {}: {waited_s} s of ServiceTimeout {} s",
                    request.request_type.as_str(),
                    request.service_timeout_s
                ));
            }
        })
        .await?;
        let Some(answer) = answer else { return Ok(Outcome::TimedOut) };
        let elapsed_ms = started.elapsed().as_millis() as u64;
        let parsed = ResponseBody::parse(&answer).context("the answer is not a CloudFormation response")?;
        let puts = provision::response_puts(&self.s3, &self.file.response_bucket, &key).await?;
        Ok(Outcome::Answered(Answer {
            success: parsed.status == Status::Success,
            reason: parsed.reason.clone(),
            physical_resource_id: Some(parsed.physical_resource_id.clone()).filter(|id| !id.is_empty()),
            data: parsed.data.clone().into_iter().collect(),
            no_echo: parsed.no_echo,
            answered_by: self.answerer(&stack.id, &request_id).await,
            puts,
            elapsed_ms,
        }))
    }

    async fn create_handle(&self, stack: &StackIdentity, logical_id: &str) -> anyhow::Result<String> {
        let key = format!("{}/handles/{logical_id}", stack_prefix(stack));
        provision::presigned_put_url(&self.presigner, &self.file.response_bucket, &key, HANDLE_EXPIRES_S).await
    }

    async fn signals(&self, handle: &str) -> anyhow::Result<Vec<Signal>> {
        let key = handle_key(handle, &self.file.response_bucket)
            .ok_or_else(|| anyhow::anyhow!("the handle is not one cfn-once play made in this environment"))?;
        let bodies = provision::response_versions(&self.s3, &self.file.response_bucket, &key).await?;
        Ok(bodies.iter().filter_map(|body| parse_signal(body)).collect())
    }
}

/// The object key a handle URL of `bucket` PUTs to (path-style, as the environment signs).
fn handle_key(url: &str, bucket: &str) -> Option<String> {
    let path = url.split('?').next()?;
    let after = path.split_once(&format!("/{bucket}/"))?.1;
    after.starts_with("play/").then(|| after.to_owned())
}

/// Where a stack's answers and handles are kept in the response bucket: under its name and
/// its StackId's unique suffix, so a second stack of the same name (a new StackId, as
/// CloudFormation gives every new stack) never reads the first one's answers or signals.
fn stack_prefix(stack: &StackIdentity) -> String {
    let unique = stack.id.rsplit('/').next().unwrap_or_default();
    format!("play/{}/{unique}", stack.name)
}

/// A RequestId shaped as CloudFormation's (a UUID), from two random words.
pub fn uuid_like(high: u64, low: u64) -> String {
    let hex = format!("{high:016x}{low:016x}");
    format!("{}-{}-{}-{}-{}", &hex[..8], &hex[8..12], &hex[12..16], &hex[16..20], &hex[20..])
}

/// The primary of a running `cfn-once local`, drained through the lease table's control item
/// (as `cfn-once drill` flips it) or crashed through the signals `cfn-once local` takes.
pub struct LocalRegionFaults {
    file: EnvFile,
    control: TableControl,
    drained: AtomicBool,
    crashed: AtomicBool,
}

impl std::fmt::Debug for LocalRegionFaults {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("LocalRegionFaults")
            .field("drained", &self.drained)
            .field("crashed", &self.crashed)
            .finish_non_exhaustive()
    }
}

impl LocalRegionFaults {
    pub async fn connect(file: &EnvFile) -> Self {
        let sdk = provision::sdk_config(&file.endpoint_url, &file.primary_region).await;
        let control = TableControl::new(aws_sdk_dynamodb::Client::new(&sdk), &file.table_name, &file.primary_region);
        Self { file: file.clone(), control, drained: AtomicBool::new(false), crashed: AtomicBool::new(false) }
    }
}

#[async_trait]
impl RegionFaults for LocalRegionFaults {
    async fn drain_primary(&self) -> anyhow::Result<()> {
        let now = SystemClock.now_ms();
        self.control.set_active_region(&self.file.secondary_region, now, "cfn-once play --drill-after").await?;
        self.drained.store(true, Ordering::SeqCst);
        Ok(())
    }

    async fn crash_primary(&self) -> anyhow::Result<()> {
        cfn_once_local::signals::crash_primary(&self.file)?;
        self.crashed.store(true, Ordering::SeqCst);
        Ok(())
    }

    async fn restore(&self) -> anyhow::Result<()> {
        if self.crashed.swap(false, Ordering::SeqCst) {
            cfn_once_local::signals::restore_primary(&self.file)?;
        }
        if self.drained.swap(false, Ordering::SeqCst) {
            let now = SystemClock.now_ms();
            self.control.set_active_region(&self.file.primary_region, now, "cfn-once play, restoring").await?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_handle_names_its_key_and_nothing_else_does() {
        let url = "https://127.0.0.1:4443/env-responses/play/s1/handles/Wait?X-Amz-Expires=86399&X-Amz-Signature=ab";
        assert_eq!(handle_key(url, "env-responses").as_deref(), Some("play/s1/handles/Wait"));
        assert_eq!(handle_key("https://127.0.0.1:4443/other/play/x", "env-responses"), None);
        assert_eq!(handle_key("https://127.0.0.1:4443/env-responses/cfn-once-drill/x", "env-responses"), None);
    }

    #[test]
    fn two_stacks_of_one_name_keep_their_handles_and_answers_apart() {
        let stack = |id: &str| StackIdentity {
            name: "s1".into(),
            id: format!("arn:aws:cloudformation:us-east-2:123456789012:stack/s1/{id}"),
        };
        let (first, second) = (stack("0000-aaaa"), stack("1111-bbbb"));
        assert_ne!(stack_prefix(&first), stack_prefix(&second), "a new StackId, new keys");
        assert_eq!(stack_prefix(&first), "play/s1/0000-aaaa");
        let url =
            format!("https://127.0.0.1:4443/env-responses/{}/handles/Wait?X-Amz-Signature=ab", stack_prefix(&first));
        assert_eq!(handle_key(&url, "env-responses"), Some("play/s1/0000-aaaa/handles/Wait".into()));
    }

    #[test]
    fn request_ids_are_shaped_as_uuids() {
        let id = uuid_like(0x0123_4567_89ab_cdef, 0xfedc_ba98_7654_3210);
        assert_eq!(id, "01234567-89ab-cdef-fedc-ba9876543210");
    }
}
