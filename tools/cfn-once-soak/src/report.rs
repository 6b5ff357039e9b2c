//! The soak's report: a one-screen summary, `soak-report.md` and a picture of time to answer
//! over the run with the fault windows shaded (`soak-time-to-answer.svg`).

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::path::Path;

use anyhow::Context;

use crate::SoakOptions;
use crate::faults::{Injected, Schedule, fault_seen};
use crate::fleet::Fleet;
use crate::ledger::Ledger;
use crate::machine::Machine;
use crate::plan::Plan;
use crate::verify::Findings;

/// Percentiles of a set of durations, ms.
#[derive(Debug, Clone, Copy, Default)]
pub struct Spread {
    pub count: usize,
    pub p50: u64,
    pub p90: u64,
    pub p99: u64,
    pub max: u64,
}

impl Spread {
    pub fn of(mut values: Vec<u64>) -> Self {
        if values.is_empty() {
            return Self::default();
        }
        values.sort_unstable();
        let at = |q: f64| values[((values.len() as f64 * q).ceil() as usize).clamp(1, values.len()) - 1];
        Self { count: values.len(), p50: at(0.50), p90: at(0.90), p99: at(0.99), max: values[values.len() - 1] }
    }

    fn row(&self, label: &str) -> String {
        format!(
            "| {label} | {} | {} | {} | {} | {} |",
            self.count,
            seconds(self.p50),
            seconds(self.p90),
            seconds(self.p99),
            seconds(self.max)
        )
    }
}

/// What a report is built from: the run's inputs and what its checks found.
struct Run<'a> {
    seed: u64,
    options: &'a SoakOptions,
    fleet: &'a Fleet,
    ledger: &'a Ledger,
    plan: &'a Plan,
    schedule: &'a Schedule,
    injected: &'a Injected,
    findings: &'a Findings,
    machine: &'a Machine,
}

impl Run<'_> {
    fn verdict(&self) -> &'static str {
        if self.findings.passed() { "passed" } else { "FAILED (a check above found a problem)" }
    }
}

/// The times to answer of the answered requests, overall and grouped, and the picture's points.
struct Timings {
    all: Vec<u64>,
    by_class: BTreeMap<&'static str, Vec<u64>>,
    by_fault: BTreeMap<&'static str, Vec<u64>>,
    by_region: BTreeMap<String, usize>,
    points: Vec<Point>,
}

impl Timings {
    fn of(run: &Run<'_>) -> Self {
        let sent = run.ledger.sent();
        let mut timings = Self {
            all: Vec::new(),
            by_class: BTreeMap::new(),
            by_fault: BTreeMap::new(),
            by_region: BTreeMap::new(),
            points: Vec::new(),
        };
        for outcome in &run.findings.outcomes {
            let request = &sent[outcome.sent];
            let at_ms = request.published_ms - run.ledger.started_ms;
            let Some(first_ms) = outcome.first_ms() else {
                timings.points.push(Point { at_ms, took_ms: None, secondary: false });
                continue;
            };
            let took = first_ms.saturating_sub(request.published_ms);
            timings.all.push(took);
            timings.by_class.entry(request.class.label()).or_default().push(took);
            let fault = fault_seen(request, first_ms, run.injected, run.ledger.started_ms);
            timings.by_fault.entry(fault).or_default().push(took);
            let region = outcome.region.clone().unwrap_or_else(|| "unknown".into());
            let secondary = region == run.fleet.secondary().name;
            *timings.by_region.entry(region).or_default() += 1;
            timings.points.push(Point { at_ms, took_ms: Some(took), secondary });
        }
        timings
    }
}

/// `soak-requests.csv`: every request sent, how long it took and who answered it.
fn requests_csv(run: &Run<'_>) -> String {
    let sent = run.ledger.sent();
    let mut csv =
        String::from("request_id,stack_id,logical_id,kind,class,published_s,took_ms,puts,answered_by,fault_seen\n");
    for outcome in &run.findings.outcomes {
        let request = &sent[outcome.sent];
        let took = outcome.first_ms().map(|at| at.saturating_sub(request.published_ms));
        let seen = outcome.first_ms().map_or("", |at| fault_seen(request, at, run.injected, run.ledger.started_ms));
        let _ = writeln!(
            csv,
            "{},{},{},{},{},{:.1},{},{},{},{seen}",
            request.request_id,
            request.stack_id,
            request.logical_id,
            request.kind,
            request.class.label(),
            (request.published_ms.saturating_sub(run.ledger.started_ms)) as f64 / 1000.0,
            took.map_or_else(|| "lost".to_owned(), |t| t.to_string()),
            outcome.puts.len(),
            outcome.region.as_deref().unwrap_or(""),
        );
    }
    csv
}

