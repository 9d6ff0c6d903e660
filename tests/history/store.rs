//! Writing and reading back: windows and limits, replayed batches, an end
//! without a start, reopening, a reader beside the writer, retention.

use std::time::Duration;

use crate::fixtures::*;
use tenure::election::{FenceReason, KeyLayout};
use tenure::events::*;
use tenure::history::*;

#[tokio::test]
async fn writes_read_back() {
    let dir = tempfile::tempdir().unwrap();
    let store = Store::open(&db(&dir), WEEK).unwrap();
    assert_eq!(store.resume_point().unwrap(), None, "nothing committed yet");
    assert_eq!(store.flush().await.unwrap(), 0);

    let t0 = now_ms() - 60_000;
    let batches = story(t0);
    let expected_events: Vec<Event> = batches.iter().flat_map(|b| b.events.clone()).collect();
    write_all(&store, batches).await;
    assert_eq!(store.flush().await.unwrap(), 130);

    // Terms.
    let terms = store.terms("db", &Query::default()).unwrap();
    assert_eq!(terms.len(), 2, "{terms:#?}");
    let (first, second) = (&terms[0], &terms[1]);
    assert_eq!(
        (first.token, first.holder.as_str(), first.lease_id),
        (100, "alice", 1000)
    );
    assert_eq!(first.layout, Some(KeyLayout::Single));
    assert_eq!(first.started_at_ms, t0);
    assert_eq!(first.started_revision, 100);
    assert_eq!(first.ended_at_ms, Some(t0 + 5_000));
    assert_eq!(first.ended_revision, Some(105));
    assert_eq!(first.end_cause, Some(EndCause::Expired));
    assert_eq!(first.duration_seconds, Some(5.0));
    assert_eq!(first.started_at, format_ms(t0));
    assert!(first.started_at.ends_with('Z') && first.started_at.contains('.'));
    assert_eq!(
        first.ended_at.as_deref(),
        Some(format_ms(t0 + 5_000).as_str())
    );
    assert!(!first.from_snapshot);
    assert_eq!(second.token, 106);
    assert_eq!(second.ended_at_ms, None);
    assert_eq!(second.end_cause, None);
    assert_eq!(second.duration_seconds, None);
    let cache = store.terms("cache", &Query::default()).unwrap();
    assert_eq!(cache.len(), 1);
    assert_eq!(cache[0].layout, Some(KeyLayout::Queue));
    assert!(cache[0].from_snapshot);

    // Events: every one, in order, exactly as written.
    assert_eq!(store.events(None, &all()).unwrap(), expected_events);
    let db_events = store.events(Some("db"), &all()).unwrap();
    assert!(
        db_events
            .iter()
            .all(|e| e.election == "db" || matches!(e.kind, EventKind::Gap { .. })),
        "an election's events and the gaps only"
    );
    assert_eq!(db_events.len(), 7, "6 of db, and the gap");
    let cache_events = store.events(Some("cache"), &all()).unwrap();
    assert_eq!(cache_events.len(), 2, "1 of cache, and the gap");

    // Refusals.
    let refusals = store.refusals(None, &all()).unwrap();
    assert_eq!(refusals.len(), 1);
    let r = &refusals[0];
    assert_eq!(
        (r.election.as_str(), r.resource.as_str(), r.token, r.reason),
        ("db", "orders", 100, FenceReason::StaleToken)
    );
    assert_eq!((r.revision, r.at_ms), (107, t0 + 7_000));
    assert_eq!(r.current_token, Some(106));
    assert_eq!(r.current_holder.as_deref(), Some("bob, \"the builder\""));
    assert_eq!(r.at, format_ms(t0 + 7_000));
    assert!(store.refusals(Some("cache"), &all()).unwrap().is_empty());

    // Resume point: the revision, and the open terms of every election.
    let resume = store.resume_point().unwrap().expect("a resume point");
    assert_eq!(resume.revision, 130);
    let open: Vec<(&str, i64, KeyLayout)> = resume
        .open_terms
        .iter()
        .map(|t| (t.election.as_str(), t.token, t.layout))
        .collect();
    assert_eq!(
        open,
        vec![
            ("cache", 95, KeyLayout::Queue),
            ("db", 106, KeyLayout::Single)
        ]
    );
    let db_open = &resume.open_terms[1];
    assert_eq!(db_open.holder, "bob, \"the builder\"");
    assert_eq!(
        (
            db_open.lease_id,
            db_open.started_revision,
            db_open.started_at_ms
        ),
        (1060, 106, t0 + 6_000)
    );

    // Elections.
    let elections = store.elections().unwrap();
    let names: Vec<&str> = elections.iter().map(|e| e.election.as_str()).collect();
    assert_eq!(
        names,
        ["cache", "db"],
        "the gap's empty name is not an election"
    );
    let db = &elections[1];
    assert_eq!((db.terms, db.refusals), (2, 1));
    assert_eq!(db.current.as_ref().map(|t| t.token), Some(106));
    assert_eq!(db.last_event_ms, Some(t0 + 7_000));
    assert_eq!(
        db.last_event_at.as_deref(),
        Some(format_ms(t0 + 7_000).as_str())
    );
    assert_eq!(elections[0].current.as_ref().map(|t| t.token), Some(95));
}

