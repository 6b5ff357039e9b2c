//! The HTTP/1.1 client of the lease store's wire and of the ResponseURL PUT: keep-alive
//! connections, a request and its answer written and read on the caller's own task.
//!
//! A warm request makes four calls, three to the lease table and the PUT of its answer; each is
//! a small request answered by a small body. With hyper-util's pooled client, each exchange went through a
//! connection task of its own. That meant a channel to the task, a wake-up of the task, a
//! wake-up of the caller, and a header map built for headers nobody reads. The profile of a warm
//! batch put hyper's share at about a sixth of the function's CPU (benches/profile.md). This
//! client writes the request and reads the answer in the calling future, on a connection it
//! takes from its pool and puts back when the answer was read whole:
//!
//! - **One write per request**: the head and the body, in one buffer (one TLS record).
//! - **The answer, framed as HTTP/1.1 frames it**: `Content-Length`, chunked, or up to the
//!   connection's close. 1xx heads are skipped. No body is read past the answer limit.
//! - **A connection is reused only when that is safe**: HTTP/1.1, no `Connection: close`, a body
//!   framed by its length or its chunks and read to its end, no byte beyond it. A connection that
//!   waited idle in the pool is checked before reuse: if the server closed it or sent anything,
//!   it is dropped. A connection idle for longer than [`IDLE`] is dropped too (hyper's pool, as
//!   configured in `https.rs`, kept them for as long).
//! - **A failure is the caller's to classify**: nothing is retried here. A request may have
//!   reached the server before its connection failed, so the wire reads any failure as an
//!   unknown outcome, as it read hyper's.
//! - **Nothing is logged**: a request holds the stored response and its signature.

use std::io;
use std::net::SocketAddr;
use std::pin::Pin;
use std::sync::{Arc, Mutex, PoisonError};
use std::task::{Context, Poll, Waker};
use std::time::{Duration, Instant};

use rustls::ClientConfig;
use rustls::pki_types::ServerName;
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt, ReadBuf};
use tokio::net::TcpStream;
use tokio_rustls::TlsConnector;
use tokio_rustls::client::TlsStream;

/// How long a connection may wait idle in the pool before it is dropped instead of reused.
pub(crate) const IDLE: Duration = Duration::from_secs(90);

/// The most idle connections kept: a batch has ten records, each with one call in flight.
const IDLE_CONNECTIONS_MAX: usize = 32;

/// The most header lines an answer's head may have.
const HEADERS_MAX: usize = 64;

/// The longest head an answer may have, in bytes.
const HEAD_BYTES_MAX: usize = 64 << 10;

/// Where the client connects: a scheme, a host and a port.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Origin {
    /// `https` (else plain HTTP, for local endpoints).
    pub tls: bool,
    /// The host name or IP literal, without brackets or port.
    pub host: String,
    pub port: u16,
}

impl Origin {
    /// The origin of `uri`, which must be absolute (`https://host[:port]/…` or `http://…`).
    pub fn of(uri: &http::Uri) -> Result<Self, String> {
        let tls = match uri.scheme_str() {
            Some("https") => true,
            Some("http") => false,
            _ => return Err("the endpoint is neither http:// nor https://".to_owned()),
        };
        let host = uri.host().ok_or_else(|| "the endpoint has no host".to_owned())?;
        let host = host.trim_start_matches('[').trim_end_matches(']').to_owned();
        let port = uri.port_u16().unwrap_or(if tls { 443 } else { 80 });
        Ok(Self { tls, host, port })
    }
}

/// A whole HTTP/1.1 request as the client sends it: the request line (`method`, then `target`,
/// the path and query), each of `headers` as given (their values are the callers' `http` types',
/// which hold no CR or LF), the body's `content-length`, then `body`. The wire's POSTs and the
/// ResponseURL PUT are written here, one buffer each, so that they go out as one write.
pub(crate) fn request<'a>(
    method: &str,
    target: &str,
    headers: impl IntoIterator<Item = (&'a str, &'a [u8])>,
    body: &[u8],
) -> Vec<u8> {
    let mut bytes = Vec::with_capacity(512 + target.len() + body.len());
    for part in [method, " ", target, " HTTP/1.1\r\n"] {
        bytes.extend_from_slice(part.as_bytes());
    }
    for (name, value) in headers {
        bytes.extend_from_slice(name.as_bytes());
        bytes.extend_from_slice(b": ");
        bytes.extend_from_slice(value);
        bytes.extend_from_slice(b"\r\n");
    }
    bytes.extend_from_slice(format!("content-length: {}\r\n\r\n", body.len()).as_bytes());
    bytes.extend_from_slice(body);
    bytes
}

