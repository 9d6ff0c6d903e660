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
//! Files: `overview.rs`, `election.rs` (the timeline page's query, window
//! and history), `election_view.rs` (what that page shows, built from what
//! was loaded), `election_rows.rs` (that page's table rows), `renewals.rs` (a Kubernetes Lease's renewals on it). The frame every HTML page shares (head, render, error page,
//! assets, URL coding) is `web/shared/`, which `/timeline` uses too.

mod election;
mod election_input;
mod election_rows;
mod election_view;
mod members;
mod overview;
mod renewals;
pub(crate) use super::shared::urls;

use std::sync::Arc;

use axum::response::Redirect;
use axum::routing::get;
use axum::Router;

use super::shared::{assets, render, Head};
use super::AppState;
use crate::history::format_duration_ms;

pub use super::shared::urls::{election_href, encode_component};
pub use election::{
    DEFAULT_ROWS, DEFAULT_WINDOW_MS, ETCD_WAIT, MAX_ROWS, MIN_DEFAULT_WINDOW_MS, STALE_PAD,
};
pub use election_view::render_svg;
pub use overview::{OVERVIEW_MAX_PAGE, OVERVIEW_PAGE};

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

/// `text` ago, for "last event 5m 02s ago".
fn ago(now: i64, then: i64) -> String {
    format!("{} ago", format_duration_ms(now - then))
}
