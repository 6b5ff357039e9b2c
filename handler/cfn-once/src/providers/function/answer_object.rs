//! The answer-object path: functions that answer by themselves (`cfn-response:` in
//! `CFN_ONCE_FUNCTIONS`). Each execution gives the function, as its ResponseURL, a presigned URL
//! of a fresh object of cfn-once's answer bucket (`answers_itself`), invokes it once, and reads
//! its answer from that object, now or in later polls, wherever the object is. The function
//! runs again, with a new object under a higher fence, only when no run of it can still answer
//! ([`FUNCTION_RUN_MS_MAX`] after an Invoke nobody saw the outcome of) or when the object's
//! region could not be read [`UNREADABLE_POLLS_MAX`] polls in a row.

use cfn_once_core::provider::{ProviderContext, ProviderError, Step};
use serde_json::{Map, Value, json};

use super::invoke::{Caller, Invoked};
use super::payload::{POLL_AFTER, function_error};
use crate::providers::answers_itself::{self, AnswerDrop, AnswerObject, DropError, ForRequest};

/// One self-answering route's execution: its function, how it is invoked, and the answer
/// bucket it PUTs to.
#[derive(Debug, Clone, Copy)]
pub(super) struct SelfAnswering<'a> {
    /// The route's `onEvent` function.
    pub(super) function: &'a str,
    /// Its Invokes.
    pub(super) caller: Caller<'a>,
    /// This region's answer bucket, reading the other region's too.
    pub(super) answers: &'a dyn AnswerDrop,
}

