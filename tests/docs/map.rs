//! ARCHITECTURE.md's map names every source file, and no other.

use std::collections::BTreeSet;

use crate::{root, src_files};

/// The `.rs` files a map names. The map is the first code block under
/// `## Map`: an entry starts at the line's first column with a path (a file,
/// or a directory ending in `/`), its description runs on over the indented
/// lines below it, and every `NAME.rs` the description names is a file
/// relative to the entry's directory (or, starting `src/`, `tests/` or
/// `benches/`, to the repository).
fn map_names(architecture: &str) -> BTreeSet<String> {
    let start = architecture
        .find("\n## Map")
        .expect("ARCHITECTURE.md has a `## Map` section");
    let block = architecture[start..]
        .split("```")
        .nth(1)
        .expect("the Map section holds a code block");
    let mut out = BTreeSet::new();
    let mut base = String::new();
    for line in block.lines() {
        let mut words = line.split_whitespace();
        let rest: String = if line.starts_with(|c: char| !c.is_whitespace()) {
            let entry = words.next().unwrap_or("");
            base = match entry.rsplit_once('/') {
                Some((dir, _)) => format!("{dir}/"),
                None => String::new(),
            };
            if entry.ends_with(".rs") {
                out.insert(entry.to_owned());
            }
            words.collect::<Vec<_>>().join(" ")
        } else {
            line.to_owned()
        };
        let is_path = |c: char| c.is_ascii_alphanumeric() || "_./-".contains(c);
        for token in rest.split(|c: char| !is_path(c)) {
            let token = token.trim_start_matches(['.', '/']);
            if !token.ends_with(".rs") || token.len() <= 3 {
                continue;
            }
            if ["src/", "tests/", "benches/"]
                .iter()
                .any(|p| token.starts_with(p))
            {
                out.insert(token.to_owned());
            } else {
                out.insert(format!("{base}{token}"));
            }
        }
    }
    out
}

#[test]
fn the_map_names_every_source_file_and_no_other() {
    let text = std::fs::read_to_string(root().join("ARCHITECTURE.md")).expect("ARCHITECTURE.md");
    let named = map_names(&text);
    let files = src_files();
    let missing: Vec<&String> = files.difference(&named).collect();
    let ghosts: Vec<&String> = named
        .iter()
        .filter(|n| n.starts_with("src/") && !files.contains(*n))
        .collect();
    assert!(
        missing.is_empty() && ghosts.is_empty(),
        "ARCHITECTURE.md's map misses {missing:?} and names files that do not exist: {ghosts:?}"
    );
}

#[test]
fn the_map_reader_resolves_entries_and_descriptions() {
    let doc = "x\n## Map\n\n```\nsrc/a.rs     one (b/c.rs)\nsrc/d/       mod.rs (x), e.rs\n             f.rs; `src/g.rs`\ntests/h/     i.rs\n```\n";
    let got: Vec<String> = map_names(doc).into_iter().collect();
    assert_eq!(
        got,
        [
            "src/a.rs",
            "src/b/c.rs",
            "src/d/e.rs",
            "src/d/f.rs",
            "src/d/mod.rs",
            "src/g.rs",
            "tests/h/i.rs"
        ]
    );
}