/// The one-screen summary the soak prints, ending with its last line.
fn summary(run: &Run<'_>, timings: &Timings, overall: &Spread, last_line: &str) -> String {
    let Run { seed, fleet, ledger, findings, machine, .. } = *run;
    let mut s = String::new();
    let _ = writeln!(s, "==> soak result (seed {seed})");
    let _ = writeln!(s, "binaries   {}", fleet.binaries());
    let _ = writeln!(
        s,
        "requests   {} sent ({} duplicates published, {} undeliverable on purpose), {} answered once",
        findings.requests,
        ledger.duplicates.load(std::sync::atomic::Ordering::SeqCst),
        findings.undeliverable_sent,
        findings.answered_once
    );
    let _ = writeln!(
        s,
        "problems   {} lost, {} conflicting, {} late, {} wrong answers, {} superseded attempts answered",
        findings.lost, findings.conflicting, findings.late, findings.wrong, findings.superseded_answered
    );
    if findings.excused_deadline > 0 {
        let _ = writeln!(
            s,
            "excused    {} answered FAILED at their deadline: a ServiceTimeout shorter than what the fault they met can cost",
            findings.excused_deadline
        );
    }
    let dlqs: Vec<String> = findings
        .dlqs
        .iter()
        .map(|(region, found, copies, other)| {
            format!("{region} {found}/{} undeliverable ({copies} copies) + {other} other", findings.undeliverable_sent)
        })
        .collect();
    let _ = writeln!(
        s,
        "state      items {}/{} consistent with their last answer; lease records {} ({} unfinished); DLQs: {}",
        findings.items_checked - findings.items_wrong,
        findings.items_checked,
        findings.lease_records,
        findings.lease_records_unfinished,
        dlqs.join(", ")
    );
    let _ = writeln!(
        s,
        "logs       {} lines, {} with a ResponseURL signature; {} panics logged",
        findings.log_lines, findings.leaked_signatures, findings.panics_logged
    );
    s.push_str(&faults_and_fleet(run));
    let answered_by: Vec<String> = timings.by_region.iter().map(|(r, n)| format!("{r} {n}")).collect();
    let _ = writeln!(s, "answered   by {}", answered_by.join(", "));
    let _ = writeln!(s, "time to answer      count     p50     p90     p99     max");
    let line = |label: &str, spread: &Spread| {
        format!(
            "  {label:<26} {:>5} {:>7} {:>7} {:>7} {:>7}",
            spread.count,
            seconds(spread.p50),
            seconds(spread.p90),
            seconds(spread.p99),
            seconds(spread.max)
        )
    };
    let _ = writeln!(s, "{}", line("all", overall));
    for (label, values) in &timings.by_fault {
        let _ = writeln!(s, "{}", line(label, &Spread::of(values.clone())));
    }
    let _ = writeln!(s, "machine    {}; {}", machine.one_line(), machine.load_line());
    for problem in findings.problems.iter().take(8) {
        let _ = writeln!(s, "  ! {problem}");
    }
    let _ = writeln!(s, "verdict    {}", run.verdict());
    let _ = write!(s, "{last_line}");
    s
}

/// The summary's lines on the faults injected, the recovery they caused and each region's fleet.
fn faults_and_fleet(run: &Run<'_>) -> String {
    let Run { fleet, injected, findings, .. } = *run;
    let stats: Vec<_> = fleet.regions.iter().map(|r| (r.role.as_str(), r.function.stats())).collect();
    let fired: u32 =
        fleet.regions.iter().map(|r| r.function.kills_on_lines()).flat_map(|lines| lines.into_values()).sum();
    let armed: u64 = injected.armed.values().sum();
    let wire_total: u64 = injected.wire.values().sum();
    let outages = injected.windows.iter().filter(|w| w.kind == "outage").count();
    let drills = injected.windows.iter().filter(|w| w.kind == "drill").count();
    let mut s = String::new();
    let _ = writeln!(
        s,
        "faults     {outages} outages, {drills} drills, {wire_total} wire faults in {} windows, {} busy processes killed, \
         {fired} of {armed} kills at log lines fired, {} processes killed by outages",
        injected.windows.iter().filter(|w| w.kind == "wire").count(),
        injected.busy_kills,
        injected.outage_kills
    );
    let (messages, receives, most) = findings.receives;
    let _ = writeln!(
        s,
        "recovery   {} takeovers, {} re-PUTs of a committed answer, {} leases given back by a drained primary; {} receives of {} messages ({:.2} per message, at most {most})",
        findings.takeovers,
        findings.re_puts,
        findings.given_back,
        receives,
        messages,
        receives as f64 / messages.max(1) as f64
    );
    for (role, stats) in &stats {
        let _ = writeln!(
            s,
            "fleet      {role}: {} invocations, {} cold starts, {} killed, {} crashed, {} timed out",
            stats.invocations, stats.cold_starts, stats.killed, stats.crashed, stats.timed_out
        );
    }
    s
}

