//! Fenced writes whose outcome is unknown, on moto through the fault proxy: a write the table
//! applied and whose reply was lost (`Fault::ForwardThenReset`) stands and is never applied twice.
//!
//! First `FencedTable` alone: a put whose author's condition the applied write made false is
//! `Written::Stands`, not `ConditionFailed`; an `ADD` is added once; a write no attempt settles is
//! `FencedWriteError::Unknown`, applied at most once. Then end to end, a provider's Create through
//! the production handler: how many runs, under which fences, the answer and the table's content.
//! Each test prints those facts (`-- --nocapture`).

use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use cfn_once::app::App;
use cfn_once::fenced::{Condition, Deleted, FencedTable, FencedWriteError, Update, WRITE_ATTEMPTS_MAX, Written};
use cfn_once::prelude::{AttributeValue, Item, item};
use cfn_once_core::lease::LeaseState;
use cfn_once_core::ownership::{Fence, Owner, WriteRules};
use cfn_once_core::provider::{Provider, ProviderContext, ProviderError, ProviderOutput, Router, Step};
use cfn_once_core::response::{ResponseBody, Status};
use cfn_once_local::provision;
use cfn_once_tests::{CUSTOMER_REGION, Fault, FaultProxy, LocalRegion, Match, Options, Sent, handler};
use serde::Deserialize;
use serde_json::json;

/// One region whose item table is reached only through a fault proxy.
struct Wire {
    region: LocalRegion,
    proxy: FaultProxy,
    /// The item table as a provider makes it (`FencedTable::new`), through the proxy.
    table: FencedTable,
}

impl Wire {
    async fn new() -> Self {
        let region = LocalRegion::new(Options { visibility_timeout_s: 3, ..Options::default() }).await;
        let proxy = FaultProxy::start(&region.endpoint);
        let sdk = provision::sdk_config(&proxy.url(), CUSTOMER_REGION).await;
        let table = FencedTable::new(&sdk, &region.item_table).call_timeout_ms(1_000);
        Self { region, proxy, table }
    }

    /// The item table's calls of `operation` (`PutItem`, `UpdateItem`, `DeleteItem`).
    fn calls(&self, operation: &str) -> Match {
        Match::OperationWith(operation.into(), self.region.item_table.clone())
    }

    /// The item at `tenant` as a plain, consistent GetItem reads it, past the proxy.
    async fn stored(&self, tenant: &str) -> Option<Item> {
        self.region
            .customer_dynamodb
            .get_item()
            .table_name(&self.region.item_table)
            .set_key(Some(key(tenant)))
            .consistent_read(true)
            .send()
            .await
            .expect("get item")
            .item
    }

    /// The item table's calls, for the test's output: how many of each, and how many replies
    /// the proxy dropped.
    fn attempts(&self) -> String {
        let counts: Vec<String> = ["PutItem", "UpdateItem", "DeleteItem"]
            .into_iter()
            .map(|operation| format!("{operation} x{}", self.proxy.count(&self.calls(operation))))
            .collect();
        format!("item table {}, replies dropped {}", counts.join(", "), self.proxy.injected())
    }
}

fn key(tenant: &str) -> Item {
    item([("pk", AttributeValue::S(tenant.into()))])
}

fn rules(fence_value: u64) -> WriteRules {
    rules_of("request-a", fence_value)
}

/// The rules of a write of the request `scope`, made from a bare fence: every identical write of
/// the request is one.
fn rules_of(scope: &str, fence_value: u64) -> WriteRules {
    WriteRules::owned(&Fence { scope: scope.into(), value: fence_value }, Owner::new("stack", "Tenant"))
}

/// The author's condition of these tests: create the plan only where there is none, which the
/// put itself makes false.
fn no_plan_yet() -> Condition {
    Condition::new("attribute_not_exists(#plan)").name("#plan", "Plan")
}

fn plan(value: &str) -> Item {
    item([("Plan", AttributeValue::S(value.into()))])
}

