//! Golden records: the lease table's items as each version of cfn-once wrote them, checked in
//! under `tests/golden/records/v<format>/` (one file per class, `cfn_once_soak::golden::class_of`),
//! generated once from that version's own release binary by `make golden-records` and never
//! edited. Today's handler must
//!
//! * read every one of them, as of its version's format, and decide on it as the table
//!   `tests/golden/records/decisions.json` says (`Seen::of` for four viewers at three or four
//!   times, `decide` for every column of the decision table, far from and near the deadline);
//!   `GOLDEN_BLESS=1` writes that table afresh, to be reviewed as any change;
//! * write over a record of an older format and leave it in its own, with the fields a record
//!   of its own format has;
//! * write records of every class in the shape of the golden records of its own format
//!   (`RECORD_FORMAT`, and `CONTROL_FORMAT` for the control item): a change of shape under an
//!   unchanged format fails here, and is a new format with golden records of its own.

use std::collections::{BTreeMap, BTreeSet};
use std::path::PathBuf;
use std::sync::Arc;

use aws_sdk_dynamodb::types::AttributeValue;
use cfn_once::adapters::control_table::TableControl;
use cfn_once_core::control::CONTROL_FORMAT;
use cfn_once_core::decision::{Action, Activity, Situation, decide};
use cfn_once_core::fingerprint::Fingerprint;
use cfn_once_core::lease::{
    Acquire, AcquireRequest, Conditional, LeaseRecord, LeaseState, LeaseStore, PollRecord, RECORD_FORMAT, RequestLabel,
    Seen, Viewer, left_record,
};
use cfn_once_core::request::{RequestKey, StackArn};
use cfn_once_core::vocabulary::Role;
use cfn_once_core::wait_condition::WORK_ID_PREFIX;
use cfn_once_soak::golden::{CONTROL_CLASS, Item, class_of, format_of, item_from_json, shape_of};
use cfn_once_tests::{LocalRegion, Options, REGION, now_ms, unique, workspace_root};
use serde_json::{Value, json};

use self::informational::{INFORMATIONAL, informational_differences};

mod informational;

/// The situations' numbers: the handler's defaults when the table was first blessed (skew
/// margin, the PUT attempt timeout a fresh commit is given, the secondary's poll lag: the
/// heartbeat jitter and a store call).
const SKEW_MS: u64 = 2_000;
const DELIVERY_GRACE_MS: u64 = 5_000;
const SECONDARY_POLL_LAG_MS: u64 = 8_000;

/// The decision table's columns, in the order each line of `decisions.json` gives them.
const COLUMNS: [(Role, Activity, &str); 4] = [
    (Role::Primary, Activity::Active, "primary active"),
    (Role::Secondary, Activity::Active, "secondary active"),
    (Role::Primary, Activity::Standby, "primary standby"),
    (Role::Secondary, Activity::Standby, "secondary standby"),
];

/// What to do when today's records change shape under an unchanged format.
const RAISE: &str = "the record format changed; raise RECORD_FORMAT (or CONTROL_FORMAT) and generate that \
                     version's golden records with `make golden-records`";

/// Classes today's handler writes that no golden record of its format holds, because no run of
/// the generator produced one: each with the golden class of the same shape by construction it is
/// checked against instead, and why. A class missing from the golden records and from this list
/// fails.
const NOT_GENERATED: &[(&str, &str, &str)] = &[(
    "work-left",
    "answer-left",
    "a work is acquired only by the delivery that has just answered its request, which knows the \
     control's answer by then, so no run left one unused; a LEFT record is the same `leave` of \
     `left_record(key, fence, None, ..)` whatever its key",
)];

fn golden_dir() -> PathBuf {
    workspace_root().join("tests/golden/records")
}

/// One golden item: its version (directory), class (file name) and the item.
struct Golden {
    version: u32,
    class: String,
    /// `v<version>/<class>.json`.
    name: String,
    item: Item,
}

