//! The shared PostgreSQL history (issue 15), against a real PostgreSQL
//! server and real etcd started by the harness:
//!
//! - one `tenure serve --db postgres://…` records what a SQLite `serve`
//!   records, and its API, pages and `tenure history` read it back the same;
//! - three replicas against one database: exactly one writes (the holder of
//!   `tenure/history-writer`), every commit fenced in the database
//!   transaction; the writer SIGKILLed, or SIGSTOPped past its TTL and then
//!   resumed, during ingest: a standby takes over, the history equals what
//!   etcd did (each transition once), and the stale writer's commit is
//!   refused (its log line and its counter);
//! - a replica whose etcd user may not write `tenure/history-writer`: its
//!   `/readyz` names etcd's refusal and the grant, and answers 503 (it can
//!   never take over) until the grant is given; then it writes.
// Tests, benches and their harness assert with unwrap/expect, spawn bare tasks
// and read the wall clock: the lints of Cargo.toml and clippy.toml hold src/.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::disallowed_methods)]

mod support;

use std::collections::BTreeMap;
use std::path::Path;
use std::time::{Duration, Instant};

use nix::sys::signal::{kill, Signal};
use nix::unistd::Pid;
use serde_json::Value;
use support::fixtures::{lead, name, ttl};
use support::postgres::Postgres;
use support::{Etcd, Serve};
use tenure::election::{CampaignOptions, Campaigned, Client};

/// Terms by (election, token): holder, and whether it ended.
type Terms = BTreeMap<(String, i64), (String, bool)>;

async fn revision(etcd: &Etcd) -> i64 {
    let mut raw = etcd.client().await;
    raw.get("any", None)
        .await
        .expect("get")
        .header()
        .expect("header")
        .revision()
}

async fn get_json(serve: &Serve, path: &str) -> Value {
    let r = reqwest::get(serve.url(path)).await.expect("GET");
    assert!(r.status().is_success(), "GET {path}: {}", r.status());
    r.json().await.expect("JSON")
}

/// Drops what depends on when a process saw an event (arrival times,
/// durations computed from them, and `unobserved` markers: whether a
/// watcher got two changes of one election in one response is timing):
/// two watchers agree on everything else.
fn timeless(v: &Value) -> Value {
    match v {
        Value::Array(a) => Value::Array(
            a.iter()
                .filter(|e| e["type"] != "unobserved")
                .map(timeless)
                .collect(),
        ),
        Value::Object(m) => Value::Object(
            m.iter()
                .filter(|(k, _)| {
                    !(k.ends_with("_ms")
                        || k.ends_with("_at")
                        || k.starts_with("duration")
                        || k.as_str() == "since"
                        || k.as_str() == "at"
                        // Which moment a margin came from depends on
                        // each replica's times (within the margin's bound).
                        || k.as_str() == "margin_against")
                })
                .map(|(k, v)| (k.clone(), timeless(v)))
                .collect(),
        ),
        v => v.clone(),
    }
}