/// An answer read whole: its status, its `x-amzn-ErrorType` header (the one header the wire
/// reads), and its body.
#[derive(Debug)]
pub(crate) struct Answer {
    pub status: u16,
    pub error_type: Option<String>,
    pub body: Vec<u8>,
}

/// Why an exchange failed, and where: before the request was written whole, or after.
#[derive(Debug, thiserror::Error)]
pub(crate) enum ExchangeError {
    #[error("the request could not be sent: {0}")]
    Send(String),
    #[error("the response could not be read: {0}")]
    Read(String),
}

/// The pooled client of one TLS configuration.
pub(crate) struct Client {
    tls: TlsConnector,
    connect_timeout: Duration,
    idle: Mutex<Vec<Idle>>,
}

struct Idle {
    origin: Origin,
    connection: Connection,
    since: Instant,
}

impl std::fmt::Debug for Client {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let idle = self.idle.lock().unwrap_or_else(PoisonError::into_inner).len();
        f.debug_struct("h1::Client").field("connect_timeout", &self.connect_timeout).field("idle", &idle).finish()
    }
}

impl Client {
    /// A client on `tls` (offered as `http/1.1` by ALPN, as hyper-rustls offered it) whose
    /// connects give up after `connect_timeout`.
    pub fn new(tls: &ClientConfig, connect_timeout: Duration) -> Self {
        let mut tls = tls.clone();
        tls.alpn_protocols = vec![b"http/1.1".to_vec()];
        Self { tls: TlsConnector::from(Arc::new(tls)), connect_timeout, idle: Mutex::new(Vec::new()) }
    }

    /// Sends `request` (a whole HTTP/1.1 request: head and body) to `origin` and reads its
    /// answer, of at most `limit` body bytes.
    pub async fn exchange(&self, origin: &Origin, request: &[u8], limit: usize) -> Result<Answer, ExchangeError> {
        let mut connection = match self.checkout(origin) {
            Some(connection) => connection,
            None => self.connect(origin).await.map_err(|error| ExchangeError::Send(error.to_string()))?,
        };
        connection.stream.write_all(request).await.map_err(|error| ExchangeError::Send(error.to_string()))?;
        connection.stream.flush().await.map_err(|error| ExchangeError::Send(error.to_string()))?;
        let (answer, reusable) =
            connection.read_answer(limit).await.map_err(|error| ExchangeError::Read(error.to_string()))?;
        if reusable && connection.is_clean() {
            self.checkin(origin, connection);
        }
        Ok(answer)
    }

    /// How many connections wait idle in the pool (for the tests).
    #[cfg(test)]
    pub fn idle_connections(&self) -> usize {
        self.idle.lock().unwrap_or_else(PoisonError::into_inner).len()
    }

    /// The most recently used idle connection to `origin` that is still open; idle connections
    /// that are too old or that the server closed are dropped on the way.
    fn checkout(&self, origin: &Origin) -> Option<Connection> {
        let mut idle = self.idle.lock().unwrap_or_else(PoisonError::into_inner);
        let now = Instant::now();
        idle.retain(|entry| now.duration_since(entry.since) < IDLE);
        while let Some(position) = idle.iter().rposition(|entry| &entry.origin == origin) {
            let entry = idle.swap_remove(position);
            if entry.connection.is_open_and_quiet() {
                return Some(entry.connection);
            }
        }
        None
    }

    fn checkin(&self, origin: &Origin, connection: Connection) {
        let mut idle = self.idle.lock().unwrap_or_else(PoisonError::into_inner);
        if idle.len() >= IDLE_CONNECTIONS_MAX {
            idle.remove(0);
        }
        idle.push(Idle { origin: origin.clone(), connection, since: Instant::now() });
    }

