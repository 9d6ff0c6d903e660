//! The HTTP server: the JSON API (`api`), the pages (`pages`, with the SVG
//! timeline laid out in `timeline`), the live feed (`live`, SSE), static
//! assets, `/metrics`, `/healthz`, `/readyz`.
//!
//! Handlers read what the serve loop keeps up to date (metrics, readiness,
//! the history file, the live broadcast) and, for the mutating API calls,
//! use the election core. They never talk to the watcher.

pub mod api;
pub mod live;
pub mod pages;
pub mod timeline;

use std::sync::atomic::{AtomicBool, AtomicI64, Ordering};
use std::sync::Arc;

use axum::extract::State;
use axum::http::{header, StatusCode};
use axum::response::IntoResponse;
use axum::routing::get;
use axum::Router;
use tokio::sync::broadcast;

use crate::election::Client;
use crate::events::{Event, Update, WatchStatus};
use crate::history::Reader;
use crate::telemetry::{Metrics, CONTENT_TYPE};

/// What `/readyz` reports: etcd answered the watcher last time, and the
/// watcher has loaded its snapshot and is streaming.
#[derive(Debug, Default)]
pub struct Readiness {
    etcd_up: AtomicBool,
    loaded: AtomicBool,
    revision: AtomicI64,
}

impl Readiness {
    pub fn apply(&self, update: &Update) {
        match update {
            Update::Batch(b) => {
                self.loaded.store(true, Ordering::Relaxed);
                self.revision.fetch_max(b.revision, Ordering::Relaxed);
            }
            Update::Watch(WatchStatus::EtcdUp(up)) => self.etcd_up.store(*up, Ordering::Relaxed),
            Update::Watch(WatchStatus::CaughtUp { revision }) => {
                self.etcd_up.store(true, Ordering::Relaxed);
                self.revision.fetch_max(*revision, Ordering::Relaxed);
            }
            _ => {}
        }
    }

    pub fn is_ready(&self) -> bool {
        self.etcd_up.load(Ordering::Relaxed) && self.loaded.load(Ordering::Relaxed)
    }

    pub fn etcd_up(&self) -> bool {
        self.etcd_up.load(Ordering::Relaxed)
    }

    pub fn revision(&self) -> i64 {
        self.revision.load(Ordering::Relaxed)
    }
}

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
    /// The election core, for the mutating API and live reads.
    pub client: Client,
    /// Every event, as the watcher produced it, for SSE subscribers.
    pub live: broadcast::Sender<Arc<Event>>,
    pub auth: Auth,
    pub limits: Limits,
    pub api_rate: api::RateLimiter,
}

pub fn router(state: Arc<AppState>) -> Router {
    let body_limit = state.limits.max_body_bytes;
    Router::new()
        .route("/metrics", get(metrics))
        .route("/healthz", get(|| async { "ok\n" }))
        .route("/readyz", get(readyz))
        .merge(api::router())
        .merge(live::router())
        .merge(pages::router())
        .layer(axum::extract::DefaultBodyLimit::max(body_limit))
        .layer(axum::middleware::from_fn(api::trace_requests))
        .with_state(state)
}

async fn metrics(State(s): State<Arc<AppState>>) -> impl IntoResponse {
    ([(header::CONTENT_TYPE, CONTENT_TYPE)], s.metrics.render())
}

async fn readyz(State(s): State<Arc<AppState>>) -> impl IntoResponse {
    if s.readiness.is_ready() {
        (
            StatusCode::OK,
            format!("ready: watching at revision {}\n", s.readiness.revision()),
        )
    } else {
        (
            StatusCode::SERVICE_UNAVAILABLE,
            "not ready: etcd unreachable or the watcher has not loaded its snapshot yet\n"
                .to_owned(),
        )
    }
}
