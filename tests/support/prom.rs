//! The Prometheus text format as tests and benches read it: one sample's
//! value, and etcd's own `/metrics` (served on its client URL).

/// The value of one sample line (`name{labels}` exactly as rendered, or a
/// bare name), if present.
pub fn metric_value(text: &str, series: &str) -> Option<f64> {
    text.lines().filter(|l| !l.starts_with('#')).find_map(|l| {
        let (name, value) = l.rsplit_once(' ')?;
        (name == series).then(|| value.parse().ok()).flatten()
    })
}

/// One series of an etcd member's own `/metrics`; `None` when the member
/// does not answer or has no such sample.
pub async fn etcd_metric(endpoint: &str, series: &str) -> Option<f64> {
    let text = reqwest::get(format!("{endpoint}/metrics"))
        .await
        .ok()?
        .text()
        .await
        .ok()?;
    metric_value(&text, series)
}

/// etcd's own count of watchers on one member.
pub async fn etcd_watchers(endpoint: &str) -> Option<f64> {
    etcd_metric(endpoint, "etcd_debugging_mvcc_watcher_total").await
}

/// Watch streams a member has started since it started (gRPC's own
/// counter: every reopen of a watch is one more).
pub async fn etcd_watch_streams(endpoint: &str) -> Option<f64> {
    etcd_metric(
        endpoint,
        r#"grpc_server_started_total{grpc_method="Watch",grpc_service="etcdserverpb.Watch",grpc_type="bidi_stream"}"#,
    )
    .await
}
