//! `CFN_ONCE_FUNCTIONS`: resource types served by existing Lambda functions of this region, each
//! `Custom::Type=on-event[|is-complete]`, or `Custom::Type=cfn-response:function` for one that
//! answers by itself.

use crate::aws_names::FunctionRef;

/// A resource type answered by existing functions: `onEvent`, and `isComplete` if configured.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FunctionRoute {
    /// The resource type, `Custom::Name`.
    pub resource_type: String,
    /// The function every request of the type is passed to.
    pub on_event: FunctionRef,
    /// The function polled until it says `IsComplete`, if the type has one.
    pub is_complete: Option<FunctionRef>,
    /// The function answers by itself (`cfn-response:`): it is given a presigned URL of an
    /// object of cfn-once's instead of the ResponseURL, and what it PUTs there is the answer.
    pub answers_itself: bool,
}

/// Marks a function that PUTs its own answer, in `CFN_ONCE_FUNCTIONS`. A bare function name
/// holds no `:` and an ARN begins with `arn:`, so the mark cannot be read as either.
pub const ANSWERS_ITSELF: &str = "cfn-response:";

/// Parses `CFN_ONCE_FUNCTIONS` for `region`; every problem named.
pub(super) fn function_routes(entries: &[String], region: &str) -> Result<Vec<FunctionRoute>, Vec<String>> {
    let (mut routes, mut problems) = (Vec::<FunctionRoute>::new(), Vec::new());
    for entry in entries {
        let Some((resource_type, functions)) = entry.split_once('=') else {
            problems.push(format!(
                "CFN_ONCE_FUNCTIONS entry {entry:?} is not Custom::Type=on-event[|is-complete] nor Custom::Type=cfn-response:function"
            ));
            continue;
        };
        let resource_type = resource_type.trim();
        let name = resource_type.strip_prefix("Custom::").unwrap_or_default();
        if name.is_empty()
            || name.len() > 60
            || !name.bytes().all(|b| b.is_ascii_alphanumeric() || matches!(b, b'_' | b'@' | b'-'))
        {
            problems
                .push(format!("CFN_ONCE_FUNCTIONS: {resource_type:?} is not a custom resource type (Custom::Name)"));
            continue;
        }
        if routes.iter().any(|route| route.resource_type == resource_type) {
            problems.push(format!("CFN_ONCE_FUNCTIONS names {resource_type} twice"));
            continue;
        }
        if let Some(function) = functions.trim().strip_prefix(ANSWERS_ITSELF) {
            if function.contains('|') {
                problems.push(format!(
                    "CFN_ONCE_FUNCTIONS: {resource_type}: a function that answers by itself has no is-complete function"
                ));
                continue;
            }
            match FunctionRef::parse(function.trim(), region) {
                Ok(on_event) => routes.push(FunctionRoute {
                    resource_type: resource_type.to_owned(),
                    on_event,
                    is_complete: None,
                    answers_itself: true,
                }),
                Err(why) => problems.push(format!("CFN_ONCE_FUNCTIONS: {resource_type}: {why}")),
            }
            continue;
        }
        let mut refs = functions.split('|').map(|f| FunctionRef::parse(f.trim(), region));
        let on_event = refs.next().expect("split yields one part at least");
        let is_complete = refs.next().transpose();
        let extra = refs.next().is_some();
        match (on_event, is_complete, extra) {
            (_, _, true) => problems.push(format!("CFN_ONCE_FUNCTIONS: {resource_type} names more than two functions")),
            (Ok(on_event), Ok(is_complete), false) => routes.push(FunctionRoute {
                resource_type: resource_type.to_owned(),
                on_event,
                is_complete,
                answers_itself: false,
            }),
            (Err(why), _, _) | (_, Err(why), _) => problems.push(format!("CFN_ONCE_FUNCTIONS: {resource_type}: {why}")),
        }
    }
    if problems.is_empty() { Ok(routes) } else { Err(problems) }
}
