//! Providers: the resource logic, one per ResourceType, and the router that picks one.
//!
//! A provider implements [`Provider`] with its own typed `Properties` (deserialized with
//! CloudFormation's strings coerced, see `properties`), and receives a [`ProviderContext`] with
//! the request's fence, its deadline and a heartbeat-aware lease flag. It returns a
//! [`ProviderOutput`] or a [`ProviderError`] that becomes a FAILED Reason.
//!
//! The [`Router`] applies the rules every provider would otherwise have to repeat: a Delete
//! always succeeds for a resource whose Create was refused before any provider ran, for a type
//! no provider serves and for
//! properties that could never have been created, so a stack can always be deleted.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use async_trait::async_trait;
use aws_lambda_events::event::cloudformation::CloudFormationCustomResourceRequest;
use serde::de::DeserializeOwned;
use serde_json::Value;

use crate::clock::Clock;
use crate::properties::{PropertyError, from_properties};
use crate::request::{Request, RequestBody, provider_properties};
use crate::response::{Outcome, is_failed_create_id};

/// The fencing token of one execution of one request.
///
/// `value` strictly increases for a request across regions and crashes (invariant S3). A fenced
/// store accepts a write only if no write with a higher `value` for the same `scope` was
/// accepted before (invariant S2). `scope` is a short digest of StackId and RequestId.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Fence {
    /// What fenced writes are compared within: one scope per request.
    pub scope: String,
    /// The fencing token: a write carrying a lower value than one already accepted is stale.
    pub value: u64,
}

/// What a provider gets besides its properties.
#[derive(Debug, Clone)]
pub struct ProviderContext {
    /// The fence to attach to the provider's own writes, so a store can refuse those of an
    /// execution that lost its lease.
    pub fence: Fence,
    /// The stack the resource belongs to (CloudFormation's StackId ARN).
    pub stack_id: String,
    /// CloudFormation's id for this request, shared by its copies in both regions.
    pub request_id: String,
    /// The resource's logical id in the template.
    pub logical_resource_id: String,
    /// The ResourceType that routed the request here, e.g. `Custom::Echo`.
    pub resource_type: String,
    /// When the provider must have returned (epoch ms); after it the run is abandoned and
    /// answered FAILED.
    pub deadline_ms: u64,
    clock: Arc<dyn Clock>,
    lease_lost: Arc<AtomicBool>,
}

impl ProviderContext {
    /// A context; the worker builds these, tests may too.
    pub fn new(
        fence: Fence,
        request: &Request,
        resource_type: &str,
        deadline_ms: u64,
        clock: Arc<dyn Clock>,
        lease_lost: Arc<AtomicBool>,
    ) -> Self {
        Self {
            fence,
            stack_id: request.key.stack_id.clone(),
            request_id: request.key.request_id.clone(),
            logical_resource_id: request.logical_resource_id.clone(),
            resource_type: resource_type.to_owned(),
            deadline_ms,
            clock,
            lease_lost,
        }
    }

    /// Milliseconds left before the deadline.
    pub fn remaining_ms(&self) -> u64 {
        self.deadline_ms.saturating_sub(self.clock.now_ms())
    }

    /// Sleeps on the injected clock.
    pub async fn sleep_ms(&self, duration_ms: u64) {
        self.clock.sleep_ms(duration_ms).await;
    }

    /// True once a heartbeat found the lease taken over. The worker also stops polling the
    /// provider then; a provider doing long synchronous work can check this between steps.
    pub fn lease_lost(&self) -> bool {
        self.lease_lost.load(Ordering::SeqCst)
    }
}

/// A provider's answer.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct ProviderOutput {
    /// `None` keeps the default: a derived id on Create, the current id on Update.
    pub physical_resource_id: Option<String>,
    /// The resource's attributes, readable in the template with `Fn::GetAtt`; they must fit in
    /// the 4096-byte response body.
    pub data: BTreeMap<String, Value>,
    /// Ask CloudFormation to mask `data` in its console and API output.
    pub no_echo: bool,
}

/// Why a provider did not succeed.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ProviderError {
    /// Final: answered FAILED with this reason.
    #[error("{0}")]
    Failed(String),
    /// Worth retrying (throttling, a 5xx): retried with backoff while the deadline allows.
    #[error("{0}")]
    Transient(String),
}

impl From<PropertyError> for ProviderError {
    fn from(error: PropertyError) -> Self {
        Self::Failed(error.to_string())
    }
}

/// The resource logic for one ResourceType.
#[async_trait]
pub trait Provider: Send + Sync + 'static {
    /// The provider's typed properties; CloudFormation's own (`ServiceToken`, `ServiceTimeout`)
    /// are removed before deserializing.
    type Properties: DeserializeOwned + Send + Sync + 'static;

    /// Creates the resource. It may run again for the same request after a takeover, so it must
    /// tolerate finding its own earlier work.
    async fn create(
        &self,
        ctx: &ProviderContext,
        properties: Self::Properties,
    ) -> Result<ProviderOutput, ProviderError>;

    /// `old_properties` is `None` when the old properties no longer deserialize.
    async fn update(
        &self,
        ctx: &ProviderContext,
        physical_resource_id: &str,
        properties: Self::Properties,
        old_properties: Option<Self::Properties>,
    ) -> Result<ProviderOutput, ProviderError>;

    /// Must succeed for ids this provider never issued (CloudFormation generates one when a
    /// Create got no answer) and for resources that are already gone.
    async fn delete(
        &self,
        ctx: &ProviderContext,
        physical_resource_id: &str,
        properties: Self::Properties,
    ) -> Result<(), ProviderError>;
}

