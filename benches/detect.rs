//! Measurement 3 — Detection latency against a real `tenure serve` child process: from
//! the write (the moment the writer sends its txn: the commit happens within
//! that round trip, whose median is noted) to
//!
//! - the event on `/api/v1/events` (SSE; the message whose `id` is the
//!   write's revision arrives at the bench's HTTP client),
//! - `/metrics` showing `tenure_watch_revision` ≥ the write's revision
//!   (polled back to back over one keep-alive connection),
//!
//! against a bare etcd-client watch in the bench process seeing the same
//! write. Writes are tenure's campaign and resign txns on a handful of
//! elections, one at a time, 20 ms apart. SSE and /metrics are measured in
//! separate passes (polling /metrics would steal CPU from the SSE path on 2
//! cores); the bare watch runs in both.

use std::time::{Duration, Instant};

use anyhow::{anyhow, bail, Result};
use futures_util::StreamExt;
use tokio::sync::mpsc;

use crate::common::{campaign_txn, connect, get, grant, http, ms_between, name, resign_txn};
use crate::pipeline::bare_watch;
use crate::stats::{percentile, Row};
use crate::support::{metric_value, Etcd as EtcdProcess, Serve};
use crate::Config;

const GAP: Duration = Duration::from_millis(20);

pub async fn run(cfg: &Config) -> Result<Vec<Row>> {
    let etcd = EtcdProcess::start().await;
    let endpoint = etcd.endpoint();
    let dir = tempfile::tempdir()?;
    let serve = Serve::start(
        std::slice::from_ref(&endpoint),
        &dir.path().join("history.db"),
        &[],
        &[],
    )
    .await;
    let http = http();
    serve.ready().await;
    let mut raw = connect(&endpoint).await?;

    // The bare watch: (revision, arrival) of every event.
    let (bare_tx, mut bare_rx) = mpsc::unbounded_channel::<(i64, Instant)>();
    let from = crate::common::revision(&mut raw).await? + 1;
    let mut stream = bare_watch(&mut raw.clone(), from).await?;
    let bare_task = tokio::spawn(async move {
        while let Ok(Some(resp)) = stream.message().await {
            let at = Instant::now();
            for e in resp.events() {
                if let Some(kv) = e.kv() {
                    let _ = bare_tx.send((kv.mod_revision(), at));
                }
            }
        }
    });

    // SSE: (id, arrival) of every message.
    let (sse_tx, mut sse_rx) = mpsc::unbounded_channel::<(i64, Instant)>();
    let resp = http
        .get(serve.url("/api/v1/events"))
        .timeout(Duration::from_secs(3600))
        .send()
        .await?;
    if !resp.status().is_success() {
        bail!("GET /api/v1/events: {}", resp.status());
    }
    let sse_task = tokio::spawn(async move {
        let mut body = resp.bytes_stream();
        let mut buf = String::new();
        while let Some(Ok(chunk)) = body.next().await {
            let at = Instant::now();
            buf.push_str(&String::from_utf8_lossy(&chunk));
            while let Some(end) = buf.find("\n\n") {
                let msg: String = buf.drain(..end + 2).collect();
                if let Some(id) = msg
                    .lines()
                    .find_map(|l| l.strip_prefix("id:"))
                    .and_then(|v| v.trim().parse::<i64>().ok())
                {
                    let _ = sse_tx.send((id, at));
                }
            }
        }
    });

    let mut writer = Writer::new(&mut raw, cfg.detect_samples).await?;
    // Warm up: a few writes not measured (connections, first allocations).
    for _ in 0..5 {
        let (rev, _, _) = writer.write(&mut raw).await?;
        wait_rev(&mut bare_rx, rev).await?;
        wait_rev(&mut sse_rx, rev).await?;
        tokio::time::sleep(GAP).await;
    }

    // Pass 1: SSE beside the bare watch.
    let (mut sse, mut bare1, mut added, mut rtt) = (vec![], vec![], vec![], vec![]);
    for _ in 0..cfg.detect_samples {
        let (rev, sent, answered) = writer.write(&mut raw).await?;
        let b = wait_rev(&mut bare_rx, rev).await?;
        let s = wait_rev(&mut sse_rx, rev).await?;
        bare1.push(ms_between(sent, b));
        sse.push(ms_between(sent, s));
        added.push(ms_between(b, s));
        rtt.push(ms_between(sent, answered));
        tokio::time::sleep(GAP).await;
    }

    // Pass 2: /metrics beside the bare watch.
    let metrics_url = serve.url("/metrics");
    let (mut met, mut bare2) = (vec![], vec![]);
    for _ in 0..cfg.detect_samples {
        let (rev, sent, _) = writer.write(&mut raw).await?;
        let seen = poll_metrics(&http, &metrics_url, rev).await?;
        let b = wait_rev(&mut bare_rx, rev).await?;
        bare2.push(ms_between(sent, b));
        met.push(ms_between(sent, seen));
        // SSE messages of this pass are not looked at.
        while sse_rx.try_recv().is_ok() {}
        tokio::time::sleep(GAP).await;
    }
    sse_task.abort();
    bare_task.abort();
    drop(serve);
    drop(etcd);

    let p = |v: &[f64]| (percentile(v, 0.5), percentile(v, 0.99));
    let (b1, s1, b2, m2) = (p(&bare1), p(&sse), p(&bare2), p(&met));
    eprintln!(
        "  SSE p50 {:.2} p99 {:.2} | bare p50 {:.2} p99 {:.2} || /metrics p50 {:.2} p99 {:.2} | bare p50 {:.2} p99 {:.2} (ms)",
        s1.0, s1.1, b1.0, b1.1, m2.0, m2.1, b2.0, b2.1
    );
    Ok(vec![
        Row::time("3a", "detection: commit → SSE /api/v1/events", "ms", &sse)
            .baseline_samples("bare etcd watch, same writes", &bare1)
            .median_ratio()
            .note(format!(
                "{} writes, 20 ms apart; real `tenure serve` child; from sending the write (its round trip: median {:.2} ms)",
                cfg.detect_samples,
                percentile(&rtt, 0.5)
            )),
        Row::time("3c", "detection: SSE arrival − bare watch arrival, same write", "ms", &added)
            .note("what tenure adds to etcd's own notification (watcher, state machine, metrics, history queue, broadcast, SSE over HTTP), paired per write"),
        Row::time("3b", "detection: commit → /metrics tenure_watch_revision", "ms", &met)
            .baseline_samples("bare etcd watch, same writes", &bare2)
            .median_ratio()
            .note("/metrics GET back to back until the revision shows; includes one scrape's time"),
    ])
}

