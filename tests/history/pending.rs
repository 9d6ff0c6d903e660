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
use tenure::events::*;
use tenure::history::*;

use crate::fixtures::*;

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
    /// The sorted overview's change counts.
    started_since: HashMap<String, u64>,
    /// Per election: its last term's end as the pages date "no leader
    /// since" (the terms read, and the end the summary says is queued).
    last_end: BTreeMap<String, Option<i64>>,
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
        started_since: reader.started_since(since).unwrap(),
        last_end: all
            .iter()
            .map(|e| {
                (
                    e.election.clone(),
                    last_end(reader, &e.election, since - DAY_MS),
                )
            })
            .collect(),
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
        reads.started_since.remove(n);
        reads.last_end.remove(n);
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
    // Per election: the tokens of terms ended.
    let mut closed: HashMap<String, Vec<i64>> = HashMap::new();
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
        let lock = hold(&path);
        let mut new = Vec::new();
        for _ in 0..(1 + rng.below(3)) {
            let mut events = Vec::new();
            for _ in 0..(1 + rng.below(25)) {
                let e = format!("e{:02}", rng.below(14));
                // Times from two hours ago to now.
                let at = now - 7_200_000 + rng.below(7_200_000) as i64;
                let terms = open.entry(e.clone()).or_default();
                let gone = closed.entry(e.clone()).or_default();
                let kind = match (rng.below(12), terms.last().copied()) {
                    // A start the writer ignores: of a term already ended,
                    // or of one open (a replay).
                    (10, _) if !gone.is_empty() => {
                        let token = gone[rng.below(gone.len() as u64) as usize];
                        started_as(token, "again", false)
                    }
                    (11, Some((token, _))) => started_as(token, "again", false),
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
                        gone.push(token);
                        ended(token, "h", EndCause::Deleted, token, start)
                    }
                    // An end the history never saw start (its row is
                    // inserted), or a second end of one already ended.
                    (5, _) if !gone.is_empty() && rng.below(2) == 0 => {
                        let token = gone[rng.below(gone.len() as u64) as usize];
                        ended(token, "h", EndCause::Unknown, token, at - 1000)
                    }
                    (5, _) => {
                        gone.push(rev);
                        ended(rev, "h", EndCause::Unknown, rev - 1, at - 1000)
                    }
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
            if rng.below(4) == 0 {
                // A batch at the revision just queued: the writer ignores
                // it whole.
                let e = format!("e{:02}", rng.below(14));
                let kind = refused("db", rev - 1, None);
                let again = vec![ev(rev - 1, now - 10, &e, kind)];
                store.write(batch(rev - 1, again)).await.unwrap();
            }
        }
        // Read with the batches queued: none of them is committed.
        let queued = read(&reader, since);
        assert!(committed(&path) < rev - 1, "round {round}: committed early");
        if queued != before {
            overlaid_rounds += 1;
        }
        drop(lock);
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
    let lock = hold(&path);
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
    drop(lock);
    store.flush().await.unwrap();
    let after = reader.election("a").unwrap().unwrap();
    assert_eq!(after.current.map(|t| t.holder), Some("new".to_owned()));
    store.close().await.unwrap();
}

// The review's cases: each test below reads while the writer
// is held off, then lets it commit, and compares with what it committed.

/// Holds SQLite's write lock on `path` until dropped (rolled back).
fn hold(path: &std::path::Path) -> Connection {
    let lock = Connection::open(path).unwrap();
    lock.execute_batch("BEGIN IMMEDIATE").unwrap();
    lock
}

/// What the election page (`election_view.rs` `leaderless_since`) and the
/// overview's "last term ended" (`overview.rs`) compute for a leaderless
/// election: the newest end among the terms read and the end the summary
/// says is queued, else none.
fn last_end(reader: &Reader, name: &str, from_ms: i64) -> Option<i64> {
    let q = Query {
        from_ms: Some(from_ms),
        to_ms: None,
        limit: Some(MAX_LIMIT),
    };
    let queued = reader.election(name).unwrap().and_then(|s| s.queued_end_ms);
    reader
        .terms(name, &q)
        .unwrap()
        .iter()
        .filter_map(|t| t.ended_at_ms)
        .max()
        .max(queued)
}

