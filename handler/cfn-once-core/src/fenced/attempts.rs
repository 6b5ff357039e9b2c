//! Sending one fenced write: its attempts, and what an attempt whose outcome is unknown leads to.
//!
//! The sender's client makes one attempt per call, each ended by its timeouts, so every attempt
//! is seen here and none is repeated unseen. A write is sent at most [`WRITE_ATTEMPTS_MAX`]
//! times, with the same token every time (the write's condition refuses an item that already
//! carries it, so at most one attempt applies). An attempt that certainly did nothing
//! (throttled, a write conflict) is sent again; so is one whose outcome is unknown (a timeout, a
//! 5xx, a reset), and then the next attempt that reaches the table settles it: applied (the
//! earlier one did not), or refused by an item that carries the token (the earlier one did, and
//! stands) or that does not (it did not). Other writers may write the item between attempts:
//! an update keeps the tokens it finds, so the item still tells. Only when no later attempt
//! reaches the table is the outcome left unknown ([`FencedWriteError::Unknown`]).

use std::future::Future;

use super::FencedWriteError;
use crate::clock::Clock;
use crate::failure::Failure;

/// The most attempts of one write (or read). With the table's call timeout (3 s by default) and
/// the backoff between attempts, a write takes at most about 10 s.
pub const WRITE_ATTEMPTS_MAX: u32 = 3;

/// The wait before the second attempt, in ms; it doubles before each later one.
pub const BACKOFF_MS_BASE: u64 = 100;

/// What one attempt came to.
#[derive(Debug)]
pub enum Attempt<T, I> {
    /// The table applied it; the call's output.
    Applied(T),
    /// The write's condition was refused by this item (`None`: there was none).
    Refused(Option<I>),
    /// It failed: the table is missing, or as classified.
    Failed(Failed),
}

/// A failed attempt.
#[derive(Debug)]
pub enum Failed {
    /// The table does not exist.
    NoSuchTable,
    /// Anything else, classified.
    Other(Failure),
}

/// What sending a write came to: an attempt applied it, or its condition was refused by an item.
#[derive(Debug)]
pub enum Sent<T, I> {
    /// Applied by an attempt; that attempt's output.
    Applied(T),
    /// Refused by this item (`None`: there was none); after an unknown outcome, the item may
    /// carry the write's own token.
    Refused(Option<I>),
}

/// Sends one write (`attempt` makes one attempt of it, the same write every time) to
/// `table_name` until an attempt reaches the table, at most [`WRITE_ATTEMPTS_MAX`] times, the
/// second `backoff_ms_base` after the first on `clock` and each later one twice as long after.
/// An unknown outcome that no later attempt settles is [`FencedWriteError::Unknown`]; failures
/// that certainly left nothing applied are [`FencedWriteError::Transient`], `Deferred` or
/// `Permanent`.
pub async fn send<T, I, F, Fut>(
    table_name: &str,
    clock: &dyn Clock,
    backoff_ms_base: u64,
    mut attempt: F,
) -> Result<Sent<T, I>, FencedWriteError>
where
    F: FnMut() -> Fut,
    Fut: Future<Output = Attempt<T, I>>,
{
    // The first unknown outcome, once there was one: from then on, the write may stand.
    let mut unknown: Option<String> = None;
    let mut last = String::from("no attempt was made");
    let may_stand = |unknown: Option<String>, then: String| match unknown {
        Some(earlier) if earlier == then => FencedWriteError::Unknown(earlier),
        Some(earlier) => FencedWriteError::Unknown(format!("{earlier}; then {then}")),
        None => FencedWriteError::Transient(then),
    };
    for number in 1..=WRITE_ATTEMPTS_MAX {
        if number > 1 {
            clock.sleep_ms(backoff_ms_base << (number - 2)).await;
        }
        let failure = match attempt().await {
            Attempt::Applied(output) => return Ok(Sent::Applied(output)),
            Attempt::Refused(item) => return Ok(Sent::Refused(item)),
            // A table that is gone holds no write of this one, whatever an earlier attempt did.
            Attempt::Failed(Failed::NoSuchTable) => {
                return Err(FencedWriteError::NoSuchTable { table: table_name.to_owned() });
            }
            Attempt::Failed(Failed::Other(failure)) => failure,
        };
        match failure {
            Failure::Unknown(text) => {
                tracing::warn!(attempt = number, why = text, "fenced table call outcome unknown; sending it again");
                unknown.get_or_insert_with(|| text.clone());
                last = text;
            }
            Failure::NotApplied(text) => last = text,
            // Nothing in this invocation changes it: a later one tries again.
            Failure::Deferred(text) => {
                return Err(match unknown {
                    Some(_) => may_stand(unknown, format!("deferred: {text}")),
                    None => FencedWriteError::Deferred(text),
                });
            }
            // Refused for good: this attempt did nothing, but an earlier one may have.
            Failure::Permanent(text) => {
                return Err(match unknown {
                    Some(earlier) => FencedWriteError::Unknown(format!("{earlier}; then refused: {text}")),
                    None => FencedWriteError::Permanent(text),
                });
            }
        }
    }
    Err(may_stand(unknown, last))
}
