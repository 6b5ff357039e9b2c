//! What a person reads: each stack event as it happens, in the columns of
//! `describe-stack-events` (time, logical id, type, status, reason), then each operation's end
//! and Outputs, and each resource's requests in order with the region and fence that answered.

use std::fmt::Write;

use crate::local::report::terminal_safe;
use crate::play::run::PlayReport;
use crate::play::state::StackEvent;

/// The widest a column of names gets before it is cut.
const NAME_CHARS_MAX: usize = 40;
/// How much of a Reason a line shows.
const REASON_CHARS_MAX: usize = 400;

/// One event as a line.
pub fn event_line(event: &StackEvent) -> String {
    let reason = event.resource_status_reason.as_deref().map(|r| terminal_safe(r, REASON_CHARS_MAX));
    format!(
        "{:<24}  {:<28}  {:<40}  {:<45}{}",
        event.timestamp,
        terminal_safe(&event.logical_resource_id, NAME_CHARS_MAX),
        terminal_safe(&event.resource_type, NAME_CHARS_MAX),
        event.resource_status,
        reason.map(|r| format!("  {r}")).unwrap_or_default()
    )
    .trim_end()
    .to_owned()
}

/// The heading of the event columns.
pub fn event_heading() -> String {
    format!("{:<24}  {:<28}  {:<40}  {:<45}  {}", "Timestamp", "Logical ID", "Type", "Status", "Status reason")
}

/// The summary after the events: each operation's status and Outputs, each resource's requests.
pub fn summary(report: &PlayReport) -> String {
    let mut out = String::new();
    let _ = writeln!(out, "stack {} ({})", report.stack_name, report.stack_id);
    for step in &report.steps {
        let _ = writeln!(out, "  {:<8} {}", step.step, step.status);
        for output in &step.outputs {
            let _ = writeln!(
                out,
                "           Output {} = {}{}",
                terminal_safe(&output.key, NAME_CHARS_MAX),
                terminal_safe(&output.value, REASON_CHARS_MAX),
                output
                    .export_name
                    .as_deref()
                    .map(|n| format!(" (Export {})", terminal_safe(n, 200)))
                    .unwrap_or_default()
            );
        }
    }
    for fault in &report.faults {
        let _ = writeln!(
            out,
            "  fault after {} answers: {}{}",
            fault.after_answers,
            fault.fault,
            fault.error.as_deref().map(|e| format!(" -- NOT injected: {e}")).unwrap_or_default()
        );
    }
    let _ = writeln!(out, "requests, per resource, in order:");
    for (logical_id, records) in &report.resources {
        let _ = writeln!(out, "  {}", terminal_safe(logical_id, NAME_CHARS_MAX));
        for record in records {
            let request = &record.request;
            let by = record
                .answered_by
                .as_ref()
                .map(|a| format!(" by {} under fence {}", a.region, a.fence))
                .unwrap_or_default();
            let id = record
                .answered_physical_id
                .as_deref()
                .or(request.physical_resource_id.as_deref())
                .map(|id| format!(", id {}", terminal_safe(id, 120)))
                .unwrap_or_default();
            let reason = record.reason.as_deref().map(|r| format!(": {}", terminal_safe(r, 200))).unwrap_or_default();
            let _ = writeln!(
                out,
                "    {:<7} {:<9} {:<6} -> {}{by}{id} in {} ms{}{reason}",
                record.step,
                record.phase,
                request.request_type.as_str(),
                record.outcome,
                record.elapsed_ms,
                if record.puts > 1 { format!(", PUT {} times", record.puts) } else { String::new() }
            );
        }
    }
    let verdict = if report.passed {
        "every operation ended *_COMPLETE without a rollback"
    } else {
        "NOT every operation ended *_COMPLETE without a rollback"
    };
    let _ = writeln!(out, "{verdict}");
    out
}
