//! `GET /api/v1/cluster/events?from=&to=&limit=`: etcd's own events.

use std::sync::Arc;

use axum::extract::{Query as AxQuery, State};
use axum::http::StatusCode;
use axum::Json;
use serde::Deserialize;
use serde_json::json;

use crate::history::{parse_time, Query};
use crate::web::api::ApiError;
use crate::web::AppState;

#[derive(Debug, Deserialize)]
pub(super) struct EventsQuery {
    from: Option<String>,
    to: Option<String>,
    limit: Option<usize>,
}

pub(super) async fn cluster_events(
    State(s): State<Arc<AppState>>,
    AxQuery(q): AxQuery<EventsQuery>,
) -> Result<Json<serde_json::Value>, ApiError> {
    let t = |v: &Option<String>| v.as_deref().map(parse_time).transpose();
    let q = Query {
        from_ms: t(&q.from)?,
        to_ms: t(&q.to)?,
        limit: q.limit,
    };
    let reader = s.history.clone();
    let rows = tokio::task::spawn_blocking(move || reader.cluster_events(&q))
        .await
        .map_err(|e| {
            ApiError::new(StatusCode::INTERNAL_SERVER_ERROR, "internal", e.to_string())
        })??;
    Ok(Json(
        json!({ "events": rows, "limit": q.effective_limit() }),
    ))
}
