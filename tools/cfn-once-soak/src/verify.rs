//! The soak's checks, each from what landed rather than from the harness's bookkeeping:
//!
//! * every version of every response object in the bucket (versioned, so no PUT is lost to an
//!   overwrite): exactly one body per request attempt, byte-identical across its PUTs, the first
//!   one before the request's deadline, with the Status (and Reason) its properties call for;
//! * no PUT for a superseded attempt after its late copy was published;
//! * each `Custom::DynamoDBItem`'s item in the table, against its last answer;
//! * both DLQs: only the messages the harness made undeliverable on purpose;
//! * every lease record: committed and delivered;
//! * the Lambda processes' logs: no ResponseURL signature, no presigned query.

use std::collections::{BTreeMap, HashMap, HashSet};

use anyhow::Context;
use aws_sdk_dynamodb::types::AttributeValue;
use cfn_once_core::lease::LeaseState;
use futures_util::{StreamExt, TryStreamExt, stream};
use serde_json::Value;

use crate::faults::{Injected, fault_seen};
use crate::fleet::Fleet;
use crate::ledger::{Ledger, Sent};
use crate::plan::{Class, Expect, Plan, Step, UNDELIVERABLE_MARK};
use cfn_once_ops::QueueTarget;
use cfn_once_ops::dlq;

/// What landed for one request attempt.
#[derive(Debug, Clone)]
pub struct Outcome {
    /// Index into the ledger.
    pub sent: usize,
    /// Every version S3 kept of the response object: its LastModified (ms, one-second
    /// resolution) and its body.
    pub puts: Vec<(u64, Vec<u8>)>,
    /// When each PUT S3 accepted reached the wire (the PUT proxy, ms), oldest first.
    pub accepted_ms: Vec<u64>,
    /// The region whose handler holds the record (who answered last).
    pub region: Option<String>,
}

impl Outcome {
    /// When the answer landed: the first accepted PUT on the wire, to the millisecond; S3's
    /// LastModified if the wire saw none.
    pub fn first_ms(&self) -> Option<u64> {
        if self.puts.is_empty() {
            return None;
        }
        self.accepted_ms.first().copied().or_else(|| self.puts.first().map(|(at, _)| *at))
    }
}

/// Everything the checks found.
#[derive(Debug, Default)]
pub struct Findings {
    pub outcomes: Vec<Outcome>,
    pub requests: usize,
    pub answered_once: usize,
    pub lost: usize,
    pub conflicting: usize,
    pub late: usize,
    /// Answered, but not as its properties call for.
    pub wrong: usize,
    /// Answered FAILED "the request's deadline" where a fault it met could outlast its
    /// ServiceTimeout: the answer the design gives then (never a hang), counted apart from
    /// `wrong` and, being one correct answer, in `answered_once`.
    pub excused_deadline: usize,
    /// PUTs for a superseded attempt after its late copy.
    pub superseded_answered: usize,
    pub items_checked: usize,
    pub items_wrong: usize,
    /// Per DLQ: (region, distinct undeliverable messages found, copies of them, anything else).
    pub dlqs: Vec<(String, usize, usize, usize)>,
    pub undeliverable_sent: usize,
    pub lease_records: usize,
    pub lease_records_unfinished: usize,
    pub log_lines: usize,
    pub leaked_signatures: usize,
    pub takeovers: usize,
    pub re_puts: usize,
    /// Leases a standby primary took while asking its control and gave back unused.
    pub given_back: usize,
    pub panics_logged: usize,
    /// Receives per message id: (messages, total receives, most receives of one).
    pub receives: (usize, u64, u32),
    /// The first problems, in words.
    pub problems: Vec<String>,
    /// The first excused answers, in words (not problems: listed in the report).
    pub notes: Vec<String>,
}

const PROBLEMS_SHOWN: usize = 40;

impl Findings {
    pub fn passed(&self) -> bool {
        self.lost == 0
            && self.conflicting == 0
            && self.late == 0
            && self.wrong == 0
            && self.superseded_answered == 0
            && self.items_wrong == 0
            && self.dlqs.iter().all(|(_, found, _, other)| *found == self.undeliverable_sent && *other == 0)
            && self.lease_records_unfinished == 0
            && self.leaked_signatures == 0
    }

