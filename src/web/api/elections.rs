//! `GET /api/v1/elections` (every election the history knows) and
//! `GET /api/v1/elections/{name}` (one election: etcd's leader, else the
//! history's).

use std::sync::Arc;

use axum::extract::State;
use axum::http::StatusCode;
use axum::routing::get;
use axum::{Json, Router};
use serde::Serialize;
use serde_json::{json, Value};

use super::extract::ElectionPath;
use super::{blocking, ApiError};
use crate::election::Leader;
use crate::events::now_ms;
use crate::history::{self, format_ms, HistoryError, Query as HistoryQuery};
use crate::web::AppState;

pub(super) fn routes() -> Router<Arc<AppState>> {
    Router::new()
        .route("/api/v1/elections", get(list))
        .route("/api/v1/elections/{name}", get(detail))
}

#[derive(Debug, Serialize)]
struct ElectionView {
    name: String,
    holder: Option<String>,
    token: Option<i64>,
    lease_id: Option<i64>,
    since: Option<String>,
    since_ms: Option<i64>,
    ttl_remaining_seconds: Option<i64>,
    changes_last_hour: usize,
    /// False when etcd did not answer: the rest comes from history.
    etcd_reachable: bool,
    /// Candidates queued behind the leader (queue layout), next first;
    /// `null` when etcd did not answer (only etcd knows them).
    waiting: Option<Vec<WaiterJson>>,
}

async fn list(State(s): State<Arc<AppState>>) -> Result<Json<Value>, ApiError> {
    let reader = s.history.clone();
    let hour_ago = now_ms() - 3_600_000;
    let rows = blocking(move || {
        let summaries = reader.elections()?;
        // One grouped query, not one per election.
        let changes_by = reader.changes_since(hour_ago)?;
        summaries
            .into_iter()
            .map(|e| {
                let changes = changes_by.get(&e.election).copied().unwrap_or(0);
                Ok(json!({
                    "name": e.election,
                    "holder": e.current.as_ref().map(|t| t.holder.clone()),
                    "token": e.current.as_ref().map(|t| t.token),
                    "lease_id": e.current.as_ref().map(|t| t.lease_id),
                    "since": e.current.as_ref().map(|t| format_ms(t.started_at_ms)),
                    "since_ms": e.current.as_ref().map(|t| t.started_at_ms),
                    "changes_last_hour": changes,
                    "refusals": e.refusals,
                }))
            })
            .collect::<Result<Vec<Value>, HistoryError>>()
    })
    .await?;
    Ok(Json(json!({ "elections": rows })))
}

async fn detail(
    State(s): State<Arc<AppState>>,
    ElectionPath(name): ElectionPath,
) -> Result<Json<ElectionView>, ApiError> {
    let live = s.client.leader(&name).await;
    let reader = s.history.clone();
    let n = name.to_string();
    let hour_ago = now_ms() - 3_600_000;
    let (open, changes, known) = blocking(move || {
        let q = HistoryQuery {
            from_ms: Some(hour_ago),
            to_ms: None,
            limit: Some(history::MAX_LIMIT),
        };
        let terms = reader.terms(&n, &q)?;
        let changes = terms
            .iter()
            .filter(|t| !t.from_snapshot && t.started_at_ms >= hour_ago)
            .count();
        let summary = reader.elections()?.into_iter().find(|e| e.election == n);
        let known = summary.is_some();
        Ok((summary.and_then(|e| e.current), changes, known))
    })
    .await?;
    let (leader, ttl, reachable, waiting): (
        Option<Leader>,
        Option<i64>,
        bool,
        Option<Vec<Leader>>,
    ) = match live {
        Ok(Some(st)) => (
            Some(st.leader),
            st.ttl_remaining_seconds,
            true,
            Some(st.waiting),
        ),
        Ok(None) => (None, None, true, Some(Vec::new())),
        // Only etcd knows who waits: unknown, not "nobody".
        Err(e) if e.is_unavailable() => (None, None, false, None),
        Err(e) => return Err(e.into()),
    };
    if reachable && leader.is_none() && !known {
        return Err(ApiError::new(
            StatusCode::NOT_FOUND,
            "unknown_election",
            format!("nobody leads {name} and tenure has no history of it"),
        ));
    }
    // Since: history's start of the same term, when it knows it.
    let since_ms = match (&leader, &open) {
        (Some(l), Some(o)) if o.token == l.token => Some(o.started_at_ms),
        (None, Some(o)) if !reachable => Some(o.started_at_ms),
        _ => None,
    };
    let from_history = !reachable;
    Ok(Json(ElectionView {
        name: name.to_string(),
        holder: leader.as_ref().map(|l| l.holder.clone()).or_else(|| {
            open.as_ref()
                .filter(|_| from_history)
                .map(|o| o.holder.clone())
        }),
        token: leader
            .as_ref()
            .map(|l| l.token)
            .or_else(|| open.as_ref().filter(|_| from_history).map(|o| o.token)),
        lease_id: leader
            .as_ref()
            .map(|l| l.lease_id)
            .or_else(|| open.as_ref().filter(|_| from_history).map(|o| o.lease_id)),
        since: since_ms.map(format_ms),
        since_ms,
        ttl_remaining_seconds: ttl,
        changes_last_hour: changes,
        etcd_reachable: reachable,
        waiting: waiting.map(|w| {
            w.into_iter()
                .map(|c| WaiterJson {
                    holder: c.holder,
                    token: c.token,
                    key: c.key,
                })
                .collect()
        }),
    }))
}

/// A candidate queued behind the leader, as the API shows it.
#[derive(Debug, Serialize)]
struct WaiterJson {
    holder: String,
    token: i64,
    key: String,
}
