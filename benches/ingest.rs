//! Measurement 1 — Watcher ingestion: etcd events per second processed end to end by
//! tenure (watcher + state machine + metrics + history, flushed) ÷ events
//! per second drained by a bare etcd-client watch loop, under the same load.
//!
//! - replay: the load is written first; then, run after run (alternating
//!   which goes first), each consumer reads the same revision range from the
//!   same start revision, alone on the machine's client side. Both clocks
//!   start once connected (tenure: history file open too) and stop when the
//!   last revision is processed (tenure: and its history committed). The CPU time
//!   the bench process spent per 1000 events is reported too: etcd paces
//!   catching-up watchers (at most 1000 revisions per 100 ms sync in 3.4), so
//!   wall-clock rates can hit etcd's pace while CPU per event still differs.
//! - live: both consumers watch while the load is written, side by side;
//!   each rate is events ÷ (time it had processed the last revision − time
//!   the load started). tenure's history is then flushed (reported apart).

use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use anyhow::{anyhow, bail, Result};
use etcd_client::Client as Etcd;
use tenure::events::Update;
use tenure::history::Store;
use tenure::watch::WatchConfig;

use crate::common::{connect, ms};
use crate::load::Fleet;
use crate::pipeline::{bare_watch_of, Pipeline};
use crate::stats::{Row, Target};
use crate::support::procfs::self_cpu_seconds;
use crate::support::Etcd as EtcdProcess;
use crate::Config;

pub struct Consumed {
    pub events: usize,
    pub elapsed: Duration,
    pub cpu: f64,
}

/// A bare etcd-client watch drains `(after, until]`: the events, the wall
/// clock from connected to the last revision, the bench process's CPU.
pub async fn bare_replay(endpoint: &str, after: i64, until: i64) -> Result<Consumed> {
    bare_replay_of(
        endpoint,
        {
            let (s, e) = crate::common::keys().watch_range();
            (s.into_bytes(), e.into_bytes())
        },
        after,
        until,
    )
    .await
}

/// [`bare_replay`] of the range `[start, end)`.
pub async fn bare_replay_of(
    endpoint: &str,
    range: (Vec<u8>, Vec<u8>),
    after: i64,
    until: i64,
) -> Result<Consumed> {
    let mut etcd = connect(endpoint).await?;
    let cpu0 = self_cpu_seconds();
    let t = Instant::now();
    let mut stream = bare_watch_of(&mut etcd, range, after + 1).await?;
    let mut events = 0;
    loop {
        let msg = tokio::time::timeout(Duration::from_secs(30), stream.message()).await;
        let Ok(Ok(Some(resp))) = msg else {
            bail!("bare watch: stream ended or stalled before revision {until}");
        };
        events += resp.events().len();
        let last = resp
            .events()
            .last()
            .and_then(|e| e.kv())
            .map(|kv| kv.mod_revision())
            .unwrap_or(0);
        if last >= until {
            break;
        }
    }
    Ok(Consumed {
        events,
        elapsed: t.elapsed(),
        cpu: self_cpu_seconds() - cpu0,
    })
}

/// tenure's path into a fresh SQLite history (see [`replay_into`]).
async fn tenure_replay(endpoint: &str, after: i64, until: i64) -> Result<(Consumed, usize)> {
    let dir = tempfile::tempdir()?;
    let db = dir.path().join("history.db");
    let store = Store::open(&db, Duration::from_secs(30 * 86_400))
        .map_err(|e| anyhow!("history at {}: {e}", db.display()))?;
    let (consumed, transitions, ()) = replay_into(endpoint, store, after, until, || ()).await?;
    Ok((consumed, transitions))
}

/// tenure's path into `store` (already open): returns the time and the
/// bench process's CPU from the watcher's start to the last revision
/// committed, how many transitions it stored, and what `at_end` says then
/// (before the history is closed).
pub(crate) async fn replay_into<T>(
    endpoint: &str,
    store: Store,
    after: i64,
    until: i64,
    at_end: impl FnOnce() -> T,
) -> Result<(Consumed, usize, T)> {
    replay_with(
        endpoint,
        store,
        WatchConfig::default(),
        (after, until),
        at_end,
    )
    .await
}

/// [`replay_into`] reading what `cfg` says.
pub(crate) async fn replay_with<T>(
    endpoint: &str,
    store: Store,
    cfg: WatchConfig,
    (after, until): (i64, i64),
    at_end: impl FnOnce() -> T,
) -> Result<(Consumed, usize, T)> {
    let prepared = Pipeline::prepare_with(endpoint, store).await?;
    let cpu0 = self_cpu_seconds();
    let t = Instant::now();
    let mut p = prepared.start_with(after, cfg);
    let mut transitions = 0;
    loop {
        if let Update::Batch(b) = p.next(Duration::from_secs(30)).await? {
            transitions += b.events.len();
            if b.revision >= until {
                break;
            }
        }
    }
    let committed = p.flush().await?;
    let elapsed = t.elapsed();
    let cpu = self_cpu_seconds() - cpu0;
    let end = at_end();
    if committed < until {
        bail!("history committed up to {committed}, not {until}");
    }
    p.stop().await;
    Ok((
        Consumed {
            events: 0,
            elapsed,
            cpu,
        },
        transitions,
        end,
    ))
}

