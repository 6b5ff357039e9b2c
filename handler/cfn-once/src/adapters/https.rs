//! The function's one TLS client configuration, and the HTTP client the AWS SDK calls through.
//!
//! Every HTTPS connection the function opens (DynamoDB, SQS, S3, Lambda, ARC, the ResponseURL PUT)
//! uses the same `rustls` configuration, built once per process:
//!
//! - **Crypto**: rustls' aws-lc-rs provider with its defaults (TLS 1.3 and 1.2, AEAD suites only,
//!   the X25519MLKEM768 post-quantum key exchange preferred). The workspace builds aws-lc without
//!   its CPU-jitter entropy source (`.cargo/config.toml`): its random generator is then seeded
//!   from the kernel (`getrandom`), as ring, BoringSSL and OpenSSL are. See docs/security.md,
//!   "Randomness and trust roots", for why that costs nothing in security; with the roots below it
//!   took the first invocation from 63 to 5.7 ms of CPU (`make bench`, benches/README.md).
//! - **Trust roots**: Mozilla's root program, compiled in (`webpki-roots`), so a cold start
//!   parses no certificate store; the image's store cost 10 to 16 ms of CPU per cold start on the
//!   benchmark's machine (read, base64-decoded and parsed, twice over on a Debian-style layout). Every AWS endpoint
//!   and every presigned S3 ResponseURL chains to Amazon Trust Services roots, which are in it.
//!   `SSL_CERT_FILE` replaces them with the certificates of one PEM file (a private CA, a
//!   TLS-inspecting egress proxy, the benchmark's local CA), as it does for OpenSSL.
//!
//! The AWS SDK's calls go through [`sdk_http_client`], an implementation of the SDK's `HttpClient`
//! on hyper's pooled client (`hyper-util`, `hyper-rustls`) with this configuration, handed to
//! `aws_config`; the ResponseURL sink (`http_sink.rs`) is a pool of the same client on the same
//! configuration, so all share one connector ([`hyper_client`]: one timeout over resolution, TCP
//! and TLS, idle connections dropped within S3's idle limit, TCP keepalive) and one TLS session
//! cache. Why not the SDK's own default client (`aws-smithy-http-client`): its trust
//! store takes the image's native roots or PEM text, so it would parse the image's store at every
//! cold start (the 10 to 16 ms above) or parse PEM-encoded Mozilla roots again for each of its
//! connectors; it would also bring `rustls-native-certs` into the function. This file is the glue
//! only: connection pooling, keep-alive, retrying a request never sent on a fresh connection and
//! TLS are hyper's and rustls'.

use std::collections::HashMap;
use std::fmt;
use std::future::Future;
use std::pin::Pin;
use std::sync::{Arc, Mutex, OnceLock, PoisonError};
use std::task::{Context, Poll};
use std::time::Duration;

use aws_smithy_runtime_api::client::http::{
    HttpClient, HttpConnector, HttpConnectorFuture, HttpConnectorSettings, SharedHttpConnector,
};
use aws_smithy_runtime_api::client::orchestrator::{HttpRequest, HttpResponse};
use aws_smithy_runtime_api::client::result::ConnectorError;
use aws_smithy_runtime_api::client::runtime_components::RuntimeComponents;
use aws_smithy_types::body::SdkBody;
use hyper_rustls::HttpsConnector;
use hyper_util::client::legacy::Client;
use hyper_util::client::legacy::connect::HttpConnector as TcpConnector;
use hyper_util::rt::{TokioExecutor, TokioTimer};
use rustls::pki_types::CertificateDer;
use rustls::pki_types::pem::PemObject;
use rustls::{ClientConfig, RootCertStore};

use crate::aws::SignedAt;

/// The variable naming a PEM file whose certificates replace the compiled-in trust roots.
pub const CERT_FILE_VAR: &str = "SSL_CERT_FILE";

/// How long an idle connection stays in the pool: less than S3's idle limit (S3 closes a
/// connection idle for about 20 s), so the first call after an idle gap, an invocation after a
/// pause, never goes out on a socket S3 has already closed: that call would fail after sending,
/// an unknown outcome. The SDK's default, and hyper's, is 90 s. DynamoDB and SQS keep idle
/// connections longer, but the pools are per timeout pair, not per service, and the cost is one
/// TLS handshake more after a gap of more than 15 s. Lambda freezes the process between
/// invocations; the pool checks a connection's idle time when it is checked out, so time spent
/// frozen counts.
pub const POOL_IDLE: Duration = Duration::from_secs(15);

