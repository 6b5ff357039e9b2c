//! How a real client's failures to reach a peer are classified (`aws::classify`): through the
//! function's own HTTP client (`https`), against loopback peers that refuse, answer TLS in
//! HTTP, close after the request's head or never answer; and a read's unknown outcome
//! (`classify_read`).

use std::sync::Arc;
use std::time::Duration;

use aws_credential_types::provider::{ProvideCredentials, SharedCredentialsProvider};

use crate::aws::{Failure, classify, classify_read};

fn named(failure: &Failure) -> &'static str {
    match failure {
        Failure::NotApplied(_) => "not applied",
        Failure::Unknown(_) => "unknown",
        Failure::Deferred(_) => "deferred",
        Failure::Permanent(_) => "permanent",
    }
}

/// A DynamoDB client as the function builds it (its HTTP client, one attempt, explicit
/// timeouts) for `endpoint` (`None`: none, and no region either), signing with `credentials`.
fn dynamodb_at(endpoint: Option<&str>, credentials: SharedCredentialsProvider) -> aws_sdk_dynamodb::Client {
    let tls = super::https::client_config_with(&super::https::Roots::Compiled).expect("tls");
    let mut config = aws_sdk_dynamodb::Config::builder()
        .behavior_version(aws_sdk_dynamodb::config::BehaviorVersion::latest())
        .credentials_provider(credentials)
        .http_client(super::https::sdk_http_client(tls))
        .timeout_config(crate::aws::call_timeouts(2_000))
        .retry_config(aws_sdk_dynamodb::config::retry::RetryConfig::standard().with_max_attempts(1));
    if let Some(endpoint) = endpoint {
        config = config.endpoint_url(endpoint).region(aws_sdk_dynamodb::config::Region::new("us-east-1"));
    }
    aws_sdk_dynamodb::Client::from_conf(config.build())
}

fn test_credentials() -> SharedCredentialsProvider {
    SharedCredentialsProvider::new(aws_credential_types::Credentials::new("AKID", "secret", None, None, "test"))
}

/// What one GetItem at `endpoint` fails with, classified.
async fn get_item_at(endpoint: Option<&str>, credentials: SharedCredentialsProvider) -> Failure {
    let error = dynamodb_at(endpoint, credentials)
        .get_item()
        .table_name("leases")
        .key("pk", aws_sdk_dynamodb::types::AttributeValue::S("k".into()))
        .send()
        .await
        .expect_err("nothing answers");
    classify(&error)
}

/// A loopback listener that hands each connection to `serve` on its own thread, and counts
/// the connections.
fn listener(
    serve: impl Fn(std::net::TcpStream) + Send + Sync + 'static,
) -> (u16, Arc<std::sync::atomic::AtomicUsize>) {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").expect("bind");
    let port = listener.local_addr().expect("address").port();
    let accepted = Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let (counted, serve) = (Arc::clone(&accepted), Arc::new(serve));
    std::thread::spawn(move || {
        for stream in listener.incoming().flatten() {
            counted.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
            let serve = Arc::clone(&serve);
            std::thread::spawn(move || serve(stream));
        }
    });
    (port, accepted)
}

/// Reads a request's head (up to its blank line), so the peer has certainly sent it.
fn read_head(stream: &std::net::TcpStream) {
    use std::io::BufRead;
    let mut reader = std::io::BufReader::new(stream);
    let mut line = String::new();
    while reader.read_line(&mut line).is_ok_and(|read| read > 0) && line != "\r\n" {
        line.clear();
    }
}

#[tokio::test]
async fn a_refused_connection_sent_nothing() {
    let port = std::net::TcpListener::bind("127.0.0.1:0").expect("bind").local_addr().expect("address").port();
    let failure = get_item_at(Some(&format!("http://127.0.0.1:{port}")), test_credentials()).await;
    assert_eq!(named(&failure), "not applied", "{failure:?}");
}

#[tokio::test]
async fn a_name_that_does_not_resolve_sent_nothing() {
    let failure = get_item_at(Some("http://cfn-once-nowhere.invalid"), test_credentials()).await;
    assert_eq!(named(&failure), "not applied", "{failure:?}");
}

#[tokio::test]
async fn a_failed_tls_handshake_sent_nothing() {
    // A peer that answers the ClientHello in plain HTTP.
    let (port, _) = listener(|mut stream| {
        use std::io::Write;
        let _ = stream.write_all(b"HTTP/1.1 400 Bad Request\r\ncontent-length: 0\r\n\r\n");
    });
    let failure = get_item_at(Some(&format!("https://127.0.0.1:{port}")), test_credentials()).await;
    assert_eq!(named(&failure), "not applied", "{failure:?}");
}

#[tokio::test]
async fn credentials_that_cannot_be_loaded_sent_nothing() {
    #[derive(Debug)]
    struct Missing;
    impl ProvideCredentials for Missing {
        fn provide_credentials<'a>(&'a self) -> aws_credential_types::provider::future::ProvideCredentials<'a>
        where
            Self: 'a,
        {
            aws_credential_types::provider::future::ProvideCredentials::ready(Err(
                aws_credential_types::provider::error::CredentialsError::not_loaded("no credentials in this test"),
            ))
        }
    }
    let (port, accepted) = listener(|_| {});
    let failure = get_item_at(Some(&format!("http://127.0.0.1:{port}")), SharedCredentialsProvider::new(Missing)).await;
    assert_eq!(named(&failure), "not applied", "{failure:?}");
    assert_eq!(accepted.load(std::sync::atomic::Ordering::SeqCst), 0, "nothing connected");
}

#[tokio::test]
async fn an_endpoint_that_cannot_be_resolved_sent_nothing() {
    // No endpoint and no region: the SDK's endpoint rules have nowhere to send it.
    let failure = get_item_at(None, test_credentials()).await;
    assert_eq!(named(&failure), "not applied", "{failure:?}");
}

#[tokio::test]
async fn a_connection_closed_after_the_request_was_sent_is_unknown() {
    let (port, _) = listener(|stream| read_head(&stream));
    let failure = get_item_at(Some(&format!("http://127.0.0.1:{port}")), test_credentials()).await;
    assert_eq!(named(&failure), "unknown", "{failure:?}");
}

#[tokio::test]
async fn no_answer_after_the_request_was_sent_is_unknown() {
    let (port, _) = listener(|stream| {
        read_head(&stream);
        std::thread::sleep(Duration::from_secs(5));
    });
    let failure = get_item_at(Some(&format!("http://127.0.0.1:{port}")), test_credentials()).await;
    assert_eq!(named(&failure), "unknown", "{failure:?}");
}


#[tokio::test]
async fn a_read_that_timed_out_after_it_was_sent_is_retried_not_rerun() {
    let (port, _) = listener(|stream| {
        read_head(&stream);
        std::thread::sleep(Duration::from_secs(5));
    });
    let error = dynamodb_at(Some(&format!("http://127.0.0.1:{port}")), test_credentials())
        .get_item()
        .table_name("leases")
        .key("pk", aws_sdk_dynamodb::types::AttributeValue::S("k".into()))
        .send()
        .await
        .expect_err("nothing answers");
    assert_eq!(named(&classify(&error)), "unknown", "as a write it may stand");
    assert_eq!(named(&classify_read(&error)), "not applied", "as a read it changed nothing");
}
