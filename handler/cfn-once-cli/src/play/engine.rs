//! CloudFormation's rules for a stack's operations, played request by request: create,
//! update (with its cleanup phase), the rollbacks of both, and delete. Each rule is the one
//! the CloudFormation User Guide states (docs/play.md lists them with their sources); where
//! the Guide is silent the player does the documented minimum and says so there.
//!
//! The engine holds the stack's state; [`jobs`](crate::play::jobs) do the waiting, several at
//! once: every resource whose dependencies are done starts at once, as CloudFormation starts
//! independent resources in parallel.

use std::collections::{BTreeMap, BTreeSet};
use std::future::Future;
use std::pin::Pin;
use std::time::Duration;

use futures_util::stream::FuturesUnordered;
use serde::Serialize;
use serde_json::Value;

use crate::play::cloud::{Cloud, StackIdentity};
use crate::play::faults::Faults;
use crate::play::intrinsics::{Pseudo, Scope};
use crate::play::jobs::{Done, Job};
use crate::play::state::{Kind, Live, RequestRecord, StackEvent};
use crate::play::template::Template;

#[path = "engine_events.rs"]
mod events;
#[path = "engine_turns.rs"]
mod turns;

pub use crate::play::state::Notice;

/// How one stack operation ended.
#[derive(Debug, Clone, Serialize)]
pub struct StepReport {
    pub step: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub template: Option<String>,
    /// The stack's status at the end: `CREATE_COMPLETE`, `UPDATE_ROLLBACK_COMPLETE`, ...
    pub status: String,
    /// Ended `*_COMPLETE` without a rollback.
    pub completed: bool,
    pub outputs: Vec<OutputValue>,
    /// Why CloudFormation would refuse the operation before starting it (nothing was sent;
    /// the stack's status is unchanged).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub refused: Option<String>,
}

/// An Output as `describe-stacks` shows it.
#[derive(Debug, Clone, Serialize)]
pub struct OutputValue {
    pub key: String,
    pub value: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub description: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub export_name: Option<String>,
}

/// A template bound to its parameters: what one create or update applies.
#[derive(Debug)]
pub struct Target {
    pub template: Template,
    pub parameters: BTreeMap<String, Value>,
}

/// The phases a resource's turn can be in; each prepares and settles its own way.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Phase {
    /// Create or update towards the new template.
    Forward,
    /// An update's rollback: each resource updated in place gets its old properties back.
    UpdateBack,
    /// Deletes: a create's rollback, an update's cleanup, the stack's delete.
    Delete,
}

/// What an update's rollback has still to do when it failed (UPDATE_ROLLBACK_FAILED):
/// ContinueUpdateRollback does it; a stack delete deletes the new ids.
#[derive(Debug, Default)]
struct PendingRollback {
    /// Resources still to be updated back to their old properties.
    back: BTreeSet<String>,
    /// What the failed update made and the rollback's cleanup deletes: replacements' new ids
    /// and resources the update created, keyed by logical id.
    discard: BTreeMap<String, Live>,
    /// The failed update's dependencies, in whose reverse order the cleanup deletes.
    deps: BTreeMap<String, BTreeSet<String>>,
}

type Running<'a> = FuturesUnordered<Pin<Box<dyn Future<Output = (String, Job, Done)> + Send + 'a>>>;

