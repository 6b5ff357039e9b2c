//! CloudFormation's rules for a stack's operations, played request by request: create,
//! update (with its cleanup phase), the rollbacks of both, and delete. Each rule is the one
//! the CloudFormation User Guide states (docs/play.md lists them with their sources); where
//! the Guide is silent the player does the documented minimum and says so there.
//!
//! The engine holds the stack's state; [`jobs`](crate::jobs) do the waiting, several at
//! once: every resource whose dependencies are done starts at once, as CloudFormation starts
//! independent resources in parallel.

use std::collections::{BTreeMap, BTreeSet};
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::time::Duration;

use futures_util::stream::FuturesUnordered;
use serde::Serialize;
use serde_json::Value;

use crate::cloud::{Cloud, StackIdentity};
use crate::faults::{Faults, Injected};
use crate::intrinsics::{Pseudo, Scope};
use crate::jobs::{Done, Job};
use crate::state::{Live, RequestRecord, StackEvent};
use crate::template::Template;

#[path = "engine_events.rs"]
mod events;
#[path = "engine_nested.rs"]
mod nested;
#[path = "engine_rollback.rs"]
mod rollback;
#[path = "engine_turns.rs"]
mod turns;

pub use crate::state::Notice;

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
    /// The template of each nested stack (`AWS::CloudFormation::Stack`) the template declares,
    /// by logical id: read before anything is sent; its parameters are bound when it is played.
    pub nested: BTreeMap<String, NestedTemplate>,
}

/// A nested stack's template, read from where its `TemplateURL` points, with its own nested
/// stacks' templates.
#[derive(Debug, Clone, PartialEq)]
pub struct NestedTemplate {
    pub template: Template,
    pub nested: BTreeMap<String, NestedTemplate>,
    /// Where it was read from, as play says it.
    pub how: String,
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

/// An update whose forward phase completed: its cleanup is still to come (at once for a
/// stack; for a nested stack, when its parent's cleanup comes, or its parent's rollback instead).
#[derive(Debug)]
struct Forwarded {
    included: BTreeSet<String>,
    deps: BTreeMap<String, BTreeSet<String>>,
}

/// How an update's forward phase ended.
enum Forward {
    /// Every resource updated: the cleanup (or, nested, the parent's rollback) is to come.
    Done,
    /// Refused before anything was sent, or rolled back: the report says which.
    Ended(StepReport),
}

/// A turn that finished: a resource's job, or a nested stack's operation.
enum Finished<'a> {
    Job(String, Box<Job>, Done),
    Nested(String, Box<Engine<'a>>, nested::NestedEnd),
}

type Running<'a> = FuturesUnordered<Pin<Box<dyn Future<Output = Finished<'a>> + Send + 'a>>>;

/// A stack and the player of its operations.
pub struct Engine<'a> {
    cloud: &'a dyn Cloud,
    notify: &'a (dyn Fn(Notice) + Send + Sync),
    pub stack: StackIdentity,
    pseudo: Pseudo,
    stubs: BTreeMap<(String, String), String>,
    /// The region faults and the answers counted, shared by a stack and its nested stacks.
    faults: Arc<tokio::sync::Mutex<Faults<'a>>>,
    /// `--fail`'s (logical id, step) pairs.
    fail: BTreeSet<(String, String)>,
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
    /// The nested stacks, by the logical id of their `AWS::CloudFormation::Stack`.
    children: BTreeMap<String, Engine<'a>>,
    /// Nested stacks deleted, kept for their events and requests.
    retired: Vec<(String, Engine<'a>)>,
    forwarded: Option<Forwarded>,
    /// A ContinueUpdateRollback is in progress: nested stacks whose rollback failed continue
    /// theirs.
    continuing: bool,
    /// The logical ids of the nested stack resources this stack is inside, outermost first
    /// (empty for the stack a person plays).
    pub nested_in: Vec<String>,
    /// Every event of this stack and its nested stacks, in the order they happened.
    log: Arc<std::sync::Mutex<Vec<StackEvent>>>,
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
        let fail = faults.fail.clone();
        Self {
            cloud,
            notify,
            stack,
            pseudo,
            stubs,
            faults: Arc::new(tokio::sync::Mutex::new(faults)),
            fail,
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
            children: BTreeMap::new(),
            retired: Vec::new(),
            forwarded: None,
            continuing: false,
            nested_in: Vec::new(),
            log: Arc::default(),
        }
    }

    /// The region faults injected so far.
    pub async fn injected(&self) -> Vec<Injected> {
        self.faults.lock().await.injected.clone()
    }

