//! `cfn-once local` as a user runs it: the built binary, started from a folder of their own
//! outside the repository, with neither --functions nor --python, finds the cfn-once checkout's
//! venv, serves the built-in providers and says so, and writes `.local/` in that folder; a
//! Python without moto stops it before anything starts; and another process crashes and
//! restores its primary region through `tools/cfn-once-local/src/signals.rs`, a probe being answered by the
//! secondary in between and by the primary after. `cfn-once play`, run from that folder as a
//! user runs it, plays a template copied there through the running `cfn-once local`, its
//! primary crashed mid-play and restored at the end, and refuses a template it cannot play
//! before sending anything.

use std::collections::BTreeMap;
use std::io::{BufRead, BufReader, Read};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use cfn_once_local::environment::{EnvFile, s3_client};
use cfn_once_local::provision::sdk_config;
use cfn_once_local::signals::{crash_primary, restore_primary};
use cfn_once_ops::drill::{DrillTarget, ProbeResult, probe_once};
use serde_json::Value;

/// How long `cfn-once local` may take to come up: moto's cold start and the provisioning, on a
/// loaded 2-core machine.
const START_TIMEOUT: Duration = Duration::from_secs(180);

/// How long a probe may take to be answered: the secondary's takeover includes its queue's
/// 5 s delay.
const ANSWER_TIMEOUT_MS: u64 = 90_000;

/// How long `cfn-once local` may take to act on a signal and say so.
const SIGNAL_TIMEOUT: Duration = Duration::from_secs(20);

/// How long one `cfn-once play` of examples/play/stack.yaml may take: about 50 s with the
/// primary crashed (each request then waits out the secondary's 5 s queue delay, Backfill's
/// work 6 s more), on a loaded 2-core machine several times that.
const PLAY_TIMEOUT: Duration = Duration::from_secs(300);

/// How long the primary takes at most to answer a request it was sent, so that looking for
/// its answer after this long and finding none means nothing was sent.
const ANSWER_GRACE: Duration = Duration::from_secs(3);

#[test]
fn the_help_says_what_local_serves_without_functions_and_where_python_comes_from() {
    let output = Command::new(cfn_once_binary()).args(["local", "--help"]).output().expect("cfn-once runs");
    let help = String::from_utf8_lossy(&output.stdout).split_whitespace().collect::<Vec<_>>().join(" ");
    println!("{help}");
    assert!(output.status.success());
    assert!(
        help.contains("Without it, only the built-in providers are served: Custom::Echo and Custom::DynamoDBItem"),
        "--functions says what is served without it"
    );
    let order = [
        "$CFN_ONCE_PYTHON",
        ".venv/bin/python in the working directory",
        "the .venv/bin/python of the cfn-once checkout this binary was built in",
        "python3 on the PATH",
    ];
    let places: Vec<Option<usize>> = order.iter().map(|step| help.find(step)).collect();
    assert!(places.iter().all(Option::is_some), "--python names each place it looks: {places:?}");
    assert!(places.is_sorted(), "--python names them in the order it looks: {places:?}");
}

#[test]
fn a_python_without_moto_stops_local_before_anything_starts_naming_it_and_the_fix() {
    let dir = scratch("no-moto");
    // An interpreter that fails to import moto as Python does, named by the variable.
    let fake = dir.join("python-without-moto");
    std::fs::write(&fake, "#!/bin/sh\necho \"ModuleNotFoundError: No module named 'moto'\" >&2\nexit 1\n")
        .expect("the fake interpreter");
    make_executable(&fake);
    let output = Command::new(cfn_once_binary())
        .arg("local")
        .current_dir(&dir)
        .env("CFN_ONCE_PYTHON", &fake)
        .stdin(Stdio::null())
        .output()
        .expect("cfn-once runs");
    let stderr = String::from_utf8_lossy(&output.stderr);
    println!("{stderr}");
    assert!(!output.status.success());
    assert!(stderr.contains(&format!("{} (from CFN_ONCE_PYTHON) cannot import moto", fake.display())), "{stderr}");
    assert!(stderr.contains("No module named 'moto'"), "Python's own words: {stderr}");
    assert!(stderr.contains("run `make venv` in the cfn-once repository, or pass --python / set CFN_ONCE_PYTHON"));
    assert!(!dir.join(".local").exists(), "nothing was started or written");
    let _ = std::fs::remove_dir_all(&dir);
}

