//! Custom::BucketPolicy through cfn-once's real protocol, in memory, with the provider test kit.

use bucket_policy::{BucketPolicy, PolicyStore, RESOURCE_TYPE};
use cfn_once::testing::{FencedMap, ProviderTest};
use cfn_once::{Fence, ProviderError, async_trait};
use serde_json::{Value, json};
use std::sync::Arc;

/// The kit's fenced in-memory table behind the provider's storage trait.
#[derive(Clone, Default)]
struct Memory(Arc<FencedMap>);

#[async_trait]
impl PolicyStore for Memory {
    async fn put(&self, fence: &Fence, bucket: &str, policy: Value) -> Result<(), ProviderError> {
        self.0.put(fence, bucket, policy).map_err(|refused| ProviderError::Failed(refused.to_string()))
    }

    async fn delete(&self, fence: &Fence, bucket: &str) -> Result<(), ProviderError> {
        self.0.delete(fence, bucket).map_err(|refused| ProviderError::Failed(refused.to_string()))
    }
}

fn kit() -> (ProviderTest, Memory) {
    let store = Memory::default();
    (ProviderTest::new().provider(RESOURCE_TYPE, BucketPolicy::new(store.clone())), store)
}

fn properties(bucket: &str, days: &str) -> Value {
    // CloudFormation sends every scalar as a string.
    json!({"ServiceToken": "arn:aws:sns:us-east-1:123456789012:cfn-once", "BucketName": bucket, "MaxAgeDays": days, "Strict": "true"})
}

#[test]
fn create_update_delete() {
    let (mut kit, store) = kit();
    let created = kit.create(RESOURCE_TYPE, properties("logs-example", "30"));
    assert_eq!(created.physical_resource_id(), "bucket-policy:logs-example");
    assert_eq!(created.data()["MaxAgeDays"], json!("30"));
    assert_eq!(store.0.get("logs-example"), Some(json!({"MaxAgeDays": 30, "Strict": true, "Notify": []})));

    let updated = kit.update(
        RESOURCE_TYPE,
        "bucket-policy:logs-example",
        properties("logs-example", "90"),
        properties("logs-example", "30"),
    );
    assert_eq!(updated.physical_resource_id(), "bucket-policy:logs-example", "same bucket, same resource");
    assert_eq!(store.0.get("logs-example").map(|p| p["MaxAgeDays"].clone()), Some(json!(90)));

    kit.delete(RESOURCE_TYPE, "bucket-policy:logs-example", properties("logs-example", "90"));
    assert_eq!(store.0.get("logs-example"), None);
    assert_eq!(kit.provider_runs(), 3);
}

#[test]
fn bad_properties_fail_clearly_and_their_rollback_delete_succeeds() {
    let (mut kit, store) = kit();
    let not_a_number = kit.create(RESOURCE_TYPE, properties("logs-example", "thirty"));
    assert_eq!(not_a_number.status(), cfn_once::core::response::Status::Failed);
    assert!(
        not_a_number.reason().is_some_and(|r| r.contains("invalid property MaxAgeDays")),
        "{:?}",
        not_a_number.reason()
    );
    assert_eq!(kit.provider_runs(), 0, "properties that do not coerce never reach the provider");
    // CloudFormation rolls back with a Delete of the id the failed Create answered.
    let rollback = kit.delete(RESOURCE_TYPE, not_a_number.physical_resource_id(), properties("logs-example", "thirty"));
    assert_eq!(rollback.status(), cfn_once::core::response::Status::Success);

    let too_long = kit.create(RESOURCE_TYPE, properties("logs-example", "9999"));
    assert_eq!(
        too_long.reason(),
        Some("Custom::BucketPolicy Create failed: MaxAgeDays is 9999: it must be from 1 to 3650")
    );
    assert_eq!(store.0.get("logs-example"), None, "nothing was written");
}

#[test]
fn a_duplicate_delivery_runs_the_provider_once() {
    let (mut kit, _) = kit();
    let request = kit.create_request(RESOURCE_TYPE, properties("logs-example", "30"));
    kit.deliver_at_once(&request, 3);
    kit.deliver(&request);
    assert_eq!(kit.provider_runs(), 1);
    assert_eq!(kit.puts(&request).len(), 1, "one answer");
}

#[test]
fn a_takeover_after_a_crash_writes_under_the_newer_fence() {
    let (mut kit, store) = kit();
    let request = kit.create_request(RESOURCE_TYPE, properties("logs-example", "30"));
    let answer = kit.crash_before_commit_then_take_over(&request);
    assert_eq!(answer.fence(), Some(2), "the secondary took over: {:?}", answer.disposition);
    assert_eq!(kit.provider_runs(), 2, "the provider ran under both fences: it must be idempotent");
    assert_eq!(store.0.fence_of("logs-example"), Some(2));
    assert_eq!(kit.puts(&request).len(), 1, "one answer");
}
