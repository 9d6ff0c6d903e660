//! The pages without etcd: the client points at a dead port.

use std::time::{Duration, Instant};

use reqwest::StatusCode;
use tenure::events::now_ms;
use tenure::history::format_ms;

use crate::app::*;
use crate::html::*;
use crate::story::*;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn overview_lists_every_election_with_leader_token_and_flags() {
    let (_dir, _store, app) = story_app().await;
    let (status, body) = app.get("/").await;
    assert_eq!(status, StatusCode::OK, "{body}");
    assert!(body.contains("href=\"/elections/team%2Fdb\""), "{body}");
    assert!(body.contains(">team/db</a>"));
    // The current leader and its token.
    assert!(body.contains(">scene-03</span>"), "{body}");
    assert!(body.contains(">130</td>"), "{body}");
    // cache has no leader: highlighted.
    let cache_row = body
        .split("data-election=\"cache\"")
        .nth(1)
        .expect("cache row");
    let cache_row = cache_row.split("</tr>").next().expect("row end");
    assert!(cache_row.contains("no leader"), "{cache_row}");
    assert!(
        body.contains("class=\"leaderless\" data-election=\"cache\""),
        "{body}"
    );
    // team/db: 3 changes in 24 h and one refusal, flagged.
    let db_row = body
        .split("data-election=\"team/db\"")
        .nth(1)
        .expect("db row");
    let db_row = db_row.split("</tr>").next().expect("row end");
    assert!(db_row.contains("<td class=\"r num\">3</td>"), "{db_row}");
    assert!(
        db_row.contains("<span class=\"flag bad\">1</span>"),
        "{db_row}"
    );
    assert!(
        body.contains(" refusing\" data-election=\"team/db\""),
        "{body}"
    );
    assert!(body.contains("1</b> without a leader"));
    // Header: the watcher's view of etcd and its revision.
    assert!(body.contains("etcd unreachable"));
    assert!(body.contains("rev <b class=\"num\">140</b>"));
    // Live updates are wired, not required.
    assert!(body.contains("/static/live.js?v="));
    assert!(body.contains("data-live=\"swap\""));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn timeline_draws_terms_lanes_refusals_gaps_and_tables() {
    let (_dir, _store, app) = story_app().await;
    let started = Instant::now();
    let (status, body) = app.get("/elections/team%2Fdb").await;
    let took = started.elapsed();
    assert_eq!(status, StatusCode::OK, "{body}");
    // etcd is down: the page says so, within a bounded time, from history.
    assert!(body.contains("etcd unreachable"), "{body}");
    assert!(took < Duration::from_secs(5), "{took:?}");
    let svg = svg(&body);
    // One bar per term, identified by token; one lane per holder.
    assert_eq!(term_tokens(svg), [100, 105, 130]);
    assert!(
        svg.contains("class=\"term open c"),
        "the open term is marked"
    );
    assert_eq!(lane_labels(svg), ["scene-01", "scene-02", "scene-03"]);
    // Token and end cause on the bars, and in the hover text.
    assert!(svg.contains(">#100 · expired</text>"), "{svg}");
    assert!(svg.contains("token 105 · resigned"), "{svg}");
    // The refusal of token 100 sits in scene-01's lane; the gap is marked.
    assert_eq!(svg.matches("<path class=\"refusal\"").count(), 1);
    assert!(svg.contains("fence refused token 100 at resource orders: stale_token"));
    assert_eq!(svg.matches("<line class=\"gap\"").count(), 1);
    assert!(svg.contains("revisions 107..109"));
    // Leaderless between scene-01's expiry and scene-02 (1 min), and
    // between scene-02's resignation and scene-03 (1 min).
    assert_eq!(
        svg.matches("<rect class=\"leaderless\"").count(),
        2,
        "{svg}"
    );
    // Tables: every term and every event, newest first.
    let terms = body.split("id=\"terms\"").nth(1).expect("terms table");
    let t130 = terms.find("id=\"term-130\"").expect("term 130 row");
    let t100 = terms.find("id=\"term-100\"").expect("term 100 row");
    assert!(t130 < t100);
    assert!(terms.contains(">expired</span>") && terms.contains(">resigned</span>"));
    // Each cause cell's title says what the cause tells, in the one wording.
    assert!(
        terms.contains(&format!(
            "title=\"{}\">expired</span>",
            tenure::events::EndCause::Expired.description()
        )),
        "{terms}"
    );
    assert!(body.contains("showing 8 of 8"), "every event of the window");
    let events = body.split("id=\"events\"").nth(1).expect("events table");
    for kind in [
        "term_started",
        "term_ended",
        "fence_accepted",
        "fence_refused",
        "gap",
    ] {
        assert!(events.contains(&format!(">{kind}</span>")), "{kind}");
    }
    assert!(
        events.contains("orders refused token 100: stale_token (leader then: scene-02, token 105)")
    );
    // Export links with the same window, the leader from history.
    let named = named_entities(&body);
    assert!(
        named.contains("/api/v1/elections/team%2Fdb/export?format=csv&amp;from="),
        "{body}"
    );
    assert!(named.contains("/api/v1/elections/team%2Fdb/export?format=json&amp;from="));
    assert!(body.contains("from history"));
    assert!(body.contains("data-live=\"swap\" data-page=\"timeline\" data-election=\"team/db\""));
    // A history younger than an hour: the window starts a little before
    // its first term (50 min ago → 55 min).
    assert!(body.contains("(55m 0"), "{body}");
    // The same page with the name typed unencoded.
    let (status, body2) = app.get("/elections/team/db").await;
    assert_eq!(status, StatusCode::OK);
    assert_eq!(term_tokens(svg_of(&body2)), [100, 105, 130]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn time_range_parameters_change_the_window() {
    let (_dir, _store, app) = story_app().await;
    // The last 15 minutes: only scene-03's term.
    let (status, body) = app.get("/elections/team%2Fdb?from=15m").await;
    assert_eq!(status, StatusCode::OK);
    assert_eq!(term_tokens(svg(&body)), [130]);
    assert!(body.contains("class=\"active\" aria-current=\"true\">15m</a>"));
    // An absolute window (RFC 3339, then unix seconds) around scene-01's term.
    let now = now_ms();
    let (from, to) = (format_ms(now - 55 * MIN), format_ms(now - 45 * MIN));
    let (status, body) = app
        .get(&format!("/elections/team%2Fdb?from={from}&to={to}"))
        .await;
    assert_eq!(status, StatusCode::OK, "{body}");
    assert_eq!(term_tokens(svg(&body)), [100]);
    assert!(
        body.contains("data-live=\"off\""),
        "a past window is not live"
    );
    let (from, to) = ((now - 45 * MIN) / 1000, (now - 35 * MIN) / 1000);
    let (_, body) = app
        .get(&format!("/elections/team%2Fdb?from={from}&to={to}"))
        .await;
    assert_eq!(term_tokens(svg(&body)), [100, 105]);
    // The form's empty `to` means now.
    let (status, body) = app.get("/elections/team%2Fdb?from=2h&to=").await;
    assert_eq!(status, StatusCode::OK);
    assert_eq!(term_tokens(svg(&body)), [100, 105, 130]);
    // A quiet election: by default, the hour around its last event.
    let (status, body) = app.get("/elections/cache").await;
    assert_eq!(status, StatusCode::OK);
    assert_eq!(term_tokens(svg(&body)), [50]);
    assert!(body.contains("Nothing happened in the last hour"), "{body}");
    assert!(body.contains("data-live=\"reload\""));
    assert!(body.contains("no leader since"));
    // …and its last hour when asked.
    let (_, body) = app.get("/elections/cache?from=1h").await;
    assert!(term_tokens(svg(&body)).is_empty());
    // Row limits: "showing N of M" with a link to more.
    let (_, body) = app.get("/elections/team%2Fdb?from=2h&limit=2").await;
    assert!(body.contains("showing 2 of 3"), "{body}");
    assert!(body.contains("limit=20"), "{body}");
    assert!(!body.contains("id=\"term-100\""));
    assert_eq!(
        term_tokens(svg(&body)),
        [100, 105, 130],
        "the drawing is not limited"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bad_names_and_ranges_are_400_and_unknown_elections_404() {
    let (_dir, _store, app) = story_app().await;
    for path in [
        "/elections/..%2Fetc",
        "/elections/a%20b",
        "/elections/team%2F%2Fdb",
        "/elections/%3Cscript%3E",
    ] {
        let (status, body) = app.get(path).await;
        assert_eq!(status, StatusCode::BAD_REQUEST, "{path}: {body}");
        assert!(body.contains("Not a valid election name"), "{path}");
        assert!(!body.contains("<script>"), "{path}");
    }
    for query in ["from=yesterday-ish", "from=1h&to=2h", "limit=0", "limit=x"] {
        let (status, body) = app.get(&format!("/elections/team%2Fdb?{query}")).await;
        assert_eq!(status, StatusCode::BAD_REQUEST, "{query}: {body}");
    }
    let (status, body) = app.get("/elections/nobody%2Fhere").await;
    assert_eq!(status, StatusCode::NOT_FOUND, "{body}");
    assert!(body.contains("Unknown election"));
    assert!(body.contains("text/html") || body.contains("<!doctype html>"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn holders_are_escaped_everywhere() {
    let (_dir, _store, app) = story_app().await;
    for path in ["/", "/elections/xss", "/elections/xss?from=1h"] {
        let (status, body) = app.get(path).await;
        assert_eq!(status, StatusCode::OK, "{path}");
        assert!(!body.contains(XSS), "{path}: raw holder in the page");
        assert!(!body.contains("<script>alert"), "{path}");
        assert!(
            body.contains(XSS_ESCAPED),
            "{path}: the holder is shown as text"
        );
        assert!(named_entities(&body).contains("&lt;script&gt;alert(1)&lt;/script&gt;"));
    }
    let (_, body) = app.get("/elections/xss").await;
    // In the SVG's lane label and hover text, too.
    let svg = svg(&body);
    assert!(
        svg.contains(&format!("<title>{XSS_ESCAPED}</title>")),
        "{svg}"
    );
    assert!(svg.contains(&format!("{XSS_ESCAPED}\ntoken 140")), "{svg}");
    // Pages allow no inline script.
    let resp = http()
        .get(app.url("/elections/xss"))
        .send()
        .await
        .expect("GET");
    let csp = resp.headers()["content-security-policy"]
        .to_str()
        .expect("csp");
    assert!(csp.contains("script-src 'self'"), "{csp}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn empty_history_renders() {
    let dir = tempfile::tempdir().expect("tempdir");
    let (store, _) = open_store(&dir).await;
    let app = serve(&store, dead_endpoint(), false).await;
    let (status, body) = app.get("/").await;
    assert_eq!(status, StatusCode::OK);
    assert!(body.contains("No elections yet"), "{body}");
    let (status, _) = app.get("/elections/db").await;
    assert_eq!(status, StatusCode::NOT_FOUND);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn static_assets_have_types_and_cache_headers() {
    let dir = tempfile::tempdir().expect("tempdir");
    let (store, _) = open_store(&dir).await;
    let app = serve(&store, dead_endpoint(), false).await;
    for (path, ty, needle) in [
        ("/static/app.css", "text/css", "prefers-color-scheme"),
        ("/static/live.js", "text/javascript", "EventSource"),
    ] {
        let resp = http().get(app.url(path)).send().await.expect("GET");
        assert_eq!(resp.status(), StatusCode::OK);
        let h = resp.headers();
        assert!(
            h["content-type"].to_str().expect("ct").starts_with(ty),
            "{path}"
        );
        assert!(
            h["cache-control"].to_str().expect("cc").contains("max-age"),
            "{path}"
        );
        assert!(resp.text().await.expect("body").contains(needle));
    }
}