/// Every golden item of every version, in version and class order.
fn golden() -> Vec<Golden> {
    let mut all = Vec::new();
    let entries = std::fs::read_dir(golden_dir()).expect("tests/golden/records");
    for entry in entries {
        let path = entry.expect("a directory entry").path();
        let Some(version) = path
            .file_name()
            .and_then(|name| name.to_str())
            .and_then(|name| name.strip_prefix('v'))
            .and_then(|n| n.parse::<u32>().ok())
        else {
            continue;
        };
        for file in std::fs::read_dir(&path).expect("a version's directory") {
            let file = file.expect("a directory entry").path();
            if file.extension().and_then(|e| e.to_str()) != Some("json") {
                continue;
            }
            let class = file.file_stem().and_then(|s| s.to_str()).expect("a file name").to_owned();
            let text = std::fs::read_to_string(&file).expect("a golden record");
            let json: Value = serde_json::from_str(&text).unwrap_or_else(|e| panic!("{}: {e}", file.display()));
            let item = item_from_json(&json).unwrap_or_else(|e| panic!("{}: {e}", file.display()));
            assert_eq!(class_of(&item), class, "{} holds an item of another class", file.display());
            all.push(Golden { version, name: format!("v{version}/{class}.json"), class, item });
        }
    }
    all.sort_by(|a, b| (a.version, &a.class).cmp(&(b.version, &b.class)));
    assert!(all.iter().any(|g| g.version == 1), "no golden records of format 1");
    assert!(all.iter().any(|g| g.version == RECORD_FORMAT), "no golden records of format {RECORD_FORMAT}");
    all
}

fn text<'a>(item: &'a Item, name: &str) -> &'a str {
    item.get(name).and_then(|v| v.as_s().ok()).map_or("", String::as_str)
}

fn key_of(item: &Item) -> RequestKey {
    RequestKey {
        stack_id: StackArn::parse(text(item, "pk")).expect("a lease record's pk is a stack ARN"),
        request_id: text(item, "sk").to_owned(),
    }
}

async fn put(region: &LocalRegion, item: &Item) {
    region
        .dynamodb
        .put_item()
        .table_name(&region.table)
        .set_item(Some(item.clone()))
        .send()
        .await
        .expect("PutItem of a golden record");
}

async fn stored(region: &LocalRegion, pk: &str, sk: &str) -> Item {
    region
        .dynamodb
        .get_item()
        .table_name(&region.table)
        .key("pk", AttributeValue::S(pk.to_owned()))
        .key("sk", AttributeValue::S(sk.to_owned()))
        .consistent_read(true)
        .send()
        .await
        .expect("GetItem")
        .item
        .expect("the item")
}

fn control(region: &LocalRegion) -> TableControl {
    TableControl::new(cfn_once::app::dynamodb_client(&region.sdk, 5_000, REGION), &region.table, REGION)
}

// ---------------------------------------------------------------------------------------------
// Reading and deciding

/// A response's length and `Status`, instead of its bytes.
fn response(bytes: &[u8]) -> String {
    let status = serde_json::from_slice::<Value>(bytes)
        .ok()
        .and_then(|body| body.get("Status").and_then(Value::as_str).map(str::to_owned))
        .unwrap_or_else(|| "no Status".to_owned());
    format!("{} bytes {status}", bytes.len())
}

fn poll(poll: Option<&PollRecord>) -> String {
    poll.map_or_else(|| "no poll".to_owned(), |poll| format!("poll at {} after {} polls", poll.poll_at_ms, poll.polls))
}

