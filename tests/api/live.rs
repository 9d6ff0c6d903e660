//! The SSE feed: an event after an etcd write.

use std::time::Duration;

use reqwest::StatusCode;
use serde_json::Value;

use crate::support::Etcd;
use crate::{code, get, http, serve};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sse_delivers_an_event_after_an_etcd_write() {
    let etcd = Etcd::start().await;
    let dir = tempfile::tempdir().expect("tempdir");
    let s = serve(&etcd, &dir, &["--no-auth"]).await;
    let (st, v) = get(&s, "/api/v1/events?election=..").await;
    assert_eq!((st, code(&v)), (StatusCode::BAD_REQUEST, "invalid_name"));

    let mut resp = http()
        .get(s.url("/api/v1/events?election=live"))
        .send()
        .await
        .expect("sse");
    assert_eq!(resp.status(), StatusCode::OK);
    assert!(resp.headers()["content-type"]
        .to_str()
        .expect("ct")
        .starts_with("text/event-stream"));
    // Another election's write must not reach this subscriber; ours must.
    let mut raw = etcd.client().await;
    raw.put("election/other", "x", None).await.expect("put");
    let put = raw
        .put("election/live", "holder-1", None)
        .await
        .expect("put");
    let revision = put.header().expect("header").revision();
    // etcd's own events (the cluster poller's first look: `event: cluster`)
    // come whatever the filter and may arrive first: skip them.
    let mut text = String::new();
    let deadline = tokio::time::Instant::now() + Duration::from_secs(15);
    loop {
        while !text.contains("\n\n") {
            let chunk = tokio::time::timeout_at(deadline, resp.chunk())
                .await
                .expect("an SSE message in time")
                .expect("read")
                .expect("open");
            text.push_str(&String::from_utf8_lossy(&chunk));
            text = text.trim_start_matches(":\n").to_owned();
        }
        if !text.starts_with("event: cluster\n") {
            break;
        }
        let rest = text.split_once("\n\n").map(|(_, r)| r.to_owned());
        text = rest
            .unwrap_or_default()
            .trim_start_matches(":\n")
            .to_owned();
    }
    assert!(text.contains("event: term_started"), "{text}");
    assert!(text.contains(&format!("id: {revision}")), "{text}");
    let data = text
        .lines()
        .find_map(|l| l.strip_prefix("data: "))
        .expect("data line");
    let event: Value = serde_json::from_str(data).expect("json");
    assert_eq!(
        (event["election"].as_str(), event["holder"].as_str()),
        (Some("live"), Some("holder-1"))
    );
}
