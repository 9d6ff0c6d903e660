//! The HTTP server: the JSON API (`api`), the pages (`pages`, with the SVG
//! timeline laid out in `timeline`), the live feed (`live`, SSE), static
//! assets, `/metrics`, `/healthz`, `/readyz`.
//!
//! Handlers read what the serve loop keeps up to date (metrics, readiness,
//! the history file, the live broadcast) and, for the mutating API calls,
//! use the election core. They never talk to the watcher.

pub mod api;
mod clusters;
pub mod incident;
pub mod live;
pub mod openapi;
pub mod pages;
pub mod queue;
pub mod replays;
mod scrape;
mod shared;
mod text;
pub mod timeline;

use std::sync::Arc;

use axum::extract::State;
use axum::http::StatusCode;
use axum::response::IntoResponse;
use axum::Router;
use tokio::sync::broadcast;

use crate::election::Client;
use crate::events::Event;
use crate::feed::readiness::Readiness;
use crate::history::Reader;
use crate::telemetry::Metrics;

/// Who may call the mutating API.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Auth {
    /// `Authorization: Bearer <token>` required.
    Token(String),
    /// No token configured: mutating calls are refused with a message that
    /// says how to enable them.
    Disabled,
    /// `--no-auth`: anyone on the network may elect and resign.
    Open,
}

/// Bounds on what the API accepts.
#[derive(Debug, Clone)]
pub struct Limits {
    /// Largest request body, in bytes.
    pub max_body_bytes: usize,
    /// Largest campaign TTL, in seconds.
    pub max_ttl_seconds: u64,
    /// Longest `wait_seconds` of a campaign.
    pub max_wait_seconds: u64,
    /// Campaign calls per second (all clients together) before 429.
    pub campaigns_per_second: u32,
}

impl Default for Limits {
    fn default() -> Self {
        Self {
            max_body_bytes: 16 * 1024,
            max_ttl_seconds: 3600,
            max_wait_seconds: 300,
            campaigns_per_second: 100,
        }
    }
}

/// Everything the handlers share.
pub struct AppState {
    pub metrics: Arc<Metrics>,
    pub readiness: Arc<Readiness>,
    /// The history file (queries run on blocking threads).
    pub history: Reader,
    /// The election core, for the mutating API and live reads (with
    /// several clusters, each's own is in `clusters`; `None` when none
    /// answered at start).
    pub client: Option<Client>,
    /// Every event, as the watcher produced it, for SSE subscribers.
    pub live: broadcast::Sender<Arc<Event>>,
    /// etcd's own events as they are recorded, for the same feed.
    pub cluster_live: broadcast::Sender<Arc<crate::events::cluster::ClusterEvent>>,
    /// Kubernetes Leases' renewals and lapses as the watchers read them
    /// (named as the pages name them), for the same feed: a Lease's page
    /// follows them without polling.
    pub lease_live: broadcast::Sender<Arc<crate::events::LeaseNow>>,
    pub auth: Auth,
    /// `--allowed-host`: names a mutating call may be addressed to besides
    /// IP literals and `localhost` (`api/origin.rs`).
    pub allowed_hosts: Vec<api::AllowedHost>,
    /// `--read-token`: every read but the probes needs it (or the API
    /// token); `None`: reads are open.
    pub read_token: Option<String>,
    pub limits: Limits,
    pub api_rate: api::RateLimiter,
    /// What the watcher reads (the pages read Patroni's members live).
    pub sources: crate::layout::Sources,
    /// Several clusters (`serve --cluster`), each with its own
    /// client, readiness, metrics and sources; the fields above are then
    /// the first cluster's (`client`, `sources`) or serve-wide (`metrics`:
    /// the history writer's). Empty: the one cluster of the fields above.
    pub clusters: Vec<ClusterView>,
}

pub use clusters::{within_cluster, ClusterView, Target};

pub fn router(state: Arc<AppState>) -> Router {
    let body_limit = state.limits.max_body_bytes;
    Router::new()
        .merge(openapi::routes(&state))
        .merge(api::fallback())
        .merge(pages::router())
        .merge(incident::router())
        .layer(axum::extract::DefaultBodyLimit::max(body_limit))
        .layer(axum::middleware::from_fn_with_state(
            state.clone(),
            api::guard_reads,
        ))
        .layer(axum::middleware::from_fn(api::trace_requests))
        .with_state(state)
}

