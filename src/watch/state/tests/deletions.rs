//! A deletion's lease is the one the state held under its key, and a key is
//! held by one election at a time.

use super::*;
use crate::events::EventKind;

/// etcd sends a deletion without the key's previous value: its lease is
/// the one the state held under that key, found whichever way the key's
/// layout read it (a queue key under its lease-named segment, a single key
/// whose last segment merely looks like a lease), and unknown for a key it
/// never held. A deletion of a key never held starts tracking nothing.
#[test]
fn a_deletions_lease_is_the_one_the_state_held() {
    let unknown = |key: &str| Change::Delete {
        key: key.as_bytes().to_vec(),
        revision: 9,
        lease: None,
    };
    let lease_of = |s: &State, key: &str| {
        let mut c = [unknown(key)];
        s.known_leases(&mut c);
        match &c[0] {
            Change::Delete { lease, .. } => *lease,
            Change::Put(_) => None,
        }
    };
    let mut s = State::new(Sources::tenure(""), 10);
    s.apply(3, &[put("election/q/a", "alice", 3, 3, 0xa)], 0);
    s.apply(4, &[put("election/jobs/1b", "x", 4, 4, 0x77)], 0);
    s.apply(5, &[put("election/db", "d", 5, 5, 0)], 0);
    assert_eq!(lease_of(&s, "election/q/a"), Some(0xa), "queue key");
    assert_eq!(
        lease_of(&s, "election/jobs/1b"),
        Some(0x77),
        "hex-looking single key"
    );
    assert_eq!(lease_of(&s, "election/db"), Some(0), "no lease is a lease");
    assert_eq!(lease_of(&s, "election/q/b"), None, "never held");
    assert_eq!(lease_of(&s, "other/x"), None, "outside every source");
    // Applied with the lease found, the queue key's deletion ends alice's term.
    let mut c = [unknown("election/q/a")];
    s.known_leases(&mut c);
    let (p, _) = s.apply(9, &c, 0);
    assert_eq!(kinds(&p), ["term_ended"]);
    // A deletion of a key never held: nothing, and no election tracked.
    let before = s.elections.len();
    let (p, statuses) = s.apply(10, &[unknown("election/never/held")], 0);
    assert!(p.is_empty() && statuses.is_empty(), "{p:?} {statuses:?}");
    assert_eq!(s.elections.len(), before);
}

/// A queue key put again under another lease reads as an election of its
/// own: it leaves the queue's election in that revision (its term ends), so
/// the state holds it once and its deletion's lease is the new one. A
/// negative lease (two's complement in the key, as etcd's Go client writes
/// it) is found too.
#[test]
fn a_key_read_anew_under_another_lease_leaves_its_first_election() {
    let unknown = |key: &str, revision: i64| Change::Delete {
        key: key.as_bytes().to_vec(),
        revision,
        lease: None,
    };
    let mut s = State::new(Sources::tenure(""), 10);
    let (p, _) = s.apply(3, &[put("election/a/1f", "queued", 3, 3, 0x1f)], 0);
    assert!(
        matches!(
            &p[0].event.kind,
            EventKind::TermStarted {
                layout: KeyLayout::Queue,
                ..
            }
        ) && p[0].event.election == "a"
    );
    // Put again by some client under lease 0x2f: `a/1f` is now a single key.
    let (p, _) = s.apply(4, &[put("election/a/1f", "single", 3, 4, 0x2f)], 0);
    let said: Vec<(&str, &str)> = p
        .iter()
        .map(|p| (p.event.election.as_str(), p.event.kind.name()))
        .collect();
    assert_eq!(said, [("a", "term_ended"), ("a/1f", "term_started")]);
    let mut c = [unknown("election/a/1f", 5)];
    s.known_leases(&mut c);
    assert_eq!(
        c[0],
        Change::Delete {
            key: b"election/a/1f".to_vec(),
            revision: 5,
            lease: Some(0x2f)
        }
    );
    let (p, _) = s.apply(5, &c, 0);
    assert_eq!(p.len(), 1);
    assert_eq!(
        (p[0].event.election.as_str(), p[0].cause_lookup),
        ("a/1f", Some(0x2f))
    );
    // A negative lease, as `lease_hex` writes it.
    let negative = format!("election/q/{}", crate::election::keys::lease_hex(-5));
    s.apply(6, &[put(&negative, "n", 6, 6, -5)], 0);
    let mut c = [unknown(&negative, 7)];
    s.known_leases(&mut c);
    let (p, _) = s.apply(7, &c, 0);
    assert_eq!(kinds(&p), ["term_ended"], "q's term ends");
    assert_eq!(p[0].event.election, "q");
}
