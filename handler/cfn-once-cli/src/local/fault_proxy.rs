//! A fault-injecting HTTP/1.1 proxy, for the tests and `make soak`. An AWS SDK client (or an HTTP client doing
//! presigned S3 PUTs) is pointed at the proxy's URL as its endpoint, and the proxy forwards each
//! request to the local AWS emulator unless a rule injected by the test matches it; then it
//! answers with an error, drops the connection, never answers, or lets the upstream apply the
//! request and loses, delays or replaces the reply. Tests use it to prove a handler survives wire
//! faults, including the ambiguous ones where a write applied but its reply never arrived.
//!
//! It is a blocking, thread-per-connection server built on std (and the SDK's date formats). Every request is read in
//! full, logged, and forwarded on a fresh upstream connection with `Connection: close`, so the
//! proxy never has to track upstream connection state. When the last handle is dropped the
//! listener closes and hung connections are closed within a second; any other connection thread
//! lives on until its client closes the connection or has had one more request answered.

use std::fmt::{self, Write as _};
use std::io::{self, BufRead, BufReader, ErrorKind, Read, Write};
use std::net::{Shutdown, SocketAddr, TcpListener, TcpStream, ToSocketAddrs};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::thread;
use std::time::{Duration, Instant};

/// A message head larger than this is refused, so a garbage peer cannot exhaust memory.
const MAX_HEAD: u64 = 64 * 1024;
/// The same protection for bodies; test uploads are far smaller than this.
const MAX_BODY: usize = 256 << 20;
const CONNECT_TIMEOUT: Duration = Duration::from_secs(5);
/// A stuck upstream fails the request after this long instead of hanging the test forever.
const UPSTREAM_TIMEOUT: Duration = Duration::from_secs(30);
/// A `Hang` fault gives up after this long, so a client without a timeout cannot hang a test forever.
const HANG_LIMIT: Duration = Duration::from_secs(120);
/// Headers that describe one connection rather than the message, so they are never relayed.
const HOP_BY_HOP: [&str; 8] =
    ["connection", "keep-alive", "proxy-connection", "transfer-encoding", "expect", "te", "upgrade", "trailer"];

/// Which requests a rule applies to.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Match {
    /// The operation named by the `X-Amz-Target` header's part after the last '.', e.g.
    /// "UpdateItem" (header "DynamoDB_20120810.UpdateItem") or "ChangeMessageVisibility"
    /// (header "AmazonSQS.ChangeMessageVisibility").
    Operation(String),
    /// As Operation, and the request body contains this text (to tell an acquire UpdateItem
    /// from a commit UpdateItem by their expressions).
    OperationWith(String, String),
    /// Any request with method PUT (an S3 object upload to a presigned URL).
    Put,
    /// Any request at all.
    Any,
    /// A request signed (its `X-Amz-Date` header) further than this from the proxy's clock, as
    /// AWS refuses one signed more than five minutes away from its own time.
    SignedOutside(Duration),
}

impl Match {
    /// Whether a request matches; `signed_ms` is its `X-Amz-Date` (epoch ms), if it has one.
    fn matches(&self, method: &str, operation: Option<&str>, body: &[u8], signed_ms: Option<u64>) -> bool {
        match self {
            Self::Operation(name) => operation == Some(name.as_str()),
            Self::OperationWith(name, text) => operation == Some(name.as_str()) && contains(body, text.as_bytes()),
            Self::Put => method == "PUT",
            Self::Any => true,
            Self::SignedOutside(tolerance) => signed_ms.is_some_and(|signed_ms| {
                let tolerance_ms = u64::try_from(tolerance.as_millis()).unwrap_or(u64::MAX);
                signed_ms.abs_diff(epoch_ms()) > tolerance_ms
            }),
        }
    }
}

/// An `X-Amz-Date` (`20261203T161500Z`) as epoch ms.
fn amz_date_ms(value: &str) -> Option<u64> {
    let digits = |range: std::ops::Range<usize>| value.get(range)?.parse::<u32>().ok();
    if value.len() != 16 || value.as_bytes()[8] != b'T' || !value.ends_with('Z') {
        return None;
    }
    let text = format!(
        "{:04}-{:02}-{:02}T{:02}:{:02}:{:02}Z",
        digits(0..4)?,
        digits(4..6)?,
        digits(6..8)?,
        digits(9..11)?,
        digits(11..13)?,
        digits(13..15)?
    );
    let time =
        aws_sdk_dynamodb::primitives::DateTime::from_str(&text, aws_sdk_dynamodb::primitives::DateTimeFormat::DateTime)
            .ok()?;
    u64::try_from(time.to_millis().ok()?).ok()
}

