//! The documentation's links, checked without a network: every relative link in the README, the
//! guides in `docs/`, ARCHITECTURE.md, BENCHMARKS.md and the examples' READMEs names a file or
//! folder of the repository, and every `#anchor` into a Markdown file names one of its headings,
//! by GitHub's rules for a heading's anchor. And every Rust block of the README and its guides is
//! a doctest (`tests/harness/lib.rs` includes each file that has one), so moving a block into a
//! new guide cannot leave it untested.
//!
//! Links to other sites (`https://`, `mailto:`) are not followed: the tests run offline. Headings
//! are ATX headings (`## Title`), the only kind these files use; a link to anything else is
//! reported, so the checker errs on the side of failing.

use std::collections::BTreeMap;
use std::path::{Component, Path, PathBuf};

use cfn_once_tests::workspace_root;

#[test]
fn every_relative_link_and_anchor_of_the_documentation_resolves() {
    let root = workspace_root();
    let documents = documents(&root);
    assert!(
        documents.iter().any(|d| d == Path::new("README.md")) && documents.iter().any(|d| d.starts_with("docs")),
        "the documents to check include the README and docs/: {documents:?}"
    );
    let broken = check(&root, &documents);
    assert!(broken.is_empty(), "broken links:\n{}", report(&broken));
}

#[test]
fn every_guide_with_a_rust_block_is_a_doctest() {
    let root = workspace_root();
    let harness = std::fs::read_to_string(root.join("tests/harness/lib.rs")).expect("tests/harness/lib.rs");
    let mut guides = vec![PathBuf::from("README.md")];
    guides.extend(markdown_in(&root, Path::new("docs")));
    let mut untested = Vec::new();
    for guide in &guides {
        let text = read(&root, guide);
        let included = format!("include_str!(\"../../{}\")", slashed(guide));
        if has_rust_block(&text) && !harness.contains(&included) {
            untested.push(slashed(guide));
        }
    }
    assert!(
        untested.is_empty(),
        "these files have Rust blocks that no doctest runs; add `#[doc = include_str!(\"../../FILE\")]` to \
         tests/harness/lib.rs for each: {untested:?}"
    );
}

/// The checker finds what it is for: a missing file, a missing anchor in the same file and in
/// another, a link that leaves the repository; and passes what is right, including links shown
/// as code, which are not links.
#[test]
fn the_checker_reports_a_broken_link_and_a_broken_anchor() {
    let root = std::env::temp_dir().join(cfn_once_tests::unique("links"));
    std::fs::create_dir_all(root.join("docs")).expect("a folder");
    std::fs::write(
        root.join("README.md"),
        "# Front door\n\n## What `make demo` shows\n\n\
         [guide](docs/guide.md), [its part](docs/guide.md#a-part), [here](#what-make-demo-shows),\n\
         [the folder](docs), [gone](docs/gone.md), [no such part](docs/guide.md#no-such-part),\n\
         [not here](#nowhere), [outside](../../etc/passwd), [web](https://example.com/x#y).\n\
         `[code](docs/not-a-link.md)` and\n\n```text\n[a block](nor-this.md)\n```\n\n[ref]: docs/missing.md\n",
    )
    .expect("README.md");
    std::fs::write(
        root.join("docs/guide.md"),
        "# Guide\n\n## A part\n\n## A part\n\nBack to [the door](../README.md#front-door), [twice](#a-part-1).\n",
    )
    .expect("docs/guide.md");

    let documents = vec![PathBuf::from("README.md"), PathBuf::from("docs/guide.md")];
    let broken = check(&root, &documents);
    let found: Vec<(&str, usize, &str)> = broken.iter().map(|b| (b.file.as_str(), b.line, b.target.as_str())).collect();
    assert_eq!(
        found,
        [
            ("README.md", 6, "docs/gone.md"),
            ("README.md", 6, "docs/guide.md#no-such-part"),
            ("README.md", 7, "#nowhere"),
            ("README.md", 7, "../../etc/passwd"),
            ("README.md", 14, "docs/missing.md"),
        ],
        "{}",
        report(&broken)
    );
    std::fs::remove_dir_all(&root).ok();
}

