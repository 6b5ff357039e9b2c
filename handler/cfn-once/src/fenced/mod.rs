//! Fenced and owned DynamoDB writes, for provider authors (invariant S2, and "a provider owns
//! only what it created").
//!
//! Every write carries the execution's fence and is conditioned on no newer fence of the same
//! request having written the item:
//!
//! ```text
//! attribute_not_exists(cfn_once_fence) OR cfn_once_fence_scope <> :scope OR cfn_once_fence <= :fence
//! ```
//!
//! So when a stale execution (a Lambda that lost its lease but has not noticed yet) writes after
//! the execution that took over, its write is refused. An *owned* write
//! (`ctx.owned()`, the rule the shipped providers follow) also records the resource that
//! wrote the item in [`OWNER_ATTRIBUTE`], and holds only where the item is absent, deleted, or
//! that resource's own; a delete removes only an item the resource owns and otherwise does
//! nothing. Fenced and owned are one condition expression on one write, never a read followed
//! by a write. See `cfn_once_core::ownership` for the rules themselves.
//!
//! ```no_run
//! use cfn_once::prelude::*;
//! use cfn_once::fenced::{Condition, Update};
//! # async fn example(table: &FencedTable, ctx: &ProviderContext) -> Result<(), ProviderError> {
//! let key = item([("pk", AttributeValue::S("tenant#42".into()))]);
//! // Create or replace the resource's item; another resource's item is refused.
//! let written = table.write(ctx.owned()).put(key.clone(), item([("Plan", AttributeValue::S("pro".into()))])).await?;
//! // An atomic counter, only while the plan is not frozen.
//! let counted = table
//!     .write(ctx.owned())
//!     .condition(Condition::new("#plan <> :frozen").name("#plan", "Plan").value(":frozen", AttributeValue::S("frozen".into())))
//!     .update(key.clone(), Update::new().add_to("#seats :one").name("#seats", "Seats").value(":one", AttributeValue::N("1".into())))
//!     .await?;
//! // Delete it, if it is still this resource's: succeeds whatever is there, leaves nothing.
//! let deleted = table.write(ctx.owned()).delete(key).await?;
//! # let _ = (written, counted, deleted);
//! # Ok(())
//! # }
//! ```
//!
//! **A write that stands is never reported failed, and a write of a request is applied once.**
//! A write can time out, be answered with a 5xx, or lose its reply after the table applied it;
//! and the provider can run again (after an unknown outcome, a lost lease, a transient error)
//! and make the same write again. So each write ([`Write::put`], [`Write::update`],
//! [`Write::delete`] with a tombstone) carries a token made from the request's step (its run, or
//! one of its polls), what the write writes where, and how many identical writes the step made
//! before it: the same in every attempt, and in every rerun of the step that makes the same
//! write, in either region. The write adds it to the item's tokens ([`WRITES_ATTRIBUTE`], a
//! string set: an update keeps the tokens it finds, a put replaces them with its own) and holds
//! only where the item does not carry it already. So an `ADD` is added once per request,
//! whatever reruns, and whatever other requests or resources write between the attempts; a
//! second identical `ADD` in the same run is a second write and is added too. [`FencedTable`]
//! makes its own client, one attempt per call ended by explicit connect, attempt and operation
//! timeouts (the lease store's), so no attempt is repeated unseen inside the SDK. After an
//! attempt whose outcome is unknown, the write is sent again with the same token, at most
//! [`WRITE_ATTEMPTS_MAX`] attempts in all, and the first attempt that reaches the table settles
//! it: applied (the earlier one was not), or refused by an item that carries the token (the
//! write was applied and stands: a put says [`Written::Stands`], an update returns the item, a
//! delete that left a tombstone says [`Deleted::Deleted`]), or refused by an item that does not
//! (the fence, the owner or your own condition refused a write that is not in the table). A
//! delete that removes the item leaves no token: after an unknown outcome, an item gone is
//! success ([`Deleted::Absent`]), whether this delete or an earlier one removed it. Only when no
//! later attempt reaches the table does the outcome stay unknown: [`FencedWriteError::Unknown`],
//! which `?` makes `ProviderError::Unknown`, so the provider runs again only under a higher
//! fence, and its same write, with the same token, is then settled. Expired credentials that
//! nothing refreshes are [`FencedWriteError::Deferred`]: not sent again in this invocation.
//!
//! What "once" rests on, and where it ends: the rules must come from the provider's context
//! (`ctx.owned()`, `ctx.fenced()`), which knows the step; rules made from a bare fence
//! (`WriteRules::fenced`, [`FencedTable::put_item`]) know only the request, so every identical
//! write of the request is one. A put replaces the item and the tokens on it: another writer's
//! update whose reply was lost before the put may apply once more, onto the item the put left
//! (never twice onto one version of the item). Tokens name the week they were made in and are
//! looked for in that week and the next ([`cfn_once_core::fenced::WRITE_TOKEN_PERIOD_S`]), far
//! longer than any request runs; an update that finds [`STALE_TOKENS_PRUNED_AT`] older ones
//! removes them with a second update, so a counter written every day keeps about two weeks of
//! tokens (some 25 bytes each) and stays far below DynamoDB's 400 KB item limit up to a few
//! thousand writes a day.
//!
//! **A delete deletes.** [`Write::delete`] is one conditional `DeleteItem`: the item goes, and
//! nothing of cfn-once's is left for the table's other readers (the application, a `Scan`, a
//! stream consumer, an export) to see. What it gives up: a key with no item has no fence, so the
//! fence condition admits any later write there, a stale execution's included. That matters only
//! where one request both writes and deletes the same key, so that a stale execution of the
//! request could write it back after a newer execution of the *same* request deleted it; writes
//! of other requests are never refused by a fence (their scope differs), tombstone or not (the
//! residual case in ARCHITECTURE.md, S2). The shipped providers' requests never write a key they
//! delete (`tests/it/e2e.rs` `a_shipped_provider_request_never_writes_a_key_it_deleted`).
//!
//! **Tombstones, for providers that need them.** [`Write::leaving_tombstone`] makes a delete
//! replace the item with a tombstone instead: its key, the fence, owner and write attributes,
//! [`DELETED_ATTRIBUTE`] (when) and [`EXPIRES_ATTRIBUTE`] (epoch seconds,
//! [`TOMBSTONE_RETENTION_S`] later), which refuses a stale write of the same request as an item
//! would. [`FencedTable::get_item`] reads a tombstone as no item, and any resource may write
//! where a tombstone is. Every other reader of the table must skip items carrying
//! [`DELETED_ATTRIBUTE`]. Clean-up: enable DynamoDB TTL on [`EXPIRES_ATTRIBUTE`] and tombstones
//! go by themselves (a day is far longer than any straggler can live: a Lambda is killed at its
//! function timeout, at most 15 minutes); without TTL (an MRSC table has none) each stays until
//! its key is written again. Choose it per table, for every delete there: a plain delete of a
//! tombstoned key removes the tombstone.
//!
//! Placeholders of your own conditions and updates must not start with `#cfn_once` or
//! `:cfn_once`, which these writes use. Fences order executions of one request; different
//! requests for the same resource are ordered by CloudFormation itself, which sends the next
//! operation only after the previous one was answered (see ARCHITECTURE.md for the one residual
//! case).

