//! Measurement 4 — Shared fence check throughput: `Client::fence` on the accepted path
//! (the current term's token, again and again: equal tokens pass), by
//! `fence_callers` concurrent callers for a fixed time, ÷ a raw etcd txn with
//! a single compare and a put (`If(CreateRevision(leader) == token)
//! Then(Put(fence key, token))`) by as many callers over their own
//! connection. Each caller has its own resource. Runs alternate which goes
//! first.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::{anyhow, bail, Result};
use etcd_client::{Compare, CompareOp, Txn, TxnOp};
use tenure::election::keys::pad_token;
use tenure::election::{CampaignOptions, Ttl};

use crate::common::{connect, keys, name, tenure_client};
use crate::stats::{Row, Target};
use crate::support::Etcd as EtcdProcess;
use crate::Config;

pub async fn run(cfg: &Config) -> Result<Vec<Row>> {
    let etcd = EtcdProcess::start().await;
    let endpoint = etcd.endpoint();
    let client = tenure_client(&endpoint).await?;
    let raw = connect(&endpoint).await?;
    let n = name("fence/bench");
    let leadership = client
        .campaign_wait(
            &n,
            "fencer",
            &CampaignOptions::new(Ttl::from_secs(30).expect("ttl")),
            Some(Duration::from_secs(10)),
        )
        .await
        .map_err(|e| anyhow!("campaign: {e}"))?;
    let token = leadership.token();
    let mut rows = Vec::new();
    for (ci, &callers) in cfg.fence_callers.iter().enumerate() {
        let main = ci == 0;
        let (mut t, mut b, mut full, mut acc) = (vec![], vec![], vec![], vec![]);
        let mut parts: [Vec<f64>; 3] = Default::default();
        let d = cfg.fence_time;
        // Warm up both paths.
        tenure_rate(&client, &n, token, callers, Duration::from_millis(200)).await?;
        raw_rate(&raw, &n, token, callers, Duration::from_millis(200)).await?;
        for run in 0..cfg.runs {
            // Rotate the order of the sides from run to run.
            let sides = if main { 7 } else { 2 };
            for j in 0..sides {
                match (run + j) % sides {
                    0 => t.push(tenure_rate(&client, &n, token, callers, d).await?),
                    1 => b.push(raw_rate(&raw, &n, token, callers, d).await?),
                    2 => full.push(shaped_rate(Shape::Full, &raw, &n, token, callers, d).await?),
                    3 => acc
                        .push(shaped_rate(Shape::AcceptBranch, &raw, &n, token, callers, d).await?),
                    side => {
                        let (shape, into) = match side {
                            4 => (Shape::NoGet, &mut parts[0]),
                            5 => (Shape::FlatNoGet, &mut parts[1]),
                            _ => (Shape::FlatGet, &mut parts[2]),
                        };
                        into.push(shaped_rate(shape, &raw, &n, token, callers, d).await?);
                    }
                }
            }
            eprintln!(
                "  fence run {} ({callers} callers): tenure {:.0}/s, raw txn {:.0}/s{}",
                run + 1,
                t.last().unwrap(),
                b.last().unwrap(),
                if main {
                    format!(
                        ", raw copy of the fence txn {:.0}/s, its accepted branch alone {:.0}/s",
                        full.last().unwrap(),
                        acc.last().unwrap()
                    )
                } else {
                    String::new()
                }
            );
        }
        let note = format!(
            "{} s per run and side, sides in rotating order; one resource per caller",
            d.as_secs_f64()
        );
        let id = ["4", "4d", "4e", "4f"].get(ci).copied().unwrap_or("4x");
        let mut row = Row::rate(
            id,
            &format!(
                "shared fence check, accepted, {callers} concurrent caller{}",
                if callers == 1 { "" } else { "s" }
            ),
            "checks/s",
            &t,
        )
        .baseline_samples("raw etcd txn (1 compare + put)", &b)
        .paired_ratio(&t, &b)
        .note(note.clone());
        if main {
            row = row.target(Target::RatioAtLeast(0.9));
        }
        rows.push(row);
        if main {
            rows.push(
                Row::rate(
                    "4b",
                    &format!("diagnostic: the fence's nested txn sent raw, {callers} callers"),
                    "checks/s",
                    &full,
                )
                .baseline_samples("raw etcd txn (1 compare + put)", &b)
                .paired_ratio(&full, &b)
                .note("the whole nested txn (every refusal branch) built as Client::fence builds it, sent without tenure's client code: what every check cost before the fast path (now only the fallback)"),
            );
            rows.push(
                Row::rate(
                    "4c",
                    &format!("diagnostic: the fence's fast path (accepted branch alone) sent raw, {callers} callers"),
                    "checks/s",
                    &acc,
                )
                .baseline_samples("raw etcd txn (1 compare + put)", &b)
                .paired_ratio(&acc, &b)
                .note("3 compares (the token floor's included), put with prev_kv, get of the leader key, as Client::fence's fast path sends it: the floor for the fence's own txn"),
            );
            let shapes = [
                (
                    "4g",
                    "the accepted branch without the get of the leader key",
                    "its 3 compares, the put with its previous value, the nested branch for a floor below the token",
                ),
                (
                    "4h",
                    "the accepted branch flat, without the get",
                    "its 3 compares and the put with its previous value",
                ),
                (
                    "4i",
                    "the accepted branch flat, with the get",
                    "its 3 compares, the put with its previous value, the get of the leader key",
                ),
            ];
            for ((id, what, note), samples) in shapes.into_iter().zip(&parts) {
                rows.push(
                    Row::rate(
                        id,
                        &format!("diagnostic: {what}, {callers} callers"),
                        "checks/s",
                        samples,
                    )
                    .baseline_samples("raw etcd txn (1 compare + put)", &b)
                    .paired_ratio(samples, &b)
                    .note(format!(
                        "what each part of the accepted branch costs: {note}"
                    )),
                );
            }
        }
    }
    let _ = leadership.resign().await;
    drop(etcd);
    Ok(rows)
}