fn seen_text(seen: &Seen) -> String {
    match seen {
        Seen::Absent => "Absent".to_owned(),
        Seen::Held { until_ms } => format!("Held until {until_ms}"),
        Seen::Expired => "Expired".to_owned(),
        Seen::NewAttempt => "NewAttempt".to_owned(),
        Seen::Mine { fence, took_over, interrupted, poll: p } => {
            format!("Mine (fence {fence}, took over {took_over}, interrupted {interrupted}, {})", poll(p.as_ref()))
        }
        Seen::Waiting { poll_at_ms } => format!("Waiting for the poll at {poll_at_ms}"),
        Seen::Committed { fence, response: r, delivered, committed_ms } => {
            format!("Committed (fence {fence}, {}, delivered {delivered}, at {committed_ms})", response(r))
        }
        Seen::Superseded => "Superseded".to_owned(),
    }
}

fn action_text(action: &Action) -> String {
    match action {
        Action::Acquire => "Acquire".to_owned(),
        Action::Run { fence, took_over, interrupted, poll: p } => {
            format!("Run (fence {fence}, took over {took_over}, interrupted {interrupted}, {})", poll(p.as_ref()))
        }
        Action::FailWithoutRunning { fence, took_over, poll: p } => {
            format!("FailWithoutRunning (fence {fence}, took over {took_over}, {})", poll(p.as_ref()))
        }
        Action::Deliver { fence, response: r } => format!("Deliver (fence {fence}, {})", response(r)),
        Action::Drop(why) => format!("Drop ({why:?})"),
        Action::BackOff { until_ms } => format!("BackOff until {until_ms}"),
        Action::AwaitPoll { until_ms } => format!("AwaitPoll until {until_ms}"),
        Action::Leave => "Leave".to_owned(),
    }
}

/// How today's handler sees `record` and what it does, for each viewer and time (just after the
/// record was last written, a moment before its lease ends, past its lease and the skew margin,
/// and past its poll with the secondary's lag where it has one): one line per
/// viewer and time, `seen => far: <the four columns>; near: <the four columns>`.
fn decisions(record: &LeaseRecord) -> BTreeMap<String, String> {
    let another = Fingerprint::from_stored("golden-another-attempt".to_owned());
    let viewers = [
        ("its attempt, its execution", &record.fingerprint, record.sent_ms, record.owner.as_str()),
        ("its attempt, another execution", &record.fingerprint, record.sent_ms, "golden/another-execution"),
        ("another attempt sent later", &another, record.sent_ms.saturating_add(1), "golden/another-execution"),
        ("another attempt sent earlier", &another, record.sent_ms.saturating_sub(1), "golden/another-execution"),
    ];
    let mut times = vec![
        ("just after its last write", record.updated_ms.saturating_add(1)),
        ("inside its lease", record.lease_until_ms.saturating_sub(1)),
        ("after its lease", record.lease_until_ms.saturating_add(SKEW_MS + 1)),
    ];
    if let Some(poll) = &record.poll {
        times.push(("after its poll is due", poll.poll_at_ms.saturating_add(SECONDARY_POLL_LAG_MS + 1)));
    }
    let mut lines = BTreeMap::new();
    for (who, fingerprint, sent_ms, owner) in viewers {
        let viewer = Viewer { fingerprint, sent_ms, owner };
        for (when, now_ms) in &times {
            let seen = Seen::of(Some(record), &viewer, *now_ms, SKEW_MS);
            let columns = |deadline_near: bool| {
                COLUMNS
                    .iter()
                    .map(|(role, activity, _)| {
                        let situation = Situation {
                            role: *role,
                            activity: *activity,
                            deadline_near,
                            now_ms: *now_ms,
                            delivery_grace_ms: DELIVERY_GRACE_MS,
                            poll_lag_ms: if *role == Role::Secondary && !deadline_near {
                                SECONDARY_POLL_LAG_MS
                            } else {
                                0
                            },
                            // The head start is the table's own tests' (`decision.rs`).
                            head_start_until_ms: 0,
                        };
                        action_text(&decide(&seen, &situation))
                    })
                    .collect::<Vec<_>>()
                    .join(", ")
            };
            lines.insert(
                format!("{who}, {when} ({now_ms})"),
                format!("{} => far: {}; near: {}", seen_text(&seen), columns(false), columns(true)),
            );
        }
    }
    lines
}

