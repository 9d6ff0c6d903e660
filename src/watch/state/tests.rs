use super::*;
use crate::election::keys::MAX_CANDIDATE_LEN;

fn put(key: &str, value: &str, create: i64, rev: i64, lease: i64) -> Change {
    Change::Put(kv_at(key, value, create, rev, lease))
}

fn kv_at(key: &str, value: &str, create: i64, rev: i64, lease: i64) -> Kv {
    Kv {
        key: key.as_bytes().to_vec(),
        value: value.as_bytes().to_vec(),
        create_revision: create,
        mod_revision: rev,
        lease,
    }
}

fn del(key: &str, rev: i64, lease: i64) -> Change {
    Change::Delete {
        key: key.as_bytes().to_vec(),
        revision: rev,
        lease: Some(lease),
    }
}

fn kinds(p: &[Pending]) -> Vec<&'static str> {
    p.iter().map(|p| p.event.kind.name()).collect()
}

#[test]
fn single_key_terms_and_a_marked_resign() {
    let mut s = State::new(Sources::tenure(""), 10);
    let (p, _) = s.apply(5, &[put("election/db", "a", 5, 5, 100)], 1000);
    assert_eq!(kinds(&p), ["term_started"]);
    let (p, _) = s.apply(6, &[put("election/db", "a2", 5, 6, 100)], 1100);
    assert!(
        matches!(&p[0].event.kind, EventKind::LeaderValueChanged { previous, holder, .. } if previous == "a" && holder == "a2")
    );
    // tenure resign: deletion and marker in one revision.
    let (p, _) = s.apply(
        7,
        &[
            del("election/db", 7, 100),
            put(
                "election/~end/db",
                r#"{"token":5,"cause":"resigned"}"#,
                7,
                7,
                100,
            ),
        ],
        1200,
    );
    match &p[0].event.kind {
        EventKind::TermEnded {
            cause,
            token,
            started_revision,
            started_at_ms,
            ..
        } => {
            assert_eq!(
                (*cause, *token, *started_revision, *started_at_ms),
                (EndCause::Resigned, 5, 5, 1000)
            );
        }
        other => panic!("{other:?}"),
    }
    assert_eq!(p[0].cause_lookup, None);
    // A deletion without a marker needs the lease looked up.
    s.apply(9, &[put("election/db", "b", 9, 9, 200)], 1300);
    let (p, _) = s.apply(10, &[del("election/db", 10, 200)], 1400);
    assert_eq!(p[0].cause_lookup, Some(200));
}

#[test]
fn an_end_marker_counts_only_for_its_own_term() {
    let mut s = State::new(Sources::tenure(""), 10);
    // A marker of another term does not count (here a legacy marker,
    // inside the candidates' prefix, as tenure wrote them before).
    s.apply(11, &[put("election/db", "c", 11, 11, 300)], 1500);
    let (p, _) = s.apply(
        12,
        &[
            del("election/db", 12, 300),
            put(
                "election/db/~end",
                r#"{"token":9,"cause":"deleted"}"#,
                12,
                12,
                0,
            ),
        ],
        1600,
    );
    assert_eq!(p[0].cause_lookup, Some(300));
    // A legacy marker of the ended term still counts.
    s.apply(13, &[put("election/db", "d", 13, 13, 400)], 1700);
    let (p, _) = s.apply(
        14,
        &[
            del("election/db", 14, 400),
            put(
                "election/db/~end",
                r#"{"token":13,"cause":"deleted"}"#,
                14,
                14,
                400,
            ),
        ],
        1800,
    );
    assert!(matches!(
        &p[0].event.kind,
        EventKind::TermEnded {
            cause: EndCause::Deleted,
            ..
        }
    ));
    assert_eq!(p[0].cause_lookup, None);
}

