//! Measurement 5e–5g — the incident view and the overview at scale (issue 14).
//!
//! - 5e `/timeline` layout + SVG, in process: `web::incident::load` (the
//!   history reads of one page) + `web::incident::layout` +
//!   `web::incident::render_svg` for `incident_lanes` elections (5 terms each
//!   in the last hour, one lane each, one page), ÷ serde_json of the same
//!   terms.
//! - 5f the page from a real `tenure serve`: GET
//!   `/timeline?from=1h&per_page=N` ÷ GET of the report of the same window
//!   as JSON (`/api/v1/report?from=1h&format=json`: the same reads, no
//!   drawing), alternating.
//! - 5g the overview page with `scale_elections` elections: GET `/` (first
//!   page: 200 rows; every election counted, filtered, sorted) ÷ GET
//!   `/api/v1/elections` (the API's listing of all of them).

use std::path::Path;
use std::time::{Duration, Instant};

use anyhow::{anyhow, Result};
use tenure::election::KeyLayout;
use tenure::events::{Batch, EndCause, Event, EventKind};
use tenure::history::{Reader, Store};
use tenure::web::incident;

use crate::common::{get, http, ms};
use crate::stats::{Row, Target};
use crate::support::{Etcd as EtcdProcess, Serve};
use crate::Config;

const TERMS_PER_LANE: usize = 5;

pub async fn run(cfg: &Config) -> Result<Vec<Row>> {
    let lanes = cfg.incident_lanes;
    let dir = tempfile::tempdir()?;
    let db = dir.path().join("history.db");
    synthetic(&db, lanes, TERMS_PER_LANE).await?;
    let mut rows = vec![pure(cfg, &db, lanes)?];
    rows.push(over_http(cfg, &db, "5f", lanes).await?);
    let big_dir = tempfile::tempdir()?;
    let big = big_dir.path().join("history.db");
    synthetic(&big, cfg.scale_elections, 1).await?;
    rows.push(over_http(cfg, &big, "5g", cfg.scale_elections).await?);
    Ok(rows)
}

