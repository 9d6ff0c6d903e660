//! The JSON API under `/api/v1`. Errors are `{"error":{"code","message",…}}`
//! with the right status. Mutating calls need `Authorization: Bearer
//! <token>`; names are validated; bodies are size-limited; campaigns are
//! rate-limited so etcd's write rate stays bounded.
//!
//! Files: `error.rs` (ApiError and the mapping of the library's errors),
//! `extract.rs` (JSON body, election name), `auth.rs` (the bearer token,
//! the `Mutation` extractor of the mutating calls), `origin.rs` (their
//! Host and Origin: no DNS rebinding), `limit.rs` (the
//! campaign rate limit), `trace.rs` (request spans), `schema.rs` (the
//! names', times' and resources' grammar as JSON Schema), and the handlers
//! by resource: `elections.rs` (list, detail), `leadership.rs` (campaign,
//! renew, resign, fence), `records.rs` (terms, events, export). Each
//! handler states its parameters, bodies, statuses and credential in its
//! `#[utoipa::path]`; [`routes`] collects them with the routes, so the
//! OpenAPI document (`web::openapi`) lists exactly what is served.

mod auth;
mod elections;
mod error;
mod extract;
mod leadership;
mod limit;
mod origin;
mod records;
pub mod schema;
mod trace;

use std::sync::Arc;

use axum::http::StatusCode;
use axum::routing::get;
use axum::Router;
use utoipa_axum::router::OpenApiRouter;

use super::AppState;
use crate::history::HistoryError;

pub use auth::guard_reads;
pub use error::{ApiError, ErrorBody};
pub use extract::{ApiQuery, JsonBody};
pub use limit::RateLimiter;
pub use origin::AllowedHost;
pub use records::Window;
pub use trace::trace_requests;

/// The API's routes with their documentation.
pub fn routes() -> OpenApiRouter<Arc<AppState>> {
    OpenApiRouter::new()
        .merge(elections::routes())
        .merge(leadership::routes())
        .merge(records::routes())
}

/// Anything else under `/api/v1`: 404 `not_found`, in the API's body.
pub fn fallback() -> Router<Arc<AppState>> {
    Router::new().route("/api/v1/{*rest}", get(not_found).post(not_found))
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
