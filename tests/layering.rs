//! The floors written in ARCHITECTURE.md, checked against the code: every
//! `crate::<module>` path in `src/` must point to a lower floor (or to the
//! file's own module). The floors are read from ARCHITECTURE.md itself, so
//! changing the architecture means changing that sentence, and this test
//! holds the code to it.
// Tests, benches and their harness assert with unwrap/expect, spawn bare tasks
// and read the wall clock: the lints of Cargo.toml and clippy.toml hold src/.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::disallowed_methods)]

use std::collections::HashMap;
use std::path::{Path, PathBuf};

/// Imports across one floor that ARCHITECTURE.md names as exceptions:
/// `events` names two enums of `election` (`KeyLayout`, `FenceReason`).
const SIBLING_EXCEPTIONS: &[(&str, &str)] = &[("events", "election")];

fn floors() -> Vec<Vec<String>> {
    let doc =
        std::fs::read_to_string(Path::new(env!("CARGO_MANIFEST_DIR")).join("ARCHITECTURE.md"))
            .expect("ARCHITECTURE.md");
    let start = doc
        .find("Floors, top to bottom: `")
        .expect("ARCHITECTURE.md states the floors as `Floors, top to bottom: `…``");
    let rest = &doc[start + "Floors, top to bottom: `".len()..];
    let line: String = rest[..rest.find('`').expect("closing backtick")]
        .split_whitespace()
        .collect::<Vec<_>>()
        .join(" ");
    line.split('→')
        .map(|floor| {
            floor
                .trim()
                .trim_matches(|c| c == '{' || c == '}')
                .split(',')
                .map(|m| m.trim().to_owned())
                .filter(|m| !m.is_empty())
                .collect()
        })
        .collect()
}

fn rust_files(dir: &Path, out: &mut Vec<PathBuf>) {
    for e in std::fs::read_dir(dir).expect("read src") {
        let p = e.expect("entry").path();
        if p.is_dir() {
            rust_files(&p, out);
        } else if p.extension().is_some_and(|x| x == "rs") {
            out.push(p);
        }
    }
}

/// The top-level module a file of `src/` belongs to.
fn module_of(src: &Path, file: &Path) -> String {
    let rel = file.strip_prefix(src).expect("under src");
    let first = rel
        .components()
        .next()
        .expect("a component")
        .as_os_str()
        .to_string_lossy()
        .into_owned();
    first.trim_end_matches(".rs").to_owned()
}

/// `crate::x` paths used in `text`, comments and strings included (a doc
/// link upward is a dependency of the reader's mind, too).
fn crate_paths(text: &str) -> Vec<String> {
    let mut out = Vec::new();
    let mut rest = text;
    while let Some(i) = rest.find("crate::") {
        rest = &rest[i + "crate::".len()..];
        let name: String = rest
            .chars()
            .take_while(|c| c.is_ascii_alphanumeric() || *c == '_')
            .collect();
        if !name.is_empty() {
            out.push(name);
        }
    }
    out
}

#[test]
fn no_import_runs_up_the_floors_of_architecture_md() {
    let floors = floors();
    assert!(floors.len() >= 4, "floors read: {floors:?}");
    let level: HashMap<&str, usize> = floors
        .iter()
        .enumerate()
        .flat_map(|(i, f)| f.iter().map(move |m| (m.as_str(), i)))
        .collect();
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let mut files = Vec::new();
    rust_files(&src, &mut files);
    let mut violations = Vec::new();
    let mut checked = 0;
    for file in &files {
        let module = module_of(&src, file);
        if module == "lib" {
            continue;
        }
        let Some(&from) = level.get(module.as_str()) else {
            violations.push(format!(
                "{}: module {module:?} is on no floor of ARCHITECTURE.md",
                file.display()
            ));
            continue;
        };
        let text = std::fs::read_to_string(file).expect("read");
        for to in crate_paths(&text) {
            checked += 1;
            if to == module {
                continue;
            }
            let Some(&target) = level.get(to.as_str()) else {
                violations.push(format!("{}: crate::{to} is on no floor", file.display()));
                continue;
            };
            let sibling_ok = SIBLING_EXCEPTIONS.contains(&(module.as_str(), to.as_str()));
            if target < from || (target == from && !sibling_ok) {
                violations.push(format!(
                    "{}: {module} (floor {from}) uses crate::{to} (floor {target})",
                    file.display()
                ));
            }
        }
    }
    assert!(
        checked > 20,
        "only {checked} paths checked: the scan is broken"
    );
    assert!(
        violations.is_empty(),
        "imports up or across floors:\n{}",
        violations.join("\n")
    );
}

#[test]
fn the_check_catches_an_upward_import() {
    // The scanner itself, on a made-up file: `election` using `web`.
    assert_eq!(
        crate_paths("use crate::web::api;\nlet x = crate::election::Ttl;"),
        ["web", "election"]
    );
    let floors = floors();
    let level = |m: &str| floors.iter().position(|f| f.iter().any(|x| x == m));
    assert!(level("election") > level("web"), "election sits below web");
}

