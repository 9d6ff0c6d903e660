//! The `elections` table (issue 23) against the rows it summarises: after
//! random writes, retention and a migration, every summary read (the list,
//! one election, a page, the counts) equals what the `events`, `terms` and
//! `refusals` tables say, computed here with plain SQL on the file.

use std::collections::{BTreeMap, HashMap};
use std::time::Duration;

use tenure::events::*;
use tenure::history::*;

use crate::fixtures::*;

/// What the raw tables say, per election: terms, refusals, last event.
type Truth = BTreeMap<String, (u64, u64, Option<i64>)>;

fn truth(path: &std::path::Path) -> Truth {
    let conn = rusqlite::Connection::open(path).unwrap();
    let mut out = Truth::new();
    let names: Vec<String> = conn
        .prepare(
            "SELECT election FROM events WHERE election <> ''
             UNION SELECT election FROM terms UNION SELECT election FROM refusals",
        )
        .unwrap()
        .query_map([], |r| r.get(0))
        .unwrap()
        .collect::<Result<_, _>>()
        .unwrap();
    for n in names {
        let q = |sql: &str| -> Option<i64> { conn.query_row(sql, [&n], |r| r.get(0)).unwrap() };
        out.insert(
            n.clone(),
            (
                q("SELECT COUNT(*) FROM terms WHERE election = ?1").unwrap_or(0) as u64,
                q("SELECT COUNT(*) FROM refusals WHERE election = ?1").unwrap_or(0) as u64,
                q("SELECT MAX(at_ms) FROM events WHERE election = ?1"),
            ),
        );
    }
    out
}

/// Every summary read of `reader` against `truth` (and against each other).
fn check(reader: &Reader, truth: &Truth, now: i64) {
    let all = reader.elections().unwrap();
    let got: Truth = all
        .iter()
        .map(|e| (e.election.clone(), (e.terms, e.refusals, e.last_event_ms)))
        .collect();
    assert_eq!(&got, truth, "the elections table against the rows");
    let names: Vec<&str> = all.iter().map(|e| e.election.as_str()).collect();
    let mut sorted = names.clone();
    sorted.sort();
    assert_eq!(names, sorted, "by name, byte order");
    for e in &all {
        assert_eq!(reader.election(&e.election).unwrap().as_ref(), Some(e));
    }
    assert_eq!(reader.election("never-seen").unwrap(), None);
    // Pages by cursor and by offset give the same list.
    for limit in [1, 3, 7, 1000] {
        let (mut walked, mut after) = (Vec::new(), None::<String>);
        loop {
            let from = match &after {
                Some(a) => PageFrom::After(a),
                None => PageFrom::Offset(0),
            };
            let page = reader.elections_page(from, limit).unwrap();
            assert_eq!(page.total, all.len() as u64);
            let done = page.elections.len() < limit;
            after = page.elections.last().map(|e| e.election.clone());
            walked.extend(page.elections);
            if done {
                break;
            }
        }
        assert_eq!(walked, all, "by cursor, {limit} a page");
        let by_offset: Vec<ElectionSummary> = (0..=all.len() / limit)
            .flat_map(|p| {
                reader
                    .elections_page(PageFrom::Offset(p * limit), limit)
                    .unwrap()
                    .elections
            })
            .collect();
        assert_eq!(by_offset, all, "by offset, {limit} a page");
    }
    let leading = all.iter().filter(|e| e.current.is_some()).count() as u64;
    assert_eq!(reader.leading_count().unwrap(), leading);
    // Recent counts of a range of names, against the full queries.
    let since = now - 30_000;
    let changes = reader.changes_since(since).unwrap();
    let refusals = reader.refusals_since(since).unwrap();
    if let (Some(first), Some(last)) = (names.get(2), names.get(names.len().saturating_sub(3))) {
        if first <= last {
            let r = reader.recent_between(since, first, last).unwrap();
            let within = |m: &HashMap<String, u64>| -> HashMap<String, u64> {
                m.iter()
                    .filter(|(k, _)| k.as_str() >= *first && k.as_str() <= *last)
                    .map(|(k, v)| (k.clone(), *v))
                    .collect()
            };
            assert_eq!(r.changes, within(&changes));
            assert_eq!(r.refusals, within(&refusals));
        }
    }
}

#[tokio::test]
async fn the_elections_table_equals_its_rows_through_writes_retention_and_migration() {
    let dir = tempfile::tempdir().unwrap();
    let path = db(&dir);
    let now = now_ms();
    let mut rng = Rng(0x5eed_1234_abcd_0001);
    let mut rev = 1i64;
    // Per election: its open term (token, start), if any.
    let mut open: HashMap<String, (i64, i64)> = HashMap::new();
    let store = Store::open(&path, Duration::ZERO).unwrap();
    for round in 0..12 {
        let mut events = Vec::new();
        for _ in 0..60 {
            let e = format!(
                "e{:02}/{}",
                rng.below(40),
                ["x", "ü", "a b"][rng.below(3) as usize]
            );
            // Times from three hours ago to now; some rounds old, some new.
            let at = now - 3 * 3_600_000 + (round * 900_000) + rng.below(600_000) as i64;
            let kind = match (rng.below(6), open.get(&e).copied()) {
                (0..=1, None) => {
                    open.insert(e.clone(), (rev, at));
                    started(rev, "h")
                }
                (0..=2, Some((token, start))) => {
                    open.remove(&e);
                    ended(token, "h", EndCause::Resigned, token, start)
                }
                // An end of a term the history never saw start.
                (3, None) => ended(rev, "h", EndCause::Unknown, rev - 1, at - 1000),
                (4, _) => refused("db", rev, Some((rev - 1, "h"))),
                (5, _) => EventKind::FenceAccepted {
                    resource: "db".into(),
                    token: rev,
                },
                _ => EventKind::Gap {
                    from_revision: rev,
                    to_revision: rev,
                },
            };
            let election = if matches!(kind, EventKind::Gap { .. }) {
                String::new()
            } else {
                e
            };
            events.push(ev(rev, at, &election, kind));
            rev += 1;
        }
        store
            .write(Batch {
                revision: rev - 1,
                events,
            })
            .await
            .unwrap();
        store.flush().await.unwrap();
        check(&store.reader(), &truth(&path), now);
    }
    store.close().await.unwrap();

    // Retention: a writer keeping 90 minutes prunes when it starts.
    let pruner = Store::open(&path, Duration::from_secs(90 * 60)).unwrap();
    pruner.flush().await.unwrap();
    let reader = pruner.reader();
    let after_prune = truth(&path);
    assert!(after_prune.len() < 40 * 3, "something was forgotten");
    check(&reader, &after_prune, now);
    pruner.close().await.unwrap();

    // A version-3 file (no elections table) migrates to the same table.
    {
        let conn = rusqlite::Connection::open(&path).unwrap();
        conn.execute_batch(
            "DROP TABLE elections; DROP INDEX terms_seen_starting; PRAGMA user_version = 3;",
        )
        .unwrap();
    }
    let migrated = Store::open(&path, Duration::ZERO).unwrap();
    check(&migrated.reader(), &after_prune, now);
    migrated.close().await.unwrap();
}
