//! Nested stacks (`AWS::CloudFormation::Stack`), played as CloudFormation plays them: each is a
//! stack of its own, with its own StackId and events, made and driven by its parent's turns.
//! Its create is the parent resource's create; its update's forward phase is the parent
//! resource's update, and its cleanup waits for the parent's cleanup phase (or, when the parent
//! rolls back, its rollback is the parent resource's turn in the parent's rollback); its delete
//! is the parent resource's delete. A failed nested create is not rolled back on its own: the
//! parent's rollback deletes it. The parent reads its Outputs as `Fn::GetAtt Nested.Outputs.Name`
//! and its StackId as `Ref Nested`. docs/play.md ("Nested stacks") cites the User Guide for each.

use std::future::Future;
use std::pin::Pin;

use serde_json::{Map, Value};

use super::turns::Prepared;
use super::{Engine, Finished, Forward, Notice, Phase, Target};
use crate::state::{Kind, nested_parameters};
use crate::template::ResourceDecl;

/// What a parent asks of its nested stack in one turn.
#[derive(Debug)]
pub(super) enum NestedOp {
    Create(Box<Target>),
    /// An update's forward phase.
    Update(Box<Target>),
    /// The rollback of an update whose forward phase completed (the parent failed later).
    RollBack,
    /// ContinueUpdateRollback, when the nested stack's own rollback failed.
    ContinueRollback,
    Delete,
}

/// How a nested stack's operation ended, as its parent reads it.
#[derive(Debug)]
pub(super) struct NestedEnd {
    op: &'static str,
    ok: bool,
    /// The Outputs of the template the nested stack now stands on (or is updating to),
    /// unmasked: `Outputs.Name` to its value, as `Fn::GetAtt` reads them.
    outputs: Map<String, Value>,
    /// Why it failed, as the parent's resource event says it.
    reason: String,
}

/// Plays `op` on `child`; the parent settles what comes back. Boxed with its type written out:
/// a nested stack's operation runs its own turns, which may hold nested stacks in turn.
pub(super) fn play<'a>(
    mut child: Box<Engine<'a>>,
    id: String,
    op: NestedOp,
    step: String,
    phase: &'static str,
) -> Pin<Box<dyn Future<Output = Finished<'a>> + Send + 'a>> {
    Box::pin(async move {
        let end = child.serve(op, &step, phase).await;
        Finished::Nested(id, child, end)
    })
}

/// Runs the cleanup a nested stack waits for: its update's, or its rollback's.
fn clean_up<'a>(mut child: Engine<'a>) -> Pin<Box<dyn Future<Output = Engine<'a>> + Send + 'a>> {
    Box::pin(async move {
        if child.forwarded.is_some() {
            child.update_cleanup().await;
        } else {
            child.rollback_cleanup().await;
        }
        child
    })
}

impl<'a> Engine<'a> {
    /// A nested stack's operation, as its parent asks it in `step` and `phase`.
    async fn serve(&mut self, op: NestedOp, step: &str, phase: &'static str) -> NestedEnd {
        let id = self.stack.id.clone();
        match op {
            NestedOp::Create(target) => {
                let ok = match self.begin(step, *target) {
                    Ok(()) => self.create_nested().await,
                    Err(error) => {
                        self.failed.push(format!("(the template: {error:#})"));
                        false
                    }
                };
                let reason = format!(
                    "Embedded stack {id} was not successfully created: The following resource(s) failed to create: [{}].",
                    self.failed.join(", ")
                );
                self.end_for_parent("create", ok, reason)
            }
            NestedOp::Update(target) => match self.update_forward(step, *target).await {
                Ok(Forward::Done) => self.end_for_parent("update", true, String::new()),
                Ok(Forward::Ended(report)) => {
                    let why = match report.refused {
                        Some(refusal) => refusal,
                        None => format!("The following resource(s) failed to update: [{}].", self.failed.join(", ")),
                    };
                    let reason = format!(
                        "Embedded stack {id} was not successfully updated. Currently in {} with reason: {why}",
                        self.status
                    );
                    self.end_for_parent("update", false, reason)
                }
                Err(error) => self.end_for_parent("update", false, format!("Embedded stack {id}: {error:#}")),
            },
            NestedOp::RollBack | NestedOp::ContinueRollback => {
                // The Updates back only: the rollback's cleanup comes with the parent's.
                self.step = step.to_owned();
                self.failed.clear();
                self.stack_event("UPDATE_ROLLBACK_IN_PROGRESS", Some("Parent stack rollback".into()));
                if let Some(forwarded) = self.forwarded.take() {
                    self.prepare_rollback(forwarded.deps);
                }
                let ok = self.roll_back_updates().await.is_none();
                if ok {
                    self.status = "UPDATE_ROLLBACK_IN_PROGRESS".into();
                }
                let reason = format!(
                    "Embedded stack {id} was not successfully updated. Currently in {} with reason: The following \
                     resource(s) failed to update: [{}].",
                    self.status,
                    self.failed.join(", ")
                );
                self.end_for_parent("rollback", ok, reason)
            }
            NestedOp::Delete => {
                let report = self.delete_as(step, phase).await;
                let reason = format!(
                    "Embedded stack {id} was not successfully deleted: The following resource(s) failed to delete: [{}].",
                    self.failed.join(", ")
                );
                self.end_for_parent("delete", report.completed, reason)
            }
        }
    }

