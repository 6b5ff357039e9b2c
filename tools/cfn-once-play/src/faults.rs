//! Faults a person asks for, to watch what a stack does through them: a request answered
//! FAILED (`--fail`), the primary region drained for a drill (`--drill-after`) or crashed
//! (`--kill-primary-after`) after so many answers. The region faults act through
//! [`RegionFaults`]; the local environment's is the drill's control item and the signals
//! `cfn-once local` takes.

use std::collections::BTreeSet;

use async_trait::async_trait;
use serde::Serialize;

use crate::state::Notice;

/// What the region faults do.
#[async_trait]
pub trait RegionFaults: Send + Sync {
    /// Drains the primary: the active region becomes the secondary, as a failover drill does.
    async fn drain_primary(&self) -> anyhow::Result<()>;
    /// Crashes the primary's handler: whatever it holds is left for the secondary to take over.
    async fn crash_primary(&self) -> anyhow::Result<()>;
    /// Undoes both: the primary serves and is active again.
    async fn restore(&self) -> anyhow::Result<()>;
}

/// The faults of one play.
#[derive(Default)]
pub struct Faults<'a> {
    /// (logical id, step) pairs whose request is counted FAILED.
    pub fail: BTreeSet<(String, String)>,
    pub drill_after: Option<usize>,
    pub kill_after: Option<usize>,
    pub region: Option<&'a dyn RegionFaults>,
    /// Answers counted so far.
    pub answers: usize,
    /// What was injected, when (after how many answers).
    pub injected: Vec<Injected>,
}

impl std::fmt::Debug for Faults<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Faults")
            .field("fail", &self.fail)
            .field("drill_after", &self.drill_after)
            .field("kill_after", &self.kill_after)
            .field("answers", &self.answers)
            .finish_non_exhaustive()
    }
}

/// A region fault, as it happened.
#[derive(Debug, Clone, Serialize)]
pub struct Injected {
    pub fault: String,
    pub after_answers: usize,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
}

impl<'a> Faults<'a> {
    /// Whether `--fail` names `logical_id` in `step`.
    pub fn fails(&self, logical_id: &str, step: &str) -> bool {
        self.fail.contains(&(logical_id.to_owned(), step.to_owned()))
    }

    /// Counts an answer and injects what is due after it.
    pub async fn answered(&mut self, notify: &(dyn Fn(Notice) + Send + Sync)) {
        self.answers += 1;
        let Some(region) = self.region else { return };
        if self.drill_after == Some(self.answers) {
            let result = region.drain_primary().await;
            self.note("drill: the primary drained, the secondary is the active region", result, notify);
        }
        if self.kill_after == Some(self.answers) {
            let result = region.crash_primary().await;
            self.note("the primary's handler crashed; the secondary takes over", result, notify);
        }
    }

    /// Restores the primary if a region fault was injected.
    pub async fn restore(&mut self, notify: &(dyn Fn(Notice) + Send + Sync)) {
        let Some(region) = self.region else { return };
        if self.injected.iter().any(|i| i.error.is_none()) {
            let result = region.restore().await;
            self.note("the primary restored: serving and active again", result, notify);
        }
    }

    fn note(&mut self, fault: &str, result: anyhow::Result<()>, notify: &(dyn Fn(Notice) + Send + Sync)) {
        let error = result.err().map(|e| format!("{e:#}"));
        let line = match &error {
            None => format!("fault after {} answers: {fault}", self.answers),
            Some(error) => format!("fault after {} answers NOT injected ({fault}): {error}", self.answers),
        };
        notify(Notice::Progress(line));
        self.injected.push(Injected { fault: fault.to_owned(), after_answers: self.answers, error });
    }
}