#[test]
fn queue_layout_next_lowest_takes_over_in_the_same_revision() {
    let mut s = State::new(Sources::tenure(""), 10);
    s.apply(3, &[put("election/q/a", "alice", 3, 3, 0xa)], 0);
    let (p, _) = s.apply(4, &[put("election/q/b", "bob", 4, 4, 0xb)], 0);
    assert_eq!(kinds(&p), ["candidate_queued"], "bob queues behind alice");
    assert!(
        matches!(&p[0].event.kind, EventKind::CandidateQueued { holder, token: 4, lease_id: 0xb } if holder == "bob")
    );
    let (p, _) = s.apply(5, &[del("election/q/a", 5, 0xa)], 0);
    assert_eq!(
        kinds(&p),
        ["term_ended", "term_started"],
        "no candidate_left: bob leads"
    );
    assert!(
        matches!(&p[1].event.kind, EventKind::TermStarted { holder, token: 4, layout: KeyLayout::Queue, previous_holder: Some(prev), .. } if holder == "bob" && prev == "alice")
    );
}

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

#[test]
fn waiting_counts_are_reported_once_per_change_and_after_a_reload() {
    let mut s = State::new(Sources::tenure(""), 10);
    s.apply(3, &[put("election/q/a", "alice", 3, 3, 0xa)], 0);
    assert!(
        s.waiting_changes().is_empty(),
        "a leader alone: nobody waits"
    );
    s.apply(4, &[put("election/q/b", "bob", 4, 4, 0xb)], 0);
    s.apply(5, &[put("election/q/c", "carol", 5, 5, 0xc)], 0);
    assert_eq!(s.waiting_changes(), vec![("q".to_owned(), 2)]);
    assert!(s.waiting_changes().is_empty(), "once");
    // The leader goes: bob leads, carol waits.
    s.apply(6, &[del("election/q/a", 6, 0xa)], 0);
    assert_eq!(s.waiting_changes(), vec![("q".to_owned(), 1)]);
    // A reload (a gap) where the queue emptied meanwhile: 0 is reported.
    let only_carol = [Kv {
        key: b"election/q/c".to_vec(),
        value: b"carol".to_vec(),
        create_revision: 5,
        mod_revision: 5,
        lease: 0xc,
    }];
    s.load(9, &only_carol, &[], 0);
    assert_eq!(s.waiting_changes(), vec![("q".to_owned(), 0)]);
}

#[test]
fn queue_arrivals_and_departures_are_events_the_leaders_are_not() {
    let mut s = State::new(Sources::tenure(""), 10);
    let (p, _) = s.apply(3, &[put("election/q/a", "alice", 3, 3, 0xa)], 0);
    assert_eq!(kinds(&p), ["term_started"], "the first key leads at once");
    let (p, _) = s.apply(
        4,
        &[
            put("election/q/b", "bob", 4, 4, 0xb),
            put("election/q/c", "carol", 4, 4, 0xc),
        ],
        0,
    );
    assert_eq!(kinds(&p), ["candidate_queued", "candidate_queued"]);
    // A waiter's proclaim is no arrival.
    let (p, _) = s.apply(5, &[put("election/q/b", "bob2", 4, 5, 0xb)], 0);
    assert!(p.is_empty(), "{p:?}");
    // bob gives up; carol stays.
    let (p, _) = s.apply(6, &[del("election/q/b", 6, 0xb)], 0);
    assert_eq!(kinds(&p), ["candidate_left"]);
    assert!(
        matches!(&p[0].event.kind, EventKind::CandidateLeft { holder, token: 4, lease_id: 0xb } if holder == "bob2")
    );
    // The leader and the waiter go in one revision: a term end, no leave
    // for the leader, a leave for carol.
    let (p, _) = s.apply(
        7,
        &[del("election/q/a", 7, 0xa), del("election/q/c", 7, 0xc)],
        0,
    );
    assert_eq!(kinds(&p), ["term_ended", "candidate_left"]);
    // Single-key layout: nobody queues in etcd.
    s.apply(8, &[put("election/s", "x", 8, 8, 1)], 0);
    assert!(s
        .apply(9, &[del("election/s", 9, 1)], 0)
        .0
        .iter()
        .all(|p| p.event.kind.name() == "term_ended"));
}

#[test]
fn fence_events_carry_the_current_term() {
    let mut s = State::new(Sources::tenure(""), 10);
    s.apply(3, &[put("election/db", "a", 3, 3, 7)], 0);
    let (p, _) = s.apply(
        4,
        &[put(
            "fence/db/orders/~refusal",
            r#"{"token":2,"reason":"stale_token"}"#,
            4,
            4,
            0,
        )],
        0,
    );
    assert!(matches!(
        &p[0].event.kind,
        EventKind::FenceRefused {
            token: 2,
            current_token: Some(3),
            ..
        }
    ));
    let (p, _) = s.apply(
        5,
        &[put("fence/db/orders", "00000000000000000003", 4, 5, 0)],
        0,
    );
    assert!(
        matches!(&p[0].event.kind, EventKind::FenceAccepted { token: 3, resource } if resource == "orders")
    );
}

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

