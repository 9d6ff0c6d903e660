//! Each watched cluster's pipeline in `tenure serve`: its one watcher
//! (`feed::tap`: shared with the feed's writer term on a shared history)
//! and its poller of etcd's own events, feeding the one serve loop through
//! the [`Inbox`], each update tagged with the feed's index. Every feed is
//! started alike, whatever its kind or their number: one whose etcd did not
//! answer at start first connects, trying again until it does (its
//! `/readyz` line says why meanwhile), then reads its configuration and
//! starts like the others; one read through the Kubernetes API has no etcd
//! and no poller.
//!
//! Deliberately absent: a cluster's failure never stops another's
//! pipeline; a watcher that ends (an answer no retry changes, or a bug)
//! tells the serve loop, which stops once every feed's watcher has.

use crate::task::Locked;
use std::sync::{Arc, Mutex, OnceLock};
use std::time::Duration;

use tokio::sync::{mpsc, watch};
use tokio::task::{AbortHandle, JoinHandle};
use tracing::Instrument;

use super::floor::FloorKeeper;
use super::identity;
use super::readiness::Readiness;
use super::tap::{Forwarder, Start, Tap};
use super::{in_cluster, watch_config, watched_ranges, FeedError, Watched};
use crate::election::Client;
use crate::events::cluster::ClusterEvent;
use crate::events::{ResumePoint, Update};
use crate::history::{Reader, Scope};
use crate::layout::Sources;
use crate::telemetry::Metrics;
use crate::watch::{WatchConfig, Watcher};

/// The longest pause between two tries to connect to a cluster.
const MAX_RETRY: Duration = Duration::from_secs(30);

/// One watched cluster's own parts in the serve loop.
pub struct Member {
    /// Its name (`None`: the one cluster of a serve without `--cluster`).
    pub scope: Scope,
    pub metrics: Arc<Metrics>,
    pub readiness: Arc<Readiness>,
    /// Set at start, or once a cluster unreachable at start answers; the
    /// web reads the same cells.
    pub client: Arc<OnceLock<Client>>,
    pub sources: Arc<OnceLock<Sources>>,
    /// Its names that are no paths are Kubernetes Leases' (`Feed::reads_leases`),
    /// known before it connects.
    pub reads_leases: bool,
    /// Raises the token floor for the resets of its batches; made with
    /// the client.
    floors: Option<FloorKeeper>,
    raise_token_floor: bool,
}

impl Member {
    pub fn new(
        scope: Scope,
        metrics: Arc<Metrics>,
        readiness: Arc<Readiness>,
        raise_token_floor: bool,
    ) -> Member {
        Member {
            scope,
            metrics,
            readiness,
            client: Arc::default(),
            sources: Arc::default(),
            reads_leases: false,
            floors: None,
            raise_token_floor,
        }
    }

    /// Its token floor keeper, once it has a client.
    pub fn floors(&mut self) -> Option<&mut FloorKeeper> {
        if self.floors.is_none() {
            let client = self.client.get()?.clone();
            let keeper = FloorKeeper::new(client, self.readiness.clone(), self.raise_token_floor)
                .of_cluster(self.scope.as_deref());
            self.floors = Some(keeper);
        }
        self.floors.as_mut()
    }
}

/// Where every feed's updates arrive, tagged with its index. `(i, None)`:
/// feed `i`'s watcher stopped.
pub struct Inbox(mpsc::Receiver<(usize, Option<Update>)>);

impl Inbox {
    /// The next update (`None`: every pipeline is gone).
    pub async fn recv(&mut self) -> Option<(usize, Option<Update>)> {
        self.0.recv().await
    }

    /// What the watchers produced before they were stopped: all of it,
    /// once every pipeline has passed its cluster's on (bounded: 5 s).
    pub async fn rest(&mut self) -> Vec<(usize, Update)> {
        let mut rest = Vec::new();
        let until = tokio::time::Instant::now() + Duration::from_secs(5);
        while let Ok(Some((i, u))) = tokio::time::timeout_at(until, self.0.recv()).await {
            rest.extend(u.map(|u| (i, u)));
        }
        rest
    }
}

