//! What crashes and a lost region do to a request: the primary dying before its commit, frozen
//! at its provider call while the secondary takes over, dying mid-poll, or lost for good during
//! a wait; each followed to the request's answer.

use std::sync::Arc;

use super::{Answer, ProviderTest, TakeOver, TestRequest, WAITING_DELIVERIES_MAX};
use crate::clock::Clock;
use crate::doubles::{Fault, Op, drive, drive_until};
use crate::vocabulary::{Disposition, QueueRecord, Role};

impl ProviderTest {
    /// The primary runs the provider for `request` and dies before it can commit the answer; the
    /// lease expires, and the secondary's copy takes the request over with a higher fence and
    /// answers. The provider runs twice (once under each fence): it must be idempotent, and
    /// writes a stale execution makes after the takeover must be fenced out.
    pub fn crash_before_commit_then_take_over(&mut self, request: &TestRequest) -> Answer {
        self.store.inject(Op::Commit, Fault::Stall);
        let commits = self.store.calls(Op::Commit);
        let primary = self.worker(Role::Primary, "us-east-1");
        let body = request.request.to_string();
        let invocation = self.invocation();
        let sent_ms = Some(self.clock.now_ms());
        let first = primary.handle(QueueRecord { body: Some(&body), receive_count: 1, sent_ms }, &invocation);
        let crashed = drive_until(&self.clock, first, || self.store.calls(Op::Commit) > commits);
        if let Some(disposition) = crashed {
            // The provider answered without reaching a commit (it was refused, say): nothing
            // crashed, so there is nothing to take over.
            return self.answer(request, disposition);
        }
        let settings = primary.settings();
        self.clock.advance_ms(settings.lease_ms + settings.skew_ms + 1);
        let secondary = self.worker(Role::Secondary, "us-west-2");
        let invocation = self.invocation();
        let delivery = QueueRecord { body: Some(&body), receive_count: 2, sent_ms };
        let disposition = drive(&self.clock, secondary.handle(delivery, &invocation));
        self.answer(request, disposition)
    }

    /// The primary runs `request` and stops at the start of its provider call, frozen (a Lambda
    /// paused by the runtime, or cut off by the network); its lease expires, the secondary's copy
    /// takes over with a higher fence, runs the provider and answers. Then the frozen execution
    /// resumes: its provider runs under the old fence, so every fenced write it makes must be
    /// refused, and it must commit and send nothing. Returns both deliveries.
    pub fn stale_write_after_take_over(&mut self, request: &TestRequest) -> TakeOver {
        let body = request.request.to_string();
        let sent_ms = Some(self.clock.now_ms());
        let primary = self.worker(Role::Primary, "us-east-1");
        let invocation = self.invocation();
        self.gate.arm();
        let mut stale =
            Box::pin(primary.handle(QueueRecord { body: Some(&body), receive_count: 1, sent_ms }, &invocation));
        let gate = Arc::clone(&self.gate);
        if let Some(disposition) = drive_until(&self.clock, &mut stale, || gate.is_waiting()) {
            // The provider was never called (the request was refused): nothing to take over.
            return TakeOver { answer: self.answer(request, disposition.clone()), stale: disposition };
        }
        let settings = primary.settings();
        self.clock.advance_ms(settings.lease_ms + settings.skew_ms + 1);
        let secondary = self.worker(Role::Secondary, "us-west-2");
        let taking_over = self.invocation();
        let delivery = QueueRecord { body: Some(&body), receive_count: 2, sent_ms };
        let disposition = drive(&self.clock, secondary.handle(delivery, &taking_over));
        let answer = self.answer(request, disposition);
        self.gate.open();
        let stale = drive(&self.clock, &mut stale);
        TakeOver { answer, stale }
    }

    /// A long-running `request`: the primary answers in progress, and at its next poll it dies
    /// in the middle of the provider's `poll`; the lease expires and the secondary takes the
    /// poll over (its context says so, [`ProviderContext::took_over_from`]), and follows the
    /// request to its answer. The poll runs again with the same state: it must be idempotent.
    ///
    /// [`ProviderContext::took_over_from`]: crate::provider::ProviderContext::took_over_from
    pub fn take_over_mid_poll(&mut self, request: &TestRequest) -> Answer {
        let body = request.request.to_string();
        let sent_ms = Some(self.clock.now_ms());
        let primary = self.worker(Role::Primary, "us-east-1");
        let first = drive(
            &self.clock,
            primary.handle(QueueRecord { body: Some(&body), receive_count: 1, sent_ms }, &self.invocation()),
        );
        let Disposition::Retry { delay_s, .. } = &first else { return self.answer(request, first) };
        if !self.waiting(request) {
            return self.answer(request, first);
        }
        self.clock.advance_ms(u64::from(*delay_s) * 1000);
        self.gate.arm();
        let gate = Arc::clone(&self.gate);
        let invocation = self.invocation();
        let polling = primary.handle(QueueRecord { body: Some(&body), receive_count: 2, sent_ms }, &invocation);
        if let Some(disposition) = drive_until(&self.clock, polling, || gate.is_waiting()) {
            return self.answer(request, disposition);
        }
        // The poller is gone, mid-poll; the gate is left for the next call to pass.
        self.gate.open();
        let settings = primary.settings();
        self.clock.advance_ms(settings.lease_ms + settings.skew_ms + 1);
        self.follow(request, Role::Secondary, "us-west-2", sent_ms, 3)
    }

    /// A long-running `request`: the primary answers in progress, then its whole region is lost
    /// for good; the secondary's copies take the due polls (after the secondary's lag) and
    /// follow the request to its answer.
    pub fn lose_primary_during_wait(&mut self, request: &TestRequest) -> Answer {
        let body = request.request.to_string();
        let sent_ms = Some(self.clock.now_ms());
        let primary = self.worker(Role::Primary, "us-east-1");
        let first = drive(
            &self.clock,
            primary.handle(QueueRecord { body: Some(&body), receive_count: 1, sent_ms }, &self.invocation()),
        );
        if !matches!(first, Disposition::Retry { .. }) || !self.waiting(request) {
            return self.answer(request, first);
        }
        self.follow(request, Role::Secondary, "us-west-2", sent_ms, 1)
    }

    /// Delivers `request` to `region` again and again, each time after the delay the worker
    /// asked for, until it is answered or given up.
    fn follow(&mut self, request: &TestRequest, role: Role, region: &str, sent_ms: Option<u64>, first: u32) -> Answer {
        let worker = self.worker(role, region);
        let body = request.request.to_string();
        for receive_count in first..first + WAITING_DELIVERIES_MAX {
            let delivery = QueueRecord { body: Some(&body), receive_count, sent_ms };
            let disposition = drive(&self.clock, worker.handle(delivery, &self.invocation()));
            match &disposition {
                Disposition::Retry { delay_s, .. } => self.clock.advance_ms(u64::from(*delay_s) * 1000),
                _ => return self.answer(request, disposition),
            }
        }
        panic!("the request was not answered after {WAITING_DELIVERIES_MAX} deliveries")
    }
}
