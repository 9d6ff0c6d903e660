//! tenure against baselines measured in the same run (issue 6).
//!
//! ```text
//! cargo bench --bench bench                      # full run (release)
//! cargo bench --bench bench -- --smoke           # every measurement, tiny
//! cargo test  --bench bench -- --smoke           # the same in the debug build (CI)
//! cargo bench --bench bench -- --only takeover,fence --runs 9 --json out.json
//! cargo bench --bench bench -- --markdown --runs 3  # BENCHMARKS.md's opening block
//! ```
//!
//! Every figure is a ratio against a baseline measured in the same process
//! run, on the same etcd, under the same load, with medians and tails over
//! repeated runs: the machine is shared and timings are noisy, ratios less
//! so. Each measurement starts its own etcd (loopback, data on /dev/shm)
//! and, where it needs one, its own `tenure serve` child (pg: its own
//! PostgreSQL server, skipped without `initdb`); every process is
//! SIGKILLed when its measurement ends (and on the bench's death, through
//! PR_SET_PDEATHSIG). Results: a Markdown table on stdout (with `--markdown`,
//! the block BENCHMARKS.md opens with: commit, machine, etcd, the command
//! that regenerates it), and JSON with `--json FILE`. See BENCHMARKS.md.
//!
//! Run by `cargo test` (no `--bench` argument) without `--smoke`, it only
//! says how to run it, so `cargo test --all-targets` stays fast.
// Tests, benches and their harness assert with unwrap/expect, spawn bare tasks
// and read the wall clock: the lints of Cargo.toml and clippy.toml hold src/.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::disallowed_methods)]

mod clusters;
mod common;
mod detect;
mod fence;
mod incident;
mod ingest;
mod kube;
mod kube_api;
mod load;
mod markdown;
mod mass;
mod pg;
mod pipeline;
mod queue;
mod render;
mod scale;
mod stats;
mod takeover;

// The test kit (real etcd, `tenure serve`, the Prometheus text format, /proc,
// a seeded generator), shared with tests/: the benches use part of it, hence
// its own `allow(dead_code)`.
#[path = "../tests/support/mod.rs"]
mod support;

use std::time::{Duration, Instant};

use anyhow::{bail, Result};
use clap::Parser;
use serde::Serialize;

use crate::stats::Row;
use crate::support::procfs;

const ALL: [&str; 13] = [
    "takeover", "queue", "fence", "detect", "ingest", "clusters", "pg", "render", "scale",
    "incident", "mass", "kube", "kube-api",
];

#[derive(Debug, Parser)]
#[command(
    name = "bench",
    about = "tenure against baselines measured in the same run"
)]
struct Args {
    /// Every measurement, tiny and fast (CI): checks the harness works; the
    /// figures mean little.
    #[arg(long)]
    smoke: bool,
    /// Repeated runs per measurement (default: 7 full, 1 smoke).
    #[arg(long)]
    runs: Option<usize>,
    /// Only these measurements (comma-separated): takeover, queue, fence,
    /// detect, ingest, clusters, pg, render, scale, incident, mass, kube.
    #[arg(long, value_delimiter = ',')]
    only: Vec<String>,
    /// Elections for the scale measurement (default 10,000 full, 1,000 smoke).
    #[arg(long)]
    scale_elections: Option<usize>,
    /// Leader keys the mass deletion deletes (default 10,000 full, 200 smoke).
    #[arg(long)]
    mass_keys: Option<usize>,
    /// Also write the results (and the machine) as JSON here.
    #[arg(long)]
    json: Option<std::path::PathBuf>,
    /// Print the results as the block BENCHMARKS.md opens with: the commit,
    /// the machine, etcd's version, the table and the command that
    /// regenerates it (between markers, to paste over the old block).
    #[arg(long)]
    markdown: bool,
    /// Exit 1 when a target is missed (off by default: the figures are
    /// noisy on shared machines; the table says which were met).
    #[arg(long)]
    strict: bool,
    /// Passed by `cargo bench`.
    #[arg(long, hide = true)]
    bench: bool,
}

/// Sizes and repetitions of every measurement.
#[derive(Debug, Clone, Serialize)]
pub struct Config {
    pub smoke: bool,
    pub runs: usize,
    pub ingest_elections: usize,
    pub ingest_cycles: usize,
    pub live_cycles: usize,
    /// The PostgreSQL ingestion load (pg): elections × terms each.
    pub pg_elections: usize,
    pub pg_cycles: usize,
    pub takeover_trials: usize,
    /// Trials per side of 2q: enough that the p99 is not just the maximum.
    pub queue_trials: usize,
    pub poll_trials: usize,
    pub herd_waiters: usize,
    pub herd_handovers: usize,
    pub detect_samples: usize,
    pub fence_callers: Vec<usize>,
    #[serde(serialize_with = "secs")]
    pub fence_time: Duration,
    pub render_reps: usize,
    pub timeline_terms: usize,
    pub scale_elections: usize,
    /// Lanes of the `/timeline` measurement (5e, 5f).
    pub incident_lanes: usize,
    pub scale_runs: usize,
    /// Leader keys deleted by one request (6h).
    pub mass_keys: usize,
    pub scrapes: usize,
    /// The Kubernetes measurement (kube): node leases renewed every 10 s,
    /// election leases every 2 s, for this long.
    pub kube_nodes: usize,
    pub kube_elections: usize,
    #[serde(serialize_with = "secs")]
    pub kube_seconds: Duration,
}

