//! Measurement 2q — the FIFO queue layout (issue 13).
//!
//! - Takeover after resign, from commit: tenure `campaign_wait` with
//!   `CampaignOptions::queued()` (the candidate's key is queued beforehand;
//!   on the predecessor's DELETE it confirms with one txn) against etcd's
//!   own v3election `Campaign` (the server answers once the keys before the
//!   candidate's are gone), trials alternating in the same run.
//! - A herd: W candidates wait on one election, in each layout; each
//!   handover (the leader resigns) is timed from the resign call to the
//!   next leader's return, and its wake-ups are counted as the campaign
//!   txns etcd saw (`etcd_mvcc_txn_total` from etcd's own /metrics, minus
//!   the resign's one txn): the queue wakes its one successor, the
//!   single-key watch wakes every waiter.

use std::time::{Duration, Instant};

use anyhow::{anyhow, bail, Result};
use tenure::election::{CampaignOptions, Client, Leadership, Ttl};
use tokio::sync::mpsc;

use crate::common::{connect, get, http, ms_between, name, tenure_client};
use crate::stats::{Row, Summary, Target};
use crate::support::Etcd as EtcdProcess;
use crate::takeover::{etcd_trial, observed, start_observer, Deletes, Trial};
use crate::Config;

const SETTLE: Duration = Duration::from_millis(250);

fn opts(queue: bool) -> CampaignOptions {
    let o = CampaignOptions::new(Ttl::from_secs(10).expect("ttl"));
    if queue {
        o.queued()
    } else {
        o
    }
}

pub async fn run(cfg: &Config) -> Result<Vec<Row>> {
    let etcd = EtcdProcess::start().await;
    let endpoint = etcd.endpoint();
    let client = tenure_client(&endpoint).await?;
    let mut raw = connect(&endpoint).await?;
    let (observer, mut deletes) = start_observer(&endpoint).await?;
    let (mut ten, mut ours_etcd) = (vec![], vec![]);
    for i in 0..cfg.queue_trials {
        if i % 2 == 0 {
            ten.push(queue_trial(&client, &mut deletes, i).await?);
            ours_etcd.push(etcd_trial(&mut raw, &mut deletes, 1000 + i).await?);
        } else {
            ours_etcd.push(etcd_trial(&mut raw, &mut deletes, 1000 + i).await?);
            ten.push(queue_trial(&client, &mut deletes, i).await?);
        }
    }
    observer.abort();
    let commit = |v: &[Trial]| v.iter().map(Trial::ms_from_commit).collect::<Vec<_>>();
    let call = |v: &[Trial]| v.iter().map(Trial::ms_from_call).collect::<Vec<_>>();
    let (tc, ec) = (commit(&ten), commit(&ours_etcd));
    let (tl, el) = (call(&ten), call(&ours_etcd));
    let (ts, es) = (Summary::of(&tl), Summary::of(&el));
    let (tcs, ecs) = (Summary::of(&tc), Summary::of(&ec));

    let metrics = format!("{endpoint}/metrics");
    let (q_ms, q_wake, q_writes) = herd(
        &client,
        &metrics,
        true,
        cfg.herd_waiters,
        cfg.herd_handovers,
    )
    .await?;
    let (s_ms, s_wake, s_writes) = herd(
        &client,
        &metrics,
        false,
        cfg.herd_waiters,
        cfg.herd_handovers,
    )
    .await?;
    let (qs, ss) = (Summary::of(&q_wake), Summary::of(&s_wake));
    let (qw, sw) = (Summary::of(&q_writes), Summary::of(&s_writes));
    let rows = vec![
        Row::time(
            "2q",
            "takeover after resign, from the resign call: tenure campaign_wait, queue layout",
            "ms",
            &tl,
        )
        .baseline_samples("etcd v3election Campaign", &el)
        .median_ratio()
        .target(Target::RatioAtMost(1.2))
        .note(format!(
            "{} trials each, alternating; ratio of medians {:.2}, of p99s {:.2}; the resign's own commit is \
             in both",
            cfg.queue_trials,
            ts.median / es.median,
            ts.p99 / es.p99
        )),
        Row::time(
            "2t",
            "takeover after resign, from commit: tenure campaign_wait, queue layout",
            "ms",
            &tc,
        )
        .baseline_samples("etcd v3election Campaign", &ec)
        .note(format!(
            "commit = the earliest of the resign's answer and an independent watch's DELETE; both candidates \
             learn of the DELETE as fast as that watch does (medians {:.3} and {:.3} ms: negative means before \
             it), so a ratio of these near-zero figures says nothing; 2q compares them from the resign call",
            tcs.median, ecs.median
        )),
        Row::time(
            "2r",
            &format!(
                "handover with {} waiting candidates, from the resign call: queue layout",
                cfg.herd_waiters
            ),
            "ms",
            &q_ms,
        )
        .baseline_samples("tenure single-key layout", &s_ms)
        .median_ratio()
        .note(format!(
            "{} handovers each; watch events delivered per handover: queue median {:.0} (max {:.0}), \
             single-key median {:.0} (max {:.0}); campaign writes per handover: queue {:.0}, single-key {:.0}",
            cfg.herd_handovers, qs.median, qs.max, ss.median, ss.max, qw.median, sw.median
        )),
        Row::time(
            "2s",
            &format!(
                "watch events delivered per handover with {} waiting candidates: queue layout",
                cfg.herd_waiters
            ),
            "events",
            &q_wake,
        )
        .baseline_samples("tenure single-key layout", &s_wake)
        .median_ratio()
        .note("etcd's own count (etcd_debugging_mvcc_events_total) per handover, less what a resign with nobody waiting costs: each waiter woken gets at least the DELETE"),
    ];
    drop(etcd);
    Ok(rows)
}

