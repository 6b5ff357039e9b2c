//! The real `cfn-once-lambda` binary, run as Lambda runs it: against a Runtime API (here
//! [`FakeRuntime`]), configured by environment variables, its stdout (the JSON log lines) kept
//! for the test to read.

use std::io::{BufRead, BufReader};
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::sync::{Arc, Mutex};

use crate::fake_runtime::FakeRuntime;

/// A running `cfn-once-lambda` process; killed when dropped.
#[derive(Debug)]
pub struct LambdaProcess {
    child: Child,
    output: Arc<Mutex<Vec<String>>>,
}

impl LambdaProcess {
    /// Starts the binary built beside this test binary (`target/<profile>/cfn-once-lambda`) with only
    /// `env` (plus Lambda's own variables and `PATH`), polling `runtime`.
    pub fn spawn(runtime: &FakeRuntime, env: &[(&str, String)]) -> Self {
        let binary = binary_path();
        assert!(
            binary.exists(),
            "{} is not built: `cargo build --bin cfn-once-lambda` first (`make test` does)",
            binary.display()
        );
        let mut command = Command::new(&binary);
        command.env_clear().env("PATH", std::env::var_os("PATH").unwrap_or_default());
        for (name, value) in [
            ("AWS_LAMBDA_RUNTIME_API", runtime.address().to_owned()),
            ("AWS_LAMBDA_FUNCTION_NAME", "cfn-once".to_owned()),
            ("AWS_LAMBDA_FUNCTION_MEMORY_SIZE", "256".to_owned()),
            ("AWS_LAMBDA_FUNCTION_VERSION", "$LATEST".to_owned()),
        ] {
            command.env(name, value);
        }
        for (name, value) in env {
            command.env(name, value);
        }
        let mut child = command
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap_or_else(|e| panic!("cannot start {}: {e}", binary.display()));
        let output = Arc::new(Mutex::new(Vec::new()));
        for stream in [
            child.stdout.take().map(|s| Box::new(s) as Box<dyn std::io::Read + Send>),
            child.stderr.take().map(|s| Box::new(s) as Box<dyn std::io::Read + Send>),
        ]
        .into_iter()
        .flatten()
        {
            let output = Arc::clone(&output);
            std::thread::spawn(move || {
                for line in BufReader::new(stream).lines().map_while(Result::ok) {
                    output.lock().expect("output lock").push(line);
                }
            });
        }
        Self { child, output }
    }

    /// Every line written to stdout or stderr so far.
    pub fn output(&self) -> Vec<String> {
        self.output.lock().expect("output lock").clone()
    }

    /// Whether the process is still running.
    pub fn is_running(&mut self) -> bool {
        matches!(self.child.try_wait(), Ok(None))
    }
}

impl Drop for LambdaProcess {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// `cfn-once-lambda` in the same target directory as the running test binary.
pub fn binary_path() -> PathBuf {
    let test_binary = std::env::current_exe().expect("the test binary's path");
    // target/<profile>/deps/it-<hash> -> target/<profile>/cfn-once-lambda
    let profile_dir = test_binary.parent().and_then(|deps| deps.parent()).expect("a target directory");
    profile_dir.join(format!("cfn-once-lambda{}", std::env::consts::EXE_SUFFIX))
}