/// Now as an HTTP `Date` header, as every AWS answer carries one (the SDK learns its clock's
/// skew from it).
fn http_date_now() -> String {
    aws_sdk_dynamodb::primitives::DateTime::from(std::time::SystemTime::now())
        .fmt(aws_sdk_dynamodb::primitives::DateTimeFormat::HttpDate)
        .unwrap_or_default()
}

/// What the proxy does to a matching request instead of a plain pass-through.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Fault {
    /// Do not forward; answer with this status, Content-Type and body.
    Respond { status: u16, content_type: String, body: String },
    /// Do not forward; reset the connection (SO_LINGER 0, then close: the kernel sends an RST)
    /// without replying. The client sees "connection reset by peer" before any response byte.
    Reset,
    /// Do not forward; never answer. The connection is held until the client closes it, the
    /// proxy is dropped, or two minutes pass, and then it is closed without a reply.
    Hang,
    /// Forward to upstream (so the upstream applies it), then wait this long before relaying the
    /// reply (the client will usually have timed out: an ambiguous outcome).
    ForwardThenDelay(Duration),
    /// Forward, then close as `Reset` does instead of relaying the reply (reply lost after the
    /// write applied).
    ForwardThenReset,
    /// Forward, then answer with this status/body instead of the upstream's reply.
    ForwardThenRespond { status: u16, content_type: String, body: String },
}

impl Fault {
    /// The awsJson1_0 error DynamoDB sends, e.g. `dynamodb_error(400, "ProvisionedThroughputExceededException")`.
    pub fn dynamodb_error(status: u16, error_type: &str) -> Self {
        let body = format!(
            r#"{{"__type":"com.amazonaws.dynamodb.v20120810#{error_type}","message":"injected by FaultProxy"}}"#
        );
        Self::Respond { status, content_type: "application/x-amz-json-1.0".to_owned(), body }
    }

    /// The error SQS sends in its JSON protocol, e.g. `sqs_error(400, "QueueDoesNotExist")`.
    pub fn sqs_error(status: u16, code: &str) -> Self {
        let body = format!(r#"{{"__type":"com.amazonaws.sqs#{code}","message":"injected"}}"#);
        Self::Respond { status, content_type: "application/x-amz-json-1.0".to_owned(), body }
    }

    /// An S3-style XML error with this status and code `InternalError`.
    pub fn status(status: u16) -> Self {
        let body = concat!(
            r#"<?xml version="1.0" encoding="UTF-8"?>"#,
            "<Error><Code>InternalError</Code><Message>injected</Message></Error>"
        );
        Self::Respond { status, content_type: "application/xml".to_owned(), body: body.to_owned() }
    }
}

/// One request the proxy saw, and what became of it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Exchange {
    pub method: String,
    /// The request target without its query string.
    pub path: String,
    /// From X-Amz-Target, as in `Match::Operation`.
    pub operation: Option<String>,
    /// What was injected, None if passed through.
    pub fault: Option<Fault>,
    /// The status upstream answered, if the request was forwarded and an answer arrived.
    pub upstream_status: Option<u16>,
    /// How long the upstream took to answer a forwarded request (connect, send, read).
    pub upstream_took: Option<Duration>,
    /// When the request arrived, epoch ms.
    pub at_ms: u64,
    /// When the request arrived, on this process's monotonic clock.
    pub arrived: Instant,
    /// The latency added before forwarding it ([`FaultProxy::add_latency`]).
    pub added_latency: Option<Duration>,
    /// When its reply was sent back (or the connection closed instead), if it was.
    pub replied: Option<Instant>,
}

/// A request's head as it arrived: its request line and its header lines, names as sent, in order.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RequestHead {
    /// `PUT /bucket/key?query HTTP/1.1`
    pub line: String,
    pub headers: Vec<(String, String)>,
}

/// What the proxy keeps of the requests it sees.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LogMode {
    /// Every exchange with its request body (`count` can match bodies) and head (`heads`).
    Full,
    /// Every exchange, without bodies: for long runs with many uploads.
    WithoutBodies,
    /// Nothing: for long runs that only inject faults.
    Off,
}

