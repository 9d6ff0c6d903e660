//! The live test: a real Prometheus scraping a real `tenure serve` while a
//! scenario runs against a real etcd.

use std::collections::{BTreeMap, BTreeSet};
use std::time::Instant;

use etcd_client::PutOptions;
use serde_json::Value;

use crate::cardinality::MAX_SERIES_PER_ELECTION;
use crate::dashboard::{dashboard, dashboard_queries};
use crate::rules::fast_rules;
use crate::server::{await_alerts, has_number, Expected, Prometheus};
use crate::support::{Etcd, Serve};
use crate::{lead, name, read, unix_now, RATE_INTERVAL, STEP_SECS};
use tenure::election::Client;

// The scenario, and what it should fire, in two phases:
// 1. `stale`: a leader key put by hand on an 8 s lease that nobody renews
//    (TenureLeaseNearExpiry as it runs down; then it expires).
//    `reports`: r leads and resigns, nobody follows (TenureElectionNoLeader).
//    `orders`: a leads and fences `db`.
// 2. Once Prometheus has the counters' base values: in `orders` a resigns,
//    b leads and fences `db`, a's stale token is refused
//    (TenureFencingRefusal, stale_token), then c, d, e each lead and resign
//    and f leads: 5 new terms at once (TenureLeaderChurn).
// 3. etcd is killed (TenureWatcherDown for the serve instance).
// Healthy `orders` leases (renewed every TTL/3) must never look near expiry.
//
// Phase 1 is over before `orders` churns because the watcher's lease
// sampler currently samples other elections' leases far less often while one
// election churns (each new term queues that election again), so `stale`
// would not be sampled while it runs down.
/// The Lease election's name, as Kubernetes names it (`NS/NAME`).
const KCM: &str = "kube-system/kcm";

