//! The stock cfn-once Lambda function: the shipped providers (`Custom::Echo`,
//! `Custom::DynamoDBItem`), configured by the `CFN_ONCE_*` environment variables. With
//! `CFN_ONCE_MODE=sweeper` it is the lease table's sweeper instead. A provider author's own
//! function has this same shape, with `.provider(..)` calls added.
//!
//! It runs on a current-thread runtime: the function waits on the network, its providers never
//! block a thread, and one thread spares every request the wake-ups between worker threads
//! (BENCHMARKS.md). A provider that blocks needs the multi-thread default (`#[tokio::main]`).

#[tokio::main(flavor = "current_thread")]
async fn main() -> Result<(), cfn_once::Error> {
    cfn_once::Handler::from_env()?.with_standard_providers().run().await
}