/// How long a connection may be silent before TCP keepalive probes it: a synchronous Invoke of a
/// long-running function sends nothing while the function runs, and NAT gateways and load
/// balancers drop a TCP flow idle for 350 s (AWS's Invoke documentation asks clients to keep
/// long connections alive; AWS's .NET SDK turns keepalive on for Lambda's client). Well under
/// that, and cheap: a probe is an empty segment.
pub const KEEPALIVE_IDLE: Duration = Duration::from_secs(60);

/// The interval between keepalive probes that went unanswered.
pub const KEEPALIVE_INTERVAL: Duration = Duration::from_secs(15);

/// Where the trust roots come from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Roots {
    /// Mozilla's root program as compiled in (`webpki-roots`).
    Compiled,
    /// The certificates of this PEM file (`SSL_CERT_FILE`).
    File(std::path::PathBuf),
}

impl Roots {
    /// `SSL_CERT_FILE` if it is set and not empty, else the compiled-in roots.
    pub fn from_env() -> Self {
        match std::env::var_os(CERT_FILE_VAR) {
            Some(path) if !path.is_empty() => Self::File(path.into()),
            _ => Self::Compiled,
        }
    }

    /// The root store: no parsing for the compiled-in roots; a file must hold at least one
    /// usable certificate.
    pub fn store(&self) -> Result<RootCertStore, String> {
        match self {
            Self::Compiled => Ok(RootCertStore { roots: webpki_roots::TLS_SERVER_ROOTS.to_vec() }),
            Self::File(path) => {
                let shown = path.display();
                let certs = CertificateDer::pem_file_iter(path)
                    .map_err(|error| format!("{CERT_FILE_VAR}={shown} cannot be read: {error}"))?
                    .collect::<Result<Vec<_>, _>>()
                    .map_err(|error| format!("{CERT_FILE_VAR}={shown} is not a PEM file: {error}"))?;
                let mut store = RootCertStore::empty();
                let (added, _ignored) = store.add_parsable_certificates(certs);
                if added == 0 {
                    return Err(format!("{CERT_FILE_VAR}={shown} holds no usable CA certificate"));
                }
                Ok(store)
            }
        }
    }
}

/// The TLS client configuration for `roots`: aws-lc-rs, rustls' safe defaults, no client auth.
pub fn client_config_with(roots: &Roots) -> Result<Arc<ClientConfig>, String> {
    let provider = Arc::new(rustls::crypto::aws_lc_rs::default_provider());
    let config = ClientConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .map_err(|error| format!("the TLS configuration is not usable: {error}"))?
        .with_root_certificates(roots.store()?)
        .with_no_client_auth();
    Ok(Arc::new(config))
}

/// The process's TLS client configuration, built on first use from [`Roots::from_env`]. An
/// error names `SSL_CERT_FILE` and what is wrong with it; the function reports it as an init
/// error instead of starting without the roots it was told to use.
pub fn client_config() -> Result<Arc<ClientConfig>, String> {
    static CONFIG: OnceLock<Result<Arc<ClientConfig>, String>> = OnceLock::new();
    CONFIG.get_or_init(|| client_config_with(&Roots::from_env())).clone()
}

/// The AWS SDK's HTTP client on `tls`: hyper over rustls, HTTP/1.1, one connection pool per
/// distinct connect/read timeout a client asks for (the lease table's client and the queue's
/// differ). Plain `http://` is allowed for local endpoints (`AWS_ENDPOINT_URL` at moto).
pub fn sdk_http_client(tls: Arc<ClientConfig>) -> aws_smithy_runtime_api::client::http::SharedHttpClient {
    aws_smithy_runtime_api::client::http::SharedHttpClient::new(SdkHttpClient { tls, pools: Arc::default() })
}

