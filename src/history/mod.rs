//! The history: who led when, how each term ended, every event and every
//! fence refusal, etcd's own events, and the revision the watcher resumes
//! from (per cluster when serve watches several). Stored in a SQLite file
//! of one's own (the default) or in a PostgreSQL database shared by
//! replicas, whose one writer is fenced in the database (`pg/`); the
//! writer's logic is written once over both (`writer.rs`).
//!
//! - [`Store`] is the sink `tenure serve` writes to. One dedicated OS thread
//!   owns the only write connection; [`Store::write`] queues a [`Batch`]
//!   (bounded queue: a slow disk slows the watcher, it does not grow
//!   memory). The writer drains what is queued and commits it in **one**
//!   transaction together with the resume revision (the highest
//!   `batch.revision`), so after a crash the watcher resumes exactly where
//!   the stored events end. A batch at or below the stored resume revision
//!   is ignored whole: a replay cannot duplicate anything.
//! - Reads use separate read-only connections (SQLite's WAL lets them run
//!   beside the writer; PostgreSQL's through `pg/`'s read pool). They are blocking calls: from async code, use
//!   `spawn_blocking` (take a [`Reader`] with [`Store::reader`], it is
//!   cheap to clone).
//! - [`Reader`] opens an existing file or database for the CLI without
//!   starting a writer; it runs the very same queries.
//! - Retention: the writer deletes events and refusals older than the
//!   retention, and ended terms that ended before it, once when it starts
//!   and then at most once a minute (checked after each commit, so an idle
//!   store does not prune). Open terms and the resume revision are never
//!   deleted. A zero retention keeps everything.
//! - If a commit keeps failing (after a few retries), the writer stops and
//!   nothing more is stored: [`Store::write`] and [`Store::flush`] then
//!   return [`HistoryError::WriterFailed`]. The stored resume revision still
//!   matches the stored events, so a restarted process resumes correctly.
//!
//! Schema (SQLite: version [`SCHEMA_VERSION`], in `PRAGMA user_version`):
//! see `schema.rs`, and `pg/schema.rs` for PostgreSQL's.

mod acting;
pub mod cluster;
mod export;
mod lease_names;
mod meta;
mod pending;
mod pg;
mod query;
mod reader;
mod schema;
mod sqlite_write;
mod summary;
mod time;
pub mod window;
mod writer;

use crate::task::Locked;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::Duration;

use tokio::sync::{mpsc, oneshot};

use crate::events::{Batch, Event};

pub use export::terms_to_csv;
pub use meta::Scope;
pub use pg::{
    is_postgres_url, name_unnamed_cluster, prepare as prepare_postgres, record_writer_error,
    redact, Seat, TermSeat, PG_SCHEMA_VERSION,
};

/// What a shared history says of its recording: how far it
/// has recorded, when its writer was last live, who writes, and the last
/// failure a writer noted.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct WriterStatus {
    /// The stored resume revision (`None`: nothing recorded yet).
    pub revision: Option<i64>,
    /// When the writer's watcher was last live (a commit, a heartbeat).
    pub watched_at_ms: Option<i64>,
    /// The fence's token and holder (`None`: no writer yet).
    pub writer: Option<(i64, String)>,
    /// Since when that writer holds the fence (unix ms).
    pub writer_since_ms: Option<i64>,
    /// The last failure a writer noted.
    pub last_error: Option<WriterError>,
}

/// A failure a writer of the shared history noted.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct WriterError {
    /// The writer that noted it.
    pub holder: String,
    /// When (unix ms).
    pub at_ms: i64,
    /// What.
    pub error: String,
}
pub use query::{
    ElectionSummary, OpenTerm, Query, RefusalRow, ResumePoint, TermRow, DEFAULT_LIMIT, MAX_LIMIT,
};
pub use reader::Reader;
pub use schema::SCHEMA_VERSION;
pub use summary::{ElectionsPage, PageFrom, RecentCounts};
pub use time::{format_duration_ms, format_ms, parse_time, short_time};

use writer::{Failure, Msg, Writer};

/// Batches that may wait in the queue before [`Store::write`] waits.
const QUEUE_CAPACITY: usize = 1024;

