//! Custom::BucketPolicy through cfn-once's real protocol, in memory, with the provider test kit.

use std::sync::Arc;

use bucket_policy::{BucketPolicy, PolicyStore, RESOURCE_TYPE};
use cfn_once::prelude::*;
use cfn_once::testing::{FencedMap, ProviderTest};
use serde_json::{Value, json};

/// The kit's fenced, owned in-memory table behind the provider's storage trait.
#[derive(Clone, Default)]
struct Memory(Arc<FencedMap>);

#[async_trait]
impl PolicyStore for Memory {
    async fn put(&self, rules: &WriteRules, bucket: &str, policy: Value) -> Result<Written, FencedWriteError> {
        Ok(self.0.put(rules, bucket, policy)?)
    }

    async fn delete(&self, rules: &WriteRules, bucket: &str) -> Result<Deleted, FencedWriteError> {
        Ok(self.0.delete(rules, bucket)?)
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
    assert_eq!(not_a_number.status(), Some(Status::Failed));
    assert!(
        not_a_number.reason().is_some_and(|r| r.contains("invalid property MaxAgeDays")),
        "{:?}",
        not_a_number.reason()
    );
    assert_eq!(kit.provider_runs(), 0, "properties that do not coerce never reach the provider");
    // CloudFormation rolls back with a Delete of the id the failed Create answered.
    let rollback = kit.delete(RESOURCE_TYPE, not_a_number.physical_resource_id(), properties("logs-example", "thirty"));
    assert_eq!(rollback.status(), Some(Status::Success));

    let too_long = kit.create(RESOURCE_TYPE, properties("logs-example", "9999"));
    assert_eq!(
        too_long.reason(),
        Some("Custom::BucketPolicy Create failed: MaxAgeDays is 9999: it must be from 1 to 3650")
    );
    assert_eq!(store.0.get("logs-example"), None, "nothing was written");
}

#[test]
fn a_policy_the_resource_did_not_write_is_never_taken_or_deleted_unasked() {
    let (mut kit, store) = kit();
    // The bucket had a policy before the stack, set by hand.
    store.0.insert_unowned("logs-example", json!({"MaxAgeDays": 3650}));
    let refused = kit.create(RESOURCE_TYPE, properties("logs-example", "30"));
    assert_eq!(
        refused.reason(),
        Some(
            "Custom::BucketPolicy Create failed: bucket logs-example already has a retention policy, which cfn-once did not write; set Adopt: \"true\" to take it over"
        )
    );
    // The rollback Delete of that failed Create leaves the policy alone, and succeeds.
    let rollback = kit.delete(RESOURCE_TYPE, refused.physical_resource_id(), properties("logs-example", "30"));
    assert_eq!(rollback.status(), Some(Status::Success));
    assert_eq!(store.0.get("logs-example"), Some(json!({"MaxAgeDays": 3650})), "the existing policy is intact");

    // Asked to, the resource adopts it, and says so; then it is the resource's to delete.
    let mut adopt = properties("logs-example", "30");
    adopt["Adopt"] = json!("true");
    let adopted = kit.create(RESOURCE_TYPE, adopt.clone());
    assert_eq!((adopted.status(), adopted.data().get("Adopted")), (Some(Status::Success), Some(&json!("true"))));
    kit.delete(RESOURCE_TYPE, adopted.physical_resource_id(), adopt);
    assert_eq!(store.0.get("logs-example"), None);
}

#[test]
fn two_resources_cannot_name_one_bucket() {
    let (mut kit, store) = kit();
    let first = kit.create(RESOURCE_TYPE, properties("logs-example", "30"));
    assert_eq!(first.status(), Some(Status::Success));
    let second = kit.create_request(RESOURCE_TYPE, properties("logs-example", "7")).logical_resource_id("OtherPolicy");
    let refused = kit.deliver(&second);
    assert!(
        refused
            .reason()
            .is_some_and(|r| r.contains("owned by") && r.ends_with("/Resource; set Adopt: \"true\" to take it over")),
        "{:?}",
        refused.reason()
    );
    let rollback = kit.delete_request(RESOURCE_TYPE, refused.physical_resource_id(), properties("logs-example", "7"));
    assert_eq!(kit.deliver(&rollback.logical_resource_id("OtherPolicy")).status(), Some(Status::Success));
    assert_eq!(
        store.0.get("logs-example").map(|p| p["MaxAgeDays"].clone()),
        Some(json!(30)),
        "the first resource's policy"
    );
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

#[test]
fn a_stale_execution_that_resumes_after_the_takeover_is_fenced_out() {
    let (mut kit, store) = kit();
    let request = kit.create_request(RESOURCE_TYPE, properties("logs-example", "30"));
    let takeover = kit.stale_write_after_take_over(&request);
    assert_eq!(takeover.answer.fence(), Some(2), "{:?}", takeover.answer.disposition);
    // The frozen execution ran its provider under fence 1 after fence 2 had written: refused,
    // and it committed nothing.
    assert!(
        matches!(&takeover.stale, cfn_once::testing::Disposition::Retry { why, .. } if why.contains("taken over")),
        "{:?}",
        takeover.stale
    );
    let written = store.0.written_by("logs-example").expect("written");
    assert_eq!(written.value, 2, "the policy is fence 2's, in scope {}", written.scope);
    assert_eq!(kit.puts(&request).len(), 1, "one answer, the taker-over's");
}
