//! `Custom::BucketPolicy`: the retention policy of one S3 bucket, kept as an item in a DynamoDB
//! table that a platform's lifecycle job reads.
//!
//! An example of a cfn-once provider in its own crate: typed properties (CloudFormation sends
//! every scalar as a string; cfn-once coerces `"30"` and `"true"`), validation that fails with a
//! readable Reason, a PhysicalResourceId derived from what identifies the resource, a Delete that
//! succeeds for ids it never returned (the rollback of a failed Create), and fenced writes, so an
//! execution that lost its lease cannot overwrite the one that took over. Storage sits behind
//! [`PolicyStore`], so the tests run the provider with `cfn_once::testing` and no AWS.

use std::collections::HashMap;

use aws_sdk_dynamodb::types::AttributeValue;
use cfn_once::{Fence, FencedTable, Provider, ProviderContext, ProviderError, ProviderOutput, Step, async_trait};
use serde::Deserialize;
use serde_json::{Value, json};

/// The ResourceType this provider serves.
pub const RESOURCE_TYPE: &str = "Custom::BucketPolicy";

const ID_PREFIX: &str = "bucket-policy:";

/// The resource's properties.
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(rename_all = "PascalCase", deny_unknown_fields)]
pub struct Properties {
    /// The bucket the policy is for.
    pub bucket_name: String,
    /// Objects older than this are expired, 1 to 3650.
    pub max_age_days: u32,
    /// Expire even objects with a legal hold.
    #[serde(default)]
    pub strict: bool,
    /// Who is told before objects expire.
    #[serde(default)]
    pub notify: Vec<String>,
}

/// Where policies are kept: one item per bucket, every write fenced.
#[async_trait]
pub trait PolicyStore: Send + Sync + 'static {
    /// Writes `bucket`'s policy under `fence`.
    async fn put(&self, fence: &Fence, bucket: &str, policy: Value) -> Result<(), ProviderError>;
    /// Deletes `bucket`'s policy under `fence`; deleting a missing one succeeds.
    async fn delete(&self, fence: &Fence, bucket: &str) -> Result<(), ProviderError>;
}

/// The provider.
#[derive(Debug)]
pub struct BucketPolicy<S> {
    store: S,
}

impl<S: PolicyStore> BucketPolicy<S> {
    /// The provider on `store`.
    pub fn new(store: S) -> Self {
        Self { store }
    }

    async fn put(&self, ctx: &ProviderContext, properties: Properties) -> Result<ProviderOutput, ProviderError> {
        validate(&properties)?;
        let policy = json!({
            "MaxAgeDays": properties.max_age_days,
            "Strict": properties.strict,
            "Notify": properties.notify,
        });
        self.store.put(&ctx.fence, &properties.bucket_name, policy).await?;
        Ok(ProviderOutput {
            physical_resource_id: Some(format!("{ID_PREFIX}{}", properties.bucket_name)),
            data: [("MaxAgeDays".to_owned(), json!(properties.max_age_days.to_string()))].into(),
            no_echo: false,
        })
    }
}

impl BucketPolicy<DynamoPolicyStore> {
    /// The provider on the DynamoDB table `table`, with `sdk`'s region and credentials.
    pub fn on_dynamodb(sdk: &aws_config::SdkConfig, table: String) -> Self {
        Self::new(DynamoPolicyStore { table: FencedTable::new(aws_sdk_dynamodb::Client::new(sdk), table) })
    }
}

#[async_trait]
impl<S: PolicyStore> Provider for BucketPolicy<S> {
    type Properties = Properties;

    async fn create(&self, ctx: &ProviderContext, properties: Properties) -> Result<Step, ProviderError> {
        self.put(ctx, properties).await.map(Step::Done)
    }

    async fn update(
        &self,
        ctx: &ProviderContext,
        _physical_resource_id: &str,
        properties: Properties,
        _old_properties: Option<Properties>,
    ) -> Result<Step, ProviderError> {
        // Another bucket gives another id: CloudFormation then deletes the old policy itself.
        self.put(ctx, properties).await.map(Step::Done)
    }

    async fn delete(
        &self,
        ctx: &ProviderContext,
        physical_resource_id: &str,
        properties: Properties,
    ) -> Result<Step<()>, ProviderError> {
        // Our id names the bucket; any other id is the rollback of a Create that failed after
        // it may have written, and the properties name the bucket then.
        let bucket = physical_resource_id.strip_prefix(ID_PREFIX).unwrap_or(&properties.bucket_name);
        self.store.delete(&ctx.fence, bucket).await.map(Step::Done)
    }
}

/// Refuses properties no lifecycle job could apply, with a Reason that says what to change.
pub fn validate(properties: &Properties) -> Result<(), ProviderError> {
    let name = &properties.bucket_name;
    let name_ok = (3..=63).contains(&name.len())
        && name.bytes().all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-' || b == b'.')
        && !name.starts_with(['-', '.'])
        && !name.ends_with(['-', '.']);
    if !name_ok {
        return Err(ProviderError::Failed(format!("BucketName {name:?} is not an S3 bucket name")));
    }
    if !(1..=3650).contains(&properties.max_age_days) {
        return Err(ProviderError::Failed(format!(
            "MaxAgeDays is {}: it must be from 1 to 3650",
            properties.max_age_days
        )));
    }
    if let Some(bad) = properties.notify.iter().find(|address| !address.contains('@')) {
        return Err(ProviderError::Failed(format!("Notify entry {bad:?} is not an email address")));
    }
    Ok(())
}

/// Policies in a DynamoDB table keyed by `bucket` (a string), written with fenced writes.
#[derive(Debug)]
pub struct DynamoPolicyStore {
    table: FencedTable,
}

#[async_trait]
impl PolicyStore for DynamoPolicyStore {
    async fn put(&self, fence: &Fence, bucket: &str, policy: Value) -> Result<(), ProviderError> {
        let mut item = HashMap::from([("bucket".to_owned(), AttributeValue::S(bucket.to_owned()))]);
        item.insert("policy".to_owned(), AttributeValue::S(policy.to_string()));
        Ok(self.table.put_item(fence, item).await?)
    }

    async fn delete(&self, fence: &Fence, bucket: &str) -> Result<(), ProviderError> {
        let key = HashMap::from([("bucket".to_owned(), AttributeValue::S(bucket.to_owned()))]);
        Ok(self.table.delete_item(fence, key).await?)
    }
}
