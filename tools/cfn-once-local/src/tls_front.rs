//! A TLS front: HTTPS on the wire in front of a plain-HTTP upstream (moto, or a
//! [`FaultProxy`](crate::fault_proxy::FaultProxy) before moto). The local environment
//! serves its S3 URLs through one (`cfn-once local`: the presigned answer URLs functions PUT to
//! and the ResponseURLs it plays CloudFormation with are `https://`, as in AWS, so a function
//! that opens an HTTPS connection whatever the scheme, as crhelper does, can answer). Tests and
//! the benchmark put one before a proxy, so a client under test pays for what it pays for in
//! production (the handshake, seeding its random generator, verifying a certificate chain)
//! while the proxy behind the front still sees, counts and times plaintext.
//!
//! Each front has its own certificate authority, generated when it starts and never reused: a
//! self-signed CA and a leaf certificate for `127.0.0.1` and `localhost` signed by it. Only the
//! CA certificate leaves the process, as a PEM file a client is told to trust (`SSL_CERT_FILE`,
//! `AWS_CA_BUNDLE`); a client that is not told refuses the handshake, as it should.
//!
//! The front terminates TLS (rustls on aws-lc-rs, ALPN `http/1.1` only) and relays bytes both
//! ways to a fresh upstream connection per client connection; it does not parse HTTP. The
//! upstream is dialled only after a handshake completes, so a refused handshake never reaches
//! the upstream. A reset from either side is passed on as a reset. It runs on its own thread
//! with its own single-threaded tokio runtime, so sync and async tests can both use it, and it
//! stops, closing every connection and removing the CA file, when dropped.

use std::io;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::thread::JoinHandle;
use std::time::Duration;

use anyhow::Context;
use rcgen::{
    BasicConstraints, CertificateParams, CertifiedIssuer, DnType, ExtendedKeyUsagePurpose, IsCa, KeyPair,
    KeyUsagePurpose,
};
use rustls::ServerConfig;
use rustls::pki_types::{PrivateKeyDer, PrivatePkcs8KeyDer};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::oneshot;
use tokio_rustls::TlsAcceptor;

/// A client that has not finished its handshake by then is dropped.
const HANDSHAKE_TIMEOUT: Duration = Duration::from_secs(10);
/// The same bound for dialling the upstream once a handshake is done.
const UPSTREAM_CONNECT_TIMEOUT: Duration = Duration::from_secs(5);

/// A running TLS front; dropping it stops it.
#[derive(Debug)]
pub struct TlsFront {
    address: SocketAddr,
    ca_file: PathBuf,
    counts: Arc<Counts>,
    stop: Option<oneshot::Sender<()>>,
    thread: Option<JoinHandle<()>>,
}

impl TlsFront {
    /// Starts a front on 127.0.0.1:0 that forwards to `upstream` ("http://127.0.0.1:PORT", no
    /// path), with a fresh CA whose certificate is written to a PEM file in `dir` (which must
    /// exist). Fails if `upstream` is not of that form, or the certificates, the file, the
    /// listener or the runtime cannot be made.
    pub fn start(upstream: &str, dir: &Path) -> anyhow::Result<Self> {
        let authority = upstream
            .strip_prefix("http://")
            .map(|rest| rest.trim_end_matches('/'))
            .filter(|rest| !rest.is_empty() && !rest.contains('/'))
            .with_context(|| format!("the TLS front's upstream must be http://HOST:PORT, not {upstream:?}"))?
            .to_owned();
        let listener = std::net::TcpListener::bind("127.0.0.1:0").context("cannot bind the TLS front")?;
        let address = listener.local_addr()?;
        listener.set_nonblocking(true)?;

        let (ca_pem, server_config) = certificates(&address.to_string())?;
        let ca_file = std::path::absolute(dir.join(format!("tls-front-{}-ca.pem", address.port())))?;
        std::fs::write(&ca_file, ca_pem).with_context(|| format!("cannot write {}", ca_file.display()))?;

        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .context("cannot build the TLS front's runtime")?;
        let counts = Arc::new(Counts::default());
        let (stop, stopped) = oneshot::channel();
        let acceptor = TlsAcceptor::from(Arc::new(server_config));
        let serving = Arc::clone(&counts);
        let thread = std::thread::Builder::new()
            .name("tls-front".to_owned())
            .spawn(move || {
                runtime.block_on(async move {
                    let listener = match TcpListener::from_std(listener) {
                        Ok(listener) => listener,
                        Err(error) => return eprintln!("the TLS front cannot listen: {error}"),
                    };
                    tokio::select! {
                        _ = stopped => {}
                        () = accept_loop(listener, acceptor, Arc::from(authority), serving) => {}
                    }
                });
                // Dropping the runtime here drops every connection task, closing its sockets.
            })
            .context("cannot start the TLS front's thread")?;
        Ok(Self { address, ca_file, counts, stop: Some(stop), thread: Some(thread) })
    }

