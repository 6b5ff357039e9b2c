//! The optional active-region control: an ARC routing control per region.
//!
//! Route 53 Application Recovery Controller answers on a cluster of regional endpoints, any of
//! which may be down; the data-plane calls (GetRoutingControlState, UpdateRoutingControlStates)
//! are tried on each endpoint in rotation until one answers. A routing control that is On makes
//! its region active. Caching and the fallback on failure live in
//! `cfn_once_core::control::CachedActivity`.
//!
//! moto has no ARC, so this adapter is tested against a local HTTP peer that replays ARC's
//! documented wire format (`tests/it/arc.rs`).

use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use async_trait::async_trait;
use aws_config::SdkConfig;
use aws_config::retry::RetryConfig;
use aws_config::timeout::TimeoutConfig;
use aws_sdk_route53recoverycluster::Client;
use aws_sdk_route53recoverycluster::types::{RoutingControlState, UpdateRoutingControlStateEntry};
use cfn_once_core::config::ArcEndpoint;
use cfn_once_core::control::{ActivitySource, ControlError};
use cfn_once_core::decision::Activity;

/// How long one endpoint may take before the next is tried.
const ENDPOINT_TIMEOUT_MS: u64 = 2_000;

/// The ARC cluster, through all of its endpoints.
#[derive(Debug)]
pub struct ArcCluster {
    endpoints: Vec<(String, Client)>,
    next: AtomicUsize,
}

impl ArcCluster {
    /// One client per endpoint, each signed for its endpoint's region.
    pub fn new(sdk: &SdkConfig, endpoints: &[ArcEndpoint]) -> Self {
        let endpoints = endpoints
            .iter()
            .map(|endpoint| {
                // One attempt per endpoint, soon abandoned: the rotation is the retry.
                let config = aws_sdk_route53recoverycluster::config::Builder::from(sdk)
                    .region(aws_sdk_route53recoverycluster::config::Region::new(endpoint.region.clone()))
                    .endpoint_url(&endpoint.url)
                    .retry_config(RetryConfig::standard().with_max_attempts(1))
                    .timeout_config(
                        TimeoutConfig::builder()
                            .connect_timeout(Duration::from_millis(ENDPOINT_TIMEOUT_MS))
                            .operation_timeout(Duration::from_millis(ENDPOINT_TIMEOUT_MS))
                            .build(),
                    )
                    .build();
                (endpoint.url.clone(), Client::from_conf(config))
            })
            .collect();
        Self { endpoints, next: AtomicUsize::new(0) }
    }

    /// Whether `routing_control_arn` is On.
    pub async fn is_on(&self, routing_control_arn: &str) -> Result<bool, ControlError> {
        self.rotate(|client| async move {
            let output = client
                .get_routing_control_state()
                .routing_control_arn(routing_control_arn)
                .send()
                .await
                .map_err(|error| crate::aws::brief(&error))?;
            Ok(output.routing_control_state == RoutingControlState::On)
        })
        .await
    }

    /// Sets several routing controls in one call, so a safety rule ("at least one On") sees
    /// the whole change at once.
    pub async fn set(&self, states: &[(String, bool)]) -> Result<(), ControlError> {
        self.rotate(|client| async move {
            let entries = states
                .iter()
                .map(|(arn, on)| {
                    UpdateRoutingControlStateEntry::builder()
                        .routing_control_arn(arn)
                        .routing_control_state(if *on { RoutingControlState::On } else { RoutingControlState::Off })
                        .build()
                        .map_err(|error| error.to_string())
                })
                .collect::<Result<Vec<_>, _>>()?;
            client
                .update_routing_control_states()
                .set_update_routing_control_state_entries(Some(entries))
                .send()
                .await
                .map_err(|error| crate::aws::brief(&error))?;
            Ok(())
        })
        .await
    }

    /// Tries `call` on each endpoint, starting after the one used last, until one answers.
    async fn rotate<'a, T, F, Fut>(&'a self, call: F) -> Result<T, ControlError>
    where
        F: Fn(&'a Client) -> Fut,
        Fut: Future<Output = Result<T, String>>,
    {
        let count = self.endpoints.len();
        if count == 0 {
            return Err(ControlError("no ARC cluster endpoints are configured".into()));
        }
        let start = self.next.fetch_add(1, Ordering::Relaxed);
        let mut failures = Vec::with_capacity(count);
        for offset in 0..count {
            let (url, client) = &self.endpoints[(start + offset) % count];
            match call(client).await {
                Ok(value) => return Ok(value),
                Err(why) => {
                    tracing::warn!(endpoint = %url, why, "ARC endpoint failed; trying the next");
                    failures.push(format!("{url}: {why}"));
                }
            }
        }
        Err(ControlError(format!("every ARC endpoint failed: {}", failures.join("; "))))
    }
}

/// This region's routing control as an [`ActivitySource`].
#[derive(Debug)]
pub struct ArcControl {
    cluster: ArcCluster,
    routing_control_arn: String,
}

impl ArcControl {
    /// Reads `routing_control_arn` through `cluster`.
    pub fn new(cluster: ArcCluster, routing_control_arn: impl Into<String>) -> Self {
        Self { cluster, routing_control_arn: routing_control_arn.into() }
    }
}

#[async_trait]
impl ActivitySource for ArcControl {
    async fn activity(&self) -> Result<Activity, ControlError> {
        let on = self.cluster.is_on(&self.routing_control_arn).await?;
        Ok(if on { Activity::Active } else { Activity::Standby })
    }
}