#[test]
fn nested_names_that_both_hold_keys_are_a_collision_reported_once() {
    let mut s = State::new(Sources::tenure(""), 10);
    let collisions = |p: &[Pending]| -> Vec<(String, String)> {
        p.iter()
            .filter_map(|p| match &p.event.kind {
                EventKind::NameCollision { other } => {
                    Some((p.event.election.clone(), other.clone()))
                }
                _ => None,
            })
            .collect()
    };
    let (p, _) = s.apply(5, &[put("election/orders/primary", "p", 5, 5, 1)], 1000);
    assert!(collisions(&p).is_empty());
    // etcdctl elect election/orders: a queue key of orders.
    let (p, _) = s.apply(6, &[put("election/orders/7", "e", 6, 6, 7)], 1100);
    assert_eq!(
        collisions(&p),
        [
            ("orders".to_string(), "orders/primary".to_string()),
            ("orders/primary".to_string(), "orders".to_string())
        ]
    );
    // A sibling name and a term change are no new collision.
    let (p, _) = s.apply(7, &[put("election/orders-x", "x", 7, 7, 1)], 1200);
    assert!(collisions(&p).is_empty());
    let (p, _) = s.apply(8, &[del("election/orders/primary", 8, 1)], 1300);
    assert!(collisions(&p).is_empty());
    // Back again: a new collision.
    let (p, _) = s.apply(9, &[put("election/orders/primary", "q", 9, 9, 1)], 1400);
    assert_eq!(collisions(&p).len(), 2);
    // A reload reports only what was not a collision before it.
    let kv = |k: &str, c: i64, lease: i64| Kv {
        key: k.as_bytes().to_vec(),
        value: b"v".to_vec(),
        create_revision: c,
        mod_revision: c,
        lease,
    };
    let (ev, _) = s.load(
        20,
        &[
            kv("election/orders/7", 6, 7),
            kv("election/orders/primary", 9, 1),
            kv("election/a/b/c", 12, 1),
            kv("election/a", 11, 1),
        ],
        &[],
        2000,
    );
    let fresh: Vec<(String, String)> = ev
        .iter()
        .filter_map(|e| match &e.kind {
            EventKind::NameCollision { other } => Some((e.election.clone(), other.clone())),
            _ => None,
        })
        .collect();
    assert_eq!(
        fresh,
        [
            ("a".to_string(), "a/b/c".to_string()),
            ("a/b/c".to_string(), "a".to_string())
        ]
    );
}

#[test]
fn hostile_input_is_bounded() {
    let mut s = State::new(Sources::tenure(""), 2);
    let huge = "<script>".repeat(100_000);
    let (p, _) = s.apply(3, &[put("election/a", &huge, 3, 3, 1)], 0);
    match &p[0].event.kind {
        EventKind::TermStarted { holder, .. } => assert!(holder.len() <= MAX_CANDIDATE_LEN + 3),
        other => panic!("{other:?}"),
    }
    let (_, st) = s.apply(
        4,
        &[
            Change::Put(Kv {
                key: b"election/\xff".to_vec(),
                value: vec![],
                create_revision: 4,
                mod_revision: 4,
                lease: 0,
            }),
            put("election/b", "x", 4, 4, 0),
            put("election/c", "x", 4, 4, 0),
        ],
        0,
    );
    assert_eq!(
        st,
        [
            WatchStatus::IgnoredKey,
            WatchStatus::Overflow {
                election: "c".into()
            }
        ]
    );
    assert_eq!(s.len(), 2);
}

