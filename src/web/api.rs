//! The JSON API under `/api/v1`. Errors are `{"error":{"code","message",…}}`
//! with the right status. Mutating calls need `Authorization: Bearer
//! <token>`; names are validated; bodies are size-limited; campaigns are
//! rate-limited so etcd's write rate stays bounded.

use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use axum::body::Body;
use axum::extract::rejection::JsonRejection;
use axum::extract::{FromRequest, Path, Query, Request, State};
use axum::http::{header, HeaderMap, StatusCode};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use axum::{Json, Router};
use serde::de::DeserializeOwned;
use serde::{Deserialize, Serialize};
use serde_json::{json, Value};

use super::{AppState, Auth};
use crate::election::{ElectionName, Error as ElectionError, Leader, Ttl};
use crate::events::now_ms;
use crate::history::{self, format_ms, parse_time, HistoryError, Query as HistoryQuery};

/// An API error: status, a stable code, a message that says what to do.
#[derive(Debug)]
pub struct ApiError {
    pub status: StatusCode,
    pub code: &'static str,
    pub message: String,
    pub extra: Option<Value>,
}

impl ApiError {
    pub fn new(status: StatusCode, code: &'static str, message: impl Into<String>) -> Self {
        Self {
            status,
            code,
            message: message.into(),
            extra: None,
        }
    }

    fn with(mut self, extra: Value) -> Self {
        self.extra = Some(extra);
        self
    }
}

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        let mut error = json!({ "code": self.code, "message": self.message });
        if let (Some(Value::Object(extra)), Some(obj)) = (self.extra, error.as_object_mut()) {
            obj.extend(extra);
        }
        let mut resp = (self.status, Json(json!({ "error": error }))).into_response();
        if self.status == StatusCode::UNAUTHORIZED {
            resp.headers_mut().insert(
                header::WWW_AUTHENTICATE,
                header::HeaderValue::from_static("Bearer"),
            );
        }
        resp
    }
}

impl From<ElectionError> for ApiError {
    fn from(e: ElectionError) -> Self {
        let msg = e.to_string();
        match e {
            ElectionError::InvalidName { .. } => {
                ApiError::new(StatusCode::BAD_REQUEST, "invalid_name", msg)
            }
            ElectionError::InvalidResource { .. } => {
                ApiError::new(StatusCode::BAD_REQUEST, "invalid_resource", msg)
            }
            ElectionError::InvalidCandidate(_) => {
                ApiError::new(StatusCode::BAD_REQUEST, "invalid_candidate", msg)
            }
            ElectionError::InvalidToken(_) => {
                ApiError::new(StatusCode::BAD_REQUEST, "invalid_token", msg)
            }
            ElectionError::InvalidTtl(_) => {
                ApiError::new(StatusCode::BAD_REQUEST, "invalid_ttl", msg)
            }
            ElectionError::NotHolder { current, .. } => {
                ApiError::new(StatusCode::CONFLICT, "not_holder", msg)
                    .with(json!({ "current": current }))
            }
            ElectionError::Timeout { .. } => ApiError::new(StatusCode::CONFLICT, "held", msg),
            e if e.is_unavailable() => ApiError::new(
                StatusCode::SERVICE_UNAVAILABLE,
                "etcd_unavailable",
                format!("{msg}; nothing was changed, retry later (history is still served)"),
            ),
            _ => ApiError::new(StatusCode::BAD_GATEWAY, "etcd_error", msg),
        }
    }
}

impl From<HistoryError> for ApiError {
    fn from(e: HistoryError) -> Self {
        match e {
            HistoryError::InvalidTime(_) => {
                ApiError::new(StatusCode::BAD_REQUEST, "invalid_time", e.to_string())
            }
            e => ApiError::new(
                StatusCode::INTERNAL_SERVER_ERROR,
                "history_error",
                e.to_string(),
            ),
        }
    }
}

/// A JSON body whose rejections (too large, not JSON, wrong fields) are
/// API errors with the right status.
pub struct JsonBody<T>(pub T);

impl<S, T> FromRequest<S> for JsonBody<T>
where
    T: DeserializeOwned,
    S: Send + Sync,
{
    type Rejection = ApiError;

    async fn from_request(req: Request, state: &S) -> Result<Self, Self::Rejection> {
        match Json::<T>::from_request(req, state).await {
            Ok(Json(v)) => Ok(JsonBody(v)),
            Err(rejection) => Err(json_rejection(rejection)),
        }
    }
}