/// `soak-report.md`: the summary, how to reproduce the run, and its tables.
fn markdown(run: &Run<'_>, timings: &Timings, summary: &str, last_line: &str) -> String {
    let Run { seed, options, fleet, plan, machine, .. } = *run;
    let mut md = String::new();
    let _ = writeln!(md, "# cfn-once soak report\n");
    let mut flags = String::new();
    if fleet.mixed() {
        let _ = write!(
            flags,
            " --binary {} --secondary-binary {}",
            fleet.primary().binary.display(),
            fleet.secondary().binary.display()
        );
    }
    if !options.without.is_empty() {
        let kinds: Vec<String> = options.without.iter().map(|k| format!("{k:?}").to_lowercase()).collect();
        let _ = write!(flags, " --without {}", kinds.join(","));
    }
    let _ = writeln!(
        md,
        "Seed {seed}: {} requests over {} minutes. Reproduce with `cfn-once soak --seed {seed} --minutes {} --requests {}{flags}`.\n",
        options.requests, options.minutes, options.minutes, options.requests,
    );
    let _ = writeln!(md, "**{last_line}**\n");
    let _ = writeln!(md, "Verdict: **{}**. Binaries: {}.\n", run.verdict(), fleet.binaries());
    let _ = writeln!(md, "```text\n{summary}\n```\n");
    let _ = writeln!(md, "![time to answer over the run](soak-time-to-answer.svg)\n");
    let _ = writeln!(
        md,
        "Each dot is a request: when it was published (x) and how long until its first PUT landed (y, log scale); \
         blue answered by the primary, green by the secondary, red crosses never answered. Shaded: the primary \
         region down (red), a drill's flip to the secondary (blue), wire faults (orange); ticks on top: SIGKILLs.\n"
    );
    let _ = writeln!(md, "## What ran\n\n{}\n\n{}\n", fleet.describe(), plan.describe());
    for (column, title, groups) in [
        ("kind", "Time to answer by kind of request", &timings.by_class),
        ("fault", "Time to answer by the worst fault seen while waiting", &timings.by_fault),
    ] {
        let _ = writeln!(md, "## {title}\n");
        let _ = writeln!(md, "| {column} | answered | p50 | p90 | p99 | max |\n|---|---|---|---|---|---|");
        for (label, values) in groups {
            let _ = writeln!(md, "{}", Spread::of(values.clone()).row(label));
        }
        let _ = writeln!(md);
    }
    md.push_str(&faults_markdown(run));
    let _ = writeln!(
        md,
        "\n## Machine\n\n{}; the run: {}. Every request: `soak-requests.csv`; the processes' logs: `primary.log`, `secondary.log`.",
        machine.one_line(),
        machine.load_line()
    );
    md
}

/// The report's sections on the faults as injected, the problems found and the excused answers.
fn faults_markdown(run: &Run<'_>) -> String {
    let Run { fleet, schedule, injected, findings, .. } = *run;
    let mut md = String::new();
    let _ = writeln!(md, "## Faults\n\n```text\n{}\n```\n", schedule.describe());
    let _ = writeln!(md, "Windows as injected:\n");
    for window in &injected.windows {
        let _ = writeln!(md, "- +{} s to +{} s: {}", window.start_ms / 1000, window.end_ms / 1000, window.what);
    }
    let _ = writeln!(md, "\nWire faults applied to requests:\n");
    for (what, n) in &injected.wire {
        let _ = writeln!(md, "- {what}: {n}");
    }
    let _ = writeln!(md, "\nKills armed on log lines, and fired:\n");
    for (point, n) in &injected.armed {
        let _ = writeln!(md, "- {point}: {n} armed");
    }
    for region in &fleet.regions {
        for (line, n) in region.function.kills_on_lines() {
            let _ = writeln!(md, "- {}: {n} fired on \"{line}\"", region.role.as_str());
        }
    }
    let _ = writeln!(md, "\n## Problems\n");
    if findings.problems.is_empty() {
        let _ = writeln!(md, "None.");
    }
    for problem in &findings.problems {
        let _ = writeln!(md, "- {problem}");
    }
    if !findings.notes.is_empty() {
        let _ = writeln!(
            md,
            "\n## Excused\n\nFAILED answers at a request's deadline whose ServiceTimeout was shorter than what the fault \
             it met can hold a copy (visibility timeout, lease, secondary delay, longest run): the answer the \
             design gives instead of a hang. Each still had to come before the deadline and say why.\n"
        );
        for note in &findings.notes {
            let _ = writeln!(md, "- {note}");
        }
    }
    md
}

