//! Your functions on `make local`: the functions file docs/functions.md shows, a file with a mistake
//! stopping `cfn-once local` before anything starts, a user-style function (its own folder,
//! handler name, variable and requirements.txt) answering a Create through the path `make local`
//! runs (`LocalFunctions` and `RegionPair::start_serving`) and `examples/functions/send.py`, and a
//! slow request not holding back a fast one in the same region.

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::Mutex;
use std::time::{Duration, Instant};

use cfn_once_local::environment::{EnvironmentOptions, LocalEnvironment};
use cfn_once_local::functions::{EXAMPLES_FILE, LocalFunctions};
use cfn_once_local::functions_file::{FunctionsFile, Kind};
use cfn_once_local::pair::{LOCAL_SETTINGS, RegionPair};
use serde_json::Value;

#[test]
fn the_readme_shows_the_examples_functions_file_byte_for_byte_and_it_is_valid() {
    let root = cfn_once_tests::workspace_root();
    let path = root.join(EXAMPLES_FILE);
    let text = std::fs::read_to_string(&path).expect("the examples' functions file");
    // The README's guide "Bring your functions", docs/functions.md, shows the file.
    let guide = std::fs::read_to_string(root.join("docs/functions.md")).expect("docs/functions.md");
    assert!(
        guide.contains(&format!("```yaml\n{text}```\n")),
        "docs/functions.md (\"Bring your functions\") shows {EXAMPLES_FILE} byte for byte, in a yaml block"
    );
    let file = FunctionsFile::parse(&path, &text).unwrap_or_else(|error| panic!("{error}"));
    assert_eq!(
        file.cfn_once_functions(),
        "Custom::Reservation=on-event|is-complete,Custom::Greeting=cfn-response:greeter"
    );
    let greeter = file.functions().find(|f| f.kind == Kind::CfnResponse).expect("the cfn-response function");
    assert_eq!(greeter.environment["GREETING"], "hello");
}

#[test]
fn a_functions_file_with_a_mistake_stops_cfn_once_local_naming_the_line_and_the_problem() {
    let dir = std::env::temp_dir().join(cfn_once_tests::unique("bad-functions"));
    std::fs::create_dir_all(dir.join("thing")).expect("a folder");
    std::fs::write(dir.join("thing/index.py"), "def on_event(event, context):\n    return {}\n").expect("code");
    let file = dir.join("functions.yaml");
    std::fs::write(
        &file,
        "Custom::Thing:\n  on-event:\n    folder: thing\n    handler: index.on_event\n    timout-s: 30\n",
    )
    .expect("the file");
    // A Python that does not exist: had it got as far as starting moto, the error would be that.
    let output = Command::new(cfn_once_binary())
        .args(["local", "--python", "/nonexistent/python", "--env-file"])
        .arg(dir.join("env.json"))
        .arg("--functions")
        .arg(&file)
        .output()
        .expect("cfn-once runs (build it: cargo build --workspace --bins)");
    let stderr = String::from_utf8_lossy(&output.stderr);
    println!("{stderr}");
    assert!(!output.status.success());
    assert!(
        stderr.contains(&format!(
            "{}:5:5: Custom::Thing.on-event: unknown field `timout-s`, expected one of",
            file.display()
        )),
        "{stderr}"
    );
    assert!(!dir.join("env.json").exists(), "nothing started");
}

/// A function as a user has it: its own folder and handler name, a variable, a dependency from
/// requirements.txt (a local wheel, so no index is needed), and its own boto3 calls to AWS.
const USER_FUNCTION: &str = r#"
import os
import boto3
import shoutlib

def create_thing(event, context):
    props = event["ResourceProperties"]
    account = boto3.client("sts").get_caller_identity()["Account"]
    return {
        "PhysicalResourceId": "thing-" + props["Name"],
        "Data": {
            "Shout": shoutlib.shout(os.environ["THING_PREFIX"] + props["Name"]),
            "Account": account,
            "Memory": os.environ["AWS_LAMBDA_FUNCTION_MEMORY_SIZE"],
            "WorkingDir": os.getcwd() == os.environ["LAMBDA_TASK_ROOT"],
        },
    }
"#;

