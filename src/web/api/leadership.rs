//! The mutating calls: campaign, renew, resign, fence. Each takes a
//! [`Mutation`]: a valid credential, a valid name, a JSON body.

use std::sync::Arc;
use std::time::Duration;

use axum::extract::State;
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use axum::Json;
use serde::{Deserialize, Serialize};
use serde_json::json;
use utoipa::ToSchema;
use utoipa_axum::router::OpenApiRouter;
use utoipa_axum::routes;

use super::auth::Mutation;
use super::error::ErrorBody;
use super::extract::whole;
use super::schema::OwnNamePath;
use super::ApiError;
use crate::election::{Error as ElectionError, FenceDecision, KeyLayout, Ttl};
use crate::web::AppState;

pub(super) fn routes() -> OpenApiRouter<Arc<AppState>> {
    OpenApiRouter::new()
        .routes(routes!(campaign))
        .routes(routes!(renew))
        .routes(routes!(resign))
        .routes(routes!(fence))
}

/// A campaign for a term. Its limits (`ttl_seconds`, `wait_seconds`) are
/// the server's (`--max-ttl`), as the served document gives them.
#[derive(Debug, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub(super) struct CampaignBody {
    /// Who campaigns: the leader key's value, 1–256 bytes of UTF-8 without
    /// control characters.
    #[schema(
        pattern = r"^[^\u0000-\u001f\u007f-\u009f]+$",
        min_length = 1,
        max_length = 256
    )]
    candidate: String,
    /// The term's lease, from etcd's minimum (2 s) to the server's `--max-ttl`.
    #[schema(minimum = 2, maximum = 3600)]
    #[serde(deserialize_with = "whole::u64")]
    ttl_seconds: u64,
    /// How long to wait while another holds it (default: not at all).
    #[schema(minimum = 0, maximum = 300)]
    wait_seconds: Option<f64>,
    /// Queue in etcd's own layout (FIFO with Go and etcdctl candidates).
    #[serde(default)]
    queue: bool,
}

/// A term won: renew it before `ttl_seconds` pass, fence with its token.
#[derive(Debug, Serialize, ToSchema)]
pub(super) struct Won {
    name: String,
    holder: String,
    /// The fencing token.
    token: i64,
    lease_id: i64,
    ttl_seconds: i64,
}

#[utoipa::path(post, path = "/api/v1/elections/{name}/campaign", tag = "leadership",
    params(OwnNamePath),
    request_body = CampaignBody,
    security(("api_token" = [])),
    responses(
        (status = 200, description = "The term won", body = Won),
        (status = 409, description = "`held` (with `holder`, `token`), `name_collision` (with `colliding_key`)", body = ErrorBody),
        (status = 429, description = "`rate_limited` (with `retry_after_ms`)", body = ErrorBody),
        (status = 400, description = "`invalid_body` (not JSON), `invalid_name`, `invalid_token`, `invalid_ttl`, …", body = ErrorBody),
        (status = 401, description = "`unauthorized`: the `--api-token` not sent, or another", body = ErrorBody),
        (status = 403, description = "`api_disabled` (serve has no `--api-token`), `host_not_allowed` (`--no-auth`: a Host name not `localhost` nor an `--allowed-host`), `origin_not_allowed` (an Origin not the Host's own nor an `--allowed-host`), `etcd_permission_denied`", body = ErrorBody),
        (status = 413, description = "`body_too_large`", body = ErrorBody),
        (status = 415, description = "`unsupported_media_type`: send Content-Type: application/json", body = ErrorBody),
        (status = 422, description = "`invalid_body`: JSON, not of this body's shape (a field missing, unknown or of another type)", body = ErrorBody),
        (status = 502, description = "`etcd_error`", body = ErrorBody),
        (status = 503, description = "`etcd_unavailable`, `etcd_access`, `below_token_floor`", body = ErrorBody),
    ))]