/// What every pipeline shares.
#[derive(Clone)]
pub struct Common {
    pub max_elections: usize,
    /// `--cluster-poll` (zero: no poller).
    pub cluster_poll: Duration,
    pub reader: Reader,
    /// etcd's own events, named by their cluster, to the serve loop.
    pub events: mpsc::Sender<ClusterEvent>,
}

/// The running pipelines: stopped by [`Running::stop`], after which the
/// inbox gives what they had produced.
pub struct Running {
    stop: watch::Sender<bool>,
    tasks: Tasks,
}

/// Every watcher and poller started, to stop them at serve's stop.
type Tasks = Arc<Mutex<Vec<AbortHandle>>>;

impl Running {
    /// Stops every watcher and poller (and the pipelines still trying to
    /// connect; no watcher starts after it); the forwarding goes on until
    /// each watcher's channel is empty.
    pub fn stop(&self) {
        let _ = self.stop.send(true);
        for t in self.tasks.locked().iter() {
            t.abort();
        }
    }
}

/// Starts every feed's pipeline from its resume point (`resumes[i]`), its
/// writer term's taps from `taps[i]` (on a shared history): at once where
/// serve is connected, else once its etcd answers.
pub fn start(
    feeds: &[super::Feed],
    resumes: Vec<Option<ResumePoint>>,
    mut taps: Vec<Option<mpsc::Receiver<Tap>>>,
    members: &[Member],
    common: Common,
    stop: watch::Sender<bool>,
) -> Result<(Inbox, Running), FeedError> {
    let stopped = stop.subscribe();
    let tasks: Tasks = Arc::default();
    let running = Running {
        stop,
        tasks: tasks.clone(),
    };
    taps.resize_with(feeds.len(), || None);
    let (all, rx) = mpsc::channel::<(usize, Option<Update>)>(4096);
    for (i, ((f, resume), taps)) in feeds.iter().zip(resumes).zip(taps).enumerate() {
        let (m, c) = (&members[i], &f.watched);
        let span = tracing::warn_span!("cluster", name = c.name.as_deref().unwrap_or(""));
        let all = all.clone();
        let forward = move |start: Start| Forwarder {
            i,
            start,
            all,
            taps,
        };
        if let Some(api) = &c.api {
            let start = api_watcher(api, &m.readiness, &stopped, &tasks)?;
            let run = forward(start).run(resume);
            crate::task::spawn("cluster pipeline", run.instrument(span));
            continue;
        }
        let p = Pipeline {
            watched: c.clone(),
            cfg: f.cfg.clone(),
            resume,
            readiness: m.readiness.clone(),
            client: m.client.clone(),
            sources: m.sources.clone(),
            raise_token_floor: m.raise_token_floor,
            common: common.clone(),
            forward: Box::new(forward),
            stop: stopped.clone(),
            tasks: tasks.clone(),
        };
        crate::task::spawn("cluster pipeline", p.run().instrument(span));
    }
    Ok((Inbox(rx), running))
}

/// How the Kubernetes API's Lease watcher is started (again, for each
/// writer term): why the API cannot be read is `readiness`'s problem
/// (`/readyz`) until it can; an answer no retry changes ends it, said on
/// stderr. A configuration it cannot use is refused now.
fn api_watcher(
    api: &crate::watch::kube::KubeConfig,
    readiness: &Arc<Readiness>,
    stopped: &watch::Receiver<bool>,
    tasks: &Tasks,
) -> Result<Start, FeedError> {
    use crate::watch::kube::{KubeWatcher, Problems, Stopped};
    KubeWatcher::new(api.clone()).map_err(FeedError::LeaseSource)?;
    let said = readiness.clone();
    let problems: Problems = Arc::new(move |p| said.set_connect_problem(p.map(|e| e.to_string())));
    let (api, readiness, stopped, tasks) = (
        api.clone(),
        readiness.clone(),
        stopped.clone(),
        tasks.clone(),
    );
    Ok(Box::new(move |resume, tx| {
        let watcher = KubeWatcher::new(api.clone()).map(|w| w.with_problems(problems.clone()));
        let readiness = readiness.clone();
        let run = async move {
            let why = match watcher {
                Ok(w) => match w.run(resume, tx).await {
                    Err(Stopped::Api(e)) => e.to_string(),
                    _ => return,
                },
                Err(e) => e.to_string(),
            };
            readiness.set_connect_problem(Some(why.clone()));
            eprintln!("tenure: error: {why}");
        };
        started(&stopped, &tasks, "kubernetes lease watcher", run)
    }))
}