/// Writes the Lease `kube-system/kcm` as kube-apiserver stores it with
/// `--storage-media-type=application/json`: held by `holder`, acquired at
/// `acquired` (unix µs; `None`: now), renewed now, for 1 s. Returns when it
/// was acquired.
async fn renew_lease(raw: &mut etcd_client::Client, holder: &str, acquired: Option<u64>) -> u64 {
    let now_us = u64::try_from(tenure::events::now_ms()).expect("time") * 1000;
    let acquired = acquired.unwrap_or(now_us);
    let t = |us: u64| {
        let at = std::time::UNIX_EPOCH + std::time::Duration::from_micros(us);
        humantime::format_rfc3339_micros(at).to_string()
    };
    let value = serde_json::json!({
        "kind": "Lease",
        "apiVersion": "coordination.k8s.io/v1",
        "metadata": {"name": "kcm", "namespace": "kube-system"},
        "spec": {
            "holderIdentity": holder,
            "leaseDurationSeconds": 1,
            "acquireTime": t(acquired),
            "renewTime": t(now_us),
            "leaseTransitions": u64::from(holder != "kcm-a"),
        }
    });
    raw.put("/registry/leases/kube-system/kcm", value.to_string(), None)
        .await
        .expect("put the Lease");
    acquired
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn real_prometheus_scrapes_serve_runs_every_dashboard_query_and_fires_alerts() {
    let t0 = Instant::now();
    let rules = fast_rules(&read("grafana/alerts.yaml"));
    let mut etcd = Etcd::start().await;
    let dir = tempfile::tempdir().expect("tempdir");
    let serve = Serve::start(&[etcd.endpoint()], &dir.path().join("history.db"), &[], &[]).await;
    // Leases are read by a serve of their own (a cluster reads Leases or
    // tenure's own elections, whose names may be alike), scraped beside.
    let leases = Serve::start(
        &[etcd.endpoint()],
        &dir.path().join("leases.db"),
        &["--source", "kubernetes:/registry/"],
        &[],
    )
    .await;
    let prom = Prometheus::start(&[&serve.addr, &leases.addr], &rules).await;
    let range_start = unix_now();
    // Prometheus applies new scrape targets up to 5 s after it is ready.
    prom.await_series(r#"count(tenure_etcd_up{job="tenure"} == 1) == 2"#)
        .await;
    let c = Client::connect(&[etcd.endpoint()], "")
        .await
        .expect("connect");
    let instance = serve.addr.clone();
    let never = [
        Expected::new("TenureLeaseNearExpiry", &[("election", "orders")]),
        Expected::new("TenureLeaderChurn", &[("election", "reports")]),
        Expected::new("TenureFencingRefusal", &[("reason", "term_ended")]),
        Expected::new("TenureFencingRefusal", &[("reason", "no_leader")]),
        Expected::new("TenureWatcherDown", &[("instance", &instance)]),
    ];

    // Phase 1.
    let mut raw = etcd.client().await;
    let lease = raw.lease_grant(8, None).await.expect("lease grant").id();
    raw.put(
        "election/stale",
        "ghost",
        Some(PutOptions::new().with_lease(lease)),
    )
    .await
    .expect("put stale leader");
    let r = lead(&c, "reports", "r").await;
    r.resign().await.expect("resign r");
    let a = lead(&c, "orders", "a").await;
    let t_a = a.token();
    assert!(a.fence("db").await.expect("fence").accepted);
    // A Kubernetes Lease held by `kcm-a`, renewed twice, then silent past
    // its 1 s duration: lapsed, and nobody takes it over until phase 2.
    let acquired = renew_lease(&mut raw, "kcm-a", None).await;
    for _ in 0..2 {
        tokio::time::sleep(std::time::Duration::from_millis(300)).await;
        renew_lease(&mut raw, "kcm-a", Some(acquired)).await;
    }
    let mut phase1 = [
        Expected::new("TenureLeaseNearExpiry", &[("election", "stale")]),
        Expected::new("TenureElectionNoLeader", &[("election", "reports")]),
        Expected::new("TenureLeaseLapsed", &[("election", KCM)]),
    ];
    await_alerts(&prom, &mut phase1, &never).await;
    let phase1_done = t0.elapsed();

    // Phase 2. Counters must be seen before they move, or increase() has
    // no base (a series' first sample is not an increase).
    prom.await_series(
        r#"tenure_election_leader_changes_total{job="tenure",election="orders"} == 1"#,
    )
    .await;
    prom.await_series(
        r#"tenure_fencing_refusals_total{election="orders",reason="stale_token"} == 0"#,
    )
    .await;
    a.resign().await.expect("resign a");
    let b = lead(&c, "orders", "b").await;
    assert!(b.fence("db").await.expect("fence").accepted);
    let refused = c.fence(&name("orders"), "db", t_a).await.expect("fence");
    assert!(!refused.accepted, "a's token is stale: {refused:?}");
    b.resign().await.expect("resign b");
    for id in ["c", "d", "e"] {
        lead(&c, "orders", id).await.resign().await.expect("resign");
    }
    let _f = lead(&c, "orders", "f").await;
    // `kcm-b` acquires the lapsed Lease (a handover, expired) and renews.
    let acquired = renew_lease(&mut raw, "kcm-b", None).await;
    for _ in 0..2 {
        tokio::time::sleep(std::time::Duration::from_millis(300)).await;
        renew_lease(&mut raw, "kcm-b", Some(acquired)).await;
    }
    let mut phase2 = [
        Expected::new("TenureLeaderChurn", &[("election", "orders")]),
        Expected::new(
            "TenureFencingRefusal",
            &[("election", "orders"), ("reason", "stale_token")],
        ),
    ];
    await_alerts(&prom, &mut phase2, &never).await;
    let alerts_done = t0.elapsed();

    // The election variable's query.
    let data = prom
        .api(
            "/api/v1/label/election/values",
            &[("match[]", "tenure_election_has_leader")],
        )
        .await;
    let elections: BTreeSet<&str> = data
        .as_array()
        .expect("values")
        .iter()
        .filter_map(Value::as_str)
        .collect();
    assert_eq!(
        elections,
        BTreeSet::from([KCM, "orders", "reports", "stale"])
    );

    // Data the scenario produced last: the lease of f (sampled about every
    // second) and the recorded quantiles of the terms ended in phase 2.
    prom.await_series(r#"tenure_election_lease_remaining_seconds{election="orders"}"#)
        .await;
    // (Fleet-wide since issue 16: the histogram has no election label.)
    prom.await_series(r#"tenure:term_duration_seconds:p90_1h >= 0"#)
        .await;

    // Series per election, as Prometheus scraped them (issue 16): at most
    // MAX_SERIES_PER_ELECTION each; `orders` (led, lease sampled, fenced)
    // has every one of them.
    let counts = prom
        .query(r#"count by (election) ({job="tenure", __name__=~"tenure_.+", election!=""})"#)
        .await;
    let counts: BTreeMap<String, f64> = counts
        .iter()
        .map(|s| {
            let election = s["metric"]["election"]
                .as_str()
                .expect("election")
                .to_owned();
            let n = s["value"][1]
                .as_str()
                .and_then(|v| v.parse().ok())
                .expect("count");
            (election, n)
        })
        .collect();
    assert_eq!(
        counts.keys().collect::<Vec<_>>(),
        [KCM, "orders", "reports", "stale"]
    );
    assert!(
        counts
            .values()
            .all(|n| *n <= MAX_SERIES_PER_ELECTION as f64),
        "series per election in Prometheus: {counts:?}"
    );
    assert_eq!(
        counts["orders"], MAX_SERIES_PER_ELECTION as f64,
        "{counts:?}"
    );

    // Every dashboard query returns data, as Grafana would send it.
    let end = unix_now();
    let range = format!("{}s", (end - range_start).ceil() as u64);
    let mut empty = Vec::new();
    let queries = dashboard_queries(&dashboard());
    for q in &queries {
        let expr = q
            .expr
            .replace("$__rate_interval", RATE_INTERVAL)
            .replace("$__interval", &format!("{STEP_SECS}s"))
            .replace("$__range", &range)
            .replace("${election}", ".*")
            .replace("$election", ".*");
        assert!(!expr.contains('$'), "unsubstituted variable in {expr}");
        let result = if q.instant {
            prom.query(&expr).await
        } else {
            prom.query_range(&expr, range_start, end).await
        };
        if !has_number(&result) {
            empty.push(format!(
                "{} ({}): {expr} -> {result:?}",
                q.panel,
                if q.instant { "instant" } else { "range" }
            ));
        }
    }
    assert!(
        empty.is_empty(),
        "{} of {} dashboard queries returned no data:\n{}",
        empty.len(),
        queries.len(),
        empty.join("\n")
    );

    // tenure loses etcd.
    etcd.kill().await;
    let mut down = [Expected::new(
        "TenureWatcherDown",
        &[("instance", &instance)],
    )];
    await_alerts(&prom, &mut down, &[]).await;

    eprintln!(
        "prometheus test: phase 1 alerts fired by {phase1_done:?}, phase 2 by {alerts_done:?} \
         ({}), {} dashboard queries with data, watcher down fired by {:?}",
        phase1
            .iter()
            .chain(phase2.iter())
            .chain(down.iter())
            .map(|e| format!("{} {:?}", e.alert, e.states))
            .collect::<Vec<_>>()
            .join(", "),
        queries.len(),
        t0.elapsed()
    );
    drop(prom);
    let _ = serve.stop().await;
    let _ = leases.stop().await;
}
