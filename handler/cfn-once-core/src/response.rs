//! The response body PUT to the ResponseURL.
//!
//! Built once, committed as exact bytes, and replayed byte for byte (invariant S1). The rules:
//! the body is at most 4096 bytes (a long Reason is shortened; Data that cannot fit turns the
//! answer into FAILED saying so, with the id a FAILED answer needs: a Create's the provider chose,
//! an Update's or Delete's the one it was sent); a FAILED answer always has a Reason;
//! PhysicalResourceId is never empty and at most 1024 bytes; and its defaults never replace a
//! resource by accident: Update and Delete echo the id CloudFormation sent unless a provider
//! explicitly returns a new one on Update.

use std::collections::BTreeMap;

use serde::Serialize;
use serde_json::Value;

use crate::fingerprint::short_digest;
use crate::request::{PHYSICAL_ID_BYTES_MAX, Request, RequestKind};

/// CloudFormation's limit on the whole response body ("The total size of the response body can't
/// exceed 4096 bytes",
/// <https://docs.aws.amazon.com/AWSCloudFormation/latest/UserGuide/crpg-ref-responses.html>).
pub const BODY_BYTES_MAX: usize = 4096;

/// Prefix of the PhysicalResourceId given to a Create refused before any provider ran, so the
/// Delete CloudFormation sends during rollback can be recognised and answered without touching
/// any provider. A Create whose provider ran, or may have run, and failed gets the id a success
/// would have had instead, so that its rollback Delete reaches the provider and cleans up
/// whatever it wrote.
pub const FAILED_CREATE_PREFIX: &str = "cfn-once-failed-create-";

const TRUNCATION_MARK: &str = " [truncated]";

/// SUCCESS or FAILED.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, serde::Deserialize)]
#[serde(rename_all = "SCREAMING_SNAKE_CASE")]
pub enum Status {
    /// The operation succeeded: CloudFormation carries on with the stack.
    Success,
    /// The operation failed: CloudFormation shows the Reason and rolls the stack back.
    Failed,
}

/// What a run decided, before it is shaped into a body.
#[derive(Debug, Clone, PartialEq)]
pub enum Outcome {
    /// SUCCESS: the provider did its work, or there was nothing to delete.
    Success {
        /// A new PhysicalResourceId, or `None` to keep the default (see module docs).
        physical_resource_id: Option<String>,
        /// Attributes the template reads with `Fn::GetAtt`.
        data: BTreeMap<String, Value>,
        /// Whether CloudFormation should mask `data` in its console and API output.
        no_echo: bool,
    },
    /// FAILED after the provider ran, or may have run (it failed, timed out, or an execution
    /// taken over may have started it).
    Failed {
        /// Why, for the FAILED Reason.
        reason: String,
    },
    /// FAILED and provably no provider ran for this request: bad properties, no provider for
    /// the type, a malformed request, or a deadline nobody could meet before anyone started.
    Refused {
        /// Why, for the FAILED Reason.
        reason: String,
    },
}

impl Outcome {
    /// A FAILED outcome with `reason`, after the provider ran or may have run.
    pub fn failed(reason: impl Into<String>) -> Self {
        Self::Failed { reason: reason.into() }
    }

    /// A FAILED outcome with `reason`, with certainty that no provider ran.
    pub fn refused(reason: impl Into<String>) -> Self {
        Self::Refused { reason: reason.into() }
    }
}

/// The JSON document CloudFormation expects, in its documented field order.
#[derive(Debug, Clone, PartialEq, Serialize, serde::Deserialize)]
#[serde(rename_all = "PascalCase")]
pub struct ResponseBody {
    /// SUCCESS or FAILED.
    pub status: Status,
    /// Why the request FAILED; always present then, omitted on SUCCESS.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,
    /// The resource's id; a new one on Update makes CloudFormation replace the resource.
    pub physical_resource_id: String,
    /// Echoed from the request, so CloudFormation can match the answer to it.
    pub stack_id: String,
    /// Echoed from the request, so CloudFormation can match the answer to it.
    pub request_id: String,
    /// Echoed from the request, so CloudFormation can match the answer to it.
    pub logical_resource_id: String,
    /// Whether CloudFormation masks `Data` in its console and API output.
    pub no_echo: bool,
    /// Attributes the template reads with `Fn::GetAtt`; omitted when empty.
    #[serde(skip_serializing_if = "BTreeMap::is_empty", default)]
    pub data: BTreeMap<String, Value>,
}

