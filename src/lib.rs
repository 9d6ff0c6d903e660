//! tenure: leader election on etcd that you can see.
//!
//! Floors, top to bottom (no import runs upward):
//! - [`cli`]: the `tenure` command line, the only place `anyhow` is used;
//! - [`watch`] (etcd → events), [`history`] (SQLite), [`telemetry`]
//!   (Prometheus metrics, OpenTelemetry traces): siblings that meet only
//!   in [`events`];
//! - [`election`] (the core: campaign, leadership, fence; knows etcd and
//!   nothing else) and [`events`] (the one event type).

pub mod cli;
pub mod dev;
pub mod election;
pub mod events;
pub mod history;
pub mod telemetry;
pub mod watch;
pub mod web;
