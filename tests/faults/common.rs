//! Small tools every scenario uses.

use std::collections::{BTreeMap, BTreeSet};
use std::path::PathBuf;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use tempfile::TempDir;

pub(crate) use crate::support::fixtures::{name, tenure_client, ttl};
pub(crate) use crate::support::rng::Rng;
use crate::support::{metric_value, Serve};
use etcd_client::{Client as EtcdClient, GetOptions};

/// Prints one figure of a scenario (shown with --nocapture, copied into
/// RELIABILITY.md).
pub(crate) fn figure(scenario: &str, text: impl std::fmt::Display) {
    println!("[figure] {scenario}: {text}");
}

pub(crate) async fn raw_client(endpoints: &[String]) -> EtcdClient {
    let opts = etcd_client::ConnectOptions::new()
        .with_connect_timeout(Duration::from_secs(3))
        .with_timeout(Duration::from_secs(10));
    EtcdClient::connect(endpoints, Some(opts))
        .await
        .expect("raw etcd client")
}

/// etcd's current revision (retried: a cluster may be electing).
pub(crate) async fn head_revision(raw: &mut EtcdClient) -> i64 {
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        match raw
            .get("\0", Some(GetOptions::new().with_count_only()))
            .await
        {
            Ok(r) => return r.header().expect("header").revision(),
            Err(e) => {
                assert!(Instant::now() < deadline, "etcd revision: {e}");
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
        }
    }
}

/// Starts `tenure serve` on `eps` with a fresh history file and waits until
/// it has seen etcd's head (read through `raw`): every term after this
/// starts after its snapshot. Returns serve, the file, the head revision
/// and the file's directory (removed on drop: bind it to `_dir`, not `_`).
pub(crate) async fn record(eps: &[String], raw: &mut EtcdClient) -> (Serve, PathBuf, i64, TempDir) {
    let dir = tempfile::tempdir().expect("tempdir");
    let db = dir.path().join("history.db");
    let serve = Serve::start(eps, &db, &[], &[]).await;
    let start_rev = head_revision(raw).await;
    serve.caught_up(start_rev).await;
    (serve, db, start_rev, dir)
}

/// Waits for a revision certainly written after this call (etcd's head,
/// polled through `raw`, moves) and until `serve`'s watch has processed it,
/// polling every `every`; panics with `what` once `limit` has passed since
/// `since`.
pub(crate) async fn watch_reaches_a_later_revision(
    serve: &Serve,
    raw: &mut EtcdClient,
    (since, limit): (Instant, Duration),
    every: Duration,
    what: &str,
) {
    let at = head_revision(raw).await;
    let after = loop {
        let h = head_revision(raw).await;
        if h > at {
            break h;
        }
        tokio::time::sleep(every).await;
    };
    loop {
        if serve.metric("tenure_watch_revision").await.unwrap_or(0.0) as i64 >= after {
            return;
        }
        assert!(since.elapsed() < limit, "{what}");
        tokio::time::sleep(every).await;
    }
}

/// Prints the watch's restarts by reason, as `tenure serve`'s metrics `m`
/// count them (`None`: no such series).
pub(crate) fn restarts_figure(scenario: &str, m: &str, reasons: &[&str]) {
    let counts: Vec<String> = reasons
        .iter()
        .map(|r| {
            let series = format!("tenure_watch_restarts_total{{reason=\"{r}\"}}");
            format!("{r}={:?}", metric_value(m, &series))
        })
        .collect();
    figure(scenario, format!("watch restarts: {}", counts.join(" ")));
}

/// The ids of every lease etcd holds.
pub(crate) async fn lease_ids(raw: &mut EtcdClient) -> BTreeSet<i64> {
    let listed = raw.leases().await.expect("lease list");
    listed.leases().iter().map(|l| l.id()).collect()
}

/// Waits until etcd has revoked every lease granted with a TTL of at most
/// `max_ttl` seconds (the ones nobody renews): the terms they carried have
/// ended in etcd's log by the next revision read. Longer leases are kept.
pub(crate) async fn short_leases_expired(raw: &mut EtcdClient, max_ttl: i64) {
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let mut left = Vec::new();
        let listed = raw.leases().await.expect("lease list");
        for lease in listed.leases() {
            // Listed means not revoked yet; an error means revoked since.
            if let Ok(t) = raw.lease_time_to_live(lease.id(), None).await {
                if t.granted_ttl() <= max_ttl {
                    left.push(lease.id());
                }
            }
        }
        if left.is_empty() {
            return;
        }
        assert!(
            Instant::now() < deadline,
            "leases of at most {max_ttl} s still live after 30 s: {left:x?}"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// The scenario's generator, seeded from `TENURE_FAULTS_SEED` (a replay)
/// or the clock; the seed is printed as a figure.
pub(crate) fn seeded_rng(scenario: &str) -> Rng {
    let seed = Rng::seed_from_env("TENURE_FAULTS_SEED");
    figure(
        scenario,
        format!("seed {seed} (TENURE_FAULTS_SEED={seed} replays it)"),
    );
    Rng::new(seed)
}

/// Counts of named outcomes, printed as a figure.
#[derive(Default, Clone)]
pub(crate) struct Tally(pub(crate) Arc<Mutex<BTreeMap<String, u64>>>);

impl Tally {
    pub(crate) fn add(&self, what: &str) {
        *self
            .0
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .entry(what.to_owned())
            .or_default() += 1;
    }

    pub(crate) fn get(&self, what: &str) -> u64 {
        self.0
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .get(what)
            .copied()
            .unwrap_or(0)
    }

    pub(crate) fn summary(&self) -> String {
        self.0
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .iter()
            .map(|(k, v)| format!("{k}={v}"))
            .collect::<Vec<_>>()
            .join(" ")
    }
}
