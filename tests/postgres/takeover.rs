//! Three replicas against one database, the writer SIGKILLed, SIGSTOPped
//! past its TTL, or stopped cleanly during ingest: a standby takes over and
//! the history equals what etcd did, each transition once.

use std::collections::BTreeMap;
use std::path::Path;
use std::time::{Duration, Instant};

use nix::sys::signal::{kill, Signal};
use nix::unistd::Pid;
use tenure::election::{CampaignOptions, Campaigned, Client};

use crate::support::fixtures::{lead, name, ttl};
use crate::support::postgres::Postgres;
use crate::support::{Etcd, Serve};
use crate::{assert_elections_table_matches, eventually, get_json, replica, revision};

/// Terms by (election, token): holder, and whether it ended.
type Terms = BTreeMap<(String, i64), (String, bool)>;

/// Which replica writes, waiting until exactly one says so.
async fn the_writer(replicas: &[Option<Serve>]) -> usize {
    eventually(Duration::from_secs(30), "exactly one writer", async || {
        let mut writers = Vec::new();
        for (i, r) in replicas.iter().enumerate() {
            if let Some(r) = r {
                if r.metric("tenure_history_writer").await == Some(1.0) {
                    writers.push(i);
                }
            }
        }
        (writers.len() == 1).then(|| writers[0])
    })
    .await
}

/// What etcd did to the elections of the workload, replayed from its own
/// log (a watch from revision 1, prev_kv): each term (election, token) with
/// its holder and whether it ended.
async fn etcd_terms(etcd: &Etcd, upto: i64) -> Terms {
    use etcd_client::{EventType, WatchOptions};
    let mut raw = etcd.client().await;
    let mut stream = raw
        .watch(
            "election/",
            Some(
                WatchOptions::new()
                    .with_prefix()
                    .with_start_revision(1)
                    .with_prev_key(),
            ),
        )
        .await
        .expect("watch");
    let mut terms = BTreeMap::new();
    let mut last = 0;
    while last < upto {
        let resp = tokio::time::timeout(Duration::from_secs(10), stream.message())
            .await
            .expect("etcd replays its log")
            .expect("watch")
            .expect("stream");
        for e in resp.events() {
            let kv = e.kv().expect("kv");
            last = last.max(kv.mod_revision());
            let key = kv.key_str().expect("utf-8").trim_start_matches("election/");
            if !key.starts_with("load-") {
                continue;
            }
            match e.event_type() {
                EventType::Put if kv.version() == 1 => {
                    terms.insert(
                        (key.to_owned(), kv.create_revision()),
                        (kv.value_str().expect("utf-8").to_owned(), false),
                    );
                }
                EventType::Delete => {
                    let prev = e.prev_kv().expect("prev_kv");
                    if let Some(t) = terms.get_mut(&(key.to_owned(), prev.create_revision())) {
                        t.1 = true;
                    }
                }
                _ => {}
            }
        }
    }
    terms
}

/// The recorded terms of the workload's elections, from the database: each
/// (election, token) with its holder and whether it ended; and how many
/// rows each has (must be one).
fn recorded_terms(pg: &Postgres, db: &str) -> (Terms, i64) {
    let rows = pg.psql(
        db,
        "SELECT election, token, holder, ended_at_ms IS NOT NULL FROM terms \
         WHERE election LIKE 'load-%' ORDER BY election, token",
    );
    let mut out = BTreeMap::new();
    for line in rows.lines().filter(|l| !l.is_empty()) {
        let f: Vec<&str> = line.split('|').collect();
        out.insert(
            (f[0].to_owned(), f[1].parse().expect("token")),
            (f[2].to_owned(), f[3] == "t"),
        );
    }
    let doubled: i64 = pg
        .psql(
            db,
            "SELECT COUNT(*) FROM (SELECT 1 FROM events WHERE election LIKE 'load-%' \
             AND type IN ('term_started', 'term_ended') \
             GROUP BY election, type, token HAVING COUNT(*) > 1) d",
        )
        .parse()
        .expect("count");
    (out, doubled)
}

