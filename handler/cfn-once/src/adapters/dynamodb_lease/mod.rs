//! The DynamoDB lease store: [`LeaseStore`] over aws-sdk-dynamodb.
//!
//! Each operation is one conditional UpdateItem (read is one consistent GetItem). Acquire takes
//! the lease and increments the fence in a single write (`ADD fence :one`), returning the item
//! as it was before (`ReturnValues = ALL_OLD`: the new fence is the old one plus one, and the old
//! fingerprint tells a takeover of the same attempt from a fresh start); on a failed condition it
//! returns the old item too (`ReturnValuesOnConditionCheckFailure = ALL_OLD`), so the caller
//! needs no second read. The poll fields (a provider's work in progress) are kept by acquires,
//! written by waits and removed by the commit. The
//! condition is `cfn_once_core::lease::admits` written as a ConditionExpression; the shared
//! contract suite holds the two to the same behaviour. This is the only place where
//! `ConditionalCheckFailedException` exists: above it, it is a domain answer.
//!
//! Table layout: partition key `pk` = StackId, sort key `sk` = RequestId, both strings.
//!
//! The store's calls are here; beside them, `item.rs` turns a record into an item and back, and
//! `errors.rs` turns a failed call into the port's `StoreError`.

mod errors;
mod item;

use async_trait::async_trait;
use aws_sdk_dynamodb::Client;
use aws_sdk_dynamodb::config::http::HttpResponse;
use aws_sdk_dynamodb::error::SdkError;
use aws_sdk_dynamodb::operation::put_item::PutItemError;
use aws_sdk_dynamodb::operation::update_item::UpdateItemError;
use aws_sdk_dynamodb::primitives::Blob;
use aws_sdk_dynamodb::types::{AttributeValue, ReturnValue, ReturnValuesOnConditionCheckFailure};
use cfn_once_core::lease::{
    Acquire, AcquireRequest, Conditional, LeaseRecord, LeaseState, LeaseStore, PollRecord, RECORD_FORMAT, StoreError,
    writer_stamp,
};
use cfn_once_core::request::RequestKey;

use self::errors::{of_failure, store_error};
use self::item::{Item, attr, key_item, lease_record, number, parse_record, record_item};
use crate::aws::{Refresh, classify};

/// The placeholders of the format clause every write carries.
const FORMAT_NAME: &str = "#cfn_once_format";
const FORMAT_VALUE: &str = ":cfn_once_format";

/// The placeholders of the writer's stamp every update carries (`lease::writer_stamp`).
const WRITER_NAME: &str = "#cfn_once_writer";
const WRITER_VALUE: &str = ":cfn_once_writer";

/// `condition`, holding only on a record of a format this handler knows: absent (format 1, or
/// no record) or not newer than [`RECORD_FORMAT`]. A record of a newer format refuses every
/// write, and the refusal's old item is read as [`StoreError::NewerFormat`] (`parse_record`).
fn with_format(condition: &str) -> String {
    format!("(attribute_not_exists({FORMAT_NAME}) OR {FORMAT_NAME} <= {FORMAT_VALUE}) AND ({condition})")
}

const ACQUIRE_UPDATE: &str = "SET #owner = :owner, #lease_until = :lease_until, #state = :running, \
     #fingerprint = :fp, #sent = :sent, #heartbeat = :zero, #created = if_not_exists(#created, :now), \
     #updated = :now, #expires = :expires, \
     #logical_id = :logical_id, #request_type = :request_type, #resource_type = :resource_type \
     REMOVE #response, #delivered, #unsent \
     ADD #fence :one, #attempts :fp_set";

/// A close (`LeaseStore::close`): the acquire's update, but COMMITTED with the signal at once,
/// and no work in progress left.
const CLOSE_UPDATE: &str = "SET #owner = :owner, #lease_until = :lease_until, #state = :committed, \
     #fingerprint = :fp, #sent = :sent, #heartbeat = :zero, #created = if_not_exists(#created, :now), \
     #updated = :now, #expires = :expires, #response = :response, \
     #logical_id = :logical_id, #request_type = :request_type, #resource_type = :resource_type \
     REMOVE #delivered, #unsent, #poll_fp, #poll_state, #poll_at, #waiting_since, #polls \
     ADD #fence :one, #attempts :fp_set";

