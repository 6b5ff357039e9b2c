//! Pointers that go stale, checked without a network: in the guides (every Markdown file of the
//! repository but the changelog, which tells history) and in the comments of the code, the
//! manifests, the Makefile and `.ci/`,
//!
//! * a path or a file name in backticks (`handler/cfn-once/src/app.rs`, `decision.rs`,
//!   `docs/soak.md`) names a file or folder of the repository: by its path from the root or
//!   from the citing file's folder, or, for a partial path, as the end of one;
//! * a section cited by name (`BENCHMARKS.md, "Choices"`, `docs/soak.md's "Reports"`) is a
//!   heading or a bold phrase of that file;
//! * an upper-case Markdown file cited (`DESIGN.md §4`) is one of the repository's;
//! * no path of one machine (`/work/...`, `/home/...`) is written down;
//! * no issue number, branch name or commit id: history lives in git and in CHANGELOG.md.
//!
//! Only the files git tracks are read and pointed at: build outputs and files the tools write
//! (`target/`, `dist/`, `.local/`, virtual environments) are not in a clean clone, and a
//! pointer into them is not checked; nor is anything with a placeholder (`<`, `*`, `{`, `$`).
//! `the_checker_reports_each_kind_of_stale_pointer` plants one of each and sees it reported.

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};

use cfn_once_tests::workspace_root;

/// Prefixes of paths a tool writes, absent from a clean checkout.
const GENERATED: &[&str] =
    &["target/", "dist/", ".local/", ".venv/", ".tools/", "node_modules/", "cdk.out/", ".aws-sam/", "~/", "./target/"];

/// File names the tools write or AWS and other projects define, cited by name in the guides but
/// never part of this repository, each with where it comes from.
const NOT_OURS: &[(&str, &str)] = &[
    ("bootstrap.zip", "cargo lambda build --output-format zip"),
    ("env.json", "cfn-once local writes .local/env.json"),
    ("env.exports.json", "cfn-once play writes .local/env.exports.json"),
    ("soak-report.md", "cfn-once soak writes it into its --out folder"),
    ("generated.txt", "make golden-records writes it beside the records"),
    ("template.yaml", "a customer's template, or sam init's"),
    ("cdk.json", "a CDK app's"),
    ("manifest.json", "cdk synth's cloud assembly"),
    ("Cargo.lock", "checked in; named here for cargo's rule"),
    ("SHA256SUMS", "make release writes it"),
    ("BUILDINFO", "make release writes it"),
    ("samconfig.local.toml", "cfn-once deploy --config writes it where asked"),
    ("requirements.txt", "a Python function's, pip's convention"),
    ("package.json", "a Node function's, npm's convention"),
    ("index.mjs", "a Node function's handler file"),
    ("lambda_function.py", "a Python function's handler file"),
    ("config.toml", "cargo's .cargo/config.toml in a user's own project"),
    ("samconfig.deploy.toml", "cfn-once deploy writes it (its --out)"),
    ("samconfig.example.toml", "make release writes the repository's samconfig.toml under that name"),
    ("greeting.rs", "the test of the provider crate a user writes in docs/providers.md"),
    ("app.py", "a file of the user's function folder the functions-file tests make"),
    ("mod.py", "a file of the user's function folder the functions-file tests make"),
    ("child.json", "a nested template the player's tests write, as cdk synth would"),
];

/// Files of other projects the comments and guides cite by their path there, each with the
/// project.
const ELSEWHERE: &[(&str, &str)] = &[
    ("doc_source/sns-send-message-to-sqs-cross-account.md", "awsdocs/amazon-sns-developer-guide"),
    ("templates/main.yaml", "the AWS sample the accounts guide cites"),
    ("client/legacy/client.rs", "hyper-util"),
    ("service_clock_skew.rs", "aws-smithy-runtime"),
];

/// One stale pointer: where, what, why.
#[derive(Debug, PartialEq, Eq, PartialOrd, Ord)]
struct Stale {
    at: String,
    pointer: String,
    why: &'static str,
}

#[test]
fn no_pointer_of_the_guides_or_the_comments_is_stale() {
    let root = workspace_root();
    let tree = Tree::of(&root);
    let mut stale = Vec::new();
    for file in &tree.files {
        let Some(text) = cited_text(&root, file) else { continue };
        stale.extend(check(&tree, file, &text));
    }
    stale.sort();
    assert!(
        stale.is_empty(),
        "{} stale pointers:\n{}",
        stale.len(),
        stale.iter().map(|s| format!("{}: `{}`: {}", s.at, s.pointer, s.why)).collect::<Vec<_>>().join("\n")
    );
}

