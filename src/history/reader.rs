//! Read-only access to a history, whichever its backend: one type,
//! [`Reader`], whose every query runs on an idle read connection of the
//! SQLite file or the PostgreSQL pool. The queries themselves are the
//! backends' (`query.rs`, `summary.rs`, `window.rs`, `cluster.rs` for
//! SQLite; `pg/` for PostgreSQL): this file only dispatches, so that the
//! two backends and the types they share import nothing of each other's
//! callers.

use crate::task::Locked;
use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};

use rusqlite::Connection;

use super::acting;
use super::cluster;
use super::pending::{Pending, Snapshot};
use super::query::{self, Query, RefusalRow, ResumePoint, TermRow, MAX_LIMIT};
use super::summary::{self, ElectionsPage, PageFrom, RecentCounts};
use super::window::{self, Activity, MAX_ACTIVE};
use super::{pg, schema, Db, ElectionSummary, HistoryError, WriterStatus};
use crate::events::cluster::{ClusterBaseline, ClusterEvent};
use crate::events::Event;

type Result<T, E = HistoryError> = std::result::Result<T, E>;

/// Read connections kept idle per reader (more are opened when needed).
const MAX_IDLE_READERS: usize = 4;

/// Read-only access to a history (a file, or a PostgreSQL database): the
/// queries, without a writer. Clones share a small pool of read connections.
#[derive(Clone)]
pub struct Reader {
    backend: ReadBackend,
    /// The file, or the redacted URL.
    label: Arc<PathBuf>,
    /// The writer's queued batches, overlaid on the elections' summaries
    /// (a SQLite store's reader; `pending.rs`).
    pending: Option<Arc<Pending>>,
}

