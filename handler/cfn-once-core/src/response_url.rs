//! The ResponseURL: validated before use, sent as received, and never printable.
//!
//! A presigned ResponseURL is a credential: whoever holds it can answer for the stack. This
//! module keeps it inside [`ResponseUrl`], whose `Debug` is redacted and which has no `Display`,
//! so it cannot reach a log line or an error message by accident. [`UrlPolicy::check`] accepts
//! only what CloudFormation sends (https on port 443, no userinfo, an S3 host) plus explicitly
//! allow-listed prefixes for local endpoints; its refusals describe the problem without quoting
//! the URL.
//!
//! The URL is kept as the text CloudFormation sent, never as a parser's serialization of it: S3
//! checks a presigned signature over the path and query it receives, and `url::Url` rewrites them
//! (it resolves `..` and `%2e%2e` segments, percent-encodes `'` in a query, drops `:443`). `check`
//! parses a copy only to validate it, and refuses a URL whose text another parser could read
//! differently (whitespace or a byte outside visible ASCII, which `url` silently strips; a
//! backslash, which it reads as `/`; a fragment; a scheme not in lower case; no path; an
//! authority that is not `host` or `host:port` as the parse read it), so what was validated is
//! what the PUT sends.

use url::Url;

use crate::aws_names::is_region;

/// A ResponseURL that passed [`UrlPolicy::check`]: the text as received.
#[derive(Clone, PartialEq, Eq)]
pub struct ResponseUrl(String);

impl ResponseUrl {
    /// The URL itself, byte for byte as received, for the one adapter that sends the response.
    /// Never log the result.
    pub fn expose_secret(&self) -> &str {
        &self.0
    }

    /// Seconds-resolution expiry written into a presigned URL, if it carries one: SigV4
    /// `X-Amz-Date` + `X-Amz-Expires`, or the older SigV2 `Expires` (epoch seconds).
    pub fn presigned_expiry_ms(&self) -> Option<u64> {
        let mut amz_date = None;
        let mut amz_expires = None;
        let mut expires = None;
        // `check` refused fragments, so the query runs from the first `?` to the end.
        let query = self.0.split_once('?').map_or("", |(_, query)| query);
        for (name, value) in url::form_urlencoded::parse(query.as_bytes()) {
            match name.as_ref() {
                "X-Amz-Date" => amz_date = parse_amz_date_ms(&value),
                "X-Amz-Expires" => amz_expires = value.parse::<u64>().ok(),
                "Expires" => expires = value.parse::<u64>().ok(),
                _ => {}
            }
        }
        match (amz_date, amz_expires, expires) {
            (Some(signed_ms), Some(valid_s), _) => Some(signed_ms.saturating_add(valid_s.saturating_mul(1000))),
            (_, _, Some(epoch_s)) => Some(epoch_s.saturating_mul(1000)),
            _ => None,
        }
    }
}

impl std::fmt::Debug for ResponseUrl {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("ResponseUrl(<redacted>)")
    }
}

/// Why a ResponseURL was refused. The messages never contain the URL's path or query.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum UrlRefused {
    /// Not an absolute URL at all.
    #[error("ResponseURL is not a valid absolute URL")]
    Unparsable,
    /// A text that parsers could read differently, which CloudFormation never sends.
    #[error(
        "ResponseURL has a shape CloudFormation never sends (whitespace or a byte outside visible ASCII, a backslash, a fragment, a scheme not in lower case, no path, or an irregular host and port); it is refused rather than rewritten"
    )]
    Irregular,
    /// A scheme other than https, and no allow-listed prefix matched; holds the scheme.
    #[error(
        "ResponseURL uses scheme {0}; only https is accepted (allow-list a local endpoint with CFN_ONCE_RESPONSE_URL_ALLOW)"
    )]
    Scheme(String),
    /// Carries a user name or password, which CloudFormation never sends.
    #[error("ResponseURL carries a user name or password; CloudFormation never sends one")]
    Userinfo,
    /// A port other than 443, and no allow-listed prefix matched; holds the port.
    #[error("ResponseURL uses port {0}; only 443 is accepted")]
    Port(u16),
    /// A host that is not an S3 endpoint, and no allow-listed prefix matched; holds the host.
    #[error("ResponseURL host {0} is not an Amazon S3 endpoint and is not allow-listed in CFN_ONCE_RESPONSE_URL_ALLOW")]
    Host(String),
}