#[tokio::test]
async fn local_runs_from_a_folder_outside_the_repository_with_the_built_in_providers_and_the_checkouts_python() {
    let local = Local::start("anywhere");
    let root = std::fs::canonicalize(cfn_once_tests::workspace_root()).expect("the repository");
    assert!(!local.dir.starts_with(&root), "{} is outside the repository", local.dir.display());

    // The checkout the binary was built in: the repository, unless its target directory is
    // elsewhere.
    let binary = std::fs::canonicalize(cfn_once_binary()).expect("the binary");
    let checkout = binary.ancestors().find(|dir| dir.join("tools/cfn-once-dev/Cargo.toml").is_file());
    let venv = checkout.expect("the binary lies in a cfn-once checkout").join(".venv/bin/python");
    local.line_containing(&format!("Python {} (the venv of the cfn-once checkout", venv.display()));
    local.line_containing("built-in providers in each region: Custom::Echo, Custom::DynamoDBItem");
    local.line_containing("no --functions: serving the built-in providers only");
    local.line_containing("environment written to .local/env.json");
    let env = local.env();
    assert_eq!(env.local_pid, Some(local.child.id()), "the env file names the process to signal");
    assert!(env.routes.is_empty() && env.answer_buckets.is_empty(), "no functions are served");
    assert!(
        env.ca_file.starts_with(local.dir.join(".local")),
        "the CA is written beside the env file, in the user's folder: {}",
        env.ca_file.display()
    );

    let probe = probe(&env, "a Custom::Echo from a folder of the user's", &env.primary_region).await;
    assert!(probe.passed, "answered once, SUCCESS, by the primary: {probe:?}");
}

#[tokio::test]
async fn another_process_crashes_the_primary_of_a_running_local_and_starts_it_again() {
    let mut local = Local::start("crash");
    let env = local.env();
    let (primary, secondary) = (env.primary_region.clone(), env.secondary_region.clone());

    let before = probe(&env, "before the crash", &primary).await;
    assert!(before.passed, "the primary answers while it runs: {before:?}");

    crash_primary(&env).expect("SIGUSR1 sent");
    local.wait_for(&format!("primary {primary}: crashed on request (SIGUSR1); the secondary takes over"));
    let during = probe(&env, "with the primary crashed", &secondary).await;
    assert!(during.passed, "the secondary answers, once, while the primary is down: {during:?}");

    restore_primary(&env).expect("SIGUSR2 sent");
    local.wait_for(&format!("primary {primary}: started again on request (SIGUSR2)"));
    let after = probe(&env, "after the restore", &primary).await;
    assert!(after.passed, "the primary answers again: {after:?}");
    assert!(local.is_running(), "signals crash a region, never the process");
}

