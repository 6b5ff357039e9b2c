//! The fault proxy's server: hyper's HTTP/1.1 server for its clients and hyper's client to the
//! upstream, on a thread of the proxy's own (a single-threaded tokio runtime), so a proxy
//! started outside a runtime, or beside a test that blocks its own, serves all the same.
//!
//! Every request is read whole (a request the server cannot read gets a 4xx, see
//! `http_server.rs`), logged, and forwarded on a fresh upstream connection with
//! `Connection: close`, so the proxy never tracks upstream connection state. What reaches the
//! upstream is what the client sent, but for the headers about one connection: the method, the
//! request target byte for byte, every end-to-end header with its value (`Host` and the
//! signature's headers among them, so a SigV4 signature still verifies: tried against moto with
//! its authentication on), and the body, with a `Content-Length` when the client framed one. The connection a fault closes is closed by
//! failing its service ([`Unanswered`]): hyper then drops it without a reply; a reset sets
//! `SO_LINGER` 0 first, on a second handle of the socket, so that close is an RST.

use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::thread;
use std::time::{Duration, Instant};

use http_body_util::{BodyExt, Full, Limited};
use hyper::body::{Bytes, Incoming};
use hyper::header::{self, HeaderMap, HeaderName};
use hyper::service::service_fn;
use hyper::{Method, Request, Response, StatusCode, Version};
use hyper_util::rt::TokioIo;
use socket2::{SockRef, Socket};
use tokio::net::{TcpListener, TcpStream};
use tokio::task::JoinSet;

use super::{Exchange, Fault, Inner, LogMode, Record, RequestHead, epoch_ms, lock};
use crate::http_server::{self, Body, Unanswered, read_body};

/// The largest body the proxy reads or relays; test uploads are far smaller than this.
const BODY_BYTES_MAX: usize = 256 << 20;
const CONNECT_TIMEOUT: Duration = Duration::from_secs(5);
/// A stuck upstream fails the request after this long instead of hanging the test forever.
const UPSTREAM_TIMEOUT: Duration = Duration::from_secs(30);
/// A `Hang` fault gives up after this long, so a client without a timeout cannot hang a test forever.
const HANG_LIMIT: Duration = Duration::from_secs(120);
/// Headers that describe one connection rather than the message, so they are never relayed.
const HOP_BY_HOP: [&str; 8] =
    ["connection", "keep-alive", "proxy-connection", "transfer-encoding", "expect", "te", "upgrade", "trailer"];

/// Serves `listener` on a thread of its own until the proxy stops (the last handle dropped):
/// then the listener closes, idle connections close, hung ones end without a reply, and one in
/// flight closes once answered. Panics if the thread or its runtime cannot be had, as a test
/// setup step should.
pub(super) fn spawn(listener: std::net::TcpListener, inner: Arc<Inner>) {
    let runtime = tokio::runtime::Builder::new_current_thread().enable_all().build().expect("FaultProxy runtime");
    let listener = {
        let _entered = runtime.enter();
        listener.set_nonblocking(true).expect("FaultProxy listener");
        TcpListener::from_std(listener).expect("FaultProxy listener")
    };
    thread::Builder::new()
        .name("fault-proxy".to_owned())
        .spawn(move || runtime.block_on(accept_loop(listener, inner)))
        .expect("FaultProxy thread");
}

async fn accept_loop(listener: TcpListener, inner: Arc<Inner>) {
    let mut stop = inner.stop.subscribe();
    let mut connections = JoinSet::new();
    loop {
        tokio::select! {
            _ = stop.wait_for(|stopped| *stopped) => break,
            accepted = listener.accept() => match accepted {
                Ok((stream, _)) => {
                    connections.spawn(serve_connection(Arc::clone(&inner), stream));
                }
                // Errors such as running out of descriptors are usually transient; back off briefly.
                Err(_) => tokio::time::sleep(Duration::from_millis(10)).await,
            },
            Some(_) = connections.join_next(), if !connections.is_empty() => {}
        }
    }
    // Dropping the listener refuses further connections; those open end as the proxy stops.
    drop(listener);
    while connections.join_next().await.is_some() {}
}