/// `run` as a task registered for serve's stop; after the stop, nothing
/// (the task ends at once, its channel closed).
fn started(
    stopped: &watch::Receiver<bool>,
    tasks: &Tasks,
    name: &'static str,
    run: impl std::future::Future<Output = ()> + Send + 'static,
) -> JoinHandle<()> {
    // Checked with the list locked: a stop that comes after the check
    // finds the task in it (it sets the flag before it takes the list).
    let mut tasks = tasks.locked();
    if *stopped.borrow() {
        return crate::task::spawn(name, async {});
    }
    let task = crate::task::spawn(name, run.in_current_span());
    // A writer term restarts its feed's watcher: the ended ones go.
    tasks.retain(|t| !t.is_finished());
    tasks.push(task.abort_handle());
    task
}

/// What the history recorded of a cluster's own events: its poller's
/// baseline, and the token floor its resets require.
async fn baseline(
    reader: &Reader,
    scope: &Scope,
) -> Result<crate::events::cluster::ClusterBaseline, FeedError> {
    let (reader, scope) = (reader.clone(), scope.clone());
    super::error::read_history("reading the recorded etcd cluster events", move || {
        reader.cluster_baseline_of(scope.as_deref())
    })
    .await
}

/// etcd's own events: a bounded poll beside the watcher, from
/// `baseline`, named by the cluster (none with `--cluster-poll 0`).
fn poller(
    client: &Client,
    baseline: crate::events::cluster::ClusterBaseline,
    common: &Common,
    name: Option<&str>,
) -> Option<impl std::future::Future<Output = ()> + Send + 'static> {
    let cfg = crate::watch::cluster::PollConfig::every(common.cluster_poll, client.op_timeout())?;
    let (ctx, mut crx) = mpsc::channel::<ClusterEvent>(256);
    let poll = crate::watch::cluster::poll(client.etcd(), baseline, cfg, ctx);
    let (name, out) = (name.map(str::to_owned), common.events.clone());
    Some(async move {
        let forward = async {
            while let Some(mut e) = crx.recv().await {
                e.cluster.clone_from(&name);
                if out.send(e).await.is_err() {
                    return;
                }
            }
        };
        tokio::join!(poll, forward);
    })
}

/// An etcd feed's pipeline: connected (now or once its etcd answers),
/// configured and identified, then its poller and its forwarded watcher.
struct Pipeline {
    watched: Watched,
    /// `None`: read once connected.
    cfg: Option<WatchConfig>,
    resume: Option<ResumePoint>,
    readiness: Arc<Readiness>,
    client: Arc<OnceLock<Client>>,
    sources: Arc<OnceLock<Sources>>,
    raise_token_floor: bool,
    common: Common,
    /// Its forwarder, given how its watcher starts.
    forward: Box<dyn FnOnce(Start) -> Forwarder + Send>,
    stop: watch::Receiver<bool>,
    tasks: Tasks,
}

impl Pipeline {
    async fn run(mut self) {
        let Some(client) = self.connected().await else {
            return;
        };
        let Some(cfg) = self.configured(&client).await else {
            return;
        };
        // Before its client is handed to the web and its writer, and
        // before its floor: the etcd its history recorded (or adopted).
        if self.identified(&client).await.is_none() {
            return;
        }
        let _ = self.sources.set(cfg.sources_read(client.keys().prefix()));
        let _ = self.client.set(client.clone());
        // The floor its recorded resets require, kept while it runs (the
        // serve loop's keeper raises it for the resets it sees live).
        let mut floors = FloorKeeper::new(
            client.clone(),
            self.readiness.clone(),
            self.raise_token_floor,
        )
        .of_cluster(self.watched.name.as_deref());
        match baseline(&self.common.reader, &self.watched.name).await {
            Ok(b) => {
                if let Some(floor) = b.floor {
                    floors.raise(floor);
                }
                let name = self.watched.name.clone();
                if let Some(p) = poller(&client, b, &self.common, name.as_deref()) {
                    started(&self.stop, &self.tasks, "cluster poller", p);
                }
            }
            Err(e) => tracing::warn!(error = %e, "etcd's own events are not polled"),
        }
        let (stopped, tasks) = (self.stop.clone(), self.tasks.clone());
        let start: Start = Box::new(move |resume, tx| {
            let watcher = Watcher::new(client.clone(), cfg.clone()).run(resume, tx);
            started(&stopped, &tasks, "watcher", async move {
                let _ = watcher.await;
            })
        });
        let resume = self.resume.take();
        (self.forward)(start).run(resume).await;
        drop(floors);
    }

