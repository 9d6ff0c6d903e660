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
use crate::events::cluster::{ClusterEvent, ClusterEventKind};
use crate::events::{Event, Update};
use crate::history::{Db, Store};
use crate::telemetry::{self, Metrics, MetricsOptions};
// Issue 15: a SQLite file of one's own, or a PostgreSQL history shared by replicas.
use super::floor::FloorKeeper;
use super::replica::{self, History};
use crate::watch::{WatchConfig, Watcher};
use crate::web::api::RateLimiter;
use crate::web::{self, AppState, Auth, Limits, Readiness};

#[derive(Debug, Args)]
pub struct ServeArgs {
    /// Address to serve HTTP on (port 0 picks a free port; the bound address is printed).
    #[arg(long, env = "TENURE_LISTEN", default_value = "127.0.0.1:8080")]
    pub listen: SocketAddr,

    /// History: a SQLite file (created if missing), or a postgres://user@host/db URL
    /// shared by several replicas (one writes, elected; all serve it). TLS as libpq:
    /// ?sslmode=verify-full&sslrootcert=CA.pem (also sslcert=, sslkey=).
    #[arg(long, env = "TENURE_DB", default_value = "tenure.db")]
    pub db: PathBuf,

    /// With a postgres:// history: TTL of the history writer's term
    /// (`tenure/history-writer`); a dead writer is replaced within it.
    #[arg(long, env = "TENURE_WRITER_TTL", default_value = "5s", value_parser = parse_duration)]
    pub writer_ttl: Duration,

    /// How long history is kept (e.g. 30d, 12h; 0 keeps everything).
    #[arg(long, env = "TENURE_RETENTION", default_value = "30d", value_parser = parse_duration)]
    pub retention: Duration,

    /// Also watch other systems' elections: LAYOUT:PREFIX, repeatable (layouts: `concurrency`,
    /// etcd's concurrency package, at any depth under PREFIX; `key`, each key one election;
    /// `patroni`, PREFIX its namespace, default /service/; `tenure`). Their elections are
    /// named by key path (`/app/jobs`, `/service/SCOPE`). Several key ranges need etcd 3.4.31+
    /// or 3.5.13+.
    #[arg(long = "source", env = "TENURE_SOURCES", value_delimiter = ',', value_name = "LAYOUT:PREFIX", value_parser = crate::layout::Source::parse)]
    pub sources: Vec<crate::layout::Source>,

    /// Watch only the --source(s), not tenure's own elections under --prefix (one source per
    /// serve works on any etcd version).
    #[arg(long, env = "TENURE_SOURCES_ONLY", requires = "sources")]
    pub sources_only: bool,

    /// At most this many elections are tracked; changes of more are ignored, counted,
    /// logged, and said on the overview and in /readyz.
    #[arg(long, env = "TENURE_MAX_ELECTIONS", default_value = "100000")]
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

    /// How often etcd's own state (leader, members, alarms) is polled for the
    /// incident view: 2 + members small requests each time (0 turns it off).
    #[arg(long, env = "TENURE_CLUSTER_POLL", default_value = "2s", value_parser = parse_duration)]
    pub cluster_poll: Duration,

    /// Raise tenure's token floor when etcd starts over (always, but for
    /// `tenure dev`, whose etcd is new at every start).
    #[arg(skip = true)]
    pub raise_token_floor: bool,
}

/// `tenure serve`'s command line: the server's flags, and what the metrics
/// expose.
#[derive(Debug, Args)]
pub struct ServeCommand {
    #[command(flatten)]
    pub args: ServeArgs,

    /// Also expose, per election, the term-duration histogram and term ends by
    /// cause: 35 series per election instead of at most 12 (by default both are
    /// fleet-wide only).
    #[arg(long, env = "TENURE_PER_ELECTION_DETAIL")]
    pub per_election_detail: bool,
}

fn parse_duration(s: &str) -> Result<Duration, String> {
    if s.trim() == "0" {
        return Ok(Duration::ZERO);
    }
    humantime::parse_duration(s).map_err(|e| format!("{s:?}: {e} (examples: 30d, 12h, 90m)"))
}

