//! `GET /api/v1/events`: every event as Server-Sent Events, optionally for
//! one election (`?election=NAME`), and etcd's own events as they are
//! recorded (`event: cluster`, whatever the filter). Each message has `id: <revision>`,
//! `event: <type>` and the event's JSON as `data`. A subscriber that falls
//! behind gets `event: lagged` with `{"missed":N}` and should re-read.
//! With a filter naming a Kubernetes Lease, also `event: lease` (no `id`:
//! no revision of its own) at each of its renewals and lapses as the
//! watcher read them (at most one a second), so that its page follows
//! them without polling; not to unfiltered subscribers (a fleet's Leases
//! renew every few seconds each, and no event of the history says so).

use std::convert::Infallible;
use std::sync::Arc;
use std::time::Duration;

use axum::extract::State;
use axum::response::sse::{Event as SseEvent, KeepAlive, Sse};
use futures_util::stream::{self, Stream};
use serde::Deserialize;
use tokio::sync::broadcast::error::RecvError;
use utoipa::IntoParams;
use utoipa_axum::router::OpenApiRouter;
use utoipa_axum::routes;

use super::api::{ApiError, ApiQuery, ErrorBody};
use super::AppState;

#[derive(Debug, Deserialize, IntoParams)]
#[into_params(parameter_in = Query)]
pub struct LiveQuery {
    /// One election's events only (etcd's own come whatever the filter).
    #[param(schema_with = crate::web::api::schema::watched_name)]
    election: Option<String>,
}

pub fn routes() -> OpenApiRouter<Arc<AppState>> {
    OpenApiRouter::new().routes(routes!(events))
}

/// Every event as it is recorded, as Server-Sent Events: `id: <revision>`,
/// `event: <type>`, the event's JSON as `data`; `event: cluster` for etcd's
/// own; `event: lease` for the renewals and lapses of the Kubernetes Lease
/// the filter names; `event: lagged` with `{"missed":N}` for a subscriber
/// that fell behind. The stream does not end.
#[utoipa::path(get, path = "/api/v1/events", tag = "live", operation_id = "live_events",
    params(LiveQuery),
    security((), ("read_token" = []), ("read_basic" = [])),
    responses(
        (status = 200, description = "The stream", content_type = "text/event-stream", body = String),
        (status = 400, description = "`invalid_name`, `invalid_query`", body = ErrorBody),
        (status = 401, description = "`--read-token` is set and not sent", body = ErrorBody),
    ))]
async fn events(
    State(s): State<Arc<AppState>>,
    ApiQuery(q): ApiQuery<LiveQuery>,
) -> Result<Sse<impl Stream<Item = Result<SseEvent, Infallible>>>, ApiError> {
    // With several clusters, `CLUSTER/NAME` of a configured one.
    let filter = q
        .election
        .as_deref()
        .map(|raw| s.target(raw))
        .transpose()
        .map_err(ApiError::from)?
        .map(|t| t.full);
    let rx = s.live.subscribe();
    // etcd's own events concern every election: sent whatever the filter,
    // as `event: cluster`.
    let crx = Some(s.cluster_live.subscribe());
    // A Lease's renewals: only for a subscriber that names one election.
    let lrx = filter.as_ref().map(|_| s.lease_live.subscribe());
    let start = (rx, crx, lrx, filter);
    let stream = stream::unfold(start, |(mut rx, mut crx, mut lrx, filter)| async move {
        loop {
            let cluster = async {
                match crx.as_mut() {
                    Some(c) => c.recv().await,
                    None => std::future::pending().await,
                }
            };
            let lease = async {
                match lrx.as_mut() {
                    Some(l) => l.recv().await,
                    None => std::future::pending().await,
                }
            };
            tokio::select! {
                item = lease => match item {
                    Ok(l) if filter.as_deref() == Some(l.election.as_str()) => {
                        return Some((Ok(lease_sse(&l)), (rx, crx, lrx, filter)));
                    }
                    Ok(_) => {}
                    // Missed renewals: the next one says all of it again.
                    Err(RecvError::Lagged(_)) => {}
                    Err(RecvError::Closed) => lrx = None,
                },
                item = rx.recv() => match item {
                    Ok(event) if !concerns(filter.as_deref(), &event) => {}
                    Ok(event) => return Some((Ok(event_sse(&event)), (rx, crx, lrx, filter))),
                    Err(RecvError::Lagged(n)) => {
                        return Some((Ok(lagged_sse(n)), (rx, crx, lrx, filter)));
                    }
                    Err(RecvError::Closed) => return None,
                },
                item = cluster => match item {
                    Ok(e) => {
                        let data = serde_json::to_string(&*e).unwrap_or_default();
                        let sse = SseEvent::default().event("cluster").data(data);
                        return Some((Ok(sse), (rx, crx, lrx, filter)));
                    }
                    Err(RecvError::Lagged(n)) => {
                        return Some((Ok(lagged_sse(n)), (rx, crx, lrx, filter)));
                    }
                    // No more etcd events (the sender is gone): the
                    // elections' feed goes on.
                    Err(RecvError::Closed) => crx = None,
                },
            }
        }
    });
    Ok(Sse::new(stream).keep_alive(KeepAlive::new().interval(Duration::from_secs(15))))
}

/// Whether a subscriber filtering on `filter` gets `event`: its own, and
/// the fleet-wide ones of its cluster.
fn concerns(filter: Option<&str>, event: &crate::events::Event) -> bool {
    filter.is_none_or(|f| {
        event.election == f
            || event.election.is_empty()
            || event.election == crate::events::fleet_name_of(f)
    })
}

/// An event as its message: `id: <revision>`, `event: <type>`, its JSON.
fn event_sse(event: &crate::events::Event) -> SseEvent {
    let data = serde_json::to_string(event).unwrap_or_default();
    SseEvent::default()
        .id(event.revision.to_string())
        .event(event.kind.name())
        .data(data)
}

/// A Lease's renewal or lapse as its message (no id: no revision of its
/// own).
fn lease_sse(lease: &crate::events::LeaseNow) -> SseEvent {
    let data = serde_json::to_string(lease).unwrap_or_default();
    SseEvent::default().event("lease").data(data)
}

/// `{"missed":N}`: the subscriber fell behind and should re-read.
fn lagged_sse(missed: u64) -> SseEvent {
    SseEvent::default()
        .event("lagged")
        .data(format!("{{\"missed\":{missed}}}"))
}
