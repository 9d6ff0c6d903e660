//! The queue layout: the next lowest takes over in the same revision,
//! arrivals and departures are events, waiting counts reported once per
//! change.

use super::*;
use crate::events::EventKind;

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
