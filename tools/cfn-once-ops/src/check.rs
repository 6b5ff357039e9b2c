//! `cfn-once check`: whether a deployed pair (or the local environment) is wired as the
//! templates intend, item by item. What is read is gathered first ([`gather`]: SQS, SNS,
//! DynamoDB and, deployed, Lambda's function configuration); [`judge`] then compares it with what
//! the templates set, without I/O, so each rule is a plain function tested on its own.
//!
//! The rules, as `infra/` writes them:
//! - every customer topic is subscribed to both regional queues, with the `RawMessageDelivery`
//!   the handlers are told (`infra/customer.yaml`'s subscriptions, `CFN_ONCE_RAW_DELIVERY`);
//! - the primary queue has no delay and the secondary's `DelaySeconds` is the
//!   `SecondaryDelaySeconds` the primary counts failover from (`CFN_ONCE_SECONDARY_DELAY_S`);
//! - each queue redrives to a DLQ that exists, with the `maxReceiveCount` the handler spaces its
//!   backoffs for (`CFN_ONCE_MAX_RECEIVE_COUNT`), and its visibility timeout is the function's
//!   timeout plus 60 s (the `Timeouts` mapping), which the handler is told
//!   (`CFN_ONCE_VISIBILITY_TIMEOUT_S`). Lambda also refuses a visibility timeout below the
//!   function's ("Your function's timeout must be less than or equal to the queue's visibility
//!   timeout", <https://docs.aws.amazon.com/lambda/latest/dg/services-sqs-configure.html>);
//! - the lease table has the key schema the lease store uses and, on AWS, is MRSC with its
//!   replicas in both handler regions and its witness (moto keeps one plain table: said, not
//!   checked, locally);
//! - the handlers' `ServiceTopicArns` are exactly the customer topics, and no other topic
//!   delivers to the queues (the handler would refuse its envelopes);
//! - the `control#active` item names the primary, or is absent (the primary is active).
//!
//! Alarms are not checked by this version: neither the workspace nor the local environment has
//! CloudWatch (the item says so and how to look).

pub mod gather;

use std::collections::BTreeSet;

use serde::Serialize;

/// How an item stands.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub enum Status {
    Ok,
    Miswired,
    /// Could not be read (no permission, not there, no answer): not shown to be wired, so the
    /// check fails; the detail says what the read answered.
    Unreadable,
    /// Not checked here, and why is in the detail.
    NotChecked,
}

/// One thing checked.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Item {
    pub name: String,
    pub status: Status,
    /// What was found, and for a miswiring what it breaks and what to do.
    pub detail: String,
}

/// Every item of one check.
#[derive(Debug, Clone, Serialize)]
pub struct Report {
    /// What was checked: the env file, or the deployment's regions.
    pub target: String,
    pub items: Vec<Item>,
}

impl Report {
    /// No item is miswired.
    pub fn passed(&self) -> bool {
        self.items.iter().all(|item| !matches!(item.status, Status::Miswired | Status::Unreadable))
    }

    pub fn render(&self) -> String {
        let mut lines = vec![format!("check of {}", self.target)];
        for item in &self.items {
            let status = match item.status {
                Status::Ok => "OK",
                Status::Miswired => "MISWIRED",
                Status::Unreadable => "UNREADABLE",
                Status::NotChecked => "NOT CHECKED",
            };
            lines.push(format!("{status:<11} {}: {}", item.name, item.detail));
        }
        let miswired = self.items.iter().filter(|i| i.status == Status::Miswired).count();
        let unreadable = self.items.iter().filter(|i| i.status == Status::Unreadable).count();
        lines.push(match (miswired, unreadable) {
            (0, 0) => format!("{} items, none miswired", self.items.len()),
            (_, 0) => format!("{} items, {miswired} miswired", self.items.len()),
            (_, _) => format!("{} items, {miswired} miswired, {unreadable} unreadable", self.items.len()),
        });
        lines.join("\n")
    }
}

