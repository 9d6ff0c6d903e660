//! Measurement 1d–1f (issue 15) — ingestion into the shared PostgreSQL
//! history: etcd events per second processed end to end by tenure into a
//! fresh PostgreSQL history, and into a fresh SQLite file, each ÷ events per
//! second drained by a bare etcd-client watch of the same range.
//!
//! The load (the [`Fleet`]'s terms, tenure's own txns) is written first; then,
//! run after run, in rotating order, three consumers read the same revision
//! range from the same start, one at a time:
//!
//! - the bare watch (the baseline, [`bare_replay`]);
//! - tenure's ingestion path as serve wires it ([`Pipeline`]) into
//!   `Store::open_postgres` (writer thread, fenced commits), on a fresh
//!   database of a harness PostgreSQL (initdb into a temp dir, loopback,
//!   fsync off; killed when the measurement ends);
//! - the same into `Store::open` on a fresh SQLite file.
//!
//! Clocks start once connected (tenure: history open and its writer fence
//! claimed) and stop when the last revision is processed (tenure: and
//! committed, i.e. flushed). Ratios are throughputs: tenure's events/s ÷ the
//! bare watch's events/s in the same run (1.0 = as fast as a bare watch).
//! Without `initdb` the measurement says so and is skipped.

use std::collections::HashMap;
use std::time::Duration;

use anyhow::{anyhow, bail, Result};
use tenure::history::Store;

use crate::common::ms;
use crate::ingest::{bare_replay, replay_into, Consumed};
use crate::load::Fleet;
use crate::stats::{Row, Summary};
use crate::support::postgres::{self, Postgres};
use crate::support::Etcd as EtcdProcess;
use crate::Config;

#[derive(Clone, Copy, PartialEq)]
enum Sink {
    Bare,
    Postgres,
    Sqlite,
}

/// Each run's order: the three rotate, so each goes first, second and last.
const ORDERS: [[Sink; 3]; 3] = [
    [Sink::Bare, Sink::Postgres, Sink::Sqlite],
    [Sink::Postgres, Sink::Sqlite, Sink::Bare],
    [Sink::Sqlite, Sink::Bare, Sink::Postgres],
];

/// CPU seconds (user + system) of process `pid` and of each of its live
/// children (for the postmaster: its backends and auxiliary processes), by
/// PID. Per-process, not the parent's `cutime`: backends of earlier runs
/// exiting (and being reaped) during a run would blur that.
fn tree_cpu(pid: i32) -> HashMap<i32, f64> {
    fn fields(pid: i32) -> Option<Vec<String>> {
        let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
        let rest = stat.get(stat.rfind(')')? + 2..)?;
        Some(rest.split_whitespace().map(str::to_owned).collect())
    }
    // After the command: index 1 is the parent, 11 and 12 utime and stime
    // (USER_HZ = 100).
    let cpu = |f: &[String]| -> f64 {
        f.get(11..13)
            .map(|t| t.iter().filter_map(|x| x.parse::<f64>().ok()).sum::<f64>() / 100.0)
            .unwrap_or(0.0)
    };
    let mut out = HashMap::new();
    if let Some(own) = fields(pid) {
        out.insert(pid, cpu(&own));
    }
    if let Ok(dir) = std::fs::read_dir("/proc") {
        for e in dir.filter_map(|e| e.ok()) {
            let Some(child) = e.file_name().to_str().and_then(|s| s.parse::<i32>().ok()) else {
                continue;
            };
            if let Some(f) = fields(child) {
                if f.get(1).and_then(|p| p.parse::<i32>().ok()) == Some(pid) {
                    out.insert(child, cpu(&f));
                }
            }
        }
    }
    out
}

/// CPU seconds the processes alive at `end` used since `start` (those
/// started in between: all of theirs). Processes that exited in between
/// are not counted: the run's own backends are still connected at `end`.
fn cpu_between(start: &HashMap<i32, f64>, end: &HashMap<i32, f64>) -> f64 {
    end.iter()
        .map(|(pid, e)| (e - start.get(pid).copied().unwrap_or(0.0)).max(0.0))
        .sum()
}

