//! The code's layout, as a newcomer reads it: no crate depends on a crate above it
//! (`CRATE_ORDER`); every source file of `handler/*/src` and `tools/*/src` fits on a
//! screen or two (at most 600 lines, its tests counted), and each crate reads top-down: no two
//! files, and no two top-level modules, depend on each other in a circle. A file depends on
//! the module a `crate::` or `super::` path in it names (its `mod` declarations do not count:
//! a parent holding a child's tests is not a dependency).
//!
//! `cargo test -p cfn-once-tests --test it layout -- --nocapture` prints each crate's largest
//! files and its module graph.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

/// The most lines a source file may have.
const LINES_MAX: usize = 600;

/// One crate's source files by module path (`worker::run`), with their text.
fn modules(src: &Path) -> BTreeMap<String, (PathBuf, String)> {
    let mut found = BTreeMap::new();
    let mut stack = vec![src.to_path_buf()];
    while let Some(dir) = stack.pop() {
        for entry in std::fs::read_dir(&dir).expect("a source folder") {
            let path = entry.expect("an entry").path();
            if path.is_dir() {
                stack.push(path);
                continue;
            }
            if path.extension().and_then(|e| e.to_str()) != Some("rs") {
                continue;
            }
            let relative = path.strip_prefix(src).expect("below src").with_extension("");
            let mut parts: Vec<String> = relative.iter().map(|p| p.to_string_lossy().into_owned()).collect();
            if matches!(parts.last().map(String::as_str), Some("mod" | "lib" | "main")) {
                parts.pop();
            }
            let text = std::fs::read_to_string(&path).expect("a source file");
            found.insert(parts.join("::"), (path, text));
        }
    }
    found
}

/// The module a path's segments after `crate::` name: the longest one that exists.
fn resolve(segments: &[&str], known: &BTreeMap<String, (PathBuf, String)>) -> Option<String> {
    (1..=segments.len()).rev().map(|n| segments[..n].join("::")).find(|candidate| known.contains_key(candidate))
}

/// The paths a `use` or an expression names from `rest` (which starts at `crate::` or
/// `super::`): one, or each of a brace group's (`crate::{a::X, b}`), as segments.
fn paths_at(rest: &str) -> Vec<Vec<String>> {
    let is_path = |c: char| c.is_alphanumeric() || c == '_' || c == ':';
    let head: String = rest.chars().take_while(|c| is_path(*c)).collect();
    let prefix: Vec<String> = head.split("::").filter(|s| !s.is_empty()).map(str::to_owned).collect();
    let after = &rest[head.len()..];
    if !after.starts_with('{') {
        return vec![prefix];
    }
    let mut depth = 0;
    let mut group = String::new();
    for c in after.chars() {
        match c {
            '{' => depth += 1,
            '}' => depth -= 1,
            _ => {}
        }
        group.push(c);
        if depth == 0 {
            break;
        }
    }
    let inner = &group[1..group.len().saturating_sub(1)];
    let mut items = Vec::new();
    let mut current = String::new();
    let mut nested = 0;
    for c in inner.chars() {
        match c {
            '{' => nested += 1,
            '}' => nested -= 1,
            ',' if nested == 0 => items.push(std::mem::take(&mut current)),
            _ => {}
        }
        if !(c == ',' && nested == 0) {
            current.push(c);
        }
    }
    items.push(current);
    items
        .iter()
        .map(|item| {
            let item = item.trim();
            let first: String = item.chars().take_while(|c| is_path(*c)).collect();
            prefix.iter().cloned().chain(first.split("::").filter(|s| !s.is_empty()).map(str::to_owned)).collect()
        })
        .collect()
}

