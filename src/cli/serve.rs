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
use crate::events::{Batch, Event, EventKind, Update};
use crate::history::{Db, Store};
use crate::telemetry::{self, Metrics, MetricsOptions};
// The history: a SQLite file of one's own, or a PostgreSQL history shared by replicas.
pub use super::clusters::{ClusterFlag, Connector, Watched};
use super::pipelines::{in_cluster, read_access, watch_config, Common, Inbox, Member};
use super::replica::{self, History};
use crate::watch::WatchConfig;
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

    /// Watch several etcd clusters in one serve: NAME=ENDPOINTS, repeatable (TENURE_CLUSTERS:
    /// separated by ';'). Their elections are named NAME/ELECTION; TLS, user, prefix and
    /// sources are the other flags', the same for all (per cluster: --config).
    #[arg(long = "cluster", env = "TENURE_CLUSTERS", value_delimiter = ';', value_name = "NAME=ENDPOINTS", value_parser = ClusterFlag::parse)]
    pub clusters: Vec<ClusterFlag>,

    /// A TOML file of [[cluster]] tables, each with name, endpoints and its own prefix,
    /// timeout, cacert, cert, key, user, password-file, source, sources-only (the flags'
    /// names); instead of --cluster.
    #[arg(
        long,
        env = "TENURE_CONFIG",
        value_name = "FILE",
        conflicts_with = "clusters"
    )]
    pub config: Option<PathBuf>,

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

    /// Require this token for every read too (pages, the API, SSE, /metrics; /healthz and
    /// /readyz stay open): `Authorization: Bearer TOKEN`, or HTTP Basic with the token as the
    /// password (browsers prompt for it). The --api-token is accepted for reads as well.
    #[arg(long, env = "TENURE_READ_TOKEN", hide_env_values = true)]
    pub read_token: Option<String>,

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

    /// Watch every Kubernetes Lease through the API of the kubeconfig's current context
    /// instead of etcd (named as `--source kubernetes:/registry/` names them); its user needs
    /// get, list and watch on leases (deploy/kubernetes/rbac.yaml).
    #[arg(long, env = "TENURE_KUBECONFIG", value_name = "FILE", conflicts_with_all = ["clusters", "config", "sources"])]
    pub kubeconfig: Option<PathBuf>,

    /// As --kubeconfig, with the pod's own service account (its token and CA under
    /// /var/run/secrets/kubernetes.io/serviceaccount, KUBERNETES_SERVICE_HOST/PORT).
    #[arg(long, env = "TENURE_IN_CLUSTER", conflicts_with_all = ["clusters", "config", "sources", "kubeconfig"])]
    pub in_cluster: bool,

    /// With --kubeconfig or --in-cluster: read heartbeat leases (kube-node-lease, kube-apiserver's
    /// identity leases) as elections too.
    #[arg(long, env = "TENURE_KUBE_HEARTBEATS")]
    pub kube_heartbeats: bool,

    /// The Kubernetes API read instead of etcd (set from --kubeconfig or --in-cluster).
    #[arg(skip)]
    pub kube: Option<std::sync::Arc<crate::watch::kube::KubeConfig>>,

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

    /// Label other systems' elections (--source) in leader_info{holder} by their holder
    /// value too. By default that label is empty for them: another system's values (a
    /// Patroni member's connection URL, an application's key) are not tenure's to publish.
    #[arg(long, env = "TENURE_SOURCE_HOLDER_LABELS")]
    pub source_holder_labels: bool,
}

impl ServeCommand {
    /// What the metrics expose.
    fn metrics(&self) -> MetricsOptions {
        MetricsOptions {
            per_election_detail: self.per_election_detail,
            source_holder_labels: self.source_holder_labels,
        }
    }
}

fn parse_duration(s: &str) -> Result<Duration, String> {
    if s.trim() == "0" {
        return Ok(Duration::ZERO);
    }
    humantime::parse_duration(s).map_err(|e| format!("{s:?}: {e} (examples: 30d, 12h, 90m)"))
}

