//! Measurement 6 — `scale_elections` elections watched by a real `tenure serve`.
//!
//! Setup: that many elections, each led by its own key on its own lease
//! (tenure's campaign txn). Per run, a fresh history file and process:
//!
//! - 6b start-up: from spawning `tenure serve` to `/readyz` answering 200
//!   at a revision ≥ the elections' last write (the snapshot loaded and
//!   applied to metrics; the history commit is waited for separately, then
//!   the bench moves on), ÷ a bare etcd-client connect + Get of the same
//!   range (the watch range) from the bench process;
//! - 5c `/metrics` scrape over HTTP (GET, whole body), ÷ GET /healthz on the
//!   same connection;
//! - 6a peak RSS: VmHWM of the serve process after start-up, the history
//!   commit and the scrapes. etcd's own RSS is noted for scale.

use std::time::{Duration, Instant};

use anyhow::{bail, Result};
use etcd_client::GetOptions;

use crate::common::{connect, get, http, keys, ms, op};
use crate::load::Fleet;
use crate::stats::{Row, Target};
use crate::support::procfs::proc_status_kb;
use crate::support::{metric_value, Etcd as EtcdProcess, Serve};
use crate::Config;

pub async fn run(cfg: &Config) -> Result<Vec<Row>> {
    let n = cfg.scale_elections;
    let etcd = EtcdProcess::start().await;
    let endpoint = etcd.endpoint();
    let t = Instant::now();
    let fleet = Fleet::new(&endpoint, "scale", n).await?;
    fleet.campaign_all("holder").await?;
    let rev = fleet.revision().await?;
    eprintln!(
        "  {n} elections written in {:.1} s, revision {rev}",
        t.elapsed().as_secs_f64()
    );
    let http = http();
    let (mut startup, mut get_ms, mut rss, mut scrape, mut healthz) =
        (vec![], vec![], vec![], vec![], vec![]);
    let mut scrape_bytes = 0;
    let mut after_ready_rss = vec![];
    for run in 0..cfg.scale_runs {
        // Baseline: connect + Get of the watch range.
        let s = Instant::now();
        let c = connect(&endpoint).await?;
        let (start, end) = keys().watch_range();
        // Pages of one revision, as serve reads (one response of 100,000
        // elections is over gRPC's 4 MiB default).
        let mut kv = c
            .kv_client()
            .max_decoding_message_size(tenure::watch::MAX_MESSAGE_BYTES);
        let mut from = start.into_bytes();
        let mut at = None;
        let mut got = 0;
        loop {
            let mut o = GetOptions::new()
                .with_range(end.clone())
                .with_limit(tenure::watch::SNAPSHOT_PAGE_KEYS);
            if let Some(r) = at {
                o = o.with_revision(r);
            }
            let resp = op("get", kv.get(from.clone(), Some(o))).await?;
            at = at.or(resp.header().map(|h| h.revision()));
            got += resp.kvs().len();
            match resp.kvs().last() {
                Some(last) if resp.more() => {
                    from = last.key().to_vec();
                    from.push(0);
                }
                _ => break,
            }
        }
        get_ms.push(ms(s.elapsed()));
        if got < n {
            bail!("Get returned {got} keys, expected {n}");
        }
        drop(c);

        let dir = tempfile::tempdir()?;
        let max = n.max(10_000).to_string();
        let serve = Serve::start(
            std::slice::from_ref(&endpoint),
            &dir.path().join("history.db"),
            &["--max-elections", &max],
            &[],
        )
        .await;
        let ready_url = serve.url("/readyz");
        let deadline = Instant::now() + Duration::from_secs(60);
        let ready_at = loop {
            if let Ok((200, body, _)) = get(&http, &ready_url).await {
                let at = Instant::now();
                let r: i64 = body
                    .trim()
                    .rsplit(' ')
                    .next()
                    .and_then(|x| x.parse().ok())
                    .unwrap_or(0);
                if r >= rev {
                    break at;
                }
            }
            if Instant::now() > deadline {
                bail!(
                    "serve not ready at revision {rev} within 60 s:\n{}",
                    serve.log_text()
                );
            }
            tokio::time::sleep(Duration::from_millis(5)).await;
        };
        startup.push(ms(ready_at - serve.spawned));
        after_ready_rss
            .push(proc_status_kb(serve.pid() as u32, "VmRSS").unwrap_or(0) as f64 / 1024.0);
        // The history holds every election once the snapshot's batch is in.
        let last = fleet
            .names
            .last()
            .map(|n| n.to_string())
            .unwrap_or_default();
        let terms_url = serve.url(&format!("/api/v1/elections/{last}/terms?limit=1"));
        let deadline = Instant::now() + Duration::from_secs(60);
        loop {
            if let Ok((200, body, _)) = get(&http, &terms_url).await {
                if body.contains("\"token\"") {
                    break;
                }
            }
            if Instant::now() > deadline {
                bail!("history never showed {last}:\n{}", serve.log_text());
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        let history_at = Instant::now();
        // Scrapes.
        let (metrics_url, healthz_url) = (serve.url("/metrics"), serve.url("/healthz"));
        for i in 0..cfg.scrapes {
            if i % 2 == 0 {
                let (_, body, d) = get(&http, &metrics_url).await?;
                scrape.push(ms(d));
                scrape_bytes = body.len();
                if i == 0 {
                    let tracked = metric_value(&body, "tenure_watch_elections").unwrap_or(0.0);
                    if tracked < n as f64 {
                        bail!("serve tracks {tracked} elections, expected {n}");
                    }
                }
                healthz.push(ms(get(&http, &healthz_url).await?.2));
            } else {
                healthz.push(ms(get(&http, &healthz_url).await?.2));
                let (_, _, d) = get(&http, &metrics_url).await?;
                scrape.push(ms(d));
            }
        }
        let hwm = proc_status_kb(serve.pid() as u32, "VmHWM").unwrap_or(0) as f64 / 1024.0;
        rss.push(hwm);
        eprintln!(
            "  scale run {}: ready after {:.0} ms (bare Get {:.1} ms), history committed {:.0} ms later; VmRSS at ready {:.1} MB, VmHWM {:.1} MB",
            run + 1,
            startup.last().unwrap(),
            get_ms.last().unwrap(),
            ms(history_at - ready_at),
            after_ready_rss.last().unwrap(),
            hwm
        );
        drop(serve);
    }
    let etcd_rss = proc_status_kb(etcd.pid().unwrap_or(0), "VmRSS").unwrap_or(0) as f64 / 1024.0;
    fleet.release().await;
    drop(etcd);
    Ok(vec![
        Row::time(
            "5d",
            &format!("/metrics scrape over HTTP, {n} elections (real serve)"),
            "ms",
            &scrape,
        )
        .baseline_samples("GET /healthz, same connection", &healthz)
        .median_ratio()
        .note(format!(
            "{} kB per scrape; {} scrapes per run",
            scrape_bytes / 1024,
            cfg.scrapes
        )),
        Row::time(
            "6a",
            &format!("peak RSS (VmHWM), {n} elections watched"),
            "MB",
            &rss,
        )
        .target(Target::MaxAtMost(150.0))
        .note(format!(
            "after start-up, history commit and scrapes; VmRSS right at /readyz: median {:.1} MB; etcd's own RSS {:.0} MB",
            crate::stats::Summary::of(&after_ready_rss).median,
            etcd_rss
        )),
        Row::time(
            "6b",
            &format!("snapshot start-up to /readyz at the revision, {n} elections"),
            "ms",
            &startup,
        )
        .baseline_samples("bare connect + Get of the range", &get_ms)
        .median_ratio()
        .note("from spawning the process (exec, SQLite open, connect, snapshot, metrics) to /readyz 200 at the revision; polled every 5 ms"),
    ])
}
