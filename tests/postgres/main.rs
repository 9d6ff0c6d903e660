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
//!
//! The files, by scenario: `reads.rs` (one serve reads back like SQLite),
//! `takeover.rs` (the writer killed, frozen or stopped), `fence.rs` (the
//! fence without etcd), `multi_row.rs` (the multi-row writer against the
//! SQLite one), `standby.rs` (what a replica that does not write says,
//! records and watches). The helpers they share are here.
// Tests, benches and their harness assert with unwrap/expect, spawn bare tasks
// and read the wall clock: the lints of Cargo.toml and clippy.toml hold src/.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::disallowed_methods)]

#[path = "../support/mod.rs"]
mod support;

mod fence;
mod multi_row;
mod reads;
mod standby;
mod takeover;

use std::path::Path;
use std::time::{Duration, Instant};

use serde_json::Value;

use support::postgres::Postgres;
use support::{Etcd, Serve};

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