fn tenure_history(name: &str, db: &str) -> Value {
    let out = std::process::Command::new(support::tenure_bin())
        .args(["history", name, "--json", "--db", db])
        .env_remove("TENURE_DB")
        .output()
        .expect("run tenure history");
    assert!(
        out.status.success(),
        "tenure history --db {db}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    serde_json::from_slice(&out.stdout).expect("tenure history --json")
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

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn postgres_history_reads_back_like_sqlite() {
    let etcd = Etcd::start().await;
    let pg = Postgres::start();
    let url = pg.create_database("single");
    let dir = tempfile::tempdir().expect("tempdir");
    let file = dir.path().join("history.db");
    let lite = Serve::start(&[etcd.endpoint()], &file, &[], &[]).await;
    let shared = Serve::start(&[etcd.endpoint()], Path::new(&url), &[], &[]).await;
    lite.ready().await;
    shared.ready().await;
    eventually(
        Duration::from_secs(20),
        "the only replica to write",
        async || (shared.metric("tenure_history_writer").await == Some(1.0)).then_some(()),
    )
    .await;

    let c = Client::connect(&[etcd.endpoint()], "")
        .await
        .expect("connect");
    let a = lead(&c, "orders", "a", 30).await;
    let t_a = a.token();
    assert!(a.fence("db").await.expect("fence").accepted);
    a.resign().await.expect("resign");
    let b = lead(&c, "orders", "b", 30).await;
    assert!(b.fence("db").await.expect("fence").accepted);
    assert!(
        !c.fence(&name("orders"), "db", t_a)
            .await
            .expect("fence")
            .accepted
    );
    let j = lead(&c, "jobs", "j,\"1\"", 30).await;
    c.depose(&name("jobs")).await.expect("depose");
    drop(j);
    let _k = lead(&c, "jobs", "k", 30).await;
    let rev = revision(&etcd).await;
    lite.caught_up(rev).await;
    shared.caught_up(rev).await;

    for path in [
        "/api/v1/elections/orders/terms",
        "/api/v1/elections/jobs/terms",
        "/api/v1/elections/orders/events",
        "/api/v1/elections/jobs/events",
        "/api/v1/elections/orders",
    ] {
        let want = timeless(&get_json(&lite, path).await);
        // Polled until equal; past the deadline the difference is shown.
        let deadline = Instant::now() + Duration::from_secs(20);
        let got = loop {
            let got = timeless(&get_json(&shared, path).await);
            if got == want || Instant::now() > deadline {
                break got;
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        };
        assert_eq!(got, want, "{path}");
    }
    // The election list: the same (the writer election is an election like
    // any other, seen by both).
    let names = |v: &Value| -> Vec<String> {
        v["elections"]
            .as_array()
            .expect("elections")
            .iter()
            .map(|e| e["name"].as_str().expect("name").to_owned())
            .collect()
    };
    let listed = names(&get_json(&shared, "/api/v1/elections").await);
    assert_eq!(listed, ["jobs", "orders", "tenure/history-writer"]);
    assert_eq!(names(&get_json(&lite, "/api/v1/elections").await), listed);
    // Pages render from PostgreSQL.
    for path in ["/", "/elections/orders", "/timeline"] {
        let r = reqwest::get(shared.url(path)).await.expect("GET page");
        assert_eq!(r.status(), 200, "{path}");
        let body = r.text().await.expect("page");
        assert!(body.contains("orders"), "{path} names the election");
    }
    // CSV export: byte for byte the same rows but for times.
    let csv = |s: &Serve| {
        let url = s.url("/api/v1/elections/orders/export?format=csv");
        async move {
            reqwest::get(url)
                .await
                .expect("GET")
                .text()
                .await
                .expect("csv")
        }
    };
    let (lite_csv, pg_csv) = (csv(&lite).await, csv(&shared).await);
    assert_eq!(
        lite_csv.lines().count(),
        pg_csv.lines().count(),
        "{lite_csv}\n{pg_csv}"
    );
    // `tenure history` reads PostgreSQL like a file.
    for election in ["orders", "jobs"] {
        let from_file = tenure_history(election, file.to_str().expect("utf-8 path"));
        let from_pg = tenure_history(election, &url);
        assert_eq!(timeless(&from_pg), timeless(&from_file), "{election}");
        assert!(!from_pg.as_array().expect("terms").is_empty());
    }
    // TENURE_DB names it as well as --db does.
    let out = std::process::Command::new(support::tenure_bin())
        .args(["history", "orders", "--csv"])
        .env("TENURE_DB", &url)
        .output()
        .expect("run tenure history");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert_eq!(
        String::from_utf8_lossy(&out.stdout).lines().count(),
        lite_csv.lines().count()
    );
    // A database without tenure's schema says how to create it.
    let out = std::process::Command::new(support::tenure_bin())
        .args(["history", "orders", "--db", &pg.url("postgres")])
        .output()
        .expect("run tenure history");
    assert_eq!(out.status.code(), Some(1));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("tenure serve --db"), "{err}");
    // Migrations are versioned in the database.
    assert_eq!(
        pg.psql("single", "SELECT version FROM tenure_schema"),
        tenure::history::PG_SCHEMA_VERSION.to_string()
    );
    assert_elections_table_matches(&pg, "single");
    let fence = pg.psql("single", "SELECT token FROM history_writer");
    assert!(fence.parse::<i64>().expect("token") > 0, "fence {fence}");
    assert_eq!(shared.stop().await, Some(0));
    assert_eq!(lite.stop().await, Some(0));
}

/// One `tenure serve` replica of the shared history.
/// The `elections` table (issue 23), kept by the writer's multi-row
/// statements, against the rows it summarises: no election missing or
/// extra, every count and last event time equal.
fn assert_elections_table_matches(pg: &Postgres, db: &str) {
    let differing = pg.psql(
        db,
        "SELECT COUNT(*) FROM elections e FULL JOIN (
             SELECT n,
                    (SELECT COUNT(*) FROM terms WHERE election = n) AS t,
                    (SELECT COUNT(*) FROM refusals WHERE election = n) AS r,
                    (SELECT MAX(at_ms) FROM events WHERE election = n) AS l
             FROM (SELECT election FROM events WHERE election <> ''
                   UNION SELECT election FROM terms
                   UNION SELECT election FROM refusals) AS names(n)) y
           ON e.election = y.n
         WHERE e.election IS NULL OR y.n IS NULL OR e.terms <> y.t OR e.refusals <> y.r
            OR e.last_event_ms IS DISTINCT FROM y.l",
    );
    assert_eq!(
        differing, "0",
        "elections table rows differing from the history's rows"
    );
    let known = pg.psql(db, "SELECT COUNT(*) FROM elections");
    assert!(known.parse::<i64>().expect("count") > 0, "{known}");
}

async fn replica(etcd: &Etcd, url: &str) -> Serve {
    Serve::start(
        &[etcd.endpoint()],
        Path::new(url),
        &["--writer-ttl", "2s", "--cluster-poll", "0"],
        &[],
    )
    .await
}

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

/// The fence itself, without etcd: a lower token cannot claim, nor commit
/// once a higher one has written; the schema's version is checked.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_fence_refuses_a_lower_token_in_the_transaction() {
    use tenure::election::KeyLayout;
    use tenure::events::{Batch, Event, EventKind};
    use tenure::history::{HistoryError, Reader, Store};
    let pg = Postgres::start();
    let url = pg.create_database("fence");
    let open = |token: i64| {
        let url = url.clone();
        tokio::task::spawn_blocking(move || {
            Store::open_postgres(
                &url,
                Duration::ZERO,
                token,
                &format!("w{token}"),
                support::postgres::revision_at(i64::MAX),
            )
        })
    };
    let batch = |revision: i64, token: i64| Batch {
        revision,
        events: vec![Event {
            revision,
            at_ms: tenure::events::now_ms(),
            election: "e".into(),
            kind: EventKind::TermStarted {
                token,
                holder: format!("h{token}"),
                lease_id: 1,
                layout: KeyLayout::Single,
                previous_holder: None,
                from_snapshot: false,
            },
        }],
    };
    let old = open(3).await.expect("join").expect("token 3 claims");
    old.write(batch(10, 10)).await.expect("queued");
    assert_eq!(old.flush().await.expect("token 3 commits"), 10);
    let new = open(5).await.expect("join").expect("token 5 claims");
    assert_eq!(
        pg.psql("fence", "SELECT token, holder FROM history_writer"),
        "5|w5"
    );
    // The old writer's next commit is refused inside its transaction.
    old.write(batch(11, 11)).await.expect("queued");
    let err = old.flush().await.expect_err("token 3 is fenced off");
    assert!(err.to_string().contains("refused"), "{err}");
    assert_eq!(old.refused_commits(), 1);
    drop(old);
    // Nothing of it was stored; the new writer continues from revision 10.
    assert_eq!(pg.psql("fence", "SELECT COUNT(*) FROM events"), "1");
    new.write(batch(11, 11)).await.expect("queued");
    assert_eq!(new.flush().await.expect("token 5 commits"), 11);
    // A writer with a lower token cannot even claim.
    match open(4).await.expect("join") {
        Err(e @ HistoryError::Fenced { .. }) => assert!(e.is_fenced()),
        other => panic!("token 4 claimed after 5: {other:?}"),
    }
    new.close().await.expect("close");
    let reader = {
        let url = url.clone();
        tokio::task::spawn_blocking(move || Reader::open_postgres(&url))
            .await
            .expect("join")
            .expect("reader")
    };
    let terms =
        tokio::task::spawn_blocking(move || reader.terms("e", &tenure::history::Query::default()))
            .await
            .expect("join")
            .expect("terms");
    assert_eq!(
        terms.iter().map(|t| t.token).collect::<Vec<_>>(),
        [10, 11],
        "each term once, none from the stale writer"
    );
    // A schema newer than this build is refused with the versions named.
    pg.psql("fence", "UPDATE tenure_schema SET version = 99");
    let err = tokio::task::spawn_blocking(move || Reader::open_postgres(&url))
        .await
        .expect("join")
        .expect_err("schema 99 refused");
    assert!(err.to_string().contains("newer tenure"), "{err}");
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

/// The PostgreSQL writer sends a transaction's rows as a few multi-row
/// statements (issue 23); what it stores must be what the SQLite writer,
/// one statement per event, stores from the same batches: the same terms,
/// events in the same order, refusals, and elections table. The batches
/// hold the cases where order matters: a term ended before it started
/// (recorded from its end, its later start ignored), two ends of one term
/// (the first stands), a start repeated, a reset (a new timeline repeating
/// a token), gaps, refusals; written back to back, so the writers commit
/// several per transaction.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_multi_row_writer_stores_what_the_sqlite_writer_stores() {
    use tenure::election::{FenceReason, KeyLayout};
    use tenure::events::{Batch, EndCause, Event, EventKind};
    use tenure::history::{Query, Reader, Store};

    let pg = Postgres::start();
    let url = pg.create_database("rows");
    let dir = tempfile::tempdir().expect("tempdir");
    let file = dir.path().join("rows.db");
    let u = url.clone();
    let shared = tokio::task::spawn_blocking(move || {
        Store::open_postgres(
            &u,
            Duration::ZERO,
            1,
            "w",
            support::postgres::revision_at(i64::MAX),
        )
    })
    .await
    .expect("join")
    .expect("open");
    let lite = Store::open(&file, Duration::ZERO).expect("sqlite");
    let t0 = tenure::events::now_ms() - 60_000;
    let start = |token: i64, holder: &str| EventKind::TermStarted {
        token,
        holder: holder.into(),
        lease_id: token * 7,
        layout: KeyLayout::Queue,
        previous_holder: None,
        from_snapshot: token % 3 == 0,
    };
    let end = |token: i64, cause: EndCause| EventKind::TermEnded {
        token,
        holder: format!("h{token}"),
        lease_id: token * 7,
        cause,
        started_revision: token,
        started_at_ms: t0 + token,
        renewals: None,
    };
    let refusal = |token: i64| EventKind::FenceRefused {
        resource: "db".into(),
        token,
        reason: FenceReason::StaleToken,
        current_token: Some(token + 1),
        current_holder: None,
    };
    let mut batches = Vec::new();
    let mut rev = 10;
    let mut batch = |events: Vec<(&str, EventKind)>| {
        rev += 1;
        let events = events
            .into_iter()
            .enumerate()
            .map(|(i, (e, kind))| Event {
                revision: rev,
                at_ms: t0 + rev * 100 + i as i64,
                election: e.into(),
                kind,
            })
            .collect();
        batches.push(Batch {
            revision: rev,
            events,
        });
    };
    batch(vec![("a", start(11, "h11")), ("b", start(12, "h12"))]);
    batch(vec![
        ("a", end(11, EndCause::Resigned)),
        ("a", start(13, "h13")),
        ("a", end(13, EndCause::Expired)),
        ("a", end(13, EndCause::Deleted)),
        ("b", refusal(5)),
    ]);
    // Ended before it started (in one batch), then started again.
    batch(vec![
        ("c", end(20, EndCause::Unknown)),
        ("c", start(20, "late")),
        ("c", start(21, "h21")),
        ("c", start(21, "again")),
    ]);
    batch(vec![
        (
            "",
            EventKind::Gap {
                from_revision: 14,
                to_revision: 18,
            },
        ),
        ("b", end(12, EndCause::Superseded)),
        ("b", refusal(12)),
        ("c", end(21, EndCause::Resigned)),
    ]);
    // A new timeline: tokens start over; a repeated token is a new term.
    batch(vec![
        (
            "",
            EventKind::Reset {
                from_revision: 14,
                to_revision: 3,
                previous_cluster_id: Some(1),
                cluster_id: 2,
            },
        ),
        ("a", start(11, "new-timeline")),
        ("d", end(4, EndCause::Expired)),
    ]);
    batch(vec![
        ("a", end(11, EndCause::Resigned)),
        ("a", start(15, "h15")),
    ]);
    // Stored open by one transaction; then started again and ended in one
    // flush of the next (the end folded into a start that is not inserted).
    batch(vec![("e", start(30, "h30"))]);
    batch(vec![
        ("e", start(30, "again")),
        ("e", end(30, EndCause::Resigned)),
    ]);
    let (last, first) = batches.split_last().expect("batches");
    for b in first {
        shared.write(b.clone()).await.expect("write pg");
        lite.write(b.clone()).await.expect("write sqlite");
    }
    shared.flush().await.expect("flush pg");
    lite.flush().await.expect("flush sqlite");
    shared.write(last.clone()).await.expect("write pg");
    lite.write(last.clone()).await.expect("write sqlite");
    shared.flush().await.expect("flush pg");
    lite.flush().await.expect("flush sqlite");

    let pg_reader = shared.reader();
    let lite_reader: Reader = lite.reader();
    let all = Query {
        limit: Some(tenure::history::MAX_LIMIT),
        ..Query::default()
    };
    let (p, l) = (pg_reader.clone(), lite_reader.clone());
    let (pg_view, lite_view) = tokio::task::spawn_blocking(move || {
        let view = |r: &Reader| {
            let elections = r.elections().expect("elections");
            let mut out = vec![serde_json::to_value(&elections).expect("json")];
            for e in &elections {
                out.push(
                    serde_json::to_value(r.terms(&e.election, &all).expect("terms")).expect("json"),
                );
                out.push(
                    serde_json::to_value(r.events(Some(&e.election), &all).expect("events"))
                        .expect("json"),
                );
            }
            out.push(
                serde_json::to_value(r.refusals(None, &all).expect("refusals")).expect("json"),
            );
            out.push(serde_json::to_value(r.events(None, &all).expect("events")).expect("json"));
            out
        };
        (view(&p), view(&l))
    })
    .await
    .expect("join");
    assert_eq!(pg_view.len(), lite_view.len());
    for (p, l) in pg_view.iter().zip(&lite_view) {
        assert_eq!(p, l);
    }
    // The cases did what they are there for.
    let c_terms = lite_view[1 + 2 * 2].as_array().expect("c's terms");
    let t20 = c_terms.iter().find(|t| t["token"] == 20).expect("term 20");
    assert_eq!(
        (&t20["holder"], &t20["from_snapshot"], &t20["end_cause"]),
        (
            &Value::from("h20"),
            &Value::from(true),
            &Value::from("unknown")
        ),
        "recorded from its end, its later start ignored: {t20}"
    );
    let e_terms = lite_view[1 + 4 * 2].as_array().expect("e's terms");
    let t30 = e_terms.iter().find(|t| t["token"] == 30).expect("term 30");
    assert_eq!(
        (&t30["holder"], &t30["end_cause"]),
        (&Value::from("h30"), &Value::from("resigned")),
        "stored open, then ended by a flush that starts it again: {t30}"
    );
    assert_elections_table_matches(&pg, "rows");
    // When the watcher was last live never goes backwards (a clock step
    // back, a standby's old news), in either backend.
    let later = tenure::events::now_ms() + 3_600_000;
    for at in [later, later - 5_000] {
        shared.watched(at).await.expect("watched pg");
        lite.watched(at).await.expect("watched sqlite");
        shared.flush().await.expect("flush pg");
        lite.flush().await.expect("flush sqlite");
    }
    let watched = tokio::task::spawn_blocking(move || {
        (
            pg_reader.watched_until().expect("pg"),
            lite_reader.watched_until().expect("sqlite"),
        )
    })
    .await
    .expect("join");
    assert_eq!(watched, (Some(later), Some(later)));
    let _ = shared.close().await;
    let _ = lite.close().await;
}

