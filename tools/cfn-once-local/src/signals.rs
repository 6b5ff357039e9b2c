//! Crashing and restoring the primary region of a running `cfn-once local` from another
//! process: how `cfn-once play --kill-primary-after N` stages an outage in the middle of a stack
//! operation, and how a person does with `kill -USR1`.
//!
//! `cfn-once local` records its process id in the env file (`local_pid`) and listens for two
//! signals ([`PrimarySignals`]): SIGUSR1 crashes the primary region's worker (aborted where it
//! is, without waiting for the work in hand: the leases it holds are left to expire and the
//! messages it received are not deleted, so the secondary takes over as in a real outage), and
//! SIGUSR2 starts a fresh primary worker. [`crash_primary`] and [`restore_primary`] send them.
//!
//! The signals are sent with the system's `kill` command, not through a binding to kill(2): the
//! workspace forbids unsafe code, so calling `libc` directly is out, and `nix`, the well-kept
//! binding, is not among the dependencies; a new crate and its build for one system call made
//! twice per drill is not worth it when `kill` is a POSIX utility present wherever these signals
//! exist, and its exit status and message say what went wrong.

use std::future::Future;
use std::path::Path;
use std::process::Command;

use anyhow::{Context, bail};

use crate::environment::EnvFile;
use crate::pair::RegionPair;
use crate::worker::RegionalWorker;

/// What a signal asks of the primary region.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PrimaryRequest {
    /// SIGUSR1: abort the primary's worker, as a crash.
    Crash,
    /// SIGUSR2: start a fresh primary worker.
    Restore,
}

impl PrimaryRequest {
    /// The signal's name, as `kill -s` takes it.
    pub fn signal(self) -> &'static str {
        match self {
            Self::Crash => "USR1",
            Self::Restore => "USR2",
        }
    }
}

/// Crashes the primary region of the `cfn-once local` that wrote `env` (SIGUSR1 to its
/// `local_pid`). Returns once the signal is sent; `cfn-once local` prints a line when it acted.
pub fn crash_primary(env: &EnvFile) -> anyhow::Result<()> {
    send(env, PrimaryRequest::Crash)
}

/// Starts the primary region of the `cfn-once local` that wrote `env` again (SIGUSR2 to its
/// `local_pid`).
pub fn restore_primary(env: &EnvFile) -> anyhow::Result<()> {
    send(env, PrimaryRequest::Restore)
}

fn send(env: &EnvFile, request: PrimaryRequest) -> anyhow::Result<()> {
    let Some(pid) = env.local_pid else {
        bail!(
            "the env file names no cfn-once local process (no local_pid): it was written by an older cfn-once local or by a test harness; start `cfn-once local` again"
        );
    };
    check_is_local(pid)?;
    let output = Command::new("kill")
        .args(["-s", request.signal(), &pid.to_string()])
        .output()
        .context("cannot run `kill` to signal cfn-once local")?;
    if !output.status.success() {
        let said = String::from_utf8_lossy(&output.stderr);
        bail!(
            "cannot send SIG{} to cfn-once local (process {pid}): {}; is it still running?",
            request.signal(),
            said.trim()
        );
    }
    Ok(())
}

/// Refuses a process id that is not a running `cfn-once local`, where the system says (Linux's
/// `/proc`): an env file left behind by a `cfn-once local` that was killed outright names a pid
/// the system may since have given to another process, whose default action on SIGUSR1 is to
/// end.
fn check_is_local(pid: u32) -> anyhow::Result<()> {
    let proc = Path::new("/proc");
    if !proc.join("self").exists() {
        return Ok(());
    }
    let gone = || {
        anyhow::anyhow!(
            "cfn-once local (process {pid}) is not running: the env file is stale; start `cfn-once local` again"
        )
    };
    let command_line = std::fs::read(proc.join(pid.to_string()).join("cmdline")).map_err(|_| gone())?;
    if command_line.is_empty() {
        // A zombie: it has exited, and its parent has not collected it yet.
        return Err(gone());
    }
    let arguments: Vec<&[u8]> = command_line.split(|byte| *byte == 0).collect();
    let program = arguments.first().map(|first| String::from_utf8_lossy(first).into_owned()).unwrap_or_default();
    let is_cfn_once =
        Path::new(&program).file_name().is_some_and(|name| name.to_string_lossy().starts_with("cfn-once"));
    if !is_cfn_once || !arguments.contains(&b"local".as_slice()) {
        bail!(
            "process {pid} is not cfn-once local (it is {program:?}): the env file is stale; start `cfn-once local` again"
        );
    }
    Ok(())
}

