//! The classification of failed AWS calls (`errors`), tested: by status and code, by measured
//! skew, by how a real client failed to reach a peer, and how expired credentials are reconsidered.

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

/// A provider that hands out expiring credentials until it is told to hand out credentials
/// without an expiry (the environment's), counting its looks; clones share both.
#[derive(Debug, Clone, Default)]
struct Changing {
    environment: Arc<std::sync::atomic::AtomicBool>,
    looks: Arc<std::sync::atomic::AtomicU32>,
}

impl ProvideCredentials for Changing {
    fn provide_credentials<'a>(&'a self) -> aws_credential_types::provider::future::ProvideCredentials<'a>
    where
        Self: 'a,
    {
        use std::sync::atomic::Ordering;
        self.looks.fetch_add(1, Ordering::SeqCst);
        let expiry = (!self.environment.load(Ordering::SeqCst)).then(|| SystemTime::now() + Duration::from_secs(3_600));
        let credentials = aws_credential_types::Credentials::new("AKID", "secret", Some("token".into()), expiry, "test");
        aws_credential_types::provider::future::ProvideCredentials::ready(Ok(credentials))
    }
}

#[tokio::test]
async fn which_credentials_the_provider_hands_out_is_looked_at_again_after_a_bounded_time() {
    use std::sync::atomic::Ordering;
    let provider = Changing::default();
    let refresh = Refresh::of(Some(SharedCredentialsProvider::new(provider.clone())));
    let start = Instant::now();
    let at = |ms: u64| start + Duration::from_millis(ms);
    assert!(refresh.refreshes_at(at(0)).await, "expiring credentials are reloaded");
    // The provider now hands out credentials that nothing reloads.
    provider.environment.store(true, Ordering::SeqCst);
    assert!(refresh.refreshes_at(at(REFRESH_LOOK_KEPT_MS - 1)).await, "the look is kept for its time");
    assert!(refresh.clone().refreshes_at(at(REFRESH_LOOK_KEPT_MS - 1)).await, "clones share it");
    assert_eq!(provider.looks.load(Ordering::SeqCst), 1);
    assert!(!refresh.refreshes_at(at(REFRESH_LOOK_KEPT_MS)).await, "looked at again once its time is up");
    assert_eq!(provider.looks.load(Ordering::SeqCst), 2);
    // And back: a provider that hands out expiring credentials again is seen to.
    provider.environment.store(false, Ordering::SeqCst);
    assert!(refresh.refreshes_at(at(2 * REFRESH_LOOK_KEPT_MS)).await);
    // What `reconsider` makes of a refusal follows the look.
    let expired = || Failure::Deferred("ExpiredTokenException: expired".into());
    assert_eq!(named(&refresh.reconsider(expired()).await), "not applied");
}

#[test]
fn a_read_whose_outcome_is_unknown_was_not_applied() {
    let unknown = || Failure::Unknown("no answer before the timeout".into());
    assert_eq!(unknown().of_read(), Failure::NotApplied("no answer before the timeout".into()));
    for other in [
        Failure::NotApplied("throttled".into()),
        Failure::Deferred("expired".into()),
        Failure::Permanent("denied".into()),
    ] {
        assert_eq!(other.clone().of_read(), other, "only an unknown outcome is read differently");
    }
}
