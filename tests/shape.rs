//! The code's shape that ARCHITECTURE.md promises ("Shape"), checked: no
//! function in the core (`src/watch`, `src/election`, `src/history`, where
//! the logic a reviewer must follow lives) nor in `src/web` or `src/cli` is longer than
//! [`MAX_CORE_FN_LINES`] lines, tests included. A longer one is cut into
//! named steps, not allowed here. [`WEB_NOT_YET_CUT`] lists those not cut
//! yet with their length (none now): the list only shrinks (one that grows,
//! or is cut, fails until the list says so).
// Tests, benches and their harness assert with unwrap/expect, spawn bare tasks
// and read the wall clock: the lints of Cargo.toml and clippy.toml hold src/.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::disallowed_methods)]

use std::path::{Path, PathBuf};

/// The longest a function of the core may be, from its `fn` line to its
/// closing brace.
const MAX_CORE_FN_LINES: usize = 80;

/// The core's folders, and the others the cap holds.
const CORE: &[&str] = &["watch", "election", "history", "web", "cli"];

/// Functions of `src/web` over the cap not cut yet: (file under `src/`,
/// name, lines at most). Only shrinks.
const WEB_NOT_YET_CUT: &[(&str, &str, usize)] = &[];

fn rust_files(dir: &Path, out: &mut Vec<PathBuf>) {
    for entry in std::fs::read_dir(dir).expect("read_dir").flatten() {
        let p = entry.path();
        if p.is_dir() {
            rust_files(&p, out);
        } else if p.extension().is_some_and(|e| e == "rs") {
            out.push(p);
        }
    }
}

/// The text with comments, strings and char literals blanked out (each
/// replaced by spaces, newlines kept), so that only the code's own braces
/// remain and lines keep their numbers.
fn code_only(text: &str) -> String {
    let c: Vec<char> = text.chars().collect();
    let mut out = String::with_capacity(text.len());
    let mut i = 0;
    let blank = |out: &mut String, s: &[char]| {
        for ch in s {
            out.push(if *ch == '\n' { '\n' } else { ' ' });
        }
    };
    while i < c.len() {
        let rest = &c[i..];
        let prev_ident = i > 0 && (c[i - 1].is_alphanumeric() || c[i - 1] == '_');
        let end = if rest.starts_with(&['/', '/']) {
            i + rest.iter().position(|&ch| ch == '\n').unwrap_or(rest.len())
        } else if rest.starts_with(&['/', '*']) {
            i + 2 + find(&rest[2..], &['*', '/']).map_or(rest.len() - 2, |p| p + 2)
        } else if rest[0] == 'r' && !prev_ident && raw_string_hashes(rest).is_some() {
            let hashes = raw_string_hashes(rest).unwrap_or(0);
            let mut close = vec!['"'];
            close.extend(std::iter::repeat_n('#', hashes));
            let open = 2 + hashes;
            i + open + find(&rest[open..], &close).map_or(rest.len() - open, |p| p + close.len())
        } else if rest[0] == '"' {
            let mut j = 1;
            while j < rest.len() && rest[j] != '"' {
                j += if rest[j] == '\\' { 2 } else { 1 };
            }
            i + (j + 1).min(rest.len())
        } else if rest[0] == '\'' && rest.get(1) == Some(&'\\') {
            i + 2
                + rest[2..]
                    .iter()
                    .position(|&ch| ch == '\'')
                    .map_or(0, |p| p + 1)
        } else if rest[0] == '\'' && rest.get(2) == Some(&'\'') {
            i + 3
        } else {
            out.push(rest[0]);
            i += 1;
            continue;
        };
        blank(&mut out, &c[i..end.min(c.len())]);
        i = end.min(c.len());
    }
    out
}

/// `r"…"` or `r#"…"#`: how many `#`.
fn raw_string_hashes(s: &[char]) -> Option<usize> {
    let hashes = s[1..].iter().take_while(|&&ch| ch == '#').count();
    (s.get(1 + hashes) == Some(&'"')).then_some(hashes)
}

fn find(hay: &[char], needle: &[char]) -> Option<usize> {
    hay.windows(needle.len()).position(|w| w == needle)
}