#[test]
fn the_checker_reports_each_kind_of_stale_pointer() {
    let root = workspace_root();
    let tree = Tree::of(&root);
    let planted = [
        ("docs/soak.md", "Read `handler/cfn-once/src/adapters/dynamodb_wire.rs` first.", "no such file"),
        ("docs/soak.md", "The client is in `h1.rs`.", "no such file"),
        ("README.md", "See [the bench](BENCHMARKS.md), as `BENCHMARKS.md`, \"Choices\" says.", "no such section"),
        ("ARCHITECTURE.md", "As DESIGN.md §4 says.", "no such Markdown file"),
        ("docs/release.md", "Built in /work/main/target.", "a path of one machine"),
        ("handler/cfn-once/src/app.rs", "// Since issue 45, the record has a format.", "an issue number"),
        ("Makefile", "# Landed from branch i47-release.", "a branch name"),
        ("benches/profile.md", "Before (2547fe7) against after.", "a commit id"),
        ("tests/golden/records/README.md", "Revision: 47ab05d2051578e7994185580be2078648fdbd37.", "a commit id"),
    ];
    for (file, line, why) in planted {
        let found = check(&tree, Path::new(file), line);
        assert!(found.iter().any(|s| s.why == why), "{file}: {line:?} not reported as {why:?}: {found:?}");
    }
    let fine = [
        ("docs/soak.md", "Read `handler/cfn-once/src/app.rs`, `decision.rs` and `docs/operating.md`."),
        ("docs/soak.md", "The zip is `target/lambda/cfn-once-lambda/bootstrap.zip`; `<crate>/src/lib.rs` varies."),
        ("README.md", "See `docs/operating.md`'s \"Runbook: my stack is stuck in CREATE_IN_PROGRESS\"."),
        ("docs/release.md", "A scratch clone in /tmp/rel/clone2 is no machine's own path."),
        ("docs/operating.md", "fingerprint 6f9015025fccce75288b3470047a37d7, owner 2f0fba64bf867fcb, deadbeef"),
        ("BENCHMARKS.md", "- rust: rustc 1.95.0 (59807616e 2026-04-14)"),
        ("docs/operating.md", "DLQ us-east-1 primary (a0d26721-…): RequestId e3f1c1d4-0000-4000-8000-000000000001"),
    ];
    for (file, line) in fine {
        let found = check(&tree, Path::new(file), line);
        assert!(found.is_empty(), "{file}: {line:?} reported: {found:?}");
    }
}

/// The repository's files and folders, as paths from its root.
struct Tree {
    root: PathBuf,
    files: Vec<PathBuf>,
    /// Every file and folder, `/`-separated.
    all: BTreeSet<String>,
}

impl Tree {
    /// The files git tracks (`git ls-files`), and every folder above them: what a clean clone
    /// holds, whatever else a checkout has around it (virtual environments, build outputs).
    fn of(root: &Path) -> Self {
        let listed = std::process::Command::new("git")
            .current_dir(root)
            .args(["ls-files", "-z"])
            .output()
            .expect("git ls-files runs in the checkout");
        assert!(listed.status.success(), "git ls-files: {}", String::from_utf8_lossy(&listed.stderr));
        let mut files = Vec::new();
        let mut all = BTreeSet::new();
        for name in String::from_utf8_lossy(&listed.stdout).split('\0').filter(|name| !name.is_empty()) {
            let path = PathBuf::from(name);
            let mut folder = path.parent();
            while let Some(dir) = folder.filter(|dir| !dir.as_os_str().is_empty()) {
                all.insert(slashed(dir));
                folder = dir.parent();
            }
            all.insert(slashed(&path));
            files.push(path);
        }
        files.sort();
        Self { root: root.to_path_buf(), files, all }
    }

    /// Whether `pointer`, cited in `file`, names something of the repository.
    fn has(&self, file: &Path, pointer: &str) -> bool {
        let pointer = pointer.trim_start_matches("./").trim_end_matches('/');
        let from_file = file.parent().map(|dir| normal(&dir.join(pointer))).unwrap_or_default();
        self.all.contains(pointer)
            || self.all.contains(&from_file)
            || self.all.iter().any(|path| path.ends_with(&format!("/{pointer}")))
    }
}

