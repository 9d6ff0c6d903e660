//! One shared PostgreSQL history over two etcd clusters, written by a
//! writer per cluster, against real processes: two etcd servers, one
//! PostgreSQL server, three `tenure serve --cluster a=… --cluster b=…`
//! replicas.
//!
//! - the replica writing cluster a SIGKILLed: another takes a over within
//!   the writer TTL and a takeover, while b's writer, its fence row and its
//!   history are untouched;
//! - a partition between one replica and cluster a only: that replica gives
//!   up writing a (another takes it over) and keeps writing b;
//! - cluster a's etcd down for a minute and back: a's recording stops and
//!   resumes, b's history is whole all along.
//!
//! Every check compares the history with each etcd's own log (a watch of
//! the test's own from revision 1), never with tenure's output.
//!
//! The files, by scenario: `writers.rs` (a writer killed or cut off),
//! `etcd_down.rs` (an etcd down and back, or restored), `rename.rs` (a
//! one-cluster history named), `identity.rs` (a name bound to its etcd:
//! swapped names, an endpoint moved to another etcd). The helpers they share
//! (replicas, etcd's own log, the recorded terms, fence rows, the load) are
//! here.
// Tests, benches and their harness assert with unwrap/expect, spawn bare tasks
// and read the wall clock: the lints of Cargo.toml and clippy.toml hold src/.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::disallowed_methods)]

#[path = "../support/mod.rs"]
mod support;

mod etcd_down;
mod identity;
mod rename;
mod writers;

use std::collections::BTreeMap;
use std::path::Path;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use tenure::election::{CampaignOptions, Campaigned, Client};

use support::fixtures::{name, ttl};
use support::postgres::Postgres;
use support::{Etcd, Serve};

/// Terms by (election, token): holder, and whether it ended.
type Terms = BTreeMap<(String, i64), (String, bool)>;

async fn replica(a: &str, b: &str, url: &str) -> Serve {
    replica_ttl(a, b, url, "2s").await
}

/// [`replica`] with a writer TTL of `ttl` (`10s`).
async fn replica_ttl(a: &str, b: &str, url: &str, ttl: &str) -> Serve {
    let (a, b) = (format!("a={a}"), b.to_owned());
    let b_flag = format!("b={b}");
    Serve::start(
        std::slice::from_ref(&b),
        Path::new(url),
        &[
            "--cluster",
            &a,
            "--cluster",
            &b_flag,
            "--writer-ttl",
            ttl,
            "--cluster-poll",
            "0",
        ],
        &[],
    )
    .await
}

