//! Where `tenure serve` records: a SQLite file of its own, or a PostgreSQL
//! history shared by replicas.
//!
//! Every replica runs its own watchers for metrics, readiness and the live
//! feed, and reads pages and API from the shared database. Each feed (one
//! etcd cluster) of the shared history is recorded by exactly one replica:
//! the holder of that feed's writer term (`feed::writer`). A replica may
//! write some feeds and stand by for others; a term lost in one cluster
//! stops only that feed's recording.

use anyhow::Context;

use crate::events::cluster::ClusterEvent;
use crate::events::{now_ms, Batch, Update, WatchStatus};
use crate::feed::writer::FeedWriter;
use crate::history::{HistoryError, Reader, Scope, Store};

/// Where `serve` sends what it records: a SQLite file of its own, or the
/// shared database (each feed only while this replica is its writer).
pub enum History {
    Local(Store),
    Shared(Shared),
}

impl History {
    /// A batch of the serve loop's watcher: stored by a local store; the
    /// shared history's writer records from a watcher of its own.
    /// With several clusters (`scope`: the batch's), its names
    /// are already `CLUSTER/NAME`.
    pub async fn write(&self, scope: &Scope, batch: Batch) -> Result<(), HistoryError> {
        match self {
            History::Local(store) => store.write_in(scope.clone(), batch).await,
            History::Shared(_) => Ok(()),
        }
    }

    /// The serve loop's watcher caught up with etcd: a local history
    /// records that it watched until now (time after the last
    /// such moment, until a watcher is live again, was not watched). The
    /// shared history's writer records its own watcher's.
    /// Waits until what this serve queued is committed (a local store);
    /// the shared history's writer commits on its own.
    pub async fn flush(&self) -> Result<(), HistoryError> {
        match self {
            History::Local(store) => store.flush().await.map(|_| ()),
            History::Shared(_) => Ok(()),
        }
    }

    pub async fn heartbeat(&self, scope: &Scope, update: &Update) -> Result<(), HistoryError> {
        match update {
            Update::Watch(WatchStatus::CaughtUp { .. }) => self.watched(scope, now_ms()).await,
            _ => Ok(()),
        }
    }

    /// The serve loop's watcher was live at `at_ms` (at a clean stop, say):
    /// recorded by a local history.
    pub async fn watched(&self, scope: &Scope, at_ms: i64) -> Result<(), HistoryError> {
        match self {
            History::Local(store) => store.watched_in(scope.clone(), at_ms).await,
            History::Shared(_) => Ok(()),
        }
    }

    pub async fn set_cluster(&self, scope: &Scope, cluster_id: u64) -> Result<(), HistoryError> {
        match self {
            History::Local(store) => store.set_cluster_in(scope.clone(), cluster_id).await,
            History::Shared(_) => Ok(()),
        }
    }

    /// One of etcd's own events: stored locally, or handed to the writer
    /// task (recorded only while this replica writes; what the poller
    /// found is each writer term's own poller's to record).
    pub async fn cluster_event(&self, event: ClusterEvent) -> Result<(), HistoryError> {
        match self {
            History::Local(store) => store.cluster_event(event).await,
            History::Shared(shared) => {
                shared.route(event);
                Ok(())
            }
        }
    }

    pub fn reader(&self) -> Reader {
        match self {
            History::Local(store) => store.reader(),
            History::Shared(shared) => shared.reader.clone(),
        }
    }

    /// Commits what is queued (local), or stops writing and resigns the
    /// writer term (shared). Returns the committed resume revision.
    pub async fn close(self) -> anyhow::Result<i64> {
        match self {
            History::Local(store) => Ok(store.close().await?),
            History::Shared(shared) => shared.close().await,
        }
    }
}

/// The feeds' writer tasks of this replica on the shared history.
pub struct Shared {
    reader: Reader,
    writers: Vec<FeedWriter>,
}

impl Shared {
    /// No feed's writer yet: `reader` reads the shared database.
    pub fn new(reader: Reader) -> Shared {
        Shared {
            reader,
            writers: Vec::new(),
        }
    }

    /// A reader of the shared database.
    pub fn reader(&self) -> Reader {
        self.reader.clone()
    }

    pub fn add(&mut self, writer: FeedWriter) {
        self.writers.push(writer);
    }

    /// One of etcd's own events to its feed's writer (recorded only while
    /// this replica writes that feed). Serve-wide events (no cluster) go to
    /// the first feed's. What this replica's poller found is not: a standby
    /// drops it, and a writer that won later would miss it, so each writer
    /// term polls for itself from what the history holds (`feed::writer`).
    fn route(&self, event: ClusterEvent) {
        if event.kind.is_polled() {
            return;
        }
        let of = |w: &&FeedWriter| w.scope.as_deref() == event.cluster.as_deref();
        let writer = self.writers.iter().find(of).or(self.writers.first());
        if let Some(w) = writer {
            let _ = w.cluster.try_send(event);
        }
    }

    /// Stops every feed's writer (each term resigned); the first feed's
    /// committed resume revision.
    async fn close(self) -> anyhow::Result<i64> {
        let scope: Scope = self.writers.first().and_then(|w| w.scope.clone());
        for w in self.writers {
            w.stop().await;
        }
        let reader = self.reader.clone();
        let resume = tokio::task::spawn_blocking(move || reader.resume_point_of(scope.as_deref()))
            .await?
            .context("reading the shared history's resume revision")?;
        Ok(resume.map_or(0, |r| r.revision))
    }
}

/// Opens the shared history for reading (creating its schema if no replica
/// has yet), off the runtime.
pub async fn open_reader(url: &str) -> anyhow::Result<Reader> {
    let url = url.to_owned();
    Ok(tokio::task::spawn_blocking(move || {
        crate::history::prepare_postgres(&url)?;
        Reader::open_postgres(&url)
    })
    .await??)
}

/// A candidate id for this replica: host, pid, HTTP address.
pub fn candidate_id(addr: std::net::SocketAddr) -> String {
    let host = std::fs::read_to_string("/proc/sys/kernel/hostname")
        .map(|h| h.trim().to_owned())
        .unwrap_or_default();
    format!("{host} pid {} http {addr}", std::process::id())
}
