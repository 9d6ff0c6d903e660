//! The overview (`/`): one row per election the history knows, filtered by
//! a glob (`match`), sorted by any column (`sort`, `order`), paged (`page`,
//! `per_page`), with counts over every matching election.

use std::sync::Arc;

use askama::Template;
use axum::extract::{RawQuery, State};
use axum::http::StatusCode;
use axum::response::Response;

use super::urls::{election_href, encode_component, query_pairs};
use super::{ago, render, Head};
use crate::events::now_ms;
use std::collections::HashMap;

use crate::history::{
    self, format_duration_ms, short_time, ElectionSummary, PageFrom, Query, Reader,
};
use crate::web::shared::glob::glob_match;
use crate::web::{timeline, AppState};

const DAY_MS: i64 = 86_400_000;

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
    /// When the history's writer holds an end of its term queued.
    queued_end_ms: Option<i64>,
    last_event: String,
}

#[derive(Template)]
#[template(path = "overview.html")]
struct OverviewPage {
    head: Head,
    rows: Vec<OverviewRow>,
    /// Elections the history knows, and those the filter keeps.
    known: usize,
    matching: usize,
    leaderless: usize,
    refusing: usize,
    /// The cap on tracked elections was hit: what it means, what to do.
    cap: Option<String>,
    /// Every cluster reads Kubernetes' Leases (none of tenure's own
    /// elections): what an empty list says.
    leases_only: bool,
    error: Option<String>,
    match_value: String,
    /// Column headers: label, link that sorts by it, current direction.
    columns: Vec<SortLink>,
    first: usize,
    last: usize,
    prev_href: Option<String>,
    next_href: Option<String>,
}

/// Overview rows per page unless `per_page` says otherwise.
pub const OVERVIEW_PAGE: usize = 200;
/// The most rows one overview page shows.
pub const OVERVIEW_MAX_PAGE: usize = 2000;

struct SortLink {
    label: &'static str,
    title: &'static str,
    href: String,
    /// "asc", "desc" or "" when not sorted by it.
    dir: &'static str,
    right: bool,
}

/// The overview's query: `match` (glob), `sort`, `order`, `page`, `per_page`.
#[derive(Debug, Default, Clone)]
struct OverviewParams {
    glob: Option<String>,
    sort: Option<String>,
    order: Option<String>,
    page: usize,
    per_page: usize,
}

impl OverviewParams {
    fn parse(raw: Option<&str>) -> OverviewParams {
        let mut p = OverviewParams {
            page: 1,
            per_page: OVERVIEW_PAGE,
            ..Default::default()
        };
        let mut cluster = None;
        for (k, v) in query_pairs(raw) {
            match k {
                "match" => p.glob = Some(v.chars().take(256).collect()),
                "cluster" => cluster = Some(v.chars().take(64).collect::<String>()),
                "sort" => p.sort = Some(v),
                "order" => p.order = Some(v),
                "page" => p.page = v.parse().ok().filter(|&n| n > 0).unwrap_or(1),
                "per_page" => {
                    p.per_page = v
                        .parse()
                        .ok()
                        .filter(|&n| n > 0)
                        .unwrap_or(OVERVIEW_PAGE)
                        .min(OVERVIEW_MAX_PAGE)
                }
                _ => {}
            }
        }
        p.glob = crate::web::within_cluster(cluster.as_deref(), p.glob.take());
        p
    }

    /// Rows before this page.
    fn skip(&self) -> usize {
        (self.page - 1).saturating_mul(self.per_page)
    }

    fn href(&self, sort: Option<&str>, order: Option<&str>, page: usize) -> String {
        let mut q = Vec::new();
        if let Some(g) = &self.glob {
            q.push(format!("match={}", encode_component(g)));
        }
        if let Some(s) = sort {
            q.push(format!("sort={s}"));
        }
        if let Some(o) = order {
            q.push(format!("order={o}"));
        }
        if page > 1 {
            q.push(format!("page={page}"));
        }
        if self.per_page != OVERVIEW_PAGE {
            q.push(format!("per_page={}", self.per_page));
        }
        if q.is_empty() {
            "/".to_owned()
        } else {
            format!("/?{}", q.join("&"))
        }
    }
}

const SORTS: [(&str, &str, &str, bool); 7] = [
    ("name", "Election", "", false),
    ("leader", "Leader", "", false),
    ("token", "Token", "", true),
    ("leading", "Leading for", "", false),
    (
        "changes",
        "Changes 24 h",
        "terms started in the last 24 hours",
        true,
    ),
    (
        "refusals",
        "Refusals 24 h",
        "fence refusals in the last 24 hours (all time in the tooltip)",
        true,
    ),
    ("last", "Last event", "", false),
];

