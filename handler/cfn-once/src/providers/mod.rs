//! The providers cfn-once ships besides `Custom::Echo` (which lives in the core), and the
//! standard router that serves them all.
//!
//! A provider's own ports live with it, and so do their AWS implementations: the function
//! provider's Lambda Invoke (`function::LambdaInvoker`) and its answer bucket
//! (`s3_answers::S3AnswerDrop`). The providers name only what is below them (the fenced writes,
//! `aws`, the core), never the adapters or the wiring above them.

pub mod answers_itself;
pub mod dynamodb_item;
pub mod function;
pub mod s3_answers;

use std::sync::Arc;

use cfn_once_core::config::Config;
use cfn_once_core::echo::{ECHO_TYPE, Echo};
use cfn_once_core::provider::Router;

use dynamodb_item::{DYNAMODB_ITEM_TYPE, DynamoDbItem};

/// `Custom::Echo` and `Custom::DynamoDBItem`, as every deployment serves them.
pub fn standard_router(config: &Config, sdk: &aws_config::SdkConfig) -> Router {
    let item = DynamoDbItem::new(sdk, config.store_timeout_ms, config.item_tables.clone(), config.table_name.clone());
    let router = Router::new().register(ECHO_TYPE, Echo).register(DYNAMODB_ITEM_TYPE, item);
    if config.functions.is_empty() {
        return router;
    }
    // Resource types answered by existing functions of this region (CFN_ONCE_FUNCTIONS).
    let invoker: Arc<dyn function::FunctionInvoker> = Arc::new(function::LambdaInvoker::new(sdk));
    // Functions that answer by themselves PUT to this region's answer bucket (CFN_ONCE_ANSWER_BUCKET).
    let answers = config.answer_bucket.as_deref().map(|bucket| answer_drop(sdk, bucket, config.store_timeout_ms));
    config.functions.iter().fold(router, |router, route| {
        let provider = function::FunctionProvider::new(route.clone(), config.region.clone(), Arc::clone(&invoker));
        let provider = match &answers {
            Some(Ok(answers)) if route.answers_itself => provider.with_answer_drop(Arc::clone(answers)),
            _ => provider,
        };
        // A function runs with the handler's role: only privileged requests reach it
        // (CFN_ONCE_PRIVILEGED_TOPIC_ARNS; all are where none is named).
        router.register_privileged(&route.resource_type, provider)
    })
}

/// The answer bucket, or (logged) none: its routes then answer FAILED saying so. It fails only
/// when the TLS configuration does, which stops the function at start before this is reached.
fn answer_drop(
    sdk: &aws_config::SdkConfig,
    bucket: &str,
    timeout_ms: u64,
) -> anyhow::Result<Arc<dyn answers_itself::AnswerDrop>> {
    let answers = s3_answers::S3AnswerDrop::new(sdk, bucket, timeout_ms)
        .inspect_err(|error| tracing::error!(%error, "the answer bucket is not usable"))?;
    Ok(Arc::new(answers))
}
