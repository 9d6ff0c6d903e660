//! `key`-layout keys, whose rewrites change hands: written over under another
//! lease, read in a snapshot (adopted or flagged), written past what history
//! saw (not adopted).

use super::*;
use crate::events::{EventKind, OpenTerm};

/// A `key`-layout key written over under another lease while it stands (a
/// foreign put without one strips the leader's) changed hands: the old
/// term ends `taken_over`, a new one starts at that put's revision. A
/// rewrite under the same lease is the same term, its value changed (a
/// hand-written lease's renewal stamp).
#[test]
fn a_key_layout_key_written_over_changed_hands() {
    let sources = || Sources::new(vec![crate::layout::Source::parse("key:/svc/").expect("key")]);
    let mut s = State::new(sources(), 10);
    let (p, _) = s.apply(5, &[put("/svc/leader", "node-1", 5, 5, 0x5)], 0);
    assert_eq!(kinds(&p), ["term_started"]);
    let (p, _) = s.apply(6, &[put("/svc/leader", "node-1", 5, 6, 0x5)], 0);
    assert!(p.is_empty(), "the same holder and lease: {p:?}");
    let (p, _) = s.apply(7, &[put("/svc/leader", "node-1 renewed", 5, 7, 0x5)], 0);
    assert_eq!(kinds(&p), ["leader_value_changed"], "the same lease: {p:?}");
    assert_eq!(s.leader("/svc/leader").map(|t| t.token), Some(5));
    let (p, _) = s.apply(7, &[put("/svc/leader", "node-1", 5, 7, 0x5)], 0);
    assert_eq!(kinds(&p), ["leader_value_changed"], "{p:?}");
    // A foreign put without a lease.
    let (p, _) = s.apply(7, &[put("/svc/leader", "intruder", 5, 7, 0)], 0);
    assert!(
        matches!(&p[0].event.kind, EventKind::TermEnded { token: 5, holder, cause: EndCause::TakenOver, .. } if holder == "node-1"),
        "{p:?}"
    );
    assert_eq!(p[0].cause_lookup, None);
    assert!(
        matches!(&p[1].event.kind, EventKind::TermStarted { token: 7, holder, lease_id: 0, previous_holder: Some(prev), from_snapshot: false, .. } if holder == "intruder" && prev == "node-1"),
        "{p:?}"
    );
    // The same holder under another lease: changed hands too.
    let (p, _) = s.apply(8, &[put("/svc/leader", "intruder", 5, 8, 0x9)], 0);
    assert_eq!(kinds(&p), ["term_ended", "term_started"]);
    assert_eq!(
        s.leader("/svc/leader").map(|t| (t.token, t.lease_id)),
        Some((8, 0x9))
    );
}

