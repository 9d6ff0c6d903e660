//! The pages (being written): overview and per-election timeline.

use std::sync::Arc;

use axum::Router;

use super::AppState;

pub fn router() -> Router<Arc<AppState>> {
    Router::new()
}
