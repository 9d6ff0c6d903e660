//! The incident view (issue 14) against a real 3-member etcd cluster and a
//! real `tenure serve`: the etcd leader is killed while several elections
//! run; the leader change is recorded once, the re-elections appear on one
//! `/timeline`, and the report (JSON and Markdown) matches the history
//! field by field, leaderless times computed here independently.
//!
//! The files: `common.rs` (HTTP and table helpers, the campaign options),
//! `seeded.rs` (a seeded history and the whole router in-process), and the
//! tests by what they cover: `etcd_leader.rs` (the etcd leader killed),
//! `replay.rs` (a handover replayed after a partition), `browser.rs`
//! (`/timeline` in Chromium), `report.rs` (the report field by field),
//! `cluster_events.rs` (alarms and members across a restart), `paging.rs`
//! (the overview's 10,000 elections, `/timeline`'s 1,000 lanes).
// Tests, benches and their harness assert with unwrap/expect, spawn bare tasks
// and read the wall clock: the lints of Cargo.toml and clippy.toml hold src/.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::disallowed_methods)]

#[path = "../support/mod.rs"]
mod support;

mod browser;
mod cluster_events;
mod common;
mod etcd_leader;
mod list_api;
mod paging;
mod replay;
mod report;
mod seeded;
mod unwatched;
