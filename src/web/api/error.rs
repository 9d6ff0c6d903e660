//! The API's errors: `{"error":{"code","message",…}}` with the right
//! status, and how the library's errors map to them (400, 403, 409, 503…,
//! each with a stable `code`).

use axum::http::{header, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::Json;
use serde::Serialize;
use serde_json::{json, Value};
use utoipa::ToSchema;

use crate::election::Error as ElectionError;
use crate::history::HistoryError;

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

    pub(super) fn with(mut self, extra: Value) -> Self {
        self.extra = Some(extra);
        self
    }
}

/// Every error's body: `{"error":{"code","message",…}}`.
#[derive(Debug, Serialize, ToSchema)]
pub struct ErrorBody {
    pub error: ErrorDetail,
}

/// What went wrong: a stable `code`, a `message` that says what to do,
/// and, for some codes, more fields (`current`, `holder`, `token`,
/// `colliding_key`, `floor`, `retry_after_ms`).
#[derive(Debug, Serialize, ToSchema)]
pub struct ErrorDetail {
    /// Stable: `invalid_name`, `unauthorized`, `held`, `etcd_unavailable`, …
    pub code: String,
    pub message: String,
    #[serde(flatten)]
    #[schema(ignore)]
    pub extra: serde_json::Map<String, Value>,
}

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        let extra = match self.extra {
            Some(Value::Object(extra)) => extra,
            _ => serde_json::Map::new(),
        };
        let body = ErrorBody {
            error: ErrorDetail {
                code: self.code.to_owned(),
                message: self.message,
                extra,
            },
        };
        let mut resp = (self.status, Json(body)).into_response();
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
            ElectionError::NameCollision { key, .. } => {
                ApiError::new(StatusCode::CONFLICT, "name_collision", msg)
                    .with(json!({ "colliding_key": key }))
            }
            ElectionError::BelowFloor { floor, .. } => {
                ApiError::new(StatusCode::SERVICE_UNAVAILABLE, "below_token_floor", msg)
                    .with(json!({ "floor": floor }))
            }
            ElectionError::PermissionDenied { user } => ApiError::new(
                StatusCode::FORBIDDEN,
                "etcd_permission_denied",
                format!(
                    "this server's etcd {} lacks write permission: its role may only read \
                     (enough for the history, pages and metrics); the mutating API needs \
                     readwrite on the prefix's election/ and fence/ keys. Nothing was changed.",
                    match user.as_deref() {
                        Some(u) => format!("user {u:?}"),
                        None => "identity (no --user: its client certificate's name)".to_owned(),
                    }
                ),
            ),
            e if e.is_access_denied() => ApiError::new(
                StatusCode::SERVICE_UNAVAILABLE,
                "etcd_access",
                format!("{msg}; nothing was changed"),
            ),
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
