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

pub use super::clusters::ClusterFlag;
use super::replica::{self, History};
use super::sinks::{self, Sinks};
use crate::election::{shutdown_signal, Client};
use crate::events::cluster::ClusterEvent;
use crate::events::ResumePoint;
use crate::feed::pipeline::{read_access, Common, Member};
use crate::feed::readiness::Readiness;
use crate::feed::tap::Tap;
use crate::feed::{in_cluster, Feed, FeedParts, WriterCtx};
pub use crate::feed::{Connector, Watched};
use crate::history::{Db, Store};
use crate::telemetry::{self, Metrics, MetricsOptions};
use crate::web::api::RateLimiter;
use crate::web::{self, AppState, Auth, Limits};

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

    /// Watch several clusters in one serve: NAME=ENDPOINTS (an etcd), NAME=kubeconfig:PATH[#CONTEXT]
    /// or NAME=in-cluster (its Leases through the Kubernetes API), repeatable (TENURE_CLUSTERS:
    /// separated by ';'). Their elections are named NAME/ELECTION; TLS, user, prefix and
    /// sources are the other flags', the same for all etcds (per cluster: --config).
    #[arg(long = "cluster", env = "TENURE_CLUSTERS", value_delimiter = ';', value_name = "NAME=ENDPOINTS", value_parser = ClusterFlag::parse)]
    pub clusters: Vec<ClusterFlag>,

    /// A TOML file of [[cluster]] tables, each with name, endpoints and its own prefix,
    /// timeout, cacert, cert, key, user, password-file, source, sources-only (the flags'
    /// names), or with kubeconfig (context, kube-heartbeats) or in-cluster = true instead of
    /// endpoints; instead of --cluster.
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

    /// A name mutating calls may be addressed to (the Host header), repeatable: NAME or
    /// NAME:PORT. With --no-auth only IP addresses and localhost are taken otherwise (a web
    /// page could lead a browser here by another name: DNS rebinding); give the names callers
    /// use (an ingress's, a Service's). An Origin must be the Host's own or one of these.
    #[arg(long = "allowed-host", env = "TENURE_ALLOWED_HOSTS", value_delimiter = ',', value_name = "NAME", value_parser = crate::web::api::AllowedHost::parse)]
    pub allowed_hosts: Vec<crate::web::api::AllowedHost>,

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

    /// Take the etcd of this cluster id as a new timeline of the cluster (or of the one
    /// cluster, without NAME=) though its history recorded another: ID as tenure prints it
    /// (hex). Without it, an etcd that is not the one the history recorded under that name is
    /// refused (docs/operations.md, Replacing etcd). Repeatable.
    #[arg(
        long = "adopt-etcd",
        env = "TENURE_ADOPT_ETCD",
        value_name = "[NAME=]ID",
        value_delimiter = ','
    )]
    pub adopt_etcd: Vec<String>,

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
            // Each feed's, where its metrics are made.
            lease_names: false,
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
    let args = cmd.args;
    let api = super::kube::config(
        args.kubeconfig.as_deref(),
        None,
        args.kube_heartbeats,
        args.max_elections,
    )?;
    run_clusters(
        vec![Watched::through_api(None, api)],
        args,
        metrics,
        async {
            let _ = shutdown_signal().await;
        },
    )
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
        (&args.sources, args.sources_only),
        (args.kube_heartbeats, args.max_elections),
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
        api: None,
        adopt: None,
    };
    run_clusters(vec![one], args, metrics, stop).await
}