/// A handle on a running proxy. Clones share it; the last one dropped stops the listener.
#[derive(Clone)]
pub struct FaultProxy {
    inner: Arc<Inner>,
    _stopper: Arc<Stopper>,
}

/// Shows the proxy's state without the logged bodies, which may be large uploads.
impl fmt::Debug for FaultProxy {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let (rules, logged) = (lock(&self.inner.rules).len(), lock(&self.inner.log).len());
        f.debug_struct("FaultProxy").field("url", &self.url()).field("rules", &rules).field("logged", &logged).finish()
    }
}

impl FaultProxy {
    /// Starts listening on 127.0.0.1:0, forwarding to `upstream` ("http://127.0.0.1:PORT", no path).
    /// Panics if the address is not of that form or nothing can be bound, as a test setup step should.
    pub fn start(upstream: &str) -> Self {
        Self::start_with(upstream, LogMode::Full)
    }

    /// As [`FaultProxy::start`], keeping only what `mode` says of each request.
    pub fn start_with(upstream: &str, mode: LogMode) -> Self {
        let authority = upstream.strip_prefix("http://").expect("FaultProxy upstream must be http://HOST:PORT");
        let upstream = authority.trim_end_matches('/').to_socket_addrs().expect("FaultProxy upstream").collect();
        let listener = TcpListener::bind("127.0.0.1:0").expect("FaultProxy bind");
        let addr = listener.local_addr().expect("FaultProxy local address");
        let inner = Arc::new(Inner {
            addr,
            upstream,
            mode,
            rules: Mutex::default(),
            latencies: Mutex::default(),
            log: Mutex::default(),
            stopped: false.into(),
            injected: AtomicU64::new(0),
        });
        let accepting = Arc::clone(&inner);
        thread::Builder::new()
            .name("fault-proxy-accept".to_owned())
            .spawn(move || accept_loop(&listener, &accepting))
            .expect("FaultProxy accept thread");
        Self { _stopper: Arc::new(Stopper(Arc::clone(&inner))), inner }
    }

    /// "http://127.0.0.1:PORT"
    pub fn url(&self) -> String {
        format!("http://{}", self.inner.addr)
    }

    /// Applies `fault` to the next `times` requests that match `matcher` (rules are checked in the
    /// order they were added; a request uses the first rule with times left).
    pub fn inject(&self, matcher: Match, fault: Fault, times: u32) {
        if times > 0 {
            lock(&self.inner.rules).push(Rule { matcher, fault, left: times });
        }
    }

    /// How many requests a fault was applied to so far (counted whatever the [`LogMode`]).
    pub fn injected(&self) -> u64 {
        self.inner.injected.load(Ordering::SeqCst)
    }

    /// Drops all rules (fault rules; latencies stay).
    pub fn clear(&self) {
        lock(&self.inner.rules).clear();
    }

    /// Delays every request matching `matcher` by `latency` before forwarding it, from now on,
    /// as a far-away service would (the first latency rule that matches applies; concurrent
    /// requests wait side by side). Models a call class's round trip: a multi-Region strongly
    /// consistent write, an S3 PUT.
    pub fn add_latency(&self, matcher: Match, latency: Duration) {
        lock(&self.inner.latencies).push((matcher, latency));
    }

    /// Every request seen, in arrival order.
    pub fn log(&self) -> Vec<Exchange> {
        lock(&self.inner.log).iter().map(|record| record.exchange.clone()).collect()
    }

    /// The requests seen after the first `seen`, in arrival order.
    pub fn log_since(&self, seen: usize) -> Vec<Exchange> {
        lock(&self.inner.log).iter().skip(seen).map(|record| record.exchange.clone()).collect()
    }

    /// The bodies of the logged requests that matched `matcher`, in arrival order (empty
    /// unless the proxy logs bodies, [`LogMode::Full`]).
    pub fn bodies(&self, matcher: &Match) -> Vec<Vec<u8>> {
        self.matching(matcher, |record| record.body.clone())
    }

    /// The heads of the logged requests that matched `matcher`, in arrival order (empty unless
    /// the proxy logs bodies, [`LogMode::Full`]): what a client sent, to pin it exactly.
    pub fn heads(&self, matcher: &Match) -> Vec<RequestHead> {
        self.matching(matcher, |record| record.head.clone()).into_iter().flatten().collect()
    }

