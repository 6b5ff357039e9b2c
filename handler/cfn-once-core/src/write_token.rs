//! The token that makes a write once per request (`crate::fenced`): the same for every attempt
//! of the write and for the same write made again by a rerun of the request, unique to it
//! otherwise.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, PoisonError};

use crate::fingerprint::short_digest;

/// The length of a token's period, in seconds: a week. A token names the period it was made in,
/// and a write looks for its token of this period and of the one before, so a write made again
/// up to a week after it first applied is still found applied. No request runs that long: a
/// request is answered within CloudFormation's deadline (an hour for a custom resource, at most
/// the 12-hour timeout of a wait condition), and a write of it is made again only before then.
/// Tokens older than two periods are removed by a later update of the item
/// (`crate::fenced::STALE_TOKENS_PRUNED_AT`).
pub const WRITE_TOKEN_PERIOD_S: u64 = 7 * 86_400;

/// The writes of one step of a request: its run, or one of its polls. A write's token is made
/// from the step, the write itself (what it writes where, and under which condition) and how
/// many identical writes the step made before it, so a rerun of the step (after an unknown
/// outcome, a lost lease, a transient error) makes the same tokens for the same writes, in any
/// region and any process, and two identical writes of one step have two.
#[derive(Clone)]
pub struct WriteScope {
    id: String,
    made: Arc<Mutex<HashMap<String, u32>>>,
}

impl std::fmt::Debug for WriteScope {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_tuple("WriteScope").field(&self.id).finish()
    }
}

/// Two scopes are the same scope when they have the same id (their counts are the run's).
impl PartialEq for WriteScope {
    fn eq(&self, other: &Self) -> bool {
        self.id == other.id
    }
}

impl Eq for WriteScope {}

impl WriteScope {
    /// The writes made under a bare fence of the request `fence_scope` (`WriteRules::fenced`):
    /// no step, and no count shared with other writes, so two identical writes of the request
    /// are one. A provider's writes take the step's scope from `ProviderContext::owned` or
    /// `ProviderContext::fenced`.
    pub fn of_request(fence_scope: &str) -> Self {
        Self::with_id(fence_scope.to_owned())
    }

    /// The writes of step `step` (0: the run, `n`: the poll that follows `n - 1` answered
    /// polls) of the attempt `attempt` (its fingerprint) of the request `fence_scope`.
    pub fn of_step(fence_scope: &str, attempt: &str, step: u32) -> Self {
        Self::with_id(short_digest(&[fence_scope, attempt, &step.to_string()]))
    }

    fn with_id(id: String) -> Self {
        Self { id, made: Arc::default() }
    }

    /// The step is made again from its start (the provider is called again): its writes are
    /// counted again from none.
    pub fn restart(&self) {
        self.made.lock().unwrap_or_else(PoisonError::into_inner).clear();
    }

    /// The token of the next write whose canonical form is `content`, made at `now_ms`.
    pub fn token(&self, content: &str, now_ms: u64) -> WriteToken {
        let before = {
            let mut made = self.made.lock().unwrap_or_else(PoisonError::into_inner);
            let count = made.entry(content.to_owned()).or_insert(0);
            *count += 1;
            *count - 1
        };
        WriteToken::new(period_of(now_ms), short_digest(&[&self.id, content, &before.to_string()]))
    }
}

/// The period `now_ms` falls in.
fn period_of(now_ms: u64) -> u64 {
    now_ms / 1000 / WRITE_TOKEN_PERIOD_S
}

/// One write's token: `<period>.<digest>`. Every attempt of the write carries it; the write is
/// refused where the item carries it, or the same digest of the period before.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct WriteToken {
    text: String,
    earlier: String,
}

impl WriteToken {
    fn new(period: u64, digest: String) -> Self {
        Self { text: format!("{period}.{digest}"), earlier: format!("{}.{digest}", period.saturating_sub(1)) }
    }

    /// The token as this write stamps it.
    pub fn text(&self) -> &str {
        &self.text
    }

    /// The same write's token, made in the period before.
    pub fn earlier(&self) -> &str {
        &self.earlier
    }

    /// Whether `members` (an item's tokens) hold this write's token, of this period or the one
    /// before.
    pub fn is_among(&self, members: &[&str]) -> bool {
        members.iter().any(|member| *member == self.text || *member == self.earlier)
    }

    /// Whether the token `member` is older than any write made at `now_ms` looks for.
    pub fn is_stale(member: &str, now_ms: u64) -> bool {
        let period = member.split_once('.').and_then(|(period, _)| period.parse::<u64>().ok());
        period.is_some_and(|period| period.saturating_add(1) < period_of(now_ms))
    }
}
