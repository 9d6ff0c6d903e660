//! A snapshot loaded against the terms history holds open: adopted, or what
//! changed while away reported.

use super::*;
use crate::events::OpenTerm;

#[test]
fn load_adopts_open_terms_and_reports_what_changed_while_away() {
    let mut s = State::new(Sources::tenure(""), 10);
    let kv = |k: &str, v: &str, c: i64| Kv {
        key: k.as_bytes().to_vec(),
        value: v.as_bytes().to_vec(),
        create_revision: c,
        mod_revision: c,
        lease: 1,
    };
    let open = |e: &str, token: i64| OpenTerm {
        election: e.into(),
        token,
        holder: "old".into(),
        lease_id: 1,
        layout: KeyLayout::Single,
        started_revision: token,
        started_at_ms: 42,
    };
    let (ev, _) = s.load(
        20,
        &[kv("election/same", "x", 3), kv("election/changed", "y", 15)],
        &[open("same", 3), open("changed", 4), open("gone", 5)],
        1000,
    );
    let names: Vec<(String, &str)> = ev
        .iter()
        .map(|e| (e.election.clone(), e.kind.name()))
        .collect();
    assert_eq!(
        names,
        [
            ("changed".to_string(), "term_ended"),
            ("changed".to_string(), "term_started"),
            ("gone".to_string(), "term_ended"),
        ]
    );
    assert_eq!(s.leader("same").map(|t| t.started_at_ms), Some(42));
}
