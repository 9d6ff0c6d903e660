//! The pages: the overview (`/`) and one election's timeline
//! (`/elections/{name}`), server-rendered with askama (they work without
//! JavaScript), plus the stylesheet and the small live-update script,
//! embedded in the binary (`/static/app.css`, `/static/live.js`).
//!
//! - Every string that came from etcd (names, holders, resources) reaches
//!   the page through askama's HTML escaping, in text, attributes and the
//!   SVG alike; the only `|safe` insertion is the SVG, itself an escaped
//!   askama template. Pages also send a Content-Security-Policy that allows
//!   no inline script.
//! - History queries run on blocking threads. The current leader is read
//!   from etcd at the same time, bounded by [`ETCD_WAIT`]: when etcd does not
//!   answer, the page shows the history's view and says so; it never fails
//!   because etcd is down.
//! - The timeline's window comes from `from` and `to` (anything
//!   [`parse_time`] accepts: RFC 3339, unix seconds, `2h` for two hours
//!   ago). Without them: the last hour, except
//!   - when nothing happened in it: the hour that ends [`STALE_PAD`] after
//!     the election's last event (so an election that went quiet still
//!     shows its last changes), with a note and a link to the last hour;
//!   - when the election's history is younger than an hour: from a little
//!     before its first term (10 % of the age, at least
//!     [`MIN_DEFAULT_WINDOW_MS`] in all), so a new election is not a sliver
//!     at the right edge.
//! - Tables show the newest rows first, at most `limit` (default
//!   [`DEFAULT_ROWS`], at most [`MAX_ROWS`]), with "showing N of M".

use std::sync::Arc;
use std::time::Duration;

use askama::Template;
use axum::extract::{Path, RawQuery, State};
use axum::http::{header, HeaderValue, StatusCode};
use axum::response::{IntoResponse, Redirect, Response};
use axum::routing::get;
use axum::Router;

use super::timeline::{self, format_duration_ms, short_time, GapMark, Input, Timeline};
use super::AppState;
use crate::election::{ElectionName, LeaderStatus};
use crate::events::{now_ms, Event, EventKind};
use crate::history::{
    self, format_ms, parse_time, ElectionSummary, Query, Reader, RefusalRow, TermRow,
};

/// How long a page waits for etcd's view of the current leader.
pub const ETCD_WAIT: Duration = Duration::from_millis(1500);
/// Default window of the timeline.
pub const DEFAULT_WINDOW_MS: i64 = 3_600_000;
/// A quiet election's default window ends this long after its last event.
pub const STALE_PAD: i64 = 5 * 60_000;
/// The shortest default window (for an election younger than an hour).
pub const MIN_DEFAULT_WINDOW_MS: i64 = 2 * 60_000;
/// Rows per table unless `limit` says otherwise.
pub const DEFAULT_ROWS: usize = 100;
/// The most rows a table shows.
pub const MAX_ROWS: usize = 5000;

const CSS: &str = include_str!("../../static/app.css");
const JS: &str = include_str!("../../static/live.js");
const CSS_VERSION: u64 = fnv1a(CSS.as_bytes());
const JS_VERSION: u64 = fnv1a(JS.as_bytes());

const DAY_MS: i64 = 86_400_000;
const CSP: &str = "default-src 'none'; style-src 'self'; script-src 'self'; connect-src 'self'; \
                   img-src 'self' data:; form-action 'self'; base-uri 'none'; frame-ancestors 'none'";

pub fn router() -> Router<Arc<AppState>> {
    Router::new()
        .route("/", get(overview))
        .route("/elections", get(|| async { Redirect::to("/") }))
        .route("/elections/", get(|| async { Redirect::to("/") }))
        // One percent-encoded segment (`team%2Fdb`); the catch-all also
        // takes `team/db` typed by hand. Both arrive decoded.
        .route("/elections/{*name}", get(election_page))
        .route("/static/app.css", get(css))
        .route("/static/live.js", get(js))
}

const fn fnv1a(bytes: &[u8]) -> u64 {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    let mut i = 0;
    while i < bytes.len() {
        h ^= bytes[i] as u64;
        h = h.wrapping_mul(0x0000_0100_0000_01b3);
        i += 1;
    }
    h
}

fn asset(body: &'static str, content_type: &'static str) -> Response {
    (
        [
            (header::CONTENT_TYPE, content_type),
            // URLs carry the content's hash (`?v=`): a new build is a new URL.
            (header::CACHE_CONTROL, "public, max-age=86400"),
            (header::X_CONTENT_TYPE_OPTIONS, "nosniff"),
        ],
        body,
    )
        .into_response()
}