#[tokio::test]
async fn query_window_and_limit() {
    let dir = tempfile::tempdir().unwrap();
    let store = Store::open(&db(&dir), WEEK).unwrap();
    let t0 = now_ms() - 3_600_000;
    write_all(&store, story(t0)).await;
    store.flush().await.unwrap();

    // The first term ended at t0+5s, the second started at t0+6s.
    let window = |from: i64, to: i64| Query {
        from_ms: Some(t0 + from),
        to_ms: Some(t0 + to),
        limit: None,
    };
    let tokens = |q: Query| -> Vec<i64> {
        store
            .terms("db", &q)
            .unwrap()
            .iter()
            .map(|t| t.token)
            .collect()
    };
    assert_eq!(tokens(window(0, 1_000)), [100]);
    assert_eq!(tokens(window(5_000, 5_500)), [100], "ends are inclusive");
    assert_eq!(tokens(window(5_500, 5_900)), Vec::<i64>::new());
    assert_eq!(tokens(window(5_500, 6_000)), [106]);
    assert_eq!(
        tokens(window(100_000, 200_000)),
        [106],
        "open term overlaps"
    );
    assert_eq!(tokens(window(-10_000, -1)), Vec::<i64>::new());
    assert_eq!(
        tokens(Query {
            limit: Some(1),
            ..Query::default()
        }),
        [100]
    );

    let events = store.events(None, &window(1_000, 5_000)).unwrap();
    let revisions: Vec<i64> = events.iter().map(|e| e.revision).collect();
    assert_eq!(revisions, [101, 102, 105]);
    let limited = store
        .events(
            None,
            &Query {
                limit: Some(2),
                ..Query::default()
            },
        )
        .unwrap();
    assert_eq!(limited.len(), 2);
    assert!(store.refusals(None, &window(0, 6_999)).unwrap().is_empty());
    assert_eq!(
        store.refusals(None, &window(7_000, 7_000)).unwrap().len(),
        1
    );

    assert_eq!(Query::default().effective_limit(), DEFAULT_LIMIT);
    let huge = Query {
        limit: Some(usize::MAX),
        ..Query::default()
    };
    assert_eq!(huge.effective_limit(), MAX_LIMIT);
}

