//! A stack's whole life, played as CloudFormation plays it (docs/play.md, "What CloudFormation
//! sends, and when"), for each shipped provider and the example, end to end through the queue (SNS
//! → SQS → the local event source mapping → the handler → S3), reading the downstream table after
//! every step: an answer is not the whole truth, what the provider did to the table is.
//!
//! The steps: Create; an in-place Update (same PhysicalResourceId); a replacing Update (a new
//! id) and the cleanup Delete of the old id with the old properties; a failed Update and the
//! rollback Update (ResourceProperties = the last good ones, OldResourceProperties = the failed
//! ones); a replacement that succeeded while the stack then rolled back, with and without an
//! Update back from the new id before the cleanup Delete of the new id (the documentation does
//! not say which comes); a failing Create on a key another resource owns, or that holds a record
//! cfn-once did not write, and its rollback Delete with an id CloudFormation made up; two
//! resources naming one key; the stack's Delete; and a stack whose wait condition fails (the
//! resources' work signalled to wait condition handles), rolled back.

use std::collections::{BTreeMap, HashMap};
use std::time::{Duration, Instant};

use aws_sdk_dynamodb::types::{AttributeValue, KeyType};
use cfn_once::app::App;
use cfn_once_core::lease::LeaseState;
use cfn_once_core::provider::Router;
use cfn_once_core::response::{ResponseBody, Status};
use cfn_once_core::wait_condition::SignalStatus;
use cfn_once_local::provision;
use cfn_once_tests::{LocalRegion, Options, Sent};
use serde_json::{Value, json};

const ANSWER_TIMEOUT: Duration = Duration::from_secs(30);

/// One stack's resources on local AWS, and a handler serving them.
struct Stack {
    region: LocalRegion,
    app: App,
    /// The table the resources under test write: `Custom::DynamoDBItem`'s item table, or the
    /// example's policy table.
    table: String,
    /// The table's partition key attribute.
    key_attribute: &'static str,
    steps: Vec<(String, Duration)>,
}