fn seconds(ms: u64) -> String {
    if ms < 10_000 { format!("{:.2} s", ms as f64 / 1000.0) } else { format!("{:.0} s", ms as f64 / 1000.0) }
}

/// Everything the report says.
#[derive(Debug)]
pub struct Report {
    summary: String,
    /// One line per request attempt, for finding the slow ones in the processes' logs.
    csv: String,
    markdown: String,
    svg: String,
    last_line: String,
}

impl Report {
    #[allow(clippy::too_many_arguments)]
    pub fn build(
        seed: u64,
        options: &SoakOptions,
        fleet: &Fleet,
        ledger: &Ledger,
        plan: &Plan,
        schedule: &Schedule,
        injected: &Injected,
        findings: &Findings,
        machine: Machine,
    ) -> Self {
        let run = Run { seed, options, fleet, ledger, plan, schedule, injected, findings, machine: &machine };
        let timings = Timings::of(&run);
        let overall = Spread::of(timings.all.clone());
        let last_line = format!(
            "soak: {} requests, {} answered once, {} lost, {} conflicting, {} late, p99 {}",
            findings.requests,
            findings.answered_once,
            findings.lost,
            findings.conflicting,
            findings.late,
            seconds(overall.p99)
        );
        let summary = summary(&run, &timings, &overall, &last_line);
        let markdown = markdown(&run, &timings, &summary, &last_line);
        let svg = picture(&timings.points, injected, ledger.end_ms.saturating_sub(ledger.started_ms));
        Self { summary, csv: requests_csv(&run), markdown, svg, last_line }
    }

    pub fn summary(&self) -> &str {
        &self.summary
    }

    pub fn last_line(&self) -> String {
        self.last_line.clone()
    }

    pub fn write(&self, out: &Path) -> anyhow::Result<()> {
        for (name, text) in [
            ("soak-report.md", &self.markdown),
            ("soak-time-to-answer.svg", &self.svg),
            ("soak-summary.txt", &self.summary),
            ("soak-requests.csv", &self.csv),
        ] {
            let path = out.join(name);
            std::fs::write(&path, text).with_context(|| format!("cannot write {}", path.display()))?;
        }
        Ok(())
    }
}

/// One request in the picture.
struct Point {
    at_ms: u64,
    took_ms: Option<u64>,
    secondary: bool,
}

const W: f64 = 960.0;
const H: f64 = 420.0;
const LEFT: f64 = 60.0;
const RIGHT: f64 = 20.0;
const TOP: f64 = 20.0;
const BOTTOM: f64 = 40.0;