async fn tenure_rate(
    client: &tenure::election::Client,
    n: &tenure::election::ElectionName,
    token: i64,
    callers: usize,
    d: Duration,
) -> Result<f64> {
    let stop = Arc::new(AtomicBool::new(false));
    let count = Arc::new(AtomicU64::new(0));
    let mut set = tokio::task::JoinSet::new();
    for i in 0..callers {
        let (client, n, stop, count) = (client.clone(), n.clone(), stop.clone(), count.clone());
        set.spawn(async move {
            let resource = format!("r{i}");
            while !stop.load(Ordering::Relaxed) {
                let d = client
                    .fence(&n, &resource, token)
                    .await
                    .map_err(|e| anyhow!("fence: {e}"))?;
                if !d.accepted {
                    bail!("fence refused token {token}: {:?}", d.reason);
                }
                count.fetch_add(1, Ordering::Relaxed);
            }
            Ok(())
        });
    }
    measure(set, stop, count, d).await
}

/// Which txn the raw callers send.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Shape {
    /// The baseline: `If(CreateRevision(leader) == token) Then(Put(fence))`.
    Single,
    /// tenure's accepted branch alone (its fast path since 8e70a69): both
    /// compares, the put with its previous value, the get of the leader key.
    AcceptBranch,
    /// tenure's whole nested fence txn, built here as `Client::fence` builds
    /// it (every refusal branch included): before the fast path, every check
    /// sent this; now only the first write to a resource and refusals do.
    Full,
    /// What each part of the accepted branch costs: without the get of the
    /// leader key (its compares, the put with its previous value, the
    /// nested branch for a floor below the token) ...
    NoGet,
    /// ... without the nested branch either ...
    FlatNoGet,
    /// ... with the get, without the nested branch.
    FlatGet,
}

