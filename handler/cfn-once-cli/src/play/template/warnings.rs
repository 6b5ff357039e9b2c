//! What a play warns of in a template it accepts: declarations CloudFormation takes that leave
//! cfn-once's work running with nothing to stop it. Warnings are printed before anything is
//! sent and never refuse the template.
//!
//! A custom resource that declares a `CfnOnceWaitHandle` hands its work to a wait condition,
//! and only a Delete (or an Update naming a new handle) stops that work. `DeletionPolicy:
//! Retain` means no Delete is ever sent (a stack delete skips it, and so does an update that
//! removes it), and cfn-once cannot see a stack go away (it has no CloudFormation API access):
//! the work is polled until its own deadline, the wait condition's timeout (at most 12 hours),
//! and then signalled FAILURE to a handle nobody waits on. `UpdateReplacePolicy: Retain` is not
//! warned of: a resource with a wait condition is never replaced while its work runs (a
//! hand-over keeps its PhysicalResourceId, and an Update naming a new handle closes the old
//! work itself), so no work is left behind by it.

use cfn_once_core::wait_condition::{HANDLE_PROPERTY, TIMEOUT_PROPERTY};

use super::{Policy, ResourceDecl, Template, is_custom};
use crate::play::yaml::NodeValue;

impl Template {
    /// Every warning about this template, each `path:line: logical id: what and what to do`.
    pub fn warnings(&self) -> Vec<String> {
        self.resources
            .iter()
            .filter(|resource| is_custom(&resource.resource_type) && resource.deletion_policy == Policy::Retain)
            .filter_map(|resource| self.retained_work(resource))
            .collect()
    }

    /// The warning for a retained custom resource that names a wait condition handle.
    fn retained_work(&self, resource: &ResourceDecl) -> Option<String> {
        let entries = resource.properties.as_map()?;
        entries.iter().find(|(key, _)| key.name == HANDLE_PROPERTY)?;
        let timeout = entries
            .iter()
            .find(|(key, _)| key.name == TIMEOUT_PROPERTY)
            .and_then(|(_, node)| match &node.value {
                NodeValue::Scalar(seconds) => Some(format!("{seconds} s here")),
                _ => None,
            })
            .unwrap_or_else(|| "as its parameter says".to_owned());
        let id = &resource.logical_id;
        Some(format!(
            "{}:{}: {id}: DeletionPolicy Retain beside a {HANDLE_PROPERTY}: deleting the stack (or an update that removes {id}) sends {id} no Delete, so nothing stops its work: cfn-once cannot see the stack go, and polls the work until its wait condition's timeout ({TIMEOUT_PROPERTY}, {timeout}; at most 43200 s, 12 hours), then signals FAILURE to a handle nobody waits on; to stop the work with the stack, use DeletionPolicy Delete (the provider's Delete then runs: let it keep what must outlive the stack), or keep {TIMEOUT_PROPERTY} as short as the work",
            self.path.display(),
            resource.line,
        ))
    }
}
