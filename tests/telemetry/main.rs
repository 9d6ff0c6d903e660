//! Metrics and traces, fed scripted watcher updates (no etcd needed).
//!
//! Files: `exposition` (a strict parser of the text format), `script` (the
//! scripted updates), `metrics` (values and families, default and with
//! per-election detail), `labels` (hostile labels, threads), `traces`
//! (spans, logs, OTLP export).
// Tests, benches and their harness assert with unwrap/expect, spawn bare tasks
// and read the wall clock: the lints of Cargo.toml and clippy.toml hold src/.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::disallowed_methods)]

mod exposition;
mod labels;
mod metrics;
mod script;
mod traces;
