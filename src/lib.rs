//! tenure: leader election on etcd that you can see.
//!
//! Floors, top to bottom (no import runs upward):
//! - [`cli`]: the `tenure` command line, the only place `anyhow` is used;
//! - [`watch`] (etcd → events), [`history`] (SQLite), [`telemetry`]
//!   (Prometheus metrics, OpenTelemetry traces): siblings that meet only
//!   in [`events`];
//! - [`layout`]: how elections are written in etcd, as the watcher reads
//!   them (tenure's own layout; one file per layout);
//! - [`election`] (the core: campaign, leadership, fence; knows etcd and
//!   nothing else) and [`events`] (the one event type);
//! - [`task`]: named tasks (a panic is logged with the task's name).

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
pub mod history;
pub mod layout;
pub mod task;
#[cfg(feature = "server")]
pub mod telemetry;
pub mod text;
pub mod watch;
#[cfg(feature = "server")]
pub mod web;