/// etcd refuses the writer campaign of a replica whose user may only read:
/// its `/readyz` answers 503, says so with the grant to give (and that it
/// cannot take over), and once the grant named there is given, it writes
/// and is ready. The independent record: etcd (as root) holds no writer
/// key while refused, and the fence row of PostgreSQL names it afterwards.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_replica_whose_etcd_user_cannot_write_the_writer_election_says_so_in_readyz() {
    use support::secure::{enable_auth, etcdctl};
    let etcd = Etcd::start().await;
    let ep = etcd.endpoint();
    enable_auth(&ep, &[], &[("reader", "reader-pw", "tenure-ro", "read")]);
    let root = ["--user".to_owned(), "root:root-pw".to_owned()];
    let pg = Postgres::start();
    let url = pg.create_database("refused");
    let serve = Serve::start(
        std::slice::from_ref(&ep),
        Path::new(&url),
        &["--user", "reader:reader-pw"],
        &[],
    )
    .await;
    let key = "election/tenure/history-writer";
    let (status, text) = eventually(Duration::from_secs(20), "the refusal", async || {
        let r = reqwest::get(serve.url("/readyz")).await.ok()?;
        let status = r.status().as_u16();
        let text = r.text().await.ok()?;
        // Once its watcher is live too (else that is what it says first).
        let refused = text.starts_with("not ready: etcd refuses this replica's campaign");
        (refused && text.contains("this replica: cannot take over writing"))
            .then_some((status, text))
    })
    .await;
    println!("[figure] /readyz of a replica refused by etcd ({status}):\n{text}");
    assert_eq!(status, 503, "{text}");
    for said in ["permission denied", "\"reader\"", "grant-permission", key] {
        assert!(text.contains(said), "{said}: {text}");
    }
    assert!(!text.contains("standing by"), "{text}");
    assert!(
        text.contains("history writer: none has written yet"),
        "{text}"
    );
    // etcd's own word: no candidate of the writer election exists.
    let held = etcdctl(&ep, &root, &["get", "--prefix", key, "--keys-only"]);
    assert!(held.stdout.is_empty(), "{:?}", held);
    // The grants it names, given as root: the replica then writes.
    for k in [key, "election/~end/tenure/history-writer"] {
        etcdctl(
            &ep,
            &root,
            &[
                "role",
                "grant-permission",
                "tenure-ro",
                "--prefix=true",
                "readwrite",
                k,
            ],
        );
    }
    eventually(Duration::from_secs(20), "the writer, ready", async || {
        let r = reqwest::get(serve.url("/readyz")).await.ok()?;
        let ok = r.status().is_success();
        let text = r.text().await.ok()?;
        (ok && text.contains("this replica: writing (term token ")).then_some(())
    })
    .await;
    let fence = pg.psql(
        "refused",
        "SELECT holder FROM history_writer WHERE token > 0",
    );
    assert!(fence.contains(&format!("http {}", serve.addr)), "{fence}");
}

