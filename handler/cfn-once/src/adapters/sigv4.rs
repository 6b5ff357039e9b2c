//! SigV4 for the one kind of request the lease store's wire sends: a POST of a JSON body to the
//! endpoint's root with `content-type`, `host`, `x-amz-date`, `x-amz-target` and, with temporary
//! credentials, `x-amz-security-token`, all signed.
//!
//! `aws-sigv4` (what the SDK signs with) builds a general canonical request for each call: a
//! header map copied and sorted, each value trimmed and checked, the path normalised and encoded,
//! the signing key derived again (four HMACs). For this one shape the canonical request is a
//! fixed text with four values in it, and the signing key changes once a day or when the
//! credentials do. [`PostSigner`] writes that text and keeps the key; the tests hold it to
//! `aws-sigv4`'s headers, byte for byte, for the same request at the same time. The wire uses it
//! only where its shape holds (`PostSigner::fits`): any other request goes to `aws-sigv4`.
//!
//! The derived key is kept in memory beside the credentials it comes from, as the credentials
//! themselves are; nothing here logs.

use std::fmt::Write as _;
use std::sync::{Mutex, PoisonError};
use std::time::{SystemTime, UNIX_EPOCH};

use aws_credential_types::Credentials;
use cfn_once_core::timestamp::civil_from_days;
use hmac::{Hmac, KeyInit, Mac};
use sha2::{Digest, Sha256};

type HmacSha256 = Hmac<Sha256>;

/// The content type of the awsJson1_0 protocol, the one the signed requests carry.
pub const JSON_1_0: &str = "application/x-amz-json-1.0";

/// What signing adds to a request: the values of its `x-amz-date` and `authorization` headers
/// (the `x-amz-security-token` header carries the credentials' session token as it is).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Signed {
    pub amz_date: String,
    pub authorization: String,
}

/// Signs the wire's POSTs for one region and service, keeping the day's signing key.
#[derive(Debug)]
pub struct PostSigner {
    region: String,
    service: &'static str,
    key: Mutex<Option<DayKey>>,
}

/// A signing key and what it was derived from: the date (`YYYYMMDD`) and the credentials.
struct DayKey {
    date: String,
    access_key_id: String,
    secret: String,
    key: [u8; 32],
}

impl std::fmt::Debug for DayKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("DayKey").field("date", &self.date).finish_non_exhaustive()
    }
}

impl PostSigner {
    pub fn new(region: &str, service: &'static str) -> Self {
        Self { region: region.to_owned(), service, key: Mutex::new(None) }
    }

    /// Whether a request to `host` with `target` on `credentials` has the shape this signer
    /// writes: header values `aws-sigv4` would sign as they are (visible ASCII, no spaces to trim
    /// or fold), a region of the same kind. The wire signs anything else with `aws-sigv4`.
    pub fn fits(&self, host: &str, target: &str, credentials: &Credentials) -> bool {
        let plain = |text: &str| !text.is_empty() && text.bytes().all(|byte| byte.is_ascii_graphic());
        plain(host)
            && plain(target)
            && plain(&self.region)
            && plain(credentials.access_key_id())
            && credentials.session_token().is_none_or(plain)
    }

    /// The signature of a POST of `body` to the root of `host`, for `target`, at `time`.
    pub fn sign(&self, credentials: &Credentials, time: SystemTime, host: &str, target: &str, body: &[u8]) -> Signed {
        let amz_date = amz_date(time);
        let date = &amz_date[..8];
        let token = credentials.session_token();
        let signed_headers = if token.is_some() {
            "content-type;host;x-amz-date;x-amz-security-token;x-amz-target"
        } else {
            "content-type;host;x-amz-date;x-amz-target"
        };

        let mut canonical = String::with_capacity(320 + host.len() + token.map_or(0, str::len));
        canonical.push_str("POST\n/\n\ncontent-type:");
        canonical.push_str(JSON_1_0);
        canonical.push_str("\nhost:");
        canonical.push_str(host);
        canonical.push_str("\nx-amz-date:");
        canonical.push_str(&amz_date);
        if let Some(token) = token {
            canonical.push_str("\nx-amz-security-token:");
            canonical.push_str(token);
        }
        canonical.push_str("\nx-amz-target:");
        canonical.push_str(target);
        canonical.push_str("\n\n");
        canonical.push_str(signed_headers);
        canonical.push('\n');
        push_hex(&mut canonical, &Sha256::digest(body));

        let scope = format!("{date}/{}/{}/aws4_request", self.region, self.service);
        let mut to_sign = String::with_capacity(64 + scope.len() + 64);
        to_sign.push_str("AWS4-HMAC-SHA256\n");
        to_sign.push_str(&amz_date);
        to_sign.push('\n');
        to_sign.push_str(&scope);
        to_sign.push('\n');
        push_hex(&mut to_sign, &Sha256::digest(canonical.as_bytes()));

        let key = self.key(credentials, date);
        let mut authorization = String::with_capacity(128 + scope.len() + signed_headers.len());
        let _ = write!(
            authorization,
            "AWS4-HMAC-SHA256 Credential={}/{scope}, SignedHeaders={signed_headers}, Signature=",
            credentials.access_key_id()
        );
        push_hex(&mut authorization, &hmac(&key, to_sign.as_bytes()));
        Signed { amz_date, authorization }
    }

