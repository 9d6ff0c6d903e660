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

use support::{kube, Browser, Etcd, Serve};
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
    // No polling: its renewals and lapse come on the live feed.
    assert_eq!(
        browser
            .eval("return document.body.getAttribute('data-refresh')")
            .await,
        serde_json::Value::Null
    );
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
    let renewer = kube::JsonRenewer::start(&etcd).await;
    // The watcher's word on the Lease is there (renewing, not lapsed).
    kube::renewing_read(&serve).await;
    let browser = Browser::start().await;
    browser
        .goto(&serve.url(&format!("/elections/{}", kube::RENEWED.replace('/', "%2F"))))
        .await;
    browser
        .wait_for(
            "return document.getElementById('renewals') !== null \
             && document.getElementById('lapsed') === null",
            "the Lease's renewal line, not lapsed",
        )
        .await;
    // The Lease's own figures, read live: no etcd lease, no "not read
    // live" banner, when it runs out.
    browser
        .wait_for(
            "const t = document.body.innerText; \
             return !t.includes('not read live') && !t.includes('0 · lease') \
             && t.includes('Kubernetes Lease') \
             && document.getElementById('runs-out').innerText.startsWith('in ')",
            "the Lease's leader box: runs out in …, no etcd words",
        )
        .await;
    // Its own figures: the pod its hostname_uuid identity names, its
    // duration, its last renewal and when it runs out by its holder's
    // clock, its transitions; no Margin column (no acting reported).
    let transitions = format!("{} leaseTransitions", kube::RENEWER_TRANSITIONS);
    let figures = format!(
        "const t = id => (document.getElementById(id) || {{innerText: ''}}).innerText; \
         return t('holder-pod') === '· pod kcm-0' \
         && t('lease-duration').startsWith('2 s leaseDurationSeconds') \
         && t('last-renewal').endsWith(\"UTC renewTime, by the holder's clock\") \
         && t('runs-out-holder').includes(\"by the holder's clock\") \
         && t('transitions').startsWith('{transitions}') \
         && document.getElementById('no-margin') !== null \
         && ![...document.querySelectorAll('#terms th')].some(h => h.innerText === 'Margin')"
    );
    browser
        .wait_for(&figures, "the Lease's own figures in its leader box")
        .await;
    // No polling: its renewals and lapse come on the live feed.
    assert_eq!(
        browser
            .eval("return document.body.getAttribute('data-refresh')")
            .await,
        serde_json::Value::Null
    );
    // A marker that a reload would wipe out.
    browser
        .eval("window.__tenureNoReload = 42; return true")
        .await;
    renewer.stop().await;
    // Lapsed 2 s after the last renewal, said by the watcher within 1 s;
    // the page must show it within the wait (20 s), without a reload.
    browser
        .wait_for(
            "return document.getElementById('lapsed') !== null \
             && window.__tenureNoReload === 42",
            "the lapse, shown without a reload",
        )
        .await;
    browser
        .wait_for(
            "return document.getElementById('runs-out').innerText.startsWith('ran out')",
            "the lease said to have run out",
        )
        .await;
    browser.quit().await;
}
