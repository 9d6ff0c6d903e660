//! The SQLite history store: no etcd needed.

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use tenure::election::{FenceReason, Layout};
use tenure::events::*;
use tenure::history::*;

const DAY_MS: i64 = 86_400_000;
const WEEK: Duration = Duration::from_secs(7 * 86_400);

fn db(dir: &tempfile::TempDir) -> PathBuf {
    dir.path().join("history.db")
}

fn ev(revision: i64, at_ms: i64, election: &str, kind: EventKind) -> Event {
    Event {
        revision,
        at_ms,
        election: election.to_owned(),
        kind,
    }
}

fn started(token: i64, holder: &str) -> EventKind {
    EventKind::TermStarted {
        token,
        holder: holder.to_owned(),
        lease_id: token * 10,
        layout: Layout::Single,
        previous_holder: None,
        from_snapshot: false,
    }
}

fn ended(token: i64, holder: &str, cause: EndCause, started_revision: i64, at: i64) -> EventKind {
    EventKind::TermEnded {
        token,
        holder: holder.to_owned(),
        lease_id: token * 10,
        cause,
        started_revision,
        started_at_ms: at,
    }
}

fn refused(resource: &str, token: i64, current: Option<(i64, &str)>) -> EventKind {
    EventKind::FenceRefused {
        resource: resource.to_owned(),
        token,
        reason: FenceReason::StaleToken,
        current_token: current.map(|c| c.0),
        current_holder: current.map(|c| c.1.to_owned()),
    }
}

fn batch(revision: i64, events: Vec<Event>) -> Batch {
    Batch { revision, events }
}

fn all() -> Query {
    Query {
        limit: Some(MAX_LIMIT),
        ..Query::default()
    }
}

/// A story in two elections, times in the recent past.
fn story(t0: i64) -> Vec<Batch> {
    vec![
        batch(
            100,
            vec![
                ev(100, t0, "db", started(100, "alice")),
                ev(100, t0, "cache", {
                    let mut k = started(95, "carol");
                    if let EventKind::TermStarted {
                        layout,
                        from_snapshot,
                        ..
                    } = &mut k
                    {
                        *layout = Layout::Queue;
                        *from_snapshot = true;
                    }
                    k
                }),
            ],
        ),
        batch(
            101,
            vec![ev(
                101,
                t0 + 1_000,
                "db",
                EventKind::LeaderValueChanged {
                    token: 100,
                    holder: "alice-2".into(),
                    previous: "alice".into(),
                },
            )],
        ),
        batch(
            102,
            vec![ev(
                102,
                t0 + 2_000,
                "db",
                EventKind::FenceAccepted {
                    resource: "orders".into(),
                    token: 100,
                },
            )],
        ),
        batch(
            105,
            vec![ev(
                105,
                t0 + 5_000,
                "db",
                ended(100, "alice-2", EndCause::Expired, 100, t0),
            )],
        ),
        batch(
            106,
            vec![ev(
                106,
                t0 + 6_000,
                "db",
                started(106, "bob, \"the builder\""),
            )],
        ),
        batch(
            107,
            vec![ev(
                107,
                t0 + 7_000,
                "db",
                refused("orders", 100, Some((106, "bob, \"the builder\""))),
            )],
        ),
        batch(
            120,
            vec![ev(
                120,
                t0 + 9_000,
                "",
                EventKind::Gap {
                    from_revision: 108,
                    to_revision: 119,
                },
            )],
        ),
        // A progress-only batch: nothing happened, the revision moves.
        batch(130, vec![]),
    ]
}