/// What the templates intend, from the deployment's facts or the env file.
#[derive(Debug, Clone)]
pub struct Expected {
    /// Checking AWS itself (replicas, witness and consistency are readable there).
    pub on_aws: bool,
    pub primary_region: String,
    pub secondary_region: String,
    /// The MRSC witness (AWS only).
    pub witness_region: Option<String>,
    pub table: String,
    /// Every customer region's topic, by region.
    pub topics: Vec<(String, String)>,
}

/// One handler region's queue as read.
#[derive(Debug, Clone, Default)]
pub struct QueueSeen {
    pub arn: String,
    pub delay_s: Option<u32>,
    pub visibility_s: Option<u32>,
    /// `None`: no redrive policy.
    pub redrive: Option<RedriveSeen>,
}

#[derive(Debug, Clone)]
pub struct RedriveSeen {
    pub dlq_arn: String,
    pub max_receive_count: Option<u32>,
    /// Whether the DLQ it names exists (GetQueueUrl found it).
    pub dlq_exists: bool,
}

/// What a handler region's function is told (its configuration deployed, the env file locally).
#[derive(Debug, Clone)]
pub struct HandlerSeen {
    pub timeout_s: u32,
    pub secondary_delay_s: Option<u32>,
    pub visibility_timeout_s: Option<u32>,
    pub max_receive_count: Option<u32>,
    pub raw_delivery: bool,
    pub topic_arns: Vec<String>,
}

/// A subscription to an SQS queue.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SubscriptionSeen {
    pub topic_arn: String,
    pub queue_arn: String,
    pub raw: bool,
}

#[derive(Debug, Clone)]
pub struct TableSeen {
    /// (attribute, HASH or RANGE).
    pub key: Vec<(String, String)>,
    pub consistency: Option<String>,
    pub replicas: Vec<String>,
    pub witnesses: Vec<String>,
}

/// Everything read, each part with the error that kept it from being read.
#[derive(Debug, Clone)]
pub struct Observed {
    /// Primary, then secondary.
    pub queues: [Result<QueueSeen, String>; 2],
    pub handlers: [Result<HandlerSeen, String>; 2],
    /// Each expected topic that could not be read, with why.
    pub topics_unreadable: Vec<(String, String)>,
    /// Every subscription of an expected topic, and every one delivering to the queues.
    pub subscriptions: Vec<SubscriptionSeen>,
    pub table: Result<TableSeen, String>,
    pub control: Result<Option<String>, String>,
}

const ROLES: [&str; 2] = ["primary", "secondary"];

fn item(name: impl Into<String>, status: Status, detail: impl Into<String>) -> Item {
    Item { name: name.into(), status, detail: detail.into() }
}

/// Every item, in a fixed order: table, queues, topics, handlers' topics, alarms, control.
pub fn judge(expected: &Expected, observed: &Observed) -> Vec<Item> {
    let mut items = vec![table(expected, &observed.table)];
    items.extend(queues(observed));
    items.extend(topics(expected, observed));
    items.push(service_topics(expected, observed));
    items.push(item(
        "alarms",
        Status::NotChecked,
        if expected.on_aws {
            "this build reads no CloudWatch (aws-sdk-cloudwatch is not in the workspace): `aws cloudwatch describe-alarms --alarm-name-prefix <Installation>-` in each region lists them"
        } else {
            "the local environment has no CloudWatch alarms (cfn-once local plays none); the templates' alarms are checked by tests/it/templates"
        },
    ));
    items.push(control(expected, &observed.control));
    items
}

