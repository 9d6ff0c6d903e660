//! Other systems' elections (`serve --source LAYOUT:PREFIX`), written by
//! clients tenure did not write, against a real etcd: `etcdctl elect`
//! (etcd's `concurrency.Election`) under an application's prefix, and a
//! service's own key. The recorded terms are checked against what etcd
//! itself said (each key's CreateRevision, read directly), across a
//! `kill -9` of serve while the elections went on.
//!
//! On etcd whose progress notifications may overtake events or go
//! unanswered (before 3.4.31 and 3.5.13: Debian's 3.4.23) several key ranges
//! cannot be merged certainly: serve watches the one range that covers them
//! all where its role may read it (the same checks hold, against etcd's own
//! log), and otherwise refuses them with the one line that says what to do
//! (grant that range, upgrade etcd, or `--sources-only`).
//!
//! The files, by scenario: `crash.rs` (recorded exactly across a crash),
//! `access.rs` (a source serve cannot read; a role that reads only the
//! watched prefixes), `clients.rs` (a Go mutex; `tenure leader` through a
//! source), `concurrency.rs` (keys without a lease under a `concurrency`
//! prefix), `key_layout.rs` (a `key`-layout key changing hands, live and
//! while serve was down), `lapsed.rs` (a Lease lapsed only when a watch
//! could see). Helpers several of them use are here.
// Tests, benches and their harness assert with unwrap/expect, spawn bare tasks
// and read the wall clock: the lints of Cargo.toml and clippy.toml hold src/.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::disallowed_methods)]

#[path = "../support/mod.rs"]
mod support;

mod access;
mod clients;
mod concurrency;
mod crash;
mod key_layout;
mod lapsed;

use std::time::Duration;

use etcd_client::{Client as EtcdClient, GetOptions};
use nix::sys::signal::{kill, Signal};
use nix::unistd::Pid;
use serde_json::Value;
use tokio::io::{AsyncBufReadExt, BufReader};

use support::fixtures::text;
use support::{Etcd, Serve};

const WAIT: Duration = Duration::from_secs(20);

/// `etcdctl elect KEY VALUE`, and a wait for its "elected" line.
struct Elect {
    child: tokio::process::Child,
    lines: tokio::io::Lines<BufReader<tokio::process::ChildStdout>>,
}

impl Elect {
    fn start(etcd: &Etcd, election: &str, value: &str) -> Elect {
        let mut child = etcd.etcdctl_elect(election, value);
        let lines = BufReader::new(child.stdout.take().expect("stdout")).lines();
        Elect { child, lines }
    }

    /// The leader key etcdctl prints once elected.
    async fn elected(&mut self) -> String {
        tokio::time::timeout(WAIT, self.lines.next_line())
            .await
            .expect("elected in time")
            .expect("read")
            .expect("a line")
    }

    /// SIGINT: etcdctl resigns (deletes its key) and exits.
    async fn resign(mut self) {
        let pid = self.child.id().expect("running") as i32;
        kill(Pid::from_raw(pid), Signal::SIGINT).expect("signal");
        let _ = tokio::time::timeout(WAIT, self.child.wait()).await;
    }
}

/// Every key under `prefix` with its CreateRevision, from etcd itself.
async fn created(raw: &mut EtcdClient, prefix: &str) -> Vec<(String, i64)> {
    let resp = raw
        .get(prefix, Some(GetOptions::new().with_prefix()))
        .await
        .expect("get");
    resp.kvs()
        .iter()
        .map(|kv| (text(kv.key()), kv.create_revision()))
        .collect()
}

async fn now_revision(raw: &mut EtcdClient) -> i64 {
    raw.get("x", None)
        .await
        .expect("get")
        .header()
        .expect("header")
        .revision()
}

async fn get_json(s: &Serve, path: &str) -> (u16, Value) {
    let r = reqwest::get(s.url(path)).await.expect("GET");
    let status = r.status().as_u16();
    (status, r.json().await.unwrap_or(Value::Null))
}

/// The terms history holds for `election` (a key path), as
/// (token, holder, end cause).
async fn terms(s: &Serve, election: &str) -> Vec<(i64, String, Option<String>)> {
    let path = format!("/api/v1/elections/{}/terms", election.replace('/', "%2F"));
    let (status, v) = get_json(s, &path).await;
    assert_eq!(status, 200, "{path}: {v}");
    v["terms"]
        .as_array()
        .expect("terms")
        .iter()
        .map(|t| {
            (
                t["token"].as_i64().expect("token"),
                t["holder"].as_str().expect("holder").to_owned(),
                t["end_cause"].as_str().map(str::to_owned),
            )
        })
        .collect()
}

/// `etcdctl ARGS` against `etcd`, expected to succeed.
async fn etcdctl(etcd: &Etcd, args: &[&str]) {
    let out = tokio::process::Command::new("etcdctl")
        .env("ETCDCTL_API", "3")
        .arg(format!("--endpoints={}", etcd.endpoint()))
        .args(args)
        .output()
        .await
        .expect("etcdctl is installed");
    assert!(
        out.status.success(),
        "etcdctl {args:?}: {}",
        text(&out.stderr)
    );
}

/// The events history holds for `election` (its own and every election's,
/// such as a gap), as (election, type, from_revision, to_revision).
async fn events_of(s: &Serve, election: &str) -> Vec<(String, String, Option<i64>, Option<i64>)> {
    let path = format!(
        "/api/v1/elections/{}/events?limit=1000",
        election.replace('/', "%2F")
    );
    let (status, v) = get_json(s, &path).await;
    assert_eq!(status, 200, "{path}: {v}");
    v["events"]
        .as_array()
        .expect("events")
        .iter()
        .map(|e| {
            (
                e["election"].as_str().expect("election").to_owned(),
                e["type"].as_str().expect("type").to_owned(),
                e["from_revision"].as_i64(),
                e["to_revision"].as_i64(),
            )
        })
        .collect()
}