#[tokio::test]
async fn every_golden_record_is_read_by_today_s_handler_and_decided_as_its_version_decided() {
    let region = LocalRegion::new(Options::default()).await;
    let store = region.lease_store();
    let mut table: BTreeMap<String, BTreeMap<String, String>> = BTreeMap::new();
    for golden in golden() {
        // Records of one version may share a key (one request seen in two states): one at a time.
        put(&region, &golden.item).await;
        if golden.class == CONTROL_CLASS {
            let format = format_of(&golden.item);
            assert!(format <= CONTROL_FORMAT, "{}: a control item of format {format}", golden.name);
            let active = control(&region).active_region().await;
            assert_eq!(active, Ok(Some(text(&golden.item, "active_region").to_owned())), "{}", golden.name);
            continue;
        }
        let record = match store.read(&key_of(&golden.item)).await {
            Ok(Some(record)) => record,
            other => panic!("{}: today's handler reads {other:?}", golden.name),
        };
        assert_eq!(record.format, golden.version, "{}: read as another format", golden.name);
        table.insert(golden.name.clone(), decisions(&record));
    }
    let path = golden_dir().join("decisions.json");
    let document = json!({
        "about": "How today's handler sees each golden record (Seen::of) and what it does (decide), per viewer \
                  and time: `seen => far: <columns>; near: <columns>`, far from and near the deadline. \
                  Written by tests/it/golden/ with GOLDEN_BLESS=1; review every change.",
        "columns": COLUMNS.iter().map(|(_, _, name)| *name).collect::<Vec<_>>(),
        "skew_ms": SKEW_MS,
        "delivery_grace_ms": DELIVERY_GRACE_MS,
        "secondary_poll_lag_ms": SECONDARY_POLL_LAG_MS,
        "records": table,
    });
    if std::env::var_os("GOLDEN_BLESS").is_some() {
        std::fs::write(&path, serde_json::to_string_pretty(&document).expect("JSON") + "\n").expect("decisions.json");
        println!("wrote {}", path.display());
        return;
    }
    let text = std::fs::read_to_string(&path).expect("tests/golden/records/decisions.json (GOLDEN_BLESS=1 writes it)");
    let expected: Value = serde_json::from_str(&text).expect("decisions.json is JSON");
    let mut differences = Vec::new();
    for field in ["columns", "skew_ms", "delivery_grace_ms", "secondary_poll_lag_ms"] {
        if expected[field] != document[field] {
            differences.push(format!("{field}: {} in decisions.json, {} here", expected[field], document[field]));
        }
    }
    let (want, got) = (&expected["records"], &document["records"]);
    let names: BTreeSet<&String> =
        want.as_object().into_iter().flatten().chain(got.as_object().into_iter().flatten()).map(|(k, _)| k).collect();
    for name in names {
        let lines: BTreeSet<&String> = want[name]
            .as_object()
            .into_iter()
            .flatten()
            .chain(got[name].as_object().into_iter().flatten())
            .map(|(k, _)| k)
            .collect();
        for line in lines {
            if want[name][line] != got[name][line] {
                differences.push(format!(
                    "{name}, {line}:\n    decisions.json: {}\n    today:          {}",
                    want[name][line], got[name][line]
                ));
            }
        }
    }
    assert!(
        differences.is_empty(),
        "today's handler decides differently on golden records ({} differences; if intended, run with GOLDEN_BLESS=1 \
         and review decisions.json):\n{}",
        differences.len(),
        differences.join("\n")
    );
}

// ---------------------------------------------------------------------------------------------
// Writing over older formats

/// The golden items of `version`, by class.
fn of_version(all: &[Golden], version: u32) -> BTreeMap<String, Item> {
    all.iter().filter(|g| g.version == version).map(|g| (g.class.clone(), g.item.clone())).collect()
}

