//! tenure: leader election on etcd that you can see.
//!
//! Floors, top to bottom (no import runs upward; ARCHITECTURE.md states
//! them and `tests/layering.rs` holds the code to them):
//! - [`cli`]: the `tenure` command line, the only place `anyhow` is used;
//! - [`dev`]: the demo fleet of `tenure dev`;
//! - [`web`]: the HTTP API, the pages, the incident view and `/metrics`;
//! - [`feed`]: each watched cluster as one object: its watcher (etcd or
//!   the Kubernetes API), its resume point, its writer term on a shared
//!   history, and the live state it reports;
//! - [`watch`] (etcd → events, for every `--source` layout), [`history`]
//!   (SQLite, or PostgreSQL shared by replicas), [`telemetry`] (Prometheus
//!   metrics, OpenTelemetry traces): siblings that meet only in [`events`];
//! - [`layout`]: how elections are written in etcd, as the watcher reads
//!   them (one file per layout: tenure's own, etcd's `concurrency`, a
//!   single key, Patroni, Kubernetes Leases);
//! - [`election`] (the core: campaign, leadership, fence; knows etcd and
//!   nothing else) and [`events`] (the one event type);
//! - [`task`]: named tasks (a panic is logged with the task's name), and
//!   [`text`]: pure string helpers every floor may use.

// By lint, not by habit: no `unsafe` in the library (the test harness needs
// it for `pre_exec`, so this is not in Cargo.toml's [lints]); no
// `unwrap`/`expect` outside tests, no bare spawn, exit or wall-clock read:
// Cargo.toml's [lints] and clippy.toml (ARCHITECTURE.md, "Lints").
#![forbid(unsafe_code)]

#[cfg(feature = "server")]
pub mod cli;
#[cfg(feature = "server")]
pub mod dev;
pub mod election;
pub mod events;
#[cfg(feature = "server")]
pub mod feed;
#[cfg(feature = "server")]
pub mod history;
pub mod layout;
pub mod task;
#[cfg(feature = "server")]
pub mod telemetry;
pub mod text;
pub mod watch;
#[cfg(feature = "server")]
pub mod web;