#[tokio::test]
async fn play_runs_a_template_from_the_users_folder_and_survives_a_crash_of_the_primary() {
    let local = Local::start("play");
    let env = local.env();
    let (primary, secondary) = (env.primary_region.clone(), env.secondary_region.clone());
    let example = cfn_once_tests::workspace_root().join("examples/play/stack.yaml");
    std::fs::copy(&example, local.dir.join("stack.yaml")).expect("the example copied to the user's folder");

    let played = play(&local.dir, &["stack.yaml", "--kill-primary-after", "2", "--json"]);
    assert!(played.success, "cfn-once play failed:\n{}", played.stderr);
    let report: Value = serde_json::from_str(&played.stdout)
        .unwrap_or_else(|error| panic!("--json prints the report as JSON ({error}):\n{}", played.stdout));
    for line in played.stdout.lines().chain(played.stderr.lines()) {
        assert!(!line.contains("X-Amz-Signature"), "a presigned URL in the JSON report: {line}");
    }
    let stack_name = report["stack_name"].as_str().expect("stack_name");
    let statuses: Vec<&str> = report["steps"].as_array().expect("steps").iter().map(|s| text(&s["status"])).collect();
    assert_eq!(statuses, ["CREATE_COMPLETE", "DELETE_COMPLETE"]);
    assert_eq!(report["passed"], true);
    let answers = answers_in_order(&report);
    let requests: Vec<String> = answers.iter().map(|r| describe(r)).collect();
    println!("answers, in order:\n  {}", requests.join("\n  "));
    assert_eq!(answers.len(), 8, "four custom resources, each created and deleted: {requests:#?}");
    for (index, record) in answers.iter().enumerate() {
        assert_eq!(record["puts"], 1, "each request answered once: {}", describe(record));
        let by = text(&record["answered_by"]["region"]);
        if index < 2 {
            assert_eq!(by, primary, "before the crash the primary answers: {}", describe(record));
        } else {
            assert_eq!(by, secondary, "the primary is down: the secondary answers: {}", describe(record));
        }
    }
    let deletes = answers.iter().filter(|r| r["request"]["RequestType"] == "Delete").count();
    assert_eq!(deletes, 4, "every custom resource deleted, by the secondary: {requests:#?}");
    let faults: Vec<(&str, u64)> = report["faults"]
        .as_array()
        .expect("faults")
        .iter()
        .map(|f| {
            assert!(f.get("error").is_none(), "every fault was injected: {f}");
            (text(&f["fault"]), f["after_answers"].as_u64().expect("after_answers"))
        })
        .collect();
    assert!(
        matches!(faults.as_slice(), [(crash, 2), (restore, 8)] if crash.contains("crashed") && restore.contains("restored")),
        "crashed after the 2nd answer, restored after the last (the 8th): {faults:?}"
    );

    local.wait_for(&format!("primary {primary}: crashed on request (SIGUSR1); the secondary takes over"));
    local.wait_for(&format!("primary {primary}: started again on request (SIGUSR2)"));
    let answered = response_keys(&env, &format!("play/{stack_name}/")).await;
    assert!(!answered.is_empty(), "the answers are in the env's response bucket, where play reads them");

    // The same stack in text, the primary serving again: the events as they happen, the
    // requests per resource, and never a presigned URL (the wait condition handle's).
    let played = play(&local.dir, &["stack.yaml"]);
    assert!(played.success, "cfn-once play failed:\n{}", played.stderr);
    let lines: Vec<&str> = played.stdout.lines().collect();
    assert!(
        lines.iter().any(|l| l.starts_with("Timestamp") && l.contains("Logical ID")),
        "the events' heading:\n{}",
        played.stdout
    );
    let network_created = |l: &&str| {
        let words: Vec<&str> = l.split_whitespace().collect();
        words.get(1..4) == Some(&["Network", "Custom::Echo", "CREATE_COMPLETE"][..])
    };
    assert!(lines.iter().any(network_created), "Network's CREATE_COMPLETE event:\n{}", played.stdout);
    assert!(lines.contains(&"requests, per resource, in order:"), "the summary:\n{}", played.stdout);
    for line in played.stdout.lines().chain(played.stderr.lines()) {
        assert!(!line.contains("X-Amz-Signature"), "a presigned URL printed: {line}");
    }
}

#[tokio::test]
async fn play_refuses_a_template_it_cannot_play_before_sending_anything() {
    let local = Local::start("play-refused");
    let env = local.env();
    let template = "\
AWSTemplateFormatVersion: \"2010-09-09\"
Parameters:
  ServiceToken:
    Type: String
Resources:
  Zones:
    Type: Custom::Echo
    Properties:
      ServiceToken: !Ref ServiceToken
      Zones: !Length [a, b]
";
    std::fs::write(local.dir.join("bad.yaml"), template).expect("the template");
    let line = template.lines().position(|l| l.contains("!Length")).expect("the Length line") + 1;

    let played = play(&local.dir, &["bad.yaml"]);
    assert!(!played.success, "a template play cannot play is refused:\n{}", played.stdout);
    assert!(played.stderr.contains(&format!("bad.yaml:{line}:")), "the file and line named: {}", played.stderr);
    assert!(played.stderr.contains("Fn::Length"), "the construct named: {}", played.stderr);
    assert!(played.stdout.trim().is_empty(), "no stack, no event printed:\n{}", played.stdout);
    // A request sent would be answered by the primary within the grace: none was.
    std::thread::sleep(ANSWER_GRACE);
    assert_eq!(response_keys(&env, "play/").await, Vec::<String>::new(), "no request was answered");
    assert!(!local.printed("Zones"), "no request for Zones reached a handler:\n{}", local.output());
}