pub async fn run(client: Client, cmd: ServeCommand) -> anyhow::Result<i32> {
    let ServeCommand {
        args,
        per_election_detail,
    } = cmd;
    let metrics = MetricsOptions {
        per_election_detail,
    };
    // A user without read permission (or a TLS or password problem) is an
    // error now, not a watcher retrying forever. Write permission is not
    // needed: with a read-only role the mutating API answers 403. Bounded:
    // a frozen etcd must not delay serving the history (the watcher waits).
    // (A --source that cannot be read is refused, with the reason, when
    // the watcher's configuration is made.)
    let ranges = watched_ranges(&args, client.keys());
    if let Ok(checked) =
        tokio::time::timeout(Duration::from_secs(1), client.check_read_access(&ranges)).await
    {
        checked?;
    }
    run_with(client, args, metrics, async {
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
    run_with(client, args, MetricsOptions::default(), stop).await
}

/// [`run_until`] with the metrics' options.
pub async fn run_with(
    client: Client,
    args: ServeArgs,
    metrics: MetricsOptions,
    stop: impl std::future::Future<Output = ()>,
) -> anyhow::Result<i32> {
    // Bound first: a replica of a shared history names its address when it
    // campaigns to write.
    let listener = tokio::net::TcpListener::bind(args.listen)
        .await
        .with_context(|| format!("listening on {}", args.listen))?;
    let addr = listener.local_addr()?;
    let db = Db::from_arg(&args.db);
    // Before anything is opened: a --source etcd cannot serve is refused.
    let cfg = watch_config(&client, &args).await?;
    let metrics = Arc::new(Metrics::with_options(metrics).context("creating metrics")?);
    let readiness = Arc::new(Readiness::with_max_elections(args.max_elections));
    let (store, resume) =
        open_history(&client, &args, &cfg, &db, addr, &metrics, &readiness).await?;
    if let Some(r) = &resume {
        // Terms leading across the restart get their series now: the
        // watcher adopts them without an event.
        metrics.adopt(&r.open_terms);
    }
    let mut floors = FloorKeeper::new(client.clone(), readiness.clone(), args.raise_token_floor);

    let (live, _) = tokio::sync::broadcast::channel(1024);
    let (cluster_live, _) = tokio::sync::broadcast::channel(256);
    let state = Arc::new(AppState {
        metrics: metrics.clone(),
        readiness: readiness.clone(),
        history: store.reader(),
        client: client.clone(),
        live: live.clone(),
        cluster_live: cluster_live.clone(),
        auth: auth_of(&args),
        api_rate: RateLimiter::new(args.campaign_rate),
        limits: limits_of(&args),
        sources: cfg.sources_read(client.keys().prefix()),
    });
    let (stop_http, server) = start_http(listener, state);
    announce(resume.as_ref(), &db, addr);

    let (tx, mut rx) = mpsc::channel::<Update>(4096);
    let watcher = crate::task::spawn("watcher", Watcher::new(client.clone(), cfg).run(resume, tx));
    let (poller, mut crx) = start_cluster_poller(&client, &args, &store, &mut floors).await?;
    let pid = std::process::id();
    store
        .cluster_event(serve_event(ClusterEventKind::ServeStarted {
            version: env!("CARGO_PKG_VERSION").to_owned(),
            pid,
        }))
        .await
        .context("writing history")?;
    let sinks = Sinks {
        metrics: &metrics,
        readiness: &readiness,
        store: &store,
        live: &live,
        cluster_live: &cluster_live,
    };
    let code = sinks.serve(&mut rx, &mut crx, stop, &mut floors).await?;
    // Whatever the watcher already produced is complete: keep it.
    watcher.abort();
    if let Some(p) = &poller {
        p.abort();
    }
    while let Ok(u) = rx.try_recv() {
        sinks.apply(&u).await?;
    }
    close_history(store, &readiness, pid).await?;
    let _ = stop_http.send(());
    if let Ok(Err(e)) = server.await {
        eprintln!("tenure: HTTP server: {e}");
    }
    Ok(code)
}

/// The HTTP server, stopped gracefully when the returned sender is used.
fn start_http(
    listener: tokio::net::TcpListener,
    state: Arc<AppState>,
) -> (
    tokio::sync::oneshot::Sender<()>,
    tokio::task::JoinHandle<std::io::Result<()>>,
) {
    let app = web::router(state);
    let (stop_http, http_stopped) = tokio::sync::oneshot::channel::<()>();
    let server = crate::task::spawn("http server", async move {
        axum::serve(listener, app)
            .with_graceful_shutdown(async {
                let _ = http_stopped.await;
            })
            .await
    });
    (stop_http, server)
}

/// Says where the history resumes and where serve listens.
fn announce(resume: Option<&crate::events::ResumePoint>, db: &Db, addr: SocketAddr) {
    match resume {
        Some(r) => eprintln!(
            "tenure: resuming after revision {} from {}",
            r.revision,
            db.display()
        ),
        None => eprintln!("tenure: new history at {}", db.display()),
    }
    eprintln!(
        "tenure: serving on http://{addr} (dashboard at /, API at /api/v1, metrics at /metrics)"
    );
}

/// Where every update goes, in order.
struct Sinks<'a> {
    metrics: &'a Metrics,
    readiness: &'a Readiness,
    store: &'a History,
    live: &'a broadcast::Sender<Arc<Event>>,
    cluster_live: &'a broadcast::Sender<Arc<ClusterEvent>>,
}

impl Sinks<'_> {
    /// The watcher's updates and etcd's own events to the sinks, until
    /// `stop` (exit code 0) or the watcher stops (1). A batch also tells the
    /// token floor keeper of resets.
    async fn serve(
        &self,
        rx: &mut mpsc::Receiver<Update>,
        crx: &mut mpsc::Receiver<ClusterEvent>,
        stop: impl std::future::Future<Output = ()>,
        floors: &mut FloorKeeper,
    ) -> anyhow::Result<i32> {
        tokio::pin!(stop);
        loop {
            tokio::select! {
                update = rx.recv() => match update {
                    Some(u) => {
                        if let Update::Batch(b) = &u {
                            floors.on_batch(b);
                        }
                        self.apply(&u).await?
                    }
                    None => {
                        eprintln!("tenure: the watcher stopped");
                        return Ok(1);
                    }
                },
                Some(e) = crx.recv() => record_cluster(self.store, self.cluster_live, e).await?,
                _ = &mut stop => return Ok(0),
            }
        }
    }

    async fn apply(&self, u: &Update) -> anyhow::Result<()> {
        let (metrics, readiness, store) = (self.metrics, self.readiness, self.store);
        apply(u, metrics, readiness, store, self.live, self.cluster_live).await
    }
}