#[test]
fn anchors_follow_githubs_rules() {
    let headings = anchors(
        "# cfn-once\n## What `make demo` shows\n## Runbook: my stack is stuck in CREATE_IN_PROGRESS\n\
         ## Work past the hour: wait conditions\n## A/B of two builds\n## Roles, the active region, and deadlines\n\
         ## Roles, the active region, and deadlines\n### See [the guide](docs/x.md)\n```sh\n# not a heading\n```\n#not-a-heading\n",
    );
    assert_eq!(
        headings,
        [
            "cfn-once",
            "what-make-demo-shows",
            "runbook-my-stack-is-stuck-in-create_in_progress",
            "work-past-the-hour-wait-conditions",
            "ab-of-two-builds",
            "roles-the-active-region-and-deadlines",
            "roles-the-active-region-and-deadlines-1",
            "see-the-guide",
        ]
    );
}

/// A link that does not resolve: where it is, what it says, and why it fails.
#[derive(Debug)]
struct Broken {
    file: String,
    line: usize,
    target: String,
    problem: String,
}

fn report(broken: &[Broken]) -> String {
    broken.iter().map(|b| format!("  {}:{}: ({}) {}\n", b.file, b.line, b.target, b.problem)).collect()
}

/// The files whose links are checked, relative to the repository's root: the README, the guides,
/// ARCHITECTURE.md, BENCHMARKS.md, and every README.md under examples/.
fn documents(root: &Path) -> Vec<PathBuf> {
    let mut documents =
        vec![PathBuf::from("README.md"), PathBuf::from("ARCHITECTURE.md"), PathBuf::from("BENCHMARKS.md")];
    documents.extend(markdown_in(root, Path::new("docs")));
    let mut folders = vec![PathBuf::from("examples")];
    while let Some(folder) = folders.pop() {
        for entry in std::fs::read_dir(root.join(&folder)).expect("a folder of examples/").flatten() {
            let path = folder.join(entry.file_name());
            if entry.file_type().is_ok_and(|t| t.is_dir()) {
                folders.push(path);
            } else if entry.file_name() == "README.md" {
                documents.push(path);
            }
        }
    }
    documents.sort();
    documents
}

/// The Markdown files directly in `folder`, sorted.
fn markdown_in(root: &Path, folder: &Path) -> Vec<PathBuf> {
    let mut files: Vec<PathBuf> = std::fs::read_dir(root.join(folder))
        .unwrap_or_else(|e| panic!("cannot read {}: {e}", folder.display()))
        .flatten()
        .map(|entry| folder.join(entry.file_name()))
        .filter(|path| path.extension().is_some_and(|e| e == "md"))
        .collect();
    files.sort();
    files
}

fn read(root: &Path, file: &Path) -> String {
    std::fs::read_to_string(root.join(file)).unwrap_or_else(|e| panic!("cannot read {}: {e}", file.display()))
}

/// A path as a link writes it, with forward slashes.
fn slashed(path: &Path) -> String {
    path.components().map(|c| c.as_os_str().to_string_lossy()).collect::<Vec<_>>().join("/")
}

/// Every broken link of `documents` (paths relative to `root`), in order of file and line.
fn check(root: &Path, documents: &[PathBuf]) -> Vec<Broken> {
    let mut headings: BTreeMap<PathBuf, Vec<String>> = BTreeMap::new();
    let mut broken = Vec::new();
    for document in documents {
        let text = read(root, document);
        for (line, target) in links(&text) {
            if let Err(problem) = resolve(root, document, &target, &mut headings) {
                broken.push(Broken { file: slashed(document), line, target, problem });
            }
        }
    }
    broken
}

