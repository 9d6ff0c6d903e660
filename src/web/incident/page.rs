//! `GET /timeline`: every election of a window, one lane each, paged.

use std::sync::Arc;

use askama::Template;
use axum::extract::{RawQuery, State};
use axum::http::StatusCode;
use axum::response::Response;

use super::drawing::{layout, render_svg};
use super::window::{load, select, SelectError, Selection, Window};
use super::{DEFAULT_LANES, MAX_LANES_PER_PAGE};
use crate::events::cluster::ClusterEvent;
use crate::events::now_ms;
use crate::history::{format_duration_ms, format_ms, short_time};
use crate::web::shared::fit::{fitted_from, LAST_HOUR_MS};
use crate::web::shared::urls::{decode_component, encode_component};
use crate::web::shared::{error_page, render, Head};
use crate::web::timeline;
use crate::web::AppState;

struct Preset {
    label: &'static str,
    href: String,
    active: bool,
}

struct EventRow {
    time: String,
    kind: &'static str,
    details: String,
    certain: bool,
}

#[derive(Template)]
#[template(path = "incident.html")]
struct TimelineAllPage {
    head: Head,
    live: &'static str,
    from_value: String,
    to_value: String,
    match_value: String,
    presets: Vec<Preset>,
    window_label: String,
    span_label: String,
    earlier_href: String,
    later_href: Option<String>,
    svg: String,
    total: usize,
    first: usize,
    last: usize,
    prev_href: Option<String>,
    next_href: Option<String>,
    report_md: String,
    report_json: String,
    events: Vec<EventRow>,
    cluster_count: usize,
}

#[derive(Debug, Default)]
struct PageParams {
    from: Option<String>,
    to: Option<String>,
    glob: Option<String>,
    page: Option<String>,
    per_page: Option<String>,
}

fn page_params(raw: Option<&str>) -> PageParams {
    let mut p = PageParams::default();
    let mut cluster: Option<String> = None;
    for pair in raw.unwrap_or("").split('&') {
        let (k, v) = pair.split_once('=').unwrap_or((pair, ""));
        let v = decode_component(v).trim().to_owned();
        if v.is_empty() {
            continue;
        }
        match k {
            "from" => p.from = Some(v),
            "to" => p.to = Some(v),
            "match" => p.glob = Some(v),
            "cluster" => cluster = Some(v),
            "page" => p.page = Some(v),
            "per_page" => p.per_page = Some(v),
            _ => {}
        }
    }
    p.glob = crate::web::within_cluster(cluster.as_deref(), p.glob.take());
    p
}

fn query_string(from: Option<&str>, to: Option<&str>, glob: Option<&str>) -> String {
    let mut parts = Vec::new();
    for (k, v) in [("from", from), ("to", to), ("match", glob)] {
        if let Some(v) = v {
            parts.push(format!("{k}={}", encode_component(v)));
        }
    }
    parts.join("&")
}

/// Which page of lanes, and how many per page, from `page` and `per_page`
/// (positive numbers; at most [`MAX_LANES_PER_PAGE`] per page).
fn paging(p: &PageParams) -> Result<(usize, usize), String> {
    let number = |what: &str, v: &Option<String>, default: usize| match v {
        None => Ok(default),
        Some(v) => v
            .parse::<usize>()
            .ok()
            .filter(|&n| n > 0)
            .ok_or_else(|| format!("{what}: {v:?} is not a positive number")),
    };
    let page = number("page", &p.page, 1)?;
    let per_page = number("per_page", &p.per_page, DEFAULT_LANES)?.min(MAX_LANES_PER_PAGE);
    Ok((page, per_page))
}

/// The window's lanes `skip..skip + per_page`, read off the async runtime,
/// with since when nothing was watched; the error page when the history
/// cannot be read. `fit` (no `from` or `to` given): the window starts
/// where [`fitted_from`] says, from the history's first record; the
/// window's `sel` is the one loaded.
async fn load_window(
    s: &Arc<AppState>,
    sel: &Selection,
    fit: bool,
    skip: usize,
    per_page: usize,
) -> Result<Window, Response> {
    let reader = s.history.clone();
    let mut sel = sel.clone();
    let state = s.clone();
    let loaded = tokio::task::spawn_blocking(move || {
        if fit {
            sel.from_ms = fitted_from(reader.first_event_ms()?, sel.to_ms);
        }
        let mut w = load(&reader, &sel, skip, per_page)?;
        if !state.clusters.is_empty() {
            w.add_cluster_marks(&reader)?;
        }
        let unwatched = state.unwatched();
        w.set_unwatched(|e| unwatched.of(e), unwatched.any());
        Ok::<_, crate::history::HistoryError>(w)
    })
    .await;
    let unavailable =
        |e: String| error_page(s, StatusCode::SERVICE_UNAVAILABLE, "History unavailable", e);
    match loaded {
        Ok(Ok(w)) => Ok(w),
        Ok(Err(e)) => Err(unavailable(e.to_string())),
        Err(e) => Err(unavailable(e.to_string())),
    }
}

/// The preset windows (the last 15 minutes … 7 days), the active one marked.
fn presets(p: &PageParams) -> Vec<Preset> {
    ["15m", "1h", "6h", "24h", "7d"]
        .into_iter()
        .map(|l| Preset {
            label: l,
            href: format!(
                "/timeline?{}",
                query_string(Some(l), None, p.glob.as_deref())
            ),
            active: p.to.is_none() && p.from.as_deref() == Some(l),
        })
        .collect()
}