    fn note(&mut self, text: String) {
        if self.notes.len() < PROBLEMS_SHOWN {
            self.notes.push(text);
        }
    }

    fn problem(&mut self, text: String) {
        if self.problems.len() < PROBLEMS_SHOWN {
            self.problems.push(text);
        }
    }
}

/// Runs every check.
pub async fn verify(fleet: &Fleet, ledger: &Ledger, plan: &Plan, injected: &Injected) -> anyhow::Result<Findings> {
    let mut findings = Findings::default();
    let sent = ledger.sent();
    findings.requests = sent.len();
    findings.undeliverable_sent = ledger.undeliverable.load(std::sync::atomic::Ordering::SeqCst) as usize;
    let landed = landed(fleet).await?;
    let records =
        fleet.lease_store.all_records().await.map_err(|e| anyhow::anyhow!("cannot scan the lease table: {e}"))?;
    let holder: HashMap<(String, String), String> = records
        .iter()
        .map(|r| {
            let region = r.owner.split('/').next().unwrap_or_default().to_owned();
            ((r.key.stack_id.to_string(), r.key.request_id.clone()), region)
        })
        .collect();

    for (index, request) in sent.iter().enumerate() {
        let puts = landed.get(&request.key).cloned().unwrap_or_default();
        let outcome = Outcome {
            sent: index,
            puts,
            accepted_ms: ledger.accepted_puts(&request.key),
            region: holder.get(&(request.stack_id.clone(), request.request_id.clone())).cloned(),
        };
        let excuse = outcome.first_ms().and_then(|at| deadline_excuse(fleet, request, at, injected, ledger.started_ms));
        check_answer(&mut findings, request, &outcome, excuse);
        findings.outcomes.push(outcome);
    }
    check_items(fleet, &sent, &findings.outcomes.clone(), &mut findings).await?;
    check_dlqs(fleet, &mut findings).await?;
    check_records(&records, &mut findings);
    check_logs(fleet, &sent, &mut findings)?;
    let mut receives = (0usize, 0u64, 0u32);
    for region in &fleet.regions {
        let counts = region.mapping.stats.receives.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        for count in counts.values() {
            receives.0 += 1;
            receives.1 += u64::from(*count);
            receives.2 = receives.2.max(*count);
        }
    }
    findings.receives = receives;
    let _ = plan;
    Ok(findings)
}

/// The fault that excuses a FAILED answer at the request's deadline, if there is one: a region
/// outage, a drill or a SIGKILL during the request's life, when its ServiceTimeout is shorter than
/// the longest such a fault can hold a copy (the primary's head start the secondary waits out,
/// the visibility timeout after a killed invocation, a lease, the secondary's delay and the
/// longest provider run: `Fleet::liveness_bound_ms`). Then no
/// region may be able to run the provider in time, and a FAILED before the deadline, saying so, is
/// the designed answer. A request with more time than that gets no excuse.
fn deadline_excuse(
    fleet: &Fleet,
    request: &Sent,
    answered_ms: u64,
    injected: &Injected,
    started_ms: u64,
) -> Option<&'static str> {
    let span_ms = request.deadline_ms.saturating_sub(request.published_ms);
    if span_ms >= fleet.liveness_bound_ms(span_ms) {
        return None;
    }
    let fault = fault_seen(request, answered_ms, injected, started_ms);
    ["primary region down", "drill (secondary active)", "a SIGKILL in the fleet"].contains(&fault).then_some(fault)
}

/// The Reasons the handler gives when a request's deadline comes before its provider can finish.
const DEADLINE_REASONS: [&str; 3] =
    ["did not finish before the request's deadline", "before the request's deadline", "when the request's deadline"];