/// Polls `f` until it returns `Some`, for at most `within`.
async fn eventually<T>(within: Duration, what: &str, mut f: impl AsyncFnMut() -> Option<T>) -> T {
    let deadline = Instant::now() + within;
    loop {
        if let Some(v) = f().await {
            return v;
        }
        assert!(Instant::now() < deadline, "timed out waiting for {what}");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// Cluster `c`'s fence row: token and holder (`None`: no writer yet).
fn fence(pg: &Postgres, db: &str, c: &str) -> Option<(i64, String)> {
    let row = pg.psql(
        db,
        &format!("SELECT token, holder FROM history_writer WHERE cluster = '{c}' AND token > 0"),
    );
    let (token, holder) = row.trim().split_once('|')?;
    Some((token.parse().ok()?, holder.to_owned()))
}

/// Which replica a fence holder is (its candidate id ends in its address).
fn which(replicas: &[Option<Serve>], holder: &str) -> Option<usize> {
    replicas.iter().position(|r| {
        r.as_ref()
            .is_some_and(|r| holder.ends_with(&format!("http {}", r.addr)))
    })
}

/// Cluster `c`'s writer, once its fence names a live replica and it has
/// committed (its watcher loaded etcd's snapshot: what follows is recorded
/// as it happens).
async fn writer_of(pg: &Postgres, db: &str, c: &str, replicas: &[Option<Serve>]) -> usize {
    eventually(Duration::from_secs(30), "a writer", async || {
        let committed =
            format!("SELECT COUNT(*) FROM watcher_state WHERE key = 'resume_revision@{c}'");
        (pg.psql(db, &committed) == "1").then_some(())?;
        which(replicas, &fence(pg, db, c)?.1)
    })
    .await
}

async fn revision(etcd: &Etcd) -> i64 {
    let mut raw = etcd.client().await;
    raw.get("any", None)
        .await
        .expect("get")
        .header()
        .expect("header")
        .revision()
}

/// What etcd did to every election, replayed from its own log (a watch from
/// revision 1, prev_kv): each term (election, token) with its holder and
/// whether it ended.
async fn etcd_terms(etcd: &Etcd, upto: i64) -> Terms {
    use etcd_client::{EventType, WatchOptions};
    let mut raw = etcd.client().await;
    let opts = WatchOptions::new()
        .with_prefix()
        .with_start_revision(1)
        .with_prev_key();
    let mut stream = raw.watch("election/", Some(opts)).await.expect("watch");
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
            if !(key.starts_with("load-") || key == "tenure/history-writer") {
                continue;
            }
            match e.event_type() {
                EventType::Put if kv.version() == 1 => {
                    let holder = kv.value_str().expect("utf-8").to_owned();
                    terms.insert((key.to_owned(), kv.create_revision()), (holder, false));
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

/// Cluster `c`'s recorded terms of the same elections (names without
/// `c/`), and how many transitions were recorded twice (must be none).
fn recorded_terms(pg: &Postgres, db: &str, c: &str) -> (Terms, i64) {
    let rows = pg.psql(
        db,
        &format!(
            "SELECT election, token, holder, ended_at_ms IS NOT NULL FROM terms \
             WHERE election LIKE '{c}/load-%' OR election = '{c}/tenure/history-writer' \
             ORDER BY election, token"
        ),
    );
    let mut out = BTreeMap::new();
    for line in rows.lines().filter(|l| !l.is_empty()) {
        let f: Vec<&str> = line.split('|').collect();
        let e = f[0].strip_prefix(&format!("{c}/")).expect("qualified");
        out.insert(
            (e.to_owned(), f[1].parse().expect("token")),
            (f[2].to_owned(), f[3] == "t"),
        );
    }
    let doubled: i64 = pg
        .psql(
            db,
            &format!(
                "SELECT COUNT(*) FROM (SELECT 1 FROM events WHERE election LIKE '{c}/%' \
                 AND type IN ('term_started', 'term_ended') \
                 GROUP BY election, type, token HAVING COUNT(*) > 1) d"
            ),
        )
        .parse()
        .expect("count");
    (out, doubled)
}

/// The recorded gaps of cluster `c` (a watch that lost changes).
fn gaps(pg: &Postgres, db: &str, c: &str) -> i64 {
    pg.psql(
        db,
        &format!("SELECT COUNT(*) FROM events WHERE election LIKE '{c}/%' AND type = 'gap'"),
    )
    .parse()
    .expect("count")
}

/// Heavy ingest into one cluster: `elections` elections, each a term
/// started and resigned over and over, until `stop` is set.
fn workload(c: Client, elections: usize, stop: Arc<AtomicBool>) -> tokio::task::JoinHandle<u64> {
    tokio::spawn(async move {
        let mut n = 0u64;
        while !stop.load(Ordering::Relaxed) {
            let mut set = tokio::task::JoinSet::new();
            for e in 0..elections {
                let c = c.clone();
                let id = format!("w{n}-{e}");
                set.spawn(async move {
                    // Errors only while its etcd is down or torn down.
                    let opts = CampaignOptions::new(ttl(10));
                    let n = name(&format!("load-{e}"));
                    if let Ok(Ok(Campaigned::Leader(l))) =
                        tokio::time::timeout(Duration::from_secs(5), c.campaign(&n, &id, &opts))
                            .await
                    {
                        let _ = l.resign().await;
                    }
                });
            }
            while set.join_next().await.is_some() {}
            if n % 4 == 3 {
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
            n += 1;
        }
        n
    })
}

/// Load on both clusters until stopped.
struct Load {
    stop: Arc<AtomicBool>,
    tasks: Vec<tokio::task::JoinHandle<u64>>,
}

impl Load {
    async fn start(etcds: &[&Etcd]) -> Load {
        let stop = Arc::new(AtomicBool::new(false));
        let mut tasks = Vec::new();
        for e in etcds {
            let c = Client::connect(&[e.endpoint()], "").await.expect("connect");
            tasks.push(workload(c, 4, stop.clone()));
        }
        Load { stop, tasks }
    }

    async fn stop(self) {
        self.stop.store(true, Ordering::Relaxed);
        for t in self.tasks {
            t.await.expect("workload");
        }
    }
}

/// Cluster `c`'s history equals its etcd's log: every term once, none
/// extra, none missing (waiting until the history reached etcd's revision).
async fn history_equals_etcd(pg: &Postgres, db: &str, c: &str, etcd: &Etcd) -> usize {
    let upto = revision(etcd).await;
    eventually(
        Duration::from_secs(30),
        "the history at etcd's revision",
        async || {
            let r: i64 = pg
                .psql(
                    db,
                    &format!("SELECT value FROM watcher_state WHERE key = 'resume_revision@{c}'"),
                )
                .parse()
                .ok()?;
            (r >= upto).then_some(())
        },
    )
    .await;
    let want = etcd_terms(etcd, upto).await;
    let (got, doubled) = recorded_terms(pg, db, c);
    assert_eq!(doubled, 0, "cluster {c}: no transition recorded twice");
    let missing: Vec<_> = want.keys().filter(|k| !got.contains_key(*k)).collect();
    let extra: Vec<_> = got.keys().filter(|k| !want.contains_key(*k)).collect();
    if !missing.is_empty() {
        // What the history holds instead, for the failure's reader.
        for sql in [
            "SELECT election, type, revision FROM events \
             WHERE type NOT IN ('acting', 'term_started', 'term_ended') ORDER BY id DESC LIMIT 20",
            "SELECT * FROM watcher_state",
            "SELECT * FROM history_writer",
        ] {
            println!("{sql}:\n{}", pg.psql(db, sql));
        }
    }
    assert!(
        missing.is_empty(),
        "cluster {c}: etcd had, history lacks: {missing:?}"
    );
    assert!(
        extra.is_empty(),
        "cluster {c}: history has, etcd never had: {extra:?}"
    );
    assert_eq!(got, want, "cluster {c}: history equals etcd's log");
    want.len()
}

/// Samples `c`'s fence row for `during`: it must stay `want`.
async fn fence_stays(pg: &Postgres, db: &str, c: &str, want: &(i64, String), during: Duration) {
    let until = Instant::now() + during;
    while Instant::now() < until {
        assert_eq!(
            fence(pg, db, c).as_ref(),
            Some(want),
            "cluster {c}'s writer is undisturbed"
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

/// `/readyz` of `r` (status, text), and the lines of cluster `c` in it.
async fn readyz_of(r: &Serve, c: &str) -> Option<(u16, String)> {
    let resp = reqwest::get(r.url("/readyz")).await.ok()?;
    let status = resp.status().as_u16();
    let text = resp.text().await.ok()?;
    let from = text.find(&format!("cluster {c}: "))?;
    let rest = &text[from..];
    let end = rest[1..].find("\ncluster ").map_or(rest.len(), |i| i + 2);
    Some((status, rest[..end].to_owned()))
}

/// `tenure serve --db URL ARGS…` fails at once: its stderr.
async fn refused(url: &str, args: &[&str]) -> String {
    let out = tokio::time::timeout(
        Duration::from_secs(30),
        tokio::process::Command::new(support::tenure_bin())
            .args(["serve", "--listen", "127.0.0.1:0", "--db", url])
            .args(args)
            .env_remove("TENURE_PREFIX")
            .kill_on_drop(true)
            .output(),
    )
    .await
    .expect("serve refused at once")
    .expect("run tenure serve");
    assert!(!out.status.success(), "refused: {out:?}");
    String::from_utf8_lossy(&out.stderr).into_owned()
}

/// The fence row of `c` with its generation: token, holder, generation.
fn fence_row(pg: &Postgres, db: &str, c: &str) -> String {
    pg.psql(
        db,
        &format!("SELECT token, holder, generation FROM history_writer WHERE cluster = '{c}'"),
    )
}

fn resets(pg: &Postgres, db: &str) -> String {
    pg.psql(db, "SELECT COUNT(*) FROM events WHERE type = 'reset'")
}
