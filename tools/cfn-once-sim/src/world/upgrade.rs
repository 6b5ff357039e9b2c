//! The newer version of cfn-once of the `Upgrade` story: it takes requests first, writes
//! records of a format this one does not know, answers them later, and checks (FORMAT) that
//! nobody overwrote them.

use cfn_once_core::clock::Clock;

use super::{Event, World, stack_arn, stack_id};

impl World {
    /// The key of the record of request `index` (a Create: its RequestId is its own).
    fn key_of(&self, index: usize) -> cfn_once_core::request::RequestKey {
        cfn_once_core::request::RequestKey {
            stack_id: stack_id(self.scenario.seed),
            request_id: format!("request-{index}"),
        }
    }

    /// A newer version of cfn-once got request `index` first: where no record exists yet, it
    /// takes the lease, writing a record of its own format, and answers `answer_after_ms` later.
    pub(super) fn newer_takes(&mut self, index: usize, answer_after_ms: u64) {
        let key = self.key_of(index);
        if self.table.stored(&key).iter().any(Option::is_some) {
            return;
        }
        let now_ms = self.shared.clock.now_ms();
        let mut record = cfn_once_core::lease::left_record(&key, 1, None, now_ms, now_ms + 86_400_000 * 30);
        record.format = cfn_once_core::lease::RECORD_FORMAT + 1;
        record.state = cfn_once_core::lease::LeaseState::Running;
        record.owner = "newer-version".into();
        record.lease_until_ms = now_ms + answer_after_ms + 30_000;
        self.table.put_as_newer_version(&record);
        self.shared.observed().newer_records.insert(key, record);
        self.shared.cover("upgrade: a newer version took a request first");
        self.shared.trace(None, || format!("a newer version of cfn-once takes request {index}"));
        let at = (self.now_ms() + answer_after_ms, u64::MAX - index as u64);
        self.events.insert(at, Event::NewerAnswers(index));
    }

    /// FORMAT: the record a newer version wrote is as it left it, in every replica.
    fn check_newer_record(&self, key: &cfn_once_core::request::RequestKey) -> bool {
        let Some(written) = self.shared.observed().newer_records.get(key).cloned() else { return true };
        let intact = self.table.stored(key).iter().all(|stored| stored.as_ref() == Some(&written));
        if !intact {
            self.shared.violation(format!(
                "FORMAT: the record of {} a newer version wrote (format {}) was overwritten or deleted",
                key.request_id, written.format
            ));
        }
        intact
    }

    /// The newer version answers the request it took: PUTs its answer and records it delivered.
    pub(super) fn newer_answers(&mut self, index: usize) {
        let key = self.key_of(index);
        if !self.check_newer_record(&key) {
            return;
        }
        let body = serde_json::json!({
            "Status": "SUCCESS",
            "Reason": "answered by a newer version of cfn-once",
            "PhysicalResourceId": format!("newer-{index}"),
            "StackId": stack_arn(self.scenario.seed),
            "RequestId": key.request_id,
            "LogicalResourceId": format!("Resource{index}"),
            "Data": {},
        })
        .to_string()
        .into_bytes();
        let now_ms = self.shared.clock.now_ms();
        let Some(mut record) = self.shared.observed().newer_records.get(&key).cloned() else { return };
        record.state = cfn_once_core::lease::LeaseState::Committed;
        record.response = Some(body.clone());
        record.delivered = true;
        record.updated_ms = now_ms;
        self.table.put_as_newer_version(&record);
        self.shared.observed().newer_records.insert(key, record);
        let elapsed_ms = self.shared.elapsed_ms();
        self.shared.observed().puts.entry(self.urls[index].clone()).or_default().push((elapsed_ms, body));
        self.shared.cover("upgrade: a newer version answered a request it took");
        self.shared.trace(None, || format!("the newer version answers request {index}"));
    }

    /// FORMAT at the end: every record a newer version wrote is as it left it.
    pub(super) fn check_newer_records(&self) {
        let keys: Vec<_> = self.shared.observed().newer_records.keys().cloned().collect();
        for key in keys {
            self.check_newer_record(&key);
        }
    }
}