/// Whether a line of code starts a function: `fn name`, after any of
/// `pub`, `pub(…)`, `const`, `async`, `unsafe`.
fn starts_fn(line: &str) -> bool {
    let mut rest = line.trim_start();
    loop {
        let before = rest;
        for word in ["pub ", "const ", "async ", "unsafe "] {
            rest = rest.strip_prefix(word).unwrap_or(rest).trim_start();
        }
        if rest.starts_with("pub(") {
            rest = rest[rest.find(')').map_or(rest.len(), |p| p + 1)..].trim_start();
        }
        if rest == before {
            return rest.starts_with("fn ");
        }
    }
}

/// Every function of `text` with a body: (first line, name, lines long).
fn functions(text: &str) -> Vec<(usize, String, usize)> {
    let code = code_only(text);
    let lines: Vec<&str> = code.lines().collect();
    let mut found = Vec::new();
    for (start, line) in lines.iter().enumerate() {
        if !starts_fn(line) {
            continue;
        }
        let name: String = line[line.find("fn ").unwrap_or(0) + 3..]
            .chars()
            .take_while(|ch| ch.is_alphanumeric() || *ch == '_')
            .collect();
        let mut depth = 0i64;
        let mut opened = false;
        'scan: for (n, l) in lines.iter().enumerate().skip(start) {
            for ch in l.chars() {
                match ch {
                    '{' => {
                        depth += 1;
                        opened = true;
                    }
                    '}' => depth -= 1,
                    ';' if !opened => break 'scan,
                    _ => {}
                }
                if opened && depth == 0 {
                    found.push((start + 1, name.clone(), n - start + 1));
                    break 'scan;
                }
            }
        }
    }
    found
}

#[test]
fn no_function_of_the_core_is_over_80_lines() {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let mut files = Vec::new();
    for dir in CORE {
        rust_files(&src.join(dir), &mut files);
    }
    let mut counted = 0;
    let mut long = Vec::new();
    let mut listed_and_seen = Vec::new();
    for file in &files {
        let text = std::fs::read_to_string(file).expect("read");
        let rel = file
            .strip_prefix(&src)
            .unwrap_or(file)
            .display()
            .to_string();
        for (line, name, len) in functions(&text) {
            counted += 1;
            let listed = WEB_NOT_YET_CUT
                .iter()
                .find(|(f, n, _)| *f == rel && *n == name);
            if let Some((_, _, most)) = listed {
                listed_and_seen.push((rel.clone(), name.clone()));
                if len > *most || len <= MAX_CORE_FN_LINES {
                    long.push(format!(
                        "src/{rel}:{line} {name} ({len} lines): listed in WEB_NOT_YET_CUT at \
                         {most}; shrink the list to what it is now"
                    ));
                }
            } else if len > MAX_CORE_FN_LINES {
                long.push(format!("src/{rel}:{line} {name} ({len} lines)"));
            }
        }
    }
    for (f, n, _) in WEB_NOT_YET_CUT {
        if !listed_and_seen.iter().any(|(rf, rn)| rf == f && rn == n) {
            long.push(format!("src/{f} {n}: listed in WEB_NOT_YET_CUT but gone"));
        }
    }
    assert!(
        counted > 500,
        "only {counted} functions found: the scan is broken"
    );
    assert!(
        long.is_empty(),
        "functions of the core over {MAX_CORE_FN_LINES} lines (cut each into named steps):\n{}",
        long.join("\n")
    );
}

/// The scan sees a long function through braces in strings, raw strings,
/// comments and char literals, and does not take a declaration for one.
#[test]
fn the_length_check_measures_what_it_should() {
    let mut text = String::from(
        "trait T {\n    fn declared(&self);\n}\n\
         pub(crate) async fn long() {\n    let s = \"}}}\";\n    let r = r#\"{\"a\":1}\"#;\n\
         // } a comment\n    /* } */\n    let c = '}';\n    let l: &'static str = \"\";\n",
    );
    for i in 0..80 {
        text.push_str(&format!("    let x{i} = {{ {i} }};\n"));
    }
    text.push_str("}\nfn short() {}\n");
    let found = functions(&text);
    let names: Vec<(&str, usize)> = found.iter().map(|(_, n, l)| (n.as_str(), *l)).collect();
    assert_eq!(names, [("long", 88), ("short", 1)]);
}
