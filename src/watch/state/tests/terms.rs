//! A single key's terms: a marked resign, an end marker counted only for
//! its own term, the fence's events carrying the current term, and an acting
//! record placed after its revision's terms.

use super::*;
use crate::events::EventKind;

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
