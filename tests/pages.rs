//! The pages: overview and timeline, served by the real router over HTTP,
//! on a real history file. Most tests point the election client at a dead
//! loopback port (the pages must still render, saying etcd is unreachable);
//! the ones marked so use a real etcd from the harness.

mod support;

use std::net::{Ipv4Addr, SocketAddrV4, TcpListener};
use std::path::PathBuf;
use std::sync::Arc;
use std::time::{Duration, Instant};

use reqwest::StatusCode;
use tenure::election::{Client, FenceReason, Layout};
use tenure::events::{now_ms, Batch, EndCause, Event, EventKind, Update, WatchStatus};
use tenure::history::{format_ms, Query, Store, TermRow, MAX_LIMIT};
use tenure::telemetry::Metrics;
use tenure::web::timeline::{self, Input};
use tenure::web::{self, pages, AppState, Auth, Limits, Readiness};

const MIN: i64 = 60_000;
const HOUR: i64 = 3_600_000;
const XSS: &str = "<script>alert(1)</script>";
/// How askama escapes [`XSS`] (numeric character references; the same
/// text as `&lt;script&gt;…` to any HTML parser).
const XSS_ESCAPED: &str = "&#60;script&#62;alert(1)&#60;/script&#62;";

/// The page with askama's numeric references turned into the named ones
/// (`&#60;` → `&lt;`), so assertions can be written either way.
fn named_entities(body: &str) -> String {
    body.replace("&#60;", "&lt;")
        .replace("&#62;", "&gt;")
        .replace("&#38;", "&amp;")
        .replace("&#34;", "&quot;")
        .replace("&#39;", "&#x27;")
}

// ---------------------------------------------------------------------------
// Fixtures.
// ---------------------------------------------------------------------------

fn ev(revision: i64, at_ms: i64, election: &str, kind: EventKind) -> Event {
    Event {
        revision,
        at_ms,
        election: election.to_owned(),
        kind,
    }
}

fn started(token: i64, holder: &str, previous: Option<&str>) -> EventKind {
    EventKind::TermStarted {
        token,
        holder: holder.to_owned(),
        lease_id: token * 7 + 0x1000,
        layout: Layout::Single,
        previous_holder: previous.map(str::to_owned),
        from_snapshot: false,
    }
}

fn ended(token: i64, holder: &str, cause: EndCause, started_at_ms: i64) -> EventKind {
    EventKind::TermEnded {
        token,
        holder: holder.to_owned(),
        lease_id: token * 7 + 0x1000,
        cause,
        started_revision: token,
        started_at_ms,
    }
}

fn refused(resource: &str, token: i64, current: Option<(i64, &str)>) -> EventKind {
    EventKind::FenceRefused {
        resource: resource.to_owned(),
        token,
        reason: FenceReason::StaleToken,
        current_token: current.map(|c| c.0),
        current_holder: current.map(|c| c.1.to_owned()),
    }
}

/// The split-brain story in `team/db` (times relative to `now`), a quiet
/// leaderless `cache`, an election led by an XSS attempt, and a watcher gap.
fn story(now: i64) -> Vec<Batch> {
    let t = |m: i64| now - m * MIN;
    let e = |rev: i64, at: i64, name: &str, kind| Batch {
        revision: rev,
        events: vec![ev(rev, at, name, kind)],
    };
    vec![
        e(50, t(180), "cache", started(50, "dave", None)),
        e(
            60,
            t(120),
            "cache",
            ended(50, "dave", EndCause::Deleted, t(180)),
        ),
        e(100, t(50), "team/db", started(100, "scene-01", None)),
        e(
            101,
            t(49),
            "team/db",
            EventKind::FenceAccepted {
                resource: "orders".into(),
                token: 100,
            },
        ),
        e(
            104,
            t(40),
            "team/db",
            ended(100, "scene-01", EndCause::Expired, t(50)),
        ),
        e(
            105,
            t(39),
            "team/db",
            started(105, "scene-02", Some("scene-01")),
        ),
        e(
            106,
            t(38),
            "team/db",
            refused("orders", 100, Some((105, "scene-02"))),
        ),
        e(
            110,
            t(30),
            "",
            EventKind::Gap {
                from_revision: 107,
                to_revision: 109,
            },
        ),
        e(
            120,
            t(20),
            "team/db",
            ended(105, "scene-02", EndCause::Resigned, t(39)),
        ),
        e(
            130,
            t(19),
            "team/db",
            started(130, "scene-03", Some("scene-02")),
        ),
        e(140, t(10), "xss", started(140, XSS, None)),
    ]
}