async fn css() -> Response {
    asset(CSS, "text/css; charset=utf-8")
}

async fn js() -> Response {
    asset(JS, "text/javascript; charset=utf-8")
}

/// Percent-encodes everything but unreserved characters: an election name
/// becomes one path segment (`team/db` → `team%2Fdb`) or a query value.
pub fn encode_component(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    for b in s.bytes() {
        if b.is_ascii_alphanumeric() || matches!(b, b'-' | b'.' | b'_' | b'~') {
            out.push(b as char);
        } else {
            out.push_str(&format!("%{b:02X}"));
        }
    }
    out
}

/// The link to an election's timeline page.
pub fn election_href(name: &str) -> String {
    format!("/elections/{}", encode_component(name))
}

// ---------------------------------------------------------------------------
// Shared parts.
// ---------------------------------------------------------------------------

/// What the header of every page shows.
struct Head {
    title: String,
    css: String,
    js: String,
    etcd_up: bool,
    revision: i64,
    rendered_at: String,
    /// The server's clock (unix ms), so the script's counters do not
    /// depend on the browser's clock being right.
    now_ms: i64,
}

impl Head {
    fn new(state: &AppState, title: String, now: i64) -> Self {
        Head {
            title,
            css: format!("/static/app.css?v={CSS_VERSION:016x}"),
            js: format!("/static/live.js?v={JS_VERSION:016x}"),
            etcd_up: state.readiness.etcd_up(),
            revision: state.readiness.revision(),
            rendered_at: short_time(now)[..19].to_owned(),
            now_ms: now,
        }
    }
}

fn html(status: StatusCode, body: String) -> Response {
    let mut resp = (status, body).into_response();
    let h = resp.headers_mut();
    h.insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("text/html; charset=utf-8"),
    );
    h.insert(header::CACHE_CONTROL, HeaderValue::from_static("no-store"));
    h.insert(
        header::CONTENT_SECURITY_POLICY,
        HeaderValue::from_static(CSP),
    );
    h.insert(
        header::X_CONTENT_TYPE_OPTIONS,
        HeaderValue::from_static("nosniff"),
    );
    h.insert(
        header::REFERRER_POLICY,
        HeaderValue::from_static("same-origin"),
    );
    resp
}

fn render<T: Template>(status: StatusCode, page: &T) -> Response {
    match page.render() {
        Ok(body) => html(status, body),
        Err(e) => {
            tracing::error!(error = %e, "rendering a page");
            (
                StatusCode::INTERNAL_SERVER_ERROR,
                "rendering the page failed\n",
            )
                .into_response()
        }
    }
}

#[derive(Template)]
#[template(path = "error.html")]
struct ErrorPage {
    head: Head,
    status: u16,
    heading: String,
    message: String,
}

fn error_page(state: &AppState, status: StatusCode, heading: &str, message: String) -> Response {
    let page = ErrorPage {
        head: Head::new(state, format!("{} · tenure", status.as_u16()), now_ms()),
        status: status.as_u16(),
        heading: heading.to_owned(),
        message,
    };
    render(status, &page)
}

/// `text` ago, for "last event 5m 02s ago".
fn ago(now: i64, then: i64) -> String {
    format!("{} ago", format_duration_ms(now - then))
}

// ---------------------------------------------------------------------------
// Overview.
// ---------------------------------------------------------------------------

struct OverviewRow {
    name: String,
    href: String,
    holder: Option<String>,
    hue: u16,
    token: Option<i64>,
    since_ms: i64,
    since: String,
    leading_for: String,
    changes_24h: usize,
    refusals_24h: usize,
    refusals_total: u64,
    /// For a leaderless election: when the last term ended, if it is known.
    leaderless_since: Option<String>,
    last_event: String,
}

#[derive(Template)]
#[template(path = "overview.html")]
struct OverviewPage {
    head: Head,
    rows: Vec<OverviewRow>,
    leaderless: usize,
    refusing: usize,
    error: Option<String>,
}

async fn overview(State(s): State<Arc<AppState>>) -> Response {
    let now = now_ms();
    let reader = s.history.clone();
    let data = tokio::task::spawn_blocking(move || overview_rows(&reader, now)).await;
    let (rows, error) = match data {
        Ok(Ok(rows)) => (rows, None),
        Ok(Err(e)) => (Vec::new(), Some(format!("history unavailable: {e}"))),
        Err(e) => (Vec::new(), Some(format!("history query failed: {e}"))),
    };
    let page = OverviewPage {
        head: Head::new(&s, "tenure · elections".to_owned(), now),
        leaderless: rows.iter().filter(|r| r.holder.is_none()).count(),
        refusing: rows.iter().filter(|r| r.refusals_24h > 0).count(),
        rows,
        error,
    };
    let status = if page.error.is_some() {
        StatusCode::SERVICE_UNAVAILABLE
    } else {
        StatusCode::OK
    };
    render(status, &page)
}

