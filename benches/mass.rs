//! Measurement 6h — one request ending many terms (issue 23).
//!
//! Setup: one etcd and one `tenure serve` (SQLite history); per run, a fresh
//! fleet of `mass_keys` elections, each led by its own key on its own lease
//! (tenure's campaign txn), all in serve's history before the run starts.
//! Then one DeleteRange deletes every leader key of the fleet.
//!
//! - tenure: from sending the delete to the history holding every end (the
//!   first and the last election's term read ended from the history file,
//!   polled every 2 ms; the batch is one transaction);
//! - baseline: a bare etcd-client watch of the same range, from the same
//!   send to its last delete event.
//!
//! - visible: from the same send to the API showing it: the first and the
//!   last election's detail (`/api/v1/elections/NAME`) and the list's
//!   first page without a holder, and `/readyz` at the delete's revision
//!   or later; polled every 5 ms, the three read as one. The list must
//!   never be ahead of the detail: a row of the list that names no holder
//!   while the detail still names one fails the run (the detail of
//!   tenure's own election reads etcd, so it may be ahead of the list).
//!
//! Afterwards every election's end cause is read from the history: each
//! must be `deleted` (the test itself deleted them while their leases
//! lived) or `unknown`; anything else fails the run.

use std::sync::atomic::{AtomicI64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::{anyhow, bail, Result};
use etcd_client::{DeleteOptions, EventType};
use tenure::events::EndCause;
use tenure::history::{Query, Reader};

use crate::common::{connect, keys, ms};
use crate::load::Fleet;
use crate::pipeline::bare_watch;
use crate::stats::{Row, Target};
use crate::support::{Etcd as EtcdProcess, Serve};
use crate::Config;

pub async fn run(cfg: &Config) -> Result<Vec<Row>> {
    let n = cfg.mass_keys;
    let etcd = EtcdProcess::start().await;
    let endpoint = etcd.endpoint();
    let dir = tempfile::tempdir()?;
    let db = dir.path().join("history.db");
    // Room for every run's fleet: a run's elections stay tracked for a
    // while after their keys are gone.
    let max = (n * (cfg.scale_runs + 1)).max(100_000).to_string();
    let serve = Serve::start(
        std::slice::from_ref(&endpoint),
        &db,
        &["--max-elections", &max],
        &[],
    )
    .await;
    let mut raw = connect(&endpoint).await?;
    let (mut tenure, mut bare, mut api, mut disagreed) = (vec![], vec![], vec![], vec![]);
    let (mut deleted, mut unknown) = (0usize, 0usize);
    for run in 0..cfg.scale_runs {
        // Each run's names sort before the earlier runs': the list's first
        // page shows this run's first election.
        let tag = cfg.scale_runs - run;
        let fleet = Fleet::new(&endpoint, &format!("mass{tag:04}"), n).await?;
        fleet.campaign_all("holder").await?;
        let (first, last) = match (fleet.names.first(), fleet.names.last()) {
            (Some(f), Some(l)) => (f.to_string(), l.to_string()),
            _ => bail!("no elections"),
        };
        let reader = Reader::open(&db).map_err(|e| anyhow!("history: {e}"))?;
        let q = Query {
            limit: Some(1),
            ..Query::default()
        };
        let term = |name: &str| -> Result<Option<Option<EndCause>>> {
            let rows = reader
                .terms(name, &q)
                .map_err(|e| anyhow!("history: {e}"))?;
            Ok(rows.first().map(|t| t.end_cause))
        };
        // Every term started in the history before the delete.
        let deadline = Instant::now() + Duration::from_secs(120);
        while term(&last)?.is_none() || term(&first)?.is_none() {
            if Instant::now() > deadline {
                bail!("history never showed {last}:\n{}", serve.log_text());
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        // The bare watch, from the next revision.
        let from = crate::common::revision(&mut raw).await? + 1;
        let mut stream = bare_watch(&mut raw.clone(), from).await?;
        let watcher = tokio::spawn(async move {
            let mut seen = 0usize;
            while let Ok(Some(resp)) = stream.message().await {
                seen += resp
                    .events()
                    .iter()
                    .filter(|e| e.event_type() == EventType::Delete)
                    .count();
                if seen >= n {
                    return Some(Instant::now());
                }
            }
            None
        });
        let k = keys();
        let mut end = k.leader_key(&fleet.names[n - 1]).into_bytes();
        end.push(0);
        let target = Arc::new(AtomicI64::new(i64::MAX));
        let seen = tokio::spawn(visible(
            serve.url(""),
            first.clone(),
            last.clone(),
            target.clone(),
        ));
        let sent = Instant::now();
        let resp = raw
            .delete(
                k.leader_key(&fleet.names[0]),
                Some(DeleteOptions::new().with_range(end)),
            )
            .await?;
        if resp.deleted() != n as i64 {
            bail!("the delete removed {} keys, expected {n}", resp.deleted());
        }
        let deleted_at = resp.header().map(|h| h.revision()).unwrap_or_default();
        target.store(deleted_at, Ordering::SeqCst);
        let deadline = Instant::now() + Duration::from_secs(120);
        let recorded = loop {
            if matches!(term(&last)?, Some(Some(_))) && matches!(term(&first)?, Some(Some(_))) {
                break Instant::now();
            }
            if Instant::now() > deadline {
                bail!("history never recorded the ends:\n{}", serve.log_text());
            }
            tokio::time::sleep(Duration::from_millis(2)).await;
        };
        let watched = tokio::time::timeout(Duration::from_secs(60), watcher)
            .await
            .map_err(|_| anyhow!("the bare watch never saw {n} deletes"))??
            .ok_or_else(|| anyhow!("the bare watch ended"))?;
        let (shown, apart) = tokio::time::timeout(Duration::from_secs(120), seen)
            .await
            .map_err(|_| anyhow!("the API never showed the deletion"))???;
        disagreed.push(ms(apart));
        tenure.push(ms(recorded - sent));
        bare.push(ms(watched - sent));
        api.push(ms(shown - sent));
        // Every cause against what this bench did.
        for name in &fleet.names {
            match term(name.as_str())? {
                Some(Some(EndCause::Deleted)) => deleted += 1,
                Some(Some(EndCause::Unknown)) => unknown += 1,
                other => bail!("{name}: deleted by one DeleteRange, history says {other:?}"),
            }
        }
        eprintln!(
            "  run {run}: {n} keys deleted in one request: history {:.0} ms, API and /readyz {:.0} ms \
             (the list behind the detail {:.0} ms), bare watch {:.0} ms",
            ms(recorded - sent),
            ms(shown - sent),
            ms(apart),
            ms(watched - sent)
        );
        fleet.release().await;
    }
    drop(serve);
    drop(etcd);
    Ok(vec![Row::time(
        "6h",
        &format!("{n} leader keys deleted in one request: in the history with their causes"),
        "ms",
        &tenure,
    )
    .baseline_samples("bare etcd-client watch: every delete event", &bare)
    .median_ratio()
    .target(Target::MedianAtMost(2000.0))
    .note(format!(
        "from sending the DeleteRange; causes read back over {} runs: {deleted} deleted, {unknown} unknown, none wrong", cfg.scale_runs
    )),
    Row::time(
        "6i",
        &format!("{n} leader keys deleted in one request: shown by the API and /readyz"),
        "ms",
        &api,
    )
    .baseline_samples("bare etcd-client watch: every delete event", &bare)
    .median_ratio()
    .target(Target::MedianAtMost(2000.0))
    .note(format!(
        "the first and last election's detail and the list's first page without a holder, and \
         /readyz at the delete's revision; the list (history) behind the detail (etcd) by {:.0} ms \
         at most, never ahead",
        disagreed.iter().cloned().fold(0.0, f64::max)
    ))])
}

/// Polls the API (every 5 ms) until the first and the last election have
/// no holder, in their detail and in the list's first page, and `/readyz`
/// says the revision in `target` or a later one (`i64::MAX` until the
/// delete answered); returns when that poll was sent, and how long the
/// list still named the first election's holder after its detail named
/// none (the detail of tenure's own election reads etcd, the list the
/// history). Fails when the list shows no holder before the detail does
/// (the detail is read after it).
async fn visible(
    base: String,
    first: String,
    last: String,
    target: Arc<AtomicI64>,
) -> Result<(Instant, Duration)> {
    let http = crate::common::http();
    let get = |path: String| {
        let (http, base) = (http.clone(), base.clone());
        async move {
            let (_, body, _) = crate::common::get(&http, &format!("{base}{path}")).await?;
            Ok::<_, anyhow::Error>(body)
        }
    };
    let json = |body: String| serde_json::from_str::<serde_json::Value>(&body);
    let holder = |v: &serde_json::Value| v["holder"].as_str().map(str::to_owned);
    let esc = |n: &str| n.replace('/', "%2F");
    let deadline = Instant::now() + Duration::from_secs(120);
    let (mut detail_gone, mut list_gone) = (None, None);
    loop {
        let at = Instant::now();
        let list = json(get("/api/v1/elections?limit=1".into()).await?)?;
        let a = json(get(format!("/api/v1/elections/{}", esc(&first))).await?)?;
        let b = json(get(format!("/api/v1/elections/{}", esc(&last))).await?)?;
        let ready = get("/readyz".into()).await?;
        let row = &list["elections"][0];
        // The list's row of this run's first election, without a holder
        // (an empty list, or another election's row, is not that).
        let row_gone = row["name"].as_str() == Some(first.as_str()) && holder(row).is_none();
        if row_gone && holder(&a).is_some() {
            bail!("the list showed {first} without a holder before its detail did: {row} / {a}");
        }
        let revision = ready
            .strip_prefix("ready: watching at revision ")
            .and_then(|r| r.lines().next())
            .and_then(|r| r.trim().parse::<i64>().ok())
            .unwrap_or(0);
        if holder(&a).is_none() {
            detail_gone.get_or_insert(at);
        }
        if row_gone {
            list_gone.get_or_insert(at);
        }
        let gone = holder(&a).is_none() && holder(&b).is_none() && row_gone;
        if gone && revision >= target.load(Ordering::SeqCst) {
            let apart = match (detail_gone, list_gone) {
                (Some(d), Some(l)) => l.saturating_duration_since(d),
                _ => Duration::ZERO,
            };
            return Ok((at, apart));
        }
        if Instant::now() > deadline {
            bail!("the API never showed the deletion: {row} {a} {b} {ready}");
        }
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
}
