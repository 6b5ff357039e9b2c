//! Sending one fenced write: its attempts, and what an attempt whose outcome is unknown leads to.
//!
//! The table's client makes one attempt per call, each ended by its timeouts (connect, attempt,
//! operation), so every attempt is seen here and none is repeated unseen by the SDK. A write is
//! sent at most [`WRITE_ATTEMPTS_MAX`] times, with the same token every time (the write's
//! condition refuses an item that already carries it, so at most one attempt applies). An attempt
//! that certainly did nothing (throttled, a write conflict) is sent again; so is one whose
//! outcome is unknown (a timeout, a 5xx, a reset), and then the next attempt that reaches the
//! table settles it: applied (the earlier one did not), or refused by an item that carries the
//! token (the earlier one did, and stands) or that does not (it did not). Only when no later
//! attempt reaches the table is the outcome left unknown ([`FencedWriteError::Unknown`]).

use std::future::Future;
use std::time::Duration;

use aws_sdk_dynamodb::config::http::HttpResponse;
use aws_sdk_dynamodb::error::{ProvideErrorMetadata, SdkError};
use aws_sdk_dynamodb::operation::delete_item::DeleteItemError;
use aws_sdk_dynamodb::operation::put_item::PutItemError;
use aws_sdk_dynamodb::operation::update_item::UpdateItemError;

use super::{FencedWriteError, Item};
use crate::aws::{Failure, classify};

/// The most attempts of one write (or read). With the table's call timeout (3 s by default) and
/// the backoff between attempts, a write takes at most about 10 s.
pub const WRITE_ATTEMPTS_MAX: u32 = 3;

/// The wait before the second attempt; it doubles before each later one.
pub(super) const BACKOFF_MS_BASE: u64 = 100;

/// What one attempt came to.
#[derive(Debug)]
pub(super) enum Attempt<T> {
    /// The table applied it; the call's output.
    Applied(T),
    /// The write's condition was refused by this item (`None`: there was none).
    Refused(Option<Item>),
    /// It failed: the table is missing, or as [`classify`] says.
    Failed(Failed),
}

/// A failed attempt.
#[derive(Debug)]
pub(super) enum Failed {
    /// `ResourceNotFoundException`: the table does not exist.
    NoSuchTable,
    /// Anything else, classified.
    Other(Failure),
}

/// What sending a write came to: an attempt applied it, or its condition was refused by an item.
#[derive(Debug)]
pub(super) enum Sent<T> {
    /// Applied by an attempt; that attempt's output.
    Applied(T),
    /// Refused by this item (`None`: there was none); after an unknown outcome, the item may
    /// carry the write's own token.
    Refused(Option<Item>),
}

/// Sends one write (`attempt` makes one attempt of it, the same write every time) to
/// `table_name` until an attempt reaches the table, at most [`WRITE_ATTEMPTS_MAX`] times, the
/// second `backoff_ms_base` after the first and each later one twice as long after. An
/// unknown outcome that no later attempt settles is [`FencedWriteError::Unknown`]; failures that
/// certainly left nothing applied are [`FencedWriteError::Transient`] or `Permanent`.
pub(super) async fn send<T, F, Fut>(
    table_name: &str,
    backoff_ms_base: u64,
    mut attempt: F,
) -> Result<Sent<T>, FencedWriteError>
where
    F: FnMut() -> Fut,
    Fut: Future<Output = Attempt<T>>,
{
    // The first unknown outcome, once there was one: from then on, the write may stand.
    let mut unknown: Option<String> = None;
    let mut last = String::from("no attempt was made");
    for number in 1..=WRITE_ATTEMPTS_MAX {
        if number > 1 {
            tokio::time::sleep(Duration::from_millis(backoff_ms_base << (number - 2))).await;
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
            Failure::NotApplied(text) | Failure::Deferred(text) => last = text,
            // Refused for good: this attempt did nothing, but an earlier one may have.
            Failure::Permanent(text) => {
                return Err(match unknown {
                    Some(earlier) => FencedWriteError::Unknown(format!("{earlier}; then refused: {text}")),
                    None => FencedWriteError::Permanent(text),
                });
            }
        }
    }
    Err(match unknown {
        Some(earlier) if earlier == last => FencedWriteError::Unknown(earlier),
        Some(earlier) => FencedWriteError::Unknown(format!("{earlier}; then {last}")),
        None => FencedWriteError::Transient(last),
    })
}

