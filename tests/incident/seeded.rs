//! Seeded history, the whole router in-process.

use std::sync::Arc;
use std::time::Duration;

use tenure::election::{Client, FenceReason, KeyLayout};
use tenure::events::{Batch, EndCause, Event, EventKind, Update, WatchStatus};
use tenure::feed::readiness::Readiness;
use tenure::history::Store;
use tenure::telemetry::Metrics;
use tenure::web::{self, AppState, Auth, Limits};

pub fn ev(revision: i64, at_ms: i64, election: &str, kind: EventKind) -> Event {
    Event {
        revision,
        at_ms,
        election: election.to_owned(),
        kind,
    }
}

pub fn started(token: i64, holder: &str) -> EventKind {
    EventKind::TermStarted {
        token,
        holder: holder.to_owned(),
        lease_id: token + 0x1000,
        layout: KeyLayout::Single,
        previous_holder: None,
        from_snapshot: false,
    }
}

pub fn ended(token: i64, holder: &str, cause: EndCause, started_at_ms: i64) -> EventKind {
    EventKind::TermEnded {
        token,
        holder: holder.to_owned(),
        lease_id: token + 0x1000,
        cause,
        started_revision: token,
        started_at_ms,
        renewals: None,
    }
}

pub fn refused(resource: &str, token: i64, reason: FenceReason, cur: (i64, &str)) -> EventKind {
    EventKind::FenceRefused {
        resource: resource.to_owned(),
        token,
        reason,
        current_token: Some(cur.0),
        current_holder: Some(cur.1.to_owned()),
    }
}

pub async fn write(store: &Store, batches: Vec<Batch>) {
    for b in batches {
        store.write(b).await.expect("write");
    }
    store.flush().await.expect("flush");
}

/// Serves the whole router on a free loopback port; etcd is a dead port.
pub async fn serve(store: &Store) -> (String, tokio::task::JoinHandle<()>) {
    let dead = std::net::TcpListener::bind("127.0.0.1:0").expect("bind");
    let endpoint = format!("http://{}", dead.local_addr().expect("addr"));
    drop(dead);
    let client = Client::connect(&[endpoint], "")
        .await
        .expect("client")
        .with_op_timeout(Duration::from_millis(300));
    let readiness = Arc::new(Readiness::default());
    readiness.apply(&Update::Watch(WatchStatus::EtcdUp(false)));
    let limits = Limits::default();
    let state = Arc::new(AppState {
        metrics: Arc::new(Metrics::new().expect("metrics")),
        readiness,
        history: store.reader(),
        client: Some(client),
        live: tokio::sync::broadcast::channel(16).0,
        cluster_live: tokio::sync::broadcast::channel(16).0,
        lease_live: tokio::sync::broadcast::channel(16).0,
        auth: Auth::Open,
        allowed_hosts: Vec::new(),
        read_token: None,
        api_rate: web::api::RateLimiter::new(limits.campaigns_per_second),
        limits,
        sources: tenure::layout::Sources::tenure(""),
        clusters: Vec::new(),
    });
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .expect("bind");
    let addr = listener.local_addr().expect("addr");
    let app = web::router(state);
    let h = tokio::spawn(async move {
        let _ = axum::serve(listener, app).await;
    });
    (format!("http://{addr}"), h)
}
