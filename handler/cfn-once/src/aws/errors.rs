//! Classifying failed AWS calls, once for every adapter: the lease store, the fenced-write helper,
//! the active-region control, the answer bucket and the providers that call AWS.
//!
//! The one place that decides whether a failed call certainly did not happen (retry it), may have
//! happened (read before deciding, or retry an idempotent call), certainly did not happen but
//! cannot be made to now (leave it to a later invocation), or will never work (stop). It reads
//! what the AWS SDK's own retry classifiers read, and promises no more than they do:
//!
//! - **Nothing was sent**: the connection failed (DNS, TCP, TLS, the connect timeout:
//!   hyper-util's `is_connect`), or the SDK failed before it handed the request to a connection
//!   (credentials, endpoint, signing): not applied.
//! - **An answer**, by its HTTP status and error code. The SDK's throttling codes, 429 and write
//!   conflicts were refused unread: not applied. Two of the SDK's "throttling" codes say the
//!   opposite, an identical request still in progress (`TransactionInProgressException`,
//!   `PriorRequestNotComplete`): unknown. Any 5xx, with or without a code and whatever its body,
//!   and the SDK's transient codes: unknown. A signature refused for its time (the SDK's
//!   clock-skew codes) is retried only when a skew was measured, as the SDK's
//!   `ServiceClockSkewClassifier` retries it: the request was signed more than
//!   [`SKEW_MEASURED_MS_MIN`] away from the answer's `Date`, so the SDK's clock-skew interceptor,
//!   which learns the offset from that same `Date`, signs the next attempt right; otherwise the
//!   signature is wrong for another reason, or already corrected: permanent. Expired credentials
//!   are deferred: inside Lambda they come from the sandbox's environment, which the SDK's
//!   identity cache reads again unchanged, so only a later invocation (a new sandbox) has new
//!   ones; where the credentials carry an expiry, the identity cache does load new ones, and
//!   [`Refresh::reconsider`] makes the refusal not applied. Everything else (a missing table,
//!   access denied, a bad request): permanent.
//! - **No answer after sending**: a timeout, a reset, an unreadable answer: unknown.
//!
//! The worker retries within the invocation's time whatever is retryable now; the SDK clients
//! make one attempt per call, so the decision is the worker's, deadline-aware.

use std::error::Error;
use std::sync::Arc;
use std::time::{Duration, SystemTime};

use aws_credential_types::provider::{ProvideCredentials, SharedCredentialsProvider};
use aws_runtime::retries::classifiers::{THROTTLING_ERRORS, TRANSIENT_ERRORS};
use aws_smithy_runtime_api::client::orchestrator::HttpResponse;
use aws_smithy_runtime_api::client::result::{ConnectorError, SdkError};
use aws_smithy_types::date_time::{DateTime, Format};
use aws_smithy_types::error::metadata::ProvideErrorMetadata;
pub use cfn_once_core::failure::Failure;

/// How far, in ms, a request's signing time must be from its refusal's `Date` for the refusal to
/// count as a clock skew: the AWS SDK's own threshold (`SKEW_DETECTION_THRESHOLD` in aws-runtime's
/// `service_clock_skew.rs`, four minutes). AWS refuses a signature more than five minutes off.
pub const SKEW_MEASURED_MS_MIN: u64 = 4 * 60 * 1_000;

/// When the request an answer answers was signed (its `X-Amz-Date`): put on each answer by the
/// function's HTTP client (`https.rs`), so that a refusal for the signature's time can be held
/// against the answer's `Date`. An answer without it (another HTTP client, an unsigned request)
/// measures no skew.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SignedAt(pub SystemTime);

impl SignedAt {
    /// An `X-Amz-Date` (`20261203T161500Z`), if it is one.
    pub fn parse(amz_date: &str) -> Option<Self> {
        let bytes = amz_date.as_bytes();
        let well_formed = bytes.len() == 16
            && bytes[8] == b'T'
            && bytes[15] == b'Z'
            && bytes.iter().enumerate().all(|(at, byte)| matches!(at, 8 | 15) || byte.is_ascii_digit());
        if !well_formed {
            return None;
        }
        let field = |range: std::ops::Range<usize>| &amz_date[range];
        let text = format!(
            "{}-{}-{}T{}:{}:{}Z",
            field(0..4),
            field(4..6),
            field(6..8),
            field(9..11),
            field(11..13),
            field(13..15)
        );
        let time = DateTime::from_str(&text, Format::DateTime).ok()?;
        SystemTime::try_from(time).ok().map(Self)
    }
}