/// etcd's own events of the window, the latest 200 first, each with when
/// it happened as far as it is known.
fn event_rows(cluster: &[ClusterEvent]) -> Vec<EventRow> {
    cluster
        .iter()
        .rev()
        .take(200)
        .map(|e| EventRow {
            time: short_time(e.at_ms),
            kind: e.kind.name(),
            details: match e.not_before_ms {
                Some(nb) if nb < e.at_ms => format!(
                    "{} (between {} and {})",
                    e.kind.describe(),
                    &short_time(nb)[11..],
                    &short_time(e.at_ms)[11..]
                ),
                Some(_) => e.kind.describe(),
                None => format!("{} (when it happened: unknown)", e.kind.describe()),
            },
            certain: e.not_before_ms.is_some(),
        })
        .collect()
}

/// The windows of the same span just before and (unless this one reaches
/// now) just after this one.
fn neighbours(sel: &Selection, now: i64, glob: Option<&str>) -> (String, Option<String>) {
    let span = sel.to_ms - sel.from_ms;
    let href = |from: i64, to: i64| {
        let (from, to) = (format_ms(from), format_ms(to));
        format!("/timeline?{}", query_string(Some(&from), Some(&to), glob))
    };
    let earlier = href(sel.from_ms - span, sel.from_ms);
    let later = (sel.to_ms < now - 1000).then(|| {
        let to = (sel.to_ms + span).min(now);
        href(to - span, to)
    });
    (earlier, later)
}

/// How long the window is; when it was fitted, that it holds all that was
/// recorded (a window of the last hour holds the last hour).
fn span_label(sel: &Selection, fit: bool) -> String {
    let span = sel.to_ms - sel.from_ms;
    if fit && span < LAST_HOUR_MS {
        format!("{}: all that was recorded", format_duration_ms(span))
    } else {
        format_duration_ms(span)
    }
}

/// The report of the window, in `format` (`md` or `json`).
fn report_href(sel: &Selection, format: &str) -> String {
    let (from, to) = (format_ms(sel.from_ms), format_ms(sel.to_ms));
    let qs = query_string(Some(&from), Some(&to), sel.glob.as_deref());
    format!("/api/v1/report?{qs}&format={format}")
}

pub(super) async fn timeline_page(
    State(s): State<Arc<AppState>>,
    RawQuery(raw): RawQuery,
) -> Response {
    let p = page_params(raw.as_deref());
    let now = now_ms();
    let bad = |m: String| error_page(&s, StatusCode::BAD_REQUEST, "Invalid request", m);
    let sel = match select(p.from.as_deref(), p.to.as_deref(), p.glob.as_deref(), now) {
        Ok(sel) => sel,
        Err(SelectError::Bad(m)) => return bad(m),
    };
    let (page, per_page) = match paging(&p) {
        Ok(paging) => paging,
        Err(m) => return bad(m),
    };
    let skip = (page - 1).saturating_mul(per_page);
    let fit = p.from.is_none() && p.to.is_none();
    let w = match load_window(&s, &sel, fit, skip, per_page).await {
        Ok(w) => w,
        Err(page) => return page,
    };
    let sel = w.sel.clone();
    let d = layout(&w, now, timeline::WIDTH);
    let title = format!(
        "Every election from {} to {} UTC",
        short_time(sel.from_ms),
        short_time(sel.to_ms)
    );
    let svg = render_svg(&d, &title);
    let qs = query_string(p.from.as_deref(), p.to.as_deref(), p.glob.as_deref());
    let page_href = |n: usize| {
        let mut h = format!("/timeline?{qs}");
        if !qs.is_empty() {
            h.push('&');
        }
        h.push_str(&format!("page={n}"));
        if p.per_page.is_some() {
            h.push_str(&format!("&per_page={per_page}"));
        }
        h
    };
    let live = if p.to.is_none() || sel.to_ms >= now - 1000 {
        "swap"
    } else {
        "off"
    };
    let (earlier_href, later_href) = neighbours(&sel, now, p.glob.as_deref());
    let page_view = TimelineAllPage {
        earlier_href,
        later_href,
        head: Head::new(&s, "every election · tenure".to_owned(), now),
        live,
        from_value: p.from.clone().unwrap_or_default(),
        to_value: p.to.clone().unwrap_or_default(),
        match_value: p.glob.clone().unwrap_or_default(),
        presets: presets(&p),
        window_label: format!(
            "{} → {} UTC",
            &short_time(sel.from_ms)[..19],
            &short_time(sel.to_ms)[..19]
        ),
        span_label: span_label(&sel, fit),
        svg,
        total: w.total,
        first: if w.lanes.is_empty() { 0 } else { skip + 1 },
        last: skip + w.lanes.len(),
        prev_href: (page > 1).then(|| page_href(page - 1)),
        next_href: (skip + w.lanes.len() < w.total).then(|| page_href(page + 1)),
        report_md: report_href(&sel, "md"),
        report_json: report_href(&sel, "json"),
        cluster_count: w.cluster.len(),
        events: event_rows(&w.cluster),
    };
    render(StatusCode::OK, &page_view)
}