/// Writes a wheel of `shoutlib` (one module) into `dir`, with the project's Python.
fn write_wheel(dir: &Path) -> PathBuf {
    let wheel = dir.join("shoutlib-1.0-py3-none-any.whl");
    let script = r#"
import sys, zipfile
with zipfile.ZipFile(sys.argv[1], "w") as wheel:
    wheel.writestr("shoutlib/__init__.py", "def shout(text):\n    return text.upper() + '!'\n")
    wheel.writestr("shoutlib-1.0.dist-info/METADATA", "Metadata-Version: 2.1\nName: shoutlib\nVersion: 1.0\n")
    wheel.writestr("shoutlib-1.0.dist-info/WHEEL", "Wheel-Version: 1.0\nGenerator: test\nRoot-Is-Purelib: true\nTag: py3-none-any\n")
    wheel.writestr("shoutlib-1.0.dist-info/RECORD", "")
"#;
    let status = Command::new(cfn_once_tests::python()).args(["-c", script]).arg(&wheel).status().expect("python");
    assert!(status.success(), "the wheel is written");
    wheel
}

/// The environment `make local` provisions, serving `file` (with `delay_s` before the
/// secondary acts); its env file written to `env_file`. Returns what keeps it running.
async fn local(
    file: &FunctionsFile,
    delay_s: u32,
    scratch: &Path,
    env_file: &Path,
) -> (LocalEnvironment, LocalFunctions, RegionPair, Vec<String>) {
    let name = cfn_once_tests::unique("local-fns").to_lowercase();
    let options = EnvironmentOptions::local(name.clone(), delay_s);
    let mut env = LocalEnvironment::provision(cfn_once_tests::moto(), cfn_once_tests::moto_front(), &options)
        .await
        .expect("provisioned");
    let progress = Mutex::new(Vec::new());
    let report = |line: &str| progress.lock().expect("the progress").push(line.to_owned());
    let functions = LocalFunctions::start(
        &env,
        &cfn_once_tests::python(),
        file,
        &scratch.join("logs"),
        &scratch.join("build"),
        &name,
        &report,
    )
    .await
    .unwrap_or_else(|error| panic!("the functions start: {error:#}"));
    env.file.answer_buckets = functions.answer_buckets();
    env.file.routes = functions.routes();
    let pair = RegionPair::start_serving(&env, &LOCAL_SETTINGS, |_| None, Some(&functions)).await.expect("handlers");
    env.file.write(env_file).expect("the env file");
    let progress = progress.into_inner().expect("the progress");
    (env, functions, pair, progress)
}

/// `examples/functions/send.py` with `args`, against `env_file`, as docs/functions.md runs it.
fn send(env_file: &Path, args: &[&str]) -> Command {
    let mut command = Command::new(cfn_once_tests::python());
    command
        .arg(cfn_once_tests::workspace_root().join("examples/functions/send.py"))
        .arg("--env")
        .arg(env_file)
        .args(["--timeout-s", "60"])
        .args(args)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    command
}

fn answer(output: &std::process::Output) -> Value {
    assert!(
        output.status.success(),
        "send.py: {}{}",
        String::from_utf8_lossy(&output.stdout),
        String::from_utf8_lossy(&output.stderr)
    );
    serde_json::from_slice(&output.stdout).expect("send.py prints the answer")
}