/// Time to answer over the run, log scale, with the fault windows shaded.
fn picture(points: &[Point], injected: &Injected, length_ms: u64) -> String {
    let end_ms = points
        .iter()
        .map(|p| p.at_ms)
        .max()
        .unwrap_or(0)
        .max(injected.windows.iter().map(|w| w.end_ms).max().unwrap_or(0))
        + 10_000;
    let end_ms = end_ms.min(length_ms.max(1)) as f64;
    let max_ms = points.iter().filter_map(|p| p.took_ms).max().unwrap_or(1000).max(1000) as f64;
    let (low, high) = (100f64.log10(), (max_ms * 1.5).log10());
    let x = |ms: f64| LEFT + (W - LEFT - RIGHT) * (ms / end_ms);
    let y = |ms: f64| TOP + (H - TOP - BOTTOM) * (1.0 - ((ms.max(100.0).log10() - low) / (high - low)));
    let mut svg = String::new();
    let _ = writeln!(
        svg,
        r##"<svg xmlns="http://www.w3.org/2000/svg" width="{W}" height="{H}" viewBox="0 0 {W} {H}" font-family="sans-serif" font-size="11">"##
    );
    let _ = writeln!(svg, r##"<rect width="{W}" height="{H}" fill="white"/>"##);
    for window in &injected.windows {
        let colour = match window.kind {
            "outage" => "#f4b6b0",
            "drill" => "#bcd7f0",
            _ => "#fde3bd",
        };
        let (x0, x1) = (x(window.start_ms as f64), x(window.end_ms as f64));
        let _ = writeln!(
            svg,
            r##"<rect x="{x0:.1}" y="{TOP}" width="{:.1}" height="{}" fill="{colour}" opacity="0.7"><title>{}</title></rect>"##,
            (x1 - x0).max(1.0),
            H - TOP - BOTTOM,
            window.what
        );
    }
    for at in &injected.kill_times_ms {
        let kx = x(*at as f64);
        let _ = writeln!(
            svg,
            r##"<line x1="{kx:.1}" y1="{TOP}" x2="{kx:.1}" y2="{}" stroke="#444" stroke-width="1"/>"##,
            TOP + 6.0
        );
    }
    // Axes and ticks.
    let _ = writeln!(
        svg,
        r##"<line x1="{LEFT}" y1="{}" x2="{}" y2="{}" stroke="#000"/>"##,
        H - BOTTOM,
        W - RIGHT,
        H - BOTTOM
    );
    let _ = writeln!(svg, r##"<line x1="{LEFT}" y1="{TOP}" x2="{LEFT}" y2="{}" stroke="#000"/>"##, H - BOTTOM);
    for tick in [100.0, 1_000.0, 10_000.0, 100_000.0, 1_000_000.0] {
        if tick > max_ms * 1.5 {
            break;
        }
        let ty = y(tick);
        let label = if tick < 1000.0 { "0.1 s".to_owned() } else { format!("{} s", tick / 1000.0) };
        let _ = writeln!(
            svg,
            r##"<line x1="{LEFT}" y1="{ty:.1}" x2="{}" y2="{ty:.1}" stroke="#ddd"/><text x="{}" y="{:.1}" text-anchor="end">{label}</text>"##,
            W - RIGHT,
            LEFT - 4.0,
            ty + 4.0
        );
    }
    let step_s = ((end_ms / 1000.0 / 10.0 / 30.0).ceil() * 30.0).max(30.0);
    let mut t = 0.0;
    while t * 1000.0 <= end_ms {
        let tx = x(t * 1000.0);
        let _ = writeln!(svg, r##"<text x="{tx:.1}" y="{}" text-anchor="middle">{t:.0} s</text>"##, H - BOTTOM + 15.0);
        t += step_s;
    }
    let _ = writeln!(
        svg,
        r##"<text x="{}" y="{}" text-anchor="middle">published at (s since the start)</text>"##,
        LEFT + (W - LEFT - RIGHT) / 2.0,
        H - 8.0
    );
    let _ = writeln!(
        svg,
        r##"<text x="14" y="{}" transform="rotate(-90 14 {})" text-anchor="middle">time to answer</text>"##,
        TOP + (H - TOP - BOTTOM) / 2.0,
        TOP + (H - TOP - BOTTOM) / 2.0
    );
    for point in points {
        let px = x(point.at_ms as f64);
        match point.took_ms {
            Some(took) => {
                let colour = if point.secondary { "#2b8a3e" } else { "#1c5fa8" };
                let _ = writeln!(
                    svg,
                    r##"<circle cx="{px:.1}" cy="{:.1}" r="2" fill="{colour}" opacity="0.6"/>"##,
                    y(took as f64)
                );
            }
            None => {
                let _ = writeln!(
                    svg,
                    r##"<text x="{px:.1}" y="{}" fill="#c00" text-anchor="middle" font-size="14">×</text>"##,
                    TOP + 14.0
                );
            }
        }
    }
    let _ = writeln!(svg, "</svg>");
    svg
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn percentiles_are_the_nearest_rank() {
        let spread = Spread::of((1..=100).collect());
        assert_eq!((spread.p50, spread.p90, spread.p99, spread.max), (50, 90, 99, 100));
        let one = Spread::of(vec![7]);
        assert_eq!((one.p50, one.p99, one.max), (7, 7, 7));
        assert_eq!(Spread::of(Vec::new()).count, 0);
    }
}