/// Waits for `(rev', at)` with `rev' >= rev` and returns `at`.
async fn wait_rev(rx: &mut mpsc::UnboundedReceiver<(i64, Instant)>, rev: i64) -> Result<Instant> {
    let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
    loop {
        match tokio::time::timeout_at(deadline, rx.recv()).await {
            Ok(Some((r, at))) if r >= rev => return Ok(at),
            Ok(Some(_)) => {}
            Ok(None) => bail!("stream ended before revision {rev}"),
            Err(_) => bail!("revision {rev} not seen within 10 s"),
        }
    }
}

async fn poll_metrics(http: &reqwest::Client, url: &str, rev: i64) -> Result<Instant> {
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let (status, body, _) = get(http, url).await?;
        let at = Instant::now();
        if status == 200
            && metric_value(&body, "tenure_watch_revision").unwrap_or(0.0) >= rev as f64
        {
            return Ok(at);
        }
        if Instant::now() > deadline {
            bail!("/metrics never showed revision {rev}");
        }
    }
}

/// Alternates tenure's campaign and resign txns over a few elections.
struct Writer {
    elections: Vec<(tenure::election::ElectionName, i64, Option<i64>)>,
    next: usize,
}

impl Writer {
    async fn new(raw: &mut etcd_client::Client, _samples: usize) -> Result<Writer> {
        let mut elections = Vec::new();
        for i in 0..4 {
            let lease = grant(raw, 600).await?;
            elections.push((name(&format!("detect/e{i}")), lease, None));
        }
        Ok(Writer { elections, next: 0 })
    }

    /// One write; returns its revision, when it was sent and when its
    /// answer arrived.
    async fn write(&mut self, raw: &mut etcd_client::Client) -> Result<(i64, Instant, Instant)> {
        let i = self.next % self.elections.len();
        self.next += 1;
        let (n, lease, token) = &mut self.elections[i];
        let sent = Instant::now();
        match token.take() {
            None => {
                let t = campaign_txn(raw, n, "holder", *lease)
                    .await?
                    .ok_or_else(|| anyhow!("{n} held"))?;
                let at = Instant::now();
                *token = Some(t);
                Ok((t, sent, at))
            }
            Some(t) => {
                let rev = resign_txn(raw, n, t, *lease).await?;
                Ok((rev, sent, Instant::now()))
            }
        }
    }
}