/// A pooled HTTP/1.1 client on `tls` whose connections are made as AWS's clients make them:
///
/// - **One connect timeout** over the name's resolution, the TCP connection and the TLS
///   handshake together ([`Connector`]), as the AWS SDK's own client wraps its whole connector;
///   hyper-util's own timeout covers the TCP connection only, so a slow resolver or a handshake
///   that never completes ran on into the call's whole timeout. A connect that gives up is
///   hyper-util's `is_connect` failure: nothing was sent, which the classification reads as not
///   applied (`aws::errors`).
/// - **Idle connections dropped** after [`POOL_IDLE`], within S3's idle limit.
/// - **TCP keepalive** ([`KEEPALIVE_IDLE`], [`KEEPALIVE_INTERVAL`]) on every connection.
///
/// Plain `http://` is allowed: the SDK decides which URLs it calls (its endpoints,
/// `AWS_ENDPOINT_URL` locally). Nothing here follows redirects or reads proxy settings from the
/// environment.
pub(crate) fn hyper_client<B>(tls: &ClientConfig, connect_timeout: Option<Duration>) -> Client<Connector, B>
where
    B: http_body::Body + Send + 'static,
    B::Data: Send,
{
    hyper_client_idle(tls, connect_timeout, POOL_IDLE)
}

/// [`hyper_client`] keeping idle connections `idle` (tests shorten it).
fn hyper_client_idle<B>(tls: &ClientConfig, connect_timeout: Option<Duration>, idle: Duration) -> Client<Connector, B>
where
    B: http_body::Body + Send + 'static,
    B::Data: Send,
{
    let mut tcp = TcpConnector::new();
    tcp.enforce_http(false);
    tcp.set_nodelay(true);
    tcp.set_keepalive(Some(KEEPALIVE_IDLE));
    tcp.set_keepalive_interval(Some(KEEPALIVE_INTERVAL));
    let https = hyper_rustls::HttpsConnectorBuilder::new()
        .with_tls_config(tls.clone())
        .https_or_http()
        .enable_http1()
        .wrap_connector(tcp);
    Client::builder(TokioExecutor::new())
        .timer(TokioTimer::new())
        .pool_timer(TokioTimer::new())
        .pool_idle_timeout(idle)
        .build(Connector { inner: https, limit: connect_timeout })
}

/// hyper-rustls' connector (resolution, TCP, TLS) under one timeout: a connect that has not
/// produced a TLS session within `limit` fails as a timed-out I/O error.
#[derive(Clone)]
pub(crate) struct Connector {
    inner: HttpsConnector<TcpConnector>,
    limit: Option<Duration>,
}

impl fmt::Debug for Connector {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Connector").field("limit", &self.limit).finish_non_exhaustive()
    }
}

type BoxError = Box<dyn std::error::Error + Send + Sync>;

impl tower_service::Service<http::Uri> for Connector {
    type Response = <HttpsConnector<TcpConnector> as tower_service::Service<http::Uri>>::Response;
    type Error = BoxError;
    type Future = Pin<Box<dyn Future<Output = Result<Self::Response, BoxError>> + Send>>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), BoxError>> {
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, destination: http::Uri) -> Self::Future {
        let connecting = self.inner.call(destination);
        let limit = self.limit;
        Box::pin(async move {
            let Some(limit) = limit else { return connecting.await };
            match tokio::time::timeout(limit, connecting).await {
                Ok(connected) => connected,
                Err(_) => Err(std::io::Error::new(
                    std::io::ErrorKind::TimedOut,
                    format!("no connection (name, TCP and TLS) within {} ms", limit.as_millis()),
                )
                .into()),
            }
        })
    }
}

type PoolKey = (Option<Duration>, Option<Duration>);

#[derive(Clone)]
struct SdkHttpClient {
    tls: Arc<ClientConfig>,
    pools: Arc<Mutex<HashMap<PoolKey, SharedHttpConnector>>>,
}

impl fmt::Debug for SdkHttpClient {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let pools = self.pools.lock().unwrap_or_else(PoisonError::into_inner).len();
        f.debug_struct("SdkHttpClient").field("pools", &pools).finish_non_exhaustive()
    }
}

impl HttpClient for SdkHttpClient {
    fn http_connector(&self, settings: &HttpConnectorSettings, _: &RuntimeComponents) -> SharedHttpConnector {
        let key = (settings.connect_timeout(), settings.read_timeout());
        let mut pools = self.pools.lock().unwrap_or_else(PoisonError::into_inner);
        pools.entry(key).or_insert_with(|| SharedHttpConnector::new(Pool::new(&self.tls, key.0, key.1))).clone()
    }
}

/// One hyper client (a connection pool) with fixed timeouts.
struct Pool {
    client: Client<Connector, SdkBody>,
    read_timeout: Option<Duration>,
}

