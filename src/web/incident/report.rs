//! The postmortem report of a window: built from a
//! [`Window`](super::Window), written as Markdown, and
//! `GET /api/v1/report?from=&to=&match=&format=md|json`.
//!
//! By job, in `report/`: `build.rs` (the report built from a window:
//! terms, leaderless time, refusals, etcd's events), `markdown.rs` (the
//! report as Markdown), `tests.rs`; here its types and its handler.

use std::sync::Arc;

use axum::extract::State;
use axum::http::{header, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::Json;
use serde::{Deserialize, Serialize};

use super::window::{load, select, SelectError};
use super::{bad_request, MAX_REPORT_ELECTIONS};
use crate::events::acting::ActingView;
use crate::events::cluster::ClusterEvent;
use crate::events::now_ms;
use crate::web::api::{ApiError, ApiQuery};
use crate::web::AppState;

mod build;
mod markdown;

pub use build::{build_report, leaderless_stretches};
pub use markdown::report_markdown;

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
mod tests;
