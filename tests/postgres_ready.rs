//! `/readyz` of the replicas of a shared PostgreSQL history (issue 20.11):
//! when no replica records — the database refuses the writer's commits, or
//! the writer's own watch is stuck — every replica's `/readyz` says so
//! (503, which replica writes, since when, the writer's error) once etcd has
//! moved on for longer than the writer TTL and a takeover; and 200 again
//! once the history is recorded. Real etcd, real PostgreSQL (the harness's),
//! real `tenure serve` replicas.

mod support;

use std::path::Path;
use std::time::{Duration, Instant};

use support::fixtures::lead;
use support::postgres::Postgres;
use support::proxy::Proxy;
use support::{Etcd, Serve};
use tenure::election::Client;

const WRITER_TTL: &str = "2s";

async fn replica(endpoint: &str, url: &str) -> Serve {
    let r = Serve::start(
        &[endpoint.to_owned()],
        Path::new(url),
        &["--writer-ttl", WRITER_TTL, "--cluster-poll", "0"],
        &[],
    )
    .await;
    r.ready().await;
    r
}

async fn readyz(serve: &Serve) -> (u16, String) {
    match reqwest::get(serve.url("/readyz")).await {
        Ok(r) => {
            let status = r.status().as_u16();
            (status, r.text().await.unwrap_or_default())
        }
        Err(e) => (0, e.to_string()),
    }
}

/// Polls every replica's `/readyz` until each satisfies `want`; returns how
/// long each took and its last body. Panics with the last answers after
/// `within`.
async fn until_all(
    replicas: &[&Serve],
    within: Duration,
    what: &str,
    want: impl Fn(u16, &str) -> bool,
) -> Vec<(Duration, String)> {
    let started = Instant::now();
    let mut done: Vec<Option<(Duration, String)>> = vec![None; replicas.len()];
    loop {
        let mut last = Vec::new();
        for (i, r) in replicas.iter().enumerate() {
            if done[i].is_some() {
                continue;
            }
            let (status, body) = readyz(r).await;
            if want(status, &body) {
                done[i] = Some((started.elapsed(), body));
            } else {
                last.push((i, status, body));
            }
        }
        if done.iter().all(Option::is_some) {
            return done.into_iter().flatten().collect();
        }
        assert!(
            started.elapsed() < within,
            "{what}: not within {within:?}; last answers: {last:?}"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// The terms of the test's elections the shared history holds (the
/// writer election's own terms are recorded too).
fn recorded(pg: &Postgres, db: &str) -> i64 {
    pg.psql(
        db,
        "SELECT count(*) FROM terms WHERE election LIKE 'ready/%'",
    )
    .trim()
    .parse()
    .unwrap_or(-1)
}

async fn wait_recorded(pg: &Postgres, db: &str, n: i64) {
    let deadline = Instant::now() + Duration::from_secs(30);
    while recorded(pg, db) < n {
        assert!(Instant::now() < deadline, "{n} terms never recorded");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn readyz_is_503_on_every_replica_while_the_database_refuses_the_writer() {
    let etcd = Etcd::start().await;
    let pg = Postgres::start();
    let url = pg.create_database("refusing");
    let a = replica(&etcd.endpoint(), &url).await;
    let b = replica(&etcd.endpoint(), &url).await;
    let c = Client::connect(&[etcd.endpoint()], "")
        .await
        .expect("connect");
    let _first = lead(&c, "ready/one", "h1", 30).await;
    wait_recorded(&pg, "refusing", 1).await;
    until_all(&[&a, &b], Duration::from_secs(10), "ready", |s, _| s == 200).await;

    // The database refuses every new event row: the writer's commits fail,
    // it resigns, the other replica takes over and fails too.
    pg.psql(
        "refusing",
        "ALTER TABLE events ADD CONSTRAINT refuse_events CHECK (false) NOT VALID",
    );
    let moved = Instant::now();
    let _second = lead(&c, "ready/two", "h2", 30).await;
    let answers = until_all(
        &[&a, &b],
        Duration::from_secs(60),
        "503 saying nothing is recorded",
        |s, body| {
            s == 503 && body.contains("no replica has recorded") && body.contains("refuse_events")
        },
    )
    .await;
    for (i, (after, body)) in answers.iter().enumerate() {
        println!("replica {i}: 503 after {after:?} of polling: {body}");
    }
    println!("both 503 within {:?} of etcd moving on", moved.elapsed());
    assert!(recorded(&pg, "refusing") < 2, "nothing recorded meanwhile");

    // The database takes commits again: recorded, ready on every replica.
    pg.psql(
        "refusing",
        "ALTER TABLE events DROP CONSTRAINT refuse_events",
    );
    wait_recorded(&pg, "refusing", 2).await;
    until_all(&[&a, &b], Duration::from_secs(30), "ready again", |s, _| {
        s == 200
    })
    .await;
}

/// The writer's own watch is stuck (a proxy between it and etcd cuts every
/// connection part-way through a 1 MB answer), the other replica's watch is
/// fine: the other replica must not stay ready while nothing is recorded.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn readyz_is_503_on_the_other_replica_while_the_writer_is_stuck() {
    let etcd = Etcd::start().await;
    let pg = Postgres::start();
    let url = pg.create_database("stuck");
    let proxy = Proxy::start(etcd.client_addr()).await;
    // The first replica becomes the writer: through the proxy.
    let a = replica(&proxy.endpoint(), &url).await;
    let deadline = Instant::now() + Duration::from_secs(30);
    while a.metric("tenure_history_writer").await != Some(1.0) {
        assert!(Instant::now() < deadline, "the first replica never wrote");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let b = replica(&etcd.endpoint(), &url).await;
    let c = Client::connect(&[etcd.endpoint()], "")
        .await
        .expect("connect");
    let _first = lead(&c, "ready/one", "h1", 30).await;
    wait_recorded(&pg, "stuck", 1).await;

    proxy.cut_after_bytes(256 * 1024);
    let mut raw = etcd.client().await;
    let big = "x".repeat(1_000_000);
    raw.put("election/ready/big", big.as_str(), None)
        .await
        .expect("put 1 MB");
    let moved = Instant::now();
    let answers = until_all(
        &[&b],
        Duration::from_secs(60),
        "the other replica 503",
        |s, body| s == 503 && body.contains("no replica has recorded"),
    )
    .await;
    println!(
        "other replica 503 after {:?}: {}",
        moved.elapsed(),
        answers[0].1
    );
    // Whoever writes now: if the stuck writer lost its term to the other
    // replica, that one would have recorded and stayed ready.
    assert_eq!(
        a.metric("tenure_history_writer").await,
        Some(1.0),
        "the stuck replica still writes"
    );
    assert!(
        answers[0].1.contains("keeps failing"),
        "the writer's error: {}",
        answers[0].1
    );

    proxy.cut_after_bytes(0);
    until_all(&[&a, &b], Duration::from_secs(30), "ready again", |s, _| {
        s == 200
    })
    .await;
}
