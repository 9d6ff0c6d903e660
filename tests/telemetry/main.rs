//! Metrics and traces, fed scripted watcher updates (no etcd needed).
//!
//! Files: `exposition` (a strict parser of the text format), `script` (the
//! scripted updates), `metrics` (values and families, default and with
//! per-election detail), `labels` (hostile labels, threads), `traces`
//! (spans, logs, OTLP export).

mod exposition;
mod labels;
mod metrics;
mod script;
mod traces;
