//! A stand-in for the AWS Lambda Runtime API, so the real `cfn-once` binary can be run as Lambda
//! runs it: `lambda_runtime` polls `GET /2018-06-01/runtime/invocation/next`, gets one event
//! with its request id and deadline in headers, and posts the result to `.../response` or
//! `.../error`. Events are queued by the test; every call is recorded with when it arrived, so
//! tests can check what the runtime did and benchmarks can time it. A benchmark that names the
//! function's process (`watch`) also gets the process's CPU time at each call, read from
//! `/proc/<pid>/task/*/schedstat` in nanoseconds: a process blocked in `next` is idle, so the
//! difference between two calls is what it spent in between.

use std::collections::{BTreeMap, VecDeque};
use std::io::{BufRead, BufReader, Read, Write};
use std::net::{TcpListener, TcpStream};
use std::sync::{Arc, Condvar, Mutex, MutexGuard, PoisonError};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

const PREFIX: &str = "/2018-06-01/runtime";
/// The longest head or body the stand-in reads.
const MESSAGE_BYTES_MAX: usize = 16 * 1024 * 1024;

/// What the function posted for one invocation.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Posted {
    Response(Vec<u8>),
    Error(Vec<u8>),
}

/// One call the runtime made, with when it arrived.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Call {
    /// `GET .../invocation/next`.
    Next,
    /// An event was handed out in answer to a `next`.
    Handed(String),
    /// `POST .../invocation/{id}/response` or `.../error`.
    Posted(String),
    /// `POST .../init/error`.
    InitError(Vec<u8>),
}

#[derive(Debug, Default)]
struct State {
    queued: VecDeque<(String, Vec<u8>, u64)>,
    posted: BTreeMap<String, Posted>,
    calls: Vec<(Instant, Call)>,
    /// The watched process, and its CPU time at each call (parallel to `calls`).
    watched: Option<u32>,
    cpu_ns: Vec<Option<u64>>,
}

impl State {
    fn record(&mut self, at: Instant, call: Call) {
        let cpu = self.watched.and_then(cpu_ns);
        self.calls.push((at, call));
        self.cpu_ns.push(cpu);
    }
}

/// The CPU time of every live thread of `pid`, in ns (`None` once the process is gone).
pub fn cpu_ns(pid: u32) -> Option<u64> {
    let tasks = std::fs::read_dir(format!("/proc/{pid}/task")).ok()?;
    let mut total = 0;
    for task in tasks.flatten() {
        let stat = std::fs::read_to_string(task.path().join("schedstat")).unwrap_or_default();
        total += stat.split_whitespace().next().and_then(|ns| ns.parse::<u64>().ok()).unwrap_or(0);
    }
    Some(total)
}

#[derive(Debug, Default)]
struct Shared {
    state: Mutex<State>,
    changed: Condvar,
}

impl Shared {
    fn lock(&self) -> MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

/// The stand-in; it serves until the test process ends.
#[derive(Debug, Clone)]
pub struct FakeRuntime {
    address: String,
    shared: Arc<Shared>,
}

impl FakeRuntime {
    /// Listens on a free loopback port.
    pub fn start() -> Self {
        let listener = TcpListener::bind("127.0.0.1:0").expect("bind the fake Runtime API");
        let address = listener.local_addr().expect("address").to_string();
        let shared = Arc::new(Shared::default());
        let serving = Arc::clone(&shared);
        std::thread::spawn(move || {
            for stream in listener.incoming().flatten() {
                let shared = Arc::clone(&serving);
                std::thread::spawn(move || serve(stream, &shared));
            }
        });
        Self { address, shared }
    }

    /// `host:port`, the value of `AWS_LAMBDA_RUNTIME_API`.
    pub fn address(&self) -> &str {
        &self.address
    }

    /// Queues an invocation with `body` and a deadline `budget_ms` from now.
    pub fn invoke(&self, request_id: &str, body: impl Into<Vec<u8>>, budget_ms: u64) {
        let deadline_ms = epoch_ms() + budget_ms;
        self.shared.lock().queued.push_back((request_id.to_owned(), body.into(), deadline_ms));
        self.shared.changed.notify_all();
    }

    /// What the function posted for `request_id`, waiting up to `timeout`.
    pub fn posted(&self, request_id: &str, timeout: Duration) -> Option<Posted> {
        let started = Instant::now();
        let mut state = self.shared.lock();
        loop {
            if let Some(posted) = state.posted.get(request_id) {
                return Some(posted.clone());
            }
            let left = timeout.checked_sub(started.elapsed())?;
            state = self.shared.changed.wait_timeout(state, left).unwrap_or_else(PoisonError::into_inner).0;
        }
    }

    /// Every call so far, with when it arrived.
    pub fn calls(&self) -> Vec<(Instant, Call)> {
        self.shared.lock().calls.clone()
    }

    /// From now on, reads `pid`'s CPU time at each call.
    pub fn watch(&self, pid: u32) {
        self.shared.lock().watched = Some(pid);
    }

    /// Every call so far, with when it arrived and the watched process's CPU time then.
    pub fn timed_calls(&self) -> Vec<(Instant, Call, Option<u64>)> {
        let state = self.shared.lock();
        state.calls.iter().zip(&state.cpu_ns).map(|((at, call), cpu)| (*at, call.clone(), *cpu)).collect()
    }
}

fn epoch_ms() -> u64 {
    SystemTime::now().duration_since(UNIX_EPOCH).map_or(0, |d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX))
}