/// A queued end makes the summary say "no leader" while the terms the same
/// pages read are the committed ones: "no leader since" / "last term ended"
/// must name that end (the summary's `queued_end_ms`), not an older term's
/// (hours ago) for an election that had a leader a moment ago.
#[tokio::test]
async fn leaderless_since_is_not_dated_by_an_older_term_while_an_end_is_queued() {
    let dir = tempfile::tempdir().unwrap();
    let path = db(&dir);
    let now = now_ms();
    let store = Store::open(&path, Duration::ZERO).unwrap();
    let reader = store.reader();
    let (t1_start, t1_end) = (now - 6 * 3_600_000, now - 5 * 3_600_000);
    write_all(
        &store,
        vec![
            batch(10, vec![ev(10, t1_start, "a", started(10, "old"))]),
            batch(
                11,
                vec![
                    ev(
                        11,
                        t1_end,
                        "a",
                        ended(10, "old", EndCause::Deleted, 10, t1_start),
                    ),
                    ev(11, t1_end, "a", started(11, "cur")),
                ],
            ),
        ],
    )
    .await;
    store.flush().await.unwrap();
    let lock = hold(&path);
    let end_at = now - 10;
    store
        .write(batch(
            12,
            vec![ev(
                12,
                end_at,
                "a",
                ended(11, "cur", EndCause::Deleted, 11, t1_end),
            )],
        ))
        .await
        .unwrap();
    let day_ago = now - DAY_MS;
    let head = reader.election("a").unwrap().unwrap().current;
    let since_queued = last_end(&reader, "a", day_ago);
    drop(lock);
    store.flush().await.unwrap();
    let since_committed = last_end(&reader, "a", day_ago);
    assert_eq!(since_committed, Some(end_at));
    if head.is_none() {
        // The page says "no leader" now: its "since" must be the end
        // it will show once committed, not an older term's.
        assert_eq!(
            since_queued, since_committed,
            "queued: head says no leader, but 'no leader since' reads the older end {t1_end} \
             (5 h ago) instead of {end_at}"
        );
    }
    store.close().await.unwrap();
}

/// The writer ignores a start of a term it holds already (INSERT OR
/// IGNORE, ended or not): the overlay must neither open it again nor count
/// it as a change. Here the term ended (its end was seen without its start,
/// the insert path), then its start arrives in a later batch.
#[tokio::test]
async fn a_start_of_a_term_already_ended_reads_as_the_writer_writes() {
    let dir = tempfile::tempdir().unwrap();
    let path = db(&dir);
    let now = now_ms();
    let store = Store::open(&path, Duration::ZERO).unwrap();
    let reader = store.reader();
    write_all(
        &store,
        vec![batch(
            20,
            vec![ev(
                20,
                now - 2000,
                "a",
                ended(7, "h", EndCause::Unknown, 7, now - 3000),
            )],
        )],
    )
    .await;
    store.flush().await.unwrap();
    let lock = hold(&path);
    store
        .write(batch(21, vec![ev(21, now - 1000, "a", started(7, "h"))]))
        .await
        .unwrap();
    let since = now - 3_600_000;
    let read = || {
        (
            reader
                .election("a")
                .unwrap()
                .unwrap()
                .current
                .map(|t| t.token),
            reader.leading_count().unwrap(),
            reader.recent_between(since, "a", "a").unwrap().changes,
        )
    };
    let queued = read();
    drop(lock);
    store.flush().await.unwrap();
    let committed = read();
    assert_eq!(committed.0, None, "the writer kept the term ended");
    assert_eq!(
        queued, committed,
        "read while queued against read once committed"
    );
    store.close().await.unwrap();
}