fn table(expected: &Expected, seen: &Result<TableSeen, String>) -> Item {
    let name = format!("lease table {}", expected.table);
    let table = match seen {
        Ok(table) => table,
        Err(error) => return item(name, Status::Unreadable, format!("not readable: {error}")),
    };
    let (pk, sk) = cfn_once::adapters::dynamodb_lease::KEY_ATTRIBUTES;
    let wanted = vec![(pk.to_owned(), "HASH".to_owned()), (sk.to_owned(), "RANGE".to_owned())];
    if table.key != wanted {
        return item(
            name,
            Status::Miswired,
            format!(
                "key schema {:?}, not {pk} HASH + {sk} RANGE: the lease store cannot address its records",
                table.key
            ),
        );
    }
    if !expected.on_aws {
        return item(
            name,
            Status::Ok,
            format!(
                "key {pk} HASH + {sk} RANGE; replicas, witness and MRSC are checked on AWS only (moto keeps one table and no global tables)"
            ),
        );
    }
    let mut problems = Vec::new();
    if table.consistency.as_deref() != Some("STRONG") {
        problems.push(format!(
            "MultiRegionConsistency is {:?}, not STRONG: two regions could both win one lease",
            table.consistency.as_deref().unwrap_or("unset (a single-region table)")
        ));
    }
    // The table's own region, where it is described, is a replica whether or not the list names it.
    let mut replicas: BTreeSet<&str> = table.replicas.iter().map(String::as_str).collect();
    replicas.insert(&expected.primary_region);
    let wanted: BTreeSet<&str> = [expected.primary_region.as_str(), expected.secondary_region.as_str()].into();
    if replicas != wanted {
        problems.push(format!("replicas {replicas:?}, not {wanted:?}"));
    }
    if let Some(witness) = &expected.witness_region
        && table.witnesses != [witness.clone()]
    {
        problems.push(format!("witnesses {:?}, not [{witness}]", table.witnesses));
    }
    if problems.is_empty() {
        item(
            name,
            Status::Ok,
            format!("key {pk} HASH + {sk} RANGE, MRSC, replicas {wanted:?}, witness {:?}", table.witnesses),
        )
    } else {
        item(name, Status::Miswired, problems.join("; "))
    }
}

fn queues(observed: &Observed) -> Vec<Item> {
    let mut items = Vec::new();
    for (index, role) in ROLES.into_iter().enumerate() {
        let queue = match &observed.queues[index] {
            Ok(queue) => queue,
            Err(error) => {
                items.push(item(format!("{role} queue"), Status::Unreadable, format!("not readable: {error}")));
                continue;
            }
        };
        let handler = observed.handlers[index].as_ref();
        items.push(delay(role, queue, observed));
        items.push(redrive(role, queue, handler));
        items.push(visibility(role, queue, handler));
    }
    items
}

fn delay(role: &str, queue: &QueueSeen, observed: &Observed) -> Item {
    let name = format!("{role} queue delay");
    let Some(delay_s) = queue.delay_s else { return item(name, Status::Miswired, "no DelaySeconds attribute") };
    if role == "primary" {
        return if delay_s == 0 {
            item(name, Status::Ok, "DelaySeconds 0: the primary sees each copy first")
        } else {
            item(
                name,
                Status::Miswired,
                format!("DelaySeconds {delay_s}, not 0: the primary must see each copy before the secondary"),
            )
        };
    }
    let counted = match &observed.handlers[0] {
        Ok(HandlerSeen { secondary_delay_s: Some(counted), .. }) => *counted,
        Ok(_) => return item(name, Status::Miswired, "the primary's function has no CFN_ONCE_SECONDARY_DELAY_S"),
        Err(error) => {
            return item(
                name,
                Status::NotChecked,
                format!("DelaySeconds {delay_s}; the primary's setting is not readable: {error}"),
            );
        }
    };
    if delay_s == 0 {
        item(
            name,
            Status::Miswired,
            format!(
                "DelaySeconds 0 (the primary counts {counted} s): the secondary sees each copy as soon as the primary and races a healthy primary; set SecondaryDelaySeconds={counted} on the secondary stack"
            ),
        )
    } else if delay_s != counted {
        item(
            name,
            Status::Miswired,
            format!(
                "DelaySeconds {delay_s}, but the primary counts failover from {counted} s: give both regional stacks one SecondaryDelaySeconds"
            ),
        )
    } else {
        item(
            name,
            Status::Ok,
            format!("DelaySeconds {delay_s}, the SecondaryDelaySeconds the primary counts failover from"),
        )
    }
}