/// An allow-listed URL prefix for non-AWS endpoints (moto, a drill bucket): scheme, host and
/// port must match exactly and the path must start with the prefix's path, both as received and
/// with its dot segments resolved.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AllowedPrefix(Url);

impl AllowedPrefix {
    /// Parses one allow-list entry such as `http://127.0.0.1:5000/responses/`.
    pub fn parse(entry: &str) -> Result<Self, String> {
        let url = Url::parse(entry).map_err(|e| format!("{entry:?} is not an absolute URL ({e})"))?;
        if !matches!(url.scheme(), "http" | "https") {
            return Err(format!("{entry:?} must be an http or https URL"));
        }
        if url.host_str().is_none() {
            return Err(format!("{entry:?} has no host"));
        }
        if !url.username().is_empty() || url.password().is_some() {
            return Err(format!("{entry:?} must not carry a user name or password"));
        }
        if url.query().is_some() || url.fragment().is_some() {
            return Err(format!("{entry:?} must not carry a query or fragment"));
        }
        Ok(Self(url))
    }

    /// True if `url`, parsed from `raw_path`'s URL, is under this prefix: its path both as
    /// received and with dot segments resolved (a server may resolve them), so `/prefix/../x`
    /// does not get out.
    fn admits(&self, url: &Url, raw_path: &str) -> bool {
        url.scheme() == self.0.scheme()
            && url.host_str() == self.0.host_str()
            && url.port_or_known_default() == self.0.port_or_known_default()
            && url.path().starts_with(self.0.path())
            && raw_path.starts_with(self.0.path())
    }
}

/// Which ResponseURLs this deployment will send to.
#[derive(Debug, Clone, Default)]
pub struct UrlPolicy {
    allow: Vec<AllowedPrefix>,
}

impl UrlPolicy {
    /// The strict policy plus `allow`, which may be empty.
    pub fn new(allow: Vec<AllowedPrefix>) -> Self {
        Self { allow }
    }

    /// Accepts `raw` if it is a CloudFormation-shaped S3 URL or matches an allow-listed prefix.
    /// The parse only validates: the URL kept is `raw` itself.
    pub fn check(&self, raw: &str) -> Result<ResponseUrl, UrlRefused> {
        if !raw.bytes().all(|byte| byte.is_ascii_graphic()) || raw.contains(['\\', '#']) {
            return Err(UrlRefused::Irregular);
        }
        let url = Url::parse(raw).map_err(|_| UrlRefused::Unparsable)?;
        if !url.username().is_empty() || url.password().is_some() {
            return Err(UrlRefused::Userinfo);
        }
        let raw_path = raw_path_of(raw, &url).ok_or(UrlRefused::Irregular)?;
        if self.allow.iter().any(|prefix| prefix.admits(&url, raw_path)) {
            return Ok(ResponseUrl(raw.to_owned()));
        }
        if url.scheme() != "https" {
            return Err(UrlRefused::Scheme(url.scheme().to_owned()));
        }
        match url.port_or_known_default() {
            Some(443) => {}
            Some(port) => return Err(UrlRefused::Port(port)),
            None => return Err(UrlRefused::Unparsable),
        }
        let host = url.host_str().unwrap_or_default();
        if !is_s3_host(host) {
            return Err(UrlRefused::Host(host.to_owned()));
        }
        Ok(ResponseUrl(raw.to_owned()))
    }
}

/// The path of `raw` as received (up to its query), if `raw` names the origin `url` parsed from
/// it in plain text: the scheme as parsed, then `://`, then the host (in any case) alone or with
/// the port's digits as parsed, then a `/`. An HTTP client reading the text then connects where
/// the policy looked.
fn raw_path_of<'a>(raw: &'a str, url: &Url) -> Option<&'a str> {
    let rest = raw.strip_prefix(url.scheme())?.strip_prefix("://")?;
    let authority_end = rest.find('/')?;
    let (authority, path_and_query) = rest.split_at(authority_end);
    let host = url.host_str()?;
    let names_the_origin = authority.eq_ignore_ascii_case(host)
        || authority.rsplit_once(':').is_some_and(|(name, port)| {
            name.eq_ignore_ascii_case(host)
                && url.port_or_known_default().is_some_and(|known| port == known.to_string())
        });
    names_the_origin.then(|| path_and_query.split_once('?').map_or(path_and_query, |(path, _)| path))
}