impl ResponseBody {
    /// Parses committed bytes back, e.g. to report what was answered.
    pub fn parse(bytes: &[u8]) -> Result<Self, serde_json::Error> {
        serde_json::from_slice(bytes)
    }
}

/// The status committed bytes carry, read back; bytes that are not a response body count as
/// FAILED. For bytes this process did not just build ([`build_with_status`] gives theirs).
pub fn status_of(bytes: &[u8]) -> Status {
    ResponseBody::parse(bytes).map_or(Status::Failed, |body| body.status)
}

/// The PhysicalResourceId a Create gets when its provider chose none: derived from the stack,
/// the logical id and the request, so every region computes the same one.
pub fn default_physical_id(request: &Request) -> String {
    let digest = short_digest(&[&request.key.stack_id, &request.logical_resource_id, &request.key.request_id]);
    format!("{}-{digest}", request.logical_resource_id)
}

/// The PhysicalResourceId a successful `request` keeps when its provider chose none: the one
/// it was sent (Update, Delete), or a Create's default ([`default_physical_id`]).
pub fn kept_physical_id(request: &Request) -> String {
    request
        .physical_resource_id()
        .filter(|id| !id.is_empty())
        .map_or_else(|| default_physical_id(request), str::to_owned)
}

/// True for the id [`build`] gives a failed Create.
pub fn is_failed_create_id(physical_resource_id: &str) -> bool {
    physical_resource_id.starts_with(FAILED_CREATE_PREFIX)
}

/// Shapes `outcome` into the exact bytes to commit and PUT, within [`BODY_BYTES_MAX`].
pub fn build(request: &Request, outcome: Outcome) -> Vec<u8> {
    build_with_status(request, outcome).0
}

/// [`build`], and the status the bytes carry (which may be FAILED for a SUCCESS outcome whose id
/// or Data cannot be sent), so that whoever sends them need not parse them back.
pub fn build_with_status(request: &Request, outcome: Outcome) -> (Vec<u8>, Status) {
    let request_digest = short_digest(&[&request.key.stack_id, &request.key.request_id]);
    let existing_id = request.physical_resource_id().filter(|id| !id.is_empty()).map(str::to_owned);
    // Update and Delete keep the id they were sent. A Create gets the marker id only when no
    // provider ran; otherwise the id a success would have had, so the rollback Delete reaches
    // the provider (its Delete must accept ids it never returned).
    let failed_id = |provider_ran: bool| match (request.kind(), &existing_id) {
        (Some(RequestKind::Update | RequestKind::Delete), Some(id)) => id.clone(),
        _ if provider_ran => default_physical_id(request),
        _ => format!("{FAILED_CREATE_PREFIX}{request_digest}"),
    };

    let mut body = match outcome {
        Outcome::Success { physical_resource_id, data, no_echo } => {
            let chosen = match (request.kind(), physical_resource_id, &existing_id) {
                // Delete never changes the id; Update keeps it unless the provider replaced it.
                (Some(RequestKind::Delete), _, Some(existing)) => Ok(existing.clone()),
                (_, Some(new_id), _) => validate_physical_id(new_id),
                (_, None, Some(existing)) => Ok(existing.clone()),
                (_, None, None) => Ok(default_physical_id(request)),
            };
            match chosen {
                Ok(physical_resource_id) => ResponseBody {
                    status: Status::Success,
                    reason: None,
                    physical_resource_id,
                    stack_id: request.key.stack_id.to_string(),
                    request_id: request.key.request_id.clone(),
                    logical_resource_id: request.logical_resource_id.clone(),
                    no_echo,
                    data,
                },
                Err(reason) => failed_body(request, failed_id(true), reason),
            }
        }
        Outcome::Failed { reason } => failed_body(request, failed_id(true), reason),
        Outcome::Refused { reason } => failed_body(request, failed_id(false), reason),
    };

    let bytes = to_bytes(&body);
    if bytes.len() <= BODY_BYTES_MAX {
        return (bytes, body.status);
    }
    if body.status == Status::Success {
        let data_bytes = serde_json::to_vec(&body.data).map(|d| d.len()).unwrap_or(usize::MAX);
        // The provider did create something: keep its id on a Create, so the Delete that
        // CloudFormation sends during rollback reaches the provider and cleans it up.
        let physical_resource_id = match request.kind() {
            Some(RequestKind::Update | RequestKind::Delete) => failed_id(true),
            _ => body.physical_resource_id.clone(),
        };
        body = failed_body(
            request,
            physical_resource_id,
            format!(
                "the provider returned {data_bytes} bytes of Data, which does not fit in CloudFormation's \
                 {BODY_BYTES_MAX}-byte response limit: return fewer or shorter Data values"
            ),
        );
    }
    let status = body.status;
    (shorten_reason(body), status)
}

