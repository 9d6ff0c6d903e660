//! `tenure serve` end to end: watcher → metrics, history; exactly-once
//! history across restarts; an explicit gap after compaction.
//!
//! The files, by scenario: `restarts.rs` (restarts and a compaction while
//! down), `restore.rs` (a restore from a snapshot), `many.rs` (export, the
//! election list and the cap on elections).
// Tests, benches and their harness assert with unwrap/expect, spawn bare tasks
// and read the wall clock: the lints of Cargo.toml and clippy.toml hold src/.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::disallowed_methods)]

#[path = "../support/mod.rs"]
mod support;

mod many;
mod restarts;
mod restore;

use support::Etcd;

async fn revision(etcd: &Etcd) -> i64 {
    let mut raw = etcd.client().await;
    raw.get("any", None)
        .await
        .expect("get")
        .header()
        .expect("header")
        .revision()
}