/// After a restart, a snapshot shows only a `key`-layout key's latest
/// write: history's open term is adopted where it can be that write's
/// (the same lease, its token between the key's creation and that write);
/// otherwise the snapshot's term starts flagged, with its latest
/// write's revision, never the key's creation.
#[test]
fn a_key_layout_term_read_in_a_snapshot_is_adopted_or_flagged() {
    let sources = || Sources::new(vec![crate::layout::Source::parse("key:/svc/").expect("key")]);
    let open = |token: i64, holder: &str, lease_id: i64| OpenTerm {
        election: "/svc/leader".into(),
        token,
        holder: holder.into(),
        lease_id,
        layout: KeyLayout::Single,
        started_revision: token,
        started_at_ms: 42,
    };
    let snap = [kv_at("/svc/leader", "intruder", 5, 12, 0x9)];
    let mut s = State::new(sources(), 10);
    let (ev, _) = s.load(12, &snap, &[open(8, "intruder", 0x9)], 0);
    assert!(ev.is_empty(), "{ev:?}");
    assert_eq!(s.leader("/svc/leader").map(|t| t.token), Some(8));
    // Adopted, the term goes on: a later change of hands ends token 8.
    let (p, _) = s.apply(13, &[put("/svc/leader", "node-2", 5, 13, 0xa)], 0);
    assert!(
        matches!(
            &p[0].event.kind,
            EventKind::TermEnded {
                token: 8,
                cause: EndCause::TakenOver,
                ..
            }
        ),
        "{p:?}"
    );
    // The value rewritten under the same lease (the holder's own update,
    // `leader_value_changed`: history's row keeps the holder it started
    // with): the same term, adopted.
    let mut s = State::new(sources(), 10);
    let (ev, _) = s.load(12, &snap, &[open(8, "node-1", 0x9)], 0);
    assert!(ev.is_empty(), "{ev:?}");
    assert_eq!(s.leader("/svc/leader").map(|t| t.token), Some(8));
    // Another lease while nobody watched: history's term ends `unknown`;
    // the snapshot's starts flagged, with its latest write's revision (it
    // changed hands at some write up to it), never the key's creation.
    let mut s = State::new(sources(), 10);
    let (ev, _) = s.load(12, &snap, &[open(5, "node-1", 0x5)], 0);
    assert!(
        matches!(
            &ev[0].kind,
            EventKind::TermEnded {
                token: 5,
                cause: EndCause::Unknown,
                ..
            }
        ),
        "{ev:?}"
    );
    assert!(
        matches!(
            &ev[1].kind,
            EventKind::TermStarted {
                token: 12,
                from_snapshot: true,
                ..
            }
        ),
        "{ev:?}"
    );
    // History's term from before the key's creation is not this one.
    let mut s = State::new(sources(), 10);
    let (ev, _) = s.load(12, &snap, &[open(3, "intruder", 0x9)], 0);
    assert_eq!(
        ev.iter().map(|e| e.kind.name()).collect::<Vec<_>>(),
        ["term_ended", "term_started"]
    );
    // A key never rewritten keeps its CreateRevision.
    let mut s = State::new(sources(), 10);
    s.load(12, &[kv_at("/svc/a", "x", 4, 4, 0)], &[], 0);
    assert_eq!(s.leader("/svc/a").map(|t| t.token), Some(4));
}

/// A snapshot read past the revision history saw last (the log between
/// compacted): a `key`-layout key written since under the term's lease may
/// have changed hands and back, so its term is not adopted: a gap of the
/// election up to that write, history's term ends `unknown`, the
/// snapshot's starts. A key not written since is adopted as ever.
#[test]
fn a_key_layout_term_written_past_what_history_saw_is_not_adopted() {
    let sources = || Sources::new(vec![crate::layout::Source::parse("key:/svc/").expect("key")]);
    let open = OpenTerm {
        election: "/svc/leader".into(),
        token: 8,
        holder: "node-1".into(),
        lease_id: 0x9,
        layout: KeyLayout::Single,
        started_revision: 8,
        started_at_ms: 42,
    };
    let snap = [kv_at("/svc/leader", "node-1", 5, 12, 0x9)];
    let mut s = State::new(sources(), 10);
    let seen = |to: i64| super::Seen {
        to,
        kept: Default::default(),
    };
    let (ev, _) = s.load_after(20, &snap, std::slice::from_ref(&open), Some(&seen(10)), 0);
    assert_eq!(
        ev.iter().map(|e| e.kind.name()).collect::<Vec<_>>(),
        ["gap", "term_ended", "term_started"]
    );
    assert_eq!(ev[0].election, "/svc/leader");
    assert!(
        matches!(
            ev[0].kind,
            EventKind::Gap {
                from_revision: 11,
                to_revision: 12
            }
        ),
        "{ev:?}"
    );
    assert!(
        matches!(
            ev[1].kind,
            EventKind::TermEnded {
                token: 8,
                cause: EndCause::Unknown,
                ..
            }
        ),
        "{ev:?}"
    );
    assert_eq!(s.leader("/svc/leader").map(|t| t.token), Some(12));
    // Not written since what history saw: the same term.
    let mut s = State::new(sources(), 10);
    let (ev, _) = s.load_after(20, &snap, std::slice::from_ref(&open), Some(&seen(12)), 0);
    assert!(ev.is_empty(), "{ev:?}");
    assert_eq!(s.leader("/svc/leader").map(|t| t.token), Some(8));
    // Written since, and etcd's log shows every write under its lease.
    let mut s = State::new(sources(), 10);
    let mut kept = seen(10);
    kept.kept.insert(b"/svc/leader".to_vec());
    let (ev, _) = s.load_after(20, &snap, std::slice::from_ref(&open), Some(&kept), 0);
    assert!(ev.is_empty(), "{ev:?}");
    assert_eq!(s.leader("/svc/leader").map(|t| t.token), Some(8));
}
