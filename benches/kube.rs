//! Measurement 7 — a large Kubernetes cluster's Lease traffic, read from its
//! etcd (`--source kubernetes:/registry/`, sources only).
//!
//! Setup: one etcd; `kube_nodes` kubelet node leases
//! (`/registry/leases/kube-node-lease/NODE`) renewed every 10 s, and
//! `kube_elections` controller election leases (`/registry/leases/kube-system/…`)
//! renewed every 2 s, every fifth renewal of each given to a new holder (a
//! term change every 10 s per election). Values are written as kube-apiserver
//! stores them: `k8s\0` and a protobuf `runtime.Unknown` holding the Lease
//! with the metadata and managedFields a real one carries (about 450 bytes),
//! encoded here field by field from k8s.io/api's numbers, not with tenure's
//! decoder. Renewals are spread evenly over each period: at 5,000 nodes and
//! 300 elections, 650 writes/s, as such a cluster's etcd sees them.
//!
//! - 7a live: tenure's ingestion path (watcher, state machine, metrics,
//!   history) and a bare etcd-client watch of the same prefix both watch while
//!   the load runs for `kube_seconds`; each rate is writes ÷ (time it had
//!   processed the last revision − time the load started), tenure ÷ bare
//!   (target ≥ 0.95: it keeps up). The note says how far behind the bare watch
//!   tenure finished, and that the history lists the elections and no node lease.
//! - 7b replay CPU: the same revisions read again from the start by each
//!   consumer alone, the bench process's CPU per 1000 revisions, tenure ÷ bare.
//! - 7c memory: the bench process's resident memory grown while tenure's
//!   path replayed them (state of every election lease; node leases are
//!   classified by key and never decoded).

use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::{anyhow, bail, Result};
use etcd_client::Client as Etcd;
use prost::encoding::{encode_key, encode_varint, WireType};
use tenure::history::{Reader, Store};
use tenure::watch::{WatchConfig, Watcher};

use crate::common::{connect, ms, tenure_client};
use crate::ingest::{bare_replay_of, replay_with, SideBySide};
use crate::stats::{Row, Target};
use crate::support::procfs::proc_status_kb;
use crate::support::Etcd as EtcdProcess;
use crate::Config;

const LEASES: &str = "/registry/leases/";
const NODE_PERIOD: Duration = Duration::from_secs(10);
const ELECTION_PERIOD: Duration = Duration::from_secs(2);
/// Every this many renewals an election lease changes hands.
const HANDOVER_EVERY: u64 = 5;
/// Writes in flight at once, over [`CONNECTIONS`] connections.
const IN_FLIGHT: usize = 64;
const CONNECTIONS: usize = 4;

