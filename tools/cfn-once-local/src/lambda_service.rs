//! A local Lambda service: a function run as AWS Lambda runs it, as real processes under a local
//! Runtime API.
//!
//! Each *sandbox* is one process of the function's command (the `cfn-once-lambda` binary, a
//! Python function under `awslambdaric`, anything that speaks the Runtime API) with a Runtime
//! API of its own on a loopback port (`AWS_LAMBDA_RUNTIME_API`): the process polls
//! `GET /2018-06-01/runtime/invocation/next`, gets one event with its request id and its
//! deadline (`Lambda-Runtime-Deadline-Ms`), and posts the result to `.../response` or
//! `.../error` (or `.../init/error` if it cannot start). As in Lambda:
//!
//! * a sandbox runs one invocation at a time, and at most `concurrency_max` exist at once;
//! * a sandbox is reused while warm and replaced when it dies (a new process: a cold start);
//! * an invocation that runs past the function timeout is killed with its process
//!   ([`Invoked::TimedOut`]); a process that dies mid-invocation fails it
//!   ([`Invoked::Crashed`]);
//! * everything the processes print is kept, line by line, in the function's log file.
//!
//! Faults are the caller's to inject: kill one busy sandbox, kill every sandbox (a region going
//! down), or kill the next one to print a given log line (a crash at a chosen point: after the
//! commit, say). `make soak` runs the stock function this way, and `cfn-once local` runs
//! functions of other runtimes this way (issue: "custom resources you already have").
//!
//! This file keeps the sandboxes (starting, reusing, killing them); each sandbox's Runtime API
//! server is `lambda_service/runtime_api.rs`.

use std::collections::{BTreeMap, VecDeque};
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::time::Duration;

use anyhow::Context;
use cfn_once::system_clock::SystemClock;
use cfn_once_core::clock::Clock;
use tokio::io::{AsyncBufReadExt, BufReader};
use tokio::net::TcpListener;
use tokio::process::Command;
use tokio::sync::{Notify, mpsc, oneshot};

mod runtime_api;

use self::runtime_api::{Assignment, Sandbox};

/// How long a new process may take to ask for its first event (Lambda's init limit is 10 s).
const INIT_MS_MAX: u64 = 10_000;

/// What a function is and how Lambda would run it.
#[derive(Debug, Clone)]
pub struct FunctionSpec {
    /// The function's name, for its ARN and its processes' `AWS_LAMBDA_FUNCTION_NAME`.
    pub name: String,
    /// The AWS region it runs in (`AWS_REGION`).
    pub region: String,
    /// The program each sandbox runs, and its arguments.
    pub command: PathBuf,
    pub args: Vec<String>,
    /// The function's environment (besides Lambda's own variables and `PATH`).
    pub env: BTreeMap<String, String>,
    /// The function timeout.
    pub timeout_ms: u64,
    /// Sandboxes at once (reserved concurrency).
    pub concurrency_max: usize,
    /// The function's memory, which its processes read in `AWS_LAMBDA_FUNCTION_MEMORY_SIZE`
    /// (nothing limits them to it).
    pub memory_mb: u32,
    /// Where its processes start (Lambda starts them in `LAMBDA_TASK_ROOT`); here if none.
    pub working_dir: Option<PathBuf>,
    /// Where every line the processes print is appended, prefixed with the sandbox.
    pub log: PathBuf,
}

impl FunctionSpec {
    /// A Python function: `handler` (`module.function`) of the code in `code`, run by `python`
    /// under the real runtime interface client (`python -m awslambdaric`), with a 30 s timeout,
    /// 256 MB and two sandboxes at once unless the caller changes them.
    pub fn python(name: &str, region: &str, python: &Path, code: &Path, handler: &str, log: PathBuf) -> Self {
        Self {
            name: name.to_owned(),
            region: region.to_owned(),
            command: python.to_path_buf(),
            args: vec!["-m".to_owned(), "awslambdaric".to_owned(), handler.to_owned()],
            env: BTreeMap::from([("PYTHONPATH".to_owned(), code.display().to_string())]),
            timeout_ms: 30_000,
            concurrency_max: 2,
            memory_mb: 256,
            working_dir: None,
            log,
        }
    }
}

/// A log stream's name as Lambda makes one for a sandbox started at `now_ms`:
/// `YYYY/MM/DD/[$LATEST]` and 32 hex digits, here drawn from `seed` and the sandbox's `id`.
fn log_stream_name(now_ms: u64, seed: u64, id: u64) -> String {
    let (year, month, day) = cfn_once_core::timestamp::civil_from_days(now_ms / 86_400_000);
    format!("{year:04}/{month:02}/{day:02}/[$LATEST]{seed:016x}{id:016x}")
}

