//! `Custom::BucketPolicy`: the retention policy of one S3 bucket, kept as an item in a DynamoDB
//! table that a platform's lifecycle job reads.
//!
//! An example of a cfn-once provider in its own crate: typed properties (CloudFormation sends
//! every scalar as a string; cfn-once coerces `"30"` and `"true"`), validation that fails with a
//! readable Reason, a PhysicalResourceId derived from what identifies the resource, and writes
//! that are fenced (an execution that lost its lease cannot overwrite the one that took over)
//! and owned: the resource never overwrites a policy another resource (or something other than
//! cfn-once) wrote, unless told to adopt it, and its Delete, even a rollback's for an id it
//! never returned, removes only its own. Storage sits behind [`PolicyStore`], so the tests run
//! the provider with `cfn_once::testing` and no AWS.

use cfn_once::prelude::*;
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
    /// Take over a policy the bucket already has that is not this resource's.
    #[serde(default)]
    pub adopt: bool,
}

/// Where policies are kept: one item per bucket, every write fenced and owned.
#[async_trait]
pub trait PolicyStore: Send + Sync + 'static {
    /// Writes `bucket`'s policy under `rules`.
    async fn put(&self, rules: &WriteRules, bucket: &str, policy: Value) -> Result<Written, FencedWriteError>;
    /// Deletes `bucket`'s policy under `rules`: only if the resource owns it.
    async fn delete(&self, rules: &WriteRules, bucket: &str) -> Result<Deleted, FencedWriteError>;
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
}

impl BucketPolicy<DynamoPolicyStore> {
    /// The provider on the DynamoDB table `POLICY_TABLE` names (the regional template's
    /// `ProviderEnvironment`), `bucket-policies` by default.
    pub fn on_dynamodb(setup: &ProviderSetup<'_>) -> Self {
        let table = setup.var("POLICY_TABLE").unwrap_or("bucket-policies");
        Self::new(DynamoPolicyStore(FencedTable::new(setup.sdk(), table)))
    }
}

#[async_trait]
impl<S: PolicyStore> Provider for BucketPolicy<S> {
    type Properties = Properties;
    // Another bucket gives another id: CloudFormation then deletes the old policy itself.
    const UPDATE_THROUGH_CREATE: bool = true;

    async fn create(&self, ctx: &ProviderContext, properties: Properties) -> Result<Step, ProviderError> {
        validate(&properties)?;
        let bucket = &properties.bucket_name;
        let policy =
            json!({"MaxAgeDays": properties.max_age_days, "Strict": properties.strict, "Notify": properties.notify});
        let output = ProviderOutput::with_id(format!("{ID_PREFIX}{bucket}"))
            .data("MaxAgeDays", properties.max_age_days.to_string());
        match self.store.put(&ctx.owned().adopting(properties.adopt), bucket, policy).await {
            Ok(Written::Adopted { .. }) => Ok(output.data("Adopted", "true").into()),
            Ok(_) => Ok(output.into()),
            Err(FencedWriteError::OwnedByAnother { owner }) => Err(ProviderError::Failed(format!(
                "bucket {bucket} already has a retention policy, {}; set Adopt: \"true\" to take it over",
                owner.map_or("which cfn-once did not write".to_owned(), |owner| format!("owned by {owner}"))
            ))),
            Err(error) => Err(error.into()),
        }
    }

    async fn delete(&self, ctx: &ProviderContext, id: &str, properties: Properties) -> Result<Step<()>, ProviderError> {
        // Our id names the bucket; any other id is the rollback of a Create that failed, which may
        // have written, and the properties name the bucket then. Either way, only our own goes.
        let bucket = id.strip_prefix(ID_PREFIX).unwrap_or(&properties.bucket_name);
        self.store.delete(&ctx.owned(), bucket).await?;
        Ok(Step::Done(()))
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
        let days = properties.max_age_days;
        return Err(ProviderError::Failed(format!("MaxAgeDays is {days}: it must be from 1 to 3650")));
    }
    if let Some(bad) = properties.notify.iter().find(|address| !address.contains('@')) {
        return Err(ProviderError::Failed(format!("Notify entry {bad:?} is not an email address")));
    }
    Ok(())
}

/// Policies in a DynamoDB table keyed by `bucket` (a string).
#[derive(Debug)]
pub struct DynamoPolicyStore(FencedTable);

#[async_trait]
impl PolicyStore for DynamoPolicyStore {
    async fn put(&self, rules: &WriteRules, bucket: &str, policy: Value) -> Result<Written, FencedWriteError> {
        let key = item([("bucket", AttributeValue::S(bucket.to_owned()))]);
        self.0.write(rules.clone()).put(key, item([("policy", AttributeValue::S(policy.to_string()))])).await
    }

    async fn delete(&self, rules: &WriteRules, bucket: &str) -> Result<Deleted, FencedWriteError> {
        self.0.write(rules.clone()).delete(item([("bucket", AttributeValue::S(bucket.to_owned()))])).await
    }
}
