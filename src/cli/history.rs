//! `tenure history NAME --db PATH`: reads the history file directly (no
//! server needed), for postmortems and spreadsheets.

use std::path::PathBuf;

use anyhow::Context;
use clap::Args;

use crate::history::{parse_time, terms_to_csv, Db, Query, Reader};
use crate::layout::path::WatchedName;

/// A name as the history stores it: an election's, or `CLUSTER/NAME` of
/// one of several clusters, `NAME` valid within it.
fn history_name(raw: &str) -> Result<String, String> {
    // Any name some cluster could give: tenure's own, a path, a Lease's.
    let valid = |n: &str| WatchedName::parse(n).is_ok() || WatchedName::parse_in(n, true).is_ok();
    match WatchedName::parse(raw) {
        Ok(_) => Ok(raw.to_owned()),
        Err(_) if valid(raw) => Ok(raw.to_owned()),
        Err(e) => {
            let qualified = raw
                .split_once('/')
                .is_some_and(|(cluster, rest)| super::clusters::valid_name(cluster) && valid(rest));
            if qualified {
                Ok(raw.to_owned())
            } else {
                Err(e.to_string())
            }
        }
    }
}

#[derive(Debug, Args)]
pub struct HistoryArgs {
    /// The election: one of tenure's own, another system's key path (`/service/pg`), or a
    /// Kubernetes Lease (`NAMESPACE/NAME`); in a history of several clusters
    /// (`serve --cluster`), CLUSTER/NAME.
    #[arg(value_parser = history_name)]
    pub name: String,

    /// History written by `tenure serve --db`: a SQLite file, or a postgres:// URL.
    #[arg(long, env = "TENURE_DB", default_value = "tenure.db")]
    pub db: PathBuf,

    /// Earliest time: RFC 3339 (2026-12-02T14:00:00Z), unix seconds, or a duration ago (90m, 2h, 7d).
    #[arg(long)]
    pub from: Option<String>,

    /// Latest time, in the same forms as --from.
    #[arg(long)]
    pub to: Option<String>,

    /// At most this many terms.
    #[arg(long)]
    pub limit: Option<usize>,

    /// Print a JSON array of terms.
    #[arg(long, conflicts_with = "csv")]
    pub json: bool,

    /// Print CSV with a header line.
    #[arg(long)]
    pub csv: bool,
}

pub fn run(args: HistoryArgs) -> anyhow::Result<i32> {
    let time = |s: &Option<String>| s.as_deref().map(parse_time).transpose();
    let q = Query {
        from_ms: time(&args.from)?,
        to_ms: time(&args.to)?,
        limit: args.limit,
    };
    let db = Db::from_arg(&args.db);
    let reader = Reader::open_db(&db)?;
    let rows = reader
        .terms(&args.name, &q)
        .with_context(|| format!("reading terms of {} from {}", args.name, db.display()))?;
    if args.json {
        println!("{}", serde_json::to_string_pretty(&rows)?);
    } else if args.csv {
        print!("{}", terms_to_csv(&rows));
    } else if rows.is_empty() {
        eprintln!("tenure: no terms of {} in {}", args.name, db.display());
    } else {
        println!(
            "{:<24} {:>10}  {:<24} {:<24} {:<10} holder",
            "started", "token", "ended", "", "cause"
        );
        for r in &rows {
            println!(
                "{:<24} {:>10}  {:<24} {:<24} {:<10} {}",
                r.started_at,
                r.token,
                r.ended_at.as_deref().unwrap_or("(leading)"),
                r.duration_seconds
                    .map(|d| format!("{d:.1} s"))
                    .unwrap_or_default(),
                r.end_cause.map(|c| c.as_str()).unwrap_or(""),
                crate::text::visible(&r.holder)
            );
        }
    }
    Ok(super::EXIT_OK)
}