/// True for the S3 endpoint shapes CloudFormation uses, virtual-hosted or path-style:
/// `[bucket.]s3[.dualstack].amazonaws.com`, `[bucket.]s3[-fips][.dualstack].<region>.amazonaws.com`,
/// the legacy `[bucket.]s3-<region>.amazonaws.com`, and the same under `amazonaws.com.cn`.
pub fn is_s3_host(host: &str) -> bool {
    let host = host.to_ascii_lowercase();
    let Some(rest) = host.strip_suffix(".amazonaws.com").or_else(|| host.strip_suffix(".amazonaws.com.cn")) else {
        return false;
    };
    let mut labels: Vec<&str> = rest.split('.').collect();
    if labels.iter().any(|label| !is_dns_label(label)) {
        return false;
    }
    // Peel from the right: optional region, optional "dualstack", then the service label.
    if labels.last().is_some_and(|label| is_region(label)) {
        labels.pop();
    }
    if labels.last() == Some(&"dualstack") {
        labels.pop();
    }
    let Some(service) = labels.pop() else {
        return false;
    };
    let service_ok = service == "s3"
        || service == "s3-fips"
        || service.strip_prefix("s3-").is_some_and(is_region)
        || service.strip_prefix("s3-fips-").is_some_and(is_region);
    // Whatever is left is the bucket of a virtual-hosted URL (bucket names may contain dots).
    service_ok
}

fn is_dns_label(label: &str) -> bool {
    !label.is_empty()
        && label.len() <= 63
        && label.bytes().all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-')
        && !label.starts_with('-')
        && !label.ends_with('-')
}

/// Parses SigV4's `YYYYMMDDTHHMMSSZ` into epoch milliseconds.
fn parse_amz_date_ms(value: &str) -> Option<u64> {
    let bytes = value.as_bytes();
    if bytes.len() != 16 || bytes[8] != b'T' || bytes[15] != b'Z' {
        return None;
    }
    let num = |range: std::ops::Range<usize>| value.get(range)?.parse::<u64>().ok();
    let (year, month, day) = (num(0..4)?, num(4..6)?, num(6..8)?);
    let (hour, minute, second) = (num(9..11)?, num(11..13)?, num(13..15)?);
    if !(1..=12).contains(&month) || !(1..=31).contains(&day) || hour > 23 || minute > 59 || second > 60 {
        return None;
    }
    // A date before the epoch has no epoch milliseconds.
    if year < 1970 {
        return None;
    }
    let days = crate::timestamp::days_from_civil(year, month, day);
    let seconds = days * 86_400 + hour * 3_600 + minute * 60 + second;
    Some(seconds * 1000)
}

#[cfg(test)]
mod tests {
    use super::*;

    const CFN_URL: &str = "https://cloudformation-custom-resource-response-useast1.s3.amazonaws.com/arn%3Aaws%3Acloudformation%3Aus-east-1%3A123456789012%3Astack/demo/1a2b|Thing|5f3c?X-Amz-Algorithm=AWS4-HMAC-SHA256&X-Amz-Date=20261129T073311Z&X-Amz-Expires=7200&X-Amz-SignedHeaders=host&X-Amz-Signature=abc";

    fn check(raw: &str, expected: Result<(), UrlRefused>) {
        let got = UrlPolicy::new(vec![]).check(raw).map(|_| ());
        assert_eq!(got, expected, "for {raw}");
    }

