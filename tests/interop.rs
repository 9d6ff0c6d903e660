//! tenure beside clients it did not write, against a real etcd: etcd's own
//! `concurrency.Election` (`etcdctl elect`) and a Go `concurrency.Session`
//! lease shared by several elections and a lock. tenure ends exactly the
//! one term it is asked to end and never harms anything else.
// Tests, benches and their harness assert with unwrap/expect, spawn bare tasks
// and read the wall clock: the lints of Cargo.toml and clippy.toml hold src/.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::disallowed_methods)]

mod support;

use std::time::{Duration, Instant};

use etcd_client::{GetOptions, PutOptions};
use support::fixtures::{run, text};
use support::Etcd;
use tenure::election::{Client, ElectionName, Keys};
use tenure::events::{EndCause, EventKind, Update};
use tenure::watch::{WatchConfig, Watcher};
use tokio::io::{AsyncBufReadExt, BufReader};
use tokio::process::Child;
use tokio::sync::mpsc;

const WAIT: Duration = Duration::from_secs(15);

fn name(s: &str) -> ElectionName {
    ElectionName::new(s).expect("name")
}

/// `etcdctl elect KEY VALUE`; returns the child and a receiver of the leader
/// key it prints once elected.
fn etcdctl_elect(etcd: &Etcd, key: &str, value: &str) -> (Child, mpsc::Receiver<String>) {
    let mut child = etcd.etcdctl_elect(key, value);
    let mut lines = BufReader::new(child.stdout.take().expect("stdout")).lines();
    let (tx, rx) = mpsc::channel(4);
    tokio::spawn(async move {
        while let Ok(Some(line)) = lines.next_line().await {
            if tx.send(line).await.is_err() {
                return;
            }
        }
    });
    (child, rx)
}

async fn elected(rx: &mut mpsc::Receiver<String>, within: Duration) -> Option<String> {
    tokio::time::timeout(within, rx.recv()).await.ok().flatten()
}

/// Runs a watcher and returns the receiver of its updates.
fn watch(c: &Client) -> (mpsc::Receiver<Update>, tokio::task::JoinHandle<()>) {
    let (tx, rx) = mpsc::channel(1024);
    let watcher = Watcher::new(
        c.clone(),
        WatchConfig {
            lease_sample_interval: Duration::from_millis(200),
            ..WatchConfig::default()
        },
    );
    let task = tokio::spawn(async move {
        let _ = watcher.run(None, tx).await;
    });
    (rx, task)
}

/// Waits for a `TermEnded` of `election` and returns its cause.
async fn term_ended(rx: &mut mpsc::Receiver<Update>, election: &str) -> EndCause {
    let deadline = Instant::now() + WAIT;
    loop {
        let left = deadline.saturating_duration_since(Instant::now());
        let u = tokio::time::timeout(left, rx.recv())
            .await
            .unwrap_or_else(|_| panic!("no end of a term of {election} seen"))
            .expect("watcher alive");
        if let Update::Batch(b) = u {
            for e in b.events {
                if let EventKind::TermEnded { cause, .. } = e.kind {
                    if e.election == election {
                        return cause;
                    }
                }
            }
        }
    }
}

