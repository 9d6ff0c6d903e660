//! What the pages read while the writer has not committed yet: the summary
//! reads of a store's reader (the list, one election, a page, the count of
//! those led, the recent counts) answer with the queued batches overlaid.
//! The oracle is the writer itself: each round holds SQLite's write lock
//! from a connection of the test's own, so the writer cannot commit, reads
//! everything, lets the writer commit, and reads again. The two reads must
//! be equal (elections the history did not know before the round excepted:
//! they wait for the commit), and the first must not have been committed.

use std::collections::{BTreeMap, HashMap};
use std::time::Duration;

use rusqlite::Connection;
use tenure::election::KeyLayout;
use tenure::events::*;
use tenure::history::*;

use crate::fixtures::*;

/// A small seeded generator (xorshift64*).
struct Rng(u64);

impl Rng {
    fn below(&mut self, n: u64) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_f491_4f6c_dd1d) % n
    }
}

/// One election's row: its open term, refusals, last event (`terms` is the
/// committed count, not overlaid: left out).
type Row = (Option<OpenTerm>, u64, Option<i64>, Option<String>);

/// Every summary read the pages make, keyed so two reads compare.
#[derive(Debug, PartialEq)]
struct Reads {
    rows: BTreeMap<String, Row>,
    /// One election read alone, per name: the same fields.
    one: BTreeMap<String, (Option<OpenTerm>, u64, Option<i64>)>,
    /// Every page by cursor, 3 a page, concatenated.
    paged: Vec<String>,
    total: u64,
    leading: u64,
    recent_changes: HashMap<String, u64>,
    recent_refusals: HashMap<String, u64>,
    refusals_since: HashMap<String, u64>,
}

fn read(reader: &Reader, since: i64) -> Reads {
    let all = reader.elections().unwrap();
    let rows = all
        .iter()
        .map(|e| {
            (
                e.election.clone(),
                (
                    e.current.clone(),
                    e.refusals,
                    e.last_event_ms,
                    e.last_event_at.clone(),
                ),
            )
        })
        .collect();
    let one = all
        .iter()
        .map(|e| {
            let s = reader.election(&e.election).unwrap().unwrap();
            (e.election.clone(), (s.current, s.refusals, s.last_event_ms))
        })
        .collect();
    let (mut paged, mut after, mut totals) = (Vec::new(), None::<String>, Vec::new());
    loop {
        let from = match &after {
            Some(a) => PageFrom::After(a),
            None => PageFrom::Offset(0),
        };
        let page = reader.elections_page(from, 3).unwrap();
        totals.push(page.total);
        // Each page's rows as the list shows them.
        for e in &page.elections {
            let whole = all.iter().find(|a| a.election == e.election).unwrap();
            assert_eq!(
                e.current, whole.current,
                "{}: a page and the list",
                e.election
            );
            assert_eq!(e.refusals, whole.refusals);
        }
        after = page.elections.last().map(|e| e.election.clone());
        let done = page.elections.len() < 3;
        paged.extend(page.elections.into_iter().map(|e| e.election));
        if done {
            break;
        }
    }
    // Every page counts the same total.
    totals.dedup();
    assert_eq!(totals.len(), 1, "{totals:?}");
    let total = totals[0];
    let recent = reader.recent_between(since, "", "\u{10ffff}").unwrap();
    Reads {
        rows,
        one,
        paged,
        total,
        leading: reader.leading_count().unwrap(),
        recent_changes: recent.changes,
        recent_refusals: recent.refusals,
        refusals_since: reader.refusals_since(since).unwrap(),
    }
}

/// `reads` without the elections `new` names (not yet known to the
/// history before the round).
fn without(mut reads: Reads, new: &[String]) -> Reads {
    for n in new {
        if reads.rows.remove(n).is_some_and(|r| r.0.is_some()) {
            reads.leading -= 1;
        }
        reads.one.remove(n);
        reads.recent_changes.remove(n);
        reads.recent_refusals.remove(n);
        reads.refusals_since.remove(n);
        reads.total -= 1;
    }
    reads.paged.retain(|p| !new.contains(p));
    reads
}

/// The resume revision the file holds (committed).
fn committed(path: &std::path::Path) -> i64 {
    let conn = Connection::open(path).unwrap();
    conn.query_row(
        "SELECT value FROM watcher_state WHERE key = 'resume_revision'",
        [],
        |r| r.get(0),
    )
    .unwrap_or(0)
}

fn started_as(token: i64, holder: &str, from_snapshot: bool) -> EventKind {
    EventKind::TermStarted {
        token,
        holder: holder.to_owned(),
        lease_id: token * 10,
        layout: KeyLayout::Single,
        previous_holder: None,
        from_snapshot,
    }
}