/// `lease::admits`: absent; or not superseded (the same attempt, or one that never held the lease
/// and was not sent before the record's) and (LEFT, or RUNNING and expired past the skew margin,
/// or COMMITTED for another attempt, or WAITING for another attempt or with its poll due for
/// this caller; a WAITING record without a poll time counts as due). A LEFT record has no
/// attempts and was sent at 0, so it supersedes nobody.
const ACQUIRE_CONDITION: &str = "attribute_not_exists(#fence) OR \
     ((#fingerprint = :fp OR (NOT contains(#attempts, :fp) AND (attribute_not_exists(#sent) OR #sent <= :sent))) AND \
      (#state = :left OR \
       (#state = :running AND #lease_until < :expired_before) OR \
       (#state = :committed AND #fingerprint <> :fp) OR \
       (#state = :waiting AND (#fingerprint <> :fp OR attribute_not_exists(#poll_at) OR #poll_at <= :poll_due_before))))";

const WAIT_UPDATE: &str = "SET #state = :waiting, #poll_fp = :poll_fp, #poll_state = :poll_state, \
     #poll_at = :poll_at, #waiting_since = :waiting_since, #polls = :polls, #lease_until = :now, #updated = :now";

/// The lease store on a DynamoDB table (an MRSC global table in production), every call through
/// the SDK's client (the function's: one attempt per call, explicit timeouts; `aws::dynamodb_client`).
#[derive(Debug, Clone)]
pub struct DynamoLeaseStore {
    client: Client,
    table_name: String,
    /// Whether expired credentials are refreshed here (retried now) or not (deferred).
    refresh: Refresh,
}

/// What a conditional write came to: applied (with the old item, when asked for), or refused by
/// its condition (with the item as it was, when DynamoDB returned it).
enum Written {
    Applied(Option<Item>),
    Refused(Option<Item>),
}

/// One conditional UpdateItem.
struct Update<'a> {
    update: &'a str,
    condition: &'a str,
    names: Vec<(&'a str, &'a str)>,
    values: Vec<(&'a str, AttributeValue)>,
    /// `ReturnValues = ALL_OLD` (else `NONE`).
    old_on_success: bool,
    /// The time the update writes as `updated_ms`, which the writer's stamp names.
    now_ms: u64,
}

impl DynamoLeaseStore {
    /// A store on `table_name`, every call through `client`, whose refusals for expired
    /// credentials are deferred to a later invocation (nothing refreshes them: see [`Refresh`]).
    pub fn new(client: Client, table_name: impl Into<String>) -> Self {
        Self { client, table_name: table_name.into(), refresh: Refresh::of(None) }
    }

    /// The store, with refusals for expired credentials retried now where `refresh` says the
    /// SDK's identity cache loads new ones (`Refresh::of(sdk.credentials_provider())`).
    pub fn with_refresh(mut self, refresh: Refresh) -> Self {
        self.refresh = refresh;
        self
    }

    /// A failed call as the port's error.
    async fn failed<E>(&self, error: &SdkError<E, HttpResponse>) -> StoreError
    where
        E: aws_sdk_dynamodb::error::ProvideErrorMetadata + std::error::Error + 'static,
    {
        of_failure(self.refresh.reconsider(classify(error)).await)
    }