/// The `etcdctl elect` flow after `tenure depose`: etcd's own `Election`
/// must not see tenure's end marker as a candidate (it sat in
/// `election/q/~end` and, lowest in the queue, kept v2 from ever winning).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn depose_of_an_etcdctl_elect_leader_lets_the_next_etcdctl_elect_win() {
    let etcd = Etcd::start().await;
    let c = Client::connect(&[etcd.endpoint()], "")
        .await
        .expect("connect");
    let (mut updates, watcher) = watch(&c);
    let (mut v1, mut v1_out) = etcdctl_elect(&etcd, "election/q", "v1");
    let v1_key = elected(&mut v1_out, WAIT).await.expect("v1 elected");
    assert!(v1_key.starts_with("election/q/"), "{v1_key}");

    let out = run(&etcd, &["depose", "q"]).await;
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    assert!(text(&out.stdout).contains("v1"), "{}", text(&out.stdout));
    assert_eq!(
        term_ended(&mut updates, "q").await,
        EndCause::Deleted,
        "the watcher reads the marker in the deletion's revision"
    );

    // Nothing but candidates under etcd's Election prefix; the marker
    // lives outside it, with no lease.
    let mut etcd_c = etcd.client().await;
    let under = etcd_c
        .get("election/q/", Some(GetOptions::new().with_prefix()))
        .await
        .expect("get");
    assert!(
        under.kvs().is_empty(),
        "only v1's key was there and it went: {:?}",
        under.kvs()
    );
    let marker = etcd_c
        .get(Keys::new("").end_marker_key(&name("q")), None)
        .await
        .expect("get marker");
    let marker = marker.kvs().first().expect("the end marker exists");
    assert_eq!(marker.lease(), 0, "never bound to a foreign lease");
    // v1's session (its lease) is untouched: depose deletes one key.
    let leases = etcd_c.leases().await.expect("leases");
    assert_eq!(leases.leases().len(), 1, "v1's lease still lives");

    let (mut v2, mut v2_out) = etcdctl_elect(&etcd, "election/q", "v2");
    let v2_key = elected(&mut v2_out, Duration::from_secs(10))
        .await
        .expect("a second etcdctl elect wins after the depose");
    assert!(v2_key.starts_with("election/q/"), "{v2_key}");

    let out = run(&etcd, &["leader", "q", "--json"]).await;
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).expect("json");
    assert_eq!(v["holder"], "v2");
    assert_eq!(v["key"], v2_key.as_str());

    // A second depose overwrites the one marker: still one key.
    let out = run(&etcd, &["depose", "q"]).await;
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    let markers = etcd_c
        .get("election/~end/", Some(GetOptions::new().with_prefix()))
        .await
        .expect("get");
    assert_eq!(markers.kvs().len(), 1);
    watcher.abort();
    let _ = v1.kill().await;
    let _ = v2.kill().await;
}

/// A marker an older tenure left inside the candidates' prefix (lease-less
/// after a depose of a lease-less key) is still read, and the next end of
/// a term of that election removes it, so etcd's `Election` works again.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_legacy_marker_is_removed_by_the_next_end_of_a_term() {
    let etcd = Etcd::start().await;
    let c = Client::connect(&[etcd.endpoint()], "")
        .await
        .expect("connect");
    let mut etcd_c = etcd.client().await;
    let legacy = Keys::new("").legacy_end_marker_key(&name("m"));
    etcd_c
        .put(legacy.as_str(), r#"{"token":1,"cause":"deleted"}"#, None)
        .await
        .expect("put legacy marker");
    let (mut v1, mut v1_out) = etcdctl_elect(&etcd, "election/m", "v1");
    assert!(
        elected(&mut v1_out, Duration::from_secs(3)).await.is_none(),
        "the legacy marker blocks etcd's Election (the bug this migrates away)"
    );
    // tenure sees v1 as the leader (it ignores the marker) and can depose it.
    let (mut updates, watcher) = watch(&c);
    let out = run(&etcd, &["depose", "m"]).await;
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    assert_eq!(term_ended(&mut updates, "m").await, EndCause::Deleted);
    let gone = etcd_c.get(legacy.as_str(), None).await.expect("get");
    assert!(gone.kvs().is_empty(), "the legacy marker was removed");
    let (mut v2, mut v2_out) = etcdctl_elect(&etcd, "election/m", "v2");
    assert!(
        elected(&mut v2_out, Duration::from_secs(10))
            .await
            .is_some(),
        "etcd's Election works again"
    );
    watcher.abort();
    let _ = v1.kill().await;
    let _ = v2.kill().await;
}

