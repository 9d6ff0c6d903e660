//! An election's recorded past: `GET …/terms`, `…/events` and `…/export`
//! (terms, events and refusals as JSON, or the terms as CSV, streamed).

use std::sync::Arc;

use axum::body::Body;
use axum::extract::State;
use axum::http::{header, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::Json;
use serde::{Deserialize, Serialize};
use serde_json::json;
use utoipa::{IntoParams, ToSchema};
use utoipa_axum::router::OpenApiRouter;
use utoipa_axum::routes;

use super::error::ErrorBody;
use super::extract::{ApiQuery, ElectionPath};
use super::schema::{self, NamePath};
use super::{blocking, ApiError};
use crate::events::now_ms;
use crate::history::{self, format_ms, parse_time, Query as HistoryQuery};
use crate::web::AppState;

pub(super) fn routes() -> OpenApiRouter<Arc<AppState>> {
    OpenApiRouter::new()
        .routes(routes!(terms))
        .routes(routes!(events))
        .routes(routes!(export))
}

/// The window of a read: what was recorded from `from` to `to`, at most
/// `limit` rows of each kind (the oldest first).
#[derive(Debug, Deserialize, IntoParams)]
#[into_params(parameter_in = Query)]
pub struct Window {
    /// From (RFC 3339, unix seconds, `now`, or a duration ago: `2h`).
    #[param(schema_with = schema::time)]
    from: Option<String>,
    /// To, in the same forms.
    #[param(schema_with = schema::time)]
    to: Option<String>,
    /// Rows of each kind.
    #[param(minimum = 0, maximum = 100000)]
    limit: Option<usize>,
}

/// The export's format.
#[derive(Debug, Deserialize, IntoParams)]
#[into_params(parameter_in = Query)]
pub(super) struct Format {
    /// `json` (terms, events, refusals) or `csv` (the terms).
    #[param(inline, value_type = Option<ExportFormat>)]
    format: Option<String>,
}

/// The formats of an export (any other is 400 `invalid_format`).
#[derive(ToSchema)]
#[serde(rename_all = "snake_case")]
#[allow(dead_code)]
pub(super) enum ExportFormat {
    Json,
    Csv,
}

/// An election's terms (newest last).
#[derive(Debug, Serialize, ToSchema)]
pub(super) struct Terms {
    terms: Vec<history::TermRow>,
}

/// An election's events, in recording order.
#[derive(Debug, Serialize, ToSchema)]
pub(super) struct Events {
    #[schema(value_type = Vec<EventDoc>)]
    events: Vec<crate::events::Event>,
}

/// One recorded event: `type` says which, and which fields follow
/// (`token`, `holder`, `cause`, …: docs/api.md).
#[derive(ToSchema)]
#[allow(dead_code)]
pub(super) struct EventDoc {
    revision: i64,
    at_ms: i64,
    election: String,
    /// `term_started`, `term_ended`, `fence_refused`, `gap`, `reset`, …
    #[schema(rename = "type")]
    kind: String,
}

impl Window {
    pub fn query(&self) -> Result<HistoryQuery, ApiError> {
        let t = |s: &Option<String>| s.as_deref().map(parse_time).transpose();
        if self.limit.is_some_and(|l| l > history::MAX_LIMIT) {
            return Err(ApiError::new(
                StatusCode::BAD_REQUEST,
                "invalid_limit",
                format!("limit is at most {}", history::MAX_LIMIT),
            ));
        }
        Ok(HistoryQuery {
            from_ms: t(&self.from)?,
            to_ms: t(&self.to)?,
            limit: self.limit,
        })
    }
}

/// The election's terms in the window, each with its holder's acting.
#[utoipa::path(get, path = "/api/v1/elections/{name}/terms", tag = "records",
    params(NamePath, Window),
    security((), ("read_token" = []), ("read_basic" = [])),
    responses(
        (status = 200, description = "The terms", body = Terms),
        (status = 400, description = "`invalid_name`, `invalid_time`, `invalid_limit`, `invalid_format`, `invalid_query`", body = ErrorBody),
        (status = 401, description = "`--read-token` is set and not sent", body = ErrorBody),
        (status = 500, description = "`history_error`", body = ErrorBody),
    ))]
