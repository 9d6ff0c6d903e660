//! The documentation stays true to the code: every relative link of the README, `docs/`,
//! ARCHITECTURE.md, RELIABILITY.md, BENCHMARKS.md and grafana/README.md resolves to a file
//! (and, with a `#fragment`, to a heading of it), and every `tenure …` command the docs
//! show in a code block or an inline code span parses with the binary's own argument
//! definitions (`tenure::cli::Cli`): a command or flag that no longer exists fails here.
//! The README stays a landing page (under 150 lines).
// Tests, benches and their harness assert with unwrap/expect, spawn bare tasks
// and read the wall clock: the lints of Cargo.toml and clippy.toml hold src/.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::disallowed_methods)]

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};

use clap::Parser;

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

/// `[text](target)` links, outside code spans and blocks.
fn links(text: &str) -> Vec<String> {
    let mut out = Vec::new();
    for line in prose_lines(text) {
        let mut rest = strip_code_spans(&line);
        while let Some(i) = rest.find("](") {
            let after = &rest[i + 2..];
            match after.find(')') {
                Some(j) => {
                    out.push(after[..j].to_owned());
                    rest = after[j + 1..].to_owned();
                }
                None => break,
            }
        }
    }
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

fn strip_code_spans(line: &str) -> String {
    let mut out = String::new();
    let mut in_code = false;
    for c in line.chars() {
        if c == '`' {
            in_code = !in_code;
        } else if !in_code {
            out.push(c);
        }
    }
    out
}

/// GitHub's anchor of a heading: lower case, punctuation dropped, spaces as '-'.
fn anchor(heading: &str) -> String {
    heading
        .trim()
        .replace('`', "")
        .to_lowercase()
        .chars()
        .filter(|c| c.is_alphanumeric() || *c == ' ' || *c == '-' || *c == '_')
        .map(|c| if c == ' ' { '-' } else { c })
        .collect()
}

fn anchors(text: &str) -> BTreeSet<String> {
    prose_lines(text)
        .iter()
        .filter(|l| l.starts_with('#'))
        .map(|l| anchor(l.trim_start_matches('#')))
        .collect()
}

#[test]
fn every_relative_link_resolves() {
    let mut broken = Vec::new();
    for doc in documents() {
        let text = std::fs::read_to_string(&doc).expect("read doc");
        let dir = doc.parent().expect("parent");
        for link in links(&text) {
            if link.starts_with("http://") || link.starts_with("https://") {
                continue;
            }
            let (path, fragment) = match link.split_once('#') {
                Some((p, f)) => (p, Some(f)),
                None => (link.as_str(), None),
            };
            let target = if path.is_empty() {
                doc.clone()
            } else {
                dir.join(path)
            };
            if !target.exists() {
                broken.push(format!("{}: {link} (no such file)", rel(&doc)));
                continue;
            }
            if let Some(f) = fragment {
                let t = std::fs::read_to_string(&target).unwrap_or_default();
                if !anchors(&t).contains(f) {
                    broken.push(format!("{}: {link} (no such heading)", rel(&doc)));
                }
            }
        }
    }
    assert!(broken.is_empty(), "broken links:\n{}", broken.join("\n"));
}

fn rel(p: &Path) -> String {
    p.strip_prefix(root()).unwrap_or(p).display().to_string()
}

/// Every `tenure …` invocation in a document, and whether it is a command line to run (a
/// line of a fenced block, after an optional `$ `, `sudo `, or `VAR=value` assignments;
/// continuation lines joined, `# comments` dropped) or a mention in prose (an inline code
/// span, often a synopsis such as `tenure campaign --queue`).
fn commands(text: &str) -> Vec<(String, bool)> {
    let mut out = Vec::new();
    let mut fenced = false;
    let mut pending = String::new();
    for line in text.lines() {
        if line.trim_start().starts_with("```") {
            fenced = !fenced;
            continue;
        }
        if fenced {
            let l = line.trim();
            if let Some(stripped) = l.strip_suffix('\\') {
                pending.push_str(stripped);
                pending.push(' ');
                continue;
            }
            pending.push_str(l);
            let full = std::mem::take(&mut pending);
            if let Some(c) = invocation(&full) {
                out.push((c, true));
            }
        } else {
            let mut in_code = false;
            let mut span = String::new();
            for c in line.chars() {
                if c == '`' {
                    if in_code {
                        if let Some(c) = invocation(&span) {
                            out.push((c, false));
                        }
                        span.clear();
                    }
                    in_code = !in_code;
                } else if in_code {
                    span.push(c);
                }
            }
        }
    }
    out
}

fn invocation(line: &str) -> Option<String> {
    let line = line.split(" # ").next().unwrap_or(line).trim();
    let mut words = line.split_whitespace().peekable();
    while let Some(w) = words.peek() {
        if *w == "$" || *w == "sudo" || (w.contains('=') && !w.starts_with('-')) {
            words.next();
        } else {
            break;
        }
    }
    let rest: Vec<&str> = words.collect();
    if rest.first() != Some(&"tenure") || rest.len() < 2 {
        return None;
    }
    Some(rest.join(" "))
}

/// Splits like a shell would for the simple commands docs show: quotes group words.
fn shell_words(s: &str) -> Vec<String> {
    let mut out = Vec::new();
    let mut cur = String::new();
    let mut quote: Option<char> = None;
    let mut any = false;
    for c in s.chars() {
        match (quote, c) {
            (Some(q), c) if c == q => quote = None,
            (Some(_), c) => cur.push(c),
            (None, '\'' | '"') => {
                quote = Some(c);
                any = true
            }
            (None, c) if c.is_whitespace() => {
                if !cur.is_empty() || any {
                    out.push(std::mem::take(&mut cur));
                    any = false;
                }
            }
            (None, c) => cur.push(c),
        }
    }
    if !cur.is_empty() || any {
        out.push(cur);
    }
    out
}

/// The subcommand a command line names: the first word after `tenure` that is one
/// (global flags and their values may come first). `None`: not a tenure command line
/// (prose such as `tenure = { path = … }`, or the guard's internal `__guard`).
fn subcommand(cmd: &str) -> Option<String> {
    use clap::CommandFactory;
    let cli = tenure::cli::Cli::command();
    let words: Vec<&str> = cmd.split_whitespace().collect();
    let mut i = 1;
    while i < words.len() {
        let w = words[i];
        if let Some(flag) = w.strip_prefix("--") {
            let takes_value = cli
                .get_arguments()
                .find(|a| a.get_long() == Some(flag))
                .is_some_and(|a| a.get_action().takes_values());
            i += if takes_value { 2 } else { 1 };
            continue;
        }
        return cli.find_subcommand(w).map(|_| w.to_owned());
    }
    None
}

/// A usage line (`tenure campaign NAME [--id ID] … -- CMD ARGS…`) is a synopsis, not a
/// command: its placeholders are made concrete, its optional parts dropped.
fn concrete(cmd: &str) -> Option<String> {
    subcommand(cmd)?;
    if cmd.contains('…') || cmd.contains('[') || cmd.contains('|') || cmd.contains('<') {
        return None;
    }
    // Placeholders in upper case (OLD_TOKEN, PORT) stand for numbers in the tour.
    let words: Vec<String> = cmd
        .split(' ')
        .map(|w| {
            if w.len() > 1 && w.chars().all(|c| c.is_ascii_uppercase() || c == '_') {
                "1".to_owned()
            } else {
                w.to_owned()
            }
        })
        .collect();
    Some(words.join(" "))
}

#[test]
fn every_documented_tenure_command_parses() {
    let mut seen = 0;
    let mut failures = Vec::new();
    for doc in documents() {
        let text = std::fs::read_to_string(&doc).expect("read doc");
        for (cmd, runnable) in commands(&text) {
            if !runnable {
                continue;
            }
            let Some(c) = concrete(&cmd) else { continue };
            seen += 1;
            let argv = shell_words(&c);
            if let Err(e) = tenure::cli::Cli::try_parse_from(&argv) {
                use clap::error::ErrorKind;
                if matches!(e.kind(), ErrorKind::DisplayHelp | ErrorKind::DisplayVersion) {
                    continue;
                }
                failures.push(format!("{}: `{c}`: {}", rel(&doc), e.kind()));
            }
        }
    }
    assert!(
        seen >= 5,
        "only {seen} commands found: is the extraction broken?"
    );
    assert!(
        failures.is_empty(),
        "commands in the docs that tenure does not accept:\n{}",
        failures.join("\n")
    );
}

/// The synopses (`tenure campaign NAME [--id ID] …`) name only flags the subcommand has.
#[test]
fn every_flag_in_a_synopsis_exists() {
    use clap::CommandFactory;
    let cli = tenure::cli::Cli::command();
    let mut failures = Vec::new();
    for doc in documents() {
        let text = std::fs::read_to_string(&doc).expect("read doc");
        for (cmd, _) in commands(&text) {
            let words: Vec<&str> = cmd.split_whitespace().collect();
            let Some(sub) = subcommand(&cmd) else {
                if words.get(1).is_some_and(|w| w.starts_with("--")) {
                    failures.push(format!("{}: `{cmd}`: no subcommand", rel(&doc)));
                }
                continue;
            };
            let Some(sc) = cli.find_subcommand(&sub) else {
                continue;
            };
            for w in &words[1..] {
                if *w == "--" {
                    break;
                }
                let flag = w
                    .trim_start_matches(['[', '('])
                    .trim_end_matches([']', ')', ',']);
                let Some(long) = flag.strip_prefix("--") else {
                    continue;
                };
                let long = long.split('=').next().unwrap_or(long);
                if long.is_empty() || !long.chars().all(|c| c.is_ascii_alphanumeric() || c == '-') {
                    continue;
                }
                let known = sc.get_arguments().any(|a| a.get_long() == Some(long))
                    || cli.get_arguments().any(|a| a.get_long() == Some(long))
                    || long == "help"
                    || long == "version";
                if !known {
                    failures.push(format!("{}: `{cmd}`: no flag --{long}", rel(&doc)));
                }
            }
        }
    }
    assert!(
        failures.is_empty(),
        "flags in the docs that do not exist:\n{}",
        failures.join("\n")
    );
}

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

#[test]
fn the_extractors_find_what_they_should() {
    let md = "a [x](docs/a.md) `tenure leader x` and\n```sh\n$ sudo tenure --prefix p/ \\\n  serve --listen 1:2\nFOO=1 tenure fence a b --token 3 # refused\n```\n";
    assert_eq!(links(md), vec!["docs/a.md"]);
    assert_eq!(
        commands(md),
        vec![
            ("tenure leader x".to_owned(), false),
            ("tenure --prefix p/ serve --listen 1:2".to_owned(), true),
            ("tenure fence a b --token 3".to_owned(), true)
        ]
    );
    assert_eq!(
        shell_words("tenure campaign a -- sh -c 'echo \"$X\"; sleep 1'"),
        vec![
            "tenure",
            "campaign",
            "a",
            "--",
            "sh",
            "-c",
            "echo \"$X\"; sleep 1"
        ]
    );
    assert_eq!(
        anchor("The holder's safety promise (`tenure campaign`)"),
        "the-holders-safety-promise-tenure-campaign"
    );
}

/// Whitespace collapsed: YAML folds and Markdown wraps lines.
fn folded(text: &str) -> String {
    text.split_whitespace().collect::<Vec<_>>().join(" ")
}

/// Every text that tells what an end cause means uses the words of
/// `EndCause::description` (issue 20.12): `deleted` is what tenure knows (the
/// key was deleted while its lease lived), not "deposed by an operator" —
/// etcd's own `Election.Resign` ends a term the same way.
#[test]
fn end_causes_are_described_in_the_code_s_words() {
    use tenure::events::EndCause;
    let cause_lists: [(&str, &[EndCause]); 5] = [
        ("docs/pages.md", &EndCause::ALL),
        ("grafana/README.md", &EndCause::ALL),
        ("grafana/tenure-dashboard.json", &EndCause::ALL),
        (
            "grafana/alerts.yaml",
            &[EndCause::Expired, EndCause::Deleted, EndCause::Resigned],
        ),
        (
            "grafana/alerts.test.yaml",
            &[EndCause::Expired, EndCause::Deleted, EndCause::Resigned],
        ),
    ];
    let mut failures = Vec::new();
    for (file, causes) in cause_lists {
        let text = folded(&std::fs::read_to_string(root().join(file)).expect(file));
        for c in causes {
            if !text.contains(c.description()) {
                failures.push(format!(
                    "{file}: `{c}` is not described as {:?}",
                    c.description()
                ));
            }
        }
    }
    let mut files = Vec::new();
    // Where an end cause is described to a user (src/election's marker
    // `Deleted` is written by `tenure depose` alone: "an operator deposed"
    // is true there).
    for dir in [
        "docs",
        "grafana",
        "templates",
        "src/web",
        "src/telemetry",
        "src/cli",
    ] {
        let mut stack = vec![root().join(dir)];
        while let Some(d) = stack.pop() {
            for entry in std::fs::read_dir(&d).expect("read dir").flatten() {
                let p = entry.path();
                if p.is_dir() {
                    stack.push(p);
                } else {
                    files.push(p);
                }
            }
        }
    }
    files.push(root().join("README.md"));
    files.push(root().join("src/events.rs"));
    for p in files {
        let Ok(text) = std::fs::read_to_string(&p) else {
            continue;
        };
        let text = folded(&text).to_lowercase();
        for stale in ["deposed by an operator", "an operator deposed"] {
            if text.contains(stale) {
                failures.push(format!("{}: says {stale:?}", rel(&p)));
            }
        }
    }
    assert!(failures.is_empty(), "{}", failures.join("\n"));
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

/// What a text says of history rather than of what is: a project issue's
/// number ("issue 23", "issues 20 and 21", "#23") or a phrase comparing with
/// an earlier state. Another project's issue ("etcd issue 15220") is a fact
/// about that project and passes.
fn tells_history(text: &str) -> Option<String> {
    let lower = text.to_lowercase();
    // "as before" ends a clause; "as before any write" is a preposition.
    for phrase in ["as before", "as it always was"] {
        for (i, _) in lower.match_indices(phrase) {
            let end = lower[i + phrase.len()..].chars().next();
            if !end.is_some_and(|c| c.is_alphanumeric() || c == ' ') {
                return Some(phrase.to_owned());
            }
        }
    }
    let bytes = lower.as_bytes();
    for (i, _) in lower.match_indices("issue") {
        let mut j = i + "issue".len();
        if bytes.get(j) == Some(&b's') {
            j += 1;
        }
        if bytes.get(j) != Some(&b' ') || !bytes.get(j + 1).is_some_and(u8::is_ascii_digit) {
            continue;
        }
        let before = lower[..i].trim_end();
        let foreign = [
            "etcd",
            "etcd's",
            "kubernetes",
            "kubernetes'",
            "go",
            "upstream",
        ]
        .iter()
        .any(|p| before.ends_with(p));
        if !foreign {
            return Some(lower[i..(j + 4).min(lower.len())].to_owned());
        }
    }
    for (i, _) in lower.match_indices('#') {
        if bytes.get(i + 1).is_some_and(u8::is_ascii_digit) {
            return Some(lower[i..(i + 4).min(lower.len())].to_owned());
        }
    }
    None
}

#[test]
fn no_heading_names_an_issue_or_tells_history() {
    let mut failures = Vec::new();
    for doc in documents() {
        let text = std::fs::read_to_string(&doc).expect("read doc");
        for line in prose_lines(&text) {
            if !line.starts_with('#') {
                continue;
            }
            if let Some(what) = tells_history(line.trim_start_matches('#')) {
                failures.push(format!("{}: {line:?} ({what})", rel(&doc)));
            }
        }
    }
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}

/// A line's comment: the text after `//` when the line is one, or after a
/// trailing ` // `.
fn comment_of(line: &str) -> Option<&str> {
    let t = line.trim_start();
    if let Some(c) = t.strip_prefix("//") {
        return Some(c);
    }
    line.find(" // ").map(|i| &line[i + 4..])
}

#[test]
fn no_comment_in_src_names_an_issue_or_tells_history() {
    let mut failures = Vec::new();
    for file in src_files() {
        let text = std::fs::read_to_string(root().join(&file)).expect("read source");
        for (n, line) in text.lines().enumerate() {
            if let Some(what) = comment_of(line).and_then(tells_history) {
                failures.push(format!("{file}:{}: {what:?}: {}", n + 1, line.trim()));
            }
        }
    }
    assert!(
        failures.is_empty(),
        "{} comments tell history instead of the contract:\n{}",
        failures.len(),
        failures.join("\n")
    );
}

#[test]
fn the_history_check_catches_what_it_should() {
    for bad in [
        "the writer (issue 15) claims",
        "see #23",
        "issues 20 and 21",
        "names are kept as before.",
        "the inbox, as it always was",
        "Issue 22: acting",
    ] {
        assert!(tells_history(bad).is_some(), "missed {bad:?}");
    }
    for good in [
        "etcd issue 15220 orders them",
        "checked as before any write",
        "the issue's optional part",
        "#[derive(Debug)]",
        "an issue with 3 members",
    ] {
        assert_eq!(tells_history(good), None, "{good:?}");
    }
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