pub(super) async fn overview(State(s): State<Arc<AppState>>, RawQuery(raw): RawQuery) -> Response {
    let now = now_ms();
    let p = OverviewParams::parse(raw.as_deref());
    let reader = s.history.clone();
    let p2 = p.clone();
    let data = tokio::task::spawn_blocking(move || overview_rows(&reader, now, &p2)).await;
    let (listing, error) = match data {
        Ok(Ok(l)) => (l, None),
        Ok(Err(e)) => (
            Listing::default(),
            Some(format!("history unavailable: {e}")),
        ),
        Err(e) => (
            Listing::default(),
            Some(format!("history query failed: {e}")),
        ),
    };
    let sort = p.sort.as_deref().unwrap_or("name");
    let desc = p.order.as_deref() == Some("desc");
    let columns = SORTS
        .iter()
        .map(|&(key, label, title, right)| {
            let current = key == sort;
            let next = if current && !desc { "desc" } else { "asc" };
            SortLink {
                label,
                title,
                href: p.href(Some(key), Some(next), 1),
                dir: match (current, desc) {
                    (false, _) => "",
                    (true, false) => "asc",
                    (true, true) => "desc",
                },
                right,
            }
        })
        .collect();
    let skip = p.skip();
    let shown = listing.rows.len();
    let page = OverviewPage {
        head: Head::new(&s, "tenure · elections".to_owned(), now),
        known: listing.known,
        matching: listing.matching,
        leaderless: listing.leaderless,
        refusing: listing.refusing,
        leases_only: if s.clusters.is_empty() {
            s.sources.reads_leases()
        } else {
            s.clusters.iter().all(|c| c.reads_leases)
        },
        cap: s
            .readiness
            .cap_reached()
            .or_else(|| s.clusters.iter().find_map(|c| c.readiness.cap_reached()))
            .map(|c| c.sentence()),
        rows: listing.rows,
        error,
        match_value: p.glob.clone().unwrap_or_default(),
        columns,
        first: if shown == 0 { 0 } else { skip + 1 },
        last: skip + shown,
        prev_href: (p.page > 1).then(|| p.href(p.sort.as_deref(), p.order.as_deref(), p.page - 1)),
        next_href: (skip + shown < listing.matching)
            .then(|| p.href(p.sort.as_deref(), p.order.as_deref(), p.page + 1)),
    };
    let status = if page.error.is_some() {
        StatusCode::SERVICE_UNAVAILABLE
    } else {
        StatusCode::OK
    };
    render(status, &page)
}

/// One page of the overview, and the counts over every matching election.
#[derive(Default)]
struct Listing {
    rows: Vec<OverviewRow>,
    known: usize,
    matching: usize,
    leaderless: usize,
    refusing: usize,
}

/// One row per election the history knows (filtered, sorted, paged).
/// Leader changes are terms started in the last 24 h (the same count the
/// API's `changes_last_hour` makes for one hour).
///
/// Cost: sorted by name and unfiltered (the default), a page of
/// the `elections` table, a count of the open terms and grouped counts of
/// the page's changes and of the day's refusals: a bounded amount whatever
/// the number of elections. Sorted by another column or filtered, every
/// election's summary is read (one query) and sorted; rows are built for
/// the page only. Plus one terms query per leaderless election of the page
/// (for "last term ended").
fn overview_rows(
    reader: &Reader,
    now: i64,
    p: &OverviewParams,
) -> Result<Listing, history::HistoryError> {
    let day_ago = now - DAY_MS;
    let window = Query {
        from_ms: Some(day_ago),
        to_ms: None,
        limit: Some(history::MAX_LIMIT),
    };
    let refusals_by = reader.refusals_since(day_ago)?;
    let desc = p.order.as_deref() == Some("desc");
    let sort = p.sort.as_deref().unwrap_or("name");
    let (mut page, known, matching, leaderless, refusing) = if p.glob.is_none() && sort == "name" {
        by_name(reader, p, desc, day_ago, &refusals_by, now)?
    } else {
        sorted(reader, p, sort, desc, day_ago, &refusals_by, now)?
    };
    for r in page.iter_mut().filter(|r| r.holder.is_none()) {
        // An end the history's writer holds queued is later than any read.
        r.leaderless_since = reader
            .terms(&r.name, &window)?
            .iter()
            .filter_map(|t| t.ended_at_ms)
            .max()
            .max(r.queued_end_ms)
            .map(|end| ago(now, end));
    }
    Ok(Listing {
        rows: page,
        known,
        matching,
        leaderless,
        refusing,
    })
}

