//! Who may call the mutating API ([`Auth`]): the bearer token checked in
//! constant time, and [`Mutation`], the one extractor every mutating
//! handler takes (body, credential, name).

use std::sync::Arc;

use axum::extract::{FromRequest, Request};
use axum::http::{header, HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use serde::de::DeserializeOwned;

use super::extract::{election_name, raw_name, JsonBody};
use super::ApiError;
use crate::election::ElectionName;
use crate::web::{AppState, Auth};

/// A mutating call on one election, checked in this order: the route's
/// name decodes, the JSON body parses (413, 415, 400 `invalid_body`), the
/// credential is valid (403 `api_disabled`, 401), the name is valid (400
/// `invalid_name`).
pub(super) struct Mutation<T> {
    pub(super) name: ElectionName,
    /// The client of the election's cluster (issue 25).
    pub(super) client: crate::election::Client,
    /// Its name as the history and the pages give it (`CLUSTER/NAME`).
    pub(super) full: String,
    pub(super) body: T,
}

impl<T: DeserializeOwned> FromRequest<Arc<AppState>> for Mutation<T> {
    type Rejection = Response;

    async fn from_request(req: Request, state: &Arc<AppState>) -> Result<Self, Self::Rejection> {
        let (mut parts, body) = req.into_parts();
        let raw = raw_name(&mut parts).await?;
        let headers = parts.headers.clone();
        let JsonBody(body) = JsonBody::<T>::from_request(Request::from_parts(parts, body), state)
            .await
            .map_err(IntoResponse::into_response)?;
        authorize(state, &headers).map_err(IntoResponse::into_response)?;
        let target = state
            .target(&raw)
            .map_err(|e| ApiError::from(e).into_response())?;
        let name = election_name(target.name.as_str()).map_err(IntoResponse::into_response)?;
        let client = state
            .connected_client(&target)
            .map_err(IntoResponse::into_response)?
            .clone();
        Ok(Mutation {
            name,
            client,
            full: target.full,
            body,
        })
    }
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn token_comparison() {
        assert!(constant_time_eq(b"secret", b"secret"));
        assert!(!constant_time_eq(b"secret", b"secreT"));
        assert!(!constant_time_eq(b"secret", b"secret2"));
        assert!(!constant_time_eq(b"", b"x"));
    }
}