    /// A conditional UpdateItem on `key`, which also writes this handler's record format and its
    /// stamp (`writer_stamp`), and holds only on a record of a format it knows ([`with_format`]).
    async fn update(&self, key: &RequestKey, call: Update<'_>) -> Result<Written, StoreError> {
        let update = call
            .update
            .strip_prefix("SET ")
            .map(|rest| format!("SET {FORMAT_NAME} = {FORMAT_VALUE}, {WRITER_NAME} = {WRITER_VALUE}, {rest}"))
            .ok_or_else(|| StoreError::Permanent(format!("an update that sets nothing: {}", call.update)))?;
        let mut request = self
            .client
            .update_item()
            .table_name(&self.table_name)
            .set_key(Some(key_item(key)))
            .update_expression(update)
            .condition_expression(with_format(call.condition))
            .expression_attribute_names(FORMAT_NAME, attr::FORMAT)
            .expression_attribute_values(FORMAT_VALUE, number(u64::from(RECORD_FORMAT)))
            .expression_attribute_names(WRITER_NAME, attr::WRITER)
            .expression_attribute_values(WRITER_VALUE, AttributeValue::S(writer_stamp(call.now_ms)))
            .return_values(if call.old_on_success { ReturnValue::AllOld } else { ReturnValue::None })
            .return_values_on_condition_check_failure(ReturnValuesOnConditionCheckFailure::AllOld);
        for (placeholder, name) in call.names {
            request = request.expression_attribute_names(placeholder, name);
        }
        for (placeholder, value) in call.values {
            request = request.expression_attribute_values(placeholder, value);
        }
        match request.send().await {
            Ok(output) => Ok(Written::Applied(output.attributes)),
            Err(SdkError::ServiceError(service)) if service.err().is_conditional_check_failed_exception() => {
                Ok(Written::Refused(match service.into_err() {
                    UpdateItemError::ConditionalCheckFailedException(refused) => refused.item,
                    _ => None,
                }))
            }
            Err(other) => Err(self.failed(&other).await),
        }
    }

    /// A PutItem of `item` under `condition`.
    async fn put(
        &self,
        item: Item,
        condition: &str,
        names: &[(&str, &str)],
        values: Vec<(&str, AttributeValue)>,
    ) -> Result<Written, StoreError> {
        let mut request = self
            .client
            .put_item()
            .table_name(&self.table_name)
            .set_item(Some(item))
            .condition_expression(with_format(condition))
            .expression_attribute_names(FORMAT_NAME, attr::FORMAT)
            .expression_attribute_values(FORMAT_VALUE, number(u64::from(RECORD_FORMAT)))
            .return_values_on_condition_check_failure(ReturnValuesOnConditionCheckFailure::AllOld);
        for (placeholder, name) in names {
            request = request.expression_attribute_names(*placeholder, *name);
        }
        for (placeholder, value) in values {
            request = request.expression_attribute_values(placeholder, value);
        }
        match request.send().await {
            Ok(_) => Ok(Written::Applied(None)),
            Err(SdkError::ServiceError(service)) if service.err().is_conditional_check_failed_exception() => {
                Ok(Written::Refused(match service.into_err() {
                    PutItemError::ConditionalCheckFailedException(refused) => refused.item,
                    _ => None,
                }))
            }
            Err(other) => Err(self.failed(&other).await),
        }
    }

    /// A consistent GetItem of `key`.
    async fn get(&self, key: &RequestKey) -> Result<Option<Item>, StoreError> {
        let output = self
            .client
            .get_item()
            .table_name(&self.table_name)
            .set_key(Some(key_item(key)))
            .consistent_read(true)
            .send()
            .await;
        match output {
            Ok(output) => Ok(output.item),
            Err(error) => Err(self.failed(&error).await),
        }
    }

    /// A conditional update that returns nothing on success and the old item on failure.
    /// `update` under a fence: applied only while the record still holds `fence` in `state`, the
    /// one condition every fenced write of the protocol carries (heartbeat, commit and wait under
    /// a running lease; the delivered mark under a committed one).
    async fn update_under_fence(
        &self,
        key: &RequestKey,
        (fence, state): (u64, LeaseState),
        (update, now_ms): (&str, u64),
        names: &[(&str, &str)],
        mut values: Vec<(&str, AttributeValue)>,
    ) -> Result<Conditional, StoreError> {
        let mut names = names.to_vec();
        names.extend([("#fence", attr::FENCE), ("#state", attr::STATE)]);
        values.extend([(":fence", number(fence)), (":fenced_state", AttributeValue::S(state.as_str().into()))]);
        let call = Update {
            update,
            condition: "#fence = :fence AND #state = :fenced_state",
            names,
            values,
            old_on_success: false,
            now_ms,
        };
        refused_record(key, self.update(key, call).await?)
    }
}

/// A fenced write's outcome as the port's: refused with the record as it was, if returned.
fn refused_record(key: &RequestKey, written: Written) -> Result<Conditional, StoreError> {
    match written {
        Written::Applied(_) => Ok(Conditional::Applied),
        Written::Refused(old) => {
            Ok(Conditional::Refused(old.map(|item| parse_record(key, &item)).transpose()?.map(Box::new)))
        }
    }
}

