//! Measurement 2 — Takeover after resign, for a candidate already waiting.
//!
//! - tenure: `Client::campaign_wait` (watches the leader key, retries the
//!   compare-and-create txn on the DELETE); the holder resigns with tenure's
//!   own resign txn (delete + end marker), then revokes its lease.
//! - etcd: v3election `Campaign` through etcd-client's election client (the
//!   candidate's key is queued; etcd answers once the keys before it are
//!   gone); the holder calls `Resign`, then revokes its lease.
//! - client-go-style poller: tries tenure's campaign txn every 2 s (the
//!   holder resigns at a random point of the retry period).
//!
//! Per trial the bench records when the resign request was sent, when its
//! answer came, when an independent bare watch (in the bench process) saw
//! the DELETE, and when the candidate's call returned. Two figures:
//!
//! - from commit: the candidate's return − the earliest sign the DELETE is
//!   committed (the resign's answer or the observer's event);
//! - from the resign call: the candidate's return − the resign's send
//!   (includes the resign's own commit, the same for both).
//!
//! tenure and etcd trials alternate, each on a fresh election name, with the
//! candidate given 250 ms to be waiting before the resign. A plain campaign
//! txn round trip (uncontended) is timed beside them: it is what a
//! compare-and-create takeover needs after the DELETE is seen.

use std::time::{Duration, Instant};

use anyhow::{anyhow, bail, Result};
use etcd_client::{EventType, ResignOptions};
use tenure::election::{CampaignOptions, Ttl};
use tokio::sync::mpsc;

use crate::common::{
    campaign_txn, connect, grant, keys, ms, ms_between, name, resign_txn, tenure_client,
};
use crate::stats::{Row, Summary, Target};
use crate::support::rng::Rng;
use crate::support::Etcd as EtcdProcess;
use crate::Config;

const SETTLE: Duration = Duration::from_millis(250);
const POLL_PERIOD: Duration = Duration::from_secs(2);

/// Instants of one trial.
#[derive(Clone, Copy)]
pub struct Trial {
    pub sent: Instant,
    pub answered: Instant,
    pub observed: Instant,
    pub won: Instant,
}

impl Trial {
    pub fn ms_from_commit(&self) -> f64 {
        ms_between(self.answered.min(self.observed), self.won)
    }

    pub fn ms_from_call(&self) -> f64 {
        ms_between(self.sent, self.won)
    }
}

/// DELETEs seen by the observer: (key, arrival).
pub type Deletes = mpsc::UnboundedReceiver<(Vec<u8>, Instant)>;

pub async fn observed(deletes: &mut Deletes, key: &[u8]) -> Result<Instant> {
    let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
    loop {
        match tokio::time::timeout_at(deadline, deletes.recv()).await {
            Ok(Some((k, at))) if k == key => return Ok(at),
            Ok(Some(_)) => {}
            _ => bail!(
                "the observer did not see the DELETE of {}",
                String::from_utf8_lossy(key)
            ),
        }
    }
}

/// The observer: its own connection, every DELETE under the trials' prefix
/// `election/takeover/`, with the moment it arrived.
pub async fn start_observer(endpoint: &str) -> Result<(tokio::task::JoinHandle<()>, Deletes)> {
    let mut obs_client = connect(endpoint).await?;
    let mut stream = obs_client
        .watch(
            "election/takeover/",
            Some(etcd_client::WatchOptions::new().with_prefix()),
        )
        .await?;
    let (tx, deletes) = mpsc::unbounded_channel();
    let observer = tokio::spawn(async move {
        let _client = obs_client;
        while let Ok(Some(resp)) = stream.message().await {
            let at = Instant::now();
            for e in resp.events() {
                if e.event_type() == EventType::Delete {
                    if let Some(kv) = e.kv() {
                        let _ = tx.send((kv.key().to_vec(), at));
                    }
                }
            }
        }
    });
    Ok((observer, deletes))
}