pub(super) async fn terms(
    State(s): State<Arc<AppState>>,
    ApiQuery(w): ApiQuery<Window>,
    ElectionPath(name): ElectionPath,
) -> Result<Json<Terms>, ApiError> {
    let q = w.query()?;
    let reader = s.history.clone();
    let terms = blocking(move || reader.terms(name.as_str(), &q)).await?;
    Ok(Json(Terms { terms }))
}

/// The election's events in the window.
#[utoipa::path(get, path = "/api/v1/elections/{name}/events", tag = "records", operation_id = "election_events",
    params(NamePath, Window),
    security((), ("read_token" = []), ("read_basic" = [])),
    responses(
        (status = 200, description = "The events", body = Events),
        (status = 400, description = "`invalid_name`, `invalid_time`, `invalid_limit`, `invalid_format`, `invalid_query`", body = ErrorBody),
        (status = 401, description = "`--read-token` is set and not sent", body = ErrorBody),
        (status = 500, description = "`history_error`", body = ErrorBody),
    ))]
pub(super) async fn events(
    State(s): State<Arc<AppState>>,
    ApiQuery(w): ApiQuery<Window>,
    ElectionPath(name): ElectionPath,
) -> Result<Json<Events>, ApiError> {
    let q = w.query()?;
    let reader = s.history.clone();
    let events = blocking(move || reader.events(Some(name.as_str()), &q)).await?;
    Ok(Json(Events { events }))
}

/// Everything a postmortem needs for one election and window: terms,
/// events and refusals as JSON, or the terms as CSV.
#[utoipa::path(get, path = "/api/v1/elections/{name}/export", tag = "records",
    params(NamePath, Window, Format),
    security((), ("read_token" = []), ("read_basic" = [])),
    responses(
        (status = 200, description = "An attachment: `{election, from, to, exported_at, terms, events, refusals}` as JSON, or the terms as CSV",
            content((Object = "application/json"), (String = "text/csv"))),
        (status = 400, description = "`invalid_name`, `invalid_time`, `invalid_limit`, `invalid_format`, `invalid_query`", body = ErrorBody),
        (status = 401, description = "`--read-token` is set and not sent", body = ErrorBody),
        (status = 500, description = "`history_error`", body = ErrorBody),
    ))]
pub(super) async fn export(
    State(s): State<Arc<AppState>>,
    ApiQuery(w): ApiQuery<Window>,
    ApiQuery(f): ApiQuery<Format>,
    ElectionPath(name): ElectionPath,
) -> Result<Response, ApiError> {
    let mut q = w.query()?;
    q.limit = Some(w.limit.unwrap_or(history::MAX_LIMIT));
    let format = f.format.as_deref().unwrap_or("json");
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
            stream_csv(&send, &terms);
            return;
        }
        if !stream_head(&send, &n, &q) || !stream_array(&send, "terms", &terms) {
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

/// The terms as CSV in chunks of [`EXPORT_CHUNK_ROWS`] rows, the header
/// line once (alone when there are none); stops when the client went away.
fn stream_csv(send: &impl Fn(String) -> bool, terms: &[history::TermRow]) {
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
    if terms.is_empty() {
        send(history::terms_to_csv(&[]));
    }
}

/// The JSON export's opening: the election and its window, without the
/// closing brace (the arrays follow); `false` when the client went away.
fn stream_head(send: &impl Fn(String) -> bool, n: &str, q: &HistoryQuery) -> bool {
    let head = json!({
        "election": n,
        "from": q.from_ms.map(format_ms),
        "to": q.to_ms.map(format_ms),
        "exported_at": format_ms(now_ms()),
    });
    let mut head = head.to_string();
    head.pop();
    send(head)
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
