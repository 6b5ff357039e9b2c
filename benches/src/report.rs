//! The figures of all runs: min, median and max per side, and the median of the paired ratios
//! (Python ÷ Rust, pair by pair: the two runs of a pair ran back to back on the same moto), as a
//! table and as BENCHMARKS.md.

use std::collections::{BTreeMap, BTreeSet};

use crate::measure::{BATCH, Mode, Sample, Side};

/// Every run of one mode, per side, in pair order.
#[derive(Debug)]
pub struct Report {
    mode: Mode,
    samples: BTreeMap<Side, Vec<Sample>>,
}

impl Default for Report {
    fn default() -> Self {
        Self::new(Mode::Tls)
    }
}

/// One figure: its name, its unit, and how to read it off a sample.
type Figure = (&'static str, &'static str, fn(&Sample) -> f64);

const FIGURES: [Figure; 17] = [
    ("time to answer, first request (handed out → PUT stored)", "ms", |s| s.first_answer_ms),
    ("  of which moto's own time (outside the floor)", "ms", |s| s.first_answer_moto_ms),
    ("  the rest, against the floor", "ms", |s| (s.first_answer_ms - s.first_answer_moto_ms).max(0.0)),
    ("  AWS round trips it waited for before its PUT", "", |s| s.first_round_trips_before_put as f64),
    ("time to answer, warm requests (batch handed out → PUT stored, median)", "ms", |s| s.warm_answer_ms),
    ("cold start to first /next", "ms", |s| s.cold_start_ms),
    ("CPU before the first /next", "ms", |s| s.init_cpu_ms),
    ("first invocation alone (handed out → /response)", "ms", |s| s.first_alone_ms),
    ("  of which waiting for AWS (the round trip added at the proxy and moto's time)", "ms", |s| s.first_aws_ms),
    ("  of which the function's own", "ms", |s| (s.first_alone_ms - s.first_aws_ms).max(0.0)),
    ("first invocation, handler CPU", "ms", |s| s.first_cpu_ms),
    ("first invocation end to end (exec → /response)", "ms", |s| s.first_end_to_end_ms),
    ("warm wall per request", "ms", |s| s.warm_ms_per_request),
    ("warm handler CPU per request", "ms", |s| s.warm_cpu_ms_per_request),
    ("peak RSS (VmHWM)", "MiB", |s| s.peak_rss_mib),
    ("TLS handshakes per process life", "", |s| s.tls_handshakes as f64),
    ("  of which resumed a session (no certificate verified)", "", |s| s.tls_resumed as f64),
];

/// `(min, median, max)`.
fn spread(mut values: Vec<f64>) -> (f64, f64, f64) {
    if values.is_empty() {
        return (0.0, 0.0, 0.0);
    }
    values.sort_by(f64::total_cmp);
    (values[0], median(&values), values[values.len() - 1])
}

fn median(sorted: &[f64]) -> f64 {
    let n = sorted.len();
    if n % 2 == 1 { sorted[n / 2] } else { (sorted[n / 2 - 1] + sorted[n / 2]) / 2.0 }
}

fn number(value: f64) -> String {
    if value >= 100.0 {
        format!("{value:.0}")
    } else if value >= 10.0 {
        format!("{value:.1}")
    } else {
        format!("{value:.2}")
    }
}

impl Report {
    pub fn new(mode: Mode) -> Self {
        Self { mode, samples: BTreeMap::new() }
    }

    /// What the mode is, in words, with the round-trip floor in the latency mode.
    fn heading(&self) -> String {
        match &self.mode {
            Mode::Tls => "HTTPS, no latency added: what each function costs itself".to_owned(),
            Mode::Plain => {
                "the AWS calls in plain HTTP to the proxy (the response PUT stays HTTPS), no latency added: the costs without TLS on the AWS calls".to_owned()
            }
            Mode::Latency(l) => format!(
                "HTTPS, each call delayed at the proxy by its class's round trip (DynamoDB {} ms, S3 PUT {} ms, SQS {} ms). \
                 Floor: cfn-once's protocol waits for acquire, commit and the PUT, {} ms; the peer's for its idempotency PutItem and the PUT, {} ms (it records the result after the PUT); moto's own time comes on top",
                l.dynamodb_ms,
                l.s3_ms,
                l.sqs_ms,
                l.floor_ms(2),
                l.floor_ms(1)
            ),
        }
    }