pub async fn run(cfg: &Config) -> Result<Vec<Row>> {
    let etcd = EtcdProcess::start().await;
    let endpoint = etcd.endpoint();
    let cluster = Cluster::new(&endpoint, cfg.kube_nodes, cfg.kube_elections).await?;
    let (mut t_rate, mut b_rate, mut behind, mut t_cpu, mut b_cpu, mut rss) =
        (vec![], vec![], vec![], vec![], vec![], vec![]);
    let mut writes = 0;
    for run in 0..cfg.runs {
        let l = live_run(&endpoint, &cluster, cfg.kube_seconds).await?;
        eprintln!(
            "  live run {}: {} writes in {:.0} ms; tenure done at {:.0} ms, bare at {:.0} ms; \
             {} elections in the history",
            run + 1,
            l.writes,
            ms(l.write),
            ms(l.tenure),
            ms(l.bare),
            l.elections
        );
        if l.elections != cfg.kube_elections {
            bail!(
                "the history lists {} elections, not the {} election leases (node leases must be absent)",
                l.elections,
                cfg.kube_elections
            );
        }
        writes = l.writes;
        t_rate.push(l.writes as f64 / l.tenure.as_secs_f64());
        b_rate.push(l.writes as f64 / l.bare.as_secs_f64());
        behind.push(ms(l.tenure) - ms(l.bare));
        let (t, b, grown_kb) = replay_run(&endpoint, l.before, l.last, run % 2 == 1).await?;
        let revisions = (l.last - l.before) as f64;
        t_cpu.push(t * 1000.0 / revisions * 1000.0);
        b_cpu.push(b * 1000.0 / revisions * 1000.0);
        rss.push(grown_kb as f64 / 1024.0);
    }
    drop(etcd);
    let per_s = cfg.kube_nodes as f64 / NODE_PERIOD.as_secs_f64()
        + cfg.kube_elections as f64 / ELECTION_PERIOD.as_secs_f64();
    Ok(vec![
        Row::rate("7a", "Kubernetes Leases, live (5,000-node pace)", "writes/s", &t_rate)
            .baseline_samples("bare etcd-client watch of /registry/leases/", &b_rate)
            .paired_ratio(&t_rate, &b_rate)
            .target(Target::RatioAtLeast(0.95))
            .note(format!(
                "{} node leases every {} s + {} election leases every {} s (a new holder every {} renewals): \
                 {per_s:.0} writes/s for {} s, {writes} writes per run; tenure finished {:.1} ms after the bare \
                 watch (median); the history lists the {} elections, no node lease",
                cfg.kube_nodes,
                NODE_PERIOD.as_secs(),
                cfg.kube_elections,
                ELECTION_PERIOD.as_secs(),
                HANDOVER_EVERY,
                cfg.kube_seconds.as_secs(),
                crate::stats::Summary::of(&behind).median,
                cfg.kube_elections
            )),
        Row::time("7b", "Kubernetes Leases, replay: CPU per 1000 revisions", "ms", &t_cpu)
            .baseline_samples("bare etcd-client watch", &b_cpu)
            .paired_ratio(&t_cpu, &b_cpu)
            .note("bench process CPU (user+sys, all threads incl. the history writer), each consumer alone"),
        Row::time("7c", "Kubernetes Leases: memory grown while replaying", "MiB", &rss).note(
            "VmRSS of the bench process after tenure's path replayed the run's revisions, minus before \
             (allocator noise included)",
        ),
    ])
}

/// The leases, created once, and the connections that renew them.
pub struct Cluster {
    clients: Vec<Etcd>,
    nodes: usize,
    elections: usize,
}

/// One lease write: its key and value.
pub struct Put {
    key: String,
    value: Vec<u8>,
}

impl Cluster {
    pub async fn new(endpoint: &str, nodes: usize, elections: usize) -> Result<Cluster> {
        let mut clients = Vec::new();
        for _ in 0..CONNECTIONS {
            clients.push(connect(endpoint).await?);
        }
        let c = Cluster {
            clients,
            nodes,
            elections,
        };
        let now = unix_us();
        let all: Vec<Put> = (0..nodes)
            .map(|i| c.node(i, now))
            .chain((0..elections).map(|j| c.election(j, 0, now)))
            .collect();
        c.write(all.into_iter().map(|p| (Duration::ZERO, p)).collect())
            .await?;
        Ok(c)
    }

    fn node(&self, i: usize, now_us: i64) -> Put {
        let name = format!("node-{i:05}");
        Put {
            key: format!("{LEASES}kube-node-lease/{name}"),
            value: lease_value("kube-node-lease", &name, &name, 40, None, now_us, None),
        }
    }

    /// Election `j` at its `renewal`-th renewal.
    pub fn election(&self, j: usize, renewal: u64, now_us: i64) -> Put {
        let name = format!("controller-{j:03}");
        let hand = renewal / HANDOVER_EVERY;
        let holder = format!("{name}-host-{hand}_{j:08x}");
        // The hand changed at its first renewal of this hand.
        let since = renewal % HANDOVER_EVERY;
        let acquired = now_us - since as i64 * ELECTION_PERIOD.as_micros() as i64;
        Put {
            key: format!("{LEASES}kube-system/{name}"),
            value: lease_value(
                "kube-system",
                &name,
                &holder,
                15,
                Some(acquired),
                now_us,
                Some(hand as i32),
            ),
        }
    }

    /// Every renewal due in `seconds`, each at its offset from the start:
    /// lease `i` of `n` renews at `i/n` of its period, then every period.
    fn schedule(&self, seconds: Duration) -> Vec<(Duration, usize)> {
        let mut due = Vec::new();
        let mut spread = |n: usize, period: Duration, base: usize| {
            for i in 0..n {
                let mut at = period.mul_f64(i as f64 / n as f64);
                while at < seconds {
                    due.push((at, base + i));
                    at += period;
                }
            }
        };
        spread(self.nodes, NODE_PERIOD, 0);
        spread(self.elections, ELECTION_PERIOD, self.nodes);
        due.sort_unstable();
        due
    }