fn check_answer(findings: &mut Findings, request: &Sent, outcome: &Outcome, excuse: Option<&str>) {
    let what = format!("{} {} of {} ({})", request.kind, request.request_id, request.logical_id, request.class.label());
    let Some(first_ms) = outcome.first_ms() else {
        findings.lost += 1;
        findings.problem(format!("lost: {what}: no PUT landed"));
        return;
    };
    let first = &outcome.puts[0].1;
    if outcome.puts.iter().any(|(_, body)| body != first) {
        findings.conflicting += 1;
        findings.problem(format!("conflicting: {what}: {} PUTs with different bodies", outcome.puts.len()));
        return;
    }
    if first_ms > request.deadline_ms {
        findings.late += 1;
        findings.problem(format!(
            "late: {what}: answered {} ms after its deadline (ServiceTimeout)",
            first_ms - request.deadline_ms
        ));
    }
    if let Some(late_copy_ms) = request.late_copy_ms {
        let after = outcome.accepted_ms.iter().filter(|at| **at >= late_copy_ms).count();
        if after > 0 {
            findings.superseded_answered += 1;
            findings.problem(format!("superseded attempt answered: {what}: {after} PUTs after its late copy"));
        }
    }
    let body: Value = serde_json::from_slice(first).unwrap_or(Value::Null);
    let status = body["Status"].as_str().unwrap_or_default();
    let reason = body["Reason"].as_str().unwrap_or_default();
    let right = body["RequestId"] == request.request_id.as_str()
        && body["StackId"] == request.stack_id.as_str()
        && body["LogicalResourceId"] == request.logical_id.as_str()
        && match &request.expect {
            Expect::Success => status == "SUCCESS",
            Expect::Failed(part) => status == "FAILED" && reason.contains(part.as_str()),
        };
    let excused = !right
        && excuse.is_some()
        && status == "FAILED"
        && body["RequestId"] == request.request_id.as_str()
        && DEADLINE_REASONS.iter().any(|part| reason.contains(part));
    if right {
        findings.answered_once += 1;
    } else if excused {
        findings.answered_once += 1;
        findings.excused_deadline += 1;
        findings.note(format!(
            "answered FAILED at its deadline, excused ({}, ServiceTimeout {} s): {what}: {:?}",
            excuse.unwrap_or_default(),
            request.deadline_ms.saturating_sub(request.published_ms) / 1000,
            reason.chars().take(160).collect::<String>()
        ));
    } else {
        findings.wrong += 1;
        findings.problem(format!(
            "wrong answer: {what}: expected {:?}, got {status} {:?}",
            request.expect,
            reason.chars().take(200).collect::<String>()
        ));
    }
}

/// Every version of every object in the response bucket, by key, oldest first.
async fn landed(fleet: &Fleet) -> anyhow::Result<HashMap<String, Vec<(u64, Vec<u8>)>>> {
    let bucket = &fleet.environment.file.response_bucket;
    let mut versions = Vec::new();
    let (mut key_marker, mut version_marker) = (None, None);
    loop {
        let page = fleet
            .s3
            .list_object_versions()
            .bucket(bucket)
            .set_key_marker(key_marker.clone())
            .set_version_id_marker(version_marker.clone())
            .send()
            .await
            .map_err(|e| anyhow::anyhow!("ListObjectVersions failed: {}", aws_sdk_s3::error::DisplayErrorContext(e)))?;
        for version in page.versions.unwrap_or_default() {
            let at_ms = version.last_modified.and_then(|t| t.to_millis().ok()).unwrap_or_default();
            if let (Some(key), Some(id)) = (version.key, version.version_id) {
                versions.push((key, id, u64::try_from(at_ms).unwrap_or_default()));
            }
        }
        if page.is_truncated != Some(true) {
            break;
        }
        key_marker = page.next_key_marker;
        version_marker = page.next_version_id_marker;
        if key_marker.is_none() {
            break;
        }
    }
    let s3 = &fleet.s3;
    let bodies: Vec<(String, u64, Vec<u8>)> =
        stream::iter(versions)
            .map(|(key, id, at_ms)| async move {
                let object =
                    s3.get_object().bucket(bucket).key(&key).version_id(&id).send().await.map_err(|e| {
                        anyhow::anyhow!("GetObject failed: {}", aws_sdk_s3::error::DisplayErrorContext(e))
                    })?;
                let bytes = object.body.collect().await.context("reading a response body")?.into_bytes().to_vec();
                anyhow::Ok((key, at_ms, bytes))
            })
            .buffer_unordered(16)
            .try_collect()
            .await?;
    let mut by_key: HashMap<String, Vec<(u64, Vec<u8>)>> = HashMap::new();
    for (key, at_ms, body) in bodies {
        by_key.entry(key).or_default().push((at_ms, body));
    }
    for puts in by_key.values_mut() {
        puts.sort_by_key(|(at, _)| *at);
    }
    Ok(by_key)
}

