//! The whole router served over HTTP on a history file.

use std::net::{Ipv4Addr, SocketAddrV4, TcpListener};
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use reqwest::StatusCode;
use tenure::election::Client;
use tenure::events::{now_ms, Batch, Update, WatchStatus};
use tenure::feed::readiness::Readiness;
use tenure::history::Store;
use tenure::telemetry::Metrics;
use tenure::web::{self, AppState, Auth, Limits};

use crate::story::*;

pub struct App {
    pub base: String,
    pub _server: tokio::task::JoinHandle<()>,
}

impl App {
    pub fn url(&self, path: &str) -> String {
        format!("{}{path}", self.base)
    }

    pub async fn get(&self, path: &str) -> (StatusCode, String) {
        let resp = http().get(self.url(path)).send().await.expect("GET");
        let status = resp.status();
        (status, resp.text().await.expect("body"))
    }
}

pub fn http() -> reqwest::Client {
    reqwest::Client::builder()
        .timeout(Duration::from_secs(30))
        .build()
        .expect("http client")
}

/// A loopback port with nothing listening (bound, then released).
pub fn dead_endpoint() -> String {
    let l = TcpListener::bind(SocketAddrV4::new(Ipv4Addr::LOCALHOST, 0)).expect("bind");
    let port = l.local_addr().expect("addr").port();
    drop(l);
    format!("http://127.0.0.1:{port}")
}

pub async fn open_store(dir: &tempfile::TempDir) -> (Store, PathBuf) {
    let path = dir.path().join("history.db");
    let store = Store::open(&path, Duration::ZERO).expect("open store");
    (store, path)
}

pub async fn write(store: &Store, batches: Vec<Batch>) {
    for b in batches {
        store.write(b).await.expect("write");
    }
    store.flush().await.expect("flush");
}

/// The router's state on `store`: open (no auth), default limits.
pub fn app_state(store: &Store, client: Client, readiness: Arc<Readiness>) -> Arc<AppState> {
    let limits = Limits::default();
    Arc::new(AppState {
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
    })
}

/// Serves the whole router (API, live feed, pages) on a free port.
pub async fn serve(store: &Store, endpoint: String, etcd_up: bool) -> App {
    let client = Client::connect(&[endpoint], "")
        .await
        .expect("client")
        // What serve gives its page reads: 500 ms could run out on a loaded machine.
        .with_op_timeout(Duration::from_millis(1_500));
    let readiness = Arc::new(Readiness::default());
    readiness.apply(&Update::Watch(WatchStatus::EtcdUp(etcd_up)));
    readiness.apply(&Update::Watch(WatchStatus::CaughtUp { revision: 140 }));
    if !etcd_up {
        readiness.apply(&Update::Watch(WatchStatus::EtcdUp(false)));
    }
    let state = app_state(store, client, readiness);
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .expect("bind");
    let addr = listener.local_addr().expect("addr");
    let app = web::router(state);
    let server = tokio::spawn(async move {
        let _ = axum::serve(listener, app).await;
    });
    App {
        base: format!("http://{addr}"),
        _server: server,
    }
}

pub async fn story_app() -> (tempfile::TempDir, Store, App) {
    let dir = tempfile::tempdir().expect("tempdir");
    let (store, _) = open_store(&dir).await;
    write(&store, story(now_ms())).await;
    let app = serve(&store, dead_endpoint(), false).await;
    (dir, store, app)
}