#[test]
fn a_standing_switchover_renames_the_deletion_of_the_term_it_names() {
    let sources = crate::layout::Sources::new(vec![
        crate::layout::Source::parse("patroni:").expect("patroni")
    ]);
    let mut s = State::new(sources, 10);
    let (p, _) = s.apply(5, &[put("/service/pg/leader", "m0", 5, 5, 100)], 1000);
    assert_eq!(kinds(&p), ["term_started"]);
    // The request names m0; m0 deletes its key alone, its lease alive.
    let req = r#"{"leader":"m0","member":"m1"}"#;
    s.apply(6, &[put("/service/pg/failover", req, 6, 6, 0)], 1100);
    let (p, _) = s.apply(7, &[del("/service/pg/leader", 7, 100)], 1200);
    assert_eq!(kinds(&p), ["term_ended"]);
    assert_eq!(
        (p[0].cause_lookup, p[0].deleted_as),
        (Some(100), Some(EndCause::Switchover))
    );
    // m1 leads and clears the request: m1's later deletion is only that.
    s.apply(8, &[put("/service/pg/leader", "m1", 8, 8, 200)], 1300);
    s.apply(9, &[put("/service/pg/failover", "{}", 6, 9, 0)], 1400);
    let (p, _) = s.apply(10, &[del("/service/pg/leader", 10, 200)], 1500);
    assert_eq!(p[0].deleted_as, None);
    // A request naming another member does not rename m2's end.
    s.apply(11, &[put("/service/pg/leader", "m2", 11, 11, 300)], 1600);
    s.apply(12, &[put("/service/pg/failover", req, 6, 12, 0)], 1700);
    let (p, _) = s.apply(13, &[del("/service/pg/leader", 13, 300)], 1800);
    assert_eq!(p[0].deleted_as, None);
}

#[test]
fn a_member_saying_primary_beside_the_leader_is_two_primaries_once() {
    let sources = crate::layout::Sources::new(vec![
        crate::layout::Source::parse("patroni:").expect("patroni")
    ]);
    let mut s = State::new(sources, 10);
    let primary = r#"{"role":"primary","state":"running"}"#;
    let replica = r#"{"role":"replica","state":"running"}"#;
    // m0 runs as a primary before its leader key exists: not two.
    let (p, _) = s.apply(2, &[put("/service/pg/members/m0", primary, 2, 2, 100)], 900);
    assert!(p.is_empty());
    s.apply(3, &[put("/service/pg/leader", "m0", 3, 3, 100)], 1000);
    let (p, _) = s.apply(
        4,
        &[put("/service/pg/members/m1", replica, 4, 4, 200)],
        1100,
    );
    assert!(p.is_empty(), "a replica");
    let (p, _) = s.apply(
        5,
        &[put("/service/pg/members/m1", primary, 4, 5, 200)],
        1200,
    );
    match &p[..] {
        [one] => assert!(
            matches!(&one.event.kind, EventKind::TwoPrimaries { member, leader, token } if member == "m1" && leader == "m0" && *token == 3)
        ),
        other => panic!("{:?}", kinds(other)),
    }
    // Said again: reported once.
    let (p, _) = s.apply(
        6,
        &[put("/service/pg/members/m1", primary, 4, 6, 200)],
        1300,
    );
    assert!(p.is_empty());
    // It steps down, then says primary again: a second report.
    s.apply(
        7,
        &[put("/service/pg/members/m1", replica, 4, 7, 200)],
        1400,
    );
    let (p, _) = s.apply(
        8,
        &[put("/service/pg/members/m1", primary, 4, 8, 200)],
        1500,
    );
    assert_eq!(kinds(&p), ["two_primaries"]);
    // Its key gone with its lease: nothing more.
    let (p, _) = s.apply(9, &[del("/service/pg/members/m1", 9, 200)], 1600);
    assert!(p.is_empty());
}

#[test]
fn an_acting_record_is_an_event_of_its_election_after_the_revisions_terms() {
    let mut s = State::new(Sources::tenure(""), 10);
    s.apply(5, &[put("election/db", "a", 5, 5, 100)], 1000);
    let record = r#"{"v":1,"token":5,"holder":"a","window_ms":2,"began_ms":1,"ended_ms":900,"lease_end_ms":902,"sent_ms":901}"#;
    let (p, statuses) = s.apply(
        7,
        &[
            del("election/db", 7, 100),
            put("election/~acting/db", record, 7, 7, 0),
            put(
                "election/~end/db",
                r#"{"token":5,"cause":"resigned"}"#,
                7,
                7,
                0,
            ),
        ],
        1900,
    );
    assert!(statuses.is_empty(), "{statuses:?}");
    assert_eq!(kinds(&p), ["term_ended", "acting"]);
    assert_eq!(p[1].event.election, "db");
    assert!(
        matches!(&p[1].event.kind, EventKind::Acting { record } if record.token == 5 && record.ended_ms == Some(900))
    );
    // Not a record (a foreign writer, a newer format): ignored, counted.
    let (p, statuses) = s.apply(8, &[put("election/~acting/db", "{\"v\":9}", 8, 8, 0)], 2000);
    assert!(p.is_empty());
    assert_eq!(statuses, [WatchStatus::IgnoredKey]);
}