impl fmt::Debug for Pool {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Pool").field("read_timeout", &self.read_timeout).finish_non_exhaustive()
    }
}

impl Pool {
    fn new(tls: &ClientConfig, connect_timeout: Option<Duration>, read_timeout: Option<Duration>) -> Self {
        Self { client: hyper_client(tls, connect_timeout), read_timeout }
    }
}

impl HttpConnector for Pool {
    fn call(&self, request: HttpRequest) -> HttpConnectorFuture {
        // The answer carries the request's signing time, against which the classification holds
        // the answer's Date when a signature is refused for its time (`aws::SignedAt`).
        let signed_at = request.headers().get("x-amz-date").and_then(SignedAt::parse);
        let request = match request.try_into_http1x() {
            Ok(request) => request,
            Err(error) => return HttpConnectorFuture::ready(Err(ConnectorError::user(error.into()))),
        };
        let (client, read_timeout) = (self.client.clone(), self.read_timeout);
        HttpConnectorFuture::new(async move {
            let sending = client.request(request);
            let response = match read_timeout {
                Some(limit) => tokio::time::timeout(limit, sending)
                    .await
                    .map_err(|_| ConnectorError::timeout("no response within the read timeout".into()))?,
                None => sending.await,
            }
            .map_err(classify)?;
            // An answer that arrived but cannot be converted came after sending: an I/O failure,
            // never "other", which the classification reads as a failure before sending.
            let mut response = HttpResponse::try_from(response.map(SdkBody::from_body_1_x)).map_err(|error| {
                ConnectorError::io(std::io::Error::new(std::io::ErrorKind::InvalidData, error).into())
            })?;
            if let Some(signed_at) = signed_at {
                response.add_extension(signed_at);
            }
            Ok(response)
        })
    }
}