/// One row per election the history knows. Leader changes are terms
/// started in the last 24 h (the same count the API's
/// `changes_last_hour` makes for one hour).
fn overview_rows(reader: &Reader, now: i64) -> Result<Vec<OverviewRow>, history::HistoryError> {
    let day_ago = now - DAY_MS;
    let window = Query {
        from_ms: Some(day_ago),
        to_ms: None,
        limit: Some(history::MAX_LIMIT),
    };
    let mut refusals_by_election: std::collections::HashMap<String, usize> = Default::default();
    for r in reader.refusals(None, &window)? {
        *refusals_by_election.entry(r.election).or_default() += 1;
    }
    let mut rows = Vec::new();
    for e in reader.elections()? {
        let terms = reader.terms(&e.election, &window)?;
        let changes_24h = terms
            .iter()
            .filter(|t| !t.from_snapshot && t.started_at_ms >= day_ago)
            .count();
        let leaderless_since = if e.current.is_none() {
            terms
                .iter()
                .filter_map(|t| t.ended_at_ms)
                .max()
                .map(|end| ago(now, end))
        } else {
            None
        };
        rows.push(overview_row(
            &e,
            now,
            changes_24h,
            refusals_by_election.get(&e.election).copied().unwrap_or(0),
            leaderless_since,
        ));
    }
    Ok(rows)
}

fn overview_row(
    e: &ElectionSummary,
    now: i64,
    changes_24h: usize,
    refusals_24h: usize,
    leaderless_since: Option<String>,
) -> OverviewRow {
    let cur = e.current.as_ref();
    let since_ms = cur.map_or(0, |c| c.started_at_ms);
    OverviewRow {
        name: e.election.clone(),
        href: election_href(&e.election),
        holder: cur.map(|c| c.holder.clone()),
        hue: cur.map_or(0, |c| timeline::hue_of(&c.holder)),
        token: cur.map(|c| c.token),
        since_ms,
        since: cur.map_or_else(String::new, |c| short_time(c.started_at_ms)),
        leading_for: cur.map_or_else(String::new, |c| format_duration_ms(now - c.started_at_ms)),
        changes_24h,
        refusals_24h,
        refusals_total: e.refusals,
        leaderless_since,
        last_event: e
            .last_event_ms
            .map_or_else(|| "—".to_owned(), |t| ago(now, t)),
    }
}

// ---------------------------------------------------------------------------
// Timeline.
// ---------------------------------------------------------------------------

/// The query parameters of the timeline page, as given.
#[derive(Debug, Default, Clone)]
struct Params {
    from: Option<String>,
    to: Option<String>,
    limit: Option<String>,
}

impl Params {
    fn parse(raw: Option<&str>) -> Params {
        let mut p = Params::default();
        let Some(raw) = raw else { return p };
        for pair in raw.split('&') {
            let (k, v) = pair.split_once('=').unwrap_or((pair, ""));
            let v = decode_component(v);
            let v = v.trim();
            if v.is_empty() {
                continue;
            }
            match k {
                "from" => p.from = Some(v.to_owned()),
                "to" => p.to = Some(v.to_owned()),
                "limit" => p.limit = Some(v.to_owned()),
                _ => {}
            }
        }
        p
    }
}

/// `application/x-www-form-urlencoded` value decoding (`+` is a space);
/// invalid escapes are kept as they are.
fn decode_component(s: &str) -> String {
    let b = s.as_bytes();
    let mut out = Vec::with_capacity(b.len());
    let mut i = 0;
    while i < b.len() {
        match b[i] {
            b'+' => out.push(b' '),
            b'%' => {
                let hex = b
                    .get(i + 1..i + 3)
                    .filter(|h| h.iter().all(u8::is_ascii_hexdigit));
                match hex.and_then(|h| u8::from_str_radix(std::str::from_utf8(h).ok()?, 16).ok()) {
                    Some(v) => {
                        out.push(v);
                        i += 3;
                        continue;
                    }
                    None => out.push(b'%'),
                }
            }
            c => out.push(c),
        }
        i += 1;
    }
    String::from_utf8_lossy(&out).into_owned()
}

/// The window shown and how it was chosen.
#[derive(Debug, Clone, Copy)]
struct Window {
    from_ms: i64,
    to_ms: i64,
    /// No `from`/`to` given and the election was quiet for the last hour.
    quiet: bool,
    /// No `from`/`to` given and the election's history is younger than an
    /// hour: the window starts shortly before its first term.
    young: bool,
}