/// Reads for operators (`cfn-once inspect` and `stuck`), with their credentials: the function's
/// role may not Query or Scan the table. Items that are not lease records (the active-region
/// control item) are skipped.
impl DynamoLeaseStore {
    /// Every request record of `stack_id`, in RequestId order (one Query, all pages).
    pub async fn records_of_stack(&self, stack_id: &str) -> Result<Vec<LeaseRecord>, StoreError> {
        let pages = self
            .client
            .query()
            .table_name(&self.table_name)
            .key_condition_expression("#pk = :stack")
            .expression_attribute_names("#pk", attr::PK)
            .expression_attribute_values(":stack", AttributeValue::S(stack_id.to_owned()))
            .consistent_read(true)
            .into_paginator()
            .items()
            .send()
            .collect::<Vec<_>>()
            .await;
        lease_records(pages)
    }

    /// Every request record in the table (one Scan, all pages).
    pub async fn all_records(&self) -> Result<Vec<LeaseRecord>, StoreError> {
        let pages = self
            .client
            .scan()
            .table_name(&self.table_name)
            .consistent_read(true)
            .into_paginator()
            .items()
            .send()
            .collect::<Vec<_>>()
            .await;
        lease_records(pages)
    }
}

/// The lease records among a paginated read's items (other items, the control's, skipped).
fn lease_records<E>(
    items: Vec<Result<Item, SdkError<E, HttpResponse>>>,
) -> Result<Vec<LeaseRecord>, StoreError>
where
    E: aws_sdk_dynamodb::error::ProvideErrorMetadata + std::error::Error + 'static,
{
    let mut records = Vec::new();
    for item in items {
        let item = item.map_err(|error| store_error(&error))?;
        records.extend(lease_record(&item));
    }
    Ok(records)
}

impl DynamoLeaseStore {
    /// An acquire, or with `signal` a close: one UpdateItem under `lease::admits`.
    async fn take(&self, request: &AcquireRequest, signal: Option<&[u8]>) -> Result<Acquire, StoreError> {
        let names = [
            ("#owner", attr::OWNER),
            ("#lease_until", attr::LEASE_UNTIL),
            ("#state", attr::STATE),
            ("#fingerprint", attr::FINGERPRINT),
            ("#heartbeat", attr::HEARTBEAT),
            ("#created", attr::CREATED),
            ("#updated", attr::UPDATED),
            ("#expires", attr::EXPIRES),
            ("#response", attr::RESPONSE),
            ("#delivered", attr::DELIVERED),
            ("#unsent", attr::UNSENT),
            ("#fence", attr::FENCE),
            ("#attempts", attr::ATTEMPTS),
            ("#sent", attr::SENT),
            ("#poll_at", attr::POLL_AT),
            ("#logical_id", attr::LOGICAL_ID),
            ("#request_type", attr::REQUEST_TYPE),
            ("#resource_type", attr::RESOURCE_TYPE),
        ];
        let mut values = vec![
            (":owner", AttributeValue::S(request.owner.clone())),
            (":lease_until", number(request.lease_until_ms)),
            (":running", AttributeValue::S(LeaseState::Running.as_str().into())),
            (":committed", AttributeValue::S(LeaseState::Committed.as_str().into())),
            (":fp", AttributeValue::S(request.fingerprint.as_str().into())),
            (":fp_set", AttributeValue::Ss(vec![request.fingerprint.as_str().into()])),
            (":sent", number(request.sent_ms)),
            (":zero", number(0)),
            (":one", number(1)),
            (":now", number(request.now_ms)),
            (":expires", number(request.expires_ms)),
            (":expired_before", number(request.expired_before_ms())),
            (":waiting", AttributeValue::S(LeaseState::Waiting.as_str().into())),
            (":left", AttributeValue::S(LeaseState::Left.as_str().into())),
            (":poll_due_before", number(request.poll_due_before_ms())),
            (":logical_id", AttributeValue::S(request.label.logical_resource_id.clone())),
            (":request_type", AttributeValue::S(request.label.request_type.clone())),
            (":resource_type", AttributeValue::S(request.label.resource_type.clone())),
        ];
        let mut names = names.to_vec();
        let update = match signal {
            None => ACQUIRE_UPDATE,
            Some(signal) => {
                values.push((":response", AttributeValue::B(Blob::new(signal))));
                names.extend([
                    ("#poll_fp", attr::POLL_FINGERPRINT),
                    ("#poll_state", attr::POLL_STATE),
                    ("#waiting_since", attr::WAITING_SINCE),
                    ("#polls", attr::POLLS),
                ]);
                CLOSE_UPDATE
            }
        };
        // `replaces` is on a work's record only, and as the first write naming it left it: a
        // record has it exactly when it is not empty (as `record_item` writes it).
        let update = if request.label.replaces.is_empty() {
            update.to_owned()
        } else {
            names.push(("#replaces", attr::REPLACES));
            values.push((":replaces", AttributeValue::S(request.label.replaces.clone())));
            update.replacen("SET ", "SET #replaces = if_not_exists(#replaces, :replaces), ", 1)
        };
        let call = Update {
            update: &update,
            condition: ACQUIRE_CONDITION,
            names,
            values,
            old_on_success: true,
            now_ms: request.now_ms,
        };
        match self.update(&request.key, call).await? {
            Written::Applied(old) => match old.filter(|old| !old.is_empty()) {
                // The update added one to the fence it found, atomically.
                Some(old) => {
                    let old = parse_record(&request.key, &old)?;
                    Ok(Acquire::Acquired {
                        fence: next_fence(old.fence)?,
                        took_over: old.fingerprint == request.fingerprint,
                        interrupted: old.fingerprint == request.fingerprint && old.state == LeaseState::Running,
                        // A close commits at once: no work in progress is left to poll.
                        poll: old.poll_for(&request.fingerprint).filter(|_| signal.is_none()),
                        prior: Some(Box::new(old)),
                    })
                }
                None => {
                    Ok(Acquire::Acquired { fence: 1, took_over: false, interrupted: false, poll: None, prior: None })
                }
            },
            Written::Refused(item) => {
                let item = item.ok_or_else(|| {
                    StoreError::Permanent(
                        "acquire was refused but DynamoDB returned no item; is ALL_OLD supported?".into(),
                    )
                })?;
                Ok(Acquire::Refused(Box::new(parse_record(&request.key, &item)?)))
            }
        }
    }

}

