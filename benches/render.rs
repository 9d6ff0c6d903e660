//! Measurement 5 — Rendering at scale, server side.
//!
//! - 5a `/metrics` text for `scale_elections` elections: `Metrics::render`
//!   after synthetic updates (every election: a term started, ended
//!   (resigned), a second term started, its lease sampled), ÷ serde_json of
//!   the same per-election state (what a JSON listing of it costs).
//! - 5a2 the same elections rendered by default ÷ with
//!   `--per-election-detail` (issue 16: 12 series per election against 35).
//! - 5b the timeline of one election with `timeline_terms` terms, all in
//!   the window (synthetic history written with `history::Store`, read back
//!   with `history::Reader`): `web::timeline::layout` + `web::pages::render_svg`,
//!   the pure server-side render, ÷ serde_json of the same terms.
//! - 5c the same election's page from a real `tenure serve` (all its terms
//!   inside the page's default window, the last hour): GET /elections/NAME,
//!   ÷ GET of the same terms as JSON from the API
//!   (`/api/v1/elections/NAME/terms?limit=N`), same server, same
//!   connection, alternating.

use std::path::Path;
use std::time::{Duration, Instant};

use anyhow::{anyhow, Result};
use serde::Serialize;
use tenure::election::{FenceReason, KeyLayout};
use tenure::events::{Batch, EndCause, Event, EventKind, Update};
use tenure::history::{Query, Reader, Store};
use tenure::telemetry::{Metrics, MetricsOptions};
use tenure::web::pages::render_svg;
use tenure::web::timeline::{layout, Input};

use crate::common::{get, http, ms};
use crate::stats::{Row, Target};
use crate::support::procfs::proc_status_kb;
use crate::support::{Etcd as EtcdProcess, Serve};
use crate::Config;

#[derive(Serialize)]
struct ElectionState<'a> {
    election: &'a str,
    holder: &'a str,
    token: i64,
    has_leader: bool,
    leader_changes: u64,
    term_start_seconds: f64,
    leaderless_seconds: f64,
    lease_remaining_seconds: i64,
    term_ends: [u64; 5],
    refusals: [u64; 3],
    checks: [u64; 2],
}

pub async fn run(cfg: &Config) -> Result<Vec<Row>> {
    let mut rows = metrics_render(cfg)?;
    rows.extend(timeline(cfg).await?);
    Ok(rows)
}

