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
/// `events` names two enums of `election` (`Layout`, `FenceReason`).
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