    /// How many logged requests matched `matcher` (whatever was done with them).
    pub fn count(&self, matcher: &Match) -> usize {
        self.matching(matcher, |_| ()).len()
    }

    /// `each` of the logged requests that match `matcher`, in arrival order. The log keeps no
    /// headers: a `SignedOutside` matcher matches nothing here.
    fn matching<T>(&self, matcher: &Match, each: impl Fn(&Record) -> T) -> Vec<T> {
        let log = lock(&self.inner.log);
        log.iter()
            .filter(|r| matcher.matches(&r.exchange.method, r.exchange.operation.as_deref(), &r.body, None))
            .map(each)
            .collect()
    }
}

struct Rule {
    matcher: Match,
    fault: Fault,
    left: u32,
}

/// A logged exchange plus the request body, which `count` needs for `Match::OperationWith`, and,
/// in [`LogMode::Full`], the request's head.
struct Record {
    exchange: Exchange,
    body: Vec<u8>,
    head: Option<RequestHead>,
}

struct Inner {
    addr: SocketAddr,
    upstream: Vec<SocketAddr>,
    mode: LogMode,
    rules: Mutex<Vec<Rule>>,
    latencies: Mutex<Vec<(Match, Duration)>>,
    log: Mutex<Vec<Record>>,
    stopped: AtomicBool,
    /// Requests a rule was applied to, whatever the log mode.
    injected: AtomicU64,
}

/// Owned only by `FaultProxy` handles, so its drop marks the moment the last handle goes.
struct Stopper(Arc<Inner>);

impl Drop for Stopper {
    fn drop(&mut self) {
        self.0.stopped.store(true, Ordering::SeqCst);
        // The accept loop blocks in accept(); a throwaway connection wakes it to see the flag.
        let _ = TcpStream::connect_timeout(&self.0.addr, CONNECT_TIMEOUT);
    }
}

/// The round trips `log[target]` waited for: the longest chain of earlier exchanges, each
/// arriving after the one before it had its reply, ending with one that had its reply before
/// `target` arrived; in arrival order, indices into `log` (arrival order itself). Calls that
/// went out side by side count once: this is what a far-away service's latency multiplies.
pub fn waited_for(log: &[Exchange], target: usize) -> Vec<usize> {
    let before = |first: usize, then: usize| log[first].replied.is_some_and(|replied| replied <= log[then].arrived);
    // depth[i]: the longest chain ending with exchange i.
    let mut depth = vec![0usize; target + 1];
    let mut previous = vec![None; target + 1];
    for i in 0..=target.min(log.len().saturating_sub(1)) {
        let best = (0..i).filter(|&j| before(j, i)).max_by_key(|&j| depth[j]);
        depth[i] = 1 + best.map_or(0, |j| depth[j]);
        previous[i] = best;
    }
    let mut chain = Vec::new();
    let mut at = previous.get(target).copied().flatten();
    while let Some(index) = at {
        chain.push(index);
        at = previous[index];
    }
    chain.reverse();
    chain
}

fn epoch_ms() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |elapsed| u64::try_from(elapsed.as_millis()).unwrap_or(u64::MAX))
}

/// A test proxy should keep working after a panicking test thread poisoned a lock.
fn lock<T>(mutex: &Mutex<T>) -> MutexGuard<'_, T> {
    mutex.lock().unwrap_or_else(PoisonError::into_inner)
}

fn accept_loop(listener: &TcpListener, inner: &Arc<Inner>) {
    for conn in listener.incoming() {
        if inner.stopped.load(Ordering::SeqCst) {
            return; // Dropping the listener refuses further connections.
        }
        let Ok(stream) = conn else {
            // Errors such as running out of descriptors are usually transient; back off briefly.
            thread::sleep(Duration::from_millis(10));
            continue;
        };
        let serving = Arc::clone(inner);
        // If no thread can be spawned the closure, and with it the connection, is dropped.
        let _ = thread::Builder::new().name("fault-proxy-conn".to_owned()).spawn(move || serving.serve(&stream));
    }
}

type Headers = Vec<(String, String)>;

/// A request as read from the client, with its body already de-chunked.
struct Request {
    /// The request line as it arrived.
    line: String,
    method: String,
    target: String,
    headers: Headers,
    body: Vec<u8>,
    /// Whether the client sent a body framing header, so the forwarded copy carries Content-Length.
    framed: bool,
    close: bool,
}