#[derive(Debug, thiserror::Error)]
pub enum HistoryError {
    #[error("history database: {0}")]
    Sqlite(Box<rusqlite::Error>),
    #[error("history database {db}: {problem}")]
    PostgresSetup {
        /// The URL, password redacted.
        db: String,
        /// What is wrong with the URL's TLS parameters or files, and what to do.
        problem: String,
    },
    #[error("history database {db}: {}{}", postgres_text(.error), postgres_detail(.error))]
    Postgres {
        /// The URL, password redacted.
        db: String,
        /// Not `source`: its text is already in the message.
        error: Box<postgres::Error>,
    },
    /// A newer history writer (higher `tenure/history-writer` token) has
    /// written: this one's commit is refused inside the transaction.
    #[error(
        "history commit refused by the writer fence: this replica's writer term (token {token}) \
         is not the current one (the fence holds token {stored}: a newer writer has written, or \
         etcd started over and the fence was reset for its new timeline); this replica stops \
         writing"
    )]
    Fenced { token: i64, stored: i64 },
    #[error("history database {}: {source}", .path.display())]
    Io {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error(
        "history database {} does not exist: `tenure serve --db {}` creates it",
        .path.display(), .path.display()
    )]
    NotFound { path: PathBuf },
    #[error("history database {}: {reason}", .path.display())]
    Schema { path: PathBuf, reason: String },
    #[error("the history writer has stopped")]
    Closed,
    #[error("the history writer stopped after a failed commit: {0}")]
    WriterFailed(String),
    #[error("invalid time {0}")]
    InvalidTime(String),
    #[error("history: invalid JSON in {what}: {source}")]
    Json {
        what: String,
        source: serde_json::Error,
    },
}

impl From<rusqlite::Error> for HistoryError {
    fn from(e: rusqlite::Error) -> Self {
        HistoryError::Sqlite(Box::new(e))
    }
}

impl From<postgres::Error> for HistoryError {
    fn from(e: postgres::Error) -> Self {
        HistoryError::Postgres {
            db: "postgres".into(),
            error: Box::new(e),
        }
    }
}

/// The driver's error with its causes (the server's message, the OS error).
fn postgres_text(e: &postgres::Error) -> String {
    let mut text = e.to_string();
    let mut cause = std::error::Error::source(e);
    while let Some(c) = cause {
        let more = c.to_string();
        if !text.contains(&more) {
            text.push_str(": ");
            text.push_str(&more);
        }
        cause = c.source();
    }
    text
}

/// What to do about a PostgreSQL error, when it is one the user can fix.
fn postgres_detail(e: &postgres::Error) -> String {
    if let Some(hint) = pg::tls::hint(&postgres_text(e)) {
        format!(" ({hint})")
    } else if e.as_db_error().is_some() {
        String::new()
    } else {
        " (check --db / TENURE_DB, and that PostgreSQL runs there and accepts this user)".to_owned()
    }
}

impl HistoryError {
    /// A stale writer's commit, refused by the fence: not retried.
    pub fn is_fenced(&self) -> bool {
        matches!(self, HistoryError::Fenced { .. })
    }
}

/// Where the history is: a SQLite file (the default) or a PostgreSQL
/// database shared by several `tenure serve` replicas.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Db {
    Sqlite(PathBuf),
    /// A `postgres://` or `postgresql://` URL (libpq's keywords as query
    /// parameters are accepted too, as the `postgres` crate parses them).
    Postgres(String),
}

impl Db {
    /// The `--db` argument: a PostgreSQL URL, or else a file path.
    pub fn from_arg(arg: &Path) -> Db {
        match arg.to_str() {
            Some(s) if is_postgres_url(s) => Db::Postgres(s.to_owned()),
            _ => Db::Sqlite(arg.to_owned()),
        }
    }

    /// For messages: the path, or the URL with its password redacted.
    pub fn display(&self) -> String {
        match self {
            Db::Sqlite(p) => p.display().to_string(),
            Db::Postgres(url) => redact(url),
        }
    }
}

type Result<T, E = HistoryError> = std::result::Result<T, E>;

/// The history sink: one writer thread, and read-only connections for
/// queries.
pub struct Store {
    /// `None` only while dropping or closing.
    queue: Option<mpsc::Sender<Msg>>,
    writer: Option<JoinHandle<()>>,
    failure: Failure,
    reader: Reader,
    /// Commits refused by the writer fence (PostgreSQL only).
    refused: Arc<AtomicU64>,
    /// The claim reset the writer fence for a new etcd timeline: the token
    /// that was stored, and the new generation (PostgreSQL only).
    fence_reset: Option<(i64, i64)>,
    /// The batches queued and not committed, which this store's readers
    /// overlay (SQLite only).
    pending: Option<Arc<pending::Pending>>,
}