#[tokio::test]
async fn replayed_batches_are_ignored() {
    let dir = tempfile::tempdir().unwrap();
    let path = db(&dir);
    let t0 = now_ms() - 60_000;
    {
        let store = Store::open(&path, WEEK).unwrap();
        write_all(&store, story(t0)).await;
        assert_eq!(store.flush().await.unwrap(), 130);
        let before_events = store.events(None, &all()).unwrap();
        let before_terms = store.terms("db", &all()).unwrap();
        let before_refusals = store.refusals(None, &all()).unwrap();

        // The same story again (a watcher replaying after a crash), and a
        // batch at exactly the resume revision: all ignored.
        write_all(&store, story(t0)).await;
        store
            .write(batch(130, vec![ev(130, t0, "db", started(130, "mallory"))]))
            .await
            .unwrap();
        assert_eq!(store.flush().await.unwrap(), 130);
        assert_eq!(store.events(None, &all()).unwrap(), before_events);
        assert_eq!(store.terms("db", &all()).unwrap(), before_terms);
        assert_eq!(store.refusals(None, &all()).unwrap(), before_refusals);

        // Within one drained group too: the second of two batches with the
        // same revision is ignored.
        store
            .write(batch(140, vec![ev(140, t0, "db", started(140, "eve"))]))
            .await
            .unwrap();
        store
            .write(batch(140, vec![ev(140, t0, "db", started(141, "eve"))]))
            .await
            .unwrap();
        assert_eq!(store.flush().await.unwrap(), 140);
        let tokens: Vec<i64> = store
            .terms("db", &all())
            .unwrap()
            .iter()
            .map(|t| t.token)
            .collect();
        assert_eq!(tokens, [100, 106, 140]);
    }
    // And after a restart.
    let store = Store::open(&path, WEEK).unwrap();
    let count = store.events(None, &all()).unwrap().len();
    write_all(&store, story(t0)).await;
    assert_eq!(store.flush().await.unwrap(), 140);
    assert_eq!(store.events(None, &all()).unwrap().len(), count);
}

#[tokio::test]
async fn term_end_without_start_is_recorded() {
    let dir = tempfile::tempdir().unwrap();
    let store = Store::open(&db(&dir), WEEK).unwrap();
    let t0 = now_ms() - 60_000;
    store
        .write(batch(
            50,
            vec![ev(
                50,
                t0,
                "db",
                ended(7, "old", EndCause::Deleted, 7, t0 - 30_000),
            )],
        ))
        .await
        .unwrap();
    // A second end for the same term does not overwrite the first.
    store
        .write(batch(
            51,
            vec![ev(
                51,
                t0 + 1,
                "db",
                ended(7, "old", EndCause::Unknown, 7, t0),
            )],
        ))
        .await
        .unwrap();
    store.flush().await.unwrap();
    let terms = store.terms("db", &all()).unwrap();
    assert_eq!(terms.len(), 1);
    let t = &terms[0];
    assert_eq!((t.token, t.holder.as_str(), t.lease_id), (7, "old", 70));
    assert_eq!(t.layout, None, "layout unknown: the start was not seen");
    assert!(t.from_snapshot);
    assert_eq!((t.started_revision, t.started_at_ms), (7, t0 - 30_000));
    assert_eq!((t.ended_revision, t.ended_at_ms), (Some(50), Some(t0)));
    assert_eq!(t.end_cause, Some(EndCause::Deleted));
    assert_eq!(t.duration_seconds, Some(30.0));
    assert!(store.resume_point().unwrap().unwrap().open_terms.is_empty());
}

#[tokio::test]
async fn survives_reopen() {
    let dir = tempfile::tempdir().unwrap();
    let path = db(&dir);
    let t0 = now_ms() - 60_000;
    let batches = story(t0);
    let expected: Vec<Event> = batches.iter().flat_map(|b| b.events.clone()).collect();
    {
        let store = Store::open(&path, WEEK).unwrap();
        write_all(&store, batches).await;
        // No flush: dropping the store commits what is queued.
    }
    let store = Store::open(&path, WEEK).unwrap();
    assert_eq!(store.events(None, &all()).unwrap(), expected);
    let resume = store.resume_point().unwrap().unwrap();
    assert_eq!(resume.revision, 130);
    let open: Vec<i64> = resume.open_terms.iter().map(|t| t.token).collect();
    assert_eq!(open, [95, 106]);
    assert_eq!(store.terms("db", &all()).unwrap().len(), 2);
    assert_eq!(store.refusals(None, &all()).unwrap().len(), 1);
    assert_eq!(store.close().await.unwrap(), 130);

    // And with only a Reader (no writer): the same answers.
    let reader = Reader::open(&path).unwrap();
    assert_eq!(reader.events(None, &all()).unwrap(), expected);
    assert_eq!(reader.resume_point().unwrap().unwrap().revision, 130);
    assert_eq!(reader.elections().unwrap().len(), 2);
}

