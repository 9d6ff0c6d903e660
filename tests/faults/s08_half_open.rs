use std::time::{Duration, Instant};

use crate::actors::*;
use crate::common::*;
use crate::oracle::*;
use crate::support::Etcd;

// ---------------------------------------------------------------------------
// 8. A half-open connection to etcd: detected by the progress probe within
//    a stated bound, and the watch re-established. Fast version: the
//    library watcher (probe after 1 s) through the harness's TCP proxy,
//    whose open connections are turned into black holes.
// ---------------------------------------------------------------------------

async fn half_open_via_proxy(scenario: &str, rounds: usize) {
    use tenure::events::{RestartReason, Update, WatchStatus};
    let probe_after = Duration::from_secs(1);
    let etcd = Etcd::start().await;
    let target: std::net::SocketAddr = etcd.client_addr();
    let proxy = crate::support::proxy::Proxy::start(target).await;
    let dir = tempfile::tempdir().expect("tempdir");
    let db = dir.path().join("history.db");
    let mut raw = etcd.client().await;
    let start_rev = head_revision(&mut raw).await;
    let via_proxy = tenure_client(&[proxy.endpoint()]).await;
    let cfg = tenure::watch::WatchConfig {
        probe_after,
        ..tenure::watch::WatchConfig::default()
    };
    let w = LibWatcher::start(via_proxy, cfg, &db);
    w.caught_up(start_rev).await;
    let direct = tenure_client(&[etcd.endpoint()]).await;
    let churn = Churn::start(&direct, "halfopen", 2, Duration::from_millis(100));
    let mut results = Vec::new();
    for _ in 0..rounds {
        w.caught_up(head_revision(&mut raw).await).await;
        tokio::time::sleep(Duration::from_millis(500)).await;
        let cut = proxy.blackhole_existing();
        let at = Instant::now();
        // Anything above this was written after the cut.
        let cut_rev = head_revision(&mut raw).await;
        let deadline = at + Duration::from_secs(60);
        let back = loop {
            if let Some(t) = w.first_after(
                at,
                |u| matches!(u, Update::Batch(b) if b.revision > cut_rev && !b.events.is_empty()),
            ) {
                break t;
            }
            assert!(
                Instant::now() < deadline,
                "the watch never came back after the cut"
            );
            tokio::time::sleep(Duration::from_millis(20)).await;
        };
        let stalled = w
            .first_after(at, |u| {
                matches!(
                    u,
                    Update::Watch(WatchStatus::Restarted(RestartReason::Stalled))
                )
            })
            .expect("the stall was detected (progress probe unanswered)");
        results.push((cut, stalled - at, back - at));
    }
    let tally = churn.stop().await;
    let head = head_revision(&mut raw).await;
    w.caught_up(head).await;
    w.stop().await;
    for (cut, detect, back) in &results {
        figure(
            scenario,
            format!(
                "{cut} connection(s) made half-open (probe after {probe_after:?}): stall detected after \
                 {} ms, watch delivering again after {} ms",
                detect.as_millis(),
                back.as_millis()
            ),
        );
    }
    figure(
        scenario,
        format!(
            "proxy connections accepted: {}; churn: {}",
            proxy.accepted(),
            tally.summary()
        ),
    );
    let v = verify_history(&mut raw, &db, start_rev, &|_| None, 0, false).await;
    figure(scenario, v.summary());
    v.assert_none(scenario);
    for (_, detect, back) in &results {
        // Silence for probe_after, then probe_after for the progress answer.
        assert!(
            *detect <= 2 * probe_after + Duration::from_secs(2),
            "detected after {detect:?}"
        );
        // Detection must lead to recovery: a stream reopened on the same
        // half-open connection hangs until the HTTP/2 keepalive (10 s + 5 s)
        // closes it.
        assert!(
            *back <= *detect + Duration::from_secs(2),
            "re-established {back:?} after the cut, {:?} after the probe detected the stall",
            back.saturating_sub(*detect)
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn s08_half_open_connection_detected_by_probe_and_reestablished() {
    half_open_via_proxy("8 half-open connection (proxy)", 1).await;
}

// ---------------------------------------------------------------------------
// 8 (full). A half-open connection made with iptables: `tenure serve` as
//    shipped (progress probe after 5 s), its established connections to
//    etcd's client port dropped (no RST, no FIN), new connections allowed.
// ---------------------------------------------------------------------------

async fn half_open_iptables(scenario: &'static str, rounds: usize) {
    let cluster = crate::support::netns::NsCluster::start(1).await;
    let eps = cluster.endpoints();
    let mut raw = raw_client(&eps).await;
    // Every term below starts after the watcher's first snapshot.
    let (serve, db, start_rev, _dir) = record(&eps, &mut raw).await;
    let client = tenure_client(&eps).await;
    let churn = Churn::start(&client, "halfopen", 2, Duration::from_millis(100));
    let stalled = |m: &str| {
        crate::support::metric_value(m, r#"tenure_watch_restarts_total{reason="stalled"}"#)
            .unwrap_or(0.0)
    };
    let mut results = Vec::new();
    for _ in 0..rounds {
        tokio::time::sleep(Duration::from_secs(2)).await;
        let before = stalled(&serve.metrics().await);
        serve.caught_up(head_revision(&mut raw).await).await;
        let ports = crate::support::netns::drop_connections_of(serve.pid() as u32, 2379);
        assert!(!ports.is_empty(), "tenure serve holds a connection to etcd");
        let cut = Instant::now();
        // Anything above this was written after the cut: it reaches tenure
        // only on a new connection.
        let at_cut = head_revision(&mut raw).await;
        let (mut detected, mut back) = (None, None);
        while detected.is_none() || back.is_none() {
            let m = serve.metrics().await;
            if detected.is_none() && stalled(&m) > before {
                detected = Some(cut.elapsed());
            }
            if back.is_none()
                && crate::support::metric_value(&m, "tenure_watch_revision").unwrap_or(0.0) as i64
                    > at_cut
            {
                back = Some(cut.elapsed());
            }
            assert!(
                cut.elapsed() < Duration::from_secs(90),
                "no recovery: {detected:?} {back:?}"
            );
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        results.push((ports.len(), detected, back));
    }
    let tally = churn.stop().await;
    let head = head_revision(&mut raw).await;
    serve.caught_up(head).await;
    assert_eq!(serve.stop().await, Some(0));
    let v = verify_history(&mut raw, &db, start_rev, &|_| None, 0, false).await;
    for (n, detected, back) in &results {
        figure(
            scenario,
            format!(
                "{n} connection(s) of tenure serve to etcd dropped by iptables: stall detected by the \
                 progress probe after {} ms (bound: 2 x 5 s), watch delivering again after {} ms",
                detected.map(|d| d.as_millis()).unwrap_or(0),
                back.map(|d| d.as_millis()).unwrap_or(0)
            ),
        );
    }
    figure(scenario, format!("churn: {}", tally.summary()));
    figure(scenario, v.summary());
    v.assert_none(scenario);
    for (_, detected, back) in &results {
        let (d, b) = (detected.expect("detected"), back.expect("back"));
        // Up to 5 s of silence (events stop at once), 5 s for the progress
        // answer, plus the metrics poll.
        assert!(d <= Duration::from_secs(11), "stall detected after {d:?}");
        // ... and recovery follows the detection, not the HTTP/2 keepalive.
        assert!(
            b <= d + Duration::from_secs(2),
            "watch back {b:?} after the cut, {:?} after detection",
            b.saturating_sub(d)
        );
    }
}

#[test]
#[ignore = "needs root, iptables, iproute2, util-linux: cargo test --test faults -- --ignored --nocapture"]
fn s08_full_half_open_connection_iptables_drop() {
    crate::support::netns::require(
        "scenario 8 (half-open, iptables)",
        crate::support::netns::TOOLS,
    );
    crate::support::netns::in_netns(|| half_open_iptables("8 half-open connection (iptables)", 3));
}