fn shaped_txn(
    shape: Shape,
    k: &tenure::election::Keys,
    n: &tenure::election::ElectionName,
    resource: &str,
    token: i64,
) -> Txn {
    let leader = k.leader_key(n);
    let fence = k.fence_key(n, resource);
    let (leader, fence_b) = (leader.as_bytes(), fence.as_bytes());
    let is_current = Compare::create_revision(leader, CompareOp::Equal, token);
    let floor = k.floor_key();
    let accept = |prev: bool| {
        [
            TxnOp::put(
                fence_b,
                pad_token(token),
                prev.then(|| etcd_client::PutOptions::new().with_prev_key()),
            ),
            TxnOp::get(leader, None),
        ]
    };
    let put = |prev: bool| {
        TxnOp::put(
            fence_b,
            pad_token(token),
            prev.then(|| etcd_client::PutOptions::new().with_prev_key()),
        )
    };
    let below = Compare::value(fence_b, CompareOp::Less, pad_token(token + 1));
    let no_floor = Compare::version(floor.as_bytes(), CompareOp::Equal, 0);
    match shape {
        Shape::NoGet => Txn::new()
            .when([is_current.clone(), below.clone(), no_floor])
            .and_then([put(true)])
            .or_else([TxnOp::txn(
                Txn::new()
                    .when([
                        is_current,
                        below,
                        Compare::value(floor.as_bytes(), CompareOp::Less, pad_token(token)),
                    ])
                    .and_then([put(true)]),
            )]),
        Shape::FlatNoGet => Txn::new()
            .when([is_current, below, no_floor])
            .and_then([put(true)]),
        Shape::FlatGet => Txn::new()
            .when([is_current, below, no_floor])
            .and_then(accept(true)),
        Shape::Single => {
            Txn::new()
                .when([is_current])
                .and_then([TxnOp::put(fence_b, pad_token(token), None)])
        }
        // With the token floor's two branches (no floor; a floor below the
        // token): the first one taken when etcd was never restored.
        Shape::AcceptBranch => Txn::new()
            .when([
                is_current.clone(),
                Compare::value(fence_b, CompareOp::Less, pad_token(token + 1)),
                Compare::version(floor.as_bytes(), CompareOp::Equal, 0),
            ])
            .and_then(accept(true))
            .or_else([TxnOp::txn(
                Txn::new()
                    .when([
                        is_current,
                        Compare::value(fence_b, CompareOp::Less, pad_token(token + 1)),
                        Compare::value(floor.as_bytes(), CompareOp::Less, pad_token(token)),
                    ])
                    .and_then(accept(true)),
            )]),
        Shape::Full => {
            let refusal = k.refusal_key(n, resource);
            let refuse = |reason: &str| {
                let record = format!("{{\"token\":{token},\"reason\":\"{reason}\"}}");
                [
                    TxnOp::put(refusal.as_bytes(), record, None),
                    TxnOp::get(leader, None),
                    TxnOp::get(fence_b, None),
                ]
            };
            let decide = Txn::new()
                .when([
                    is_current.clone(),
                    Compare::value(fence_b, CompareOp::Less, pad_token(token + 1)),
                ])
                .and_then(accept(true))
                .or_else([TxnOp::txn(
                    Txn::new()
                        .when([is_current, Compare::version(fence_b, CompareOp::Equal, 0)])
                        .and_then(accept(false))
                        .or_else([TxnOp::txn(
                            Txn::new()
                                .when([Compare::value(
                                    fence_b,
                                    CompareOp::Greater,
                                    pad_token(token),
                                )])
                                .and_then(refuse("stale_token"))
                                .or_else([TxnOp::txn(
                                    Txn::new()
                                        .when([Compare::version(leader, CompareOp::Equal, 0)])
                                        .and_then(refuse("no_leader"))
                                        .or_else(refuse("term_ended")),
                                )]),
                        )]),
                )]);
            // The token floor first, as Client::fence sends it.
            Txn::new()
                .when([Compare::value(
                    floor.as_bytes(),
                    CompareOp::Greater,
                    pad_token(token - 1),
                )])
                .and_then([TxnOp::get(floor.as_bytes(), None)])
                .or_else([TxnOp::txn(decide)])
        }
    }
}

pub async fn raw_rate(
    raw: &etcd_client::Client,
    n: &tenure::election::ElectionName,
    token: i64,
    callers: usize,
    d: Duration,
) -> Result<f64> {
    shaped_rate(Shape::Single, raw, n, token, callers, d).await
}

pub async fn shaped_rate(
    shape: Shape,
    raw: &etcd_client::Client,
    n: &tenure::election::ElectionName,
    token: i64,
    callers: usize,
    d: Duration,
) -> Result<f64> {
    let stop = Arc::new(AtomicBool::new(false));
    let count = Arc::new(AtomicU64::new(0));
    let mut set = tokio::task::JoinSet::new();
    let k = keys();
    for i in 0..callers {
        let (mut raw, stop, count) = (raw.clone(), stop.clone(), count.clone());
        let (k, n) = (k.clone(), n.clone());
        let resource = format!("r{i}");
        set.spawn(async move {
            while !stop.load(Ordering::Relaxed) {
                let txn = shaped_txn(shape, &k, &n, &resource, token);
                let resp = tokio::time::timeout(Duration::from_secs(10), raw.txn(txn))
                    .await
                    .map_err(|_| anyhow!("raw txn timed out"))??;
                // The full txn's first level is the floor's: accepted is
                // its else branch's nested txn succeeding.
                let accepted = match shape {
                    Shape::Full => !resp.succeeded()
                        && resp.op_responses().into_iter().any(
                            |r| matches!(r, etcd_client::TxnOpResponse::Txn(t) if t.succeeded()),
                        ),
                    _ => resp.succeeded(),
                };
                if !accepted {
                    bail!("raw txn compare failed");
                }
                count.fetch_add(1, Ordering::Relaxed);
            }
            Ok(())
        });
    }
    measure(set, stop, count, d).await
}

async fn measure(
    mut set: tokio::task::JoinSet<Result<()>>,
    stop: Arc<AtomicBool>,
    count: Arc<AtomicU64>,
    d: Duration,
) -> Result<f64> {
    // Count only the window: callers are already running when it opens.
    tokio::time::sleep(Duration::from_millis(50)).await;
    let c0 = count.load(Ordering::Relaxed);
    let t0 = Instant::now();
    tokio::time::sleep(d).await;
    let c1 = count.load(Ordering::Relaxed);
    let elapsed = t0.elapsed();
    stop.store(true, Ordering::Relaxed);
    while let Some(r) = set.join_next().await {
        r??;
    }
    Ok((c1 - c0) as f64 / elapsed.as_secs_f64())
}