/// etcd's own events reach the history through its writer: what the
/// poller of a replica found while it stood by (here etcd's leader, found
/// at its first poll while another holds the writer term) is recorded once
/// that replica wins, as seen at takeover (`not_before_ms` unknown), not
/// lost because it was found before.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn etcds_leader_found_while_standing_by_is_recorded_by_the_writer_that_wins_later() {
    let etcd = Etcd::start().await;
    let pg = Postgres::start();
    let db = "standby_poll";
    let url = pg.create_database(db);
    let c = Client::connect(&[etcd.endpoint()], "")
        .await
        .expect("connect");
    // Another writer's term: the replica stands by.
    let other = lead(&c, "tenure/history-writer", "elsewhere", 30).await;
    let r = Serve::start(
        &[etcd.endpoint()],
        Path::new(&url),
        &["--writer-ttl", "2s", "--cluster-poll", "200ms"],
        &[],
    )
    .await;
    eventually(
        Duration::from_secs(20),
        "the replica standing by",
        async || {
            let body = reqwest::get(r.url("/readyz"))
                .await
                .ok()?
                .text()
                .await
                .ok()?;
            body.contains("elsewhere").then_some(())
        },
    )
    .await;
    // Many polls, each finding the leader the history does not hold.
    tokio::time::sleep(Duration::from_secs(2)).await;
    let leaders = "SELECT COUNT(*) FROM cluster_events WHERE type = 'leader_changed'";
    assert_eq!(pg.psql(db, leaders), "0", "recorded with no writer");
    other.resign().await.expect("resign");
    eventually(
        Duration::from_secs(20),
        "etcd's leader recorded",
        async || (pg.psql(db, leaders) == "1").then_some(()),
    )
    .await;
    let json: Value = serde_json::from_str(&pg.psql(
        db,
        "SELECT json FROM cluster_events WHERE type = 'leader_changed'",
    ))
    .expect("JSON");
    assert!(json["not_before_ms"].is_null(), "{json}");
    assert!(json["raft_term"].as_u64() > Some(0), "{json}");
    assert_eq!(r.stop().await, Some(0));
}

