//! tenure: leader election on etcd that you can see.
//!
//! Floors, top to bottom (no import runs upward):
//! - [`cli`]: the `tenure` command line, the only place `anyhow` is used;
//! - [`watch`] (etcd → events), [`history`] (SQLite), [`telemetry`]
//!   (Prometheus metrics, OpenTelemetry traces): siblings that meet only
//!   in [`events`];
//! - [`election`] (the core: campaign, leadership, fence; knows etcd and
//!   nothing else) and [`events`] (the one event type).

// By lint, not by habit: no `unsafe` anywhere, and no `unwrap`/`expect`
// outside tests (input from etcd, HTTP or the user is handled, never
// asserted).
#![forbid(unsafe_code)]
#![cfg_attr(not(test), deny(clippy::unwrap_used, clippy::expect_used))]

#[cfg(feature = "server")]
pub mod cli;
#[cfg(feature = "server")]
pub mod dev;
pub mod election;
pub mod events;
#[cfg(feature = "server")]
pub mod history;
#[cfg(feature = "server")]
pub mod telemetry;
pub mod watch;
#[cfg(feature = "server")]
pub mod web;