async fn write_all(store: &Store, batches: Vec<Batch>) {
    for b in batches {
        store.write(b).await.expect("write");
    }
}

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
    assert_eq!(first.layout, Some(Layout::Single));
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
    assert_eq!(cache[0].layout, Some(Layout::Queue));
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
    let open: Vec<(&str, i64, Layout)> = resume
        .open_terms
        .iter()
        .map(|t| (t.election.as_str(), t.token, t.layout))
        .collect();
    assert_eq!(
        open,
        vec![("cache", 95, Layout::Queue), ("db", 106, Layout::Single)]
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

#[test]
fn csv_quotes_and_neutralises_formulas() {
    let row = |holder: &str, election: &str| TermRow {
        election: election.to_owned(),
        token: 451,
        holder: holder.to_owned(),
        lease_id: -5,
        layout: Some(Layout::Single),
        started_at: format_ms(0),
        ended_at: Some(format_ms(1_500)),
        started_at_ms: 0,
        ended_at_ms: Some(1_500),
        started_revision: 451,
        ended_revision: Some(460),
        end_cause: Some(EndCause::Superseded),
        from_snapshot: false,
        duration_seconds: Some(1.5),
    };
    let csv = terms_to_csv(&[
        row("plain", "db"),
        row("a,b \"c\"\nd", "db"),
        row("=HYPERLINK(\"http://x\")", "-db"),
        row("+1", "db"),
        row("@SUM(A1)", "db"),
        row("-2,3", "db"),
    ]);
    let lines: Vec<&str> = csv.split('\n').collect();
    assert_eq!(
        lines[0],
        "election,token,holder,lease_id,layout,started_at,ended_at,started_at_ms,ended_at_ms,\
         started_revision,ended_revision,end_cause,from_snapshot,duration_seconds"
    );
    assert_eq!(
        lines[1],
        "db,451,plain,-5,single,1970-01-01T00:00:00.000Z,1970-01-01T00:00:01.500Z,0,1500,\
         451,460,superseded,false,1.500"
    );
    // The embedded newline stays inside the quoted cell.
    assert!(csv.contains("db,451,\"a,b \"\"c\"\"\nd\",-5,"), "{csv}");
    assert!(
        csv.contains("'-db,451,\"'=HYPERLINK(\"\"http://x\"\")\",-5,"),
        "{csv}"
    );
    assert!(csv.contains("\ndb,451,'+1,-5,"), "{csv}");
    assert!(csv.contains("\ndb,451,'@SUM(A1),-5,"), "{csv}");
    assert!(csv.contains("\ndb,451,\"'-2,3\",-5,"), "{csv}");
    // Header, 6 rows (one spanning two lines), and the final newline.
    assert_eq!(csv.matches('\n').count(), 8);
    assert!(csv.ends_with('\n'));
    assert_eq!(terms_to_csv(&[]).lines().count(), 1);

    // An open term: empty cells.
    let mut open = row("x", "db");
    open.ended_at = None;
    open.ended_at_ms = None;
    open.ended_revision = None;
    open.end_cause = None;
    open.duration_seconds = None;
    open.layout = None;
    let csv = terms_to_csv(&[open]);
    assert!(
        csv.ends_with("\ndb,451,x,-5,,1970-01-01T00:00:00.000Z,,0,,451,,,false,\n"),
        "{csv}"
    );
}

#[test]
fn parse_time_forms() {
    assert_eq!(
        parse_time("2026-12-02T14:00:00Z").unwrap(),
        1_796_220_000_000
    );
    assert_eq!(
        parse_time("2026-12-02T14:00:00.250Z").unwrap(),
        1_796_220_000_250
    );
    assert_eq!(
        parse_time("2026-12-02T15:00:00+01:00").unwrap(),
        1_796_220_000_000
    );
    assert_eq!(parse_time("2026-12-02").unwrap(), 1_796_169_600_000);
    assert_eq!(parse_time("1796220000").unwrap(), 1_796_220_000_000);
    assert_eq!(parse_time(" 0 ").unwrap(), 0);
    assert_eq!(
        format_ms(parse_time("2026-12-02T14:00:00.5Z").unwrap()),
        "2026-12-02T14:00:00.500Z"
    );

    let close_to = |got: i64, want: i64| (got - want).abs() < 5_000;
    let now = now_ms();
    assert!(close_to(parse_time("90m").unwrap(), now - 90 * 60_000));
    assert!(close_to(parse_time("2h").unwrap(), now - 2 * 3_600_000));
    assert!(close_to(parse_time("7d").unwrap(), now - 7 * DAY_MS));
    assert!(close_to(
        parse_time("1h 30m ago").unwrap(),
        now - 90 * 60_000
    ));
    assert!(close_to(parse_time("now").unwrap(), now));

    for bad in [
        "",
        "yesterday",
        "2026-13-01T00:00:00Z",
        "2026-02-30",
        "2026-12-02T24:00:00Z",
        "2026-12-02T14:00:00",
        "2026-12-02 14:00",
        "-5",
        "99999999999999999999",
        "12x",
    ] {
        match parse_time(bad) {
            Err(HistoryError::InvalidTime(msg)) => {
                assert!(msg.contains("RFC 3339"), "{msg}");
                assert!(msg.contains("unix seconds"), "{msg}");
                assert!(msg.contains("90m"), "{msg}");
                assert!(msg.contains(&format!("{bad:?}")), "{msg}");
            }
            other => panic!("{bad:?}: {other:?}"),
        }
    }
}

#[test]
fn reader_on_missing_file_names_it() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("nope").join("history.db");
    let err = Reader::open(&path).unwrap_err();
    assert!(
        matches!(&err, HistoryError::NotFound { path: p } if p == &path),
        "{err:?}"
    );
    let msg = err.to_string();
    assert!(msg.contains(&path.display().to_string()), "{msg}");
    assert!(msg.contains("tenure serve --db"), "{msg}");
    assert!(!path.exists(), "a reader never creates the file");
}