/// What a `cfn-once play` run printed, and whether it exited 0.
struct Played {
    success: bool,
    stdout: String,
    stderr: String,
}

/// Runs `cfn-once play ARGS` in `dir` as a user would there, printing what it prints (for
/// `--nocapture`); killed if it outlasts [`PLAY_TIMEOUT`].
fn play(dir: &Path, args: &[&str]) -> Played {
    println!("$ cfn-once play {}", args.join(" "));
    let mut child = Command::new(cfn_once_binary())
        .arg("play")
        .args(args)
        .current_dir(dir)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("cfn-once runs (build it: cargo build --workspace --bins)");
    let (stdout, stderr) = (Arc::new(Mutex::new(Vec::new())), Arc::new(Mutex::new(Vec::new())));
    let readers = [
        echo(child.stdout.take().expect("stdout"), "play", &stdout),
        echo(child.stderr.take().expect("stderr"), "play stderr", &stderr),
    ];
    let started = Instant::now();
    let status = loop {
        if let Some(status) = child.try_wait().expect("the play's status") {
            break status;
        }
        if started.elapsed() > PLAY_TIMEOUT {
            let _ = child.kill();
            let _ = child.wait();
            panic!("cfn-once play {args:?} not done in {PLAY_TIMEOUT:?}");
        }
        std::thread::sleep(Duration::from_millis(100));
    };
    for reader in readers {
        reader.join().expect("the output read");
    }
    let joined = |lines: &Arc<Mutex<Vec<String>>>| lines.lock().expect("lines").join("\n");
    println!("cfn-once play {}: {status} after {:?}", args.join(" "), started.elapsed());
    Played { success: status.success(), stdout: joined(&stdout), stderr: joined(&stderr) }
}

/// The requests of a `--json` report in the order they were answered: each custom resource's
/// next request at each of its `*_COMPLETE` events.
fn answers_in_order(report: &Value) -> Vec<&Value> {
    let mut next: BTreeMap<&str, usize> = BTreeMap::new();
    let mut answers = Vec::new();
    for event in report["events"].as_array().expect("events") {
        let logical_id = text(&event["logical_resource_id"]);
        if !text(&event["resource_type"]).starts_with("Custom::")
            || !text(&event["resource_status"]).ends_with("_COMPLETE")
        {
            continue;
        }
        let index = next.entry(logical_id).or_default();
        let record = report["resources"][logical_id].get(*index);
        answers.push(record.unwrap_or_else(|| panic!("{logical_id}: an event without its request {}", *index + 1)));
        *index += 1;
    }
    answers
}

/// One request of a `--json` report, for a message.
fn describe(record: &Value) -> String {
    format!(
        "{} {} {} -> {} by {} (fence {}), PUT {} times",
        text(&record["request"]["LogicalResourceId"]),
        text(&record["step"]),
        text(&record["request"]["RequestType"]),
        text(&record["outcome"]),
        record["answered_by"]["region"].as_str().unwrap_or("nobody"),
        record["answered_by"]["fence"],
        record["puts"]
    )
}

fn text(value: &Value) -> &str {
    value.as_str().unwrap_or_else(|| panic!("a string: {value}"))
}

/// The keys under `prefix` in the environment's response bucket, where the answers to play's
/// ResponseURLs land.
async fn response_keys(env: &EnvFile, prefix: &str) -> Vec<String> {
    let s3 = s3_client(&sdk_config(&env.endpoint_url, &env.primary_region).await);
    let listed = s3
        .list_objects_v2()
        .bucket(&env.response_bucket)
        .prefix(prefix)
        .send()
        .await
        .unwrap_or_else(|error| panic!("the response bucket listed: {error:#}"));
    listed.contents().iter().filter_map(|object| object.key().map(str::to_owned)).collect()
}

/// Sends a `Custom::Echo` probe through the environment's topic, as CloudFormation sends a
/// request (presigned ResponseURL), and reports who answered.
async fn probe(env: &EnvFile, step: &str, expected_region: &str) -> ProbeResult {
    let target = DrillTarget::from_env_file(env);
    let result = probe_once(&target, ANSWER_TIMEOUT_MS, step, expected_region, |line| println!(".. {step}: {line}"))
        .await
        .unwrap_or_else(|error| panic!("the probe {step:?} could not be sent or read: {error:#}"));
    println!(
        "{step}: answered by {:?} ({:?}, {:?} ms, {} PUTs)",
        result.answered_by, result.status, result.latency_ms, result.puts
    );
    result
}

