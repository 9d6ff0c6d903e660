//! An election's recorded past: `GET …/terms`, `…/events` and `…/export`
//! (terms, events and refusals as JSON, or the terms as CSV, streamed).

use std::sync::Arc;

use axum::body::Body;
use axum::extract::{Query, State};
use axum::http::{header, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use axum::{Json, Router};
use serde::{Deserialize, Serialize};
use serde_json::{json, Value};

use super::extract::ElectionPath;
use super::{blocking, ApiError};
use crate::events::now_ms;
use crate::history::{self, format_ms, parse_time, Query as HistoryQuery};
use crate::web::AppState;

pub(super) fn routes() -> Router<Arc<AppState>> {
    Router::new()
        .route("/api/v1/elections/{name}/terms", get(terms))
        .route("/api/v1/elections/{name}/events", get(events))
        .route("/api/v1/elections/{name}/export", get(export))
}

#[derive(Debug, Deserialize)]
pub(super) struct Window {
    from: Option<String>,
    to: Option<String>,
    limit: Option<usize>,
    format: Option<String>,
}

impl Window {
    fn query(&self) -> Result<HistoryQuery, ApiError> {
        let t = |s: &Option<String>| s.as_deref().map(parse_time).transpose();
        Ok(HistoryQuery {
            from_ms: t(&self.from)?,
            to_ms: t(&self.to)?,
            limit: self.limit,
        })
    }
}

async fn terms(
    State(s): State<Arc<AppState>>,
    Query(w): Query<Window>,
    ElectionPath(name): ElectionPath,
) -> Result<Json<Value>, ApiError> {
    let q = w.query()?;
    let reader = s.history.clone();
    let rows = blocking(move || reader.terms(name.as_str(), &q)).await?;
    Ok(Json(json!({ "terms": rows })))
}

async fn events(
    State(s): State<Arc<AppState>>,
    Query(w): Query<Window>,
    ElectionPath(name): ElectionPath,
) -> Result<Json<Value>, ApiError> {
    let q = w.query()?;
    let reader = s.history.clone();
    let rows = blocking(move || reader.events(Some(name.as_str()), &q)).await?;
    Ok(Json(json!({ "events": rows })))
}

/// Everything a postmortem needs for one election and window: terms,
/// events and refusals as JSON, or the terms as CSV.
async fn export(
    State(s): State<Arc<AppState>>,
    Query(w): Query<Window>,
    ElectionPath(name): ElectionPath,
) -> Result<Response, ApiError> {
    let mut q = w.query()?;
    q.limit = Some(w.limit.unwrap_or(history::MAX_LIMIT));
    let format = w.format.as_deref().unwrap_or("json");
    if format != "json" && format != "csv" {
        return Err(ApiError::new(
            StatusCode::BAD_REQUEST,
            "invalid_format",
            "format is json or csv",
        ));
    }
    let reader = s.history.clone();
    let n = name.to_string();
    let stem = format!("tenure-{}", name.as_str().replace('/', "_"));
    let csv = format == "csv";
    let (content_type, file) = if csv {
        ("text/csv; charset=utf-8", format!("{stem}-terms.csv"))
    } else {
        ("application/json", format!("{stem}.json"))
    };
    // The terms first, on a blocking thread: an error is still a status.
    let terms = {
        let (reader, n, q) = (reader.clone(), n.clone(), q);
        blocking(move || reader.terms(&n, &q)).await?
    };
    // Then streamed in chunks of EXPORT_CHUNK_ROWS rows, serialized on a
    // blocking thread as the client reads: never one string of every row.
    let (tx, rx) = tokio::sync::mpsc::channel::<Result<String, std::io::Error>>(4);
    tokio::task::spawn_blocking(move || {
        let send = |chunk: String| tx.blocking_send(Ok(chunk)).is_ok();
        let fail = |e: String| {
            let _ = tx.blocking_send(Err(std::io::Error::other(e)));
        };
        if csv {
            for (i, rows) in terms.chunks(EXPORT_CHUNK_ROWS).enumerate() {
                let mut text = history::terms_to_csv(rows);
                if i > 0 {
                    // Only the first chunk keeps the header line.
                    let body = text.find('\n').map_or(0, |p| p + 1);
                    text.drain(..body);
                }
                if !send(text) {
                    return;
                }
            }
            if terms.is_empty() && !send(history::terms_to_csv(&[])) {
                return;
            }
            return;
        }
        let head = json!({
            "election": n,
            "from": q.from_ms.map(format_ms),
            "to": q.to_ms.map(format_ms),
            "exported_at": format_ms(now_ms()),
        });
        let mut head = head.to_string();
        head.pop(); // the closing brace: the arrays follow
        if !send(head) {
            return;
        }
        if !stream_array(&send, "terms", &terms) {
            return;
        }
        drop(terms);
        match reader.events(Some(&n), &q) {
            Ok(events) => {
                if !stream_array(&send, "events", &events) {
                    return;
                }
            }
            Err(e) => return fail(e.to_string()),
        }
        match reader.refusals(Some(&n), &q) {
            Ok(refusals) => {
                if !stream_array(&send, "refusals", &refusals) {
                    return;
                }
            }
            Err(e) => return fail(e.to_string()),
        }
        send("}\n".to_owned());
    });
    let body = futures_util::stream::unfold(rx, |mut rx| async move {
        rx.recv().await.map(|chunk| (chunk, rx))
    });
    Ok((
        [
            (header::CONTENT_TYPE, content_type.to_owned()),
            (
                header::CONTENT_DISPOSITION,
                format!("attachment; filename=\"{file}\""),
            ),
        ],
        Body::from_stream(body),
    )
        .into_response())
}

/// Rows per chunk of a streamed export.
const EXPORT_CHUNK_ROWS: usize = 500;

/// `,"key":[row,row,…]` in chunks of [`EXPORT_CHUNK_ROWS`] rows; `false`
/// when the client went away.
fn stream_array<T: Serialize>(send: &impl Fn(String) -> bool, key: &str, rows: &[T]) -> bool {
    let mut chunk = format!(",\"{key}\":[");
    for (i, row) in rows.iter().enumerate() {
        if i > 0 {
            chunk.push(',');
        }
        match serde_json::to_string(row) {
            Ok(s) => chunk.push_str(&s),
            Err(e) => {
                tracing::warn!(error = %e, "export: a row did not serialize; skipped");
                chunk.push_str("null");
            }
        }
        if (i + 1) % EXPORT_CHUNK_ROWS == 0 && !send(std::mem::take(&mut chunk)) {
            return false;
        }
    }
    chunk.push(']');
    send(chunk)
}