impl Stack {
    async fn new(
        router: impl FnOnce(&LocalRegion, &cfn_once::config::Config) -> (Router, String, &'static str),
    ) -> Self {
        let region = LocalRegion::new(Options::default()).await;
        let config = region.config(&[]);
        let (router, table, key_attribute) = router(&region, &config);
        let sink = std::sync::Arc::new(
            cfn_once::adapters::http_sink::HttpResponseSink::new(config.put_timeout_ms).expect("sink"),
        );
        let app = region.app_with_router(&config, region.lease_store(), sink, router);
        Self { region, app, table, key_attribute, steps: Vec::new() }
    }

    /// Sends one request for the resource `logical_id` and returns its one answer.
    #[allow(clippy::too_many_arguments)]
    async fn send(
        &mut self,
        step: &str,
        kind: &str,
        resource_type: &str,
        logical_id: &str,
        physical_id: Option<&str>,
        properties: Value,
        old_properties: Option<Value>,
    ) -> ResponseBody {
        self.exchange(step, kind, resource_type, logical_id, physical_id, properties, old_properties).await.0
    }

    /// [`Stack::send`], also returning the request as sent.
    #[allow(clippy::too_many_arguments)]
    async fn exchange(
        &mut self,
        step: &str,
        kind: &str,
        resource_type: &str,
        logical_id: &str,
        physical_id: Option<&str>,
        properties: Value,
        old_properties: Option<Value>,
    ) -> (ResponseBody, Sent) {
        let started = Instant::now();
        let mut sent: Sent = self.region.request("create-echo.json").await;
        let request = &mut sent.request;
        request["RequestType"] = json!(kind);
        request["ResourceType"] = json!(resource_type);
        request["LogicalResourceId"] = json!(logical_id);
        let service_token = request["ServiceToken"].clone();
        let mut properties = properties;
        properties["ServiceToken"] = service_token.clone();
        request["ResourceProperties"] = properties;
        if let Some(id) = physical_id {
            request["PhysicalResourceId"] = json!(id);
        }
        if let Some(mut old) = old_properties {
            old["ServiceToken"] = service_token;
            request["OldResourceProperties"] = old;
        }
        let esm = self.region.esm(10).await;
        self.region.publish(&sent).await;
        let bytes = self.region.serve_until_answered(&esm, &self.app, &sent, ANSWER_TIMEOUT).await;
        self.region.drain(&esm, &self.app, ANSWER_TIMEOUT).await;
        assert_eq!(self.region.responses(&sent).await.len(), 1, "{step}: exactly one PUT");
        let record = self.region.record(&sent).await.expect("a lease record");
        assert_eq!((record.state, record.delivered), (LeaseState::Committed, true), "{step}");
        self.steps.push((step.to_owned(), started.elapsed()));
        (ResponseBody::parse(&bytes).expect("a response body"), sent)
    }

    /// Every item of the table as a plain Scan reads it (the application's view: a deleted item
    /// must be gone, not marked), by partition key, without cfn-once's fence attributes (the
    /// owner is kept, as `owner`).
    async fn items(&self) -> BTreeMap<String, BTreeMap<String, String>> {
        let scan = self
            .region
            .customer_dynamodb
            .scan()
            .table_name(&self.table)
            .consistent_read(true)
            .send()
            .await
            .expect("scan");
        let mut items = BTreeMap::new();
        for item in scan.items.unwrap_or_default() {
            let key = text(&item[self.key_attribute]);
            let mut attributes = BTreeMap::new();
            for (name, value) in &item {
                if name == self.key_attribute || (name.starts_with("cfn_once_") && name != "cfn_once_owner") {
                    continue;
                }
                let name = if name == "cfn_once_owner" { "owner".to_owned() } else { name.clone() };
                attributes.insert(name, text(value));
            }
            items.insert(key, attributes);
        }
        items
    }

    /// Writes an item as something other than cfn-once would (a record from before the stack).
    async fn seed(&self, key: &str, attributes: &[(&str, &str)]) {
        let mut item = HashMap::from([(self.key_attribute.to_owned(), AttributeValue::S(key.into()))]);
        for (name, value) in attributes {
            item.insert((*name).to_owned(), AttributeValue::S((*value).into()));
        }
        self.region
            .customer_dynamodb
            .put_item()
            .table_name(&self.table)
            .set_item(Some(item))
            .send()
            .await
            .expect("seed an item");
    }

    fn owner(&self, logical_id: &str) -> String {
        format!("{}/{logical_id}", self.stack_id())
    }

    fn stack_id(&self) -> String {
        format!("arn:aws:cloudformation:us-east-2:123456789012:stack/{}/guid", self.region.bucket)
    }

    fn report(&self, provider: &str) {
        let total: Duration = self.steps.iter().map(|(_, took)| *took).sum();
        println!("{provider}: {} steps in {:.1} s", self.steps.len(), total.as_secs_f64());
        for (step, took) in &self.steps {
            println!("  {:>6.2} s  {step}", took.as_secs_f64());
        }
    }
}

fn text(value: &AttributeValue) -> String {
    match value {
        AttributeValue::S(text) | AttributeValue::N(text) => text.clone(),
        AttributeValue::Bool(flag) => flag.to_string(),
        other => format!("{other:?}"),
    }
}

/// A table's expected live items: key to attributes.
fn table(entries: &[(&str, Vec<(&str, String)>)]) -> BTreeMap<String, BTreeMap<String, String>> {
    entries
        .iter()
        .map(|(key, attributes)| {
            (key.to_string(), attributes.iter().map(|(n, v)| (n.to_string(), v.clone())).collect())
        })
        .collect()
}

mod dynamodb_item {
    use super::*;

    const TYPE: &str = "Custom::DynamoDBItem";

    async fn stack() -> Stack {
        Stack::new(|region, config| {
            let router = cfn_once::providers::standard_router(config, &region.sdk);
            (router, region.item_table.clone(), "pk")
        })
        .await
    }