pub(super) async fn campaign(
    State(s): State<Arc<AppState>>,
    Mutation {
        name,
        client,
        full,
        body,
    }: Mutation<CampaignBody>,
) -> Result<Json<Won>, ApiError> {
    let (ttl, wait) = campaign_limits(&s, &body)?;
    match client
        .acquire_detached_in(
            &name,
            &body.candidate,
            ttl,
            wait,
            if body.queue {
                KeyLayout::Queue
            } else {
                KeyLayout::Single
            },
        )
        .await?
    {
        Ok(won) => Ok(Json(Won {
            name: full,
            holder: won.holder,
            token: won.token,
            lease_id: won.lease_id,
            ttl_seconds: won.ttl_seconds,
        })),
        Err(held) => Err(ApiError::new(
            StatusCode::CONFLICT,
            "held",
            format!(
                "{full} is held by {:?} with token {}",
                held.holder, held.token
            ),
        )
        .with(json!({ "holder": held.holder, "token": held.token }))),
    }
}

/// A campaign call within the server's limits: its rate, TTL and wait.
fn campaign_limits(s: &AppState, body: &CampaignBody) -> Result<(Ttl, Option<Duration>), ApiError> {
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
    Ok((ttl, wait))
}

/// A term kept: its lease and token, as the campaign gave them.
#[derive(Debug, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub(super) struct RenewBody {
    #[serde(deserialize_with = "whole::i64")]
    lease_id: i64,
    #[schema(minimum = 1)]
    #[serde(deserialize_with = "whole::i64")]
    token: i64,
}

/// The term's lease renewed.
#[derive(Debug, Serialize, ToSchema)]
pub(super) struct Renewed {
    token: i64,
    lease_id: i64,
    ttl_remaining_seconds: i64,
}

#[utoipa::path(post, path = "/api/v1/elections/{name}/renew", tag = "leadership",
    params(OwnNamePath),
    request_body = RenewBody,
    security(("api_token" = [])),
    responses(
        (status = 200, description = "Renewed", body = Renewed),
        (status = 409, description = "`not_holder`", body = ErrorBody),
        (status = 410, description = "`term_gone`: the term is over; campaign again (with `current`)", body = ErrorBody),
        (status = 400, description = "`invalid_body` (not JSON), `invalid_name`, `invalid_token`, `invalid_ttl`, …", body = ErrorBody),
        (status = 401, description = "`unauthorized`: the `--api-token` not sent, or another", body = ErrorBody),
        (status = 403, description = "`api_disabled` (serve has no `--api-token`), `host_not_allowed` (`--no-auth`: a Host name not `localhost` nor an `--allowed-host`), `origin_not_allowed` (an Origin not the Host's own nor an `--allowed-host`), `etcd_permission_denied`", body = ErrorBody),
        (status = 413, description = "`body_too_large`", body = ErrorBody),
        (status = 415, description = "`unsupported_media_type`: send Content-Type: application/json", body = ErrorBody),
        (status = 422, description = "`invalid_body`: JSON, not of this body's shape (a field missing, unknown or of another type)", body = ErrorBody),
        (status = 502, description = "`etcd_error`", body = ErrorBody),
        (status = 503, description = "`etcd_unavailable`, `etcd_access`, `below_token_floor`", body = ErrorBody),
    ))]
pub(super) async fn renew(
    Mutation {
        name,
        client,
        full,
        body,
    }: Mutation<RenewBody>,
) -> Result<Json<Renewed>, ApiError> {
    match client.renew(&name, body.token, body.lease_id).await {
        Ok(ttl) => Ok(Json(Renewed {
            token: body.token,
            lease_id: body.lease_id,
            ttl_remaining_seconds: ttl,
        })),
        Err(ElectionError::NotHolder { current, .. }) => Err(ApiError::new(
            StatusCode::GONE,
            "term_gone",
            format!(
                "the term with token {} of {full} is over; campaign again",
                body.token
            ),
        )
        .with(json!({ "current": current }))),
        Err(e) => Err(e.into()),
    }
}

/// The term to end, by its token.
#[derive(Debug, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub(super) struct ResignBody {
    #[schema(minimum = 1)]
    #[serde(deserialize_with = "whole::i64")]
    token: i64,
}

/// The term ended.
#[derive(Debug, Serialize, ToSchema)]
pub(super) struct Resigned {
    resigned: bool,
    name: String,
    holder: String,
    token: i64,
}