/// Each item resource's item, against the last request it had answered.
async fn check_items(
    fleet: &Fleet,
    sent: &[Sent],
    outcomes: &[Outcome],
    findings: &mut Findings,
) -> anyhow::Result<()> {
    let mut last: BTreeMap<usize, (&Sent, String)> = BTreeMap::new();
    for (request, outcome) in sent.iter().zip(outcomes) {
        if request.class != Class::Item {
            continue;
        }
        let Some((_, body)) = outcome.puts.first() else { continue };
        let body: Value = serde_json::from_slice(body).unwrap_or(Value::Null);
        last.insert(request.resource, (request, body["Status"].as_str().unwrap_or_default().to_owned()));
    }
    for (resource, (request, status)) in last {
        findings.items_checked += 1;
        let key = format!("soak-{}-{resource}", seed_of(request));
        let item = fleet
            .items
            .get_item()
            .table_name(&fleet.environment.item_table)
            .key("pk", AttributeValue::S(key.clone()))
            .consistent_read(true)
            .send()
            .await
            .map_err(|e| anyhow::anyhow!("GetItem failed: {}", aws_sdk_dynamodb::error::DisplayErrorContext(e)))?
            .item;
        let owner = format!("{}/{}", request.stack_id, request.logical_id);
        let string = |name: &str| item.as_ref().and_then(|i| i.get(name)).and_then(|v| v.as_s().ok()).cloned();
        let problem = match (request.step, status.as_str()) {
            // As the application reads it: after a Delete, nothing at all (no tombstone either).
            (Step::Delete, "SUCCESS") => item.as_ref().map(|item| {
                let mut names: Vec<&str> = item.keys().map(String::as_str).collect();
                names.sort_unstable();
                format!("item {key}: deleted, but a plain GetItem still finds an item ({})", names.join(", "))
            }),
            (Step::Create | Step::Update, "SUCCESS") => {
                let value = string("Value");
                let found_owner = string(cfn_once::fenced::OWNER_ATTRIBUTE);
                let deleted = item.as_ref().is_none_or(|i| i.contains_key(cfn_once::fenced::DELETED_ATTRIBUTE));
                (deleted || value != request.item_value || found_owner.as_deref() != Some(owner.as_str())).then(|| {
                    format!(
                        "item {key}: its last answer ({} SUCCESS) set Value {:?}, the table holds {value:?} owned by {found_owner:?}",
                        request.kind, request.item_value
                    )
                })
            }
            _ => None,
        };
        if let Some(problem) = problem {
            findings.items_wrong += 1;
            findings.problem(problem);
        }
    }
    Ok(())
}

fn seed_of(request: &Sent) -> String {
    // Stacks are named soak-{seed}-{n}.
    request.stack_id.split(":stack/soak-").nth(1).and_then(|rest| rest.split('-').next()).unwrap_or_default().to_owned()
}