#[async_trait]
impl LeaseStore for DynamoLeaseStore {
    async fn acquire(&self, request: &AcquireRequest) -> Result<Acquire, StoreError> {
        self.take(request, None).await
    }

    async fn close(&self, request: &AcquireRequest, signal: &[u8]) -> Result<Acquire, StoreError> {
        self.take(request, Some(signal)).await
    }

    async fn heartbeat(
        &self,
        key: &RequestKey,
        fence: u64,
        lease_until_ms: u64,
        now_ms: u64,
    ) -> Result<Conditional, StoreError> {
        self.update_under_fence(
            key,
            (fence, LeaseState::Running),
            ("SET #lease_until = :lease_until, #updated = :now ADD #heartbeat :one", now_ms),
            &[("#lease_until", attr::LEASE_UNTIL), ("#updated", attr::UPDATED), ("#heartbeat", attr::HEARTBEAT)],
            vec![(":lease_until", number(lease_until_ms)), (":now", number(now_ms)), (":one", number(1))],
        )
        .await
    }

    async fn commit(
        &self,
        key: &RequestKey,
        fence: u64,
        response: &[u8],
        now_ms: u64,
    ) -> Result<Conditional, StoreError> {
        self.update_under_fence(
            key,
            (fence, LeaseState::Running),
            (
                "SET #state = :committed, #response = :response, #updated = :now \
                 REMOVE #poll_fp, #poll_state, #poll_at, #waiting_since, #polls",
                now_ms,
            ),
            &[
                ("#response", attr::RESPONSE),
                ("#updated", attr::UPDATED),
                ("#poll_fp", attr::POLL_FINGERPRINT),
                ("#poll_state", attr::POLL_STATE),
                ("#poll_at", attr::POLL_AT),
                ("#waiting_since", attr::WAITING_SINCE),
                ("#polls", attr::POLLS),
            ],
            vec![
                (":committed", AttributeValue::S(LeaseState::Committed.as_str().into())),
                (":response", AttributeValue::B(Blob::new(response))),
                (":now", number(now_ms)),
            ],
        )
        .await
    }

