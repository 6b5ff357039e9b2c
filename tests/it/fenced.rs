//! S2 on a real table (moto): a fenced write under fence t is refused once a write under a
//! higher fence of the same request was accepted; other requests are not fenced against it.

use std::collections::HashMap;

use aws_sdk_dynamodb::types::AttributeValue;
use cfn_once::fenced::{Deleted, FencedTable, FencedWriteError, WriteRules};
use cfn_once_core::ownership::Fence;
use cfn_once_tests::{CUSTOMER_REGION, LocalRegion, Options};

fn item(value: &str) -> HashMap<String, AttributeValue> {
    HashMap::from([
        ("pk".to_owned(), AttributeValue::S("tenant#1".into())),
        ("Plan".to_owned(), AttributeValue::S(value.into())),
    ])
}

fn key() -> HashMap<String, AttributeValue> {
    HashMap::from([("pk".to_owned(), AttributeValue::S("tenant#1".into()))])
}

/// `name` in the customer region (where `LocalRegion` makes the item table), as a provider makes
/// it: `FencedTable::new` on the function's SDK configuration.
fn table(region: &LocalRegion, name: &str) -> FencedTable {
    FencedTable::new(&region.sdk, name).in_region(CUSTOMER_REGION)
}

fn fence(scope: &str, value: u64) -> Fence {
    Fence { scope: scope.into(), value }
}

/// The item's `Plan`, as a plain GetItem reads it.
async fn plan(region: &LocalRegion) -> Option<String> {
    stored(region).await.and_then(|item| item.get("Plan")?.as_s().ok().cloned())
}

#[tokio::test]
async fn s2_a_stale_fence_is_refused_and_a_newer_one_accepted() {
    let region = LocalRegion::new(Options::default()).await;
    let table = table(&region, &region.item_table);

    table.put_item(&fence("request-a", 1), item("one")).await.expect("first write");
    table.put_item(&fence("request-a", 2), item("two")).await.expect("a newer fence is accepted");
    assert_eq!(
        table.put_item(&fence("request-a", 1), item("stale")).await,
        Err(FencedWriteError::FencedOut { fence: 1 }),
        "the stale execution's write is refused"
    );
    assert_eq!(plan(&region).await.as_deref(), Some("two"));
    table.put_item(&fence("request-a", 2), item("two again")).await.expect("the same fence may retry its write");
    assert_eq!(
        table.delete_item(&fence("request-a", 1), key()).await,
        Err(FencedWriteError::FencedOut { fence: 1 }),
        "a stale delete is refused too"
    );
    assert_eq!(plan(&region).await.as_deref(), Some("two again"));

    // A later request (CloudFormation's next operation) starts its own fence sequence.
    table.put_item(&fence("request-b", 1), item("three")).await.expect("another request writes");
    assert_eq!(plan(&region).await.as_deref(), Some("three"));
    table.delete_item(&fence("request-c", 1), key()).await.expect("delete");
    assert_eq!(stored(&region).await, None, "a delete leaves nothing, as a plain GetItem reads it");
    assert_eq!(table.get_item(key()).await, Ok(None));
    table.delete_item(&fence("request-c", 1), key()).await.expect("deleting what is gone succeeds");
    // The price of leaving nothing: with no item there is no fence, so a stale write of the
    // deleting request would be accepted. Only a request that both writes and deletes one key can
    // be caught so; such a provider opts in to tombstones (the next test).
    table.put_item(&fence("request-c", 0), item("stale")).await.expect("no fence is left to refuse it");
}

/// Whatever a plain, consistent GetItem finds at the key: the application's view.
async fn stored(region: &LocalRegion) -> Option<HashMap<String, AttributeValue>> {
    region
        .customer_dynamodb
        .get_item()
        .table_name(&region.item_table)
        .set_key(Some(key()))
        .consistent_read(true)
        .send()
        .await
        .expect("get item")
        .item
}