    /// Restores the primary if a region fault was injected.
    pub async fn restore_faults(&self) {
        self.faults.lock().await.restore(self.notify).await;
    }

    /// Every event of the stack and its nested stacks, in the order they happened.
    pub fn all_events(&self) -> Vec<StackEvent> {
        self.log.lock().map(|log| log.clone()).unwrap_or_default()
    }

    /// Every resource's requests, the stack's own and, as `Nested/Logical`, its nested stacks'.
    pub fn all_history(&self) -> BTreeMap<String, Vec<RequestRecord>> {
        let mut all = self.history.clone();
        for (id, child) in self.retired.iter().map(|(id, c)| (id, c)).chain(&self.children) {
            for (key, records) in child.all_history() {
                all.entry(format!("{id}/{key}")).or_default().extend(records);
            }
        }
        all
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
        match self.update_forward(step, target).await? {
            Forward::Done => Ok(self.update_cleanup().await),
            Forward::Ended(report) => Ok(report),
        }
    }

    /// An update's forward phase: new resources created and changed ones updated; on a
    /// failure, the rollback. `Forward::Done` leaves the cleanup to [`Engine::update_cleanup`].
    async fn update_forward(&mut self, step: &str, target: Target) -> anyhow::Result<Forward> {
        if self.current.is_none() {
            anyhow::bail!("{step}: the stack does not exist (its create rolled back), so there is nothing to update");
        }
        if let Some(refusal) = self.refusal(&target)? {
            self.step = step.to_owned();
            (self.notify)(Notice::Progress(format!("{step}: refused, nothing sent: {refusal}")));
            let mut report = self.report(&self.status.clone(), false);
            report.refused = Some(refusal);
            return Ok(Forward::Ended(report));
        }
        self.begin(step, target)?;
        self.stack_event("UPDATE_IN_PROGRESS", Some("User Initiated".into()));
        let included = self.included();
        let deps = self.target_deps(&included);
        if self.run(Phase::Forward, included.clone(), &deps, false, true).await {
            self.forwarded = Some(Forwarded { included, deps });
            return Ok(Forward::Done);
        }
        let failed = self.failed.join(", ");
        self.stack_event(
            "UPDATE_ROLLBACK_IN_PROGRESS",
            Some(format!("The following resource(s) failed to update: [{failed}].")),
        );
        self.prepare_rollback(deps);
        if self.nested_in.is_empty() {
            return Ok(Forward::Ended(self.finish_rollback().await));
        }
        // A nested stack's rollback cleanup comes with its parent's.
        let report = match self.roll_back_updates().await {
            Some(failed) => failed,
            None => {
                self.status = "UPDATE_ROLLBACK_IN_PROGRESS".into();
                self.report("UPDATE_ROLLBACK_IN_PROGRESS", false)
            }
        };
        Ok(Forward::Ended(report))
    }

    /// An update's cleanup phase, after its forward phase: nested stacks' cleanups first, then
    /// the replaced and removed resources deleted.
    async fn update_cleanup(&mut self) -> StepReport {
        let Forwarded { included, .. } = self.forwarded.take().expect("an update whose forward phase completed");
        self.stack_event("UPDATE_COMPLETE_CLEANUP_IN_PROGRESS", None);
        self.phase_name = "cleanup";
        self.clean_up_children().await;
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
        self.end("UPDATE_COMPLETE", true)
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
        self.continuing = true;
        self.stack_event("UPDATE_ROLLBACK_IN_PROGRESS", Some("User Initiated".into()));
        let report = self.finish_rollback().await;
        self.continuing = false;
        Ok(report)
    }

    /// Deletes the stack: every resource in reverse dependency order, `Retain` ones skipped.
    pub async fn delete(&mut self) -> anyhow::Result<StepReport> {
        Ok(self.delete_as("delete", "delete").await)
    }

    /// The stack's delete, in `step` and `phase` (a nested stack is deleted in its parent's).
    async fn delete_as(&mut self, step: &str, phase: &'static str) -> StepReport {
        self.step = step.into();
        self.phase_name = phase;
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
        let reason =
            (!deleted).then(|| format!("The following resource(s) failed to delete: [{}].", self.failed.join(", ")));
        self.stack_event(status, reason);
        StepReport {
            step: step.into(),
            template: None,
            status: status.into(),
            completed: deleted,
            outputs: vec![],
            refused: None,
        }
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
        if same == current.template && target.parameters == current.parameters && target.nested == current.nested {
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