/// Differences between two shapes, one line each.
fn shape_differences(want: &Item, got: &Item) -> Vec<String> {
    let (want, got) = (shape_of(want), shape_of(got));
    let names: BTreeSet<&String> = want.keys().chain(got.keys()).collect();
    names
        .into_iter()
        .filter(|name| want.get(*name) != got.get(*name))
        .map(|name| match (want.get(name), got.get(name)) {
            (Some(w), None) => format!("`{name}` ({w}) is no longer written"),
            (None, Some(g))
                if INFORMATIONAL.iter().any(|(informational, kind, _)| informational == name && kind == g) =>
            {
                String::new()
            }
            (None, Some(g)) => format!("`{name}` ({g}) is written, and no golden record has it"),
            (w, g) => format!("`{name}` was {}, is {}", w.map_or("", String::as_str), g.map_or("", String::as_str)),
        })
        .filter(|difference| !difference.is_empty())
        .collect()
}

fn acquire_request(key: &RequestKey, fingerprint: &Fingerprint, sent_ms: u64, now_ms: u64) -> AcquireRequest {
    AcquireRequest {
        key: key.clone(),
        fingerprint: fingerprint.clone(),
        sent_ms,
        owner: unique("us-east-1/golden"),
        now_ms,
        lease_until_ms: now_ms + 30_000,
        skew_ms: SKEW_MS,
        expires_ms: now_ms + 86_400_000,
        poll_lag_ms: 0,
        label: RequestLabel {
            logical_resource_id: "Golden".into(),
            request_type: "Create".into(),
            resource_type: "Custom::Echo".into(),
            replaces: String::new(),
        },
        preempt: false,
    }
}

/// A committed body with this `Status`.
fn body(status: &str) -> Vec<u8> {
    json!({"Status": status, "Reason": "golden", "StackId": "s", "RequestId": "r", "LogicalResourceId": "Golden"})
        .to_string()
        .into_bytes()
}

#[tokio::test]
async fn today_s_handler_writes_over_older_records_and_leaves_them_in_its_own_format() {
    let region = LocalRegion::new(Options::default()).await;
    let store = region.lease_store();
    let all = golden();
    let today = of_version(&all, RECORD_FORMAT);
    let mut failures = Vec::new();
    let mut written = Vec::new();
    for golden in all.iter().filter(|g| g.version < RECORD_FORMAT) {
        put(&region, &golden.item).await;
        let pk = text(&golden.item, "pk").to_owned();
        let sk = text(&golden.item, "sk").to_owned();
        let what = if golden.class == CONTROL_CLASS {
            control(&region).set_active_region("us-west-2", now_ms(), "golden").await.expect("flip an older item");
            "flipped"
        } else {
            let key = key_of(&golden.item);
            let record = store.read(&key).await.expect("read").expect("a record");
            let now = now_ms().max(record.lease_until_ms + SKEW_MS + 1);
            let fresh = Fingerprint::from_stored(unique("golden-new-attempt"));
            let (what, outcome) = match (record.state, record.delivered) {
                // Its holder commits (as one that took it over would, under its own fence).
                (LeaseState::Running, _) => (
                    "committed",
                    store.commit(&key, record.fence, &body("SUCCESS"), now).await.map(|c| c == Conditional::Applied),
                ),
                (LeaseState::Committed, false) => (
                    "marked delivered",
                    store.mark_delivered(&key, record.fence, None, now).await.map(|c| c == Conditional::Applied),
                ),
                // A poll due long ago: its own attempt takes it.
                (LeaseState::Waiting, _) => (
                    "acquired for its poll",
                    store
                        .acquire(&acquire_request(&key, &record.fingerprint, record.sent_ms, now))
                        .await
                        .map(|a| matches!(a, Acquire::Acquired { poll: Some(_), .. })),
                ),
                (LeaseState::Committed, true) | (LeaseState::Left, _) => (
                    "acquired by a new attempt",
                    store
                        .acquire(&acquire_request(&key, &fresh, record.sent_ms + 1, now))
                        .await
                        .map(|a| matches!(a, Acquire::Acquired { .. })),
                ),
            };
            assert_eq!(outcome, Ok(true), "{}: today's handler {what} it", golden.name);
            let read = store.read(&key).await.expect("read").expect("a record");
            assert_eq!(read.format, RECORD_FORMAT, "{}: {what}, it reads as format {}", golden.name, read.format);
            what
        };
        let after = stored(&region, &pk, &sk).await;
        let class = class_of(&after);
        let format = format_of(&after);
        let own = if golden.class == CONTROL_CLASS { CONTROL_FORMAT } else { RECORD_FORMAT };
        if format != own {
            failures.push(format!("{} {what}: left in format {format}, not {own}", golden.name));
        }
        match today.get(&class) {
            Some(want) => {
                for difference in shape_differences(want, &after) {
                    failures.push(format!("{} {what}, now {class}: {difference}", golden.name));
                }
            }
            None => {
                failures.push(format!("{} {what}, now {class}: no golden record of that class to compare", golden.name))
            }
        }
        written.push(format!("{} {what}: now v{format} {class}", golden.name));
    }
    println!("{}", written.join("\n"));
    assert!(!written.is_empty(), "no golden record of an older format");
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}

