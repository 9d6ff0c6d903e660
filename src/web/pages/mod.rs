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
//! - History queries run on blocking threads; a page never fails because
//!   etcd is down (see `election.rs`).
//!
//! Files: `assets.rs` (static assets, the HTML headers and CSP), `urls.rs`
//! (URL and query coding), `error.rs` (the error page), `overview.rs`,
//! `election.rs` (the timeline page's query, window and history),
//! `election_view.rs` (what that page shows, built from what was loaded).

mod assets;
mod election;
mod election_view;
mod error;
mod overview;
pub(crate) mod urls;

use std::sync::Arc;

use askama::Template;
use axum::http::StatusCode;
use axum::response::{IntoResponse, Redirect, Response};
use axum::routing::get;
use axum::Router;

use super::AppState;
use crate::history::{format_duration_ms, short_time};

pub use election::{
    DEFAULT_ROWS, DEFAULT_WINDOW_MS, ETCD_WAIT, MAX_ROWS, MIN_DEFAULT_WINDOW_MS, STALE_PAD,
};
pub use election_view::render_svg;
pub(super) use error::error_page;
pub use overview::{OVERVIEW_MAX_PAGE, OVERVIEW_PAGE};
pub(super) use urls::decode_component;
pub use urls::{election_href, encode_component};

pub fn router() -> Router<Arc<AppState>> {
    Router::new()
        .route("/", get(overview::overview))
        .route("/elections", get(|| async { Redirect::to("/") }))
        .route("/elections/", get(|| async { Redirect::to("/") }))
        // One percent-encoded segment (`team%2Fdb`); the catch-all also
        // takes `team/db` typed by hand. Both arrive decoded.
        .route("/elections/{*name}", get(election::election_page))
        .route("/static/app.css", get(assets::css))
        .route("/static/live.js", get(assets::js))
}

/// What the header of every page shows.
pub(super) struct Head {
    pub(super) title: String,
    pub(super) css: String,
    pub(super) js: String,
    pub(super) etcd_up: bool,
    pub(super) revision: i64,
    pub(super) rendered_at: String,
    /// The server's clock (unix ms), so the script's counters do not
    /// depend on the browser's clock being right.
    pub(super) now_ms: i64,
}

impl Head {
    pub(super) fn new(state: &AppState, title: String, now: i64) -> Self {
        Head {
            title,
            css: assets::css_href(),
            js: assets::js_href(),
            etcd_up: state.readiness.etcd_up(),
            revision: state.readiness.revision(),
            rendered_at: short_time(now)[..19].to_owned(),
            now_ms: now,
        }
    }
}

/// A page as HTML with the pages' headers, or a plain 500 when the
/// template fails.
pub(super) fn render<T: Template>(status: StatusCode, page: &T) -> Response {
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

/// `text` ago, for "last event 5m 02s ago".
fn ago(now: i64, then: i64) -> String {
    format!("{} ago", format_duration_ms(now - then))
}