/// One Go `concurrency.Session` lease holds keys in two elections and a
/// lock. Resigning (CLI, library) or deposing one election deletes that
/// election's key only: the lease, the other election and the lock stay.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn resign_and_depose_of_a_shared_lease_leader_touch_nothing_else() {
    let etcd = Etcd::start().await;
    let c = Client::connect(&[etcd.endpoint()], "")
        .await
        .expect("connect");
    let mut etcd_c = etcd.client().await;
    let lease = etcd_c.lease_grant(60, None).await.expect("grant").id();
    let hex = format!("{lease:x}");
    let billing = format!("election/billing/{hex}");
    let orders = format!("election/orders/{hex}");
    let lock = format!("locks/invoice/{hex}");
    for k in [&billing, &orders, &lock] {
        etcd_c
            .put(
                k.as_str(),
                "svc-1",
                Some(PutOptions::new().with_lease(lease)),
            )
            .await
            .expect("put");
    }
    let orders_token = c
        .leader(&name("orders"))
        .await
        .expect("leader")
        .expect("orders led")
        .leader
        .token;

    let out = run(
        &etcd,
        &["resign", "orders", "--token", &orders_token.to_string()],
    )
    .await;
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    let reader = etcd_c.clone();
    let exists = |k: &str| {
        let mut e = reader.clone();
        let k = k.to_owned();
        async move { !e.get(k, None).await.expect("get").kvs().is_empty() }
    };
    assert!(!exists(&orders).await, "orders' key went");
    assert!(exists(&billing).await, "billing is untouched");
    assert!(exists(&lock).await, "the lock is untouched");
    let ttl = etcd_c
        .lease_time_to_live(lease, None)
        .await
        .expect("ttl")
        .ttl();
    assert!(ttl > 0, "the shared lease was not revoked: ttl {ttl}");

    // Depose billing, then through the library: the lock still stays.
    let out = run(&etcd, &["depose", "billing"]).await;
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    assert!(!exists(&billing).await);
    assert!(exists(&lock).await, "the lock survives a depose");
    etcd_c
        .put(
            orders.as_str(),
            "svc-1",
            Some(PutOptions::new().with_lease(lease)),
        )
        .await
        .expect("put");
    let token = c
        .leader(&name("orders"))
        .await
        .expect("leader")
        .expect("led")
        .leader
        .token;
    c.resign(&name("orders"), token).await.expect("resign");
    assert!(exists(&lock).await, "the lock survives Client::resign");
    assert!(
        etcd_c
            .lease_time_to_live(lease, None)
            .await
            .expect("ttl")
            .ttl()
            > 0
    );
}

/// The HTTP resign of a queue-layout leader on a shared Go-session lease
/// ends that election's term only: the other election, the lock and the
/// lease stay.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn http_resign_of_a_shared_lease_leader_touches_nothing_else() {
    let etcd = Etcd::start().await;
    let dir = tempfile::tempdir().expect("tempdir");
    let mut etcd_c = etcd.client().await;
    let lease = etcd_c.lease_grant(60, None).await.expect("grant").id();
    let hex = format!("{lease:x}");
    let keys = [
        format!("election/billing/{hex}"),
        format!("election/orders/{hex}"),
        format!("locks/invoice/{hex}"),
    ];
    for k in &keys {
        etcd_c
            .put(
                k.as_str(),
                "svc-1",
                Some(PutOptions::new().with_lease(lease)),
            )
            .await
            .expect("put");
    }
    let token = etcd_c
        .get(keys[1].as_str(), None)
        .await
        .expect("get")
        .kvs()
        .first()
        .expect("orders key")
        .create_revision();
    let serve = support::fixtures::serve_with_api(&etcd, dir.path()).await;
    support::fixtures::http_resign(&serve, "orders", token).await;
    let exists = |k: &str| {
        let mut e = etcd_c.clone();
        let k = k.to_owned();
        async move { !e.get(k, None).await.expect("get").kvs().is_empty() }
    };
    assert!(!exists(&keys[1]).await, "orders' key went");
    assert!(exists(&keys[0]).await, "billing is untouched");
    assert!(exists(&keys[2]).await, "the lock is untouched");
    assert!(
        etcd_c
            .clone()
            .lease_time_to_live(lease, None)
            .await
            .expect("ttl")
            .ttl()
            > 0,
        "the shared lease was not revoked"
    );
    let _ = serve.stop().await;
}