fn metrics_render(cfg: &Config) -> Result<Vec<Row>> {
    let n = cfg.scale_elections;
    let self_pid = std::process::id();
    let rss = || proc_status_kb(self_pid, "VmRSS").unwrap_or(0) as f64 / 1024.0;
    let rss_before = rss();
    let m = Metrics::new().map_err(|e| anyhow!("metrics: {e}"))?;
    let now = tenure::events::now_ms();
    let names: Vec<String> = (0..n).map(|i| format!("scale-{i:05}")).collect();
    let holders: Vec<String> = (0..n).map(|i| format!("worker-{}", i % 97)).collect();
    let started = |i: usize, token: i64, at: i64, prev: Option<String>| Event {
        revision: token,
        at_ms: at,
        election: names[i].clone(),
        kind: EventKind::TermStarted {
            token,
            holder: holders[i].clone(),
            lease_id: 7_000_000 + i as i64,
            layout: KeyLayout::Single,
            previous_holder: prev,
            from_snapshot: false,
        },
    };
    // The synthetic updates, applied to `m`; also to the opt-in detail
    // metrics below (5a2), after this one's memory is measured.
    let feed = |m: &Metrics| {
        let first: Vec<Event> = (0..n)
            .map(|i| started(i, 10 + i as i64, now - 60_000, None))
            .collect();
        m.apply(&Update::Batch(Batch {
            revision: 10 + n as i64,
            events: first,
        }));
        let mut second = Vec::with_capacity(2 * n);
        for i in 0..n {
            let token = 10 + i as i64;
            second.push(Event {
                revision: 100_000 + i as i64,
                at_ms: now - 30_000,
                election: names[i].clone(),
                kind: EventKind::TermEnded {
                    token,
                    holder: holders[i].clone(),
                    lease_id: 7_000_000 + i as i64,
                    cause: EndCause::Resigned,
                    started_revision: token,
                    started_at_ms: now - 60_000,
                    renewals: None,
                },
            });
            second.push(started(
                i,
                200_000 + i as i64,
                now - 29_000,
                Some(holders[i].clone()),
            ));
        }
        m.apply(&Update::Batch(Batch {
            revision: 300_000,
            events: second,
        }));
        for (i, name) in names.iter().enumerate() {
            m.apply(&Update::LeaseSampled {
                election: name.clone(),
                lease_id: 7_000_000 + i as i64,
                remaining_seconds: Some(9),
            });
        }
    };
    feed(&m);
    let rss_fed = rss();
    // One render's transient memory: reset the peak (clear_refs 5), render,
    // read the peak.
    let _ = std::fs::write("/proc/self/clear_refs", "5");
    let hwm_reset = proc_status_kb(self_pid, "VmHWM").unwrap_or(0) as f64 / 1024.0;
    let out = m.render();
    let hwm = proc_status_kb(self_pid, "VmHWM").unwrap_or(0) as f64 / 1024.0;
    let lines = out.lines().filter(|l| !l.starts_with('#')).count();
    let bytes = out.len();
    drop(out);
    let mem_note = format!(
        "memory in this process: the metrics of {n} elections hold {:.1} MB (VmRSS growth); one render peaks {:.1} MB above that (VmHWM after a reset{})",
        rss_fed - rss_before,
        hwm - rss_fed,
        if hwm_reset <= rss_fed + 1.0 { "" } else { "; reset not honoured" }
    );
    eprintln!("  {mem_note}");
    let state: Vec<ElectionState> = (0..n)
        .map(|i| ElectionState {
            election: &names[i],
            holder: &holders[i],
            token: 200_000 + i as i64,
            has_leader: true,
            leader_changes: 2,
            term_start_seconds: (now - 29_000) as f64 / 1000.0,
            leaderless_seconds: 1.0,
            lease_remaining_seconds: 9,
            term_ends: [1, 0, 0, 0, 0],
            refusals: [0; 3],
            checks: [0; 2],
        })
        .collect();
    let (mut t, mut b) = (vec![], vec![]);
    for run in 0..cfg.render_reps {
        let time_render = || {
            let s = Instant::now();
            let out = m.render();
            std::hint::black_box(out.len());
            ms(s.elapsed())
        };
        let time_json = || {
            let s = Instant::now();
            let out = serde_json::to_string(&state).unwrap_or_default();
            std::hint::black_box(out.len());
            ms(s.elapsed())
        };
        if run % 2 == 0 {
            t.push(time_render());
            b.push(time_json());
        } else {
            b.push(time_json());
            t.push(time_render());
        }
    }
    eprintln!(
        "  Metrics::render, {n} elections: {lines} samples, {} kB; median {:.1} ms",
        bytes / 1024,
        crate::stats::Summary::of(&t).median
    );
    let row = Row::time(
        "5a",
        &format!("/metrics render (Metrics::render), {n} elections"),
        "ms",
        &t,
    )
    .baseline_samples("serde_json of the same state", &b)
    .paired_ratio(&t, &b)
    .note(format!(
        "{lines} samples, {} kB of text; {} renders; {mem_note}",
        bytes / 1024,
        cfg.render_reps
    ));
    // 5a2: the same elections with per-election detail (the series of
    // before issue 16, 35 per election), rendered alternately with `m`.
    let d = Metrics::with_options(MetricsOptions {
        per_election_detail: true,
        ..MetricsOptions::default()
    })
    .map_err(|e| anyhow!("metrics: {e}"))?;
    feed(&d);
    let out = d.render();
    let d_lines = out.lines().filter(|l| !l.starts_with('#')).count();
    let d_bytes = out.len();
    drop(out);
    let (mut tl, mut td) = (vec![], vec![]);
    let time = |m: &Metrics| {
        let s = Instant::now();
        std::hint::black_box(m.render().len());
        ms(s.elapsed())
    };
    for run in 0..cfg.render_reps {
        if run % 2 == 0 {
            tl.push(time(&m));
            td.push(time(&d));
        } else {
            td.push(time(&d));
            tl.push(time(&m));
        }
    }
    let detail = Row::time(
        "5a2",
        &format!("/metrics render by default, {n} elections"),
        "ms",
        &tl,
    )
    .baseline_samples("the same with --per-election-detail", &td)
    .paired_ratio(&tl, &td)
    .note(format!(
        "{lines} vs {d_lines} samples, {} vs {} kB of text",
        bytes / 1024,
        d_bytes / 1024
    ));
    Ok(vec![row, detail])
}

