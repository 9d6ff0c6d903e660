//! What every measurement shares: raw etcd operations written exactly as
//! tenure's key schema has them, process figures from /proc, HTTP.

use std::time::{Duration, Instant};

use anyhow::{anyhow, bail, Context, Result};
use etcd_client::{Client as Etcd, Compare, CompareOp, ConnectOptions, PutOptions, Txn, TxnOp};
use tenure::election::{ElectionName, EndMarker, EndMarkerCause, Keys};

/// Every etcd request a measurement makes is bounded by this.
pub const OP_TIMEOUT: Duration = Duration::from_secs(10);

pub async fn connect(endpoint: &str) -> Result<Etcd> {
    let opts = ConnectOptions::new().with_connect_timeout(Duration::from_secs(5));
    Etcd::connect([endpoint], Some(opts))
        .await
        .with_context(|| format!("connecting to etcd at {endpoint}"))
}

pub async fn tenure_client(endpoint: &str) -> Result<tenure::election::Client> {
    tenure::election::Client::connect(&[endpoint.to_owned()], "")
        .await
        .map_err(|e| anyhow!("tenure client for {endpoint}: {e}"))
}

/// Awaits `fut` for at most [`OP_TIMEOUT`].
pub async fn op<T, E: std::fmt::Display>(
    what: &str,
    fut: impl std::future::Future<Output = Result<T, E>>,
) -> Result<T> {
    match tokio::time::timeout(OP_TIMEOUT, fut).await {
        Ok(Ok(v)) => Ok(v),
        Ok(Err(e)) => Err(anyhow!("{what}: {e}")),
        Err(_) => Err(anyhow!("{what}: no answer within {OP_TIMEOUT:?}")),
    }
}

/// etcd's current revision.
pub async fn revision(etcd: &mut Etcd) -> Result<i64> {
    let resp = op("get", etcd.get("bench/revision-probe", None)).await?;
    resp.header()
        .map(|h| h.revision())
        .ok_or_else(|| anyhow!("get without header"))
}

pub fn keys() -> Keys {
    Keys::new("")
}

pub fn name(s: &str) -> ElectionName {
    ElectionName::new(s).unwrap_or_else(|e| panic!("election name {s:?}: {e}"))
}

pub async fn grant(etcd: &mut Etcd, ttl: i64) -> Result<i64> {
    Ok(op("lease grant", etcd.lease_grant(ttl, None)).await?.id())
}

/// tenure's campaign txn, exactly: `If(CreateRevision(key) == 0)
/// Then(Put(key, holder, lease))`. Returns the token (the txn's revision),
/// or `None` when the key is held.
pub async fn campaign_txn(
    etcd: &mut Etcd,
    name: &ElectionName,
    holder: &str,
    lease: i64,
) -> Result<Option<i64>> {
    let key = keys().leader_key(name);
    let txn = Txn::new()
        .when([Compare::create_revision(
            key.as_bytes(),
            CompareOp::Equal,
            0,
        )])
        .and_then([TxnOp::put(
            key.as_bytes(),
            holder,
            Some(PutOptions::new().with_lease(lease)),
        )]);
    let resp = op("campaign txn", etcd.txn(txn)).await?;
    let rev = resp
        .header()
        .map(|h| h.revision())
        .ok_or_else(|| anyhow!("txn without header"))?;
    Ok(resp.succeeded().then_some(rev))
}

/// tenure's resign txn, exactly (`Client::end_term`): delete the leader key
/// and write the end marker (bound to the term's lease) in one txn guarded by
/// `CreateRevision == token`. Returns the deletion's revision.
pub async fn resign_txn(
    etcd: &mut Etcd,
    name: &ElectionName,
    token: i64,
    lease: i64,
) -> Result<i64> {
    let k = keys();
    let key = k.leader_key(name);
    let marker = serde_json::to_string(&EndMarker {
        token,
        cause: EndMarkerCause::Resigned,
    })?;
    let txn = Txn::new()
        .when([Compare::create_revision(
            key.as_bytes(),
            CompareOp::Equal,
            token,
        )])
        .and_then([
            TxnOp::delete(key.as_bytes(), None),
            TxnOp::put(
                k.end_marker_key(name),
                marker,
                Some(PutOptions::new().with_lease(lease)),
            ),
        ]);
    let resp = op("resign txn", etcd.txn(txn)).await?;
    if !resp.succeeded() {
        bail!("resign txn of {name} token {token} did not apply");
    }
    resp.header()
        .map(|h| h.revision())
        .ok_or_else(|| anyhow!("txn without header"))
}