/// etcd's current revision, read when called (linearizable); `Err` with
/// why when it cannot be read. The PostgreSQL writer's claim calls it once,
/// with the fence row locked, from a blocking thread.
pub type RevisionSource = Box<dyn FnMut() -> std::result::Result<i64, String> + Send>;

impl Store {
    /// Opens `path`, creating the file (and its directory) and the schema if
    /// missing, migrating an older schema, and starts the writer thread.
    /// `retention` of zero keeps everything.
    pub fn open(path: &Path, retention: Duration) -> Result<Store> {
        let conn = schema::open_write(path)?;
        let pending = Arc::new(pending::Pending::default());
        let reader = Reader::open(path)?.with_pending(pending.clone());
        let store = Store::start(conn, reader, retention, Arc::default(), Some(pending))?;
        tracing::info!(path = %path.display(), ?retention, "history: opened");
        Ok(store)
    }

    /// Opens the shared PostgreSQL history as its writer, with `token` (of
    /// the `tenure/history-writer` election): connects, creates or migrates
    /// the schema, and claims the writer fence, so that from now on no
    /// writer with a lower token, or of an older fence generation, can
    /// commit. `revision` reads etcd's current revision for the claim (a
    /// fence reset after etcd started over; see ARCHITECTURE.md).
    /// [`HistoryError::Fenced`] when this writer may not write. Blocking:
    /// call it off the async runtime (`spawn_blocking`).
    pub fn open_postgres(
        url: &str,
        retention: Duration,
        token: i64,
        holder: &str,
        revision: RevisionSource,
    ) -> Result<Store> {
        Store::open_postgres_for(url, "", retention, token, holder, revision)
    }

    /// [`Store::open_postgres`] as the writer of the cluster `cluster` (its
    /// name; `""` the one unnamed cluster): `token` is of that cluster's
    /// `tenure/history-writer` election and claims that cluster's fence row
    /// only, so the writers of several clusters never fence each other.
    pub fn open_postgres_for(
        url: &str,
        cluster: &str,
        retention: Duration,
        token: i64,
        holder: &str,
        revision: RevisionSource,
    ) -> Result<Store> {
        let refused = Arc::new(AtomicU64::new(0));
        let (conn, reset) =
            match pg::PgWriter::connect(url, cluster, token, holder, refused.clone(), revision) {
                Ok(c) => c,
                Err(e) => {
                    if e.is_fenced() {
                        tracing::error!(error = %e, "history: commit refused (stale writer)");
                    }
                    return Err(e);
                }
            };
        let reader = Reader::open_postgres(url)?;
        let mut store = Store::start(conn, reader, retention, refused, None)?;
        store.fence_reset = reset;
        tracing::info!(db = %redact(url), token, ?retention, "history: opened as the writer");
        Ok(store)
    }

    fn start<C: writer::WriteConn>(
        conn: C,
        reader: Reader,
        retention: Duration,
        refused: Arc<AtomicU64>,
        pending: Option<Arc<pending::Pending>>,
    ) -> Result<Store> {
        let retention_ms = (!retention.is_zero())
            .then(|| i64::try_from(retention.as_millis()).unwrap_or(i64::MAX));
        let failure = Failure::default();
        let (tx, rx) = mpsc::channel(QUEUE_CAPACITY);
        let writer = Writer {
            conn,
            retention_ms,
            failure: failure.clone(),
            pending: pending.clone(),
        };
        let handle = std::thread::Builder::new()
            .name("tenure-history".into())
            .spawn(move || writer.run(rx))
            .map_err(|source| HistoryError::Io {
                path: reader.path().to_owned(),
                source,
            })?;
        Ok(Store {
            queue: Some(tx),
            writer: Some(handle),
            failure,
            reader,
            refused,
            fence_reset: None,
            pending,
        })
    }

    /// When opening reset the writer fence for a new etcd timeline: the
    /// token that was stored and the new generation.
    pub fn fence_reset(&self) -> Option<(i64, i64)> {
        self.fence_reset
    }

    /// How many commits the writer fence refused (a newer writer had
    /// written); always 0 on SQLite.
    pub fn refused_commits(&self) -> u64 {
        self.refused.load(Ordering::Relaxed)
    }

    /// Queues `batch` for the writer; waits only while the queue is full.
    /// `Ok` means queued, not committed: [`Store::flush`] waits for that.
    pub async fn write(&self, batch: Batch) -> Result<()> {
        self.write_in(None, batch).await
    }

