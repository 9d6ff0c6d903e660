//! The fault and abuse suite (issue 7): nothing is lost, nothing is recorded
//! twice, and no stale write succeeds, while etcd, the network or tenure
//! itself fail. RELIABILITY.md lists the scenarios, what each proves and the
//! figures of a full run.
//!
//! Every scenario checks what tenure recorded against what etcd itself
//! holds: the test reads etcd's own event log (a watch over every key from
//! revision 1) and replays it with an independent model of the key schema
//! (`oracle.rs`), so "0 differences" means the history equals etcd's
//! record, term by term, revision by revision.
//!
//! Fast versions run in `cargo test`. The full versions (10,000 operations,
//! many rounds, network namespaces, iptables, faketime) are `#[ignore]`d:
//!
//! ```sh
//! cargo test --test faults -- --ignored --nocapture
//! ```
//!
//! Figures are printed as `[figure] <scenario>: ...` lines (use --nocapture).
//! `TENURE_FAULTS_SEED=N` replays a random run.
//!
//! The files: `oracle.rs` (etcd's log, the model, the comparison),
//! `workload.rs` (random operations and the end each should get),
//! `actors.rs` (holder processes, churn, the library watcher), `common.rs`
//! (small tools), and one file per scenario, `s01_*.rs` … `s11_*.rs`, each
//! with its fast test and its full (ignored) one. Test names carry the
//! scenario's module: `s01_baseline::s01_baseline_1k_…`.
// Tests, benches and their harness assert with unwrap/expect, spawn bare tasks
// and read the wall clock: the lints of Cargo.toml and clippy.toml hold src/.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::disallowed_methods)]

#[path = "../support/mod.rs"]
mod support;

mod actors;
mod common;
mod oracle;
mod workload;

mod s01_baseline;
mod s02_holder_pause;
mod s03_etcd_leader_frozen;
mod s04_watched_member_killed;
mod s05_leader_partitioned;
mod s06_compaction_while_down;
mod s07_kill9_during_ingest;
mod s08_half_open;
mod s09_races;
mod s10_abuse;
mod s11_clock_skew;