fn redrive(role: &str, queue: &QueueSeen, handler: Result<&HandlerSeen, &String>) -> Item {
    let name = format!("{role} queue redrive");
    let Some(redrive) = &queue.redrive else {
        return item(
            name,
            Status::Miswired,
            "no redrive policy: a copy that keeps failing is received forever and nothing pages; redeploy the regional stack (RedrivePolicy)",
        );
    };
    if !redrive.dlq_exists {
        return item(
            name,
            Status::Miswired,
            format!(
                "the DLQ {} does not exist: the handler's own moves fail and SQS cannot dead-letter; redeploy the regional stack",
                redrive.dlq_arn
            ),
        );
    }
    let count = redrive.max_receive_count.map_or("none".into(), |c| c.to_string());
    match handler {
        Ok(HandlerSeen { max_receive_count: Some(told), .. }) if redrive.max_receive_count != Some(*told) => item(
            name,
            Status::Miswired,
            format!(
                "maxReceiveCount {count}, but the handler spaces its backoffs for {told}: a copy could reach the DLQ before its deadline"
            ),
        ),
        _ => item(name, Status::Ok, format!("to {} (exists), maxReceiveCount {count}", redrive.dlq_arn)),
    }
}

fn visibility(role: &str, queue: &QueueSeen, handler: Result<&HandlerSeen, &String>) -> Item {
    let name = format!("{role} queue visibility");
    let Some(visibility_s) = queue.visibility_s else {
        return item(name, Status::Miswired, "no VisibilityTimeout attribute");
    };
    let handler = match handler {
        Ok(handler) => handler,
        Err(error) => {
            return item(
                name,
                Status::NotChecked,
                format!("VisibilityTimeout {visibility_s}; the function is not readable: {error}"),
            );
        }
    };
    let timeout_s = handler.timeout_s;
    let wanted = timeout_s + 60;
    if visibility_s < timeout_s {
        item(
            name,
            Status::Miswired,
            format!(
                "VisibilityTimeout {visibility_s} s, below the function's timeout {timeout_s} s: a copy reappears while its invocation still runs (Lambda refuses such a mapping); infra/regional.yaml sets {wanted}"
            ),
        )
    } else if visibility_s != wanted {
        item(
            name,
            Status::Miswired,
            format!(
                "VisibilityTimeout {visibility_s} s, not the function's timeout {timeout_s} s + 60 = {wanted} s that infra/regional.yaml sets"
            ),
        )
    } else if handler.visibility_timeout_s.is_some_and(|told| told != visibility_s) {
        item(
            name,
            Status::Miswired,
            format!(
                "VisibilityTimeout {visibility_s} s, but the handler is told {:?} (CFN_ONCE_VISIBILITY_TIMEOUT_S)",
                handler.visibility_timeout_s
            ),
        )
    } else {
        item(name, Status::Ok, format!("VisibilityTimeout {visibility_s} s = function timeout {timeout_s} s + 60"))
    }
}