    /// [`Store::write`] for the cluster `scope` names: the
    /// batch's names are already qualified (`CLUSTER/NAME`), its resume
    /// revision is the cluster's own.
    /// A SQLite store's readers show it from now on, before it is
    /// committed (`pending.rs`).
    pub async fn write_in(&self, scope: Scope, batch: Batch) -> Result<()> {
        let batch = Arc::new(batch);
        let seq = match &self.pending {
            Some(p) if !batch.events.is_empty() => p.push(&scope, &batch),
            _ => 0,
        };
        let sent = self.send(Msg::Batch(scope, batch, seq)).await;
        if let (Err(_), Some(p)) = (&sent, &self.pending) {
            // Never to be committed.
            p.clear();
        }
        sent
    }

    /// Queues the etcd cluster id the watcher reads from (`Update::Cluster`),
    /// stored after the batches queued before it, for the next resume point.
    pub async fn set_cluster(&self, cluster_id: u64) -> Result<()> {
        self.set_cluster_in(None, cluster_id).await
    }

    /// [`Store::set_cluster`] of the cluster `scope` names.
    pub async fn set_cluster_in(&self, scope: Scope, cluster_id: u64) -> Result<()> {
        self.send(Msg::Cluster(scope, cluster_id)).await
    }

    /// Records that the watcher was live (caught up with etcd) at `at_ms`:
    /// the history then knows it watched until that moment, even when no
    /// event came. Committed with the next group.
    pub async fn watched(&self, at_ms: i64) -> Result<()> {
        self.watched_in(None, at_ms).await
    }

    /// [`Store::watched`] of the cluster `scope` names.
    pub async fn watched_in(&self, scope: Scope, at_ms: i64) -> Result<()> {
        self.send(Msg::Watched(scope, at_ms)).await
    }

    async fn send(&self, msg: Msg) -> Result<()> {
        let queue = self.queue.as_ref().ok_or(HistoryError::Closed)?;
        queue.send(msg).await.map_err(|_| self.stopped())
    }

    /// Waits until everything queued before it is committed; returns the
    /// committed resume revision (0 if none yet).
    pub async fn flush(&self) -> Result<i64> {
        let queue = self.queue.as_ref().ok_or(HistoryError::Closed)?;
        let (tx, rx) = oneshot::channel();
        queue
            .send(Msg::Flush(tx))
            .await
            .map_err(|_| self.stopped())?;
        rx.await.map_err(|_| self.stopped())
    }

    /// Flushes, stops the writer and waits for it (off the async runtime).
    /// Dropping a `Store` does the same but blocks the calling thread.
    pub async fn close(mut self) -> Result<i64> {
        let revision = self.flush().await;
        self.queue = None;
        if let Some(handle) = self.writer.take() {
            let _ = tokio::task::spawn_blocking(move || join(handle)).await;
        }
        revision
    }

    /// A handle for queries, cheap to clone and to move into
    /// `spawn_blocking`.
    pub fn reader(&self) -> Reader {
        self.reader.clone()
    }

    /// See [`Reader::resume_point`].
    pub fn resume_point(&self) -> Result<Option<ResumePoint>> {
        self.reader.resume_point()
    }

    /// See [`Reader::terms`].
    pub fn terms(&self, election: &str, q: &Query) -> Result<Vec<TermRow>> {
        self.reader.terms(election, q)
    }

    /// See [`Reader::events`].
    pub fn events(&self, election: Option<&str>, q: &Query) -> Result<Vec<Event>> {
        self.reader.events(election, q)
    }

    /// See [`Reader::refusals`].
    pub fn refusals(&self, election: Option<&str>, q: &Query) -> Result<Vec<RefusalRow>> {
        self.reader.refusals(election, q)
    }

    /// See [`Reader::elections`].
    pub fn elections(&self) -> Result<Vec<ElectionSummary>> {
        self.reader.elections()
    }

    fn stopped(&self) -> HistoryError {
        match self.failure.locked().clone() {
            Some(message) => HistoryError::WriterFailed(message),
            None => HistoryError::Closed,
        }
    }
}

impl Drop for Store {
    /// Closes the queue and waits for the writer to commit what is queued.
    fn drop(&mut self) {
        self.queue = None;
        if let Some(handle) = self.writer.take() {
            join(handle);
        }
    }
}

fn join(handle: JoinHandle<()>) {
    if handle.join().is_err() {
        tracing::error!("history: the writer thread panicked");
    }
}

impl std::fmt::Debug for Store {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Store")
            .field("path", &self.reader.path())
            .finish()
    }
}