    /// A nested stack's create: no rollback of its own when a resource fails (it ends
    /// CREATE_FAILED, and its parent's rollback deletes it).
    async fn create_nested(&mut self) -> bool {
        self.stack_event("CREATE_IN_PROGRESS", Some("User Initiated".into()));
        let included = self.included();
        let deps = self.target_deps(&included);
        let ok = self.run(Phase::Forward, included, &deps, false, true).await;
        // What was made stays the stack's, for its delete.
        self.current = self.target.take();
        if ok {
            self.end("CREATE_COMPLETE", true);
        } else {
            let failed = self.failed.join(", ");
            self.status = "CREATE_FAILED".into();
            self.stack_event("CREATE_FAILED", Some(format!("The following resource(s) failed to create: [{failed}].")));
        }
        ok
    }

    fn end_for_parent(&self, op: &'static str, ok: bool, reason: String) -> NestedEnd {
        let outputs = self
            .target
            .as_ref()
            .or(self.current.as_ref())
            .map(|target| {
                self.outputs(target, false)
                    .into_iter()
                    .map(|output| (format!("Outputs.{}", output.key), Value::String(output.value)))
                    .collect()
            })
            .unwrap_or_default();
        NestedEnd { op, ok, outputs, reason }
    }

    /// Whether updating this (nested) stack to `target` would change nothing: CloudFormation
    /// "doesn't update the resources of unmodified nested stacks".
    fn unchanged_by(&self, target: &Target) -> bool {
        self.current.as_ref().is_some_and(|current| {
            current.template == target.template
                && current.parameters == target.parameters
                && current.nested == target.nested
        })
    }

    /// A nested stack resource's forward turn: its template bound to its `Parameters`, then
    /// its create, or its update unless nothing of it changed.
    pub(super) fn prepare_nested(
        &mut self,
        id: &str,
        decl: &ResourceDecl,
        properties: Value,
        existing: bool,
        status: &str,
    ) -> Prepared {
        let target = self.target.as_ref().expect("an operation's target");
        let Some(source) = target.nested.get(id).cloned() else {
            self.resource_event(id, status, None);
            return Prepared::Failed(
                "cfn-once play has no template for this nested stack (its TemplateURL is read before anything is sent)"
                    .into(),
            );
        };
        let parameters = match nested_parameters(&properties, &source.template)
            .and_then(|given| source.template.bind_parameters(&given).map_err(|e| format!("Parameters: {e}")))
        {
            Ok(parameters) => parameters,
            Err(reason) => {
                self.resource_event(id, status, None);
                return Prepared::Failed(reason);
            }
        };
        for declared in source.template.parameters.iter().filter(|p| p.no_echo) {
            if let Some(value) = parameters.get(&declared.name) {
                (self.notify)(Notice::Secret(value.clone()));
            }
        }
        let child_target = Box::new(Target { template: source.template, parameters, nested: source.nested });
        if !existing {
            self.resource_event(id, status, None);
            let child = self.child(id);
            let live = self.new_live(decl, Kind::Nested, child.stack.id.clone(), properties);
            self.live.insert(id.to_owned(), live);
            self.children.insert(id.to_owned(), child);
            return Prepared::Nested(NestedOp::Create(child_target));
        }
        let Some(child) = self.children.get(id) else {
            self.resource_event(id, status, None);
            return Prepared::Failed("cfn-once play lost this nested stack (a bug: it should hold every one)".into());
        };
        if child.unchanged_by(&child_target) {
            // "CloudFormation updates the resources of modified nested stacks, but doesn't update
            // the resources of unmodified nested stacks" (docs/play.md, "Nested stacks").
            if let Some(live) = self.live.get_mut(id) {
                live.properties = properties;
            }
            return Prepared::Unchanged;
        }
        self.resource_event(id, status, None);
        self.attempted.insert(id.to_owned(), properties);
        Prepared::Nested(NestedOp::Update(child_target))
    }

