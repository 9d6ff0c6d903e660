//! Every relative link of the documents resolves to a file, and with a
//! `#fragment` to a heading of it.

use std::collections::BTreeSet;

use crate::{documents, prose_lines, rel};

/// `[text](target)` links, outside code spans and blocks.
pub(crate) fn links(text: &str) -> Vec<String> {
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
pub(crate) fn anchor(heading: &str) -> String {
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