    fn item(stack: &Stack, key: &str, plan: &str) -> Value {
        json!({"TableName": stack.table, "Key": {"pk": key}, "Attributes": {"Plan": plan}})
    }

    #[tokio::test]
    async fn a_whole_stack_life_leaves_the_table_as_the_template_says() {
        let mut stack = stack().await;
        let owner = stack.owner("Tenant");
        let mine = |plan: &str| vec![("Plan", plan.to_owned()), ("owner", owner.clone())];

        // Create.
        let created = stack.send("create", "Create", TYPE, "Tenant", None, item(&stack, "t1", "a"), None).await;
        assert_eq!(created.status, Status::Success, "{created:?}");
        let id1 = created.physical_resource_id.clone();
        assert_eq!(stack.items().await, table(&[("t1", mine("a"))]));

        // An in-place Update: same key, same id.
        let updated = stack
            .send(
                "in-place update",
                "Update",
                TYPE,
                "Tenant",
                Some(&id1),
                item(&stack, "t1", "b"),
                Some(item(&stack, "t1", "a")),
            )
            .await;
        assert_eq!((updated.status, updated.physical_resource_id.as_str()), (Status::Success, id1.as_str()));
        assert_eq!(stack.items().await, table(&[("t1", mine("b"))]));

        // A replacing Update (another key, a new id), then the cleanup Delete of the old id with
        // the old properties.
        let replaced = stack
            .send(
                "replacing update",
                "Update",
                TYPE,
                "Tenant",
                Some(&id1),
                item(&stack, "t2", "c"),
                Some(item(&stack, "t1", "b")),
            )
            .await;
        assert_eq!(replaced.status, Status::Success);
        let id2 = replaced.physical_resource_id.clone();
        assert_ne!(id2, id1, "a new key is a new resource");
        assert_eq!(stack.items().await, table(&[("t1", mine("b")), ("t2", mine("c"))]));
        let cleanup = stack
            .send("cleanup delete of the old id", "Delete", TYPE, "Tenant", Some(&id1), item(&stack, "t1", "b"), None)
            .await;
        assert_eq!(cleanup.status, Status::Success);
        assert_eq!(stack.items().await, table(&[("t2", mine("c"))]));

        // A failed Update (a bad attribute), then the rollback Update back to the last good one.
        let mut bad = item(&stack, "t2", "d");
        bad["Attributes"]["Seats"] = json!({"N": "many"});
        let failed = stack
            .send("failed update", "Update", TYPE, "Tenant", Some(&id2), bad.clone(), Some(item(&stack, "t2", "c")))
            .await;
        assert_eq!(failed.status, Status::Failed);
        assert_eq!(stack.items().await, table(&[("t2", mine("c"))]), "a failed update writes nothing");
        let rolled_back = stack
            .send("rollback update", "Update", TYPE, "Tenant", Some(&id2), item(&stack, "t2", "c"), Some(bad))
            .await;
        assert_eq!((rolled_back.status, rolled_back.physical_resource_id.as_str()), (Status::Success, id2.as_str()));
        assert_eq!(stack.items().await, table(&[("t2", mine("c"))]));

        // A replacement that succeeded, then the stack rolled back (another resource failed):
        // first with an Update back from the new id, then the cleanup Delete of the new id.
        let replaced = stack
            .send(
                "replacement before a rollback",
                "Update",
                TYPE,
                "Tenant",
                Some(&id2),
                item(&stack, "t3", "e"),
                Some(item(&stack, "t2", "c")),
            )
            .await;
        let id3 = replaced.physical_resource_id.clone();
        assert_eq!(stack.items().await, table(&[("t2", mine("c")), ("t3", mine("e"))]));
        let back = stack
            .send(
                "rollback: update back from the new id",
                "Update",
                TYPE,
                "Tenant",
                Some(&id3),
                item(&stack, "t2", "c"),
                Some(item(&stack, "t3", "e")),
            )
            .await;
        assert_eq!((back.status, back.physical_resource_id.as_str()), (Status::Success, id2.as_str()));
        let cleanup = stack
            .send(
                "rollback cleanup: delete of the new id",
                "Delete",
                TYPE,
                "Tenant",
                Some(&id3),
                item(&stack, "t3", "e"),
                None,
            )
            .await;
        assert_eq!(cleanup.status, Status::Success);
        assert_eq!(stack.items().await, table(&[("t2", mine("c"))]), "the rollback left the last good item");
        // ... and without the Update back.
        let replaced = stack
            .send(
                "replacement before a rollback, again",
                "Update",
                TYPE,
                "Tenant",
                Some(&id2),
                item(&stack, "t4", "f"),
                Some(item(&stack, "t2", "c")),
            )
            .await;
        let id4 = replaced.physical_resource_id.clone();
        let cleanup = stack
            .send(
                "rollback cleanup without an update back",
                "Delete",
                TYPE,
                "Tenant",
                Some(&id4),
                item(&stack, "t4", "f"),
                None,
            )
            .await;
        assert_eq!(cleanup.status, Status::Success);
        assert_eq!(stack.items().await, table(&[("t2", mine("c"))]));

        // Another resource naming the same key fails, and its rollback Delete (with an id
        // CloudFormation made up) leaves the owner's item alone.
        let other = stack
            .send("another resource's create on the key", "Create", TYPE, "Other", None, item(&stack, "t2", "z"), None)
            .await;
        assert_eq!(other.status, Status::Failed);
        let reason = other.reason.clone().unwrap_or_default();
        assert!(
            reason.contains(r#"already has an item at key {"pk":{"S":"t2"}}, which belongs to another resource"#),
            "{reason}"
        );
        assert!(reason.contains(&owner) && reason.contains("set Adopt: \"true\""), "{reason}");
        let rollback = stack
            .send(
                "its rollback delete, a made-up id",
                "Delete",
                TYPE,
                "Other",
                Some("cfn-once-example-Other-1XK9P2Q7ZL3M"),
                item(&stack, "t2", "z"),
                None,
            )
            .await;
        assert_eq!(rollback.status, Status::Success);
        assert_eq!(stack.items().await, table(&[("t2", mine("c"))]), "the owner's item is intact");

        // The stack's Delete.
        let deleted =
            stack.send("stack delete", "Delete", TYPE, "Tenant", Some(&id2), item(&stack, "t2", "c"), None).await;
        assert_eq!(deleted.status, Status::Success);
        assert_eq!(stack.items().await, table(&[]));
        stack.report(TYPE);
    }

    /// The data-loss case: a record that existed before the stack, a Create on its key that
    /// fails (a bad attribute, so it writes nothing), and the rollback Delete CloudFormation sends
    /// with an id it made up. The record must still be there.
    #[tokio::test]
    async fn a_rollback_delete_never_wipes_a_record_that_existed_before_the_stack() {
        let mut stack = stack().await;
        stack.seed("tenant#prod", &[("Plan", "production")]).await;
        let before = stack.items().await;
        println!("before: {before:?}");
        let mut bad = item(&stack, "tenant#prod", "oops");
        bad["Attributes"]["Seats"] = json!({"N": "many"});
        let failed =
            stack.send("failed create on an existing key", "Create", TYPE, "Tenant", None, bad.clone(), None).await;
        assert_eq!(failed.status, Status::Failed);
        let rollback = stack
            .send(
                "its rollback delete",
                "Delete",
                TYPE,
                "Tenant",
                Some("cfn-once-example-Tenant-1XK9P2Q7ZL3M"),
                bad,
                None,
            )
            .await;
        assert_eq!(rollback.status, Status::Success);
        let after = stack.items().await;
        println!("after the rollback Delete: {after:?}");
        assert_eq!(
            after,
            table(&[("tenant#prod", vec![("Plan", "production".to_owned())])]),
            "the pre-existing record survived"
        );

        // A valid Create on it is refused, naming it; adopting takes it over and says so.
        let refused = stack
            .send("create on an existing key", "Create", TYPE, "Tenant", None, item(&stack, "tenant#prod", "new"), None)
            .await;
        assert_eq!(refused.status, Status::Failed);
        assert!(refused.reason.as_deref().unwrap_or_default().contains("which cfn-once did not write"), "{refused:?}");
        assert_eq!(stack.items().await, table(&[("tenant#prod", vec![("Plan", "production".to_owned())])]));
        let mut adopt = item(&stack, "tenant#prod", "new");
        adopt["Adopt"] = json!("true");
        let adopted = stack.send("adopting create", "Create", TYPE, "Tenant", None, adopt, None).await;
        assert_eq!(adopted.status, Status::Success);
        assert_eq!(
            (adopted.data.get("Adopted"), adopted.data.get("AdoptedFrom")),
            (Some(&json!("true")), Some(&json!("an item cfn-once did not write")))
        );
        let owner = stack.owner("Tenant");
        assert_eq!(
            stack.items().await,
            table(&[("tenant#prod", vec![("Plan", "new".to_owned()), ("owner", owner.clone())])])
        );
        stack.report("Custom::DynamoDBItem (existing record)");
    }

    /// A stack whose wait condition fails, and its rollback (`CfnOnceWaitHandle`, see
    /// `cfn_once_core::wait_condition`). Two resources hand their work to wait conditions, and
    /// each is answered SUCCESS at once: the first's work writes its item and is signalled
    /// SUCCESS; the second's work finds a record cfn-once did not write at its key and is
    /// signalled FAILURE. That WaitCondition fails and the stack's Create rolls back:
    /// CloudFormation sends each created custom resource a Delete with the properties it was
    /// created with (its handle among them) and the id it was answered with (the two do not
    /// depend on each other, so in no set order: here the one whose work failed first).
    /// Each Delete finds its work's signal delivered, runs the provider's Delete and is answered
    /// SUCCESS; neither handle is signalled again, the first item is gone, and the record from
    /// before the stack is intact.
    #[tokio::test]
    async fn a_rollback_after_a_failed_wait_condition_deletes_once_and_signals_nothing_again() {
        let mut stack = stack().await;
        let owner = stack.owner("Seats");
        stack.seed("tenant#prod", &[("Plan", "production")]).await;
        let existing = ("tenant#prod", vec![("Plan", "production".to_owned())]);
        let (seats_handle, tenant_handle) =
            (stack.region.wait_handle("SeatsReady").await, stack.region.wait_handle("TenantReady").await);
        let mut seats = item(&stack, "seats#1", "a");
        seats_handle.declare(&mut seats, 600);
        let mut tenant = item(&stack, "tenant#prod", "new");
        tenant_handle.declare(&mut tenant, 600);

        // The stack's Create: both answered SUCCESS at once, their work signalled.
        let (seats_created, seats_sent) =
            stack.exchange("create, its work succeeds", "Create", TYPE, "Seats", None, seats.clone(), None).await;
        let (tenant_created, tenant_sent) =
            stack.exchange("create, its work fails", "Create", TYPE, "Tenant", None, tenant.clone(), None).await;
        for created in [&seats_created, &tenant_created] {
            assert_eq!(created.status, Status::Success, "{created:?}");
            assert!(created.data.contains_key("CfnOnceWork"), "the work continues past the answer: {created:?}");
        }
        let seats_signal = seats_handle.signals().await;
        assert_eq!(seats_signal.len(), 1);
        assert_eq!(seats_signal[0].1.status, SignalStatus::Success, "{:?}", seats_signal[0].1);
        let tenant_signal = tenant_handle.signals().await;
        assert_eq!(tenant_signal.len(), 1);
        assert_eq!(tenant_signal[0].1.status, SignalStatus::Failure);
        assert!(tenant_signal[0].1.reason.contains("which cfn-once did not write"), "{}", tenant_signal[0].1.reason);
        let written = ("seats#1", vec![("Plan", "a".to_owned()), ("owner", owner)]);
        assert_eq!(stack.items().await, table(&[written.clone(), existing.clone()]));
        let works = [(&seats_handle, &seats_sent), (&tenant_handle, &tenant_sent)];
        let mut records = Vec::new();
        for (handle, sent) in works {
            let work = stack.region.plain_record(&handle.work_key(sent)).await.expect("the work's record");
            assert_eq!((work.state.as_str(), work.delivered), ("COMMITTED", true), "{work:?}");
            records.push(work);
        }

        // The WaitCondition on TenantReady fails, and the stack's Create rolls back.
        let rolled_back = stack
            .send(
                "rollback delete of the resource whose work failed",
                "Delete",
                TYPE,
                "Tenant",
                Some(&tenant_created.physical_resource_id),
                tenant,
                None,
            )
            .await;
        assert_eq!(rolled_back.status, Status::Success, "{rolled_back:?}");
        assert_eq!(
            stack.items().await,
            table(&[written, existing.clone()]),
            "the record from before the stack is intact, and the other resource's item still there"
        );
        let rolled_back = stack
            .send(
                "rollback delete of the resource whose work succeeded",
                "Delete",
                TYPE,
                "Seats",
                Some(&seats_created.physical_resource_id),
                seats,
                None,
            )
            .await;
        assert_eq!(rolled_back.status, Status::Success, "{rolled_back:?}");
        assert_eq!(stack.items().await, table(&[existing]), "the rollback removed what the stack wrote, only that");

        // Nothing was signalled twice, and the Deletes did not touch the works' records.
        for ((handle, sent), before) in works.into_iter().zip(records) {
            let signals = handle.signals().await;
            assert_eq!(signals.len(), 1, "one PUT to the handle");
            let work = stack.region.plain_record(&handle.work_key(sent)).await.expect("the work's record");
            assert_eq!(work.response.as_deref(), Some(&signals[0].0[..]), "S1: the signal PUT is the committed bytes");
            assert_eq!(work, before, "the rollback found the signal delivered and left the work alone");
        }
        stack.report("Custom::DynamoDBItem (a failed wait condition and its rollback)");
    }
}

mod bucket_policy_example {
    use super::*;
    use bucket_policy::{BucketPolicy, RESOURCE_TYPE};