/// A stack and the player of its operations.
pub struct Engine<'a> {
    cloud: &'a dyn Cloud,
    notify: &'a (dyn Fn(Notice) + Send + Sync),
    pub stack: StackIdentity,
    pseudo: Pseudo,
    stubs: BTreeMap<(String, String), String>,
    pub faults: Faults<'a>,
    /// How often a wait condition's handle is read.
    pub wait_poll: Duration,
    live: BTreeMap<String, Live>,
    /// The template the stack stands on, with its parameters: the last one applied.
    current: Option<Target>,
    /// The template being applied by the operation in progress.
    target: Option<Target>,
    /// The stack's resources as the operation in progress found them.
    before: BTreeMap<String, Live>,
    /// The properties each resource was sent in this operation's forward phase.
    attempted: BTreeMap<String, Value>,
    conditions: BTreeMap<String, bool>,
    step: String,
    phase_name: &'static str,
    failed: Vec<String>,
    /// The ids the last run of turns finished with success.
    succeeded: BTreeSet<String>,
    /// The stack's status, as `describe-stacks` would give it (empty before its create).
    pub status: String,
    pending: Option<PendingRollback>,
    /// The type of each resource deleted, for the events that follow its delete.
    gone: BTreeMap<String, String>,
    pub events: Vec<StackEvent>,
    pub history: BTreeMap<String, Vec<RequestRecord>>,
}

impl std::fmt::Debug for Engine<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Engine").field("stack", &self.stack.name).field("step", &self.step).finish_non_exhaustive()
    }
}

impl<'a> Engine<'a> {
    pub fn new(
        cloud: &'a dyn Cloud,
        stack: StackIdentity,
        pseudo: Pseudo,
        stubs: BTreeMap<(String, String), String>,
        faults: Faults<'a>,
        notify: &'a (dyn Fn(Notice) + Send + Sync),
    ) -> Self {
        Self {
            cloud,
            notify,
            stack,
            pseudo,
            stubs,
            faults,
            wait_poll: Duration::from_millis(500),
            live: BTreeMap::new(),
            current: None,
            target: None,
            before: BTreeMap::new(),
            attempted: BTreeMap::new(),
            conditions: BTreeMap::new(),
            step: String::new(),
            phase_name: "",
            failed: Vec::new(),
            succeeded: BTreeSet::new(),
            status: String::new(),
            pending: None,
            gone: BTreeMap::new(),
            events: Vec::new(),
            history: BTreeMap::new(),
        }
    }

    /// Whether the stack has resources (it exists).
    pub fn exists(&self) -> bool {
        self.current.is_some()
    }

    /// Creates the stack from `target`; rolls back (deleting what was created) if a resource
    /// fails.
    pub async fn create(&mut self, target: Target) -> anyhow::Result<StepReport> {
        self.begin("create", target)?;
        self.stack_event("CREATE_IN_PROGRESS", Some("User Initiated".into()));
        let included = self.included();
        let deps = self.target_deps(&included);
        if self.run(Phase::Forward, included.clone(), &deps, false, true).await {
            self.current = self.target.take();
            return Ok(self.end("CREATE_COMPLETE", true));
        }
        let failed = self.failed.join(", ");
        self.stack_event(
            "ROLLBACK_IN_PROGRESS",
            Some(format!("The following resource(s) failed to create: [{failed}]. Rollback requested by user.")),
        );
        self.phase_name = "rollback";
        let created: BTreeSet<String> = self.live.keys().cloned().collect();
        let all_deleted = self.run(Phase::Delete, created, &deps, true, false).await;
        self.target = None;
        let status = if all_deleted { "ROLLBACK_COMPLETE" } else { "ROLLBACK_FAILED" };
        Ok(self.end(status, false))
    }