#[utoipa::path(post, path = "/api/v1/elections/{name}/resign", tag = "leadership",
    params(OwnNamePath),
    request_body = ResignBody,
    security(("api_token" = [])),
    responses(
        (status = 200, description = "Resigned", body = Resigned),
        (status = 409, description = "`not_holder`: that token does not lead (with `current`)", body = ErrorBody),
        (status = 400, description = "`invalid_body` (not JSON), `invalid_name`, `invalid_token`, `invalid_ttl`, …", body = ErrorBody),
        (status = 401, description = "`unauthorized`: the `--api-token` not sent, or another", body = ErrorBody),
        (status = 403, description = "`api_disabled` (serve has no `--api-token`), `host_not_allowed` (`--no-auth`: a Host name not `localhost` nor an `--allowed-host`), `origin_not_allowed` (an Origin not the Host's own nor an `--allowed-host`), `etcd_permission_denied`", body = ErrorBody),
        (status = 413, description = "`body_too_large`", body = ErrorBody),
        (status = 415, description = "`unsupported_media_type`: send Content-Type: application/json", body = ErrorBody),
        (status = 422, description = "`invalid_body`: JSON, not of this body's shape (a field missing, unknown or of another type)", body = ErrorBody),
        (status = 502, description = "`etcd_error`", body = ErrorBody),
        (status = 503, description = "`etcd_unavailable`, `etcd_access`, `below_token_floor`", body = ErrorBody),
    ))]
pub(super) async fn resign(
    Mutation {
        name,
        client,
        full,
        body,
    }: Mutation<ResignBody>,
) -> Result<Json<Resigned>, ApiError> {
    let l = client.resign(&name, body.token).await?;
    Ok(Json(Resigned {
        resigned: true,
        name: full,
        holder: l.holder,
        token: l.token,
    }))
}

/// A write to `resource` by the term with `token`: accept or refuse.
#[derive(Debug, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub(super) struct FenceBody {
    #[schema(
        pattern = r"^(?!\.\.?$)[A-Za-z0-9._-]+$",
        min_length = 1,
        max_length = 128
    )]
    resource: String,
    #[schema(minimum = 1)]
    #[serde(deserialize_with = "whole::i64")]
    token: i64,
}

#[utoipa::path(post, path = "/api/v1/elections/{name}/fence", tag = "leadership",
    params(OwnNamePath),
    request_body = FenceBody,
    security(("api_token" = [])),
    responses(
        (status = 200, description = "Accepted", body = FenceDecision),
        (status = 409, description = "Refused: `accepted` false, with its `reason`", body = FenceDecision),
        (status = 400, description = "`invalid_body` (not JSON), `invalid_name`, `invalid_token`, `invalid_ttl`, …", body = ErrorBody),
        (status = 401, description = "`unauthorized`: the `--api-token` not sent, or another", body = ErrorBody),
        (status = 403, description = "`api_disabled` (serve has no `--api-token`), `host_not_allowed` (`--no-auth`: a Host name not `localhost` nor an `--allowed-host`), `origin_not_allowed` (an Origin not the Host's own nor an `--allowed-host`), `etcd_permission_denied`", body = ErrorBody),
        (status = 413, description = "`body_too_large`", body = ErrorBody),
        (status = 415, description = "`unsupported_media_type`: send Content-Type: application/json", body = ErrorBody),
        (status = 422, description = "`invalid_body`: JSON, not of this body's shape (a field missing, unknown or of another type)", body = ErrorBody),
        (status = 502, description = "`etcd_error`", body = ErrorBody),
        (status = 503, description = "`etcd_unavailable`, `etcd_access`, `below_token_floor`", body = ErrorBody),
    ))]
pub(super) async fn fence(
    Mutation {
        name, client, body, ..
    }: Mutation<FenceBody>,
) -> Result<Response, ApiError> {
    let d = client.fence(&name, &body.resource, body.token).await?;
    let status = if d.accepted {
        StatusCode::OK
    } else {
        StatusCode::CONFLICT
    };
    Ok((status, Json(d)).into_response())
}