    /// A new connection to `origin`: TCP (no Nagle) to the first of its addresses that answers,
    /// then TLS if the origin is `https`, all within the connect timeout.
    async fn connect(&self, origin: &Origin) -> io::Result<Connection> {
        let connect = async {
            let addresses: Vec<SocketAddr> =
                tokio::net::lookup_host((origin.host.as_str(), origin.port)).await?.collect();
            let mut last = io::Error::new(io::ErrorKind::NotFound, format!("{} has no address", origin.host));
            let mut tcp = None;
            for address in addresses {
                match TcpStream::connect(address).await {
                    Ok(stream) => {
                        tcp = Some(stream);
                        break;
                    }
                    Err(error) => last = error,
                }
            }
            let tcp = tcp.ok_or(last)?;
            tcp.set_nodelay(true)?;
            let stream = if origin.tls {
                let name = ServerName::try_from(origin.host.clone())
                    .map_err(|error| io::Error::new(io::ErrorKind::InvalidInput, error))?;
                Stream::Tls(Box::new(self.tls.connect(name, tcp).await?))
            } else {
                Stream::Plain(tcp)
            };
            Ok(Connection { stream, buffer: Vec::with_capacity(8 << 10) })
        };
        match tokio::time::timeout(self.connect_timeout, connect).await {
            Ok(connection) => connection,
            Err(_) => Err(io::Error::new(
                io::ErrorKind::TimedOut,
                format!("no connection to {}:{} within {:?}", origin.host, origin.port, self.connect_timeout),
            )),
        }
    }
}

/// A TCP stream, with TLS or without.
enum Stream {
    Plain(TcpStream),
    Tls(Box<TlsStream<TcpStream>>),
}

impl Stream {
    fn tcp(&self) -> &TcpStream {
        match self {
            Self::Plain(tcp) => tcp,
            Self::Tls(tls) => tls.get_ref().0,
        }
    }
}

impl AsyncRead for Stream {
    fn poll_read(self: Pin<&mut Self>, cx: &mut Context<'_>, buf: &mut ReadBuf<'_>) -> Poll<io::Result<()>> {
        match self.get_mut() {
            Self::Plain(tcp) => Pin::new(tcp).poll_read(cx, buf),
            Self::Tls(tls) => Pin::new(tls.as_mut()).poll_read(cx, buf),
        }
    }
}

impl AsyncWrite for Stream {
    fn poll_write(self: Pin<&mut Self>, cx: &mut Context<'_>, buf: &[u8]) -> Poll<io::Result<usize>> {
        match self.get_mut() {
            Self::Plain(tcp) => Pin::new(tcp).poll_write(cx, buf),
            Self::Tls(tls) => Pin::new(tls.as_mut()).poll_write(cx, buf),
        }
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        match self.get_mut() {
            Self::Plain(tcp) => Pin::new(tcp).poll_flush(cx),
            Self::Tls(tls) => Pin::new(tls.as_mut()).poll_flush(cx),
        }
    }

    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        match self.get_mut() {
            Self::Plain(tcp) => Pin::new(tcp).poll_shutdown(cx),
            Self::Tls(tls) => Pin::new(tls.as_mut()).poll_shutdown(cx),
        }
    }
}

/// One connection and the bytes read from it that are not yet consumed.
struct Connection {
    stream: Stream,
    buffer: Vec<u8>,
}

/// How an answer's body is framed.
enum Framing {
    Length(usize),
    Chunked,
    UntilClose,
}

impl Connection {
    /// Whether an idle connection can carry another request: the server has neither closed it
    /// nor sent anything (a TLS alert, a stray answer) while it waited.
    fn is_open_and_quiet(&self) -> bool {
        if !self.buffer.is_empty() {
            return false;
        }
        let mut byte = [0u8; 1];
        let mut peeked = ReadBuf::new(&mut byte);
        let mut cx = Context::from_waker(Waker::noop());
        matches!(self.stream.tcp().poll_peek(&mut cx, &mut peeked), Poll::Pending)
    }

    /// Whether a connection whose answer was just read whole holds nothing more: no byte read
    /// past the answer, and, under TLS, no record received and not yet read, and no close from
    /// the server. Anything there belongs to no request: the connection is out of step.
    fn is_clean(&mut self) -> bool {
        if !self.buffer.is_empty() {
            return false;
        }
        match &mut self.stream {
            Stream::Plain(_) => true,
            Stream::Tls(tls) => match tls.get_mut().1.process_new_packets() {
                Ok(state) => state.plaintext_bytes_to_read() == 0 && !state.peer_has_closed(),
                Err(_) => false,
            },
        }
    }