    /// The signing key for `date` on `credentials`: the kept one while both are the same.
    fn key(&self, credentials: &Credentials, date: &str) -> [u8; 32] {
        let mut kept = self.key.lock().unwrap_or_else(PoisonError::into_inner);
        if let Some(day) = kept.as_ref()
            && day.date == date
            && day.access_key_id == credentials.access_key_id()
            && day.secret == credentials.secret_access_key()
        {
            return day.key;
        }
        let secret = format!("AWS4{}", credentials.secret_access_key());
        let key = [date, &self.region, self.service, "aws4_request"]
            .iter()
            .fold(None::<[u8; 32]>, |key, part| {
                Some(hmac(key.as_ref().map_or(secret.as_bytes(), |key| key.as_slice()), part.as_bytes()))
            })
            .unwrap_or_default();
        *kept = Some(DayKey {
            date: date.to_owned(),
            access_key_id: credentials.access_key_id().to_owned(),
            secret: credentials.secret_access_key().to_owned(),
            key,
        });
        key
    }
}

fn hmac(key: &[u8], data: &[u8]) -> [u8; 32] {
    let mut mac = HmacSha256::new_from_slice(key).unwrap_or_else(|_| unreachable!("HMAC takes a key of any length"));
    mac.update(data);
    mac.finalize().into_bytes().into()
}

fn push_hex(out: &mut String, bytes: &[u8]) {
    const DIGITS: &[u8; 16] = b"0123456789abcdef";
    for byte in bytes {
        out.push(char::from(DIGITS[usize::from(byte >> 4)]));
        out.push(char::from(DIGITS[usize::from(byte & 0xf)]));
    }
}