/// The history sink and where it left off: a SQLite file of one's own (this
/// replica writes), or the shared PostgreSQL history (the replicas campaign
/// to write; see `replica.rs`).
async fn open_history(
    client: &Client,
    args: &ServeArgs,
    watch: &WatchConfig,
    db: &Db,
    addr: SocketAddr,
    metrics: &Arc<Metrics>,
    readiness: &Arc<Readiness>,
) -> anyhow::Result<(History, Option<crate::events::ResumePoint>)> {
    let writer_metrics =
        telemetry::writer::HistoryWriterMetrics::register(metrics).context("creating metrics")?;
    Ok(match db {
        Db::Sqlite(path) => {
            let store = Store::open(path, args.retention)
                .with_context(|| format!("opening the history at {}", path.display()))?;
            let resume = store
                .resume_point()
                .context("reading where the history left off")?;
            writer_metrics.writer.set(1);
            (History::Local(store), resume)
        }
        Db::Postgres(url) => {
            let reader = replica::open_reader(url)
                .await
                .with_context(|| format!("opening the history at {}", db.display()))?;
            let r = reader.clone();
            let resume = tokio::task::spawn_blocking(move || r.resume_point())
                .await?
                .context("reading where the history left off")?;
            (
                History::Shared(replica::Shared::start(
                    client.clone(),
                    reader,
                    replica::SharedConfig {
                        url: url.clone(),
                        retention: args.retention,
                        watch: watch.clone(),
                        ttl: crate::election::Ttl::from_duration(args.writer_ttl)?,
                        id: replica::candidate_id(addr),
                        metrics: writer_metrics,
                        readiness: readiness.clone(),
                    },
                )?),
                resume,
            )
        }
    })
}

/// Who may call the mutating API: a bearer token, everyone (`--no-auth`),
/// or nobody.
fn auth_of(args: &ServeArgs) -> Auth {
    match (&args.api_token, args.no_auth) {
        (Some(t), _) if !t.is_empty() => Auth::Token(t.clone()),
        (_, true) => Auth::Open,
        _ => Auth::Disabled,
    }
}

fn limits_of(args: &ServeArgs) -> Limits {
    Limits {
        max_body_bytes: args.max_body,
        max_ttl_seconds: args.max_ttl,
        campaigns_per_second: args.campaign_rate,
        ..Limits::default()
    }
}

