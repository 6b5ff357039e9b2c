//! Expired credentials met by a provider's own AWS calls (a Lambda Invoke, a read of the
//! function's configuration, the answer bucket's GetObject): deferred to a later invocation
//! (`ProviderError::Deferred`) where nothing in the process refreshes them, retried now where
//! the SDK's identity cache reloads them; through real SDK clients, against a peer that refuses
//! every request as AWS refuses an expired token.

use std::io::{BufRead, Write};
use std::time::{Duration, SystemTime};

use aws_sdk_dynamodb::config::Credentials;
use aws_sdk_dynamodb::config::SharedCredentialsProvider;

use cfn_once::providers::answers_itself::{AnswerDrop, AnswerObject, DropError};
use cfn_once::providers::function::{FunctionInvoker, InvokeError, LambdaInvoker};
use cfn_once::providers::s3_answers::S3AnswerDrop;

/// A loopback peer that answers every request with `status`, `headers` and `body`.
fn refusing(status: u16, headers: &'static str, body: &'static str) -> String {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").expect("bind");
    let port = listener.local_addr().expect("address").port();
    std::thread::spawn(move || {
        for stream in listener.incoming().flatten() {
            std::thread::spawn(move || {
                let mut reader = std::io::BufReader::new(&stream);
                let (mut line, mut length) = (String::new(), 0usize);
                while reader.read_line(&mut line).is_ok_and(|read| read > 0) && line != "\r\n" {
                    if let Some(value) = line.to_ascii_lowercase().strip_prefix("content-length:") {
                        length = value.trim().parse().unwrap_or(0);
                    }
                    line.clear();
                }
                let mut request_body = vec![0; length];
                let _ = std::io::Read::read_exact(&mut reader, &mut request_body);
                let answer =
                    format!("HTTP/1.1 {status} Refused\r\n{headers}content-length: {}\r\n\r\n{body}", body.len());
                let _ = (&stream).write_all(answer.as_bytes());
            });
        }
    });
    format!("http://127.0.0.1:{port}")
}

/// The function's SDK configuration at `endpoint`, signing with credentials that carry an
/// expiry (the identity cache reloads them) or not (the sandbox's environment: nothing does).
fn sdk_at(endpoint: &str, expiring: bool) -> aws_config::SdkConfig {
    let expiry = expiring.then(|| SystemTime::now() + Duration::from_secs(3_600));
    let credentials = Credentials::new("AKID", "secret", Some("token".into()), expiry, "test");
    let tls = cfn_once::adapters::https::client_config_with(&cfn_once::adapters::https::Roots::Compiled).expect("tls");
    aws_config::SdkConfig::builder()
        .behavior_version(aws_config::BehaviorVersion::latest())
        .region(aws_config::Region::new("us-east-1"))
        .endpoint_url(endpoint)
        .credentials_provider(SharedCredentialsProvider::new(credentials))
        .http_client(cfn_once::adapters::https::sdk_http_client(tls))
        .build()
}

const LAMBDA_EXPIRED: (u16, &str, &str) = (
    403,
    "content-type: application/json\r\nx-amzn-errortype: ExpiredTokenException\r\n",
    r#"{"message":"The security token included in the request is expired"}"#,
);

#[tokio::test]
async fn an_invoke_refused_for_expired_credentials_is_deferred_unless_they_refresh() {
    let (status, headers, body) = LAMBDA_EXPIRED;
    let endpoint = refusing(status, headers, body);
    let invoker = LambdaInvoker::new(&sdk_at(&endpoint, false));
    let invoked = invoker.invoke("fn", b"{}".to_vec(), 5_000).await;
    assert!(
        matches!(&invoked, Err(InvokeError::Deferred(why)) if why.contains("ExpiredTokenException")),
        "{invoked:?}"
    );
    let configuration = invoker.timeout_ms("fn").await;
    assert!(matches!(configuration, Err(InvokeError::Deferred(_))), "{configuration:?}");
    // Credentials the SDK reloads: tried again now.
    let invoker = LambdaInvoker::new(&sdk_at(&endpoint, true));
    let invoked = invoker.invoke("fn", b"{}".to_vec(), 5_000).await;
    assert!(matches!(invoked, Err(InvokeError::Transient(_))), "{invoked:?}");
}

