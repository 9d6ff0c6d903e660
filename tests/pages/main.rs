//! The pages: overview and timeline, served by the real router over HTTP,
//! on a real history file. Most tests point the election client at a dead
//! loopback port (the pages must still render, saying etcd is unreachable);
//! the ones marked so use a real etcd from the harness.
//!
//! The files: `story.rs` (the events of a seeded history), `app.rs` (the
//! router served over HTTP on it), `html.rs` (reading the pages), and the
//! tests: `offline.rs` (without etcd), `render_time.rs` (10,000 terms),
//! `with_etcd.rs` (a real etcd), `demo.rs` (a server to look at).
// Tests, benches and their harness assert with unwrap/expect, spawn bare tasks
// and read the wall clock: the lints of Cargo.toml and clippy.toml hold src/.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::disallowed_methods)]

#[path = "../support/mod.rs"]
mod support;

mod app;
mod demo;
mod html;
mod offline;
mod render_time;
mod story;
mod with_etcd;