struct Response {
    status: u16,
    reason: String,
    headers: Headers,
    body: Vec<u8>,
}

#[derive(PartialEq)]
enum Framing {
    None,
    Length(usize),
    Chunked,
    ToEof,
}

impl Inner {
    /// Serves requests on one client connection until it closes, errs, a fault ends it, or the
    /// proxy has stopped. Errors just end the connection, which is all a proxy can do about them.
    fn serve(&self, stream: &TcpStream) -> io::Result<()> {
        stream.set_write_timeout(Some(UPSTREAM_TIMEOUT))?;
        let mut reader = BufReader::new(stream);
        while let Some((line, headers)) = read_head(&mut reader)? {
            let mut parts = line.split(' ');
            let (Some(method), Some(target), Some(version)) = (parts.next(), parts.next(), parts.next()) else {
                return Err(invalid("bad request line"));
            };
            let framing = framing(&headers, Framing::None)?;
            let expects = header(&headers, "expect").is_some_and(|v| v.eq_ignore_ascii_case("100-continue"));
            if expects && framing != Framing::None && framing != Framing::Length(0) {
                // Clients that ask may withhold the body until told to go on.
                (&mut &*stream).write_all(b"HTTP/1.1 100 Continue\r\n\r\n")?;
            }
            let framed = framing != Framing::None;
            let body = read_body(&mut reader, framing)?;
            let close = version != "HTTP/1.1" || has_token(&headers, "connection", "close");
            let (method, target) = (method.to_owned(), target.to_owned());
            let request = Request { line: line.clone(), method, target, headers, body, framed, close };
            if !self.handle(&request, stream, &mut reader)? || close || self.stopped.load(Ordering::SeqCst) {
                break;
            }
        }
        Ok(())
    }

    /// Logs the request, applies the first matching rule, and answers. Returns whether the
    /// connection may carry another request; a closing fault ends it without a reply.
    fn handle(&self, req: &Request, stream: &TcpStream, reader: &mut BufReader<&TcpStream>) -> io::Result<bool> {
        let operation = header(&req.headers, "x-amz-target").map(|t| t.rsplit_once('.').map_or(t, |(_, op)| op));
        let signed_ms = header(&req.headers, "x-amz-date").and_then(amz_date_ms);
        let arrived = Instant::now();
        let latency = lock(&self.latencies)
            .iter()
            .find(|(matcher, _)| matcher.matches(&req.method, operation, &req.body, signed_ms))
            .map(|(_, latency)| *latency);
        let (index, fault) = {
            // The rule lock is held while logging so log order matches the order rules were used in.
            let mut rules = lock(&self.rules);
            let fault =
                rules.iter().position(|r| r.matcher.matches(&req.method, operation, &req.body, signed_ms)).map(|i| {
                    self.injected.fetch_add(1, Ordering::SeqCst);
                    rules[i].left -= 1;
                    if rules[i].left == 0 { rules.remove(i).fault } else { rules[i].fault.clone() }
                });
            let exchange = Exchange {
                method: req.method.clone(),
                path: req.target.split('?').next().unwrap_or_default().to_owned(),
                operation: operation.map(str::to_owned),
                fault: fault.clone(),
                upstream_status: None,
                upstream_took: None,
                at_ms: epoch_ms(),
                arrived,
                added_latency: latency,
                replied: None,
            };
            let index = match self.mode {
                LogMode::Off => None,
                mode => {
                    let mut log = lock(&self.log);
                    let full = mode == LogMode::Full;
                    let body = if full { req.body.clone() } else { Vec::new() };
                    let head = full.then(|| RequestHead { line: req.line.clone(), headers: req.headers.clone() });
                    log.push(Record { exchange, body, head });
                    Some(log.len() - 1)
                }
            };
            (index, fault)
        };
        if let Some(latency) = latency {
            thread::sleep(latency);
        }
        let forwarding = Instant::now();
        let upstream =
            (!matches!(fault, Some(Fault::Respond { .. } | Fault::Reset | Fault::Hang))).then(|| self.forward(req));
        if let (Some(Ok(response)), Some(index)) = (&upstream, index) {
            let exchange = &mut lock(&self.log)[index].exchange;
            exchange.upstream_status = Some(response.status);
            exchange.upstream_took = Some(forwarding.elapsed());
        }
        let reply = match fault {
            Some(
                Fault::Respond { status, content_type, body }
                | Fault::ForwardThenRespond { status, content_type, body },
            ) => {
                let headers = vec![("Content-Type".to_owned(), content_type), ("Date".to_owned(), http_date_now())];
                Response { status, reason: "Injected".to_owned(), headers, body: body.into_bytes() }
            }
            Some(Fault::Reset | Fault::ForwardThenReset) => {
                // A zero linger makes the close an abortive one: an RST, not a FIN.
                let _ = socket2::SockRef::from(stream).set_linger(Some(Duration::ZERO));
                let _ = stream.shutdown(Shutdown::Read);
                return Ok(false);
            }
            Some(Fault::Hang) => {
                self.hang(reader);
                return Ok(false);
            }
            Some(Fault::ForwardThenDelay(_)) | None => {
                if let Some(Fault::ForwardThenDelay(delay)) = fault {
                    thread::sleep(delay);
                }
                // The client learns that the upstream failed rather than seeing a vanished reply.
                upstream.and_then(Result::ok).unwrap_or_else(|| Response {
                    status: 502,
                    reason: "Bad Gateway".to_owned(),
                    headers: Vec::new(),
                    body: Vec::new(),
                })
            }
        };
        let sent = reply.send(stream, req);
        if let Some(index) = index {
            lock(&self.log)[index].exchange.replied = Some(Instant::now());
        }
        sent?;
        Ok(true)
    }

