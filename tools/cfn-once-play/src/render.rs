//! What a person reads: each stack event as it happens, in the columns of
//! `describe-stack-events` (time, logical id, type, status, reason), then each operation's end
//! and Outputs, and each resource's requests in order with the region and fence that answered.
//! [`Printer`] is what `cfn-once play` prints and writes: every line and the `--json` report go
//! through it, so a NoEcho value ([`Secrets`]) is masked in all of them.

use std::fmt::Write;

use crate::engine::{NestedTemplate, Target};
use crate::mask::Secrets;
use crate::run::PlayReport;
use crate::state::StackEvent;
use cfn_once_local::report::terminal_safe;

/// The widest a column of names gets before it is cut.
const NAME_CHARS_MAX: usize = 40;
/// How much of a Reason a line shows.
const REASON_CHARS_MAX: usize = 400;
/// The longest logical id CloudFormation takes ("Resource name: 255 characters",
/// https://docs.aws.amazon.com/AWSCloudFormation/latest/UserGuide/cloudformation-limits.html);
/// a stack's name, which its own events carry as their logical id, is at most 128 (CreateStack's
/// StackName, https://docs.aws.amazon.com/AWSCloudFormation/latest/APIReference/API_CreateStack.html).
pub const LOGICAL_ID_CHARS_MAX: usize = 255;
/// The longest resource type ("Length Constraints: ... Maximum length of 256", ResourceType in
/// https://docs.aws.amazon.com/AWSCloudFormation/latest/APIReference/API_ResourceChange.html).
pub const TYPE_CHARS_MAX: usize = 256;

/// The widths of the event columns. The rule: the logical id column is as wide as the longest
/// logical id the stack's events can carry (its name and every resource of every template
/// played), at least 28, and the type column as wide as the longest type, at least 40, so every
/// line of a play lines up; an id past CloudFormation's own limits is cut with `…` within its
/// column.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Columns {
    pub logical_chars: usize,
    pub type_chars: usize,
}

impl Default for Columns {
    fn default() -> Self {
        Self { logical_chars: 28, type_chars: NAME_CHARS_MAX }
    }
}

impl Columns {
    /// The columns for a stack named `stack_name` whose templates are `targets`.
    pub fn for_stack(stack_name: &str, targets: &[Target]) -> Self {
        let resources = targets.iter().flat_map(|target| &target.template.resources);
        let mut columns = Self::default();
        // A nested stack's resources are shown as `Nested/Logical`.
        let mut nested_ids = Vec::new();
        for target in targets {
            nested_paths(&target.nested, "", &mut nested_ids);
        }
        columns.logical_chars = resources
            .clone()
            .map(|r| r.logical_id.chars().count())
            .chain([stack_name.chars().count()])
            .chain(nested_ids.iter().map(|id| id.chars().count()))
            .fold(columns.logical_chars, usize::max)
            .min(LOGICAL_ID_CHARS_MAX);
        columns.type_chars =
            resources.map(|r| r.resource_type.chars().count()).fold(columns.type_chars, usize::max).min(TYPE_CHARS_MAX);
        columns
    }

    /// One event as a line; a nested stack's as `Nested/Logical`.
    pub fn line(&self, event: &StackEvent) -> String {
        let reason = event.resource_status_reason.as_deref().map(|r| terminal_safe(r, REASON_CHARS_MAX));
        let logical = match event.nested_in.is_empty() {
            true => event.logical_resource_id.clone(),
            false => format!("{}/{}", event.nested_in.join("/"), event.logical_resource_id),
        };
        format!(
            "{:<24}  {}  {}  {:<45}{}",
            event.timestamp,
            cell(&logical, self.logical_chars),
            cell(&event.resource_type, self.type_chars),
            event.resource_status,
            reason.map(|r| format!("  {r}")).unwrap_or_default()
        )
        .trim_end()
        .to_owned()
    }

    /// The heading of the event columns.
    pub fn heading(&self) -> String {
        format!(
            "{:<24}  {}  {}  {:<45}  {}",
            "Timestamp",
            cell("Logical ID", self.logical_chars),
            cell("Type", self.type_chars),
            "Status",
            "Status reason"
        )
    }
}

/// Every `Nested/Logical` of the nested templates in `nested`, under `prefix`.
fn nested_paths(nested: &std::collections::BTreeMap<String, NestedTemplate>, prefix: &str, out: &mut Vec<String>) {
    for (id, template) in nested {
        let path = format!("{prefix}{id}/");
        out.extend(template.template.resources.iter().map(|r| format!("{path}{}", r.logical_id)));
        nested_paths(&template.nested, &path, out);
    }
}

/// `text` made terminal-safe and exactly `chars` wide: padded, or cut with `…` as its last
/// character.
fn cell(text: &str, chars: usize) -> String {
    let safe = terminal_safe(text, usize::MAX);
    let count = safe.chars().count();
    if count > chars {
        let mut cut: String = safe.chars().take(chars.saturating_sub(1)).collect();
        cut.push('…');
        cut
    } else {
        format!("{safe}{}", " ".repeat(chars - count))
    }
}

/// One event as a line, in the default columns (logical ids up to 28 characters).
pub fn event_line(event: &StackEvent) -> String {
    Columns::default().line(event)
}

/// The heading of the default event columns.
pub fn event_heading() -> String {
    Columns::default().heading()
}

/// Everything `cfn-once play` prints or writes about a play, with every NoEcho value masked.
#[derive(Debug, Clone)]
pub struct Printer {
    pub columns: Columns,
    pub secrets: Secrets,
}

impl Printer {
    pub fn heading(&self) -> String {
        self.columns.heading()
    }

    pub fn event(&self, event: &StackEvent) -> String {
        self.columns.line(&self.secrets.event(event))
    }

    pub fn progress(&self, line: &str) -> String {
        format!(".. {}", self.secrets.text(line))
    }

    /// The summary after the events.
    pub fn summary(&self, report: &PlayReport) -> String {
        summary(&self.secrets.report(report))
    }

    /// The `--json` report.
    pub fn json(&self, report: &PlayReport) -> anyhow::Result<String> {
        Ok(serde_json::to_string_pretty(&self.secrets.report(report))?)
    }
}

/// The summary after the events: each operation's status and Outputs, each resource's requests.
pub fn summary(report: &PlayReport) -> String {
    let mut out = String::new();
    let _ = writeln!(out, "stack {} ({})", report.stack_name, report.stack_id);
    for step in &report.steps {
        let refused = step
            .refused
            .as_deref()
            .map(|why| format!(" (refused, nothing sent: {})", terminal_safe(why, REASON_CHARS_MAX)));
        let _ = writeln!(out, "  {:<8} {}{}", step.step, step.status, refused.unwrap_or_default());
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
