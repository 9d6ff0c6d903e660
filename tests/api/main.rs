//! The JSON API and the SSE feed of `tenure serve`, against a real etcd:
//! every endpoint, and every bad input with its status.
//!
//! The files, by scenario: `campaigns.rs` (the leadership endpoints, queued
//! campaigns), `bad_input.rs`, `auth.rs` (tokens, hosts and origins),
//! `reads.rs` (the history with etcd down, a replayed duration), `live.rs`
//! (SSE). The helpers they share are here.
// Tests, benches and their harness assert with unwrap/expect, spawn bare tasks
// and read the wall clock: the lints of Cargo.toml and clippy.toml hold src/.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::disallowed_methods)]

#[path = "../support/mod.rs"]
mod support;

mod auth;
mod bad_input;
mod campaigns;
mod live;
mod reads;

use std::time::Duration;

use reqwest::{Client as Http, StatusCode};
use serde_json::Value;

use support::{Etcd, Serve};

const TOKEN: &str = "s3cret-token";

/// A ready `tenure serve`: its watcher has loaded the snapshot, so what the
/// test does next is seen as it happens.
async fn serve(etcd: &Etcd, dir: &tempfile::TempDir, args: &[&str]) -> Serve {
    let s = Serve::start(
        &[etcd.endpoint()],
        &dir.path().join("h.db"),
        args,
        &[("TENURE_TIMEOUT", "1")],
    )
    .await;
    s.ready().await;
    s
}

fn http() -> Http {
    Http::builder()
        .timeout(Duration::from_secs(20))
        .build()
        .expect("http client")
}

async fn post(s: &Serve, path: &str, body: Value, token: Option<&str>) -> (StatusCode, Value) {
    let mut req = http().post(s.url(path)).json(&body);
    if let Some(t) = token {
        req = req.bearer_auth(t);
    }
    let resp = req.send().await.expect("request");
    let status = resp.status();
    (status, resp.json().await.unwrap_or(Value::Null))
}

async fn get(s: &Serve, path: &str) -> (StatusCode, Value) {
    let resp = http().get(s.url(path)).send().await.expect("request");
    let status = resp.status();
    (status, resp.json().await.unwrap_or(Value::Null))
}

fn code(v: &Value) -> &str {
    v["error"]["code"].as_str().unwrap_or("<no error code>")
}