async fn queue_trial(client: &Client, deletes: &mut Deletes, i: usize) -> Result<Trial> {
    let n = name(&format!("takeover/queue-{i}"));
    let holder = client
        .campaign_wait(&n, "holder-a", &opts(true), Some(Duration::from_secs(10)))
        .await
        .map_err(|e| anyhow!("holder: {e}"))?;
    let key = holder.key().to_owned();
    let (c, n2) = (client.clone(), n.clone());
    let waiter = tokio::spawn(async move {
        let r = c
            .campaign_wait(
                &n2,
                "candidate-b",
                &opts(true),
                Some(Duration::from_secs(20)),
            )
            .await;
        (r, Instant::now())
    });
    tokio::time::sleep(SETTLE).await;
    if waiter.is_finished() {
        bail!("queued candidate returned before the resign");
    }
    let sent = Instant::now();
    holder.resign().await.map_err(|e| anyhow!("resign: {e}"))?;
    let answered = Instant::now();
    let (won, at) = tokio::time::timeout(Duration::from_secs(30), waiter)
        .await
        .map_err(|_| anyhow!("queued candidate did not take over within 30 s"))??;
    let leadership = won.map_err(|e| anyhow!("campaign_wait: {e}"))?;
    let observed = observed(deletes, key.as_bytes()).await?;
    let _ = leadership.resign().await;
    Ok(Trial {
        sent,
        answered,
        observed,
        won: at,
    })
}

/// (watch events etcd sent, raft proposals committed) from etcd's /metrics.
async fn counters(metrics: &str) -> Result<(f64, f64)> {
    let (status, body, _) = get(&http(), metrics).await?;
    if status != 200 {
        bail!("etcd /metrics answered {status}");
    }
    let read = |name: &str| {
        body.lines()
            .find_map(|l| l.strip_prefix(name))
            .and_then(|v| v.trim().parse::<f64>().ok())
            .ok_or_else(|| anyhow!("{name} missing from etcd's /metrics"))
    };
    Ok((
        read("etcd_debugging_mvcc_events_total ")?,
        read("etcd_server_proposals_committed_total ")?,
    ))
}

/// Waits until etcd's counters have not moved for 300 ms.
async fn settled(metrics: &str) -> Result<(f64, f64)> {
    let mut last = counters(metrics).await?;
    loop {
        tokio::time::sleep(Duration::from_millis(300)).await;
        let now = counters(metrics).await?;
        if now == last {
            return Ok(now);
        }
        last = now;
    }
}

/// `waiters` candidates wait on one election; `handovers` times the leader
/// resigns. Returns, per handover: ms from the resign call to the next
/// leader's return; watch events etcd delivered (every waiter woken gets
/// at least one); campaign writes (raft proposals beyond the resign's).
async fn herd(
    client: &Client,
    metrics: &str,
    queue: bool,
    waiters: usize,
    handovers: usize,
) -> Result<(Vec<f64>, Vec<f64>, Vec<f64>)> {
    let n = name(&format!("herd/{}", if queue { "queue" } else { "single" }));
    // What a resign costs with nobody waiting: subtracted below.
    let alone = client
        .campaign_wait(&n, "alone", &opts(queue), Some(Duration::from_secs(10)))
        .await
        .map_err(|e| anyhow!("alone: {e}"))?;
    let before = settled(metrics).await?;
    alone.resign().await.map_err(|e| anyhow!("resign: {e}"))?;
    let after = settled(metrics).await?;
    let resign_cost = (after.0 - before.0, after.1 - before.1);
    let mut current = client
        .campaign_wait(&n, "first", &opts(queue), Some(Duration::from_secs(10)))
        .await
        .map_err(|e| anyhow!("first: {e}"))?;
    let (tx, mut won) = mpsc::unbounded_channel::<(Leadership, Instant)>();
    let mut tasks = Vec::new();
    for w in 0..waiters {
        let (c, n, tx) = (client.clone(), n.clone(), tx.clone());
        tasks.push(tokio::spawn(async move {
            if let Ok(l) = c
                .campaign_wait(&n, &format!("waiter-{w}"), &opts(queue), None)
                .await
            {
                let _ = tx.send((l, Instant::now()));
            }
        }));
    }
    let (mut times, mut wakes, mut writes) = (Vec::new(), Vec::new(), Vec::new());
    for _ in 0..handovers.min(waiters) {
        let before = settled(metrics).await?;
        let sent = Instant::now();
        current.resign().await.map_err(|e| anyhow!("resign: {e}"))?;
        let (next, at) = tokio::time::timeout(Duration::from_secs(30), won.recv())
            .await
            .map_err(|_| anyhow!("no takeover within 30 s"))?
            .ok_or_else(|| anyhow!("waiters gone"))?;
        times.push(ms_between(sent, at));
        let after = settled(metrics).await?;
        wakes.push(after.0 - before.0 - resign_cost.0);
        writes.push(after.1 - before.1 - resign_cost.1);
        current = next;
    }
    for t in tasks {
        t.abort();
    }
    let _ = current.resign().await;
    Ok((times, wakes, writes))
}