/// The operation to run, with untyped properties.
enum Call<'a> {
    Create(&'a Value),
    Update { physical_resource_id: &'a str, properties: &'a Value, old_properties: &'a Value },
    Delete { physical_resource_id: &'a str, properties: &'a Value },
}

#[async_trait]
trait ErasedProvider: Send + Sync {
    /// Runs `call`; properties that do not deserialize are refused (no provider code runs), with
    /// a Reason starting with `label`.
    async fn call(&self, ctx: &ProviderContext, call: Call<'_>, label: &str) -> Result<Outcome, ProviderError>;
}

struct Typed<P>(P);

#[async_trait]
impl<P: Provider> ErasedProvider for Typed<P> {
    async fn call(&self, ctx: &ProviderContext, call: Call<'_>, label: &str) -> Result<Outcome, ProviderError> {
        let success = |output: ProviderOutput| Outcome::Success {
            physical_resource_id: output.physical_resource_id,
            data: output.data,
            no_echo: output.no_echo,
        };
        let refused = |error: PropertyError| Ok(Outcome::refused(format!("{label} failed: {error}")));
        match call {
            Call::Create(properties) => {
                let properties = match from_properties(&provider_properties(properties)) {
                    Ok(properties) => properties,
                    Err(error) => return refused(error),
                };
                self.0.create(ctx, properties).await.map(success)
            }
            Call::Update { physical_resource_id, properties, old_properties } => {
                let properties = match from_properties(&provider_properties(properties)) {
                    Ok(properties) => properties,
                    Err(error) => return refused(error),
                };
                let old = match from_properties(&provider_properties(old_properties)) {
                    Ok(old) => Some(old),
                    Err(error) => {
                        tracing::warn!(%error, "old properties do not deserialize; the provider gets none");
                        None
                    }
                };
                self.0.update(ctx, physical_resource_id, properties, old).await.map(success)
            }
            Call::Delete { physical_resource_id, properties } => {
                match from_properties(&provider_properties(properties)) {
                    Ok(properties) => self.0.delete(ctx, physical_resource_id, properties).await?,
                    // A Create with these properties could not have succeeded, so nothing exists.
                    Err(error) => {
                        tracing::warn!(%error, "Delete with properties that never deserialized: nothing to delete")
                    }
                }
                Ok(Outcome::Success { physical_resource_id: None, data: BTreeMap::new(), no_echo: false })
            }
        }
    }
}

/// Providers by ResourceType.
#[derive(Default)]
pub struct Router {
    providers: BTreeMap<String, Box<dyn ErasedProvider>>,
}

impl std::fmt::Debug for Router {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Router").field("resource_types", &self.providers.keys().collect::<Vec<_>>()).finish()
    }
}

impl Router {
    /// A router with no providers.
    pub fn new() -> Self {
        Self::default()
    }

    /// Serves `resource_type` (e.g. `Custom::Echo`) with `provider`.
    pub fn register<P: Provider>(mut self, resource_type: &str, provider: P) -> Self {
        self.providers.insert(resource_type.to_owned(), Box::new(Typed(provider)));
        self
    }

    /// The ResourceTypes served.
    pub fn resource_types(&self) -> Vec<&str> {
        self.providers.keys().map(String::as_str).collect()
    }

    /// Runs the request's operation. `Err` is only ever [`ProviderError::Transient`] or a
    /// provider's own [`ProviderError::Failed`]; every rule-based answer is an [`Outcome`].
    pub async fn run(&self, request: &Request, ctx: &ProviderContext) -> Result<Outcome, ProviderError> {
        let parsed = match &request.body {
            RequestBody::Valid(parsed) => parsed.as_ref(),
            RequestBody::Malformed { reason, .. } => return Ok(Outcome::refused(reason.clone())),
        };
        let delete_succeeds =
            Ok(Outcome::Success { physical_resource_id: None, data: BTreeMap::new(), no_echo: false });
        let (resource_type, call) = match parsed {
            CloudFormationCustomResourceRequest::Create(create) => {
                (create.resource_type.as_str(), Call::Create(&create.resource_properties))
            }
            CloudFormationCustomResourceRequest::Update(update) => (
                update.resource_type.as_str(),
                Call::Update {
                    physical_resource_id: &update.physical_resource_id,
                    properties: &update.resource_properties,
                    old_properties: &update.old_resource_properties,
                },
            ),
            CloudFormationCustomResourceRequest::Delete(delete) => {
                if is_failed_create_id(&delete.physical_resource_id) {
                    tracing::info!(
                        "Delete of a resource whose Create was refused before any provider ran: nothing to delete"
                    );
                    return delete_succeeds;
                }
                (
                    delete.resource_type.as_str(),
                    Call::Delete {
                        physical_resource_id: &delete.physical_resource_id,
                        properties: &delete.resource_properties,
                    },
                )
            }
            _ => return Ok(Outcome::refused("RequestType is not one of Create, Update, Delete")),
        };
        let Some(provider) = self.providers.get(resource_type) else {
            if matches!(call, Call::Delete { .. }) {
                tracing::warn!(resource_type, "Delete for a type no provider serves: nothing of ours can exist");
                return delete_succeeds;
            }
            return Ok(Outcome::refused(format!(
                "no provider serves ResourceType {resource_type}; this deployment serves {}",
                self.resource_types().join(", ")
            )));
        };
        let kind = match call {
            Call::Create(_) => "Create",
            Call::Update { .. } => "Update",
            Call::Delete { .. } => "Delete",
        };
        provider.call(ctx, call, &format!("{resource_type} {kind}")).await
    }
}
