//! The timeline in real headless Chromium, driven over WebDriver: a term
//! bar is there, and a new transition appears without a reload; a
//! Kubernetes Lease's page turns "Lapsed" without a reload when its holder
//! stops renewing (no event comes: the page refreshes itself); and the
//! demo (`tenure dev`) once its split-brain story ran (`browser/demo.rs`).
// Tests, benches and their harness assert with unwrap/expect, spawn bare tasks
// and read the wall clock: the lints of Cargo.toml and clippy.toml hold src/.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::disallowed_methods)]

#[path = "browser/demo.rs"]
mod demo;
mod support;

use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use support::{Browser, Etcd, Serve};
use tenure::election::{CampaignOptions, Campaigned, Client, ElectionName, Leadership, Ttl};

async fn lead(c: &Client, id: &str) -> Leadership {
    let n = ElectionName::new("checkout/primary").expect("name");
    match c
        .campaign(
            &n,
            id,
            &CampaignOptions::new(Ttl::from_secs(30).expect("ttl")),
        )
        .await
        .expect("campaign")
    {
        Campaigned::Leader(l) => l,
        Campaigned::Held(h) => panic!("held by {h:?}"),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn timeline_shows_terms_and_updates_live_without_reload() {
    let etcd = Etcd::start().await;
    let dir = tempfile::tempdir().expect("tempdir");
    let serve = Serve::start(
        &[etcd.endpoint()],
        &dir.path().join("h.db"),
        &["--no-auth"],
        &[],
    )
    .await;
    let c = Client::connect(&[etcd.endpoint()], "")
        .await
        .expect("connect");
    let a = lead(&c, "web-1").await;
    c.fence(
        &ElectionName::new("checkout/primary").expect("name"),
        "orders",
        a.token() - 1,
    )
    .await
    .expect("a refused fence check, for a marker");
    a.resign().await.expect("resign");
    let b = lead(&c, "web-2").await;
    serve.caught_up(b.token()).await;

    let browser = Browser::start().await;
    browser
        .goto(&serve.url("/elections/checkout%2Fprimary"))
        .await;
    browser
        .wait_for(
            &format!(
                "return document.querySelector('#timeline rect.term[data-token=\"{}\"]') !== null",
                b.token()
            ),
            "b's term bar",
        )
        .await;
    // A marker that a reload would wipe out.
    browser
        .eval("window.__tenureNoReload = 42; return true")
        .await;

    b.resign().await.expect("resign");
    let c3 = lead(&c, "web-3").await;
    browser
        .wait_for(
            &format!(
                "return document.querySelector('#timeline rect.term[data-token=\"{}\"]') !== null \
                 && window.__tenureNoReload === 42",
                c3.token()
            ),
            "the new term's bar, without a reload",
        )
        .await;
    let bars = browser
        .eval("return document.querySelectorAll('#timeline rect.term').length")
        .await;
    assert!(bars.as_u64().is_some_and(|n| n >= 3), "{bars}");

    let shot = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("target/screenshots/timeline.png");
    browser.screenshot(&shot).await;
    let size = std::fs::metadata(&shot).expect("screenshot written").len();
    assert!(size > 10_000, "screenshot is {size} bytes");
    println!("screenshot: {}", shot.display());
    browser.quit().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_lease_page_turns_lapsed_without_a_reload() {
    let etcd = Etcd::start().await;
    let dir = tempfile::tempdir().expect("tempdir");
    let args = ["--sources-only", "--source", "kubernetes:/registry/"];
    let serve = Serve::start(&[etcd.endpoint()], &dir.path().join("h.db"), &args, &[]).await;
    serve.ready().await;
    // client-go's shape: renewed every 500 ms, a 2 s lease.
    let renewing = Arc::new(AtomicBool::new(true));
    let renewer = {
        let (mut raw, renewing) = (etcd.client().await, renewing.clone());
        tokio::spawn(async move {
            let t = |ms: i64| {
                let at =
                    std::time::UNIX_EPOCH + Duration::from_millis(u64::try_from(ms).expect("time"));
                humantime::format_rfc3339_micros(at).to_string()
            };
            let acquired = tenure::events::now_ms();
            while renewing.load(Ordering::SeqCst) {
                let lease = serde_json::json!({
                    "kind": "Lease",
                    "apiVersion": "coordination.k8s.io/v1",
                    "metadata": {"name": "kcm", "namespace": "kube-system"},
                    "spec": {"holderIdentity": "a", "leaseDurationSeconds": 2,
                             "acquireTime": t(acquired), "renewTime": t(tenure::events::now_ms())}
                });
                raw.put("/registry/leases/kube-system/kcm", lease.to_string(), None)
                    .await
                    .expect("renew the Lease");
                tokio::time::sleep(Duration::from_millis(500)).await;
            }
        })
    };
    // The watcher's word on the Lease is there (renewing, not lapsed).
    let series = r#"tenure_election_lease_lapsed{election="/registry/kube-system/kcm"}"#;
    let deadline = tokio::time::Instant::now() + Duration::from_secs(20);
    while serve.metric(series).await != Some(0.0) {
        assert!(
            tokio::time::Instant::now() < deadline,
            "the Lease never read"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let browser = Browser::start().await;
    browser
        .goto(&serve.url("/elections/%2Fregistry%2Fkube-system%2Fkcm"))
        .await;
    browser
        .wait_for(
            "return document.getElementById('renewals') !== null \
             && document.getElementById('lapsed') === null",
            "the Lease's renewal line, not lapsed",
        )
        .await;
    // A marker that a reload would wipe out.
    browser
        .eval("window.__tenureNoReload = 42; return true")
        .await;
    renewing.store(false, Ordering::SeqCst);
    renewer.await.expect("renewer");
    // Lapsed 2 s after the last renewal, said by the watcher within 1 s;
    // the page must show it within the wait (20 s), without a reload.
    browser
        .wait_for(
            "return document.getElementById('lapsed') !== null \
             && window.__tenureNoReload === 42",
            "the lapse, shown without a reload",
        )
        .await;
    browser.quit().await;
}