pub async fn run(client: Client, cmd: ServeCommand) -> anyhow::Result<i32> {
    let metrics = cmd.metrics();
    let args = cmd.args;
    // Write permission is not needed: with a read-only role the mutating
    // API answers 403. (A --source that cannot be read is refused, with the
    // reason, when the watcher's configuration is made.)
    read_access(&client, &args.sources, args.sources_only).await?;
    run_with(client, args, metrics, async {
        let _ = shutdown_signal().await;
    })
    .await
}

/// `tenure serve --kubeconfig`/`--in-cluster`: Leases through the
/// Kubernetes API, no etcd (`kube.rs`).
pub async fn run_kube(cmd: ServeCommand) -> anyhow::Result<i32> {
    let metrics = cmd.metrics();
    let mut args = cmd.args;
    args.kube = Some(super::kube::config(
        &args.db,
        args.kubeconfig.as_deref(),
        args.kube_heartbeats,
        args.max_elections,
    )?);
    run_clusters(vec![super::kube::watched()], args, metrics, async {
        let _ = shutdown_signal().await;
    })
    .await
}

/// `tenure serve --cluster`/`--config`: connects to every cluster (each
/// checked for read access, as the one cluster is) and serves them all.
pub async fn run_many(global: &super::Global, cmd: ServeCommand) -> anyhow::Result<Option<i32>> {
    let metrics = cmd.metrics();
    let args = cmd.args;
    let Some(clusters) = super::clusters::connect(
        global,
        &args.clusters,
        args.config.as_deref(),
        &args.sources,
        args.sources_only,
    )
    .await?
    else {
        return Ok(None);
    };
    for c in &clusters {
        // One that did not answer is checked when it does (its pipeline).
        if let Some(client) = &c.client {
            read_access(client, &c.sources, c.sources_only)
                .await
                .with_context(|| in_cluster(&c.name))?;
        }
    }
    run_clusters(clusters, args, metrics, async {
        let _ = shutdown_signal().await;
    })
    .await
    .map(Some)
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

/// [`run_until`] with the metrics' options: the one cluster of `client`.
pub async fn run_with(
    client: Client,
    args: ServeArgs,
    metrics: MetricsOptions,
    stop: impl std::future::Future<Output = ()>,
) -> anyhow::Result<i32> {
    let one = Watched {
        name: None,
        connector: Connector::of(&client),
        client: Some(client),
        sources: args.sources.clone(),
        sources_only: args.sources_only,
    };
    run_clusters(vec![one], args, metrics, stop).await
}

/// Serves `clusters` (several, each named; or the one, unnamed)
/// until `stop` resolves or a watcher ends. One serve loop applies every
/// cluster's updates in the order they come: each cluster's metrics and
/// readiness are its own, its history rows are named `CLUSTER/NAME` and
/// its history state is kept under its name, in one history.
pub async fn run_clusters(
    clusters: Vec<Watched>,
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
    anyhow::ensure!(
        args.read_token.as_deref() != Some(""),
        "--read-token (TENURE_READ_TOKEN) is set but empty: give the token reads need, or \
         unset it to leave reads open (a secret that failed to populate must not open them)"
    );
    let db = Db::from_arg(&args.db);
    let named = clusters.iter().any(|c| c.name.is_some());
    anyhow::ensure!(
        !(named && matches!(db, Db::Postgres(_))),
        "--cluster with a PostgreSQL history is not supported: its replicas elect one \
         writer in one etcd. Give several clusters a SQLite history (--db FILE), or run one \
         serve per cluster (ARCHITECTURE.md, \"Several clusters\")"
    );
    if clusters.is_empty() {
        anyhow::bail!("no cluster to watch");
    }
    // Before anything is opened: a --source etcd cannot serve is refused
    // (a cluster that did not answer reads its own once it does).
    let mut cfgs = Vec::with_capacity(clusters.len());
    for c in &clusters {
        let cfg = match &c.client {
            Some(client) => Some(
                watch_config(
                    client,
                    c.sources.clone(),
                    c.sources_only,
                    args.max_elections,
                )
                .await
                .with_context(|| in_cluster(&c.name))?,
            ),
            None => None,
        };
        cfgs.push(cfg);
    }
    super::clusters::refuse_one_etcd_twice(&clusters, &cfgs).await?;
    let serve_metrics = Arc::new(Metrics::with_options(metrics).context("creating metrics")?);
    let readiness = Arc::new(Readiness::with_max_elections(args.max_elections));
    let first = clusters.iter().find_map(|c| c.client.clone());
    let store = open_history(
        first.as_ref(),
        &args,
        cfgs.first().cloned().flatten(),
        &db,
        addr,
        &serve_metrics,
        &readiness,
    )
    .await?;
    same_clusters(&store, &clusters, &db).await?;
    let mut members = Vec::with_capacity(clusters.len());
    let mut resumes = Vec::with_capacity(clusters.len());
    for (c, cfg) in clusters.iter().zip(&cfgs) {
        let (metrics, readiness) = if named {
            (
                Arc::new(Metrics::with_options(metrics).context("creating metrics")?),
                Arc::new(Readiness::with_max_elections(args.max_elections)),
            )
        } else {
            (serve_metrics.clone(), readiness.clone())
        };
        let reader = store.reader();
        let scope = c.name.clone();
        let resume = tokio::task::spawn_blocking(move || reader.resume_point_of(scope.as_deref()))
            .await?
            .context("reading where the history left off")?;
        if let Some(r) = &resume {
            // Terms leading across the restart get their series now: the
            // watcher adopts them without an event.
            metrics.adopt(&r.open_terms);
        }
        announce(c.name.as_deref(), resume.as_ref(), &db);
        let m = Member::new(c.name.clone(), metrics, readiness, args.raise_token_floor);
        if let (Some(client), Some(cfg)) = (&c.client, cfg) {
            let _ = m.sources.set(cfg.sources_read(client.keys().prefix()));
            let _ = m.client.set(client.clone());
        }
        super::kube::adopt(args.kube.as_deref(), &m);
        members.push(m);
        resumes.push(resume);
    }

    let (live, _) = tokio::sync::broadcast::channel(1024);
    let (cluster_live, _) = tokio::sync::broadcast::channel(256);
    let state = Arc::new(AppState {
        metrics: serve_metrics.clone(),
        readiness: members[0].readiness.clone(),
        history: store.reader(),
        client: first,
        live: live.clone(),
        cluster_live: cluster_live.clone(),
        auth: auth_of(&args),
        read_token: args.read_token.clone(),
        api_rate: RateLimiter::new(args.campaign_rate),
        limits: limits_of(&args),
        sources: members[0]
            .sources
            .get()
            .cloned()
            .unwrap_or_else(|| crate::layout::Sources::tenure("")),
        clusters: if named {
            members
                .iter()
                .map(|m| web::ClusterView {
                    name: m.scope.clone().unwrap_or_else(|| Arc::from("")),
                    client: m.client.clone(),
                    readiness: m.readiness.clone(),
                    metrics: m.metrics.clone(),
                    sources: m.sources.clone(),
                })
                .collect()
        } else {
            Vec::new()
        },
    });
    let (stop_http, server) = start_http(listener, state);
    eprintln!(
        "tenure: serving on http://{addr} (dashboard at /, API at /api/v1, metrics at /metrics)"
    );

    let (ctx, mut crx) = mpsc::channel::<ClusterEvent>(256);
    let common = Common {
        max_elections: args.max_elections,
        cluster_poll: args.cluster_poll,
        reader: store.reader(),
        events: ctx,
    };
    let (mut inbox, running) = match &args.kube {
        Some(kube) => super::kube::start(kube, resumes)?,
        None => super::pipelines::start(&clusters, cfgs, resumes, &mut members, common).await?,
    };
    let pid = std::process::id();
    store
        .cluster_event(serve_event(ClusterEventKind::ServeStarted {
            version: env!("CARGO_PKG_VERSION").to_owned(),
            pid,
        }))
        .await
        .context("writing history")?;
    let mut sinks = Sinks {
        members,
        store: &store,
        live: &live,
        cluster_live: &cluster_live,
    };
    let code = sinks.serve(&mut inbox, &mut crx, stop).await?;
    // Whatever the watchers already produced is complete: keep it.
    running.stop();
    for (i, u) in inbox.rest().await {
        sinks.apply(i, &u).await?;
    }
    let members = sinks.members;
    close_history(store, &members, pid).await?;
    let _ = stop_http.send(());
    if let Ok(Err(e)) = server.await {
        eprintln!("tenure: HTTP server: {e}");
    }
    Ok(code)
}

/// A history of one unnamed cluster and one of named clusters are not
/// mixed: names, resume revisions and fleet-wide marks differ.
/// A named cluster the history has not seen yet is welcome (a new one);
/// one it records that is not configured stays in it, not watched.
async fn same_clusters(store: &History, clusters: &[Watched], db: &Db) -> anyhow::Result<()> {
    let reader = store.reader();
    let recorded = tokio::task::spawn_blocking(move || reader.scopes())
        .await?
        .context("reading which clusters the history records")?;
    let named = clusters.iter().any(|c| c.name.is_some());
    let names: Vec<&str> = recorded.iter().flatten().map(String::as_str).collect();
    if named && recorded.contains(&None) {
        anyhow::bail!(
            "the history at {} records one etcd cluster watched without --cluster: several \
             clusters need a history of their own (give another --db), or serve it as before",
            db.display()
        );
    }
    if !named && !names.is_empty() {
        anyhow::bail!(
            "the history at {} records the clusters {} (serve --cluster/--config): give them \
             again, or another --db for one cluster without --cluster",
            db.display(),
            names.join(", ")
        );
    }
    Ok(())
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

/// Says where a cluster's history resumes.
fn announce(cluster: Option<&str>, resume: Option<&crate::events::ResumePoint>, db: &Db) {
    let of = cluster
        .map(|c| format!(" (cluster {c})"))
        .unwrap_or_default();
    match resume {
        Some(r) => eprintln!(
            "tenure: resuming after revision {}{of} from {}",
            r.revision,
            db.display()
        ),
        None => eprintln!("tenure: new history{of} at {}", db.display()),
    }
}

/// Where every update goes, in order.
struct Sinks<'a> {
    members: Vec<Member>,
    store: &'a History,
    live: &'a broadcast::Sender<Arc<Event>>,
    cluster_live: &'a broadcast::Sender<Arc<ClusterEvent>>,
}

impl Sinks<'_> {
    /// The watchers' updates and etcd's own events to the sinks, until
    /// `stop` (exit code 0) or a watcher stops (1). A batch also tells its
    /// cluster's token floor keeper of resets.
    async fn serve(
        &mut self,
        inbox: &mut Inbox,
        crx: &mut mpsc::Receiver<ClusterEvent>,
        stop: impl std::future::Future<Output = ()>,
    ) -> anyhow::Result<i32> {
        tokio::pin!(stop);
        loop {
            tokio::select! {
                (i, update) = inbox.recv() => match update {
                    Some(u) => self.apply(i, &u).await?,
                    None => {
                        let name = self.members.get(i).and_then(|m| m.scope.clone());
                        eprintln!("tenure: the watcher of {} stopped", in_cluster(&name));
                        return Ok(1);
                    }
                },
                Some(e) = crx.recv() => record_cluster(self.store, self.cluster_live, e).await?,
                _ = &mut stop => return Ok(0),
            }
        }
    }

    /// One update of cluster `i`: its metrics and readiness, the traces,
    /// the history (named by the cluster) and the live feed.
    async fn apply(&mut self, i: usize, u: &Update) -> anyhow::Result<()> {
        let Some(m) = self.members.get_mut(i) else {
            return Ok(());
        };
        if let (Update::Batch(b), Some(floors)) = (u, m.floors()) {
            floors.on_batch(b);
        }
        m.metrics.apply(u);
        // The first batch (the snapshot) makes /readyz say ready once the
        // pages can show it: after it is committed, not when it arrives.
        let first_load = matches!(u, Update::Batch(_)) && !m.readiness.is_loaded();
        if !first_load {
            m.readiness.apply(u);
        }
        // The history, the live feed and the traces name elections as the
        // pages do: `CLUSTER/NAME` with several clusters.
        let named = match u {
            Update::Batch(b) => Some(Update::Batch(qualified(m.scope.as_deref(), b))),
            _ => None,
        };
        telemetry::record(named.as_ref().unwrap_or(u));
        for mut e in crate::events::cluster::from_update(u, crate::events::now_ms()) {
            e.cluster = m.scope.as_deref().map(str::to_owned);
            record_cluster(self.store, self.cluster_live, e).await?;
        }
        let store = self.store;
        if let Update::Cluster { cluster_id } = u {
            store
                .set_cluster(&m.scope, *cluster_id)
                .await
                .context("writing history")?;
        }
        store
            .heartbeat(&m.scope, u)
            .await
            .context("writing history")?;
        if let Some(Update::Batch(b)) = named {
            for e in &b.events {
                // No subscribers is fine.
                let _ = self.live.send(Arc::new(e.clone()));
            }
            store.write(&m.scope, b).await.context("writing history")?;
        }
        if first_load {
            store.flush().await.context("writing history")?;
            m.readiness.apply(u);
        }
        Ok(())
    }
}

