//! The mutating calls: campaign, renew, resign, fence. Each takes a
//! [`Mutation`]: a valid credential, a valid name, a JSON body.

use std::sync::Arc;
use std::time::Duration;

use axum::extract::State;
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use axum::routing::post;
use axum::{Json, Router};
use serde::Deserialize;
use serde_json::{json, Value};

use super::auth::Mutation;
use super::ApiError;
use crate::election::{Error as ElectionError, Layout, Ttl};
use crate::web::AppState;

pub(super) fn routes() -> Router<Arc<AppState>> {
    Router::new()
        .route("/api/v1/elections/{name}/campaign", post(campaign))
        .route("/api/v1/elections/{name}/renew", post(renew))
        .route("/api/v1/elections/{name}/resign", post(resign))
        .route("/api/v1/elections/{name}/fence", post(fence))
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct CampaignBody {
    candidate: String,
    ttl_seconds: u64,
    wait_seconds: Option<f64>,
    /// Queue in etcd's own layout (FIFO with Go and etcdctl candidates).
    #[serde(default)]
    queue: bool,
}

async fn campaign(
    State(s): State<Arc<AppState>>,
    Mutation {
        name,
        client,
        full,
        body,
    }: Mutation<CampaignBody>,
) -> Result<Json<Value>, ApiError> {
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
    match client
        .acquire_detached_in(
            &name,
            &body.candidate,
            ttl,
            wait,
            if body.queue {
                Layout::Queue
            } else {
                Layout::Single
            },
        )
        .await?
    {
        Ok(won) => Ok(Json(json!({
            "name": full,
            "holder": won.holder,
            "token": won.token,
            "lease_id": won.lease_id,
            "ttl_seconds": won.ttl_seconds,
        }))),
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

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct RenewBody {
    lease_id: i64,
    token: i64,
}

async fn renew(
    Mutation {
        name,
        client,
        full,
        body,
    }: Mutation<RenewBody>,
) -> Result<Json<Value>, ApiError> {
    match client.renew(&name, body.token, body.lease_id).await {
        Ok(ttl) => Ok(Json(
            json!({ "token": body.token, "lease_id": body.lease_id, "ttl_remaining_seconds": ttl }),
        )),
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

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct ResignBody {
    token: i64,
}

async fn resign(
    Mutation {
        name,
        client,
        full,
        body,
    }: Mutation<ResignBody>,
) -> Result<Json<Value>, ApiError> {
    let l = client.resign(&name, body.token).await?;
    Ok(Json(
        json!({ "resigned": true, "name": full, "holder": l.holder, "token": l.token }),
    ))
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct FenceBody {
    resource: String,
    token: i64,
}

async fn fence(
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
