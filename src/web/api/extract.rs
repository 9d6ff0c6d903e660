//! What the handlers take from a request, with rejections that are API
//! errors: a JSON body ([`JsonBody`]), a query ([`ApiQuery`]) and a valid
//! election name from the path ([`ElectionPath`]).

use axum::extract::rejection::JsonRejection;
use axum::extract::{FromRequest, FromRequestParts, Path, Query, Request};
use axum::http::request::Parts;
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use axum::Json;
use serde::de::DeserializeOwned;

use super::ApiError;

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

/// Whole numbers in a JSON body as JSON Schema reads them: `3` and `3.0`
/// alike (an `integer` is any number without a fractional part), so a
/// client whose JSON writes every number as a float is not refused.
pub(super) mod whole {
    use serde::de::{Deserializer, Error};
    use serde::Deserialize;

    fn number<'de, D: Deserializer<'de>>(d: D) -> Result<serde_json::Number, D::Error> {
        serde_json::Number::deserialize(d)
    }

    fn of_float<T: TryFrom<i128>>(f: f64) -> Option<T> {
        // Exact below 2^53; a float past that names no one integer.
        (f.fract() == 0.0 && f.abs() < 9_007_199_254_740_992.0)
            .then(|| T::try_from(f as i128).ok())
            .flatten()
    }

    pub fn i64<'de, D: Deserializer<'de>>(d: D) -> Result<i64, D::Error> {
        let n = number(d)?;
        n.as_i64()
            .or_else(|| n.as_f64().and_then(of_float))
            .ok_or_else(|| D::Error::custom(format!("{n} is not a 64-bit integer")))
    }

    pub fn u64<'de, D: Deserializer<'de>>(d: D) -> Result<u64, D::Error> {
        let n = number(d)?;
        n.as_u64()
            .or_else(|| n.as_f64().and_then(of_float))
            .ok_or_else(|| D::Error::custom(format!("{n} is not a whole number of at least 0")))
    }
}

/// A query string whose rejections (a field of the wrong type) are 400
/// `invalid_query`, in the API's error body.
pub struct ApiQuery<T>(pub T);

impl<S, T> FromRequestParts<S> for ApiQuery<T>
where
    T: DeserializeOwned,
    S: Send + Sync,
{
    type Rejection = ApiError;

    async fn from_request_parts(parts: &mut Parts, state: &S) -> Result<Self, Self::Rejection> {
        match Query::<T>::from_request_parts(parts, state).await {
            Ok(Query(v)) => Ok(ApiQuery(v)),
            Err(r) => Err(ApiError::new(
                StatusCode::BAD_REQUEST,
                "invalid_query",
                r.body_text(),
            )),
        }
    }
}

/// The route's `{name}`, as given; a path that does not decode (not
/// UTF-8) is 400 `invalid_name`.
pub(super) async fn raw_name(parts: &mut Parts) -> Result<String, Response> {
    let Path(raw) = Path::<String>::from_request_parts(parts, &())
        .await
        .map_err(|r| {
            ApiError::new(StatusCode::BAD_REQUEST, "invalid_name", r.body_text()).into_response()
        })?;
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