/// Whether `target`, written in `document`, names a file or folder of the repository and, with an
/// anchor into a Markdown file, one of its headings.
fn resolve(
    root: &Path,
    document: &Path,
    target: &str,
    headings: &mut BTreeMap<PathBuf, Vec<String>>,
) -> Result<(), String> {
    let (path, anchor) = match target.split_once('#') {
        Some((path, anchor)) => (path, Some(anchor)),
        None => (target, None),
    };
    let file = if path.is_empty() {
        document.to_path_buf()
    } else if let Some(from_root) = path.strip_prefix('/') {
        normal(Path::new(from_root)).ok_or("leaves the repository")?
    } else {
        let folder = document.parent().unwrap_or(Path::new(""));
        normal(&folder.join(path)).ok_or("leaves the repository")?
    };
    if !root.join(&file).exists() {
        return Err(format!("{} does not exist", slashed(&file)));
    }
    let Some(anchor) = anchor else { return Ok(()) };
    if file.extension().is_none_or(|e| e != "md") {
        return Ok(()); // an anchor into code or a picture is the viewer's, not a heading
    }
    let known = headings.entry(file.clone()).or_insert_with(|| anchors(&read(root, &file)));
    if known.iter().any(|h| h == anchor) {
        Ok(())
    } else {
        Err(format!("{} has no heading whose anchor is #{anchor}", slashed(&file)))
    }
}

/// `path` with `.` and `..` taken out, or None when it climbs above the repository's root.
fn normal(path: &Path) -> Option<PathBuf> {
    let mut parts: Vec<&std::ffi::OsStr> = Vec::new();
    for component in path.components() {
        match component {
            Component::Normal(part) => parts.push(part),
            Component::CurDir => {}
            Component::ParentDir => {
                parts.pop()?;
            }
            Component::RootDir | Component::Prefix(_) => return None,
        }
    }
    Some(parts.iter().collect())
}

/// The relative links of a Markdown text, with their line numbers: inline links and images
/// (`[text](target)`, `![alt](target)`) and reference definitions (`[label]: target`), outside
/// code blocks and code spans. Links to other sites are left out.
fn links(text: &str) -> Vec<(usize, String)> {
    let prose = prose(text);
    let line_of = |offset: usize| prose[..offset].matches('\n').count() + 1;
    let mut found = Vec::new();
    let mut from = 0;
    while let Some(at) = prose[from..].find("](") {
        let start = from + at + 2;
        from = start;
        let rest = &prose[start..];
        let target = if let Some(angled) = rest.strip_prefix('<') {
            angled.split('>').next().unwrap_or("")
        } else {
            rest.split([')', ' ', '\n', '\t']).next().unwrap_or("")
        };
        found.push((line_of(start), target.to_owned()));
    }
    for (index, line) in prose.lines().enumerate() {
        let trimmed = line.trim_start();
        if line.len() - trimmed.len() > 3 || !trimmed.starts_with('[') {
            continue;
        }
        if let Some((label, rest)) = trimmed[1..].split_once("]:")
            && !label.is_empty()
            && let Some(target) = rest.split_whitespace().next()
        {
            found.push((index + 1, target.trim_matches(['<', '>']).to_owned()));
        }
    }
    found.retain(|(_, target)| !target.is_empty() && !is_external(target));
    found.sort();
    found
}

fn is_external(target: &str) -> bool {
    target.contains("://") || target.starts_with("mailto:")
}

/// A fenced code block's opening line: its fence character, its length and its info string.
fn fence_opening(line: &str) -> Option<(char, usize, &str)> {
    let trimmed = line.trim_start();
    let mark = trimmed.chars().next().filter(|c| *c == '`' || *c == '~')?;
    let length = trimmed.chars().take_while(|c| *c == mark).count();
    (length >= 3).then(|| (mark, length, trimmed[length..].trim()))
}

/// The lines of a Markdown text, each with whether it is inside a fenced code block (the fences
/// included), and the info string of each block opened.
fn fenced_lines(text: &str) -> (Vec<(&str, bool)>, Vec<String>) {
    let mut lines = Vec::new();
    let mut infos = Vec::new();
    let mut open: Option<(char, usize)> = None;
    for line in text.lines() {
        match (open, fence_opening(line)) {
            (None, Some((mark, length, info))) => {
                open = Some((mark, length));
                infos.push(info.to_owned());
                lines.push((line, true));
            }
            (Some((mark, length)), Some((closing, closing_length, rest)))
                if closing == mark && closing_length >= length && rest.is_empty() =>
            {
                open = None;
                lines.push((line, true));
            }
            (open, _) => lines.push((line, open.is_some())),
        }
    }
    (lines, infos)
}

