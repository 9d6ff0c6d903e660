//! The HTTP server: `/metrics`, `/healthz`, `/readyz` (the JSON API and the
//! pages come with the web issue). Handlers read shared state the serve loop
//! keeps up to date; they never talk to etcd themselves.

use std::sync::atomic::{AtomicBool, AtomicI64, Ordering};
use std::sync::Arc;

use axum::extract::State;
use axum::http::{header, StatusCode};
use axum::response::IntoResponse;
use axum::routing::get;
use axum::Router;

use crate::events::{Update, WatchStatus};
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

    pub fn revision(&self) -> i64 {
        self.revision.load(Ordering::Relaxed)
    }
}

/// Everything the handlers share.
pub struct AppState {
    pub metrics: Arc<Metrics>,
    pub readiness: Arc<Readiness>,
}

pub fn router(state: Arc<AppState>) -> Router {
    Router::new()
        .route("/metrics", get(metrics))
        .route("/healthz", get(|| async { "ok\n" }))
        .route("/readyz", get(readyz))
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