fn json_rejection(r: JsonRejection) -> ApiError {
    let status = r.status();
    let code = match status {
        StatusCode::PAYLOAD_TOO_LARGE => "body_too_large",
        StatusCode::UNSUPPORTED_MEDIA_TYPE => "unsupported_media_type",
        _ => "invalid_body",
    };
    let hint = if status == StatusCode::UNSUPPORTED_MEDIA_TYPE {
        " (send Content-Type: application/json)"
    } else {
        ""
    };
    ApiError::new(status, code, format!("{}{hint}", r.body_text()))
}

/// A global token bucket: campaigns beyond the rate get 429.
pub struct RateLimiter {
    per_second: f64,
    state: Mutex<(f64, Instant)>,
}

impl RateLimiter {
    pub fn new(per_second: u32) -> Self {
        let per_second = f64::from(per_second.max(1));
        Self {
            per_second,
            state: Mutex::new((per_second, Instant::now())),
        }
    }

    /// Takes one token; `Err(retry_after)` when none is left.
    pub fn take(&self) -> Result<(), Duration> {
        let mut s = self.state.lock().unwrap_or_else(|p| p.into_inner());
        let now = Instant::now();
        let refill = now.duration_since(s.1).as_secs_f64() * self.per_second;
        s.0 = (s.0 + refill).min(self.per_second);
        s.1 = now;
        if s.0 >= 1.0 {
            s.0 -= 1.0;
            Ok(())
        } else {
            Err(Duration::from_secs_f64((1.0 - s.0) / self.per_second))
        }
    }
}

pub fn router() -> Router<Arc<AppState>> {
    Router::new()
        .route("/api/v1/elections", get(list))
        .route("/api/v1/elections/{name}", get(detail))
        .route("/api/v1/elections/{name}/campaign", post(campaign))
        .route("/api/v1/elections/{name}/renew", post(renew))
        .route("/api/v1/elections/{name}/resign", post(resign))
        .route("/api/v1/elections/{name}/fence", post(fence))
        .route("/api/v1/elections/{name}/terms", get(terms))
        .route("/api/v1/elections/{name}/events", get(events))
        .route("/api/v1/elections/{name}/export", get(export))
        .route("/api/v1/{*rest}", get(not_found).post(not_found))
}

async fn not_found() -> ApiError {
    ApiError::new(
        StatusCode::NOT_FOUND,
        "not_found",
        "no such route; the API is under /api/v1",
    )
}

pub(crate) fn election_name(raw: &str) -> Result<ElectionName, ApiError> {
    Ok(ElectionName::new(raw)?)
}

/// Checks the bearer token in constant time.
fn authorize(state: &AppState, headers: &HeaderMap) -> Result<(), ApiError> {
    match &state.auth {
        Auth::Open => Ok(()),
        Auth::Disabled => Err(ApiError::new(
            StatusCode::FORBIDDEN,
            "api_disabled",
            "mutating calls are disabled: start tenure serve with --api-token TOKEN (or TENURE_API_TOKEN) \
             and send Authorization: Bearer TOKEN, or with --no-auth on a trusted network",
        )),
        Auth::Token(expected) => {
            let given = headers
                .get(header::AUTHORIZATION)
                .and_then(|v| v.to_str().ok())
                .and_then(|v| v.strip_prefix("Bearer "))
                .map(str::trim);
            match given {
                None => Err(ApiError::new(
                    StatusCode::UNAUTHORIZED,
                    "unauthorized",
                    "missing credentials: send Authorization: Bearer <api token>",
                )),
                Some(g) if constant_time_eq(g.as_bytes(), expected.as_bytes()) => Ok(()),
                Some(_) => Err(ApiError::new(StatusCode::UNAUTHORIZED, "unauthorized", "invalid API token")),
            }
        }
    }
}

fn constant_time_eq(a: &[u8], b: &[u8]) -> bool {
    let mut diff = a.len() ^ b.len();
    for i in 0..a.len().max(b.len()) {
        diff |= usize::from(a.get(i).copied().unwrap_or(0) ^ b.get(i).copied().unwrap_or(0xff));
    }
    diff == 0
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
}

