//! The providers cfn-once ships besides `Custom::Echo` (which lives in the core), and the
//! standard router that serves them all.

pub mod dynamodb_item;

use cfn_once_core::echo::{ECHO_TYPE, Echo};
use cfn_once_core::provider::Router;

use crate::config::Config;
use dynamodb_item::{DYNAMODB_ITEM_TYPE, DynamoDbItem};

/// `Custom::Echo` and `Custom::DynamoDBItem`, as every deployment serves them.
pub fn standard_router(config: &Config, sdk: &aws_config::SdkConfig) -> Router {
    let item = DynamoDbItem::new(sdk, config.store_timeout_ms, config.item_tables.clone(), config.table_name.clone());
    Router::new().register(ECHO_TYPE, Echo).register(DYNAMODB_ITEM_TYPE, item)
}