/// What the answer says about the clocks: how far its `Date` is from the time its request was
/// signed, in ms, if both are known and the `Date` is the service's own (an answer with an `Age`
/// came from a cache, whose `Date` is stale, which the SDK's interceptor also ignores).
pub fn signature_off_ms(raw: &HttpResponse) -> Option<u64> {
    let SignedAt(signed) = *raw.extension::<SignedAt>()?;
    if raw.headers().get("age").is_some() {
        return None;
    }
    let date = DateTime::from_str(raw.headers().get("date")?, Format::HttpDate).ok()?;
    let answered = SystemTime::try_from(date).ok()?;
    let off = answered.duration_since(signed).unwrap_or_else(|before| before.duration());
    Some(u64::try_from(off.as_millis()).unwrap_or(u64::MAX))
}

/// Codes refused before anything was applied that a retry clears, besides the SDK's throttling
/// codes: DynamoDB's write conflicts (MRSC's `ReplicatedWriteConflictException` among them).
const CONFLICT_CODES: [&str; 2] = ["ReplicatedWriteConflictException", "TransactionConflictException"];

/// Codes the SDK counts as throttling that say an identical request is still being processed
/// (DynamoDB's idempotent transactions, Route 53's changes): it may yet be applied.
const IN_PROGRESS_CODES: [&str; 2] = ["TransactionInProgressException", "PriorRequestNotComplete"];

/// Credentials that expired: the request was refused unread.
const EXPIRED_CREDENTIAL_CODES: [&str; 3] = ["ExpiredToken", "ExpiredTokenException", "TokenRefreshRequired"];

/// A signature that may have been refused for the time it carries: the SDK's clock-skew codes
/// (`CLOCK_SKEW_ERROR_CODES` in aws-runtime, `AccessDeniedException` among them, which it counts
/// as skew only when it measured one) and S3's and EC2's codes for a request signed too far in
/// the future or the past.
const SKEW_CODES: [&str; 7] = [
    "InvalidSignatureException",
    "SignatureDoesNotMatch",
    "AuthFailure",
    "RequestTimeTooSkewed",
    "AccessDeniedException",
    "RequestInTheFuture",
    "RequestExpired",
];

/// What a failed AWS call means: certainly not applied (retry it), maybe applied (read before
/// deciding, or retry an idempotent write), deferred (expired credentials: see `Refresh`) or
/// never going to work (stop). The text is one line: the service's code and message, or the
/// HTTP status, never the SDK's full dump.
pub fn classify<E>(error: &SdkError<E, HttpResponse>) -> Failure
where
    E: ProvideErrorMetadata + Error + 'static,
{
    let text = brief(error);
    match error {
        SdkError::ConstructionFailure(_) => Failure::Permanent(text),
        SdkError::TimeoutError(_) | SdkError::ResponseError(_) => Failure::Unknown(text),
        SdkError::DispatchFailure(dispatch) if dispatch.is_user() => Failure::Permanent(text),
        SdkError::DispatchFailure(dispatch) => match dispatch.as_connector_error() {
            Some(connector) if nothing_sent(connector) => Failure::NotApplied(text),
            _ => Failure::Unknown(text),
        },
        SdkError::ServiceError(service) => {
            let raw = service.raw();
            of_answer(raw.status().as_u16(), service.err().code().unwrap_or_default(), signature_off_ms(raw), text)
        }
        _ => Failure::Unknown(text),
    }
}

/// Whether a dispatch failure happened before any byte of the request was sent. A connector
/// (this function's, `https.rs`, or the SDK's own) reports hyper-util's error, whose
/// `is_connect` is a failure to connect: DNS, TCP (refused, unreachable), TLS, the connect
/// timeout; anything else it reports may have come after the request went out. The SDK's
/// orchestrator reports a failure of its own before it hands the request to a connector (the
/// credentials, the endpoint, the signature, an interceptor) as an unclassified connector error
/// around an error that is not hyper-util's; a connector reports an answer it could not convert
/// (`HttpError`) or an I/O failure as such, and those are after sending.
fn nothing_sent(error: &ConnectorError) -> bool {
    let source = error.source();
    match source.and_then(|source| source.downcast_ref::<hyper_util::client::legacy::Error>()) {
        Some(transport) => transport.is_connect(),
        None => {
            let after_sending = source.is_some_and(|source| {
                source.is::<aws_smithy_runtime_api::http::HttpError>() || source.is::<std::io::Error>()
            });
            error.is_other() && error.as_other().is_none() && !after_sending
        }
    }
}