fn add_seats(count: u32) -> Update {
    Update::new().add_to("#seats :n").name("#seats", "Seats").value(":n", AttributeValue::N(count.to_string()))
}

/// An attribute of `item` as text (`S` or `N`).
fn text(item: Option<&Item>, name: &str) -> Option<String> {
    match item?.get(name)? {
        AttributeValue::S(text) | AttributeValue::N(text) => Some(text.clone()),
        _ => None,
    }
}

#[tokio::test]
async fn a_put_applied_whose_reply_is_lost_stands_though_its_own_condition_is_now_false() {
    let wire = Wire::new().await;
    wire.proxy.inject(wire.calls("PutItem"), Fault::ForwardThenReset, 1);
    let written = wire.table.write(rules(1)).condition(no_plan_yet()).put(key("t1"), plan("pro")).await;
    println!("put, reply lost: {written:?}; calls: {}", wire.attempts());
    assert_eq!(written, Ok(Written::Stands), "the write stands: it is not reported failed");
    assert_eq!(wire.proxy.count(&wire.calls("PutItem")), 2, "the lost attempt and the one that found it");
    let stored = wire.stored("t1").await;
    assert_eq!(text(stored.as_ref(), "Plan").as_deref(), Some("pro"));
    assert_eq!(text(stored.as_ref(), "cfn_once_fence").as_deref(), Some("1"));
    // The author's condition is false now: another write with it is refused, and says so.
    let again = wire.table.write(rules(1)).condition(no_plan_yet()).put(key("t1"), plan("basic")).await;
    assert_eq!(again, Err(FencedWriteError::ConditionFailed));
    assert_eq!(text(wire.stored("t1").await.as_ref(), "Plan").as_deref(), Some("pro"));
}

#[tokio::test]
async fn an_add_applied_whose_reply_is_lost_is_added_once() {
    let wire = Wire::new().await;
    let seeded = wire.table.write(rules(1)).update(key("t1"), add_seats(5)).await.expect("5 seats");
    assert_eq!(text(Some(&seeded), "Seats").as_deref(), Some("5"));
    wire.proxy.inject(wire.calls("UpdateItem"), Fault::ForwardThenReset, 1);
    let now = wire.table.write(rules(1)).update(key("t1"), add_seats(1)).await;
    println!("ADD 1, reply lost: {now:?}; calls: {}", wire.attempts());
    let now = now.expect("the update stands");
    assert_eq!(text(Some(&now), "Seats").as_deref(), Some("6"), "the item as the update left it");
    assert_eq!(wire.proxy.count(&wire.calls("UpdateItem")), 3, "the seed, the lost attempt, the one that found it");
    assert_eq!(text(wire.stored("t1").await.as_ref(), "Seats").as_deref(), Some("6"), "added once");
}

#[tokio::test]
async fn a_write_no_attempt_settles_is_unknown_and_applied_at_most_once() {
    let wire = Wire::new().await;
    // Every attempt reaches the table and loses its reply: the first applies, the others are
    // refused by its token, and nobody hears either.
    wire.proxy.inject(wire.calls("UpdateItem"), Fault::ForwardThenReset, WRITE_ATTEMPTS_MAX);
    let result = wire.table.write(rules(1)).update(key("t1"), add_seats(1)).await;
    println!("ADD 1, every reply lost: {result:?}; calls: {}", wire.attempts());
    let Err(FencedWriteError::Unknown(why)) = &result else { panic!("an unknown outcome, not {result:?}") };
    assert!(matches!(ProviderError::from(result.clone().unwrap_err()), ProviderError::Unknown(_)), "{why}");
    assert_eq!(wire.proxy.count(&wire.calls("UpdateItem")) as u32, WRITE_ATTEMPTS_MAX);
    assert_eq!(text(wire.stored("t1").await.as_ref(), "Seats").as_deref(), Some("1"), "applied once");

    // A put whose condition the first attempt made false: unknown, never ConditionFailed.
    wire.proxy.inject(wire.calls("PutItem"), Fault::ForwardThenReset, WRITE_ATTEMPTS_MAX);
    let put = wire.table.write(rules(1)).condition(no_plan_yet()).put(key("t2"), plan("pro")).await;
    println!("put, every reply lost: {put:?}");
    assert!(matches!(put, Err(FencedWriteError::Unknown(_))), "{put:?}");
    assert_eq!(
        text(wire.stored("t2").await.as_ref(), "Plan").as_deref(),
        Some("pro"),
        "it stands, unknown to the author"
    );

    // An attempt that times out (its reply comes after the call's 1 s) is as unknown as a lost
    // one: another request's ADD, settled by its next attempt.
    wire.proxy.inject(wire.calls("UpdateItem"), Fault::ForwardThenDelay(Duration::from_millis(1_500)), 1);
    let now = wire.table.write(rules_of("request-b", 1)).update(key("t1"), add_seats(1)).await;
    let now = now.expect("settled by the next attempt");
    assert_eq!(text(Some(&now), "Seats").as_deref(), Some("2"), "added once more, not twice");
}