#[test]
fn reader_refuses_a_file_that_is_not_history() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("other.db");
    rusqlite::Connection::open(&path)
        .unwrap()
        .execute_batch("CREATE TABLE x (y)")
        .unwrap();
    let err = Reader::open(&path).unwrap_err();
    assert!(matches!(err, HistoryError::Schema { .. }), "{err:?}");
    assert!(err.to_string().contains("not a tenure history database"));

    // A file from a newer tenure is refused by the writer too.
    let newer = dir.path().join("newer.db");
    {
        let _ = Store::open(&newer, WEEK).unwrap();
    }
    rusqlite::Connection::open(&newer)
        .unwrap()
        .pragma_update(None, "user_version", SCHEMA_VERSION + 1)
        .unwrap();
    let err = Store::open(&newer, WEEK).unwrap_err();
    assert!(err.to_string().contains("newer tenure"), "{err}");
}

#[tokio::test]
async fn schema_is_versioned_and_wal() {
    let dir = tempfile::tempdir().unwrap();
    let path = db(&dir);
    Store::open(&path, WEEK).unwrap().close().await.unwrap();
    // Reopening an up-to-date file migrates nothing and keeps the version.
    Store::open(&path, WEEK).unwrap().close().await.unwrap();
    let conn = rusqlite::Connection::open(&path).unwrap();
    let version: i64 = conn
        .pragma_query_value(None, "user_version", |r| r.get(0))
        .unwrap();
    assert_eq!(version, SCHEMA_VERSION);
    let mode: String = conn
        .pragma_query_value(None, "journal_mode", |r| r.get(0))
        .unwrap();
    assert_eq!(mode, "wal");
    let tables: Vec<String> = conn
        .prepare("SELECT name FROM sqlite_master WHERE type = 'table' ORDER BY name")
        .unwrap()
        .query_map([], |r| r.get(0))
        .unwrap()
        .collect::<Result<_, _>>()
        .unwrap();
    assert_eq!(tables, ["events", "refusals", "terms", "watcher_state"]);
}

#[tokio::test]
async fn corrupted_rows_give_errors_not_panics() {
    let dir = tempfile::tempdir().unwrap();
    let path = db(&dir);
    let store = Store::open(&path, WEEK).unwrap();
    write_all(&store, story(now_ms())).await;
    store.flush().await.unwrap();
    let conn = rusqlite::Connection::open(&path).unwrap();
    conn.execute_batch(
        "UPDATE events SET json = '{not json' WHERE revision = 101;
         UPDATE terms SET layout = 'sideways' WHERE token = 106;
         UPDATE refusals SET reason = 'bored';",
    )
    .unwrap();
    let err = store.events(None, &all()).unwrap_err();
    assert!(matches!(err, HistoryError::Json { .. }), "{err:?}");
    assert!(err.to_string().contains("event row"), "{err}");
    assert!(store.terms("db", &all()).is_err());
    assert!(store.resume_point().is_err());
    assert!(store.elections().is_err());
    assert!(store.refusals(None, &all()).is_err());
    // Untouched rows still read.
    assert_eq!(store.terms("cache", &all()).unwrap().len(), 1);
}

