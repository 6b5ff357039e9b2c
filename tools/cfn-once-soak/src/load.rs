//! The soak's load: many stacks deploying at once, each resource's requests sent as CloudFormation
//! sends them (docs/play.md, "What CloudFormation sends, and when"): the next request of a resource
//! only once the previous one was answered, an Update with the current PhysicalResourceId and the
//! old properties, a rollback Delete after a failed Create with the id of the FAILED answer, a
//! retried deployment reusing a RequestId with a new ResponseURL. Requests go through the
//! ServiceToken topic of the stack's region with a ResponseURL presigned against the PUT proxy, and
//! a share of them is published twice.
//!
//! What is played is drawn beforehand ([`crate::plan`]); each attempt is written in the
//! [ledger](crate::ledger) as it is sent. The harness learns that an answer came from the
//! PUT proxy's log (as CloudFormation learns it from its bucket) and reads the body from S3 to
//! decide the next request; the checks ([`crate::verify`]) read everything again from what
//! landed.

use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::Duration;

use cfn_once::system_clock::SystemClock;
use cfn_once_core::clock::Clock;
use serde_json::{Value, json};

use crate::fleet::Fleet;
use crate::ledger::{Ledger, Sent};
use crate::plan::{
    Class, Expect, LONGEST_RUN_MS, Plan, ResourcePlan, SERVICE_TIMEOUT_MAX_S, StackPlan, Step, UNDELIVERABLE_MARK,
};
use crate::{Rng, sleep_until};
use cfn_once_local::environment::CUSTOMER_REGIONS;
use cfn_once_local::provision;

/// How long a presigned ResponseURL lives, as CloudFormation's do.
const URL_LIFETIME_S: u64 = 7200;

/// Prints a line every 15 s while the load runs.
pub async fn progress(fleet: Arc<Fleet>, ledger: Arc<Ledger>, planned: usize) {
    loop {
        tokio::time::sleep(Duration::from_secs(15)).await;
        let (sent, answered) = ledger.counts();
        let elapsed_s = (SystemClock.now_ms() - ledger.started_ms) / 1000;
        let regions: Vec<String> = fleet
            .regions
            .iter()
            .map(|region| {
                let stats = region.function.stats();
                format!(
                    "{} {}/{} busy, {} invocations, {} killed",
                    region.role.as_str(),
                    region.function.busy(),
                    fleet.concurrency,
                    stats.invocations,
                    stats.killed
                )
            })
            .collect();
        println!(
            "  +{elapsed_s:>4} s  sent {sent}/{planned}, answered {answered}, waiting {} | {}",
            sent - answered,
            regions.join(" | ")
        );
    }
}

/// Plays every resource's life; returns when each has finished or given up.
pub async fn play(fleet: Arc<Fleet>, ledger: Arc<Ledger>, plan: Plan) {
    let mut players = Vec::new();
    for resource in plan.resources.clone() {
        let (fleet, ledger) = (Arc::clone(&fleet), Arc::clone(&ledger));
        let stack = plan.stacks[resource.stack].clone();
        let share = plan.duplicate_share;
        let seed = plan.seed;
        players.push(tokio::spawn(async move {
            let rng = Rng::fork(seed, 10_000 + resource.index as u64);
            Player { fleet, ledger, stack, resource, share, rng }.play(seed).await;
        }));
    }
    for (n, at_ms) in plan.undeliverable_ms.iter().copied().enumerate() {
        let (fleet, ledger) = (Arc::clone(&fleet), Arc::clone(&ledger));
        players.push(tokio::spawn(async move {
            sleep_until(ledger.started_ms + at_ms).await;
            let body = json!({"Soak": UNDELIVERABLE_MARK, "N": n}).to_string();
            let region = CUSTOMER_REGIONS[n % CUSTOMER_REGIONS.len()];
            if publish(&fleet, region, &body).await.is_ok() {
                ledger.undeliverable.fetch_add(1, Ordering::SeqCst);
            }
        }));
    }
    for player in players {
        let _ = player.await;
    }
}