/// One attempt's result, as [`send`] takes it.
pub(super) fn attempt<O, E>(result: Result<O, SdkError<E, HttpResponse>>) -> Attempt<O>
where
    E: Refusable + ProvideErrorMetadata + std::error::Error + 'static,
{
    let error = match result {
        Ok(output) => return Attempt::Applied(output),
        Err(error) => error,
    };
    if let SdkError::ServiceError(service) = &error {
        if let Some(item) = service.err().refused_by() {
            return Attempt::Refused(item.cloned());
        }
        if service.err().code() == Some("ResourceNotFoundException") {
            return Attempt::Failed(Failed::NoSuchTable);
        }
    }
    Attempt::Failed(Failed::Other(classify(&error)))
}

/// An operation's error that may be a refused condition, carrying the item that refused it.
pub(super) trait Refusable {
    /// The item a refused condition met (`Some(None)`: there was none); `None` if the call
    /// failed otherwise.
    fn refused_by(&self) -> Option<Option<&Item>>;
}

impl Refusable for PutItemError {
    fn refused_by(&self) -> Option<Option<&Item>> {
        match self {
            Self::ConditionalCheckFailedException(failed) => Some(failed.item.as_ref()),
            _ => None,
        }
    }
}

impl Refusable for UpdateItemError {
    fn refused_by(&self) -> Option<Option<&Item>> {
        match self {
            Self::ConditionalCheckFailedException(failed) => Some(failed.item.as_ref()),
            _ => None,
        }
    }
}

impl Refusable for DeleteItemError {
    fn refused_by(&self) -> Option<Option<&Item>> {
        match self {
            Self::ConditionalCheckFailedException(failed) => Some(failed.item.as_ref()),
            _ => None,
        }
    }
}

/// A read's errors are never refusals.
impl Refusable for aws_sdk_dynamodb::operation::get_item::GetItemError {
    fn refused_by(&self) -> Option<Option<&Item>> {
        None
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Mutex;

    use super::*;

    /// Sends a write whose attempts come to `attempts`, in order; what it came to, and how many
    /// attempts were made.
    async fn sent(attempts: Vec<Attempt<&'static str>>) -> (Result<Sent<&'static str>, FencedWriteError>, usize) {
        let total = attempts.len();
        let attempts = Mutex::new(attempts.into_iter());
        let result = send("t", 0, || {
            let next = attempts.lock().expect("attempts").next().expect("no more attempts than given");
            async move { next }
        })
        .await;
        let left = attempts.lock().expect("attempts").len();
        (result, total - left)
    }

    fn unknown() -> Attempt<&'static str> {
        Attempt::Failed(Failed::Other(Failure::Unknown("reset".into())))
    }

    fn throttled() -> Attempt<&'static str> {
        Attempt::Failed(Failed::Other(Failure::NotApplied("throttled".into())))
    }

    fn denied() -> Attempt<&'static str> {
        Attempt::Failed(Failed::Other(Failure::Permanent("denied".into())))
    }

    #[tokio::test]
    async fn an_unknown_outcome_is_settled_by_the_next_attempt_that_reaches_the_table() {
        let check = |attempts: Vec<Attempt<&'static str>>, expected: &'static str, made: usize| async move {
            let (result, attempts) = sent(attempts).await;
            assert_eq!((format!("{result:?}"), attempts), (expected.to_owned(), made));
        };
        check(vec![Attempt::Applied("out")], r#"Ok(Applied("out"))"#, 1).await;
        check(vec![unknown(), Attempt::Applied("out")], r#"Ok(Applied("out"))"#, 2).await;
        check(vec![unknown(), Attempt::Refused(None)], "Ok(Refused(None))", 2).await;
        check(vec![throttled(), unknown(), Attempt::Refused(None)], "Ok(Refused(None))", 3).await;
        check(vec![unknown(), unknown(), unknown()], r#"Err(Unknown("reset"))"#, 3).await;
        check(vec![unknown(), throttled(), throttled()], r#"Err(Unknown("reset; then throttled"))"#, 3).await;
        check(vec![throttled(), throttled(), throttled()], r#"Err(Transient("throttled"))"#, 3).await;
        check(vec![denied()], r#"Err(Permanent("denied"))"#, 1).await;
        check(vec![unknown(), denied()], r#"Err(Unknown("reset; then refused: denied"))"#, 2).await;
        check(vec![unknown(), Attempt::Failed(Failed::NoSuchTable)], r#"Err(NoSuchTable { table: "t" })"#, 2).await;
    }
}
