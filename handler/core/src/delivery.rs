//! Sending the committed response: the port, and the bounded retry loop around it.
//!
//! Only committed bytes are ever sent (S1), so a PUT may safely be repeated: by a retry here, by
//! a later delivery of the same message, or by the other region. A retry never changes the body.

use async_trait::async_trait;

use crate::clock::{Clock, within};
use crate::random::{Random, full_jitter_ms};
use crate::response_url::ResponseUrl;

/// Why a PUT failed. Messages never contain the URL.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum PutError {
    /// A timeout, a connection failure, a 5xx, a 429: worth another attempt.
    #[error("response PUT failed, will retry: {0}")]
    Retryable(String),
    /// A 4xx such as an expired presigned URL, or a redirect (never followed): retrying will
    /// not help.
    #[error("response PUT refused: {0}")]
    Permanent(String),
}

/// The port that PUTs a body to a ResponseURL, one attempt per call.
#[async_trait]
pub trait ResponseSink: Send + Sync + std::fmt::Debug {
    async fn put(&self, url: &ResponseUrl, body: &[u8]) -> Result<(), PutError>;
}

/// How hard to try.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PutPolicy {
    pub attempts_max: u32,
    pub attempt_timeout_ms: u64,
    pub backoff_base_ms: u64,
    pub backoff_max_ms: u64,
}

/// PUTs `body` with up to `policy.attempts_max` attempts and full-jitter backoff between them.
/// Returns the number of attempts it took.
pub async fn put_with_retries(
    sink: &dyn ResponseSink,
    url: &ResponseUrl,
    body: &[u8],
    policy: PutPolicy,
    clock: &dyn Clock,
    random: &dyn Random,
) -> Result<u32, PutError> {
    let mut last = PutError::Retryable("no attempt was made".into());
    for attempt in 1..=policy.attempts_max.max(1) {
        let result = within(clock, policy.attempt_timeout_ms, sink.put(url, body))
            .await
            .unwrap_or_else(|| Err(PutError::Retryable(format!("no answer within {} ms", policy.attempt_timeout_ms))));
        match result {
            Ok(()) => return Ok(attempt),
            Err(error @ PutError::Permanent(_)) => return Err(error),
            Err(error) => {
                tracing::warn!(attempt, %error, "response PUT attempt failed");
                last = error;
            }
        }
        if attempt < policy.attempts_max {
            clock.sleep_ms(full_jitter_ms(random, attempt, policy.backoff_base_ms, policy.backoff_max_ms)).await;
        }
    }
    Err(last)
}