/// What each module's `crate::`/`super::` paths name, itself and its ancestors left out.
fn edges(known: &BTreeMap<String, (PathBuf, String)>) -> BTreeMap<String, BTreeSet<String>> {
    let mut graph: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
    for (module, (_, whole)) in known {
        // A file's own tests (`#[cfg(test)] mod tests` at its end) use what tests need, which
        // is not what the code depends on.
        let code = whole.find("#[cfg(test)]\nmod ").map_or(whole.as_str(), |end| &whole[..end]);
        // Comments (doc links included) name modules without depending on them.
        let text: String =
            code.lines().filter(|line| !line.trim_start().starts_with("//")).map(|line| format!("{line}\n")).collect();
        let own: Vec<String> = if module.is_empty() { vec![] } else { module.split("::").map(str::to_owned).collect() };
        let targets = graph.entry(module.clone()).or_default();
        for (index, _) in text.match_indices("crate::").chain(text.match_indices("super::")) {
            if text[..index].ends_with(|c: char| c.is_alphanumeric() || c == '_' || c == ':') {
                continue;
            }
            for mut segments in paths_at(&text[index..]) {
                // `crate` is the root; each `super` the parent of the module before it.
                let mut base = own.clone();
                if segments.first().map(String::as_str) == Some("crate") {
                    segments.remove(0);
                    base.clear();
                }
                while segments.first().map(String::as_str) == Some("super") {
                    segments.remove(0);
                    base.pop();
                }
                let full: Vec<&str> = base.iter().chain(segments.iter()).map(String::as_str).collect();
                if let Some(target) = resolve(&full, known)
                    && !target.is_empty()
                    && target != *module
                    && !module.starts_with(&format!("{target}::"))
                {
                    targets.insert(target);
                }
            }
        }
    }
    graph
}

/// The circles of `graph`: its strongly connected components of more than one node.
fn circles(graph: &BTreeMap<String, BTreeSet<String>>) -> Vec<Vec<String>> {
    // Kosaraju, small graphs.
    let nodes: Vec<&String> = graph.keys().collect();
    let mut order = Vec::new();
    let mut seen = BTreeSet::new();
    fn visit<'a>(
        node: &'a String,
        graph: &'a BTreeMap<String, BTreeSet<String>>,
        seen: &mut BTreeSet<&'a String>,
        order: &mut Vec<&'a String>,
    ) {
        if !seen.insert(node) {
            return;
        }
        for next in graph.get(node).into_iter().flatten() {
            if let Some((key, _)) = graph.get_key_value(next) {
                visit(key, graph, seen, order);
            }
        }
        order.push(node);
    }
    for node in &nodes {
        visit(node, graph, &mut seen, &mut order);
    }
    let mut reverse: BTreeMap<&String, Vec<&String>> = BTreeMap::new();
    for (from, tos) in graph {
        for to in tos {
            if let Some((key, _)) = graph.get_key_value(to) {
                reverse.entry(key).or_default().push(from);
            }
        }
    }
    let mut assigned = BTreeSet::new();
    let mut found = Vec::new();
    for node in order.into_iter().rev() {
        if assigned.contains(node) {
            continue;
        }
        let mut component = vec![];
        let mut todo = vec![node];
        while let Some(current) = todo.pop() {
            if !assigned.insert(current) {
                continue;
            }
            component.push(current.clone());
            todo.extend(reverse.get(current).into_iter().flatten().copied());
        }
        if component.len() > 1 {
            component.sort();
            found.push(component);
        }
    }
    found
}

/// The graph between top-level modules (`worker`, `adapters`), from the graph between modules.
fn top_level(graph: &BTreeMap<String, BTreeSet<String>>) -> BTreeMap<String, BTreeSet<String>> {
    let top = |module: &str| module.split("::").next().unwrap_or_default().to_owned();
    let mut folded: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
    for (from, tos) in graph {
        let from_top = top(from);
        let entry = folded.entry(from_top.clone()).or_default();
        for to in tos {
            let to_top = top(to);
            if to_top != from_top {
                entry.insert(to_top);
            }
        }
    }
    folded
}

/// Every crate's `src` folder: the function's crates in `handler/`, the tools' in `tools/`.
fn crates() -> Vec<PathBuf> {
    let root = cfn_once_tests::workspace_root();
    let mut found: Vec<PathBuf> = ["handler", "tools"]
        .iter()
        .flat_map(|folder| std::fs::read_dir(root.join(folder)).unwrap_or_else(|e| panic!("{folder}/: {e}")))
        .map(|e| e.expect("an entry").path().join("src"))
        .filter(|src| src.is_dir())
        .collect();
    found.sort();
    found
}

/// The crates from the bottom up: each may depend only on crates before it. The protocol, the
/// function, the operator's tool, the simulator, the local environment, then what runs on it
/// (the player, the soak), and the command line that holds them together.
const CRATE_ORDER: [&str; 8] = [
    "cfn-once-core",
    "cfn-once",
    "cfn-once-ops",
    "cfn-once-sim",
    "cfn-once-local",
    "cfn-once-play",
    "cfn-once-soak",
    "cfn-once-dev",
];