/// Writes `terms` ended terms of `election`, evenly over the `span_ms`
/// before now (each lasting 5/6 of its slot), with a fence refusal every 50
/// terms.
async fn synthetic_history(db: &Path, election: &str, terms: usize, span_ms: i64) -> Result<()> {
    let store = Store::open(db, Duration::ZERO).map_err(|e| anyhow!("history: {e}"))?;
    let now = tenure::events::now_ms();
    let slot = (span_ms / terms.max(1) as i64).max(6);
    let start = now - 1_000 - terms as i64 * slot;
    let holder = |k: usize| format!("node-{}", k % 5 + 1);
    let mut events = Vec::new();
    let mut rev = 1;
    for k in 0..terms {
        let at = start + k as i64 * slot;
        let token = rev;
        events.push(Event {
            revision: rev,
            at_ms: at,
            election: election.into(),
            kind: EventKind::TermStarted {
                token,
                holder: holder(k),
                lease_id: 1000 + k as i64,
                layout: KeyLayout::Single,
                previous_holder: (k > 0).then(|| holder(k - 1)),
                from_snapshot: false,
            },
        });
        rev += 1;
        if k % 50 == 49 {
            events.push(Event {
                revision: rev,
                at_ms: at + slot / 3,
                election: election.into(),
                kind: EventKind::FenceRefused {
                    resource: "db".into(),
                    token: token - 3,
                    reason: FenceReason::StaleToken,
                    current_token: Some(token),
                    current_holder: Some(holder(k)),
                },
            });
            rev += 1;
        }
        events.push(Event {
            revision: rev,
            at_ms: at + slot * 5 / 6,
            election: election.into(),
            kind: EventKind::TermEnded {
                token,
                holder: holder(k),
                lease_id: 1000 + k as i64,
                cause: if k % 7 == 3 {
                    EndCause::Expired
                } else {
                    EndCause::Resigned
                },
                started_revision: token,
                started_at_ms: at,
                renewals: None,
            },
        });
        rev += 1;
        if events.len() >= 1000 {
            store
                .write(Batch {
                    revision: rev - 1,
                    events: std::mem::take(&mut events),
                })
                .await
                .map_err(|e| anyhow!("history write: {e}"))?;
        }
    }
    store
        .write(Batch {
            revision: rev - 1,
            events,
        })
        .await
        .map_err(|e| anyhow!("history write: {e}"))?;
    store
        .close()
        .await
        .map_err(|e| anyhow!("history close: {e}"))?;
    Ok(())
}

/// 5b (pure layout + SVG) and 5c (the page over HTTP).
async fn timeline(cfg: &Config) -> Result<Vec<Row>> {
    let n = cfg.timeline_terms;
    let election = "timeline-bench";
    let dir = tempfile::tempdir()?;
    let db = dir.path().join("history.db");
    // Every term inside the page's default window (the last hour).
    synthetic_history(&db, election, n, 3_300_000).await?;

    // The server-side render on its own: timeline::layout + pages::render_svg
    // over the terms and refusals as the history returns them; then the
    // same for 1000 terms, which the layout draws one by one (10,000 terms
    // in a 1000-unit drawing are sub-unit wide and merge into dense bars).
    let mut rows = vec![pure_render(cfg, "5b", &db, election, n).await?];
    if n > 1000 {
        let small_dir = tempfile::tempdir()?;
        let small = small_dir.path().join("history.db");
        synthetic_history(&small, election, 1000, 3_300_000).await?;
        rows.push(pure_render(cfg, "5b2", &small, election, 1000).await?);
    }

    // The page over HTTP from a real serve.
    let etcd = EtcdProcess::start().await;
    let serve = Serve::start(&[etcd.endpoint()], &db, &[], &[]).await;
    let http = http();
    serve.ready().await;
    let page = serve.url(&format!("/elections/{election}"));
    let api = serve.url(&format!("/api/v1/elections/{election}/terms?limit={n}"));
    // Warm up, and check both answer.
    let (status, body, _) = get(&http, &page).await?;
    let (api_status, api_body, _) = get(&http, &api).await?;
    let api_terms = serde_json::from_str::<serde_json::Value>(&api_body)
        .ok()
        .and_then(|v| v["terms"].as_array().map(|a| a.len()))
        .unwrap_or(0);
    if api_status != 200 || api_terms != n {
        return Err(anyhow!(
            "the API gave {api_terms} terms (status {api_status}), expected {n}"
        ));
    }
    let (mut t, mut b) = (vec![], vec![]);
    if status == 200 {
        for run in 0..cfg.render_reps {
            if run % 2 == 0 {
                t.push(ms(get(&http, &page).await?.2));
                b.push(ms(get(&http, &api).await?.2));
            } else {
                b.push(ms(get(&http, &api).await?.2));
                t.push(ms(get(&http, &page).await?.2));
            }
        }
    } else {
        for _ in 0..cfg.render_reps {
            b.push(ms(get(&http, &api).await?.2));
        }
    }
    eprintln!(
        "  timeline page: status {status}, {} kB; API terms JSON {} kB",
        body.len() / 1024,
        api_body.len() / 1024
    );
    let mut row = Row::time(
        "5c",
        &format!("timeline page GET /elections/NAME, {n} terms in its window"),
        "ms",
        &t,
    )
    .baseline_samples("GET the same terms as API JSON", &b);
    if status == 200 {
        row = row.paired_ratio(&t, &b).target(Target::MedianAtMost(50.0)).note(format!(
            "real `tenure serve`; the page's default window (last hour) holds all {n} terms; page {} kB; \
             includes the history queries (terms, refusals, newest events) and loopback HTTP",
            body.len() / 1024
        ));
    } else {
        row = row.note(format!(
            "the page answered {status}: not served by this build"
        ));
    }
    rows.push(row);
    drop(serve);
    drop(etcd);
    Ok(rows)
}

