//! Measurement 7d — measurement 7's Lease traffic read through the
//! Kubernetes API (`serve --kubeconfig`) instead of from its etcd.
//!
//! Setup: one etcd and a real kube-apiserver over it (scripts/kube); the
//! node and election Leases of 7a written into that etcd as kube-apiserver
//! stores them (its watch cache serves them as if written through it), at
//! the same pace. Two consumers watch every Lease through the API from the
//! revision before the load: tenure's path (`KubeWatcher`, the state
//! machine, metrics, history, as serve wires it) with tenure's
//! lease-reading account, and a bare watch of the same URL (`curl -N`, a
//! foreign client, each event's resourceVersion found in its line, no JSON
//! decoded). Each rate is writes ÷ (time it had processed the last write −
//! time the load started); tenure ÷ bare, target ≥ 0.95 (it keeps up).
//! The load ends with one election Lease written last, so both see the
//! last revision (tenure passes node leases by without a batch).

use std::process::Stdio;
use std::time::{Duration, Instant};

use anyhow::{anyhow, bail, Context, Result};
use tenure::events::Update;
use tenure::watch::kube::{ApiConfig, KubeConfig};
use tenure::watch::WatchConfig;
use tokio::io::{AsyncBufReadExt, BufReader};

use crate::ingest::Progress;
use crate::kube::{unix_us, Cluster};
use crate::pipeline::Pipeline;
use crate::stats::{Row, Target};
use crate::support::kube::KubeApiserver;
use crate::support::Etcd as EtcdProcess;
use crate::Config;

const WATCH: &str = "/apis/coordination.k8s.io/v1/leases?watch=1&allowWatchBookmarks=false";

pub async fn run(cfg: &Config) -> Result<Vec<Row>> {
    let etcd = EtcdProcess::start().await;
    let endpoint = etcd.endpoint();
    let api = KubeApiserver::start(&endpoint).await;
    let dir = tempfile::tempdir()?;
    let kubeconfig = api.reader_kubeconfig(dir.path()).await;
    let cluster = Cluster::new(&endpoint, cfg.kube_nodes, cfg.kube_elections).await?;
    let (mut t_rate, mut b_rate, mut behind) = (vec![], vec![], vec![]);
    let mut writes = 0;
    for run in 0..cfg.runs {
        let l = live_run(&api, &kubeconfig, &endpoint, &cluster, cfg).await?;
        eprintln!(
            "  API run {}: {} writes in {:.0} ms; tenure done at {:.0} ms, bare at {:.0} ms",
            run + 1,
            l.writes,
            crate::common::ms(l.write),
            crate::common::ms(l.tenure),
            crate::common::ms(l.bare),
        );
        writes = l.writes;
        t_rate.push(l.writes as f64 / l.tenure.as_secs_f64());
        b_rate.push(l.writes as f64 / l.bare.as_secs_f64());
        behind.push(crate::common::ms(l.tenure) - crate::common::ms(l.bare));
    }
    drop(api);
    drop(etcd);
    Ok(vec![Row::rate(
        "7d",
        "Kubernetes Leases through the API, live",
        "writes/s",
        &t_rate,
    )
    .baseline_samples("bare watch of the same API URL (curl -N)", &b_rate)
    .paired_ratio(&t_rate, &b_rate)
    .target(Target::RatioAtLeast(0.95))
    .note(format!(
        "7a's load ({} node + {} election Leases, {} s, {writes} writes per run) written into \
         kube-apiserver's etcd and watched through a real kube-apiserver; tenure finished {:.1} ms \
         after the bare watch (median)",
        cfg.kube_nodes,
        cfg.kube_elections,
        cfg.kube_seconds.as_secs(),
        crate::stats::Summary::of(&behind).median,
    ))])
}

struct Live {
    writes: usize,
    write: Duration,
    tenure: Duration,
    bare: Duration,
}

async fn live_run(
    api: &KubeApiserver,
    kubeconfig: &std::path::Path,
    endpoint: &str,
    cluster: &Cluster,
    cfg: &Config,
) -> Result<Live> {
    let before = crate::common::revision(&mut crate::common::connect(endpoint).await?).await?;
    let (bare, mut curl) = bare_watch(api, before)?;
    let db = tempfile::tempdir()?;
    let kube = KubeConfig {
        api: ApiConfig::from_kubeconfig_context(kubeconfig, None)
            .map_err(|e| anyhow!("kubeconfig: {e}"))?,
        prefix: tenure::layout::kubernetes::DEFAULT_PREFIX.to_owned(),
        heartbeats: false,
        max_elections: 100_000,
        forget_after: WatchConfig::default().forget_after,
    };
    let mut p = Pipeline::prepare(endpoint, &db.path().join("history.db"))
        .await?
        .start_kube(before, kube)?;
    let ten = Progress::default();
    let (t, mut puts) = (ten.clone(), cluster.load(cfg.kube_seconds));
    let consumer = tokio::spawn(async move {
        while let Ok(u) = p.next(Duration::from_secs(3600)).await {
            if let Update::Batch(b) = u {
                t.reached(b.revision);
            }
        }
        p.stop().await;
    });
    // One election Lease last: a revision both consumers report.
    let last_at = cfg.kube_seconds;
    puts.push((last_at, cluster.election(0, 1_000_000, unix_us())));
    let writes = puts.len();
    let t0 = Instant::now();
    let last = cluster.write(puts).await?;
    let write = t0.elapsed();
    let deadline = Instant::now() + Duration::from_secs(120);
    let (tenure_at, bare_at) = loop {
        if let (Some(t), Some(b)) = (ten.at(last), bare.at(last)) {
            break (t, b);
        }
        if Instant::now() > deadline {
            bail!("a consumer did not reach revision {last} within 120 s");
        }
        tokio::time::sleep(Duration::from_millis(1)).await;
    };
    consumer.abort();
    let _ = curl.kill().await;
    Ok(Live {
        writes,
        write,
        tenure: tenure_at.saturating_duration_since(t0),
        bare: bare_at.saturating_duration_since(t0),
    })
}

/// `curl -N` watching every Lease after `before`; each line's first
/// resourceVersion is the event's.
fn bare_watch(api: &KubeApiserver, before: i64) -> Result<(Progress, tokio::process::Child)> {
    let url = format!(
        "https://127.0.0.1:{}{WATCH}&resourceVersion={before}",
        api.port
    );
    let mut child = tokio::process::Command::new("curl")
        .args(["-sSN", "--cacert"])
        .arg(api.dir.path().join("certs/ca.crt"))
        .arg("-H")
        .arg(format!("Authorization: Bearer {}", api.token))
        .arg(url)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .kill_on_drop(true)
        .spawn()
        .context("curl")?;
    let out = child
        .stdout
        .take()
        .ok_or_else(|| anyhow!("curl's stdout"))?;
    let progress = Progress::default();
    let p = progress.clone();
    tokio::spawn(async move {
        let mut lines = BufReader::new(out).lines();
        while let Ok(Some(line)) = lines.next_line().await {
            if let Some(rv) = resource_version(&line) {
                p.reached(rv);
            }
        }
    });
    Ok((progress, child))
}

fn resource_version(line: &str) -> Option<i64> {
    let (_, rest) = line.split_once("\"resourceVersion\":\"")?;
    rest.split('"').next()?.parse().ok()
}