/// Serves requests on one client connection until it closes, errs, a fault ends it, or the
/// proxy has stopped.
async fn serve_connection(inner: Arc<Inner>, stream: TcpStream) {
    // A second handle on the socket, to make its close an abortive one (a reset).
    let Ok(socket) = SockRef::from(&stream).try_clone() else { return };
    let socket = Arc::new(socket);
    let mut stop = inner.stop.subscribe();
    let serving = Arc::clone(&inner);
    let service = service_fn(move |request| {
        let (inner, socket) = (Arc::clone(&serving), Arc::clone(&socket));
        async move { inner.handle(request, &socket).await }
    });
    let connection = http_server::http1().serve_connection(TokioIo::new(stream), service);
    tokio::pin!(connection);
    tokio::select! {
        _ = connection.as_mut() => return,
        _ = stop.wait_for(|stopped| *stopped) => connection.as_mut().graceful_shutdown(),
    }
    // Errors just end the connection, which is all a proxy can do about them.
    let _ = connection.await;
}

/// An upstream's reply, read whole.
type Upstream = Response<Bytes>;

/// What becomes of a request the proxy has read.
enum Outcome {
    Reply(Response<Body>),
    /// The connection is reset without a reply.
    Reset,
    /// The connection is held without a reply.
    Hang,
}

impl Inner {
    /// Reads the request and answers it; a closing fault ends the connection without a reply
    /// ([`Unanswered`]). What follows the read goes on in a task of its own, as a request that
    /// reached a server goes on when its client leaves: a client that gives up does not take
    /// back a request being forwarded or waiting out its latency.
    async fn handle(
        self: Arc<Self>,
        request: Request<Incoming>,
        socket: &Socket,
    ) -> Result<Response<Body>, Unanswered> {
        let (head, body) = request.into_parts();
        let body = match read_body(body, BODY_BYTES_MAX).await {
            Ok(body) => body,
            Err(refusal) => return Ok(refusal),
        };
        match tokio::spawn(Arc::clone(&self).answer(head, body)).await {
            Ok(Outcome::Reply(reply)) => Ok(reply),
            Ok(Outcome::Reset) => {
                // A zero linger makes the close an abortive one: an RST, not a FIN.
                let _ = socket.set_linger(Some(Duration::ZERO));
                Err(Unanswered)
            }
            Ok(Outcome::Hang) => {
                self.hang().await;
                Err(Unanswered)
            }
            // The task panicked, a programmer's error: the client learns the proxy failed.
            Err(_) => Ok(status_only(StatusCode::BAD_GATEWAY)),
        }
    }