/// Serves `clusters` (several, each named; or the one, unnamed)
/// until `stop` resolves or a watcher ends. Each cluster is a feed
/// (`feed.rs`): its metrics and readiness are its own, its history rows
/// are named `CLUSTER/NAME` and its history state is kept under its name,
/// in one history; on a shared history each feed has its own writer.
pub async fn run_clusters(
    clusters: Vec<Watched>,
    args: ServeArgs,
    metrics: MetricsOptions,
    stop: impl std::future::Future<Output = ()>,
) -> anyhow::Result<i32> {
    // Bound first: a replica of a shared history names its address when it
    // campaigns to write.
    let listener = bind(&args).await?;
    let addr = listener.local_addr()?;
    if clusters.is_empty() {
        anyhow::bail!("no cluster to watch");
    }
    let db = Db::from_arg(&args.db);
    // Before anything is opened: a --source etcd cannot serve is refused
    // (a cluster that did not answer reads its own once it does).
    let mut feeds = Feed::prepare(clusters, args.max_elections).await?;
    super::clusters::adopt(&mut feeds, &args.adopt_etcd)?;
    let watched: Vec<_> = feeds.iter().map(|f| (&f.watched, f.cfg.as_ref())).collect();
    super::clusters::refuse_one_etcd_twice(&watched).await?;
    // One cluster: its metrics are serve's, named as its feed names.
    let one = MetricsOptions {
        lease_names: feeds.len() == 1 && feeds[0].reads_leases(),
        ..metrics
    };
    let serve_metrics = Arc::new(Metrics::with_options(one).context("creating metrics")?);
    let readiness = Arc::new(Readiness::with_max_elections(args.max_elections));
    let mut store = open_history(&args, &db, &serve_metrics).await?;
    super::migrate::same_clusters(&store, &feeds, &db).await?;
    // Before anything is written anywhere: each etcd is the one its
    // history recorded under its name (or adopted).
    crate::feed::identity::verify_at_start(&feeds, &store.reader()).await?;
    let own = Own {
        args: &args,
        options: metrics,
        serve_metrics: &serve_metrics,
        readiness: &readiness,
    };
    let (members, resumes) = members_of(&feeds, &own, &store, &db).await?;
    // Each feed's writer term taps the feed's one watcher (`feed::tap`).
    let mut taps = Vec::new();
    let (stop_feeds, stopping) = tokio::sync::watch::channel(false);
    if let History::Shared(shared) = &mut store {
        taps = start_writers(shared, (&feeds, &members), stopping, &args, addr)?;
    }
    let state = app_state(&args, &members, &store, serve_metrics.clone());
    let (stop_http, server) = start_http(listener, state.clone());
    eprintln!(
        "tenure: serving on http://{addr} (dashboard at /, API at /api/v1, metrics at /metrics)"
    );
    let (ctx, crx) = mpsc::channel::<ClusterEvent>(256);
    let common = Common {
        max_elections: args.max_elections,
        cluster_poll: args.cluster_poll,
        reader: store.reader(),
        events: ctx,
    };
    let (inbox, running) =
        crate::feed::pipeline::start(&feeds, resumes, taps, &members, common, stop_feeds)?;
    let sinks = Sinks {
        members,
        store,
        live: state.live.clone(),
        cluster_live: state.cluster_live.clone(),
        lease_live: state.lease_live.clone(),
    };
    let code = sinks::run(sinks, inbox, crx, running, stop).await?;
    let _ = stop_http.send(());
    if let Ok(Err(e)) = server.await {
        eprintln!("tenure: HTTP server: {e}");
    }
    Ok(code)
}

/// The HTTP listener, with the read token checked first.
async fn bind(args: &ServeArgs) -> anyhow::Result<tokio::net::TcpListener> {
    let listener = tokio::net::TcpListener::bind(args.listen)
        .await
        .with_context(|| format!("listening on {}", args.listen))?;
    anyhow::ensure!(
        args.read_token.as_deref() != Some(""),
        "--read-token (TENURE_READ_TOKEN) is set but empty: give the token reads need, or \
         unset it to leave reads open (a secret that failed to populate must not open them)"
    );
    Ok(listener)
}

/// What the members are made of: the serve-wide metrics and readiness
/// (the one cluster's own), and the options each cluster's metrics get.
struct Own<'a> {
    args: &'a ServeArgs,
    options: MetricsOptions,
    serve_metrics: &'a Arc<Metrics>,
    readiness: &'a Arc<Readiness>,
}

/// Each feed's parts in the serve loop, and where its history resumes.
async fn members_of(
    feeds: &[Feed],
    own: &Own<'_>,
    store: &History,
    db: &Db,
) -> anyhow::Result<(Vec<Member>, Vec<Option<ResumePoint>>)> {
    let named = feeds.iter().any(|f| f.scope().is_some());
    let mut members = Vec::with_capacity(feeds.len());
    let mut resumes = Vec::with_capacity(feeds.len());
    for f in feeds {
        let (metrics, readiness) = if named {
            let options = MetricsOptions {
                lease_names: f.reads_leases(),
                ..own.options
            };
            (
                Arc::new(Metrics::with_options(options).context("creating metrics")?),
                Arc::new(Readiness::with_max_elections(own.args.max_elections)),
            )
        } else {
            (own.serve_metrics.clone(), own.readiness.clone())
        };
        readiness.set_source(f.source_name());
        readiness.set_cluster(f.scope().as_ref());
        let resume = f.resume(&store.reader()).await?;
        if let Some(r) = &resume {
            // Terms leading across the restart get their series now: the
            // watcher adopts them without an event.
            metrics.adopt(&r.open_terms);
        }
        announce(f.scope().as_deref(), resume.as_ref(), db);
        let mut m = Member::new(
            f.scope().clone(),
            metrics,
            readiness,
            own.args.raise_token_floor,
        );
        m.reads_leases = f.reads_leases();
        if let (Some(client), Some(cfg)) = (&f.watched.client, &f.cfg) {
            let _ = m.sources.set(cfg.sources_read(client.keys().prefix()));
            let _ = m.client.set(client.clone());
        }
        // Leases through the API: their names resolve on the pages.
        if let Some(sources) = f.watched.api.as_ref().and_then(|a| a.sources().ok()) {
            let _ = m.sources.set(sources);
        }
        members.push(m);
        resumes.push(resume);
    }
    Ok((members, resumes))
}

