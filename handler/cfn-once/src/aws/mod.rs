//! What every AWS call of cfn-once shares, under the adapters, the providers and the fenced
//! writes that make the calls: how a client's calls are bounded (one attempt each, explicit
//! timeouts: `clients`) and how a failed call is read (`errors`). It names nothing else of the
//! crate, so each of them can use it without reaching up into another.

mod clients;
mod errors;

pub use clients::{call_timeouts, dynamodb_client, dynamodb_config};
pub use errors::{
    Failure, REFRESH_LOOK_KEPT_MS, Refresh, SKEW_MEASURED_MS_MIN, SignedAt, brief, classify, classify_read, of_answer,
    signature_off_ms,
};