    /// Reads more bytes into the buffer; `Ok(false)` at the end of the stream.
    async fn fill(&mut self) -> io::Result<bool> {
        if self.buffer.capacity() - self.buffer.len() < 4096 {
            self.buffer.reserve(8 << 10);
        }
        let read = self.stream.read_buf(&mut self.buffer).await?;
        Ok(read > 0)
    }

    /// The next answer, of at most `limit` body bytes, and whether the connection may be reused.
    async fn read_answer(&mut self, limit: usize) -> io::Result<(Answer, bool)> {
        let (status, error_type, framing, mut reusable) = loop {
            match parse_head(&self.buffer)? {
                Some((consumed, head)) => {
                    self.buffer.drain(..consumed);
                    if let Some(head) = head {
                        break head;
                    }
                    // A 1xx head: the answer follows it.
                }
                None if self.buffer.len() > HEAD_BYTES_MAX => return Err(invalid("the answer's head is too long")),
                None => {
                    if !self.fill().await? {
                        return Err(io::Error::new(
                            io::ErrorKind::UnexpectedEof,
                            "the connection closed before an answer",
                        ));
                    }
                }
            }
        };
        let body = match framing {
            Framing::Length(length) => {
                if length > limit {
                    return Err(invalid(format!("the answer's body is longer than {limit} bytes")));
                }
                while self.buffer.len() < length {
                    if !self.fill().await? {
                        return Err(io::Error::new(
                            io::ErrorKind::UnexpectedEof,
                            "the connection closed within the answer",
                        ));
                    }
                }
                self.buffer.drain(..length).collect()
            }
            Framing::Chunked => self.read_chunked(limit).await?,
            Framing::UntilClose => {
                reusable = false;
                while self.fill().await? {
                    if self.buffer.len() > limit {
                        return Err(invalid(format!("the answer's body is longer than {limit} bytes")));
                    }
                }
                std::mem::take(&mut self.buffer)
            }
        };
        // Bytes beyond the answer were not asked for: the connection is out of step.
        let reusable = reusable && self.buffer.is_empty();
        Ok((Answer { status, error_type, body }, reusable))
    }

    /// A chunked body, its trailers read and dropped.
    async fn read_chunked(&mut self, limit: usize) -> io::Result<Vec<u8>> {
        let mut body = Vec::new();
        loop {
            let (consumed, size) = loop {
                match httparse::parse_chunk_size(&self.buffer) {
                    Ok(httparse::Status::Complete((consumed, size))) => break (consumed, size),
                    Ok(httparse::Status::Partial) if self.buffer.len() > HEAD_BYTES_MAX => {
                        return Err(invalid("a chunk's size line is too long"));
                    }
                    Ok(httparse::Status::Partial) => self.fill_or_eof().await?,
                    Err(_) => return Err(invalid("a chunk's size is not valid")),
                }
            };
            self.buffer.drain(..consumed);
            let size = usize::try_from(size).map_err(|_| invalid("a chunk is too long"))?;
            if size == 0 {
                // Trailers, if any, then the empty line.
                loop {
                    match self.buffer.windows(2).position(|pair| pair == b"\r\n") {
                        Some(0) => {
                            self.buffer.drain(..2);
                            return Ok(body);
                        }
                        Some(end) => drop(self.buffer.drain(..end + 2)),
                        None if self.buffer.len() > HEAD_BYTES_MAX => return Err(invalid("the trailers are too long")),
                        None => self.fill_or_eof().await?,
                    }
                }
            }
            if body.len() + size > limit {
                return Err(invalid(format!("the answer's body is longer than {limit} bytes")));
            }
            while self.buffer.len() < size + 2 {
                self.fill_or_eof().await?;
            }
            if &self.buffer[size..size + 2] != b"\r\n" {
                return Err(invalid("a chunk does not end its line"));
            }
            body.extend_from_slice(&self.buffer[..size]);
            self.buffer.drain(..size + 2);
        }
    }