/// SIGUSR1 and SIGUSR2, listened for in `cfn-once local`. Listen before the env file (and so
/// the pid) is written: until then, either signal would end the process, its default action.
#[derive(Debug)]
pub struct PrimarySignals {
    #[cfg(unix)]
    crash: tokio::signal::unix::Signal,
    #[cfg(unix)]
    restore: tokio::signal::unix::Signal,
}

impl PrimarySignals {
    /// Starts listening.
    pub fn listen() -> anyhow::Result<Self> {
        #[cfg(unix)]
        {
            use tokio::signal::unix::{SignalKind, signal};
            Ok(Self {
                crash: signal(SignalKind::user_defined1()).context("cannot listen for SIGUSR1")?,
                restore: signal(SignalKind::user_defined2()).context("cannot listen for SIGUSR2")?,
            })
        }
        #[cfg(not(unix))]
        Ok(Self {})
    }

    /// The next request; waits forever where there are no such signals.
    pub async fn next(&mut self) -> PrimaryRequest {
        #[cfg(unix)]
        {
            tokio::select! {
                Some(()) = self.crash.recv() => PrimaryRequest::Crash,
                Some(()) = self.restore.recv() => PrimaryRequest::Restore,
                else => std::future::pending().await,
            }
        }
        #[cfg(not(unix))]
        std::future::pending().await
    }
}

/// Does what `request` asks to `pair`'s primary (in `region`), printing a line: a crash aborts
/// its worker at once; a restore replaces it with the worker `fresh` builds and starts it. A
/// request that is already so (a crash of a crashed primary) only says so, and a restore that
/// fails leaves the primary down and says why: the environment goes on either way.
pub async fn apply<F, Fut>(request: PrimaryRequest, pair: &mut RegionPair, region: &str, fresh: F)
where
    F: FnOnce() -> Fut,
    Fut: Future<Output = anyhow::Result<RegionalWorker>>,
{
    match (request, pair.primary.is_running()) {
        (PrimaryRequest::Crash, true) => {
            pair.primary.kill().await;
            println!("primary {region}: crashed on request (SIGUSR1); the secondary takes over");
        }
        (PrimaryRequest::Crash, false) => println!("primary {region}: already down (SIGUSR1 ignored)"),
        (PrimaryRequest::Restore, false) => match fresh().await {
            Ok(worker) => {
                pair.primary = worker;
                pair.primary.start();
                println!("primary {region}: started again on request (SIGUSR2)");
            }
            Err(error) => println!("primary {region}: could not start again, still down: {error:#}"),
        },
        (PrimaryRequest::Restore, true) => println!("primary {region}: already running (SIGUSR2 ignored)"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn env_file(local_pid: Option<u32>) -> EnvFile {
        let mut file: EnvFile = serde_json::from_value(serde_json::json!({
            "endpoint_url": "http://127.0.0.1:1",
            "https_endpoint_url": "https://127.0.0.1:2",
            "ca_file": "/nonexistent/ca.pem",
            "customer_region": "us-east-2",
            "primary_region": "us-east-1",
            "secondary_region": "us-west-2",
            "topic_arn": "arn:aws:sns:us-east-2:123456789012:t",
            "queues": {"primary": "p", "secondary": "s", "primary_dlq": "pd", "secondary_dlq": "sd"},
            "table_name": "t",
            "response_bucket": "b",
        }))
        .expect("an env file written before local_pid existed still reads");
        file.local_pid = local_pid;
        file
    }

    #[test]
    fn an_env_file_without_a_pid_is_refused_saying_why() {
        let error = format!("{:#}", crash_primary(&env_file(None)).unwrap_err());
        assert!(error.contains("no local_pid") && error.contains("start `cfn-once local` again"), "{error}");
    }

    // Elsewhere than Linux there is no /proc to tell, and the signal would reach this test.
    #[cfg(target_os = "linux")]
    #[test]
    fn a_process_that_is_gone_or_is_not_cfn_once_local_is_refused_and_not_signalled() {
        let mut exited = Command::new("true").spawn().expect("`true` runs");
        let pid = exited.id();
        exited.wait().expect("`true` exits");
        let error = format!("{:#}", restore_primary(&env_file(Some(pid))).unwrap_err());
        assert!(error.contains(&format!("process {pid}")) && error.contains("stale"), "{error}");
        // A live process that is not cfn-once local: this test binary, which SIGUSR1 would end.
        let error = format!("{:#}", crash_primary(&env_file(Some(std::process::id()))).unwrap_err());
        assert!(error.contains("is not cfn-once local"), "{error}");
    }
}