async fn pure_render(cfg: &Config, id: &str, db: &Path, election: &str, n: usize) -> Result<Row> {
    let reader = Reader::open(db).map_err(|e| anyhow!("history: {e}"))?;
    let all = Query {
        from_ms: None,
        to_ms: None,
        limit: Some(tenure::history::MAX_LIMIT),
    };
    let terms = reader.terms(election, &all).map_err(|e| anyhow!("{e}"))?;
    let refusals = reader
        .refusals(Some(election), &all)
        .map_err(|e| anyhow!("{e}"))?;
    if terms.len() != n {
        return Err(anyhow!(
            "the history holds {} terms, expected {n}",
            terms.len()
        ));
    }
    let now = tenure::events::now_ms();
    let input = Input {
        terms: &terms,
        refusals: &refusals,
        gaps: &[],
        from_ms: now - 3_600_000,
        to_ms: now,
        now_ms: now,
        known_since_ms: terms.iter().map(|t| t.started_at_ms).min(),
        unwatched_since_ms: None,
        width: tenure::web::timeline::WIDTH,
    };
    let (mut pure, mut pure_base) = (vec![], vec![]);
    let mut svg_len = 0;
    let mut drawn = (0, 0, 0);
    for run in 0..cfg.render_reps {
        let render = || {
            let s = Instant::now();
            let t = layout(&input);
            let svg = render_svg(&t, election);
            let d = ms(s.elapsed());
            (d, svg.len(), (t.bars.len(), t.terms_drawn, t.terms_merged))
        };
        let json = || {
            let s = Instant::now();
            let out = serde_json::to_string(&terms).unwrap_or_default();
            std::hint::black_box(out.len());
            ms(s.elapsed())
        };
        if run % 2 == 0 {
            let (d, len, k) = render();
            pure.push(d);
            (svg_len, drawn) = (len, k);
            pure_base.push(json());
        } else {
            pure_base.push(json());
            let (d, len, k) = render();
            pure.push(d);
            (svg_len, drawn) = (len, k);
        }
    }
    eprintln!(
        "  timeline layout + SVG, {n} terms: {} bars ({} terms drawn, {} merged into dense bars), SVG {} kB",
        drawn.0,
        drawn.1,
        drawn.2,
        svg_len / 1024
    );
    Ok(Row::time(
        id,
        &format!("timeline render (timeline::layout + pages::render_svg), {n} terms"),
        "ms",
        &pure,
    )
    .baseline_samples("serde_json of the same terms", &pure_base)
    .paired_ratio(&pure, &pure_base)
    .target(Target::MedianAtMost(50.0))
    .note(format!(
        "all {n} terms (and {} refusals) inside the 1 h window, 1000 units wide: {} bars ({} terms merged into dense bars), SVG {} kB",
        refusals.len(),
        drawn.0,
        drawn.2,
        svg_len / 1024
    )))
}
