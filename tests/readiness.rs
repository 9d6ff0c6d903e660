//! `/readyz` of a real `tenure serve` against real etcd when the watch
//! cannot deliver (issue 20.14): etcd answers, yet the watch breaks at one
//! revision every time, so nothing is recorded; the replica must say so.
// Tests, benches and their harness assert with unwrap/expect, spawn bare tasks
// and read the wall clock: the lints of Cargo.toml and clippy.toml hold src/.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::disallowed_methods)]

mod support;

use std::time::{Duration, Instant};

use support::proxy::Proxy;
use support::{Etcd, Serve};

/// `/readyz`: its status and body.
async fn readyz(serve: &Serve) -> (u16, String) {
    let r = reqwest::get(serve.url("/readyz"))
        .await
        .expect("GET /readyz");
    let status = r.status().as_u16();
    (status, r.text().await.expect("body"))
}

/// Polls `/readyz` until `want` holds, for at most `within`; the last
/// answer either way.
async fn readyz_until(
    serve: &Serve,
    within: Duration,
    want: impl Fn(u16, &str) -> bool,
) -> (bool, u16, String) {
    let deadline = Instant::now() + within;
    loop {
        let (status, body) = readyz(serve).await;
        if want(status, &body) {
            return (true, status, body);
        }
        if Instant::now() > deadline {
            return (false, status, body);
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// A 1 MB value in the watched range, and a proxy between `serve` and etcd
/// that closes any connection once 256 KiB of answers went through it: the
/// watch response carrying that revision never arrives whole, however
/// often the watcher reopens the stream (on a new connection each time,
/// through the same proxy). Everything small still passes. After three
/// failures at that revision `/readyz` is 503 and says the watch keeps
/// failing (not "etcd unreachable"); when the proxy lets it through, the
/// revision is recorded and `/readyz` is 200 again.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_watch_failing_at_one_revision_makes_readyz_503() {
    let etcd = Etcd::start().await;
    let proxy = Proxy::start(etcd.client_addr()).await;
    let dir = tempfile::tempdir().expect("tempdir");
    let serve = Serve::start(&[proxy.endpoint()], &dir.path().join("h.db"), &[], &[]).await;
    serve.ready().await;
    let (status, body) = readyz(&serve).await;
    assert_eq!(status, 200, "{body}");

    proxy.cut_after_bytes(256 * 1024);
    let mut raw = etcd.client().await;
    let big = "x".repeat(1_000_000);
    let put = raw
        .put("election/big", big.as_str(), None)
        .await
        .expect("put 1 MB");
    let revision = put.header().expect("header").revision();
    let cut_at = Instant::now();

    let (seen, status, body) = readyz_until(&serve, Duration::from_secs(60), |s, b| {
        s == 503 && b.contains("keeps failing")
    })
    .await;
    println!(
        "503 after {:?}, {} connections cut: {body}",
        cut_at.elapsed(),
        proxy.cut()
    );
    assert!(
        seen,
        "readyz never said the watch is stuck: {status} {body}\n{}",
        serve.log_text()
    );
    assert!(proxy.cut() >= 3, "the watch was cut at least 3 times");
    assert!(
        serve.metric("tenure_watch_revision").await.unwrap_or(0.0) < revision as f64,
        "the big revision was not applied"
    );
    assert!(
        serve.log_text().contains("keeps failing at one revision"),
        "logged as an error"
    );

    // The cause goes away: the revision is recorded, ready again.
    proxy.cut_after_bytes(0);
    serve.caught_up(revision).await;
    let (ok, status, body) = readyz_until(&serve, Duration::from_secs(60), |s, _| s == 200).await;
    assert!(ok, "ready again once the watch delivers: {status} {body}");
}

/// `/readyz` says ready only once the pages answer from the loaded state:
/// the snapshot's elections are in the history the overview and the API
/// list read, not merely received by the watcher. 20,000 elections stand
/// in etcd before serve starts; the first 200 from `/readyz` is followed at
/// once by the API list, which must hold all of them.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ready_means_the_pages_show_the_snapshot() {
    use etcd_client::{Txn, TxnOp};
    const N: usize = 20_000;
    let etcd = Etcd::start().await;
    let mut raw = etcd.client().await;
    let names: Vec<usize> = (0..N).collect();
    for chunk in names.chunks(100) {
        let ops: Vec<TxnOp> = chunk
            .iter()
            .map(|i| TxnOp::put(format!("election/fleet-{i:05}"), "h", None))
            .collect();
        raw.txn(Txn::new().and_then(ops)).await.expect("txn");
    }
    let dir = tempfile::tempdir().expect("tempdir");
    let serve = Serve::start(&[etcd.endpoint()], &dir.path().join("h.db"), &[], &[]).await;
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        if readyz(&serve).await.0 == 200 {
            break;
        }
        assert!(Instant::now() < deadline, "never ready");
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    let list: serde_json::Value = reqwest::get(serve.url("/api/v1/elections?limit=1"))
        .await
        .expect("GET")
        .json()
        .await
        .expect("json");
    assert_eq!(
        list["total"].as_u64(),
        Some(N as u64),
        "ready, but the list says {list}"
    );
    serve.stop().await;
}
