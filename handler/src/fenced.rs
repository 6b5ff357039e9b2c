//! Fenced DynamoDB writes, for provider authors (invariant S2).
//!
//! A provider that writes to a downstream DynamoDB table passes its [`Fence`]; the write carries
//! the fence and is conditioned on no newer fence of the same request having written the item:
//!
//! ```text
//! attribute_not_exists(cfn_once_fence) OR cfn_once_fence_scope <> :scope OR cfn_once_fence <= :fence
//! ```
//!
//! So when a stale execution (a Lambda that lost its lease but has not noticed yet) writes after
//! the execution that took over, its write is refused.
//!
//! **A delete leaves a tombstone.** An item that is simply gone has no fence, so a stale write
//! arriving after a newer execution's delete would pass the condition and bring the item back.
//! [`FencedTable::delete_item`] therefore replaces the item with a tombstone: its key, the
//! fence attributes, [`DELETED_ATTRIBUTE`] (when) and [`EXPIRES_ATTRIBUTE`] (epoch seconds,
//! [`TOMBSTONE_RETENTION_S`] later). [`FencedTable::get_item`] reads a tombstone as no item.
//! Clean-up: enable DynamoDB TTL on [`EXPIRES_ATTRIBUTE`] and tombstones go by themselves (a
//! day is far longer than any straggler can live: a Lambda is killed at its function timeout,
//! at most 15 minutes); without TTL (an MRSC table has none) each stays until the key is written
//! again, which replaces it, and costs one small item. Readers of the table that do not go
//! through [`FencedTable::get_item`] should skip items carrying [`DELETED_ATTRIBUTE`].
//!
//! Fences order executions of one request;
//! different requests for the same resource are ordered by CloudFormation itself, which sends
//! the next operation only after the previous one was answered (see ARCHITECTURE.md for the
//! one residual case).

use std::collections::HashMap;

use aws_sdk_dynamodb::Client;
use aws_sdk_dynamodb::error::SdkError;
use aws_sdk_dynamodb::types::AttributeValue;
use cfn_once_core::clock::Clock;
use cfn_once_core::provider::{Fence, ProviderError};

use crate::adapters::{Failure, classify};

/// The attribute holding the fence value of the last accepted write.
pub const FENCE_ATTRIBUTE: &str = "cfn_once_fence";
/// The attribute holding the scope (request) of that fence.
pub const SCOPE_ATTRIBUTE: &str = "cfn_once_fence_scope";
/// On a tombstone: when the item was deleted, epoch ms.
pub const DELETED_ATTRIBUTE: &str = "cfn_once_deleted_ms";
/// On a tombstone: when it may go, epoch seconds (DynamoDB TTL's unit).
pub const EXPIRES_ATTRIBUTE: &str = "cfn_once_expires_at";
/// How long a tombstone is kept, in seconds: a day.
pub const TOMBSTONE_RETENTION_S: u64 = 86_400;

const CONDITION: &str = "attribute_not_exists(#fence) OR #scope <> :scope OR #fence <= :fence";

/// A table written under fences.
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

impl FencedTable {
    /// Fenced writes to `table_name`.
    pub fn new(client: Client, table_name: impl Into<String>) -> Self {
        Self { client, table_name: table_name.into() }
    }

    /// Puts `item` (replacing any previous version), stamped with `fence`.
    pub async fn put_item(
        &self,
        fence: &Fence,
        mut item: HashMap<String, AttributeValue>,
    ) -> Result<(), FencedWriteError> {
        item.insert(FENCE_ATTRIBUTE.into(), AttributeValue::N(fence.value.to_string()));
        item.insert(SCOPE_ATTRIBUTE.into(), AttributeValue::S(fence.scope.clone()));
        let (names, values) = condition_placeholders(fence);
        let result = self
            .client
            .put_item()
            .table_name(&self.table_name)
            .set_item(Some(item))
            .condition_expression(CONDITION)
            .set_expression_attribute_names(Some(names))
            .set_expression_attribute_values(Some(values))
            .send()
            .await;
        result.map(|_| ()).map_err(|error| self.error(fence, &error))
    }