#[tokio::test]
async fn a_user_function_with_its_own_folder_handler_variable_and_requirements_answers_a_create() {
    let scratch = std::env::temp_dir().join(cfn_once_tests::unique("user-function"));
    let folder = scratch.join("my-resources/thing");
    std::fs::create_dir_all(folder.join("vendor")).expect("the function's folder");
    std::fs::write(folder.join("index.py"), USER_FUNCTION).expect("its code");
    write_wheel(&folder.join("vendor"));
    std::fs::write(folder.join("requirements.txt"), "./vendor/shoutlib-1.0-py3-none-any.whl\n").expect("requirements");
    let functions_yaml = scratch.join("functions.yaml");
    std::fs::write(
        &functions_yaml,
        "Custom::Thing:\n  on-event:\n    folder: my-resources/thing\n    handler: index.create_thing\n    \
         timeout-s: 20\n    memory-mb: 512\n    environment:\n      THING_PREFIX: hey-\n",
    )
    .expect("the functions file");
    let file = FunctionsFile::read(&functions_yaml).unwrap_or_else(|error| panic!("{error}"));
    let env_file = scratch.join("env.json");

    let started = Instant::now();
    let (_env, functions, mut pair, progress) = local(&file, 5, &scratch, &env_file).await;
    println!("started in {:?}: {progress:#?}", started.elapsed());
    assert!(progress.iter().any(|line| line.contains("installing into")), "{progress:?}");
    assert!(!folder.join("shoutlib").exists(), "nothing is installed into the user's folder");

    let sent = Instant::now();
    let output = tokio::task::spawn_blocking({
        let env_file = env_file.clone();
        move || send(&env_file, &["Custom::Thing", r#"{"Name": "ada"}"#]).output().expect("send.py runs")
    })
    .await
    .expect("send.py");
    let answered = answer(&output);
    println!("answered in {:?}: {answered}", sent.elapsed());
    assert_eq!(answered["Status"], "SUCCESS", "{answered}");
    assert_eq!(answered["PhysicalResourceId"], "thing-ada");
    assert_eq!(answered["Data"]["Shout"], "HEY-ADA!", "the variable and the dependency");
    assert_eq!(answered["Data"]["Account"], cfn_once_tests::ACCOUNT, "its own boto3 call reached the local AWS");
    assert_eq!(answered["Data"]["Memory"], "512");
    assert_eq!(answered["Data"]["WorkingDir"], true, "it runs in its build, as in /var/task");
    let env: Value = serde_json::from_str(&std::fs::read_to_string(&env_file).expect("env file")).expect("JSON");
    assert_eq!(env["routes"]["Custom::Thing"]["on-event"], "Thing-on-event");
    assert_eq!(env["answer_buckets"].as_object().map(|buckets| buckets.len()), Some(2));
    pair.stop().await;
    drop(functions);

    // A restart with the same requirements installs nothing.
    let (_env, _functions, mut pair, progress) = local(&file, 5, &scratch, &scratch.join("env2.json")).await;
    assert!(progress.iter().any(|line| line.contains("dependencies unchanged")), "{progress:?}");
    assert!(!progress.iter().any(|line| line.contains("installing into")), "{progress:?}");
    pair.stop().await;
}

#[tokio::test]
async fn a_slow_request_does_not_hold_back_a_fast_one_in_the_same_region() {
    let scratch = std::env::temp_dir().join(cfn_once_tests::unique("slow-and-fast"));
    std::fs::create_dir_all(&scratch).expect("a scratch folder");
    let file = FunctionsFile::read(&cfn_once_tests::workspace_root().join(EXAMPLES_FILE)).expect("the examples");
    let env_file = scratch.join("env.json");
    // The secondary waits 30 s: both are the primary's to answer. The slow one is a
    // Custom::Reservation whose onEvent sleeps; the fast one a Custom::Greeting, answered at once
    // (no isComplete poll to wait for).
    let (_env, functions, mut pair, _) = local(&file, 30, &scratch, &env_file).await;
    let primary = functions.api("us-east-1");

    let slow_s = 10;
    let mut slow = send(&env_file, &["Custom::Reservation", &format!(r#"{{"Name": "slow", "SleepS": "{slow_s}"}}"#)])
        .spawn()
        .expect("send.py");
    let sent = Instant::now();
    while primary.invokes("on-event") == 0 {
        assert!(sent.elapsed() < Duration::from_secs(20), "the slow request never reached its function");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let fast_sent = Instant::now();
    let output = tokio::task::spawn_blocking({
        let env_file = env_file.clone();
        move || send(&env_file, &["Custom::Greeting", r#"{"Name": "fast"}"#]).output().expect("send.py runs")
    })
    .await
    .expect("send.py");
    let fast_took = fast_sent.elapsed();
    let slow_done = slow.try_wait().expect("the slow send.py").is_some();
    let fast = answer(&output);
    println!("fast answered in {fast_took:?} while the slow one ran for {:?}: {fast}", sent.elapsed());
    assert_eq!((fast["Status"].as_str(), fast["Data"]["Greeting"].as_str()), (Some("SUCCESS"), Some("hello, fast")));
    // With one batch at a time the fast request waits for the slow one's whole run (it took
    // 10.56 s so); here it is answered while the slow one's function still sleeps.
    assert!(!slow_done, "the fast request was answered only after the slow one ({fast_took:?})");

    let slow =
        tokio::task::spawn_blocking(move || slow.wait_with_output().expect("the slow send.py")).await.expect("join");
    let slow = answer(&slow);
    assert_eq!((slow["Status"].as_str(), slow["Data"]["StartedIn"].as_str()), (Some("SUCCESS"), Some("us-east-1")));
    pair.stop().await;
}

fn cfn_once_binary() -> PathBuf {
    let test_binary = std::env::current_exe().expect("the test binary's path");
    let profile_dir = test_binary.parent().and_then(|deps| deps.parent()).expect("a target directory");
    profile_dir.join(format!("cfn-once{}", std::env::consts::EXE_SUFFIX))
}
