//! `--markdown`: the results as the block BENCHMARKS.md opens with.
//!
//! One paragraph saying what was measured where (the commit, the build, the
//! machine's cores and model, etcd's version, how busy the machine was), the
//! command that regenerates the block, the results table of `stats::table`
//! and each row's note. `tests/docs/documents.rs` checks that BENCHMARKS.md opens with
//! such a block, names a commit of this repository and the command.

use std::process::Command;
use std::time::SystemTime;

use crate::stats::{self, Row};
use crate::{Args, Config, Machine};

/// The line BENCHMARKS.md's generated block starts with.
pub const BEGIN: &str =
    "<!-- bench --markdown: generated, do not edit; regenerate with the command below -->";
/// The line it ends with.
pub const END: &str = "<!-- bench --markdown: end -->";

/// The command that measures the same things again, with this run's options.
pub fn command(args: &Args) -> String {
    let mut c = if cfg!(debug_assertions) {
        String::from("cargo test --bench bench -- --markdown")
    } else {
        String::from("cargo bench --bench bench -- --markdown")
    };
    if args.smoke {
        c.push_str(" --smoke");
    }
    if let Some(runs) = args.runs {
        c.push_str(&format!(" --runs {runs}"));
    }
    if !args.only.is_empty() {
        c.push_str(&format!(" --only {}", args.only.join(",")));
    }
    if let Some(n) = args.scale_elections {
        c.push_str(&format!(" --scale-elections {n}"));
    }
    c
}

/// The commit measured (12 hex digits), with `+ uncommitted changes` when
/// the tree differs from it; `unknown` outside a git checkout. Asked when
/// the run starts, so edits made while it runs are not the tree measured.
pub fn commit() -> String {
    let dir = env!("CARGO_MANIFEST_DIR");
    let git = |args: &[&str]| {
        Command::new("git")
            .args(args)
            .current_dir(dir)
            .output()
            .ok()
            .filter(|o| o.status.success())
            .and_then(|o| String::from_utf8(o.stdout).ok())
    };
    let Some(head) = git(&["rev-parse", "--short=12", "HEAD"]) else {
        return "unknown".into();
    };
    let dirty = git(&["status", "--porcelain", "--untracked-files=no"])
        .is_some_and(|s| !s.trim().is_empty());
    let head = head.trim();
    if dirty {
        format!("`{head}` + uncommitted changes")
    } else {
        format!("`{head}`")
    }
}

/// The whole block, ready to paste at the top of BENCHMARKS.md.
pub fn block(args: &Args, cfg: &Config, m: &Machine, commit: &str, rows: &[Row]) -> String {
    let date = humantime::format_rfc3339_seconds(SystemTime::now());
    let etcd = m
        .etcd
        .strip_prefix("etcd Version: ")
        .unwrap_or(&m.etcd)
        .to_owned();
    let mut out = String::new();
    out.push_str(BEGIN);
    out.push_str("\n\n");
    out.push_str(&format!(
        "Measured {date} on commit {commit}, {profile} build, {mode} mode, {runs} runs per \
         measurement, {wall:.0} s wall. Machine: {nproc} cores, \"{model}\", {mem} MB, Linux \
         {kernel}; etcd {etcd}, one member on loopback, data on tmpfs. The machine is shared: \
         it was {busy:.0} % busy over the run (this bench process {cpu:.0} CPU-s of it; the rest \
         its etcd and serve children and everyone else), load average {l0} → {l1}.\n\n",
        profile = m.profile,
        mode = if cfg.smoke { "smoke" } else { "full" },
        runs = cfg.runs,
        wall = m.wall_seconds,
        nproc = m.nproc,
        model = m.cpu_model,
        mem = m.memory_mb,
        kernel = m.kernel,
        busy = m.machine_busy_percent,
        cpu = m.bench_process_cpu_seconds,
        l0 = m.loadavg_before,
        l1 = m.loadavg_after,
    ));
    out.push_str(&format!("Regenerate: `{}`\n\n", command(args)));
    out.push_str(&stats::table(rows));
    let notes: Vec<&Row> = rows.iter().filter(|r| !r.note.is_empty()).collect();
    if !notes.is_empty() {
        out.push('\n');
        for r in notes {
            out.push_str(&format!("- {}: {}\n", r.id, r.note));
        }
    }
    out.push('\n');
    out.push_str(END);
    out.push('\n');
    out
}
