//! A fault-injecting HTTP/1.1 proxy, for the tests and `make soak`. An AWS SDK client (or an HTTP client doing
//! presigned S3 PUTs) is pointed at the proxy's URL as its endpoint, and the proxy forwards each
//! request to the local AWS emulator unless a rule injected by the test matches it; then it
//! answers with an error, drops the connection, never answers, or lets the upstream apply the
//! request and loses, delays or replaces the reply. Tests use it to prove a handler survives wire
//! faults, including the ambiguous ones where a write applied but its reply never arrived.
//!
//! This file is the proxy's rules and log, what tests and the soak hold; its server, hyper's on a
//! thread of its own, is `fault_proxy/serve.rs`. Every request is read in full, logged, and
//! forwarded on a fresh upstream connection with `Connection: close`. When the last handle is
//! dropped the listener closes, idle and hung connections close, and a connection with a request
//! in flight closes once it is answered.

use std::fmt;
use std::net::{SocketAddr, TcpListener, ToSocketAddrs};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::time::{Duration, Instant};

use tokio::sync::watch;

mod serve;

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
    /// Any request with method POST (a Lambda Invoke, not the GET of a function's configuration
    /// that comes before it).
    Post,
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
            Self::Post => method == "POST",
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

/// A request's head as it arrived: its request line and its header lines, names in lower case,
/// a name's values in the order sent.
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
            stop: watch::Sender::new(false),
            injected: AtomicU64::new(0),
        });
        serve::spawn(listener, Arc::clone(&inner));
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
    /// True once the last handle is dropped: the server stops.
    stop: watch::Sender<bool>,
    /// Requests a rule was applied to, whatever the log mode.
    injected: AtomicU64,
}

/// Owned only by `FaultProxy` handles, so its drop marks the moment the last handle goes.
struct Stopper(Arc<Inner>);

impl Drop for Stopper {
    fn drop(&mut self) {
        self.0.stop.send_replace(true);
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

fn contains(haystack: &[u8], needle: &[u8]) -> bool {
    needle.is_empty() || haystack.windows(needle.len()).any(|w| w == needle)
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