/// The layout seam (ARCHITECTURE.md, "Layouts"): a layout file reads the
/// key schema (`election`) and names events (`events`), and knows nothing
/// of the watcher that drives it or the sinks that record what it says.
/// A new layout is a file in `src/layout/` and a line in its registry.
const LAYOUT_MAY_USE: &[&str] = &["layout", "election", "events", "task"];

#[test]
fn a_layout_file_imports_nothing_of_the_watcher_or_the_sinks() {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("src/layout");
    let mut files = Vec::new();
    rust_files(&dir, &mut files);
    assert!(
        files.iter().any(|f| f.ends_with("tenure.rs")),
        "tenure's layout is in src/layout/: {files:?}"
    );
    let mut violations = Vec::new();
    for file in &files {
        let text = std::fs::read_to_string(file).expect("read");
        for to in crate_paths(&text) {
            if !LAYOUT_MAY_USE.contains(&to.as_str()) {
                violations.push(format!("{}: crate::{to}", file.display()));
            }
        }
        // `super::super::…` would climb out of `layout` without `crate::`.
        if text.contains("super::super") {
            violations.push(format!("{}: super::super", file.display()));
        }
    }
    assert!(
        violations.is_empty(),
        "a layout uses the watcher or a sink:\n{}",
        violations.join("\n")
    );
    // The check itself: a layout naming the watcher would be caught.
    assert!(crate_paths("use crate::watch::state::Kv;")
        .iter()
        .any(|m| !LAYOUT_MAY_USE.contains(&m.as_str())));
}

/// The module a file of `src/` is: `src/a/b.rs` → `a::b`, `src/a/mod.rs`
/// and `src/a.rs` → `a`.
fn module_path(src: &Path, file: &Path) -> String {
    let rel = file
        .strip_prefix(src)
        .expect("under src")
        .with_extension("");
    let mut parts: Vec<String> = rel
        .components()
        .map(|c| c.as_os_str().to_string_lossy().into_owned())
        .collect();
    if parts.last().is_some_and(|p| p == "mod") {
        parts.pop();
    }
    parts.join("::")
}

/// The paths named after `crate::`, `super::` (any number) or `self::` in
/// code (comments left out: a doc link is not an import), relative to
/// `module`, braces expanded: `super::{a, b::c}` in `x::y` → `x::a`,
/// `x::b::c`.
fn named_paths(module: &str, text: &str) -> Vec<String> {
    let code: String = text
        .lines()
        .filter(|l| !l.trim_start().starts_with("//"))
        .collect::<Vec<_>>()
        .join("\n");
    let own: Vec<&str> = module.split("::").filter(|s| !s.is_empty()).collect();
    let mut out = Vec::new();
    let b = code.as_bytes();
    let mut i = 0;
    while i < b.len() {
        let starts_word = i == 0 || !(b[i - 1].is_ascii_alphanumeric() || b[i - 1] == b'_');
        let base: Option<(Vec<&str>, usize)> = if !starts_word {
            None
        } else if b[i..].starts_with(b"crate::") {
            Some((Vec::new(), i + "crate::".len()))
        } else if b[i..].starts_with(b"self::") {
            Some((own.clone(), i + "self::".len()))
        } else if b[i..].starts_with(b"super::") {
            let (mut at, mut up) = (i, 0);
            while b[at..].starts_with(b"super::") {
                at += "super::".len();
                up += 1;
            }
            Some((own[..own.len().saturating_sub(up)].to_vec(), at))
        } else {
            None
        };
        match base {
            Some((prefix, at)) => {
                let prefix: Vec<String> = prefix.iter().map(|s| s.to_string()).collect();
                let (paths, end) = path_tree(&code, at);
                for p in paths {
                    let mut full = prefix.clone();
                    full.extend(p);
                    out.push(full.join("::"));
                }
                i = end.max(i + 1);
            }
            None => i += 1,
        }
    }
    out
}

/// The path (or paths, for `{…}`) starting at `at`: its segments, and
/// where it ends.
fn path_tree(code: &str, mut at: usize) -> (Vec<Vec<String>>, usize) {
    let b = code.as_bytes();
    let mut segs = Vec::new();
    loop {
        while at < b.len() && b[at].is_ascii_whitespace() {
            at += 1;
        }
        if at < b.len() && b[at] == b'{' {
            let mut all = Vec::new();
            at += 1;
            loop {
                let (paths, end) = path_tree(code, at);
                for p in paths {
                    let mut full = segs.clone();
                    full.extend(p);
                    all.push(full);
                }
                at = end;
                while at < b.len() && b[at] != b',' && b[at] != b'}' {
                    at += 1;
                }
                if at >= b.len() || b[at] == b'}' {
                    return (all, at + 1);
                }
                at += 1;
            }
        }
        let start = at;
        while at < b.len() && (b[at].is_ascii_alphanumeric() || b[at] == b'_') {
            at += 1;
        }
        if at > start {
            segs.push(code[start..at].to_owned());
        }
        if at > start && b[at..].starts_with(b"::") {
            at += 2;
            continue;
        }
        return (vec![segs], at);
    }
}

