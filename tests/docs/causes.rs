//! End causes are described in the words of `EndCause::description`
//! everywhere.

use crate::{rel, root};

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