/// What live updates do on this page (`data-live` for the script).
fn live_mode(p: &Params, w: &Window, now: i64) -> &'static str {
    if w.quiet {
        "reload"
    } else if p.to.is_none() || w.to_ms >= now - 1000 {
        "swap"
    } else {
        "off"
    }
}

struct Preset {
    label: &'static str,
    href: String,
    active: bool,
}

struct LeaderView {
    holder: String,
    hue: u16,
    token: i64,
    lease_hex: String,
    layout: String,
    since_ms: Option<i64>,
    since: Option<String>,
    leading_for: Option<String>,
    ttl: Option<i64>,
    /// "etcd" or "history".
    source: &'static str,
}

struct TermView {
    token: i64,
    holder: String,
    hue: u16,
    start: String,
    end: String,
    open: bool,
    duration: String,
    cause: String,
    cause_class: &'static str,
    revisions: String,
    from_snapshot: bool,
}

struct EventView {
    revision: i64,
    time: String,
    kind: &'static str,
    details: String,
    bad: bool,
}

struct TableInfo {
    shown: usize,
    /// `None`: not counted (there are more than shown).
    total: Option<usize>,
    /// The query hit the history's row cap: there may be more.
    capped: bool,
    more_href: Option<String>,
}

#[derive(Template)]
#[template(path = "timeline.html")]
struct TimelinePage {
    head: Head,
    name: String,
    href: String,
    leader: Option<LeaderView>,
    /// The history's open term and etcd's leader disagree (history behind).
    disagree: Option<String>,
    leaderless_since: Option<String>,
    etcd_note: Option<String>,
    live: &'static str,
    window_label: String,
    span_label: String,
    quiet_note: Option<String>,
    presets: Vec<Preset>,
    from_value: String,
    to_value: String,
    earlier_href: String,
    later_href: Option<String>,
    export_csv: String,
    export_json: String,
    svg: String,
    svg_narrow: String,
    terms_drawn: usize,
    terms_merged: usize,
    leaderless_total: String,
    leaderless_count: usize,
    refusal_count: usize,
    gap_count: usize,
    terms: Vec<TermView>,
    terms_info: TableInfo,
    events: Vec<EventView>,
    events_info: TableInfo,
}

#[derive(Template)]
#[template(path = "timeline.svg")]
struct SvgTemplate<'a> {
    t: &'a Timeline,
    title: &'a str,
    narrow: bool,
}

/// Renders a laid-out timeline as SVG markup (every string escaped).
pub fn render_svg(t: &Timeline, title: &str) -> String {
    SvgTemplate {
        t,
        title,
        narrow: t.width.0 < timeline::NARROW,
    }
    .render()
    .unwrap_or_else(|e| {
        format!(
            "<!-- timeline rendering failed: {} -->",
            e.to_string().replace("--", "- -")
        )
    })
}

/// What the history says about one election in one window.
struct History {
    summary: Option<ElectionSummary>,
    window: Window,
    terms: Vec<TermRow>,
    /// The newest events of the window (at least `limit` when there are
    /// that many), oldest first.
    events: Vec<Event>,
    /// `events` is every event of the window.
    events_complete: bool,
    /// The watcher gaps of the whole window.
    gaps: Vec<GapMark>,
    refusals: Vec<RefusalRow>,
    known_since_ms: Option<i64>,
}

enum PageError {
    BadRequest(String),
    History(String),
}

