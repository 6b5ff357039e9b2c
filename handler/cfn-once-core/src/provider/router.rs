//! The [`Router`]: the provider of each ResourceType, and the rules every provider would
//! otherwise have to repeat (see the module above): a Delete of what was never created succeeds,
//! and a type registered for privileged requests only ([`Router::register_privileged`]) is kept
//! from a request that did not arrive through a privileged topic: its Create or Update is
//! answered FAILED before the provider runs, its Delete SUCCESS without the provider.

use std::collections::{BTreeMap, BTreeSet};

use aws_lambda_events::event::cloudformation::CloudFormationCustomResourceRequest;

use super::{Call, ErasedProvider, Progress, Provider, ProviderContext, ProviderError, Typed, deleted};
use crate::request::{Request, RequestBody, RequestKind};
use crate::response::{Outcome, is_failed_create_id};

/// Providers by ResourceType.
#[derive(Default)]
pub struct Router {
    providers: BTreeMap<String, Box<dyn ErasedProvider>>,
    /// The types only privileged requests may reach.
    privileged_only: BTreeSet<String>,
}

impl std::fmt::Debug for Router {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Router")
            .field("resource_types", &self.providers.keys().collect::<Vec<_>>())
            .field("privileged_only", &self.privileged_only)
            .finish()
    }
}

impl Router {
    /// A router with no providers.
    pub fn new() -> Self {
        Self::default()
    }

    /// Serves `resource_type` (e.g. `Custom::Echo`) with `provider`, replacing an earlier
    /// registration of the type (a privileged one too).
    pub fn register<P: Provider>(mut self, resource_type: &str, provider: P) -> Self {
        self.providers.insert(resource_type.to_owned(), Box::new(Typed(provider)));
        self.privileged_only.remove(resource_type);
        self
    }

    /// Serves `resource_type` with `provider` for privileged requests only
    /// ([`ProviderContext::privileged`]): any other Create or Update of the type is answered
    /// FAILED before the provider runs ([`Router::refuses`]), and any other Delete SUCCESS
    /// without it, so a refused Create's rollback never sticks and the provider never acts for
    /// such a request. The stock function registers its `CFN_ONCE_FUNCTIONS` routes so.
    pub fn register_privileged<P: Provider>(self, resource_type: &str, provider: P) -> Self {
        let mut router = self.register(resource_type, provider);
        router.privileged_only.insert(resource_type.to_owned());
        router
    }

    /// The FAILED answer `request` gets at once, before any provider runs, when it may not
    /// reach its type: a Create or Update of a privileged-only type that did not arrive through a
    /// privileged topic ([`Request::privileged`]). The worker asks before it hands a request's
    /// work over to a wait condition, so such a Create is never answered SUCCESS first.
    pub fn refuses(&self, request: &Request) -> Option<Outcome> {
        let resource_type = request.resource_type()?;
        let kept_from = !request.privileged && self.privileged_only.contains(resource_type);
        if !kept_from || request.kind() == Some(RequestKind::Delete) {
            return None;
        }
        let through = match &request.topic_arn {
            Some(topic) => format!("arrived through topic {topic}, which is not"),
            None => "arrived without a topic (raw message delivery), so it is not".to_owned(),
        };
        Some(Outcome::refused(format!(
            "{resource_type} is served for privileged requests only, and this request {through} in the handler's CFN_ONCE_PRIVILEGED_TOPIC_ARNS: publish it to a privileged topic, or ask the platform to add its topic there"
        )))
    }

    /// The ResourceTypes served.
    pub fn resource_types(&self) -> Vec<&str> {
        self.providers.keys().map(String::as_str).collect()
    }

    /// Polls the provider of the request's ResourceType with the `state` (JSON) it stored.
    pub async fn poll(&self, request: &Request, ctx: &ProviderContext, state: &str) -> Result<Progress, ProviderError> {
        let resource_type = request.resource_type().unwrap_or_default();
        let Some(provider) = self.providers.get(resource_type) else {
            return Err(ProviderError::Failed(format!(
                "no provider serves ResourceType {resource_type} any more; its work in progress cannot be polled"
            )));
        };
        // No privilege check: a poll continues the attempt whose run passed it.
        let state = serde_json::from_str(state)?;
        provider.poll(ctx, state).await
    }

    /// Runs the request's operation. `Err` is only ever [`ProviderError::Transient`] or a
    /// provider's own [`ProviderError::Failed`]; every rule-based answer is an [`Outcome`].
    pub async fn run(&self, request: &Request, ctx: &ProviderContext) -> Result<Progress, ProviderError> {
        let parsed = match &request.body {
            RequestBody::Valid(parsed) => parsed.as_ref(),
            RequestBody::Malformed { reason, .. } => return Ok(Progress::Finished(Outcome::refused(reason.clone()))),
        };
        let delete_succeeds = Ok(Progress::Finished(deleted()));
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
            _ => return Ok(Progress::Finished(Outcome::refused("RequestType is not one of Create, Update, Delete"))),
        };
        let Some(provider) = self.providers.get(resource_type) else {
            if matches!(call, Call::Delete { .. }) {
                tracing::warn!(resource_type, "Delete for a type no provider serves: nothing of ours can exist");
                return delete_succeeds;
            }
            return Ok(Progress::Finished(Outcome::refused(format!(
                "no provider serves ResourceType {resource_type}; this deployment serves {}",
                self.resource_types().join(", ")
            ))));
        };
        if !request.privileged && self.privileged_only.contains(resource_type) {
            if matches!(call, Call::Delete { .. }) {
                // Nothing this request could reach was created by it (its Create was refused,
                // or never answered), and the provider may not act for it: a Delete of another
                // resource's id would reach what the function made for someone else.
                tracing::warn!(
                    resource_type,
                    "Delete of a privileged-only type by a request that is not privileged: answered without the provider"
                );
                return delete_succeeds;
            }
            if let Some(refused) = self.refuses(request) {
                // Before the provider: a refused Create gets the id its rollback Delete is known by.
                return Ok(Progress::Finished(refused));
            }
        }
        let kind = match call {
            Call::Create(_) => "Create",
            Call::Update { .. } => "Update",
            Call::Delete { .. } => "Delete",
        };
        provider.call(ctx, call, &format!("{resource_type} {kind}")).await
    }
}

#[cfg(test)]
#[path = "router_tests.rs"]
mod tests;