mod attempts;
mod expression;

use std::collections::HashMap;

use aws_config::SdkConfig;
use aws_sdk_dynamodb::Client;
use aws_sdk_dynamodb::types::{AttributeValue, ReturnValue, ReturnValuesOnConditionCheckFailure};
use cfn_once_core::clock::Clock;
use cfn_once_core::fenced::{
    Attempt, BACKOFF_MS_BASE, Expression, Failed, Kind, Sent, carries, found, identity, send, stale_tokens, stamp,
};
pub use cfn_once_core::fenced::{
    DELETED_ATTRIBUTE, EXPIRES_ATTRIBUTE, FENCE_ATTRIBUTE, FencedWriteError, OWNER_ATTRIBUTE, SCOPE_ATTRIBUTE,
    STALE_TOKENS_PRUNED_AT, TOMBSTONE_RETENTION_S, WRITE_ATTEMPTS_MAX, WRITES_ATTRIBUTE,
};
use cfn_once_core::ownership::Fence;
pub use cfn_once_core::ownership::{Deleted, Found, Owner, WriteRules, Written};

use self::attempts::attempt;
use self::expression::Sdk;
pub use self::expression::{Condition, Update};
pub use crate::aws::{Failure, REFRESH_LOOK_KEPT_MS, Refresh, classify, classify_read};
use crate::system_clock::SystemClock;