// ---------------------------------------------------------------------------------------------
// The format check

/// Writes a record of every class the way today's handler does, and keeps each item as written.
struct Writer<'a> {
    region: &'a LocalRegion,
    store: Arc<dyn LeaseStore>,
    /// Every item written, with what wrote it.
    items: Vec<(String, Item)>,
}

impl Writer<'_> {
    async fn keep(&mut self, key: &RequestKey, what: &str) {
        let item = stored(self.region, &key.stack_id.to_string(), &key.request_id).await;
        self.items.push((format!("{} {what}", key.request_id), item));
    }

    fn key(kind: &str) -> RequestKey {
        let request_id = match kind {
            "work" => format!("{WORK_ID_PREFIX}{}", unique("golden")),
            _ => unique("golden-answer"),
        };
        RequestKey {
            stack_id: StackArn::parse("arn:aws:cloudformation:us-east-2:123456789012:stack/golden/guid")
                .expect("an ARN"),
            request_id,
        }
    }

    async fn acquired(&self, request: &AcquireRequest) -> (u64, Option<Box<LeaseRecord>>) {
        match self.store.acquire(request).await.expect("acquire") {
            Acquire::Acquired { fence, prior, .. } => (fence, prior),
            Acquire::Refused(record) => panic!("refused: {record:?}"),
        }
    }

    async fn applied(&self, what: &str, written: Result<Conditional, cfn_once_core::lease::StoreError>) {
        assert_eq!(written, Ok(Conditional::Applied), "{what}");
    }

    /// A request's life through every write of the port: acquire, heartbeat, wait, the poll's
    /// acquire, commit, delivered; a failed one; a close of a run and of a wait; leaves.
    async fn every_class(&mut self, kind: &str) {
        let (success, failed) = if kind == "work" { ("SUCCESS", "FAILURE") } else { ("SUCCESS", "FAILED") };
        let t0 = now_ms();
        let a = Fingerprint::from_stored(unique("golden-a"));

        // Acquire, heartbeat, wait, the poll's acquire, commit, delivered.
        let key = Self::key(kind);
        let (fence, _) = self.acquired(&acquire_request(&key, &a, t0, t0)).await;
        self.keep(&key, "acquired").await;
        self.applied("heartbeat", self.store.heartbeat(&key, fence, t0 + 40_000, t0 + 1).await).await;
        self.keep(&key, "heartbeat").await;
        let poll = PollRecord {
            fingerprint: a.clone(),
            state: r#"{"Polls":0}"#.into(),
            poll_at_ms: t0 + 5,
            waiting_since_ms: t0 + 2,
            polls: 0,
        };
        self.applied("wait", self.store.wait(&key, fence, &poll, t0 + 2).await).await;
        self.keep(&key, "waited").await;
        let (fence, _) = self.acquired(&acquire_request(&key, &a, t0, t0 + 10)).await;
        self.keep(&key, "acquired for its poll").await;
        self.applied("heartbeat", self.store.heartbeat(&key, fence, t0 + 40_000, t0 + 11).await).await;
        self.keep(&key, "heartbeat with its poll").await;
        self.applied("commit", self.store.commit(&key, fence, &body(success), t0 + 12).await).await;
        self.keep(&key, "committed").await;
        self.applied("delivered", self.store.mark_delivered(&key, fence, None, t0 + 13).await).await;
        self.keep(&key, "delivered").await;

        // A new attempt takes it over, is left (the record written back whole), then commits
        // FAILED.
        let b = Fingerprint::from_stored(unique("golden-b"));
        let (fence, prior) = self.acquired(&acquire_request(&key, &b, t0 + 20, t0 + 20)).await;
        self.keep(&key, "acquired by a new attempt").await;
        let left = left_record(&key, fence, prior.as_deref(), t0 + 21, t0 + 86_400_000);
        self.applied("leave", self.store.leave(&left).await).await;
        self.keep(&key, "left, written back as it was").await;
        let (fence, _) = self.acquired(&acquire_request(&key, &b, t0 + 20, t0 + 22)).await;
        self.applied("commit", self.store.commit(&key, fence, &body(failed), t0 + 23).await).await;
        self.keep(&key, "committed FAILED").await;
        self.applied("delivered", self.store.mark_delivered(&key, fence, None, t0 + 24).await).await;
        self.keep(&key, "FAILED delivered").await;

        if kind == "work" {
            // A signal that will never be sent: its handle refused it.
            let key = Self::key(kind);
            let (fence, _) = self.acquired(&acquire_request(&key, &a, t0, t0)).await;
            self.applied("commit", self.store.commit(&key, fence, &body(success), t0 + 1).await).await;
            let why = "not sent: the wait condition handle refused it";
            self.applied("unsent", self.store.mark_delivered(&key, fence, Some(why), t0 + 2).await).await;
            self.keep(&key, "recorded never sent").await;
        }

        // A lease given back unused where there was no record: LEFT.
        let key = Self::key(kind);
        let (fence, prior) = self.acquired(&acquire_request(&key, &a, t0, t0)).await;
        let left = left_record(&key, fence, prior.as_deref(), t0 + 1, t0 + 86_400_000);
        self.applied("leave", self.store.leave(&left).await).await;
        self.keep(&key, "left unused").await;
        // And taken after.
        let (fence, _) = self.acquired(&acquire_request(&key, &a, t0, t0 + 2)).await;
        self.keep(&key, "acquired after a leave").await;
        if kind != "work" {
            return;
        }
        // Only a work is closed, and only its signal can be left unsent. A close of that run: FAILURE committed in the write that takes it; never sent.
        let closer = AcquireRequest {
            preempt: true,
            ..acquire_request(&key, &Fingerprint::from_stored(unique("golden-close")), t0 + 3, t0 + 3)
        };
        let closed = match self.store.close(&closer, &body(failed)).await.expect("close") {
            Acquire::Acquired { fence: closed, .. } => closed,
            Acquire::Refused(record) => panic!("close refused: {record:?}"),
        };
        assert!(closed > fence);
        self.keep(&key, "closed while running").await;
        let why = "not sent: the wait condition handle refused it";
        self.applied("unsent", self.store.mark_delivered(&key, closed, Some(why), t0 + 4).await).await;
        self.keep(&key, "recorded never sent").await;

        // A close of a wait.
        let key = Self::key(kind);
        let (fence, _) = self.acquired(&acquire_request(&key, &a, t0, t0)).await;
        let poll = PollRecord { poll_at_ms: t0 + 600_000, ..poll };
        self.applied("wait", self.store.wait(&key, fence, &poll, t0 + 1).await).await;
        let closer = AcquireRequest {
            preempt: true,
            ..acquire_request(&key, &Fingerprint::from_stored(unique("golden-close")), t0 + 2, t0 + 2)
        };
        assert!(matches!(self.store.close(&closer, &body(failed)).await, Ok(Acquire::Acquired { .. })));
        self.keep(&key, "closed while waiting").await;
    }
}

