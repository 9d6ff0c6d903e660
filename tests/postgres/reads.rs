//! One `tenure serve --db postgres://…` records what a SQLite `serve`
//! records, and its API, pages and `tenure history` read it back the same.

use std::path::Path;
use std::time::{Duration, Instant};

use serde_json::Value;
use tenure::election::Client;

use crate::support::fixtures::{lead, name};
use crate::support::postgres::Postgres;
use crate::support::{Etcd, Serve};
use crate::{assert_elections_table_matches, eventually, get_json, revision};

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
    let out = std::process::Command::new(crate::support::tenure_bin())
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
    let out = std::process::Command::new(crate::support::tenure_bin())
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
    let out = std::process::Command::new(crate::support::tenure_bin())
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
