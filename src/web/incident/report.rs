//! The postmortem report of a window: built from a [`Window`], written as
//! Markdown, and `GET /api/v1/report?from=&to=&match=&format=md|json`.

use std::sync::Arc;

use axum::extract::State;
use axum::http::{header, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::Json;
use serde::{Deserialize, Serialize};

use super::window::{load, select, Lane, SelectError, Window};
use super::{bad_request, MAX_REPORT_ELECTIONS};
use crate::events::acting::ActingView;
use crate::events::cluster::ClusterEvent;
use crate::events::{now_ms, EndCause};
use crate::history::{format_ms, TermRow};
use crate::web::api::{ApiError, ApiQuery};
use crate::web::timeline;
use crate::web::AppState;

/// The report's window (at most 31 days, `from` before `to`; default the
/// last hour) and elections.
#[derive(Debug, Deserialize, utoipa::IntoParams)]
#[into_params(parameter_in = Query)]
pub(super) struct ReportQuery {
    /// From (RFC 3339, unix seconds, `now`, or a duration ago: `2h`).
    #[param(schema_with = crate::web::api::schema::time)]
    from: Option<String>,
    /// To, in the same forms (default now).
    #[param(schema_with = crate::web::api::schema::time)]
    to: Option<String>,
    /// The elections whose name matches this glob.
    #[serde(rename = "match")]
    #[param(rename = "match")]
    glob: Option<String>,
    /// The elections of one cluster: `match` within it.
    cluster: Option<String>,
    /// `md` (Markdown, the default) or `json`.
    #[param(pattern = "^(md|json)$")]
    format: Option<String>,
}

#[derive(Debug, Clone, Serialize)]
pub struct ReportTerm {
    pub holder: String,
    pub token: i64,
    pub start: String,
    pub start_ms: i64,
    /// `None`: still leading.
    pub end: Option<String>,
    pub end_ms: Option<i64>,
    /// `None` while open; `unknown` when tenure could not tell.
    pub cause: Option<String>,
    /// The start was not observed (already running when first seen).
    pub start_not_observed: bool,
    /// The start was replayed (after a reconnect or a restart), not seen
    /// as it happened: it happened between `start_not_before` (`None`:
    /// unknown) and `start`.
    pub start_replayed: bool,
    pub start_not_before: Option<String>,
    /// As for the start.
    pub end_replayed: bool,
    pub end_not_before: Option<String>,
    /// When its holder acted, and the margin.
    #[serde(flatten)]
    pub acting: ActingView,
}

#[derive(Debug, Clone, Serialize)]
pub struct ReportRefusal {
    pub at: String,
    pub at_ms: i64,
    pub resource: String,
    pub refused_token: i64,
    /// Who held the refused token; `None`: that term is not in the history.
    pub refused_holder: Option<String>,
    pub reason: String,
    /// How long after the refused token's term ended; `None`: unknown (the
    /// term is not in the history, or had not ended).
    pub after_term_end_ms: Option<i64>,
}

#[derive(Debug, Clone, Serialize)]
pub struct ReportElection {
    pub election: String,
    pub terms: Vec<ReportTerm>,
    /// Terms that started in the window.
    pub changes: u64,
    /// Leaderless time in the part of the window the history covers;
    /// `None` (unknown) when no term is known, not every term was read, or
    /// a term's start or end was replayed (its time is only bounded).
    pub leaderless_ms: Option<i64>,
    pub longest_leaderless_ms: Option<i64>,
    pub leaderless_stretches: Option<usize>,
    /// Bounds of the leaderless time when replayed starts and ends leave it
    /// uncertain (equal when it is certain); `None` when unknown for the
    /// other reasons.
    pub leaderless_min_ms: Option<i64>,
    pub leaderless_max_ms: Option<i64>,
    /// Term starts and ends in the window that were replayed.
    pub replayed_boundaries: usize,
    /// The report's row budget ran out for this election: its terms and
    /// refusals are the window's first ones only.
    pub truncated: bool,
    /// From when the history knows this election (`None`: no term known);
    /// leaderless time is counted from here.
    pub known_since: Option<String>,
    pub refusals: Vec<ReportRefusal>,
}

#[derive(Debug, Clone, Serialize)]
pub struct ReportClusterEvent {
    pub at: String,
    pub at_ms: i64,
    /// When it happened is only known to be after this; `None`: unknown.
    pub not_before: Option<String>,
    #[serde(rename = "type")]
    pub kind: &'static str,
    pub description: String,
    pub detail: ClusterEvent,
}

#[derive(Debug, Clone, Serialize)]
pub struct Report {
    pub from: String,
    pub to: String,
    pub generated_at: String,
    #[serde(rename = "match")]
    pub glob: Option<String>,
    pub elections_total: usize,
    /// Elections left out (more than the report's cap).
    pub elections_omitted: usize,
    pub elections: Vec<ReportElection>,
    pub etcd_events: Vec<ReportClusterEvent>,
}

/// The stretches of `[lo, hi)` no term covers (an open term runs to `now`),
/// by the timeline's own [`timeline::uncovered`].
pub fn leaderless_stretches(terms: &[TermRow], lo: i64, hi: i64, now: i64) -> Vec<(i64, i64)> {
    stretches_of(
        terms
            .iter()
            .map(|t| (t.started_at_ms, t.ended_at_ms.unwrap_or(now)))
            .collect(),
        lo,
        hi,
    )
}

fn stretches_of(mut spans: Vec<(i64, i64)>, lo: i64, hi: i64) -> Vec<(i64, i64)> {
    for s in &mut spans {
        s.1 = s.1.max(s.0);
    }
    spans.sort();
    timeline::uncovered(&spans, lo, hi)
}

/// Leaderless time, least and most, when replayed boundaries may have
/// happened anywhere in their bounds: least when every replayed start came
/// as early and every end as late as possible, most the other way round.
/// An unknown lower bound is taken as `lo` (nothing before is counted).
/// Time not watched (no watcher live since `w.unwatched_since`) is led in
/// the least and leaderless in the most.
fn leaderless_bounds(w: &Window, lane: &Lane, lo: i64, hi: i64, now: i64) -> (i64, i64) {
    let (terms, election) = (&lane.terms, lane.activity.election.as_str());
    let earliest = |rev: i64, at: i64| match w.replayed_since_in(election, rev, at) {
        Some(since) => since.unwrap_or(lo).min(at),
        None => at,
    };
    let least: Vec<(i64, i64)> = terms
        .iter()
        .map(|t| {
            (
                earliest(t.started_revision, t.started_at_ms),
                t.ended_at_ms.unwrap_or(now),
            )
        })
        .collect();
    let most: Vec<(i64, i64)> = terms
        .iter()
        .map(|t| {
            let end = match (t.ended_revision, t.ended_at_ms) {
                (Some(rev), Some(at)) => earliest(rev, at),
                (None, Some(at)) => at,
                (_, None) => now,
            };
            (t.started_at_ms, end)
        })
        .collect();
    crate::web::replays::leaderless_range(&least, &most, lo, hi, lane.unwatched_since)
}

pub fn build_report(w: &Window, now: i64) -> Report {
    Report {
        from: format_ms(w.sel.from_ms),
        to: format_ms(w.sel.to_ms),
        generated_at: format_ms(now),
        glob: w.sel.glob.clone(),
        elections_total: w.total,
        elections_omitted: w.total.saturating_sub(w.lanes.len()),
        elections: w.lanes.iter().map(|l| report_election(w, l, now)).collect(),
        etcd_events: w.cluster.iter().map(report_cluster_event).collect(),
    }
}

/// One election's part of the report: its terms, leaderless time (exact,
/// or bounded where boundaries were replayed), refusals.
fn report_election(w: &Window, lane: &Lane, now: i64) -> ReportElection {
    let lo = lane
        .known_since_ms
        .map_or(w.sel.to_ms, |k| k.max(w.sel.from_ms));
    let hi = w.sel.to_ms.min(now);
    let stretches = leaderless_stretches(&lane.terms, lo, hi, now);
    let known = lane.known_since_ms.is_some() && !lane.truncated;
    let (least, most) = leaderless_bounds(w, lane, lo, hi, now);
    let election = lane.activity.election.as_str();
    let replayed_boundaries = lane
        .terms
        .iter()
        .map(|t| {
            usize::from(
                replayed(w, election, Some(t.started_revision), Some(t.started_at_ms)).is_some(),
            ) + usize::from(replayed(w, election, t.ended_revision, t.ended_at_ms).is_some())
        })
        .sum();
    let certain = known && least == most;
    ReportElection {
        election: lane.activity.election.clone(),
        terms: lane
            .terms
            .iter()
            .map(|t| report_term(w, election, t))
            .collect(),
        changes: lane.activity.started,
        leaderless_ms: certain.then(|| stretches.iter().map(|(a, b)| b - a).sum()),
        longest_leaderless_ms: certain
            .then(|| stretches.iter().map(|(a, b)| b - a).max().unwrap_or(0)),
        leaderless_stretches: certain.then_some(stretches.len()),
        leaderless_min_ms: known.then_some(least),
        leaderless_max_ms: known.then_some(most),
        replayed_boundaries,
        truncated: lane.truncated,
        known_since: lane.known_since_ms.map(format_ms),
        refusals: report_refusals(lane),
    }
}

/// Whether `election`'s change at `rev` (seen at `at`) was replayed, and
/// since when it may have happened.
fn replayed(w: &Window, election: &str, rev: Option<i64>, at: Option<i64>) -> Option<Option<i64>> {
    match (rev, at) {
        (Some(rev), Some(at)) => w.replayed_since_in(election, rev, at),
        _ => None,
    }
}

fn report_term(w: &Window, election: &str, t: &TermRow) -> ReportTerm {
    let start = replayed(w, election, Some(t.started_revision), Some(t.started_at_ms));
    let end = replayed(w, election, t.ended_revision, t.ended_at_ms);
    ReportTerm {
        holder: t.holder.clone(),
        token: t.token,
        start: t.started_at.clone(),
        start_ms: t.started_at_ms,
        end: t.ended_at.clone(),
        end_ms: t.ended_at_ms,
        cause: t.end_cause.map(|c| c.to_string()),
        start_not_observed: t.from_snapshot,
        start_replayed: start.is_some(),
        start_not_before: start.flatten().map(format_ms),
        end_replayed: end.is_some(),
        end_not_before: end.flatten().map(format_ms),
        acting: t.acting.clone(),
    }
}

/// Each refusal with the term its token belonged to.
fn report_refusals(lane: &Lane) -> Vec<ReportRefusal> {
    lane.refusals
        .iter()
        .map(|r| {
            let term = lane.terms.iter().find(|t| t.token == r.token);
            ReportRefusal {
                at: r.at.clone(),
                at_ms: r.at_ms,
                resource: r.resource.clone(),
                refused_token: r.token,
                refused_holder: term.map(|t| t.holder.clone()),
                reason: r.reason.to_string(),
                after_term_end_ms: term.and_then(|t| t.ended_at_ms).map(|e| r.at_ms - e),
            }
        })
        .collect()
}

fn report_cluster_event(e: &ClusterEvent) -> ReportClusterEvent {
    ReportClusterEvent {
        at: format_ms(e.at_ms),
        at_ms: e.at_ms,
        not_before: e.not_before_ms.map(format_ms),
        kind: e.kind.name(),
        description: match &e.cluster {
            Some(c) => format!("cluster {c}: {}", e.kind.describe()),
            None => e.kind.describe(),
        },
        detail: e.clone(),
    }
}

/// Every term whose holder reported when it acted (tenure campaign, the
/// library), overlaps first: who acted when, and by how much each stopped
/// before another could have acted.
fn who_acted_when(o: &mut String, r: &Report) {
    use std::fmt::Write;
    let mut rows: Vec<(&str, &ReportTerm)> = r
        .elections
        .iter()
        .flat_map(|e| e.terms.iter().map(move |t| (e.election.as_str(), t)))
        .filter(|(_, t)| t.acting.acting_started_ms.is_some())
        .collect();
    let _ = writeln!(o, "\n## Who acted when\n");
    if rows.is_empty() {
        let _ = writeln!(
            o,
            "No holder in the window reported when it acted (tenure campaign and the library \
             do; other clients cannot)."
        );
        return;
    }
    rows.sort_by_key(|(_, t)| {
        (
            std::cmp::Reverse(t.acting.overlap_ms.unwrap_or(0)),
            t.acting.acting_started_ms,
        )
    });
    let overlaps = rows
        .iter()
        .filter(|(_, t)| t.acting.overlap_ms.unwrap_or(0) > 0)
        .count();
    let _ = writeln!(
        o,
        "{overlaps} overlap(s): a holder acting on after the next term began. Margin: the earliest \
         moment another holder could have acted, minus when this one stopped (negative: it acted \
         past it).\n"
    );
    let _ = writeln!(
        o,
        "| election | holder | token | acted from | stopped | margin | two holders at once |"
    );
    let _ = writeln!(o, "|---|---|---:|---|---|---:|---:|");
    let late = |l: bool| if l { " (reported late)" } else { "" };
    for (election, t) in rows {
        let a = &t.acting;
        let stopped = a.stopped_text(t.end_ms.is_some(), format_ms);
        let margin = timeline::margin_text(a);
        let _ = writeln!(
            o,
            "| {} | {} | {} | {}{} | {} | {} | {} |",
            cell(election),
            cell(&t.holder),
            t.token,
            a.acting_started_ms.map(format_ms).unwrap_or_default(),
            late(a.acting_started_late),
            stopped,
            margin,
            match a.overlap_ms {
                Some(o) if o > 0 => format!("**{o} ms**"),
                Some(_) => "no".to_owned(),
                None => "unknown".to_owned(),
            }
        );
    }
}

/// Markdown table cells: pipes and newlines would break the table, and a
/// holder's `<…>` must stay text, not become HTML where the report is pasted;
/// controls (a newline too) and bidirectional characters are shown as their
/// escapes (`crate::text::visible`: `\u{1b}`), whose backslash Markdown
/// keeps by its own escape.
fn cell(s: &str) -> String {
    crate::text::visible(s)
        .replace('\\', "\\\\")
        .replace('|', "\\|")
        .replace('<', "\\<")
        .replace('>', "\\>")
        .replace('`', "'")
}

fn ms_or_unknown(v: Option<i64>) -> String {
    v.map_or_else(|| "unknown".to_owned(), |ms| format!("{ms} ms"))
}

/// The leaderless total, or its bounds when replayed times leave it open.
fn leaderless_total(e: &ReportElection) -> String {
    match (e.leaderless_ms, e.leaderless_min_ms, e.leaderless_max_ms) {
        (Some(ms), _, _) => format!("{ms} ms"),
        (None, Some(lo), Some(hi)) => format!("unknown ({lo}–{hi} ms)"),
        _ => "unknown".to_owned(),
    }
}

/// What each end cause of the report's terms tells, in the one wording
/// every view uses (`EndCause::description`).
fn end_causes(o: &mut String, r: &Report) {
    use std::fmt::Write;
    let seen: std::collections::BTreeSet<EndCause> = r
        .elections
        .iter()
        .flat_map(|e| &e.terms)
        .filter_map(|t| t.cause.as_deref().and_then(EndCause::parse))
        .collect();
    if seen.is_empty() {
        return;
    }
    let _ = writeln!(o, "\n## End causes\n");
    for c in seen {
        let _ = writeln!(o, "- `{c}`: {}", c.description());
    }
}

/// A start or end time; a replayed one says what is known of it.
fn boundary(at: &str, replayed: bool, not_before: Option<&str>) -> String {
    match (replayed, not_before) {
        (false, _) => at.to_owned(),
        (true, Some(nb)) => format!("{at} (replayed: between {nb} and then)"),
        (true, None) => format!("{at} (replayed: at an unknown time before)"),
    }
}

pub fn report_markdown(r: &Report) -> String {
    let mut o = String::new();
    heading(&mut o, r);
    summary(&mut o, r);
    end_causes(&mut o, r);
    who_acted_when(&mut o, r);
    etcd_events(&mut o, r);
    for e in &r.elections {
        election_section(&mut o, e);
    }
    o
}

/// The title and what the window holds.
fn heading(o: &mut String, r: &Report) {
    use std::fmt::Write;
    let _ = writeln!(o, "# Leader elections: {} → {}\n", r.from, r.to);
    let _ = writeln!(
        o,
        "Generated by tenure at {}{}. {} election(s) in the window{}.\n",
        r.generated_at,
        r.glob
            .as_deref()
            .map(|g| format!(" for elections matching `{}`", cell(g)))
            .unwrap_or_default(),
        r.elections_total,
        if r.elections_omitted > 0 {
            format!(
                "; the {} quietest are left out (narrow the window or the match)",
                r.elections_omitted
            )
        } else {
            String::new()
        }
    );
}

/// One line per election: changes, leaderless time, refusals.
fn summary(o: &mut String, r: &Report) {
    use std::fmt::Write;
    let _ = writeln!(o, "## Summary\n");
    let _ = writeln!(
        o,
        "| election | changes | leaderless total | longest leaderless | stretches | refusals |"
    );
    let _ = writeln!(o, "|---|---:|---:|---:|---:|---:|");
    for e in &r.elections {
        let _ = writeln!(
            o,
            "| {} | {} | {} | {} | {} | {}{} |",
            cell(&e.election),
            e.changes,
            leaderless_total(e),
            ms_or_unknown(e.longest_leaderless_ms),
            e.leaderless_stretches
                .map_or_else(|| "unknown".to_owned(), |n| n.to_string()),
            e.refusals.len(),
            if e.truncated { "+" } else { "" }
        );
    }
}

/// etcd's own events in the window.
fn etcd_events(o: &mut String, r: &Report) {
    use std::fmt::Write;
    let _ = writeln!(o, "\n## etcd events\n");
    if r.etcd_events.is_empty() {
        let _ = writeln!(o, "None recorded in the window.");
        return;
    }
    let _ = writeln!(o, "| seen at | happened after | type | what |");
    let _ = writeln!(o, "|---|---|---|---|");
    for e in &r.etcd_events {
        let _ = writeln!(
            o,
            "| {} | {} | {} | {} |",
            e.at,
            e.not_before.as_deref().unwrap_or("unknown"),
            e.kind,
            cell(&e.description)
        );
    }
}

/// One election's section: its leaderless time, terms and refusals.
fn election_section(o: &mut String, e: &ReportElection) {
    use std::fmt::Write;
    let _ = writeln!(o, "\n## {}\n", cell(&e.election));
    let _ = writeln!(
        o,
        "Changes: {}. Leaderless: {} in total, longest {}, {} stretch(es){}{}.\n",
        e.changes,
        leaderless_total(e),
        ms_or_unknown(e.longest_leaderless_ms),
        e.leaderless_stretches
            .map_or_else(|| "unknown".to_owned(), |n| n.to_string()),
        if e.replayed_boundaries > 0 {
            format!(
                " ({} start(s) and end(s) were replayed after a reconnect or a restart, \
                 not seen as they happened: their times are bounds)",
                e.replayed_boundaries
            )
        } else {
            String::new()
        },
        match (&e.known_since, e.truncated) {
            (_, true) => " (too many rows for one report: only the window's first terms \
                          and refusals are listed; narrow the window or the match)"
                .to_owned(),
            (Some(k), false) => format!(" (counted from {k}, the history's first term)"),
            (None, false) => " (no term known)".to_owned(),
        }
    );
    terms_table(o, e);
    refusals_table(o, e);
}

fn terms_table(o: &mut String, e: &ReportElection) {
    use std::fmt::Write;
    let _ = writeln!(o, "| holder | token | start | end | cause |");
    let _ = writeln!(o, "|---|---:|---|---|---|");
    for t in &e.terms {
        let _ = writeln!(
            o,
            "| {} | {} | {}{} | {} | {} |",
            cell(&t.holder),
            t.token,
            boundary(&t.start, t.start_replayed, t.start_not_before.as_deref()),
            if t.start_not_observed {
                " (or earlier)"
            } else {
                ""
            },
            t.end.as_deref().map_or_else(
                || "leading".to_owned(),
                |end| boundary(end, t.end_replayed, t.end_not_before.as_deref())
            ),
            t.cause.as_deref().unwrap_or("—")
        );
    }
}

fn refusals_table(o: &mut String, e: &ReportElection) {
    use std::fmt::Write;
    if e.refusals.is_empty() {
        return;
    }
    let _ = writeln!(
        o,
        "\n| refused at | resource | refused token | its holder | reason | after its term ended |"
    );
    let _ = writeln!(o, "|---|---|---:|---|---|---:|");
    for f in &e.refusals {
        let _ = writeln!(
            o,
            "| {} | {} | {} | {} | {} | {} |",
            f.at,
            cell(&f.resource),
            f.refused_token,
            f.refused_holder
                .as_deref()
                .map_or_else(|| "unknown".to_owned(), cell),
            f.reason,
            ms_or_unknown(f.after_term_end_ms)
        );
    }
}

/// The postmortem report of a window: per election its terms, leaderless
/// time, changes and refusals, and etcd's own events.
#[utoipa::path(get, path = "/api/v1/report", tag = "incident",
    params(ReportQuery),
    security((), ("read_token" = []), ("read_basic" = [])),
    responses(
        (status = 200, description = "The report", content(
            (Object = "application/json"), (String = "text/markdown"))),
        (status = 400, description = "`invalid_query` (a window backwards or over 31 days), `invalid_format`", body = crate::web::api::ErrorBody),
        (status = 401, description = "`--read-token` is set and not sent", body = crate::web::api::ErrorBody),
        (status = 500, description = "`history_error`", body = crate::web::api::ErrorBody),
    ))]
