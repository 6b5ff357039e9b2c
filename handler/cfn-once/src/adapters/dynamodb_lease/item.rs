//! A lease record as a DynamoDB item and back: the attribute names, the whole item a `leave`
//! writes, and the reading of a stored item into the domain record, where a malformed item (one
//! written by hand) is a permanent error, never a panic.

use std::collections::HashMap;

use aws_sdk_dynamodb::primitives::Blob;
use aws_sdk_dynamodb::types::AttributeValue;
use cfn_once_core::fingerprint::Fingerprint;
use cfn_once_core::lease::{LeaseRecord, LeaseState, PollRecord, RECORD_FORMAT, RequestLabel, StoreError};
use cfn_once_core::request::{RequestKey, StackArn};

/// A DynamoDB item.
pub(super) type Item = HashMap<String, AttributeValue>;

/// Attribute names, in one place.
pub(super) mod attr {
    pub const FORMAT: &str = "format";
    pub const PK: &str = "pk";
    pub const SK: &str = "sk";
    pub const FENCE: &str = "fence";
    pub const OWNER: &str = "owner";
    pub const LEASE_UNTIL: &str = "lease_until_ms";
    pub const HEARTBEAT: &str = "heartbeat";
    pub const STATE: &str = "state";
    pub const FINGERPRINT: &str = "fingerprint";
    pub const ATTEMPTS: &str = "attempts";
    pub const SENT: &str = "sent_ms";
    pub const RESPONSE: &str = "response";
    pub const DELIVERED: &str = "delivered";
    pub const UNSENT: &str = "unsent";
    pub const CREATED: &str = "created_ms";
    pub const UPDATED: &str = "updated_ms";
    pub const EXPIRES: &str = "expires_ms";
    pub const POLL_FINGERPRINT: &str = "poll_fingerprint";
    pub const POLL_STATE: &str = "poll_state";
    pub const POLL_AT: &str = "poll_at_ms";
    pub const WAITING_SINCE: &str = "waiting_since_ms";
    pub const POLLS: &str = "polls";
    pub const LOGICAL_ID: &str = "logical_id";
    pub const REQUEST_TYPE: &str = "request_type";
    pub const RESOURCE_TYPE: &str = "resource_type";
    pub const REPLACES: &str = "replaces";
    pub const WRITER: &str = "writer";
}

/// The item's key: the StackId and the RequestId.
pub(super) fn key_item(key: &RequestKey) -> Item {
    HashMap::from([
        (attr::PK.to_owned(), AttributeValue::S(key.stack_id.to_string())),
        (attr::SK.to_owned(), AttributeValue::S(key.request_id.clone())),
    ])
}

/// A record as a whole item, the inverse of [`parse_record`] (an empty set of attempts, which
/// DynamoDB cannot store, is left out, as are the response and poll fields when absent).
pub(super) fn record_item(record: &LeaseRecord) -> Item {
    let text = |value: &str| AttributeValue::S(value.to_owned());
    let mut item = key_item(&record.key);
    item.extend([
        // Written by this handler, in its format, whatever format it was read in.
        (attr::FORMAT.to_owned(), number(u64::from(RECORD_FORMAT))),
        (attr::FENCE.to_owned(), number(record.fence)),
        (attr::OWNER.to_owned(), text(&record.owner)),
        (attr::LEASE_UNTIL.to_owned(), number(record.lease_until_ms)),
        (attr::HEARTBEAT.to_owned(), number(record.heartbeat)),
        (attr::STATE.to_owned(), text(record.state.as_str())),
        (attr::FINGERPRINT.to_owned(), text(record.fingerprint.as_str())),
        (attr::SENT.to_owned(), number(record.sent_ms)),
        (attr::CREATED.to_owned(), number(record.created_ms)),
        (attr::UPDATED.to_owned(), number(record.updated_ms)),
        (attr::EXPIRES.to_owned(), number(record.expires_ms)),
        (attr::LOGICAL_ID.to_owned(), text(&record.label.logical_resource_id)),
        (attr::REQUEST_TYPE.to_owned(), text(&record.label.request_type)),
        (attr::RESOURCE_TYPE.to_owned(), text(&record.label.resource_type)),
    ]);
    // Left out when empty, so that the first write naming a replaced work sets it.
    if !record.label.replaces.is_empty() {
        item.insert(attr::REPLACES.to_owned(), text(&record.label.replaces));
    }
    if !record.attempts.is_empty() {
        let attempts = record.attempts.iter().map(|attempt| attempt.as_str().to_owned()).collect();
        item.insert(attr::ATTEMPTS.to_owned(), AttributeValue::Ss(attempts));
    }
    if let Some(response) = &record.response {
        item.insert(attr::RESPONSE.to_owned(), AttributeValue::B(Blob::new(response.clone())));
    }
    if record.delivered {
        item.insert(attr::DELIVERED.to_owned(), AttributeValue::Bool(true));
    }
    // As the record holds it: a `leave` puts back the record it found, and its stamp with it.
    if let Some(writer) = &record.writer {
        item.insert(attr::WRITER.to_owned(), text(writer));
    }
    if let Some(why) = &record.unsent {
        item.insert(attr::UNSENT.to_owned(), text(why));
    }
    if let Some(poll) = &record.poll {
        item.extend([
            (attr::POLL_FINGERPRINT.to_owned(), text(poll.fingerprint.as_str())),
            (attr::POLL_STATE.to_owned(), text(&poll.state)),
            (attr::POLL_AT.to_owned(), number(poll.poll_at_ms)),
            (attr::WAITING_SINCE.to_owned(), number(poll.waiting_since_ms)),
            (attr::POLLS.to_owned(), number(u64::from(poll.polls))),
        ]);
    }
    item
}