/// A field of /proc/PID/status in kB (`VmHWM`, `VmRSS`).
pub fn proc_status_kb(pid: u32, field: &str) -> Option<u64> {
    let s = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    s.lines().find_map(|l| {
        let rest = l.strip_prefix(field)?.strip_prefix(':')?;
        rest.trim().trim_end_matches("kB").trim().parse().ok()
    })
}

/// CPU seconds (user + system) this process has used, all threads.
pub fn self_cpu_seconds() -> f64 {
    let Ok(stat) = std::fs::read_to_string("/proc/self/stat") else {
        return f64::NAN;
    };
    let Some(after) = stat.rfind(')').map(|i| &stat[i + 2..]) else {
        return f64::NAN;
    };
    let f: Vec<&str> = after.split_whitespace().collect();
    // After the command: field 3 is index 0; utime is field 14, stime 15.
    let utime: f64 = f.get(11).and_then(|x| x.parse().ok()).unwrap_or(f64::NAN);
    let stime: f64 = f.get(12).and_then(|x| x.parse().ok()).unwrap_or(f64::NAN);
    (utime + stime) / clock_ticks()
}

fn clock_ticks() -> f64 {
    // USER_HZ is 100 on every Linux architecture tenure runs on.
    100.0
}

/// Busy and total jiffies of the whole machine (/proc/stat, first line).
pub fn machine_jiffies() -> (u64, u64) {
    let Ok(s) = std::fs::read_to_string("/proc/stat") else {
        return (0, 0);
    };
    let Some(line) = s.lines().next() else {
        return (0, 0);
    };
    let v: Vec<u64> = line
        .split_whitespace()
        .skip(1)
        .filter_map(|x| x.parse().ok())
        .collect();
    let total: u64 = v.iter().take(8).sum();
    let idle = v.get(3).copied().unwrap_or(0) + v.get(4).copied().unwrap_or(0);
    (total.saturating_sub(idle), total)
}

pub fn loadavg() -> String {
    std::fs::read_to_string("/proc/loadavg")
        .map(|s| s.split_whitespace().take(3).collect::<Vec<_>>().join(" "))
        .unwrap_or_default()
}

pub fn http() -> reqwest::Client {
    reqwest::Client::builder()
        .timeout(Duration::from_secs(30))
        .no_proxy()
        .build()
        .expect("HTTP client")
}

/// GET `url`; returns the status, the body and how long it took (to the
/// last byte).
pub async fn get(http: &reqwest::Client, url: &str) -> Result<(u16, String, Duration)> {
    let t = Instant::now();
    let resp = http
        .get(url)
        .send()
        .await
        .with_context(|| format!("GET {url}"))?;
    let status = resp.status().as_u16();
    let body = resp
        .text()
        .await
        .with_context(|| format!("GET {url}: body"))?;
    Ok((status, body, t.elapsed()))
}

pub fn ms(d: Duration) -> f64 {
    d.as_secs_f64() * 1000.0
}

/// Signed milliseconds from `a` to `b`.
pub fn ms_between(a: Instant, b: Instant) -> f64 {
    if b >= a {
        ms(b - a)
    } else {
        -ms(a - b)
    }
}

/// A small deterministic generator (xorshift), for jitter.
pub struct Rng(u64);

impl Rng {
    pub fn new(seed: u64) -> Rng {
        Rng(seed.max(1))
    }

    pub fn next(&mut self) -> u64 {
        let mut x = self.0;
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        self.0 = x;
        x
    }

    /// Uniform in `[0, n)`.
    pub fn below(&mut self, n: u64) -> u64 {
        self.next() % n.max(1)
    }
}

/// Polls `check` every `every` until it yields `Some`, for at most `limit`.
pub async fn wait_for<T, F, Fut>(
    what: &str,
    limit: Duration,
    every: Duration,
    mut check: F,
) -> Result<T>
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = Option<T>>,
{
    let deadline = Instant::now() + limit;
    loop {
        if let Some(v) = check().await {
            return Ok(v);
        }
        if Instant::now() >= deadline {
            bail!("{what}: not within {limit:?}");
        }
        tokio::time::sleep(every).await;
    }
}