fn load_history(
    reader: &Reader,
    name: &str,
    from: Option<i64>,
    to: Option<i64>,
    limit: usize,
    now: i64,
) -> Result<History, history::HistoryError> {
    let summary = reader.elections()?.into_iter().find(|e| e.election == name);
    let first = reader.terms(
        name,
        &Query {
            limit: Some(1),
            ..Query::default()
        },
    )?;
    let known_since_ms = first.first().map(|t| t.started_at_ms);
    let mut window = Window {
        to_ms: to.unwrap_or(now),
        from_ms: 0,
        quiet: false,
        young: false,
    };
    window.from_ms = from.unwrap_or(window.to_ms - DEFAULT_WINDOW_MS);
    if from.is_none() && to.is_none() {
        let last = summary.as_ref().and_then(|s| {
            let open = s.current.as_ref().map(|c| c.started_at_ms);
            s.last_event_ms.max(open)
        });
        if let Some(last) = last.filter(|&l| l < now - DEFAULT_WINDOW_MS) {
            window.to_ms = (last + STALE_PAD).min(now);
            window.from_ms = window.to_ms - DEFAULT_WINDOW_MS;
            window.quiet = true;
        } else if let Some(first) = known_since_ms.filter(|&k| k > now - DEFAULT_WINDOW_MS) {
            // A young election: from a little before its first term.
            let span = ((now - first) * 11 / 10).max(MIN_DEFAULT_WINDOW_MS);
            window.from_ms = now - span.min(DEFAULT_WINDOW_MS);
            window.young = true;
        }
    }
    let q = Query {
        from_ms: Some(window.from_ms),
        to_ms: Some(window.to_ms),
        limit: Some(history::MAX_LIMIT),
    };
    let (events, events_complete) = newest_events(reader, name, &window, limit)?;
    // Gaps have an empty election name, so asking for the election "" gives
    // the gaps alone (the events query adds them to any election's).
    let gaps = reader
        .events(Some(""), &q)?
        .into_iter()
        .filter_map(|e| match e.kind {
            EventKind::Gap {
                from_revision,
                to_revision,
            } => Some(GapMark {
                at_ms: e.at_ms,
                from_revision,
                to_revision,
            }),
            _ => None,
        })
        .collect();
    Ok(History {
        known_since_ms,
        terms: reader.terms(name, &q)?,
        events,
        events_complete,
        gaps,
        refusals: reader.refusals(Some(name), &q)?,
        summary,
        window,
    })
}

/// The newest `limit` (or more) events of the window, oldest first, and
/// whether that is all of them. The events query returns the oldest rows
/// first, so instead of reading (and parsing) every event of a busy
/// window, this reads a slice at the window's end and widens it fourfold
/// until it holds more than `limit` events or covers the whole window.
fn newest_events(
    reader: &Reader,
    name: &str,
    w: &Window,
    limit: usize,
) -> Result<(Vec<Event>, bool), history::HistoryError> {
    let span = (w.to_ms - w.from_ms).max(1);
    let mut slice = (span / 64).max(1000);
    loop {
        let from = (w.to_ms - slice).max(w.from_ms);
        let q = Query {
            from_ms: Some(from),
            to_ms: Some(w.to_ms),
            limit: Some(history::MAX_LIMIT),
        };
        let events = reader.events(Some(name), &q)?;
        if from == w.from_ms {
            let complete = events.len() < history::MAX_LIMIT;
            return Ok((events, complete));
        }
        if events.len() > limit {
            return Ok((events, false));
        }
        slice = slice.saturating_mul(4);
    }
}

async fn election_page(
    State(s): State<Arc<AppState>>,
    Path(raw): Path<String>,
    RawQuery(query): RawQuery,
) -> Response {
    let name = match ElectionName::new(&raw) {
        Ok(n) => n,
        Err(e) => {
            return error_page(
                &s,
                StatusCode::BAD_REQUEST,
                "Not a valid election name",
                e.to_string(),
            );
        }
    };
    let params = Params::parse(query.as_deref());
    let now = now_ms();
    match timeline_page(&s, &name, &params, now).await {
        Ok(resp) => resp,
        Err(PageError::BadRequest(m)) => {
            error_page(&s, StatusCode::BAD_REQUEST, "Invalid time range", m)
        }
        Err(PageError::History(m)) => error_page(
            &s,
            StatusCode::SERVICE_UNAVAILABLE,
            "History unavailable",
            m,
        ),
    }
}