/// Another request's ADD lands between two attempts of this one (after the first applied and
/// its reply was late): the item keeps both tokens, and the retry finds its own.
#[tokio::test]
async fn an_add_with_another_writer_between_its_attempts_is_added_once() {
    let wire = Wire::new().await;
    wire.table.write(rules_of("request-seed", 1)).update(key("t1"), add_seats(5)).await.expect("5 seats");
    let seeded = wire.proxy.count(&wire.calls("UpdateItem"));
    // The first attempt applies; its reply comes after the call's 1 s, so it is sent again 100 ms
    // after that, and the other writer lands in between.
    wire.proxy.inject(wire.calls("UpdateItem"), Fault::ForwardThenDelay(Duration::from_millis(2_000)), 1);
    let ours = wire.table.write(rules_of("request-a", 1)).update(key("t1"), add_seats(1));
    let other = async {
        while wire.proxy.count(&wire.calls("UpdateItem")) == seeded {
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
        let between = wire.table.write(rules_of("request-b", 1)).update(key("t1"), add_seats(1)).await;
        between.expect("the other writer's ADD")
    };
    let (ours, between) = tokio::join!(ours, other);
    let after = text(wire.stored("t1").await.as_ref(), "Seats");
    println!(
        "5 seats, then ADD 1 (first attempt's reply late), another request's ADD 1 between its attempts: Seats {after:?}; the other's left {:?}; calls: {}",
        text(Some(&between), "Seats"),
        wire.attempts()
    );
    assert_eq!(text(Some(&between), "Seats").as_deref(), Some("7"), "the other landed after our first attempt");
    let ours = ours.expect("ours stands");
    assert_eq!(text(Some(&ours), "Seats").as_deref(), Some("7"), "the item as it is now");
    assert_eq!(after.as_deref(), Some("7"), "each request's ADD once: 5 + 1 + 1");
}

#[tokio::test]
async fn a_delete_applied_whose_reply_is_lost_is_a_success() {
    let wire = Wire::new().await;
    for tenant in ["t1", "t2"] {
        wire.table.write(rules(1)).put(key(tenant), plan("pro")).await.expect("put");
    }
    // A delete that removes the item leaves nothing to tell it by: the item gone is success.
    wire.proxy.inject(wire.calls("DeleteItem"), Fault::ForwardThenReset, 1);
    assert_eq!(wire.table.write(rules(2)).delete(key("t1")).await, Ok(Deleted::Absent));
    assert_eq!(wire.stored("t1").await, None);
    // A delete leaving a tombstone finds its own token there.
    wire.proxy.inject(wire.calls("PutItem"), Fault::ForwardThenReset, 1);
    assert_eq!(wire.table.write(rules(2)).leaving_tombstone().delete(key("t2")).await, Ok(Deleted::Deleted));
    assert!(wire.stored("t2").await.is_some_and(|item| item.contains_key(cfn_once::fenced::DELETED_ATTRIBUTE)));
    println!("deletes, replies lost: calls: {}", wire.attempts());
}

/// End to end: `Custom::Seats` through the production handler, every AWS call through the proxy.
mod end_to_end {
    use super::*;

    const SEATS_TYPE: &str = "Custom::Seats";
    const TIMEOUT: Duration = Duration::from_secs(60);

    /// `Custom::Seats`: on Create, one fenced, owned write to the item table (`Write`: `put`, the
    /// plan under the condition that there is none yet, or `add`, one seat); records the fence
    /// of every run.
    #[derive(Clone)]
    struct Seats {
        table: FencedTable,
        runs: Arc<Mutex<Vec<u64>>>,
    }

    #[derive(Deserialize)]
    #[serde(rename_all = "PascalCase")]
    struct Properties {
        write: String,
        tenant: String,
    }

    #[async_trait::async_trait]
    impl Provider for Seats {
        type Properties = Properties;

        async fn create(&self, ctx: &ProviderContext, properties: Properties) -> Result<Step, ProviderError> {
            self.runs.lock().expect("runs").push(ctx.fence.value);
            let key = key(&properties.tenant);
            let output = ProviderOutput::with_id(format!("seats-{}", properties.tenant));
            let output = if properties.write == "put" {
                let written = self.table.write(ctx.owned()).condition(no_plan_yet()).put(key, plan("pro")).await?;
                output.data("Written", format!("{written:?}"))
            } else {
                let now = self.table.write(ctx.owned()).update(key, add_seats(1)).await?;
                output.data("Seats", text(Some(&now), "Seats").unwrap_or_default())
            };
            Ok(output.into())
        }

        async fn update(
            &self,
            ctx: &ProviderContext,
            _id: &str,
            properties: Properties,
            _old: Option<Properties>,
        ) -> Result<Step, ProviderError> {
            self.create(ctx, properties).await
        }

        async fn delete(&self, _: &ProviderContext, _: &str, _: Properties) -> Result<Step<()>, ProviderError> {
            Ok(Step::Done(()))
        }
    }

    /// What became of one request: the provider's runs (their fences), the answer, the item.
    struct Answered {
        fences: Vec<u64>,
        body: ResponseBody,
        item: Option<Item>,
    }

    /// Sends a `Custom::Seats` Create writing `write` for `tenant` with `inject` applied to the
    /// proxy, serves it with the production handler until it is answered and the queue is empty,
    /// and checks it was answered once.
    async fn create(write: &str, inject: impl FnOnce(&Wire)) -> Answered {
        let wire = Wire::new().await;
        let config = wire.region.config_behind(&wire.proxy.url(), &[]);
        let runs = Arc::new(Mutex::new(Vec::new()));
        let seats = Seats { table: wire.table.clone(), runs: Arc::clone(&runs) };
        let app: App = wire.region.app_behind(&wire.proxy, &config, Router::new().register(SEATS_TYPE, seats)).await;
        inject(&wire);
        let mut sent = wire.region.request("create-echo.json").await;
        sent.request["ResourceType"] = json!(SEATS_TYPE);
        sent.request["ResourceProperties"] = json!({"Write": write, "Tenant": "t1"});
        wire.region.route_response_url(&mut sent, &wire.proxy.url());
        wire.region.publish(&sent).await;
        drain(&wire, &app, &sent).await;
        let body = answered_once(&wire, &sent).await;
        let fences = runs.lock().expect("runs").clone();
        let item = wire.stored("t1").await;
        println!(
            "{write}: provider ran {} time(s) under fence(s) {fences:?}; answered {:?} {}; item Plan {:?}, Seats {:?}, fence {:?}; calls: {}",
            fences.len(),
            body.status,
            body.reason.as_deref().unwrap_or(""),
            text(item.as_ref(), "Plan"),
            text(item.as_ref(), "Seats"),
            text(item.as_ref(), "cfn_once_fence"),
            wire.attempts()
        );
        Answered { fences, body, item }
    }

    /// Serves the queue until it is empty and `sent` has a committed answer.
    async fn drain(wire: &Wire, app: &App, sent: &Sent) {
        let esm = wire.region.esm(10).await;
        let started = Instant::now();
        loop {
            esm.poll_once(&handler(app)).await.expect("poll");
            let depth = provision::queue_depth(&wire.region.sqs, &wire.region.queue.url).await.expect("depth");
            let committed = wire.region.record(sent).await.is_some_and(|r| r.state == LeaseState::Committed);
            if depth == 0 && committed {
                return;
            }
            assert!(started.elapsed() < TIMEOUT, "not answered and drained within {TIMEOUT:?} (depth {depth})");
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
    }

    /// One committed body, every PUT identical to it.
    async fn answered_once(wire: &Wire, sent: &Sent) -> ResponseBody {
        let record = wire.region.record(sent).await.expect("a lease record");
        let committed = record.response.expect("committed bytes");
        let puts = wire.region.responses(sent).await;
        assert!(!puts.is_empty() && puts.iter().all(|put| *put == committed), "answered once");
        ResponseBody::parse(&committed).expect("body")
    }

    #[tokio::test]
    async fn a_conditional_put_whose_reply_is_lost_is_answered_success_after_one_run() {
        let answered = create("put", |wire| wire.proxy.inject(wire.calls("PutItem"), Fault::ForwardThenReset, 1)).await;
        assert_eq!(answered.fences, [1], "one run, under the first fence");
        assert_eq!(answered.body.status, Status::Success, "{:?}", answered.body.reason);
        assert_eq!(answered.body.data.get("Written"), Some(&json!("Stands")));
        assert_eq!(text(answered.item.as_ref(), "Plan").as_deref(), Some("pro"));
        assert_eq!(text(answered.item.as_ref(), "cfn_once_fence").as_deref(), Some("1"), "one write, fence 1's");
    }

    #[tokio::test]
    async fn an_add_whose_reply_is_lost_is_added_once_and_answered_success_after_one_run() {
        let answered =
            create("add", |wire| wire.proxy.inject(wire.calls("UpdateItem"), Fault::ForwardThenReset, 1)).await;
        assert_eq!(answered.fences, [1], "one run, under the first fence");
        assert_eq!(answered.body.status, Status::Success, "{:?}", answered.body.reason);
        assert_eq!(answered.body.data.get("Seats"), Some(&json!("1")));
        assert_eq!(text(answered.item.as_ref(), "Seats").as_deref(), Some("1"), "added once");
    }

    /// A put no attempt settles: the provider's answer is `ProviderError::Unknown`, so it runs
    /// again under a higher fence, and makes the same put, with the same token: the item the
    /// first run's write left carries it, so the put stands, although the author's condition
    /// (made for a first write) is false now.
    #[tokio::test]
    async fn a_put_no_attempt_settles_runs_again_under_a_higher_fence_and_finds_it_stands() {
        let answered =
            create("put", |wire| wire.proxy.inject(wire.calls("PutItem"), Fault::ForwardThenReset, WRITE_ATTEMPTS_MAX))
                .await;
        assert_eq!(answered.fences, [1, 2], "run again only under a higher fence");
        assert_eq!(answered.body.status, Status::Success, "{:?}", answered.body.reason);
        assert_eq!(answered.body.data.get("Written"), Some(&json!("Stands")));
        assert_eq!(text(answered.item.as_ref(), "Plan").as_deref(), Some("pro"));
        assert_eq!(text(answered.item.as_ref(), "cfn_once_fence").as_deref(), Some("1"), "fence 1's write stands");
    }

    /// An ADD no attempt settles: the provider runs again under a higher fence and makes the
    /// same ADD, which finds its token on the item: added once for the request, not once per run.
    #[tokio::test]
    async fn an_add_no_attempt_settles_is_added_once_though_the_provider_runs_again() {
        let answered = create("add", |wire| {
            wire.proxy.inject(wire.calls("UpdateItem"), Fault::ForwardThenReset, WRITE_ATTEMPTS_MAX)
        })
        .await;
        assert_eq!(answered.fences, [1, 2], "run again only under a higher fence");
        assert_eq!(answered.body.status, Status::Success, "{:?}", answered.body.reason);
        assert_eq!(text(answered.item.as_ref(), "Seats").as_deref(), Some("1"), "added once for the request");
        assert_eq!(answered.body.data.get("Seats"), Some(&json!("1")));
    }

    /// The shipped `Custom::DynamoDBItem` adopting an item cfn-once did not write, its reply lost
    /// (`Fault::ForwardThenReset` after moto applied it) or not: the write stands either way, and
    /// the Data is the same (`!GetAtt Item.Adopted` works after a lost reply too).
    async fn adopt(lose_reply: bool) -> ResponseBody {
        let wire = Wire::new().await;
        // A record from before the stack, at the key the resource names.
        wire.region
            .customer_dynamodb
            .put_item()
            .table_name(&wire.region.item_table)
            .set_item(Some(item([("pk", AttributeValue::S("t1".into())), ("Plan", AttributeValue::S("old".into()))])))
            .send()
            .await
            .expect("seed");
        let config = wire.region.config_behind(&wire.proxy.url(), &[]);
        let sdk = provision::sdk_config(&wire.proxy.url(), CUSTOMER_REGION).await;
        let provider = cfn_once::providers::dynamodb_item::DynamoDbItem::new(
            &sdk,
            1_000,
            config.item_tables.clone(),
            config.table_name.clone(),
        );
        let router = Router::new().register(cfn_once::providers::dynamodb_item::DYNAMODB_ITEM_TYPE, provider);
        let app: App = wire.region.app_behind(&wire.proxy, &config, router).await;
        if lose_reply {
            wire.proxy.inject(wire.calls("PutItem"), Fault::ForwardThenReset, 1);
        }
        let mut sent = wire.region.request("create-echo.json").await;
        sent.request["ResourceType"] = json!(cfn_once::providers::dynamodb_item::DYNAMODB_ITEM_TYPE);
        sent.request["ResourceProperties"] = json!({
            "TableName": wire.region.item_table,
            "Region": CUSTOMER_REGION,
            "Key": {"pk": "t1"},
            "Attributes": {"Plan": "new"},
            "Adopt": "true",
        });
        wire.region.route_response_url(&mut sent, &wire.proxy.url());
        wire.region.publish(&sent).await;
        drain(&wire, &app, &sent).await;
        let body = answered_once(&wire, &sent).await;
        let stored = wire.stored("t1").await;
        println!(
            "adopting, reply lost: {lose_reply}: answered {:?} {}, Data {:?}; item Plan {:?}; calls: {}",
            body.status,
            body.reason.as_deref().unwrap_or(""),
            body.data,
            text(stored.as_ref(), "Plan"),
            wire.attempts()
        );
        assert_eq!(text(stored.as_ref(), "Plan").as_deref(), Some("new"), "the write stands");
        if lose_reply {
            assert_eq!(wire.proxy.injected(), 1, "a reply was lost");
        }
        body
    }

    #[tokio::test]
    async fn an_adopting_item_whose_reply_is_lost_says_it_adopted_as_when_the_reply_came() {
        let (kept, lost) = (adopt(false).await, adopt(true).await);
        assert_eq!(kept.status, Status::Success, "{:?}", kept.reason);
        assert_eq!(kept.data.get("Adopted"), Some(&json!("true")));
        assert_eq!(kept.data.get("AdoptedFrom"), Some(&json!("an item cfn-once did not write")));
        assert_eq!(lost.status, Status::Success, "{:?}", lost.reason);
        // Each run has a table of its own: the same Data but for its name.
        fn adoption(body: &ResponseBody) -> (Vec<String>, Option<&serde_json::Value>, Option<&serde_json::Value>) {
            (body.data.keys().cloned().collect(), body.data.get("Adopted"), body.data.get("AdoptedFrom"))
        }
        assert_eq!(adoption(&lost), adoption(&kept));
    }
}