/// How one invocation ended.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Invoked {
    /// The function posted a response.
    Response(Vec<u8>),
    /// The function posted an error (a handler error, or an init error).
    Error(Vec<u8>),
    /// It ran past the function timeout; its process was killed.
    TimedOut,
    /// Its process died before answering: killed, or it crashed.
    Crashed,
}

/// What the service counted.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, serde::Serialize)]
pub struct FunctionStats {
    pub invocations: u64,
    pub cold_starts: u64,
    pub timed_out: u64,
    pub crashed: u64,
    /// Processes killed on purpose (faults injected).
    pub killed: u64,
}

/// A kill armed on a log line: the next sandbox to print a line containing `pattern` dies.
struct KillOnLine {
    pattern: String,
    left: u32,
    fired: u32,
}

/// A function, run locally.
pub struct LocalFunction {
    spec: FunctionSpec,
    inner: Arc<Inner>,
}

struct Inner {
    idle: Mutex<VecDeque<Arc<Sandbox>>>,
    busy: Mutex<BTreeMap<u64, Arc<Sandbox>>>,
    /// Sandboxes that exist (idle, busy or starting).
    existing: AtomicU64,
    freed: Notify,
    next_id: AtomicU64,
    invocations: AtomicU64,
    stats: Mutex<FunctionStats>,
    triggers: Mutex<Vec<KillOnLine>>,
    log: Mutex<std::fs::File>,
}

impl std::fmt::Debug for LocalFunction {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("LocalFunction").field("name", &self.spec.name).field("stats", &self.stats()).finish()
    }
}

fn lock<T>(mutex: &Mutex<T>) -> MutexGuard<'_, T> {
    mutex.lock().unwrap_or_else(PoisonError::into_inner)
}

impl LocalFunction {
    /// A function ready to be invoked; sandboxes start on demand.
    pub fn new(spec: FunctionSpec) -> anyhow::Result<Self> {
        let log = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(&spec.log)
            .with_context(|| format!("cannot open the function's log {}", spec.log.display()))?;
        let inner = Arc::new(Inner {
            idle: Mutex::default(),
            busy: Mutex::default(),
            existing: AtomicU64::new(0),
            freed: Notify::new(),
            next_id: AtomicU64::new(0),
            invocations: AtomicU64::new(0),
            stats: Mutex::default(),
            triggers: Mutex::default(),
            log: Mutex::new(log),
        });
        Ok(Self { spec, inner })
    }

    /// The function's spec.
    pub fn spec(&self) -> &FunctionSpec {
        &self.spec
    }

    /// What happened so far.
    pub fn stats(&self) -> FunctionStats {
        *lock(&self.inner.stats)
    }

    /// Runs one invocation with `payload` in a warm sandbox, or a new one, waiting for one to be
    /// free when `concurrency_max` are busy.
    pub async fn invoke(&self, payload: Vec<u8>) -> Invoked {
        let sandbox = match self.acquire().await {
            Ok(sandbox) => sandbox,
            Err(error) => {
                self.log_line(0, &format!("cannot start a sandbox: {error:#}"));
                return Invoked::Crashed;
            }
        };
        let invocation = self.inner.invocations.fetch_add(1, Ordering::SeqCst) + 1;
        lock(&self.inner.stats).invocations += 1;
        let request_id = format!("{}-{invocation:08}", self.spec.name);
        let deadline_ms = SystemClock.now_ms() + self.spec.timeout_ms;
        let (done, outcome) = oneshot::channel();
        *lock(&sandbox.in_flight) = Some(done);
        lock(&self.inner.busy).insert(sandbox.id, Arc::clone(&sandbox));
        if sandbox.assign.send(Assignment { request_id, payload, deadline_ms }).await.is_err() {
            sandbox.finish(Invoked::Crashed);
        }
        // The invocation is the function's until its timeout (and a moment for the answer to
        // arrive); past it, Lambda kills the sandbox.
        let outcome = match tokio::time::timeout(Duration::from_millis(self.spec.timeout_ms + 200), outcome).await {
            Ok(Ok(outcome)) => outcome,
            Ok(Err(_)) => Invoked::Crashed,
            Err(_) => {
                sandbox.kill();
                Invoked::TimedOut
            }
        };
        lock(&self.inner.busy).remove(&sandbox.id);
        match &outcome {
            Invoked::TimedOut => lock(&self.inner.stats).timed_out += 1,
            Invoked::Crashed => lock(&self.inner.stats).crashed += 1,
            _ => {}
        }
        if sandbox.is_alive() && matches!(outcome, Invoked::Response(_) | Invoked::Error(_)) {
            lock(&self.inner.idle).push_back(sandbox);
        }
        self.inner.freed.notify_one();
        outcome
    }