/// S2 for a provider whose requests both write and delete one key: with a tombstone (opt-in,
/// `Write::leaving_tombstone`), a stale write that arrives after a newer execution of the same
/// request deleted the item is refused instead of bringing it back.
#[tokio::test]
async fn s2_an_opt_in_tombstone_refuses_a_stale_write_after_a_newer_delete() {
    let region = LocalRegion::new(Options::default()).await;
    let table = table(&region, &region.item_table);
    table.put_item(&fence("request-a", 1), item("one")).await.expect("fence 1 writes");
    let deleted = table.write(WriteRules::fenced(&fence("request-a", 2))).leaving_tombstone().delete(key()).await;
    assert_eq!(deleted, Ok(Deleted::Deleted), "fence 2 deletes, leaving a tombstone");
    assert_eq!(
        table.put_item(&fence("request-a", 1), item("resurrected")).await,
        Err(FencedWriteError::FencedOut { fence: 1 }),
        "the stale put under fence 1 is refused by the tombstone of fence 2"
    );
    assert_eq!(plan(&region).await, None, "the item stays deleted");
    assert_eq!(table.get_item(key()).await, Ok(None), "FencedTable reads a tombstone as no item");
    let tombstone = stored(&region).await.expect("a plain reader sees the tombstone: it must skip it");
    assert!(tombstone.contains_key(cfn_once::fenced::DELETED_ATTRIBUTE), "{tombstone:?}");
    let expires_at: u64 = tombstone[cfn_once::fenced::EXPIRES_ATTRIBUTE].as_n().expect("a number").parse().expect("n");
    let now_s = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).expect("after 1970").as_secs();
    assert!((now_s + 86_000..=now_s + 86_500).contains(&expires_at), "kept for a day: {expires_at} vs {now_s}");
    // The next request's write replaces the tombstone.
    table.put_item(&fence("request-b", 1), item("new")).await.expect("a later request writes the key again");
    assert_eq!(plan(&region).await.as_deref(), Some("new"));
    assert_eq!(
        table.get_item(key()).await.expect("read").and_then(|i| i.get("Plan")?.as_s().ok().cloned()).as_deref(),
        Some("new")
    );
}

#[tokio::test]
async fn a_missing_table_is_named() {
    let region = LocalRegion::new(Options::default()).await;
    let table = table(&region, "no-such-table");
    assert_eq!(
        table.put_item(&fence("request-a", 1), item("x")).await,
        Err(FencedWriteError::NoSuchTable { table: "no-such-table".into() })
    );
}

mod owned {
    //! Owned writes on a real table: a resource writes where nothing is, where an opt-in
    //! tombstone is, or where its own item is; another resource's item, or one cfn-once did not write, is refused
    //! unless adopted; a delete removes only the resource's own item. One condition per write.

    use super::*;
    use cfn_once::fenced::{Condition, Owner, Update, Written};

    fn rules(stack: &str, logical: &str, scope: &str, fence_value: u64) -> WriteRules {
        WriteRules::owned(&fence(scope, fence_value), Owner::new(stack, logical))
    }

    fn attributes(plan: &str) -> HashMap<String, AttributeValue> {
        HashMap::from([("Plan".to_owned(), AttributeValue::S(plan.into()))])
    }

    #[tokio::test]
    async fn a_resource_writes_what_is_free_or_its_own_and_nothing_else() {
        let region = LocalRegion::new(Options::default()).await;
        let table = table(&region, &region.item_table);
        let mine = rules("stack-a", "Tenant", "create-1", 1);
        assert_eq!(table.write(mine.clone()).put(key(), attributes("one")).await, Ok(Written::Created));
        assert_eq!(
            stored(&region).await.and_then(|item| item.get("cfn_once_owner")?.as_s().ok().cloned()).as_deref(),
            Some("stack-a/Tenant"),
            "the item records its owner"
        );
        let again = rules("stack-a", "Tenant", "update-1", 1);
        assert_eq!(table.write(again).put(key(), attributes("two")).await, Ok(Written::Replaced));

        // Another resource naming the same key is refused, and told whose it is.
        let other = rules("stack-a", "Other", "create-2", 1);
        assert_eq!(
            table.write(other.clone()).put(key(), attributes("theirs")).await,
            Err(FencedWriteError::OwnedByAnother { owner: Some(Owner::new("stack-a", "Tenant")) })
        );
        assert_eq!(plan(&region).await.as_deref(), Some("two"), "the owner's item is intact");
        // Its Delete (the rollback of that failed Create) leaves it alone, and succeeds.
        assert_eq!(
            table.write(other.clone()).delete(key()).await,
            Ok(Deleted::NotOwned { owner: Some(Owner::new("stack-a", "Tenant")) })
        );
        assert_eq!(plan(&region).await.as_deref(), Some("two"));
        // Adopting takes it over, and says from whom.
        assert_eq!(
            table.write(other.clone().adopting(true)).put(key(), attributes("adopted")).await,
            Ok(Written::Adopted { previous_owner: Some(Owner::new("stack-a", "Tenant")) })
        );
        // Now the first resource's Delete finds it not its own.
        let first_deletes = rules("stack-a", "Tenant", "delete-1", 1);
        assert!(matches!(table.write(first_deletes).delete(key()).await, Ok(Deleted::NotOwned { .. })));
        assert_eq!(plan(&region).await.as_deref(), Some("adopted"));
        // The adopter's own Delete removes it, leaving nothing.
        assert_eq!(table.write(rules("stack-a", "Other", "delete-2", 1)).delete(key()).await, Ok(Deleted::Deleted));
        assert_eq!(stored(&region).await, None);
        assert_eq!(table.write(rules("stack-a", "Other", "delete-3", 1)).delete(key()).await, Ok(Deleted::Absent));
        assert_eq!(
            table.write(rules("stack-b", "New", "create-3", 1)).put(key(), attributes("new")).await,
            Ok(Written::Created)
        );
    }

