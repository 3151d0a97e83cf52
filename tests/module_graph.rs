//! The import graph of `src/`, read from the source: dependencies point one
//! way (`main -> cli -> commands -> domain -> {host, arch, report, fsutil, input}`,
//! ARCHITECTURE.md), so no domain module imports the command line and no two
//! modules import each other, directly or around a circle.
//!
//! An edge is any path through `crate::`, `super::` or a child module's name
//! (`install::lock`) outside comments; `use super::*` in a file's own test
//! module points at the file itself and is not an edge. `cargo test --test
//! module_graph -- --nocapture` prints every module and what it imports.

use std::collections::{BTreeMap, BTreeSet};
use std::fs;
use std::path::{Path, PathBuf};

/// Modules that may know about flags: the clap definitions, the commands
/// that translate them, and the crate root that dispatches.
const COMMAND_LAYER: &[&str] = &["cli", "commands", "lib"];

/// A module path such as `bundle::fetch` ("lib" for the crate root).
type Module = String;

#[test]
fn domain_modules_never_import_the_command_line() {
    let graph = graph();
    let mut offenders = Vec::new();
    for (module, imports) in &graph {
        let top = module.split("::").next().unwrap_or_default();
        if COMMAND_LAYER.contains(&top) {
            continue;
        }
        for import in imports {
            let target_top = import.split("::").next().unwrap_or_default();
            if target_top == "cli" || target_top == "commands" {
                offenders.push(format!("{module} -> {import}"));
            }
        }
    }
    assert!(
        offenders.is_empty(),
        "domain modules import the command layer: {offenders:?}"
    );
}

#[test]
fn the_import_graph_has_no_cycles() {
    let graph = graph();
    print_graph(&graph);
    if let Some(cycle) = find_cycle(&graph) {
        panic!("import cycle: {}", cycle.join(" -> "));
    }
}

/// The checker itself must see what it claims to see: a cycle in a small
/// graph, and the edges of a file written the way `src/` is.
#[test]
fn the_checker_finds_cycles_and_edges() {
    let mut graph: BTreeMap<Module, BTreeSet<Module>> = BTreeMap::new();
    graph.insert("a".into(), ["b".into()].into());
    graph.insert("b".into(), ["c".into()].into());
    graph.insert("c".into(), ["a".into()].into());
    assert_eq!(find_cycle(&graph).unwrap(), ["a", "b", "c", "a"]);
    graph.insert("c".into(), BTreeSet::new());
    assert_eq!(find_cycle(&graph), None);

    let modules: BTreeSet<Module> = [
        "bundle",
        "bundle::install",
        "bundle::files",
        "report",
        "cli",
    ]
    .into_iter()
    .map(String::from)
    .collect();
    let source = "//! see crate::cli\nuse super::files::{InstalledFile, Unpacked};\n\
                  use crate::report::{self, Exit};\nfn f() { super::helper(); }\n\
                  #[cfg(test)]\nmod tests {\n    use super::*;\n}\n";
    let edges = imports("bundle::install", source, &modules);
    assert_eq!(
        edges,
        ["bundle", "bundle::files", "report"]
            .into_iter()
            .map(String::from)
            .collect()
    );
}

fn src_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("src")
}

/// Every `.rs` file under `src/` (but `main.rs`, the binary) as a module path.
fn modules() -> BTreeMap<Module, PathBuf> {
    let mut found = BTreeMap::new();
    let mut stack = vec![src_dir()];
    while let Some(dir) = stack.pop() {
        for entry in fs::read_dir(&dir).expect("src/ is readable") {
            let path = entry.expect("src/ entry").path();
            if path.is_dir() {
                stack.push(path);
            } else if path.extension().is_some_and(|e| e == "rs") {
                let relative = path.strip_prefix(src_dir()).expect("under src/");
                let mut parts: Vec<String> = relative
                    .with_extension("")
                    .components()
                    .map(|c| c.as_os_str().to_string_lossy().into_owned())
                    .collect();
                if parts.last().is_some_and(|p| p == "mod") {
                    parts.pop();
                }
                if parts == ["main"] {
                    continue;
                }
                found.insert(parts.join("::"), path);
            }
        }
    }
    found
}

fn graph() -> BTreeMap<Module, BTreeSet<Module>> {
    let files = modules();
    let names: BTreeSet<Module> = files.keys().cloned().collect();
    files
        .iter()
        .map(|(module, path)| {
            let text = fs::read_to_string(path).expect("source file is readable");
            (module.clone(), imports(module, &text, &names))
        })
        .collect()
}

