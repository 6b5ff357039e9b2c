//! Work past CloudFormation's hour: a resource that names a wait condition handle has its
//! provider's work signalled to that handle, exactly once, up to the wait condition's 12 hours.
//!
//! A Create or Update whose resource declares [`HANDLE_PROPERTY`] (the `Ref` of an
//! `AWS::CloudFormation::WaitConditionHandle`, a presigned S3 URL) and [`TIMEOUT_PROPERTY`] (the
//! `Timeout` of the `AWS::CloudFormation::WaitCondition` on that handle) is answered SUCCESS at
//! once, without running the provider (`work::handed_over`: its Data says the work continues).
//! The provider's work then runs as a request of its own, the resource's **work**: a lease
//! record of its own (`work::work_key`, one per resource and handle), its own fences, the handle
//! as its "ResponseURL", the wait condition's timeout as its deadline, and a signal
//! (`work::signal_body`) as its answer. Everything the protocol keeps for an answer holds for
//! the signal: committed before it is PUT, byte-identical however often it is PUT, one per work;
//! polls from whichever region holds the due one; FAILURE with the last state when the timeout
//! comes near.
//!
//! The answer cannot wait for the provider's first result: it must be the same bytes from any
//! region that answers, and a region that takes over an answer cannot know what another
//! region's provider returned. So the answer is fixed by the request alone, and every result of
//! the provider, a quick one too, reaches the stack through the wait condition.
//!
//! A Delete of such a resource (a rollback after the wait condition failed, a stack deletion),
//! and an Update that names a new handle, first **close** the work of the handle they were sent
//! in their (old) properties: its lease is taken under a higher fence, so no poll of it can
//! commit any more, and FAILURE is committed and PUT if no signal was committed yet (the work is
//! abandoned, never polled again; a Delete then runs the provider's Delete, its chance to clean
//! up). The Delete is answered only after the work's signal is delivered.
//!
//! The handle is treated as a secret like the ResponseURL: validated by the same [`UrlPolicy`]
//! (https, an S3 host, no userinfo), taken out of the properties before anything else reads them
//! (no provider, log line or Debug print sees it), and stored only in the SQS message. That is
//! defence in depth rather than the handle's only guard: CloudFormation shows it as the
//! WaitConditionHandle's physical id to anyone allowed DescribeStackResource(s) on the stack;
//! what limits it is its presigned expiry, about a day after CloudFormation makes it.
//!
//! A stack lives longer than its handles. A signal to a handle past its presigned expiry is never
//! attempted, and a handle's refusal (S3's 403 once it has expired) is final: the work is
//! recorded done without its signal (`LeaseRecord::unsent`), so a Delete or an Update a day, a
//! month or a year later closes it and goes on. An Update waits again only when it names a new
//! handle that can still be signalled and has no work yet: one that keeps its handle, or an
//! update rollback naming the resource's earlier handle, runs the provider's Update as any
//! request does, and is answered with its outcome.

use serde::Serialize;
use serde_json::Value;

use crate::response_url::{ResponseUrl, UrlPolicy};

/// The property naming the wait condition handle: `CfnOnceWaitHandle: !Ref Handle`.
pub const HANDLE_PROPERTY: &str = "CfnOnceWaitHandle";

/// The property stating the wait condition's `Timeout`, in seconds: the same number as the
/// WaitCondition's (the handle does not carry it, and nothing can read it from the stack), best
/// given to both from one template parameter.
pub const TIMEOUT_PROPERTY: &str = "CfnOnceWaitTimeout";

/// The longest `Timeout` CloudFormation accepts on a wait condition: 12 hours.
pub const TIMEOUT_S_MAX: u64 = 43_200;

/// The prefix of a work's key (its record's `RequestId`), which tells a work's record from a
/// request's in the lease table.
pub const WORK_ID_PREFIX: &str = "cfn-once-work:";

/// The answer's Data attribute that says the work continues.
pub const WORK_DATA_NAME: &str = "CfnOnceWork";

/// The longest signal CloudFormation is sent, in bytes: an answer's limit, held to by choice.
/// The signal's format ("Wait condition signal JSON format",
/// <https://docs.aws.amazon.com/AWSCloudFormation/latest/UserGuide/using-cfn-waitcondition.html>)
/// names `Status`, `UniqueId`, `Data` and `Reason` and states no size limit; a custom resource's
/// response is documented as at most 4096 bytes
/// (<https://docs.aws.amazon.com/AWSCloudFormation/latest/UserGuide/crpg-ref-responses.html>), and
/// nothing says a signal may be larger, so a signal keeps to the same bound.
pub const SIGNAL_BYTES_MAX: usize = 4096;

