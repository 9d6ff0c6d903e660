//! What the handlers take from a request, with rejections that are API
//! errors: a JSON body ([`JsonBody`]) and a valid election name from the
//! path ([`ElectionPath`]).

use axum::extract::rejection::JsonRejection;
use axum::extract::{FromRequest, FromRequestParts, Path, Request};
use axum::http::request::Parts;
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use axum::Json;
use serde::de::DeserializeOwned;

use super::ApiError;
use crate::election::ElectionName;

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

/// A name given by a client, validated: `invalid_name` (400) otherwise.
pub(crate) fn election_name(raw: &str) -> Result<ElectionName, ApiError> {
    Ok(ElectionName::new(raw)?)
}

/// The route's `{name}`, as given (a path axum cannot decode is axum's own
/// 400).
pub(super) async fn raw_name(parts: &mut Parts) -> Result<String, Response> {
    let Path(raw) = Path::<String>::from_request_parts(parts, &())
        .await
        .map_err(IntoResponse::into_response)?;
    Ok(raw)
}

/// The route's `{name}`, validated: with several clusters, `CLUSTER/NAME`
/// of a configured cluster. Handlers that also take a query
/// extract this after it, so a bad query is reported before a bad name,
/// as when they validated the name themselves.
pub(super) struct ElectionPath(pub(super) crate::web::Target);

impl FromRequestParts<std::sync::Arc<crate::web::AppState>> for ElectionPath {
    type Rejection = Response;

    async fn from_request_parts(
        parts: &mut Parts,
        state: &std::sync::Arc<crate::web::AppState>,
    ) -> Result<Self, Self::Rejection> {
        let raw = raw_name(parts).await?;
        state
            .target(&raw)
            .map_err(ApiError::from)
            .map(ElectionPath)
            .map_err(IntoResponse::into_response)
    }
}