/// Each feed's writer on the shared history: its writer metrics are its
/// cluster's (the serve-wide ones for the one unnamed cluster).
fn start_writers(
    shared: &mut replica::Shared,
    (feeds, members): (&[Feed], &[Member]),
    stopping: tokio::sync::watch::Receiver<bool>,
    args: &ServeArgs,
    addr: SocketAddr,
) -> anyhow::Result<Vec<Option<mpsc::Receiver<Tap>>>> {
    let Db::Postgres(url) = Db::from_arg(&args.db) else {
        return Ok(Vec::new());
    };
    let ctx = WriterCtx {
        url,
        retention: args.retention,
        ttl: crate::election::Ttl::from_duration(args.writer_ttl)?,
        id: replica::candidate_id(addr),
        cluster_poll: args.cluster_poll,
    };
    let mut taps = Vec::with_capacity(feeds.len());
    for (f, m) in feeds.iter().zip(members) {
        let (tx, rx) = mpsc::channel(1);
        let parts = FeedParts {
            metrics: telemetry::writer::HistoryWriterMetrics::register(&m.metrics)
                .context("creating metrics")?,
            readiness: m.readiness.clone(),
            client: m.client.clone(),
            taps: tx,
            stopping: stopping.clone(),
        };
        shared.add(f.writer(&ctx, parts, shared.reader()));
        taps.push(Some(rx));
    }
    Ok(taps)
}

/// What the web serves: the history, the live feeds, and each cluster's
/// view with several.
fn app_state(
    args: &ServeArgs,
    members: &[Member],
    store: &History,
    metrics: Arc<Metrics>,
) -> Arc<AppState> {
    let named = members.iter().any(|m| m.scope.is_some());
    let (live, _) = broadcast::channel(1024);
    let (cluster_live, _) = broadcast::channel(256);
    let (lease_live, _) = broadcast::channel(1024);
    let first = members.iter().find_map(|m| m.client.get().cloned());
    let clusters = members
        .iter()
        .filter(|_| named)
        .map(|m| web::ClusterView {
            name: m.scope.clone().unwrap_or_else(|| Arc::from("")),
            client: m.client.clone(),
            readiness: m.readiness.clone(),
            metrics: m.metrics.clone(),
            sources: m.sources.clone(),
            reads_leases: m.reads_leases,
        })
        .collect();
    Arc::new(AppState {
        metrics,
        readiness: members[0].readiness.clone(),
        history: store.reader(),
        client: first,
        live,
        cluster_live,
        lease_live,
        auth: auth_of(args),
        allowed_hosts: args.allowed_hosts.clone(),
        read_token: args.read_token.clone(),
        api_rate: RateLimiter::new(args.campaign_rate),
        limits: limits_of(args),
        sources: members[0]
            .sources
            .get()
            .cloned()
            .unwrap_or_else(|| crate::layout::Sources::tenure("")),
        clusters,
    })
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

/// The history sink: a SQLite file of one's own (this replica writes
/// every feed), or the shared PostgreSQL history (each feed's writer is
/// elected; see `feed/writer.rs`), whose writers start with the members.
async fn open_history(
    args: &ServeArgs,
    db: &Db,
    metrics: &Arc<Metrics>,
) -> anyhow::Result<History> {
    Ok(match db {
        Db::Sqlite(path) => {
            let writer_metrics = telemetry::writer::HistoryWriterMetrics::register(metrics)
                .context("creating metrics")?;
            let store = Store::open(path, args.retention)
                .with_context(|| format!("opening the history at {}", path.display()))?;
            writer_metrics.writer.set(1);
            History::Local(store)
        }
        Db::Postgres(url) => {
            let reader = replica::open_reader(url)
                .await
                .with_context(|| format!("opening the history at {}", db.display()))?;
            History::Shared(replica::Shared::new(reader))
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