/// etcd's own events (issue 14): a bounded poll beside the watcher, from
/// the baseline the history recorded (none with `--cluster-poll 0`). A
/// reset recorded before raises the token floor to at least its revision
/// (a serve that stopped before raising it, or an etcd replaced since).
async fn start_cluster_poller(
    client: &Client,
    args: &ServeArgs,
    store: &History,
    floors: &mut FloorKeeper,
) -> anyhow::Result<(
    Option<tokio::task::JoinHandle<()>>,
    mpsc::Receiver<ClusterEvent>,
)> {
    let baseline_reader = store.reader();
    let baseline = tokio::task::spawn_blocking(move || baseline_reader.cluster_baseline())
        .await?
        .context("reading the recorded etcd cluster events")?;
    if let Some(floor) = baseline.floor {
        floors.raise(floor);
    }
    let (ctx, crx) = mpsc::channel::<ClusterEvent>(256);
    let poller = (!args.cluster_poll.is_zero()).then(|| {
        let timeout = client
            .op_timeout()
            .min(args.cluster_poll.max(Duration::from_secs(1)));
        crate::task::spawn(
            "cluster poller",
            crate::watch::cluster::poll(
                client.etcd(),
                baseline,
                crate::watch::cluster::PollConfig {
                    interval: args.cluster_poll,
                    timeout,
                },
                ctx,
            ),
        )
    });
    Ok((poller, crx))
}

/// The stop recorded (watched until now when the watcher was live; serve
/// stopped) and the history closed, everything committed.
async fn close_history(store: History, readiness: &Readiness, pid: u32) -> anyhow::Result<()> {
    if readiness.is_ready() {
        // Watched until this stop (issue 20.7).
        store
            .watched(crate::events::now_ms())
            .await
            .context("writing history")?;
    }
    store
        .cluster_event(serve_event(ClusterEventKind::ServeStopped { pid }))
        .await
        .context("writing history")?;
    let revision = store.close().await.context("closing the history")?;
    eprintln!("tenure: history committed up to revision {revision}");
    Ok(())
}

async fn apply(
    u: &Update,
    metrics: &Metrics,
    readiness: &Readiness,
    store: &History,
    live: &broadcast::Sender<Arc<Event>>,
    cluster_live: &broadcast::Sender<Arc<ClusterEvent>>,
) -> anyhow::Result<()> {
    metrics.apply(u);
    readiness.apply(u);
    telemetry::record(u);
    for e in crate::events::cluster::from_update(u, crate::events::now_ms()) {
        record_cluster(store, cluster_live, e).await?;
    }
    if let Update::Cluster { cluster_id } = u {
        store
            .set_cluster(*cluster_id)
            .await
            .context("writing history")?;
    }
    store.heartbeat(u).await.context("writing history")?;
    if let Update::Batch(b) = u {
        store.write(b).await.context("writing history")?;
        for e in &b.events {
            // No subscribers is fine.
            let _ = live.send(Arc::new(e.clone()));
        }
    }
    Ok(())
}

/// Stores one of etcd's events and tells the live feed.
async fn record_cluster(
    store: &History,
    live: &broadcast::Sender<Arc<ClusterEvent>>,
    e: ClusterEvent,
) -> anyhow::Result<()> {
    store
        .cluster_event(e.clone())
        .await
        .context("writing history")?;
    // No subscribers is fine.
    let _ = live.send(Arc::new(e));
    Ok(())
}

fn serve_event(kind: ClusterEventKind) -> ClusterEvent {
    let now = crate::events::now_ms();
    ClusterEvent {
        at_ms: now,
        not_before_ms: Some(now),
        kind,
    }
}

/// What the watcher reads and keeps: the sources checked against etcd
/// (several key ranges need ordered progress notifications).
async fn watch_config(client: &Client, args: &ServeArgs) -> anyhow::Result<WatchConfig> {
    let sources = Watcher::sources(client, args.sources.clone(), args.sources_only)
        .await
        .context("reading --source")?;
    Ok(WatchConfig {
        max_elections: args.max_elections,
        sources: Some(sources),
        ..WatchConfig::default()
    })
}

/// The key ranges a serve with `args` watches, for its access check and
/// the message when etcd denies them (none where the sources overlap:
/// that is refused, with the reason, by [`watch_config`]).
pub(crate) fn watched_ranges(
    args: &ServeArgs,
    keys: &crate::election::Keys,
) -> Vec<(Vec<u8>, Vec<u8>)> {
    crate::layout::Sources::for_serve(keys.prefix(), args.sources.clone(), args.sources_only)
        .map(|s| s.ranges())
        .unwrap_or_default()
}
