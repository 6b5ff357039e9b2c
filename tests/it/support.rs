//! Test doubles used by several test files.

use std::sync::Arc;
use std::sync::atomic::{AtomicU32, Ordering};

use async_trait::async_trait;
use cfn_once::config::Config;
use cfn_once::providers::standard_router;
use cfn_once_core::echo::Echo;
use cfn_once_core::properties::PropertyMap;
use cfn_once_core::provider::{Provider, ProviderContext, ProviderError, ProviderOutput, Router};
use cfn_once_tests::LocalRegion;

/// The ResourceType of [`Counted`].
pub const COUNTED_TYPE: &str = "Custom::Counted";

/// Echo that counts how often its Create ran.
#[derive(Debug, Clone, Default)]
pub struct Counted {
    pub creates: Arc<AtomicU32>,
}

impl Counted {
    pub fn creates(&self) -> u32 {
        self.creates.load(Ordering::SeqCst)
    }

    /// The standard router plus this provider.
    pub fn router(&self, region: &LocalRegion, config: &Config) -> Router {
        standard_router(config, region.dynamodb.clone()).register(COUNTED_TYPE, self.clone())
    }
}

#[async_trait]
impl Provider for Counted {
    type Properties = PropertyMap;

    async fn create(&self, ctx: &ProviderContext, properties: PropertyMap) -> Result<ProviderOutput, ProviderError> {
        self.creates.fetch_add(1, Ordering::SeqCst);
        Echo.create(ctx, properties).await
    }

    async fn update(
        &self,
        ctx: &ProviderContext,
        id: &str,
        properties: PropertyMap,
        old: Option<PropertyMap>,
    ) -> Result<ProviderOutput, ProviderError> {
        Echo.update(ctx, id, properties, old).await
    }

    async fn delete(&self, ctx: &ProviderContext, id: &str, properties: PropertyMap) -> Result<(), ProviderError> {
        Echo.delete(ctx, id, properties).await
    }
}