/// `time` as SigV4 writes it, `YYYYMMDDTHHMMSSZ` in UTC (a time before 1970 as 1970's first
/// second: the signer's clock is the system's).
pub fn amz_date(time: SystemTime) -> String {
    let seconds = time.duration_since(UNIX_EPOCH).map(|since| since.as_secs()).unwrap_or(0);
    let (days, second) = (seconds / 86_400, seconds % 86_400);
    let (year, month, day) = civil_from_days(days);
    format!("{year:04}{month:02}{day:02}T{:02}{:02}{:02}Z", second / 3600, second / 60 % 60, second % 60)
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use aws_sigv4::http_request::{SignableBody, SignableRequest, SigningSettings, sign};
    use aws_smithy_runtime_api::client::identity::Identity;

    use super::*;

    /// What aws-sigv4 adds to the same request: its `x-amz-date` and `authorization` headers.
    fn by_aws_sigv4(
        credentials: &Credentials,
        region: &str,
        time: SystemTime,
        host: &str,
        target: &str,
        body: &[u8],
    ) -> Signed {
        let identity: Identity = credentials.clone().into();
        let params = aws_sigv4::sign::v4::SigningParams::builder()
            .identity(&identity)
            .region(region)
            .name("dynamodb")
            .time(time)
            .settings(SigningSettings::default())
            .build()
            .expect("complete")
            .into();
        let url = format!("https://{host}/");
        let headers = [("content-type", JSON_1_0), ("x-amz-target", target), ("host", host)];
        let signable =
            SignableRequest::new("POST", &url, headers.into_iter(), SignableBody::Bytes(body)).expect("signable");
        let (instructions, _) = sign(signable, &params).expect("signed").into_parts();
        let mut request = http::Request::post(&url).body(()).expect("a request");
        instructions.apply_to_request_http1x(&mut request);
        let header = |name: &str| request.headers()[name].to_str().expect("text").to_owned();
        if let Some(token) = credentials.session_token() {
            assert_eq!(header("x-amz-security-token"), token, "the token is sent as it is");
        }
        Signed { amz_date: header("x-amz-date"), authorization: header("authorization") }
    }

    fn at(seconds: u64) -> SystemTime {
        UNIX_EPOCH + Duration::from_secs(seconds)
    }

    #[test]
    fn signatures_are_aws_sigv4s_byte_for_byte() {
        let permanent = Credentials::new("AKIDEXAMPLE", "wJalrXUtnFEMI/K7MDENG+bPxRfiCYEXAMPLEKEY", None, None, "test");
        let temporary = Credentials::new(
            "ASIAEXAMPLE",
            "secret/with+signs=",
            Some("IQoJb3JpZ2luX2VjEJr//////////wEaCXVzLWVhc3QtMSJHMEUCIQ+token/==".to_owned()),
            None,
            "test",
        );
        let bodies: [&[u8]; 4] = [
            b"",
            br#"{"TableName":"cfn-once-leases","Key":{"StackId":{"S":"arn:aws:cloudformation:eu-west-1:1:stack/s/1"}}}"#,
            "{\"Reason\":{\"S\":\"caf\u{e9} \u{2603} \\\"quoted\\\"\"}}".as_bytes(),
            &[b'x'; 70_000],
        ];
        let times = [
            1_796_176_472,   // 2026-12-02
            1_709_251_199,   // 2024-02-29T23:59:59Z, a leap day's last second
            1_709_251_200,   // 2024-03-01T00:00:00Z
            946_684_799,     // 1999-12-31T23:59:59Z
            951_782_400,     // 2000-02-29, the leap day of a century divisible by 400
            4_107_542_400,   // 2100-03-01, after a century without one
            253_402_300_799, // 9999-12-31T23:59:59Z
        ];
        let places = [
            ("us-east-1", "dynamodb.us-east-1.amazonaws.com"),
            ("cn-north-1", "dynamodb.cn-north-1.amazonaws.com.cn"),
            ("eu-west-1", "127.0.0.1:45678"),
            ("us-gov-west-1", "dynamodb-fips.us-gov-west-1.amazonaws.com"),
        ];
        let mut compared = 0;
        for (region, host) in places {
            let signer = PostSigner::new(region, "dynamodb");
            for credentials in [&permanent, &temporary] {
                for target in ["DynamoDB_20120810.UpdateItem", "DynamoDB_20120810.GetItem"] {
                    assert!(signer.fits(host, target, credentials));
                    for body in bodies {
                        for time in times.map(at) {
                            assert_eq!(
                                signer.sign(credentials, time, host, target, body),
                                by_aws_sigv4(credentials, region, time, host, target, body),
                                "{region} {host} {target} at {}",
                                amz_date(time)
                            );
                            compared += 1;
                        }
                    }
                }
            }
        }
        assert_eq!(compared, 4 * 2 * 2 * 4 * 7);
    }

    #[test]
    fn the_kept_key_follows_the_day_and_the_credentials() {
        let signer = PostSigner::new("eu-west-1", "dynamodb");
        let host = "dynamodb.eu-west-1.amazonaws.com";
        let target = "DynamoDB_20120810.PutItem";
        let first = Credentials::new("AKIDFIRST", "first-secret", None, None, "test");
        let rotated = Credentials::new("AKIDFIRST", "rotated-secret", None, None, "test");
        let other = Credentials::new("AKIDOTHER", "first-secret", None, None, "test");
        // The same day twice, a second before midnight and after, then new credentials, then back.
        let steps = [
            (&first, 1_796_169_599),
            (&first, 1_796_169_599),
            (&first, 1_796_169_600),
            (&rotated, 1_796_169_601),
            (&other, 1_796_169_602),
            (&first, 1_796_169_603),
        ];
        for (credentials, seconds) in steps {
            assert_eq!(
                signer.sign(credentials, at(seconds), host, target, b"{}"),
                by_aws_sigv4(credentials, "eu-west-1", at(seconds), host, target, b"{}"),
                "{} at {seconds}",
                credentials.secret_access_key()
            );
        }
    }

    #[test]
    fn dates_are_written_as_sigv4_writes_them() {
        assert_eq!(amz_date(at(0)), "19700101T000000Z");
        assert_eq!(amz_date(at(1_709_251_199)), "20240229T235959Z");
        assert_eq!(amz_date(at(4_107_542_400)), "21000301T000000Z");
        assert_eq!(amz_date(UNIX_EPOCH - Duration::from_secs(1)), "19700101T000000Z");
        // Every day of four centuries, against the day before it.
        let mut previous = civil_from_days(0);
        for days in 1..146_097 * 4 {
            let (year, month, day) = civil_from_days(days);
            let leap = year % 4 == 0 && (year % 100 != 0 || year % 400 == 0);
            let length = [31, if leap { 29 } else { 28 }, 31, 30, 31, 30, 31, 31, 30, 31, 30, 31];
            let expected = if previous.2 < length[usize::try_from(previous.1 - 1).expect("a month")] {
                (previous.0, previous.1, previous.2 + 1)
            } else if previous.1 < 12 {
                (previous.0, previous.1 + 1, 1)
            } else {
                (previous.0 + 1, 1, 1)
            };
            assert_eq!((year, month, day), expected, "day {days}");
            previous = (year, month, day);
        }
    }

    #[test]
    fn only_values_signed_as_they_are_fit() {
        let signer = PostSigner::new("eu-west-1", "dynamodb");
        let plain = Credentials::new("AKID", "secret", Some("token".to_owned()), None, "test");
        let spaced = Credentials::new("AKID", "secret", Some(" token  with spaces ".to_owned()), None, "test");
        assert!(signer.fits("dynamodb.eu-west-1.amazonaws.com", "DynamoDB_20120810.GetItem", &plain));
        assert!(!signer.fits("dynamodb.eu-west-1.amazonaws.com", "DynamoDB_20120810.GetItem", &spaced));
        assert!(!signer.fits("", "DynamoDB_20120810.GetItem", &plain));
        assert!(!signer.fits("h\u{e9}st", "DynamoDB_20120810.GetItem", &plain));
        assert!(!PostSigner::new("eu west", "dynamodb").fits("host", "DynamoDB_20120810.GetItem", &plain));
    }
}