async fn timeline_page(
    s: &Arc<AppState>,
    name: &ElectionName,
    params: &Params,
    now: i64,
) -> Result<Response, PageError> {
    let parse = |what: &str, v: &Option<String>| {
        v.as_deref()
            .map(parse_time)
            .transpose()
            .map_err(|e| PageError::BadRequest(format!("{what}: {e}")))
    };
    let from = parse("from", &params.from)?;
    let to = parse("to", &params.to)?;
    if let (Some(f), Some(t)) = (from, to.or(Some(now))) {
        if f >= t {
            return Err(PageError::BadRequest(format!(
                "from ({}) must be before to ({})",
                format_ms(f),
                format_ms(t)
            )));
        }
    }
    let limit = match &params.limit {
        None => DEFAULT_ROWS,
        Some(l) => l
            .parse::<usize>()
            .ok()
            .filter(|&n| n > 0)
            .ok_or_else(|| PageError::BadRequest(format!("limit: {l:?} is not a positive number")))?
            .min(MAX_ROWS),
    };

    let reader = s.history.clone();
    let n = name.to_string();
    let history =
        tokio::task::spawn_blocking(move || load_history(&reader, &n, from, to, limit, now));
    let etcd = tokio::time::timeout(ETCD_WAIT, s.client.leader(name));
    let (history, etcd) = tokio::join!(history, etcd);
    let h = match history {
        Ok(Ok(h)) => h,
        Ok(Err(e)) => return Err(PageError::History(e.to_string())),
        Err(e) => return Err(PageError::History(e.to_string())),
    };
    let (etcd_leader, etcd_note): (Option<LeaderStatus>, Option<String>) = match etcd {
        Ok(Ok(l)) => (l, None),
        Ok(Err(e)) if e.is_unavailable() => (
            None,
            Some("etcd unreachable: showing what the history knows.".to_owned()),
        ),
        Ok(Err(e)) => (
            None,
            Some(format!("etcd: {e}. Showing what the history knows.")),
        ),
        Err(_) => (
            None,
            Some(format!(
                "etcd unreachable: no answer within {} ms. Showing what the history knows.",
                ETCD_WAIT.as_millis()
            )),
        ),
    };
    let etcd_answered = etcd_note.is_none();
    if h.summary.is_none() && etcd_leader.is_none() {
        let msg = if etcd_answered {
            format!("Nobody leads {name} and tenure has no history of it.")
        } else {
            format!("tenure has no history of {name}, and etcd could not be asked.")
        };
        return Ok(error_page(
            s,
            StatusCode::NOT_FOUND,
            "Unknown election",
            msg,
        ));
    }

    let page = build_timeline_page(s, name, params, limit, now, h, etcd_leader, etcd_note);
    Ok(render(StatusCode::OK, &page))
}

