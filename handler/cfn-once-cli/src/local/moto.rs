//! A moto server owned by this process: the local stand-in for AWS.
//!
//! moto speaks the real DynamoDB, SQS, SNS and S3 wire APIs, so the handler runs the same SDK
//! calls as in AWS with only the endpoint changed. The server is started from the project's
//! Python venv on a free loopback port and stops when this process lets go of it (its stdin
//! closes), including when this process dies.

use std::io::{BufRead, BufReader};
use std::path::Path;
use std::process::{Child, ChildStdin, Command, Stdio};
use std::sync::mpsc;
use std::time::Duration;

use anyhow::{Context, bail};

const LAUNCHER: &str = include_str!("moto_server.py");

/// How long moto may take to import and bind; a cold start on a loaded 2-core machine takes a
/// few seconds.
const START_TIMEOUT_S: u64 = 60;

/// A running moto server.
#[derive(Debug)]
pub struct MotoServer {
    endpoint: String,
    child: Child,
    /// Held open for the server's lifetime; dropping it tells the server to exit.
    stdin: Option<ChildStdin>,
}

impl MotoServer {
    /// Starts moto with the interpreter at `python` (the venv `make venv` builds).
    pub fn start(python: &Path) -> anyhow::Result<Self> {
        if !python.exists() {
            bail!("{} does not exist: run `make venv` to create the Python environment with moto", python.display());
        }
        let mut child = Command::new(python)
            .arg("-c")
            .arg(LAUNCHER)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()
            .with_context(|| format!("could not start moto with {}", python.display()))?;
        let stdin = child.stdin.take();
        let stdout = child.stdout.take().context("moto's stdout was not captured")?;
        let (sender, receiver) = mpsc::channel();
        std::thread::spawn(move || {
            let mut line = String::new();
            let read = BufReader::new(stdout).read_line(&mut line);
            let _ = sender.send(read.map(|_| line));
        });
        let endpoint = match receiver.recv_timeout(Duration::from_secs(START_TIMEOUT_S)) {
            Ok(Ok(line)) if line.starts_with("http://") => line.trim().to_owned(),
            Ok(Ok(line)) => {
                let _ = child.kill();
                bail!("moto did not report its endpoint (it printed {line:?}); is moto[server] installed in the venv?");
            }
            Ok(Err(error)) => bail!("could not read moto's endpoint: {error}"),
            Err(_) => {
                let _ = child.kill();
                bail!("moto did not start within {START_TIMEOUT_S} s");
            }
        };
        Ok(Self { endpoint, child, stdin })
    }

    /// The endpoint URL, e.g. `http://127.0.0.1:41234`.
    /// The server's process id (to watch its CPU).
    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    pub fn endpoint(&self) -> &str {
        &self.endpoint
    }
}

impl Drop for MotoServer {
    fn drop(&mut self) {
        drop(self.stdin.take());
        // Give it a moment to exit by itself, then make sure.
        for _ in 0..20 {
            if matches!(self.child.try_wait(), Ok(Some(_))) {
                return;
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}