/// The writer compares each batch with the resume revision as it moves
/// through the queue (`apply_batch`: `s.resume` is the running one), so a
/// batch at or below a queued batch's revision is ignored: the overlay
/// must ignore it too (here: a refusal counted once, not twice).
#[tokio::test]
async fn a_batch_at_a_queued_revision_is_counted_once() {
    let dir = tempfile::tempdir().unwrap();
    let path = db(&dir);
    let now = now_ms();
    let store = Store::open(&path, Duration::ZERO).unwrap();
    let reader = store.reader();
    write_all(
        &store,
        vec![batch(30, vec![ev(30, now - 5000, "a", started(30, "h"))])],
    )
    .await;
    store.flush().await.unwrap();
    let lock = hold(&path);
    for _ in 0..2 {
        store
            .write(batch(
                31,
                vec![ev(31, now - 1000, "a", refused("db", 29, Some((30, "h"))))],
            ))
            .await
            .unwrap();
    }
    let since = now - 3_600_000;
    let read = || {
        (
            reader.election("a").unwrap().unwrap().refusals,
            reader.refusals_since(since).unwrap(),
        )
    };
    let queued = read();
    drop(lock);
    store.flush().await.unwrap();
    let committed = read();
    assert_eq!(committed.0, 1, "the writer stored one refusal");
    assert_eq!(
        queued, committed,
        "read while queued against read once committed"
    );
    store.close().await.unwrap();
}

/// The overview sorted or filtered counts "changes 24 h" with
/// `started_since`; sorted by name, with `recent_between`: both are
/// overlaid, so one moment has one count.
#[tokio::test]
async fn started_since_and_recent_between_agree_while_queued() {
    let dir = tempfile::tempdir().unwrap();
    let path = db(&dir);
    let now = now_ms();
    let store = Store::open(&path, Duration::ZERO).unwrap();
    let reader = store.reader();
    write_all(
        &store,
        vec![batch(40, vec![ev(40, now - 5000, "a", started(40, "h"))])],
    )
    .await;
    store.flush().await.unwrap();
    let lock = hold(&path);
    store
        .write(batch(
            41,
            vec![
                ev(
                    41,
                    now - 1000,
                    "a",
                    ended(40, "h", EndCause::Deleted, 40, now - 5000),
                ),
                ev(41, now - 1000, "a", started(41, "g")),
            ],
        ))
        .await
        .unwrap();
    let day_ago = now - DAY_MS;
    let sorted = reader.started_since(day_ago).unwrap().get("a").copied();
    let by_name = reader
        .recent_between(day_ago, "a", "a")
        .unwrap()
        .changes
        .get("a")
        .copied();
    drop(lock);
    store.flush().await.unwrap();
    assert_eq!(
        sorted, by_name,
        "the overview's two change counts for one moment"
    );
    store.close().await.unwrap();
}

