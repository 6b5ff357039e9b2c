//! The function as Lambda runs it: each region's event source mapping receiving batches, the
//! invocations it starts (polled by the executor, frozen, crashed, killed at their timeout),
//! and what the event source mapping deletes when one returns.

use std::collections::BTreeMap;
use std::panic::AssertUnwindSafe;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::task::{Context, Poll, Waker};

use cfn_once_core::batch::{self, Record};
use cfn_once_core::clock::Clock;
use cfn_once_core::response::Status;
use cfn_once_core::vocabulary::{Disposition, Done, Handled, Invocation, QueueRecord};

use crate::queues::Receipt;
use crate::scenario::Region;
use crate::shared::{Shared, T0_MS};

use super::{Flag, HiddenUnstarted, Task, World};

impl World {
    /// Polls every runnable invocation once; true if any was polled.
    pub(super) fn poll_tasks(&mut self) -> bool {
        let now_ms = self.now_ms();
        let runnable: Vec<u64> = self
            .tasks
            .iter()
            .filter(|(_, task)| task.frozen_until_ms <= now_ms && task.flag.0.load(Ordering::SeqCst))
            .map(|(id, _)| *id)
            .collect();
        for id in &runnable {
            if self.shared.fault(self.shared.faults.crash) {
                self.shared.cover("Lambda crashed between steps");
                self.crash(*id, "crashed between two steps", "Lambda crashed between steps");
                continue;
            }
            let Some(task) = self.tasks.get_mut(id) else { continue };
            task.started = true;
            task.flag.0.store(false, Ordering::SeqCst);
            let waker = Waker::from(Arc::clone(&task.flag));
            let future = &mut task.future;
            let poll =
                std::panic::catch_unwind(AssertUnwindSafe(|| future.as_mut().poll(&mut Context::from_waker(&waker))));
            if let Some((polls_left, duration_ms)) = task.freeze {
                if polls_left <= 1 {
                    task.freeze = None;
                    task.frozen_until_ms = now_ms + duration_ms;
                    let region = task.region;
                    self.shared.cover("Lambda frozen for longer than a lease");
                    self.shared.fault_happened(region, "Lambda frozen for longer than a lease");
                    self.shared.trace(Some(region), || format!("Lambda {id} frozen for {} s", duration_ms / 1000));
                } else {
                    task.freeze = Some((polls_left - 1, duration_ms));
                }
            }
            match poll {
                Ok(Poll::Ready(to_retry)) => self.complete(*id, &to_retry),
                Ok(Poll::Pending) => {}
                Err(_) => {
                    // lambda_runtime reports the invocation failed and the process serves on;
                    // the event source mapping retries the whole batch after its visibility.
                    self.shared.cover("a panic failed a whole invocation");
                    self.end_without_deleting(*id, "failed: a panic reached the Lambda runtime");
                }
            }
        }
        !runnable.is_empty()
    }

    /// The event source mappings: each region that is up receives batches of visible copies
    /// while it has concurrency left; true if any invocation started.
    pub(super) fn deliver(&mut self) -> bool {
        let now_ms = self.now_ms();
        let mut started = false;
        for region in Region::BOTH {
            while self.up[region.index()]
                && self.tasks.values().filter(|task| task.region == region).count() < self.scenario.concurrency
                && self.queues().any_visible(region, now_ms)
            {
                let visibility_ms = self.scenario.function_timeout.visibility_s * 1_000;
                let (receipts, redriven) = self.queues().receive(
                    region,
                    now_ms,
                    self.scenario.batch_size,
                    visibility_ms,
                    self.scenario.max_receive_count,
                );
                for request in redriven {
                    self.shared.cover("message moved to the DLQ by SQS (maxReceiveCount)");
                    self.dead_lettered(request, "SQS, its receives used up", region);
                }
                if receipts.is_empty() {
                    continue;
                }
                if receipts.len() > 1 {
                    self.shared.cover("batch of more than one record");
                }
                if self.shared.fault(self.shared.faults.duplicate) {
                    self.shared.cover("message delivered twice at once");
                    self.start(region, vec![receipts[0]]);
                }
                self.start(region, receipts);
                started = true;
            }
        }
        started
    }

    fn start(&mut self, region: Region, receipts: Vec<Receipt>) {
        let now_ms = self.now_ms();
        let task_id = self.next_task;
        self.next_task += 1;
        let items: Vec<(Receipt, String, u32, u64, String)> = {
            let queues = self.queues();
            receipts
                .iter()
                .filter_map(|receipt| {
                    let copy = queues.copies.get(&receipt.message)?;
                    let body = self.bodies[copy.request].clone();
                    let id = format!("message-{}", receipt.message);
                    Some((*receipt, body, copy.receive_count, copy.sent_ms, id))
                })
                .collect()
        };
        self.shared.trace(Some(region), || {
            let what: Vec<String> = {
                let queues = self.queues();
                items
                    .iter()
                    .map(|(receipt, _, count, _, _)| {
                        let request = queues.copies.get(&receipt.message).map_or(0, |copy| copy.request);
                        format!("request {request} (receive {count})")
                    })
                    .collect()
            };
            format!("Lambda {task_id} receives {}", what.join(", "))
        });
        let elapsed_ms = self.shared.elapsed_ms();
        self.shared.observed().invocations_started.insert(format!("lambda-{task_id}"), elapsed_ms);
        let on_last_release =
            self.scenario.upgrade.as_ref().is_some_and(|upgrade| {
                upgrade.old_region == region && self.shared.elapsed_ms() < upgrade.upgraded_at_ms
            });
        if on_last_release {
            self.shared.cover("upgrade: an invocation on the last release's decision table");
        }
        let worker =
            if on_last_release { &self.old_workers[region.index()] } else { &self.workers[region.index()] }.clone();
        let queue = Arc::clone(&self.sim_queues[region.index()]);
        let shared = Arc::clone(&self.shared);
        let handovers = Arc::clone(&self.handover_deadlines);
        let invocation = Invocation {
            id: format!("lambda-{task_id}"),
            deadline_ms: self.clocks[region.index()].now_ms() + self.function_timeout_ms(),
        };
        let future = Box::pin(async move {
            let records: Vec<Record<'_, Receipt>> = items
                .iter()
                .map(|(receipt, body, receive_count, sent_ms, id)| Record {
                    message: receipt,
                    message_id: id,
                    queue_record: QueueRecord {
                        body: Some(body),
                        receive_count: *receive_count,
                        sent_ms: Some(*sent_ms),
                    },
                })
                .collect();
            let observe = move |handled: &Handled| observe(&shared, region, handled, &handovers);
            batch::handle(&worker, queue.as_ref(), &invocation, &records, &observe).await
        });
        let freeze = self
            .shared
            .fault(self.shared.faults.freeze)
            .then(|| (1 + self.shared.below(6) as u32, self.lease_and_skew_ms + self.shared.below(60_000)));
        self.tasks.insert(
            task_id,
            Task {
                region,
                receipts,
                received_at_ms: now_ms,
                kill_at_ms: now_ms + self.function_timeout_ms(),
                frozen_until_ms: 0,
                disturbed: freeze.is_some(),
                freeze,
                started: false,
                flag: Arc::new(Flag(AtomicBool::new(true))),
                future,
            },
        );
    }

