//! `/timeline` in real headless Chromium.

use crate::common::*;
use crate::support::{self, Serve};
use tenure::election::{Campaigned, Client};

/// `/timeline` in real headless Chromium: the glob filter narrows the lanes,
/// the Report button carries the filter, and a new matching election
/// appears live without a reload.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn timeline_filter_in_chromium() {
    let etcd = support::Etcd::start().await;
    let dir = tempfile::tempdir().expect("tempdir");
    let serve = Serve::start(&[etcd.endpoint()], &dir.path().join("h.db"), &[], &[]).await;
    serve.ready().await;
    let c = Client::connect(&[etcd.endpoint()], "")
        .await
        .expect("client");
    let mut held = Vec::new();
    for e in ["pay/eu", "pay/us", "db/primary"] {
        match c.campaign(&name(e), "node-1", &opts()).await {
            Ok(Campaigned::Leader(l)) => held.push(l),
            other => panic!("{e}: {:?}", other.err()),
        }
    }
    serve
        .caught_up(held.iter().map(|l| l.token()).max().expect("token"))
        .await;

    let browser = support::Browser::start().await;
    browser.goto(&serve.url("/timeline?from=15m")).await;
    browser
        .wait_for(
            "return document.querySelectorAll('#timeline g.lane').length === 3",
            "three lanes",
        )
        .await;
    browser
        .eval(
            "document.getElementById('match').value = 'pay/*'; \
             document.getElementById('timeline-filter').submit(); return true",
        )
        .await;
    browser
        .wait_for(
            "return location.search.indexOf('match=pay') >= 0 \
             && document.querySelectorAll('#timeline g.lane').length === 2",
            "two lanes after filtering",
        )
        .await;
    let lanes = browser
        .eval(
            "return Array.from(document.querySelectorAll('#timeline g.lane'))\
             .map(function (g) { return g.getAttribute('data-election'); }).sort().join(',')",
        )
        .await;
    assert_eq!(lanes.as_str(), Some("pay/eu,pay/us"));
    let report = browser
        .eval("return document.getElementById('report-md').getAttribute('href')")
        .await;
    let report = report.as_str().expect("report href").to_owned();
    assert!(
        report.contains("match=pay%2F*") || report.contains("match=pay%2F%2A"),
        "{report}"
    );
    let md = get_text(&serve.url(&report)).await;
    assert!(
        md.contains("## pay/eu") && md.contains("## pay/us") && !md.contains("## db/primary"),
        "{md}"
    );

    // Live: a new matching election gets its lane without a reload.
    browser
        .eval("window.__tenureNoReload = 7; return true")
        .await;
    match c.campaign(&name("pay/apac"), "node-2", &opts()).await {
        Ok(Campaigned::Leader(l)) => held.push(l),
        other => panic!("pay/apac: {:?}", other.err()),
    }
    browser
        .wait_for(
            "return document.querySelectorAll('#timeline g.lane').length === 3 \
             && document.querySelector('#timeline g.lane[data-election=\"pay/apac\"]') !== null \
             && window.__tenureNoReload === 7",
            "the new election's lane, live",
        )
        .await;
    let shot = std::path::PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("target/screenshots/incident-timeline.png");
    browser.screenshot(&shot).await;
    println!("screenshot: {}", shot.display());
    browser.quit().await;
    drop(held);
    serve.stop().await;
}