/// etcd's count of watchers once it has not changed for a second.
async fn settled_watchers(etcd: &Etcd) -> f64 {
    let mut last = None;
    eventually(Duration::from_secs(30), "watchers settled", async || {
        tokio::time::sleep(Duration::from_millis(500)).await;
        let now = support::prom::etcd_watchers(&etcd.endpoint()).await?;
        let same = last == Some(now);
        last = Some(now);
        same.then_some(now)
    })
    .await
}

/// A cluster is watched once, whatever records it: the writing replica of
/// a shared history holds as many etcd watchers as a serve with a SQLite
/// history, plus what its held writer term holds (measured on a term held
/// by the election core itself), before and after a takeover; and what
/// changed meanwhile is recorded once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cluster_is_watched_once_whoever_records_it() {
    let etcd = Etcd::start().await;
    let pg = Postgres::start();
    let db = "watched_once";
    let url = pg.create_database(db);
    let none = settled_watchers(&etcd).await;
    // What one held term costs, as the election core holds it.
    let c = Client::connect(&[etcd.endpoint()], "")
        .await
        .expect("connect");
    let held = lead(&c, "held-once", "measure", 30).await;
    let term = settled_watchers(&etcd).await - none;
    held.resign().await.expect("resign");
    assert_eq!(settled_watchers(&etcd).await, none);

    let dir = tempfile::tempdir().expect("tempdir");
    let local = Serve::start(
        &[etcd.endpoint()],
        &dir.path().join("h.db"),
        &["--cluster-poll", "0"],
        &[],
    )
    .await;
    local.ready().await;
    let sqlite = settled_watchers(&etcd).await - none;
    assert!(sqlite >= 1.0, "a serve watches: {sqlite}");
    assert_eq!(local.stop().await, Some(0));
    assert_eq!(settled_watchers(&etcd).await, none);

    let first = replica(&etcd, &url).await;
    first.ready().await;
    eventually(Duration::from_secs(30), "the writer", async || {
        (first.metric("tenure_history_writer").await == Some(1.0)).then_some(())
    })
    .await;
    let writing = settled_watchers(&etcd).await - none;
    assert_eq!(
        writing,
        sqlite + term,
        "the writer: {sqlite} watcher(s) of a serve plus {term} of a held term"
    );
    // A takeover: the second replica's watcher was at the head when it won.
    let second = replica(&etcd, &url).await;
    second.ready().await;
    first.crash().await;
    let l = lead(&c, "during", "takeover", 30).await;
    let token = l.token();
    l.resign().await.expect("resign");
    eventually(Duration::from_secs(30), "the second writes", async || {
        (second.metric("tenure_history_writer").await == Some(1.0)).then_some(())
    })
    .await;
    let upto = revision(&etcd).await;
    second.caught_up(upto).await;
    eventually(Duration::from_secs(30), "the term recorded", async || {
        let n = pg.psql(
            db,
            &format!("SELECT COUNT(*) FROM terms WHERE election = 'during' AND token = {token}"),
        );
        (n == "1").then_some(())
    })
    .await;
    let after = settled_watchers(&etcd).await - none;
    assert_eq!(after, sqlite + term, "the new writer watches once too");
    let terms = pg.psql(db, "SELECT COUNT(*) FROM terms WHERE election = 'during'");
    assert_eq!(terms, "1", "recorded once");
    // Its serve loop applied the term once, though its watcher was started
    // again from before it.
    let changes = r#"tenure_election_leader_changes_total{election="during"}"#;
    assert_eq!(second.metric(changes).await, Some(1.0), "applied once");
    // A clean stop ends the term cleanly: serve's stop recorded, no error
    // noted for every replica's /readyz.
    let pid = second.pid();
    assert_eq!(second.stop().await, Some(0));
    let stopped = pg.psql(
        db,
        &format!(
            "SELECT COUNT(*) FROM cluster_events WHERE type = 'serve_stopped' \
             AND json LIKE '%\"pid\":{pid}%'"
        ),
    );
    assert_eq!(stopped, "1", "the writer recorded its own stop");
    let noted = pg.psql(
        db,
        "SELECT COALESCE(last_error, '') FROM history_writer WHERE cluster = ''",
    );
    assert_eq!(noted, "", "a clean stop is no error");
}