    /// Holds a connection without answering, reading and discarding anything the client sends,
    /// until the client closes it, the proxy stops, or time is up. The one-second reads are how
    /// it notices the proxy stopping.
    fn hang(&self, reader: &mut BufReader<&TcpStream>) {
        let deadline = Instant::now() + HANG_LIMIT;
        let mut scratch = [0; 4096];
        while Instant::now() < deadline && !self.stopped.load(Ordering::SeqCst) {
            // This only fails for a zero duration.
            let _ = reader.get_ref().set_read_timeout(Some(Duration::from_secs(1)));
            match reader.read(&mut scratch) {
                Ok(0) => return,
                Err(e) if !matches!(e.kind(), ErrorKind::WouldBlock | ErrorKind::TimedOut | ErrorKind::Interrupted) => {
                    return;
                }
                _ => {}
            }
        }
    }

    /// Sends the request upstream on a fresh connection and reads the whole reply.
    fn forward(&self, req: &Request) -> io::Result<Response> {
        let upstream = self
            .upstream
            .iter()
            .find_map(|addr| TcpStream::connect_timeout(addr, CONNECT_TIMEOUT).ok())
            .ok_or_else(|| io::Error::new(ErrorKind::ConnectionRefused, "upstream unreachable"))?;
        upstream.set_read_timeout(Some(UPSTREAM_TIMEOUT))?;
        upstream.set_write_timeout(Some(UPSTREAM_TIMEOUT))?;
        let mut head = format!("{} {} HTTP/1.1\r\n", req.method, req.target);
        for (name, value) in &req.headers {
            // Host and everything else end-to-end pass unchanged: moto routes and signatures use them.
            let listed = has_token(&req.headers, "connection", name);
            if !is_hop_by_hop(name) && !name.eq_ignore_ascii_case("content-length") && !listed {
                let _ = write!(head, "{name}: {value}\r\n");
            }
        }
        if req.framed || !req.body.is_empty() {
            let _ = write!(head, "Content-Length: {}\r\n", req.body.len());
        }
        head.push_str("Connection: close\r\n\r\n");
        let mut message = head.into_bytes();
        message.extend_from_slice(&req.body);
        (&upstream).write_all(&message)?;
        let mut reader = BufReader::new(&upstream);
        let (line, headers) = read_head(&mut reader)?.ok_or_else(|| invalid("upstream closed without replying"))?;
        let mut parts = line.splitn(3, ' ').skip(1);
        let status = parts.next().and_then(|s| s.parse().ok()).ok_or_else(|| invalid("bad status line"))?;
        let reason = parts.next().unwrap_or_default().to_owned();
        // Having asked for Connection: close, a reply without framing headers ends at EOF.
        let framing =
            if req.method == "HEAD" || no_body(status) { Framing::None } else { framing(&headers, Framing::ToEof)? };
        let body = read_body(&mut reader, framing)?;
        Ok(Response { status, reason, headers, body })
    }
}