/// What an error answer means, by its HTTP status, its code (empty when it named none) and how
/// far its `Date` was from its request's signing time ([`signature_off_ms`]).
pub fn of_answer(status: u16, code: &str, signature_off_ms: Option<u64>, text: String) -> Failure {
    let named = |codes: &[&str]| codes.contains(&code);
    if named(&IN_PROGRESS_CODES) {
        return Failure::Unknown(text);
    }
    if named(&SKEW_CODES) {
        return match signature_off_ms {
            Some(off_ms) if off_ms > SKEW_MEASURED_MS_MIN => Failure::NotApplied(text),
            _ => Failure::Permanent(text),
        };
    }
    if named(&EXPIRED_CREDENTIAL_CODES) {
        return Failure::Deferred(text);
    }
    if named(THROTTLING_ERRORS) || named(&CONFLICT_CODES) || status == 429 {
        Failure::NotApplied(text)
    } else if named(TRANSIENT_ERRORS) || (500..600).contains(&status) {
        Failure::Unknown(text)
    } else {
        Failure::Permanent(text)
    }
}

/// Whether anything in this process gives the SDK's calls new credentials after the service
/// called the ones they were signed with expired. The SDK's identity cache keeps credentials
/// until their own expiry (less a buffer of 10 to 15 s) and then loads them again from their
/// provider; credentials without an expiry it keeps 15 minutes and then loads again. Inside
/// Lambda they come from the sandbox's environment (`AWS_ACCESS_KEY_ID`, `AWS_SESSION_TOKEN`),
/// without an expiry, and a reload reads the same ones: nothing here refreshes them, and the
/// refusal is deferred to a later invocation. Credentials that carry an expiry (a container's,
/// an instance's, an assumed role's) are loaded anew once it passes, so a retry within the
/// invocation can succeed. Which kind the provider hands out is asked once, on the first
/// refusal that needs it, and kept.
#[derive(Debug, Clone)]
pub struct Refresh {
    provider: Option<SharedCredentialsProvider>,
    refreshes: Arc<tokio::sync::OnceCell<bool>>,
}

/// The longest the provider is given to say which credentials it hands out. One that reads the
/// environment answers at once; one that has to ask the network hands out expiring ones.
const PROVIDER_LOOK_MS_MAX: u64 = 1_000;

impl Refresh {
    /// For calls signed with `provider`'s credentials (`SdkConfig::credentials_provider`); `None`
    /// (unknown) refreshes nothing.
    pub fn of(provider: Option<SharedCredentialsProvider>) -> Self {
        Self { provider, refreshes: Arc::default() }
    }

    /// `failure` as the caller should act on it: a deferred refusal (expired credentials) is
    /// not applied, retried now, where the identity cache will load new credentials.
    pub async fn reconsider(&self, failure: Failure) -> Failure {
        match failure {
            Failure::Deferred(text) if self.refreshes().await => Failure::NotApplied(text),
            other => other,
        }
    }

    async fn refreshes(&self) -> bool {
        let Some(provider) = &self.provider else { return false };
        *self
            .refreshes
            .get_or_init(|| async {
                let look = provider.provide_credentials();
                match tokio::time::timeout(Duration::from_millis(PROVIDER_LOOK_MS_MAX), look).await {
                    Ok(Ok(credentials)) => credentials.expiry().is_some(),
                    // Nothing to load: no reload will bring new ones either.
                    Ok(Err(_)) => false,
                    Err(_) => true,
                }
            })
            .await
    }
}