    #[test]
    fn strict_policy_table() {
        check(CFN_URL, Ok(()));
        check("https://cloudformation-custom-resource-response-useast1.s3-us-east-1.amazonaws.com/k?x=1", Ok(()));
        check("https://cloudformation-custom-resource-response-euwest1.s3.eu-west-1.amazonaws.com/k", Ok(()));
        check("https://s3.us-west-2.amazonaws.com/bucket/key", Ok(()));
        check("https://my.dotted.bucket.s3.dualstack.ap-southeast-2.amazonaws.com/key", Ok(()));
        check("https://bucket.s3.cn-north-1.amazonaws.com.cn/key", Ok(()));
        check("https://bucket.s3-fips.us-gov-west-1.amazonaws.com/key", Ok(()));
        check("https://bucket.s3.amazonaws.com:443/key", Ok(()));
        check("http://bucket.s3.amazonaws.com/key", Err(UrlRefused::Scheme("http".into())));
        check("https://bucket.s3.amazonaws.com:8443/key", Err(UrlRefused::Port(8443)));
        check("https://user:pw@bucket.s3.amazonaws.com/key", Err(UrlRefused::Userinfo));
        check("https://evil.example.com/key", Err(UrlRefused::Host("evil.example.com".into())));
        check("https://s3.amazonaws.com.evil.com/key", Err(UrlRefused::Host("s3.amazonaws.com.evil.com".into())));
        check(
            "https://bucket.s4.us-east-1.amazonaws.com/key",
            Err(UrlRefused::Host("bucket.s4.us-east-1.amazonaws.com".into())),
        );
        check("https://ec2.us-east-1.amazonaws.com/key", Err(UrlRefused::Host("ec2.us-east-1.amazonaws.com".into())));
        check("https://amazonaws.com/key", Err(UrlRefused::Host("amazonaws.com".into())));
        check("https://127.0.0.1/key", Err(UrlRefused::Host("127.0.0.1".into())));
        check("not-a-url", Err(UrlRefused::Unparsable));
        check("not a url", Err(UrlRefused::Irregular));
    }

    /// Path-and-query texts that `url::Url` would rewrite, or that a presigned URL carries: each
    /// is kept byte for byte.
    const AS_SENT: [&str; 7] = [
        "/stack/a/%2e%2e/b%2E%2E/key",
        "/stack/a/../b/./key",
        "/arn%3Aaws%3Acloudformation%3Aus-east-1%3A123456789012%3Astack/demo/1a2b%7CThing%7C5f3c",
        "/~owner/key~1",
        "/it's/key?note='quoted'",
        "/k?AWSAccessKeyId=AKIDEXAMPLE&Expires=1795944791&Signature=ab%2Bcd%2Fef%3D",
        "/k?X-Amz-Algorithm=AWS4-HMAC-SHA256&X-Amz-Credential=AKID%2F20261203%2Fus-east-1%2Fs3%2Faws4_request&X-Amz-Date=20261203T161500Z&X-Amz-Expires=7200&X-Amz-SignedHeaders=host&X-Amz-Signature=0123abcd",
    ];

    #[test]
    fn the_url_kept_is_the_text_received() {
        for origin in ["https://bucket.s3.us-east-1.amazonaws.com", "https://bucket.s3.amazonaws.com:443"] {
            for path_and_query in AS_SENT {
                let raw = format!("{origin}{path_and_query}");
                let url = UrlPolicy::new(vec![]).check(&raw).expect("a CloudFormation-shaped URL");
                assert_eq!(url.expose_secret(), raw, "kept as received");
            }
        }
        let policy = UrlPolicy::new(vec![AllowedPrefix::parse("http://127.0.0.1:5000/").expect("valid prefix")]);
        let raw = "http://127.0.0.1:5000/a/%2e%2e/b?x='y'";
        assert_eq!(policy.check(raw).expect("allow-listed").expose_secret(), raw);
    }

    #[test]
    fn a_text_parsers_could_read_differently_is_refused() {
        for raw in [
            " https://b.s3.amazonaws.com/k",
            "https://b.s3.amazonaws.com/k\t",
            "https://b.s3.amazonaws.com/k\n?x=1",
            "https://b.s3.amazonaws.com/k\u{e9}",
            "https://b.s3.amazonaws.com/k#fragment",
            "https://b.s3.amazonaws.com\\k",
            "https://b.s3.amazonaws.com/a\\..\\k",
            "HTTPS://b.s3.amazonaws.com/k",
            "https://b.s3.amazonaws.com?x=/k",
            "https://b.s3.amazonaws.com",
            "https://b.s3.amazonaws.com:0443/k",
            "https://b.s3.amazonaws.com:/k",
            "https://b.s3.amazonaws.com%2e/k",
        ] {
            check(raw, Err(UrlRefused::Irregular));
        }
        check("https://B.S3.AMAZONAWS.COM/k", Ok(()));
    }