    /// Every write of `seconds` of traffic from now, at its offset.
    pub fn load(&self, seconds: Duration) -> Vec<(Duration, Put)> {
        let now = unix_us();
        let mut renewals = vec![0u64; self.elections];
        self.schedule(seconds)
            .into_iter()
            .map(|(at, i)| {
                let at_us = now + at.as_micros() as i64;
                let put = match i.checked_sub(self.nodes) {
                    None => self.node(i, at_us),
                    Some(j) => {
                        renewals[j] += 1;
                        self.election(j, renewals[j], at_us)
                    }
                };
                (at, put)
            })
            .collect()
    }

    /// Writes `puts`, each not before its offset from now; returns the
    /// last revision written.
    pub async fn write(&self, puts: Vec<(Duration, Put)>) -> Result<i64> {
        let start = tokio::time::Instant::now();
        let permits = Arc::new(tokio::sync::Semaphore::new(IN_FLIGHT));
        let mut tasks = tokio::task::JoinSet::new();
        for (k, (at, put)) in puts.into_iter().enumerate() {
            tokio::time::sleep_until(start + at).await;
            let permit = permits.clone().acquire_owned().await?;
            let mut kv = self.clients[k % CONNECTIONS].kv_client();
            tasks.spawn(async move {
                let r = kv.put(put.key, put.value, None).await;
                drop(permit);
                r.map(|r| r.header().map_or(0, |h| h.revision()))
            });
        }
        let mut last = 0;
        while let Some(done) = tasks.join_next().await {
            last = last.max(done??);
        }
        Ok(last)
    }
}

struct Live {
    writes: usize,
    before: i64,
    last: i64,
    write: Duration,
    tenure: Duration,
    bare: Duration,
    elections: usize,
}

/// The watch plan of `--sources-only --source kubernetes:/registry/`.
async fn kube_config(endpoint: &str) -> Result<WatchConfig> {
    let client = tenure_client(endpoint).await?;
    let source = tenure::layout::Source::parse("kubernetes:/registry/")
        .map_err(|e| anyhow!("source: {e}"))?;
    let plan = Watcher::sources(&client, vec![source], true)
        .await
        .map_err(|e| anyhow!("sources: {e}"))?;
    Ok(WatchConfig {
        sources: Some(plan.sources),
        covering: plan.covering,
        ..WatchConfig::default()
    })
}

fn range() -> (String, String) {
    (LEASES.to_owned(), "/registry/leases0".to_owned())
}

async fn live_run(endpoint: &str, cluster: &Cluster, seconds: Duration) -> Result<Live> {
    let before = crate::common::revision(&mut connect(endpoint).await?).await?;
    let dir = tempfile::tempdir()?;
    let db = dir.path().join("history.db");
    let (start, end) = range();
    let both = SideBySide::start(
        endpoint,
        (start, end),
        &db,
        before,
        kube_config(endpoint).await?,
    )
    .await?;
    let puts = cluster.load(seconds);
    let writes = puts.len();
    let t0 = Instant::now();
    let last = cluster.write(puts).await?;
    let write = t0.elapsed();
    let (tenure_at, bare_at, _) = both.until(last, Duration::from_secs(120)).await?;
    let elections = Reader::open(&db)
        .and_then(|r| r.elections())
        .map_err(|e| anyhow!("history: {e}"))?
        .len();
    Ok(Live {
        writes,
        before,
        last,
        write,
        tenure: tenure_at.saturating_duration_since(t0),
        bare: bare_at.saturating_duration_since(t0),
        elections,
    })
}

/// `(after, until]` replayed by tenure's path and by a bare watch, each
/// alone (`tenure_first` alternates the order): their CPU seconds and the
/// memory tenure's path grew by, in kB.
async fn replay_run(
    endpoint: &str,
    after: i64,
    until: i64,
    tenure_first: bool,
) -> Result<(f64, f64, u64)> {
    let bare = || {
        let (start, end) = range();
        bare_replay_of(
            endpoint,
            (start.into_bytes(), end.into_bytes()),
            after,
            until,
        )
    };
    let b_first = if tenure_first {
        None
    } else {
        Some(bare().await?)
    };
    let dir = tempfile::tempdir()?;
    let db = dir.path().join("history.db");
    let store = Store::open(&db, Duration::from_secs(30 * 86_400))
        .map_err(|e| anyhow!("history at {}: {e}", db.display()))?;
    let rss = || proc_status_kb(std::process::id(), "VmRSS").unwrap_or(0);
    let rss0 = rss();
    let cfg = kube_config(endpoint).await?;
    let (t, _, rss1) = replay_with(endpoint, store, cfg, (after, until), rss).await?;
    let b = match b_first {
        Some(b) => b,
        None => bare().await?,
    };
    Ok((t.cpu, b.cpu, rss1.saturating_sub(rss0)))
}