/// The writer runs on its own thread: a single-threaded runtime keeps
/// running its timers while 10,000 events are written.
#[test]
fn writes_do_not_block_the_runtime() {
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    rt.block_on(async {
        let dir = tempfile::tempdir().unwrap();
        let store = Store::open(&db(&dir), WEEK).unwrap();
        let ticks = Arc::new(AtomicU64::new(0));
        let ticker = {
            let ticks = ticks.clone();
            tokio::spawn(async move {
                let mut interval = tokio::time::interval(Duration::from_millis(1));
                // No catching up in bursts: a blocked runtime shows as few ticks.
                interval.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
                loop {
                    interval.tick().await;
                    ticks.fetch_add(1, Ordering::Relaxed);
                }
            })
        };
        tokio::task::yield_now().await;
        let before = ticks.load(Ordering::Relaxed);
        let begin = Instant::now();
        let t0 = now_ms();
        for b in 0..1_000_i64 {
            let events = (0..10)
                .map(|i| ev(b + 1, t0, &format!("e{i}"), started(b * 10 + i + 1, "h")))
                .collect();
            store.write(batch(b + 1, events)).await.unwrap();
        }
        assert_eq!(store.flush().await.unwrap(), 1_000);
        let elapsed = begin.elapsed();
        let during = ticks.load(Ordering::Relaxed) - before;
        ticker.abort();
        println!("10,000 events in {elapsed:?}; the runtime's timer ticked {during} times");
        // Were the writes done on this (the runtime's only) thread, the
        // timer could not have run until they were over.
        // Unblocked, it ticks about once a millisecond; allow a slow machine
        // a twentieth of that.
        let expected = (elapsed.as_millis() as u64 / 20).max(3);
        assert!(
            during >= expected,
            "the timer ticked {during} times in {elapsed:?}: the runtime was blocked"
        );
        let resume = store.resume_point().unwrap().unwrap();
        assert_eq!(resume.open_terms.len(), 10_000);
    });
}

#[tokio::test]
async fn throughput_100k_events() {
    let dir = tempfile::tempdir().unwrap();
    let path = db(&dir);
    let store = Store::open(&path, WEEK).unwrap();
    let t0 = now_ms();
    let batches: Vec<Batch> = (0..1_000_i64)
        .map(|b| {
            let revision = b + 1;
            let events = (0..100_i64)
                .map(|i| {
                    let kind = match i % 4 {
                        0 => started(revision * 1000 + i, "holder-1"),
                        1 => ended(
                            revision * 1000 + i - 1,
                            "holder-1",
                            EndCause::Expired,
                            revision,
                            t0,
                        ),
                        2 => EventKind::FenceAccepted {
                            resource: "orders".into(),
                            token: revision,
                        },
                        _ => refused("orders", revision - 1, Some((revision, "holder-1"))),
                    };
                    ev(revision, t0 + i, &format!("election-{}", i % 10), kind)
                })
                .collect();
            batch(revision, events)
        })
        .collect();
    let begin = Instant::now();
    write_all(&store, batches).await;
    assert_eq!(store.flush().await.unwrap(), 1_000);
    let elapsed = begin.elapsed();
    let rate = 100_000.0 / elapsed.as_secs_f64();
    println!(
        "history write throughput: 100,000 events in batches of 100 in {elapsed:.2?}: {rate:.0} events/s"
    );
    let count: i64 = rusqlite::Connection::open(&path)
        .unwrap()
        .query_row("SELECT COUNT(*) FROM events", [], |r| r.get(0))
        .unwrap();
    assert_eq!(count, 100_000);
    assert!(rate > 2_000.0, "{rate:.0} events/s is unreasonably slow");
}

#[allow(dead_code)]
fn assert_send_sync(_: &Path) {
    fn is<T: Send + Sync>() {}
    is::<Store>();
    is::<Reader>();
    is::<HistoryError>();
}