#[derive(Clone)]
enum ReadBackend {
    Sqlite(Arc<Pool>),
    Postgres(Arc<pg::PgPool>),
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
            backend: ReadBackend::Sqlite(Arc::new(Pool {
                path: path.to_owned(),
                idle: Mutex::new(vec![conn]),
            })),
            label: Arc::new(path.to_owned()),
            pending: None,
        })
    }

    /// Connects to a PostgreSQL history (read-only sessions);
    /// [`HistoryError::Schema`] when it holds no schema this build reads.
    /// Blocking: call it off the async runtime.
    pub fn open_postgres(url: &str) -> Result<Reader> {
        let pool = pg::PgPool::open(url)?;
        let label = Arc::new(PathBuf::from(pool.display()));
        Ok(Reader {
            backend: ReadBackend::Postgres(Arc::new(pool)),
            label,
            pending: None,
        })
    }

    /// Either backend, by what `--db` names.
    pub fn open_db(db: &Db) -> Result<Reader> {
        match db {
            Db::Sqlite(path) => Reader::open(path),
            Db::Postgres(url) => Reader::open_postgres(url),
        }
    }

    /// This reader overlays what `pending` holds on the elections'
    /// summaries.
    pub(super) fn with_pending(mut self, pending: Arc<Pending>) -> Reader {
        self.pending = Some(pending);
        self
    }

    /// What the writer holds queued now (none without a writer).
    fn queued(&self) -> Snapshot {
        self.pending
            .as_ref()
            .map(|p| p.queued())
            .unwrap_or_default()
    }

    /// The file this reads (for PostgreSQL: the URL, password redacted).
    pub fn path(&self) -> &Path {
        &self.label
    }

    /// Is this the shared PostgreSQL history?
    pub fn is_postgres(&self) -> bool {
        matches!(self.backend, ReadBackend::Postgres(_))
    }

    /// The stored resume revision and the terms open at it; `None` when
    /// nothing was ever committed.
    pub fn resume_point(&self) -> Result<Option<ResumePoint>> {
        self.resume_point_of(None)
    }

    /// [`Reader::resume_point`] of one cluster of several: its
    /// own revision and cluster id, and its open terms by the names its
    /// watcher gives them (`CLUSTER/` taken off).
    pub fn resume_point_of(&self, scope: Option<&str>) -> Result<Option<ResumePoint>> {
        self.run(
            |c| query::resume_point(c, scope),
            |c| pg::resume_point(c, scope),
        )
    }

    /// Terms of `election` overlapping `[from, to]` (an open term overlaps
    /// everything after its start), by start revision.
    pub fn terms(&self, election: &str, q: &Query) -> Result<Vec<TermRow>> {
        let mut rows = self.run(
            |c| query::terms(c, election, q),
            |c| pg::terms(c, election, q),
        )?;
        self.add_acting(election, q, &mut rows)?;
        Ok(rows)
    }

    /// Each term's acting and margin, from its holder's records and the
    /// term that followed it (`history::acting`).
    fn add_acting(&self, election: &str, q: &Query, rows: &mut [TermRow]) -> Result<()> {
        let Some(span) = acting::Span::of(rows) else {
            return Ok(());
        };
        let records = self.run(
            |c| query::acting(c, election, span.range(), span.limit),
            |c| pg::acting(c, election, span.range(), span.limit),
        )?;
        let found = acting::Found::from_events(&records);
        found.bound_durations(rows);
        if found.is_empty() {
            return Ok(());
        }
        let after_last = self.after_last(election, q, rows)?;
        found.fill(rows, after_last);
        Ok(())
    }

    /// The term after the last of `rows`, wherever the window ends
    /// (`Err(())`: not known, past a full page).
    fn after_last(
        &self,
        election: &str,
        q: &Query,
        rows: &[TermRow],
    ) -> Result<Result<Option<TermRow>, ()>> {
        if rows.last().is_none_or(|r| r.ended_at_ms.is_none()) {
            return Ok(Ok(None));
        }
        if rows.len() >= MAX_LIMIT {
            return Ok(Err(()));
        }
        let wider = Query {
            from_ms: q.from_ms,
            to_ms: None,
            limit: Some(rows.len() + 1),
        };
        let more = self.run(
            |c| query::terms(c, election, &wider),
            |c| pg::terms(c, election, &wider),
        )?;
        Ok(Ok(more.into_iter().nth(rows.len())))
    }

    /// Events with `at_ms` in `[from, to]`, by revision (the oldest first).
    /// With an election, its events and the gaps (which concern every
    /// election).
    pub fn events(&self, election: Option<&str>, q: &Query) -> Result<Vec<Event>> {
        self.run(
            |c| query::events(c, election, q),
            |c| pg::events(c, election, q),
        )
    }

    /// When the history's earliest event was recorded (`None`: it holds
    /// none): how far back anything can be shown.
    pub fn first_event_ms(&self) -> Result<Option<i64>> {
        self.run(|c| query::first_event_ms(c), pg::first_event_ms)
    }

    /// Fence refusals with `at_ms` in `[from, to]`, by revision.
    pub fn refusals(&self, election: Option<&str>, q: &Query) -> Result<Vec<RefusalRow>> {
        self.run(
            |c| query::refusals(c, election, q),
            |c| pg::refusals(c, election, q),
        )
    }

    /// One summary per election the history knows, by name (every one of
    /// them: prefer [`Reader::elections_page`] or [`Reader::election`]).
    pub fn elections(&self) -> Result<Vec<ElectionSummary>> {
        let queued = self.queued();
        self.run(|c| summary::elections(c, &queued), pg::summary::elections)
    }

    /// Per election, how many terms started (seen starting) at or after
    /// `from_ms`: one query for all elections.
    pub fn changes_since(&self, from_ms: i64) -> Result<HashMap<String, u64>> {
        self.changes_since_at_most(from_ms, i64::MAX)
    }

    /// [`Reader::changes_since`] for at most `max` elections.
    pub(super) fn changes_since_at_most(
        &self,
        from_ms: i64,
        max: i64,
    ) -> Result<HashMap<String, u64>> {
        let queued = self.queued();
        self.run(
            |c| summary::changes_since(c, from_ms, max, &queued),
            |c| pg::changes_since(c, from_ms, max),
        )
    }

    /// The last moment a watcher recording into this history is known to
    /// have been live (a batch committed, or a caught-up heartbeat), or the
    /// newest event's arrival if later; `None`: never. What came after it,
    /// until a watcher is live again, was not watched.
    pub fn watched_until(&self) -> Result<Option<i64>> {
        self.watched_until_of(None)
    }

    /// The clusters this history records, by their resume revisions:
    /// `None` for the one cluster of a serve without `--cluster`, a name
    /// for each of several.
    pub fn scopes(&self) -> Result<Vec<Option<String>>> {
        self.run(query::scopes, pg::scopes)
    }

    /// [`Reader::watched_until`] of one cluster of several.
    pub fn watched_until_of(&self, scope: Option<&str>) -> Result<Option<i64>> {
        self.run(
            |c| query::watched_until(c, scope),
            |c| pg::watched_until(c, scope),
        )
    }

    /// What the shared history says of its recording; `None` on SQLite.
    /// Blocking.
    pub fn writer_status(&self) -> Result<Option<WriterStatus>> {
        self.writer_status_of(None)
    }

    /// [`Reader::writer_status`] of one cluster of several: its resume
    /// revision, heartbeat and writer fence row.
    pub fn writer_status_of(&self, scope: Option<&str>) -> Result<Option<WriterStatus>> {
        match &self.backend {
            ReadBackend::Sqlite(_) => Ok(None),
            ReadBackend::Postgres(pool) => pool.with(|c| pg::writer_status(c, scope)).map(Some),
        }
    }

    /// The shared history's writer fence: the highest writer token that has
    /// written and its holder; `None` on SQLite or before any writer.
    pub fn writer_fence(&self) -> Result<Option<(i64, String)>> {
        self.writer_fence_of(None)
    }

    /// [`Reader::writer_fence`] of one cluster of several (its own row).
    pub fn writer_fence_of(&self, scope: Option<&str>) -> Result<Option<(i64, String)>> {
        match &self.backend {
            ReadBackend::Sqlite(_) => Ok(None),
            ReadBackend::Postgres(pool) => pool.with(|c| pg::writer_fence(c, scope.unwrap_or(""))),
        }
    }

    /// Runs the query of this reader's backend on an idle read connection
    /// (opening one if none is idle). Blocking.
    fn run<T>(
        &self,
        sqlite: impl FnOnce(&mut Connection) -> Result<T>,
        postgres: impl FnMut(&mut postgres::Client) -> Result<T>,
    ) -> Result<T> {
        match &self.backend {
            ReadBackend::Sqlite(pool) => Self::with_sqlite(pool, sqlite),
            ReadBackend::Postgres(pool) => pool.with(postgres),
        }
    }

    fn with_sqlite<T>(pool: &Pool, f: impl FnOnce(&mut Connection) -> Result<T>) -> Result<T> {
        let idle = || pool.idle.locked();
        let conn = idle().pop();
        let mut conn = match conn {
            Some(c) => c,
            None => schema::open_read(&pool.path)?,
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
        f.debug_struct("Reader").field("path", &self.label).finish()
    }
}

