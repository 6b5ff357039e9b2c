//! Adapters: the ports of `cfn_once_core` implemented on AWS services and HTTP (and on Route 53
//! ARC's data plane, with the `arc` feature).

#[cfg(feature = "arc")]
pub mod arc;
mod aws_errors;
pub mod control_table;
pub mod dynamodb_lease;
pub mod http_sink;
pub mod https;
pub mod s3_answers;
pub mod sqs_queue;

pub use aws_errors::{Failure, Refresh, SKEW_MEASURED_MS_MIN, SignedAt, brief, classify, of_answer, signature_off_ms};
