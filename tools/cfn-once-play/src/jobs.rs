//! The slow part of each resource's turn, run concurrently: a request sent and its answer
//! awaited, a handle made, a wait condition's signals awaited. Jobs own their inputs, so any
//! number run at once while the engine keeps the stack's state to itself.

use std::collections::BTreeMap;
use std::time::Duration;

use serde_json::{Map, Value};
use tokio::time::Instant;

use crate::cloud::{CfnRequest, Cloud, Outcome, StackIdentity};

/// What a resource's turn does.
#[derive(Debug, Clone)]
pub enum Job {
    /// A request to a custom resource. `fail_on_purpose`: `--fail` named this request; a
    /// SUCCESS is counted FAILED (the provider still ran it, as a provider that failed late did).
    Send { request: CfnRequest, fail_on_purpose: bool },
    /// A new wait condition handle.
    Handle,
    /// A wait condition: `count` signals on `handle` within `timeout_s`.
    Wait { handle: String, count: usize, timeout_s: u64 },
    /// Nothing to send: a type the player does not provision, or the delete of a handle.
    Nothing,
}

/// How a wait condition ended.
#[derive(Debug, Clone, PartialEq)]
pub enum WaitEnd {
    /// `count` SUCCESS signals: the Data attribute, UniqueId to Data.
    Complete(Map<String, Value>),
    Failed {
        unique_id: String,
        reason: String,
    },
    TimedOut {
        received: usize,
        expected: usize,
    },
}

/// What a job came to.
#[derive(Debug)]
pub enum Done {
    Answer(anyhow::Result<Outcome>),
    Handle(anyhow::Result<String>),
    Waited(anyhow::Result<WaitEnd>),
    Nothing,
}

/// Runs `job` for `logical_id`; `progress` hears lines while it waits.
pub async fn run(
    cloud: &dyn Cloud,
    stack: StackIdentity,
    logical_id: String,
    job: Job,
    progress: &(dyn Fn(String) + Send + Sync),
    wait_poll: Duration,
) -> (String, Job, Done) {
    let done = match &job {
        Job::Send { request, .. } => {
            let line = |text: String| progress(format!("{logical_id}: {text}"));
            Done::Answer(cloud.send(&stack, request, &line).await)
        }
        Job::Handle => Done::Handle(cloud.create_handle(&stack, &logical_id).await),
        Job::Wait { handle, count, timeout_s } => {
            Done::Waited(wait(cloud, handle, *count, *timeout_s, wait_poll, &logical_id, progress).await)
        }
        Job::Nothing => Done::Nothing,
    };
    (logical_id, job, done)
}

/// Reads the handle's signals until `count` distinct UniqueIds succeeded, one failed, or
/// `timeout_s` passed since the wait began. A UniqueId signalled twice counts once (the later
/// signal is a retransmission and is ignored, as CloudFormation ignores it).
async fn wait(
    cloud: &dyn Cloud,
    handle: &str,
    count: usize,
    timeout_s: u64,
    poll: Duration,
    logical_id: &str,
    progress: &(dyn Fn(String) + Send + Sync),
) -> anyhow::Result<WaitEnd> {
    let started = Instant::now();
    let deadline = started + Duration::from_secs(timeout_s);
    let mut last_note = started;
    loop {
        let mut seen: BTreeMap<String, Value> = BTreeMap::new();
        for signal in cloud.signals(handle).await? {
            if seen.contains_key(&signal.unique_id) {
                continue;
            }
            if !signal.success {
                return Ok(WaitEnd::Failed { unique_id: signal.unique_id, reason: signal.reason });
            }
            seen.insert(signal.unique_id, Value::String(signal.data));
        }
        if seen.len() >= count {
            return Ok(WaitEnd::Complete(seen.into_iter().collect()));
        }
        let now = Instant::now();
        if now >= deadline {
            return Ok(WaitEnd::TimedOut { received: seen.len(), expected: count });
        }
        if now.duration_since(last_note) >= Duration::from_secs(15) {
            last_note = now;
            progress(format!(
                "{logical_id}: {} of {count} signals after {} s of its Timeout {timeout_s} s",
                seen.len(),
                now.duration_since(started).as_secs()
            ));
        }
        tokio::time::sleep(poll.min(deadline - now)).await;
    }
}
