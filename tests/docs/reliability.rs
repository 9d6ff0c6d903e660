//! RELIABILITY.md's table: every test it names exists in the file it
//! names, and a row that claims every etcd line names only suites
//! `scripts/test.sh` runs on each.

use std::collections::BTreeSet;
use std::path::Path;

use crate::{prose_lines, root};

/// The rows of the first Markdown table of a document: cells, header first.
fn first_table(text: &str) -> Vec<Vec<String>> {
    prose_lines(text)
        .iter()
        .skip_while(|l| !l.starts_with('|'))
        .take_while(|l| l.starts_with('|'))
        .filter(|l| !l.starts_with("|---") && !l.starts_with("| ---"))
        .map(|l| {
            l.trim()
                .trim_matches('|')
                .split(" | ")
                .map(|c| c.trim().to_owned())
                .collect()
        })
        .collect()
}

/// Code spans of a table cell.
fn code_spans(cell: &str) -> Vec<String> {
    cell.split('`')
        .enumerate()
        .filter(|(i, _)| i % 2 == 1)
        .map(|(_, s)| s.to_owned())
        .collect()
}

/// Whether `fn NAME` is defined in the file, or in any `.rs` file under the
/// directory.
fn defines(path: &Path, name: &str) -> bool {
    let mut files = Vec::new();
    let mut stack = vec![path.to_path_buf()];
    while let Some(p) = stack.pop() {
        if p.is_dir() {
            for e in std::fs::read_dir(&p).expect("read dir").flatten() {
                stack.push(e.path());
            }
        } else if p.extension().is_some_and(|x| x == "rs") {
            files.push(p);
        }
    }
    files.iter().any(|f| {
        let text = std::fs::read_to_string(f).unwrap_or_default();
        text.contains(&format!("fn {name}(")) || text.contains(&format!("fn {name}<"))
    })
}

/// The tests RELIABILITY.md's opening table names: in the cell of its `test`
/// column, each code span ending in `.rs` or `/` is a file or directory, and
/// each identifier after it a test function defined there.
fn reliability_tests(text: &str) -> Vec<(String, Vec<String>)> {
    let table = first_table(text);
    let header = table.first().expect("RELIABILITY.md opens with a table");
    let col = header
        .iter()
        .position(|c| c.to_lowercase().starts_with("test"))
        .expect("RELIABILITY.md's table has a `test` column");
    let mut out: Vec<(String, Vec<String>)> = Vec::new();
    for row in &table[1..] {
        let cell = row.get(col).map(String::as_str).unwrap_or("");
        let mut file: Option<usize> = None;
        for span in code_spans(cell) {
            if span.ends_with(".rs") || span.ends_with('/') {
                out.push((span, Vec::new()));
                file = Some(out.len() - 1);
            } else if span.chars().all(|c| c.is_ascii_alphanumeric() || c == '_') {
                match file {
                    Some(i) => out[i].1.push(span),
                    None => out.push((format!("(no file before `{span}`)"), vec![span])),
                }
            }
        }
    }
    out
}

/// The test binaries `scripts/test.sh` runs again on every other etcd line
/// (its `etcd_suites=(…)`).
fn etcd_suites() -> BTreeSet<String> {
    let script = std::fs::read_to_string(root().join("scripts/test.sh")).expect("scripts/test.sh");
    let start = script
        .find("etcd_suites=(")
        .expect("test.sh names its etcd suites")
        + 13;
    let end = start + script[start..].find(')').expect("the list ends");
    script[start..end]
        .split_whitespace()
        .map(str::to_owned)
        .collect()
}

/// A row of RELIABILITY.md's table that says it runs on 3.7.4 names only
/// test binaries `scripts/test.sh` runs on every etcd line.
#[test]
fn reliability_claims_only_the_etcd_lines_the_tests_run_on() {
    let text = std::fs::read_to_string(root().join("RELIABILITY.md")).expect("RELIABILITY.md");
    let table = first_table(&text);
    let header = &table[0];
    let col = |name: &str| {
        header
            .iter()
            .position(|c| c.to_lowercase().starts_with(name))
            .unwrap_or_else(|| panic!("RELIABILITY.md's table has a `{name}` column"))
    };
    let (test, etcd) = (col("test"), col("etcd"));
    let suites = etcd_suites();
    let mut failures = Vec::new();
    for row in &table[1..] {
        if !row.get(etcd).is_some_and(|c| c.contains("3.7.4")) {
            continue;
        }
        for span in code_spans(row.get(test).map(String::as_str).unwrap_or("")) {
            let Some(binary) = span
                .strip_prefix("tests/")
                .and_then(|p| p.split('/').next())
                .map(|p| p.trim_end_matches(".rs"))
            else {
                continue;
            };
            if !suites.contains(binary) {
                failures.push(format!(
                    "{span}: not run on every etcd line by scripts/test.sh"
                ));
            }
        }
    }
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}

#[test]
fn every_test_reliability_names_exists() {
    let text = std::fs::read_to_string(root().join("RELIABILITY.md")).expect("RELIABILITY.md");
    let named = reliability_tests(&text);
    assert!(
        named.len() >= 20,
        "RELIABILITY.md's table names {} tests",
        named.len()
    );
    let mut failures = Vec::new();
    for (file, fns) in &named {
        let path = root().join(file);
        if !path.exists() {
            failures.push(format!("{file}: no such file"));
            continue;
        }
        if fns.is_empty() {
            failures.push(format!("{file}: names no test function"));
        }
        for f in fns {
            if !defines(&path, f) {
                failures.push(format!("{file}: no `fn {f}`"));
            }
        }
    }
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}
