//! Who may call the mutating API ([`Auth`]): the bearer token checked in
//! constant time, and [`Mutation`], the one extractor every mutating
//! handler takes (where the call comes from, credential, body, name); who may read ([`guard_reads`]:
//! everyone, or with `--read-token` only those who send it).

use std::sync::Arc;

use axum::extract::{FromRequest, Request};
use axum::http::{header, HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use serde::de::DeserializeOwned;

use super::extract::{raw_name, JsonBody};
use super::ApiError;
use crate::election::ElectionName;
use crate::web::{AppState, Auth};

/// A mutating call on one election, checked in this order: where it comes
/// from (`origin.rs`: with `--no-auth` a Host that is a name must be
/// `localhost` or an `--allowed-host`, 403 `host_not_allowed`; an Origin,
/// if any, must be the Host's own or an `--allowed-host`, 403
/// `origin_not_allowed`), the credential is valid (403 `api_disabled`,
/// 401); both before anything of the request is read, so a caller without
/// them learns nothing of the body's schema; then the route's name
/// decodes, the JSON body parses (413, 415, 400 `invalid_body`), the name
/// is valid (400 `invalid_name`).
pub(super) struct Mutation<T> {
    pub(super) name: ElectionName,
    /// The client of the election's cluster.
    pub(super) client: crate::election::Client,
    /// Its name as the history and the pages give it (`CLUSTER/NAME`).
    pub(super) full: String,
    pub(super) body: T,
}

impl<T: DeserializeOwned> FromRequest<Arc<AppState>> for Mutation<T> {
    type Rejection = Response;

    async fn from_request(req: Request, state: &Arc<AppState>) -> Result<Self, Self::Rejection> {
        super::origin::check(state, req.headers(), req.uri())
            .map_err(IntoResponse::into_response)?;
        authorize(state, req.headers()).map_err(IntoResponse::into_response)?;
        let (mut parts, body) = req.into_parts();
        let raw = raw_name(&mut parts).await?;
        let JsonBody(body) = JsonBody::<T>::from_request(Request::from_parts(parts, body), state)
            .await
            .map_err(IntoResponse::into_response)?;
        let target = state
            .target(&raw)
            .map_err(|e| ApiError::from(e).into_response())?;
        // Only tenure's own elections are written: another system's (a
        // path, a Kubernetes Lease) is read, never campaigned or fenced in.
        let name = match target.name.own() {
            Some(own) => own.clone(),
            None => {
                return Err(ApiError::from(crate::election::Error::InvalidName {
                    name: target.full.chars().take(64).collect(),
                    reason: "another system's election (a key path, or a Kubernetes Lease in \
                             a cluster that reads Leases) is read, never written: campaign, \
                             renew, resign and fence take tenure's own elections",
                })
                .into_response())
            }
        };
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
        Auth::Token(expected) => match presented(headers) {
            Some(Presented::Bearer(g)) if constant_time_eq(&g, expected.as_bytes()) => Ok(()),
            Some(Presented::Bearer(_)) => Err(ApiError::new(
                StatusCode::UNAUTHORIZED,
                "unauthorized",
                "invalid API token",
            )),
            Some(Presented::Basic(_)) | None => Err(ApiError::new(
                StatusCode::UNAUTHORIZED,
                "unauthorized",
                "missing credentials: send Authorization: Bearer <api token>",
            )),
        },
    }
}

/// With a read token (`serve --read-token`), every read (pages, the API's
/// GETs, SSE, `/metrics`) needs it, or the API token, as `Authorization:
/// Bearer TOKEN` or as HTTP Basic's password (any user name: what a browser
/// prompts for, and then sends with the page's own requests). `/healthz`
/// and `/readyz` stay open for probes; mutating calls are [`Mutation`]'s.
/// A refusal is 401 `unauthorized` with `WWW-Authenticate: Basic`.
pub async fn guard_reads(
    axum::extract::State(state): axum::extract::State<Arc<AppState>>,
    req: Request,
    next: axum::middleware::Next,
) -> Response {
    let Some(read) = &state.read_token else {
        return next.run(req).await;
    };
    let open = matches!(req.uri().path(), "/healthz" | "/readyz");
    let mutating = !matches!(
        req.method(),
        &axum::http::Method::GET | &axum::http::Method::HEAD
    );
    if open || mutating {
        return next.run(req).await;
    }
    let given = presented(req.headers()).map(Presented::token);
    let api = match &state.auth {
        Auth::Token(t) => Some(t.as_bytes()),
        _ => None,
    };
    let allowed = given.as_deref().is_some_and(|g| {
        constant_time_eq(g, read.as_bytes()) | api.is_some_and(|a| constant_time_eq(g, a))
    });
    if allowed {
        return next.run(req).await;
    }
    let mut refused = ApiError::new(
        StatusCode::UNAUTHORIZED,
        "unauthorized",
        "this tenure serve requires a token for reads (--read-token): send Authorization: \
         Bearer <read token>, or sign in with the token as the password",
    )
    .into_response();
    refused.headers_mut().insert(
        header::WWW_AUTHENTICATE,
        header::HeaderValue::from_static("Basic realm=\"tenure\", charset=\"UTF-8\""),
    );
    refused
}

/// What a request's `Authorization` header presents.
#[derive(Debug, PartialEq, Eq)]
enum Presented {
    /// `Bearer TOKEN`.
    Bearer(Vec<u8>),
    /// HTTP Basic's password (the user name is not read).
    Basic(Vec<u8>),
}

impl Presented {
    fn token(self) -> Vec<u8> {
        match self {
            Presented::Bearer(t) | Presented::Basic(t) => t,
        }
    }
}

/// The one reading of the `Authorization` header: its scheme is
/// case-insensitive (RFC 7235 §2.1: `bearer`, `BEARER` and `Bearer` are
/// one), then one or more spaces and the credentials. `None`: no header,
/// another scheme, or Basic credentials that do not decode.
fn presented(headers: &HeaderMap) -> Option<Presented> {
    let value = headers.get(header::AUTHORIZATION)?.to_str().ok()?;
    let (scheme, rest) = value.trim_start().split_once(' ')?;
    let credentials = rest.trim();
    if scheme.eq_ignore_ascii_case("Bearer") {
        return Some(Presented::Bearer(credentials.as_bytes().to_vec()));
    }
    if !scheme.eq_ignore_ascii_case("Basic") {
        return None;
    }
    let pair = crate::text::base64_decode(credentials)?;
    let colon = pair.iter().position(|&b| b == b':')?;
    Some(Presented::Basic(pair[colon + 1..].to_vec()))
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

    #[test]
    fn the_presented_token_is_a_bearers_or_basics_password() {
        let mut h = HeaderMap::new();
        h.insert(
            header::AUTHORIZATION,
            "Basic dXNlcjpzM2NyZXQ=".parse().expect("header"),
        );
        assert_eq!(presented(&h), Some(Presented::Basic(b"s3cret".to_vec())));
        h.insert(
            header::AUTHORIZATION,
            "Bearer tok ".parse().expect("header"),
        );
        assert_eq!(presented(&h), Some(Presented::Bearer(b"tok".to_vec())));
    }

    #[test]
    fn the_scheme_is_case_insensitive() {
        let mut h = HeaderMap::new();
        for value in ["bearer tok", "BEARER tok", "bEaReR  tok"] {
            h.insert(header::AUTHORIZATION, value.parse().expect("header"));
            assert_eq!(
                presented(&h),
                Some(Presented::Bearer(b"tok".to_vec())),
                "{value}"
            );
        }
        h.insert(
            header::AUTHORIZATION,
            "basic dXNlcjpzM2NyZXQ=".parse().expect("header"),
        );
        assert_eq!(presented(&h), Some(Presented::Basic(b"s3cret".to_vec())));
        h.insert(header::AUTHORIZATION, "Bearertok".parse().expect("header"));
        assert_eq!(presented(&h), None);
    }
}