    /// "https://127.0.0.1:PORT"
    pub fn url(&self) -> String {
        format!("https://{}", self.address)
    }

    /// The PEM file holding this front's CA certificate, the only certificate a client needs to
    /// trust to talk to it. An absolute path; it exists until the front is dropped.
    pub fn ca_file(&self) -> &Path {
        &self.ca_file
    }

    /// Handshakes completed so far.
    pub fn handshakes_completed(&self) -> u64 {
        self.counts.completed.load(Ordering::SeqCst)
    }

    /// Of the handshakes completed so far, those that resumed an earlier session (a TLS 1.3
    /// ticket): no certificate was sent or verified.
    pub fn handshakes_resumed(&self) -> u64 {
        self.counts.resumed.load(Ordering::SeqCst)
    }

    /// Handshakes that failed so far: the client refused the certificate, spoke something other
    /// than TLS, or went quiet past the handshake timeout.
    pub fn handshakes_failed(&self) -> u64 {
        self.counts.failed.load(Ordering::SeqCst)
    }
}

impl Drop for TlsFront {
    fn drop(&mut self) {
        if let Some(stop) = self.stop.take() {
            let _ = stop.send(());
        }
        if let Some(thread) = self.thread.take() {
            let _ = thread.join();
        }
        let _ = std::fs::remove_file(&self.ca_file);
    }
}

#[derive(Debug, Default)]
struct Counts {
    completed: AtomicU64,
    resumed: AtomicU64,
    failed: AtomicU64,
}

/// A fresh CA (its certificate as PEM) and the server configuration of a leaf it signed. The
/// CA's name carries `address`, so that a client trusting another front's CA looks for this
/// issuer, does not find it and says so (`UnknownIssuer`), rather than finding a namesake.
fn certificates(address: &str) -> anyhow::Result<(String, ServerConfig)> {
    let mut ca_params = CertificateParams::new(Vec::<String>::new())?;
    ca_params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
    ca_params.distinguished_name.push(DnType::CommonName, format!("cfn-once TLS front CA {address}"));
    ca_params.key_usages = vec![KeyUsagePurpose::KeyCertSign, KeyUsagePurpose::CrlSign];
    let ca = CertifiedIssuer::self_signed(ca_params, KeyPair::generate()?)?;

    let mut leaf_params = CertificateParams::new(vec!["127.0.0.1".to_owned(), "localhost".to_owned()])?;
    leaf_params.distinguished_name.push(DnType::CommonName, "localhost");
    leaf_params.key_usages = vec![KeyUsagePurpose::DigitalSignature];
    leaf_params.extended_key_usages = vec![ExtendedKeyUsagePurpose::ServerAuth];
    let leaf_key = KeyPair::generate()?;
    let leaf = leaf_params.signed_by(&leaf_key, &ca)?;

    let provider = Arc::new(rustls::crypto::aws_lc_rs::default_provider());
    let mut config = ServerConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()?
        .with_no_client_auth()
        .with_single_cert(
            vec![leaf.der().clone(), ca.der().clone()],
            PrivateKeyDer::Pkcs8(PrivatePkcs8KeyDer::from(leaf_key.serialize_der())),
        )?;
    config.alpn_protocols = vec![b"http/1.1".to_vec()];
    Ok((ca.pem(), config))
}

async fn accept_loop(listener: TcpListener, acceptor: TlsAcceptor, upstream: Arc<str>, counts: Arc<Counts>) {
    loop {
        let Ok((client, _)) = listener.accept().await else {
            // Out of descriptors or a connection aborted before it was accepted: try the next one.
            tokio::time::sleep(Duration::from_millis(10)).await;
            continue;
        };
        let (acceptor, upstream, counts) = (acceptor.clone(), Arc::clone(&upstream), Arc::clone(&counts));
        tokio::spawn(async move {
            let _ = relay(client, &acceptor, &upstream, &counts).await;
        });
    }
}