    async fn stack() -> Stack {
        let region = LocalRegion::new(Options::default()).await;
        let table = cfn_once_tests::unique("policies");
        let customer = provision::sdk_config(&region.endpoint, cfn_once_tests::CUSTOMER_REGION).await;
        provision::create_table(&aws_sdk_dynamodb::Client::new(&customer), &table, &[("bucket", KeyType::Hash)])
            .await
            .expect("policy table");
        let config = region.config(&[]);
        let environment = BTreeMap::from([("POLICY_TABLE".to_owned(), table.clone())]);
        let provider = BucketPolicy::on_dynamodb(&cfn_once::ProviderSetup::new(&customer, &environment));
        let router = Router::new().register(RESOURCE_TYPE, provider);
        let sink = std::sync::Arc::new(
            cfn_once::adapters::http_sink::HttpResponseSink::new(config.put_timeout_ms).expect("sink"),
        );
        let app = region.app_with_router(&config, region.lease_store(), sink, router);
        Stack { region, app, table, key_attribute: "bucket", steps: Vec::new() }
    }

    fn policy(bucket: &str, days: &str) -> Value {
        json!({"BucketName": bucket, "MaxAgeDays": days})
    }

    fn stored(days: u32, owner: &str) -> Vec<(&'static str, String)> {
        vec![
            ("policy", json!({"MaxAgeDays": days, "Strict": false, "Notify": []}).to_string()),
            ("owner", owner.to_owned()),
        ]
    }

