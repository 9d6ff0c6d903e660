//! The SQLite history: who led when, how each term ended, every event and
//! every fence refusal, and the revision the watcher resumes from.
//!
//! - [`Store`] is the sink `tenure serve` writes to. One dedicated OS thread
//!   owns the only write connection; [`Store::write`] queues a [`Batch`]
//!   (bounded queue: a slow disk slows the watcher, it does not grow
//!   memory). The writer drains what is queued and commits it in **one**
//!   transaction together with the resume revision (the highest
//!   `batch.revision`), so after a crash the watcher resumes exactly where
//!   the stored events end. A batch at or below the stored resume revision
//!   is ignored whole: a replay cannot duplicate anything.
//! - Reads use separate read-only connections (WAL lets them run beside the
//!   writer). They are blocking calls: from async code, use
//!   `spawn_blocking` (take a [`Reader`] with [`Store::reader`], it is
//!   cheap to clone).
//! - [`Reader`] opens an existing file for the CLI without starting a
//!   writer; it runs the very same queries.
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
//! Schema (version [`SCHEMA_VERSION`], in `PRAGMA user_version`): see
//! `schema.rs`.

mod export;
mod query;
mod schema;
mod time;
mod writer;

use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::Duration;

use rusqlite::Connection;
use tokio::sync::{mpsc, oneshot};

use crate::events::{Batch, Event};

pub use export::terms_to_csv;
pub use query::{
    ElectionSummary, OpenTerm, Query, RefusalRow, ResumePoint, TermRow, DEFAULT_LIMIT, MAX_LIMIT,
};
pub use schema::SCHEMA_VERSION;
pub use time::{format_ms, parse_time};

use writer::{Failure, Msg, Writer};

/// Batches that may wait in the queue before [`Store::write`] waits.
const QUEUE_CAPACITY: usize = 1024;
/// Idle read connections kept for reuse.
const MAX_IDLE_READERS: usize = 4;

#[derive(Debug, thiserror::Error)]
pub enum HistoryError {
    #[error("history database: {0}")]
    Sqlite(Box<rusqlite::Error>),
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

type Result<T, E = HistoryError> = std::result::Result<T, E>;

/// The history sink: one writer thread, and read-only connections for
/// queries.
pub struct Store {
    /// `None` only while dropping or closing.
    queue: Option<mpsc::Sender<Msg>>,
    writer: Option<JoinHandle<()>>,
    failure: Failure,
    reader: Reader,
}

impl Store {
    /// Opens `path`, creating the file (and its directory) and the schema if
    /// missing, migrating an older schema, and starts the writer thread.
    /// `retention` of zero keeps everything.
    pub fn open(path: &Path, retention: Duration) -> Result<Store> {
        let conn = schema::open_write(path)?;
        let reader = Reader::open(path)?;
        let retention_ms = (!retention.is_zero())
            .then(|| i64::try_from(retention.as_millis()).unwrap_or(i64::MAX));
        let failure = Failure::default();
        let (tx, rx) = mpsc::channel(QUEUE_CAPACITY);
        let writer = Writer {
            conn,
            retention_ms,
            failure: failure.clone(),
        };
        let handle = std::thread::Builder::new()
            .name("tenure-history".into())
            .spawn(move || writer.run(rx))
            .map_err(|source| HistoryError::Io {
                path: path.to_owned(),
                source,
            })?;
        tracing::info!(path = %path.display(), ?retention, "history: opened");
        Ok(Store {
            queue: Some(tx),
            writer: Some(handle),
            failure,
            reader,
        })
    }

    /// Queues `batch` for the writer; waits only while the queue is full.
    /// `Ok` means queued, not committed: [`Store::flush`] waits for that.
    pub async fn write(&self, batch: Batch) -> Result<()> {
        let queue = self.queue.as_ref().ok_or(HistoryError::Closed)?;
        queue
            .send(Msg::Batch(batch))
            .await
            .map_err(|_| self.stopped())
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
        match self
            .failure
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .clone()
        {
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

/// Read-only access to a history file: the queries, without a writer.
/// Clones share a small pool of read-only connections.
#[derive(Clone)]
pub struct Reader {
    pool: Arc<Pool>,
}

struct Pool {
    path: PathBuf,
    idle: Mutex<Vec<Connection>>,
}

impl Reader {
    /// Opens an existing history file read-only; [`HistoryError::NotFound`]
    /// if there is none, [`HistoryError::Schema`] if it is not one this
    /// build can read.
    pub fn open(path: &Path) -> Result<Reader> {
        let exists = path.try_exists().map_err(|source| HistoryError::Io {
            path: path.to_owned(),
            source,
        })?;
        if !exists {
            return Err(HistoryError::NotFound {
                path: path.to_owned(),
            });
        }
        let conn = schema::open_read(path)?;
        schema::check_version(&conn, path)?;
        Ok(Reader {
            pool: Arc::new(Pool {
                path: path.to_owned(),
                idle: Mutex::new(vec![conn]),
            }),
        })
    }

    /// The file this reads.
    pub fn path(&self) -> &Path {
        &self.pool.path
    }

    /// The stored resume revision and the terms open at it; `None` when
    /// nothing was ever committed.
    pub fn resume_point(&self) -> Result<Option<ResumePoint>> {
        self.with(query::resume_point)
    }

    /// Terms of `election` overlapping `[from, to]` (an open term overlaps
    /// everything after its start), by start revision.
    pub fn terms(&self, election: &str, q: &Query) -> Result<Vec<TermRow>> {
        self.with(|c| query::terms(c, election, q))
    }

    /// Events with `at_ms` in `[from, to]`, by revision (the oldest first).
    /// With an election, its events and the gaps (which concern every
    /// election).
    pub fn events(&self, election: Option<&str>, q: &Query) -> Result<Vec<Event>> {
        self.with(|c| query::events(c, election, q))
    }

    /// Fence refusals with `at_ms` in `[from, to]`, by revision.
    pub fn refusals(&self, election: Option<&str>, q: &Query) -> Result<Vec<RefusalRow>> {
        self.with(|c| query::refusals(c, election, q))
    }

    /// One summary per election the history knows, by name.
    pub fn elections(&self) -> Result<Vec<ElectionSummary>> {
        self.with(query::elections)
    }

    /// Runs `f` on an idle read connection, opening one if none is idle.
    fn with<T>(&self, f: impl FnOnce(&mut Connection) -> Result<T>) -> Result<T> {
        let idle = || self.pool.idle.lock().unwrap_or_else(|p| p.into_inner());
        let conn = idle().pop();
        let mut conn = match conn {
            Some(c) => c,
            None => schema::open_read(&self.pool.path)?,
        };
        let result = f(&mut conn);
        let mut idle = idle();
        if idle.len() < MAX_IDLE_READERS {
            idle.push(conn);
        }
        result
    }
}

impl std::fmt::Debug for Reader {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Reader")
            .field("path", &self.pool.path)
            .finish()
    }
}

impl std::fmt::Debug for Store {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Store")
            .field("path", &self.reader.pool.path)
            .finish()
    }
}