/// Completes the handshake with `client`, then relays bytes to and from a new upstream
/// connection until both sides are done.
async fn relay(client: TcpStream, acceptor: &TlsAcceptor, upstream: &str, counts: &Counts) -> io::Result<()> {
    client.set_nodelay(true)?;
    let handshake = tokio::time::timeout(HANDSHAKE_TIMEOUT, acceptor.accept(client)).await;
    let Ok(Ok(mut tls)) = handshake else {
        counts.failed.fetch_add(1, Ordering::SeqCst);
        return Ok(());
    };
    counts.completed.fetch_add(1, Ordering::SeqCst);
    if tls.get_ref().1.handshake_kind() == Some(rustls::HandshakeKind::Resumed) {
        counts.resumed.fetch_add(1, Ordering::SeqCst);
    }
    let mut plain = tokio::time::timeout(UPSTREAM_CONNECT_TIMEOUT, TcpStream::connect(upstream))
        .await
        .map_err(|_| io::Error::new(io::ErrorKind::TimedOut, "the upstream did not accept in time"))??;
    plain.set_nodelay(true)?;
    if let Err(error) = tokio::io::copy_bidirectional(&mut tls, &mut plain).await {
        if error.kind() == io::ErrorKind::ConnectionReset {
            // Either side reset: reset both, so a FaultProxy `Reset` reaches the client as one
            // rather than as a TLS stream cut short.
            let _ = tls.get_ref().0.set_zero_linger();
            let _ = plain.set_zero_linger();
        }
        return Err(error);
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use std::io::{Read, Write};
    use std::net::TcpStream as StdTcpStream;
    use std::path::PathBuf;

    use rustls::pki_types::pem::PemObject;
    use rustls::pki_types::{CertificateDer, ServerName};
    use rustls::{ClientConfig, ClientConnection, RootCertStore, StreamOwned};

    use super::TlsFront;

    /// An upstream that answers every connection's first request with `hello` and the request
    /// line it received, then closes.
    fn tiny_upstream() -> String {
        let listener = std::net::TcpListener::bind("127.0.0.1:0").expect("bind");
        let address = listener.local_addr().expect("address");
        std::thread::spawn(move || {
            for mut stream in listener.incoming().map_while(Result::ok) {
                let mut head = Vec::new();
                let mut byte = [0];
                while !head.ends_with(b"\r\n\r\n") && stream.read(&mut byte).is_ok_and(|read| read == 1) {
                    head.push(byte[0]);
                }
                let request_line = String::from_utf8_lossy(&head).lines().next().unwrap_or_default().to_owned();
                let body = format!("hello {request_line}");
                let reply =
                    format!("HTTP/1.1 200 OK\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}", body.len());
                let _ = stream.write_all(reply.as_bytes());
            }
        });
        format!("http://{address}")
    }

    fn scratch_dir() -> PathBuf {
        static NEXT: std::sync::atomic::AtomicU32 = std::sync::atomic::AtomicU32::new(0);
        let unique = NEXT.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
        let dir = std::env::temp_dir().join(format!("tls-front-{}-{unique}", std::process::id()));
        std::fs::create_dir_all(&dir).expect("scratch dir");
        dir
    }

    /// A rustls client (aws-lc-rs, ALPN http/1.1) trusting only `ca_file`.
    fn client_trusting(ca_file: &std::path::Path) -> ClientConfig {
        let mut roots = RootCertStore::empty();
        for certificate in CertificateDer::pem_file_iter(ca_file).expect("CA file") {
            roots.add(certificate.expect("a PEM certificate")).expect("a usable CA certificate");
        }
        let provider = std::sync::Arc::new(rustls::crypto::aws_lc_rs::default_provider());
        let mut config = ClientConfig::builder_with_provider(provider)
            .with_safe_default_protocol_versions()
            .expect("protocol versions")
            .with_root_certificates(roots)
            .with_no_client_auth();
        config.alpn_protocols = vec![b"http/1.1".to_vec()];
        config
    }

    /// One GET through the front as `name`; the whole reply, or the I/O error.
    fn get(front: &TlsFront, config: ClientConfig, name: &str) -> std::io::Result<(String, Option<Vec<u8>>)> {
        let server_name = ServerName::try_from(name.to_owned()).expect("a server name");
        let connection = ClientConnection::new(std::sync::Arc::new(config), server_name).expect("a client");
        let socket = StdTcpStream::connect(front.url().trim_start_matches("https://")).expect("connect");
        let mut tls = StreamOwned::new(connection, socket);
        tls.write_all(b"GET /through-the-front HTTP/1.1\r\nHost: localhost\r\nConnection: close\r\n\r\n")?;
        let mut reply = Vec::new();
        tls.read_to_end(&mut reply)?;
        let alpn = tls.conn.alpn_protocol().map(<[u8]>::to_vec);
        Ok((String::from_utf8_lossy(&reply).into_owned(), alpn))
    }

    /// A client that keeps its configuration (and so its session cache) resumes its session on
    /// its second connection, and the front counts that handshake as resumed.
    #[test]
    fn a_second_connection_of_one_client_resumes_and_is_counted() {
        let dir = scratch_dir();
        let front = TlsFront::start(&tiny_upstream(), &dir).expect("a front");
        let config = client_trusting(front.ca_file());
        for _ in 0..2 {
            let (reply, _) = get(&front, config.clone(), "127.0.0.1").expect("a reply through the front");
            assert!(reply.starts_with("HTTP/1.1 200 OK\r\n"), "{reply}");
        }
        assert_eq!((front.handshakes_completed(), front.handshakes_resumed(), front.handshakes_failed()), (2, 1, 0));
        drop(front);
        let _ = std::fs::remove_dir_all(dir);
    }

    #[test]
    fn a_client_trusting_the_ca_gets_through_by_ip_and_by_name() {
        let dir = scratch_dir();
        let front = TlsFront::start(&tiny_upstream(), &dir).expect("a front");
        assert!(front.url().starts_with("https://127.0.0.1:"), "{}", front.url());
        assert!(front.ca_file().is_absolute() && front.ca_file().starts_with(&dir));
        for name in ["127.0.0.1", "localhost"] {
            let (reply, alpn) = get(&front, client_trusting(front.ca_file()), name).expect("a reply through the front");
            assert!(reply.starts_with("HTTP/1.1 200 OK\r\n"), "{reply}");
            assert!(reply.ends_with("hello GET /through-the-front HTTP/1.1"), "{reply}");
            assert_eq!(alpn.as_deref(), Some(&b"http/1.1"[..]), "ALPN settles on http/1.1");
        }
        assert_eq!((front.handshakes_completed(), front.handshakes_failed()), (2, 0));
        assert_eq!(front.handshakes_resumed(), 0, "each client was new: nothing to resume");
        let ca_file = front.ca_file().to_owned();
        drop(front);
        assert!(!ca_file.exists(), "the CA file goes with the front");
        let _ = std::fs::remove_dir_all(dir);
    }

    #[test]
    fn a_client_trusting_another_ca_is_refused_before_the_upstream() {
        let dir = scratch_dir();
        let front = TlsFront::start(&tiny_upstream(), &dir).expect("a front");
        let other = TlsFront::start(&tiny_upstream(), &dir).expect("another front");
        assert_ne!(
            std::fs::read(front.ca_file()).ok(),
            std::fs::read(other.ca_file()).ok(),
            "every front has its own CA"
        );
        let error = get(&front, client_trusting(other.ca_file()), "127.0.0.1").expect_err("an untrusted certificate");
        assert!(error.to_string().contains("UnknownIssuer"), "{error}");
        // The server learns of the refusal from the client's alert, a moment after the client.
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(5);
        while front.handshakes_failed() == 0 && std::time::Instant::now() < deadline {
            std::thread::sleep(std::time::Duration::from_millis(10));
        }
        assert_eq!((front.handshakes_completed(), front.handshakes_failed()), (0, 1));
        drop((front, other));
        let _ = std::fs::remove_dir_all(dir);
    }

    #[test]
    fn an_upstream_reset_reaches_the_client_as_a_reset() {
        let listener = std::net::TcpListener::bind("127.0.0.1:0").expect("bind");
        let upstream = format!("http://{}", listener.local_addr().expect("address"));
        std::thread::spawn(move || {
            for stream in listener.incoming().map_while(Result::ok) {
                // Read the request, then close abortively, as FaultProxy's `Reset` does.
                let mut scratch = [0; 1024];
                let _ = (&stream).read(&mut scratch);
                let _ = socket2::SockRef::from(&stream).set_linger(Some(std::time::Duration::ZERO));
            }
        });
        let dir = scratch_dir();
        let front = TlsFront::start(&upstream, &dir).expect("a front");
        let error = get(&front, client_trusting(front.ca_file()), "127.0.0.1").expect_err("a reset");
        assert_eq!(error.kind(), std::io::ErrorKind::ConnectionReset, "{error}");
        drop(front);
        let _ = std::fs::remove_dir_all(dir);
    }

    #[test]
    fn an_upstream_that_is_not_plain_http_is_refused() {
        let dir = scratch_dir();
        for upstream in ["https://127.0.0.1:1", "127.0.0.1:1", "http://127.0.0.1:1/path", "http://"] {
            let error = TlsFront::start(upstream, &dir).expect_err(upstream);
            assert!(error.to_string().contains("http://HOST:PORT"), "{error}");
        }
        let _ = std::fs::remove_dir_all(dir);
    }
}