pub fn unix_us() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_micros() as i64)
}

/// kube-apiserver's storage value of a Lease: `k8s\0`, then
/// `runtime.Unknown{typeMeta{apiVersion 1, kind 2} 1, raw 2}`, `raw` the
/// `coordination.k8s.io/v1` Lease `{metadata 1, spec 2}`.
fn lease_value(
    namespace: &str,
    name: &str,
    holder: &str,
    duration_s: i32,
    acquired_us: Option<i64>,
    renewed_us: i64,
    transitions: Option<i32>,
) -> Vec<u8> {
    let mut spec = Vec::new();
    string(&mut spec, 1, holder);
    varint(&mut spec, 2, duration_s as u64);
    if let Some(a) = acquired_us {
        message(&mut spec, 3, &micro_time(a));
    }
    message(&mut spec, 4, &micro_time(renewed_us));
    if let Some(t) = transitions {
        varint(&mut spec, 5, t as u64);
    }
    let mut lease = Vec::new();
    message(&mut lease, 1, &object_meta(namespace, name, renewed_us));
    message(&mut lease, 2, &spec);
    let mut type_meta = Vec::new();
    string(&mut type_meta, 1, "coordination.k8s.io/v1");
    string(&mut type_meta, 2, "Lease");
    let mut unknown = Vec::new();
    message(&mut unknown, 1, &type_meta);
    message(&mut unknown, 2, &lease);
    string(&mut unknown, 3, "");
    string(&mut unknown, 4, "");
    let mut value = b"k8s\0".to_vec();
    value.extend(unknown);
    value
}

/// ObjectMeta: name 1, namespace 3, uid 5, creationTimestamp 8, and one
/// managedFields entry 17 (manager 1, operation 2, apiVersion 3, time 4,
/// fieldsType 6, fieldsV1 7).
fn object_meta(namespace: &str, name: &str, now_us: i64) -> Vec<u8> {
    let mut meta = Vec::new();
    string(&mut meta, 1, name);
    string(&mut meta, 3, namespace);
    string(&mut meta, 5, "0f2c6c1e-8a4b-4d4e-9a51-3b6f0c2d7e91");
    message(&mut meta, 8, &time(now_us / 1_000_000));
    let fields =
        "{\"f:metadata\":{\"f:ownerReferences\":{\".\":{}}},\"f:spec\":{\"f:holderIdentity\":{},\
                  \"f:leaseDurationSeconds\":{},\"f:renewTime\":{}}}";
    let mut raw = Vec::new();
    string(&mut raw, 1, fields);
    let mut entry = Vec::new();
    string(&mut entry, 1, "kubelet");
    string(&mut entry, 2, "Update");
    string(&mut entry, 3, "coordination.k8s.io/v1");
    message(&mut entry, 4, &time(now_us / 1_000_000));
    string(&mut entry, 6, "FieldsV1");
    message(&mut entry, 7, &raw);
    message(&mut meta, 17, &entry);
    meta
}

fn micro_time(us: i64) -> Vec<u8> {
    let mut t = time(us.div_euclid(1_000_000));
    varint(&mut t, 2, (us.rem_euclid(1_000_000) * 1000) as u64);
    t
}

fn time(seconds: i64) -> Vec<u8> {
    let mut t = Vec::new();
    varint(&mut t, 1, seconds as u64);
    t
}

fn varint(buf: &mut Vec<u8>, tag: u32, v: u64) {
    encode_key(tag, WireType::Varint, buf);
    encode_varint(v, buf);
}

fn string(buf: &mut Vec<u8>, tag: u32, s: &str) {
    message(buf, tag, s.as_bytes());
}

fn message(buf: &mut Vec<u8>, tag: u32, bytes: &[u8]) {
    encode_key(tag, WireType::LengthDelimited, buf);
    encode_varint(bytes.len() as u64, buf);
    buf.extend_from_slice(bytes);
}