    /// Updates the stack to `target`: new resources created, changed ones updated, then in the
    /// cleanup phase the replaced and removed ones deleted. If a resource fails, rolls back:
    /// Updates back to the old properties, then deletes of what this update created. An update
    /// CloudFormation would refuse before starting it (`Engine::refusal`) sends nothing, adds
    /// no event and leaves the stack's status: its report says why in `refused`.
    pub async fn update(&mut self, step: &str, target: Target) -> anyhow::Result<StepReport> {
        if self.current.is_none() {
            anyhow::bail!("{step}: the stack does not exist (its create rolled back), so there is nothing to update");
        }
        if let Some(refusal) = self.refusal(&target)? {
            self.step = step.to_owned();
            (self.notify)(Notice::Progress(format!("{step}: refused, nothing sent: {refusal}")));
            let mut report = self.report(&self.status.clone(), false);
            report.refused = Some(refusal);
            return Ok(report);
        }
        self.begin(step, target)?;
        self.stack_event("UPDATE_IN_PROGRESS", Some("User Initiated".into()));
        let included = self.included();
        let deps = self.target_deps(&included);
        if self.run(Phase::Forward, included.clone(), &deps, false, true).await {
            self.stack_event("UPDATE_COMPLETE_CLEANUP_IN_PROGRESS", None);
            self.phase_name = "cleanup";
            let old_deps = self.current_deps();
            let mut cleanup = BTreeSet::new();
            for (id, old) in &self.before {
                let replaced = self.live.get(id).is_some_and(|now| now.physical_id != old.physical_id);
                if replaced || !included.contains(id) {
                    cleanup.insert(id.clone());
                }
            }
            // The old resources go; the stack keeps the new ones (of replacements).
            let kept: BTreeMap<String, Live> =
                cleanup.iter().filter_map(|id| self.live.get(id).map(|l| (id.clone(), l.clone()))).collect();
            for id in &cleanup {
                let mut old = self.before[id].clone();
                if included.contains(id) {
                    // A replacement: UpdateReplacePolicy decides whether its old id is deleted.
                    old.deletion_policy = kept[id].update_replace_policy;
                }
                self.live.insert(id.clone(), old);
            }
            // Failed cleanup deletes are reported; the update stays complete, as in CloudFormation.
            self.run(Phase::Delete, cleanup.clone(), &old_deps, true, false).await;
            // A removed resource whose delete failed is left behind, no longer the stack's.
            for id in &cleanup {
                self.live.remove(id);
            }
            for (id, live) in kept {
                if included.contains(&id) {
                    self.live.insert(id, live);
                }
            }
            self.current = self.target.take();
            return Ok(self.end("UPDATE_COMPLETE", true));
        }
        let failed = self.failed.join(", ");
        self.stack_event(
            "UPDATE_ROLLBACK_IN_PROGRESS",
            Some(format!("The following resource(s) failed to update: [{failed}].")),
        );
        self.prepare_rollback(deps);
        Ok(self.finish_rollback().await)
    }

    /// ContinueUpdateRollback on a stack in UPDATE_ROLLBACK_FAILED: the Updates back that
    /// failed (or never ran) are sent again, then the rollback's cleanup deletes the failed
    /// update's new ids, as the API Reference describes
    /// (<https://docs.aws.amazon.com/AWSCloudFormation/latest/APIReference/API_ContinueUpdateRollback.html>:
    /// "continues rolling it back to the UPDATE_ROLLBACK_COMPLETE state").
    pub async fn continue_update_rollback(&mut self, step: &str) -> anyhow::Result<StepReport> {
        if self.pending.is_none() || self.status != "UPDATE_ROLLBACK_FAILED" {
            anyhow::bail!("{step}: the stack is {}, not UPDATE_ROLLBACK_FAILED: nothing to continue", self.status);
        }
        self.step = step.to_owned();
        self.failed.clear();
        self.stack_event("UPDATE_ROLLBACK_IN_PROGRESS", Some("User Initiated".into()));
        Ok(self.finish_rollback().await)
    }

    /// Deletes the stack: every resource in reverse dependency order, `Retain` ones skipped.
    pub async fn delete(&mut self) -> anyhow::Result<StepReport> {
        self.step = "delete".into();
        self.phase_name = "delete";
        self.failed.clear();
        self.stack_event("DELETE_IN_PROGRESS", Some("User Initiated".into()));
        let deps = self.current_deps();
        // A failed rollback's new ids are the stack's too: deleted first, as its cleanup would.
        // (The User Guide does not say in which order; play deletes them before the rest.)
        let leftovers = self.delete_leftovers().await;
        let all: BTreeSet<String> = self.live.keys().cloned().collect();
        let deleted = self.run(Phase::Delete, all, &deps, true, false).await && leftovers;
        let status = if deleted { "DELETE_COMPLETE" } else { "DELETE_FAILED" };
        if deleted {
            self.current = None;
        }
        self.status = status.into();
        self.stack_event(status, None);
        Ok(StepReport {
            step: "delete".into(),
            template: None,
            status: status.into(),
            completed: deleted,
            outputs: vec![],
            refused: None,
        })
    }