pub async fn run(cfg: &Config) -> Result<Vec<Row>> {
    if postgres::initdb().is_none() {
        eprintln!(
            "  pg: skipped: PostgreSQL's initdb not found (scripts/setup.sh --test installs it, \
             or set TENURE_TEST_PG_BIN)"
        );
        return Ok(Vec::new());
    }
    let etcd = EtcdProcess::start().await;
    let endpoint = etcd.endpoint();
    // On this (long-lived) runtime thread: the server's parent-death signal
    // follows the thread that started it.
    let pg = Postgres::start();
    let dir = tempfile::tempdir()?;

    let fleet = Fleet::new(&endpoint, "pg", cfg.pg_elections).await?;
    let written = fleet.churn(cfg.pg_cycles).await?;
    eprintln!(
        "  load: {} elections × {} terms = {} revisions ({} etcd events) written in {:.2} s",
        cfg.pg_elections,
        cfg.pg_cycles,
        written.revisions(),
        written.etcd_events(),
        written.elapsed.as_secs_f64(),
    );
    let (after, until) = (written.before, written.last);
    let (mut b_rate, mut p_rate, mut s_rate) = (vec![], vec![], vec![]);
    let (mut p_cpu, mut p_server, mut s_cpu, mut b_cpu) = (vec![], vec![], vec![], vec![]);
    let mut transitions = (0, 0);
    for run in 0..cfg.runs {
        let (mut b, mut p, mut s) = (None, None, None);
        let mut server = f64::NAN;
        for sink in ORDERS[run % ORDERS.len()] {
            match sink {
                Sink::Bare => b = Some(bare_replay(&endpoint, after, until).await?),
                Sink::Postgres => {
                    let url = pg.create_database(&format!("bench{run}"));
                    let store = tokio::task::spawn_blocking(move || {
                        Store::open_postgres(
                            &url,
                            Duration::ZERO,
                            1,
                            "bench",
                            postgres::revision_at(i64::MAX),
                        )
                    })
                    .await?
                    .map_err(|e| anyhow!("PostgreSQL history: {e}"))?;
                    let server0 = tree_cpu(pg.pid());
                    let (c, tr, server1) =
                        replay_into(&endpoint, store, after, until, || tree_cpu(pg.pid())).await?;
                    server = cpu_between(&server0, &server1);
                    transitions.0 = tr;
                    p = Some(c);
                }
                Sink::Sqlite => {
                    let path = dir.path().join(format!("history{run}.db"));
                    let store = Store::open(&path, Duration::ZERO)
                        .map_err(|e| anyhow!("history at {}: {e}", path.display()))?;
                    let (c, tr, ()) = replay_into(&endpoint, store, after, until, || ()).await?;
                    transitions.1 = tr;
                    s = Some(c);
                }
            }
        }
        let (b, p, s) = (b.unwrap(), p.unwrap(), s.unwrap());
        let events = b.events as f64;
        let rate = |c: &Consumed| events / c.elapsed.as_secs_f64();
        let per_k = |cpu: f64| cpu * 1000.0 / events * 1000.0;
        b_rate.push(rate(&b));
        p_rate.push(rate(&p));
        s_rate.push(rate(&s));
        b_cpu.push(per_k(b.cpu));
        p_cpu.push(per_k(p.cpu + server));
        p_server.push(per_k(server));
        s_cpu.push(per_k(s.cpu));
        eprintln!(
            "  run {}: {} events; bare {:.0} ms ({:.0} ev/s), PostgreSQL {:.0} ms ({:.0} ev/s, ratio {:.2}; \
             cpu bench {:.0} ms + server {:.0} ms), SQLite {:.0} ms ({:.0} ev/s, ratio {:.2}; cpu {:.0} ms)",
            run + 1,
            b.events,
            ms(b.elapsed),
            rate(&b),
            ms(p.elapsed),
            rate(&p),
            rate(&p) / rate(&b),
            p.cpu * 1000.0,
            server * 1000.0,
            ms(s.elapsed),
            rate(&s),
            rate(&s) / rate(&b),
            s.cpu * 1000.0,
        );
    }
    let load = format!(
        "{} elections × {} terms: {} revisions, {} etcd events, {} tenure transitions; \
         rotating order; history committed (flushed) before the clock stops",
        cfg.pg_elections,
        cfg.pg_cycles,
        written.revisions(),
        written.etcd_events(),
        transitions.0
    );
    if transitions.0 != transitions.1 {
        bail!(
            "PostgreSQL stored {} transitions, SQLite {}",
            transitions.0,
            transitions.1
        );
    }
    let rows = vec![
        Row::rate(
            "1d",
            "ingestion, replay into a PostgreSQL history (ratio: throughput ÷ bare)",
            "etcd events/s",
            &p_rate,
        )
        .baseline_samples("bare etcd-client watch", &b_rate)
        .paired_ratio(&p_rate, &b_rate)
        .note(format!(
            "{load}; Store::open_postgres on a harness PostgreSQL \
             (loopback, fsync off), a fresh database per run"
        )),
        Row::rate(
            "1e",
            "ingestion, replay into a SQLite history, same runs (ratio: throughput ÷ bare)",
            "etcd events/s",
            &s_rate,
        )
        .baseline_samples("bare etcd-client watch", &b_rate)
        .paired_ratio(&s_rate, &b_rate)
        .note("a fresh SQLite file per run (tmp, on disk); otherwise as 1d"),
        Row::time(
            "1f",
            "ingestion, replay into PostgreSQL: CPU per 1000 events (bench + server)",
            "ms",
            &p_cpu,
        )
        .baseline_samples("tenure into SQLite (bench process)", &s_cpu)
        .paired_ratio(&p_cpu, &s_cpu)
        .note(format!(
            "bench process (all threads) plus the PostgreSQL server (postmaster, backends, auxiliary processes), \
             10 ms tick resolution; of it the server: median {:.1} ms; the bare watch: median {:.1} ms",
            Summary::of(&p_server).median,
            Summary::of(&b_cpu).median
        )),
    ];
    fleet.release().await;
    drop(pg);
    drop(etcd);
    Ok(rows)
}