/// A DynamoDB item or key: attribute names to values.
pub type Item = HashMap<String, AttributeValue>;

/// An item from `(name, value)` pairs: `item([("pk", AttributeValue::S("x".into()))])`.
pub fn item<const N: usize>(attributes: [(&str, AttributeValue); N]) -> Item {
    attributes.into_iter().map(|(name, value)| (name.to_owned(), value)).collect()
}

/// How long one call of a [`FencedTable`] may take by default (connecting included), in
/// milliseconds: the lease store's default (`CFN_ONCE_STORE_TIMEOUT_MS`).
pub const CALL_TIMEOUT_MS_DEFAULT: u64 = cfn_once_core::config::STORE_TIMEOUT_MS_DEFAULT;

/// A table written under fences (and owners): see the [module](self) for the rules.
///
/// ```no_run
/// use cfn_once::prelude::*;
///
/// # async fn example(ctx: &ProviderContext, setup: &ProviderSetup<'_>) -> Result<(), ProviderError> {
/// let table = FencedTable::new(setup.sdk(), "tenants");
/// let key = item([("pk", AttributeValue::S("tenant#42".into()))]);
/// table.write(ctx.owned()).put(key.clone(), item([("Plan", AttributeValue::S("pro".into()))])).await?;
/// let now = table.get_item(key.clone()).await?; // consistent; a deleted item reads as None
/// table.write(ctx.owned()).delete(key).await?;
/// # let _ = now;
/// # Ok(())
/// # }
/// ```
#[derive(Debug, Clone)]
pub struct FencedTable {
    client: Client,
    table_name: String,
    /// Whether expired credentials are reloaded here (sent again now) or not (deferred).
    refresh: Refresh,
}

/// One write being put together: its rules, and a condition of your own.
#[derive(Debug, Clone)]
pub struct Write<'t> {
    table: &'t FencedTable,
    rules: WriteRules,
    condition: Option<Condition>,
    tombstone: bool,
}

impl FencedTable {
    /// Fenced writes to `table_name` in `sdk`'s region (e.g. `setup.sdk()`, see `ProviderSetup`),
    /// on a client of the table's own: one attempt per call, each given up after
    /// [`CALL_TIMEOUT_MS_DEFAULT`] (connecting after at most 2 s of it).
    pub fn new(sdk: &SdkConfig, table_name: impl Into<String>) -> Self {
        let config = crate::aws::dynamodb_config(sdk, CALL_TIMEOUT_MS_DEFAULT).build();
        Self {
            refresh: Refresh::of(sdk.credentials_provider()),
            ..Self::with_client(Client::from_conf(config), table_name)
        }
    }

    /// The same table in `region` (an AWS region name, e.g. `eu-west-1`).
    pub fn in_region(self, region: &str) -> Self {
        let config = self.client.config().to_builder().region(aws_sdk_dynamodb::config::Region::new(region.to_owned()));
        Self { client: Client::from_conf(config.build()), ..self }
    }

    /// Each call given up after `timeout_ms` (connecting after at most 2 s of it) instead of
    /// [`CALL_TIMEOUT_MS_DEFAULT`]. A write makes at most [`WRITE_ATTEMPTS_MAX`] calls.
    pub fn call_timeout_ms(self, timeout_ms: u64) -> Self {
        let config = self.client.config().to_builder().timeout_config(crate::aws::call_timeouts(timeout_ms));
        Self { client: Client::from_conf(config.build()), ..self }
    }

    /// Fenced writes to `table_name` through `client`, which must make one attempt per call with
    /// explicit timeouts (`aws::dynamodb_client` makes one): a retry inside the SDK after an
    /// unknown outcome is what the table's own attempts exist to see.
    /// Expired credentials are deferred (`Refresh::of(None)`: nothing known to reload them).
    pub(crate) fn with_client(client: Client, table_name: impl Into<String>) -> Self {
        Self { client, table_name: table_name.into(), refresh: Refresh::of(None) }
    }