fn secs<S: serde::Serializer>(d: &Duration, s: S) -> Result<S::Ok, S::Error> {
    s.serialize_f64(d.as_secs_f64())
}

impl Config {
    fn full(runs: usize) -> Config {
        Config {
            smoke: false,
            runs,
            ingest_elections: 200,
            ingest_cycles: 50,
            live_cycles: 10,
            pg_elections: 100,
            pg_cycles: 20,
            takeover_trials: 40,
            queue_trials: 300,
            poll_trials: 10,
            herd_waiters: 100,
            herd_handovers: 10,
            detect_samples: 300,
            fence_callers: vec![8, 1, 32],
            fence_time: Duration::from_secs(3),
            render_reps: 21,
            timeline_terms: 10_000,
            scale_elections: 10_000,
            incident_lanes: 1_000,
            scale_runs: 3,
            mass_keys: 10_000,
            scrapes: 20,
            kube_nodes: 5_000,
            kube_elections: 300,
            kube_seconds: Duration::from_secs(30),
        }
    }

    fn smoke(runs: usize) -> Config {
        Config {
            smoke: true,
            runs,
            ingest_elections: 20,
            ingest_cycles: 10,
            live_cycles: 5,
            pg_elections: 10,
            pg_cycles: 5,
            takeover_trials: 4,
            queue_trials: 4,
            poll_trials: 1,
            herd_waiters: 5,
            herd_handovers: 2,
            detect_samples: 20,
            fence_callers: vec![8],
            fence_time: Duration::from_millis(300),
            render_reps: 3,
            timeline_terms: 1_000,
            scale_elections: 1_000,
            incident_lanes: 100,
            scale_runs: 1,
            mass_keys: 200,
            scrapes: 4,
            kube_nodes: 100,
            kube_elections: 10,
            kube_seconds: Duration::from_secs(3),
        }
    }
}

#[derive(Debug, Serialize)]
struct Machine {
    nproc: usize,
    memory_mb: u64,
    cpu_model: String,
    kernel: String,
    etcd: String,
    profile: &'static str,
    loadavg_before: String,
    loadavg_after: String,
    /// Share of all CPUs busy during the run, and how much of it was this
    /// bench process (the rest: etcd and serve children, and everyone else).
    machine_busy_percent: f64,
    bench_process_cpu_seconds: f64,
    wall_seconds: f64,
}

fn machine() -> Machine {
    let cpuinfo = std::fs::read_to_string("/proc/cpuinfo").unwrap_or_default();
    let cpu_model = cpuinfo
        .lines()
        .find_map(|l| l.strip_prefix("model name"))
        .map(|r| r.trim_start_matches([' ', '\t', ':']).to_owned())
        .unwrap_or_else(|| "unknown".into());
    let memory_mb = std::fs::read_to_string("/proc/meminfo")
        .ok()
        .and_then(|s| {
            s.lines()
                .find_map(|l| l.strip_prefix("MemTotal:"))
                .and_then(|r| r.trim().trim_end_matches("kB").trim().parse::<u64>().ok())
        })
        .unwrap_or(0)
        / 1024;
    let kernel = std::fs::read_to_string("/proc/sys/kernel/osrelease")
        .unwrap_or_default()
        .trim()
        .to_owned();
    Machine {
        nproc: std::thread::available_parallelism()
            .map(|n| n.get())
            .unwrap_or(0),
        memory_mb,
        cpu_model,
        kernel,
        etcd: support::etcd_version(),
        profile: if cfg!(debug_assertions) {
            "debug"
        } else {
            "release"
        },
        loadavg_before: procfs::loadavg(),
        loadavg_after: String::new(),
        machine_busy_percent: f64::NAN,
        bench_process_cpu_seconds: f64::NAN,
        wall_seconds: f64::NAN,
    }
}

fn main() {
    let args = Args::parse();
    if !args.bench && !args.smoke {
        eprintln!(
            "bench: run by `cargo test` without --smoke: nothing to do.\n\
             Full run: cargo bench --bench bench\n\
             Smoke:    cargo bench --bench bench -- --smoke  (or cargo test --bench bench -- --smoke)"
        );
        return;
    }
    let code = match tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
    {
        Ok(rt) => rt.block_on(run(args)),
        Err(e) => {
            eprintln!("bench: tokio runtime: {e}");
            1
        }
    };
    std::process::exit(code);
}