    /// Logs the request, applies the first matching rule, and makes the reply.
    async fn answer(self: Arc<Self>, head: hyper::http::request::Parts, body: Bytes) -> Outcome {
        let headers = &head.headers;
        let operation = text(headers, "x-amz-target").map(|t| t.rsplit_once('.').map_or(t, |(_, op)| op));
        let signed_ms = text(headers, "x-amz-date").and_then(super::amz_date_ms);
        let method = head.method.as_str();
        let arrived = Instant::now();
        let latency = lock(&self.latencies)
            .iter()
            .find(|(matcher, _)| matcher.matches(method, operation, &body, signed_ms))
            .map(|(_, latency)| *latency);
        let (index, fault) = {
            // The rule lock is held while logging so log order matches the order rules were used in.
            let mut rules = lock(&self.rules);
            let fault = rules.iter().position(|r| r.matcher.matches(method, operation, &body, signed_ms)).map(|i| {
                self.injected.fetch_add(1, Ordering::SeqCst);
                rules[i].left -= 1;
                if rules[i].left == 0 { rules.remove(i).fault } else { rules[i].fault.clone() }
            });
            let exchange = Exchange {
                method: method.to_owned(),
                path: head.uri.path().to_owned(),
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
                    let logged_body = if full { body.to_vec() } else { Vec::new() };
                    log.push(Record { exchange, body: logged_body, head: full.then(|| request_head(&head)) });
                    Some(log.len() - 1)
                }
            };
            (index, fault)
        };
        if let Some(latency) = latency {
            tokio::time::sleep(latency).await;
        }
        let forwarding = Instant::now();
        let upstream = match fault {
            Some(Fault::Respond { .. } | Fault::Reset | Fault::Hang) => None,
            _ => Some(self.forward(&head, body).await),
        };
        if let (Some(Some(response)), Some(index)) = (&upstream, index) {
            let exchange = &mut lock(&self.log)[index].exchange;
            exchange.upstream_status = Some(response.status().as_u16());
            exchange.upstream_took = Some(forwarding.elapsed());
        }
        let reply = match fault {
            Some(
                Fault::Respond { status, content_type, body }
                | Fault::ForwardThenRespond { status, content_type, body },
            ) => injected(status, &content_type, body),
            Some(Fault::Reset | Fault::ForwardThenReset) => return Outcome::Reset,
            Some(Fault::Hang) => return Outcome::Hang,
            Some(Fault::ForwardThenDelay(_)) | None => {
                if let Some(Fault::ForwardThenDelay(delay)) = fault {
                    tokio::time::sleep(delay).await;
                }
                // The client learns that the upstream failed rather than seeing a vanished reply.
                match upstream.flatten() {
                    Some(upstream) => relay(upstream, &head.method),
                    None => status_only(StatusCode::BAD_GATEWAY),
                }
            }
        };
        if let Some(index) = index {
            lock(&self.log)[index].exchange.replied = Some(Instant::now());
        }
        Outcome::Reply(reply)
    }

    /// Holds a connection without answering until the proxy stops or time is up; hyper drops
    /// this wait, and the connection, when the client closes it first.
    async fn hang(&self) {
        let mut stop = self.stop.subscribe();
        let _ = tokio::time::timeout(HANG_LIMIT, stop.wait_for(|stopped| *stopped)).await;
    }

    /// Sends the request upstream on a fresh connection and reads the whole reply; None when
    /// no reply came whole within [`UPSTREAM_TIMEOUT`].
    async fn forward(&self, head: &hyper::http::request::Parts, body: Bytes) -> Option<Upstream> {
        let forwarding = async {
            let upstream = connect(&self.upstream).await?;
            let (mut sender, connection) = hyper::client::conn::http1::handshake(TokioIo::new(upstream)).await.ok()?;
            let request = upstream_request(head, body)?;
            let exchange = async {
                let response = sender.send_request(request).await.ok()?;
                let (parts, body) = response.into_parts();
                let body = Limited::new(body, BODY_BYTES_MAX).collect().await.ok()?.to_bytes();
                Some(Response::from_parts(parts, body))
            };
            tokio::pin!(connection, exchange);
            // The connection is driven while the exchange goes on; once it ends (the upstream
            // closes after its reply), what it delivered is read to the end.
            tokio::select! {
                biased;
                replied = &mut exchange => return replied,
                _ = &mut connection => {}
            }
            exchange.await
        };
        tokio::time::timeout(UPSTREAM_TIMEOUT, forwarding).await.ok().flatten()
    }
}

/// A connection to the first upstream address that takes one.
async fn connect(upstream: &[SocketAddr]) -> Option<TcpStream> {
    for address in upstream {
        if let Ok(Ok(stream)) = tokio::time::timeout(CONNECT_TIMEOUT, TcpStream::connect(address)).await {
            return Some(stream);
        }
    }
    None
}