/// The text of `file` whose pointers are checked: a guide's whole text (its code blocks too:
/// a command names real files), the comments of code and manifests; `None` for anything else.
fn cited_text(root: &Path, file: &Path) -> Option<String> {
    let name = slashed(file);
    // History, the fixtures' own provenance (other projects' paths), and this file's examples.
    if name == "CHANGELOG.md"
        || name.starts_with("tests/golden/records/v")
        || name.starts_with("tests/fixtures/")
        || name == "tests/it/pointers.rs"
    {
        return None;
    }
    let comments = |marker: &str| -> Option<String> {
        let text = std::fs::read_to_string(root.join(file)).ok()?;
        Some(
            text.lines()
                .map(|line| line.trim_start())
                .map(|line| if line.starts_with(marker) { line } else { "" })
                .collect::<Vec<_>>()
                .join("\n"),
        )
    };
    match file.extension().and_then(|e| e.to_str()) {
        Some("md") => std::fs::read_to_string(root.join(file)).ok(),
        Some("rs") => comments("//"),
        Some("toml") | Some("py") | Some("sh") => comments("#"),
        _ if name == "Makefile" || name.starts_with(".ci/") => comments("#"),
        _ => None,
    }
}

/// The stale pointers of `text`, cited in `file`, one per line and pointer.
fn check(tree: &Tree, file: &Path, text: &str) -> Vec<Stale> {
    let mut stale = Vec::new();
    for (index, line) in text.lines().enumerate() {
        let at = format!("{}:{}", slashed(file), index + 1);
        let mut report = |pointer: &str, why| stale.push(Stale { at: at.clone(), pointer: pointer.to_owned(), why });
        for pointer in backticked(line) {
            if let Some(path) = as_path(pointer)
                && !tree.has(file, &path)
            {
                report(pointer, "no such file");
            }
        }
        for (cited, section) in cited_sections(line) {
            if let Some(path) = as_path(&cited)
                && tree.has(file, &path)
                && !has_section(tree, file, &path, &section)
            {
                report(&format!("{cited}, \"{section}\""), "no such section");
            }
        }
        for word in line.split(|c: char| !(c.is_ascii_alphanumeric() || c == '.' || c == '_' || c == '-')) {
            if word.len() > 3
                && word.ends_with(".md")
                && word[..word.len() - 3].chars().all(|c| c.is_ascii_uppercase() || c == '_')
                && !tree.has(file, word)
            {
                report(word, "no such Markdown file");
            }
        }
        for prefix in ["/work/", "/home/", "/Users/", "/root/"] {
            if let Some(start) = line.find(prefix) {
                report(line[start..].split_whitespace().next().unwrap_or(prefix), "a path of one machine");
            }
        }
        let lower = line.to_lowercase();
        if let Some(start) = lower.find("issue ").or_else(|| lower.find("issues "))
            && lower[start..]
                .split_whitespace()
                .nth(1)
                .is_some_and(|n| n.trim_start_matches('#').starts_with(|c: char| c.is_ascii_digit()))
        {
            report(&line[start..], "an issue number");
        }
        if !line.contains("rustc ") {
            for word in line.split_whitespace().map(|w| w.trim_matches(|c: char| "`'\"()[],.;:!?*".contains(c))) {
                if is_commit_id(word) {
                    report(word, "a commit id");
                }
            }
        }
        for word in line.split(|c: char| !(c.is_ascii_alphanumeric() || c == '-')) {
            let branch = word.strip_prefix('i').and_then(|rest| rest.split_once('-')).map(|(n, _)| n);
            if branch.is_some_and(|n| n.len() == 2 && n.chars().all(|c| c.is_ascii_digit())) {
                report(word, "a branch name");
            }
        }
    }
    stale
}

/// Whether `word` (a word of prose, its punctuation trimmed) reads as a git commit id: 7 to 12
/// hexadecimal digits (an abbreviated id) or all 40, with a letter and a digit among them. Part
/// of a longer token is not (a UUID's groups, a query string). Nor are digests of other lengths
/// (a request's 32-digit fingerprint, a lease owner's 16-digit nonce), or the toolchain's own id
/// in a `rustc` version line, which is not this repository's history.
fn is_commit_id(word: &str) -> bool {
    (matches!(word.len(), 7..=12) || word.len() == 40)
        && word.chars().all(|c| c.is_ascii_digit() || ('a'..='f').contains(&c))
        && word.chars().any(|c| c.is_ascii_digit())
        && word.chars().any(|c| c.is_ascii_lowercase())
}

/// The spans of `line` in backticks.
fn backticked(line: &str) -> Vec<&str> {
    line.split('`').skip(1).step_by(2).collect()
}