#[tokio::test]
async fn queued_batches_read_as_their_commit_will() {
    let dir = tempfile::tempdir().unwrap();
    let path = db(&dir);
    let now = now_ms();
    let since = now - 3_600_000;
    let mut rng = Rng(0x0dd_ba11_5eed_0033);
    let mut rev = 1i64;
    // Per election: its open terms (token, start), as the generator made them.
    let mut open: HashMap<String, Vec<(i64, i64)>> = HashMap::new();
    let store = Store::open(&path, Duration::ZERO).unwrap();
    let reader = store.reader();
    let (mut overlaid_rounds, mut changed) = (0, 0usize);
    for round in 0..16 {
        let known: Vec<String> = reader
            .elections()
            .unwrap()
            .into_iter()
            .map(|e| e.election)
            .collect();
        let before = read(&reader, since);
        // The writer cannot commit while the test holds the write lock.
        let lock = Connection::open(&path).unwrap();
        lock.execute_batch("BEGIN IMMEDIATE").unwrap();
        let mut new = Vec::new();
        for _ in 0..(1 + rng.below(3)) {
            let mut events = Vec::new();
            for _ in 0..(1 + rng.below(25)) {
                let e = format!("e{:02}", rng.below(14));
                // Times from two hours ago to now.
                let at = now - 7_200_000 + rng.below(7_200_000) as i64;
                let terms = open.entry(e.clone()).or_default();
                let kind = match (rng.below(10), terms.last().copied()) {
                    (0..=2, None) | (9, Some(_)) => {
                        // A start, sometimes over a term still open (the
                        // history then holds two), sometimes from a snapshot.
                        terms.push((rev, at));
                        started_as(rev, &format!("h{rev}"), rng.below(4) == 0)
                    }
                    (0..=4, Some(_)) => {
                        // Ends one of the open terms (usually the latest).
                        let i = rng.below(terms.len() as u64) as usize;
                        let (token, start) = terms.remove(i);
                        ended(token, "h", EndCause::Deleted, token, start)
                    }
                    // An end the history never saw start.
                    (5, _) => ended(rev, "h", EndCause::Unknown, rev - 1, at - 1000),
                    (6..=7, _) => refused("db", rev, Some((rev - 1, "h"))),
                    _ => EventKind::LeaderValueChanged {
                        token: rev,
                        holder: "v".into(),
                        previous: "u".into(),
                    },
                };
                if !known.contains(&e) && !new.contains(&e) {
                    new.push(e.clone());
                }
                events.push(ev(rev, at, &e, kind));
                rev += 1;
            }
            changed += events.len();
            store.write(batch(rev - 1, events)).await.unwrap();
        }
        // Read with the batches queued: none of them is committed.
        let queued = read(&reader, since);
        assert!(committed(&path) < rev - 1, "round {round}: committed early");
        if queued != before {
            overlaid_rounds += 1;
        }
        lock.execute_batch("ROLLBACK").unwrap();
        store.flush().await.unwrap();
        assert_eq!(committed(&path), rev - 1);
        let after = read(&reader, since);
        assert_eq!(
            queued,
            without(after, &new),
            "round {round}: read while queued against read once committed (new: {new:?})"
        );
    }
    // The rounds did change what the pages show before the commits.
    assert!(
        overlaid_rounds >= 12,
        "{overlaid_rounds} of 16 rounds showed a change"
    );
    assert!(changed > 100);
    store.close().await.unwrap();
}

#[tokio::test]
async fn a_queued_reset_is_not_overlaid() {
    let dir = tempfile::tempdir().unwrap();
    let path = db(&dir);
    let now = now_ms();
    let store = Store::open(&path, Duration::ZERO).unwrap();
    let reader = store.reader();
    write_all(
        &store,
        vec![batch(10, vec![ev(10, now - 5000, "a", started(10, "old"))])],
    )
    .await;
    store.flush().await.unwrap();
    let lock = Connection::open(&path).unwrap();
    lock.execute_batch("BEGIN IMMEDIATE").unwrap();
    // A new timeline at revision 3: its term starts and the old one ends in
    // it, then a batch of it above the stored revision.
    let reset = EventKind::Reset {
        from_revision: 10,
        to_revision: 3,
        previous_cluster_id: None,
        cluster_id: 7,
    };
    store
        .write(batch(
            3,
            vec![
                ev(3, now - 100, "", reset),
                ev(
                    3,
                    now - 100,
                    "a",
                    ended(10, "old", EndCause::Unknown, 10, now),
                ),
            ],
        ))
        .await
        .unwrap();
    store
        .write(batch(11, vec![ev(11, now - 50, "a", started(11, "new"))]))
        .await
        .unwrap();
    let queued = reader.election("a").unwrap().unwrap();
    assert_eq!(
        queued.current.map(|t| t.holder),
        Some("old".to_owned()),
        "behind a queued reset nothing is overlaid: what is committed"
    );
    lock.execute_batch("ROLLBACK").unwrap();
    store.flush().await.unwrap();
    let after = reader.election("a").unwrap().unwrap();
    assert_eq!(after.current.map(|t| t.holder), Some("new".to_owned()));
    store.close().await.unwrap();
}
