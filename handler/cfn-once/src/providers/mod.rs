//! The providers cfn-once ships besides `Custom::Echo` (which lives in the core), and the
//! standard router that serves them all.

pub mod dynamodb_item;
pub mod function;

use cfn_once_core::echo::{ECHO_TYPE, Echo};
use cfn_once_core::provider::Router;

use crate::config::Config;
use dynamodb_item::{DYNAMODB_ITEM_TYPE, DynamoDbItem};

/// `Custom::Echo` and `Custom::DynamoDBItem`, as every deployment serves them.
pub fn standard_router(config: &Config, sdk: &aws_config::SdkConfig) -> Router {
    let item = DynamoDbItem::new(sdk, config.store_timeout_ms, config.item_tables.clone(), config.table_name.clone());
    let router = Router::new().register(ECHO_TYPE, Echo).register(DYNAMODB_ITEM_TYPE, item);
    if config.functions.is_empty() {
        return router;
    }
    // Resource types answered by existing functions of this region (CFN_ONCE_FUNCTIONS).
    let invoker: std::sync::Arc<dyn function::FunctionInvoker> = std::sync::Arc::new(function::LambdaInvoker::new(sdk));
    config.functions.iter().fold(router, |router, route| {
        let provider =
            function::FunctionProvider::new(route.clone(), config.region.clone(), std::sync::Arc::clone(&invoker));
        router.register(&route.resource_type, provider)
    })
}
