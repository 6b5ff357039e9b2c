//! `cfn-once golden-records`: the lease table's items as one version of the Lambda function
//! wrote them, kept as fixtures (`tests/golden/records/v<format>/`) that today's handler is
//! tested against (`tests/it/golden.rs`).
//!
//! Nothing here writes a record: the items are the version's own, written by its release binary
//! run for real. The generator runs a soak of that binary (`cfn-once soak --binary <binary>
//! --endpoint-url <moto>`, a process of its own: a two-region fleet under load and faults,
//! in-progress providers, failures, drills) and scans the soak's lease table every few hundred
//! milliseconds while it runs, keeping the first item it sees of each [class](class_of). The soak
//! sends no resource with a wait condition, so the generator then runs the same binary as a small
//! fleet of its own ([`crate::soak::fleet::Fleet`]) and sends it a few ([`works`]): a slow work
//! polled to SUCCESS, a failing one, one closed by its resource's Delete, and two (SUCCESS,
//! FAILURE) whose handle answers 503 and then refuses the signal with a 403; and an answer in
//! progress. Records in a state for milliseconds only are held there by a fault on the fleet's
//! wire, as the soak's own faults do: a wait's write is left unanswered once (a poller holding
//! its lease with its poll fields), a signal's PUT answered 503 (committed, undelivered). Items
//! of another format than
//! `--format` are counted and not kept: the soak flips the control item with the generator's own
//! code, which writes today's format whatever binary the fleet runs.
//!
//! Each kept item is written as DynamoDB JSON (what `aws dynamodb get-item` prints; keys
//! sorted) to `<out>/<class>.json`, with `generated.txt` saying how it was made. The directory
//! must not exist: fixtures of a version are generated once and never edited.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use anyhow::Context;
use aws_sdk_dynamodb::primitives::Blob;
use aws_sdk_dynamodb::types::AttributeValue;
use cfn_once::clock::SystemClock;
use cfn_once_core::clock::Clock;
use cfn_once_core::wait_condition::{HANDLE_PROPERTY, TIMEOUT_PROPERTY, WORK_ID_PREFIX};
use serde_json::{Map, Value, json};

use crate::local::environment::PRIMARY_REGION;
use crate::local::fault_proxy::{Fault, Match};
use crate::local::provision;
use crate::soak::fleet::Fleet;

/// A DynamoDB item.
pub type Item = HashMap<String, AttributeValue>;

/// The control item's partition key (`adapters::control_table`).
pub const CONTROL_PK: &str = "control#active";

/// The class of the control item.
pub const CONTROL_CLASS: &str = "control";

/// What `cfn-once golden-records` runs.
#[derive(Debug, Clone, clap::Args)]
pub struct GoldenOptions {
    /// The version's release Lambda binary (`.ci/build-rev <rev>` builds it).
    #[arg(long, value_name = "PATH")]
    pub binary: PathBuf,
    /// The record format the version writes: items of any other format are not kept.
    #[arg(long, value_name = "N")]
    pub format: u32,
    /// Where to write the items (`tests/golden/records/v<format>`); must not exist yet.
    #[arg(long, value_name = "DIR")]
    pub out: PathBuf,
    /// The revision the binary was built from, for generated.txt.
    #[arg(long, value_name = "REV", default_value = "unknown")]
    pub revision: String,
    /// Use the moto server at this URL instead of starting one.
    #[arg(long, value_name = "URL")]
    pub endpoint_url: Option<String>,
    /// The Python interpreter with moto[server] installed (`make venv` creates it).
    #[arg(long, value_name = "PATH", default_value = ".venv/bin/python")]
    pub python: PathBuf,
    /// The soak's seed; its lease table is `soak-<seed>-leases`.
    #[arg(long, value_name = "N", default_value_t = 45)]
    pub seed: u64,
    /// The soak's minutes of load.
    #[arg(long, value_name = "MINUTES", default_value_t = 2.0)]
    pub minutes: f64,
    /// The soak's requests.
    #[arg(long, value_name = "N", default_value_t = 400)]
    pub requests: usize,
    /// How often the lease table is scanned.
    #[arg(long, value_name = "MS", default_value_t = 300)]
    pub interval_ms: u64,
    /// Where the soak and the works' fleet keep their reports and logs.
    #[arg(long, value_name = "DIR", default_value = "target/golden-records")]
    pub work_dir: PathBuf,
}

