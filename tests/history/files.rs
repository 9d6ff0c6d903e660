//! The file itself and its outputs: CSV, time forms, a missing or foreign
//! file, the schema version and WAL, corrupted rows, migration from version 1.

use crate::fixtures::*;
use tenure::election::KeyLayout;
use tenure::events::*;
use tenure::history::*;

#[test]
fn csv_quotes_and_neutralises_formulas() {
    let row = |holder: &str, election: &str| TermRow {
        election: election.to_owned(),
        token: 451,
        holder: holder.to_owned(),
        lease_id: -5,
        layout: Some(KeyLayout::Single),
        started_at: format_ms(0),
        ended_at: Some(format_ms(1_500)),
        started_at_ms: 0,
        ended_at_ms: Some(1_500),
        started_revision: 451,
        ended_revision: Some(460),
        end_cause: Some(EndCause::Superseded),
        from_snapshot: false,
        duration_seconds: Some(1.5),
        duration_bounds_seconds: None,
        acting: Default::default(),
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
    assert_eq!(
        tables,
        [
            "cluster_events",
            "elections",
            "events",
            "refusals",
            "terms",
            "watcher_state"
        ]
    );
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

/// A version-1 file (terms unique per (election, token)) migrates to
/// timelines: its terms become epoch 0, open ones stay open and resumable,
/// and after a reset a repeated token is a new term, not a lost one.
#[tokio::test]
async fn a_version_1_file_migrates_and_a_reset_keeps_both_timelines() {
    let dir = tempfile::tempdir().unwrap();
    let path = db(&dir);
    {
        let conn = rusqlite::Connection::open(&path).unwrap();
        conn.execute_batch(
            "CREATE TABLE terms (election TEXT NOT NULL, token INTEGER NOT NULL,
                holder TEXT NOT NULL, lease_id INTEGER NOT NULL, layout TEXT,
                started_at_ms INTEGER NOT NULL, started_revision INTEGER NOT NULL,
                from_snapshot INTEGER NOT NULL, ended_at_ms INTEGER, ended_revision INTEGER,
                end_cause TEXT, UNIQUE (election, token));
             CREATE TABLE events (id INTEGER PRIMARY KEY, revision INTEGER NOT NULL,
                at_ms INTEGER NOT NULL, election TEXT NOT NULL, type TEXT NOT NULL,
                token INTEGER, holder TEXT, json TEXT NOT NULL);
             CREATE TABLE refusals (id INTEGER PRIMARY KEY, election TEXT NOT NULL,
                resource TEXT NOT NULL, token INTEGER NOT NULL, reason TEXT NOT NULL,
                revision INTEGER NOT NULL, at_ms INTEGER NOT NULL, current_token INTEGER,
                current_holder TEXT);
             CREATE TABLE watcher_state (key TEXT PRIMARY KEY, value INTEGER NOT NULL)
                WITHOUT ROWID;
             INSERT INTO terms VALUES ('db', 5, 'a', 7, 'single', 1000, 5, 0, NULL, NULL, NULL);
             INSERT INTO watcher_state VALUES ('resume_revision', 9);
             PRAGMA user_version = 1;",
        )
        .unwrap();
    }
    let store = Store::open(&path, WEEK).unwrap();
    let resume = store.resume_point().unwrap().expect("resume point kept");
    assert_eq!(resume.revision, 9);
    assert_eq!(resume.cluster_id, None, "not recorded before version 2");
    assert_eq!(resume.open_terms.len(), 1);
    assert_eq!(resume.open_terms[0].token, 5);

    // A reset back to revision 3: the open term ends (unknown), token 5
    // starts again in the new timeline.
    let ended = Event {
        revision: 9,
        at_ms: 2000,
        election: "db".into(),
        kind: EventKind::TermEnded {
            token: 5,
            holder: "a".into(),
            lease_id: 7,
            cause: EndCause::Unknown,
            started_revision: 5,
            started_at_ms: 1000,
            renewals: None,
        },
    };
    let reset = Event {
        revision: 3,
        at_ms: 2000,
        election: String::new(),
        kind: EventKind::Reset {
            from_revision: 9,
            to_revision: 3,
            previous_cluster_id: None,
            cluster_id: 42,
        },
    };
    let started = |rev: i64, holder: &str| Event {
        revision: rev,
        at_ms: 3000,
        election: "db".into(),
        kind: EventKind::TermStarted {
            token: 5,
            holder: holder.into(),
            lease_id: 8,
            layout: KeyLayout::Single,
            previous_holder: None,
            from_snapshot: false,
        },
    };
    store
        .write(Batch {
            revision: 3,
            events: vec![ended, reset.clone()],
        })
        .await
        .unwrap();
    store
        .write(Batch {
            revision: 5,
            events: vec![started(5, "b")],
        })
        .await
        .unwrap();
    // The same reset again (a replay) is ignored.
    store
        .write(Batch {
            revision: 3,
            events: vec![reset],
        })
        .await
        .unwrap();
    assert_eq!(store.flush().await.unwrap(), 5);
    let terms = store.terms("db", &Query::default()).unwrap();
    let got: Vec<_> = terms
        .iter()
        .map(|t| (t.holder.as_str(), t.token, t.end_cause))
        .collect();
    assert_eq!(
        got,
        [("a", 5, Some(EndCause::Unknown)), ("b", 5, None)],
        "both terms with token 5, one per timeline"
    );
    let resume = store.resume_point().unwrap().expect("resume");
    assert_eq!(resume.cluster_id, Some(42));
    assert_eq!(resume.open_terms.len(), 1);
    assert_eq!(resume.open_terms[0].holder, "b");
    let resets = store
        .events(Some(""), &Query::default())
        .unwrap()
        .into_iter()
        .filter(|e| matches!(e.kind, EventKind::Reset { .. }))
        .count();
    assert_eq!(resets, 1);
    store.close().await.unwrap();
}