#[allow(clippy::too_many_arguments)]
fn build_timeline_page(
    s: &AppState,
    name: &ElectionName,
    params: &Params,
    limit: usize,
    now: i64,
    h: History,
    etcd_leader: Option<LeaderStatus>,
    etcd_note: Option<String>,
) -> TimelinePage {
    let href = election_href(name.as_str());
    let w = h.window;
    let open = h.summary.as_ref().and_then(|s| s.current.clone());

    // The current leader: etcd's when it answered, else the history's.
    let etcd_answered = etcd_note.is_none();
    let leader = match (&etcd_leader, &open) {
        (Some(st), _) => {
            let l = &st.leader;
            let since_ms = open
                .as_ref()
                .filter(|o| o.token == l.token)
                .map(|o| o.started_at_ms);
            Some(LeaderView {
                holder: l.holder.clone(),
                hue: timeline::hue_of(&l.holder),
                token: l.token,
                lease_hex: format!("{:x}", l.lease_id),
                layout: l.layout.to_string(),
                since_ms,
                since: since_ms.map(short_time),
                leading_for: since_ms.map(|t| format_duration_ms(now - t)),
                ttl: st.ttl_remaining_seconds,
                source: "etcd",
            })
        }
        (None, Some(o)) if !etcd_answered => Some(LeaderView {
            holder: o.holder.clone(),
            hue: timeline::hue_of(&o.holder),
            token: o.token,
            lease_hex: format!("{:x}", o.lease_id),
            layout: o.layout.to_string(),
            since_ms: Some(o.started_at_ms),
            since: Some(short_time(o.started_at_ms)),
            leading_for: Some(format_duration_ms(now - o.started_at_ms)),
            ttl: None,
            source: "history",
        }),
        _ => None,
    };
    let disagree = match (&etcd_leader, &open) {
        (Some(st), Some(o)) if st.leader.token != o.token => Some(format!(
            "The history still has token {} ({}) open; it has not caught up with etcd yet.",
            o.token, o.holder
        )),
        (Some(st), None) => Some(format!(
            "The history has not recorded token {} yet.",
            st.leader.token
        )),
        (None, Some(o)) if etcd_answered => Some(format!(
            "etcd has no leader, but the history still has token {} ({}) open; it has not caught up yet.",
            o.token, o.holder
        )),
        _ => None,
    };
    let leaderless_since = if leader.is_none() {
        Some(
            h.terms
                .iter()
                .filter_map(|t| t.ended_at_ms)
                .max()
                .or(h.summary.as_ref().and_then(|s| s.last_event_ms))
                .map_or_else(
                    || "no leader".to_owned(),
                    |t| format!("no leader since {} ({})", short_time(t), ago(now, t)),
                ),
        )
    } else {
        None
    };

    // The drawing.
    let gaps = &h.gaps;
    let input = Input {
        terms: &h.terms,
        refusals: &h.refusals,
        gaps,
        from_ms: w.from_ms,
        to_ms: w.to_ms,
        now_ms: now,
        known_since_ms: h.known_since_ms,
        width: timeline::WIDTH,
    };
    let tl = timeline::layout(&input);
    let svg_title = format!(
        "Leadership of {} from {} to {} UTC",
        name,
        short_time(w.from_ms),
        short_time(w.to_ms)
    );
    // The same drawing twice: wide, and narrow for phones (the stylesheet
    // shows one). The wide one comes first in the document.
    // Tables and the summary use the lanes' colours (a holder's hash
    // colour, unless two lanes of this drawing collided).
    let lane_hues: std::collections::HashMap<&str, u16> = tl
        .lanes
        .iter()
        .filter_map(|l| match &l.kind {
            timeline::LaneKind::Holder(h) => Some((h.as_str(), l.hue)),
            _ => None,
        })
        .collect();
    let hue = |holder: &str| {
        lane_hues
            .get(holder)
            .copied()
            .unwrap_or_else(|| timeline::hue_of(holder))
    };
    let mut leader = leader;
    if let Some(l) = &mut leader {
        l.hue = hue(&l.holder);
    }
    let svg = render_svg(&tl, &svg_title);
    let svg_narrow = render_svg(
        &timeline::layout(&Input {
            width: timeline::NARROW_WIDTH,
            ..input
        }),
        &svg_title,
    );

    // Range controls.
    let span = w.to_ms - w.from_ms;
    let with = |from: &str, to: Option<&str>| -> String {
        let mut q = format!("{href}?from={}", encode_component(from));
        if let Some(to) = to {
            q.push_str("&to=");
            q.push_str(&encode_component(to));
        }
        q
    };
    let presets = ["15m", "1h", "6h", "24h", "7d"]
        .into_iter()
        .map(|p| Preset {
            label: p,
            href: with(p, None),
            active: (params.to.is_none() && params.from.as_deref() == Some(p))
                || (p == "1h"
                    && params.from.is_none()
                    && params.to.is_none()
                    && !w.quiet
                    && !w.young),
        })
        .collect();
    let earlier_href = with(&format_ms(w.from_ms - span), Some(&format_ms(w.from_ms)));
    let later_href = (w.to_ms < now - 1000).then(|| {
        let to = w.to_ms + span;
        if to >= now {
            with(
                &humantime::format_duration(Duration::from_secs((span / 1000).max(1) as u64))
                    .to_string(),
                None,
            )
        } else {
            with(&format_ms(w.to_ms), Some(&format_ms(to)))
        }
    });
    let export = |format: &str| {
        format!(
            "/api/v1{href}/export?format={format}&from={}&to={}",
            encode_component(&format_ms(w.from_ms)),
            encode_component(&format_ms(w.to_ms))
        )
    };
    let quiet_note = w.quiet.then(|| {
        let last = w.to_ms - STALE_PAD;
        format!(
            "Nothing happened in the last hour: showing the hour around the last event ({}, {}).",
            short_time(last),
            ago(now, last)
        )
    });

    // Tables, newest first.
    let more = |more_rows: bool| {
        (more_rows && limit < MAX_ROWS).then(|| {
            let mut q = String::new();
            if let Some(f) = &params.from {
                q.push_str(&format!("from={}&", encode_component(f)));
            }
            if let Some(t) = &params.to {
                q.push_str(&format!("to={}&", encode_component(t)));
            }
            format!("{href}?{q}limit={}", (limit * 10).min(MAX_ROWS))
        })
    };
    let terms: Vec<TermView> = h
        .terms
        .iter()
        .rev()
        .take(limit)
        .map(|t| term_view(t, hue(&t.holder), now))
        .collect();
    let terms_info = TableInfo {
        shown: terms.len(),
        total: Some(h.terms.len()),
        capped: h.terms.len() >= history::MAX_LIMIT,
        more_href: more(h.terms.len() > limit),
    };
    let events: Vec<EventView> = h.events.iter().rev().take(limit).map(event_view).collect();
    let events_info = TableInfo {
        shown: events.len(),
        total: h.events_complete.then_some(h.events.len()),
        capped: false,
        more_href: more(!h.events_complete || h.events.len() > limit),
    };

    TimelinePage {
        head: Head::new(s, format!("{name} · tenure"), now),
        name: name.to_string(),
        href: href.clone(),
        leader,
        disagree,
        leaderless_since,
        etcd_note,
        live: live_mode(params, &w, now),
        window_label: format!(
            "{} → {} UTC",
            &short_time(w.from_ms)[..19],
            &short_time(w.to_ms)[..19]
        ),
        span_label: format_duration_ms(span),
        quiet_note,
        presets,
        from_value: params.from.clone().unwrap_or_default(),
        to_value: params.to.clone().unwrap_or_default(),
        earlier_href,
        later_href,
        export_csv: export("csv"),
        export_json: export("json"),
        svg,
        svg_narrow,
        terms_drawn: tl.terms_drawn,
        terms_merged: tl.terms_merged,
        leaderless_total: format_duration_ms(tl.leaderless_ms),
        leaderless_count: tl.leaderless.iter().map(|s| s.count).sum(),
        refusal_count: h.refusals.len(),
        gap_count: gaps.len(),
        terms,
        terms_info,
        events,
        events_info,
    }
}