    /// Deletes the item at `key` unless a newer execution of the same request wrote it, leaving
    /// a tombstone with `fence` (see the module's documentation), so that a stale write cannot
    /// bring the item back. Deleting an item that does not exist succeeds.
    pub async fn delete_item(
        &self,
        fence: &Fence,
        key: HashMap<String, AttributeValue>,
    ) -> Result<(), FencedWriteError> {
        let now_ms = crate::clock::SystemClock.now_ms();
        let mut tombstone = key;
        tombstone.insert(DELETED_ATTRIBUTE.into(), AttributeValue::N(now_ms.to_string()));
        tombstone
            .insert(EXPIRES_ATTRIBUTE.into(), AttributeValue::N((now_ms / 1000 + TOMBSTONE_RETENTION_S).to_string()));
        self.put_item(fence, tombstone).await
    }

    /// The item at `key`, read consistently; `None` when there is none or only a tombstone.
    pub async fn get_item(
        &self,
        key: HashMap<String, AttributeValue>,
    ) -> Result<Option<HashMap<String, AttributeValue>>, FencedWriteError> {
        let output = self
            .client
            .get_item()
            .table_name(&self.table_name)
            .set_key(Some(key))
            .consistent_read(true)
            .send()
            .await
            .map_err(|error| self.read_error(&error))?;
        Ok(output.item.filter(|item| !item.contains_key(DELETED_ATTRIBUTE)))
    }

    fn read_error<E, R>(&self, error: &SdkError<E, R>) -> FencedWriteError
    where
        E: aws_sdk_dynamodb::error::ProvideErrorMetadata + std::error::Error + 'static,
        R: std::fmt::Debug,
    {
        if let SdkError::ServiceError(service) = error
            && service.err().code() == Some("ResourceNotFoundException")
        {
            return FencedWriteError::NoSuchTable { table: self.table_name.clone() };
        }
        match classify(error) {
            Failure::NotApplied(text) | Failure::Unknown(text) => FencedWriteError::Transient(text),
            Failure::Permanent(text) => FencedWriteError::Permanent(text),
        }
    }

    fn error<E, R>(&self, fence: &Fence, error: &SdkError<E, R>) -> FencedWriteError
    where
        E: aws_sdk_dynamodb::error::ProvideErrorMetadata + std::error::Error + 'static,
        R: std::fmt::Debug,
    {
        if let SdkError::ServiceError(service) = error {
            match service.err().code() {
                Some("ConditionalCheckFailedException") => return FencedWriteError::FencedOut { fence: fence.value },
                Some("ResourceNotFoundException") => {
                    return FencedWriteError::NoSuchTable { table: self.table_name.clone() };
                }
                _ => {}
            }
        }
        match classify(error) {
            // An unknown outcome is retried: a repeated fenced write with the same fence is
            // accepted (`<=`), so the retry is idempotent.
            Failure::NotApplied(text) | Failure::Unknown(text) => FencedWriteError::Transient(text),
            Failure::Permanent(text) => FencedWriteError::Permanent(text),
        }
    }
}

/// The names and values [`CONDITION`] refers to, for `fence`.
fn condition_placeholders(fence: &Fence) -> (HashMap<String, String>, HashMap<String, AttributeValue>) {
    let names = HashMap::from([
        ("#fence".to_owned(), FENCE_ATTRIBUTE.to_owned()),
        ("#scope".to_owned(), SCOPE_ATTRIBUTE.to_owned()),
    ]);
    let values = HashMap::from([
        (":fence".to_owned(), AttributeValue::N(fence.value.to_string())),
        (":scope".to_owned(), AttributeValue::S(fence.scope.clone())),
    ]);
    (names, values)
}