    async fn wait(
        &self,
        key: &RequestKey,
        fence: u64,
        poll: &PollRecord,
        now_ms: u64,
    ) -> Result<Conditional, StoreError> {
        self.update_under_fence(
            key,
            (fence, LeaseState::Running),
            (WAIT_UPDATE, now_ms),
            &[
                ("#poll_fp", attr::POLL_FINGERPRINT),
                ("#poll_state", attr::POLL_STATE),
                ("#poll_at", attr::POLL_AT),
                ("#waiting_since", attr::WAITING_SINCE),
                ("#polls", attr::POLLS),
                ("#lease_until", attr::LEASE_UNTIL),
                ("#updated", attr::UPDATED),
            ],
            vec![
                (":waiting", AttributeValue::S(LeaseState::Waiting.as_str().into())),
                (":poll_fp", AttributeValue::S(poll.fingerprint.as_str().into())),
                (":poll_state", AttributeValue::S(poll.state.clone())),
                (":poll_at", number(poll.poll_at_ms)),
                (":waiting_since", number(poll.waiting_since_ms)),
                (":polls", number(u64::from(poll.polls))),
                (":now", number(now_ms)),
            ],
        )
        .await
    }

    async fn mark_delivered(
        &self,
        key: &RequestKey,
        fence: u64,
        unsent: Option<&str>,
        now_ms: u64,
    ) -> Result<Conditional, StoreError> {
        let mut values = vec![(":true", AttributeValue::Bool(true)), (":now", number(now_ms))];
        let (update, names): (&str, &[(&str, &str)]) = match unsent {
            None => ("SET #delivered = :true, #updated = :now", &[("#delivered", attr::DELIVERED), ("#updated", attr::UPDATED)]),
            Some(why) => {
                values.push((":unsent", AttributeValue::S(why.to_owned())));
                (
                    "SET #delivered = :true, #unsent = :unsent, #updated = :now",
                    &[("#delivered", attr::DELIVERED), ("#unsent", attr::UNSENT), ("#updated", attr::UPDATED)],
                )
            }
        };
        self.update_under_fence(key, (fence, LeaseState::Committed), (update, now_ms), names, values).await
    }

    async fn read(&self, key: &RequestKey) -> Result<Option<LeaseRecord>, StoreError> {
        self.get(key).await?.map(|item| parse_record(key, &item)).transpose()
    }

    /// One conditional PutItem of the whole record, under the fence (RUNNING).
    async fn leave(&self, left: &LeaseRecord) -> Result<Conditional, StoreError> {
        let written = self
            .put(
                record_item(left),
                "#fence = :fence AND #state = :running",
                &[("#fence", attr::FENCE), ("#state", attr::STATE)],
                vec![
                    (":fence", number(left.fence)),
                    (":running", AttributeValue::S(LeaseState::Running.as_str().into())),
                ],
            )
            .await?;
        refused_record(&left.key, written)
    }
}

/// The fence an acquire's `ADD fence :one` wrote over `old`. DynamoDB's numbers go far past
/// `u64::MAX`, so a fence written by hand at `u64::MAX` is incremented there, and read back it
/// would wrap to 0 in a release build: an execution holding fence 0 is fenced out by every
/// write, and one at 1 passes for the first. It is refused instead, as the malformed record it is.
fn next_fence(old: u64) -> Result<u64, StoreError> {
    old.checked_add(1).ok_or_else(|| {
        StoreError::Permanent(format!(
            "the lease record's fence is {old}, the largest a fence can be; it was written by hand: delete the record to let the request be answered"
        ))
    })
}

/// The key schema the store expects, for provisioning tools (`make local`, tests, templates).
pub const KEY_ATTRIBUTES: (&str, &str) = (attr::PK, attr::SK);

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_fence_at_its_largest_is_refused_instead_of_wrapping() {
        assert_eq!(next_fence(0), Ok(1));
        assert_eq!(next_fence(u64::MAX - 1), Ok(u64::MAX));
        let refused = next_fence(u64::MAX).expect_err("no fence after u64::MAX");
        assert!(matches!(&refused, StoreError::Permanent(why) if why.contains("18446744073709551615")), "{refused:?}");
    }
}