/// The modules that `source` (the text of `module`) refers to.
fn imports(module: &str, source: &str, modules: &BTreeSet<Module>) -> BTreeSet<Module> {
    let here: Vec<&str> = if module == "lib" {
        Vec::new()
    } else {
        module.split("::").collect()
    };
    let children: BTreeSet<&str> = modules
        .iter()
        .filter_map(|m| {
            let rest = if here.is_empty() {
                Some(m.as_str())
            } else {
                m.strip_prefix(&format!("{}::", here.join("::")))
            };
            rest.filter(|r| !r.contains("::"))
        })
        .collect();
    let code: Vec<&str> = source
        .lines()
        .filter(|line| !line.trim_start().starts_with("//"))
        .collect();
    let mut found = BTreeSet::new();
    {
        for path in paths_in(&code.join("\n")) {
            let mut words: Vec<&str> = path.split("::").collect();
            let mut base: Vec<&str> = match words[0] {
                "crate" => Vec::new(),
                "super" => here[..here.len().saturating_sub(1)].to_vec(),
                "self" => here.clone(),
                first if children.contains(first) => here.clone(),
                _ => continue,
            };
            if matches!(words[0], "crate" | "super" | "self") {
                words.remove(0);
            }
            // `use super::*` in `mod tests` means the file itself.
            if words.is_empty() || words == ["*"] {
                continue;
            }
            for word in words {
                let mut candidate = base.clone();
                candidate.push(word);
                if modules.contains(&candidate.join("::")) {
                    base = candidate;
                } else {
                    break;
                }
            }
            let target = if base.is_empty() {
                "lib".to_owned()
            } else {
                base.join("::")
            };
            if target != module {
                found.insert(target);
            }
        }
    }
    found
}

/// Each `a::b::c` path in `code`, with `use x::{a, b::c}` groups (also over
/// several lines) expanded to `x`, `x::a` and `x::b::c` (one level of braces
/// is all `src/` uses).
fn paths_in(code: &str) -> Vec<String> {
    let is_word = |c: char| c.is_ascii_alphanumeric() || c == '_';
    let bytes: Vec<char> = code.chars().collect();
    let mut out = Vec::new();
    let mut i = 0;
    while i < bytes.len() {
        if !is_word(bytes[i]) || (i > 0 && (is_word(bytes[i - 1]) || bytes[i - 1] == ':')) {
            i += 1;
            continue;
        }
        let start = i;
        while i < bytes.len() && (is_word(bytes[i]) || bytes[i] == ':') {
            i += 1;
        }
        let path: String = bytes[start..i].iter().collect();
        if !path.contains("::") {
            continue;
        }
        if path.ends_with("::") && i < bytes.len() && bytes[i] == '{' {
            let close = bytes[i..].iter().position(|&c| c == '}').map(|p| p + i);
            let inner: String = bytes[i + 1..close.unwrap_or(bytes.len())].iter().collect();
            out.push(path.trim_end_matches("::").to_owned());
            for item in inner.split(',') {
                let item = item.trim();
                let item = item.split(" as ").next().unwrap_or(item).trim();
                if !item.is_empty() && item != "self" {
                    out.push(format!("{path}{item}"));
                }
            }
            i = close.map_or(bytes.len(), |c| c + 1);
        } else {
            out.push(path.trim_end_matches("::").to_owned());
        }
    }
    out
}

/// A cycle as the list of modules on it (first repeated last), if any.
fn find_cycle(graph: &BTreeMap<Module, BTreeSet<Module>>) -> Option<Vec<Module>> {
    #[derive(Clone, Copy, PartialEq)]
    enum Mark {
        Open,
        Done,
    }
    fn visit(
        node: &Module,
        graph: &BTreeMap<Module, BTreeSet<Module>>,
        marks: &mut BTreeMap<Module, Mark>,
        path: &mut Vec<Module>,
    ) -> Option<Vec<Module>> {
        match marks.get(node) {
            Some(Mark::Done) => return None,
            Some(Mark::Open) => {
                let start = path
                    .iter()
                    .position(|m| m == node)
                    .expect("open is on path");
                let mut cycle = path[start..].to_vec();
                cycle.push(node.clone());
                return Some(cycle);
            }
            None => {}
        }
        marks.insert(node.clone(), Mark::Open);
        path.push(node.clone());
        for next in graph.get(node).into_iter().flatten() {
            if let Some(cycle) = visit(next, graph, marks, path) {
                return Some(cycle);
            }
        }
        path.pop();
        marks.insert(node.clone(), Mark::Done);
        None
    }
    let mut marks = BTreeMap::new();
    for node in graph.keys() {
        if let Some(cycle) = visit(node, graph, &mut marks, &mut Vec::new()) {
            return Some(cycle);
        }
    }
    None
}

fn print_graph(graph: &BTreeMap<Module, BTreeSet<Module>>) {
    for (module, imports) in graph {
        let list: Vec<&str> = imports.iter().map(String::as_str).collect();
        println!("{module:<28} -> {}", list.join(", "));
    }
}