/// The class of a lease table item, which names its fixture: `control`, or for a request's
/// record `<answer|work>-<state>`, then `-poll` where a state other than WAITING carries poll
/// fields (`-nopoll` where a WAITING one carries none), and for a COMMITTED one the response's
/// `Status` (`success`, `failed`; a work's signal: `success`, `failure`) and `delivered` or
/// `undelivered`, then `-unsent` where the record says why it was never sent.
pub fn class_of(item: &Item) -> String {
    let text = |name: &str| item.get(name).and_then(|value| value.as_s().ok()).map(String::as_str);
    if text("pk") == Some(CONTROL_PK) {
        return CONTROL_CLASS.to_owned();
    }
    let kind = if text("sk").is_some_and(|sk| sk.starts_with(WORK_ID_PREFIX)) { "work" } else { "answer" };
    let state = text("state").unwrap_or("nostate").to_ascii_lowercase();
    let mut class = format!("{kind}-{state}");
    let poll = item.contains_key("poll_fingerprint");
    if state == "waiting" && !poll {
        class.push_str("-nopoll");
    } else if state != "waiting" && poll {
        class.push_str("-poll");
    }
    if state == "committed" {
        let status = item
            .get("response")
            .and_then(|value| value.as_b().ok())
            .and_then(|blob| serde_json::from_slice::<Value>(blob.as_ref()).ok())
            .and_then(|body| body.get("Status").and_then(Value::as_str).map(str::to_ascii_lowercase))
            .unwrap_or_else(|| "nostatus".to_owned());
        let delivered = item.get("delivered").and_then(|value| value.as_bool().ok()).copied().unwrap_or(false);
        class.push_str(&format!("-{status}-{}", if delivered { "delivered" } else { "undelivered" }));
    }
    if item.contains_key("unsent") {
        class.push_str("-unsent");
    }
    class
}

/// The format an item was written in: its `format`, 1 without one (as 47ab05d wrote them).
pub fn format_of(item: &Item) -> u32 {
    item.get("format").and_then(|value| value.as_n().ok()).and_then(|n| n.parse().ok()).unwrap_or(1)
}

/// An item's shape: each attribute's DynamoDB type by name, and `state`'s value, which is part
/// of the format (a new state is a new format).
pub fn shape_of(item: &Item) -> BTreeMap<String, String> {
    item.iter()
        .map(|(name, value)| {
            let mut kind = type_of(value).to_owned();
            if name == "state"
                && let Ok(state) = value.as_s()
            {
                kind = format!("{kind} {state}");
            }
            (name.clone(), kind)
        })
        .collect()
}

/// The DynamoDB type tag of a value.
fn type_of(value: &AttributeValue) -> &'static str {
    match value {
        AttributeValue::S(_) => "S",
        AttributeValue::N(_) => "N",
        AttributeValue::B(_) => "B",
        AttributeValue::Bool(_) => "BOOL",
        AttributeValue::Null(_) => "NULL",
        AttributeValue::Ss(_) => "SS",
        AttributeValue::Ns(_) => "NS",
        AttributeValue::Bs(_) => "BS",
        AttributeValue::L(_) => "L",
        AttributeValue::M(_) => "M",
        _ => "?",
    }
}

/// An item as DynamoDB JSON, attributes in name order.
pub fn item_to_json(item: &Item) -> Value {
    let sorted: BTreeMap<&String, &AttributeValue> = item.iter().collect();
    Value::Object(sorted.into_iter().map(|(name, value)| (name.clone(), value_to_json(value))).collect())
}

