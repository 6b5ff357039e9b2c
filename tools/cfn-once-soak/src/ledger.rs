//! The soak's ledger: every request attempt as it was sent ([`Sent`]), and when each answer came,
//! learnt from the PUT proxy's log as CloudFormation learns it from its bucket
//! ([`watch_answers`]). The checks ([`crate::verify`]) compare it with what landed.

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::time::Duration;

use cfn_once::system_clock::SystemClock;
use cfn_once_core::clock::Clock;

use crate::fleet::Fleet;
use crate::plan::{Class, Expect, Step};

/// One request attempt as sent: what the checks compare with what landed.
#[derive(Debug, Clone)]
pub struct Sent {
    pub resource: usize,
    pub class: Class,
    pub step: Step,
    pub kind: &'static str,
    pub stack_id: String,
    pub request_id: String,
    pub logical_id: String,
    /// The response object's key; the ResponseURL is presigned for it.
    pub key: String,
    /// The URL's X-Amz-Signature, which must never appear in a log.
    pub signature: String,
    pub published_ms: u64,
    pub deadline_ms: u64,
    pub expect: Expect,
    /// Times the topic delivered it (2 for a duplicate).
    pub copies: u32,
    /// For `Custom::DynamoDBItem`: the item's `Value` this request sets.
    pub item_value: Option<String>,
    /// For a superseded attempt: when its late copy was published (no PUT may follow it).
    pub late_copy_ms: Option<u64>,
}

/// Everything sent, and when answers came (from the PUT proxy's log).
#[derive(Debug)]
pub struct Ledger {
    pub started_ms: u64,
    /// No player waits past this.
    pub end_ms: u64,
    sent: Mutex<Vec<Sent>>,
    /// Every PUT S3 accepted, per object key: when it reached the PUT proxy, ms (S3's own
    /// LastModified has a resolution of one second, as in AWS).
    answers: Mutex<HashMap<String, Vec<u64>>>,
    seen: AtomicUsize,
    pub duplicates: AtomicU64,
    pub undeliverable: AtomicU64,
}

fn lock<T>(mutex: &Mutex<T>) -> MutexGuard<'_, T> {
    mutex.lock().unwrap_or_else(PoisonError::into_inner)
}

impl Ledger {
    pub fn new(started_ms: u64, length_ms: u64) -> Self {
        Self {
            started_ms,
            end_ms: started_ms + length_ms,
            sent: Mutex::default(),
            answers: Mutex::default(),
            seen: AtomicUsize::new(0),
            duplicates: AtomicU64::new(0),
            undeliverable: AtomicU64::new(0),
        }
    }

    pub fn sent(&self) -> Vec<Sent> {
        lock(&self.sent).clone()
    }

    pub(crate) fn record(&self, sent: Sent) -> usize {
        let mut all = lock(&self.sent);
        all.push(sent);
        all.len() - 1
    }

    pub(crate) fn update(&self, index: usize, change: impl FnOnce(&mut Sent)) {
        if let Some(sent) = lock(&self.sent).get_mut(index) {
            change(sent);
        }
    }

    pub(crate) fn answered_at(&self, key: &str) -> Option<u64> {
        lock(&self.answers).get(key).and_then(|puts| puts.first().copied())
    }

    /// When each PUT of `key` that S3 accepted reached the wire, oldest first.
    pub fn accepted_puts(&self, key: &str) -> Vec<u64> {
        let mut puts = lock(&self.answers).get(key).cloned().unwrap_or_default();
        puts.sort_unstable();
        puts
    }

    /// (sent so far, answered so far)
    pub fn counts(&self) -> (usize, usize) {
        let sent = lock(&self.sent);
        let answers = lock(&self.answers);
        (sent.len(), sent.iter().filter(|s| answers.contains_key(&s.key)).count())
    }
}

/// Follows the PUT proxy's log: the first PUT of each key that S3 accepted is when
/// CloudFormation had its answer (whether or not the sender heard the reply: a reply lost after
/// the PUT applied still delivered it).
pub async fn watch_answers(fleet: Arc<Fleet>, ledger: Arc<Ledger>) {
    /// A forwarded PUT whose upstream status is not known this long after it arrived never got
    /// one (the upstream failed).
    const SETTLED_MS: u64 = 60_000;
    let prefix = format!("/{}/", fleet.environment.file.response_bucket);
    loop {
        // The log is appended when a request arrives and completed when the upstream answers:
        // scan from the oldest entry that may still complete.
        let from = ledger.seen.load(Ordering::SeqCst);
        let new = fleet.put_proxy.log_since(from);
        let now = SystemClock.now_ms();
        let mut settled = from + new.len();
        {
            let mut answers = lock(&ledger.answers);
            for (offset, exchange) in new.iter().enumerate() {
                if exchange.method != "PUT" {
                    continue;
                }
                match exchange.upstream_status {
                    Some(status) if (200..300).contains(&status) => {
                        if let Some(key) = exchange.path.strip_prefix(&prefix) {
                            answers.entry(key.to_owned()).or_default().push(exchange.at_ms);
                        }
                    }
                    Some(_) => {}
                    None => {
                        let forwarded = !matches!(
                            exchange.fault,
                            Some(
                                cfn_once_local::fault_proxy::Fault::Respond { .. }
                                    | cfn_once_local::fault_proxy::Fault::Reset
                                    | cfn_once_local::fault_proxy::Fault::Hang
                            )
                        );
                        if forwarded && now.saturating_sub(exchange.at_ms) < SETTLED_MS {
                            settled = settled.min(from + offset);
                        }
                    }
                }
            }
        }
        ledger.seen.store(settled, Ordering::SeqCst);
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}