impl Response {
    /// Writes the reply with connection-level headers removed and the body re-framed by length.
    fn send(&self, mut stream: &TcpStream, req: &Request) -> io::Result<()> {
        // A bodiless reply keeps the upstream's Content-Length: for HEAD it is the size of the
        // resource, which S3 HeadObject callers read.
        let bodiless = req.method == "HEAD" || no_body(self.status);
        let mut head = format!("HTTP/1.1 {} {}\r\n", self.status, self.reason);
        for (name, value) in &self.headers {
            if !is_hop_by_hop(name) && (bodiless || !name.eq_ignore_ascii_case("content-length")) {
                let _ = write!(head, "{name}: {value}\r\n");
            }
        }
        if !bodiless {
            let _ = write!(head, "Content-Length: {}\r\n", self.body.len());
        }
        head.push_str(if req.close { "Connection: close\r\n\r\n" } else { "\r\n" });
        let mut message = head.into_bytes();
        message.extend_from_slice(if bodiless { &[] } else { &self.body });
        stream.write_all(&message)?;
        stream.flush()
    }
}

/// Reads a start line and header lines. Returns None if the peer closed cleanly before a new message.
fn read_head(reader: &mut impl BufRead) -> io::Result<Option<(String, Headers)>> {
    let mut budget = MAX_HEAD;
    let start = loop {
        match read_line(reader, &mut budget)? {
            None => return Ok(None),
            Some(line) if line.is_empty() => {} // Stray CRLFs between messages are allowed (RFC 9112 2.2).
            Some(line) => break line,
        }
    };
    let mut headers = Vec::new();
    loop {
        let line = read_line(reader, &mut budget)?.ok_or_else(|| invalid("message head cut short"))?;
        if line.is_empty() {
            return Ok(Some((start, headers)));
        }
        let (name, value) = line.split_once(':').ok_or_else(|| invalid("bad header line"))?;
        headers.push((name.trim().to_owned(), value.trim().to_owned()));
    }
}

/// Reads one line without its line ending, spending at most `budget` bytes. None means EOF.
fn read_line(reader: &mut impl BufRead, budget: &mut u64) -> io::Result<Option<String>> {
    let mut line = Vec::new();
    let read = reader.by_ref().take(*budget).read_until(b'\n', &mut line)?;
    *budget -= read as u64;
    if read == 0 {
        return if *budget == 0 { Err(invalid("message head too long")) } else { Ok(None) };
    }
    if line.pop() != Some(b'\n') {
        return Err(invalid("line cut short or too long"));
    }
    Ok(Some(String::from_utf8_lossy(line.strip_suffix(b"\r").unwrap_or(&line)).into_owned()))
}

/// How a message's body is delimited; `otherwise` applies when it has no framing headers.
fn framing(headers: &[(String, String)], otherwise: Framing) -> io::Result<Framing> {
    if has_token(headers, "transfer-encoding", "chunked") {
        return Ok(Framing::Chunked);
    }
    match header(headers, "content-length").map(str::parse::<usize>) {
        None => Ok(otherwise),
        Some(Ok(length)) if length <= MAX_BODY => Ok(Framing::Length(length)),
        Some(_) => Err(invalid("bad or too large Content-Length")),
    }
}

fn read_body(reader: &mut impl BufRead, framing: Framing) -> io::Result<Vec<u8>> {
    let mut body = Vec::new();
    match framing {
        Framing::None => {}
        Framing::Length(length) => {
            body.resize(length, 0);
            reader.read_exact(&mut body)?;
        }
        Framing::ToEof => {
            reader.by_ref().take(MAX_BODY as u64 + 1).read_to_end(&mut body)?;
        }
        Framing::Chunked => loop {
            let line = read_line(reader, &mut 4096)?.ok_or_else(|| invalid("chunked body cut short"))?;
            let size = line.split(';').next().unwrap_or_default().trim();
            let size = usize::from_str_radix(size, 16).map_err(|_| invalid("bad chunk size"))?;
            if size == 0 {
                // Trailers are dropped: the body is forwarded with a Content-Length instead.
                while !read_line(reader, &mut 4096)?.ok_or_else(|| invalid("trailers cut short"))?.is_empty() {}
                break;
            }
            let start = body.len();
            body.resize(start.saturating_add(size).min(MAX_BODY + 1), 0);
            reader.read_exact(&mut body[start..])?;
            if body.len() > MAX_BODY || read_line(reader, &mut 4096)?.is_none_or(|rest| !rest.is_empty()) {
                return Err(invalid("chunk too large or not followed by CRLF"));
            }
        },
    }
    if body.len() > MAX_BODY {
        return Err(invalid("body too large"));
    }
    Ok(body)
}