    async fn fill_or_eof(&mut self) -> io::Result<()> {
        if self.fill().await? {
            Ok(())
        } else {
            Err(io::Error::new(io::ErrorKind::UnexpectedEof, "the connection closed within the answer"))
        }
    }
}

/// A final head: its status, `x-amzn-ErrorType`, the body's framing, and whether the head
/// allows the connection's reuse.
type Head = (u16, Option<String>, Framing, bool);

/// The head at the start of `bytes`: `None` while it is incomplete, else the bytes it took and
/// the head (`None` for a 1xx head, which an answer may follow).
fn parse_head(bytes: &[u8]) -> io::Result<Option<(usize, Option<Head>)>> {
    let mut headers = [httparse::EMPTY_HEADER; HEADERS_MAX];
    let mut response = httparse::Response::new(&mut headers);
    let consumed = match response.parse(bytes) {
        Ok(httparse::Status::Complete(consumed)) => consumed,
        Ok(httparse::Status::Partial) => return Ok(None),
        Err(error) => return Err(invalid(format!("the answer is not HTTP/1.1: {error}"))),
    };
    let status = response.code.unwrap_or_default();
    if (100..200).contains(&status) {
        if status == 101 {
            return Err(invalid("the server switched protocols"));
        }
        return Ok(Some((consumed, None)));
    }
    let mut reusable = response.version == Some(1);
    let (mut length, mut chunked, mut error_type) = (None, false, None);
    for header in response.headers.iter() {
        let value = std::str::from_utf8(header.value).map_err(|_| invalid("a header is not text"))?.trim();
        if header.name.eq_ignore_ascii_case("content-length") {
            let parsed = Some(value)
                .filter(|value| !value.is_empty() && value.bytes().all(|byte| byte.is_ascii_digit()))
                .and_then(|value| value.parse::<usize>().ok())
                .ok_or_else(|| invalid("the answer's Content-Length is not a number"))?;
            if length.is_some_and(|known| known != parsed) {
                return Err(invalid("the answer has two different Content-Lengths"));
            }
            length = Some(parsed);
        } else if header.name.eq_ignore_ascii_case("transfer-encoding") {
            let last = value.rsplit(',').next().unwrap_or_default().trim();
            if !last.eq_ignore_ascii_case("chunked") {
                return Err(invalid("the answer's Transfer-Encoding is not chunked"));
            }
            chunked = true;
        } else if header.name.eq_ignore_ascii_case("connection") {
            if value.split(',').any(|token| token.trim().eq_ignore_ascii_case("close")) {
                reusable = false;
            }
        } else if header.name.eq_ignore_ascii_case("x-amzn-errortype") {
            error_type = Some(value.to_owned());
        }
    }
    let framing = if status == 204 || status == 304 {
        Framing::Length(0)
    } else if chunked {
        // RFC 9112 §6.3: Transfer-Encoding wins over Content-Length, and such an answer is not
        // to be trusted with the connection afterwards.
        if length.is_some() {
            reusable = false;
        }
        Framing::Chunked
    } else {
        length.map_or(Framing::UntilClose, Framing::Length)
    };
    Ok(Some((consumed, Some((status, error_type, framing, reusable)))))
}

fn invalid(message: impl Into<String>) -> io::Error {
    io::Error::new(io::ErrorKind::InvalidData, message.into())
}

/// Waits until `stream` is readable (for the tests: a closed idle connection is seen).
#[cfg(test)]
async fn readable(stream: &TcpStream) {
    let _ = std::future::poll_fn(|cx| stream.poll_read_ready(cx)).await;
}

#[cfg(test)]
mod tests {
    use std::io::{BufRead, BufReader, Read, Write};
    use std::net::TcpListener;
    use std::sync::atomic::{AtomicUsize, Ordering};

    use super::*;

    /// A loopback server that answers each request with the next of `answers` (raw bytes), on
    /// the connection it came on; after its last answer on a connection, `then_close` closes it.
    /// It counts the connections it accepted.
    struct Server {
        origin: Origin,
        accepted: Arc<AtomicUsize>,
    }

