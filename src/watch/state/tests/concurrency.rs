//! Keys without a lease under a `concurrency` prefix: no candidate, and the
//! lowest blocks every candidate until it goes.

use super::*;
use crate::events::{EventKind, OpenTerm};

/// etcd's `concurrency` puts every candidate under a lease: a key put
/// without one under its prefix (a config key) is no candidate, in a
/// revision or a snapshot, nor is its deletion; the election beside it is
/// unaffected.
#[test]
fn a_key_without_a_lease_under_a_concurrency_prefix_is_no_candidate() {
    let sources = || {
        Sources::new(vec![
            crate::layout::Source::parse("concurrency:/app/").expect("source")
        ])
    };
    let mut s = State::new(sources(), 10);
    // After the candidate (one before it blocks it: the test below).
    let (p, _) = s.apply(5, &[put("/app/jobs/694d", "alice", 5, 5, 0x694d)], 0);
    assert!(
        matches!(&p[..], [p] if matches!(&p.event.kind, EventKind::TermStarted { holder, token: 5, .. } if holder == "alice"))
    );
    let (p, st) = s.apply(6, &[put("/app/jobs/db", "postgres://x", 6, 6, 0)], 0);
    assert!(p.is_empty(), "{p:?}");
    assert_eq!(st, [WatchStatus::IgnoredKey]);
    let gone = |key: &str, rev| {
        vec![Change::Delete {
            key: key.as_bytes().to_vec(),
            revision: rev,
            lease: None,
        }]
    };
    let mut config_gone = gone("/app/jobs/db", 7);
    s.known_leases(&mut config_gone);
    let (p, st) = s.apply(7, &config_gone, 0);
    assert!(p.is_empty(), "{p:?}");
    assert_eq!(st, [WatchStatus::IgnoredKey]);
    assert_eq!(
        s.leader("/app/jobs").map(|t| t.holder.as_str()),
        Some("alice")
    );
    let mut alice_gone = gone("/app/jobs/694d", 8);
    s.known_leases(&mut alice_gone);
    let (p, _) = s.apply(8, &alice_gone, 0);
    assert_eq!(kinds(&p), ["term_ended"]);
    // In a snapshot: the config key alone names no election.
    let mut s = State::new(sources(), 10);
    let (ev, st) = s.load(9, &[kv_at("/app/cfg/url", "postgres://x", 3, 3, 0)], &[], 0);
    assert!(ev.is_empty() && s.is_empty(), "{ev:?}");
    assert_eq!(st, [WatchStatus::IgnoredKey]);
}

/// etcd's `Campaign` waits for every key of its election's prefix created
/// before its own, leased or not: a lease-less key lowest blocks the
/// election (nobody leads, its value never read), the lowest candidate
/// leads from the revision that deletes it; one after the leader changes
/// nothing, and one alone makes no election.
#[test]
fn a_lease_less_key_lowest_blocks_every_candidate_until_it_goes() {
    let source = Source::parse("concurrency:/app/").expect("a source");
    let mut s = State::new(Sources::new(vec![source]), 10);
    let (p, st) = s.apply(3, &[put("/app/job/cfg", "postgres://secret", 3, 3, 0)], 1);
    assert!(p.is_empty() && s.is_empty(), "alone, no election");
    assert_eq!(st, [WatchStatus::IgnoredKey]);
    let (p, _) = s.apply(4, &[put("/app/job/a1", "A", 4, 4, 0xa1)], 2);
    assert_eq!(kinds(&p), ["candidate_queued"]);
    let (p, _) = s.apply(5, &[put("/app/job/b2", "B", 5, 5, 0xb2)], 3);
    assert_eq!(kinds(&p), ["candidate_queued"]);
    assert!(s.leader("/app/job").is_none(), "blocked");
    assert_eq!(s.waiting_changes(), [("/app/job".to_owned(), 2)]);
    // Rewritten in place: still there, still blocking.
    let (p, _) = s.apply(6, &[put("/app/job/cfg", "postgres://x", 3, 6, 0)], 4);
    assert!(p.is_empty() && s.leader("/app/job").is_none());
    let mut gone = [Change::Delete {
        key: b"/app/job/cfg".to_vec(),
        revision: 7,
        lease: None,
    }];
    s.known_leases(&mut gone);
    let (p, st) = s.apply(7, &gone, 5);
    assert_eq!(kinds(&p), ["term_started"]);
    assert_eq!(st, [WatchStatus::IgnoredKey]);
    let t = s.leader("/app/job").expect("a leader");
    assert_eq!(
        (t.token, t.holder.as_str(), t.started_revision),
        (4, "A", 7)
    );
    // After the leader: nothing changes.
    let (p, _) = s.apply(8, &[put("/app/job/zz", "postgres://y", 8, 8, 0)], 6);
    assert!(p.is_empty());
    assert_eq!(s.leader("/app/job").map(|t| t.token), Some(4));

    // Read in a snapshot: the term history holds open (named before the
    // key was known to block) ends `unknown`, nobody starts.
    let kvs = [
        kv_at("/app/job/cfg", "postgres://secret", 3, 3, 0),
        kv_at("/app/job/a1", "A", 4, 4, 0xa1),
    ];
    let open = [OpenTerm {
        election: "/app/job".into(),
        token: 4,
        holder: "A".into(),
        lease_id: 0xa1,
        layout: KeyLayout::Queue,
        started_revision: 4,
        started_at_ms: 2,
    }];
    let (events, _) = s.load(9, &kvs, &open, 7);
    assert!(
        matches!(
            &events[..],
            [Event {
                kind: EventKind::TermEnded {
                    token: 4,
                    cause: EndCause::Unknown,
                    ..
                },
                ..
            }]
        ),
        "{events:?}"
    );
    assert!(s.leader("/app/job").is_none());
    let (p, _) = s.apply(10, &[del("/app/job/cfg", 10, 0)], 8);
    assert_eq!(kinds(&p), ["term_started"]);
    assert_eq!(s.leader("/app/job").map(|t| t.token), Some(4));
    assert!(!format!("{events:?}{p:?}").contains("postgres"));
}