pub async fn run(cfg: &Config) -> Result<Vec<Row>> {
    let etcd = EtcdProcess::start().await;
    let endpoint = etcd.endpoint();
    let mut rows = Vec::new();

    // ---- replay ----
    let fleet = Fleet::new(&endpoint, "ingest", cfg.ingest_elections).await?;
    let written = fleet.churn(cfg.ingest_cycles).await?;
    eprintln!(
        "  replay load: {} elections × {} terms = {} revisions ({} etcd events) written in {:.2} s ({:.0} revisions/s)",
        cfg.ingest_elections,
        cfg.ingest_cycles,
        written.revisions(),
        written.etcd_events(),
        written.elapsed.as_secs_f64(),
        written.revisions() as f64 / written.elapsed.as_secs_f64()
    );
    let (mut t_rate, mut b_rate, mut t_cpu, mut b_cpu) = (vec![], vec![], vec![], vec![]);
    let mut transitions = 0;
    for run in 0..cfg.runs {
        let one = |first_tenure: bool| {
            let endpoint = endpoint.clone();
            async move {
                if first_tenure {
                    let t = tenure_replay(&endpoint, written.before, written.last).await?;
                    let b = bare_replay(&endpoint, written.before, written.last).await?;
                    Ok::<_, anyhow::Error>((t, b))
                } else {
                    let b = bare_replay(&endpoint, written.before, written.last).await?;
                    let t = tenure_replay(&endpoint, written.before, written.last).await?;
                    Ok((t, b))
                }
            }
        };
        let ((t, tr), b) = one(run % 2 == 1).await?;
        transitions = tr;
        let events = b.events as f64;
        t_rate.push(events / t.elapsed.as_secs_f64());
        b_rate.push(events / b.elapsed.as_secs_f64());
        t_cpu.push(t.cpu * 1000.0 / events * 1000.0);
        b_cpu.push(b.cpu * 1000.0 / events * 1000.0);
        eprintln!(
            "  replay run {}: {} events; tenure {:.0} ms ({:.0} ev/s, cpu {:.0} ms), bare {:.0} ms ({:.0} ev/s, cpu {:.0} ms)",
            run + 1,
            b.events,
            ms(t.elapsed),
            t_rate.last().unwrap(),
            t.cpu * 1000.0,
            ms(b.elapsed),
            b_rate.last().unwrap(),
            b.cpu * 1000.0
        );
    }
    rows.push(
        Row::rate("1a", "ingestion, replay (wall clock)", "etcd events/s", &t_rate)
            .baseline_samples("bare etcd-client watch", &b_rate)
            .paired_ratio(&t_rate, &b_rate)
            .target(Target::RatioAtLeast(0.9))
            .note(format!(
                "{} elections × {} terms: {} revisions, {} etcd events, {} tenure transitions; history flushed before the clock stops",
                cfg.ingest_elections,
                cfg.ingest_cycles,
                written.revisions(),
                written.etcd_events(),
                transitions
            )),
    );
    rows.push(
        Row::time("1b", "ingestion, replay: CPU per 1000 events", "ms", &t_cpu)
            .baseline_samples("bare etcd-client watch", &b_cpu)
            .paired_ratio(&t_cpu, &b_cpu)
            .note("bench process CPU (user+sys, all threads incl. the history writer), 10 ms tick resolution"),
    );

    // ---- live ----
    let (mut t_rate, mut b_rate, mut flush_ms, mut w_rate) = (vec![], vec![], vec![], vec![]);
    for run in 0..cfg.runs {
        let r = live_run(&endpoint, &fleet, cfg.live_cycles).await?;
        eprintln!(
            "  live run {}: {} events written in {:.0} ms; tenure done at {:.0} ms (+{:.1} ms flush), bare at {:.0} ms",
            run + 1,
            r.events,
            ms(r.write),
            ms(r.tenure),
            r.flush_ms,
            ms(r.bare)
        );
        t_rate.push(r.events as f64 / r.tenure.as_secs_f64());
        b_rate.push(r.events as f64 / r.bare.as_secs_f64());
        w_rate.push(r.events as f64 / r.write.as_secs_f64());
        flush_ms.push(r.flush_ms);
    }
    rows.push(
        Row::rate("1c", "ingestion, live while writing", "etcd events/s", &t_rate)
            .baseline_samples("bare etcd-client watch", &b_rate)
            .paired_ratio(&t_rate, &b_rate)
            .target(Target::RatioAtLeast(0.9))
            .note(format!(
                "{} elections × {} terms per run written at {:.0} etcd events/s (median); both consumers run side by side; \
                 tenure's history flush after the last revision: median {:.1} ms",
                cfg.ingest_elections,
                cfg.live_cycles,
                crate::stats::Summary::of(&w_rate).median,
                crate::stats::Summary::of(&flush_ms).median
            )),
    );
    fleet.release().await;
    drop(etcd);
    Ok(rows)
}