    /// A nested stack resource's turn in an update's rollback: its own rollback, unless it
    /// already rolled back (its own update failed).
    pub(super) fn prepare_nested_back(&mut self, id: &str) -> Prepared {
        let Some(child) = self.children.get(id) else { return Prepared::Unchanged };
        let op = if child.forwarded.is_some() {
            NestedOp::RollBack
        } else if child.status == "UPDATE_ROLLBACK_FAILED" && self.continuing {
            NestedOp::ContinueRollback
        } else if child.status == "UPDATE_ROLLBACK_FAILED" {
            // Its own rollback failed: so does its parent's, until ContinueUpdateRollback.
            let reason = format!(
                "Embedded stack {} was not successfully updated. Currently in UPDATE_ROLLBACK_FAILED with reason: The \
                 following resource(s) failed to update: [{}].",
                child.stack.id,
                child.failed.join(", ")
            );
            self.resource_event(id, "UPDATE_IN_PROGRESS", None);
            return Prepared::Failed(reason);
        } else {
            // It rolled back its own updates when its update failed.
            return Prepared::Unchanged;
        };
        self.resource_event(id, "UPDATE_IN_PROGRESS", None);
        Prepared::Nested(op)
    }

    /// Settles a nested stack's operation; true when it succeeded.
    pub(super) fn settle_nested(&mut self, phase: Phase, id: &str, child: Box<Engine<'a>>, end: NestedEnd) -> bool {
        let verb = self.verb(phase, id);
        if !end.ok {
            self.children.insert(id.to_owned(), *child);
            self.fail_turn(phase, id, end.reason);
            return false;
        }
        match end.op {
            "delete" => {
                self.forget(id);
                self.retired.push((id.to_owned(), *child));
            }
            "rollback" => {
                if let Some(mut old) = self.before.get(id).cloned() {
                    old.data = end.outputs;
                    self.live.insert(id.to_owned(), old);
                }
                self.children.insert(id.to_owned(), *child);
            }
            _ => {
                if let Some(live) = self.live.get_mut(id) {
                    live.data = end.outputs;
                    if let Some(properties) = self.attempted.get(id) {
                        live.properties = properties.clone();
                    }
                }
                self.children.insert(id.to_owned(), *child);
            }
        }
        self.resource_event(id, &format!("{verb}_COMPLETE"), None);
        true
    }

    /// The cleanup of every nested stack waiting for its parent's: an update's (its forward
    /// phase completed) or a rollback's (its Updates back done), all at once, as CloudFormation
    /// cleans up nested stacks in its parent's cleanup phase.
    pub(super) async fn clean_up_children(&mut self) {
        let waiting = |child: &Engine| {
            child.forwarded.is_some() || (child.status == "UPDATE_ROLLBACK_IN_PROGRESS" && child.pending.is_some())
        };
        let ids: Vec<String> =
            self.children.iter().filter(|(_, child)| waiting(child)).map(|(id, _)| id.clone()).collect();
        let cleanups: Vec<_> = ids.iter().filter_map(|id| self.children.remove(id)).map(clean_up).collect();
        for (id, child) in ids.into_iter().zip(futures_util::future::join_all(cleanups).await) {
            self.children.insert(id, child);
        }
    }

    /// A new nested stack for the resource `id`: named as CloudFormation names one (the parent's
    /// name, the logical id, a suffix), with a StackId of its own.
    fn child(&self, id: &str) -> Engine<'a> {
        let digest = cfn_once_core::fingerprint::short_digest(&[&self.stack.id, id, "nested"]).to_uppercase();
        let suffix = &digest[..12];
        // Stack names are at most 128 characters; the logical id is cut to fit.
        let room = 128usize.saturating_sub(self.stack.name.chars().count() + suffix.len() + 2);
        let logical: String = id.chars().take(room).collect();
        let name = format!("{}-{logical}-{suffix}", self.stack.name);
        let number = |part: &str| {
            let digest = cfn_once_core::fingerprint::short_digest(&[&self.stack.id, id, part]);
            u64::from_str_radix(&digest, 16).unwrap_or(0)
        };
        let stack_id = format!(
            "arn:{}:cloudformation:{}:{}:stack/{name}/{}",
            self.pseudo.partition,
            self.pseudo.region,
            self.pseudo.account_id,
            crate::wire::uuid_like(number("high"), number("low"))
        );
        let mut pseudo = self.pseudo.clone();
        pseudo.stack_name.clone_from(&name);
        pseudo.stack_id.clone_from(&stack_id);
        let stack = crate::cloud::StackIdentity { name, id: stack_id };
        let mut child =
            Engine::new(self.cloud, stack, pseudo, self.stubs.clone(), crate::faults::Faults::default(), self.notify);
        child.faults = self.faults.clone();
        child.fail = self.fail.clone();
        child.wait_poll = self.wait_poll;
        child.log = self.log.clone();
        child.nested_in = self.nested_in.iter().cloned().chain([id.to_owned()]).collect();
        child
    }
}
