//! Standing requests and members' word (Patroni's): a switchover renames the
//! deletion of the term it names; a member saying primary beside the leader
//! is `two_primaries`, once.

use super::*;
use crate::events::EventKind;

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