fn header<'a>(headers: &'a [(String, String)], name: &str) -> Option<&'a str> {
    headers.iter().find(|(n, _)| n.eq_ignore_ascii_case(name)).map(|(_, v)| v.as_str())
}

/// Whether any `name` header lists `token` among its comma-separated values.
fn has_token(headers: &[(String, String)], name: &str, token: &str) -> bool {
    let mut values = headers.iter().filter(|(n, _)| n.eq_ignore_ascii_case(name));
    values.any(|(_, v)| v.split(',').any(|t| t.trim().eq_ignore_ascii_case(token)))
}

fn is_hop_by_hop(name: &str) -> bool {
    HOP_BY_HOP.iter().any(|h| name.eq_ignore_ascii_case(h))
}

fn no_body(status: u16) -> bool {
    matches!(status, 100..=199 | 204 | 304)
}

fn contains(haystack: &[u8], needle: &[u8]) -> bool {
    needle.is_empty() || haystack.windows(needle.len()).any(|w| w == needle)
}

fn invalid(message: &str) -> io::Error {
    io::Error::new(ErrorKind::InvalidData, message.to_owned())
}

#[cfg(test)]
mod tests {

    #[test]
    fn an_amz_date_reads_as_epoch_ms_and_a_skewed_one_matches() {
        assert_eq!(amz_date_ms("20130524T000000Z"), Some(1_369_353_600_000));
        assert_eq!(amz_date_ms("2013-05-24T00:00:00Z"), None);
        assert_eq!(amz_date_ms("20130524T000000"), None);
        let skewed = Match::SignedOutside(Duration::from_secs(300));
        assert!(skewed.matches("POST", None, b"", Some(epoch_ms() + 20 * 60_000)));
        assert!(skewed.matches("POST", None, b"", Some(epoch_ms() - 20 * 60_000)));
        assert!(!skewed.matches("POST", None, b"", Some(epoch_ms())));
        assert!(!skewed.matches("POST", None, b"", None), "an unsigned request is not skewed");
    }

    use super::*;

    /// An exchange named `operation` that arrived at `arrived_ms` and was answered at `replied_ms`.
    fn exchange(t0: Instant, operation: &str, arrived_ms: u64, replied_ms: u64) -> Exchange {
        Exchange {
            method: "POST".into(),
            path: "/".into(),
            operation: Some(operation.into()),
            fault: None,
            upstream_status: Some(200),
            upstream_took: None,
            at_ms: arrived_ms,
            arrived: t0 + Duration::from_millis(arrived_ms),
            added_latency: None,
            replied: Some(t0 + Duration::from_millis(replied_ms)),
        }
    }

    #[test]
    fn calls_side_by_side_count_once_and_calls_in_a_row_each() {
        let t0 = Instant::now();
        // A control read beside the acquire, then the commit, then the PUT.
        let side_by_side = [
            exchange(t0, "GetItem", 0, 20),
            exchange(t0, "Acquire", 1, 21),
            exchange(t0, "Commit", 22, 42),
            exchange(t0, "PUT", 43, 73),
        ];
        let names = |log: &[Exchange], chain: Vec<usize>| -> Vec<String> {
            chain.into_iter().map(|i| log[i].operation.clone().unwrap_or_default()).collect()
        };
        assert_eq!(waited_for(&side_by_side, 3).len(), 2);
        assert_eq!(names(&side_by_side, waited_for(&side_by_side, 3))[1], "Commit");
        // The control read first, then the acquire: one more round trip.
        let in_a_row = [
            exchange(t0, "GetItem", 0, 20),
            exchange(t0, "Acquire", 21, 41),
            exchange(t0, "Commit", 42, 62),
            exchange(t0, "PUT", 63, 93),
        ];
        assert_eq!(names(&in_a_row, waited_for(&in_a_row, 3)), ["GetItem", "Acquire", "Commit"]);
        // An exchange still unanswered when the target arrived is not waited for.
        let pending = [exchange(t0, "Mark", 0, 500), exchange(t0, "PUT", 10, 40)];
        assert_eq!(waited_for(&pending, 1), Vec::<usize>::new());
    }
}