/// A resource's wait condition: where its work's signal goes, and when the wait ends.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct WaitSpec {
    /// The handle's presigned URL; never printed (its Debug is redacted).
    pub handle: ResponseUrl,
    /// The wait condition's `Timeout`, in seconds (1 to [`TIMEOUT_S_MAX`]).
    pub timeout_s: u64,
}

/// What a request's properties say about a wait condition.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub enum WaitDeclared {
    /// Neither property: an ordinary resource.
    #[default]
    None,
    /// Both, and valid.
    Valid(WaitSpec),
    /// Declared but unusable: why, for a FAILED Reason (never the URL itself).
    Invalid(String),
}

impl WaitDeclared {
    /// The spec, if one is declared and valid.
    pub fn spec(&self) -> Option<&WaitSpec> {
        match self {
            Self::Valid(spec) => Some(spec),
            _ => None,
        }
    }
}

/// Takes [`HANDLE_PROPERTY`] and [`TIMEOUT_PROPERTY`] out of `properties` (an object, or
/// anything else, which declares nothing) and validates them with `urls`.
pub fn take(properties: Option<&mut Value>, urls: &UrlPolicy) -> WaitDeclared {
    let Some(Value::Object(map)) = properties else {
        return WaitDeclared::None;
    };
    let handle = map.remove(HANDLE_PROPERTY);
    let timeout = map.remove(TIMEOUT_PROPERTY);
    match (handle, timeout) {
        (None, None) => WaitDeclared::None,
        (Some(handle), timeout) => match declared(&handle, timeout.as_ref(), urls) {
            Ok(spec) => WaitDeclared::Valid(spec),
            Err(reason) => WaitDeclared::Invalid(reason),
        },
        (None, Some(_)) => WaitDeclared::Invalid(format!(
            "{TIMEOUT_PROPERTY} is set without {HANDLE_PROPERTY}: name the wait condition handle (`{HANDLE_PROPERTY}: !Ref YourHandle`) or remove {TIMEOUT_PROPERTY}"
        )),
    }
}

fn declared(handle: &Value, timeout: Option<&Value>, urls: &UrlPolicy) -> Result<WaitSpec, String> {
    let Value::String(raw) = handle else {
        return Err(format!(
            "{HANDLE_PROPERTY} must be the Ref of an AWS::CloudFormation::WaitConditionHandle (a URL)"
        ));
    };
    // The policy's messages name the URL's scheme, port or host, never its path or query.
    let handle = urls.check(raw).map_err(|refused| {
        format!("{HANDLE_PROPERTY} is refused: {}", refused.to_string().replacen("ResponseURL", "the handle URL", 1))
    })?;
    let timeout_s = match timeout {
        None => {
            return Err(format!(
                "{HANDLE_PROPERTY} needs {TIMEOUT_PROPERTY}: set it to the WaitCondition's Timeout, in seconds"
            ));
        }
        Some(Value::String(text)) => text.trim().parse::<u64>().ok(),
        Some(Value::Number(number)) => number.as_u64(),
        Some(_) => None,
    };
    match timeout_s {
        Some(timeout_s) if (1..=TIMEOUT_S_MAX).contains(&timeout_s) => Ok(WaitSpec { handle, timeout_s }),
        _ => Err(format!(
            "{TIMEOUT_PROPERTY} must be the WaitCondition's Timeout: a whole number of seconds from 1 to {TIMEOUT_S_MAX}"
        )),
    }
}

/// Whether `request_id` is a work's key rather than CloudFormation's.
pub fn is_work_id(request_id: &str) -> bool {
    request_id.starts_with(WORK_ID_PREFIX)
}

/// SUCCESS or FAILURE, as a wait condition reads it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, serde::Deserialize)]
#[serde(rename_all = "SCREAMING_SNAKE_CASE")]
pub enum SignalStatus {
    /// The work is done: the wait condition completes, and the stack goes on.
    Success,
    /// The work failed: the wait condition fails, and the stack rolls back.
    Failure,
}

/// A wait condition signal, as PUT to the handle.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, serde::Deserialize)]
pub struct Signal {
    /// SUCCESS or FAILURE.
    #[serde(rename = "Status")]
    pub status: SignalStatus,
    /// What happened, shown in the stack's events.
    #[serde(rename = "Reason")]
    pub reason: String,
    /// The resource's logical id: fixed per resource, so a repeated PUT is the same signal
    /// (CloudFormation treats a second signal with a UniqueId it has as a retransmission and
    /// ignores it), never a second one.
    #[serde(rename = "UniqueId")]
    pub unique_id: String,
    /// The work's result, as JSON text (`Fn::GetAtt WaitCondition.Data` returns it keyed by
    /// UniqueId).
    #[serde(rename = "Data")]
    pub data: String,
}