    /// The Lambda is gone mid-run: nothing of its batch is deleted, and every copy keeps the
    /// visibility it had (the visibility timeout from its receive, unless the handler changed it).
    pub(super) fn crash(&mut self, task_id: u64, why: &str, fault: &'static str) {
        if let Some(task) = self.tasks.get(&task_id) {
            self.shared.fault_happened(task.region, fault);
        }
        self.end_without_deleting(task_id, why);
    }

    fn end_without_deleting(&mut self, task_id: u64, why: &str) {
        let Some(task) = self.tasks.remove(&task_id) else { return };
        self.shared.trace(Some(task.region), || format!("Lambda {task_id} {why}"));
        if !task.started {
            let visibility_ms = self.scenario.function_timeout.visibility_s * 1_000;
            let queues = self.queues();
            let hidden: Vec<HiddenUnstarted> = task
                .receipts
                .iter()
                .filter_map(|receipt| queues.copies.get(&receipt.message))
                .map(|copy| HiddenUnstarted {
                    request: copy.request,
                    region: task.region,
                    until_ms: task.received_at_ms + visibility_ms - T0_MS,
                })
                .collect();
            drop(queues);
            self.hidden_unstarted.extend(hidden);
        }
    }

    /// The invocation returned: the event source mapping deletes every record it did not
    /// report failed.
    fn complete(&mut self, task_id: u64, to_retry: &[bool]) {
        let Some(task) = self.tasks.remove(&task_id) else { return };
        self.shared.trace(Some(task.region), || format!("Lambda {task_id} returned"));
        for (receipt, retry) in task.receipts.iter().zip(to_retry.iter().chain(std::iter::repeat(&true))) {
            if !retry && !self.queues().delete(*receipt) {
                self.shared.cover("delete with a receipt a later receive replaced");
            }
        }
    }

    /// Lambda kills invocations past the function timeout. One that was neither frozen nor saw
    /// its clock jump ran past the time budget every call must keep (`settings`): a violation,
    /// since a killed invocation fails its whole batch.
    pub(super) fn kill_overdue(&mut self) {
        let now_ms = self.now_ms();
        let overdue: Vec<(u64, bool)> =
            self.tasks.iter().filter(|(_, t)| t.kill_at_ms <= now_ms).map(|(id, t)| (*id, t.disturbed)).collect();
        for (id, disturbed) in overdue {
            self.shared.cover("Lambda killed at its timeout");
            if !disturbed {
                self.shared.violation(format!("BUDGET: Lambda {id} was killed at its function timeout, undisturbed"));
            }
            self.end_without_deleting(id, "killed at the function timeout");
        }
    }
}

/// Counts what a record's delivery came to. `handovers` holds the answer's deadline of each
/// request that hands a work over, by RequestId.
fn observe(shared: &Shared, region: Region, handled: &Handled, handovers: &BTreeMap<String, u64>) {
    let request_id = handled.request.as_ref().map(|summary| summary.request_id.as_str());
    let past_answer =
        request_id.and_then(|id| handovers.get(id)).is_some_and(|deadline_ms| shared.elapsed_ms() > *deadline_ms);
    let store_failed = matches!(&handled.disposition, Disposition::Retry { why, .. } if why.contains("lease store"));
    if past_answer && store_failed {
        shared.cover("a handed-over request's copy kept past its answer's deadline after a store failure");
    }
    match &handled.disposition {
        Disposition::Done(Done::Answered { status: Status::Failed, .. }) => shared.cover("answered FAILED"),
        Disposition::Done(Done::Replayed { .. }) => shared.cover("stored answer re-sent"),
        Disposition::Done(Done::Superseded) => shared.cover("superseded attempt dropped"),
        Disposition::Retry { why, .. } if why.contains("standby") => shared.cover("drained primary left the message"),
        Disposition::Retry { why, .. } if why.contains("runs again under a higher fence") => {
            shared.cover("an outcome nobody saw: the lease ended for a run under a higher fence")
        }
        _ => {}
    }
    shared.trace(Some(region), || {
        let request = handled.request.as_ref().map_or("?", |summary| summary.request_id.as_str());
        format!("{request}: {:?}", handled.disposition)
    });
}