#[tokio::test]
async fn the_answer_bucket_defers_a_read_refused_for_expired_credentials_unless_they_refresh() {
    let body = "<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n<Error><Code>ExpiredToken</Code><Message>The provided token has expired.</Message></Error>";
    let endpoint = refusing(400, "content-type: application/xml\r\n", body);
    let object = AnswerObject { bucket: "answers".into(), region: "us-east-1".into(), key: "answers/k".into() };
    let answers = S3AnswerDrop::new(&sdk_at(&endpoint, false), "answers", 5_000).expect("a client");
    let read = answers.read(&object, 4096).await;
    assert!(matches!(&read, Err(DropError::Deferred(why)) if why.contains("ExpiredToken")), "{read:?}");
    let answers = S3AnswerDrop::new(&sdk_at(&endpoint, true), "answers", 5_000).expect("a client");
    let read = answers.read(&object, 4096).await;
    assert!(matches!(read, Err(DropError::Transient(_))), "{read:?}");
}

/// An author's own call, `ProviderError::from(classify(&error))`: deferred as the shipped
/// providers' calls are, and retried now once `Refresh` says the credentials reload.
#[tokio::test]
async fn an_authors_own_call_refused_for_expired_credentials_is_deferred() {
    use cfn_once::fenced::{Failure, Refresh};
    use cfn_once_core::provider::ProviderError;
    let expired = || Failure::Deferred("ExpiredTokenException: expired".into());
    assert_eq!(ProviderError::from(expired()), ProviderError::Deferred("ExpiredTokenException: expired".into()));
    let reloading = sdk_at("http://127.0.0.1:9", true);
    let refresh = Refresh::of(reloading.credentials_provider());
    assert!(matches!(ProviderError::from(refresh.reconsider(expired()).await), ProviderError::Transient(_)));
}

/// A fenced write refused for expired credentials: not sent again in this invocation (one call),
/// and deferred as a provider's error; credentials the SDK reloads are sent again now, at most
/// `WRITE_ATTEMPTS_MAX` times.
#[tokio::test]
async fn a_fenced_write_refused_for_expired_credentials_is_deferred_unless_they_refresh() {
    use cfn_once::fenced::{FencedTable, FencedWriteError, WRITE_ATTEMPTS_MAX};
    use cfn_once::prelude::{AttributeValue, item};
    use cfn_once_core::ownership::{Fence, WriteRules};
    use cfn_once_core::provider::ProviderError;
    let endpoint = refusing(
        400,
        "content-type: application/x-amz-json-1.0\r\n",
        r#"{"__type":"com.amazon.coral.service#ExpiredTokenException","message":"The security token included in the request is expired"}"#,
    );
    let rules = WriteRules::fenced(&Fence { scope: "request-a".into(), value: 1 });
    let key = item([("pk", AttributeValue::S("t1".into()))]);
    let table = FencedTable::new(&sdk_at(&endpoint, false), "items");
    let written = table.write(rules.clone()).put(key.clone(), item([])).await;
    assert!(
        matches!(&written, Err(FencedWriteError::Deferred(why)) if why.contains("ExpiredTokenException")),
        "{written:?}"
    );
    assert!(matches!(ProviderError::from(written.unwrap_err()), ProviderError::Deferred(_)));
    let table = FencedTable::new(&sdk_at(&endpoint, true), "items");
    let written = table.write(rules).put(key, item([])).await;
    assert!(matches!(&written, Err(FencedWriteError::Transient(_))), "{written:?} after {WRITE_ATTEMPTS_MAX} attempts");
}
