//! Acting records in the history (issue 22): stored as events, each
//! term's acting and margin read back with its terms, across the window's
//! edge, and unknown where the start was replayed.

use crate::fixtures::*;
use tenure::election::acting::ActingRecord;
use tenure::events::*;
use tenure::history::*;

fn acting(token: i64, began: i64, ended: Option<i64>, lease_end: i64) -> EventKind {
    EventKind::Acting {
        record: ActingRecord {
            v: 1,
            token,
            holder: "h".into(),
            window_ms: Some(4),
            began_ms: Some(began),
            stopping_ms: None,
            ended_ms: ended,
            ended_by_ms: None,
            lease_end_ms: Some(lease_end),
            guard_slack_ms: None,
            sent_ms: 0,
            late: false,
        },
    }
}

fn batch(revision: i64, events: Vec<Event>) -> Batch {
    Batch { revision, events }
}

#[tokio::test]
async fn each_term_reads_back_with_its_acting_and_margin() {
    let dir = tempfile::tempdir().unwrap();
    let store = Store::open(&db(&dir), WEEK).unwrap();
    let t0 = now_ms() - 60_000;
    write_all(
        &store,
        vec![
            batch(10, vec![ev(10, t0, "db", started(10, "h"))]),
            batch(11, vec![ev(11, t0 + 5, "db", acting(10, 3, None, 9_000))]),
            // Deposed at +2 s; a successor at +2.1 s; the holder stopped
            // at +2.5 s and said so at +2.6 s.
            batch(
                12,
                vec![ev(
                    12,
                    t0 + 2_000,
                    "db",
                    ended(10, "h", EndCause::Deleted, 10, t0),
                )],
            ),
            batch(13, vec![ev(13, t0 + 2_100, "db", started(13, "i"))]),
            batch(
                14,
                vec![ev(14, t0 + 2_600, "db", acting(10, 3, Some(2_500), 9_000))],
            ),
            // A record of token 13 by another holder than 13's (a token of
            // an earlier etcd timeline): not 13's.
            batch(
                15,
                vec![ev(15, t0 + 2_700, "db", acting(13, 3, Some(50), 90))],
            ),
        ],
    )
    .await;
    store.flush().await.unwrap();
    let terms = store.terms("db", &all()).unwrap();
    let a = &terms[0].acting;
    assert_eq!(a.acting_started_ms, Some(t0 + 3));
    assert_eq!(a.acting_stopped_ms, Some(t0 + 2_500));
    assert_eq!(a.margin_ms, Some(-400));
    assert_eq!(a.margin_against, Some("next_term"));
    assert_eq!(a.margin_bound_ms, Some(4));
    assert_eq!(a.overlap_ms, Some(400));
    // The successor reported nothing (the record of its token is another
    // holder's): unknown, not zero.
    assert_eq!(terms[1].acting, Default::default());
    // A window that ends before the successor still knows it came.
    let narrow = Query {
        from_ms: Some(t0),
        to_ms: Some(t0 + 2_050),
        limit: Some(10),
    };
    let terms = store.terms("db", &narrow).unwrap();
    assert_eq!(terms.len(), 1);
    assert_eq!(terms[0].acting.overlap_ms, Some(400));
    // In the API's JSON, flat beside the term's own fields.
    let json = serde_json::to_value(&terms[0]).unwrap();
    assert_eq!(json["margin_ms"], -400);
    assert_eq!(json["token"], 10);
}

#[tokio::test]
async fn a_start_recorded_by_a_replay_cannot_be_aligned() {
    let dir = tempfile::tempdir().unwrap();
    let store = Store::open(&db(&dir), WEEK).unwrap();
    let t0 = now_ms() - 60_000;
    write_all(
        &store,
        vec![batch(
            21,
            vec![
                ev(
                    21,
                    t0,
                    "",
                    EventKind::Unobserved {
                        from_revision: 20,
                        to_revision: 21,
                        since_ms: None,
                    },
                ),
                ev(20, t0, "db", started(20, "h")),
                ev(21, t0, "db", acting(20, 3, Some(500), 900)),
            ],
        )],
    )
    .await;
    store.flush().await.unwrap();
    let terms = store.terms("db", &all()).unwrap();
    assert_eq!(terms[0].acting.acting_started_ms, None, "{terms:#?}");
    assert_eq!(terms[0].acting.margin_ms, None);
}

#[tokio::test]
async fn a_successor_seen_only_in_a_replay_leaves_the_overlap_unknown() {
    let dir = tempfile::tempdir().unwrap();
    let store = Store::open(&db(&dir), WEEK).unwrap();
    let t0 = now_ms() - 60_000;
    let unobserved = EventKind::Unobserved {
        from_revision: 12,
        to_revision: 13,
        since_ms: Some(t0 + 1_000),
    };
    write_all(
        &store,
        vec![
            batch(10, vec![ev(10, t0, "db", started(10, "h"))]),
            // Deposed and succeeded while serve was away: both arrive late.
            batch(
                13,
                vec![
                    ev(13, t0 + 9_000, "", unobserved),
                    ev(
                        12,
                        t0 + 9_000,
                        "db",
                        ended(10, "h", EndCause::Deleted, 10, t0),
                    ),
                    ev(13, t0 + 9_000, "db", started(13, "i")),
                ],
            ),
            batch(
                14,
                vec![ev(14, t0 + 9_100, "db", acting(10, 3, Some(2_500), 9_000))],
            ),
        ],
    )
    .await;
    store.flush().await.unwrap();
    let terms = store.terms("db", &all()).unwrap();
    let a = &terms[0].acting;
    assert_eq!(a.acting_stopped_ms, Some(t0 + 2_500));
    assert_eq!(
        a.margin_ms, None,
        "the successor's start is an arrival time"
    );
    assert_eq!(a.overlap_ms, None);
}