/// Reads a stored item back into the domain record; a malformed item is a permanent error
/// (somebody wrote the table by hand), never a panic.
pub(super) fn parse_record(key: &RequestKey, item: &Item) -> Result<LeaseRecord, StoreError> {
    let bad = |field: &str| StoreError::Permanent(format!("lease record has no valid {field}"));
    let string = |field: &str| item.get(field).and_then(|v| v.as_s().ok()).cloned();
    let number = |field: &str| item.get(field).and_then(|v| v.as_n().ok()).and_then(|n| n.parse::<u64>().ok());
    // The format first: a newer one may mean anything by the rest.
    let format = match item.get(attr::FORMAT) {
        None => 1,
        Some(value) => value
            .as_n()
            .ok()
            .and_then(|n| n.parse::<u32>().ok())
            .ok_or_else(|| bad(attr::FORMAT))?,
    };
    if format > RECORD_FORMAT {
        let settled = item.get(attr::DELIVERED).and_then(|v| v.as_bool().ok()).copied().unwrap_or(false);
        return Err(StoreError::NewerFormat { format, settled });
    }
    Ok(LeaseRecord {
        format,
        key: key.clone(),
        fence: number(attr::FENCE).ok_or_else(|| bad(attr::FENCE))?,
        owner: string(attr::OWNER).unwrap_or_default(),
        lease_until_ms: number(attr::LEASE_UNTIL).unwrap_or(0),
        heartbeat: number(attr::HEARTBEAT).unwrap_or(0),
        state: string(attr::STATE).as_deref().and_then(LeaseState::parse).ok_or_else(|| bad(attr::STATE))?,
        fingerprint: Fingerprint::from_stored(string(attr::FINGERPRINT).ok_or_else(|| bad(attr::FINGERPRINT))?),
        attempts: item
            .get(attr::ATTEMPTS)
            .and_then(|v| v.as_ss().ok())
            .map(|set| set.iter().cloned().map(Fingerprint::from_stored).collect())
            .unwrap_or_default(),
        response: item.get(attr::RESPONSE).and_then(|v| v.as_b().ok()).map(|blob| blob.as_ref().to_vec()),
        delivered: item.get(attr::DELIVERED).and_then(|v| v.as_bool().ok()).copied().unwrap_or(false),
        unsent: string(attr::UNSENT),
        sent_ms: number(attr::SENT).unwrap_or(0),
        created_ms: number(attr::CREATED).unwrap_or(0),
        updated_ms: number(attr::UPDATED).unwrap_or(0),
        expires_ms: number(attr::EXPIRES).unwrap_or(0),
        poll: parse_poll(item)?,
        label: RequestLabel {
            logical_resource_id: string(attr::LOGICAL_ID).unwrap_or_default(),
            request_type: string(attr::REQUEST_TYPE).unwrap_or_default(),
            resource_type: string(attr::RESOURCE_TYPE).unwrap_or_default(),
            replaces: string(attr::REPLACES).unwrap_or_default(),
        },
        writer: string(attr::WRITER),
    })
}

/// The poll fields, all or nothing: a record with some but not all of them was written by hand.
fn parse_poll(item: &Item) -> Result<Option<PollRecord>, StoreError> {
    let string = |field: &str| item.get(field).and_then(|v| v.as_s().ok()).cloned();
    let number = |field: &str| item.get(field).and_then(|v| v.as_n().ok()).and_then(|n| n.parse::<u64>().ok());
    let Some(fingerprint) = string(attr::POLL_FINGERPRINT) else {
        return Ok(None);
    };
    let bad = |field: &str| StoreError::Permanent(format!("lease record has a poll without a valid {field}"));
    Ok(Some(PollRecord {
        fingerprint: Fingerprint::from_stored(fingerprint),
        state: string(attr::POLL_STATE).ok_or_else(|| bad(attr::POLL_STATE))?,
        poll_at_ms: number(attr::POLL_AT).ok_or_else(|| bad(attr::POLL_AT))?,
        waiting_since_ms: number(attr::WAITING_SINCE).ok_or_else(|| bad(attr::WAITING_SINCE))?,
        polls: number(attr::POLLS).and_then(|n| u32::try_from(n).ok()).ok_or_else(|| bad(attr::POLLS))?,
    }))
}

/// A scanned item as a lease record, if it is one (StackId ARN key, a fence).
pub(super) fn lease_record(item: &Item) -> Option<LeaseRecord> {
    let text = |field: &str| item.get(field).and_then(|value| value.as_s().ok()).cloned();
    // Only lease records are keyed by a stack ARN (see `StackArn`): the control item is not.
    let key = RequestKey { stack_id: StackArn::parse(&text(attr::PK)?)?, request_id: text(attr::SK)? };
    parse_record(&key, item).ok()
}

/// A number attribute.
pub(super) fn number(value: u64) -> AttributeValue {
    AttributeValue::N(value.to_string())
}