    #[tokio::test]
    async fn an_item_cfn_once_did_not_write_is_never_taken_or_deleted_unasked() {
        let region = LocalRegion::new(Options::default()).await;
        // A record that existed before the stack.
        region
            .customer_dynamodb
            .put_item()
            .table_name(&region.item_table)
            .set_item(Some(item("production")))
            .send()
            .await
            .expect("a pre-existing item");
        let table = table(&region, &region.item_table);
        let create = rules("stack-a", "Tenant", "create-1", 1);
        assert_eq!(
            table.write(create.clone()).put(key(), attributes("oops")).await,
            Err(FencedWriteError::OwnedByAnother { owner: None })
        );
        assert_eq!(table.write(create).delete(key()).await, Ok(Deleted::NotOwned { owner: None }));
        assert_eq!(plan(&region).await.as_deref(), Some("production"), "the production record is intact");
    }

    #[tokio::test]
    async fn updates_are_fenced_owned_and_may_carry_a_condition_of_their_own() {
        let region = LocalRegion::new(Options::default()).await;
        let table = table(&region, &region.item_table);
        let seats = |count: &str| {
            Update::new()
                .set("#plan = :plan")
                .add_to("#seats :n")
                .name("#plan", "Plan")
                .name("#seats", "Seats")
                .value(":plan", AttributeValue::S("pro".into()))
                .value(":n", AttributeValue::N(count.into()))
        };
        let mine = rules("stack-a", "Tenant", "r", 2);
        let after = table.write(mine.clone()).update(key(), seats("5")).await.expect("creates the item");
        assert_eq!(after["Seats"].as_n().map(String::as_str), Ok("5"));
        let after = table.write(mine.clone()).update(key(), seats("3")).await.expect("an atomic counter");
        assert_eq!(after["Seats"].as_n().map(String::as_str), Ok("8"));
        assert_eq!(after["cfn_once_owner"].as_s().map(String::as_str), Ok("stack-a/Tenant"));
        // A stale execution of the same request is fenced out.
        assert_eq!(
            table.write(rules("stack-a", "Tenant", "r", 1)).update(key(), seats("100")).await,
            Err(FencedWriteError::FencedOut { fence: 1 })
        );
        // Another resource may not update it.
        assert!(matches!(
            table.write(rules("stack-a", "Other", "x", 1)).update(key(), seats("1")).await,
            Err(FencedWriteError::OwnedByAnother { .. })
        ));
        // The author's own condition, ANDed with the rules.
        let frozen = Condition::new("#plan = :frozen")
            .name("#plan", "Plan")
            .value(":frozen", AttributeValue::S("frozen".into()));
        assert_eq!(
            table.write(mine).condition(frozen).update(key(), seats("1")).await,
            Err(FencedWriteError::ConditionFailed)
        );
        let now = table.get_item(key()).await.expect("read").expect("the item");
        assert_eq!(now["Seats"].as_n().map(String::as_str), Ok("8"), "no refused update applied");
    }
}
