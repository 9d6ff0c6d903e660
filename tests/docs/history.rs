//! Headings and comments in `src/` say what is, not its history: no project
//! issue's number, no "as before".

use crate::{documents, prose_lines, rel, root, src_files};

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
