//! The core's modules form a layered graph: no module imports one that imports it back,
//! directly or through others.
//!
//! A module is a top-level file or folder under `src/`; an import is any `crate::<module>` path
//! in its code (a `use crate::{a, b::c}` group counts each of its members). Test code does not
//! count: files that only hold tests (`tests.rs`, `*_tests.rs`) are skipped, every other file is
//! read up to its first `#[cfg(test)]` item, and comment lines (doc links included) are ignored.
//! A cycle is reported with its members, and the imports that close it.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

/// Each module with the modules its code imports (itself excluded).
type Graph = BTreeMap<String, BTreeSet<String>>;

#[test]
fn no_module_imports_one_that_imports_it_back() {
    let graph = module_graph(&Path::new(env!("CARGO_MANIFEST_DIR")).join("src"));
    assert!(graph.len() > 10, "found only {} modules: is the source tree where the test looks?", graph.len());
    let cycles: Vec<Vec<String>> = strongly_connected(&graph).into_iter().filter(|members| members.len() > 1).collect();
    let report: Vec<String> = cycles
        .iter()
        .map(|members| {
            let edges: Vec<String> = members
                .iter()
                .flat_map(|from| {
                    graph[from].iter().filter(|to| members.contains(to)).map(move |to| format!("{from} -> {to}"))
                })
                .collect();
            format!("a cycle of {}: {}", members.join(", "), edges.join(", "))
        })
        .collect();
    assert!(cycles.is_empty(), "modules of the core import each other:\n{}", report.join("\n"));
}

/// Reads every module's source under `src` and collects its imports of other modules.
fn module_graph(src: &Path) -> Graph {
    let mut files = Vec::new();
    collect_files(src, &mut files);
    let modules: BTreeSet<String> = files.iter().filter_map(|file| module_of(src, file)).collect();
    let mut graph: Graph = modules.iter().map(|module| (module.clone(), BTreeSet::new())).collect();
    for file in &files {
        let Some(module) = module_of(src, file) else { continue };
        let name = file.file_name().and_then(|name| name.to_str()).unwrap_or_default();
        if name == "tests.rs" || name.ends_with("_tests.rs") {
            continue;
        }
        let text = std::fs::read_to_string(file).unwrap_or_else(|error| panic!("reading {}: {error}", file.display()));
        for imported in crate_paths(&code_of(&text)) {
            if imported != module && modules.contains(&imported) {
                graph.get_mut(&module).expect("every module has an entry").insert(imported);
            }
        }
    }
    graph
}

fn collect_files(dir: &Path, files: &mut Vec<PathBuf>) {
    let entries = std::fs::read_dir(dir).unwrap_or_else(|error| panic!("reading {}: {error}", dir.display()));
    for entry in entries {
        let path = entry.expect("a directory entry").path();
        if path.is_dir() {
            collect_files(&path, files);
        } else if path.extension().is_some_and(|extension| extension == "rs") {
            files.push(path);
        }
    }
}

/// The module a file belongs to: its top-level file or folder under `src`; `None` for the crate
/// root, which declares the modules rather than using them.
fn module_of(src: &Path, file: &Path) -> Option<String> {
    let relative = file.strip_prefix(src).ok()?;
    let first = relative.components().next()?.as_os_str().to_str()?;
    if first == "lib.rs" {
        return None;
    }
    Some(first.strip_suffix(".rs").unwrap_or(first).to_owned())
}

/// The file's code outside tests and comments: up to its first `#[cfg(test)]` item, without
/// lines that are comments.
fn code_of(text: &str) -> String {
    text.lines()
        .take_while(|line| !line.trim_start().starts_with("#[cfg(test)]"))
        .filter(|line| !line.trim_start().starts_with("//"))
        .collect::<Vec<_>>()
        .join("\n")
}

/// The first segment of every `crate::` path in `code`; for a `crate::{...}` group, the first
/// segment of each of its members.
fn crate_paths(code: &str) -> Vec<String> {
    let mut found = Vec::new();
    let mut rest = code;
    while let Some(at) = rest.find("crate::") {
        let before = rest[..at].chars().next_back();
        let after = &rest[at + "crate::".len()..];
        rest = after;
        // `$crate::` (a macro's) and `some_crate::` are other paths.
        if before.is_some_and(|c| c.is_alphanumeric() || c == '_' || c == '$') {
            continue;
        }
        let after = after.trim_start();
        if let Some(group) = after.strip_prefix('{') {
            found.extend(group_members(group).iter().map(|member| identifier(member)));
        } else {
            found.push(identifier(after));
        }
    }
    found.retain(|name| !name.is_empty());
    found
}

/// The members of a `{...}` group, from just after its opening brace: split at its own commas,
/// nested groups kept whole.
fn group_members(group: &str) -> Vec<&str> {
    let mut members = Vec::new();
    let (mut depth, mut start) = (0usize, 0usize);
    for (index, c) in group.char_indices() {
        match c {
            '{' => depth += 1,
            '}' if depth == 0 => {
                members.push(&group[start..index]);
                return members;
            }
            '}' => depth -= 1,
            ',' if depth == 0 => {
                members.push(&group[start..index]);
                start = index + 1;
            }
            _ => {}
        }
    }
    members
}

/// The identifier `text` starts with, after any whitespace.
fn identifier(text: &str) -> String {
    text.trim_start().chars().take_while(|c| c.is_alphanumeric() || *c == '_').collect()
}

/// Tarjan's strongly connected components, each sorted by name.
fn strongly_connected(graph: &Graph) -> Vec<Vec<String>> {
    struct Search<'a> {
        graph: &'a Graph,
        next_index: usize,
        index: BTreeMap<&'a str, usize>,
        low: BTreeMap<&'a str, usize>,
        stack: Vec<&'a str>,
        on_stack: BTreeSet<&'a str>,
        components: Vec<Vec<String>>,
    }

    impl<'a> Search<'a> {
        fn visit(&mut self, module: &'a str) {
            self.index.insert(module, self.next_index);
            self.low.insert(module, self.next_index);
            self.next_index += 1;
            self.stack.push(module);
            self.on_stack.insert(module);
            let graph = self.graph;
            for next in &graph[module] {
                let next = next.as_str();
                if !self.index.contains_key(next) {
                    self.visit(next);
                    let low = self.low[module].min(self.low[next]);
                    self.low.insert(module, low);
                } else if self.on_stack.contains(next) {
                    let low = self.low[module].min(self.index[next]);
                    self.low.insert(module, low);
                }
            }
            if self.low[module] == self.index[module] {
                let mut component = Vec::new();
                while let Some(member) = self.stack.pop() {
                    self.on_stack.remove(member);
                    component.push(member.to_owned());
                    if member == module {
                        break;
                    }
                }
                component.sort();
                self.components.push(component);
            }
        }
    }

    let mut search = Search {
        graph,
        next_index: 0,
        index: BTreeMap::new(),
        low: BTreeMap::new(),
        stack: Vec::new(),
        on_stack: BTreeSet::new(),
        components: Vec::new(),
    };
    for module in graph.keys() {
        if !search.index.contains_key(module.as_str()) {
            search.visit(module);
        }
    }
    search.components
}