fn value_to_json(value: &AttributeValue) -> Value {
    let strings = |values: &[String]| Value::Array(values.iter().cloned().map(Value::String).collect());
    match value {
        AttributeValue::S(text) => json!({"S": text}),
        AttributeValue::N(number) => json!({"N": number}),
        AttributeValue::B(blob) => json!({"B": base64_encode(blob.as_ref())}),
        AttributeValue::Bool(flag) => json!({"BOOL": flag}),
        AttributeValue::Null(flag) => json!({"NULL": flag}),
        AttributeValue::Ss(values) => json!({"SS": strings(values)}),
        AttributeValue::Ns(values) => json!({"NS": strings(values)}),
        AttributeValue::Bs(blobs) => {
            json!({"BS": blobs.iter().map(|blob| base64_encode(blob.as_ref())).collect::<Vec<_>>()})
        }
        AttributeValue::L(values) => json!({"L": values.iter().map(value_to_json).collect::<Vec<_>>()}),
        AttributeValue::M(map) => {
            let sorted: BTreeMap<&String, &AttributeValue> = map.iter().collect();
            json!({"M": Map::from_iter(sorted.into_iter().map(|(k, v)| (k.clone(), value_to_json(v))))})
        }
        _ => Value::Null,
    }
}

/// An item from DynamoDB JSON, as [`item_to_json`] writes it.
pub fn item_from_json(json: &Value) -> Result<Item, String> {
    let object = json.as_object().ok_or("an item is a JSON object")?;
    object
        .iter()
        .map(|(name, value)| Ok((name.clone(), value_from_json(value).map_err(|e| format!("{name}: {e}"))?)))
        .collect()
}

fn value_from_json(json: &Value) -> Result<AttributeValue, String> {
    let object = json.as_object().filter(|o| o.len() == 1).ok_or("a value is an object of one type tag")?;
    let (tag, value) = object.iter().next().ok_or("no type tag")?;
    let text = || value.as_str().map(str::to_owned).ok_or_else(|| format!("{tag} holds a string"));
    let texts = || {
        value
            .as_array()
            .and_then(|values| values.iter().map(|v| v.as_str().map(str::to_owned)).collect::<Option<Vec<_>>>())
            .ok_or_else(|| format!("{tag} holds strings"))
    };
    Ok(match tag.as_str() {
        "S" => AttributeValue::S(text()?),
        "N" => AttributeValue::N(text()?),
        "B" => AttributeValue::B(Blob::new(base64_decode(&text()?)?)),
        "BOOL" => AttributeValue::Bool(value.as_bool().ok_or("BOOL holds a boolean")?),
        "NULL" => AttributeValue::Null(value.as_bool().ok_or("NULL holds a boolean")?),
        "SS" => AttributeValue::Ss(texts()?),
        "NS" => AttributeValue::Ns(texts()?),
        "BS" => AttributeValue::Bs(
            texts()?.iter().map(|text| base64_decode(text).map(Blob::new)).collect::<Result<Vec<_>, _>>()?,
        ),
        "L" => AttributeValue::L(
            value.as_array().ok_or("L holds an array")?.iter().map(value_from_json).collect::<Result<_, _>>()?,
        ),
        "M" => AttributeValue::M(item_from_json(value)?),
        other => return Err(format!("unknown type tag {other}")),
    })
}

/// Standard base64 with padding, as DynamoDB JSON holds binary values (the SDK's own).
pub fn base64_encode(bytes: &[u8]) -> String {
    aws_smithy_types::base64::encode(bytes)
}

/// The inverse of [`base64_encode`].
pub fn base64_decode(text: &str) -> Result<Vec<u8>, String> {
    aws_smithy_types::base64::decode(text).map_err(|error| format!("not base64 ({error}): {text:?}"))
}

/// What the scans found.
#[derive(Debug, Default)]
struct Collected {
    /// The first item of each class, of the expected format.
    kept: BTreeMap<String, Item>,
    /// Items seen per class (the same item counts at every scan that sees it unchanged).
    seen: BTreeMap<String, u64>,
    /// Per class, the shape of the item kept, and how every other shape seen differed from it.
    shapes: BTreeMap<String, (BTreeMap<String, String>, BTreeSet<String>)>,
    /// Items of another format, per (class, format): not kept.
    other_formats: BTreeMap<(String, u32), u64>,
    scans: u64,
}

