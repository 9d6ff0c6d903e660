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
//!
//! Measurement 1g: the same with `--db postgres://…`, a harness
//! PostgreSQL: each cluster is recorded by its own writer (elected in its
//! own etcd, its own watcher, its commits fenced on its own row), and the
//! clock stops when both resume revisions are committed in the database
//! (polled every 10 ms) and serve has exited.

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
    let mut rows = vec![Row::rate(
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
    ))];
    rows.extend(shared(cfg, &ea, &eb, wa, wb).await?);
    Ok(rows)
}

/// 1g: the same two loads replayed by `tenure serve --cluster a=… --cluster
/// b=… --db postgres://…`, each cluster recorded by its own writer (its
/// own watcher and fenced commits) into one shared history, against the two
/// bare watches. Skipped without PostgreSQL's `initdb`.
async fn shared(cfg: &Config, ea: &str, eb: &str, wa: &Written, wb: &Written) -> Result<Vec<Row>> {
    if crate::support::postgres::initdb().is_none() {
        eprintln!("  two clusters, shared history: skipped: PostgreSQL's initdb not found");
        return Ok(Vec::new());
    }
    let pg = crate::support::postgres::Postgres::start();
    let events = (wa.revisions() + wb.revisions()) as f64;
    let (mut t_rate, mut b_rate) = (vec![], vec![]);
    for run in 0..cfg.runs {
        let url = pg.create_database(&format!("clusters{run}"));
        let (t, (bare, _)) = if run % 2 == 0 {
            let t = tenure_two_pg(&url, ea, eb, wa, wb).await?;
            (t, bare_two(ea, eb, wa, wb).await?)
        } else {
            let b = bare_two(ea, eb, wa, wb).await?;
            (tenure_two_pg(&url, ea, eb, wa, wb).await?, b)
        };
        t_rate.push(events / t.as_secs_f64());
        b_rate.push(events / bare.as_secs_f64());
        eprintln!(
            "  run {}: tenure serve (two clusters, PostgreSQL) {:.0} ms, two bare watches {:.0} ms",
            run + 1,
            ms(t),
            ms(bare)
        );
    }
    Ok(vec![Row::rate(
        "1g",
        "ingestion, two clusters into one PostgreSQL history, replay",
        "revisions/s",
        &t_rate,
    )
    .baseline_samples("two bare etcd-client watches, side by side", &b_rate)
    .paired_ratio(&t_rate, &b_rate)
    .target(Target::RatioAtLeast(0.9))
    .note(
        "real `tenure serve --cluster a=… --cluster b=… --db postgres://…` (a writer per \
         cluster, each its own watcher and fenced commits); serve's clock from its 'serving on' \
         line until both clusters' resume revisions are committed in the database, and its exit"
            .to_owned(),
    )])
}

/// Each cluster's resume revision in the shared history, as its writer
/// left it before the loads (a seed writer of token 1: every real writer's
/// token is above it).
async fn seed_pg(url: &str, wa: &Written, wb: &Written) -> Result<()> {
    for (name, w) in [("a", wa), ("b", wb)] {
        let u = url.to_owned();
        let store = tokio::task::spawn_blocking(move || {
            Store::open_postgres_for(
                &u,
                name,
                Duration::ZERO,
                1,
                "seed",
                Box::new(|| Ok(i64::MAX)),
            )
        })
        .await?
        .map_err(|e| anyhow!("history: {e}"))?;
        let empty = Batch {
            revision: w.before,
            events: vec![],
        };
        store
            .write_in(Some(Arc::from(name)), empty)
            .await
            .map_err(|e| anyhow!("seeding the history: {e}"))?;
        store.close().await.map_err(|e| anyhow!("history: {e}"))?;
    }
    Ok(())
}

/// The real serve's writers replay both clusters' loads into the shared
/// history: until both resume revisions are committed, and serve exits.
async fn tenure_two_pg(
    url: &str,
    ea: &str,
    eb: &str,
    wa: &Written,
    wb: &Written,
) -> Result<Duration> {
    seed_pg(url, wa, wb).await?;
    let (ca, cb) = (format!("a={ea}"), format!("b={eb}"));
    let args = ["--cluster", &ca, "--cluster", &cb, "--cluster-poll", "0"];
    let serve = Serve::start(&[ea.to_owned()], std::path::Path::new(url), &args, &[]).await;
    let t = Instant::now();
    let u = url.to_owned();
    let reader = tokio::task::spawn_blocking(move || tenure::history::Reader::open_postgres(&u))
        .await?
        .map_err(|e| anyhow!("{e}"))?;
    let deadline = t + Duration::from_secs(120);
    let (la, lb) = (wa.last, wb.last);
    loop {
        let r = reader.clone();
        let done = tokio::task::spawn_blocking(move || {
            let at = |c: &str| {
                r.writer_status_of(Some(c))
                    .ok()
                    .flatten()
                    .and_then(|s| s.revision)
                    .unwrap_or(0)
            };
            at("a") >= la && at("b") >= lb
        })
        .await?;
        if done {
            break;
        }
        if Instant::now() > deadline {
            bail!(
                "the writers did not commit both clusters' revisions: {:?}",
                serve.logs()
            );
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    let logs = serve.logs();
    if serve.stop().await != Some(0) {
        bail!("serve did not stop cleanly: {logs:?}");
    }
    Ok(t.elapsed())
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
