//! The Grafana dashboard and the Prometheus rules in `grafana/`, checked by
//! the real tools: `promtool check rules` and `promtool test rules`, and a
//! real Prometheus (Debian's `prometheus` package, installed by
//! `scripts/setup.sh`) on loopback scraping a real `tenure serve` while a
//! scripted scenario runs against a real etcd. Through Prometheus' HTTP API
//! the test asserts that every query of the dashboard returns data and that
//! the alerts become active for the scenario that should fire them.
//!
//! Environment overrides: `TENURE_TEST_PROMETHEUS_BIN` (default
//! `/usr/bin/prometheus`), `TENURE_TEST_PROMTOOL_BIN` (default
//! `/usr/bin/promtool`).
// Tests, benches and their harness assert with unwrap/expect, spawn bare tasks
// and read the wall clock: the lints of Cargo.toml and clippy.toml hold src/.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::disallowed_methods)]

//!
//! Files: `acting` (the overlap alerts fired by a frozen holder), `rules` (promtool, the rules' shape), `dashboard` (its structure
//! and queries), `server` (the Prometheus process and its HTTP API), `live`
//! (the scenario with alerts and every dashboard query), `cardinality`
//! (series per election in a real scrape, with and without
//! `--per-election-detail`).

#[path = "../support/mod.rs"]
mod support;

mod acting;
mod cardinality;
mod dashboard;
mod live;
mod rules;
mod server;

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use tenure::election::{CampaignOptions, Campaigned, Client, ElectionName, Leadership, Ttl};

const PROMETHEUS_BIN: &str = "/usr/bin/prometheus";
const PROMTOOL_BIN: &str = "/usr/bin/promtool";
/// How long Prometheus may take to answer `/-/ready`.
const READY_TIMEOUT: Duration = Duration::from_secs(20);
/// How long an alert may take to become active once its condition holds.
const ALERT_TIMEOUT: Duration = Duration::from_secs(30);
/// Scrape and rule evaluation interval of the test's Prometheus, in seconds.
const SCRAPE_SECS: u64 = 1;
/// What Grafana makes of `$__rate_interval` with this scrape interval and a
/// 1 s step: max($__interval + scrape interval, 4 × scrape interval).
const RATE_INTERVAL: &str = "4s";
/// `$__interval`: the step of the range queries.
const STEP_SECS: u64 = 1;

fn repo_file(rel: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join(rel)
}

fn read(rel: &str) -> String {
    std::fs::read_to_string(repo_file(rel)).unwrap_or_else(|e| panic!("read {rel}: {e}"))
}

fn bin(env: &str, default: &str) -> PathBuf {
    let path = std::env::var_os(env).map_or_else(|| PathBuf::from(default), PathBuf::from);
    assert!(
        path.exists(),
        "{} is missing: run scripts/setup.sh (it installs Debian's prometheus package, \
         which provides prometheus and promtool), or set {env}",
        path.display()
    );
    path
}

fn promtool(args: &[&Path]) -> String {
    let out = Command::new(bin("TENURE_TEST_PROMTOOL_BIN", PROMTOOL_BIN))
        .args(args)
        .output()
        .expect("run promtool");
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(
        out.status.success(),
        "promtool {args:?} failed ({}):\n{text}",
        out.status
    );
    text
}

fn unix_now() -> f64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_secs_f64())
        .unwrap_or(0.0)
}

fn name(s: &str) -> ElectionName {
    ElectionName::new(s).expect("name")
}

async fn lead(c: &Client, n: &str, id: &str) -> Leadership {
    let opts = CampaignOptions::new(Ttl::from_secs(10).expect("ttl"));
    match c.campaign(&name(n), id, &opts).await.expect("campaign") {
        Campaigned::Leader(l) => l,
        Campaigned::Held(h) => panic!("{n} held by {h:?}"),
    }
}
