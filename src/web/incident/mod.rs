//! The incident view: every election on one timeline with etcd's
//! own events beside them, and the postmortem report.
//!
//! - `GET /timeline?from=&to=&match=GLOB&page=N&per_page=N`: one lane per
//!   election that had a term or a refusal in the window (with `match`:
//!   those whose name matches, active or not), busiest on top, paged
//!   ([`DEFAULT_LANES`] a page, at most [`MAX_LANES_PER_PAGE`]). Each lane
//!   is laid out by [`timeline::layout`](super::timeline::layout) (the
//!   per-election page's code) and flattened into one row. Live like the
//!   other pages (`data-live`).
//! - `GET /api/v1/cluster/events?from=&to=&limit=`: etcd's own events.
//! - `GET /api/v1/report?from=&to=&match=&format=md|json`: the postmortem
//!   report of the window, at most [`MAX_REPORT_ELECTIONS`] elections (the
//!   busiest; the report says when more were left out).
//!
//! Bounded cost: the window's activity is one grouped query per table; terms
//! and refusals are read only for the lanes of the page (or the report's
//! elections), each capped at the history's row limit.
//!
//! By job: [`window`] (the filter and the window's load from the history),
//! [`drawing`] (every lane laid out in one row, and its SVG), `page` (the
//! `/timeline` page), `events` (the cluster events API), [`report`] (the
//! postmortem report: built, as Markdown, and its handler).

use std::sync::Arc;

use axum::http::StatusCode;
use axum::routing::get;
use axum::Router;
use utoipa_axum::router::OpenApiRouter;
use utoipa_axum::routes;

use super::api::ApiError;
use super::AppState;

pub mod drawing;
mod events;
mod page;
pub mod report;
pub mod window;

pub use crate::web::replays::ReplayMark;
pub use crate::web::shared::glob::glob_match;
pub use crate::web::shared::marks::{cluster_markers, cluster_title, not_watched_text};
pub use drawing::{layout, render_svg, ClusterMark, Drawing, Row};
pub use report::{
    build_report, leaderless_stretches, report_markdown, Report, ReportClusterEvent,
    ReportElection, ReportRefusal, ReportTerm,
};
pub use window::{load, Lane, SelectError, Selection, Window, LOAD_BUDGET};

/// Lanes per page unless `per_page` says otherwise.
pub const DEFAULT_LANES: usize = 100;
/// The most lanes one page draws.
pub const MAX_LANES_PER_PAGE: usize = 1000;
/// The most elections one report covers.
pub const MAX_REPORT_ELECTIONS: usize = 1000;
/// The longest window one request may ask for (bounded cost).
pub const MAX_WINDOW_MS: i64 = 31 * 86_400_000;

pub fn router() -> Router<Arc<AppState>> {
    Router::new().route("/timeline", get(page::timeline_page))
}

/// The JSON routes, with their documentation (`web::openapi`).
pub fn api_routes() -> OpenApiRouter<Arc<AppState>> {
    OpenApiRouter::new()
        .routes(routes!(events::cluster_events))
        .routes(routes!(report::report))
}

pub(super) fn bad_request(m: String) -> ApiError {
    ApiError::new(StatusCode::BAD_REQUEST, "invalid_query", m)
}
