//! Render time of 10,000 terms.

use std::time::{Duration, Instant};

use reqwest::StatusCode;
use tenure::events::{now_ms, Batch, EndCause};
use tenure::history::{Query, MAX_LIMIT};
use tenure::web::pages;
use tenure::web::timeline::{self, Input};

use crate::app::*;
use crate::story::*;

/// 10,000 terms: the pure layout + SVG render, and the whole page over
/// HTTP (SQLite queries included). Prints the times; asserts only a sanity
/// bound (debug builds are slow). `cargo test --release --test pages --
/// --nocapture render_time` for the real figure.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn render_time_of_10000_terms() {
    let now = now_ms();
    let (from, to) = (now - HOUR, now);
    let terms = synthetic_terms(10_000, from, to);
    let mut best = Duration::MAX;
    let mut svg_len = 0;
    for _ in 0..5 {
        let t0 = Instant::now();
        let tl = timeline::layout(&Input {
            terms: &terms,
            refusals: &[],
            gaps: &[],
            from_ms: from,
            to_ms: to,
            now_ms: now,
            known_since_ms: Some(from),
            unwatched_since_ms: None,
            width: timeline::WIDTH,
        });
        let svg = pages::render_svg(&tl, "load");
        best = best.min(t0.elapsed());
        svg_len = svg.len();
        assert_eq!(tl.terms_drawn, 10_000);
        assert!(
            svg.matches("<rect").count() < 3000,
            "sub-unit terms are merged"
        );
    }
    println!("timeline layout + SVG render of 10,000 terms: {best:?} ({svg_len} bytes of SVG)");
    assert!(best < Duration::from_secs(1), "{best:?}");

    // The same terms through the history and the page.
    let dir = tempfile::tempdir().expect("tempdir");
    let (store, _) = open_store(&dir).await;
    let mut batches = Vec::new();
    for t in &terms {
        let mut events = vec![ev(
            t.started_revision * 2,
            t.started_at_ms,
            "load",
            started(t.token, &t.holder, None),
        )];
        if let Some(end) = t.ended_at_ms {
            events.push(ev(
                t.started_revision * 2 + 1,
                end,
                "load",
                ended(t.token, &t.holder, EndCause::Expired, t.started_at_ms),
            ));
        }
        batches.push(Batch {
            revision: t.started_revision * 2 + 1,
            events,
        });
    }
    write(&store, batches).await;
    let stored = store
        .terms(
            "load",
            &Query {
                limit: Some(MAX_LIMIT),
                ..Query::default()
            },
        )
        .expect("terms");
    assert_eq!(stored.len(), 10_000);
    let app = serve(&store, dead_endpoint(), false).await;
    let mut page_best = Duration::MAX;
    for _ in 0..3 {
        let t0 = Instant::now();
        let (status, body) = app.get("/elections/load?from=2h").await;
        page_best = page_best.min(t0.elapsed());
        assert_eq!(status, StatusCode::OK);
        let stats = body.split("id=\"stats\"").nth(1).unwrap_or("");
        assert!(
            body.contains("10000 terms in view"),
            "{}",
            &stats[..stats.len().min(3000)]
        );
        assert!(body.contains("showing 100 of 10000"));
        // The events table: the newest 100, without reading all 19,999.
        let events = body.split("id=\"events\"").nth(1).expect("events table");
        assert_eq!(events.matches("<tr data-revision=").count(), 100);
        let newest = events.split("<tr data-revision=\"").nth(1).expect("a row");
        assert!(newest.starts_with("21998\""), "newest first");
        assert!(
            body.contains("showing 100; more in this window"),
            "{}",
            &events[..500]
        );
    }
    println!("whole timeline page with 10,000 terms and 19,999 events over HTTP (etcd down, answered within its wait): {page_best:?}");
}