    #[tokio::test]
    async fn a_whole_stack_life_leaves_the_table_as_the_template_says() {
        let mut stack = stack().await;
        let owner = stack.owner("LogsRetention");
        let created =
            stack.send("create", "Create", RESOURCE_TYPE, "LogsRetention", None, policy("logs-a", "30"), None).await;
        assert_eq!(created.status, Status::Success, "{created:?}");
        let id1 = created.physical_resource_id.clone();
        assert_eq!(stack.items().await, table(&[("logs-a", stored(30, &owner))]));

        let updated = stack
            .send(
                "in-place update",
                "Update",
                RESOURCE_TYPE,
                "LogsRetention",
                Some(&id1),
                policy("logs-a", "90"),
                Some(policy("logs-a", "30")),
            )
            .await;
        assert_eq!(updated.physical_resource_id, id1);
        assert_eq!(stack.items().await, table(&[("logs-a", stored(90, &owner))]));

        let replaced = stack
            .send(
                "replacing update",
                "Update",
                RESOURCE_TYPE,
                "LogsRetention",
                Some(&id1),
                policy("logs-b", "7"),
                Some(policy("logs-a", "90")),
            )
            .await;
        let id2 = replaced.physical_resource_id.clone();
        assert_ne!(id2, id1);
        assert_eq!(stack.items().await, table(&[("logs-a", stored(90, &owner)), ("logs-b", stored(7, &owner))]));
        stack
            .send(
                "cleanup delete of the old id",
                "Delete",
                RESOURCE_TYPE,
                "LogsRetention",
                Some(&id1),
                policy("logs-a", "90"),
                None,
            )
            .await;
        assert_eq!(stack.items().await, table(&[("logs-b", stored(7, &owner))]));

        let failed = stack
            .send(
                "failed update",
                "Update",
                RESOURCE_TYPE,
                "LogsRetention",
                Some(&id2),
                policy("logs-b", "9999"),
                Some(policy("logs-b", "7")),
            )
            .await;
        assert_eq!(failed.status, Status::Failed);
        assert_eq!(stack.items().await, table(&[("logs-b", stored(7, &owner))]));
        let back = stack
            .send(
                "rollback update",
                "Update",
                RESOURCE_TYPE,
                "LogsRetention",
                Some(&id2),
                policy("logs-b", "7"),
                Some(policy("logs-b", "9999")),
            )
            .await;
        assert_eq!((back.status, back.physical_resource_id.as_str()), (Status::Success, id2.as_str()));

        let replaced = stack
            .send(
                "replacement before a rollback",
                "Update",
                RESOURCE_TYPE,
                "LogsRetention",
                Some(&id2),
                policy("logs-c", "1"),
                Some(policy("logs-b", "7")),
            )
            .await;
        let id3 = replaced.physical_resource_id.clone();
        stack
            .send(
                "rollback: update back from the new id",
                "Update",
                RESOURCE_TYPE,
                "LogsRetention",
                Some(&id3),
                policy("logs-b", "7"),
                Some(policy("logs-c", "1")),
            )
            .await;
        stack
            .send(
                "rollback cleanup: delete of the new id",
                "Delete",
                RESOURCE_TYPE,
                "LogsRetention",
                Some(&id3),
                policy("logs-c", "1"),
                None,
            )
            .await;
        assert_eq!(stack.items().await, table(&[("logs-b", stored(7, &owner))]));
        let replaced = stack
            .send(
                "replacement before a rollback, again",
                "Update",
                RESOURCE_TYPE,
                "LogsRetention",
                Some(&id2),
                policy("logs-d", "2"),
                Some(policy("logs-b", "7")),
            )
            .await;
        let id4 = replaced.physical_resource_id.clone();
        stack
            .send(
                "rollback cleanup without an update back",
                "Delete",
                RESOURCE_TYPE,
                "LogsRetention",
                Some(&id4),
                policy("logs-d", "2"),
                None,
            )
            .await;
        assert_eq!(stack.items().await, table(&[("logs-b", stored(7, &owner))]));

        // Two resources naming one bucket, and a policy set by hand before the stack.
        let other = stack
            .send(
                "another resource's create on the bucket",
                "Create",
                RESOURCE_TYPE,
                "OtherRetention",
                None,
                policy("logs-b", "3650"),
                None,
            )
            .await;
        assert!(other.reason.as_deref().unwrap_or_default().contains(&format!("owned by {owner}")), "{other:?}");
        stack
            .send(
                "its rollback delete, a made-up id",
                "Delete",
                RESOURCE_TYPE,
                "OtherRetention",
                Some("cfn-once-example-OtherRetention-1XK9"),
                policy("logs-b", "3650"),
                None,
            )
            .await;
        stack.seed("legacy", &[("policy", "{\"MaxAgeDays\": 365}")]).await;
        let refused = stack
            .send("create on a hand-made policy", "Create", RESOURCE_TYPE, "Legacy", None, policy("legacy", "30"), None)
            .await;
        assert_eq!(refused.status, Status::Failed);
        stack
            .send(
                "its rollback delete",
                "Delete",
                RESOURCE_TYPE,
                "Legacy",
                Some(&refused.physical_resource_id),
                policy("legacy", "30"),
                None,
            )
            .await;
        assert_eq!(
            stack.items().await,
            table(&[("legacy", vec![("policy", "{\"MaxAgeDays\": 365}".to_owned())]), ("logs-b", stored(7, &owner))]),
            "the owner's and the hand-made policy are intact"
        );

        let deleted = stack
            .send("stack delete", "Delete", RESOURCE_TYPE, "LogsRetention", Some(&id2), policy("logs-b", "7"), None)
            .await;
        assert_eq!(deleted.status, Status::Success);
        assert_eq!(stack.items().await, table(&[("legacy", vec![("policy", "{\"MaxAgeDays\": 365}".to_owned())])]));
        stack.report(RESOURCE_TYPE);
    }
}

mod echo {
    use super::*;