async fn publish(fleet: &Fleet, region: &str, body: &str) -> anyhow::Result<()> {
    let topic = &fleet.environment.file.customer_topics[region];
    let sns = &fleet.sns[region];
    // moto is local: a failed publish is retried, as CloudFormation's own would be.
    let mut last = None;
    for _ in 0..5 {
        match sns.publish().topic_arn(topic).message(body).send().await {
            Ok(_) => return Ok(()),
            Err(error) => last = Some(aws_sdk_sns::error::DisplayErrorContext(error).to_string()),
        }
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
    anyhow::bail!("Publish failed: {}", last.unwrap_or_default())
}

/// The answer CloudFormation read.
#[derive(Debug, Clone)]
struct Answer {
    status: String,
    physical_resource_id: Option<String>,
}

/// What one step of a resource sends, and the answer it expects.
struct Planned {
    kind: &'static str,
    properties: Value,
    resource_type: &'static str,
    expect: Expect,
    /// The value an item's Create or Update writes, checked in the table at the end.
    item_value: Option<String>,
}

/// One resource's life.
struct Player {
    fleet: Arc<Fleet>,
    ledger: Arc<Ledger>,
    stack: StackPlan,
    resource: ResourcePlan,
    share: f64,
    rng: Rng,
}

impl Player {
    async fn play(mut self, seed: u64) {
        sleep_until(self.ledger.started_ms + self.resource.start_ms).await;
        let class = self.resource.class;
        let index = self.resource.index;
        let logical_id = format!("{}{index}", class.logical_prefix());
        let service_token = self.fleet.environment.file.customer_topics[self.stack.region].clone();
        let mut current = json!({});
        let mut physical: Option<String> = None;
        let mut first_attempt: Option<(String, String, usize)> = None; // (request id, message, sent index)
        let steps = self.resource.steps.clone();
        for step in steps {
            let Planned { kind, properties, resource_type, expect, item_value } =
                self.planned(step, &current, &logical_id, seed);
            let mut properties = properties;
            properties["ServiceToken"] = json!(service_token);
            if let Some(timeout) = self.stack.service_timeout_s {
                properties["ServiceTimeout"] = json!(timeout.to_string());
            }
            let request_id = match (step, &first_attempt) {
                (Step::RetryCreate, Some((request_id, _, _))) => request_id.clone(),
                _ => self.rng.uuid(),
            };
            let key = format!("r/{index:05}/{}-{}", kind.to_ascii_lowercase(), self.rng.hex(8));
            let Ok(url) = provision::presigned_put_url(
                &self.fleet.presign,
                &self.fleet.environment.file.response_bucket,
                &key,
                URL_LIFETIME_S,
            )
            .await
            else {
                return;
            };
            let signature = url
                .split(['?', '&'])
                .find_map(|part| part.strip_prefix("X-Amz-Signature="))
                .unwrap_or_default()
                .to_owned();
            let mut request = json!({
                "RequestType": kind,
                "ServiceToken": service_token,
                "ResponseURL": url,
                "StackId": self.stack.stack_id,
                "RequestId": request_id,
                "LogicalResourceId": logical_id,
                "ResourceType": resource_type,
                "ResourceProperties": properties,
            });
            if kind != "Create"
                && let Some(id) = &physical
            {
                request["PhysicalResourceId"] = json!(id);
            }
            if kind == "Update" {
                request["OldResourceProperties"] = current.clone();
            }
            let message = request.to_string();
            let published_ms = SystemClock.now_ms();
            let deadline_ms = published_ms + self.stack.service_timeout_s.unwrap_or(SERVICE_TIMEOUT_MAX_S) * 1000;
            let sent = self.ledger.record(Sent {
                resource: index,
                class,
                step,
                kind,
                stack_id: self.stack.stack_id.clone(),
                request_id: request_id.clone(),
                logical_id: logical_id.clone(),
                key: key.clone(),
                signature,
                published_ms,
                deadline_ms,
                expect: expect.clone(),
                copies: 1,
                item_value,
                late_copy_ms: None,
            });
            if publish(&self.fleet, self.stack.region, &message).await.is_err() {
                return;
            }
            if step == Step::Create && class == Class::Retry {
                first_attempt = Some((request_id.clone(), message.clone(), sent));
            } else if self.rng.chance(self.share) {
                self.duplicate_later(&message, sent);
            }
            let Some(answer) = self.wait(&key, deadline_ms).await else { return };
            // CloudFormation goes on only as the answer says.
            let expected_status = match expect {
                Expect::Success => "SUCCESS",
                Expect::Failed(_) => "FAILED",
            };
            if answer.status != expected_status {
                return;
            }
            if kind != "Delete" {
                current = request["ResourceProperties"].clone();
                if answer.physical_resource_id.is_some() {
                    physical = answer.physical_resource_id;
                }
            }
            if step == Step::RetryCreate
                && let Some((_, first_message, first_sent)) = first_attempt.take()
            {
                self.late_copy(first_message, first_sent, published_ms).await;
            }
        }
    }

    /// What `step` of this resource sends, its properties as they stand (`current`) before it:
    /// the request type, properties, resource type, the answer expected and, for an item, the
    /// value it writes. Draws from the resource's generator, in the order the soak always has.
    fn planned(&mut self, step: Step, current: &Value, logical_id: &str, seed: u64) -> Planned {
        let class = self.resource.class;
        let index = self.resource.index;
        let item_table = self.fleet.environment.item_table.clone();
        let item_region = self.fleet.environment.file.customer_region.clone();
        let (kind, properties, resource_type, expect, item_value) = match (class, step) {
            (_, Step::Delete) => {
                let expect = match class {
                    Class::Panic => Expect::Failed("panicked".into()),
                    _ => Expect::Success,
                };
                ("Delete", current.clone(), resource_type(class, current), expect, None)
            }
            (Class::Item, Step::Create | Step::Update) => {
                let value = format!("v{}-{}", if step == Step::Create { 1 } else { 2 }, self.rng.hex(6));
                let properties = json!({
                    "TableName": item_table,
                    "Region": item_region,
                    "Key": {"pk": format!("soak-{seed}-{index}")},
                    "Attributes": {"Value": value},
                });
                let kind = if step == Step::Create { "Create" } else { "Update" };
                (kind, properties, "Custom::DynamoDBItem", Expect::Success, Some(value))
            }
            (Class::Invalid, Step::Create) => {
                if self.rng.chance(0.5) {
                    // No TableName.
                    let properties = json!({"Key": {"pk": format!("soak-{seed}-{index}")}});
                    ("Create", properties, "Custom::DynamoDBItem", Expect::Failed("TableName".into()), None)
                } else {
                    let properties = json!({"Anything": "at all"});
                    (
                        "Create",
                        properties,
                        "Custom::NobodyServesThis",
                        Expect::Failed("Custom::NobodyServesThis".into()),
                        None,
                    )
                }
            }
            (Class::Panic, Step::Create) => {
                let properties = json!({"PanicWith": format!("soak panic {index}")});
                ("Create", properties, "Custom::Echo", Expect::Failed("panicked".into()), None)
            }
            (Class::Retry, Step::Create) => {
                let properties =
                    json!({"FailWith": "the first deployment fails", "Message": format!("retried {index}")});
                ("Create", properties, "Custom::Echo", Expect::Failed("the first deployment fails".into()), None)
            }
            (Class::Retry, Step::RetryCreate) => {
                let properties = json!({"Message": format!("retried {index}")});
                ("Create", properties, "Custom::Echo", Expect::Success, None)
            }
            (_, Step::Create | Step::Update | Step::RetryCreate) => {
                let mut properties = json!({"Message": format!("{logical_id} {}", self.rng.hex(8))});
                match class {
                    Class::EchoSlow => properties["DelayMs"] = json!(self.rng.range(2_000, 25_000).to_string()),
                    Class::LongRunning => {
                        properties["InProgressForS"] = json!(self.rng.range(10, LONGEST_RUN_MS / 1000).to_string());
                        properties["PollIntervalS"] = json!(self.rng.range(5, 15).to_string());
                    }
                    _ => {}
                }
                let kind = if step == Step::Update { "Update" } else { "Create" };
                (kind, properties, "Custom::Echo", Expect::Success, None)
            }
        };
        Planned { kind, properties, resource_type, expect, item_value }
    }

    /// Publishes `message` again up to 90 s later, as SNS may deliver a message twice.
    fn duplicate_later(&mut self, message: &str, sent: usize) {
        let delay_ms = self.rng.below(90_000);
        let (fleet, ledger, region, message) =
            (Arc::clone(&self.fleet), Arc::clone(&self.ledger), self.stack.region, message.to_owned());
        tokio::spawn(async move {
            tokio::time::sleep(Duration::from_millis(delay_ms)).await;
            if publish(&fleet, region, &message).await.is_ok() {
                ledger.update(sent, |s| s.copies += 1);
                ledger.duplicates.fetch_add(1, Ordering::SeqCst);
            }
        });
    }

    /// Publishes the first attempt again once the retried one is answered and the first
    /// attempt's own copies (the secondary's, delayed) have been handled: it is superseded and
    /// must get no PUT.
    async fn late_copy(&self, message: String, first_sent: usize, retried_ms: u64) {
        let first_published = self.ledger.sent().get(first_sent).map_or(retried_ms, |s| s.published_ms);
        let settled = first_published + self.fleet.deployed.secondary_delay_s * 1000 + 30_000;
        sleep_until(settled.max(SystemClock.now_ms() + 1_000)).await;
        let at_ms = SystemClock.now_ms();
        self.ledger.update(first_sent, |s| s.late_copy_ms = Some(at_ms));
        if publish(&self.fleet, self.stack.region, &message).await.is_ok() {
            self.ledger.update(first_sent, |s| s.copies += 1);
        }
    }

    /// Waits for the answer to `key` until the deadline (or the end of the soak), and reads it.
    async fn wait(&self, key: &str, deadline_ms: u64) -> Option<Answer> {
        let give_up_ms = deadline_ms.min(self.ledger.end_ms);
        while SystemClock.now_ms() < give_up_ms {
            if self.ledger.answered_at(key).is_some() {
                // The PUT landed; read what CloudFormation read.
                for _ in 0..20 {
                    if let Ok(object) = self
                        .fleet
                        .s3
                        .get_object()
                        .bucket(&self.fleet.environment.file.response_bucket)
                        .key(key)
                        .send()
                        .await
                    {
                        let bytes = object.body.collect().await.ok()?.into_bytes();
                        let body: Value = serde_json::from_slice(&bytes).ok()?;
                        return Some(Answer {
                            status: body["Status"].as_str().unwrap_or_default().to_owned(),
                            physical_resource_id: body["PhysicalResourceId"].as_str().map(str::to_owned),
                        });
                    }
                    tokio::time::sleep(Duration::from_millis(250)).await;
                }
                return None;
            }
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
        None
    }
}

/// The ResourceType a resource's requests carry.
fn resource_type(class: Class, current: &Value) -> &'static str {
    match class {
        Class::Item => "Custom::DynamoDBItem",
        Class::Invalid if current.get("Anything").is_some() => "Custom::NobodyServesThis",
        Class::Invalid => "Custom::DynamoDBItem",
        _ => "Custom::Echo",
    }
}