/// `pointer` as a path of the repository to check, if it is one: no spaces, no placeholder, not
/// a URL, not a Rust path; a file name with an extension we keep, or a path with a folder.
fn as_path(pointer: &str) -> Option<String> {
    let pointer = pointer.trim().trim_end_matches(['.', ',', ';', ')']);
    // `Cargo.toml:80`, `record.rs:12-30`: the file.
    let pointer = pointer
        .split_once(':')
        .map_or(pointer, |(path, line)| if line.chars().all(|c| c.is_ascii_digit() || c == '-') { path } else { "" });
    if pointer.is_empty()
        || pointer.contains(char::is_whitespace)
        || pointer.contains(['<', '>', '*', '{', '}', '$', '|', '=', '(', '[', '@', '?', '&', '"', '\''])
        || pointer.contains("...")
        || pointer.contains("::")
        || pointer.contains("//")
        || pointer.starts_with('/')
        || pointer.starts_with('-')
        || GENERATED.iter().any(|prefix| pointer.starts_with(prefix))
    {
        return None;
    }
    let name = pointer.rsplit('/').find(|part| !part.is_empty()).unwrap_or(pointer);
    if NOT_OURS.iter().any(|(not_ours, _)| *not_ours == name) || ELSEWHERE.iter().any(|(path, _)| *path == pointer) {
        return None;
    }
    // A placeholder in capitals (`HASH.json`), and the SBOMs `make release` writes.
    let stem = name.split('.').next().unwrap_or_default();
    if (!name.ends_with(".md") && !stem.is_empty() && stem.chars().all(|c| c.is_ascii_uppercase() || c == '_'))
        || name.ends_with(".cdx.json")
    {
        return None;
    }
    let kept = [".rs", ".md", ".toml", ".yaml", ".yml", ".py", ".sh", ".json", ".mjs"];
    let is_file = kept.iter().any(|ext| name.ends_with(ext) && name.len() > ext.len());
    let top = ["handler/", "tests/", "docs/", "infra/", "events/", "benches/", ".ci/", "examples/", "fuzz/"];
    let is_path = top.iter().any(|prefix| pointer.starts_with(prefix));
    (is_file || is_path).then(|| pointer.to_owned())
}

/// The sections `line` cites by name: `FILE, "Section"` and `FILE's "Section"`, FILE in
/// backticks or bare.
fn cited_sections(line: &str) -> Vec<(String, String)> {
    let mut found = Vec::new();
    for (start, _) in line.match_indices(".md") {
        let before = &line[..start + 3];
        let cited: String = before
            .chars()
            .rev()
            .take_while(|c| c.is_ascii_alphanumeric() || matches!(c, '/' | '.' | '_' | '-'))
            .collect::<Vec<_>>()
            .into_iter()
            .rev()
            .collect();
        let after = line[start + 3..].trim_start_matches('`');
        let Some(rest) = after.strip_prefix(", \"").or_else(|| after.strip_prefix("'s \"")) else { continue };
        if let Some((section, _)) = rest.split_once('"')
            && !cited.is_empty()
        {
            found.push((cited, section.to_owned()));
        }
    }
    found
}

/// Whether the Markdown file `path` (cited in `file`) has `section` as a heading or bold phrase.
fn has_section(tree: &Tree, file: &Path, path: &str, section: &str) -> bool {
    let candidates = [PathBuf::from(path), file.parent().map(|dir| dir.join(path)).unwrap_or_default()];
    let Some(text) = candidates.iter().find_map(|c| std::fs::read_to_string(tree.root.join(c)).ok()) else {
        return true;
    };
    let wanted = section.to_lowercase();
    text.lines().any(|line| {
        let lower = line.to_lowercase();
        (lower.starts_with('#') && lower.trim_start_matches('#').trim().starts_with(&wanted))
            || lower.contains(&format!("**{wanted}"))
    })
}

fn slashed(path: &Path) -> String {
    path.components().map(|c| c.as_os_str().to_string_lossy()).collect::<Vec<_>>().join("/")
}

/// `path` with `.` and `..` taken out, `/`-separated.
fn normal(path: &Path) -> String {
    let mut parts: Vec<String> = Vec::new();
    for component in path.components() {
        match component.as_os_str().to_string_lossy().as_ref() {
            "." => {}
            ".." => {
                parts.pop();
            }
            other => parts.push(other.to_owned()),
        }
    }
    parts.join("/")
}

/// ARCHITECTURE.md stays a map read in half an hour: at most 30 KB. Detail belongs in the
/// modules' doc comments and in docs/.
#[test]
fn the_architecture_is_read_in_half_an_hour() {
    let bytes = std::fs::metadata(workspace_root().join("ARCHITECTURE.md")).expect("ARCHITECTURE.md").len();
    assert!(bytes <= 30 * 1024, "ARCHITECTURE.md is {bytes} bytes, over 30 KB");
}
