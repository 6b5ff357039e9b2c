//! `Custom::Sim`: a provider that works for a while (longer than a lease, sometimes), writes to
//! a fenced downstream store half way, and answers with its fence in Data, so that two
//! executions' answers differ and any double commit shows. The fenced store applies the same
//! condition as `cfn_once::fenced::FencedTable` and checks invariant S2 on every write.

use std::collections::BTreeMap;
use std::sync::Arc;

use async_trait::async_trait;
use cfn_once_core::provider::{Provider, ProviderContext, ProviderError, ProviderOutput};
use serde::Deserialize;
use serde_json::json;

use crate::shared::Shared;

/// The ResourceType the simulation sends.
pub const SIM_TYPE: &str = "Custom::Sim";

#[derive(Debug, Deserialize)]
#[serde(rename_all = "PascalCase")]
pub struct SimProperties {
    work_ms: u64,
    item: String,
}

/// The provider.
#[derive(Debug)]
pub struct SimProvider {
    pub shared: Arc<Shared>,
}

impl SimProvider {
    /// `attribute_not_exists(fence) OR scope <> :scope OR fence <= :fence`, then the write.
    fn fenced_write(&self, item: &str, scope: &str, fence: u64) -> Result<(), ProviderError> {
        let mut observed = self.shared.observed();
        let accepted = match observed.fenced.get(item) {
            Some((stored_scope, stored_fence)) => stored_scope != scope || *stored_fence <= fence,
            None => true,
        };
        if !accepted {
            drop(observed);
            self.shared.cover("stale fenced write refused");
            return Err(ProviderError::Failed(format!(
                "a newer execution already wrote {item}; fence {fence} refused"
            )));
        }
        let previous = observed.fenced.insert(item.to_owned(), (scope.to_owned(), fence));
        drop(observed);
        if let Some((stored_scope, stored_fence)) = previous
            && stored_scope == scope
            && stored_fence > fence
        {
            self.shared.violation(format!("S2: {item} accepted fence {fence} after fence {stored_fence}"));
        }
        Ok(())
    }

    async fn work(&self, ctx: &ProviderContext, properties: SimProperties) -> Result<ProviderOutput, ProviderError> {
        ctx.sleep_ms(properties.work_ms / 2).await;
        self.fenced_write(&properties.item, &ctx.fence.scope, ctx.fence.value)?;
        ctx.sleep_ms(properties.work_ms - properties.work_ms / 2).await;
        Ok(ProviderOutput {
            physical_resource_id: Some(properties.item),
            data: BTreeMap::from([("Fence".to_owned(), json!(ctx.fence.value.to_string()))]),
            no_echo: false,
        })
    }
}

#[async_trait]
impl Provider for SimProvider {
    type Properties = SimProperties;

    async fn create(&self, ctx: &ProviderContext, properties: SimProperties) -> Result<ProviderOutput, ProviderError> {
        self.work(ctx, properties).await
    }

    async fn update(
        &self,
        ctx: &ProviderContext,
        _physical_resource_id: &str,
        properties: SimProperties,
        _old_properties: Option<SimProperties>,
    ) -> Result<ProviderOutput, ProviderError> {
        self.work(ctx, properties).await
    }

    async fn delete(
        &self,
        _ctx: &ProviderContext,
        _physical_resource_id: &str,
        _properties: SimProperties,
    ) -> Result<(), ProviderError> {
        Ok(())
    }
}
