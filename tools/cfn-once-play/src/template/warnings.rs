//! What a play warns of in a template it accepts: declarations CloudFormation takes that leave
//! cfn-once's work running with nothing to stop it, and values a play makes up where
//! CloudFormation would ask AWS (a Systems Manager parameter's value, the Availability Zones of
//! `Fn::GetAZs`). Warnings are printed before anything is sent and never refuse the template.
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

use super::parameters::ssm_value_type;
use super::{Policy, ResourceDecl, Template, is_custom};
use crate::yaml::{Node, NodeValue};

impl Template {
    /// Every warning about this template, each `path:line: what and what to do`.
    pub fn warnings(&self) -> Vec<String> {
        let mut warnings: Vec<String> = self
            .resources
            .iter()
            .filter(|resource| is_custom(&resource.resource_type) && resource.deletion_policy == Policy::Retain)
            .filter_map(|resource| self.retained_work(resource))
            .collect();
        warnings.extend(self.systems_manager_values());
        let nodes = self.resources.iter().map(|r| &r.properties).chain(self.outputs.iter().map(|o| &o.value));
        if let Some(line) = nodes.filter_map(|node| first_line_of(node, "Fn::GetAZs")).min() {
            warnings.push(format!(
                "{}:{line}: Fn::GetAZs gives play's fixed list for a region, <region>a, <region>b and <region>c, in that order (CloudFormation asks EC2 for the zones the account has)",
                self.path.display()
            ));
        }
        warnings
    }

    /// One line for each parameter whose value CloudFormation reads from Systems Manager.
    fn systems_manager_values(&self) -> Vec<String> {
        let file = self.path.display();
        self.parameters
            .iter()
            .filter(|parameter| parameter.kind != "AWS::SSM::Parameter::Name" && ssm_value_type(&parameter.kind).is_some())
            .map(|parameter| {
                let (name, kind) = (&parameter.name, &parameter.kind);
                let default = match (&parameter.default, parameter.no_echo) {
                    (Some(_), true) => ", else its Default (NoEcho, not shown)".to_string(),
                    (Some(default), false) => format!(", else its Default {default:?}"),
                    (None, _) => String::new(),
                };
                format!(
                    "{file}:{}: parameter {name} ({kind}): CloudFormation would read the Systems Manager parameter it names; play has none, so its value is what --parameter {name}=VALUE gives{default}, taken as the value itself",
                    parameter.line
                )
            })
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

/// The line of the first `function` in `node`, if any.
fn first_line_of(node: &Node, function: &str) -> Option<usize> {
    match &node.value {
        NodeValue::Null | NodeValue::Scalar(_) => None,
        NodeValue::Seq(items) => items.iter().find_map(|item| first_line_of(item, function)),
        NodeValue::Map(entries) => {
            entries.iter().find_map(
                |(key, value)| {
                    if key.name == function { Some(key.line) } else { first_line_of(value, function) }
                },
            )
        }
    }
}
