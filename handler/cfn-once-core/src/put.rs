//! The PUT of a committed answer to its ResponseURL, with retries: the port that makes one
//! attempt ([`ResponseSink`]), and the bounded retry loop around it ([`put_with_retries`]).
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
    /// Makes one PUT attempt of `body` to `url`, classifying any failure for the retry loop.
    async fn put(&self, url: &ResponseUrl, body: &[u8]) -> Result<(), PutError>;
}

/// How hard to try.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PutPolicy {
    /// PUT attempts per delivery; after the last, the message is retried later.
    pub attempts_max: u32,
    /// How long one attempt may take, in ms; also the grace a fresh commit is left to its
    /// committer to PUT.
    pub attempt_timeout_ms: u64,
    /// The full-jitter backoff's base, in ms, doubled per attempt up to `backoff_max_ms`.
    pub backoff_base_ms: u64,
    /// The longest backoff between attempts, in ms.
    pub backoff_max_ms: u64,
}

/// The shortest attempt worth starting.
const ATTEMPT_MS_MIN: u64 = 100;

/// PUTs `body` with up to `policy.attempts_max` attempts and full-jitter backoff between them,
/// all before `stop_at_ms` (the invocation's end: a Lambda killed mid-retry would fail its whole
/// batch). Returns the number of attempts it took.
pub async fn put_with_retries(
    sink: &dyn ResponseSink,
    url: &ResponseUrl,
    body: &[u8],
    policy: PutPolicy,
    stop_at_ms: u64,
    clock: &dyn Clock,
    random: &dyn Random,
) -> Result<u32, PutError> {
    let mut last = PutError::Retryable("no time was left in this invocation to send the response".into());
    for attempt in 1..=policy.attempts_max.max(1) {
        let timeout_ms = policy.attempt_timeout_ms.min(stop_at_ms.saturating_sub(clock.now_ms()));
        if timeout_ms < ATTEMPT_MS_MIN {
            break;
        }
        let result = within(clock, timeout_ms, sink.put(url, body))
            .await
            .unwrap_or_else(|| Err(PutError::Retryable(format!("no answer within {timeout_ms} ms"))));
        match result {
            Ok(()) => return Ok(attempt),
            Err(error @ PutError::Permanent(_)) => return Err(error),
            Err(error) => {
                tracing::warn!(attempt, %error, "response PUT attempt failed");
                last = error;
            }
        }
        if attempt < policy.attempts_max {
            let backoff_ms = full_jitter_ms(random, attempt, policy.backoff_base_ms, policy.backoff_max_ms);
            clock.sleep_ms(backoff_ms.min(stop_at_ms.saturating_sub(clock.now_ms()))).await;
        }
    }
    Err(last)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::clock::ManualClock;
    use crate::doubles::{PutFault, RecordingSink, drive};
    use crate::random::SplitMix64;
    use crate::response_url::UrlPolicy;

    #[test]
    fn retries_stop_before_the_invocation_ends() {
        let clock = ManualClock::new(1_000_000);
        let sink = RecordingSink::new();
        for _ in 0..5 {
            sink.inject(PutFault::Hang);
        }
        let url = UrlPolicy::new(vec![]).check("https://b.s3.amazonaws.com/k").expect("url");
        let policy =
            PutPolicy { attempts_max: 5, attempt_timeout_ms: 2_000, backoff_base_ms: 100, backoff_max_ms: 1_000 };
        let random = SplitMix64::new(1);
        let result = drive(&clock, put_with_retries(&sink, &url, b"{}", policy, 1_003_000, &clock, &random));
        assert!(matches!(result, Err(PutError::Retryable(_))), "{result:?}");
        assert!(clock.now_ms() <= 1_003_000, "gave up at {}, after the invocation's end", clock.now_ms());
    }
}
