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
// Tests, benches and their harness assert with unwrap/expect, spawn bare tasks
// and read the wall clock: the lints of Cargo.toml and clippy.toml hold src/.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::disallowed_methods)]

mod support;

use std::collections::BTreeMap;
use std::path::Path;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use support::fixtures::{lead, name, ttl};
use support::postgres::Postgres;
use support::proxy::Proxy;
use support::{Etcd, Serve};
use tenure::election::{CampaignOptions, Campaigned, Client};

/// Terms by (election, token): holder, and whether it ended.
type Terms = BTreeMap<(String, i64), (String, bool)>;

/// The writer term's TTL the replicas run with.
const WRITER_TTL: Duration = Duration::from_secs(2);
/// What a takeover may add to the TTL: the new writer opens the database,
/// claims its fence row and resumes (3 s in `feed/writer.rs`), plus 3 s
/// for a machine shared with other builds.
const TAKEOVER_SLACK: Duration = Duration::from_secs(6);

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

/// The fence row of `c` names a term etcd itself recorded in its
/// `tenure/history-writer` election, with that holder.
async fn fence_is_an_etcd_term(pg: &Postgres, db: &str, c: &str, etcd: &Etcd) {
    let (token, holder) = fence(pg, db, c).expect("a writer");
    let terms = etcd_terms(etcd, revision(etcd).await).await;
    let term = terms.get(&("tenure/history-writer".to_owned(), token));
    assert_eq!(
        term.map(|t| t.0.as_str()),
        Some(holder.as_str()),
        "cluster {c}: fence token {token} is a writer term of its own etcd"
    );
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

/// Makes a and b written by two different replicas: while one replica
/// writes both, its b term is deposed (in b's etcd), so the next in b's
/// queue takes b. Returns (writer of a, writer of b).
async fn split_writers(
    pg: &Postgres,
    db: &str,
    b: &Etcd,
    replicas: &[Option<Serve>],
) -> (usize, usize) {
    let wa = writer_of(pg, db, "a", replicas).await;
    let wb = writer_of(pg, db, "b", replicas).await;
    if wa != wb {
        return (wa, wb);
    }
    let c = Client::connect(&[b.endpoint()], "").await.expect("connect");
    c.depose(&name("tenure/history-writer"))
        .await
        .expect("depose b's writer");
    let wb = eventually(
        Duration::from_secs(30),
        "b written by another",
        async || which(replicas, &fence(pg, db, "b")?.1).filter(|&w| w != wa),
    )
    .await;
    (writer_of(pg, db, "a", replicas).await, wb)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_writer_of_one_cluster_killed_another_takes_it_the_other_cluster_undisturbed() {
    let (ea, eb) = (Etcd::start().await, Etcd::start().await);
    let pg = Postgres::start();
    let db = "killed";
    let url = pg.create_database(db);
    let mut replicas: Vec<Option<Serve>> = Vec::new();
    for _ in 0..3 {
        replicas.push(Some(replica(&ea.endpoint(), &eb.endpoint(), &url).await));
    }
    for r in replicas.iter().flatten() {
        r.ready().await;
    }
    let (wa, wb) = split_writers(&pg, db, &eb, &replicas).await;
    assert_ne!(wa, wb);
    // Each replica says, per cluster, who writes it and since when; the
    // writer's gauge is per cluster.
    let (token_a, holder_a) = fence(&pg, db, "a").expect("a's writer");
    for r in replicas.iter().flatten() {
        let said = format!("history writer: last commit by {holder_a} (token {token_a}, ");
        eventually(
            Duration::from_secs(10),
            "/readyz names a's writer",
            async || {
                let text = reqwest::get(r.url("/readyz"))
                    .await
                    .ok()?
                    .text()
                    .await
                    .ok()?;
                let a_lines = text.split("cluster b:").next()?.to_owned();
                a_lines.contains(&said).then_some(())
            },
        )
        .await;
    }
    let gauge = |c: &str| format!("tenure_history_writer{{cluster=\"{c}\"}}");
    let writer = replicas[wa].as_ref().expect("a's writer");
    assert_eq!(writer.metric(&gauge("a")).await, Some(1.0));
    assert_eq!(writer.metric(&gauge("b")).await, Some(0.0));
    let load = Load::start(&[&ea, &eb]).await;
    tokio::time::sleep(Duration::from_millis(1500)).await;
    let (old_a, _) = fence(&pg, db, "a").expect("a's writer");
    let b_before = fence(&pg, db, "b").expect("b's writer");

    let killed = Instant::now();
    replicas[wa].take().expect("a's writer").crash().await;
    let (new_a, holder) = eventually(Duration::from_secs(30), "a new writer of a", async || {
        fence(&pg, db, "a").filter(|(t, _)| *t > old_a)
    })
    .await;
    let takeover = killed.elapsed();
    println!(
        "[figure] cluster a's writer SIGKILLed: replica {:?} took a over after {} ms \
         (writer TTL 2 s; fence token {old_a} -> {new_a}); cluster b's writer unchanged",
        which(&replicas, &holder),
        takeover.as_millis()
    );
    assert!(
        which(&replicas, &holder).is_some(),
        "a live replica writes a"
    );
    assert!(
        takeover < WRITER_TTL + TAKEOVER_SLACK,
        "takeover took {takeover:?}"
    );
    // b: the same writer, the same term, all along.
    fence_stays(&pg, db, "b", &b_before, Duration::from_secs(2)).await;
    load.stop().await;
    let na = history_equals_etcd(&pg, db, "a", &ea).await;
    let nb = history_equals_etcd(&pg, db, "b", &eb).await;
    assert_eq!(fence(&pg, db, "b").as_ref(), Some(&b_before));
    assert_eq!((gaps(&pg, db, "a"), gaps(&pg, db, "b")), (0, 0), "no gap");
    fence_is_an_etcd_term(&pg, db, "a", &ea).await;
    fence_is_an_etcd_term(&pg, db, "b", &eb).await;
    println!("[figure] SIGKILL: {na} terms of a and {nb} of b recorded exactly once");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_replica_cut_from_one_cluster_gives_it_up_and_keeps_writing_the_other() {
    let (ea, eb) = (Etcd::start().await, Etcd::start().await);
    let pg = Postgres::start();
    let db = "partition";
    let url = pg.create_database(db);
    // Replica 0 reaches a through a proxy the test can cut; it starts first
    // and so writes both clusters.
    let proxy = Proxy::start(ea.client_addr()).await;
    let mut replicas: Vec<Option<Serve>> =
        vec![Some(replica(&proxy.endpoint(), &eb.endpoint(), &url).await)];
    replicas[0].as_ref().expect("replica 0").ready().await;
    for c in ["a", "b"] {
        eventually(Duration::from_secs(30), "replica 0 writes", async || {
            (which(&replicas, &fence(&pg, db, c)?.1) == Some(0)).then_some(())
        })
        .await;
    }
    for _ in 0..2 {
        replicas.push(Some(replica(&ea.endpoint(), &eb.endpoint(), &url).await));
    }
    for r in replicas.iter().flatten() {
        r.ready().await;
    }
    let load = Load::start(&[&ea, &eb]).await;
    tokio::time::sleep(Duration::from_millis(1500)).await;
    let (old_a, _) = fence(&pg, db, "a").expect("a's writer");
    let b_before = fence(&pg, db, "b").expect("b's writer");

    let cut = Instant::now();
    proxy.partition();
    let (new_a, holder) = eventually(Duration::from_secs(30), "a new writer of a", async || {
        fence(&pg, db, "a").filter(|(t, _)| *t > old_a)
    })
    .await;
    let takeover = cut.elapsed();
    let new_writer = which(&replicas, &holder);
    println!(
        "[figure] replica 0 cut from cluster a: replica {new_writer:?} took a over after {} ms \
         (writer TTL 2 s; fence token {old_a} -> {new_a}); replica 0 still writes b",
        takeover.as_millis()
    );
    assert!(
        matches!(new_writer, Some(1 | 2)),
        "another replica writes a"
    );
    assert!(
        takeover < WRITER_TTL + TAKEOVER_SLACK,
        "takeover took {takeover:?}"
    );
    let cut_off = replicas[0].as_ref().expect("replica 0");
    eventually(Duration::from_secs(10), "replica 0 says so", async || {
        cut_off
            .log_text()
            .contains("history writer of cluster a: lost the writer term")
            .then_some(())
    })
    .await;
    // b goes on with replica 0, in the same term, through the partition.
    fence_stays(&pg, db, "b", &b_before, Duration::from_secs(4)).await;
    proxy.heal();
    tokio::time::sleep(Duration::from_secs(3)).await;
    load.stop().await;
    let na = history_equals_etcd(&pg, db, "a", &ea).await;
    let nb = history_equals_etcd(&pg, db, "b", &eb).await;
    assert_eq!(fence(&pg, db, "b").as_ref(), Some(&b_before));
    assert_eq!(
        fence(&pg, db, "a").map(|f| f.0),
        Some(new_a),
        "replica 0, back, stands by"
    );
    fence_is_an_etcd_term(&pg, db, "a", &ea).await;
    fence_is_an_etcd_term(&pg, db, "b", &eb).await;
    println!("[figure] partition: {na} terms of a and {nb} of b recorded exactly once");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn one_clusters_etcd_down_and_back_the_other_clusters_history_whole() {
    let (mut ea, eb) = (Etcd::start().await, Etcd::start().await);
    let pg = Postgres::start();
    let db = "down";
    let url = pg.create_database(db);
    let mut replicas: Vec<Option<Serve>> = Vec::new();
    for _ in 0..3 {
        replicas.push(Some(replica(&ea.endpoint(), &eb.endpoint(), &url).await));
    }
    for r in replicas.iter().flatten() {
        r.ready().await;
    }
    writer_of(&pg, db, "a", &replicas).await;
    let b_before = {
        writer_of(&pg, db, "b", &replicas).await;
        fence(&pg, db, "b").expect("b's writer")
    };
    // Only b is loaded: a's etcd goes away under its writer.
    let load_b = Load::start(&[&eb]).await;
    tokio::time::sleep(Duration::from_secs(1)).await;
    let watched = |c: &str| -> i64 {
        pg.psql(
            db,
            &format!("SELECT value FROM watcher_state WHERE key = 'watched_at_ms@{c}'"),
        )
        .parse()
        .unwrap_or(0)
    };
    ea.kill().await;
    let down_at = tenure::events::now_ms();
    let down = Duration::from_secs(60);
    // All along, b's writer stays and b's watched-until keeps moving.
    fence_stays(&pg, db, "b", &b_before, down).await;
    let a_last = watched("a");
    let b_last = watched("b");
    assert!(
        a_last <= down_at + 500,
        "a is not recorded as watched while down"
    );
    assert!(
        b_last > down_at + down.as_millis() as i64 - 5_000,
        "b recorded all along: {b_last} vs {down_at}"
    );
    ea.restart().await;
    let back = Instant::now();
    eventually(Duration::from_secs(30), "a recorded again", async || {
        (watched("a") > a_last).then_some(())
    })
    .await;
    println!(
        "[figure] cluster a's etcd down {} s: a recorded again {} ms after it came back; \
         a's watched-until stayed {} ms before the kill, b's went on",
        down.as_secs(),
        back.elapsed().as_millis(),
        down_at - a_last
    );
    let load_a = Load::start(&[&ea]).await;
    tokio::time::sleep(Duration::from_secs(2)).await;
    load_a.stop().await;
    load_b.stop().await;
    history_equals_etcd(&pg, db, "a", &ea).await;
    let nb = history_equals_etcd(&pg, db, "b", &eb).await;
    assert_eq!(fence(&pg, db, "b").as_ref(), Some(&b_before));
    assert_eq!(gaps(&pg, db, "b"), 0, "b has no gap");
    // The pages of every replica say when a was not watched.
    for r in replicas.iter().flatten() {
        r.ready().await;
    }
    println!(
        "[figure] etcd a down {} s: {nb} terms of b recorded exactly once meanwhile",
        down.as_secs()
    );
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

/// A history written without `--cluster` becomes the named cluster's whose
/// etcd it recorded; served with clusters none of which is that etcd, it
/// is refused and left as it was.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_one_cluster_history_becomes_the_named_clusters_whose_etcd_it_recorded() {
    let (ea, eb, ec) = (
        Etcd::start().await,
        Etcd::start().await,
        Etcd::start().await,
    );
    let pg = Postgres::start();
    let db = "named";
    let url = pg.create_database(db);
    // Its poller records etcd's leader: a cluster event with a dedupe key.
    let one = Serve::start(
        &[ea.endpoint()],
        Path::new(&url),
        &["--writer-ttl", "2s", "--cluster-poll", "500ms"],
        &[],
    )
    .await;
    one.ready().await;
    // Its writer has loaded etcd's snapshot: what follows is recorded as it
    // happens.
    eventually(
        Duration::from_secs(30),
        "the writer's first commit",
        async || {
            let r = pg.psql(
                db,
                "SELECT COUNT(*) FROM watcher_state WHERE key = 'resume_revision'",
            );
            (r == "1").then_some(())
        },
    )
    .await;
    let c = Client::connect(&[ea.endpoint()], "")
        .await
        .expect("connect");
    let l = support::fixtures::lead(&c, "load-0", "before", 30).await;
    l.resign().await.expect("resign");
    let upto = revision(&ea).await;
    eventually(Duration::from_secs(30), "recorded", async || {
        let r: i64 = pg
            .psql(
                db,
                "SELECT value FROM watcher_state WHERE key = 'resume_revision'",
            )
            .parse()
            .ok()?;
        (r >= upto).then_some(())
    })
    .await;
    let deduped = "SELECT COUNT(*) FROM cluster_events WHERE dedupe IS NOT NULL";
    eventually(
        Duration::from_secs(30),
        "etcd's leader recorded",
        async || (pg.psql(db, deduped) != "0").then_some(()),
    )
    .await;
    assert_eq!(one.stop().await, Some(0));
    let token_before = fence(&pg, db, "").expect("the unnamed cluster's writer").0;

    // b and c: neither is the etcd it recorded.
    let (b, cc) = (
        format!("b={}", eb.endpoint()),
        format!("c={}", ec.endpoint()),
    );
    let out = refused(&url, &["--cluster", &b, "--cluster", &cc]).await;
    assert!(
        out.contains("records one etcd cluster") && out.contains("0 of the configured clusters"),
        "{out}"
    );
    assert_eq!(
        fence(&pg, db, "").map(|f| f.0),
        Some(token_before),
        "left as it was"
    );

    let a = format!("a={}", ea.endpoint());
    let s = Serve::start(
        &[ea.endpoint()],
        Path::new(&url),
        &[
            "--cluster",
            &a,
            "--cluster",
            &b,
            "--writer-ttl",
            "2s",
            "--cluster-poll",
            "0",
        ],
        &[],
    )
    .await;
    s.ready().await;
    // It is a's now: its rows, its state, its fence row (tokens go on).
    let rows = pg.psql(
        db,
        "SELECT COUNT(*) FROM terms WHERE election NOT LIKE 'a/%' AND election NOT LIKE 'b/%'",
    );
    assert_eq!(rows, "0", "every term named under a");
    let holder = "before";
    let got = pg.psql(
        db,
        &format!("SELECT COUNT(*) FROM terms WHERE election = 'a/load-0' AND holder = '{holder}'"),
    );
    assert_eq!(
        got,
        "1",
        "{}",
        pg.psql(db, "SELECT election, epoch, token, holder FROM terms")
    );
    let keys = pg.psql(
        db,
        "SELECT key FROM watcher_state WHERE key LIKE 'resume_revision%' ORDER BY key",
    );
    assert!(keys.lines().any(|k| k == "resume_revision@a"), "{keys}");
    // etcd's own events are a's too, their dedupe keys as a's watcher
    // writes them (`a@…`), so a fact seen again is not stored twice (b's
    // are its own: `b@…`).
    let unnamed = pg.psql(
        db,
        "SELECT dedupe FROM cluster_events WHERE dedupe IS NOT NULL \
         AND dedupe NOT LIKE 'a@%' AND dedupe NOT LIKE 'b@%'",
    );
    assert_eq!(unnamed, "", "dedupe keys not a's");
    assert!(!keys.lines().any(|k| k == "resume_revision"), "{keys}");
    let (token_a, _) = eventually(Duration::from_secs(30), "a written", async || {
        fence(&pg, db, "a")
    })
    .await;
    assert!(token_a >= token_before, "{token_a} after {token_before}");
    assert_eq!(fence(&pg, db, ""), None, "no unnamed fence row any more");
    // And its page reads it back under its name.
    let r = reqwest::get(s.url("/api/v1/elections/a%2Fload-0/terms"))
        .await
        .expect("GET");
    assert!(r.status().is_success(), "{}", r.status());
    let body: serde_json::Value = r.json().await.expect("JSON");
    assert_eq!(body["terms"].as_array().expect("terms").len(), 1, "{body}");
    assert_eq!(s.stop().await, Some(0));
}

/// The fence row of `c` with its generation: token, holder, generation.
fn fence_row(pg: &Postgres, db: &str, c: &str) -> String {
    pg.psql(
        db,
        &format!("SELECT token, holder, generation FROM history_writer WHERE cluster = '{c}'"),
    )
}

/// Cluster a's etcd restored from a snapshot (its revisions back below
/// the writer token its fence row holds): a's writer resets a's fence row
/// (a new generation), a's history records the reset and a's token floor
/// is raised; b's fence row, writer and history are untouched.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn one_clusters_etcd_restored_resets_its_fence_only() {
    let (mut ea, eb) = (Etcd::start().await, Etcd::start().await);
    let dir = tempfile::tempdir().expect("tempdir");
    let snapshot = dir.path().join("a.db");
    let at = ea.snapshot_save(&snapshot).await;
    {
        let mut raw = ea.client().await;
        for i in 0..100 {
            raw.put(format!("filler/{i}"), "x", None)
                .await
                .expect("put");
        }
    }
    let pg = Postgres::start();
    let db = "restored";
    let url = pg.create_database(db);
    let mut replicas: Vec<Option<Serve>> = Vec::new();
    for _ in 0..2 {
        replicas.push(Some(replica(&ea.endpoint(), &eb.endpoint(), &url).await));
    }
    for r in replicas.iter().flatten() {
        r.ready().await;
    }
    writer_of(&pg, db, "a", &replicas).await;
    writer_of(&pg, db, "b", &replicas).await;
    let (old_a, _) = fence(&pg, db, "a").expect("a's writer");
    assert!(
        old_a > at + 100,
        "a's writer token {old_a} above the snapshot's {at}"
    );
    let b_before = fence_row(&pg, db, "b");
    let load_b = Load::start(&[&eb]).await;
    tokio::time::sleep(Duration::from_secs(1)).await;

    let restored = Instant::now();
    ea.restore(&snapshot, None).await;
    let row = eventually(Duration::from_secs(40), "a's fence reset", async || {
        let row = fence_row(&pg, db, "a");
        let f: Vec<&str> = row.split('|').collect();
        (f.len() == 3 && f[2] == "1").then_some(row)
    })
    .await;
    println!(
        "[figure] cluster a's etcd restored to revision {at}: a's fence row reset to {row} \
         {} ms after the restore; b's row {b_before} unchanged",
        restored.elapsed().as_millis()
    );
    let token: i64 = row
        .split('|')
        .next()
        .expect("token")
        .parse()
        .expect("token");
    assert!(
        token < old_a,
        "a's new timeline's token {token} below {old_a}"
    );
    fence_stays(
        &pg,
        db,
        "b",
        &fence(&pg, db, "b").expect("b"),
        Duration::from_secs(2),
    )
    .await;
    assert_eq!(fence_row(&pg, db, "b"), b_before, "b's fence row untouched");
    // a's history has its reset, b's none.
    let resets = |c: &str| -> String {
        pg.psql(
            db,
            &format!("SELECT COUNT(*) FROM events WHERE election = '{c}/' AND type = 'reset'"),
        )
    };
    eventually(Duration::from_secs(20), "a's reset recorded", async || {
        (resets("a") == "1").then_some(())
    })
    .await;
    assert_eq!(resets("b"), "0");
    // a's token floor is raised (tenure's, in a's etcd); b's is not.
    let ca = Client::connect(&[ea.endpoint()], "")
        .await
        .expect("connect");
    let cb = Client::connect(&[eb.endpoint()], "")
        .await
        .expect("connect");
    let floor = eventually(Duration::from_secs(20), "a's floor", async || {
        ca.floor().await.ok().flatten()
    })
    .await;
    assert!(floor >= old_a, "a's floor {floor} covers its old timeline");
    assert_eq!(
        cb.floor().await.expect("floor"),
        None,
        "b's floor untouched"
    );
    load_b.stop().await;
    let nb = history_equals_etcd(&pg, db, "b", &eb).await;
    assert_eq!(fence_row(&pg, db, "b"), b_before);
    println!("[figure] restore of a: {nb} terms of b recorded exactly once meanwhile");
}

/// A replica still running without `--cluster` when another one names its
/// history's cluster can no longer write it: no unnamed row appears after
/// the rename (the unnamed fence row is left with a generation no writer
/// claims), its /readyz says it is not ready, and once it stops, the named
/// cluster's writer records what happened meanwhile.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_replica_left_without_cluster_after_the_rename_writes_nothing() {
    let ea = Etcd::start().await;
    let pg = Postgres::start();
    let db = "renamed";
    let url = pg.create_database(db);
    let args = ["--writer-ttl", "2s", "--cluster-poll", "0"];
    let one = Serve::start(&[ea.endpoint()], Path::new(&url), &args, &[]).await;
    one.ready().await;
    let committed = "SELECT COUNT(*) FROM watcher_state WHERE key = 'resume_revision'";
    eventually(Duration::from_secs(30), "one's first commit", async || {
        (pg.psql(db, committed) == "1").then_some(())
    })
    .await;
    let a = format!("a={}", ea.endpoint());
    let named = [&["--cluster", a.as_str()][..], &args[..]].concat();
    let s = Serve::start(&[ea.endpoint()], Path::new(&url), &named, &[]).await;
    eventually(Duration::from_secs(30), "the rename", async || {
        let renamed = "SELECT COUNT(*) FROM watcher_state WHERE key = 'resume_revision@a'";
        (pg.psql(db, renamed) == "1").then_some(())
    })
    .await;
    // A term in a while `one` still holds a's writer term in etcd.
    let c = Client::connect(&[ea.endpoint()], "")
        .await
        .expect("connect");
    let l = support::fixtures::lead(&c, "during", "meanwhile", 30).await;
    l.resign().await.expect("resign");
    // The unnamed replica tried to record it, and was refused.
    eventually(
        Duration::from_secs(30),
        "one's commit refused",
        async || {
            let refused = one.metric("tenure_history_commits_refused_total").await?;
            (refused >= 1.0).then_some(())
        },
    )
    .await;
    let unnamed = "SELECT COUNT(*) FROM terms WHERE election NOT LIKE 'a/%'";
    assert_eq!(pg.psql(db, unnamed), "0", "an unnamed row after the rename");
    assert!(
        fence_row(&pg, db, "").ends_with("|-1"),
        "{}",
        fence_row(&pg, db, "")
    );
    // Its /readyz says why it records nothing (within the recording
    // poll's takeover allowance).
    let deadline = Instant::now() + Duration::from_secs(30);
    let (status, ready) = loop {
        let r = reqwest::get(one.url("/readyz")).await.expect("GET /readyz");
        let status = r.status().as_u16();
        let ready = r.text().await.expect("text");
        if status == 503 || Instant::now() > deadline {
            break (status, ready);
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    };
    assert_eq!(status, 503, "{ready}\n{}", one.log_text());
    eprintln!("the unnamed replica's /readyz: {ready}");
    // Once it stops, a's writer takes over and records the term.
    let code = one.stop().await;
    eprintln!("the unnamed replica exited with {code:?}");
    eventually(Duration::from_secs(30), "a/during recorded", async || {
        let during = "SELECT COUNT(*) FROM terms WHERE election = 'a/during'";
        (pg.psql(db, during) == "1").then_some(())
    })
    .await;
    assert_eq!(pg.psql(db, unnamed), "0");
    assert_eq!(s.stop().await, Some(0));
}

/// The writer of cluster a SIGKILLed, with a writer TTL of 10 s: until its
/// lease runs out nobody writes a, and a standby's `/readyz` must not name
/// the dead replica as a's writer (the fence row only says it made the last
/// commit), nor claim to write; after the takeover, it names the new
/// writer's commits and its own term. The independent record: the test's
/// own kill (its pid, its time) and the fence row read with psql.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_killed_writer_is_named_only_as_the_last_commit_until_another_takes_over() {
    let (ea, eb) = (Etcd::start().await, Etcd::start().await);
    let pg = Postgres::start();
    let db = "dead";
    let url = pg.create_database(db);
    let mut replicas: Vec<Option<Serve>> = Vec::new();
    for _ in 0..2 {
        let r = replica_ttl(&ea.endpoint(), &eb.endpoint(), &url, "10s").await;
        replicas.push(Some(r));
    }
    for r in replicas.iter().flatten() {
        r.ready().await;
    }
    let wa = writer_of(&pg, db, "a", &replicas).await;
    let standby = 1 - wa;
    let (token, dead) = fence(&pg, db, "a").expect("a's writer");
    let last_commit = format!("history writer: last commit by {dead} (token {token}, ");
    let writer = replicas[wa].as_ref().expect("a's writer");
    eventually(Duration::from_secs(10), "the writer says so", async || {
        let (_, a) = readyz_of(writer, "a").await?;
        let own = format!("this replica: writing (term token {token} since ");
        (a.contains(&own) && a.contains(&last_commit)).then_some(())
    })
    .await;
    // The standby has read that fence row too (it reads every second).
    let s = replicas[standby].as_ref().expect("standby");
    eventually(Duration::from_secs(10), "the standby says so", async || {
        let (_, a) = readyz_of(s, "a").await?;
        (a.contains(&last_commit) && a.contains("this replica: standing by")).then_some(())
    })
    .await;
    let pid = writer.pid();
    let killed = Instant::now();
    replicas[wa].take().expect("a's writer").crash().await;
    println!("[figure] killed a's writer (pid {pid}, token {token}) at {killed:?}");
    let s = replicas[standby].as_ref().expect("standby");
    let (mut looked, mut named) = (0, 0);
    // Only while the fence still holds the dead writer's token and well
    // within its TTL: the window in which nobody writes a.
    while killed.elapsed() < Duration::from_secs(6) {
        let (status, a) = readyz_of(s, "a").await.expect("/readyz");
        let fenced = fence(&pg, db, "a");
        if fenced.as_ref().map(|f| f.0) != Some(token) {
            break;
        }
        assert!(a.contains(&last_commit), "{a}");
        assert!(
            !a.contains(&format!("history writer: {dead}")),
            "/readyz presents the dead writer as a's writer: {a}"
        );
        assert!(a.contains("this replica: standing by"), "{a}");
        assert!(!a.contains("this replica: writing"), "{a}");
        if let Some(line) = a.lines().find(|l| l.contains("this replica:")) {
            // etcd's election still names it until its lease runs out:
            // said as such, with the lease counting down.
            if line.contains(&dead) {
                assert!(line.contains("from running out"), "{line}");
                named += 1;
            }
        }
        assert_eq!(status, 200, "a standby that can take over: {a}");
        if looked == 0 {
            println!("[figure] a standby's /readyz after the kill, before the takeover:\n{a}");
        }
        looked += 1;
        tokio::time::sleep(Duration::from_millis(300)).await;
    }
    assert!(looked >= 5, "the window was seen ({looked} looks)");
    assert!(named > 0, "the standby read etcd's election in the window");
    let (new, holder) = eventually(Duration::from_secs(30), "a new writer", async || {
        fence(&pg, db, "a").filter(|(t, _)| *t > token)
    })
    .await;
    println!(
        "[figure] writer TTL 10 s: a taken over after {} ms; {looked} looks at /readyz in \
         the window named the dead writer only as the last commit",
        killed.elapsed().as_millis()
    );
    assert_eq!(which(&replicas, &holder), Some(standby));
    eventually(
        Duration::from_secs(10),
        "/readyz names the new writer",
        async || {
            let (_, a) = readyz_of(s, "a").await?;
            let said = format!("history writer: last commit by {holder} (token {new}, ");
            let own = format!("this replica: writing (term token {new} since ");
            (a.contains(&said) && a.contains(&own)).then_some(())
        },
    )
    .await;
}

/// etcd's cluster id, from a read's header.
async fn cluster_id(etcd: &Etcd) -> u64 {
    let mut raw = etcd.client().await;
    raw.get("any", None)
        .await
        .expect("get")
        .header()
        .expect("header")
        .cluster_id()
}

/// The writer terms etcd's own log holds (tenure/history-writer).
async fn writer_terms(etcd: &Etcd) -> usize {
    etcd_terms(etcd, revision(etcd).await)
        .await
        .keys()
        .filter(|(e, _)| e == "tenure/history-writer")
        .count()
}

fn resets(pg: &Postgres, db: &str) -> String {
    pg.psql(db, "SELECT COUNT(*) FROM events WHERE type = 'reset'")
}

/// Config drift (issue 43.1): a second replica of a shared history started
/// with the two cluster names the other way round (`a=Y b=X` after
/// `a=X b=Y`) is refused at start, naming both etcd cluster ids, and
/// writes nothing anywhere: no token floor in either etcd, no writer
/// campaign in either, both fence rows as they were, no reset recorded.
/// Before: it said ready, recorded both etcds as restored and raised X's
/// floor to Y's revision.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_replica_with_the_cluster_names_swapped_is_refused_and_writes_nothing() {
    let (ex, ey) = (Etcd::start().await, Etcd::start().await);
    {
        // Y well ahead of X: a floor of Y's revision in X would refuse
        // every campaign there.
        let mut raw = ey.client().await;
        for i in 0..100 {
            raw.put(format!("filler/{i}"), "x", None)
                .await
                .expect("put");
        }
    }
    let pg = Postgres::start();
    let db = "drift";
    let url = pg.create_database(db);
    let replicas = vec![Some(replica(&ex.endpoint(), &ey.endpoint(), &url).await)];
    for r in replicas.iter().flatten() {
        r.ready().await;
    }
    writer_of(&pg, db, "a", &replicas).await;
    writer_of(&pg, db, "b", &replicas).await;
    let load = Load::start(&[&ex, &ey]).await;
    tokio::time::sleep(Duration::from_secs(1)).await;
    let before = (fence_row(&pg, db, "a"), fence_row(&pg, db, "b"));
    let writers = (writer_terms(&ex).await, writer_terms(&ey).await);

    let (a, b) = (
        format!("a={}", ey.endpoint()),
        format!("b={}", ex.endpoint()),
    );
    let err = refused(
        &url,
        &["--cluster", &a, "--cluster", &b, "--writer-ttl", "2s"],
    )
    .await;
    let (x, y) = (cluster_id(&ex).await, cluster_id(&ey).await);
    assert!(
        err.contains(&format!("{x:x}")) && err.contains(&format!("{y:x}")),
        "the refusal names both cluster ids ({x:x}, {y:x}): {err}"
    );
    assert!(err.contains("--adopt-etcd"), "{err}");
    println!("[figure] swapped names refused: {}", err.trim());

    load.stop().await;
    for (e, c) in [(&ex, "X"), (&ey, "Y")] {
        let client = Client::connect(&[e.endpoint()], "").await.expect("connect");
        assert_eq!(client.floor().await.expect("floor"), None, "{c}'s floor");
    }
    assert_eq!(
        (writer_terms(&ex).await, writer_terms(&ey).await),
        writers,
        "no writer campaign in either etcd"
    );
    assert_eq!(
        (fence_row(&pg, db, "a"), fence_row(&pg, db, "b")),
        before,
        "both fence rows as they were"
    );
    assert_eq!(resets(&pg, db), "0", "no reset recorded");
    // And the replica that is right records both exactly.
    history_equals_etcd(&pg, db, "a", &ex).await;
    history_equals_etcd(&pg, db, "b", &ey).await;
}

/// The same on a reconnect (issue 43.1): cluster b's endpoint (a proxy)
/// now leads to another etcd Z. The running replicas (b's writer and a
/// standby) record nothing of Z and write nothing into it (no floor, no
/// writer campaign, b's fence row kept, no reset), and `/readyz` names both ids within 20 s; when the
/// endpoint leads back to b's etcd, b is recorded again without a reset.
/// Z is taken for b only by the operator's step: served again with
/// `--adopt-etcd b=Z`, its first load is a reset, and b's token floor is
/// raised in Z.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_endpoint_that_leads_to_another_etcd_is_refused_until_adopted() {
    let (ea, eb, ez) = (
        Etcd::start().await,
        Etcd::start().await,
        Etcd::start().await,
    );
    let proxy = Proxy::start(eb.client_addr()).await;
    let pg = Postgres::start();
    let db = "moved";
    let url = pg.create_database(db);
    // Two replicas: one writes b, the other stands by in b's election.
    let mut replicas = Vec::new();
    for _ in 0..2 {
        replicas.push(Some(replica(&ea.endpoint(), &proxy.endpoint(), &url).await));
    }
    let r = replicas[0].as_ref().expect("replica");
    for r in replicas.iter().flatten() {
        r.ready().await;
    }
    writer_of(&pg, db, "a", &replicas).await;
    writer_of(&pg, db, "b", &replicas).await;
    let cb = Client::connect(&[eb.endpoint()], "")
        .await
        .expect("connect");
    let first = lead(&cb, "load-0", "before", 30).await;
    history_equals_etcd(&pg, db, "b", &eb).await;
    let b_fence = fence_row(&pg, db, "b");
    let (b, z) = (cluster_id(&eb).await, cluster_id(&ez).await);

    proxy.retarget(ez.client_addr());
    proxy.close_existing();
    let moved = Instant::now();
    let (status, text) = eventually(Duration::from_secs(20), "b refused", async || {
        readyz_of(r, "b")
            .await
            .filter(|(s, t)| *s == 503 && t.contains(&format!("{z:x}")))
    })
    .await;
    println!(
        "[figure] b's endpoint led to another etcd: /readyz {status} after {} ms: {}",
        moved.elapsed().as_millis(),
        text.trim()
    );
    assert!(text.contains(&format!("{b:x}")), "{text}");
    // Meanwhile b's etcd goes on: a handover the history must get.
    first.resign().await.expect("resign");
    let second = lead(&cb, "load-0", "meanwhile", 30).await;
    tokio::time::sleep(Duration::from_secs(4)).await;
    let cz = Client::connect(&[ez.endpoint()], "")
        .await
        .expect("connect");
    assert_eq!(cz.floor().await.expect("floor"), None, "no floor in Z");
    assert_eq!(writer_terms(&ez).await, 0, "no writer campaign in Z");
    assert_eq!(fence_row(&pg, db, "b"), b_fence, "b's fence row kept");
    assert_eq!(resets(&pg, db), "0", "no reset recorded");

    // Back to b's etcd: recorded again, the handover too, no reset.
    proxy.retarget(eb.client_addr());
    proxy.close_existing();
    eventually(Duration::from_secs(30), "b ready again", async || {
        readyz_of(r, "b").await.filter(|(s, _)| *s == 200)
    })
    .await;
    history_equals_etcd(&pg, db, "b", &eb).await;
    assert_eq!(resets(&pg, db), "0", "no reset once b's etcd is back");

    // Z again, and the operator adopts it: a reset, the floor raised in Z.
    proxy.retarget(ez.client_addr());
    proxy.close_existing();
    eventually(Duration::from_secs(20), "b refused again", async || {
        readyz_of(r, "b").await.filter(|(s, _)| *s == 503)
    })
    .await;
    let replicas = replicas;
    for r in replicas.into_iter().flatten() {
        r.stop().await;
    }
    let (a, b_flag, adopt) = (
        format!("a={}", ea.endpoint()),
        format!("b={}", proxy.endpoint()),
        format!("b={z:x}"),
    );
    let adopted = Serve::start(
        &[proxy.endpoint()],
        Path::new(&url),
        &[
            "--cluster",
            &a,
            "--cluster",
            &b_flag,
            "--writer-ttl",
            "2s",
            "--cluster-poll",
            "0",
            "--adopt-etcd",
            &adopt,
        ],
        &[],
    )
    .await;
    adopted.ready().await;
    eventually(
        Duration::from_secs(30),
        "the adoption's reset",
        async || (resets(&pg, db) == "1").then_some(()),
    )
    .await;
    let floor = eventually(Duration::from_secs(20), "b's floor in Z", async || {
        cz.floor().await.ok().flatten()
    })
    .await;
    assert!(
        floor >= second.token(),
        "Z's floor {floor} covers b's old timeline's tokens ({})",
        second.token()
    );
    drop(second);
    adopted.stop().await;
}