    #[tokio::test]
    async fn a_stack_life_is_answered_step_by_step() {
        let mut stack = Stack::new(|region, config| {
            (cfn_once::providers::standard_router(config, &region.sdk), region.item_table.clone(), "pk")
        })
        .await;
        let created =
            stack.send("create", "Create", "Custom::Echo", "Greeting", None, json!({"Message": "one"}), None).await;
        let id = created.physical_resource_id.clone();
        assert_eq!((created.status, created.data.get("Message")), (Status::Success, Some(&json!("one"))));
        let updated = stack
            .send(
                "update",
                "Update",
                "Custom::Echo",
                "Greeting",
                Some(&id),
                json!({"Message": "two"}),
                Some(json!({"Message": "one"})),
            )
            .await;
        assert_eq!(
            (updated.physical_resource_id.as_str(), updated.data.get("Message")),
            (id.as_str(), Some(&json!("two")))
        );
        let failed = stack
            .send(
                "failed update",
                "Update",
                "Custom::Echo",
                "Greeting",
                Some(&id),
                json!({"FailWith": "no"}),
                Some(json!({"Message": "two"})),
            )
            .await;
        assert_eq!((failed.status, failed.physical_resource_id.as_str()), (Status::Failed, id.as_str()));
        stack
            .send(
                "rollback update",
                "Update",
                "Custom::Echo",
                "Greeting",
                Some(&id),
                json!({"Message": "two"}),
                Some(json!({"FailWith": "no"})),
            )
            .await;
        let deleted = stack
            .send("delete", "Delete", "Custom::Echo", "Greeting", Some(&id), json!({"Message": "two"}), None)
            .await;
        assert_eq!((deleted.status, deleted.physical_resource_id.as_str()), (Status::Success, id.as_str()));
        let made_up = stack
            .send(
                "delete of a made-up id",
                "Delete",
                "Custom::Echo",
                "Never",
                Some("cfn-once-example-Never-1XK9"),
                json!({}),
                None,
            )
            .await;
        assert_eq!(made_up.status, Status::Success);
        assert!(stack.items().await.is_empty(), "Echo writes nothing downstream");
        stack.report("Custom::Echo");
    }
}
