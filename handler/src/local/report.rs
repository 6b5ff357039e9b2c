//! One-line descriptions of handled records, for the local tools' output.

use cfn_once_core::response::Status;
use cfn_once_core::worker::{Disposition, Done, Handled};

/// `us-east-1 primary   Create Custom::Echo Greeting [request id]: answered SUCCESS (fence 1)`.
pub fn line(label: &str, handled: &Handled) -> String {
    let what = match &handled.request {
        Some(request) => format!(
            "{} {} {} [{}]",
            request.request_type.map_or("?", |kind| kind.as_str()),
            request.resource_type.as_deref().unwrap_or("?"),
            request.logical_resource_id,
            request.request_id
        ),
        None => "undecodable record".to_owned(),
    };
    format!("{} {label} {what}: {}", timestamp(), outcome(&handled.disposition))
}

/// What happened to the message, in a few words.
pub fn outcome(disposition: &Disposition) -> String {
    match disposition {
        Disposition::Done(Done::Answered { fence, status }) => {
            format!("answered {} (fence {fence})", status_name(*status))
        }
        Disposition::Done(Done::Replayed { fence }) => format!("re-sent the stored answer (fence {fence})"),
        Disposition::Done(Done::Duplicate) => "already answered; copy dropped".to_owned(),
        Disposition::Done(Done::Superseded) => "superseded by a newer attempt; dropped".to_owned(),
        Disposition::Retry { delay_s, why } => format!("back in {delay_s} s: {why}"),
        Disposition::DeadLetter { why } => format!("moved to the DLQ: {why}"),
    }
}

/// SUCCESS or FAILED.
pub fn status_name(status: Status) -> &'static str {
    match status {
        Status::Success => "SUCCESS",
        Status::Failed => "FAILED",
    }
}

/// HH:MM:SS.mmm, UTC.
fn timestamp() -> String {
    use cfn_once_core::clock::Clock;
    let ms = crate::clock::SystemClock.now_ms();
    let day_ms = ms % 86_400_000;
    format!("{:02}:{:02}:{:02}.{:03}", day_ms / 3_600_000, day_ms / 60_000 % 60, day_ms / 1000 % 60, day_ms % 1000)
}