async fn list(State(s): State<Arc<AppState>>) -> Result<Json<Value>, ApiError> {
    let reader = s.history.clone();
    let hour_ago = now_ms() - 3_600_000;
    let rows = blocking(move || {
        let summaries = reader.elections()?;
        let q = HistoryQuery {
            from_ms: Some(hour_ago),
            to_ms: None,
            limit: Some(history::MAX_LIMIT),
        };
        summaries
            .into_iter()
            .map(|e| {
                let changes = reader
                    .terms(&e.election, &q)?
                    .iter()
                    .filter(|t| !t.from_snapshot && t.started_at_ms >= hour_ago)
                    .count();
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
    Path(raw): Path<String>,
) -> Result<Json<ElectionView>, ApiError> {
    let name = election_name(&raw)?;
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
    let (leader, ttl, reachable): (Option<Leader>, Option<i64>, bool) = match live {
        Ok(Some(st)) => (Some(st.leader), st.ttl_remaining_seconds, true),
        Ok(None) => (None, None, true),
        Err(e) if e.is_unavailable() => (None, None, false),
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
    }))
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct CampaignBody {
    candidate: String,
    ttl_seconds: u64,
    wait_seconds: Option<f64>,
}

async fn campaign(
    State(s): State<Arc<AppState>>,
    Path(raw): Path<String>,
    headers: HeaderMap,
    JsonBody(body): JsonBody<CampaignBody>,
) -> Result<Json<Value>, ApiError> {
    authorize(&s, &headers)?;
    let name = election_name(&raw)?;
    if let Err(retry) = s.api_rate.take() {
        let mut e = ApiError::new(
            StatusCode::TOO_MANY_REQUESTS,
            "rate_limited",
            format!(
                "more than {} campaign calls per second; retry after {:.0} ms",
                s.limits.campaigns_per_second,
                retry.as_secs_f64() * 1000.0
            ),
        );
        e.extra = Some(json!({ "retry_after_ms": retry.as_millis() as u64 }));
        return Err(e);
    }
    if body.ttl_seconds > s.limits.max_ttl_seconds {
        return Err(ApiError::new(
            StatusCode::BAD_REQUEST,
            "invalid_ttl",
            format!(
                "ttl_seconds is at most {} on this server",
                s.limits.max_ttl_seconds
            ),
        ));
    }
    let ttl = Ttl::from_secs(body.ttl_seconds)?;
    let wait = match body.wait_seconds {
        None => None,
        Some(w) if w.is_finite() && w >= 0.0 && w <= s.limits.max_wait_seconds as f64 => {
            Some(Duration::from_secs_f64(w))
        }
        Some(_) => {
            return Err(ApiError::new(
                StatusCode::BAD_REQUEST,
                "invalid_wait",
                format!(
                    "wait_seconds is between 0 and {}",
                    s.limits.max_wait_seconds
                ),
            ))
        }
    };
    match s
        .client
        .acquire_detached(&name, &body.candidate, ttl, wait)
        .await?
    {
        Ok(won) => Ok(Json(json!({
            "name": won.name,
            "holder": won.holder,
            "token": won.token,
            "lease_id": won.lease_id,
            "ttl_seconds": won.ttl_seconds,
        }))),
        Err(held) => Err(ApiError::new(
            StatusCode::CONFLICT,
            "held",
            format!(
                "{name} is held by {:?} with token {}",
                held.holder, held.token
            ),
        )
        .with(json!({ "holder": held.holder, "token": held.token }))),
    }
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct RenewBody {
    lease_id: i64,
    token: i64,
}

async fn renew(
    State(s): State<Arc<AppState>>,
    Path(raw): Path<String>,
    headers: HeaderMap,
    JsonBody(body): JsonBody<RenewBody>,
) -> Result<Json<Value>, ApiError> {
    authorize(&s, &headers)?;
    let name = election_name(&raw)?;
    match s.client.renew(&name, body.token, body.lease_id).await {
        Ok(ttl) => Ok(Json(
            json!({ "token": body.token, "lease_id": body.lease_id, "ttl_remaining_seconds": ttl }),
        )),
        Err(ElectionError::NotHolder { current, .. }) => Err(ApiError::new(
            StatusCode::GONE,
            "term_gone",
            format!(
                "the term with token {} of {name} is over; campaign again",
                body.token
            ),
        )
        .with(json!({ "current": current }))),
        Err(e) => Err(e.into()),
    }
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct ResignBody {
    token: i64,
}

async fn resign(
    State(s): State<Arc<AppState>>,
    Path(raw): Path<String>,
    headers: HeaderMap,
    JsonBody(body): JsonBody<ResignBody>,
) -> Result<Json<Value>, ApiError> {
    authorize(&s, &headers)?;
    let name = election_name(&raw)?;
    let l = s.client.resign(&name, body.token).await?;
    Ok(Json(
        json!({ "resigned": true, "name": l.name, "holder": l.holder, "token": l.token }),
    ))
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct FenceBody {
    resource: String,
    token: i64,
}

async fn fence(
    State(s): State<Arc<AppState>>,
    Path(raw): Path<String>,
    headers: HeaderMap,
    JsonBody(body): JsonBody<FenceBody>,
) -> Result<Response, ApiError> {
    authorize(&s, &headers)?;
    let name = election_name(&raw)?;
    let d = s.client.fence(&name, &body.resource, body.token).await?;
    let status = if d.accepted {
        StatusCode::OK
    } else {
        StatusCode::CONFLICT
    };
    Ok((status, Json(d)).into_response())
}

#[derive(Debug, Deserialize)]
pub struct Window {
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
    Path(raw): Path<String>,
    Query(w): Query<Window>,
) -> Result<Json<Value>, ApiError> {
    let name = election_name(&raw)?;
    let q = w.query()?;
    let reader = s.history.clone();
    let rows = blocking(move || reader.terms(name.as_str(), &q)).await?;
    Ok(Json(json!({ "terms": rows })))
}

async fn events(
    State(s): State<Arc<AppState>>,
    Path(raw): Path<String>,
    Query(w): Query<Window>,
) -> Result<Json<Value>, ApiError> {
    let name = election_name(&raw)?;
    let q = w.query()?;
    let reader = s.history.clone();
    let rows = blocking(move || reader.events(Some(name.as_str()), &q)).await?;
    Ok(Json(json!({ "events": rows })))
}

/// Everything a postmortem needs for one election and window: terms,
/// events and refusals as JSON, or the terms as CSV.
async fn export(
    State(s): State<Arc<AppState>>,
    Path(raw): Path<String>,
    Query(w): Query<Window>,
) -> Result<Response, ApiError> {
    let name = election_name(&raw)?;
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
    let (terms, events, refusals) = blocking(move || {
        Ok((
            reader.terms(&n, &q)?,
            reader.events(Some(&n), &q)?,
            reader.refusals(Some(&n), &q)?,
        ))
    })
    .await?;
    let stem = format!("tenure-{}", name.as_str().replace('/', "_"));
    let (body, content_type, file) = if format == "csv" {
        (
            history::terms_to_csv(&terms),
            "text/csv; charset=utf-8",
            format!("{stem}-terms.csv"),
        )
    } else {
        let doc = json!({
            "election": name.as_str(),
            "from": q.from_ms.map(format_ms),
            "to": q.to_ms.map(format_ms),
            "exported_at": format_ms(now_ms()),
            "terms": terms,
            "events": events,
            "refusals": refusals,
        });
        let body = serde_json::to_string_pretty(&doc).map_err(|e| {
            ApiError::new(StatusCode::INTERNAL_SERVER_ERROR, "internal", e.to_string())
        })?;
        (body, "application/json", format!("{stem}.json"))
    };
    Ok((
        [
            (header::CONTENT_TYPE, content_type.to_owned()),
            (
                header::CONTENT_DISPOSITION,
                format!("attachment; filename=\"{file}\""),
            ),
        ],
        Body::from(body),
    )
        .into_response())
}

/// A span per request, a child of the caller's W3C `traceparent` when it
/// sends one, with method, route, status and latency.
pub async fn trace_requests(req: Request, next: Next) -> Response {
    use opentelemetry::propagation::TextMapPropagator;
    use tracing::Instrument;
    use tracing_opentelemetry::OpenTelemetrySpanExt;

    struct Headers<'a>(&'a HeaderMap);
    impl opentelemetry::propagation::Extractor for Headers<'_> {
        fn get(&self, key: &str) -> Option<&str> {
            self.0.get(key).and_then(|v| v.to_str().ok())
        }
        fn keys(&self) -> Vec<&str> {
            self.0.keys().map(|k| k.as_str()).collect()
        }
    }

    let method = req.method().clone();
    let path = req.uri().path().to_owned();
    let span = tracing::debug_span!("http.request", "http.request.method" = %method, "url.path" = %path, "http.response.status_code" = tracing::field::Empty);
    if req.headers().contains_key("traceparent") {
        let parent = opentelemetry_sdk::propagation::TraceContextPropagator::new()
            .extract(&Headers(req.headers()));
        let _ = span.set_parent(parent);
    }
    let started = Instant::now();
    let resp = next.run(req).instrument(span.clone()).await;
    span.record("http.response.status_code", resp.status().as_u16());
    tracing::debug!(parent: &span, %method, %path, status = resp.status().as_u16(), elapsed_ms = started.elapsed().as_secs_f64() * 1000.0, "request");
    resp
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rate_limiter_refuses_past_the_rate() {
        let r = RateLimiter::new(10);
        let ok = (0..20).filter(|_| r.take().is_ok()).count();
        assert!((10..=11).contains(&ok), "{ok}");
    }

    #[test]
    fn token_comparison() {
        assert!(constant_time_eq(b"secret", b"secret"));
        assert!(!constant_time_eq(b"secret", b"secreT"));
        assert!(!constant_time_eq(b"secret", b"secret2"));
        assert!(!constant_time_eq(b"", b"x"));
    }
}
