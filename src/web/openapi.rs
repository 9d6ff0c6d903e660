//! The HTTP API's contract: an OpenAPI 3.1 document made from the handlers'
//! own `#[utoipa::path]` attributes and types (utoipa), served at
//! `GET /api/v1/openapi.json`.
//!
//! - **What it covers.** Every route [`routes`] returns is in it, because
//!   the same `OpenApiRouter` registers the route and its path: the JSON API
//!   (`api`), the live feed (`live`), etcd's own events and the report
//!   (`incident`), the probes and `/metrics`. The pages (HTML) are not.
//! - **Credentials.** `api_token`: the `--api-token` bearer, on every
//!   mutating call. `read_token`/`read_basic`: `--read-token` as a bearer or
//!   HTTP Basic's password, on every read when the server has one (an empty
//!   requirement beside them: without it, reads are open). The probes take
//!   none.
//! - **This server.** The document says what the server that serves it
//!   does, written in once, when the router is built: the campaign's
//!   `ttl_seconds` and `wait_seconds` maxima (`--max-ttl`); the mutating
//!   calls need no credential where none would help (no `--api-token`:
//!   every one answers 403 `api_disabled`; `--no-auth`: anyone may call);
//!   with `--read-token`, reads need it (the empty requirement goes).

use std::sync::Arc;

use axum::http::header;
use axum::response::IntoResponse;
use axum::routing::get;
use axum::{Extension, Router};
use serde_json::Value;
use utoipa::openapi::security::{HttpAuthScheme, HttpBuilder, SecurityScheme};
use utoipa::{Modify, OpenApi};
use utoipa_axum::router::OpenApiRouter;
use utoipa_axum::routes;

use super::{api, incident, live, scrape, AppState, Auth, Limits};

/// Where the document is served.
pub const DOCUMENT_PATH: &str = "/api/v1/openapi.json";

#[derive(OpenApi)]
#[openapi(
    info(
        title = "tenure",
        description = "Leader election on etcd that you can see: campaign, renew, resign and \
                       fence over HTTP, and the history of who led when. Errors are \
                       `{\"error\":{\"code\",\"message\",…}}`; docs/api.md is the reference.",
        license(name = "Apache-2.0", identifier = "Apache-2.0")
    ),
    paths(document, healthz),
    modifiers(&Credentials),
    tags(
        (name = "elections", description = "The elections etcd and the history know"),
        (name = "leadership", description = "Terms over HTTP: the mutating calls (`--api-token`)"),
        (name = "records", description = "An election's recorded past"),
        (name = "live", description = "Events as they are recorded"),
        (name = "incident", description = "etcd's own events and the postmortem report"),
        (name = "operations", description = "Probes, metrics and this document"),
    )
)]
struct ApiDoc;

/// The three credentials a request may carry.
struct Credentials;

impl Modify for Credentials {
    fn modify(&self, doc: &mut utoipa::openapi::OpenApi) {
        let c = doc.components.get_or_insert_with(Default::default);
        let http = |scheme, what: &str| {
            SecurityScheme::Http(
                HttpBuilder::new()
                    .scheme(scheme)
                    .description(Some(what))
                    .build(),
            )
        };
        c.add_security_scheme(
            "api_token",
            http(
                HttpAuthScheme::Bearer,
                "`tenure serve --api-token TOKEN`: `Authorization: Bearer TOKEN` on every \
                 mutating call. Without a token configured they answer 403 `api_disabled` \
                 (unless `--no-auth`). It is accepted for reads too.",
            ),
        );
        c.add_security_scheme(
            "read_token",
            http(
                HttpAuthScheme::Bearer,
                "`tenure serve --read-token TOKEN`: needed on every read (not the probes) \
                 when set",
            ),
        );
        c.add_security_scheme(
            "read_basic",
            http(
                HttpAuthScheme::Basic,
                "the read token as HTTP Basic's password (any user name)",
            ),
        );
    }
}

/// This document (OpenAPI 3.1).
#[utoipa::path(get, path = "/api/v1/openapi.json", tag = "operations",
    security((), ("read_token" = []), ("read_basic" = [])),
    responses(
        (status = 200, description = "The document", body = Object),
        (status = 401, description = "`--read-token` is set and not sent", body = api::ErrorBody),
    ))]
async fn document(Extension(text): Extension<Arc<str>>) -> impl IntoResponse {
    (
        [(header::CONTENT_TYPE, "application/json")],
        text.to_string(),
    )
}

/// Liveness: the process answers. No credential.
#[utoipa::path(get, path = "/healthz", tag = "operations", security(()),
    responses((status = 200, description = "`ok`", content_type = "text/plain", body = String)))]
async fn healthz() -> &'static str {
    "ok\n"
}

/// The documented routes and their document, as JSON: the API, the live
/// feed, etcd's events and the report, the probes, `/metrics`.
pub fn routes(state: &AppState) -> Router<Arc<AppState>> {
    let (router, doc) = OpenApiRouter::with_openapi(ApiDoc::openapi())
        .merge(api::routes())
        .merge(live::routes())
        .merge(incident::api_routes())
        .routes(routes!(super::readyz))
        .routes(routes!(scrape::metrics))
        .split_for_parts();
    let text: Arc<str> = document_text(doc, state).into();
    router
        .route("/healthz", get(healthz))
        .route(DOCUMENT_PATH, get(document).layer(Extension(text)))
}

/// The document with this server's limits and credentials written in.
fn document_text(doc: utoipa::openapi::OpenApi, state: &AppState) -> String {
    let mut v = serde_json::to_value(&doc).unwrap_or(Value::Null);
    limits(&mut v, &state.limits);
    if let Some(Value::Object(paths)) = v.get_mut("paths") {
        for op in paths.values_mut().filter_map(Value::as_object_mut) {
            for (method, op) in op.iter_mut() {
                credentials(method, op, state);
            }
        }
    }
    v.to_string()
}

/// The campaign's maxima: this server's.
fn limits(v: &mut Value, limits: &Limits) {
    let campaign = v.pointer_mut("/components/schemas/CampaignBody/properties");
    if let Some(Value::Object(props)) = campaign {
        for (field, max) in [
            ("ttl_seconds", limits.max_ttl_seconds),
            ("wait_seconds", limits.max_wait_seconds),
        ] {
            if let Some(Value::Object(p)) = props.get_mut(field) {
                p.insert("maximum".to_owned(), max.into());
            }
        }
    }
}

/// One operation's credentials as this server takes them.
fn credentials(method: &str, op: &mut Value, state: &AppState) {
    let Some(Value::Array(security)) = op.get_mut("security") else {
        return;
    };
    let none = Value::Object(Default::default());
    if method == "post" {
        let note = match state.auth {
            Auth::Token(_) => return,
            Auth::Disabled => {
                "This server has no `--api-token`: this call answers 403 `api_disabled`."
            }
            Auth::Open => {
                "This server runs with `--no-auth`: no credential is needed; a Host that is a \
                 name must be `localhost` or one given with `--allowed-host` (403 \
                 `host_not_allowed`)."
            }
        };
        *security = vec![none];
        if let Value::Object(op) = op {
            let text = op.get("description").and_then(Value::as_str).unwrap_or("");
            let text = format!("{text}\n\n{note}").trim().to_owned();
            op.insert("description".to_owned(), text.into());
        }
    } else if state.read_token.is_some() && security.len() > 1 {
        security.retain(|s| s != &none);
    }
}