pub async fn run(cfg: &Config) -> Result<Vec<Row>> {
    let etcd = EtcdProcess::start().await;
    let endpoint = etcd.endpoint();
    let client = tenure_client(&endpoint).await?;
    let mut raw = connect(&endpoint).await?;
    let (observer, mut deletes) = start_observer(&endpoint).await?;
    let (mut ten, mut ours_etcd, mut poll, mut rtt) = (vec![], vec![], vec![], vec![]);
    let (mut late, mut split) = (vec![], vec![]);
    for i in 0..cfg.takeover_trials {
        if i % 2 == 0 {
            ten.push(tenure_trial(&client, &mut raw, &mut deletes, i, None).await?);
            ours_etcd.push(etcd_trial(&mut raw, &mut deletes, i).await?);
        } else {
            ours_etcd.push(etcd_trial(&mut raw, &mut deletes, i).await?);
            ten.push(tenure_trial(&client, &mut raw, &mut deletes, i, None).await?);
        }
        // Diagnostics: the resigner revokes its lease 100 ms later (no
        // write of its own racing the candidate's txn)...
        late.push(
            tenure_trial(
                &client,
                &mut raw,
                &mut deletes,
                i,
                Some(Duration::from_millis(100)),
            )
            .await?,
        );
        // ...and campaign_wait's steps by hand: when the DELETE reaches a
        // waiting candidate's own watch, and its txn's round trip.
        split.push(manual_trial(&mut raw, &mut deletes, i).await?);
        // A plain campaign txn round trip (a fresh key, so it wins).
        let n = name(&format!("takeover/rtt-{i}"));
        let lease = grant(&mut raw, 30).await?;
        let s = Instant::now();
        campaign_txn(&mut raw, &n, "x", lease).await?;
        rtt.push(ms(s.elapsed()));
        let _ = raw.lease_revoke(lease).await;
    }
    let mut rng = Rng::new(0x5eed_1234);
    for i in 0..cfg.poll_trials {
        poll.push(poll_trial(&mut raw, &mut deletes, i, &mut rng).await?);
    }
    observer.abort();
    let commit = |v: &[Trial]| v.iter().map(Trial::ms_from_commit).collect::<Vec<_>>();
    let call = |v: &[Trial]| v.iter().map(Trial::ms_from_call).collect::<Vec<_>>();
    let (tc, ec, pc) = (commit(&ten), commit(&ours_etcd), commit(&poll));
    let (tl, el) = (call(&ten), call(&ours_etcd));
    eprintln!("  tenure from commit ms: {}", fmt_list(&tc));
    eprintln!("  etcd   from commit ms: {}", fmt_list(&ec));
    eprintln!("  tenure from call   ms: {}", fmt_list(&tl));
    eprintln!("  etcd   from call   ms: {}", fmt_list(&el));
    eprintln!("  poller from commit ms: {}", fmt_list(&pc));
    eprintln!("  campaign txn rtt   ms: {}", fmt_list(&rtt));
    let rtt_s = Summary::of(&rtt);
    let lc = commit(&late);
    let seen: Vec<f64> = split
        .iter()
        .map(|(t, seen, _)| ms_between(t.answered.min(t.observed), *seen))
        .collect();
    let txn: Vec<f64> = split
        .iter()
        .map(|(t, _, sent)| ms_between(*sent, t.won))
        .collect();
    let by_hand = commit(&split.iter().map(|(t, _, _)| *t).collect::<Vec<_>>());
    eprintln!("  late-revoke from commit ms: {}", fmt_list(&lc));
    eprintln!("  by hand: DELETE seen ms: {}", fmt_list(&seen));
    eprintln!("  by hand: txn rtt ms: {}", fmt_list(&txn));
    let rows = vec![
        Row::time(
            "2a",
            "takeover after resign, from commit: tenure campaign_wait",
            "ms",
            &tc,
        )
        .baseline_samples("etcd v3election Campaign", &ec)
        .median_ratio()
        .target(Target::RatioAtMost(1.2))
        .note(format!(
            "{} trials each, alternating; commit = the earliest of the resign's answer and an independent watch's DELETE; \
             an uncontended campaign txn round trip: median {:.2} ms (p99 {:.2})",
            cfg.takeover_trials, rtt_s.median, rtt_s.p99
        )),
        Row::time(
            "2b",
            "takeover after resign, from the resign call: tenure campaign_wait",
            "ms",
            &tl,
        )
        .baseline_samples("etcd v3election Campaign", &el)
        .median_ratio()
        .note("from sending the resign request (its commit included, the same for both)"),
        Row::time(
            "2d",
            "diagnostic: tenure, resigner revokes its lease 100 ms later",
            "ms",
            &lc,
        )
        .baseline_samples("etcd v3election Campaign", &ec)
        .median_ratio()
        .note("from commit; shows what the resigner's immediate lease revoke (a write racing the candidate's txn) costs"),
        Row::time(
            "2e",
            "diagnostic: campaign_wait by hand, from commit",
            "ms",
            &by_hand,
        )
        .baseline_samples("etcd v3election Campaign", &ec)
        .median_ratio()
        .note(format!(
            "raw watch + raw campaign txn; the DELETE reached the candidate's watch after median {:.2} ms, its txn took median {:.2} ms",
            Summary::of(&seen).median,
            Summary::of(&txn).median
        )),
        Row::time(
            "2c",
            "takeover after resign, from commit: client-go-style poller (2 s retry)",
            "ms",
            &pc,
        )
        .baseline_samples("etcd v3election Campaign", &ec)
        .median_ratio()
        .note(format!(
            "{} trials; resign at a random point of the 2 s period",
            cfg.poll_trials
        )),
    ];
    drop(etcd);
    Ok(rows)
}