    /// The rollback of a failed update, planned: what was updated in place (or failed, or was
    /// cancelled mid-update) is to be updated back to its old properties, in the old
    /// template's order; what was replaced takes its old id back with no request; the new ids
    /// of replacements and the resources this update created are kept for the cleanup, and
    /// stay the stack's until deleted whatever the rollback's outcome.
    fn prepare_rollback(&mut self, new_deps: BTreeMap<String, BTreeSet<String>>) {
        self.phase_name = "rollback";
        let mut pending = PendingRollback { deps: new_deps, ..PendingRollback::default() };
        for (id, now) in self.live.clone() {
            match self.before.get(&id) {
                None => {
                    pending.discard.insert(id.clone(), now);
                    self.live.remove(&id);
                }
                Some(old) if old.physical_id != now.physical_id => {
                    pending.discard.insert(id.clone(), now);
                    self.live.insert(id, old.clone());
                }
                Some(old) => {
                    if self.attempted.contains_key(&id) && old.kind == Kind::Custom {
                        pending.back.insert(id);
                    } else {
                        self.live.insert(id, old.clone());
                    }
                }
            }
        }
        self.pending = Some(pending);
        self.target = None;
        self.conditions = self.current_conditions();
    }

    /// Plays what the rollback has still to do: the Updates back, then the cleanup. Ends
    /// UPDATE_ROLLBACK_COMPLETE, or UPDATE_ROLLBACK_FAILED with the rest still pending.
    async fn finish_rollback(&mut self) -> StepReport {
        self.phase_name = "rollback";
        let pending = self.pending.take().expect("a rollback in progress");
        let old_deps = self.current_deps();
        let back_ok = self.run(Phase::UpdateBack, pending.back.clone(), &old_deps, false, true).await;
        let back: BTreeSet<String> = pending.back.difference(&self.succeeded).cloned().collect();
        self.pending = Some(PendingRollback { back, ..pending });
        if !back_ok {
            return self.end("UPDATE_ROLLBACK_FAILED", false);
        }
        self.stack_event("UPDATE_ROLLBACK_COMPLETE_CLEANUP_IN_PROGRESS", None);
        self.phase_name = "cleanup";
        self.delete_leftovers().await;
        self.end("UPDATE_ROLLBACK_COMPLETE", false)
    }

    /// Deletes a rollback's pending new ids; what fails to delete is left behind, no longer
    /// the stack's, as a cleanup leaves it. True when all were deleted (or retained).
    async fn delete_leftovers(&mut self) -> bool {
        let Some(pending) = self.pending.take() else { return true };
        let kept = std::mem::replace(&mut self.live, pending.discard.clone());
        let ids: BTreeSet<String> = pending.discard.keys().cloned().collect();
        let deleted = self.run(Phase::Delete, ids, &pending.deps, true, false).await;
        self.live = kept;
        deleted
    }

    /// The stack's event and status at the end of an operation, and its report.
    fn end(&mut self, status: &str, completed: bool) -> StepReport {
        self.status = status.to_owned();
        self.stack_event(status, None);
        self.report(status, completed)
    }