/// A `cfn-once local` running in a scratch folder of its own, killed and its folder removed when
/// dropped (a failed assertion included), so no moto outlives the test: moto exits when its
/// parent does.
struct Local {
    child: Child,
    dir: PathBuf,
    /// Everything it printed so far, stdout and stderr.
    lines: Arc<Mutex<Vec<String>>>,
}

impl Local {
    /// Starts it as a user would from their own folder: no --functions, no --python, no
    /// CFN_ONCE_PYTHON; waits until it handles requests.
    fn start(name: &str) -> Self {
        let dir = scratch(name);
        let mut child = Command::new(cfn_once_binary())
            .arg("local")
            .current_dir(&dir)
            .env_remove("CFN_ONCE_PYTHON")
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .expect("cfn-once runs (build it: cargo build --workspace --bins)");
        let lines = Arc::new(Mutex::new(Vec::new()));
        let label = format!("local {name}");
        echo(child.stdout.take().expect("stdout"), &label, &lines);
        echo(child.stderr.take().expect("stderr"), &label, &lines);
        let mut local = Self { child, dir, lines };
        let started = Instant::now();
        while !local.printed("handling requests") {
            assert!(local.is_running(), "cfn-once local stopped before it was up:\n{}", local.output());
            assert!(
                started.elapsed() < START_TIMEOUT,
                "cfn-once local not up in {START_TIMEOUT:?}:\n{}",
                local.output()
            );
            std::thread::sleep(Duration::from_millis(100));
        }
        local
    }

    /// The env file it wrote in its folder.
    fn env(&self) -> EnvFile {
        EnvFile::read(&self.dir.join(".local/env.json")).unwrap_or_else(|error| panic!("{error:#}"))
    }

    fn is_running(&mut self) -> bool {
        matches!(self.child.try_wait(), Ok(None))
    }

    fn printed(&self, needle: &str) -> bool {
        self.lines.lock().expect("lines").iter().any(|line| line.contains(needle))
    }

    fn output(&self) -> String {
        self.lines.lock().expect("lines").join("\n")
    }

    /// A line it printed at start-up.
    fn line_containing(&self, needle: &str) {
        assert!(self.printed(needle), "cfn-once local never printed {needle:?}:\n{}", self.output());
    }

    /// Waits for a line it prints on its own (after a signal).
    fn wait_for(&self, needle: &str) {
        let started = Instant::now();
        while !self.printed(needle) {
            assert!(started.elapsed() < SIGNAL_TIMEOUT, "cfn-once local never printed {needle:?}:\n{}", self.output());
            std::thread::sleep(Duration::from_millis(50));
        }
    }
}

impl Drop for Local {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

/// Prints each line `stream` gives (for `--nocapture`) and keeps it in `lines`, until the
/// stream ends: when the returned thread ends.
fn echo(stream: impl Read + Send + 'static, label: &str, lines: &Arc<Mutex<Vec<String>>>) -> JoinHandle<()> {
    let (label, lines) = (label.to_owned(), Arc::clone(lines));
    std::thread::spawn(move || {
        for line in BufReader::new(stream).lines().map_while(Result::ok) {
            println!("[{label}] {line}");
            lines.lock().expect("lines").push(line);
        }
    })
}

/// A fresh folder under the system's temporary directory, outside the repository.
fn scratch(name: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(cfn_once_tests::unique(&format!("local-anywhere-{name}")));
    std::fs::create_dir_all(&dir).expect("a scratch folder");
    std::fs::canonicalize(&dir).expect("the scratch folder's path")
}

fn make_executable(path: &Path) {
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(0o755)).expect("chmod");
}

/// `cfn-once` in the same target directory as this test binary.
fn cfn_once_binary() -> PathBuf {
    let test_binary = std::env::current_exe().expect("the test binary's path");
    let profile_dir = test_binary.parent().and_then(|deps| deps.parent()).expect("a target directory");
    profile_dir.join(format!("cfn-once{}", std::env::consts::EXE_SUFFIX))
}