impl Collected {
    fn add(&mut self, item: Item, format: u32) {
        let class = class_of(&item);
        let item_format = format_of(&item);
        if item_format != format {
            *self.other_formats.entry((class, item_format)).or_default() += 1;
            return;
        }
        *self.seen.entry(class.clone()).or_default() += 1;
        let shape = shape_of(&item);
        let (first, others) = self.shapes.entry(class.clone()).or_insert_with(|| (shape.clone(), BTreeSet::new()));
        if *first != shape {
            let names: BTreeSet<&String> = first.keys().chain(shape.keys()).collect();
            let differences: Vec<String> = names
                .into_iter()
                .filter(|name| first.get(*name) != shape.get(*name))
                .map(|name| match (first.get(name), shape.get(name)) {
                    (Some(_), None) => format!("without {name}"),
                    (None, Some(kind)) => format!("with {name} ({kind})"),
                    (_, kind) => format!("{name} as {}", kind.map_or("", String::as_str)),
                })
                .collect();
            others.insert(differences.join(", "));
        }
        self.kept.entry(class).or_insert(item);
    }
}

type Shared = Arc<Mutex<Collected>>;

fn lock(collected: &Shared) -> std::sync::MutexGuard<'_, Collected> {
    collected.lock().unwrap_or_else(PoisonError::into_inner)
}

/// One consistent scan of `table`, every page; a table not made yet is empty.
async fn scan(client: &aws_sdk_dynamodb::Client, table: &str) -> anyhow::Result<Vec<Item>> {
    let mut items = Vec::new();
    let mut start = None;
    loop {
        let page =
            client.scan().table_name(table).consistent_read(true).set_exclusive_start_key(start.take()).send().await;
        let page = match page {
            Ok(page) => page,
            Err(error) if error.as_service_error().is_some_and(|e| e.is_resource_not_found_exception()) => {
                return Ok(items);
            }
            Err(error) => anyhow::bail!("Scan of {table}: {}", aws_sdk_dynamodb::error::DisplayErrorContext(error)),
        };
        items.extend(page.items.unwrap_or_default());
        match page.last_evaluated_key {
            Some(key) if !key.is_empty() => start = Some(key),
            _ => return Ok(items),
        }
    }
}

/// Scans `table` every `interval` until `stop` fires, then once more.
async fn scan_until(
    client: aws_sdk_dynamodb::Client,
    table: String,
    format: u32,
    interval: Duration,
    collected: Shared,
    mut stop: tokio::sync::oneshot::Receiver<()>,
) {
    loop {
        let stopping = !matches!(stop.try_recv(), Err(tokio::sync::oneshot::error::TryRecvError::Empty));
        match scan(&client, &table).await {
            Ok(items) => {
                let mut collected = lock(&collected);
                collected.scans += 1;
                for item in items {
                    collected.add(item, format);
                }
            }
            Err(error) => eprintln!("golden-records: {error:#}"),
        }
        if stopping {
            return;
        }
        tokio::select! {
            _ = tokio::time::sleep(interval) => {}
            _ = &mut stop => {}
        }
    }
}

/// A scanner of `table` in the background; `finish` stops it after one last scan.
struct Scanner {
    stop: tokio::sync::oneshot::Sender<()>,
    task: tokio::task::JoinHandle<()>,
}

impl Scanner {
    fn start(
        client: &aws_sdk_dynamodb::Client,
        table: &str,
        format: u32,
        interval_ms: u64,
        collected: &Shared,
    ) -> Self {
        let (stop, stopped) = tokio::sync::oneshot::channel();
        let task = tokio::spawn(scan_until(
            client.clone(),
            table.to_owned(),
            format,
            Duration::from_millis(interval_ms),
            Arc::clone(collected),
            stopped,
        ));
        Self { stop, task }
    }

    async fn finish(self) {
        let _ = self.stop.send(());
        let _ = self.task.await;
    }
}