fn failed_body(request: &Request, physical_resource_id: String, reason: String) -> ResponseBody {
    let reason =
        if reason.trim().is_empty() { "the provider failed without giving a reason".to_owned() } else { reason };
    ResponseBody {
        status: Status::Failed,
        reason: Some(reason),
        physical_resource_id,
        stack_id: request.key.stack_id.to_string(),
        request_id: request.key.request_id.clone(),
        logical_resource_id: request.logical_resource_id.clone(),
        no_echo: false,
        data: BTreeMap::new(),
    }
}

/// `id` if a response can carry it as its PhysicalResourceId: not empty, no control characters,
/// at most [`PHYSICAL_ID_BYTES_MAX`] bytes as JSON; otherwise why not, for a Reason.
pub(crate) fn validate_physical_id(id: String) -> Result<String, String> {
    if id.is_empty() {
        return Err("the provider returned an empty PhysicalResourceId".into());
    }
    if id.chars().any(char::is_control) {
        return Err("the provider returned a PhysicalResourceId with control characters".into());
    }
    // Bounded as it appears in the body: escaping can make a short id long.
    let escaped_bytes = escaped_len(&id);
    if escaped_bytes > PHYSICAL_ID_BYTES_MAX {
        return Err(format!(
            "the provider returned a PhysicalResourceId of {escaped_bytes} bytes; CloudFormation accepts at most {PHYSICAL_ID_BYTES_MAX}"
        ));
    }
    Ok(id)
}

/// The length of `text` as a JSON string's content.
fn escaped_len(text: &str) -> usize {
    serde_json::to_string(text).map_or(usize::MAX, |quoted| quoted.len() - 2)
}

/// Text from outside (an SDK error, a downstream service, a provider's message) made fit for a
/// Reason: markup tags removed, control characters and runs of whitespace turned into single
/// spaces, and at most `chars_max` characters kept (ending in "…" when cut). CloudFormation shows
/// a Reason in its console and event history, where an HTML error page or a dump of HTTP headers
/// helps nobody.
pub fn foreign_text(text: &str, chars_max: usize) -> String {
    let mut cleaned = String::with_capacity(text.len().min(chars_max * 4));
    let mut chars = text.chars().peekable();
    let mut pending_space = false;
    while let Some(c) = chars.next() {
        let tag_starts =
            c == '<' && chars.peek().is_some_and(|next| next.is_ascii_alphabetic() || matches!(next, '/' | '!' | '?'));
        if tag_starts {
            // Skip to the tag's end; an unterminated tag drops the rest, which is markup too.
            for skipped in chars.by_ref() {
                if skipped == '>' {
                    break;
                }
            }
            pending_space = true;
            continue;
        }
        if c.is_control() || c.is_whitespace() {
            pending_space = true;
            continue;
        }
        if pending_space && !cleaned.is_empty() {
            cleaned.push(' ');
        }
        pending_space = false;
        cleaned.push(c);
    }
    if cleaned.chars().count() <= chars_max {
        return cleaned;
    }
    let mut cut: String = cleaned.chars().take(chars_max.saturating_sub(1)).collect();
    cut.push('…');
    cut
}

