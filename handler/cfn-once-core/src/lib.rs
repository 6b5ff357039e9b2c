#![warn(missing_docs)]
//! cfn-once-core: the part of cfn-once that does no I/O.
//!
//! Request decoding, the lease protocol and its decision rules, provider routing and response
//! building are plain types and functions here. The outside world (DynamoDB, S3 over HTTP, SQS,
//! the clock, randomness) is reached only through the traits in [`lease`], [`delivery`],
//! [`clock`] and [`random`]; the `cfn-once` crate supplies the adapters. This crate depends on
//! no AWS SDK, HTTP client, async runtime or `lambda_runtime`, and its Cargo.toml is where that
//! rule is enforced.
//!
//! Where things are: [`request`] decodes an SQS record, [`response_url`] validates and hides the
//! ResponseURL, [`fingerprint`] identifies a request, [`lease`] defines the record and the store
//! port, [`memory_store`] is the in-memory store, [`provider`] and [`properties`] are what a
//! provider author uses, [`echo`] is the built-in `Custom::Echo`, [`response`] builds the body,
//! [`delivery`] PUTs it, [`worker`] ties them into the protocol for one delivery, and [`testing`]
//! holds the fault-injecting doubles the test suites and the simulator share.

pub mod batch;
pub mod clock;
pub mod config;
pub mod control;
pub mod deadline;
pub mod decision;
pub mod delivery;
pub mod echo;
pub mod fingerprint;
pub mod kit;
pub mod lease;
pub mod memory_store;
pub mod metrics;
pub mod ownership;
pub mod properties;
pub mod provider;
pub mod random;
pub mod request;
pub mod response;
pub mod response_url;
pub mod settings;
pub mod testing;
pub mod timestamp;
pub mod worker;

#[cfg(test)]
mod fuzz_tests;