/// A page, its elections known, matching, leaderless and refusing.
type Paged = (Vec<OverviewRow>, usize, usize, usize, usize);

/// The default overview: a page of elections by name, read as a page.
fn by_name(
    reader: &Reader,
    p: &OverviewParams,
    desc: bool,
    day_ago: i64,
    refusals_by: &HashMap<String, u64>,
    now: i64,
) -> Result<Paged, history::HistoryError> {
    let skip = p.skip();
    let page = if desc {
        // From the end: the page's names, read forwards, then reversed.
        let total = reader.elections_page(PageFrom::Offset(0), 0)?.total as usize;
        let end = total.saturating_sub(skip);
        let start = end.saturating_sub(p.per_page);
        let mut page = reader.elections_page(PageFrom::Offset(start), end - start)?;
        page.elections.reverse();
        page
    } else {
        reader.elections_page(PageFrom::Offset(skip), p.per_page)?
    };
    let known = page.total as usize;
    let leaderless = known.saturating_sub(reader.leading_count()? as usize);
    let (first, last) = match (page.elections.first(), page.elections.last()) {
        (Some(f), Some(l)) if desc => (l.election.clone(), f.election.clone()),
        (Some(f), Some(l)) => (f.election.clone(), l.election.clone()),
        _ => Default::default(),
    };
    let changes = if page.elections.is_empty() {
        Default::default()
    } else {
        reader.recent_between(day_ago, &first, &last)?.changes
    };
    let rows = page
        .elections
        .iter()
        .map(|e| {
            overview_row(
                e,
                now,
                changes.get(&e.election).copied().unwrap_or(0) as usize,
                refusals_by.get(&e.election).copied().unwrap_or(0) as usize,
                None,
            )
        })
        .collect();
    Ok((rows, known, known, leaderless, refusals_by.len()))
}

/// Filtered, or sorted by another column: every election's summary, the
/// matching ones sorted, the page's rows built.
fn sorted(
    reader: &Reader,
    p: &OverviewParams,
    sort: &str,
    desc: bool,
    day_ago: i64,
    refusals_by: &HashMap<String, u64>,
    now: i64,
) -> Result<Paged, history::HistoryError> {
    let changes = reader.started_since(day_ago)?;
    let summaries = reader.elections()?;
    let known = summaries.len();
    let count =
        |m: &HashMap<String, u64>, e: &ElectionSummary| m.get(&e.election).copied().unwrap_or(0);
    let mut rows: Vec<&ElectionSummary> = summaries
        .iter()
        .filter(|e| p.glob.as_deref().is_none_or(|g| glob_match(g, &e.election)))
        .collect();
    let matching = rows.len();
    let leaderless = rows.iter().filter(|e| e.current.is_none()).count();
    let refusing = rows.iter().filter(|e| count(refusals_by, e) > 0).count();
    let holder = |e: &ElectionSummary| e.current.as_ref().map(|c| c.holder.clone());
    match sort {
        "leader" => rows.sort_by_cached_key(|e| holder(e)),
        "token" => rows.sort_by_key(|e| e.current.as_ref().map(|c| c.token)),
        // Ascending: the shortest leading first (the latest start), leaderless last.
        "leading" => {
            rows.sort_by_key(|e| std::cmp::Reverse(e.current.as_ref().map(|c| c.started_at_ms)))
        }
        "changes" => rows.sort_by_key(|e| count(&changes, e)),
        "refusals" => rows.sort_by_key(|e| count(refusals_by, e)),
        "last" => rows.sort_by_key(|e| e.last_event_ms),
        _ => {} // by name, as the history lists them
    }
    if desc {
        rows.reverse();
    }
    let page = rows
        .into_iter()
        .skip(p.skip())
        .take(p.per_page)
        .map(|e| {
            overview_row(
                e,
                now,
                count(&changes, e) as usize,
                count(refusals_by, e) as usize,
                None,
            )
        })
        .collect();
    Ok((page, known, matching, leaderless, refusing))
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
        queued_end_ms: e.queued_end_ms,
        last_event: e
            .last_event_ms
            .map_or_else(|| "—".to_owned(), |t| ago(now, t)),
    }
}