/// The request to forward: the client's, but for its headers about one connection, with its
/// body's length when the client framed one, and `Connection: close`.
fn upstream_request(head: &hyper::http::request::Parts, body: Bytes) -> Option<Request<Full<Bytes>>> {
    let mut request = Request::builder().method(head.method.clone()).uri(head.uri.clone()).version(Version::HTTP_11);
    for (name, value) in &head.headers {
        // Host and everything else end-to-end pass unchanged: moto routes and signatures use them.
        let listed = has_token(&head.headers, header::CONNECTION, name.as_str());
        if !is_hop_by_hop(name) && name != header::CONTENT_LENGTH && !listed {
            request = request.header(name, value);
        }
    }
    let framed =
        head.headers.contains_key(header::CONTENT_LENGTH) || head.headers.contains_key(header::TRANSFER_ENCODING);
    if framed || !body.is_empty() {
        request = request.header(header::CONTENT_LENGTH, body.len());
    }
    request.header(header::CONNECTION, "close").body(Full::new(body)).ok()
}

/// The upstream's reply, its headers about one connection removed and its body re-framed by
/// length. A bodiless reply to a HEAD keeps the upstream's Content-Length: it is the size of the
/// resource, which S3 HeadObject callers read.
fn relay(upstream: Upstream, method: &Method) -> Response<Body> {
    let (mut parts, body) = upstream.into_parts();
    let head = method == Method::HEAD;
    let bodiless = head || no_body(parts.status);
    let keep = |name: &HeaderName| !is_hop_by_hop(name) && (head || name != header::CONTENT_LENGTH);
    let mut kept = HeaderMap::new();
    for (name, value) in &parts.headers {
        if keep(name) {
            kept.append(name.clone(), value.clone());
        }
    }
    parts.headers = kept;
    Response::from_parts(parts, if bodiless { Full::default() } else { Full::new(body) })
}

/// A reply a fault makes up: `status` (500 if it is not one), "Injected", a `Date` as every AWS
/// answer carries one (the SDK learns its clock's skew from it).
fn injected(status: u16, content_type: &str, body: String) -> Response<Body> {
    let mut reply = status_only(StatusCode::from_u16(status).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR));
    *reply.body_mut() = Full::new(Bytes::from(body));
    reply.extensions_mut().insert(hyper::ext::ReasonPhrase::from_static(b"Injected"));
    let headers = reply.headers_mut();
    if let Ok(content_type) = content_type.parse() {
        headers.insert(header::CONTENT_TYPE, content_type);
    }
    if let Ok(date) = http_date_now().parse() {
        headers.insert(header::DATE, date);
    }
    reply
}

fn status_only(status: StatusCode) -> Response<Body> {
    let mut reply = Response::new(Full::default());
    *reply.status_mut() = status;
    reply
}

/// Now as an HTTP `Date` header.
fn http_date_now() -> String {
    aws_sdk_dynamodb::primitives::DateTime::from(std::time::SystemTime::now())
        .fmt(aws_sdk_dynamodb::primitives::DateTimeFormat::HttpDate)
        .unwrap_or_default()
}

/// A request's head as logged: its request line and its headers (names in lower case).
fn request_head(head: &hyper::http::request::Parts) -> RequestHead {
    let line = format!("{} {} {:?}", head.method, head.uri, head.version);
    let headers = head
        .headers
        .iter()
        .map(|(name, value)| (name.as_str().to_owned(), String::from_utf8_lossy(value.as_bytes()).into_owned()))
        .collect();
    RequestHead { line, headers }
}

/// A header's value, when it is text.
fn text<'a>(headers: &'a HeaderMap, name: &str) -> Option<&'a str> {
    headers.get(name).and_then(|value| value.to_str().ok())
}

/// Whether any `name` header lists `token` among its comma-separated values.
fn has_token(headers: &HeaderMap, name: HeaderName, token: &str) -> bool {
    let mut values = headers.get_all(name).into_iter().filter_map(|value| value.to_str().ok());
    values.any(|value| value.split(',').any(|t| t.trim().eq_ignore_ascii_case(token)))
}

fn is_hop_by_hop(name: &HeaderName) -> bool {
    HOP_BY_HOP.contains(&name.as_str())
}

fn no_body(status: StatusCode) -> bool {
    status.is_informational() || status == StatusCode::NO_CONTENT || status == StatusCode::NOT_MODIFIED
}