pub(super) async fn report(
    State(s): State<Arc<AppState>>,
    ApiQuery(q): ApiQuery<ReportQuery>,
) -> Result<Response, ApiError> {
    let now = now_ms();
    let format = q.format.as_deref().unwrap_or("md");
    if format != "md" && format != "json" {
        return Err(ApiError::new(
            StatusCode::BAD_REQUEST,
            "invalid_format",
            "format is md or json",
        ));
    }
    let glob = crate::web::within_cluster(q.cluster.as_deref(), q.glob.clone());
    let sel = select(q.from.as_deref(), q.to.as_deref(), glob.as_deref(), now)
        .map_err(|SelectError::Bad(m)| bad_request(m))?;
    let reader = s.history.clone();
    let state = s.clone();
    let cluster = q.cluster.clone();
    let w = tokio::task::spawn_blocking(move || {
        let mut w = load(&reader, &sel, 0, MAX_REPORT_ELECTIONS)?;
        if !state.clusters.is_empty() {
            w.add_cluster_marks(&reader)?;
        }
        let unwatched = state.unwatched();
        w.set_unwatched(|e| unwatched.of(e), unwatched.any());
        if let Some(c) = &cluster {
            // One cluster's report: its etcd events, and serve's own.
            w.cluster
                .retain(|e| e.cluster.as_deref().is_none_or(|of| of == c));
        }
        Ok::<_, crate::history::HistoryError>(w)
    })
    .await
    .map_err(|e| ApiError::new(StatusCode::INTERNAL_SERVER_ERROR, "internal", e.to_string()))??;
    let r = build_report(&w, now);
    if format == "json" {
        return Ok(Json(r).into_response());
    }
    Ok((
        [(header::CONTENT_TYPE, "text/markdown; charset=utf-8")],
        report_markdown(&r),
    )
        .into_response())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::history::window::Activity;
    use crate::web::incident::window::{Lane, Selection};
    use crate::web::replays::ReplayMark;

    fn term(token: i64, start: i64, end: Option<i64>) -> TermRow {
        TermRow {
            election: "e".into(),
            token,
            holder: format!("h{token}"),
            lease_id: 1,
            layout: None,
            started_at: format_ms(start),
            ended_at: end.map(format_ms),
            started_at_ms: start,
            ended_at_ms: end,
            started_revision: token,
            ended_revision: None,
            end_cause: None,
            from_snapshot: false,
            duration_seconds: None,
            duration_bounds_seconds: None,
            acting: Default::default(),
        }
    }

    fn window(lanes: Vec<Lane>) -> Window {
        Window {
            sel: Selection {
                from_ms: 0,
                to_ms: 100_000,
                glob: None,
            },
            total: lanes.len(),
            lanes,
            gaps: Vec::new(),
            replays: Vec::new(),
            cluster: Vec::new(),
            unwatched_since: None,
            clusters: Default::default(),
        }
    }

    #[test]
    fn replayed_handover_makes_leaderless_time_a_range_not_zero() {
        // The old term's end (revision 5) and the new term's start
        // (revision 6) arrived in one replay at 30 s, with the same arrival
        // time; nobody watched since 21 s.
        let mut old = term(1, 10_000, Some(30_000));
        old.ended_revision = Some(5);
        let new = term(6, 30_000, None);
        let lane = Lane {
            activity: Activity {
                election: "e".into(),
                ..Activity::default()
            },
            terms: vec![old, new],
            refusals: Vec::new(),
            known_since_ms: Some(10_000),
            truncated: false,
            unwatched_since: None,
        };
        let mut w = window(vec![lane.clone()]);
        let seen_live = build_report(&w, 200_000);
        assert_eq!(seen_live.elections[0].leaderless_ms, Some(0));
        w.replays.push(ReplayMark {
            at_ms: 30_000,
            from_revision: 5,
            to_revision: 6,
            since_ms: Some(21_000),
        });
        let r = build_report(&w, 200_000);
        let e = &r.elections[0];
        assert_eq!(e.leaderless_ms, None, "not 0 ms: unknown");
        assert_eq!(e.longest_leaderless_ms, None);
        assert_eq!(
            (e.leaderless_min_ms, e.leaderless_max_ms),
            (Some(0), Some(9_000))
        );
        assert_eq!(e.replayed_boundaries, 2);
        assert!(e.terms[0].end_replayed && e.terms[1].start_replayed);
        assert!(!e.terms[0].start_replayed);
        let md = report_markdown(&r);
        assert!(
            md.contains("| e | 0 | unknown (0–9000 ms) | unknown | unknown | 0 |"),
            "{md}"
        );
        assert!(md.contains("(replayed: between "), "{md}");
        // A replay at another arrival time is another batch: not these.
        w.replays[0].at_ms = 29_999;
        assert_eq!(
            build_report(&w, 200_000).elections[0].leaderless_ms,
            Some(0)
        );
        // Unknown since when: counted from the history's first term.
        w.replays[0] = ReplayMark {
            at_ms: 30_000,
            from_revision: 6,
            to_revision: 6,
            since_ms: None,
        };
        let e = &build_report(&w, 200_000).elections[0];
        assert_eq!(
            (e.leaderless_min_ms, e.leaderless_max_ms),
            (Some(0), Some(0))
        );
        assert_eq!(
            e.leaderless_ms,
            Some(0),
            "a start replayed alone cannot add leaderless time"
        );
    }

    #[test]
    fn leaderless_is_unknown_when_not_every_term_was_read_or_none_is_known() {
        let lane = |terms: Vec<TermRow>, known: Option<i64>, truncated: bool| Lane {
            activity: Activity {
                election: "e".into(),
                ..Activity::default()
            },
            terms,
            refusals: Vec::new(),
            known_since_ms: known,
            truncated,
            unwatched_since: None,
        };
        let terms = vec![term(1, 10_000, Some(20_000)), term(2, 25_000, None)];
        let full = build_report(
            &window(vec![lane(terms.clone(), Some(10_000), false)]),
            200_000,
        );
        let e = &full.elections[0];
        assert_eq!(e.leaderless_ms, Some(5_000));
        assert_eq!(e.longest_leaderless_ms, Some(5_000));
        assert_eq!(e.leaderless_stretches, Some(1));
        let cut = build_report(&window(vec![lane(terms, Some(10_000), true)]), 200_000);
        assert_eq!(cut.elections[0].leaderless_ms, None);
        let md = report_markdown(&cut);
        assert!(
            md.contains("| e | 0 | unknown | unknown | unknown | 0+ |"),
            "{md}"
        );
        let none = build_report(&window(vec![lane(Vec::new(), None, false)]), 200_000);
        assert_eq!(none.elections[0].leaderless_ms, None);
    }

    #[test]
    fn markdown_cells_cannot_break_the_table() {
        assert_eq!(cell("a|b\nc"), "a\\|b\\\\u{a}c");
        assert_eq!(cell("<script>"), "\\<script\\>");
        // Shown as `\u{1b}` where the Markdown is rendered.
        assert_eq!(cell("\0\u{1b}\u{202e}"), "\\\\u{0}\\\\u{1b}\\\\u{202e}");
    }
}
