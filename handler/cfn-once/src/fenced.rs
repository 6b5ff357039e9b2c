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
//! replace the item with a tombstone instead: its key, the fence and owner attributes,
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

use std::collections::HashMap;

use aws_sdk_dynamodb::Client;
use aws_sdk_dynamodb::config::http::HttpResponse;
use aws_sdk_dynamodb::error::SdkError;
use aws_sdk_dynamodb::operation::delete_item::DeleteItemError;
use aws_sdk_dynamodb::operation::put_item::PutItemError;
use aws_sdk_dynamodb::operation::update_item::UpdateItemError;
use aws_sdk_dynamodb::types::{AttributeValue, ReturnValue, ReturnValuesOnConditionCheckFailure};
use cfn_once_core::clock::Clock;
use cfn_once_core::ownership::Fence;
pub use cfn_once_core::ownership::{Deleted, Found, Owner, WriteRefused, WriteRules, Written};
use cfn_once_core::provider::ProviderError;

pub use crate::adapters::{Failure, classify};

/// A DynamoDB item or key: attribute names to values.
pub type Item = HashMap<String, AttributeValue>;

/// An item from `(name, value)` pairs: `item([("pk", AttributeValue::S("x".into()))])`.
pub fn item<const N: usize>(attributes: [(&str, AttributeValue); N]) -> Item {
    attributes.into_iter().map(|(name, value)| (name.to_owned(), value)).collect()
}

/// The attribute holding the fence value of the last accepted write.
pub const FENCE_ATTRIBUTE: &str = "cfn_once_fence";
/// The attribute holding the scope (request) of that fence.
pub const SCOPE_ATTRIBUTE: &str = "cfn_once_fence_scope";
/// The attribute holding the item's owner (`<StackId>/<LogicalResourceId>`), on owned writes.
pub const OWNER_ATTRIBUTE: &str = "cfn_once_owner";
/// On a tombstone ([`Write::leaving_tombstone`]): when the item was deleted, epoch ms.
pub const DELETED_ATTRIBUTE: &str = "cfn_once_deleted_ms";
/// On a tombstone: when it may go, epoch seconds (DynamoDB TTL's unit).
pub const EXPIRES_ATTRIBUTE: &str = "cfn_once_expires_at";
/// How long a tombstone is kept, in seconds: a day.
pub const TOMBSTONE_RETENTION_S: u64 = 86_400;

/// A table written under fences (and owners): see the [module](self) for the rules.
///
/// ```no_run
/// use cfn_once::prelude::*;
///
/// # async fn example(ctx: &ProviderContext, setup: &ProviderSetup<'_>) -> Result<(), ProviderError> {
/// let table = FencedTable::new(aws_sdk_dynamodb::Client::new(setup.sdk()), "tenants");
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
}

/// Why a fenced write did not happen.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum FencedWriteError {
    /// A newer execution of the same request already wrote this item.
    #[error("a newer execution of this request already wrote the item; this stale write (fence {fence}) was refused")]
    FencedOut {
        /// The refused write's fence.
        fence: u64,
    },
    /// An owned write found an item of another resource, or one cfn-once did not write.
    #[error("{}", WriteRefused::OwnedByAnother { owner: owner.clone() })]
    OwnedByAnother {
        /// The item's owner; `None` if cfn-once did not write it.
        owner: Option<Owner>,
    },
    /// The condition of your own ([`Write::condition`]) did not hold.
    #[error("the write's condition did not hold")]
    ConditionFailed,
    /// The table does not exist (in the client's region).
    #[error("table {table} does not exist")]
    NoSuchTable {
        /// The table named.
        table: String,
    },
    /// Throttled, or the outcome is unknown: the write may be retried (a repeated write under
    /// the same fence is accepted).
    #[error("DynamoDB is unavailable: {0}")]
    Transient(String),
    /// Refused for good (access denied, invalid item).
    #[error("DynamoDB refused the write: {0}")]
    Permanent(String),
}

impl From<FencedWriteError> for ProviderError {
    fn from(error: FencedWriteError) -> Self {
        match error {
            FencedWriteError::Transient(_) => ProviderError::Transient(error.to_string()),
            _ => ProviderError::Failed(error.to_string()),
        }
    }
}

impl From<WriteRefused> for FencedWriteError {
    fn from(refused: WriteRefused) -> Self {
        match refused {
            WriteRefused::FencedOut { fence, .. } => Self::FencedOut { fence },
            WriteRefused::OwnedByAnother { owner } => Self::OwnedByAnother { owner },
        }
    }
}

