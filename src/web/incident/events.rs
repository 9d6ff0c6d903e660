//! `GET /api/v1/cluster/events?from=&to=&limit=`: etcd's own events.

use std::sync::Arc;

use axum::extract::State;
use axum::http::StatusCode;
use axum::Json;
use serde::Serialize;
use utoipa::ToSchema;

use crate::web::api::{ApiError, ApiQuery, ErrorBody, Window};
use crate::web::AppState;

/// etcd's own events in the window (`from`, `to`, `limit` as an
/// election's records take them), with the limit applied.
#[derive(Debug, Serialize, ToSchema)]
pub(super) struct ClusterEvents {
    /// Each with `at_ms` (when tenure saw it), `not_before_ms` (after which
    /// it happened; `null`: unknown), `kind` and what it says.
    #[schema(value_type = Vec<Object>)]
    events: Vec<crate::events::cluster::ClusterEvent>,
    limit: usize,
}

#[utoipa::path(get, path = "/api/v1/cluster/events", tag = "incident",
    params(Window),
    security((), ("read_token" = []), ("read_basic" = [])),
    responses(
        (status = 200, description = "etcd's own events", body = ClusterEvents),
        (status = 400, description = "`invalid_time`, `invalid_limit`, `invalid_query`", body = ErrorBody),
        (status = 401, description = "`--read-token` is set and not sent", body = ErrorBody),
        (status = 500, description = "`history_error`", body = ErrorBody),
    ))]
pub(super) async fn cluster_events(
    State(s): State<Arc<AppState>>,
    ApiQuery(w): ApiQuery<Window>,
) -> Result<Json<ClusterEvents>, ApiError> {
    let q = w.query()?;
    let reader = s.history.clone();
    let rows = tokio::task::spawn_blocking(move || reader.cluster_events(&q))
        .await
        .map_err(|e| {
            ApiError::new(StatusCode::INTERNAL_SERVER_ERROR, "internal", e.to_string())
        })??;
    Ok(Json(ClusterEvents {
        events: rows,
        limit: q.effective_limit(),
    }))
}