fn topics(expected: &Expected, observed: &Observed) -> Vec<Item> {
    let raw = observed.handlers.iter().find_map(|h| h.as_ref().ok()).map(|h| h.raw_delivery);
    let queue_arns: Vec<Option<&str>> =
        observed.queues.iter().map(|q| q.as_ref().ok().map(|q| q.arn.as_str())).collect();
    let mut items = Vec::new();
    for (region, topic) in &expected.topics {
        let name = format!("topic {topic}");
        if let Some((_, error)) = observed.topics_unreadable.iter().find(|(t, _)| t == topic) {
            items.push(item(name, Status::Unreadable, format!("not readable in {region}: {error}")));
            continue;
        }
        let mut problems = Vec::new();
        let mut found = Vec::new();
        for (index, role) in ROLES.into_iter().enumerate() {
            let Some(queue_arn) = queue_arns[index] else { continue };
            let subscriptions: Vec<&SubscriptionSeen> =
                observed.subscriptions.iter().filter(|s| s.topic_arn == *topic && s.queue_arn == queue_arn).collect();
            match (subscriptions.first(), raw) {
                (None, _) => {
                    problems.push(format!("not subscribed to the {role} queue: the {role} never gets its requests"))
                }
                (Some(s), Some(raw)) if s.raw != raw => problems.push(format!(
                    "its {role} subscription has RawMessageDelivery={}, the handlers are told {raw}",
                    s.raw
                )),
                (Some(s), _) => found.push(format!("{role} (raw {})", s.raw)),
            }
        }
        if problems.is_empty() {
            items.push(item(name, Status::Ok, format!("subscribed to {}", found.join(" and "))));
        } else {
            items.push(item(name, Status::Miswired, problems.join("; ")));
        }
    }
    items
}

fn service_topics(expected: &Expected, observed: &Observed) -> Item {
    let name = "ServiceTopicArns";
    let wanted: BTreeSet<&str> = expected.topics.iter().map(|(_, t)| t.as_str()).collect();
    let mut problems = Vec::new();
    for (index, role) in ROLES.into_iter().enumerate() {
        match &observed.handlers[index] {
            Ok(handler) => {
                let told: BTreeSet<&str> = handler.topic_arns.iter().map(String::as_str).collect();
                for missing in wanted.difference(&told) {
                    problems.push(format!("the {role} handler does not accept {missing}: its requests go to the DLQ"));
                }
                for extra in told.difference(&wanted) {
                    problems.push(format!("the {role} handler accepts {extra}, which is no customer topic"));
                }
            }
            Err(error) => problems.push(format!("the {role} function is not readable: {error}")),
        }
    }
    let queue_arns: Vec<&str> =
        observed.queues.iter().filter_map(|q| q.as_ref().ok().map(|q| q.arn.as_str())).collect();
    let foreign: BTreeSet<&str> = observed
        .subscriptions
        .iter()
        .filter(|s| queue_arns.contains(&s.queue_arn.as_str()) && !wanted.contains(s.topic_arn.as_str()))
        .map(|s| s.topic_arn.as_str())
        .collect();
    for topic in foreign {
        problems.push(format!(
            "{topic} delivers to the queues but is not in ServiceTopicArns: the handlers refuse its requests (add it to both regional stacks, or unsubscribe it)"
        ));
    }
    if problems.is_empty() {
        item(
            name,
            Status::Ok,
            format!(
                "both handlers accept exactly the {} customer topics, and no other topic feeds the queues",
                wanted.len()
            ),
        )
    } else {
        item(name, Status::Miswired, problems.join("; "))
    }
}

fn control(expected: &Expected, seen: &Result<Option<String>, String>) -> Item {
    let name = "active region";
    match seen {
        Ok(None) => item(
            name,
            Status::Ok,
            format!("no control#active item: the primary ({}) is active", expected.primary_region),
        ),
        Ok(Some(region)) if *region == expected.primary_region => {
            item(name, Status::Ok, format!("control#active names the primary ({region})"))
        }
        Ok(Some(region)) => item(
            name,
            Status::Miswired,
            format!(
                "control#active names {region}, not the primary {}: the primary is drained and every request waits for the secondary's head start (a drill or an upgrade left it flipped?); undo with `cfn-once drill` or put the primary back in the item",
                expected.primary_region
            ),
        ),
        Err(error) => item(name, Status::Unreadable, format!("control#active not readable: {error}")),
    }
}

#[cfg(test)]
mod tests;