/// Whether the text has a block rustdoc runs as Rust: no info string, `rust`, or only rustdoc's
/// own attributes (`no_run`, `ignore`, ...).
fn has_rust_block(text: &str) -> bool {
    const RUSTDOC: [&str; 9] = [
        "rust",
        "no_run",
        "ignore",
        "should_panic",
        "compile_fail",
        "test_harness",
        "edition2018",
        "edition2021",
        "edition2024",
    ];
    fenced_lines(text)
        .1
        .iter()
        .any(|info| info.split([',', ' ']).filter(|t| !t.is_empty()).all(|t| RUSTDOC.contains(&t)))
}

/// The text as its reader sees it for links: code blocks and code spans blanked (a link shown as
/// code is not a link), every line break kept so that line numbers still hold.
fn prose(text: &str) -> String {
    let (lines, _) = fenced_lines(text);
    let outside: String =
        lines.iter().map(|(line, fenced)| if *fenced { "\n".to_owned() } else { format!("{line}\n") }).collect();
    // Code spans: a run of n backticks up to the next run of exactly n, across lines too. A span
    // is blanked byte by byte to ASCII spaces: its ends are backticks, so it holds whole
    // characters, and the text stays UTF-8 with every offset where it was.
    let mut bytes = outside.into_bytes();
    let run_at = |bytes: &[u8], at: usize| bytes[at..].iter().take_while(|b| **b == b'`').count();
    let mut i = 0;
    while i < bytes.len() {
        if bytes[i] != b'`' {
            i += 1;
            continue;
        }
        let run = run_at(&bytes, i);
        let mut j = i + run;
        let mut close = None;
        while j < bytes.len() {
            if bytes[j] == b'`' {
                let other = run_at(&bytes, j);
                if other == run {
                    close = Some(j + run);
                    break;
                }
                j += other;
            } else {
                j += 1;
            }
        }
        match close {
            Some(end) => {
                for byte in &mut bytes[i..end] {
                    if *byte != b'\n' {
                        *byte = b' ';
                    }
                }
                i = end;
            }
            None => i += run,
        }
    }
    String::from_utf8(bytes).expect("blanking whole characters to spaces keeps UTF-8")
}

/// The anchors of a Markdown text's headings, by GitHub's rules: the heading's text (a link's
/// label, not its target), lowercased, spaces to `-`, every other character but letters, digits,
/// `-` and `_` removed; a repeated anchor gets `-1`, `-2`, ...
fn anchors(text: &str) -> Vec<String> {
    let (lines, _) = fenced_lines(text);
    let mut seen: BTreeMap<String, usize> = BTreeMap::new();
    let mut anchors = Vec::new();
    for (line, fenced) in lines {
        let trimmed = line.trim_start();
        if fenced || line.len() - trimmed.len() > 3 {
            continue;
        }
        let level = trimmed.chars().take_while(|c| *c == '#').count();
        let rest = &trimmed[level..];
        if !(1..=6).contains(&level) || !(rest.is_empty() || rest.starts_with([' ', '\t'])) {
            continue;
        }
        let title = rest.trim().trim_end_matches('#').trim_end();
        let slug: String = link_labels(title)
            .to_lowercase()
            .chars()
            .filter_map(|c| match c {
                ' ' => Some('-'),
                c if c.is_alphanumeric() || c == '-' || c == '_' => Some(c),
                _ => None,
            })
            .collect();
        let count = seen.entry(slug.clone()).or_insert(0);
        anchors.push(if *count == 0 { slug } else { format!("{slug}-{count}") });
        *count += 1;
    }
    anchors
}

/// `text` with each inline link `[label](target)` replaced by its label.
fn link_labels(text: &str) -> String {
    let mut out = String::new();
    let mut rest = text;
    while let Some(open) = rest.find('[') {
        let Some(close) = rest[open..].find("](").map(|c| open + c) else { break };
        let Some(end) = rest[close..].find(')').map(|e| close + e) else { break };
        out.push_str(&rest[..open]);
        out.push_str(&rest[open + 1..close]);
        rest = &rest[end + 1..];
    }
    out.push_str(rest);
    out
}
