//! Adapters: the ports of `cfn_once_core` implemented on AWS services and HTTP (and on Route 53
//! ARC's data plane, with the `arc` feature).

#[cfg(feature = "arc")]
pub mod arc;
pub mod control_table;
pub mod dynamodb_lease;
pub mod http_sink;
pub mod https;
pub mod sqs_queue;

/// The answer bucket lives with the providers, beside the port it implements
/// (`providers::answers_itself::AnswerDrop`); this path stays for the repository's tests.
pub use crate::providers::s3_answers;

#[cfg(test)]
#[path = "classify_tests.rs"]
mod classify_tests;