#[test]
fn no_crate_depends_on_a_crate_above_it() {
    let mut wrong = Vec::new();
    let mut seen = Vec::new();
    for src in crates() {
        let dir = src.parent().expect("a crate folder");
        let manifest = std::fs::read_to_string(dir.join("Cargo.toml")).expect("Cargo.toml");
        let name = manifest
            .lines()
            .find_map(|line| line.strip_prefix("name = \""))
            .and_then(|rest| rest.strip_suffix('"'))
            .expect("a package name")
            .to_owned();
        let Some(place) = CRATE_ORDER.iter().position(|c| *c == name) else {
            wrong.push(format!("{name} ({}) is not in CRATE_ORDER", dir.display()));
            continue;
        };
        let dependencies = manifest.split("[dependencies]").nth(1).unwrap_or_default();
        let dependencies = dependencies.split("\n[").next().unwrap_or_default();
        let on: Vec<&str> = CRATE_ORDER
            .iter()
            .copied()
            .filter(|c| {
                dependencies
                    .lines()
                    .any(|line| line.starts_with(&format!("{c} ")) || line.starts_with(&format!("{c}.")))
            })
            .collect();
        let lines: usize = modules(&src).values().map(|(_, text)| text.lines().count()).sum();
        println!("{name}: {lines} lines; depends on {on:?}");
        for dependency in &on {
            let below = CRATE_ORDER.iter().position(|c| c == dependency).expect("in the order");
            if below >= place {
                wrong.push(format!("{name} depends on {dependency}, which CRATE_ORDER puts above it"));
            }
        }
        seen.push(name);
    }
    assert!(wrong.is_empty(), "{wrong:#?}");
    assert_eq!(seen.len(), CRATE_ORDER.len(), "crates found {seen:?}");
}

#[test]
fn every_source_file_fits_on_a_screen_or_two() {
    let mut over = Vec::new();
    for src in crates() {
        let known = modules(&src);
        let mut sizes: Vec<(usize, &PathBuf)> = known.values().map(|(p, t)| (t.lines().count(), p)).collect();
        sizes.sort_by_key(|(lines, _)| std::cmp::Reverse(*lines));
        println!("{}: largest files", src.display());
        for (lines, path) in sizes.iter().take(5) {
            println!("  {lines:>5}  {}", path.display());
        }
        over.extend(sizes.iter().filter(|(lines, _)| *lines > LINES_MAX).map(|(l, p)| format!("{l} {}", p.display())));
    }
    assert!(over.is_empty(), "files over {LINES_MAX} lines: {over:#?}");
}

#[test]
fn each_crate_reads_top_down_without_circles() {
    let mut found = Vec::new();
    for src in crates() {
        let known = modules(&src);
        let graph = edges(&known);
        let folded = top_level(&graph);
        println!("{}: top-level modules and what they use", src.display());
        for (module, uses) in &folded {
            let name = if module.is_empty() { "(crate root)" } else { module };
            println!("  {name} -> {}", uses.iter().cloned().collect::<Vec<_>>().join(", "));
        }
        for circle in circles(&graph) {
            found.push(format!("{}: files {}", src.display(), circle.join(" <-> ")));
        }
        for circle in circles(&folded) {
            found.push(format!("{}: modules {}", src.display(), circle.join(" <-> ")));
        }
    }
    assert!(found.is_empty(), "circles: {found:#?}");
}

#[test]
fn the_layout_checks_see_a_circle_and_a_long_file() {
    let dir = std::env::temp_dir().join(cfn_once_tests::unique("layout"));
    std::fs::create_dir_all(dir.join("local")).expect("a folder");
    std::fs::write(dir.join("lib.rs"), "pub mod local;\n").expect("lib");
    std::fs::write(dir.join("local/mod.rs"), "pub mod a;\npub mod b;\n").expect("mod");
    std::fs::write(dir.join("local/a.rs"), "use crate::local::b::B;\npub struct A;\n").expect("a");
    std::fs::write(dir.join("local/b.rs"), "use super::{a::A, b2};\npub struct B;\n").expect("b");
    let known = modules(&dir);
    let graph = edges(&known);
    assert_eq!(circles(&graph), vec![vec!["local::a".to_owned(), "local::b".to_owned()]]);
    std::fs::write(dir.join("local/b.rs"), "pub struct B;\n").expect("b");
    assert!(circles(&edges(&modules(&dir))).is_empty(), "no circle once b no longer uses a");
}