#[tokio::test]
async fn reader_sees_commits_while_the_writer_runs() {
    let dir = tempfile::tempdir().unwrap();
    let path = db(&dir);
    let store = Store::open(&path, WEEK).unwrap();
    let reader = Reader::open(&path).unwrap();
    assert_eq!(reader.resume_point().unwrap(), None);
    write_all(&store, story(now_ms())).await;
    store.flush().await.unwrap();
    assert_eq!(reader.resume_point().unwrap().unwrap().revision, 130);
    // From async code, through spawn_blocking.
    let r = store.reader();
    let terms = tokio::task::spawn_blocking(move || r.terms("db", &Query::default()))
        .await
        .unwrap()
        .unwrap();
    assert_eq!(terms.len(), 2);
}

#[tokio::test]
async fn retention_deletes_old_rows_but_not_open_terms() {
    let dir = tempfile::tempdir().unwrap();
    let path = db(&dir);
    let now = now_ms();
    let old = now - 10 * DAY_MS;
    {
        // A long retention while writing, so nothing is deleted yet.
        let store = Store::open(&path, Duration::from_secs(3650 * 86_400)).unwrap();
        write_all(
            &store,
            vec![
                batch(
                    10,
                    vec![
                        ev(10, old, "db", started(10, "ancient")),
                        ev(10, old, "long", started(9, "still-leading")),
                    ],
                ),
                batch(
                    11,
                    vec![ev(
                        11,
                        old + DAY_MS,
                        "db",
                        ended(10, "ancient", EndCause::Resigned, 10, old),
                    )],
                ),
                batch(12, vec![ev(12, old + DAY_MS, "db", refused("r", 10, None))]),
                batch(
                    20,
                    vec![ev(20, now - 3_600_000, "db", started(20, "recent"))],
                ),
                batch(
                    21,
                    vec![ev(
                        21,
                        now - 60_000,
                        "db",
                        ended(20, "recent", EndCause::Expired, 20, now - 3_600_000),
                    )],
                ),
                batch(22, vec![ev(22, now - 30_000, "db", refused("r", 20, None))]),
            ],
        )
        .await;
        assert_eq!(store.flush().await.unwrap(), 22);
        assert_eq!(store.events(None, &all()).unwrap().len(), 7);
    }
    // Reopened with a week's retention: it prunes when the writer starts.
    let store = Store::open(&path, WEEK).unwrap();
    assert_eq!(store.flush().await.unwrap(), 22, "resume revision kept");
    let db_tokens: Vec<i64> = store
        .terms("db", &all())
        .unwrap()
        .iter()
        .map(|t| t.token)
        .collect();
    assert_eq!(
        db_tokens,
        [20],
        "the old ended term is gone, the recent one kept"
    );
    let long = store.terms("long", &all()).unwrap();
    assert_eq!(long.len(), 1, "an open term is never deleted, however old");
    assert_eq!(long[0].started_at_ms, old);
    let revisions: Vec<i64> = store
        .events(None, &all())
        .unwrap()
        .iter()
        .map(|e| e.revision)
        .collect();
    assert_eq!(revisions, [20, 21, 22]);
    let refusals = store.refusals(None, &all()).unwrap();
    assert_eq!(refusals.len(), 1);
    assert_eq!(refusals[0].token, 20);
    let resume = store.resume_point().unwrap().unwrap();
    assert_eq!(resume.revision, 22);
    assert_eq!(resume.open_terms.len(), 1);
    assert_eq!(resume.open_terms[0].election, "long");
    drop(store);

    // A zero retention keeps everything.
    let store = Store::open(&path, Duration::ZERO).unwrap();
    store.flush().await.unwrap();
    assert_eq!(store.events(None, &all()).unwrap().len(), 3);
}
