//! A handover replayed after a partition: a range, never 0 ms.

use std::time::Duration;

use serde_json::Value;

use crate::common::*;
use crate::support::proxy::Proxy;
use crate::support::{Etcd, Serve};
use tenure::election::{Campaigned, Client};
use tenure::events::now_ms;
use tenure::history::format_ms;

/// A handover that happens while the watcher is cut off reaches it as a
/// replay, with one arrival time for the old term's end and the new term's
/// start. The report must not call that 0 ms leaderless: it says unknown,
/// with bounds, and the bounds hold what this test saw on its own clock.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_handover_replayed_after_a_partition_is_a_range_holding_the_truth_not_zero() {
    let etcd = Etcd::start().await;
    let target = etcd.client_addr();
    let proxy = Proxy::start(target).await;
    let dir = tempfile::tempdir().expect("tempdir");
    let db = dir.path().join("h.db");
    let started = now_ms() - 1000;
    let serve = Serve::start(&[proxy.endpoint()], &db, &[], &[]).await;
    serve.ready().await;
    let client = Client::connect(&[etcd.endpoint()], "")
        .await
        .expect("client");
    let n = name("replayed/orders");
    let a = match client.campaign(&n, "a", &opts()).await.expect("campaign") {
        Campaigned::Leader(l) => l,
        Campaigned::Held(h) => panic!("held by {h:?}"),
    };
    serve.caught_up(a.token()).await;
    let a_token = a.token();

    // The watcher is cut off; the handover happens; then the link heals.
    proxy.partition();
    tokio::time::sleep(Duration::from_millis(500)).await;
    let resign_called = now_ms();
    a.resign().await.expect("resign");
    let resign_returned = now_ms();
    tokio::time::sleep(Duration::from_millis(700)).await;
    let campaign_called = now_ms();
    let b = match client.campaign(&n, "b", &opts()).await.expect("campaign") {
        Campaigned::Leader(l) => l,
        Campaigned::Held(h) => panic!("held by {h:?}"),
    };
    let campaign_returned = now_ms();
    tokio::time::sleep(Duration::from_millis(500)).await;
    proxy.heal();
    // The stalled stream is detected (no answer to a progress request) and
    // reopened on a new connection, which replays both changes.
    serve.caught_up(b.token()).await;

    let to = now_ms();
    let window = format!(
        "from={}&to={}&match={}",
        enc(&format_ms(started)),
        enc(&format_ms(to)),
        enc("replayed/*")
    );
    let report = get_json(&serve.url(&format!("/api/v1/report?{window}&format=json"))).await;
    let e = &report["elections"][0];
    assert_eq!(e["election"], "replayed/orders", "{report:#}");
    let terms = e["terms"].as_array().expect("terms");
    assert_eq!(terms.len(), 2, "{e:#}");
    let (old, new) = (&terms[0], &terms[1]);
    assert_eq!(old["end_replayed"], true, "{e:#}");
    assert_eq!(new["start_replayed"], true, "{e:#}");
    assert_eq!(old["start_replayed"], false, "{e:#}");
    // Both arrived in one replay: one arrival time.
    assert_eq!(old["end_ms"], new["start_ms"], "{e:#}");
    // Not a confident 0 ms: unknown, with bounds.
    assert!(e["leaderless_ms"].is_null(), "{e:#}");
    assert!(e["longest_leaderless_ms"].is_null(), "{e:#}");
    let least = e["leaderless_min_ms"].as_i64().expect("least");
    let most = e["leaderless_max_ms"].as_i64().expect("most");
    // The truth, on this test's clock: the end happened in
    // [resign_called, resign_returned], the start in [campaign_called,
    // campaign_returned]; the report's bounds must hold both.
    let ms = |v: &Value| -> i64 {
        let s = v.as_str().expect("time");
        tenure::history::parse_time(s).unwrap_or_else(|e| panic!("{s}: {e}"))
    };
    let end_nb = ms(&old["end_not_before"]);
    let start_nb = ms(&new["start_not_before"]);
    let end_at = old["end_ms"].as_i64().expect("end");
    assert!(
        end_nb <= resign_returned && end_at >= resign_called,
        "{old:#}"
    );
    assert!(
        start_nb <= campaign_returned && new["start_ms"].as_i64() >= Some(campaign_called),
        "{new:#}"
    );
    let truth_least = campaign_called - resign_returned;
    let truth_most = campaign_returned - resign_called;
    assert!(
        least <= truth_least && most >= truth_most,
        "report says {least}..{most} ms, the test saw {truth_least}..{truth_most} ms"
    );
    let md = get_text(&serve.url(&format!("/api/v1/report?{window}&format=md"))).await;
    let summary = md
        .lines()
        .find(|l| l.starts_with("| replayed/orders |"))
        .unwrap_or_else(|| panic!("no summary row in\n{md}"));
    assert_eq!(
        cells(summary)[2],
        format!("unknown ({least}–{most} ms)"),
        "{md}"
    );
    assert!(md.contains("(replayed: between "), "{md}");
    // The replay is an etcd event of the window, drawn on the timeline.
    assert!(
        report["etcd_events"]
            .as_array()
            .expect("etcd events")
            .iter()
            .any(|x| x["type"] == "replayed" && x["not_before"].is_string()),
        "{report:#}"
    );
    let page = get_text(&serve.url(&format!("/timeline?{window}"))).await;
    assert!(page.contains("data-type=\"replayed\""), "no replay marker");

    // The election's own page: the replayed end and start are shown as
    // bounds (a `≤` with the range), the seen start as a plain time, and
    // the old term's duration as a range, not one confident figure.
    let from_to = format!(
        "from={}&to={}",
        enc(&format_ms(started)),
        enc(&format_ms(to))
    );
    let page =
        get_text(&serve.url(&format!("/elections/{}?{from_to}", enc("replayed/orders")))).await;
    let row = |token: i64| -> String {
        let at = page
            .find(&format!("id=\"term-{token}\""))
            .unwrap_or_else(|| panic!("no row of term {token}"));
        let end = page[at..].find("</tr>").expect("row end") + at;
        page[at..end].to_owned()
    };
    let cells =
        |row: &str| -> Vec<String> { row.split("<td").skip(1).map(|c| c.to_owned()).collect() };
    let (a_row, b_row) = (row(a_token), row(b.token()));
    let (a_cells, b_cells) = (cells(&a_row), cells(&b_row));
    let marked = |c: &str| c.contains("class=\"muted replayed\"") && c.contains("between ");
    assert!(!marked(&a_cells[0]), "a's start was seen live: {a_row}");
    assert!(marked(&a_cells[1]), "a's end was replayed: {a_row}");
    assert!(marked(&b_cells[0]), "b's start was replayed: {b_row}");
    assert!(
        a_cells[2].contains('–'),
        "a's duration is a range: {}",
        a_cells[2]
    );
    drop(b);
    serve.stop().await;
}
