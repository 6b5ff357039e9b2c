//! `Custom::Echo`: returns its properties as Data.
//!
//! For tests, drills and smoke checks. Three optional properties change its behaviour, each
//! coerced from CloudFormation's strings: `DelayMs` (sleep this long on the injected clock, to
//! exercise heartbeats, deadlines and takeovers), `FailWith` (fail with this Reason) and
//! `NoEcho` (ask CloudFormation to mask the Data).

use async_trait::async_trait;
use serde::Deserialize;
use serde_json::Value;

use crate::properties::{PropertyMap, from_properties};
use crate::provider::{Provider, ProviderContext, ProviderError, ProviderOutput};

/// The ResourceType Echo is registered under by default.
pub const ECHO_TYPE: &str = "Custom::Echo";

/// The echo provider.
#[derive(Debug, Clone, Copy, Default)]
pub struct Echo;

#[derive(Debug, Deserialize)]
#[serde(rename_all = "PascalCase")]
struct EchoOptions {
    delay_ms: Option<u64>,
    fail_with: Option<String>,
    #[serde(default)]
    no_echo: bool,
}

impl Echo {
    async fn echo(ctx: &ProviderContext, properties: PropertyMap) -> Result<ProviderOutput, ProviderError> {
        let options: EchoOptions = from_properties(&Value::Object(properties.clone()))?;
        if let Some(delay_ms) = options.delay_ms {
            ctx.sleep_ms(delay_ms).await;
        }
        if let Some(reason) = options.fail_with {
            return Err(ProviderError::Failed(reason));
        }
        Ok(ProviderOutput {
            physical_resource_id: None,
            data: properties.into_iter().collect(),
            no_echo: options.no_echo,
        })
    }
}

#[async_trait]
impl Provider for Echo {
    type Properties = PropertyMap;

    async fn create(&self, ctx: &ProviderContext, properties: PropertyMap) -> Result<ProviderOutput, ProviderError> {
        Self::echo(ctx, properties).await
    }

    async fn update(
        &self,
        ctx: &ProviderContext,
        _physical_resource_id: &str,
        properties: PropertyMap,
        _old_properties: Option<PropertyMap>,
    ) -> Result<ProviderOutput, ProviderError> {
        Self::echo(ctx, properties).await
    }

    async fn delete(
        &self,
        ctx: &ProviderContext,
        _physical_resource_id: &str,
        properties: PropertyMap,
    ) -> Result<(), ProviderError> {
        Self::echo(ctx, properties).await.map(|_| ())
    }
}