/// Heavy ingest: `elections` elections, each a term started and resigned
/// over and over, until `stop` is set.
fn workload(
    c: Client,
    elections: usize,
    stop: std::sync::Arc<std::sync::atomic::AtomicBool>,
) -> tokio::task::JoinHandle<u64> {
    tokio::spawn(async move {
        let mut n = 0u64;
        while !stop.load(std::sync::atomic::Ordering::Relaxed) {
            let mut set = tokio::task::JoinSet::new();
            for e in 0..elections {
                let c = c.clone();
                let id = format!("w{n}-{e}");
                set.spawn(async move {
                    // Errors only once the test tears etcd down.
                    let opts = CampaignOptions::new(ttl(10));
                    let n = name(&format!("load-{e}"));
                    if let Ok(Campaigned::Leader(l)) = c.campaign(&n, &id, &opts).await {
                        let _ = l.resign().await;
                    }
                });
            }
            while set.join_next().await.is_some() {}
            n += 1;
        }
        n
    })
}

enum Fault {
    Kill,
    Stop,
}

async fn replicas_survive(fault: Fault, db: &str) {
    let etcd = Etcd::start().await;
    let pg = Postgres::start();
    let url = pg.create_database(db);
    let mut replicas: Vec<Option<Serve>> = Vec::new();
    for _ in 0..3 {
        replicas.push(Some(replica(&etcd, &url).await));
    }
    for r in replicas.iter().flatten() {
        r.ready().await;
    }
    let old = the_writer(&replicas).await;
    let old_token: i64 = pg
        .psql(db, "SELECT token FROM history_writer")
        .parse()
        .expect("token");

    let c = Client::connect(&[etcd.endpoint()], "")
        .await
        .expect("connect");
    let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let load = workload(c.clone(), 8, stop.clone());
    tokio::time::sleep(Duration::from_millis(1500)).await;

    let pid = Pid::from_raw(replicas[old].as_ref().expect("writer").pid());
    let faulted = Instant::now();
    match fault {
        Fault::Kill => {
            let killed = replicas[old].take().expect("writer");
            killed.crash().await;
        }
        Fault::Stop => kill(pid, Signal::SIGSTOP).expect("SIGSTOP the writer"),
    }
    // A standby takes over: the fence row moves to a newer token.
    let new_token: i64 = eventually(Duration::from_secs(20), "a new writer", async || {
        let t: i64 = pg
            .psql(db, "SELECT token FROM history_writer")
            .parse()
            .ok()?;
        (t > old_token).then_some(t)
    })
    .await;
    let takeover = faulted.elapsed();
    let kind = match fault {
        Fault::Kill => "SIGKILL",
        Fault::Stop => "SIGSTOP",
    };
    println!(
        "[figure] history writer takeover after {kind} of the writer (writer TTL 2 s): {} ms \
         (fence token {old_token} -> {new_token})",
        takeover.as_millis()
    );
    assert!(
        takeover < Duration::from_secs(10),
        "takeover took {takeover:?}"
    );

    if let Fault::Stop = fault {
        // Past the TTL and the takeover, the old writer resumes: whatever
        // it tries to commit is refused by the fence in the database.
        tokio::time::sleep(Duration::from_millis(1500)).await;
        kill(pid, Signal::SIGCONT).expect("SIGCONT the old writer");
        let stale = replicas[old].as_ref().expect("old writer");
        eventually(
            Duration::from_secs(20),
            "the stale commit refused",
            async || {
                let refused = stale
                    .metric("tenure_history_commits_refused_total")
                    .await
                    .unwrap_or(0.0);
                (refused >= 1.0).then_some(())
            },
        )
        .await;
        // It says so, and that its term is over (the two lines follow the
        // counter, so they are waited for).
        eventually(
            Duration::from_secs(10),
            "the stale writer says its commit was refused and its term lost",
            async || {
                let logs = stale.log_text();
                (logs.contains("commit(s) refused by the writer fence")
                    && logs.contains("lost the writer term"))
                .then_some(())
            },
        )
        .await;
        println!(
            "[figure] stale writer after SIGCONT: {} commit(s) refused by the fence",
            stale
                .metric("tenure_history_commits_refused_total")
                .await
                .unwrap_or(0.0)
        );
    }
    let new = the_writer(&replicas).await;
    assert_ne!(new, old, "a standby took over");

    tokio::time::sleep(Duration::from_millis(1500)).await;
    stop.store(true, std::sync::atomic::Ordering::Relaxed);
    let rounds = load.await.expect("workload");
    let upto = revision(&etcd).await;
    let want = etcd_terms(&etcd, upto).await;
    assert!(want.len() as u64 >= rounds * 8, "{} terms", want.len());
    // The writer catches up to etcd's revision.
    eventually(
        Duration::from_secs(30),
        "history at etcd's revision",
        async || {
            let r: i64 = pg
                .psql(
                    db,
                    "SELECT value FROM watcher_state WHERE key = 'resume_revision'",
                )
                .parse()
                .ok()?;
            (r >= upto).then_some(())
        },
    )
    .await;
    let (got, doubled) = recorded_terms(&pg, db);
    assert_eq!(doubled, 0, "no transition recorded twice");
    let missing: Vec<_> = want.keys().filter(|k| !got.contains_key(*k)).collect();
    let extra: Vec<_> = got.keys().filter(|k| !want.contains_key(*k)).collect();
    assert!(
        missing.is_empty(),
        "terms etcd had and history lacks: {missing:?}"
    );
    assert!(
        extra.is_empty(),
        "terms history has and etcd never had: {extra:?}"
    );
    assert_eq!(got, want, "history equals etcd's log");
    assert_elections_table_matches(&pg, db);
    println!(
        "[figure] {kind}: {} terms in {rounds} rounds over 8 elections recorded exactly once",
        want.len()
    );
    // Every replica serves the same history.
    for r in replicas.iter().flatten() {
        let listed = get_json(r, "/api/v1/elections/load-0/terms").await;
        assert_eq!(
            listed["terms"].as_array().expect("terms").len(),
            got.keys().filter(|(e, _)| e == "load-0").count()
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn three_replicas_writer_sigkilled() {
    replicas_survive(Fault::Kill, "killed").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn three_replicas_writer_sigstopped_past_its_ttl() {
    replicas_survive(Fault::Stop, "stopped").await;
}

/// A writer stopped cleanly (SIGTERM) resigns: a standby takes over at once,
/// not after the TTL, and nothing is lost across the handover.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stopped_writer_hands_over_at_once() {
    let etcd = Etcd::start().await;
    let pg = Postgres::start();
    let url = pg.create_database("handover");
    let mut replicas: Vec<Option<Serve>> = Vec::new();
    for _ in 0..2 {
        let r = Serve::start(
            &[etcd.endpoint()],
            Path::new(&url),
            &["--writer-ttl", "10s", "--cluster-poll", "0"],
            &[],
        )
        .await;
        r.ready().await;
        replicas.push(Some(r));
    }
    let old = the_writer(&replicas).await;
    let old_token: i64 = pg
        .psql("handover", "SELECT token FROM history_writer")
        .parse()
        .expect("token");
    let c = Client::connect(&[etcd.endpoint()], "")
        .await
        .expect("connect");
    let a = lead(&c, "before", "a", 30).await;
    let stopping = Instant::now();
    let writer = replicas[old].take().expect("writer");
    assert_eq!(writer.stop().await, Some(0));
    let new_token: i64 = eventually(Duration::from_secs(20), "a new writer", async || {
        let t: i64 = pg
            .psql("handover", "SELECT token FROM history_writer")
            .parse()
            .ok()?;
        (t > old_token).then_some(t)
    })
    .await;
    let took = stopping.elapsed();
    println!(
        "[figure] history writer handover after SIGTERM (writer TTL 10 s): {} ms from the \
         signal, graceful stop included (fence token {old_token} -> {new_token})",
        took.as_millis()
    );
    assert!(
        took < Duration::from_secs(5),
        "handover took {took:?}, not at once"
    );
    let t_a = a.token();
    a.resign().await.expect("resign");
    let b = lead(&c, "before", "b", 30).await;
    let upto = revision(&etcd).await;
    eventually(
        Duration::from_secs(20),
        "the new writer at etcd's revision",
        async || {
            let r: i64 = pg
                .psql(
                    "handover",
                    "SELECT value FROM watcher_state WHERE key = 'resume_revision'",
                )
                .parse()
                .ok()?;
            (r >= upto).then_some(())
        },
    )
    .await;
    let terms = pg.psql(
        "handover",
        "SELECT token, holder, COALESCE(end_cause, '-') FROM terms WHERE election = 'before' ORDER BY token",
    );
    assert_eq!(
        terms,
        format!("{t_a}|a|resigned\n{}|b|-", b.token()),
        "both terms, once each"
    );
}
