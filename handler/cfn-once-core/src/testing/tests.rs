//! The kit itself: a poll taken over midway, a wait through the loss of the primary, and the
//! requests it builds.

use std::sync::{Arc, Mutex};

use async_trait::async_trait;
use serde_json::{Value, json};

use super::*;
use crate::echo::Echo;
use crate::provider::{ProviderContext, ProviderError, Step};
use crate::response::Status;

/// One call: which operation, what it was told it took over from, under which fence.
type Seen = (&'static str, Option<u64>, u64);

/// Echo that records, for every call, whether it was told it took over.
#[derive(Clone, Default)]
struct Recording {
    took_over_from: Arc<Mutex<Vec<Seen>>>,
}

impl Recording {
    fn seen(&self) -> Vec<Seen> {
        self.took_over_from.lock().expect("lock").clone()
    }
}

#[async_trait]
impl Provider for Recording {
    type Properties = crate::properties::PropertyMap;
    const UPDATE_THROUGH_CREATE: bool = true;

    async fn create(&self, ctx: &ProviderContext, properties: Self::Properties) -> Result<Step, ProviderError> {
        self.took_over_from.lock().expect("lock").push(("create", ctx.took_over_from, ctx.fence.value));
        Echo.create(ctx, properties).await
    }

    async fn delete(
        &self,
        ctx: &ProviderContext,
        id: &str,
        properties: Self::Properties,
    ) -> Result<Step<()>, ProviderError> {
        Echo.delete(ctx, id, properties).await
    }

    async fn poll(&self, ctx: &ProviderContext, state: Value) -> Result<Step, ProviderError> {
        self.took_over_from.lock().expect("lock").push(("poll", ctx.took_over_from, ctx.fence.value));
        Echo.poll(ctx, state).await
    }
}

#[test]
fn a_poll_taken_over_midway_is_told_so_and_runs_again() {
    let recording = Recording::default();
    let mut kit = ProviderTest::new().provider("Custom::Wait", recording.clone());
    let request = kit.create_request("Custom::Wait", json!({"InProgressForS": "30", "PollIntervalS": "10"}));
    let answer = kit.take_over_mid_poll(&request);
    assert_eq!(answer.status(), Some(Status::Success), "{:?}", answer.disposition);
    let seen = recording.seen();
    assert_eq!(seen[0], ("create", None, 1), "a first run takes over from nobody");
    // The primary's poll under fence 2 died before it reached the provider.
    assert_eq!(seen[1], ("poll", Some(2), 3), "the poll the secondary took from the dead poller");
    assert!(seen[2..].iter().all(|(_, from, _)| from.is_none()), "later polls follow finished waits: {seen:?}");
    assert_eq!(kit.puts(&request).len(), 1);
}

#[test]
fn a_wait_survives_the_loss_of_the_primary() {
    let mut kit = ProviderTest::new().provider("Custom::Echo", Echo);
    let request =
        kit.create_request("Custom::Echo", json!({"InProgressForS": "60", "PollIntervalS": "10", "Size": "1"}));
    let answer = kit.lose_primary_during_wait(&request);
    assert_eq!((answer.status(), answer.data().get("Size")), (Some(Status::Success), Some(&json!("1"))));
    assert_eq!(kit.puts(&request).len(), 1);
    // Polled every 10 s plus the secondary's lag (it waits a few seconds for a primary).
    assert!(kit.provider_polls() >= 3, "the secondary polled it to the end: {}", kit.provider_polls());
}

#[test]
fn requests_are_built_for_updates_deletes_timeouts_and_other_resources() {
    let mut kit = ProviderTest::new().provider("Custom::Echo", Echo);
    let update = kit.update_request("Custom::Echo", "id-1", json!({"A": "2"}), json!({"A": "1"}));
    assert_eq!(
        (update.request["RequestType"].clone(), update.request["OldResourceProperties"]["A"].clone()),
        (json!("Update"), json!("1"))
    );
    let delete =
        kit.delete_request("Custom::Echo", "id-1", json!({})).service_timeout_s(60).logical_resource_id("Other");
    assert_eq!(delete.request["ResourceProperties"]["ServiceTimeout"], json!("60"));
    assert_eq!(delete.request["LogicalResourceId"], json!("Other"));
    assert_eq!(kit.deliver(&delete).status(), Some(Status::Success));
    let pending = Answer { disposition: Disposition::Retry { delay_s: 5, why: "waiting".into() }, body: None };
    assert_eq!(
        (pending.status(), pending.physical_resource_id(), pending.data().len()),
        (None, "", 0),
        "no panic while pending"
    );
}