impl Signal {
    /// Parses committed signal bytes.
    pub fn parse(bytes: &[u8]) -> Option<Self> {
        serde_json::from_slice(bytes).ok()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::response_url::AllowedPrefix;
    use serde_json::json;

    const HANDLE: &str = "https://cloudformation-waitcondition-us-east-1.s3.amazonaws.com/arn%3Aaws%3Acloudformation%3Aus-east-1%3A123456789012%3Astack/s/g/Handle?X-Amz-Algorithm=AWS4-HMAC-SHA256&X-Amz-Date=20261204T000000Z&X-Amz-Expires=86399&X-Amz-Signature=abc";

    fn take_from(properties: Value) -> (WaitDeclared, Value) {
        let mut properties = properties;
        let declared = take(Some(&mut properties), &UrlPolicy::default());
        (declared, properties)
    }

    #[test]
    fn a_declared_handle_is_taken_out_of_the_properties_and_validated() {
        let (declared, left) =
            take_from(json!({"Size": 3, HANDLE_PROPERTY: HANDLE, TIMEOUT_PROPERTY: "43200", "ServiceTimeout": "60"}));
        let spec = declared.spec().expect("valid");
        assert_eq!(spec.timeout_s, 43_200);
        assert_eq!(spec.handle.expose_secret(), HANDLE);
        assert_eq!(left, json!({"Size": 3, "ServiceTimeout": "60"}), "the handle never reaches the provider");
        assert!(!format!("{declared:?}").contains("X-Amz-Signature"), "Debug redacts the handle");
        assert_eq!(take_from(json!({"Size": 3})).0, WaitDeclared::None);
        assert_eq!(take(None, &UrlPolicy::default()), WaitDeclared::None);
    }

    #[test]
    fn an_unusable_declaration_says_why_without_the_url() {
        let cases = [
            (json!({HANDLE_PROPERTY: HANDLE}), "needs CfnOnceWaitTimeout"),
            (json!({TIMEOUT_PROPERTY: 60}), "without CfnOnceWaitHandle"),
            (json!({HANDLE_PROPERTY: HANDLE, TIMEOUT_PROPERTY: 43_201}), "from 1 to 43200"),
            (json!({HANDLE_PROPERTY: HANDLE, TIMEOUT_PROPERTY: "0"}), "from 1 to 43200"),
            (json!({HANDLE_PROPERTY: HANDLE, TIMEOUT_PROPERTY: true}), "from 1 to 43200"),
            (json!({HANDLE_PROPERTY: 7, TIMEOUT_PROPERTY: 60}), "must be the Ref"),
            (
                json!({HANDLE_PROPERTY: "http://cloudformation-waitcondition-us-east-1.s3.amazonaws.com/x?sig=secret", TIMEOUT_PROPERTY: 60}),
                "only https",
            ),
            (
                json!({HANDLE_PROPERTY: "https://user:pw@cloudformation-waitcondition-us-east-1.s3.amazonaws.com/x?sig=secret", TIMEOUT_PROPERTY: 60}),
                "user name or password",
            ),
            (
                json!({HANDLE_PROPERTY: "https://evil.example.com/x?sig=secret", TIMEOUT_PROPERTY: 60}),
                "not an Amazon S3 endpoint",
            ),
        ];
        for (properties, expected) in cases {
            let (declared, left) = take_from(properties.clone());
            let WaitDeclared::Invalid(reason) = &declared else { panic!("{properties}: {declared:?}") };
            assert!(reason.contains(expected), "{properties}: {reason}");
            assert!(!reason.contains("secret") && !reason.contains("/x"), "{reason}");
            assert_eq!(left, json!({}), "both properties are taken out, valid or not");
        }
    }

    #[test]
    fn an_allow_listed_local_handle_is_accepted() {
        let urls = UrlPolicy::new(vec![AllowedPrefix::parse("http://127.0.0.1:5000/handles/").expect("prefix")]);
        let mut properties =
            json!({HANDLE_PROPERTY: "http://127.0.0.1:5000/handles/h1?X-Amz-Signature=s", TIMEOUT_PROPERTY: 90});
        assert!(take(Some(&mut properties), &urls).spec().is_some());
    }
}