/// Cost of the overlaid reads at 100,000 elections (a measurement, not a
/// check: `cargo test --release --test history -- --ignored cost`).
#[tokio::test]
#[ignore]
async fn cost_of_overlaid_reads_at_100k() {
    use std::time::Instant;
    let n = 100_000i64;
    let dir = tempfile::tempdir().unwrap();
    let path = db(&dir);
    let now = now_ms();
    let store = Store::open(&path, Duration::ZERO).unwrap();
    let reader = store.reader();
    let name = |i: i64| format!("e{i:06}");
    let starts = (0..n)
        .map(|i| ev(10, now - 60_000, &name(i), started(10 + i, "h")))
        .collect();
    store.write(batch(10, starts)).await.unwrap();
    store.flush().await.unwrap();
    let reads = |label: &str| {
        let t = Instant::now();
        let _ = reader.election(&name(n / 2)).unwrap();
        let one = t.elapsed();
        let t = Instant::now();
        let _ = reader
            .recent_between(now - 3_600_000, &name(7), &name(7))
            .unwrap();
        let recent_one = t.elapsed();
        let t = Instant::now();
        let _ = reader.elections_page(PageFrom::Offset(0), 1000).unwrap();
        let page = t.elapsed();
        let t = Instant::now();
        let _ = reader
            .recent_between(now - 3_600_000, &name(0), &name(999))
            .unwrap();
        let recent_page = t.elapsed();
        let t = Instant::now();
        let led = reader.leading_count().unwrap();
        let leading = t.elapsed();
        let t = Instant::now();
        let _ = reader.refusals_since(now - DAY_MS).unwrap();
        let refusals = t.elapsed();
        let t = Instant::now();
        let _ = reader.elections().unwrap();
        let all = t.elapsed();
        eprintln!(
            "{label}: election {one:?}, recent(one) {recent_one:?}, page(1000) {page:?}, \
             recent(page) {recent_page:?}, leading {leading:?} (={led}), refusals_since {refusals:?}, \
             elections() {all:?}"
        );
    };
    reads("committed, nothing queued");
    // One mass deletion queued.
    let lock = hold(&path);
    let ends = (0..n)
        .map(|i| {
            ev(
                11,
                now,
                &name(i),
                ended(10 + i, "h", EndCause::Deleted, 10, now - 60_000),
            )
        })
        .collect();
    store.write(batch(11, ends)).await.unwrap();
    let t = Instant::now();
    let _ = reader.election(&name(1)).unwrap();
    eprintln!("first overlaid read (builds the index): {:?}", t.elapsed());
    reads("one 100,000-event batch queued");
    drop(lock);
    let t = Instant::now();
    store.flush().await.unwrap();
    eprintln!("commit after release: {:?}", t.elapsed());
    // Many small batches queued (a busy fleet while a commit is slow).
    let lock = hold(&path);
    for i in 0..1000 {
        store
            .write(batch(
                12 + i,
                vec![ev(12 + i, now, &name(i * 97 % n), refused("db", 1, None))],
            ))
            .await
            .unwrap();
    }
    reads("1,000 one-event batches queued");
    drop(lock);
    // In a debug build the reads above outlast the writer's busy timeout
    // and retries (about 21 s): it then stops, which is the test's lock's
    // doing, not the readers'.
    let _ = store.flush().await;
    let _ = store.close().await;
}

/// Two clusters: a queued reset of A stops A's overlay only; B's queued
/// end is shown, and reads as B's commit (after A's reset carried B's
/// open term into the new epoch).
#[tokio::test]
async fn a_reset_of_one_cluster_leaves_the_others_overlay_exact() {
    use std::sync::Arc;
    let dir = tempfile::tempdir().unwrap();
    let path = db(&dir);
    let t = now_ms() - 10_000;
    let store = Store::open(&path, Duration::ZERO).unwrap();
    let reader = store.reader();
    let (a, b): (Scope, Scope) = (Some(Arc::from("a")), Some(Arc::from("b")));
    let reset = EventKind::Reset {
        from_revision: 10,
        to_revision: 5,
        previous_cluster_id: None,
        cluster_id: 9,
    };
    store
        .write_in(
            a.clone(),
            batch(10, vec![ev(10, t, "a/jobs", started(10, "x"))]),
        )
        .await
        .unwrap();
    store
        .write_in(
            b.clone(),
            batch(
                500,
                vec![
                    ev(500, t, "b/jobs", started(500, "y")),
                    ev(500, t, "b/web", started(499, "v")),
                ],
            ),
        )
        .await
        .unwrap();
    store.flush().await.unwrap();
    let lock = hold(&path);
    store
        .write_in(a.clone(), batch(5, vec![ev(5, t + 1, "a/", reset)]))
        .await
        .unwrap();
    store
        .write_in(
            b.clone(),
            batch(
                501,
                vec![ev(
                    501,
                    t + 2,
                    "b/jobs",
                    ended(500, "y", EndCause::Resigned, 500, t),
                )],
            ),
        )
        .await
        .unwrap();
    let current = |r: &Reader, n: &str| r.election(n).unwrap().unwrap().current.map(|c| c.token);
    let queued = (current(&reader, "b/jobs"), current(&reader, "b/web"));
    let a_queued = current(&reader, "a/jobs");
    drop(lock);
    store.flush().await.unwrap();
    let committed = (current(&reader, "b/jobs"), current(&reader, "b/web"));
    assert_eq!(queued, (None, Some(499)));
    assert_eq!(queued, committed);
    // A's term: open until the reset is committed (late), then not.
    assert_eq!(a_queued, Some(10));
    assert_eq!(current(&reader, "a/jobs"), None);
    store.close().await.unwrap();
}