    /// The table's name.
    pub fn table_name(&self) -> &str {
        &self.table_name
    }

    /// A write under `rules`: fenced and owned (`ctx.owned()`, the rule to follow) or
    /// [`WriteRules::fenced`].
    pub fn write(&self, rules: WriteRules) -> Write<'_> {
        Write { table: self, rules, condition: None, tombstone: false }
    }

    /// Puts `item` (replacing any previous version), stamped with `fence`: fenced only, and
    /// knowing only the request (see the [module](self)): prefer `write(ctx.fenced()).put(..)`.
    pub async fn put_item(&self, fence: &Fence, mut item: Item) -> Result<(), FencedWriteError> {
        // A fenced-only put names no key attribute; the fence condition needs none.
        let key: Item = Item::new();
        item.retain(|name, _| !name.starts_with("cfn_once_"));
        self.write(WriteRules::fenced(fence)).put(key, item).await.map(|_| ())
    }

    /// Deletes the item at `key` unless a newer execution of the same request wrote it: fenced
    /// only (prefer an owned [`Write::delete`]).
    pub async fn delete_item(&self, fence: &Fence, key: Item) -> Result<(), FencedWriteError> {
        self.write(WriteRules::fenced(fence)).delete(key).await.map(|_| ())
    }

    /// The item at `key`, read consistently; `None` when there is none or only a tombstone.
    /// Read at most [`WRITE_ATTEMPTS_MAX`] times; a read has no effect, so an unknown outcome
    /// is only [`FencedWriteError::Transient`].
    pub async fn get_item(&self, key: Item) -> Result<Option<Item>, FencedWriteError> {
        let read = || {
            let call =
                self.client.get_item().table_name(&self.table_name).set_key(Some(key.clone())).consistent_read(true);
            async move { self.reconsidered(attempt(call.send().await)).await }
        };
        let item = match send(&self.table_name, &SystemClock, BACKOFF_MS_BASE, read).await {
            Ok(Sent::Applied(output)) => output.item,
            // A read is never refused by a condition.
            Ok(Sent::Refused(item)) => item,
            Err(FencedWriteError::Unknown(text)) => return Err(FencedWriteError::Transient(text)),
            Err(error) => return Err(error),
        };
        Ok(item.filter(|item| !item.contains_key(DELETED_ATTRIBUTE)))
    }

    /// An attempt as the table acts on it: expired credentials that the SDK reloads here are
    /// not applied (sent again now), others deferred to a later invocation.
    async fn reconsidered<T>(&self, attempt: Attempt<T, Item>) -> Attempt<T, Item> {
        match attempt {
            Attempt::Failed(Failed::Other(failure @ Failure::Deferred(_))) => {
                Attempt::Failed(Failed::Other(self.refresh.reconsider(failure).await))
            }
            other => other,
        }
    }

    /// Removes `stale` tokens from the item at `key`, if it is still there: housekeeping, which
    /// a later update does again if this one fails.
    async fn prune(&self, key: Item, stale: Vec<String>) {
        let call = self
            .client
            .update_item()
            .table_name(&self.table_name)
            .set_key(Some(key))
            .update_expression("DELETE #cfn_once_writes :cfn_once_stale")
            .condition_expression("attribute_exists(#cfn_once_writes)")
            .expression_attribute_names("#cfn_once_writes", WRITES_ATTRIBUTE)
            .expression_attribute_values(":cfn_once_stale", AttributeValue::Ss(stale));
        if let Err(error) = call.send().await {
            tracing::debug!(why = crate::aws::brief(&error), "stale write tokens left for a later update");
        }
    }
}