    /// Kills one busy sandbox, chosen by `pick` among the busy ones (by index); false if none was
    /// busy.
    pub fn kill_busy(&self, pick: impl FnOnce(usize) -> usize) -> bool {
        let busy: Vec<Arc<Sandbox>> = lock(&self.inner.busy).values().cloned().collect();
        if busy.is_empty() {
            return false;
        }
        let chosen = &busy[pick(busy.len()) % busy.len()];
        self.killed(chosen)
    }

    /// Kills every sandbox, busy or idle (the region goes down); returns how many.
    pub fn kill_all(&self) -> usize {
        let mut all: Vec<Arc<Sandbox>> = lock(&self.inner.busy).values().cloned().collect();
        all.extend(lock(&self.inner.idle).drain(..));
        all.iter().filter(|sandbox| self.killed(sandbox)).count()
    }

    /// The next `times` sandboxes to print a line containing `pattern` are killed then.
    pub fn kill_on_line(&self, pattern: &str, times: u32) {
        lock(&self.inner.triggers).push(KillOnLine { pattern: pattern.to_owned(), left: times, fired: 0 });
    }

    /// Disarms every kill armed with [`LocalFunction::kill_on_line`] that has not fired.
    pub fn disarm_kills(&self) {
        for trigger in lock(&self.inner.triggers).iter_mut() {
            trigger.left = 0;
        }
    }

    /// How many kills armed with [`LocalFunction::kill_on_line`] fired, by pattern.
    pub fn kills_on_lines(&self) -> BTreeMap<String, u32> {
        let mut fired = BTreeMap::new();
        for trigger in lock(&self.inner.triggers).iter() {
            *fired.entry(trigger.pattern.clone()).or_default() += trigger.fired;
        }
        fired
    }

    /// Sandboxes running an invocation now.
    pub fn busy(&self) -> usize {
        lock(&self.inner.busy).len()
    }

    fn killed(&self, sandbox: &Sandbox) -> bool {
        let killed = sandbox.kill();
        if killed {
            lock(&self.inner.stats).killed += 1;
            self.log_line(sandbox.id, "killed (SIGKILL)");
        }
        killed
    }

    fn log_line(&self, sandbox: u64, line: &str) {
        use std::io::Write;
        let _ = writeln!(lock(&self.inner.log), "{} sandbox-{sandbox} {line}", SystemClock.now_ms());
    }

    /// An idle warm sandbox, or a new one, waiting while `concurrency_max` exist and are busy.
    async fn acquire(&self) -> anyhow::Result<Arc<Sandbox>> {
        loop {
            let warm = loop {
                let Some(sandbox) = lock(&self.inner.idle).pop_front() else { break None };
                if sandbox.is_alive() {
                    break Some(sandbox);
                }
            };
            if let Some(sandbox) = warm {
                return Ok(sandbox);
            }
            let existing = self.inner.existing.load(Ordering::SeqCst);
            if existing < self.spec.concurrency_max as u64
                && self
                    .inner
                    .existing
                    .compare_exchange(existing, existing + 1, Ordering::SeqCst, Ordering::SeqCst)
                    .is_ok()
            {
                return match self.spawn().await {
                    Ok(sandbox) => Ok(sandbox),
                    Err(error) => {
                        self.inner.existing.fetch_sub(1, Ordering::SeqCst);
                        Err(error)
                    }
                };
            }
            let freed = self.inner.freed.notified();
            tokio::select! {
                () = freed => {}
                () = tokio::time::sleep(Duration::from_millis(50)) => {}
            }
        }
    }