/// Readiness: the watcher streams and what it sees is recorded; one line
/// per cluster with several. No credential.
#[utoipa::path(get, path = "/readyz", tag = "operations", security(()),
    responses(
        (status = 200, description = "`ready: watching at revision N`", content_type = "text/plain", body = String),
        (status = 503, description = "`not ready: …`, saying why", content_type = "text/plain", body = String),
    ))]
async fn readyz(State(s): State<Arc<AppState>>) -> impl IntoResponse {
    let (ready, text) = if s.clusters.is_empty() {
        let (ready, mut text) = readiness_verdict(&s.readiness);
        for line in s.readiness.writer_lines().into_iter().flatten() {
            text.push_str(&format!("{line}\n"));
        }
        (ready, text)
    } else {
        clusters::readyz(&s)
    };
    let status = if ready {
        StatusCode::OK
    } else {
        StatusCode::SERVICE_UNAVAILABLE
    };
    (status, text)
}

/// What `/readyz` says when etcd refuses this replica's writer campaign for
/// good (the writer line below says why and what to grant).
const WRITER_REFUSED: &str = "etcd refuses this replica's campaign for the history \
     writer: it serves, but can never take over recording (see \"this replica\" below)";

/// Whether one watcher is ready, and the text `/readyz` gives for it.
fn readiness_verdict(r: &Readiness) -> (bool, String) {
    // The cap is not a reason to refuse traffic, but it is said here too,
    // on a line of its own after the first.
    let cap = r
        .cap_reached()
        .map(|c| format!("{}\n", c.sentence()))
        .unwrap_or_default();
    if let Some(problem) = r.etcd_refused().or_else(|| r.connect_problem()) {
        (false, format!("not ready: {problem}\n"))
    } else if let Some(problem) = r.floor_problem() {
        (false, format!("not ready: {problem}\n{cap}"))
    } else if r.is_ready() {
        match r.writer_refused() {
            // Its pages are right, but a replica that can never take over
            // writing is a configuration error, like a floor it cannot
            // raise: held back from traffic (and from a rolling update's
            // progress) until it is fixed; why: its writer line.
            Some(_) => (false, format!("not ready: {WRITER_REFUSED}\n{cap}")),
            None => (
                true,
                format!("ready: watching at revision {}\n{cap}", r.revision()),
            ),
        }
    } else if let Some(why) = r.not_recording().filter(|_| r.watching()) {
        (false, why)
    } else if r.stuck() {
        (
            false,
            format!(
                "not ready: the watch keeps failing after revision {} and nothing is \
                 recorded; see tenure's log\n",
                r.revision()
            ),
        )
    } else {
        (
            false,
            format!(
                "not ready: {} unreachable or the watcher has not loaded its snapshot yet\n",
                r.source()
            ),
        )
    }
}

#[cfg(test)]
mod tests {
    use crate::events::{Batch, Event, EventKind, Update, WatchStatus};
    use crate::feed::readiness::Readiness;

    #[test]
    fn readiness_reports_a_stuck_watch_and_a_reset_revision() {
        let r = Readiness::default();
        r.apply(&Update::Watch(WatchStatus::EtcdUp(true)));
        r.apply(&Update::Batch(Batch {
            revision: 100,
            events: vec![],
        }));
        assert!(r.is_ready());
        r.apply(&Update::Watch(WatchStatus::Stuck {
            next_revision: 101,
            attempts: 3,
        }));
        assert!(!r.is_ready(), "a stuck watch records nothing: not ready");
        r.apply(&Update::Watch(WatchStatus::CaughtUp { revision: 120 }));
        assert!(r.is_ready());
        assert_eq!(r.revision(), 120);
        // A reset: the new timeline's revision, lower, is the one reported.
        r.apply(&Update::Batch(Batch {
            revision: 7,
            events: vec![Event {
                revision: 7,
                at_ms: 0,
                election: String::new(),
                kind: EventKind::Reset {
                    from_revision: 120,
                    to_revision: 7,
                    previous_cluster_id: Some(1),
                    cluster_id: 2,
                },
            }],
        }));
        assert_eq!(r.revision(), 7);
    }

    #[test]
    fn readiness_names_the_source_it_waits_for() {
        let r = Readiness::default();
        assert!(super::readiness_verdict(&r).1.contains("etcd unreachable"));
        r.set_source("the Kubernetes API");
        let (ready, text) = super::readiness_verdict(&r);
        assert!(!ready);
        assert!(text.contains("the Kubernetes API unreachable"), "{text}");
        assert!(!text.contains("etcd"), "{text}");
    }
}
