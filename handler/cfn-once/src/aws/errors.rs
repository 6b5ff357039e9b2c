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
//! - **No answer after sending**: a timeout, a reset, an unreadable answer: unknown. For a
//!   read, which changes nothing, not applied ([`classify_read`], [`Failure::of_read`]).
//!
//! Deferred is deferred on every surface alike: the lease store leaves the message to a later
//! invocation (`StoreError::Deferred`), and a provider's call (a Lambda Invoke, the answer
//! bucket, a fenced write, an author's own call) ends its run unanswered
//! (`ProviderError::Deferred`), to run again under a higher fence on a later receive, or to be
//! answered FAILED saying the credentials expired where the deadline leaves no time for that.
//!
//! The worker retries within the invocation's time whatever is retryable now; the SDK clients
//! make one attempt per call, so the decision is the worker's, deadline-aware.

use std::error::Error;
use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime};

use aws_credential_types::provider::{ProvideCredentials, SharedCredentialsProvider};
use aws_runtime::retries::classifiers::{THROTTLING_ERRORS, TRANSIENT_ERRORS};
use aws_smithy_runtime_api::client::orchestrator::HttpResponse;
use aws_smithy_runtime_api::client::result::{ConnectorError, SdkError};
use aws_smithy_types::date_time::{DateTime, Format};
use aws_smithy_types::error::metadata::ProvideErrorMetadata;
pub use cfn_once_core::failure::Failure;

/// What a failed read means ([`classify`], then [`Failure::of_read`]): a timeout, a 5xx or a
/// reset of a call that changes nothing is only not applied, retried under the same fence, as
/// `FencedTable::get_item` treats its own. Never for a write, whose unknown outcome may stand.
pub fn classify_read<E>(error: &SdkError<E, HttpResponse>) -> Failure
where
    E: ProvideErrorMetadata + Error + 'static,
{
    classify(error).of_read()
}

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
/// invocation can succeed. Which kind the provider hands out is asked on the first refusal that
/// needs it, and asked again on a refusal more than [`REFRESH_LOOK_KEPT_MS`] after the last look:
/// a provider chain may hand out another kind later (a container's credentials that stop
/// coming, a profile rewritten), and a look kept for the process's life would then retry, or
/// defer, every refusal wrongly for as long as the sandbox lives. Clones share the look.
#[derive(Debug, Clone)]
pub struct Refresh {
    provider: Option<SharedCredentialsProvider>,
    /// The last look: when it was taken, and what it found.
    looked: Arc<tokio::sync::Mutex<Option<(Instant, bool)>>>,
}

/// How long a look at the credentials provider ([`Refresh`]) is kept, in ms: a minute. A wrong
/// answer then costs at most one minute of refusals misread, the order of one provider run's
/// retries of transient errors (the worker's retry budget) and far below the SDK identity cache's
/// 15 minutes for credentials without an expiry; a look costs at most a second (`PROVIDER_LOOK_MS_MAX`),
/// and only on a refusal of expired credentials, so once a minute is nothing.
pub const REFRESH_LOOK_KEPT_MS: u64 = 60_000;

/// The longest the provider is given to say which credentials it hands out. One that reads the
/// environment answers at once; one that has to ask the network hands out expiring ones.
const PROVIDER_LOOK_MS_MAX: u64 = 1_000;

impl Refresh {
    /// For calls signed with `provider`'s credentials (`SdkConfig::credentials_provider`); `None`
    /// (unknown) refreshes nothing.
    pub fn of(provider: Option<SharedCredentialsProvider>) -> Self {
        Self { provider, looked: Arc::default() }
    }

    /// `failure` as the caller should act on it: a deferred refusal (expired credentials) is
    /// not applied, retried now, where the identity cache will load new credentials.
    pub async fn reconsider(&self, failure: Failure) -> Failure {
        match failure {
            Failure::Deferred(text) if self.refreshes().await => Failure::NotApplied(text),
            other => other,
        }
    }

    /// Whether the provider hands out credentials that the identity cache loads anew: the last
    /// look's answer while it is fresh, or a new look.
    pub async fn refreshes(&self) -> bool {
        self.refreshes_at(Instant::now()).await
    }

    /// [`Refresh::refreshes`] at `now`.
    async fn refreshes_at(&self, now: Instant) -> bool {
        let Some(provider) = &self.provider else { return false };
        // Held across the look, so concurrent refusals share one.
        let mut looked = self.looked.lock().await;
        if let Some((at, refreshes)) = *looked
            && now.duration_since(at) < Duration::from_millis(REFRESH_LOOK_KEPT_MS)
        {
            return refreshes;
        }
        let look = provider.provide_credentials();
        let refreshes = match tokio::time::timeout(Duration::from_millis(PROVIDER_LOOK_MS_MAX), look).await {
            Ok(Ok(credentials)) => credentials.expiry().is_some(),
            // Nothing to load: no reload will bring new ones either.
            Ok(Err(_)) => false,
            Err(_) => true,
        };
        *looked = Some((now, refreshes));
        refreshes
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
#[path = "errors_tests.rs"]
mod tests;