    impl Server {
        fn start(answers: Vec<&'static str>, then_close: bool) -> Self {
            let listener = TcpListener::bind("127.0.0.1:0").expect("bind");
            let port = listener.local_addr().expect("address").port();
            let accepted = Arc::new(AtomicUsize::new(0));
            let count = Arc::clone(&accepted);
            std::thread::spawn(move || {
                let mut answers = answers.into_iter();
                for stream in listener.incoming() {
                    let Ok(mut stream) = stream else { return };
                    count.fetch_add(1, Ordering::SeqCst);
                    let mut reader = BufReader::new(stream.try_clone().expect("clone"));
                    loop {
                        let mut length = 0;
                        let mut any = false;
                        loop {
                            let mut line = String::new();
                            if reader.read_line(&mut line).unwrap_or(0) == 0 {
                                break;
                            }
                            any = true;
                            let line = line.trim_end();
                            if line.is_empty() {
                                break;
                            }
                            if let Some(value) = line.to_ascii_lowercase().strip_prefix("content-length:") {
                                length = value.trim().parse().unwrap_or(0);
                            }
                        }
                        if !any {
                            break;
                        }
                        let mut body = vec![0; length];
                        if reader.read_exact(&mut body).is_err() {
                            break;
                        }
                        let Some(answer) = answers.next() else { return };
                        let _ = stream.write_all(answer.as_bytes());
                        if then_close {
                            break;
                        }
                    }
                }
            });
            Self { origin: Origin { tls: false, host: "127.0.0.1".into(), port }, accepted }
        }

        fn accepted(&self) -> usize {
            self.accepted.load(Ordering::SeqCst)
        }
    }

    const REQUEST: &[u8] = b"POST / HTTP/1.1\r\nhost: x\r\ncontent-length: 2\r\n\r\n{}";

    fn client() -> Client {
        Client::new(&crate::adapters::https::client_config().expect("tls"), Duration::from_secs(2))
    }

    #[tokio::test]
    async fn a_connection_carries_one_request_after_another() {
        let ok = "HTTP/1.1 200 OK\r\ncontent-length: 2\r\n\r\n{}";
        let server = Server::start(vec![ok, ok, ok], false);
        let client = client();
        for _ in 0..3 {
            let answer = client.exchange(&server.origin, REQUEST, 1024).await.expect("answer");
            assert_eq!((answer.status, answer.body.as_slice()), (200, b"{}".as_slice()));
        }
        assert_eq!(server.accepted(), 1);
        assert_eq!(client.idle_connections(), 1);
    }

    #[tokio::test]
    async fn a_closing_answer_is_not_followed_on_its_connection() {
        let close = "HTTP/1.1 400 Bad\r\ncontent-length: 2\r\nconnection: close\r\nx-amzn-ErrorType: Throttling:http://x\r\n\r\n{}";
        let server = Server::start(vec![close, close], true);
        let client = client();
        for _ in 0..2 {
            let answer = client.exchange(&server.origin, REQUEST, 1024).await.expect("answer");
            assert_eq!(answer.status, 400);
            assert_eq!(answer.error_type.as_deref(), Some("Throttling:http://x"));
        }
        assert_eq!(server.accepted(), 2);
        assert_eq!(client.idle_connections(), 0);
    }

    #[tokio::test]
    async fn bytes_after_an_answer_put_its_connection_out_of_use() {
        // Two answers to one request: the second belongs to no request and must never be read
        // as the answer to the next one.
        let doubled =
            "HTTP/1.1 200 OK\r\ncontent-length: 2\r\n\r\n{}HTTP/1.1 200 OK\r\ncontent-length: 7\r\n\r\n{\"a\":1}";
        let ok = "HTTP/1.1 200 OK\r\ncontent-length: 2\r\n\r\n{}";
        let server = Server::start(vec![doubled, ok], false);
        let client = client();
        assert_eq!(client.exchange(&server.origin, REQUEST, 1024).await.expect("first").body, b"{}");
        let second = client.exchange(&server.origin, REQUEST, 1024).await.expect("second");
        assert_eq!(second.body, b"{}", "the stray answer was taken for the second request's");
        assert_eq!(server.accepted(), 2);
    }

