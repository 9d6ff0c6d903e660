//! Measurement 1f — Two clusters, one serve (issue 25): the same load in two
//! etcd processes, replayed by the real `tenure serve --cluster a=… --cluster
//! b=…` (both watchers, the one serve loop, the one history, committed)
//! against two bare etcd-client watches draining the same ranges side by
//! side. Target: tenure's rate at least 0.9 of the two bare watches'.
//!
//! The history is seeded with each cluster's resume revision (the revision
//! before its load), as a serve that stopped there left it: serve then
//! replays both ranges. tenure's clock starts when serve says where it
//! serves (connected, history open; the watchers start next) and stops when
//! the process has exited after SIGTERM, its history committed; it asks
//! `/metrics` every 10 ms whether both clusters' revisions are reached. The
//! bare clock runs from before both connect to both done. Runs alternate
//! which goes first.

use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::{anyhow, bail, Result};
use tenure::events::Batch;
use tenure::history::Store;

use crate::common::ms;
use crate::ingest::bare_replay;
use crate::load::{Fleet, Written};
use crate::stats::{Row, Target};
use crate::support::{metric_value, Etcd as EtcdProcess, Serve};
use crate::Config;

pub async fn run(cfg: &Config) -> Result<Vec<Row>> {
    let (a, b) = (EtcdProcess::start().await, EtcdProcess::start().await);
    let (ea, eb) = (a.endpoint(), b.endpoint());
    let mut written = Vec::new();
    for e in [&ea, &eb] {
        let fleet = Fleet::new(e, "ingest", cfg.ingest_elections).await?;
        written.push(fleet.churn(cfg.ingest_cycles).await?);
    }
    let (wa, wb) = (&written[0], &written[1]);
    let events = (wa.revisions() + wb.revisions()) as f64;
    eprintln!(
        "  two clusters: {} + {} revisions ({} elections × {} terms each)",
        wa.revisions(),
        wb.revisions(),
        cfg.ingest_elections,
        cfg.ingest_cycles
    );
    let (mut t_rate, mut b_rate) = (vec![], vec![]);
    let mut bare_events = 0;
    for run in 0..cfg.runs {
        let (t, (bare, n)) = if run % 2 == 0 {
            let t = tenure_two(&ea, &eb, wa, wb).await?;
            (t, bare_two(&ea, &eb, wa, wb).await?)
        } else {
            let b = bare_two(&ea, &eb, wa, wb).await?;
            (tenure_two(&ea, &eb, wa, wb).await?, b)
        };
        bare_events = n;
        t_rate.push(events / t.as_secs_f64());
        b_rate.push(events / bare.as_secs_f64());
        eprintln!(
            "  run {}: tenure serve (two clusters) {:.0} ms, two bare watches {:.0} ms",
            run + 1,
            ms(t),
            ms(bare)
        );
    }
    Ok(vec![Row::rate(
        "1f",
        "ingestion, two clusters in one serve, replay",
        "revisions/s",
        &t_rate,
    )
    .baseline_samples("two bare etcd-client watches, side by side", &b_rate)
    .paired_ratio(&t_rate, &b_rate)
    .target(Target::RatioAtLeast(0.9))
    .note(format!(
        "real `tenure serve --cluster a=… --cluster b=…`, {} + {} revisions ({bare_events} etcd events); \
         serve's clock from its 'serving on' line to its exit after SIGTERM (history committed)",
        wa.revisions(),
        wb.revisions()
    ))])
}

/// The real serve replays both clusters' loads into a fresh history.
async fn tenure_two(ea: &str, eb: &str, wa: &Written, wb: &Written) -> Result<Duration> {
    let dir = tempfile::tempdir()?;
    let db = dir.path().join("history.db");
    {
        // As a serve that stopped before the loads left it.
        let store = Store::open(&db, Duration::ZERO).map_err(|e| anyhow!("history: {e}"))?;
        for (name, w) in [("a", wa), ("b", wb)] {
            let empty = Batch {
                revision: w.before,
                events: vec![],
            };
            store
                .write_in(Some(Arc::from(name)), empty)
                .await
                .map_err(|e| anyhow!("seeding the history: {e}"))?;
        }
        store.close().await.map_err(|e| anyhow!("history: {e}"))?;
    }
    let (ca, cb) = (format!("a={ea}"), format!("b={eb}"));
    let serve = Serve::start(
        &[ea.to_owned()],
        &db,
        &["--cluster", &ca, "--cluster", &cb, "--cluster-poll", "0"],
        &[],
    )
    .await;
    let t = Instant::now();
    let deadline = t + Duration::from_secs(120);
    loop {
        let m = serve.metrics().await;
        let at = |c: &str| {
            metric_value(&m, &format!(r#"tenure_watch_revision{{cluster="{c}"}}"#)).unwrap_or(0.0)
        };
        if at("a") >= wa.last as f64 && at("b") >= wb.last as f64 {
            break;
        }
        if Instant::now() > deadline {
            bail!(
                "serve did not reach both clusters' revisions: {:?}",
                serve.logs()
            );
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    let logs = serve.logs();
    if serve.stop().await != Some(0) {
        bail!("serve did not stop cleanly: {logs:?}");
    }
    let elapsed = t.elapsed();
    let reader = tenure::history::Reader::open(&db).map_err(|e| anyhow!("{e}"))?;
    for (name, w) in [("a", wa), ("b", wb)] {
        let r = reader
            .resume_point_of(Some(name))
            .map_err(|e| anyhow!("{e}"))?
            .map_or(0, |r| r.revision);
        if r < w.last {
            bail!(
                "cluster {name}: history committed up to {r}, not {}",
                w.last
            );
        }
    }
    Ok(elapsed)
}

/// Two bare watches drain both ranges side by side: the time until both are
/// done, and the etcd events they saw.
async fn bare_two(ea: &str, eb: &str, wa: &Written, wb: &Written) -> Result<(Duration, usize)> {
    let t = Instant::now();
    let (a, b) = tokio::join!(
        bare_replay(ea, wa.before, wa.last),
        bare_replay(eb, wb.before, wb.last)
    );
    let (a, b) = (a?, b?);
    Ok((t.elapsed(), a.events + b.events))
}