struct Live {
    events: usize,
    write: Duration,
    tenure: Duration,
    flush_ms: f64,
    bare: Duration,
}

/// Latest revision a consumer has processed, and when.
#[derive(Clone, Default)]
pub struct Progress(Arc<Mutex<(i64, Option<Instant>)>>);

impl Progress {
    /// The consumer has processed `revision`, now.
    pub fn reached(&self, revision: i64) {
        *self.0.lock().unwrap() = (revision, Some(Instant::now()));
    }

    /// When it had processed `until`, if it has.
    pub fn at(&self, until: i64) -> Option<Instant> {
        let (rev, at) = *self.0.lock().unwrap();
        (rev >= until).then_some(at).flatten()
    }
}

async fn live_run(endpoint: &str, fleet: &Fleet, cycles: usize) -> Result<Live> {
    let before = fleet.revision().await?;
    let dir = tempfile::tempdir()?;
    let both = SideBySide::start(
        endpoint,
        crate::common::keys().watch_range(),
        &dir.path().join("history.db"),
        before,
        WatchConfig::default(),
    )
    .await?;
    let t0 = Instant::now();
    let written = fleet.churn(cycles).await?;
    let write = t0.elapsed();
    let (tenure_at, bare_at, flush_ms) = both.until(written.last, Duration::from_secs(60)).await?;
    Ok(Live {
        events: written.etcd_events(),
        write,
        tenure: tenure_at.saturating_duration_since(t0),
        flush_ms,
        bare: bare_at.saturating_duration_since(t0),
    })
}

/// tenure's ingestion path (into a fresh history at `db`) and a bare
/// etcd-client watch of the same range, side by side, both from after
/// `before`: when each had processed a revision.
pub struct SideBySide {
    bare: Progress,
    ten: Progress,
    bare_task: tokio::task::JoinHandle<()>,
    ten_task: tokio::task::JoinHandle<()>,
    store: Arc<Store>,
    _etcd: Etcd,
}

impl SideBySide {
    /// Both watching, tenure's history loaded (its first batch is the
    /// resume read).
    pub async fn start(
        endpoint: &str,
        (start, end): (String, String),
        db: &std::path::Path,
        before: i64,
        cfg: WatchConfig,
    ) -> Result<SideBySide> {
        let mut etcd: Etcd = connect(endpoint).await?;
        let range = (start.into_bytes(), end.into_bytes());
        let mut stream = bare_watch_of(&mut etcd, range, before + 1).await?;
        let bare = Progress::default();
        let bare_task = {
            let bare = bare.clone();
            tokio::spawn(async move {
                while let Ok(Some(resp)) = stream.message().await {
                    if let Some(kv) = resp.events().last().and_then(|e| e.kv()) {
                        bare.reached(kv.mod_revision());
                    }
                }
            })
        };
        let mut p = Pipeline::prepare(endpoint, db)
            .await?
            .start_with(before, cfg);
        while !matches!(p.next(Duration::from_secs(10)).await?, Update::Batch(_)) {}
        let store = p.store.clone();
        let ten = Progress::default();
        let ten_task = {
            let ten = ten.clone();
            tokio::spawn(async move {
                loop {
                    match p.next(Duration::from_secs(3600)).await {
                        Ok(Update::Batch(b)) => ten.reached(b.revision),
                        Ok(_) => {}
                        Err(_) => break,
                    }
                }
                p.stop().await;
            })
        };
        Ok(SideBySide {
            bare,
            ten,
            bare_task,
            ten_task,
            store,
            _etcd: etcd,
        })
    }

    /// When tenure and the bare watch had each processed `until` (within
    /// `limit`), then tenure's history flushed: (tenure, bare, flush ms).
    pub async fn until(self, until: i64, limit: Duration) -> Result<(Instant, Instant, f64)> {
        let deadline = Instant::now() + limit;
        let (tenure_at, bare_at) = loop {
            if let (Some(t), Some(b)) = (self.ten.at(until), self.bare.at(until)) {
                break (t, b);
            }
            if Instant::now() > deadline {
                bail!("a consumer did not reach revision {until} within {limit:?}");
            }
            tokio::time::sleep(Duration::from_millis(1)).await;
        };
        let f = Instant::now();
        self.store
            .flush()
            .await
            .map_err(|e| anyhow!("history flush: {e}"))?;
        let flush_ms = ms(f.elapsed());
        self.bare_task.abort();
        self.ten_task.abort();
        let _ = self.ten_task.await;
        Ok((tenure_at, bare_at, flush_ms))
    }
}