/// `elections` elections, each with `terms` terms over the last 55 minutes
/// (the last one open), holders rotating.
async fn synthetic(db: &Path, elections: usize, terms: usize) -> Result<()> {
    let store = Store::open(db, Duration::ZERO).map_err(|e| anyhow!("history: {e}"))?;
    let now = tenure::events::now_ms();
    let span = 3_300_000i64;
    let slot = span / terms as i64;
    let mut rev = 1i64;
    let mut events = Vec::new();
    for e in 0..elections {
        let name = format!("svc-{e:05}/leader");
        let offset = (e as i64 * 7919) % slot.max(1);
        for k in 0..terms {
            let at = now - span - 60_000 + offset + k as i64 * slot;
            let token = rev;
            let holder = format!("node-{}", (e + k) % 7);
            events.push(Event {
                revision: rev,
                at_ms: at,
                election: name.clone(),
                kind: EventKind::TermStarted {
                    token,
                    holder: holder.clone(),
                    lease_id: 1000 + rev,
                    layout: KeyLayout::Single,
                    previous_holder: None,
                    from_snapshot: false,
                },
            });
            rev += 1;
            if k + 1 < terms {
                events.push(Event {
                    revision: rev,
                    at_ms: at + slot * 9 / 10,
                    election: name.clone(),
                    kind: EventKind::TermEnded {
                        token,
                        holder,
                        lease_id: 1000 + token,
                        cause: EndCause::Expired,
                        started_revision: token,
                        started_at_ms: at,
                        renewals: None,
                    },
                });
                rev += 1;
            }
        }
        if events.len() >= 2000 {
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

fn pure(cfg: &Config, db: &Path, lanes: usize) -> Result<Row> {
    let reader = Reader::open(db).map_err(|e| anyhow!("history: {e}"))?;
    let (mut t, mut b) = (vec![], vec![]);
    let mut svg_len = 0;
    let mut drawn = 0;
    for run in 0..cfg.render_reps {
        let now = tenure::events::now_ms();
        let sel = incident::Selection {
            from_ms: now - 3_600_000,
            to_ms: now,
            glob: None,
        };
        let render = || -> Result<(f64, usize, usize, Vec<tenure::history::TermRow>)> {
            let s = Instant::now();
            let w = incident::load(&reader, &sel, 0, lanes).map_err(|e| anyhow!("{e}"))?;
            let d = incident::layout(&w, now, tenure::web::timeline::WIDTH);
            let svg = incident::render_svg(&d, "bench");
            let took = ms(s.elapsed());
            let terms = w.lanes.into_iter().flat_map(|l| l.terms).collect();
            Ok((took, svg.len(), d.rows.len(), terms))
        };
        let (took, len, rows, terms) = render()?;
        let json = || {
            let s = Instant::now();
            let out = serde_json::to_string(&terms).unwrap_or_default();
            std::hint::black_box(out.len());
            ms(s.elapsed())
        };
        if run % 2 == 0 {
            t.push(took);
            b.push(json());
        } else {
            b.push(json());
            t.push(render()?.0);
        }
        (svg_len, drawn) = (len, rows);
    }
    if drawn != lanes {
        return Err(anyhow!("drew {drawn} lanes, expected {lanes}"));
    }
    eprintln!(
        "  /timeline load + layout + SVG, {lanes} lanes: SVG {} kB",
        svg_len / 1024
    );
    Ok(Row::time(
        "5e",
        &format!("/timeline render (incident::load + layout + render_svg), {lanes} lanes"),
        "ms",
        &t,
    )
    .baseline_samples("serde_json of the same terms", &b)
    .paired_ratio(&t, &b)
    .target(Target::MedianAtMost(500.0))
    .note(format!(
        "{lanes} elections × {TERMS_PER_LANE} terms in the last hour, one page of {lanes} lanes; \
         includes the history reads (activity, then terms and refusals per lane); SVG {} kB",
        svg_len / 1024
    )))
}

async fn over_http(cfg: &Config, db: &Path, id: &str, n: usize) -> Result<Row> {
    let etcd = EtcdProcess::start().await;
    let serve = Serve::start(&[etcd.endpoint()], db, &[], &[]).await;
    let http = http();
    serve.ready().await;
    let (page, api, what, base) = if id == "5f" {
        (
            serve.url(&format!("/timeline?from=1h&per_page={n}")),
            serve.url("/api/v1/report?from=1h&format=json"),
            format!("/timeline page GET, {n} lanes on one page"),
            "GET the same window's report as JSON",
        )
    } else {
        (
            serve.url("/"),
            serve.url("/api/v1/elections"),
            format!("overview page GET /, {n} elections (200 a page)"),
            "GET /api/v1/elections (all, JSON)",
        )
    };
    let (status, body, _) = get(&http, &page).await?;
    let (api_status, api_body, _) = get(&http, &api).await?;
    if status != 200 || api_status != 200 {
        return Err(anyhow!("{id}: page {status}, API {api_status}"));
    }
    let (mut t, mut b) = (vec![], vec![]);
    for run in 0..cfg.render_reps {
        if run % 2 == 0 {
            t.push(ms(get(&http, &page).await?.2));
            b.push(ms(get(&http, &api).await?.2));
        } else {
            b.push(ms(get(&http, &api).await?.2));
            t.push(ms(get(&http, &page).await?.2));
        }
    }
    eprintln!(
        "  {id}: page {} kB; baseline {} kB",
        body.len() / 1024,
        api_body.len() / 1024
    );
    drop(serve);
    drop(etcd);
    Ok(Row::time(id, &what, "ms", &t)
        .baseline_samples(base, &b)
        .paired_ratio(&t, &b)
        .target(Target::MedianAtMost(1000.0))
        .note(format!(
            "real `tenure serve` (its own history reads included), loopback HTTP; page {} kB, baseline {} kB",
            body.len() / 1024,
            api_body.len() / 1024
        )))
}