    #[tokio::test]
    async fn a_connection_the_server_closed_while_idle_is_not_reused() {
        // The server answers once per connection and closes, without saying so in the head.
        let ok = "HTTP/1.1 200 OK\r\ncontent-length: 2\r\n\r\n{}";
        let server = Server::start(vec![ok, ok], true);
        let client = client();
        client.exchange(&server.origin, REQUEST, 1024).await.expect("first");
        assert_eq!(client.idle_connections(), 1);
        // Wait for the close to reach the idle connection; the checkout must see it.
        let entry = client.idle.lock().expect("idle").pop().expect("one idle connection");
        tokio::time::timeout(Duration::from_secs(2), readable(entry.connection.stream.tcp()))
            .await
            .expect("the close arrives");
        client.idle.lock().expect("idle").push(entry);
        let answer = client.exchange(&server.origin, REQUEST, 1024).await.expect("second, on a new connection");
        assert_eq!(answer.status, 200);
        assert_eq!(server.accepted(), 2);
    }

    #[tokio::test]
    async fn chunked_and_close_delimited_bodies_are_read_whole() {
        let chunked = "HTTP/1.1 100 Continue\r\n\r\nHTTP/1.1 200 OK\r\ntransfer-encoding: chunked\r\n\r\n3;ext=1\r\n{\"a\r\n4\r\n\":1}\r\n0\r\ntrailer: x\r\n\r\n";
        let server = Server::start(vec![chunked], false);
        let client = client();
        let answer = client.exchange(&server.origin, REQUEST, 1024).await.expect("chunked");
        assert_eq!(answer.body, b"{\"a\":1}");
        assert_eq!(client.idle_connections(), 1, "a chunked answer read to its end leaves the connection usable");

        let until_close = "HTTP/1.1 500 Oops\r\ncontent-type: text/html\r\n\r\n<html>down</html>";
        let server = Server::start(vec![until_close], true);
        let client = self::client();
        let answer = client.exchange(&server.origin, REQUEST, 1024).await.expect("until close");
        assert_eq!((answer.status, answer.body.as_slice()), (500, b"<html>down</html>".as_slice()));
        assert_eq!(client.idle_connections(), 0, "a body framed by the close leaves nothing to reuse");
    }

    #[tokio::test]
    async fn answers_that_are_broken_or_too_long_are_errors() {
        let cases = [
            ("garbage", "SMTP ready\r\n\r\n"),
            ("cut short", "HTTP/1.1 200 OK\r\ncontent-length: 10\r\n\r\n{}"),
            ("too long", "HTTP/1.1 200 OK\r\ncontent-length: 2000\r\n\r\n{}"),
            ("two lengths", "HTTP/1.1 200 OK\r\ncontent-length: 2\r\ncontent-length: 3\r\n\r\n{}"),
            ("signed length", "HTTP/1.1 200 OK\r\ncontent-length: +2\r\n\r\n{}"),
            ("bad chunk", "HTTP/1.1 200 OK\r\ntransfer-encoding: chunked\r\n\r\nzz\r\n"),
            ("gzip only", "HTTP/1.1 200 OK\r\ntransfer-encoding: gzip\r\n\r\n{}"),
            ("no answer", ""),
        ];
        for (case, answer) in cases {
            let server = Server::start(vec![answer], true);
            let error = client().exchange(&server.origin, REQUEST, 1024).await.expect_err(case);
            assert!(matches!(error, ExchangeError::Read(_)), "{case}: {error}");
        }
    }

    #[tokio::test]
    async fn a_refused_connection_is_a_send_error() {
        let port = TcpListener::bind("127.0.0.1:0").expect("bind").local_addr().expect("address").port();
        let origin = Origin { tls: false, host: "127.0.0.1".into(), port };
        let error = client().exchange(&origin, REQUEST, 1024).await.expect_err("refused");
        assert!(matches!(error, ExchangeError::Send(_)), "{error}");
    }

    #[test]
    fn origins_are_read_from_endpoints() {
        let of = |uri: &str| Origin::of(&uri.parse().expect("uri"));
        assert_eq!(
            of("https://dynamodb.eu-west-1.amazonaws.com/"),
            Ok(Origin { tls: true, host: "dynamodb.eu-west-1.amazonaws.com".into(), port: 443 })
        );
        assert_eq!(of("http://127.0.0.1:5000/"), Ok(Origin { tls: false, host: "127.0.0.1".into(), port: 5000 }));
        assert_eq!(of("http://[::1]:8000/"), Ok(Origin { tls: false, host: "::1".into(), port: 8000 }));
        assert!(of("ftp://x/").is_err());
    }
}