/// What went wrong, in a line: the service's error code and message (or the HTTP status, for an
/// answer that named no code), or the kind of transport failure and its root cause. Never the
/// SDK's full dump (HTTP headers, HTML bodies), which would end up in a Reason, and never a URL.
pub fn brief<E>(error: &SdkError<E, HttpResponse>) -> String
where
    E: ProvideErrorMetadata + Error + 'static,
{
    // The chain always holds `error` itself, so its last link is the root cause.
    let root = || anyhow::Chain::new(error).last().map(ToString::to_string).unwrap_or_default();
    match error {
        SdkError::ServiceError(service) => {
            let status = service.raw().status().as_u16();
            match (service.err().code(), service.err().message()) {
                (Some(code), Some(message)) => format!("{code}: {message}"),
                (Some(code), None) => code.to_owned(),
                (None, _) => format!("the service answered HTTP {status} without an error code"),
            }
        }
        SdkError::TimeoutError(_) => "no answer before the timeout".to_owned(),
        SdkError::DispatchFailure(_) => format!("the request could not be sent: {}", root()),
        SdkError::ResponseError(_) => format!("the response could not be read: {}", root()),
        SdkError::ConstructionFailure(_) => format!("the request could not be built: {}", root()),
        _ => root(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use aws_smithy_types::body::SdkBody;
    use aws_smithy_types::error::ErrorMetadata;

    fn named(failure: &Failure) -> &'static str {
        match failure {
            Failure::NotApplied(_) => "not applied",
            Failure::Unknown(_) => "unknown",
            Failure::Deferred(_) => "deferred",
            Failure::Permanent(_) => "permanent",
        }
    }

    /// (status, code, expected): "not applied", "unknown", "deferred" or "permanent", for an
    /// answer that measured no skew.
    #[test]
    fn answers_are_classified_by_status_and_code_as_the_sdk_retries_them() {
        let cases = [
            (500, "InternalServerError", "unknown"),
            (500, "InternalFailure", "unknown"),
            (500, "SomethingNobodyNamed", "unknown"),
            (502, "", "unknown"),
            (503, "", "unknown"),
            (503, "ServiceUnavailable", "unknown"),
            (504, "", "unknown"),
            (599, "", "unknown"),
            (400, "RequestTimeoutException", "unknown"),
            (400, "RequestTimeout", "unknown"),
            (400, "TransactionInProgressException", "unknown"),
            (400, "PriorRequestNotComplete", "unknown"),
            (400, "ThrottlingException", "not applied"),
            (400, "ProvisionedThroughputExceededException", "not applied"),
            (400, "RequestLimitExceeded", "not applied"),
            (400, "LimitExceededException", "not applied"),
            (503, "SlowDown", "not applied"),
            (409, "ReplicatedWriteConflictException", "not applied"),
            (400, "TransactionConflictException", "not applied"),
            (429, "", "not applied"),
            (400, "ExpiredTokenException", "deferred"),
            (403, "ExpiredToken", "deferred"),
            (400, "TokenRefreshRequired", "deferred"),
            (400, "InvalidSignatureException", "permanent"),
            (403, "SignatureDoesNotMatch", "permanent"),
            (403, "RequestTimeTooSkewed", "permanent"),
            (400, "RequestExpired", "permanent"),
            (400, "ConditionalCheckFailedException", "permanent"),
            (400, "ResourceNotFoundException", "permanent"),
            (400, "AccessDeniedException", "permanent"),
            (400, "ValidationException", "permanent"),
            (403, "", "permanent"),
            (404, "", "permanent"),
        ];
        for (status, code, expected) in cases {
            assert_eq!(named(&of_answer(status, code, None, String::new())), expected, "HTTP {status} {code:?}");
        }
    }

    #[test]
    fn a_signature_refused_for_its_time_is_retried_only_when_a_skew_was_measured() {
        for code in SKEW_CODES {
            for (off_ms, expected) in [
                (None, "permanent"),
                (Some(0), "permanent"),
                (Some(SKEW_MEASURED_MS_MIN), "permanent"),
                (Some(SKEW_MEASURED_MS_MIN + 1), "not applied"),
                (Some(20 * 60_000), "not applied"),
            ] {
                assert_eq!(named(&of_answer(403, code, off_ms, String::new())), expected, "{code} off by {off_ms:?} ms");
            }
        }
        // Only the skew codes: a throttled answer from a skewed client is still only throttled.
        assert_eq!(named(&of_answer(400, "ThrottlingException", Some(20 * 60_000), String::new())), "not applied");
        assert_eq!(named(&of_answer(400, "ValidationException", Some(20 * 60_000), String::new())), "permanent");
    }

    fn answer(code: &str, date: Option<&str>, signed_at: Option<&str>) -> SdkError<ErrorMetadata, HttpResponse> {
        let mut raw = HttpResponse::new(403.try_into().expect("status"), SdkBody::empty());
        if let Some(date) = date {
            raw.headers_mut().insert("date", date.to_owned());
        }
        if let Some(signed_at) = signed_at {
            raw.add_extension(SignedAt::parse(signed_at).expect("an X-Amz-Date"));
        }
        SdkError::service_error(ErrorMetadata::builder().code(code).message("refused").build(), raw)
    }

    #[test]
    fn the_skew_is_the_answers_date_against_the_requests_signing_time() {
        let date = "Thu, 03 Dec 2026 16:15:00 GMT";
        let check = |error: SdkError<ErrorMetadata, HttpResponse>, expected: &str| {
            assert_eq!(named(&classify(&error)), expected, "{error:?}");
        };
        // Signed 20 minutes ahead, or behind, of the service's clock.
        check(answer("InvalidSignatureException", Some(date), Some("20261203T163500Z")), "not applied");
        check(answer("InvalidSignatureException", Some(date), Some("20261203T155500Z")), "not applied");
        // Signed on the service's time: the signature is wrong for another reason.
        check(answer("InvalidSignatureException", Some(date), Some("20261203T161502Z")), "permanent");
        check(answer("AccessDeniedException", Some(date), Some("20261203T161502Z")), "permanent");
        // Nothing to measure with: no Date, or no signing time.
        check(answer("InvalidSignatureException", None, Some("20261203T163500Z")), "permanent");
        check(answer("InvalidSignatureException", Some(date), None), "permanent");
        let mut cached = HttpResponse::new(403.try_into().expect("status"), SdkBody::empty());
        cached.headers_mut().insert("date", date.to_owned());
        cached.headers_mut().insert("age", "30".to_owned());
        cached.add_extension(SignedAt::parse("20261203T163500Z").expect("an X-Amz-Date"));
        assert_eq!(signature_off_ms(&cached), None, "a cached answer's Date measures nothing");
        assert_eq!(SignedAt::parse("2026-12-03T16:35:00Z"), None);
        assert_eq!(SignedAt::parse("20261203T1635000"), None);
    }

    #[tokio::test]
    async fn expired_credentials_are_retried_only_where_something_refreshes_them() {
        use aws_credential_types::Credentials;
        let expired = || Failure::Deferred("ExpiredTokenException: expired".into());
        // The sandbox's environment, or credentials given in code: no expiry, nothing reloads them.
        let environment = Credentials::new("AKID", "secret", Some("token".into()), None, "Environment");
        let refresh = Refresh::of(Some(SharedCredentialsProvider::new(environment)));
        assert_eq!(named(&refresh.reconsider(expired()).await), "deferred");
        assert_eq!(named(&Refresh::of(None).reconsider(expired()).await), "deferred");
        // Credentials that expire are loaded anew by the identity cache.
        let expiring = Credentials::new(
            "AKID",
            "secret",
            Some("token".into()),
            Some(SystemTime::now() + Duration::from_secs(3_600)),
            "Container",
        );
        let refresh = Refresh::of(Some(SharedCredentialsProvider::new(expiring)));
        assert_eq!(named(&refresh.reconsider(expired()).await), "not applied");
        // Nothing else is reconsidered.
        for other in [
            Failure::Unknown(String::new()),
            Failure::Permanent(String::new()),
            Failure::NotApplied(String::new()),
        ] {
            assert_eq!(refresh.reconsider(other.clone()).await, other);
        }
    }

    /// A DynamoDB client as the function builds it (its HTTP client, one attempt, explicit
    /// timeouts) for `endpoint` (`None`: none, and no region either), signing with `credentials`.
    fn dynamodb_at(endpoint: Option<&str>, credentials: SharedCredentialsProvider) -> aws_sdk_dynamodb::Client {
        let tls = crate::adapters::https::client_config_with(&crate::adapters::https::Roots::Compiled).expect("tls");
        let mut config = aws_sdk_dynamodb::Config::builder()
            .behavior_version(aws_sdk_dynamodb::config::BehaviorVersion::latest())
            .credentials_provider(credentials)
            .http_client(crate::adapters::https::sdk_http_client(tls))
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
}
