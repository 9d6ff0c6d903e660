//! The feeds of `tenure serve`, a floor below the web (importing neither
//! `cli` nor `web`): a feed is one cluster (its
//! validated name, or the one unnamed cluster of a serve without
//! `--cluster`) and its source: what is watched in its etcd, or its
//! Leases through the Kubernetes API (`Watched::api`), both into the same
//! state machine. A feed owns its place in the
//! history: its resume point (the `watcher_state` keys of its scope), and
//! on a shared PostgreSQL history its writer fence row (keyed by its name,
//! `""` for the unnamed one) and its writer term (the election
//! `tenure/history-writer` under its own prefix, in its own etcd).
//!
//! Each feed is built as a source is (`build(ctx) -> task`): [`Feed::writer`]
//! starts the feed's writer task on a shared history; the serve loop's
//! pipeline of the feed is started by `pipeline.rs`. A SQLite history and
//! a PostgreSQL one go through the same feeds: only the shared history
//! builds writer tasks.
//!
//! A feed owns its transport (`pipeline.rs`: an etcd watch, or a
//! Kubernetes list and watch; `tap.rs`: one watcher, shared by the serve
//! loop and its writer term), its resume point, its writer term and fence
//! row (`writer.rs`, `in_database.rs`), and the live state it reports
//! (`readiness/`). Serve composes feeds without branching on their kind
//! or number.
//!
//! Invariants: a feed's writer term never blocks another feed's (each
//! campaigns in its own etcd, claims and locks only its own fence row);
//! a feed's fence row is written only by that feed's writer.

mod error;
pub mod floor;
pub mod identity;
mod in_database;
pub mod pipeline;
pub mod readiness;
pub mod tap;
mod watched;
pub mod writer;

pub use error::FeedError;
pub use watched::{Connector, Watched};

use std::sync::{Arc, OnceLock};
use std::time::Duration;

use crate::election::{Client, Ttl};
use crate::events::{Batch, EventKind, ResumePoint};
use crate::history::{Reader, Scope};
use crate::telemetry::writer::HistoryWriterMetrics;
use crate::watch::{WatchConfig, Watcher};
use readiness::Readiness;

/// One cluster and its source, as serve watches and records it.
#[derive(Clone)]
pub struct Feed {
    /// The cluster: its connection, name and sources.
    pub watched: Watched,
    /// What its watcher reads, checked against its etcd at start (`None`:
    /// its etcd did not answer then; read once it does).
    pub cfg: Option<WatchConfig>,
}

/// What every feed's writer shares: the database, this replica's id and
/// the writer term's TTL.
#[derive(Clone)]
pub struct WriterCtx {
    pub url: String,
    pub retention: Duration,
    /// TTL of each writer term: a dead writer is replaced within it.
    pub ttl: Ttl,
    /// This replica's candidate id (shown as the writer's holder).
    pub id: String,
    /// How often the writer polls its etcd's own events (`--cluster-poll`;
    /// zero: not polled).
    pub cluster_poll: Duration,
}

/// What one feed's writer reports to: its metrics and readiness, the
/// client cell its pipeline fills once its etcd answers, and where its
/// terms ask for the feed's watcher (`tap.rs`).
pub struct FeedParts {
    pub metrics: HistoryWriterMetrics,
    pub readiness: Arc<Readiness>,
    pub client: Arc<OnceLock<Client>>,
    pub taps: tokio::sync::mpsc::Sender<tap::Tap>,
    /// Serve is stopping: the feed's watcher ending then is no failure
    /// (the term waits for its own stop, after serve's last events).
    pub stopping: tokio::sync::watch::Receiver<bool>,
}

impl Feed {
    /// Reads each connected cluster's watch configuration (a `--source`
    /// its etcd cannot serve is refused now); a cluster that did not answer
    /// reads its own once it does.
    pub async fn prepare(
        clusters: Vec<Watched>,
        max_elections: usize,
    ) -> Result<Vec<Feed>, FeedError> {
        let mut feeds = Vec::with_capacity(clusters.len());
        for c in clusters {
            let cfg = match &c.client {
                Some(client) => Some(watch_config(client, &c, max_elections).await?),
                None => None,
            };
            feeds.push(Feed { watched: c, cfg });
        }
        Ok(feeds)
    }

    /// What it reads, as messages name it (`/readyz`).
    pub fn source_name(&self) -> &'static str {
        if self.watched.api.is_some() {
            "the Kubernetes API"
        } else {
            "etcd"
        }
    }

    /// Whether it reads Kubernetes' Leases (through the API, or a
    /// `kubernetes` source of its etcd): its names that are no paths are
    /// Leases' (`NAMESPACE/NAME`), known before it connects.
    pub fn reads_leases(&self) -> bool {
        self.watched.api.is_some() || self.watched.sources.iter().any(|s| s.reads_leases())
    }

    /// Its scope in the history: its name, `None` for the unnamed cluster.
    pub fn scope(&self) -> &Scope {
        &self.watched.name
    }

    /// Its writer fence row's key: its name, `""` for the unnamed cluster.
    pub fn fence_key(&self) -> &str {
        self.watched.name.as_deref().unwrap_or("")
    }

    /// Where its history left off (`None`: never recorded).
    pub async fn resume(&self, reader: &Reader) -> Result<Option<ResumePoint>, FeedError> {
        let (reader, scope) = (reader.clone(), self.scope().clone());
        error::read_history("reading where the history left off", move || {
            reader.resume_point_of(scope.as_deref())
        })
        .await
    }

    /// Builds its writer task on the shared history: campaigns in its own
    /// etcd, and records it while it holds the term.
    pub fn writer(&self, ctx: &WriterCtx, parts: FeedParts, reader: Reader) -> writer::FeedWriter {
        writer::FeedWriter::start(self.clone(), ctx.clone(), parts, reader)
    }
}

/// `b` with its elections named by `cluster` (`CLUSTER/NAME`, and
/// `CLUSTER/` for its fleet-wide events); as it is without one. The
/// history, the live feed and the traces name elections as the pages do.
pub fn qualified(cluster: Option<&str>, b: &Batch) -> Batch {
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

/// "cluster NAME" for a message ("the etcd cluster" for the one, unnamed).
pub fn in_cluster(name: &Option<Arc<str>>) -> String {
    match name {
        Some(n) => format!("cluster {n:?}"),
        None => "the etcd cluster".to_owned(),
    }
}

/// What a watcher reads and keeps: the sources checked against etcd
/// (several key ranges need ordered progress notifications).
pub async fn watch_config(
    client: &Client,
    w: &Watched,
    max_elections: usize,
) -> Result<WatchConfig, FeedError> {
    let plan = Watcher::sources(client, w.sources.clone(), w.sources_only)
        .await
        .map_err(|error| FeedError::Sources {
            cluster: in_cluster(&w.name),
            error,
        })?;
    Ok(WatchConfig {
        max_elections,
        sources: Some(plan.sources),
        covering: plan.covering,
        adopt: w.adopt,
        ..WatchConfig::default()
    })
}

/// The key ranges a serve watches in a cluster of this `prefix` and
/// these sources, for its access check and the message when etcd denies
/// them (none where the sources overlap: that is refused, with the
/// reason, by [`watch_config`]).
pub fn watched_ranges(
    prefix: &str,
    sources: &[crate::layout::Source],
    sources_only: bool,
) -> Vec<(Vec<u8>, Vec<u8>)> {
    crate::layout::Sources::for_serve(prefix, sources.to_vec(), sources_only)
        .map(|s| s.ranges())
        .unwrap_or_default()
}