/// Cuts the Reason, at a character boundary, until the body fits. Identifiers are bounded at
/// decode time, so a body with an empty Reason always fits.
fn shorten_reason(mut body: ResponseBody) -> Vec<u8> {
    let bytes = to_bytes(&body);
    if bytes.len() <= BODY_BYTES_MAX {
        return bytes;
    }
    let Some(reason) = body.reason.take() else {
        return bytes;
    };
    let reason = longest_fitting(&reason, |cut| {
        body.reason = Some(cut.to_owned());
        to_bytes(&body).len() <= BODY_BYTES_MAX
    });
    body.reason = Some(reason);
    let bytes = to_bytes(&body);
    debug_assert!(bytes.len() <= BODY_BYTES_MAX, "identifiers are bounded at decode time");
    bytes
}

/// `text` whole if `fits` accepts it; otherwise its longest prefix, cut at a character and
/// ended by the truncation mark, that `fits` accepts (the mark alone if none does). `fits`
/// judges the bytes of what the text goes into, where escaping makes what one character costs
/// vary, so the cut is found by bisection over the text's bytes, each cut taken back to the
/// character boundary at or before it.
pub(crate) fn longest_fitting(text: &str, mut fits: impl FnMut(&str) -> bool) -> String {
    if fits(text) {
        return text.to_owned();
    }
    let (mut fits_at, mut too_long) = (0usize, text.len());
    while fits_at + 1 < too_long {
        let middle = (fits_at + too_long) / 2;
        if fits(&truncated(text, middle)) {
            fits_at = middle;
        } else {
            too_long = middle;
        }
    }
    truncated(text, fits_at)
}

/// `text` cut to at most `bytes_max` bytes, at a character boundary, and marked as cut.
fn truncated(text: &str, bytes_max: usize) -> String {
    format!("{}{TRUNCATION_MARK}", &text[..text.floor_char_boundary(bytes_max)])
}

