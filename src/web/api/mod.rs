//! The JSON API under `/api/v1`. Errors are `{"error":{"code","message",…}}`
//! with the right status. Mutating calls need `Authorization: Bearer
//! <token>`; names are validated; bodies are size-limited; campaigns are
//! rate-limited so etcd's write rate stays bounded.
//!
//! Files: `error.rs` (ApiError and the mapping of the library's errors),
//! `extract.rs` (JSON body, election name), `auth.rs` (the bearer token,
//! the `Mutation` extractor of the mutating calls), `limit.rs` (the
//! campaign rate limit), `trace.rs` (request spans), and the handlers by
//! resource: `elections.rs` (list, detail), `leadership.rs` (campaign,
//! renew, resign, fence), `records.rs` (terms, events, export).

mod auth;
mod elections;
mod error;
mod extract;
mod leadership;
mod limit;
mod records;
mod trace;

use std::sync::Arc;

use axum::http::StatusCode;
use axum::routing::get;
use axum::Router;

use super::AppState;
use crate::history::HistoryError;

pub use auth::guard_reads;
pub use error::ApiError;
pub use extract::JsonBody;
pub use limit::RateLimiter;
pub use trace::trace_requests;

pub fn router() -> Router<Arc<AppState>> {
    Router::new()
        .merge(elections::routes())
        .merge(leadership::routes())
        .merge(records::routes())
        .route("/api/v1/{*rest}", get(not_found).post(not_found))
}

async fn not_found() -> ApiError {
    ApiError::new(
        StatusCode::NOT_FOUND,
        "not_found",
        "no such route; the API is under /api/v1",
    )
}

/// Runs a history query off the async threads.
async fn blocking<T: Send + 'static>(
    f: impl FnOnce() -> Result<T, HistoryError> + Send + 'static,
) -> Result<T, ApiError> {
    tokio::task::spawn_blocking(f)
        .await
        .map_err(|e| ApiError::new(StatusCode::INTERNAL_SERVER_ERROR, "internal", e.to_string()))?
        .map_err(ApiError::from)
}