struct App {
    base: String,
    _server: tokio::task::JoinHandle<()>,
}

impl App {
    fn url(&self, path: &str) -> String {
        format!("{}{path}", self.base)
    }

    async fn get(&self, path: &str) -> (StatusCode, String) {
        let resp = http().get(self.url(path)).send().await.expect("GET");
        let status = resp.status();
        (status, resp.text().await.expect("body"))
    }
}

fn http() -> reqwest::Client {
    reqwest::Client::builder()
        .timeout(Duration::from_secs(30))
        .build()
        .expect("http client")
}

/// A loopback port with nothing listening (bound, then released).
fn dead_endpoint() -> String {
    let l = TcpListener::bind(SocketAddrV4::new(Ipv4Addr::LOCALHOST, 0)).expect("bind");
    let port = l.local_addr().expect("addr").port();
    drop(l);
    format!("http://127.0.0.1:{port}")
}

async fn open_store(dir: &tempfile::TempDir) -> (Store, PathBuf) {
    let path = dir.path().join("history.db");
    let store = Store::open(&path, Duration::ZERO).expect("open store");
    (store, path)
}

async fn write(store: &Store, batches: Vec<Batch>) {
    for b in batches {
        store.write(b).await.expect("write");
    }
    store.flush().await.expect("flush");
}

/// Serves the whole router (API, live feed, pages) on a free port.
async fn serve(store: &Store, endpoint: String, etcd_up: bool) -> App {
    let client = Client::connect(&[endpoint], "")
        .await
        .expect("client")
        .with_op_timeout(Duration::from_millis(500));
    let readiness = Arc::new(Readiness::default());
    readiness.apply(&Update::Watch(WatchStatus::EtcdUp(etcd_up)));
    readiness.apply(&Update::Watch(WatchStatus::CaughtUp { revision: 140 }));
    if !etcd_up {
        readiness.apply(&Update::Watch(WatchStatus::EtcdUp(false)));
    }
    let limits = Limits::default();
    let state = Arc::new(AppState {
        metrics: Arc::new(Metrics::new().expect("metrics")),
        readiness,
        history: store.reader(),
        client,
        live: tokio::sync::broadcast::channel(16).0,
        auth: Auth::Open,
        api_rate: web::api::RateLimiter::new(limits.campaigns_per_second),
        limits,
    });
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .expect("bind");
    let addr = listener.local_addr().expect("addr");
    let app = web::router(state);
    let server = tokio::spawn(async move {
        let _ = axum::serve(listener, app).await;
    });
    App {
        base: format!("http://{addr}"),
        _server: server,
    }
}

async fn story_app() -> (tempfile::TempDir, Store, App) {
    let dir = tempfile::tempdir().expect("tempdir");
    let (store, _) = open_store(&dir).await;
    write(&store, story(now_ms())).await;
    let app = serve(&store, dead_endpoint(), false).await;
    (dir, store, app)
}

/// `data-token` of every `rect.term` in the page, in order.
fn term_tokens(body: &str) -> Vec<i64> {
    body.split("<rect class=\"term")
        .skip(1)
        .filter_map(|rest| {
            let v = rest.split("data-token=\"").nth(1)?;
            v.split('"').next()?.parse().ok()
        })
        .collect()
}

fn lane_labels(body: &str) -> Vec<String> {
    body.split("<text class=\"lane-label\"")
        .skip(1)
        .filter_map(|rest| {
            let after_title = rest.split("</title>").nth(1)?;
            Some(after_title.split("</text>").next()?.to_owned())
        })
        .collect()
}

fn svg(body: &str) -> &str {
    let start = body.find("<svg").expect("an <svg> in the page");
    let end = body[start..].find("</svg>").expect("</svg>") + start;
    &body[start..end]
}

// ---------------------------------------------------------------------------
// Tests without etcd.
// ---------------------------------------------------------------------------

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