/// Both DLQs hold the undeliverable messages and nothing else; they are left where they are.
async fn check_dlqs(fleet: &Fleet, findings: &mut Findings) -> anyhow::Result<()> {
    for region in &fleet.regions {
        let target = QueueTarget {
            region: region.name.clone(),
            role: region.role.as_str().to_owned(),
            queue_url: region.queue_url.clone(),
            dlq_url: region.dlq_url.clone(),
        };
        let held = dlq::hold_all(&region.sqs, &target, 10_000).await?;
        // SQS delivers at least once: a copy may be there twice (a handler killed between
        // sending it to the DLQ and deleting it from the queue), but each must be there.
        let copies: Vec<String> = held
            .messages
            .iter()
            .filter(|m| m.body.contains(UNDELIVERABLE_MARK))
            .filter_map(|m| undeliverable_number(&m.body))
            .collect();
        let distinct: HashSet<&String> = copies.iter().collect();
        let other = held.messages.iter().filter(|m| !m.body.contains(UNDELIVERABLE_MARK)).count();
        for message in held.messages.iter().filter(|m| !m.body.contains(UNDELIVERABLE_MARK)).take(5) {
            let what =
                message.identified.as_ref().map_or_else(|| "an unreadable message".to_owned(), |i| format!("{i:?}"));
            findings.problem(format!(
                "DLQ of the {}: {what}, reason {:?}",
                region.role.as_str(),
                message.reason.as_deref().unwrap_or("none given")
            ));
        }
        dlq::release(&region.sqs, &target, &held.messages).await?;
        findings.dlqs.push((region.role.as_str().to_owned(), distinct.len(), copies.len(), other));
    }
    Ok(())
}

/// Which undeliverable message a DLQ body is (the SNS envelope's Message, or the raw body).
fn undeliverable_number(body: &str) -> Option<String> {
    let value: Value = serde_json::from_str(body).ok()?;
    let inner = match value.get("Message").and_then(Value::as_str) {
        Some(message) => serde_json::from_str(message).ok()?,
        None => value,
    };
    inner.get("N").map(Value::to_string)
}

fn check_records(records: &[cfn_once_core::lease::LeaseRecord], findings: &mut Findings) {
    findings.lease_records = records.len();
    for record in records {
        if record.state != LeaseState::Committed || !record.delivered {
            findings.lease_records_unfinished += 1;
            findings.problem(format!(
                "lease record {} of {}: {:?}, delivered {}",
                record.key.request_id, record.key.stack_id, record.state, record.delivered
            ));
        }
    }
}

/// Reads both regions' logs: signatures must be absent; takeovers and re-PUTs are counted.
fn check_logs(fleet: &Fleet, sent: &[Sent], findings: &mut Findings) -> anyhow::Result<()> {
    let signatures: HashSet<&str> = sent.iter().map(|s| s.signature.as_str()).filter(|s| !s.is_empty()).collect();
    for region in &fleet.regions {
        let text = std::fs::read_to_string(&region.log).unwrap_or_default();
        for line in text.lines() {
            findings.log_lines += 1;
            let leaked = line.contains("X-Amz-Signature")
                || line.contains("X-Amz-Credential")
                || hex_runs(line, 64).any(|run| signatures.contains(run));
            if leaked {
                findings.leaked_signatures += 1;
                findings.problem(format!("a ResponseURL signature in the {} log", region.role.as_str()));
            }
            if line.contains("lease acquired") && line.contains("\"took_over\":true") {
                findings.takeovers += 1;
            }
            if line.contains("found a committed answer that was never delivered") {
                findings.re_puts += 1;
            }
            if line.contains("lease given back unused") {
                findings.given_back += 1;
            }
            if line.contains("panicked") {
                findings.panics_logged += 1;
            }
        }
    }
    Ok(())
}

