//! The static checks of a parsed template: every name resolves, a GetAtt reads only what a
//! play can answer, conditions read no resource, and nothing depends on itself.

use std::collections::BTreeMap;

use super::{NESTED_STACK, Refusal, Template, WAIT_CONDITION, is_custom};
use crate::intrinsics::{self, Mention, Place};
use crate::yaml::Node;

impl Template {
    /// Refuses what cannot resolve: names no declaration gives, a GetAtt of a resource a play
    /// does not provision unless `stubs` holds its (logical id, attribute), conditions that read
    /// resources, and cycles among resources or conditions.
    pub fn check(&self, stubs: &BTreeMap<(String, String), String>) -> Result<(), Refusal> {
        let refuse = |line, construct: String, why: String| Err(Refusal::new(&self.path, line, &construct, why));
        self.condition_order()?;
        for rule in &self.rules {
            let nodes = rule.condition.iter().chain(rule.assertions.iter().map(|(assert, _)| assert));
            for node in nodes {
                let mut found = Vec::new();
                // Scanned when parsed; a scan cannot fail here.
                let _ = intrinsics::scan_rule(&self.path, node, &mut |mention| found.push(mention));
                for mention in found {
                    if let Mention::Ref { name, line } = mention
                        && self.parameter(name).is_none()
                    {
                        return refuse(
                            line,
                            format!("Ref {name}"),
                            format!("rule {}: a rule reads parameters and pseudo parameters only", rule.name),
                        );
                    }
                }
            }
        }
        for (_, body) in &self.conditions {
            for mention in self.mentions(body, Place::Condition) {
                match mention {
                    Mention::Ref { name, line } if self.resource(name).is_some() => {
                        return refuse(
                            line,
                            format!("Ref {name}"),
                            "a condition cannot read a resource, only parameters and pseudo parameters".to_string(),
                        );
                    }
                    Mention::GetAtt { logical_id, attribute, line } => {
                        return refuse(
                            line,
                            format!("Fn::GetAtt {logical_id}.{attribute}"),
                            "a condition cannot read a resource, only parameters and pseudo parameters".to_string(),
                        );
                    }
                    mention => self.check_mention(mention, stubs)?,
                }
            }
        }
        for resource in &self.resources {
            if let Some(name) = &resource.condition {
                self.check_condition_name(name, resource.line)?;
            }
            for name in &resource.depends_on {
                if self.resource(name).is_none() {
                    return refuse(
                        resource.line,
                        format!("DependsOn {name}"),
                        format!("{} depends on {name}, which is not a resource of the template", resource.logical_id),
                    );
                }
            }
            for mention in self.mentions(&resource.properties, Place::Value) {
                self.check_mention(mention, stubs)?;
            }
        }
        for output in &self.outputs {
            if let Some(name) = &output.condition {
                self.check_condition_name(name, output.line)?;
            }
            for node in std::iter::once(&output.value).chain(&output.export_name) {
                for mention in self.mentions(node, Place::Value) {
                    self.check_mention(mention, stubs)?;
                }
            }
        }
        self.check_cycles()
    }

    /// The Outputs of the nested stack `logical_id` that the template reads
    /// (`Fn::GetAtt logical_id.Outputs.NAME`), by NAME.
    pub fn nested_outputs_read(&self, logical_id: &str) -> Vec<String> {
        let values = self.resources.iter().map(|r| &r.properties).chain(self.outputs.iter().map(|o| &o.value));
        let mut names: Vec<String> = values
            .flat_map(|node| self.mentions(node, Place::Value))
            .filter_map(|mention| match mention {
                Mention::GetAtt { logical_id: id, attribute, .. } if id == logical_id => {
                    attribute.strip_prefix("Outputs.").map(str::to_owned)
                }
                _ => None,
            })
            .collect();
        names.sort();
        names.dedup();
        names
    }