/// Runs the soak while scanning, then the works, and writes the items. `Ok(false)` when nothing
/// was kept.
pub async fn run(options: &GoldenOptions) -> anyhow::Result<bool> {
    if options.out.exists() {
        anyhow::bail!(
            "{} exists: golden records are generated once and never edited; a new format gets a directory of its own",
            options.out.display()
        );
    }
    if !options.binary.exists() {
        anyhow::bail!("{} does not exist: build it with .ci/build-rev <rev>", options.binary.display());
    }
    let started_ms = SystemClock.now_ms();
    let moto_server;
    let endpoint = match &options.endpoint_url {
        Some(url) => url.clone(),
        None => {
            moto_server = crate::local::moto::MotoServer::start(&options.python)?;
            moto_server.endpoint().to_owned()
        }
    };
    let sdk = provision::sdk_config(&endpoint, PRIMARY_REGION).await;
    let client = aws_sdk_dynamodb::Client::new(&sdk);
    let collected: Shared = Arc::default();

    // The soak, as `cfn-once soak` runs it: a process of its own.
    let program = std::env::current_exe().context("where is cfn-once?")?;
    let text = |path: &Path| path.display().to_string();
    let args = vec![
        "soak".to_owned(),
        format!("--seed={}", options.seed),
        format!("--minutes={}", options.minutes),
        format!("--requests={}", options.requests),
        format!("--binary={}", text(&options.binary)),
        format!("--python={}", text(&options.python)),
        format!("--endpoint-url={endpoint}"),
        format!("--out={}", text(&options.work_dir.join("soak"))),
    ];
    let command = format!("cfn-once {}", args.join(" "));
    let table = format!("soak-{}-leases", options.seed);
    println!("golden-records: scanning {table} every {} ms while `{command}` runs", options.interval_ms);
    let mut child = tokio::process::Command::new(&program)
        .args(&args)
        .kill_on_drop(true)
        .spawn()
        .with_context(|| format!("cannot run {}", program.display()))?;
    let scanner = Scanner::start(&client, &table, options.format, options.interval_ms, &collected);
    let status = child.wait().await.context("waiting for the soak")?;
    scanner.finish().await;
    println!("golden-records: the soak ended ({status}); {} classes so far", lock(&collected).kept.len());

    let works = works::run(options, &endpoint, &collected).await.unwrap_or_else(|error| {
        let line = format!("the works did not run: {error:#}");
        eprintln!("golden-records: {line}");
        vec![line]
    });

    let collected = std::mem::take(&mut *lock(&collected));
    let run = Run { started_ms, command, status: status.to_string(), works };
    write(options, &collected, &run)?;
    Ok(!collected.kept.is_empty())
}

/// How the items were made, for generated.txt.
struct Run {
    started_ms: u64,
    command: String,
    status: String,
    works: Vec<String>,
}

/// Writes each kept item and `generated.txt`.
fn write(options: &GoldenOptions, collected: &Collected, run: &Run) -> anyhow::Result<()> {
    let out = &options.out;
    std::fs::create_dir_all(out).with_context(|| format!("cannot create {}", out.display()))?;
    for (class, item) in &collected.kept {
        let path = out.join(format!("{class}.json"));
        std::fs::write(&path, serde_json::to_string_pretty(&item_to_json(item))? + "\n")
            .with_context(|| format!("cannot write {}", path.display()))?;
    }
    let mut text = String::new();
    let line = |text: &mut String, line: String| {
        text.push_str(&line);
        text.push('\n');
    };
    line(&mut text, "Written by `cfn-once golden-records`; never edited by hand.".to_owned());
    line(&mut text, format!("format: {}", options.format));
    line(&mut text, format!("revision: {}", options.revision));
    line(&mut text, format!("started: {}", cfn_once_core::timestamp::format_ms(run.started_ms)));
    line(&mut text, format!("finished: {}", cfn_once_core::timestamp::format_ms(SystemClock.now_ms())));
    let size = std::fs::metadata(&options.binary).map_or_else(|_| "?".to_owned(), |m| m.len().to_string());
    line(&mut text, format!("binary: {} ({size} bytes)", options.binary.display()));
    line(&mut text, format!("soak: {}", run.command));
    line(&mut text, format!("soak's exit: {}", run.status));
    line(&mut text, format!("scans: {}", collected.scans));
    line(&mut text, String::new());
    line(&mut text, "classes kept (times an item of the class was seen, over all scans):".to_owned());
    for (class, count) in &collected.seen {
        line(&mut text, format!("  {class}: {count}"));
        for other in collected.shapes.get(class).into_iter().flat_map(|(_, others)| others) {
            line(&mut text, format!("    also seen in another shape than the one kept: {other}"));
        }
    }
    if !collected.other_formats.is_empty() {
        line(&mut text, String::new());
        line(&mut text, format!("seen in another format than {}, not kept:", options.format));
        for ((class, format), count) in &collected.other_formats {
            line(&mut text, format!("  {class} of format {format}: {count}"));
        }
    }
    line(&mut text, String::new());
    line(&mut text, "works (resources with wait conditions, sent after the soak):".to_owned());
    for work in &run.works {
        line(&mut text, format!("  {work}"));
    }
    let path = out.join("generated.txt");
    std::fs::write(&path, &text).with_context(|| format!("cannot write {}", path.display()))?;
    print!("{text}");
    println!("golden-records: wrote {} items to {}", collected.kept.len(), out.display());
    Ok(())
}

