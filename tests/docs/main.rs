//! The documentation stays true to the code: every relative link of the README, `docs/`,
//! ARCHITECTURE.md, RELIABILITY.md, BENCHMARKS.md and grafana/README.md resolves to a file
//! (and, with a `#fragment`, to a heading of it), and every `tenure …` command the docs
//! show in a code block or an inline code span parses with the binary's own argument
//! definitions (`tenure::cli::Cli`): a command or flag that no longer exists fails here.
//! The README stays a landing page (under 150 lines).
//!
//! The files, by check: `links.rs`, `commands.rs`, `causes.rs`, `map.rs`,
//! `reliability.rs`, `history.rs`, `documents.rs` (the README, BENCHMARKS.md).
//! The documents and their prose lines are read here.
// Tests, benches and their harness assert with unwrap/expect, spawn bare tasks
// and read the wall clock: the lints of Cargo.toml and clippy.toml hold src/.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::disallowed_methods)]

mod causes;
mod commands;
mod documents;
mod history;
mod links;
mod map;
mod reliability;

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};

fn root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

fn documents() -> Vec<PathBuf> {
    let r = root();
    let mut out: Vec<PathBuf> = [
        "README.md",
        "ARCHITECTURE.md",
        "RELIABILITY.md",
        "BENCHMARKS.md",
        "grafana/README.md",
    ]
    .iter()
    .map(|p| r.join(p))
    .collect();
    let mut docs: Vec<PathBuf> = std::fs::read_dir(r.join("docs"))
        .expect("docs/ exists")
        .map(|e| e.expect("dir entry").path())
        .filter(|p| p.extension().is_some_and(|x| x == "md"))
        .collect();
    docs.sort();
    out.extend(docs);
    out
}

/// Lines outside fenced code blocks.
fn prose_lines(text: &str) -> Vec<String> {
    let mut fenced = false;
    let mut out = Vec::new();
    for line in text.lines() {
        if line.trim_start().starts_with("```") {
            fenced = !fenced;
            continue;
        }
        if !fenced {
            out.push(line.to_owned());
        }
    }
    out
}

fn rel(p: &Path) -> String {
    p.strip_prefix(root()).unwrap_or(p).display().to_string()
}

/// Every `.rs` file under `src/`, as `src/…` paths.
fn src_files() -> BTreeSet<String> {
    let mut out = BTreeSet::new();
    let mut stack = vec![root().join("src")];
    while let Some(d) = stack.pop() {
        for entry in std::fs::read_dir(&d).expect("read dir").flatten() {
            let p = entry.path();
            if p.is_dir() {
                stack.push(p);
            } else if p.extension().is_some_and(|x| x == "rs") {
                out.insert(rel(&p));
            }
        }
    }
    out
}