    fn mentions<'a>(&self, node: &'a Node, place: Place) -> Vec<Mention<'a>> {
        let mut found = Vec::new();
        // Scanned when parsed; a scan cannot fail here.
        let _ = intrinsics::scan(&self.path, node, place, &mut |mention| found.push(mention));
        found
    }

    fn check_mention(&self, mention: Mention, stubs: &BTreeMap<(String, String), String>) -> Result<(), Refusal> {
        let refuse = |line, construct: String, why: String| Err(Refusal::new(&self.path, line, &construct, why));
        match mention {
            Mention::Ref { name, line } => {
                if self.parameter(name).is_none() && self.resource(name).is_none() {
                    return refuse(
                        line,
                        format!("Ref {name}"),
                        "names no parameter, pseudo parameter or resource of the template".to_string(),
                    );
                }
            }
            Mention::GetAtt { logical_id, attribute, line } => {
                let construct = format!("Fn::GetAtt {logical_id}.{attribute}");
                let Some(resource) = self.resource(logical_id) else {
                    return refuse(line, construct, format!("{logical_id} is not a resource of the template"));
                };
                let kind = resource.resource_type.as_str();
                if kind == WAIT_CONDITION && attribute != "Data" {
                    return refuse(line, construct, "a WaitCondition's only attribute is Data".to_string());
                }
                let stubbed = stubs.contains_key(&(logical_id.to_string(), attribute.to_string()));
                if kind == NESTED_STACK && !attribute.starts_with("Outputs.") && !stubbed {
                    return refuse(
                        line,
                        construct,
                        "a nested stack's attributes are its Outputs, read as Outputs.NAME".to_string(),
                    );
                }
                // A nested stack's Outputs.NAME is checked against its template when it is read.
                if !is_custom(kind) && kind != WAIT_CONDITION && kind != NESTED_STACK && !stubbed {
                    return refuse(
                        line,
                        construct,
                        format!(
                            "{logical_id} is a {kind}, which cfn-once play does not provision: give the attribute's value with --stub {logical_id}.{attribute}=VALUE"
                        ),
                    );
                }
            }
            Mention::Condition { name, line } => self.check_condition_name(name, line)?,
        }
        Ok(())
    }

    fn check_condition_name(&self, name: &str, line: usize) -> Result<(), Refusal> {
        if self.conditions.iter().any(|(declared, _)| declared == name) {
            return Ok(());
        }
        Err(Refusal::new(
            &self.path,
            line,
            &format!("Condition {name}"),
            "names no condition declared in Conditions".to_string(),
        ))
    }

    /// Refuses a cycle among resources, naming it in order.
    fn check_cycles(&self) -> Result<(), Refusal> {
        let edges: Vec<Vec<usize>> = self
            .resources
            .iter()
            .map(|resource| {
                let dependencies = self.dependencies(&resource.logical_id);
                self.resources
                    .iter()
                    .enumerate()
                    .filter(|(_, r)| dependencies.contains(&r.logical_id))
                    .map(|(index, _)| index)
                    .collect()
            })
            .collect();
        let names = |cycle: &[usize]| {
            cycle.iter().map(|&i| self.resources[i].logical_id.as_str()).collect::<Vec<_>>().join(" -> ")
        };
        match topological_order(&edges) {
            Ok(_) => Ok(()),
            Err(cycle) => Err(Refusal::new(
                &self.path,
                self.resources[cycle[0]].line,
                "dependency cycle",
                format!(
                    "{}: CloudFormation cannot order these resources; remove one of the references or DependsOn",
                    names(&cycle)
                ),
            )),
        }
    }

    /// The conditions in an order where each comes after those it names, or a refusal naming
    /// an undeclared condition or a cycle.
    pub(super) fn condition_order(&self) -> Result<Vec<usize>, Refusal> {
        let mut edges = Vec::with_capacity(self.conditions.len());
        for (_, body) in &self.conditions {
            let mut named = Vec::new();
            for mention in self.mentions(body, Place::Condition) {
                if let Mention::Condition { name, line } = mention {
                    self.check_condition_name(name, line)?;
                    named.extend(self.conditions.iter().position(|(declared, _)| declared == name));
                }
            }
            edges.push(named);
        }
        topological_order(&edges).map_err(|cycle| {
            let names: Vec<_> = cycle.iter().map(|&i| self.conditions[i].0.as_str()).collect();
            Refusal::new(
                &self.path,
                self.conditions[cycle[0]].1.line,
                "condition cycle",
                format!("{}: a condition cannot depend on itself", names.join(" -> ")),
            )
        })
    }
}

/// An order of `edges`'s nodes where each comes after the nodes it points to, or a cycle.
fn topological_order(edges: &[Vec<usize>]) -> Result<Vec<usize>, Vec<usize>> {
    // 0: not visited, 1: on the path being walked, 2: done.
    let mut state = vec![0u8; edges.len()];
    let mut order = Vec::with_capacity(edges.len());
    let mut path = Vec::new();
    fn visit(
        node: usize,
        edges: &[Vec<usize>],
        state: &mut [u8],
        path: &mut Vec<usize>,
        order: &mut Vec<usize>,
    ) -> Result<(), Vec<usize>> {
        match state[node] {
            2 => return Ok(()),
            1 => {
                let start = path.iter().position(|&n| n == node).unwrap_or(0);
                let mut cycle = path[start..].to_vec();
                cycle.push(node);
                return Err(cycle);
            }
            _ => {}
        }
        state[node] = 1;
        path.push(node);
        for &next in &edges[node] {
            visit(next, edges, state, path, order)?;
        }
        path.pop();
        state[node] = 2;
        order.push(node);
        Ok(())
    }
    for node in 0..edges.len() {
        visit(node, edges, &mut state, &mut path, &mut order)?;
    }
    Ok(order)
}
