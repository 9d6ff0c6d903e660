//! What two documents open with: the README stays a landing page, and
//! BENCHMARKS.md opens with the block the bench generates.

use crate::root;

#[test]
fn the_readme_is_a_landing_page() {
    let text = std::fs::read_to_string(root().join("README.md")).expect("README");
    let n = text.lines().count();
    assert!(
        n < 150,
        "README.md has {n} lines: move reference into docs/"
    );
    assert!(text.contains("scripts/demo.sh") && text.contains("scripts/test.sh"));
}

/// BENCHMARKS.md opens with the block `cargo bench --bench bench -- --markdown`
/// prints: the bench's markers, the command, a recent commit of this
/// repository (among the last 60) and the results table's header as
/// `benches/stats.rs` writes it.
#[test]
fn benchmarks_open_with_the_generated_block() {
    let text = std::fs::read_to_string(root().join("BENCHMARKS.md")).expect("BENCHMARKS.md");
    let markdown =
        std::fs::read_to_string(root().join("benches/markdown.rs")).expect("markdown.rs");
    let marker = |name: &str| -> String {
        let at = markdown
            .find(&format!("pub const {name}: &str ="))
            .unwrap_or_else(|| panic!("benches/markdown.rs declares {name}"));
        markdown[at..]
            .split('"')
            .nth(1)
            .expect("a string")
            .to_owned()
    };
    let (begin, end) = (marker("BEGIN"), marker("END"));
    let b = text
        .find(&begin)
        .expect("BENCHMARKS.md holds the bench's block");
    let e = text.find(&end).expect("the block's end marker");
    let before = &text[..b];
    assert!(
        !before.contains("\n|") && before.lines().filter(|l| l.starts_with("## ")).count() == 0,
        "BENCHMARKS.md opens with the generated block (no table or section before it)"
    );
    let block = &text[b..e];
    assert!(
        block.contains("Regenerate: `cargo bench --bench bench -- --markdown"),
        "the block names the command that regenerates it"
    );
    let stats = std::fs::read_to_string(root().join("benches/stats.rs")).expect("stats.rs");
    let header = stats
        .lines()
        .find(|l| l.trim_start().starts_with("\"| # | measurement"))
        .expect("stats.rs writes the table's header")
        .trim()
        .trim_start_matches('"')
        .split("\\n")
        .next()
        .expect("header")
        .to_owned();
    assert!(block.contains(&header), "the block holds the bench's table");
    let commit = block
        .split("on commit `")
        .nth(1)
        .and_then(|s| s.split('`').next())
        .expect("the block names its commit");
    let known = std::process::Command::new("git")
        .args(["cat-file", "-e", &format!("{commit}^{{commit}}")])
        .current_dir(root())
        .status()
        .map(|s| s.success());
    // A tree exported without git cannot say; a checkout must know the commit.
    if root().join(".git").exists() {
        assert_eq!(
            known.ok(),
            Some(true),
            "commit {commit} is not in this repository"
        );
        // And recent: figures of a tree long gone say nothing of this one.
        let recent = std::process::Command::new("git")
            .args(["rev-list", "--max-count=60", "HEAD"])
            .current_dir(root())
            .output()
            .expect("git rev-list");
        let recent = String::from_utf8_lossy(&recent.stdout);
        assert!(
            recent.lines().any(|c| c.starts_with(commit)),
            "BENCHMARKS.md's figures are of commit {commit}, not among the last 60: \
             regenerate them (`cargo bench --bench bench -- --markdown --runs 5`)"
        );
    }
}