impl Reader {
    /// One election's summary (with its open term); `None` when the history
    /// does not know it. One row, whatever the number of elections.
    pub fn election(&self, name: &str) -> Result<Option<ElectionSummary>, HistoryError> {
        let queued = self.queued();
        self.run(
            |c| summary::election(c, name, &queued),
            |c| pg::summary::election(c, name),
        )
    }

    /// At most `limit` elections by name from `from`, with their open
    /// terms, and how many the history knows.
    pub fn elections_page(
        &self,
        from: PageFrom<'_>,
        limit: usize,
    ) -> Result<ElectionsPage, HistoryError> {
        let queued = self.queued();
        self.run(
            |c| summary::page(c, from, limit, &queued),
            |c| pg::summary::page(c, from, limit),
        )
    }

    /// How many elections have an open term (in the current timeline).
    pub fn leading_count(&self) -> Result<u64, HistoryError> {
        let queued = self.queued();
        self.run(|c| summary::leading(c, &queued), pg::summary::leading)
    }

    /// Changes and refusals since `from_ms` of the elections named
    /// `first..=last` (a page of them, by name).
    pub fn recent_between(
        &self,
        from_ms: i64,
        first: &str,
        last: &str,
    ) -> Result<RecentCounts, HistoryError> {
        let queued = self.queued();
        self.run(
            |c| summary::recent_between(c, from_ms, first, last, &queued),
            |c| pg::summary::recent_between(c, from_ms, first, last),
        )
    }

    /// Refusals since `from_ms`, per election.
    pub fn refusals_since(&self, from_ms: i64) -> Result<HashMap<String, u64>, HistoryError> {
        let queued = self.queued();
        self.run(
            |c| summary::refusals_since(c, from_ms, &queued),
            |c| pg::summary::refusals_since(c, from_ms),
        )
    }
}

impl Reader {
    /// [`Reader::changes_since`] for at most [`MAX_ACTIVE`] elections.
    pub fn started_since(&self, from_ms: i64) -> Result<HashMap<String, u64>, HistoryError> {
        self.changes_since_at_most(from_ms, MAX_ACTIVE as i64)
    }

    /// Every election with a term or a refusal in `[from, to]`, by name,
    /// with how much happened (at most [`MAX_ACTIVE`]).
    pub fn activity(&self, q: &Query) -> Result<Vec<Activity>, HistoryError> {
        self.run(|c| window::activity(c, q), |c| pg::activity(c, q))
    }
}

impl Reader {
    /// Cluster events with `at_ms` in `[from, to]`, oldest first.
    pub fn cluster_events(&self, q: &Query) -> Result<Vec<ClusterEvent>, HistoryError> {
        self.run(|c| cluster::events(c, q), |c| pg::cluster_events(c, q))
    }

    /// What the recorded cluster events leave: the last leader, the members
    /// and alarms in force.
    pub fn cluster_baseline(&self) -> Result<ClusterBaseline, HistoryError> {
        self.cluster_baseline_of(None)
    }

    /// [`Reader::cluster_baseline`] of one cluster of several.
    pub fn cluster_baseline_of(
        &self,
        scope: Option<&str>,
    ) -> Result<ClusterBaseline, HistoryError> {
        self.run(
            |c| cluster::baseline(c, scope),
            |c| pg::cluster_baseline(c, scope),
        )
    }
}