/// Import edges between modules of one floor (one top-level module), from
/// each file's named paths resolved to the longest known module. An edge to
/// the module's own ancestor does not count: a parent (`mod.rs`) holds what
/// its children share, and declares them.
fn import_graph(files: &[(String, String)]) -> HashMap<String, Vec<String>> {
    let modules: std::collections::HashSet<&str> = files.iter().map(|(m, _)| m.as_str()).collect();
    let mut graph: HashMap<String, Vec<String>> = HashMap::new();
    for (module, text) in files {
        let floor = module.split("::").next().unwrap_or_default();
        for path in named_paths(module, text) {
            let segs: Vec<&str> = path.split("::").collect();
            let Some(target) = (1..=segs.len())
                .rev()
                .map(|n| segs[..n].join("::"))
                .find(|m| modules.contains(m.as_str()))
            else {
                continue;
            };
            let same_floor = target.split("::").next() == Some(floor);
            let ancestor = module.starts_with(&format!("{target}::"));
            if same_floor && &target != module && !ancestor {
                let to = graph.entry(module.clone()).or_default();
                if !to.contains(&target) {
                    to.push(target);
                }
            }
        }
    }
    graph
}

/// One cycle of `graph`, as the modules along it, if there is one.
fn a_cycle(graph: &HashMap<String, Vec<String>>) -> Option<Vec<String>> {
    fn visit(
        m: &str,
        graph: &HashMap<String, Vec<String>>,
        state: &mut HashMap<String, u8>,
        stack: &mut Vec<String>,
    ) -> Option<Vec<String>> {
        state.insert(m.to_owned(), 1);
        stack.push(m.to_owned());
        for next in graph.get(m).into_iter().flatten() {
            match state.get(next.as_str()) {
                Some(1) => {
                    let from = stack.iter().position(|s| s == next).unwrap_or(0);
                    let mut cycle = stack[from..].to_vec();
                    cycle.push(next.clone());
                    return Some(cycle);
                }
                Some(_) => {}
                None => {
                    if let Some(c) = visit(next, graph, state, stack) {
                        return Some(c);
                    }
                }
            }
        }
        stack.pop();
        state.insert(m.to_owned(), 2);
        None
    }
    let mut state = HashMap::new();
    let mut roots: Vec<&String> = graph.keys().collect();
    roots.sort();
    for m in roots {
        if !state.contains_key(m.as_str()) {
            if let Some(c) = visit(m, graph, &mut state, &mut Vec::new()) {
                return Some(c);
            }
        }
    }
    None
}

/// Within a floor, the modules import one another without a circle (issue
/// 24): a piece two files both need lives in a file of its own that
/// imports neither, so each can be read, and changed, from the bottom up.
#[test]
fn no_import_circle_between_the_modules_of_a_floor() {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let mut paths = Vec::new();
    rust_files(&src, &mut paths);
    let files: Vec<(String, String)> = paths
        .iter()
        .map(|p| {
            let text = std::fs::read_to_string(p).expect("read");
            (module_path(&src, p), text)
        })
        .collect();
    let graph = import_graph(&files);
    let edges: usize = graph.values().map(Vec::len).sum();
    assert!(
        edges > 50,
        "only {edges} import edges found: the scan is broken"
    );
    if let Some(cycle) = a_cycle(&graph) {
        panic!("an import circle: {}", cycle.join(" → "));
    }
}

#[test]
fn the_circle_check_catches_a_circle() {
    let file = |m: &str, t: &str| (m.to_owned(), t.to_owned());
    let files = [
        file("history", "mod writer; mod cluster; use writer::Msg;"),
        file(
            "history::writer",
            "use super::{HistoryError, cluster::insert};",
        ),
        file(
            "history::cluster",
            "use super::writer::Msg;\n// crate::history::query",
        ),
        file("history::query", "use crate::history::{self, writer};"),
    ];
    assert_eq!(
        named_paths("history::writer", &files[1].1),
        ["history::HistoryError", "history::cluster::insert"]
    );
    let graph = import_graph(&files);
    let cycle = a_cycle(&graph).expect("writer ↔ cluster is a circle");
    assert!(cycle.contains(&"history::cluster".to_owned()), "{cycle:?}");
    // Without writer → cluster: query → writer and cluster → writer only.
    let files = [
        files[0].clone(),
        file("history::writer", "use super::HistoryError;"),
        files[2].clone(),
        files[3].clone(),
    ];
    assert_eq!(a_cycle(&import_graph(&files)), None);
}

/// `anyhow` only at the binary's edge: the library's floors below `cli`
/// return typed errors (a `thiserror` enum the command line gives context).
#[test]
fn anyhow_is_the_command_lines_only() {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let mut files = Vec::new();
    rust_files(&src, &mut files);
    let offending: Vec<String> = files
        .iter()
        .filter(|f| !matches!(module_of(&src, f).as_str(), "cli" | "main" | "lib"))
        .filter(|f| {
            let text = std::fs::read_to_string(f).expect("read");
            text.contains("anyhow::") || text.contains("anyhow!")
        })
        .map(|f| f.display().to_string())
        .collect();
    assert!(
        offending.is_empty(),
        "anyhow below the command line (use a typed error): {offending:?}"
    );
}