/// The kind of the first I/O error in `error`'s chain, if any.
pub(crate) fn io_kind(error: &(dyn std::error::Error + 'static)) -> Option<std::io::ErrorKind> {
    anyhow::Chain::new(error).find_map(|cause| cause.downcast_ref::<std::io::Error>()).map(std::io::Error::kind)
}

/// A timed-out connect is a timeout, any other I/O failure (refused, reset, a TLS handshake
/// refused) is I/O, the rest is "other"; never "user", which callers read as "will never work".
fn classify(error: hyper_util::client::legacy::Error) -> ConnectorError {
    match io_kind(&error) {
        Some(std::io::ErrorKind::TimedOut) => ConnectorError::timeout(error.into()),
        Some(_) => ConnectorError::io(error.into()),
        None => ConnectorError::other(error.into(), None),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn compiled_roots_need_no_file_and_hold_the_amazon_roots() {
        let store = Roots::Compiled.store().expect("compiled roots");
        assert!(store.len() > 100, "Mozilla's program has well over 100 roots, got {}", store.len());
        let amazon = store
            .roots
            .iter()
            .filter(|anchor| anchor.subject.as_ref().windows(6).any(|window| window == b"Amazon"))
            .count();
        assert!(amazon >= 4, "Amazon Root CA 1-4 are what AWS endpoints chain to; found {amazon}");
    }

    #[test]
    fn a_cert_file_that_is_missing_or_holds_no_certificate_is_an_error_naming_the_variable() {
        let missing = Roots::File("/nonexistent/ca.pem".into()).store().expect_err("missing file");
        assert!(missing.starts_with("SSL_CERT_FILE=/nonexistent/ca.pem cannot be read"), "{missing}");
        let dir = std::env::temp_dir().join(format!("cfn-once-https-test-{}", std::process::id()));
        std::fs::create_dir_all(&dir).expect("temp dir");
        let empty = dir.join("empty.pem");
        std::fs::write(&empty, "no certificates here\n").expect("write");
        let error = Roots::File(empty.clone()).store().expect_err("no certificate");
        assert!(error.ends_with("holds no usable CA certificate"), "{error}");
        std::fs::remove_dir_all(&dir).expect("cleanup");
    }

    #[test]
    fn the_configuration_uses_aws_lc_and_prefers_post_quantum_key_exchange() {
        let config = client_config_with(&Roots::Compiled).expect("config");
        let provider = config.crypto_provider();
        let first = provider.kx_groups.first().expect("key exchange groups").name();
        assert_eq!(first, rustls::NamedGroup::X25519MLKEM768, "post-quantum hybrid first");
        assert!(provider.cipher_suites.iter().all(|suite| suite.version().version != rustls::ProtocolVersion::TLSv1_0));
    }

    /// A loopback HTTP/1.1 server answering every request 200 with an empty body on
    /// connections it keeps open; its port and the number of connections it accepted.
    fn keep_alive_server() -> (u16, Arc<std::sync::atomic::AtomicUsize>) {
        use std::io::{BufRead, Write};
        let listener = std::net::TcpListener::bind("127.0.0.1:0").expect("bind");
        let port = listener.local_addr().expect("address").port();
        let accepted = Arc::new(std::sync::atomic::AtomicUsize::new(0));
        let counted = Arc::clone(&accepted);
        std::thread::spawn(move || {
            for stream in listener.incoming().flatten() {
                counted.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
                std::thread::spawn(move || {
                    let mut reader = std::io::BufReader::new(&stream);
                    loop {
                        let mut line = String::new();
                        match reader.read_line(&mut line) {
                            Ok(0) | Err(_) => return,
                            Ok(_) if line == "\r\n" => {
                                let _ = (&stream).write_all(b"HTTP/1.1 200 OK\r\ncontent-length: 0\r\n\r\n");
                            }
                            Ok(_) => {}
                        }
                    }
                });
            }
        });
        (port, accepted)
    }

    async fn get(client: &Client<Connector, SdkBody>, port: u16) {
        let request = http::Request::get(format!("http://127.0.0.1:{port}/")).body(SdkBody::empty()).expect("request");
        let response = client.request(request).await.expect("an answer");
        assert_eq!(response.status(), 200);
        // The empty body is read to its end, so the connection goes back to the pool.
        let mut body = response.into_body();
        while std::future::poll_fn(|cx| http_body::Body::poll_frame(Pin::new(&mut body), cx)).await.is_some() {}
    }

    #[tokio::test]
    async fn a_connection_idle_past_the_pool_limit_is_not_reused() {
        let tls = client_config_with(&Roots::Compiled).expect("config");
        let (port, accepted) = keep_alive_server();
        let kept = hyper_client_idle::<SdkBody>(&tls, None, Duration::from_secs(10));
        get(&kept, port).await;
        tokio::time::sleep(Duration::from_millis(400)).await;
        get(&kept, port).await;
        assert_eq!(accepted.load(std::sync::atomic::Ordering::SeqCst), 1, "reused within the idle limit");
        let (port, accepted) = keep_alive_server();
        let dropped = hyper_client_idle::<SdkBody>(&tls, None, Duration::from_millis(100));
        get(&dropped, port).await;
        tokio::time::sleep(Duration::from_millis(400)).await;
        get(&dropped, port).await;
        assert_eq!(accepted.load(std::sync::atomic::Ordering::SeqCst), 2, "a new connection after the idle limit");
        const { assert!(POOL_IDLE.as_secs() < 20, "below S3's idle limit of about 20 s") };
    }

    #[tokio::test]
    async fn one_timeout_covers_the_tls_handshake() {
        // A peer that accepts the TCP connection and never answers the ClientHello.
        let listener = std::net::TcpListener::bind("127.0.0.1:0").expect("bind");
        let port = listener.local_addr().expect("address").port();
        std::thread::spawn(move || {
            let held: Vec<_> = listener.incoming().take(1).collect();
            std::thread::sleep(Duration::from_secs(10));
            drop(held);
        });
        let tls = client_config_with(&Roots::Compiled).expect("config");
        let client = hyper_client::<SdkBody>(&tls, Some(Duration::from_millis(300)));
        let request = http::Request::get(format!("https://127.0.0.1:{port}/")).body(SdkBody::empty()).expect("request");
        let started = std::time::Instant::now();
        let error = tokio::time::timeout(Duration::from_secs(5), client.request(request))
            .await
            .expect("the connect timeout ends it, not the test's")
            .expect_err("no handshake");
        assert!(error.is_connect(), "a failure to connect: nothing was sent: {error:?}");
        assert_eq!(io_kind(&error), Some(std::io::ErrorKind::TimedOut), "{error:?}");
        assert!(started.elapsed() < Duration::from_secs(2), "took {:?}", started.elapsed());
    }
}
