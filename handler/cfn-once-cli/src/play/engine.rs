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
            self.stack_event("CREATE_COMPLETE", None);
            return Ok(self.report("CREATE_COMPLETE", true));
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
        self.stack_event(status, None);
        Ok(self.report(status, false))
    }

    /// Updates the stack to `target`: new resources created, changed ones updated, then in the
    /// cleanup phase the replaced and removed ones deleted. If a resource fails, rolls back:
    /// Updates back to the old properties, then deletes of what this update created.
    pub async fn update(&mut self, step: &str, target: Target) -> anyhow::Result<StepReport> {
        if self.current.is_none() {
            anyhow::bail!("{step}: the stack does not exist (its create rolled back), so there is nothing to update");
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
            self.stack_event("UPDATE_COMPLETE", None);
            return Ok(self.report("UPDATE_COMPLETE", true));
        }
        let failed = self.failed.join(", ");
        self.stack_event(
            "UPDATE_ROLLBACK_IN_PROGRESS",
            Some(format!("The following resource(s) failed to update: [{failed}].")),
        );
        let rolled_back = self.roll_back_update(&deps).await;
        self.target = None;
        let status = if rolled_back { "UPDATE_ROLLBACK_COMPLETE" } else { "UPDATE_ROLLBACK_FAILED" };
        self.stack_event(status, None);
        Ok(self.report(status, false))
    }

    /// Deletes the stack: every resource in reverse dependency order, `Retain` ones skipped.
    pub async fn delete(&mut self) -> anyhow::Result<StepReport> {
        self.step = "delete".into();
        self.phase_name = "delete";
        self.failed.clear();
        self.stack_event("DELETE_IN_PROGRESS", Some("User Initiated".into()));
        let deps = self.current_deps();
        let all: BTreeSet<String> = self.live.keys().cloned().collect();
        let deleted = self.run(Phase::Delete, all, &deps, true, false).await;
        let status = if deleted { "DELETE_COMPLETE" } else { "DELETE_FAILED" };
        if deleted {
            self.current = None;
        }
        self.stack_event(status, None);
        Ok(StepReport {
            step: "delete".into(),
            template: None,
            status: status.into(),
            completed: deleted,
            outputs: vec![],
        })
    }

    /// The rollback of a failed update: what was updated in place (or failed, or was cancelled
    /// mid-update) is updated back to its old properties, in the old template's order; what was
    /// replaced takes its old id back with no request; then, in the cleanup phase, the new ids
    /// of replacements and the resources this update created are deleted.
    async fn roll_back_update(&mut self, new_deps: &BTreeMap<String, BTreeSet<String>>) -> bool {
        self.phase_name = "rollback";
        let mut back = BTreeSet::new();
        let mut discard: BTreeMap<String, Live> = BTreeMap::new();
        for (id, now) in self.live.clone() {
            match self.before.get(&id) {
                None => {
                    discard.insert(id, now);
                }
                Some(old) if old.physical_id != now.physical_id => {
                    discard.insert(id.clone(), now);
                    self.live.insert(id, old.clone());
                }
                Some(old) => {
                    if self.attempted.contains_key(&id) && old.kind == Kind::Custom {
                        back.insert(id);
                    } else {
                        self.live.insert(id, old.clone());
                    }
                }
            }
        }
        let old_deps = self.current_deps();
        if !self.run(Phase::UpdateBack, back, &old_deps, false, true).await {
            return false;
        }
        self.stack_event("UPDATE_ROLLBACK_COMPLETE_CLEANUP_IN_PROGRESS", None);
        self.phase_name = "cleanup";
        let kept = std::mem::take(&mut self.live);
        self.live = discard.clone();
        let ids: BTreeSet<String> = discard.keys().cloned().collect();
        self.run(Phase::Delete, ids, new_deps, true, false).await;
        self.live = kept;
        true
    }

    fn begin(&mut self, step: &str, target: Target) -> anyhow::Result<()> {
        self.step = step.to_owned();
        self.phase_name = "forward";
        self.failed.clear();
        self.attempted.clear();
        self.before = self.live.clone();
        let conditions = {
            let view = self.view(&target.template, false);
            let scope = Scope {
                parameters: &target.parameters,
                pseudo: &self.pseudo,
                conditions: &BTreeMap::new(),
                resources: &view,
            };
            target.template.resolve_conditions(&scope).map_err(|refusal| anyhow::anyhow!("{refusal}"))?
        };
        self.conditions = conditions;
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