fn serve(stream: TcpStream, shared: &Shared) {
    let mut reader = BufReader::new(match stream.try_clone() {
        Ok(stream) => stream,
        Err(_) => return,
    });
    let mut writer = stream;
    while let Some((method, path, body)) = read_request(&mut reader) {
        let reply = route(&method, &path, body, shared);
        if writer.write_all(&reply).is_err() {
            return;
        }
    }
}

/// Answers one call; the reply's bytes.
fn route(method: &str, path: &str, body: Vec<u8>, shared: &Shared) -> Vec<u8> {
    let now = Instant::now();
    let rest = path.strip_prefix(PREFIX).unwrap_or_default();
    match (method, rest) {
        ("GET", "/invocation/next") => {
            let mut state = shared.lock();
            state.record(now, Call::Next);
            let (request_id, event, deadline_ms) = loop {
                if let Some(next) = state.queued.pop_front() {
                    break next;
                }
                state = shared.changed.wait(state).unwrap_or_else(PoisonError::into_inner);
            };
            state.record(Instant::now(), Call::Handed(request_id.clone()));
            let headers = format!(
                "Lambda-Runtime-Aws-Request-Id: {request_id}\r\nLambda-Runtime-Deadline-Ms: {deadline_ms}\r\n\
                 Lambda-Runtime-Invoked-Function-Arn: arn:aws:lambda:us-east-1:123456789012:function:cfn-once\r\n\
                 Lambda-Runtime-Trace-Id: Root=1-00000000-000000000000000000000000;Sampled=0\r\n"
            );
            reply(200, &headers, &event)
        }
        ("POST", "/init/error") => {
            shared.lock().record(now, Call::InitError(body));
            shared.changed.notify_all();
            reply(202, "", b"{}")
        }
        ("POST", rest) => {
            let parts: Vec<&str> = rest.trim_start_matches('/').split('/').collect();
            match parts.as_slice() {
                ["invocation", request_id, kind @ ("response" | "error")] => {
                    let posted = if *kind == "response" { Posted::Response(body) } else { Posted::Error(body) };
                    let mut state = shared.lock();
                    state.record(now, Call::Posted((*request_id).to_owned()));
                    state.posted.insert((*request_id).to_owned(), posted);
                    drop(state);
                    shared.changed.notify_all();
                    reply(202, "", b"{}")
                }
                _ => reply(404, "", b"{}"),
            }
        }
        _ => reply(404, "", b"{}"),
    }
}

fn reply(status: u16, headers: &str, body: &[u8]) -> Vec<u8> {
    let reason = if status < 300 { "OK" } else { "Not Found" };
    let mut bytes = format!(
        "HTTP/1.1 {status} {reason}\r\nContent-Type: application/json\r\nContent-Length: {}\r\n{headers}\r\n",
        body.len()
    )
    .into_bytes();
    bytes.extend_from_slice(body);
    bytes
}

/// Reads one request: method, path and body (by Content-Length, or chunked).
fn read_request(reader: &mut BufReader<TcpStream>) -> Option<(String, String, Vec<u8>)> {
    let mut line = String::new();
    if reader.read_line(&mut line).ok()? == 0 {
        return None;
    }
    let mut parts = line.split_whitespace();
    let (method, path) = (parts.next()?.to_owned(), parts.next()?.to_owned());
    let (mut length, mut chunked) = (0usize, false);
    loop {
        let mut header = String::new();
        if reader.read_line(&mut header).ok()? == 0 {
            return None;
        }
        let header = header.trim_end();
        if header.is_empty() {
            break;
        }
        let (name, value) = header.split_once(':')?;
        match name.trim().to_ascii_lowercase().as_str() {
            "content-length" => length = value.trim().parse().ok()?,
            "transfer-encoding" => chunked = value.trim().eq_ignore_ascii_case("chunked"),
            _ => {}
        }
    }
    let body = if chunked { read_chunked(reader)? } else { read_exact(reader, length)? };
    Some((method, path, body))
}

fn read_exact(reader: &mut BufReader<TcpStream>, length: usize) -> Option<Vec<u8>> {
    if length > MESSAGE_BYTES_MAX {
        return None;
    }
    let mut body = vec![0; length];
    reader.read_exact(&mut body).ok()?;
    Some(body)
}

fn read_chunked(reader: &mut BufReader<TcpStream>) -> Option<Vec<u8>> {
    let mut body = Vec::new();
    loop {
        let mut size = String::new();
        reader.read_line(&mut size).ok()?;
        let size = usize::from_str_radix(size.trim().split(';').next()?, 16).ok()?;
        if size == 0 {
            // Trailers, then the blank line.
            loop {
                let mut trailer = String::new();
                if reader.read_line(&mut trailer).ok()? == 0 || trailer.trim().is_empty() {
                    return Some(body);
                }
            }
        }
        if body.len() + size > MESSAGE_BYTES_MAX {
            return None;
        }
        body.extend(read_exact(reader, size)?);
        let mut crlf = [0; 2];
        reader.read_exact(&mut crlf).ok()?;
    }
}