impl Write<'_> {
    /// ANDs `condition` with the fence and owner condition.
    pub fn condition(mut self, condition: Condition) -> Self {
        self.condition = Some(condition);
        self
    }

    /// Puts the item `key` + `attributes` (replacing any previous version), stamped with the
    /// fence, the write's token and, for an owned write, the owner. Says whether the item is
    /// new, was the resource's, or was adopted; or, when the write is found applied before (an
    /// attempt whose reply was lost, an earlier run of the request), that it stands
    /// ([`Written::Stands`]).
    pub async fn put(self, key: Item, attributes: Item) -> Result<Written, FencedWriteError> {
        let (rules, table) = (&self.rules, self.table);
        let attributes: Item = attributes.into_iter().filter(|(name, _)| !name.starts_with("cfn_once_")).collect();
        let content = identity::<Sdk>("put", &key, Some(&attributes), None, self.condition.as_ref());
        let token = rules.token(&content, SystemClock.now_ms());
        let expression = Expression::for_write::<Sdk>(rules, &key, Kind::Write, &token, self.condition.as_ref());
        let mut item = key;
        item.extend(attributes);
        stamp::<Sdk>(&mut item, rules, &token);
        let put = || {
            let call = table
                .client
                .put_item()
                .table_name(&table.table_name)
                .set_item(Some(item.clone()))
                .condition_expression(&expression.text)
                .set_expression_attribute_names(Some(expression.names.clone()))
                .set_expression_attribute_values(Some(expression.values.clone()))
                .return_values(ReturnValue::AllOld)
                .return_values_on_condition_check_failure(ReturnValuesOnConditionCheckFailure::AllOld);
            async move { table.reconsidered(attempt(call.send().await)).await }
        };
        match send(&table.table_name, &SystemClock, BACKOFF_MS_BASE, put).await? {
            Sent::Applied(output) => Ok(self.written(output.attributes.as_ref())),
            Sent::Refused(old) => {
                Ok(rules.refused_write(carries::<Sdk>(old.as_ref(), &token), &found::<Sdk>(old.as_ref()))?)
            }
        }
    }

    /// Updates the item at `key` with `update` (creating it if absent), under the rules and
    /// stamped as a put is. Returns the item as it is now (with this update in it, also when the
    /// update is found applied before).
    pub async fn update(self, key: Item, update: Update) -> Result<Item, FencedWriteError> {
        let (rules, table) = (&self.rules, self.table);
        let content = identity::<Sdk>("update", &key, None, Some(&update), self.condition.as_ref());
        let now_ms = SystemClock.now_ms();
        let token = rules.token(&content, now_ms);
        let mut expression = Expression::for_write::<Sdk>(rules, &key, Kind::Write, &token, self.condition.as_ref());
        let text = expression.update_text::<Sdk>(rules, update, &token);
        let update = || {
            let call = table
                .client
                .update_item()
                .table_name(&table.table_name)
                .set_key(Some(key.clone()))
                .update_expression(&text)
                .condition_expression(&expression.text)
                .set_expression_attribute_names(Some(expression.names.clone()))
                .set_expression_attribute_values(Some(expression.values.clone()))
                .return_values(ReturnValue::AllNew)
                .return_values_on_condition_check_failure(ReturnValuesOnConditionCheckFailure::AllOld);
            async move { table.reconsidered(attempt(call.send().await)).await }
        };
        match send(&table.table_name, &SystemClock, BACKOFF_MS_BASE, update).await? {
            Sent::Applied(output) => {
                let now = output.attributes.unwrap_or_default();
                let stale = stale_tokens::<Sdk>(&now, now_ms);
                if stale.len() >= STALE_TOKENS_PRUNED_AT {
                    table.prune(key, stale).await;
                }
                Ok(now)
            }
            Sent::Refused(now) => {
                rules.refused_write(carries::<Sdk>(now.as_ref(), &token), &found::<Sdk>(now.as_ref()))?;
                // The item carries this update's token: it is the item as the update left it
                // (and as any write since left it).
                Ok(now.unwrap_or_default())
            }
        }
    }

    /// A delete of this write replaces the item with a tombstone instead of removing it (the
    /// [module](self)'s "Tombstones"): for a provider whose requests both write and delete the
    /// same key, so that a stale write of the request after its delete is still refused. Every
    /// reader of the table other than [`FencedTable::get_item`] must then skip items carrying
    /// [`DELETED_ATTRIBUTE`].
    pub fn leaving_tombstone(mut self) -> Self {
        self.tombstone = true;
        self
    }

    /// Deletes the item at `key` with one conditional `DeleteItem`, leaving nothing (or, with
    /// [`Write::leaving_tombstone`], a tombstone with the fence and the write's token). An owned
    /// delete removes only the resource's own item and otherwise does nothing; every outcome but
    /// a refusal by the fence (or your own condition) is a success. After an attempt whose
    /// outcome was unknown, [`Deleted::Absent`] may be this delete's own work.
    pub async fn delete(self, key: Item) -> Result<Deleted, FencedWriteError> {
        if self.tombstone {
            return self.delete_to_tombstone(key).await;
        }
        let (rules, table) = (&self.rules, self.table);
        let content = identity::<Sdk>("delete", &key, None, None, self.condition.as_ref());
        let token = rules.token(&content, SystemClock.now_ms());
        let expression = Expression::for_write::<Sdk>(rules, &key, Kind::Delete, &token, self.condition.as_ref());
        let delete = || {
            let call = table
                .client
                .delete_item()
                .table_name(&table.table_name)
                .set_key(Some(key.clone()))
                .condition_expression(&expression.text)
                .set_expression_attribute_names(Some(expression.names.clone()))
                .set_expression_attribute_values(Some(expression.values.clone()))
                .return_values(ReturnValue::AllOld)
                .return_values_on_condition_check_failure(ReturnValuesOnConditionCheckFailure::AllOld);
            async move { table.reconsidered(attempt(call.send().await)).await }
        };
        match send(&table.table_name, &SystemClock, BACKOFF_MS_BASE, delete).await? {
            // A fenced-only delete of a key with no item (or a tombstone) succeeds: say so.
            Sent::Applied(output) => Ok(match found::<Sdk>(output.attributes.as_ref()) {
                Found::Item { .. } => Deleted::Deleted,
                Found::Absent | Found::Tombstone { .. } => Deleted::Absent,
            }),
            // A removed item carries no token.
            Sent::Refused(old) => Ok(rules.refused_delete(false, &found::<Sdk>(old.as_ref()))?),
        }
    }

    /// [`Write::delete`] with a tombstone: a put of the key, the fence, owner and the write's
    /// token, and when it was deleted, under the delete's condition (and the token's).
    async fn delete_to_tombstone(self, key: Item) -> Result<Deleted, FencedWriteError> {
        let (rules, table) = (&self.rules, self.table);
        let content = identity::<Sdk>("tombstone", &key, None, None, self.condition.as_ref());
        let now_ms = SystemClock.now_ms();
        let token = rules.token(&content, now_ms);
        let expression = Expression::for_write::<Sdk>(rules, &key, Kind::Tombstone, &token, self.condition.as_ref());
        let mut tombstone = key;
        stamp::<Sdk>(&mut tombstone, rules, &token);
        tombstone.insert(DELETED_ATTRIBUTE.into(), AttributeValue::N(now_ms.to_string()));
        tombstone
            .insert(EXPIRES_ATTRIBUTE.into(), AttributeValue::N((now_ms / 1000 + TOMBSTONE_RETENTION_S).to_string()));
        let put = || {
            let call = table
                .client
                .put_item()
                .table_name(&table.table_name)
                .set_item(Some(tombstone.clone()))
                .condition_expression(&expression.text)
                .set_expression_attribute_names(Some(expression.names.clone()))
                .set_expression_attribute_values(Some(expression.values.clone()))
                .return_values_on_condition_check_failure(ReturnValuesOnConditionCheckFailure::AllOld);
            async move { table.reconsidered(attempt(call.send().await)).await }
        };
        match send(&table.table_name, &SystemClock, BACKOFF_MS_BASE, put).await? {
            Sent::Applied(_) => Ok(Deleted::Deleted),
            Sent::Refused(old) => {
                Ok(rules.refused_delete(carries::<Sdk>(old.as_ref(), &token), &found::<Sdk>(old.as_ref()))?)
            }
        }
    }

    /// What a put applied by its attempt did, from the item it replaced.
    fn written(&self, old: Option<&Item>) -> Written {
        match (found::<Sdk>(old), &self.rules.owner) {
            (Found::Absent | Found::Tombstone { .. }, _) => Written::Created,
            (Found::Item { owner: stored, .. }, Some(owner)) if stored.as_ref() != Some(owner) => {
                Written::Adopted { previous_owner: stored }
            }
            _ => Written::Replaced,
        }
    }
}