fn to_bytes(body: &ResponseBody) -> Vec<u8> {
    // Serializing plain strings, bools and JSON values cannot fail.
    serde_json::to_vec(body).unwrap_or_default()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::request::{InputPolicy, decode};
    use crate::response_url::UrlPolicy;
    use serde_json::json;

    fn request(kind: &str, physical: Option<&str>) -> Request {
        let mut raw = json!({
            "RequestType": kind,
            "ResponseURL": "https://b.s3.amazonaws.com/k",
            "StackId": "arn:aws:cloudformation:us-east-1:123456789012:stack/demo/guid",
            "RequestId": "req-1",
            "LogicalResourceId": "Thing",
            "ResourceType": "Custom::Echo",
            "ResourceProperties": {},
        });
        if let Some(id) = physical {
            raw["PhysicalResourceId"] = json!(id);
        }
        if kind == "Update" {
            raw["OldResourceProperties"] = json!({});
        }
        let policy = InputPolicy {
            topic_arns: vec![],
            raw_delivery: true,
            urls: UrlPolicy::new(vec![]),
            privileged_topic_arns: vec![],
        };
        decode(Some(&raw.to_string()), &policy).expect("valid request")
    }

    fn success(physical: Option<&str>, data: BTreeMap<String, Value>) -> Outcome {
        Outcome::Success { physical_resource_id: physical.map(str::to_owned), data, no_echo: false }
    }

    fn parsed(bytes: &[u8]) -> ResponseBody {
        assert!(bytes.len() <= BODY_BYTES_MAX, "{} bytes", bytes.len());
        ResponseBody::parse(bytes).expect("valid JSON body")
    }

    #[test]
    fn physical_id_table() {
        let check = |request: Request, outcome: Outcome, expected_status: Status, expected_id: &str| {
            let (bytes, status) = build_with_status(&request, outcome);
            let body = parsed(&bytes);
            assert_eq!((body.status, body.physical_resource_id.as_str()), (expected_status, expected_id));
            assert_eq!(status, body.status, "the status given is the one the bytes carry");
        };
        let default_create = default_physical_id(&request("Create", None));
        assert!(default_create.starts_with("Thing-"));
        check(request("Create", None), success(None, BTreeMap::new()), Status::Success, &default_create);
        check(request("Create", None), success(Some("mine"), BTreeMap::new()), Status::Success, "mine");
        check(request("Update", Some("old")), success(None, BTreeMap::new()), Status::Success, "old");
        check(request("Update", Some("old")), success(Some("new"), BTreeMap::new()), Status::Success, "new");
        check(request("Delete", Some("old")), success(Some("other"), BTreeMap::new()), Status::Success, "old");
        check(request("Update", Some("old")), Outcome::failed("nope"), Status::Failed, "old");
        check(request("Delete", Some("old")), Outcome::failed("nope"), Status::Failed, "old");
        check(request("Update", Some("old")), Outcome::refused("nope"), Status::Failed, "old");
        let refused_create = parsed(&build(&request("Create", None), Outcome::refused("nope")));
        assert!(is_failed_create_id(&refused_create.physical_resource_id));
        assert_eq!(refused_create.reason.as_deref(), Some("nope"));
        // The provider ran and failed: its rollback Delete must reach it, under the id a
        // success would have had.
        check(request("Create", None), Outcome::failed("nope"), Status::Failed, &default_create);
        let empty = parsed(&build(&request("Create", None), success(Some(""), BTreeMap::new())));
        assert_eq!(empty.status, Status::Failed);
        assert_eq!(empty.reason.as_deref(), Some("the provider returned an empty PhysicalResourceId"));
        assert_eq!(empty.physical_resource_id, default_create, "the provider ran");
        let huge = parsed(&build(&request("Update", Some("old")), success(Some(&"x".repeat(1025)), BTreeMap::new())));
        assert_eq!((huge.status, huge.physical_resource_id.as_str()), (Status::Failed, "old"));
        // A success whose Data cannot fit is answered FAILED, and says so.
        let data: BTreeMap<String, Value> = [("big".to_owned(), json!("x".repeat(5000)))].into();
        let (bytes, status) = build_with_status(&request("Create", None), success(None, data));
        assert_eq!((status, parsed(&bytes).status), (Status::Failed, Status::Failed));
    }

    #[test]
    fn status_of_reads_committed_bytes_and_counts_anything_else_as_failed() {
        let (success_bytes, _) = build_with_status(&request("Create", None), success(None, BTreeMap::new()));
        let (failed_bytes, _) = build_with_status(&request("Create", None), Outcome::failed("nope"));
        assert_eq!(status_of(&success_bytes), Status::Success);
        assert_eq!(status_of(&failed_bytes), Status::Failed);
        assert_eq!(status_of(&success_bytes[..success_bytes.len() - 1]), Status::Failed, "cut short");
        assert_eq!(status_of(b"not json"), Status::Failed);
    }

    #[test]
    fn the_same_outcome_gives_the_same_bytes() {
        let data: BTreeMap<String, Value> = [("b".to_owned(), json!("2")), ("a".to_owned(), json!("1"))].into();
        let first = build(&request("Create", None), success(None, data.clone()));
        let second = build(&request("Create", None), success(None, data));
        assert_eq!(first, second);
        let text = String::from_utf8(first).expect("utf8");
        assert!(text.starts_with(r#"{"Status":"SUCCESS","PhysicalResourceId":"#), "{text}");
        assert!(text.ends_with(r#""NoEcho":false,"Data":{"a":"1","b":"2"}}"#), "{text}");
    }

    #[test]
    fn a_long_reason_is_shortened_to_fit() {
        let reason = "é\"\n".repeat(3_000);
        let body = parsed(&build(&request("Create", None), Outcome::failed(reason)));
        let kept = body.reason.expect("reason");
        assert!(kept.ends_with(TRUNCATION_MARK));
        assert!(kept.len() > 1_000, "kept only {} bytes", kept.len());
        let grown = build(&request("Create", None), Outcome::failed(format!("{kept}x")));
        assert!(grown.len() <= BODY_BYTES_MAX);
    }

    #[test]
    fn data_too_big_fails_clearly() {
        let data: BTreeMap<String, Value> = (0..100).map(|i| (format!("key{i}"), json!("v".repeat(50)))).collect();
        let body = parsed(&build(&request("Create", None), success(None, data)));
        assert_eq!(body.status, Status::Failed);
        assert!(body.data.is_empty());
        let reason = body.reason.expect("reason");
        assert!(reason.contains("bytes of Data") && reason.contains("4096"), "{reason}");
        assert!(!reason.ends_with(TRUNCATION_MARK), "a Reason that fits is not cut: {reason}");
        assert_eq!(
            body.physical_resource_id,
            default_physical_id(&request("Create", None)),
            "rollback must reach the provider"
        );
        // The cut never drops the id the answer needs: a Create keeps the one its provider
        // chose, so the rollback Delete names what was made; an Update keeps the one it was sent,
        // so a FAILED answer replaces nothing.
        let big: BTreeMap<String, Value> = [("big".to_owned(), json!("x".repeat(5000)))].into();
        let check = |request: Request, chosen: &str, expected: &str| {
            let body = parsed(&build(&request, success(Some(chosen), big.clone())));
            assert_eq!((body.status, body.physical_resource_id.as_str()), (Status::Failed, expected));
        };
        check(request("Create", None), "made-1", "made-1");
        check(request("Update", Some("old")), "new", "old");
    }

    #[test]
    fn physical_ids_are_bounded_as_sent() {
        let control = parsed(&build(&request("Create", None), success(Some(&"\u{1}".repeat(1_000)), BTreeMap::new())));
        assert_eq!(control.status, Status::Failed);
        assert_eq!(
            control.reason.as_deref(),
            Some("the provider returned a PhysicalResourceId with control characters")
        );
        // 300 quotes are 300 bytes raw and 600 escaped: fine; 600 of them are not.
        let quotes = parsed(&build(&request("Create", None), success(Some(&"\"".repeat(300)), BTreeMap::new())));
        assert_eq!(quotes.status, Status::Success);
        let too_many = parsed(&build(&request("Create", None), success(Some(&"\"".repeat(600)), BTreeMap::new())));
        assert_eq!(too_many.status, Status::Failed);
        assert!(too_many.reason.as_deref().is_some_and(|r| r.contains("1200 bytes")), "{too_many:?}");
    }

    #[test]
    fn foreign_text_is_stripped_and_bounded() {
        let check = |text: &str, max: usize, expected: &str| assert_eq!(foreign_text(text, max), expected, "{text:?}");
        check("plain", 10, "plain");
        check("<html><body><h1>503 Service Unavailable</h1></body></html>", 100, "503 Service Unavailable");
        check("line\r\nInjected: header\tvalue\u{1b}[2J", 100, "line Injected: header value [2J");
        check("x < 5 and y > 2", 100, "x < 5 and y > 2");
        check("abcdefghij", 5, "abcd…");
        check("<unterminated tag and the rest", 100, "");
        assert!(foreign_text(&"é".repeat(10_000), 512).chars().count() <= 512);
    }

    #[test]
    fn data_that_fits_exactly_is_kept() {
        let base = build(&request("Create", None), success(None, [("k".to_owned(), json!(""))].into())).len();
        let room = BODY_BYTES_MAX - base;
        let data: BTreeMap<String, Value> = [("k".to_owned(), json!("v".repeat(room)))].into();
        let bytes = build(&request("Create", None), success(None, data));
        assert_eq!(bytes.len(), BODY_BYTES_MAX);
        assert_eq!(parsed(&bytes).status, Status::Success);
    }

    #[test]
    fn the_cut_is_the_longest_prefix_of_whole_characters_that_fits() {
        // Each budget against every prefix of whole characters, longest first: what the
        // bisection must find, whatever each character costs.
        let text = "aé\"😀\u{1}b→".repeat(5);
        for budget in 0..=text.len() + TRUNCATION_MARK.len() {
            let fits = |cut: &str| serde_json::to_string(cut).is_ok_and(|json| json.len() <= budget);
            let expected = if fits(&text) {
                text.clone()
            } else {
                let boundaries = (0..=text.len()).rev().filter(|at| text.is_char_boundary(*at));
                let candidates = boundaries.map(|at| format!("{}{TRUNCATION_MARK}", &text[..at]));
                candidates.into_iter().find(|cut| fits(cut)).unwrap_or_else(|| TRUNCATION_MARK.to_owned())
            };
            assert_eq!(longest_fitting(&text, fits), expected, "budget {budget}");
        }
    }
}