async fn run(args: Args) -> i32 {
    match run_all(&args).await {
        Ok(missed) if missed > 0 && args.strict => 1,
        Ok(_) => 0,
        Err(e) => {
            eprintln!("bench: {e:#}");
            1
        }
    }
}

async fn run_all(args: &Args) -> Result<usize> {
    let mut cfg = if args.smoke {
        Config::smoke(args.runs.unwrap_or(1))
    } else {
        Config::full(args.runs.unwrap_or(7))
    };
    if let Some(n) = args.scale_elections {
        cfg.scale_elections = n;
    }
    if let Some(n) = args.mass_keys {
        cfg.mass_keys = n;
    }
    if cfg.runs == 0 {
        bail!("--runs must be at least 1");
    }
    let only: Vec<&str> = if args.only.is_empty() {
        ALL.to_vec()
    } else {
        for o in &args.only {
            if !ALL.contains(&o.as_str()) {
                bail!("unknown measurement {o:?}; one of {}", ALL.join(", "));
            }
        }
        ALL.iter()
            .copied()
            .filter(|a| args.only.iter().any(|o| o == a))
            .collect()
    };
    let mut m = machine();
    let commit = if args.markdown {
        markdown::commit()
    } else {
        String::new()
    };
    eprintln!(
        "bench: {} mode, {} runs, {} build; {} × {}, {} MB, kernel {}, {}; load {}",
        if cfg.smoke { "smoke" } else { "full" },
        cfg.runs,
        m.profile,
        m.nproc,
        m.cpu_model,
        m.memory_mb,
        m.kernel,
        m.etcd,
        m.loadavg_before
    );
    let started = Instant::now();
    let cpu0 = procfs::self_cpu_seconds();
    let (busy0, total0) = procfs::machine_jiffies();
    let mut rows: Vec<Row> = Vec::new();
    let mut timings = Vec::new();
    for what in &only {
        eprintln!("bench: {what} (load {})", procfs::loadavg());
        let t = Instant::now();
        let r = match *what {
            "takeover" => takeover::run(&cfg).await,
            "queue" => queue::run(&cfg).await,
            "fence" => fence::run(&cfg).await,
            "detect" => detect::run(&cfg).await,
            "ingest" => ingest::run(&cfg).await,
            "clusters" => clusters::run(&cfg).await,
            "pg" => pg::run(&cfg).await,
            "render" => render::run(&cfg).await,
            "scale" => scale::run(&cfg).await,
            "incident" => incident::run(&cfg).await,
            "mass" => mass::run(&cfg).await,
            "kube" => kube::run(&cfg).await,
            "kube-api" => kube_api::run(&cfg).await,
            _ => unreachable!(),
        };
        let r = r.map_err(|e| e.context(format!("measurement {what}")))?;
        eprintln!("bench: {what} took {:.1} s", t.elapsed().as_secs_f64());
        timings.push((what.to_string(), t.elapsed().as_secs_f64()));
        rows.extend(r);
    }
    let (busy1, total1) = procfs::machine_jiffies();
    m.loadavg_after = procfs::loadavg();
    m.machine_busy_percent = if total1 > total0 {
        100.0 * (busy1 - busy0) as f64 / (total1 - total0) as f64
    } else {
        f64::NAN
    };
    m.bench_process_cpu_seconds = procfs::self_cpu_seconds() - cpu0;
    m.wall_seconds = started.elapsed().as_secs_f64();
    rows.sort_by(|a, b| a.id.cmp(&b.id));
    if args.markdown {
        print!("{}", markdown::block(args, &cfg, &m, &commit, &rows));
    } else {
        print_table(&cfg, &m, &rows);
    }
    let missed = rows.iter().filter(|r| r.met == Some(false)).count();
    if let Some(path) = &args.json {
        let doc = serde_json::json!({
            "machine": m,
            "config": cfg,
            "seconds_per_measurement": timings,
            "rows": rows,
        });
        std::fs::write(path, serde_json::to_string_pretty(&doc)?)?;
        eprintln!("bench: wrote {}", path.display());
    }
    Ok(missed)
}

/// The results table, each row's note, and one line on the run.
fn print_table(cfg: &Config, m: &Machine, rows: &[Row]) {
    println!("{}", stats::table(rows));
    for r in rows {
        if !r.note.is_empty() {
            println!("- {}: {}", r.id, r.note);
        }
    }
    println!(
        "\n{} mode, {} runs, {} build, {:.1} s wall; machine busy {:.0}% of {} CPUs during the run \
         (bench process {:.1} CPU-s); load {} → {}",
        if cfg.smoke { "smoke" } else { "full" },
        cfg.runs,
        m.profile,
        m.wall_seconds,
        m.machine_busy_percent,
        m.nproc,
        m.bench_process_cpu_seconds,
        m.loadavg_before,
        m.loadavg_after
    );
}
