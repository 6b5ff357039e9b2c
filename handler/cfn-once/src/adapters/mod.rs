//! Adapters: the ports of `cfn_once_core` implemented on AWS services and HTTP (and on Route 53
//! ARC's data plane, with the `arc` feature).

#[cfg(feature = "arc")]
pub mod arc;
pub mod control_table;
pub mod dynamodb_lease;
pub mod http_sink;
pub mod https;
pub mod s3_answers;
pub mod sqs_queue;