    /// Why CloudFormation would refuse to start updating the stack to `target`, if it would.
    fn refusal(&self, target: &Target) -> anyhow::Result<Option<String>> {
        if self.status.ends_with("_FAILED") {
            // "A stack goes into the UPDATE_ROLLBACK_FAILED state when CloudFormation can't roll
            // back all changes ... By continuing the rollback, you can return your stack to a
            // working state ... and then try to update the stack again."
            // <https://docs.aws.amazon.com/AWSCloudFormation/latest/APIReference/API_ContinueUpdateRollback.html>
            return Ok(Some(format!(
                "Stack:{} is in {} state and can not be updated (play --continue-update-rollback to continue \
                 the rollback first, as ContinueUpdateRollback does)",
                self.stack.id, self.status
            )));
        }
        let current = self.current.as_ref().expect("a stack that exists");
        let mut same = target.template.clone();
        same.path.clone_from(&current.template.path);
        if same == current.template && target.parameters == current.parameters {
            return Ok(Some("No updates are to be performed.".into()));
        }
        let conditions = self.conditions_of(target)?;
        let retyped: Vec<&str> = target
            .template
            .resources
            .iter()
            .filter(|r| r.condition.as_ref().is_none_or(|c| conditions.get(c).copied().unwrap_or(false)))
            .filter(|r| self.live.get(&r.logical_id).is_some_and(|live| live.resource_type != r.resource_type))
            .map(|r| r.logical_id.as_str())
            .collect();
        if !retyped.is_empty() {
            // The text CloudFormation answers when the change set or update is created (quoted in
            // <https://github.com/aws/aws-sam-cli/issues/6786>); the User Guide says only that a
            // template with an unsupported change gets "a message saying that the change is not
            // permitted" (<https://docs.aws.amazon.com/AWSCloudFormation/latest/UserGuide/using-cfn-updating-stacks-get-template.html>).
            return Ok(Some(format!(
                "Update of resource type is not permitted. The new template modifies resource type of the \
                 following resources: [{}]",
                retyped.join(", ")
            )));
        }
        Ok(None)
    }

    /// The conditions of `target`'s template with its parameters.
    fn conditions_of(&self, target: &Target) -> anyhow::Result<BTreeMap<String, bool>> {
        let view = self.view(&target.template, false);
        let scope = Scope {
            parameters: &target.parameters,
            pseudo: &self.pseudo,
            conditions: &BTreeMap::new(),
            resources: &view,
        };
        target.template.resolve_conditions(&scope).map_err(|refusal| anyhow::anyhow!("{refusal}"))
    }

    /// The conditions of the template the stack stands on.
    fn current_conditions(&self) -> BTreeMap<String, bool> {
        self.current.as_ref().and_then(|current| self.conditions_of(current).ok()).unwrap_or_default()
    }

    fn begin(&mut self, step: &str, target: Target) -> anyhow::Result<()> {
        self.step = step.to_owned();
        self.phase_name = "forward";
        self.failed.clear();
        self.attempted.clear();
        self.before = self.live.clone();
        self.conditions = self.conditions_of(&target)?;
        self.target = Some(target);
        Ok(())
    }

    /// The target's resources whose Condition holds.
    fn included(&self) -> BTreeSet<String> {
        let template = &self.target.as_ref().expect("an operation's target").template;
        template
            .resources
            .iter()
            .filter(|r| r.condition.as_ref().is_none_or(|c| self.conditions.get(c).copied().unwrap_or(false)))
            .map(|r| r.logical_id.clone())
            .collect()
    }

    fn target_deps(&self, included: &BTreeSet<String>) -> BTreeMap<String, BTreeSet<String>> {
        deps_of(&self.target.as_ref().expect("an operation's target").template, included)
    }

    fn current_deps(&self) -> BTreeMap<String, BTreeSet<String>> {
        match &self.current {
            Some(current) => {
                let ids = current.template.resources.iter().map(|r| r.logical_id.clone()).collect();
                deps_of(&current.template, &ids)
            }
            None => BTreeMap::new(),
        }
    }
}

/// Each of `ids`' dependencies among `ids`.
fn deps_of(template: &Template, ids: &BTreeSet<String>) -> BTreeMap<String, BTreeSet<String>> {
    ids.iter()
        .map(|id| {
            let deps = template.dependencies(id).into_iter().filter(|d| ids.contains(d)).collect();
            (id.clone(), deps)
        })
        .collect()
}

#[cfg(test)]
#[path = "engine_tests.rs"]
mod tests;