    /// The client: the one made at start, or one made once etcd answers
    /// and grants the reads the watcher needs (`None`: serve stopped
    /// first).
    async fn connected(&mut self) -> Option<Client> {
        if let Some(c) = self.watched.client.clone() {
            return Some(c);
        }
        let w = self.watched.clone();
        let at = w.connector.endpoints().join(",");
        let client = self
            .retried(|| async {
                let c = w.connector.connect().await.map_err(|e| {
                    format!("etcd at {at} has not answered since serve started ({e})")
                })?;
                read_access(&c, &w.sources, w.sources_only)
                    .await
                    .map_err(|e| e.to_string())?;
                Ok(c)
            })
            .await?;
        eprintln!("tenure: {}: connected to etcd at {at}", in_cluster(&w.name));
        Some(client)
    }

    /// Its watch configuration: the one read at start, or read now
    /// (trying again while etcd cannot tell; `None`: serve stopped first).
    async fn configured(&mut self, client: &Client) -> Option<WatchConfig> {
        if let Some(cfg) = self.cfg.take() {
            return Some(cfg);
        }
        let (w, max) = (self.watched.clone(), self.common.max_elections);
        self.retried(|| async {
            watch_config(client, &w, max)
                .await
                .map_err(|e| format!("{e:#}"))
        })
        .await
    }

    /// Until its etcd is the one its history recorded under its name (or
    /// adopted): another one is refused in `/readyz`, asked again (`None`:
    /// serve stopped first).
    async fn identified(&mut self, client: &Client) -> Option<()> {
        let (w, reader) = (self.watched.clone(), self.common.reader.clone());
        self.retried(|| async {
            identity::verify(&w, client, &reader)
                .await
                .map(|_| ())
                .map_err(|e| e.to_string())
        })
        .await
    }

    /// `attempt` until it succeeds, backing off from 1 s to [`MAX_RETRY`],
    /// each failure said in `/readyz`; `None` when serve stops first.
    async fn retried<T, F>(&mut self, mut attempt: impl FnMut() -> F) -> Option<T>
    where
        F: std::future::Future<Output = Result<T, String>>,
    {
        let mut wait = Duration::from_secs(1);
        loop {
            match attempt().await {
                Ok(t) => {
                    self.readiness.set_connect_problem(None);
                    return Some(t);
                }
                Err(why) => self
                    .readiness
                    .set_connect_problem(Some(format!("{why}; trying again"))),
            }
            if self.paused(wait).await {
                return None;
            }
            wait = (wait * 2).min(MAX_RETRY);
        }
    }

    /// Waits `wait`, or until serve stops (`true`).
    async fn paused(&mut self, wait: Duration) -> bool {
        if *self.stop.borrow() {
            return true;
        }
        tokio::select! {
            _ = tokio::time::sleep(wait) => false,
            _ = self.stop.changed() => true,
        }
    }
}

/// Whether etcd lets `client` read what the watcher will watch: a
/// permission, user or TLS problem is an error now, not a watcher retrying
/// forever. Bounded (1 s): a frozen etcd must not hold serve up, and an
/// unreachable one is not an error (the watcher waits for it).
pub async fn read_access(
    client: &Client,
    sources: &[crate::layout::Source],
    sources_only: bool,
) -> Result<(), crate::election::Error> {
    let ranges = watched_ranges(client.keys().prefix(), sources, sources_only);
    match tokio::time::timeout(Duration::from_secs(1), client.check_read_access(&ranges)).await {
        Ok(checked) => checked,
        Err(_) => Ok(()),
    }
}