    #[test]
    fn allow_list_admits_only_its_prefix() {
        let policy =
            UrlPolicy::new(vec![AllowedPrefix::parse("http://127.0.0.1:5000/responses/").expect("valid prefix")]);
        assert!(policy.check("http://127.0.0.1:5000/responses/k?X-Amz-Signature=1").is_ok());
        assert_eq!(
            policy.check("http://127.0.0.1:5001/responses/k").map(|_| ()),
            Err(UrlRefused::Scheme("http".into()))
        );
        assert!(policy.check("http://127.0.0.1:5000/other/k").is_err());
        // Out of the prefix by a dot segment, or into it by one: refused either way.
        assert!(policy.check("http://127.0.0.1:5000/responses/../other/k").is_err());
        assert!(policy.check("http://127.0.0.1:5000/responses/%2e%2e/other/k").is_err());
        assert!(policy.check("http://127.0.0.1:5000/other/../responses/k").is_err());
        assert!(policy.check("http://localhost:5000/responses/k").is_err());
        assert_eq!(policy.check("http://u:p@127.0.0.1:5000/responses/k").map(|_| ()), Err(UrlRefused::Userinfo));
        assert!(AllowedPrefix::parse("ftp://host/").is_err());
        assert!(AllowedPrefix::parse("http://u@host/").is_err());
    }

    #[test]
    fn refusals_never_quote_the_path_or_query() {
        let secret = "X-Amz-Signature=topsecret";
        for raw in [
            format!("http://bucket.s3.amazonaws.com/key?{secret}"),
            format!("https://evil.example.com/key?{secret}"),
            format!("https://bucket.s3.amazonaws.com:8443/key?{secret}"),
            format!("https://u:p@bucket.s3.amazonaws.com/key?{secret}"),
        ] {
            let refusal = UrlPolicy::new(vec![]).check(&raw).expect_err("must be refused").to_string();
            assert!(!refusal.contains("topsecret") && !refusal.contains("/key"), "{refusal}");
        }
        let accepted = UrlPolicy::new(vec![]).check(CFN_URL).expect("valid");
        assert_eq!(format!("{accepted:?}"), "ResponseUrl(<redacted>)");
    }

    #[test]
    fn presigned_expiry_from_sigv4_and_sigv2() {
        let url = UrlPolicy::new(vec![]).check(CFN_URL).expect("valid");
        // 2026-11-29T07:33:11Z is 1795937591 s; plus 7200 s.
        assert_eq!(url.presigned_expiry_ms(), Some((1_795_937_591 + 7_200) * 1000));
        let v2 = UrlPolicy::new(vec![])
            .check("https://b.s3.amazonaws.com/k?AWSAccessKeyId=x&Expires=1795944791&Signature=s")
            .expect("valid");
        assert_eq!(v2.presigned_expiry_ms(), Some(1_795_944_791_000));
        let none = UrlPolicy::new(vec![]).check("https://b.s3.amazonaws.com/k").expect("valid");
        assert_eq!(none.presigned_expiry_ms(), None);
    }

    #[test]
    fn amz_dates_read_from_the_epoch_on() {
        assert_eq!(parse_amz_date_ms("19700101T000000Z"), Some(0));
        assert_eq!(parse_amz_date_ms("20261129T073311Z"), Some(1_795_937_591_000));
        assert_eq!(parse_amz_date_ms("20240229T235959Z"), Some(1_709_251_199_000));
        assert_eq!(parse_amz_date_ms("19691231T235959Z"), None, "before the epoch");
        assert_eq!(parse_amz_date_ms("00000101T000000Z"), None);
        assert_eq!(parse_amz_date_ms("20261329T073311Z"), None);
    }
}