fn fmt_list(v: &[f64]) -> String {
    v.iter()
        .map(|x| format!("{x:.2}"))
        .collect::<Vec<_>>()
        .join(" ")
}

async fn tenure_trial(
    client: &tenure::election::Client,
    raw: &mut etcd_client::Client,
    deletes: &mut Deletes,
    i: usize,
    revoke_after: Option<Duration>,
) -> Result<Trial> {
    let tag = if revoke_after.is_some() {
        "late"
    } else {
        "tenure"
    };
    let n = name(&format!("takeover/{tag}-{i}"));
    let key = keys().leader_key(&n);
    let lease_a = grant(raw, 30).await?;
    let token = campaign_txn(raw, &n, "holder-a", lease_a)
        .await?
        .ok_or_else(|| anyhow!("{n} already held"))?;
    let (c, n2) = (client.clone(), n.clone());
    let waiter = tokio::spawn(async move {
        let opts = CampaignOptions::new(Ttl::from_secs(10).expect("ttl"));
        let r = c
            .campaign_wait(&n2, "candidate-b", &opts, Some(Duration::from_secs(20)))
            .await;
        (r, Instant::now())
    });
    tokio::time::sleep(SETTLE).await;
    if waiter.is_finished() {
        bail!("tenure candidate returned before the resign");
    }
    let sent = Instant::now();
    resign_txn(raw, &n, token, lease_a).await?;
    let answered = Instant::now();
    match revoke_after {
        None => {
            let _ = raw.lease_revoke(lease_a).await;
        }
        Some(d) => {
            let mut c = raw.clone();
            tokio::spawn(async move {
                tokio::time::sleep(d).await;
                let _ = c.lease_revoke(lease_a).await;
            });
        }
    }
    let (won, at) = tokio::time::timeout(Duration::from_secs(30), waiter)
        .await
        .map_err(|_| anyhow!("tenure candidate did not take over within 30 s"))??;
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

pub async fn etcd_trial(
    raw: &mut etcd_client::Client,
    deletes: &mut Deletes,
    i: usize,
) -> Result<Trial> {
    let election = format!("election/takeover/etcd-{i}");
    let mut ec = raw.election_client();
    let lease_a = grant(raw, 30).await?;
    let lease_b = grant(raw, 30).await?;
    let resp = tokio::time::timeout(
        Duration::from_secs(10),
        ec.campaign(election.clone(), "holder-a", lease_a),
    )
    .await
    .map_err(|_| anyhow!("etcd campaign of the holder timed out"))??;
    let leader = resp
        .leader()
        .cloned()
        .ok_or_else(|| anyhow!("Campaign answer without a leader key"))?;
    let key = leader.key().to_vec();
    let mut ec_b = raw.election_client();
    let e2 = election.clone();
    let waiter = tokio::spawn(async move {
        let r = ec_b.campaign(e2, "candidate-b", lease_b).await;
        (r, Instant::now())
    });
    tokio::time::sleep(SETTLE).await;
    if waiter.is_finished() {
        bail!("etcd candidate returned before the resign");
    }
    let sent = Instant::now();
    tokio::time::timeout(
        Duration::from_secs(10),
        ec.resign(Some(ResignOptions::new().with_leader(leader))),
    )
    .await
    .map_err(|_| anyhow!("etcd Resign timed out"))??;
    let answered = Instant::now();
    let _ = raw.lease_revoke(lease_a).await;
    let (won, at) = tokio::time::timeout(Duration::from_secs(30), waiter)
        .await
        .map_err(|_| anyhow!("etcd candidate did not take over within 30 s"))??;
    won?;
    let observed = observed(deletes, &key).await?;
    let _ = raw.lease_revoke(lease_b).await;
    Ok(Trial {
        sent,
        answered,
        observed,
        won: at,
    })
}

async fn poll_trial(
    raw: &mut etcd_client::Client,
    deletes: &mut Deletes,
    i: usize,
    rng: &mut Rng,
) -> Result<Trial> {
    let n = name(&format!("takeover/poll-{i}"));
    let key = keys().leader_key(&n);
    let lease_a = grant(raw, 30).await?;
    let token = campaign_txn(raw, &n, "holder-a", lease_a)
        .await?
        .ok_or_else(|| anyhow!("{n} already held"))?;
    let mut c = raw.clone();
    let n2 = n.clone();
    let poller = tokio::spawn(async move {
        let lease = grant(&mut c, 30).await?;
        for _ in 0..10 {
            if campaign_txn(&mut c, &n2, "poller", lease).await?.is_some() {
                let at = Instant::now();
                let _ = c.lease_revoke(lease).await;
                return Ok::<Instant, anyhow::Error>(at);
            }
            tokio::time::sleep(POLL_PERIOD).await;
        }
        bail!("poller never won")
    });
    let jitter = Duration::from_millis(rng.below(POLL_PERIOD.as_millis() as u64));
    tokio::time::sleep(SETTLE + jitter).await;
    let sent = Instant::now();
    resign_txn(raw, &n, token, lease_a).await?;
    let answered = Instant::now();
    let _ = raw.lease_revoke(lease_a).await;
    let won = tokio::time::timeout(Duration::from_secs(30), poller)
        .await
        .map_err(|_| anyhow!("poller did not take over within 30 s"))???;
    let observed = observed(deletes, key.as_bytes()).await?;
    Ok(Trial {
        sent,
        answered,
        observed,
        won,
    })
}

/// campaign_wait's steps by hand (watch the key from the revision after the
/// failed txn; on the DELETE, the campaign txn), with an immediate revoke by
/// the resigner as tenure's resign does. Returns the trial, when the DELETE
/// reached the candidate's watch and when its txn was sent.
async fn manual_trial(
    raw: &mut etcd_client::Client,
    deletes: &mut Deletes,
    i: usize,
) -> Result<(Trial, Instant, Instant)> {
    let n = name(&format!("takeover/hand-{i}"));
    let key = keys().leader_key(&n);
    let lease_a = grant(raw, 30).await?;
    let token = campaign_txn(raw, &n, "holder-a", lease_a)
        .await?
        .ok_or_else(|| anyhow!("{n} already held"))?;
    let mut c = raw.clone();
    let (n2, key2) = (n.clone(), key.clone());
    let waiter = tokio::spawn(async move {
        let lease = grant(&mut c, 30).await?;
        if campaign_txn(&mut c, &n2, "candidate-b", lease)
            .await?
            .is_some()
        {
            bail!("won while held");
        }
        let mut w = c
            .watch(
                key2.as_bytes(),
                Some(etcd_client::WatchOptions::new().with_start_revision(token + 1)),
            )
            .await?;
        loop {
            let Some(resp) = w.message().await? else {
                bail!("watch ended");
            };
            if resp
                .events()
                .iter()
                .any(|e| e.event_type() == EventType::Delete)
            {
                break;
            }
        }
        let seen = Instant::now();
        let sent = Instant::now();
        let won = campaign_txn(&mut c, &n2, "candidate-b", lease).await?;
        let at = Instant::now();
        if won.is_none() {
            bail!("lost the race");
        }
        let _ = c.lease_revoke(lease).await;
        Ok::<_, anyhow::Error>((seen, sent, at))
    });
    tokio::time::sleep(SETTLE).await;
    let sent = Instant::now();
    resign_txn(raw, &n, token, lease_a).await?;
    let answered = Instant::now();
    let _ = raw.lease_revoke(lease_a).await;
    let (seen, txn_sent, won) = tokio::time::timeout(Duration::from_secs(30), waiter)
        .await
        .map_err(|_| anyhow!("candidate did not take over within 30 s"))???;
    let observed = observed(deletes, key.as_bytes()).await?;
    Ok((
        Trial {
            sent,
            answered,
            observed,
            won,
        },
        seen,
        txn_sent,
    ))
}