/// The works: the version's binary as a small fleet of the generator's own, sent resources with
/// wait conditions, one after another, each waited for (by scanning) up to a limit.
mod works {
    use super::*;

    /// How long each step is waited for.
    const STEP_LIMIT: Duration = Duration::from_secs(150);
    /// The wait conditions' Timeout.
    const WAIT_TIMEOUT_S: &str = "600";
    /// The seed naming the works' environment (`soak-<seed>`) on the shared moto.
    const SEED: u64 = 45_045;

    /// The soak's options for a fleet of `binary` and nothing else.
    fn fleet_options(options: &GoldenOptions, endpoint: &str) -> anyhow::Result<crate::soak::SoakOptions> {
        #[derive(clap::Parser)]
        struct Parsed {
            #[command(flatten)]
            soak: crate::soak::SoakOptions,
        }
        let text = |path: &Path| path.display().to_string();
        let args = [
            "works".to_owned(),
            format!("--seed={SEED}"),
            format!("--binary={}", text(&options.binary)),
            format!("--python={}", text(&options.python)),
            format!("--endpoint-url={endpoint}"),
            format!("--out={}", text(&options.work_dir.join("works"))),
            "--concurrency=2".to_owned(),
        ];
        Ok(<Parsed as clap::Parser>::try_parse_from(args)?.soak)
    }

    /// One resource of the works' stack.
    struct Resource {
        logical_id: &'static str,
        properties: Value,
        request_id: String,
    }