/// Runs of exactly `length` hex digits in `line`.
fn hex_runs(line: &str, length: usize) -> impl Iterator<Item = &str> {
    line.split(|c: char| !c.is_ascii_hexdigit()).filter(move |run| run.len() == length)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sent(expect: Expect) -> Sent {
        Sent {
            resource: 0,
            class: Class::EchoFast,
            step: Step::Create,
            kind: "Create",
            stack_id: "arn:aws:cloudformation:us-east-2:123456789012:stack/soak-1-0/x".into(),
            request_id: "r-1".into(),
            logical_id: "Echo0".into(),
            key: "r/00000/create-1".into(),
            signature: String::new(),
            published_ms: 1_000,
            deadline_ms: 61_000,
            expect,
            copies: 1,
            item_value: None,
            late_copy_ms: None,
        }
    }

    fn body(status: &str, reason: &str) -> Vec<u8> {
        serde_json::json!({
            "Status": status, "Reason": reason, "RequestId": "r-1", "LogicalResourceId": "Echo0",
            "StackId": "arn:aws:cloudformation:us-east-2:123456789012:stack/soak-1-0/x",
        })
        .to_string()
        .into_bytes()
    }

    fn judge(request: &Sent, puts: Vec<(u64, Vec<u8>)>, accepted_ms: Vec<u64>) -> Findings {
        judge_excused(request, puts, accepted_ms, None)
    }

    fn judge_excused(
        request: &Sent,
        puts: Vec<(u64, Vec<u8>)>,
        accepted_ms: Vec<u64>,
        excuse: Option<&str>,
    ) -> Findings {
        let mut findings = Findings::default();
        check_answer(&mut findings, request, &Outcome { sent: 0, puts, accepted_ms, region: None }, excuse);
        findings
    }

    #[test]
    fn each_way_an_answer_can_be_wrong_is_found() {
        let ok = sent(Expect::Success);
        let one = judge(&ok, vec![(2_000, body("SUCCESS", "")), (3_000, body("SUCCESS", ""))], vec![2_100, 3_100]);
        assert_eq!((one.answered_once, one.problems.len()), (1, 0), "{:?}", one.problems);
        assert_eq!(judge(&ok, vec![], vec![]).lost, 1);
        assert_eq!(judge(&ok, vec![(2_000, body("SUCCESS", "")), (3_000, body("FAILED", "x"))], vec![]).conflicting, 1);
        // Late by the wire's millisecond time, though S3's second-resolution time is not.
        assert_eq!(judge(&ok, vec![(61_000, body("SUCCESS", ""))], vec![61_400]).late, 1);
        assert_eq!(judge(&ok, vec![(2_000, body("FAILED", "no"))], vec![2_000]).wrong, 1);
        let failed = sent(Expect::Failed("panicked".into()));
        assert_eq!(judge(&failed, vec![(2_000, body("FAILED", "the provider panicked: x"))], vec![2_000]).wrong, 0);
        assert_eq!(judge(&failed, vec![(2_000, body("FAILED", "something else"))], vec![2_000]).wrong, 1);
        let mut superseded = sent(Expect::Success);
        superseded.late_copy_ms = Some(10_000);
        let answered = vec![(2_000, body("SUCCESS", "")), (12_000, body("SUCCESS", ""))];
        assert_eq!(judge(&superseded, answered.clone(), vec![2_000, 12_000]).superseded_answered, 1);
        assert_eq!(judge(&superseded, answered[..1].to_vec(), vec![2_000]).superseded_answered, 0);
    }

    #[test]
    fn a_deadline_failed_is_excused_only_with_a_fault_and_a_deadline_reason() {
        let ok = sent(Expect::Success);
        let deadline = body("FAILED", "Custom::Echo Create did not finish before the request's deadline, set by …");
        let excused = judge_excused(&ok, vec![(2_000, deadline.clone())], vec![2_000], Some("primary region down"));
        assert_eq!((excused.wrong, excused.excused_deadline, excused.answered_once), (0, 1, 1));
        // Without a fault that could outlast the ServiceTimeout, the same answer is wrong.
        assert_eq!(judge(&ok, vec![(2_000, deadline)], vec![2_000]).wrong, 1);
        // A fault excuses only a deadline's Reason.
        let other = judge_excused(&ok, vec![(2_000, body("FAILED", "no"))], vec![2_000], Some("primary region down"));
        assert_eq!((other.wrong, other.excused_deadline), (1, 0));
        // And never a late one.
        let late = body("FAILED", "no region could run Custom::Echo Create before the request's deadline");
        assert_eq!(judge_excused(&ok, vec![(61_000, late)], vec![61_500], Some("primary region down")).late, 1);
    }

    #[test]
    fn a_signature_is_found_wherever_it_sits_in_a_line() {
        let signature = "a".repeat(64);
        let line = format!("{{\"url\":\"http://x/b/k?X-Amz-Sig={signature}&z=1\"}}");
        assert_eq!(hex_runs(&line, 64).collect::<Vec<_>>(), vec![signature.as_str()]);
        assert_eq!(hex_runs("no hex here, just text", 64).count(), 0);
        // A longer run is not a signature.
        assert_eq!(hex_runs(&"b".repeat(65), 64).count(), 0);
    }
}
