//! The fenced write, apart from any SDK: the one condition and update expression a write is sent
//! with, the token that makes it once per request, its attempts, and what a refusal means.
//! `cfn_once::fenced::FencedTable` sends these to DynamoDB through the AWS SDK; the simulator
//! sends the same expressions to its own table, which evaluates them as DynamoDB does. So what
//! the simulator checks is this code, not a copy of its rules.
//!
//! The rules themselves (which fence and owner admit a write) are `crate::ownership`'s; see
//! `cfn_once::fenced` for the guarantees, written for provider authors.

mod attempts;
mod dialect;
mod expression;

#[cfg(test)]
mod tests;

use crate::failure::Failure;
use crate::ownership::{Refusal, WriteRefused};
use crate::provider::ProviderError;

pub use self::attempts::{Attempt, BACKOFF_MS_BASE, Failed, Sent, WRITE_ATTEMPTS_MAX, send};
pub use self::dialect::{Dialect, Literal, Plain, canonical_part, carries, found, stale_tokens, stamp};
pub use self::expression::{Condition, Expression, Kind, Update, identity};
pub use crate::write_token::{WRITE_TOKEN_PERIOD_S, WriteScope, WriteToken};

/// The attribute holding the fence value of the last accepted write.
pub const FENCE_ATTRIBUTE: &str = "cfn_once_fence";
/// The attribute holding the scope (request) of that fence.
pub const SCOPE_ATTRIBUTE: &str = "cfn_once_fence_scope";
/// The attribute holding the item's owner (`<StackId>/<LogicalResourceId>`), on owned writes.
pub const OWNER_ATTRIBUTE: &str = "cfn_once_owner";
/// The attribute holding the tokens of the writes applied to the item (a string set): an update
/// adds its own, a put or tombstone replaces them with its own. A write is refused where its
/// token already is, so a write of a request is applied once, whatever retries and reruns it.
pub const WRITES_ATTRIBUTE: &str = "cfn_once_writes";
/// On a tombstone: when the item was deleted, epoch ms.
pub const DELETED_ATTRIBUTE: &str = "cfn_once_deleted_ms";
/// On a tombstone: when it may go, epoch seconds (DynamoDB TTL's unit).
pub const EXPIRES_ATTRIBUTE: &str = "cfn_once_expires_at";
/// How long a tombstone is kept, in seconds: a day.
pub const TOMBSTONE_RETENTION_S: u64 = 86_400;
/// Stale tokens an update must find on its item before it removes them: an item written rarely
/// keeps a few hundred bytes of them, one written often is cleaned now and then, never at every
/// write.
pub const STALE_TOKENS_PRUNED_AT: usize = 16;

/// Why a fenced write did not happen, or may not have.
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
        owner: Option<crate::ownership::Owner>,
    },
    /// The condition of your own did not hold, and the write is not in the table.
    #[error("the write's condition did not hold")]
    ConditionFailed,
    /// The table does not exist (in the client's region).
    #[error("table {table} does not exist")]
    NoSuchTable {
        /// The table named.
        table: String,
    },
    /// Certainly not applied (throttled, a write conflict) by any attempt: the write may be
    /// made again under the same fence.
    #[error("DynamoDB is unavailable: {0}")]
    Transient(String),
    /// Certainly not applied, and nothing this process can do changes that now (credentials
    /// that expired and that nothing here refreshes): the request is tried again by a later
    /// invocation.
    #[error("DynamoDB refused the write's credentials: {0}")]
    Deferred(String),
    /// An attempt's outcome is unknown (a timeout, a 5xx, a lost reply) and no later attempt
    /// reached the table to settle it: the write may stand. As a `ProviderError` it is
    /// `Unknown`: the provider runs again only under a higher fence, and its write, sent again
    /// with the same token, is then settled.
    #[error("whether the write was applied is unknown ({0}); it may stand")]
    Unknown(String),
    /// Refused for good (access denied, invalid item).
    #[error("DynamoDB refused the write: {0}")]
    Permanent(String),
}

impl From<FencedWriteError> for ProviderError {
    fn from(error: FencedWriteError) -> Self {
        match error {
            FencedWriteError::Transient(_) => ProviderError::Transient(error.to_string()),
            FencedWriteError::Deferred(_) => ProviderError::Deferred(error.to_string()),
            FencedWriteError::Unknown(_) => ProviderError::Unknown(error.to_string()),
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

impl From<Refusal> for FencedWriteError {
    fn from(refusal: Refusal) -> Self {
        match refusal {
            Refusal::Rules(refused) => refused.into(),
            Refusal::Condition => Self::ConditionFailed,
        }
    }
}

impl From<Failure> for ProviderError {
    /// A failure of a provider's own AWS call: retried under the same fence if certainly not
    /// applied, run again under a higher fence if it may have been, left to a later invocation
    /// if deferred (expired credentials: `cfn_once::aws::Refresh::reconsider` it first, so that
    /// credentials the SDK reloads are retried now), FAILED if it never will work.
    fn from(failure: Failure) -> Self {
        match failure {
            Failure::NotApplied(text) => ProviderError::Transient(text),
            Failure::Deferred(text) => ProviderError::Deferred(text),
            Failure::Unknown(text) => ProviderError::Unknown(text),
            Failure::Permanent(text) => ProviderError::Failed(text),
        }
    }
}