    struct Works<'a> {
        fleet: &'a Fleet,
        client: aws_sdk_dynamodb::Client,
        table: String,
        stack_id: String,
        notes: Vec<String>,
    }

    impl Works<'_> {
        async fn url(&self, key: &str) -> anyhow::Result<String> {
            let bucket = &self.fleet.environment.file.response_bucket;
            provision::presigned_put_url(&self.fleet.presign, bucket, key, 7200).await
        }

        /// A resource whose properties name a wait condition handle of its own.
        async fn resource(&self, logical_id: &'static str, mut properties: Value) -> anyhow::Result<Resource> {
            let handle = self.url(&format!("golden/handles/{logical_id}")).await?;
            properties[HANDLE_PROPERTY] = json!(handle);
            properties[TIMEOUT_PROPERTY] = json!(WAIT_TIMEOUT_S);
            Ok(Resource { logical_id, properties, request_id: uuid() })
        }

        /// Publishes `kind` of `resource` to the customer region's topic, as CloudFormation does.
        async fn send(&self, kind: &str, resource: &Resource, physical_id: Option<&str>) -> anyhow::Result<String> {
            let file = &self.fleet.environment.file;
            let topic = file.topic_arn.clone();
            let request_id = if kind == "Create" { resource.request_id.clone() } else { uuid() };
            let mut properties = resource.properties.clone();
            properties["ServiceToken"] = json!(topic);
            let mut request = json!({
                "RequestType": kind,
                "ServiceToken": topic,
                "ResponseURL": self.url(&format!("golden/answers/{request_id}")).await?,
                "StackId": self.stack_id,
                "RequestId": request_id,
                "LogicalResourceId": resource.logical_id,
                "ResourceType": "Custom::Echo",
                "ResourceProperties": properties,
            });
            if let Some(id) = physical_id {
                request["PhysicalResourceId"] = json!(id);
            }
            let sns = &self.fleet.sns[&file.customer_region];
            sns.publish()
                .topic_arn(&topic)
                .message(request.to_string())
                .send()
                .await
                .map_err(|e| anyhow::anyhow!("Publish: {}", aws_sdk_sns::error::DisplayErrorContext(e)))?;
            Ok(request_id)
        }

        /// Waits until an item of the works' table satisfies `done`; whether it did in time.
        async fn until(&mut self, what: &str, done: impl Fn(&Item) -> bool) -> bool {
            let started = std::time::Instant::now();
            while started.elapsed() < STEP_LIMIT {
                if let Ok(items) = scan(&self.client, &self.table).await
                    && items.iter().any(&done)
                {
                    self.notes.push(format!("{what}: after {} s", started.elapsed().as_secs()));
                    return true;
                }
                tokio::time::sleep(Duration::from_millis(500)).await;
            }
            self.notes.push(format!("{what}: not within {} s", STEP_LIMIT.as_secs()));
            false
        }
    }

    fn text<'a>(item: &'a Item, name: &str) -> Option<&'a str> {
        item.get(name).and_then(|value| value.as_s().ok()).map(String::as_str)
    }

    /// The work record of `logical_id` (every version labels its records).
    fn work_of(item: &Item, logical_id: &str) -> bool {
        text(item, "sk").is_some_and(|sk| sk.starts_with(WORK_ID_PREFIX))
            && text(item, "logical_id") == Some(logical_id)
    }

    fn state_is(item: &Item, state: &str) -> bool {
        text(item, "state") == Some(state)
    }

    fn delivered(item: &Item) -> bool {
        item.get("delivered").and_then(|value| value.as_bool().ok()).copied().unwrap_or(false)
    }

    /// A fresh UUID-shaped id, as CloudFormation's RequestIds are.
    fn uuid() -> String {
        static NEXT: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
        let n = NEXT.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
        crate::soak::Rng::fork(SystemClock.now_ms(), n).uuid()
    }

    /// Runs the works; what happened, a line per step.
    pub(super) async fn run(
        options: &GoldenOptions,
        endpoint: &str,
        collected: &Shared,
    ) -> anyhow::Result<Vec<String>> {
        println!("golden-records: the works, on a fleet of {} of the generator's own", options.binary.display());
        let fleet = Fleet::start(endpoint, &fleet_options(options, endpoint)?, SEED).await?;
        let table = fleet.environment.file.table_name.clone();
        let client = aws_sdk_dynamodb::Client::new(&provision::sdk_config(endpoint, PRIMARY_REGION).await);
        let scanner = Scanner::start(&client, &table, options.format, options.interval_ms, collected);
        let stack_id = format!(
            "arn:aws:cloudformation:{}:123456789012:stack/golden-works/{}",
            fleet.environment.file.customer_region,
            uuid()
        );
        let mut works = Works { fleet: &fleet, client, table, stack_id, notes: Vec::new() };
        let outcome = play(&mut works).await;
        scanner.finish().await;
        fleet.stop().await;
        let mut notes = works.notes;
        if let Err(error) = outcome {
            notes.push(format!("stopped: {error:#}"));
        }
        Ok(notes)
    }

    /// A write of a provider's work in progress (`LeaseStore::wait`: its update names `:poll_fp`),
    /// held unanswered once on the primary's wire: the poller's lease is held, with the poll
    /// fields, until its client gives up and writes it again (a RUNNING record with its poll,
    /// otherwise there for milliseconds).
    fn hold_the_next_wait(works: &Works<'_>) {
        let wait = Match::OperationWith("UpdateItem".to_owned(), ":poll_fp".to_owned());
        works.fleet.primary().proxy.inject(wait, Fault::Hang, 1);
    }

    /// S3's answers to a handle, on the PUT proxy: 503 three times (the signal is committed and
    /// retried, undelivered), then a 403 (as S3 refuses a handle once it has expired).
    fn refuse_the_next_signal(works: &Works<'_>) {
        let put_proxy = &works.fleet.put_proxy;
        put_proxy.inject(Match::Put, Fault::status(503), 3);
        let denied = concat!(
            r#"<?xml version="1.0" encoding="UTF-8"?>"#,
            "<Error><Code>AccessDenied</Code><Message>Request has expired</Message></Error>"
        );
        let refusal =
            Fault::Respond { status: 403, content_type: "application/xml".to_owned(), body: denied.to_owned() };
        put_proxy.inject(Match::Put, refusal, 1);
    }

    /// Waits for `logical_id`'s work to settle after [`refuse_the_next_signal`]: delivered, or
    /// recorded never sent; a version that cannot record that leaves it undelivered, so that is
    /// not waited for past a short while.
    async fn settle_refused(works: &mut Works<'_>, logical_id: &str) {
        let committed = format!("{logical_id}'s signal committed");
        if !works.until(&committed, |item| work_of(item, logical_id) && state_is(item, "COMMITTED")).await {
            return;
        }
        let started = std::time::Instant::now();
        let mut recorded = None;
        while recorded.is_none() && started.elapsed() < Duration::from_secs(30) {
            tokio::time::sleep(Duration::from_millis(500)).await;
            let items = scan(&works.client, &works.table).await.unwrap_or_default();
            recorded = items.iter().find(|item| work_of(item, logical_id) && delivered(item)).map(class_of);
        }
        works.notes.push(match recorded {
            Some(class) => format!("{logical_id}'s signal then recorded: {class}"),
            None => format!("{logical_id}'s signal: still undelivered after 30 s"),
        });
        works.fleet.put_proxy.clear();
    }

    async fn play(works: &mut Works<'_>) -> anyhow::Result<()> {
        // A slow first run (RUNNING), polled in progress (WAITING; RUNNING with its poll while
        // a wait's write is held) to SUCCESS; and a provider that fails (FAILURE).
        let slow = works
            .resource("SlowWork", json!({"DelayMs": "4000", "InProgressForS": "15", "PollIntervalS": "4"}))
            .await?;
        let failing = works.resource("FailingWork", json!({"FailWith": "golden records: the work fails"})).await?;
        works.send("Create", &slow, None).await?;
        works.send("Create", &failing, None).await?;
        if works.until("SlowWork waiting", |item| work_of(item, "SlowWork") && state_is(item, "WAITING")).await {
            hold_the_next_wait(works);
        }
        works.until("SlowWork's signal delivered", |item| work_of(item, "SlowWork") && delivered(item)).await;
        works.until("FailingWork's signal delivered", |item| work_of(item, "FailingWork") && delivered(item)).await;
        works.fleet.primary().proxy.clear();

        // An answer in progress, polled, its wait's write held as the work's was.
        let polled = Resource {
            logical_id: "PolledAnswer",
            properties: json!({"InProgressForS": "12", "PollIntervalS": "3"}),
            request_id: uuid(),
        };
        let answer_id = works.send("Create", &polled, None).await?;
        let answer = |item: &Item| text(item, "sk") == Some(answer_id.as_str());
        if works.until("PolledAnswer waiting", |item| answer(item) && state_is(item, "WAITING")).await {
            hold_the_next_wait(works);
        }
        works.until("PolledAnswer delivered", |item| answer(item) && delivered(item)).await;
        works.fleet.primary().proxy.clear();

        // A work closed by its resource's Delete while it waits: FAILURE, committed by the close.
        let closed = works
            .resource("ClosedWork", json!({"InProgressForS": "300", "PollIntervalS": "5", "DeleteInProgressForS": "0"}))
            .await?;
        works.send("Create", &closed, None).await?;
        if works.until("ClosedWork waiting", |item| work_of(item, "ClosedWork") && state_is(item, "WAITING")).await {
            let physical_id = format!("{}-golden", closed.logical_id);
            let request_id = works.send("Delete", &closed, Some(&physical_id)).await?;
            works.until("ClosedWork's signal delivered", |item| work_of(item, "ClosedWork") && delivered(item)).await;
            works
                .until("ClosedWork's Delete answered", |item| {
                    text(item, "sk") == Some(request_id.as_str()) && delivered(item)
                })
                .await;
        }

        // Signals, SUCCESS and FAILURE, whose handle answers 503 and then refuses them (each
        // refused once its resource's answer is delivered, so that the answer's PUT is not).
        for (logical_id, properties) in [
            ("RefusedWork", json!({"InProgressForS": "8", "PollIntervalS": "4"})),
            ("RefusedFailingWork", json!({"DelayMs": "5000", "FailWith": "golden records: the work fails"})),
        ] {
            let refused = works.resource(logical_id, properties).await?;
            let answer_id = works.send("Create", &refused, None).await?;
            let answered = format!("{logical_id}'s answer delivered");
            if works.until(&answered, |item| text(item, "sk") == Some(answer_id.as_str()) && delivered(item)).await {
                refuse_the_next_signal(works);
                settle_refused(works, logical_id).await;
            }
        }
        Ok(())
    }
}
