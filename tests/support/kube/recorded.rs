//! What serve recorded of a Lease, read through its API, pages and metrics.

use std::time::{Duration, Instant};

use super::Serve;

/// A recorded term: (holder, token, ended revision, cause).
pub type Recorded = (String, i64, Option<i64>, Option<String>);

/// The terms serve recorded of election `name`, by token.
pub async fn recorded(serve: &Serve, name: &str) -> Vec<Recorded> {
    let url = serve.url(&format!(
        "/api/v1/elections/{}/terms?limit=1000",
        name.replace('/', "%2F")
    ));
    let v: serde_json::Value = reqwest::get(url)
        .await
        .expect("terms")
        .json()
        .await
        .expect("json");
    let mut got: Vec<_> = v["terms"]
        .as_array()
        .unwrap_or_else(|| panic!("{v}"))
        .iter()
        .map(|t| {
            (
                t["holder"].as_str().expect("holder").to_owned(),
                t["token"].as_i64().expect("token"),
                t["ended_revision"].as_i64(),
                t["end_cause"].as_str().map(str::to_owned),
            )
        })
        .collect();
    got.sort_by_key(|t| t.1);
    got
}

/// Waits until serve counts `n` lapsed Leases (counted at most once a
/// second, after a watch answer: an idle stream answers a probe every few
/// seconds).
pub async fn lapsed(serve: &Serve, n: f64) {
    let deadline = Instant::now() + Duration::from_secs(30);
    while serve.metric("tenure_leases_lapsed").await != Some(n) {
        assert!(Instant::now() < deadline, "tenure_leases_lapsed never {n}");
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

/// Every event serve recorded of election `name` (the API, in recording
/// order; at most 1,000).
pub async fn events(serve: &Serve, name: &str) -> Vec<serde_json::Value> {
    let url = serve.url(&format!(
        "/api/v1/elections/{}/events?limit=1000",
        name.replace('/', "%2F")
    ));
    let mut v: serde_json::Value = reqwest::get(url)
        .await
        .expect("events")
        .json()
        .await
        .expect("json");
    match v["events"].take() {
        serde_json::Value::Array(events) => events,
        other => panic!("no events in {other}"),
    }
}

/// What tenure recorded of them: each `term_ended` event of `name` that
/// carries a handover, in order.
pub async fn recorded_handovers(serve: &Serve, name: &str) -> Vec<(String, i64)> {
    events(serve, name)
        .await
        .iter()
        .filter(|e| e["type"] == "term_ended")
        .filter_map(|e| {
            let us = e["renewals"]["handover_us"].as_i64()?;
            Some((e["holder"].as_str().expect("holder").to_owned(), us))
        })
        .collect()
}

/// The election page of `name`, as served.
pub async fn page(serve: &Serve, name: &str) -> String {
    let url = serve.url(&format!("/elections/{}", name.replace('/', "%2F")));
    reqwest::get(url)
        .await
        .expect("page")
        .text()
        .await
        .expect("text")
}
