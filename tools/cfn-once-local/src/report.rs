//! One-line descriptions of handled records, for the local tools' output.
//!
//! Whatever a record carries (a LogicalResourceId, a RequestId, a refusal naming a host) comes
//! from whoever published it, and reaches an operator's terminal: every such field goes through
//! [`terminal_safe`], so a newline cannot forge an output line and an escape sequence cannot
//! clear the screen or rewrite what is shown.

use cfn_once_core::response::Status;
use cfn_once_core::vocabulary::{Disposition, Done, Handled};
pub use cfn_once_ops::text::terminal_safe;

/// `us-east-1 primary   Create Custom::Echo Greeting [request id]: answered SUCCESS (fence 1)`.
pub fn line(label: &str, handled: &Handled) -> String {
    let what = match &handled.request {
        Some(request) => format!(
            "{} {} {} [{}]",
            request.request_type.map_or("?", |kind| kind.as_str()),
            terminal_safe(request.resource_type.as_deref().unwrap_or("?"), FIELD_CHARS_MAX),
            terminal_safe(&request.logical_resource_id, FIELD_CHARS_MAX),
            terminal_safe(&request.request_id, FIELD_CHARS_MAX)
        ),
        None => "undecodable record".to_owned(),
    };
    format!("{} {label} {what}: {}", timestamp(), terminal_safe(&outcome(&handled.disposition), LINE_CHARS_MAX))
}

/// The longest identifier shown on a line.
const FIELD_CHARS_MAX: usize = 120;
/// The longest outcome shown on a line.
const LINE_CHARS_MAX: usize = 400;

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
        Disposition::DeadLetter { why, .. } => format!("moved to the DLQ: {why}"),
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
    let ms = cfn_once::system_clock::SystemClock.now_ms();
    let day_ms = ms % 86_400_000;
    format!("{:02}:{:02}:{:02}.{:03}", day_ms / 3_600_000, day_ms / 60_000 % 60, day_ms / 1000 % 60, day_ms % 1000)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn hostile_text_cannot_steer_the_terminal() {
        assert_eq!(terminal_safe("Thing", 10), "Thing");
        assert_eq!(terminal_safe("a\nus-east-1 primary   forged line", 200), "a\\u{a}us-east-1 primary   forged line");
        assert_eq!(terminal_safe("\u{1b}[2J\u{1b}[H", 200), "\\u{1b}[2J\\u{1b}[H");
        assert_eq!(terminal_safe("bell\u{7}", 200), "bell\\u{7}");
        assert_eq!(terminal_safe("evil\u{202e}gnp.exe", 200), "evil\\u{202e}gnp.exe");
        assert_eq!(terminal_safe(&"x".repeat(500), 5), "xxxxx…");
    }
}