impl From<Failure> for ProviderError {
    /// A DynamoDB failure of a provider's own call: retried if it may clear, FAILED if not.
    fn from(failure: Failure) -> Self {
        match failure {
            Failure::NotApplied(text) | Failure::Deferred(text) => ProviderError::Transient(text),
            Failure::Unknown(text) => ProviderError::Unknown(text),
            Failure::Permanent(text) => ProviderError::Failed(text),
        }
    }
}

/// A condition of your own, ANDed with the fence (and owner) condition: an expression with its
/// placeholders.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Condition {
    expression: String,
    names: HashMap<String, String>,
    values: Item,
}

impl Condition {
    /// `expression`, e.g. `#plan <> :frozen`.
    pub fn new(expression: impl Into<String>) -> Self {
        Self { expression: expression.into(), ..Self::default() }
    }

    /// Names the attribute `#placeholder` stands for.
    pub fn name(mut self, placeholder: &str, attribute: &str) -> Self {
        self.names.insert(placeholder.to_owned(), attribute.to_owned());
        self
    }

    /// Gives `:placeholder` its value.
    pub fn value(mut self, placeholder: &str, value: AttributeValue) -> Self {
        self.values.insert(placeholder.to_owned(), value);
        self
    }
}

/// An update of your own, clause by clause (`SET`, `REMOVE`, `ADD`, `DELETE`); the fence and
/// owner attributes are set alongside.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Update {
    set: Vec<String>,
    remove: Vec<String>,
    add: Vec<String>,
    delete: Vec<String>,
    names: HashMap<String, String>,
    values: Item,
}

impl Update {
    /// An update that changes nothing yet.
    pub fn new() -> Self {
        Self::default()
    }

    /// A `SET` action, e.g. `#plan = :plan`.
    pub fn set(mut self, action: impl Into<String>) -> Self {
        self.set.push(action.into());
        self
    }

    /// A `REMOVE` action, e.g. `#legacy`.
    pub fn remove(mut self, action: impl Into<String>) -> Self {
        self.remove.push(action.into());
        self
    }

    /// An `ADD` action, e.g. `#seats :one` (an atomic counter, or adding to a set).
    pub fn add_to(mut self, action: impl Into<String>) -> Self {
        self.add.push(action.into());
        self
    }

    /// A `DELETE` action (removing members from a set), e.g. `#tags :old`.
    pub fn delete_from(mut self, action: impl Into<String>) -> Self {
        self.delete.push(action.into());
        self
    }

    /// Names the attribute `#placeholder` stands for.
    pub fn name(mut self, placeholder: &str, attribute: &str) -> Self {
        self.names.insert(placeholder.to_owned(), attribute.to_owned());
        self
    }

