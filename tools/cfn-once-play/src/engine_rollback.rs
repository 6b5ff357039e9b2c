//! An update's rollback: planned when the update fails (what goes back to its old properties,
//! what the cleanup deletes), the Updates back, then the cleanup; either half may be left for
//! later (ContinueUpdateRollback, or a nested stack's parent's cleanup).

use std::collections::{BTreeMap, BTreeSet};

use super::{Engine, PendingRollback, Phase, StepReport};
use crate::state::Kind;

impl Engine<'_> {
    /// The rollback of a failed update, planned: what was updated in place (or failed, or was
    /// cancelled mid-update) is to be updated back to its old properties, in the old
    /// template's order; what was replaced takes its old id back with no request; the new ids
    /// of replacements and the resources this update created are kept for the cleanup, and
    /// stay the stack's until deleted whatever the rollback's outcome.
    pub(super) fn prepare_rollback(&mut self, new_deps: BTreeMap<String, BTreeSet<String>>) {
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
                    let attempted = self.attempted.contains_key(&id);
                    if attempted && old.kind == Kind::Nested {
                        // Its old outputs until its own rollback says otherwise.
                        self.live.insert(id.clone(), old.clone());
                        pending.back.insert(id);
                    } else if attempted && old.kind == Kind::Custom {
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
    pub(super) async fn finish_rollback(&mut self) -> StepReport {
        match self.roll_back_updates().await {
            Some(failed) => failed,
            None => self.rollback_cleanup().await,
        }
    }

    /// A rollback's Updates back; on a failure the stack's end (UPDATE_ROLLBACK_FAILED, with
    /// what failed still pending), else None and the cleanup still to come.
    pub(super) async fn roll_back_updates(&mut self) -> Option<StepReport> {
        self.phase_name = "rollback";
        let pending = self.pending.take().expect("a rollback in progress");
        let old_deps = self.current_deps();
        let back_ok = self.run(Phase::UpdateBack, pending.back.clone(), &old_deps, false, true).await;
        let back: BTreeSet<String> = pending.back.difference(&self.succeeded).cloned().collect();
        self.pending = Some(PendingRollback { back, ..pending });
        (!back_ok).then(|| self.end("UPDATE_ROLLBACK_FAILED", false))
    }

    /// A rollback's cleanup: nested stacks' rollback cleanups first, then the failed update's
    /// new ids deleted.
    pub(super) async fn rollback_cleanup(&mut self) -> StepReport {
        self.stack_event("UPDATE_ROLLBACK_COMPLETE_CLEANUP_IN_PROGRESS", None);
        self.phase_name = "cleanup";
        self.clean_up_children().await;
        self.delete_leftovers().await;
        self.end("UPDATE_ROLLBACK_COMPLETE", false)
    }

    /// Deletes a rollback's pending new ids; what fails to delete is left behind, no longer
    /// the stack's, as a cleanup leaves it. True when all were deleted (or retained).
    pub(super) async fn delete_leftovers(&mut self) -> bool {
        let Some(pending) = self.pending.take() else { return true };
        let kept = std::mem::replace(&mut self.live, pending.discard.clone());
        let ids: BTreeSet<String> = pending.discard.keys().cloned().collect();
        let deleted = self.run(Phase::Delete, ids, &pending.deps, true, false).await;
        self.live = kept;
        deleted
    }
}