    /// Starts a process with a Runtime API of its own.
    async fn spawn(&self) -> anyhow::Result<Arc<Sandbox>> {
        let id = self.inner.next_id.fetch_add(1, Ordering::SeqCst) + 1;
        let listener = TcpListener::bind("127.0.0.1:0").await.context("cannot bind a Runtime API port")?;
        let address = listener.local_addr()?.to_string();
        let (assign, assignments) = mpsc::channel(1);
        let (kill, killed) = oneshot::channel();
        let sandbox = Arc::new(Sandbox {
            id,
            assign,
            in_flight: Mutex::new(None),
            kill: Mutex::new(Some(kill)),
            alive: true.into(),
        });
        let mut command = Command::new(&self.spec.command);
        command.args(&self.spec.args).env_clear().env("PATH", std::env::var_os("PATH").unwrap_or_default());
        if let Some(working_dir) = &self.spec.working_dir {
            command.current_dir(working_dir);
        }
        let memory_mb = self.spec.memory_mb.to_string();
        // Lambda names each sandbox's log stream; functions use it (cfnresponse's default
        // PhysicalResourceId is the context's log_stream_name, which runtimes read from here).
        let log_group = format!("/aws/lambda/{}", self.spec.name);
        let log_stream = log_stream_name(SystemClock.now_ms(), cfn_once::system_clock::random_seed(), id);
        for (name, value) in [
            ("AWS_LAMBDA_LOG_GROUP_NAME", log_group.as_str()),
            ("AWS_LAMBDA_LOG_STREAM_NAME", log_stream.as_str()),
            ("AWS_LAMBDA_RUNTIME_API", address.as_str()),
            ("AWS_LAMBDA_FUNCTION_NAME", self.spec.name.as_str()),
            ("AWS_LAMBDA_FUNCTION_MEMORY_SIZE", memory_mb.as_str()),
            ("AWS_LAMBDA_FUNCTION_VERSION", "$LATEST"),
            ("AWS_REGION", self.spec.region.as_str()),
            ("AWS_DEFAULT_REGION", self.spec.region.as_str()),
        ] {
            command.env(name, value);
        }
        command.envs(&self.spec.env).stdin(Stdio::null()).stdout(Stdio::piped()).stderr(Stdio::piped());
        command.kill_on_drop(true);
        let mut child = command.spawn().with_context(|| format!("cannot start {}", self.spec.command.display()))?;
        lock(&self.inner.stats).cold_starts += 1;
        for stream in [
            child.stdout.take().map(|s| Box::new(s) as Box<dyn tokio::io::AsyncRead + Send + Unpin>),
            child.stderr.take().map(|s| Box::new(s) as Box<dyn tokio::io::AsyncRead + Send + Unpin>),
        ]
        .into_iter()
        .flatten()
        {
            let inner = Arc::clone(&self.inner);
            let sandbox = Arc::clone(&sandbox);
            tokio::spawn(async move {
                let mut lines = BufReader::new(stream).lines();
                while let Ok(Some(line)) = lines.next_line().await {
                    {
                        use std::io::Write;
                        let _ = writeln!(lock(&inner.log), "{} sandbox-{} {line}", SystemClock.now_ms(), sandbox.id);
                    }
                    let fire = {
                        let mut triggers = lock(&inner.triggers);
                        let hit = triggers.iter_mut().find(|t| t.left > 0 && line.contains(&t.pattern));
                        hit.map(|trigger| {
                            trigger.left -= 1;
                            trigger.fired += 1;
                        })
                        .is_some()
                    };
                    if fire && sandbox.kill() {
                        lock(&inner.stats).killed += 1;
                        use std::io::Write;
                        let _ = writeln!(
                            lock(&inner.log),
                            "{} sandbox-{} killed (SIGKILL) on a log line",
                            SystemClock.now_ms(),
                            sandbox.id
                        );
                    }
                }
            });
        }
        let (first_next, ready) = oneshot::channel();
        let runtime = Arc::clone(&sandbox);
        let arn = format!("arn:aws:lambda:{}:123456789012:function:{}", self.spec.region, self.spec.name);
        let server = tokio::spawn(runtime_api::serve(listener, assignments, runtime, arn, first_next));
        let watcher = Arc::clone(&sandbox);
        let inner = Arc::clone(&self.inner);
        tokio::spawn(async move {
            tokio::select! {
                _ = child.wait() => {}
                _ = killed => {
                    let _ = child.start_kill();
                    let _ = child.wait().await;
                }
            }
            watcher.alive.store(false, Ordering::SeqCst);
            server.abort();
            watcher.finish(Invoked::Crashed);
            inner.existing.fetch_sub(1, Ordering::SeqCst);
            inner.freed.notify_one();
        });
        // Lambda starts the clock of an invocation once the runtime asks for it.
        match tokio::time::timeout(Duration::from_millis(INIT_MS_MAX), ready).await {
            Ok(Ok(())) => Ok(sandbox),
            _ => {
                sandbox.kill();
                anyhow::bail!(
                    "{} did not ask for an event within {INIT_MS_MAX} ms of starting",
                    self.spec.command.display()
                )
            }
        }
    }
}

impl Drop for LocalFunction {
    fn drop(&mut self) {
        self.kill_all();
    }
}

#[cfg(test)]
mod tests {
    use super::log_stream_name;

    #[test]
    fn a_log_stream_is_named_as_lambda_names_it() {
        // 2026-11-29T08:10:00Z
        let name = log_stream_name(1_795_939_800_000, 0xabc, 2);
        assert_eq!(name, "2026/11/29/[$LATEST]0000000000000abc0000000000000002");
        assert_eq!(name.len(), "YYYY/MM/DD/[$LATEST]".len() + 32);
    }
}
