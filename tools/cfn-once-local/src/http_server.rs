//! What the tools' local HTTP servers share (the Runtime API of each local sandbox, the local
//! Invoke API, the fault proxy): hyper's HTTP/1.1 server, so none of them reads a request by
//! hand, and a request's body read whole up to a limit. Public so that the tests' stand-ins
//! for AWS endpoints (`cfn-once-tests`' fake Runtime API and fake ARC cluster) are served the
//! same way rather than by a parser of their own.
//!
//! A hostile or broken request gets a 4xx and never a panic or a hang: hyper answers a head
//! longer than [`HEAD_BYTES_MAX`] (a huge header, a request line that never ends) with 431, a
//! head it cannot parse (a method that is not a token) with 400; [`read_body`] answers a body
//! over its limit (a chunk size of `ffffffffffffffff` followed by data) with 413, one that cannot
//! be decoded with 400, and one that stops arriving for [`BODY_IDLE_MS_MAX`] (that same chunk
//! size, then nothing) with 408.

use std::future::Future;
use std::time::Duration;

use http_body_util::{BodyExt, Full};
use hyper::body::{Body as _, Bytes, Incoming};
use hyper::server::conn::http1;
use hyper::service::service_fn;
use hyper::{Request, Response, StatusCode};
use hyper_util::rt::TokioIo;
use tokio::net::{TcpListener, TcpStream};
use tokio::task::JoinSet;

/// The longest request head (request line and headers) a server reads; a longer one is
/// answered 431. AWS's own limits on headers are far below it.
pub const HEAD_BYTES_MAX: usize = 64 * 1024;
/// How long a request's body may stop arriving before it is answered 408: a local client
/// writes its body at once, so only a client that means to hang a server waits this long.
pub const BODY_IDLE_MS_MAX: u64 = 3_000;

/// The body of every answer: whole, in memory.
pub type Body = Full<Bytes>;

/// A connection to close without an answer (the service's error): hyper closes it, and a
/// client sees the connection end before any byte of a reply.
#[derive(Debug)]
pub struct Unanswered;

impl std::fmt::Display for Unanswered {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("closed without an answer")
    }
}

impl std::error::Error for Unanswered {}

/// The HTTP/1.1 server every local server uses: heads up to [`HEAD_BYTES_MAX`].
pub fn http1() -> http1::Builder {
    let mut builder = http1::Builder::new();
    builder.max_header_size(HEAD_BYTES_MAX);
    builder
}

/// Serves every connection `listener` accepts with `answer`, each request in turn on its
/// connection and the connections side by side, until accepting fails or the future is dropped:
/// the connections are this future's own (a [`JoinSet`]), so dropping it (aborting its task)
/// closes them all.
pub async fn serve<A, F>(listener: TcpListener, answer: A)
where
    A: Fn(Request<Incoming>) -> F + Clone + Send + Sync + 'static,
    F: Future<Output = Result<Response<Body>, Unanswered>> + Send + 'static,
{
    let mut connections = JoinSet::new();
    loop {
        tokio::select! {
            accepted = listener.accept() => match accepted {
                Ok((stream, _)) => {
                    connections.spawn(serve_connection(stream, answer.clone()));
                }
                Err(_) => return,
            },
            // Finished connections are reaped, so a long-lived server's set stays small.
            Some(_) = connections.join_next(), if !connections.is_empty() => {}
        }
    }
}

/// Serves one connection with `answer` until either side closes it.
pub async fn serve_connection<A, F>(stream: TcpStream, answer: A)
where
    A: Fn(Request<Incoming>) -> F + Send + Sync + 'static,
    F: Future<Output = Result<Response<Body>, Unanswered>> + Send + 'static,
{
    let service = service_fn(answer);
    // An error here is the connection's end (a client gone, a head refused with its 4xx, an
    // answer refused on purpose): nothing is left to do with it.
    let _ = http1().serve_connection(TokioIo::new(stream), service).await;
}

/// A request's body, whole, when it is at most `bytes_max` long and arrives without a pause of
/// [`BODY_IDLE_MS_MAX`]; else the answer to send instead (413, 408, or 400 for a body that cannot
/// be decoded or was cut short). Trailers are dropped.
pub async fn read_body(mut body: Incoming, bytes_max: usize) -> Result<Bytes, Response<Body>> {
    if body.size_hint().lower() > bytes_max as u64 {
        return Err(too_large(bytes_max));
    }
    let mut whole = Vec::new();
    loop {
        let frame = match tokio::time::timeout(Duration::from_millis(BODY_IDLE_MS_MAX), body.frame()).await {
            Ok(Some(Ok(frame))) => frame,
            Ok(None) => return Ok(Bytes::from(whole)),
            Ok(Some(Err(error))) => {
                return Err(refusal(StatusCode::BAD_REQUEST, &format!("the body could not be read: {error}")));
            }
            Err(_) => {
                let why = format!("the body stopped arriving for {BODY_IDLE_MS_MAX} ms");
                return Err(refusal(StatusCode::REQUEST_TIMEOUT, &why));
            }
        };
        if let Ok(data) = frame.into_data() {
            if whole.len().saturating_add(data.len()) > bytes_max {
                return Err(too_large(bytes_max));
            }
            whole.extend_from_slice(&data);
        }
    }
}

fn too_large(bytes_max: usize) -> Response<Body> {
    refusal(StatusCode::PAYLOAD_TOO_LARGE, &format!("the body is over {bytes_max} bytes"))
}

/// A refusal of a request: `status` with a JSON `message`.
pub fn refusal(status: StatusCode, message: &str) -> Response<Body> {
    json_reply(status, &[], serde_json::json!({ "message": message }).to_string().into_bytes())
}

/// An answer: `status`, the extra `headers`, a JSON `body` (hyper adds its length and a Date).
pub fn json_reply(status: StatusCode, headers: &[(&str, &str)], body: impl Into<Bytes>) -> Response<Body> {
    let mut builder = Response::builder().status(status).header("content-type", "application/json");
    for (name, value) in headers {
        builder = builder.header(*name, *value);
    }
    builder.body(Full::new(body.into())).unwrap_or_else(|_| {
        // Only a header that is not one fails: a programmer's error, answered as one.
        let mut failed = Response::new(Full::default());
        *failed.status_mut() = StatusCode::INTERNAL_SERVER_ERROR;
        failed
    })
}