/// A Lease value as kube-apiserver stores it in JSON, times in seconds.
fn lease(holder: &str, acquired: i64, renewed: i64, transitions: i64) -> String {
    let t = |s: i64| format!("1970-01-01T00:{:02}:{:02}.000000Z", s / 60, s % 60);
    format!(
        r#"{{"kind":"Lease","apiVersion":"coordination.k8s.io/v1","metadata":{{}},"spec":{{"holderIdentity":"{holder}","leaseDurationSeconds":15,"acquireTime":"{}","renewTime":"{}","leaseTransitions":{transitions}}}}}"#,
        t(acquired),
        t(renewed)
    )
}

fn k8s() -> State {
    let sources = Sources::new(vec![
        crate::layout::Source::parse("kubernetes:/registry/").expect("kubernetes")
    ]);
    State::new(sources, 10)
}

const KCM: &str = "/registry/leases/kube-system/kcm";

fn ends(p: &[Pending]) -> Vec<(i64, EndCause)> {
    p.iter()
        .filter_map(|p| match &p.event.kind {
            EventKind::TermEnded { token, cause, .. } => Some((*token, *cause)),
            _ => None,
        })
        .collect()
}

fn starts(p: &[Pending]) -> Vec<(i64, String)> {
    p.iter()
        .filter_map(|p| match &p.event.kind {
            EventKind::TermStarted { token, holder, .. } => Some((*token, holder.clone())),
            _ => None,
        })
        .collect()
}

#[test]
fn a_lease_s_terms_are_runs_of_one_holder_ended_as_its_values_say() {
    let mut s = k8s();
    let name = "kube-system/kcm";
    let (p, _) = s.apply(10, &[put(KCM, &lease("a", 0, 0, 0), 10, 10, 0)], 1000);
    assert_eq!(starts(&p), [(10, "a".into())]);
    // Renewals: no event, the token stays the acquiring write's.
    for (rev, at) in [(11, 2), (12, 4)] {
        let (p, _) = s.apply(rev, &[put(KCM, &lease("a", 0, at, 0), 10, rev, 0)], 1000);
        assert!(p.is_empty(), "{p:?}");
    }
    assert_eq!(s.leader(name).map(|t| t.token), Some(10));
    let (lapsed, changed) = s.renewing(1000);
    assert_eq!(lapsed, 0);
    let r = changed
        .iter()
        .find(|l| l.election == name)
        .expect("reported");
    assert_eq!(
        (r.renewals, r.every_us, r.duration_s, r.held.clone()),
        (2, Some(2_000_000), Some(15), Some(("a".into(), 10)))
    );
    // Reported again only once written again or lapsed.
    assert!(s.renewing(1000).1.is_empty());
    assert_eq!(s.renewing(16_001).0, 1);
    // Released: resigned; nobody leads.
    let (p, _) = s.apply(13, &[put(KCM, &lease("", 5, 5, 0), 10, 13, 0)], 1000);
    assert_eq!(ends(&p), [(10, EndCause::Resigned)]);
    assert!(s.leader(name).is_none());
    // b acquires, then c takes it 5 s after b's renewal of a 15 s lease.
    let (p, _) = s.apply(14, &[put(KCM, &lease("b", 8, 8, 1), 10, 14, 0)], 1000);
    assert_eq!(starts(&p), [(14, "b".into())]);
    s.apply(15, &[put(KCM, &lease("b", 8, 10, 1), 10, 15, 0)], 1000);
    let (p, _) = s.apply(16, &[put(KCM, &lease("c", 15, 15, 2), 10, 16, 0)], 1000);
    assert_eq!(ends(&p), [(14, EndCause::TakenOver)]);
    // Its renewals go with its end: b renewed once, at 10 s; c acquired at 15.
    let renewals = p.iter().find_map(|p| match &p.event.kind {
        EventKind::TermEnded { renewals, .. } => *renewals,
        _ => None,
    });
    let r = renewals.expect("b's renewals");
    assert_eq!(
        (r.count, r.last_us, r.handover_us),
        (1, Some(10_000_000), Some(5_000_000))
    );
    assert_eq!(starts(&p), [(16, "c".into())]);
    // d after c's 15 s had run out: expired; the count jumped by two: one
    // term between was not seen, recorded as a gap of this election first.
    let (p, _) = s.apply(20, &[put(KCM, &lease("d", 31, 31, 4), 10, 20, 0)], 1000);
    assert_eq!(kinds(&p), ["gap", "term_ended", "term_started"]);
    assert_eq!(p[0].event.election, name);
    assert_eq!(ends(&p), [(16, EndCause::Expired)]);
    // An unreadable value changes nothing; encrypted is named.
    let (p, st) = s.apply(21, &[put(KCM, "k8s:enc:aescbc:v1:k:xx", 10, 21, 0)], 1000);
    assert!(p.is_empty());
    assert_eq!(st, [WatchStatus::EncryptedValue]);
    // The object deleted: deleted, with no lookup.
    let (p, _) = s.apply(22, &[del(KCM, 22, 0)], 1000);
    assert_eq!(ends(&p), [(20, EndCause::Deleted)]);
    // d's renewals go with it too, with no acquisition after it.
    assert!(matches!(
        &p[0].event.kind,
        EventKind::TermEnded { renewals: Some(r), .. } if r.handover_us.is_none() && r.last_us == Some(31_000_000)
    ));
    assert_eq!(p[0].cause_lookup, None);
    // Heartbeats are no elections.
    let node = "/registry/leases/kube-node-lease/n1";
    let (p, st) = s.apply(23, &[put(node, &lease("n1", 0, 0, 0), 23, 23, 0)], 1000);
    assert!(p.is_empty() && st.is_empty());
}