fn svg_of(body: &str) -> &str {
    svg(body)
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

// ---------------------------------------------------------------------------
// Render time.
// ---------------------------------------------------------------------------

fn synthetic_terms(n: i64, from: i64, to: i64) -> Vec<TermRow> {
    let step = (to - from) / n;
    (0..n)
        .map(|i| {
            let start = from + i * step;
            let end = (i < n - 1).then_some(start + step * 9 / 10);
            TermRow {
                election: "load".into(),
                token: 1000 + i,
                holder: format!("worker-{:02}", i % 7),
                lease_id: i,
                layout: Some(Layout::Single),
                started_at: format_ms(start),
                ended_at: end.map(format_ms),
                started_at_ms: start,
                ended_at_ms: end,
                started_revision: 1000 + i,
                ended_revision: end.map(|_| 1000 + i),
                end_cause: end.map(|_| EndCause::Expired),
                from_snapshot: false,
                duration_seconds: end.map(|e| (e - start) as f64 / 1000.0),
            }
        })
        .collect()
}

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

// ---------------------------------------------------------------------------
// With a real etcd.
// ---------------------------------------------------------------------------

/// The current leader's TTL comes from etcd when it answers, and the note
/// about etcd disappears.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn timeline_shows_etcds_leader_when_reachable() {
    let etcd = support::Etcd::start().await;
    let mut raw = etcd.client().await;
    let lease = raw.lease_grant(30, None).await.expect("grant").id();
    let put = raw
        .put(
            "election/team/db",
            "scene-03",
            Some(etcd_client::PutOptions::new().with_lease(lease)),
        )
        .await
        .expect("put");
    let token = put.header().expect("header").revision();

    let dir = tempfile::tempdir().expect("tempdir");
    let (store, _) = open_store(&dir).await;
    let now = now_ms();
    write(
        &store,
        vec![Batch {
            revision: token,
            events: vec![ev(
                token,
                now - 5 * MIN,
                "team/db",
                started(token, "scene-03", None),
            )],
        }],
    )
    .await;
    let app = serve(&store, etcd.endpoint(), true).await;
    let (status, body) = app.get("/elections/team%2Fdb").await;
    assert_eq!(status, StatusCode::OK, "{body}");
    assert!(!body.contains("etcd unreachable"), "{body}");
    assert!(body.contains("etcd reachable"));
    assert!(body.contains("from etcd"), "{body}");
    assert!(body.contains(&format!("{lease:x}")), "the lease id, in hex");
    let ttl = body
        .split("<dt>TTL left</dt><dd class=\"num\">")
        .nth(1)
        .expect("ttl");
    let ttl: i64 = ttl
        .split(' ')
        .next()
        .expect("n")
        .parse()
        .expect("ttl number");
    assert!((1..=30).contains(&ttl), "{ttl}");
    assert_eq!(term_tokens(svg(&body)), [token]);

    // An election only etcd knows (the history has not caught up yet):
    // shown, not 404.
    raw.put("election/fresh", "newcomer", None)
        .await
        .expect("put");
    let (status, body) = app.get("/elections/fresh").await;
    assert_eq!(status, StatusCode::OK, "{body}");
    assert!(body.contains("newcomer"));
    assert!(body.contains("has not recorded token"));
    // Nobody leads and no history: 404.
    let (status, _) = app.get("/elections/nothing").await;
    assert_eq!(status, StatusCode::NOT_FOUND);
}

/// `<script>` as the value of a real leader key, through `tenure serve`
/// (watcher → history → pages): shown as text, never as markup.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn script_holder_from_etcd_is_escaped_through_tenure_serve() {
    let etcd = support::Etcd::start().await;
    let dir = tempfile::tempdir().expect("tempdir");
    let serve = support::Serve::start(&[etcd.endpoint()], &dir.path().join("h.db"), &[], &[]).await;
    let mut raw = etcd.client().await;
    let lease = raw.lease_grant(60, None).await.expect("grant").id();
    let put = raw
        .put(
            "election/xss",
            XSS,
            Some(etcd_client::PutOptions::new().with_lease(lease)),
        )
        .await
        .expect("put");
    serve
        .caught_up(put.header().expect("header").revision())
        .await;

    let deadline = Instant::now() + Duration::from_secs(20);
    let body = loop {
        let resp = http().get(serve.url("/")).send().await.expect("GET /");
        let body = resp.text().await.expect("body");
        if body.contains("href=\"/elections/xss\"") {
            break body;
        }
        assert!(Instant::now() < deadline, "xss never listed: {body}");
        tokio::time::sleep(Duration::from_millis(100)).await;
    };
    assert!(
        !body.contains(XSS) && !body.contains("<script>alert"),
        "{body}"
    );
    assert!(body.contains(XSS_ESCAPED), "{body}");
    let resp = http()
        .get(serve.url("/elections/xss"))
        .send()
        .await
        .expect("GET");
    assert_eq!(resp.status(), StatusCode::OK);
    let body = resp.text().await.expect("body");
    assert!(
        !body.contains(XSS) && !body.contains("<script>alert"),
        "{body}"
    );
    assert!(body.contains(XSS_ESCAPED));
    assert!(body.contains("from etcd"), "{body}");
    assert_eq!(term_tokens(svg(&body)).len(), 1);
    serve.stop().await;
}