fn term_view(t: &TermRow, hue: u16, now: i64) -> TermView {
    let open = t.ended_at_ms.is_none();
    let (cause, cause_class) = match (open, t.end_cause) {
        (true, _) => ("leading".to_owned(), "open"),
        (false, Some(c)) => (
            c.as_str().to_owned(),
            match c {
                crate::events::EndCause::Resigned => "ok",
                crate::events::EndCause::Unknown => "warn",
                _ => "bad",
            },
        ),
        (false, None) => ("ended".to_owned(), "warn"),
    };
    TermView {
        token: t.token,
        holder: t.holder.clone(),
        hue,
        start: short_time(t.started_at_ms),
        end: t.ended_at_ms.map_or_else(|| "—".to_owned(), short_time),
        open,
        duration: match t.ended_at_ms {
            Some(e) => format_duration_ms(e - t.started_at_ms),
            None => format!("{} so far", format_duration_ms(now - t.started_at_ms)),
        },
        cause,
        cause_class,
        revisions: match t.ended_revision {
            Some(e) => format!("{} → {e}", t.started_revision),
            None => format!("{} →", t.started_revision),
        },
        from_snapshot: t.from_snapshot,
    }
}

fn event_view(e: &Event) -> EventView {
    let (details, bad) = match &e.kind {
        EventKind::TermStarted {
            token,
            holder,
            previous_holder,
            from_snapshot,
            layout,
            ..
        } => {
            let mut d = format!("{holder} leads with token {token}");
            if let Some(p) = previous_holder {
                d.push_str(&format!(", after {p}"));
            }
            if *from_snapshot {
                d.push_str(" (already leading when first seen)");
            }
            if *layout == crate::election::Layout::Queue {
                d.push_str(" · queue layout");
            }
            (d, false)
        }
        EventKind::TermEnded {
            token,
            holder,
            cause,
            started_at_ms,
            ..
        } => (
            format!(
                "{holder}'s term {token} ended: {cause}, after {}",
                format_duration_ms(e.at_ms - started_at_ms)
            ),
            false,
        ),
        EventKind::LeaderValueChanged {
            token,
            holder,
            previous,
        } => (format!("token {token}: value {previous} → {holder}"), false),
        EventKind::FenceAccepted { resource, token } => {
            (format!("{resource} accepted token {token}"), false)
        }
        EventKind::FenceRefused {
            resource,
            token,
            reason,
            current_token,
            current_holder,
        } => {
            let mut d = format!("{resource} refused token {token}: {}", reason.as_str());
            match (current_holder, current_token) {
                (Some(h), Some(t)) => d.push_str(&format!(" (leader then: {h}, token {t})")),
                (None, Some(t)) => d.push_str(&format!(" (leader then: token {t})")),
                _ => {}
            }
            (d, true)
        }
        EventKind::Gap {
            from_revision,
            to_revision,
        } => (
            format!(
                "watcher gap: etcd compacted revisions {from_revision}..{to_revision} before they \
                 were seen; resynced from a snapshot"
            ),
            true,
        ),
    };
    EventView {
        revision: e.revision,
        time: short_time(e.at_ms),
        kind: e.kind.name(),
        details,
        bad,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_become_one_segment() {
        assert_eq!(election_href("team/db"), "/elections/team%2Fdb");
        assert_eq!(encode_component("a b<&>"), "a%20b%3C%26%3E");
        assert_eq!(decode_component("team%2Fdb+x%zz%4"), "team/db x%zz%4");
        assert_eq!(
            decode_component("2026-12-02T14%3A00%3A00Z"),
            "2026-12-02T14:00:00Z"
        );
    }

    #[test]
    fn params_skip_empty_values() {
        let p = Params::parse(Some("from=2h&to=&limit=5&x=1"));
        assert_eq!(p.from.as_deref(), Some("2h"));
        assert_eq!(p.to, None);
        assert_eq!(p.limit.as_deref(), Some("5"));
    }

    #[test]
    fn assets_are_versioned_by_content() {
        assert_ne!(CSS_VERSION, JS_VERSION);
        assert!(CSS.contains("prefers-color-scheme"));
        assert!(JS.contains("EventSource"));
    }
}
