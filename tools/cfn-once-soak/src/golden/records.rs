//! What a lease table item is, read from the item alone: its [class](class_of), which names its
//! fixture, the [format](format_of) it was written in, and its [shape](shape_of), each
//! attribute's DynamoDB type, which a format keeps.

use std::collections::{BTreeMap, HashMap};

use aws_sdk_dynamodb::types::AttributeValue;
use cfn_once_core::wait_condition::WORK_ID_PREFIX;
use serde_json::Value;

/// A DynamoDB item.
pub type Item = HashMap<String, AttributeValue>;

/// The control item's partition key (`adapters::control_table`).
pub const CONTROL_PK: &str = "control#active";

/// The class of the control item.
pub const CONTROL_CLASS: &str = "control";

/// The class of a lease table item, which names its fixture: `control`, or for a request's
/// record `<answer|work>-<state>`, then `-poll` where a state other than WAITING carries poll
/// fields (`-nopoll` where a WAITING one carries none), and for a COMMITTED one the response's
/// `Status` (`success`, `failed`; a work's signal: `success`, `failure`) and `delivered` or
/// `undelivered`, then `-unsent` where the record says why it was never sent.
pub fn class_of(item: &Item) -> String {
    let text = |name: &str| item.get(name).and_then(|value| value.as_s().ok()).map(String::as_str);
    if text("pk") == Some(CONTROL_PK) {
        return CONTROL_CLASS.to_owned();
    }
    let kind = if text("sk").is_some_and(|sk| sk.starts_with(WORK_ID_PREFIX)) { "work" } else { "answer" };
    let state = text("state").unwrap_or("nostate").to_ascii_lowercase();
    let mut class = format!("{kind}-{state}");
    let poll = item.contains_key("poll_fingerprint");
    if state == "waiting" && !poll {
        class.push_str("-nopoll");
    } else if state != "waiting" && poll {
        class.push_str("-poll");
    }
    if state == "committed" {
        let status = item
            .get("response")
            .and_then(|value| value.as_b().ok())
            .and_then(|blob| serde_json::from_slice::<Value>(blob.as_ref()).ok())
            .and_then(|body| body.get("Status").and_then(Value::as_str).map(str::to_ascii_lowercase))
            .unwrap_or_else(|| "nostatus".to_owned());
        let delivered = item.get("delivered").and_then(|value| value.as_bool().ok()).copied().unwrap_or(false);
        class.push_str(&format!("-{status}-{}", if delivered { "delivered" } else { "undelivered" }));
    }
    if item.contains_key("unsent") {
        class.push_str("-unsent");
    }
    class
}

/// The format an item was written in: its `format`, 1 without one (as the revisions before 0.1.0 wrote them).
pub fn format_of(item: &Item) -> u32 {
    item.get("format").and_then(|value| value.as_n().ok()).and_then(|n| n.parse().ok()).unwrap_or(1)
}

/// An item's shape: each attribute's DynamoDB type by name, and `state`'s value, which is part
/// of the format (a new state is a new format).
pub fn shape_of(item: &Item) -> BTreeMap<String, String> {
    item.iter()
        .map(|(name, value)| {
            let mut kind = type_of(value).to_owned();
            if name == "state"
                && let Ok(state) = value.as_s()
            {
                kind = format!("{kind} {state}");
            }
            (name.clone(), kind)
        })
        .collect()
}

/// The DynamoDB type tag of a value.
fn type_of(value: &AttributeValue) -> &'static str {
    match value {
        AttributeValue::S(_) => "S",
        AttributeValue::N(_) => "N",
        AttributeValue::B(_) => "B",
        AttributeValue::Bool(_) => "BOOL",
        AttributeValue::Null(_) => "NULL",
        AttributeValue::Ss(_) => "SS",
        AttributeValue::Ns(_) => "NS",
        AttributeValue::Bs(_) => "BS",
        AttributeValue::L(_) => "L",
        AttributeValue::M(_) => "M",
        _ => "?",
    }
}