    /// Gives `:placeholder` its value.
    pub fn value(mut self, placeholder: &str, value: AttributeValue) -> Self {
        self.values.insert(placeholder.to_owned(), value);
        self
    }
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
    /// Fenced writes to `table_name`.
    pub fn new(client: Client, table_name: impl Into<String>) -> Self {
        Self { client, table_name: table_name.into() }
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

    /// Puts `item` (replacing any previous version), stamped with `fence`: fenced only.
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
    pub async fn get_item(&self, key: Item) -> Result<Option<Item>, FencedWriteError> {
        let output = self
            .client
            .get_item()
            .table_name(&self.table_name)
            .set_key(Some(key))
            .consistent_read(true)
            .send()
            .await
            .map_err(|error| self.error(&error))?;
        Ok(output.item.filter(|item| !item.contains_key(DELETED_ATTRIBUTE)))
    }

    fn error<E>(&self, error: &SdkError<E, HttpResponse>) -> FencedWriteError
    where
        E: aws_sdk_dynamodb::error::ProvideErrorMetadata + std::error::Error + 'static,
    {
        if let SdkError::ServiceError(service) = error
            && service.err().code() == Some("ResourceNotFoundException")
        {
            return FencedWriteError::NoSuchTable { table: self.table_name.clone() };
        }
        match classify(error) {
            // An unknown outcome is retried: a repeated fenced write with the same fence is
            // accepted (`<=`), so the retry is idempotent.
            Failure::NotApplied(text) | Failure::Unknown(text) | Failure::Deferred(text) => {
                FencedWriteError::Transient(text)
            }
            Failure::Permanent(text) => FencedWriteError::Permanent(text),
        }
    }
}

/// The condition expression, names and values of one write.
struct Expression {
    text: String,
    names: HashMap<String, String>,
    values: Item,
}

impl Expression {
    /// The fence clause, and for an owned write the owner clause, for a write that may create
    /// the item (`may_create`) or that must find it live and owned (a delete).
    fn for_write(rules: &WriteRules, key: &Item, may_create: bool, extra: Option<&Condition>) -> Self {
        let mut names = HashMap::from([
            ("#cfn_once_fence".to_owned(), FENCE_ATTRIBUTE.to_owned()),
            ("#cfn_once_scope".to_owned(), SCOPE_ATTRIBUTE.to_owned()),
        ]);
        let mut values = HashMap::from([
            (":cfn_once_fence".to_owned(), AttributeValue::N(rules.fence.value.to_string())),
            (":cfn_once_scope".to_owned(), AttributeValue::S(rules.fence.scope.clone())),
        ]);
        let mut clauses = vec![
            "(attribute_not_exists(#cfn_once_fence) OR #cfn_once_scope <> :cfn_once_scope OR #cfn_once_fence <= :cfn_once_fence)"
                .to_owned(),
        ];
        if let Some(owner) = rules.owner.as_ref().filter(|_| !(may_create && rules.adopt)) {
            names.insert("#cfn_once_owner".into(), OWNER_ATTRIBUTE.into());
            names.insert("#cfn_once_deleted".into(), DELETED_ATTRIBUTE.into());
            values.insert(":cfn_once_owner".into(), AttributeValue::S(owner.as_str().to_owned()));
            if !may_create {
                clauses.push("(#cfn_once_owner = :cfn_once_owner AND attribute_not_exists(#cfn_once_deleted))".into());
            } else {
                // Any key attribute exists on every item: its absence means there is none.
                let absent = match key.keys().min() {
                    Some(name) => {
                        names.insert("#cfn_once_key".into(), name.clone());
                        "attribute_not_exists(#cfn_once_key) OR "
                    }
                    None => "",
                };
                clauses.push(format!(
                    "({absent}attribute_exists(#cfn_once_deleted) OR #cfn_once_owner = :cfn_once_owner)"
                ));
            }
        }
        if let Some(condition) = extra {
            clauses.push(format!("({})", condition.expression));
            names.extend(condition.names.clone());
            values.extend(condition.values.clone());
        }
        Self { text: clauses.join(" AND "), names, values }
    }
}

/// What a stored item is, for the rules.
fn found(item: Option<&Item>) -> Found {
    let Some(item) = item else { return Found::Absent };
    let fence = match (item.get(SCOPE_ATTRIBUTE), item.get(FENCE_ATTRIBUTE)) {
        (Some(AttributeValue::S(scope)), Some(AttributeValue::N(value))) => {
            value.parse().ok().map(|value| Fence { scope: scope.clone(), value })
        }
        _ => None,
    };
    if item.contains_key(DELETED_ATTRIBUTE) {
        return Found::Tombstone { fence };
    }
    let owner = match item.get(OWNER_ATTRIBUTE) {
        Some(AttributeValue::S(owner)) => Some(Owner::from_stored(owner.clone())),
        _ => None,
    };
    Found::Item { owner, fence }
}

impl Write<'_> {
    /// ANDs `condition` with the fence and owner condition.
    pub fn condition(mut self, condition: Condition) -> Self {
        self.condition = Some(condition);
        self
    }

    /// Puts the item `key` + `attributes` (replacing any previous version), stamped with the
    /// fence and, for an owned write, the owner. Says whether the item is new, was the
    /// resource's, or was adopted.
    pub async fn put(self, key: Item, attributes: Item) -> Result<Written, FencedWriteError> {
        let rules = &self.rules;
        let expression = Expression::for_write(rules, &key, true, self.condition.as_ref());
        let mut item = key.clone();
        item.extend(attributes.into_iter().filter(|(name, _)| !name.starts_with("cfn_once_")));
        stamp(&mut item, rules);
        let result = self
            .table
            .client
            .put_item()
            .table_name(&self.table.table_name)
            .set_item(Some(item))
            .condition_expression(&expression.text)
            .set_expression_attribute_names(Some(expression.names))
            .set_expression_attribute_values(Some(expression.values))
            .return_values(ReturnValue::AllOld)
            .return_values_on_condition_check_failure(ReturnValuesOnConditionCheckFailure::AllOld)
            .send()
            .await;
        match result {
            Ok(output) => Ok(self.written(output.attributes.as_ref())),
            Err(error) => {
                Err(self.refused(&error, put_refused_by(&error), |old| rules.admits_write(&found(old)).map(|_| ())))
            }
        }
    }

