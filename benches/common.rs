//! What every measurement shares: raw etcd operations written exactly as
//! tenure's key schema has them, HTTP, milliseconds. The processes (etcd,
//! `tenure serve`), /proc figures and the generator are the test kit's
//! (tests/support).

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

pub use crate::support::fixtures::name;

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
/// and write the end marker (no lease, outside the candidates' prefix) in one
/// txn guarded by `CreateRevision == token`. Returns the deletion's revision.
pub async fn resign_txn(
    etcd: &mut Etcd,
    name: &ElectionName,
    token: i64,
    _lease: i64,
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
            TxnOp::put(k.end_marker_key(name), marker, None),
            TxnOp::delete(k.legacy_end_marker_key(name), None),
        ]);
    let resp = op("resign txn", etcd.txn(txn)).await?;
    if !resp.succeeded() {
        bail!("resign txn of {name} token {token} did not apply");
    }
    resp.header()
        .map(|h| h.revision())
        .ok_or_else(|| anyhow!("txn without header"))
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
    let (status, body, _, total) = get_split(http, url).await?;
    Ok((status, body, total))
}

/// [`get`], also timing the response's headers: for a body rendered whole
/// before it is sent (`/metrics`), the headers' time is the render's, and
/// the rest is the transfer and the client's reading.
pub async fn get_split(
    http: &reqwest::Client,
    url: &str,
) -> Result<(u16, String, Duration, Duration)> {
    let t = Instant::now();
    let resp = http
        .get(url)
        .send()
        .await
        .with_context(|| format!("GET {url}"))?;
    let headers = t.elapsed();
    let status = resp.status().as_u16();
    let body = resp
        .text()
        .await
        .with_context(|| format!("GET {url}: body"))?;
    Ok((status, body, headers, t.elapsed()))
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