// ---------------------------------------------------------------------------
// A server to look at (not a test): TENURE_PAGES_DEMO=127.0.0.1:8099
// cargo test --test pages demo_server -- --ignored --nocapture
// ---------------------------------------------------------------------------

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "serves synthetic data until killed, for screenshots"]
async fn demo_server() {
    let Ok(listen) = std::env::var("TENURE_PAGES_DEMO") else {
        return;
    };
    let dir = tempfile::tempdir().expect("tempdir");
    let (store, _) = open_store(&dir).await;
    let now = now_ms();
    write(&store, story(now)).await;
    // Busier elections for the overview.
    let mut rev = 1000;
    let mut batches = Vec::new();
    for (name, holders, every) in [
        ("orders/primary", 3, 7 * MIN),
        ("billing", 2, 23 * MIN),
        ("search/indexer", 5, 90_000),
    ] {
        let mut t = now - 6 * HOUR;
        let mut i = 0;
        let mut prev: Option<String> = None;
        while t < now - every {
            let holder = format!(
                "{}-{:02}",
                name.split('/').next().unwrap_or(name),
                i % holders + 1
            );
            let token = rev;
            let start = t;
            batches.push(Batch {
                revision: rev,
                events: vec![ev(rev, t, name, started(token, &holder, prev.as_deref()))],
            });
            rev += 1;
            t += every - 4_000;
            let cause =
                [EndCause::Expired, EndCause::Resigned, EndCause::Deleted][(i % 3) as usize];
            batches.push(Batch {
                revision: rev,
                events: vec![ev(rev, t, name, ended(token, &holder, cause, start))],
            });
            rev += 1;
            t += 4_000;
            prev = Some(holder);
            i += 1;
        }
        let holder = format!(
            "{}-{:02}",
            name.split('/').next().unwrap_or(name),
            i % holders + 1
        );
        batches.push(Batch {
            revision: rev,
            events: vec![ev(rev, t, name, started(rev, &holder, prev.as_deref()))],
        });
        rev += 1;
    }
    // 10,000 short terms in the last hour, for the dense drawing.
    for t in synthetic_terms(10_000, now - HOUR, now) {
        let mut events = vec![ev(
            rev,
            t.started_at_ms,
            "load/bursty",
            started(rev, &t.holder, None),
        )];
        if let Some(end) = t.ended_at_ms {
            events.push(ev(
                rev + 1,
                end,
                "load/bursty",
                ended(rev, &t.holder, EndCause::Expired, t.started_at_ms),
            ));
        }
        batches.push(Batch {
            revision: rev + 1,
            events,
        });
        rev += 2;
    }
    write(&store, batches).await;
    let client = Client::connect(&[dead_endpoint()], "")
        .await
        .expect("client")
        .with_op_timeout(Duration::from_millis(300));
    let limits = Limits::default();
    let readiness = Arc::new(Readiness::default());
    readiness.apply(&Update::Watch(WatchStatus::CaughtUp { revision: rev }));
    let state = Arc::new(AppState {
        metrics: Arc::new(Metrics::new().expect("metrics")),
        readiness,
        history: store.reader(),
        client,
        live: tokio::sync::broadcast::channel(16).0,
        auth: Auth::Open,
        api_rate: web::api::RateLimiter::new(limits.campaigns_per_second),
        limits,
    });
    let listener = tokio::net::TcpListener::bind(&listen).await.expect("bind");
    eprintln!("demo pages on http://{listen}/");
    axum::serve(listener, web::router(state))
        .await
        .expect("serve");
}