    pub fn add(&mut self, side: Side, sample: Sample) {
        self.samples.entry(side).or_default().push(sample);
    }

    fn side(&self, side: Side) -> &[Sample] {
        self.samples.get(&side).map_or(&[], Vec::as_slice)
    }

    /// Each figure's row: rust (min, median, max), python (min, median, max), paired ratio.
    fn rows(&self) -> Vec<(String, [String; 3])> {
        let (rust, python) = (self.side(Side::Rust), self.side(Side::Python));
        FIGURES
            .iter()
            .map(|(name, unit, read)| {
                let show = |samples: &[Sample]| {
                    let (min, median, max) = spread(samples.iter().map(read).collect());
                    format!("{} / {} / {}", number(min), number(median), number(max))
                };
                let mut ratios: Vec<f64> = rust.iter().zip(python).map(|(r, p)| read(p) / read(r).max(1e-9)).collect();
                ratios.sort_by(f64::total_cmp);
                let ratio = if ratios.is_empty() { "-".into() } else { format!("{:.2}×", median(&ratios)) };
                let name = if unit.is_empty() { (*name).to_owned() } else { format!("{name} ({unit})") };
                (name, [show(rust), show(python), ratio])
            })
            .collect()
    }

    /// AWS calls per warm request (median over runs), by operation, for each side.
    fn calls(&self) -> Vec<(String, String, String)> {
        let operations: BTreeSet<String> =
            self.samples.values().flatten().flat_map(|sample| sample.warm_calls.keys().cloned()).collect();
        let per_side = |side: Side, operation: &str| {
            let mut values: Vec<f64> =
                self.side(side).iter().map(|s| s.warm_calls.get(operation).copied().unwrap_or(0.0)).collect();
            values.sort_by(f64::total_cmp);
            if values.is_empty() { "-".into() } else { format!("{:.2}", median(&values)) }
        };
        operations.iter().map(|op| (op.clone(), per_side(Side::Rust, op), per_side(Side::Python, op))).collect()
    }

    /// The first invocation's AWS calls of each side's first run.
    fn first_calls(&self, side: Side) -> String {
        self.side(side).first().map_or("-".into(), |sample| {
            sample.first_calls.iter().map(|(op, n)| format!("{op} {n}")).collect::<Vec<_>>().join(", ")
        })
    }

    /// A plain-text table.
    pub fn table(&self) -> String {
        let mut lines = vec![
            format!("mode {}: {}", self.mode.name(), self.heading()),
            format!("{:<72} {:>24} {:>24} {:>10}", "figure (min / median / max)", "rust", "python", "py ÷ rs"),
        ];
        for (name, [rust, python, ratio]) in self.rows() {
            lines.push(format!("{name:<72} {rust:>24} {python:>24} {ratio:>10}"));
        }
        lines.push(String::new());
        lines.push(format!("{:<72} {:>24} {:>24}", "AWS calls per warm request (median)", "rust", "python"));
        for (op, rust, python) in self.calls() {
            lines.push(format!("{op:<72} {rust:>24} {python:>24}"));
        }
        lines.push(format!("first invocation's AWS calls, rust:   {}", self.first_calls(Side::Rust)));
        lines.push(format!("first invocation's AWS calls, python: {}", self.first_calls(Side::Python)));
        lines.join("\n")
    }

