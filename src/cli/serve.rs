//! `tenure serve`: wires the watcher to the sinks (metrics, traces, history)
//! and serves HTTP. One update stream, applied in order: metrics and
//! readiness in memory, spans through `tracing`, batches to the history
//! writer (whose queue slows the watcher down rather than dropping anything).

use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use anyhow::Context;
use clap::Args;
use tokio::sync::{broadcast, mpsc};

use crate::election::{shutdown_signal, Client};
use crate::events::{Event, Update};
use crate::history::Store;
use crate::telemetry::{self, Metrics};
use crate::watch::{WatchConfig, Watcher};
use crate::web::api::RateLimiter;
use crate::web::{self, AppState, Auth, Limits, Readiness};

#[derive(Debug, Args)]
pub struct ServeArgs {
    /// Address to serve HTTP on (port 0 picks a free port; the bound address is printed).
    #[arg(long, env = "TENURE_LISTEN", default_value = "127.0.0.1:8080")]
    pub listen: SocketAddr,

    /// SQLite history file (created if missing).
    #[arg(long, env = "TENURE_DB", default_value = "tenure.db")]
    pub db: PathBuf,

    /// How long history is kept (e.g. 30d, 12h; 0 keeps everything).
    #[arg(long, env = "TENURE_RETENTION", default_value = "30d", value_parser = parse_duration)]
    pub retention: Duration,

    /// At most this many elections are tracked; more are counted and logged.
    #[arg(long, env = "TENURE_MAX_ELECTIONS", default_value = "10000")]
    pub max_elections: usize,

    /// Bearer token required by the mutating API calls (campaign, renew, resign, fence).
    #[arg(long, env = "TENURE_API_TOKEN", hide_env_values = true)]
    pub api_token: Option<String>,

    /// Let anyone who can reach the server call the mutating API (trusted networks, `tenure dev`).
    #[arg(long, conflicts_with = "api_token")]
    pub no_auth: bool,

    /// Largest TTL a campaign over HTTP may ask for, in seconds.
    #[arg(long, env = "TENURE_MAX_TTL", default_value = "3600")]
    pub max_ttl: u64,

    /// Campaign calls per second (all clients together) before the API answers 429.
    #[arg(long, env = "TENURE_CAMPAIGN_RATE", default_value = "100")]
    pub campaign_rate: u32,

    /// Largest request body, in bytes.
    #[arg(long, env = "TENURE_MAX_BODY", default_value = "16384")]
    pub max_body: usize,
}

fn parse_duration(s: &str) -> Result<Duration, String> {
    if s.trim() == "0" {
        return Ok(Duration::ZERO);
    }
    humantime::parse_duration(s).map_err(|e| format!("{s:?}: {e} (examples: 30d, 12h, 90m)"))
}

pub async fn run(client: Client, args: ServeArgs) -> anyhow::Result<i32> {
    run_until(client, args, async {
        let _ = shutdown_signal().await;
    })
    .await
}

/// Serves until `stop` resolves (or the watcher ends), then commits the
/// history and shuts the HTTP server down gracefully.
pub async fn run_until(
    client: Client,
    args: ServeArgs,
    stop: impl std::future::Future<Output = ()>,
) -> anyhow::Result<i32> {
    let store = Store::open(&args.db, args.retention)
        .with_context(|| format!("opening the history at {}", args.db.display()))?;
    let resume = store
        .resume_point()
        .context("reading where the history left off")?;
    let metrics = Arc::new(Metrics::new().context("creating metrics")?);
    let readiness = Arc::new(Readiness::default());

    let listener = tokio::net::TcpListener::bind(args.listen)
        .await
        .with_context(|| format!("listening on {}", args.listen))?;
    let addr = listener.local_addr()?;
    let (live, _) = tokio::sync::broadcast::channel(1024);
    let auth = match (&args.api_token, args.no_auth) {
        (Some(t), _) if !t.is_empty() => Auth::Token(t.clone()),
        (_, true) => Auth::Open,
        _ => Auth::Disabled,
    };
    let limits = Limits {
        max_body_bytes: args.max_body,
        max_ttl_seconds: args.max_ttl,
        campaigns_per_second: args.campaign_rate,
        ..Limits::default()
    };
    let state = Arc::new(AppState {
        metrics: metrics.clone(),
        readiness: readiness.clone(),
        history: store.reader(),
        client: client.clone(),
        live: live.clone(),
        auth,
        api_rate: RateLimiter::new(limits.campaigns_per_second),
        limits,
    });
    let app = web::router(state);
    let (stop_http, http_stopped) = tokio::sync::oneshot::channel::<()>();
    let server = tokio::spawn(async move {
        axum::serve(listener, app)
            .with_graceful_shutdown(async {
                let _ = http_stopped.await;
            })
            .await
    });
    match &resume {
        Some(r) => eprintln!(
            "tenure: resuming after revision {} from {}",
            r.revision,
            args.db.display()
        ),
        None => eprintln!("tenure: new history at {}", args.db.display()),
    }
    eprintln!(
        "tenure: serving on http://{addr} (dashboard at /, API at /api/v1, metrics at /metrics)"
    );

    let (tx, mut rx) = mpsc::channel::<Update>(4096);
    let cfg = WatchConfig {
        max_elections: args.max_elections,
        ..WatchConfig::default()
    };
    let watcher = tokio::spawn(Watcher::new(client.clone(), cfg).run(resume, tx));
    tokio::pin!(stop);
    let mut code = 0;
    loop {
        tokio::select! {
            update = rx.recv() => match update {
                Some(u) => apply(&u, &metrics, &readiness, &store, &live).await?,
                None => {
                    eprintln!("tenure: the watcher stopped");
                    code = 1;
                    break;
                }
            },
            _ = &mut stop => break,
        }
    }
    // Whatever the watcher already produced is complete: keep it.
    watcher.abort();
    while let Ok(u) = rx.try_recv() {
        apply(&u, &metrics, &readiness, &store, &live).await?;
    }
    let revision = store.close().await.context("closing the history")?;
    eprintln!("tenure: history committed up to revision {revision}");
    let _ = stop_http.send(());
    if let Ok(Err(e)) = server.await {
        eprintln!("tenure: HTTP server: {e}");
    }
    Ok(code)
}

async fn apply(
    u: &Update,
    metrics: &Metrics,
    readiness: &Readiness,
    store: &Store,
    live: &broadcast::Sender<Arc<Event>>,
) -> anyhow::Result<()> {
    metrics.apply(u);
    readiness.apply(u);
    telemetry::record(u);
    if let Update::Batch(b) = u {
        store.write(b.clone()).await.context("writing history")?;
        for e in &b.events {
            // No subscribers is fine.
            let _ = live.send(Arc::new(e.clone()));
        }
    }
    Ok(())
}