impl SelfAnswering<'_> {
    /// A function that PUTs its own answer: given a fresh object's presigned URL as its
    /// ResponseURL, invoked, and its answer read from that object, now or in later polls.
    pub(super) async fn answered_by_itself(
        &self,
        ctx: &ProviderContext,
        mut event: Map<String, Value>,
    ) -> Result<Step, ProviderError> {
        let (function, answers) = (self.function, self.answers);
        let object = AnswerObject {
            bucket: answers.bucket().to_owned(),
            region: answers.region().to_owned(),
            key: answers_itself::new_key()?,
        };
        // What a later poll needs: where the answer will be, and the event, to run the function
        // again in its own region if this one cannot be reached. Never the URL.
        let wait = json!({
            "AnswerKey": object.key,
            "AnswerBucket": object.bucket,
            "AnswerRegion": object.region,
            "Event": Value::Object(event.clone()),
        });
        let url = answers.upload_url(&object.key, answers_itself::UPLOAD_URL_VALID_FOR).await.map_err(drop_error)?;
        event.insert("ResponseURL".into(), url.expose_secret().into());
        let mut wait = wait;
        let invoked = match self.caller.invoke(ctx, function, event).await {
            Ok(invoked) => Some(invoked),
            // The function may have run, and may still PUT its answer to this object: it is read
            // where it is, as after any Invoke, and the function runs again (under a later
            // poll's higher fence, with a new object) only once it can no longer be running.
            Err(ProviderError::Unknown(why)) => {
                tracing::warn!(function, why, "the Invoke's outcome is unknown: waiting for the function's answer");
                wait[INVOKED_UNSEEN_AT_MS] = ctx.now_ms().into();
                None
            }
            Err(other) => return Err(other),
        };
        // The function has run (or may have): from here on, never invoke it again for this
        // execution; a read that fails now is tried again by the next poll.
        let read = answers.read(&object, cfn_once_core::response::BODY_BYTES_MAX).await;
        match (read, invoked) {
            (Ok(Some(answer)), _) => answers_itself::answer_from(ForRequest::of(ctx), function, &answer),
            (Ok(None), Some(Invoked::FunctionError(document))) => {
                Err(ProviderError::Failed(format!("{} before it answered", function_error(function, &document))))
            }
            (Ok(None), _) => {
                tracing::info!(function, "the function has not answered yet: waiting for its answer");
                Step::in_progress(wait, POLL_AFTER)
            }
            (Err(error), _) => {
                tracing::warn!(function, %error, "the function's answer could not be read yet: the next poll reads it");
                Step::in_progress(wait, POLL_AFTER)
            }
        }
    }

    /// A poll of a function that answers by itself: the object it was to PUT, read again where
    /// it is. When it is in the other region's bucket and two polls in a row could not read it
    /// (that region is out: an outage, not a drill, which leaves its S3 readable), the function
    /// runs again here, under this poll's higher fence, with a new object: what the
    /// unreachable execution PUTs later lands where nobody reads.
    pub(super) async fn look_for_answer(&self, ctx: &ProviderContext, mut state: Value) -> Result<Step, ProviderError> {
        let (function, answers) = (self.function, self.answers);
        let text = |field: &str| state.get(field).and_then(Value::as_str).map(str::to_owned);
        let Some(key) = text("AnswerKey").filter(|key| key.starts_with(answers_itself::ANSWER_PREFIX)) else {
            return Err(ProviderError::Failed(
                "the stored state of the wait is not an answer key of cfn-once's".into(),
            ));
        };
        // A wait stored before waits kept their place is in this region's bucket.
        let object = AnswerObject {
            bucket: text("AnswerBucket").unwrap_or_else(|| answers.bucket().to_owned()),
            region: text("AnswerRegion").unwrap_or_else(|| answers.region().to_owned()),
            key,
        };
        let elsewhere = object.region != answers.region();
        match answers.read(&object, cfn_once_core::response::BODY_BYTES_MAX).await {
            Ok(Some(answer)) => answers_itself::answer_from(ForRequest::of(ctx), function, &answer),
            // An Invoke whose outcome nobody saw, and no answer since for longer than any
            // function runs: it did not run (or died unanswered). It runs again here, under this
            // poll's fence, which is higher than the Invoke's.
            Ok(None)
                if state
                    .get(INVOKED_UNSEEN_AT_MS)
                    .and_then(Value::as_u64)
                    .is_some_and(|at_ms| ctx.now_ms() >= at_ms.saturating_add(FUNCTION_RUN_MS_MAX)) =>
            {
                let Some(Value::Object(event)) = state.get("Event").cloned() else {
                    return Err(ProviderError::Failed(
                        "the stored state of the wait has no event to run the function again with".into(),
                    ));
                };
                tracing::warn!(
                    function,
                    "no answer since an Invoke whose outcome was unknown: running the function again"
                );
                self.answered_by_itself(ctx, event).await
            }
            Ok(None) => {
                if let Some(wait) = state.as_object_mut() {
                    wait.remove(UNREADABLE_POLLS);
                }
                Ok(Step::InProgress(cfn_once_core::provider::Waiting { state, poll_after: POLL_AFTER }))
            }
            Err(DropError::Transient(why)) if elsewhere => {
                let unreadable = state.get(UNREADABLE_POLLS).and_then(Value::as_u64).unwrap_or(0) + 1;
                let event = match state.get("Event") {
                    Some(Value::Object(event)) if unreadable >= UNREADABLE_POLLS_MAX => event.clone(),
                    _ => {
                        tracing::warn!(
                            function,
                            region = %object.region,
                            unreadable,
                            error = %why,
                            "the answer's region could not be read: the next poll tries again"
                        );
                        if let Some(wait) = state.as_object_mut() {
                            wait.insert(UNREADABLE_POLLS.into(), unreadable.into());
                        }
                        return Ok(Step::InProgress(cfn_once_core::provider::Waiting {
                            state,
                            poll_after: POLL_AFTER,
                        }));
                    }
                };
                tracing::warn!(
                    function,
                    region = %object.region,
                    unreadable,
                    error = %why,
                    "the answer's region could not be read {unreadable} polls in a row: running the function again in this region"
                );
                self.answered_by_itself(ctx, event).await
            }
            Err(error) => Err(drop_error(error)),
        }
    }
}

/// The wait's count of polls in a row that could not read the other region's bucket.
const UNREADABLE_POLLS: &str = "UnreadablePolls";

/// In a wait's state: when an Invoke whose outcome was unknown was sent (epoch ms), if one was.
const INVOKED_UNSEEN_AT_MS: &str = "InvokedUnseenAtMs";

/// How long after an Invoke whose outcome nobody saw its function may still answer: Lambda's
/// longest function timeout (15 minutes), and a minute for its PUT.
pub const FUNCTION_RUN_MS_MAX: u64 = 16 * 60 * 1000;

/// After this many polls in a row (one poll interval apart) could not read the other region's
/// bucket, that region is taken as out and the function runs again in the polling region.
pub const UNREADABLE_POLLS_MAX: u64 = 2;

/// The answer bucket's failure as the provider's.
fn drop_error(error: DropError) -> ProviderError {
    match error {
        DropError::Transient(why) => ProviderError::Transient(why),
        DropError::Deferred(why) => ProviderError::Deferred(why),
        DropError::Permanent(why) => ProviderError::Failed(why),
    }
}