    /// Updates the item at `key` with `update` (creating it if absent), under the rules and
    /// stamped as a put is. Returns the item as it is now.
    pub async fn update(self, key: Item, update: Update) -> Result<Item, FencedWriteError> {
        let rules = &self.rules;
        let expression = Expression::for_write(rules, &key, true, self.condition.as_ref());
        let mut names = expression.names;
        let mut values = expression.values;
        names.extend(update.names);
        values.extend(update.values);
        let mut set = update.set;
        set.push("#cfn_once_fence = :cfn_once_fence".into());
        set.push("#cfn_once_scope = :cfn_once_scope".into());
        if let Some(owner) = &rules.owner {
            set.push("#cfn_once_owner = :cfn_once_owner".into());
            names.insert("#cfn_once_owner".into(), OWNER_ATTRIBUTE.into());
            values.insert(":cfn_once_owner".into(), AttributeValue::S(owner.as_str().to_owned()));
        }
        names.insert("#cfn_once_deleted".into(), DELETED_ATTRIBUTE.into());
        names.insert("#cfn_once_expires".into(), EXPIRES_ATTRIBUTE.into());
        let mut remove = update.remove;
        remove.push("#cfn_once_deleted".into());
        remove.push("#cfn_once_expires".into());
        let mut text = format!("SET {} REMOVE {}", set.join(", "), remove.join(", "));
        if !update.add.is_empty() {
            text.push_str(&format!(" ADD {}", update.add.join(", ")));
        }
        if !update.delete.is_empty() {
            text.push_str(&format!(" DELETE {}", update.delete.join(", ")));
        }
        let result = self
            .table
            .client
            .update_item()
            .table_name(&self.table.table_name)
            .set_key(Some(key))
            .update_expression(text)
            .condition_expression(&expression.text)
            .set_expression_attribute_names(Some(names))
            .set_expression_attribute_values(Some(values))
            .return_values(ReturnValue::AllNew)
            .return_values_on_condition_check_failure(ReturnValuesOnConditionCheckFailure::AllOld)
            .send()
            .await;
        match result {
            Ok(output) => Ok(output.attributes.unwrap_or_default()),
            Err(error) => {
                Err(self.refused(&error, update_refused_by(&error), |old| rules.admits_write(&found(old)).map(|_| ())))
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
    /// [`Write::leaving_tombstone`], a tombstone with the fence). An owned delete removes only
    /// the resource's own item and otherwise does nothing; every outcome but a refusal by the
    /// fence (or your own condition) is a success.
    pub async fn delete(self, key: Item) -> Result<Deleted, FencedWriteError> {
        let expression = Expression::for_write(&self.rules, &key, false, self.condition.as_ref());
        if self.tombstone {
            return self.delete_to_tombstone(key, expression).await;
        }
        let result = self
            .table
            .client
            .delete_item()
            .table_name(&self.table.table_name)
            .set_key(Some(key))
            .condition_expression(&expression.text)
            .set_expression_attribute_names(Some(expression.names))
            .set_expression_attribute_values(Some(expression.values))
            .return_values(ReturnValue::AllOld)
            .return_values_on_condition_check_failure(ReturnValuesOnConditionCheckFailure::AllOld)
            .send()
            .await;
        match result {
            // A fenced-only delete of a key with no item (or a tombstone) succeeds: say so.
            Ok(output) => Ok(match found(output.attributes.as_ref()) {
                Found::Item { .. } => Deleted::Deleted,
                Found::Absent | Found::Tombstone { .. } => Deleted::Absent,
            }),
            Err(error) => self.delete_refused(delete_refused_by(&error), || self.table.error(&error)),
        }
    }

    /// [`Write::delete`] with a tombstone: a put of the key, the fence and owner, and when it
    /// was deleted, under the delete's condition `expression`.
    async fn delete_to_tombstone(self, key: Item, expression: Expression) -> Result<Deleted, FencedWriteError> {
        let now_ms = crate::clock::SystemClock.now_ms();
        let mut tombstone = key;
        stamp(&mut tombstone, &self.rules);
        tombstone.insert(DELETED_ATTRIBUTE.into(), AttributeValue::N(now_ms.to_string()));
        tombstone
            .insert(EXPIRES_ATTRIBUTE.into(), AttributeValue::N((now_ms / 1000 + TOMBSTONE_RETENTION_S).to_string()));
        let result = self
            .table
            .client
            .put_item()
            .table_name(&self.table.table_name)
            .set_item(Some(tombstone))
            .condition_expression(&expression.text)
            .set_expression_attribute_names(Some(expression.names))
            .set_expression_attribute_values(Some(expression.values))
            .return_values_on_condition_check_failure(ReturnValuesOnConditionCheckFailure::AllOld)
            .send()
            .await;
        match result {
            Ok(_) => Ok(Deleted::Deleted),
            Err(error) => self.delete_refused(put_refused_by(&error), || self.table.error(&error)),
        }
    }

    /// A refused delete's outcome: a condition failure (`old` holds the item that refused it) is
    /// what the rules say of that item, or else the author's own condition; any other failure is
    /// `otherwise`.
    fn delete_refused(
        &self,
        old: Option<Option<&Item>>,
        otherwise: impl FnOnce() -> FencedWriteError,
    ) -> Result<Deleted, FencedWriteError> {
        match old {
            Some(old) => match self.rules.admits_delete(&found(old)) {
                // The rules would have deleted it: the author's own condition refused.
                Ok(Deleted::Deleted) => Err(FencedWriteError::ConditionFailed),
                Ok(other) => Ok(other),
                Err(refused) => Err(refused.into()),
            },
            None => Err(otherwise()),
        }
    }

    /// What a successful put did, from the item it replaced.
    fn written(&self, old: Option<&Item>) -> Written {
        match (found(old), &self.rules.owner) {
            (Found::Absent | Found::Tombstone { .. }, _) => Written::Created,
            (Found::Item { owner: stored, .. }, Some(owner)) if stored.as_ref() != Some(owner) => {
                Written::Adopted { previous_owner: stored }
            }
            _ => Written::Replaced,
        }
    }

    /// A failed write's error: a condition failure (`old` holds the item that refused it) is
    /// explained by the rules on that item (`admits`), or else it was the author's own condition.
    fn refused<E>(
        &self,
        error: &SdkError<E, HttpResponse>,
        old: Option<Option<&Item>>,
        admits: impl Fn(Option<&Item>) -> Result<(), WriteRefused>,
    ) -> FencedWriteError
    where
        E: aws_sdk_dynamodb::error::ProvideErrorMetadata + std::error::Error + 'static,
    {
        match old {
            Some(old) => match admits(old) {
                Ok(()) => FencedWriteError::ConditionFailed,
                Err(refused) => refused.into(),
            },
            None => self.table.error(error),
        }
    }
}

/// The item a conditional put refused to overwrite (`Some(None)`: there was none), or `None`
/// if the put failed otherwise.
fn put_refused_by<R>(error: &SdkError<PutItemError, R>) -> Option<Option<&Item>> {
    match error {
        SdkError::ServiceError(service) => match service.err() {
            PutItemError::ConditionalCheckFailedException(failed) => Some(failed.item.as_ref()),
            _ => None,
        },
        _ => None,
    }
}

/// As [`put_refused_by`], for a delete.
fn delete_refused_by<R>(error: &SdkError<DeleteItemError, R>) -> Option<Option<&Item>> {
    match error {
        SdkError::ServiceError(service) => match service.err() {
            DeleteItemError::ConditionalCheckFailedException(failed) => Some(failed.item.as_ref()),
            _ => None,
        },
        _ => None,
    }
}

/// As [`put_refused_by`], for an update.
fn update_refused_by<R>(error: &SdkError<UpdateItemError, R>) -> Option<Option<&Item>> {
    match error {
        SdkError::ServiceError(service) => match service.err() {
            UpdateItemError::ConditionalCheckFailedException(failed) => Some(failed.item.as_ref()),
            _ => None,
        },
        _ => None,
    }
}

/// Stamps the write's fence and owner on an item.
fn stamp(item: &mut Item, rules: &WriteRules) {
    item.insert(FENCE_ATTRIBUTE.into(), AttributeValue::N(rules.fence.value.to_string()));
    item.insert(SCOPE_ATTRIBUTE.into(), AttributeValue::S(rules.fence.scope.clone()));
    if let Some(owner) = &rules.owner {
        item.insert(OWNER_ATTRIBUTE.into(), AttributeValue::S(owner.as_str().to_owned()));
    }
}
