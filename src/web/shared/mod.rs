//! What every HTML page shares, whichever view it belongs to (the pages
//! and the incident view both import it, and it imports neither): the
//! head, rendering, the error page, static assets and headers, URL coding,
//! the name glob, the cluster marks both timelines draw, and their default
//! window fitted to what was recorded.

pub(crate) mod assets;
mod error;
pub(crate) mod fit;
pub(crate) mod glob;
pub(crate) mod marks;
pub(crate) mod urls;

use askama::Template;
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};

use super::AppState;
use crate::history::short_time;

pub(in crate::web) use error::error_page;

/// What the header of every page shows.
pub(in crate::web) struct Head {
    pub(in crate::web) title: String,
    pub(in crate::web) css: String,
    pub(in crate::web) js: String,
    /// Whether every feed's source answered its watcher last time.
    pub(in crate::web) up: bool,
    /// What answers: `etcd`, `Kubernetes API`, or (several clusters of
    /// both kinds) `every cluster` (`a cluster`, when one does not).
    pub(in crate::web) source: &'static str,
    /// What `revision` counts: `rev` (etcd), `resourceVersion` (the
    /// Kubernetes API), or `at` (several clusters of both kinds).
    pub(in crate::web) revision_word: &'static str,
    /// The last revision processed: with several clusters, each's (`a 12 · b 34`).
    pub(in crate::web) revision: String,
    pub(in crate::web) rendered_at: String,
    /// The server's clock (unix ms), so the script's counters do not
    /// depend on the browser's clock being right.
    pub(in crate::web) now_ms: i64,
}

impl Head {
    pub(in crate::web) fn new(state: &AppState, title: String, now: i64) -> Self {
        // Several clusters: up when every one is.
        let up = state.readiness.etcd_up() && state.clusters.iter().all(|c| c.readiness.etcd_up());
        let (source, revision_word) = Self::source(state, up);
        Head {
            title,
            css: assets::css_href(),
            js: assets::js_href(),
            up,
            source,
            revision_word,
            revision: if state.clusters.is_empty() {
                state.readiness.revision().to_string()
            } else {
                state
                    .clusters
                    .iter()
                    .map(|c| format!("{} {}", c.name, c.readiness.revision()))
                    .collect::<Vec<_>>()
                    .join(" · ")
            },
            rendered_at: short_time(now)[..19].to_owned(),
            now_ms: now,
        }
    }

    /// What the feeds read, and what their positions are called: a feed of
    /// the Kubernetes API has no etcd and no revision of its own to name.
    fn source(state: &AppState, up: bool) -> (&'static str, &'static str) {
        let mut sources = state.clusters.iter().map(|c| c.readiness.source());
        let first = sources.next().unwrap_or(state.readiness.source());
        match first {
            _ if sources.any(|s| s != first) => {
                (if up { "every cluster" } else { "a cluster" }, "at")
            }
            "etcd" => ("etcd", "rev"),
            _ => ("Kubernetes API", "resourceVersion"),
        }
    }
}

/// A page as HTML with the pages' headers, or a plain 500 when the
/// template fails.
pub(in crate::web) fn render<T: Template>(status: StatusCode, page: &T) -> Response {
    match page.render() {
        Ok(body) => assets::html(status, body),
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