#[test]
fn a_resumed_lease_keeps_the_token_history_holds() {
    let name = "kube-system/kcm";
    let kv = Kv {
        key: KCM.as_bytes().to_vec(),
        value: lease("b", 8, 40, 1).into_bytes(),
        create_revision: 10,
        mod_revision: 30,
        lease: 0,
    };
    let open = OpenTerm {
        election: name.into(),
        token: 14,
        holder: "b".into(),
        lease_id: 0,
        layout: KeyLayout::Lease,
        started_revision: 14,
        started_at_ms: 900,
    };
    let mut s = k8s();
    let (events, _) = s.load(
        30,
        std::slice::from_ref(&kv),
        std::slice::from_ref(&open),
        1000,
    );
    assert!(events.is_empty(), "{events:?}");
    assert_eq!(s.leader(name).map(|t| t.token), Some(14));
    // And the term goes on under it: a renewal is nothing, a release ends 14.
    let (p, _) = s.apply(31, &[put(KCM, &lease("b", 8, 42, 1), 10, 31, 0)], 1000);
    assert!(p.is_empty());
    let (p, _) = s.apply(32, &[put(KCM, &lease("", 43, 43, 1), 10, 32, 0)], 1000);
    assert_eq!(ends(&p), [(14, EndCause::Resigned)]);
    // Another holder in the snapshot than history's: history's term ended
    // unknown, the snapshot's starts at the value's revision.
    let mut s = k8s();
    let other = Kv {
        value: lease("c", 20, 40, 2).into_bytes(),
        ..kv
    };
    let (events, _) = s.load(30, std::slice::from_ref(&other), &[open], 1000);
    let kinds: Vec<_> = events.iter().map(|e| e.kind.name()).collect();
    assert_eq!(kinds, ["term_ended", "term_started"]);
    assert_eq!(s.leader(name).map(|t| t.token), Some(30));
    // An encrypted value in a snapshot: counted, nothing tracked.
    let mut s = k8s();
    let sealed = Kv {
        value: b"k8s:enc:kms:v2:key:\x00\x01".to_vec(),
        ..other
    };
    let (events, st) = s.load(30, &[sealed], &[], 1000);
    assert!(events.is_empty());
    assert_eq!(st, [WatchStatus::EncryptedValue]);
    assert!(s.is_empty());
}

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