#[tokio::test]
async fn today_s_records_have_the_shape_of_the_golden_records_of_their_format() {
    let region = LocalRegion::new(Options::default()).await;
    let store: Arc<dyn LeaseStore> = region.lease_store();
    let mut writer = Writer { region: &region, store, items: Vec::new() };
    writer.every_class("answer").await;
    writer.every_class("work").await;
    control(&region).set_active_region("us-west-2", now_ms(), "golden").await.expect("flip");
    let item = stored(&region, cfn_once_soak::golden::CONTROL_PK, "control").await;
    writer.items.push(("the control item flipped".to_owned(), item));

    let all = golden();
    let golden = of_version(&all, RECORD_FORMAT);
    let stand_ins: BTreeMap<&str, &str> =
        NOT_GENERATED.iter().map(|(class, stand_in, _)| (*class, *stand_in)).collect();
    let mut failures = Vec::new();
    let mut checked = BTreeSet::new();
    let mut stood_in = BTreeSet::new();
    for (what, item) in &writer.items {
        let class = class_of(item);
        let own = if class == CONTROL_CLASS { CONTROL_FORMAT } else { RECORD_FORMAT };
        let format = format_of(item);
        if format != own {
            failures.push(format!("{class} ({what}) is written in format {format}, not {own}"));
        }
        if class != CONTROL_CLASS {
            for difference in informational_differences(item) {
                failures.push(format!("{class} ({what}): {difference}"));
            }
        }
        let stand_in = stand_ins.get(class.as_str()).and_then(|stand_in| golden.get(*stand_in));
        match golden.get(&class).or(stand_in) {
            Some(want) => {
                if format_of(want) != own {
                    failures.push(format!(
                        "{class}: the golden record v{RECORD_FORMAT}/{class}.json is of format {}, today's of {own}",
                        format_of(want)
                    ));
                }
                for difference in shape_differences(want, item) {
                    failures.push(format!("{class} ({what}): {difference}"));
                }
                if golden.contains_key(&class) {
                    checked.insert(class);
                } else {
                    stood_in.insert(class);
                }
            }
            None => failures.push(format!(
                "{class} ({what}): no golden record of format {RECORD_FORMAT} has this class (a new state, or a \
                 field a record of the class never had)"
            )),
        }
    }
    // Today's states and the golden records' are the same set.
    let states = |items: &mut dyn Iterator<Item = &Item>| -> BTreeSet<String> {
        items.map(|item| text(item, "state").to_owned()).filter(|s| !s.is_empty()).collect()
    };
    let today_states = states(&mut writer.items.iter().map(|(_, item)| item));
    let golden_states = states(&mut golden.values());
    if today_states != golden_states {
        failures.push(format!("states written today {today_states:?}, in the golden records {golden_states:?}"));
    }
    let unwritten: Vec<&String> = golden.keys().filter(|class| !checked.contains(*class)).collect();
    println!("checked against v{RECORD_FORMAT}: {checked:?}");
    println!("checked against a stand-in (NOT_GENERATED): {stood_in:?}");
    println!("golden classes this test does not write: {unwritten:?}");
    assert!(failures.is_empty(), "{RAISE}:\n{}", failures.join("\n"));
}