    /// This mode's section of BENCHMARKS.md.
    fn section(&self) -> String {
        let mut out = format!("## Mode `{}`\n\n{}.\n", self.mode.name(), self.heading());
        out.push_str(
            "\n| figure (min / median / max) | Rust | Python | Python ÷ Rust (median of pairs) |\n|---|---|---|---|\n",
        );
        for (name, [rust, python, ratio]) in self.rows() {
            out.push_str(&format!("| {name} | {rust} | {python} | {ratio} |\n"));
        }
        out.push_str(
            "\n| AWS calls per warm request, by operation (median of runs) | Rust | Python |\n|---|---|---|\n",
        );
        for (op, rust, python) in self.calls() {
            out.push_str(&format!("| {op} | {rust} | {python} |\n"));
        }
        out.push_str(&format!(
            "\nThe first invocation's AWS calls, from its hand-out (a call the function made at init is the cold start's): Rust {}; Python {}.\n\n",
            self.first_calls(Side::Rust),
            self.first_calls(Side::Python)
        ));
        out
    }
}

/// BENCHMARKS.md's measured part: one section per mode.
pub fn markdown(
    reports: &[Report],
    environment: &[(String, String)],
    command: &str,
    pairs: usize,
    warm_batches: usize,
    microbenchmarks: &[(String, String)],
) -> String {
    let mut out = String::new();
    out.push_str("# Benchmarks\n\n");
    out.push_str("Generated by `cfn-once-bench` (`benches/`); do not edit by hand: run the command below.\n");
    out.push_str("What is measured, how, and why is in [benches/README.md](benches/README.md).\n\n");
    out.push_str(&format!(
        "cfn-once's Lambda function beside the Python way (crhelper + Powertools idempotency on DynamoDB), \
         each run as Lambda runs it under a fake Runtime API against moto: in each mode, {pairs} interleaved pairs, \
         each run a cold start, one invocation of one record, then {warm_batches} warm batches of {BATCH} records.\n\n"
    ));
    out.push_str(&format!("Command: `{command}`\n\n"));
    for (name, value) in environment {
        out.push_str(&format!("- {name}: {value}\n"));
    }
    out.push('\n');
    for report in reports {
        out.push_str(&report.section());
    }
    if !microbenchmarks.is_empty() {
        out.push_str("| hot path (criterion, `cargo bench -p cfn-once-bench --bench hot_path`) | time per call [low estimate, median, high] |\n|---|---|\n");
        for (name, time) in microbenchmarks {
            out.push_str(&format!("| {name} | {time} |\n"));
        }
    }
    out
}

/// criterion's `name  time: [a b c]` lines (the name may be on the line before).
pub fn criterion_times(output: &str) -> Vec<(String, String)> {
    let mut times = Vec::new();
    let mut previous = "";
    for line in output.lines() {
        if let Some((name, time)) = line.split_once("time:") {
            let name = if name.trim().is_empty() { previous.trim() } else { name.trim() };
            times.push((name.to_owned(), time.trim().to_owned()));
        } else if !line.trim().is_empty() {
            previous = line;
        }
    }
    times
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn criterion_lines_are_read_whatever_their_width() {
        let output = "Benchmarking decide\ndecide                  time:   [1.0 ns 1.1 ns 1.2 ns]\n\
                      decode an SNS-wrapped request\n                        time:   [6.1 µs 6.2 µs 6.3 µs]\n\
                      Found 3 outliers";
        assert_eq!(
            criterion_times(output),
            [
                ("decide".to_owned(), "[1.0 ns 1.1 ns 1.2 ns]".to_owned()),
                ("decode an SNS-wrapped request".to_owned(), "[6.1 µs 6.2 µs 6.3 µs]".to_owned())
            ]
        );
    }

    #[test]
    fn ratios_are_paired_and_spreads_ordered() {
        let mut report = Report::default();
        for (rust, python) in [(1.0, 10.0), (2.0, 10.0), (4.0, 10.0)] {
            report.add(Side::Rust, Sample { cold_start_ms: rust, ..Sample::default() });
            report.add(Side::Python, Sample { cold_start_ms: python, ..Sample::default() });
        }
        let (name, [rust, python, ratio]) =
            report.rows().into_iter().find(|(name, _)| name.starts_with("cold start")).expect("the cold start row");
        assert_eq!(name, "cold start to first /next (ms)");
        assert_eq!(
            (rust.as_str(), python.as_str(), ratio.as_str()),
            ("1.00 / 2.00 / 4.00", "10.0 / 10.0 / 10.0", "5.00×")
        );
    }
}