/// `b` with its elections named by `cluster` (`CLUSTER/NAME`, and
/// `CLUSTER/` for its fleet-wide events); as it is without one.
fn qualified(cluster: Option<&str>, b: &Batch) -> Batch {
    let mut b = b.clone();
    if let Some(c) = cluster {
        for e in &mut b.events {
            e.election = crate::events::qualify(c, &e.election);
            if let EventKind::NameCollision { other } = &mut e.kind {
                *other = crate::events::qualify(c, other);
            }
        }
    }
    b
}

/// The history sink and where it left off: a SQLite file of one's own (this
/// replica writes), or the shared PostgreSQL history (the replicas campaign
/// to write; see `replica.rs`).
async fn open_history(
    client: Option<&Client>,
    args: &ServeArgs,
    watch: Option<WatchConfig>,
    db: &Db,
    addr: SocketAddr,
    metrics: &Arc<Metrics>,
    readiness: &Arc<Readiness>,
) -> anyhow::Result<History> {
    let writer_metrics =
        telemetry::writer::HistoryWriterMetrics::register(metrics).context("creating metrics")?;
    Ok(match db {
        Db::Sqlite(path) => {
            let store = Store::open(path, args.retention)
                .with_context(|| format!("opening the history at {}", path.display()))?;
            writer_metrics.writer.set(1);
            History::Local(store)
        }
        Db::Postgres(url) => {
            // One cluster, connected (several are refused before).
            let (Some(client), Some(watch)) = (client, watch) else {
                anyhow::bail!("a PostgreSQL history needs its etcd cluster connected at start");
            };
            let reader = replica::open_reader(url)
                .await
                .with_context(|| format!("opening the history at {}", db.display()))?;
            History::Shared(replica::Shared::start(
                client.clone(),
                reader,
                replica::SharedConfig {
                    url: url.clone(),
                    retention: args.retention,
                    watch,
                    ttl: crate::election::Ttl::from_duration(args.writer_ttl)?,
                    id: replica::candidate_id(addr),
                    metrics: writer_metrics,
                    readiness: readiness.clone(),
                },
            )?)
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

/// The stop recorded (watched until now, for each cluster whose watcher
/// was live; serve stopped) and the history closed, everything committed.
async fn close_history(store: History, members: &[Member], pid: u32) -> anyhow::Result<()> {
    for m in members {
        if m.readiness.is_ready() {
            // Watched until this stop.
            store
                .watched(&m.scope, crate::events::now_ms())
                .await
                .context("writing history")?;
        }
    }
    store
        .cluster_event(serve_event(ClusterEventKind::ServeStopped { pid }))
        .await
        .context("writing history")?;
    let reader = store.reader();
    let revision = store.close().await.context("closing the history")?;
    if members.iter().all(|m| m.scope.is_none()) {
        eprintln!("tenure: history committed up to revision {revision}");
        return Ok(());
    }
    for m in members {
        let (reader, scope) = (reader.clone(), m.scope.clone());
        let resume = tokio::task::spawn_blocking(move || reader.resume_point_of(scope.as_deref()))
            .await?
            .context("reading the history's resume revisions")?;
        eprintln!(
            "tenure: history of {} committed up to revision {}",
            in_cluster(&m.scope),
            resume.map_or(0, |r| r.revision)
        );
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
        cluster: None,
        kind,
    }
}
