//! Read-only access to a history, whichever its backend: one type,
//! [`Reader`], whose every query runs on an idle read connection of the
//! SQLite file or the PostgreSQL pool. The queries themselves are the
//! backends' (`query.rs`, `summary.rs`, `window.rs`, `cluster.rs` for
//! SQLite; `pg/` for PostgreSQL): this file only dispatches, so that the
//! two backends and the types they share import nothing of each other's
//! callers.

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};

use rusqlite::Connection;

use super::cluster;
use super::query::{self, Query, RefusalRow, ResumePoint, TermRow, MAX_LIMIT};
use super::summary::{self, ElectionsPage, PageFrom, RecentCounts};
use super::window::{self, Activity, MAX_ACTIVE};
use super::{pg, schema, Db, ElectionSummary, HistoryError, WriterStatus};
use crate::events::acting::{self, Merged, Next, TermFacts};
use crate::events::cluster::{ClusterBaseline, ClusterEvent};
use crate::events::{Event, EventKind};

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

/// How long after its term's end a holder's acting record is looked for.
const ACTING_LATE_MS: i64 = 10 * 60 * 1000;

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
        })
    }

    /// Either backend, by what `--db` names.
    pub fn open_db(db: &Db) -> Result<Reader> {
        match db {
            Db::Sqlite(path) => Reader::open(path),
            Db::Postgres(url) => Reader::open_postgres(url),
        }
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
        self.run(query::resume_point, pg::resume_point)
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
    /// term that followed it (issue 22; `events::acting`).
    fn add_acting(&self, election: &str, q: &Query, rows: &mut [TermRow]) -> Result<()> {
        let (Some(first), Some(last)) = (rows.first(), rows.last()) else {
            return Ok(());
        };
        let from = rows
            .iter()
            .map(|r| r.started_at_ms)
            .min()
            .unwrap_or(first.started_at_ms);
        let lo = rows.iter().map(|r| r.token).min().unwrap_or(first.token);
        let hi = rows.iter().map(|r| r.token).max().unwrap_or(last.token);
        let limit = i64::try_from(rows.len() * 8 + 64).unwrap_or(i64::MAX);
        // A record comes at most a few minutes after its term ended (a
        // holder cut off retries for 30 s); an open term's any time.
        let to = rows
            .iter()
            .map(|r| {
                r.ended_at_ms
                    .map_or(i64::MAX, |e| e.saturating_add(ACTING_LATE_MS))
            })
            .max()
            .unwrap_or(i64::MAX);
        let records = self.run(
            |c| query::acting(c, election, (from, to, lo, hi), limit),
            |c| pg::acting(c, election, (from, to, lo, hi), limit),
        )?;
        if !records
            .iter()
            .any(|e| matches!(e.kind, EventKind::Acting { .. }))
        {
            return Ok(());
        }
        // The term after the last one, wherever the window ends.
        let next_of_last = if last.ended_at_ms.is_none() {
            Next::Known(None)
        } else if rows.len() < MAX_LIMIT {
            let wider = Query {
                from_ms: q.from_ms,
                to_ms: None,
                limit: Some(rows.len() + 1),
            };
            let more = self.run(
                |c| query::terms(c, election, &wider),
                |c| pg::terms(c, election, &wider),
            )?;
            Next::Known(more.get(rows.len()).map(|r| r.started_at_ms))
        } else {
            Next::Unknown
        };
        let mut merged: HashMap<i64, Merged> = HashMap::new();
        // Starts recorded by a replay carry its arrival time: not aligned.
        let mut replayed: Vec<(i64, i64, i64)> = Vec::new();
        for e in &records {
            match &e.kind {
                EventKind::Acting { record } => merged.entry(record.token).or_default().add(record),
                EventKind::Gap {
                    from_revision,
                    to_revision,
                }
                | EventKind::Unobserved {
                    from_revision,
                    to_revision,
                    ..
                } => replayed.push((e.at_ms, *from_revision, *to_revision)),
                EventKind::Reset { from_revision, .. } => {
                    replayed.push((e.at_ms, *from_revision, *from_revision))
                }
                _ => {}
            }
        }
        let seen_live = |row: &TermRow| {
            !row.from_snapshot
                && !replayed.iter().any(|(at, lo, hi)| {
                    *at == row.started_at_ms && (*lo..=*hi).contains(&row.started_revision)
                })
        };
        let starts: Vec<i64> = rows.iter().map(|r| r.started_at_ms).collect();
        for (i, row) in rows.iter_mut().enumerate() {
            let Some(m) = merged.get(&row.token) else {
                continue;
            };
            let facts = TermFacts {
                started_at_ms: seen_live(row).then_some(row.started_at_ms),
                ended_at_ms: row.ended_at_ms,
                end_cause: row.end_cause,
                next_started_at_ms: match starts.get(i + 1) {
                    Some(next) => Next::Known(Some(*next)),
                    None => next_of_last,
                },
            };
            row.acting = acting::view(&facts, m);
        }
        Ok(())
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
        self.run(summary::elections, pg::summary::elections)
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
        self.run(
            |c| query::changes_since(c, from_ms, max),
            |c| pg::changes_since(c, from_ms, max),
        )
    }

    /// The last moment a watcher recording into this history is known to
    /// have been live (a batch committed, or a caught-up heartbeat), or the
    /// newest event's arrival if later; `None`: never. What came after it,
    /// until a watcher is live again, was not watched (issue 20.7).
    pub fn watched_until(&self) -> Result<Option<i64>> {
        self.run(query::watched_until, pg::watched_until)
    }

    /// What the shared history says of its recording; `None` on SQLite.
    /// Blocking.
    pub fn writer_status(&self) -> Result<Option<WriterStatus>> {
        match &self.backend {
            ReadBackend::Sqlite(_) => Ok(None),
            ReadBackend::Postgres(pool) => pool.with(pg::writer_status).map(Some),
        }
    }

    /// The shared history's writer fence: the highest writer token that has
    /// written and its holder; `None` on SQLite or before any writer.
    pub fn writer_fence(&self) -> Result<Option<(i64, String)>> {
        match &self.backend {
            ReadBackend::Sqlite(_) => Ok(None),
            ReadBackend::Postgres(pool) => pool.with(pg::writer_fence),
        }
    }

    /// Runs the query of this reader's backend on an idle read connection
    /// (opening one if none is idle). Blocking.
    fn run<T>(
        &self,
        sqlite: impl FnOnce(&mut Connection) -> Result<T>,
        postgres: impl FnOnce(&mut postgres::Client) -> Result<T>,
    ) -> Result<T> {
        match &self.backend {
            ReadBackend::Sqlite(pool) => Self::with_sqlite(pool, sqlite),
            ReadBackend::Postgres(pool) => pool.with(postgres),
        }
    }

    fn with_sqlite<T>(pool: &Pool, f: impl FnOnce(&mut Connection) -> Result<T>) -> Result<T> {
        let idle = || pool.idle.lock().unwrap_or_else(|p| p.into_inner());
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
        self.run(
            |c| summary::election(c, name),
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
        self.run(
            |c| summary::page(c, from, limit),
            |c| pg::summary::page(c, from, limit),
        )
    }

    /// How many elections have an open term (in the current timeline).
    pub fn leading_count(&self) -> Result<u64, HistoryError> {
        self.run(summary::leading, pg::summary::leading)
    }

    /// Changes and refusals since `from_ms` of the elections named
    /// `first..=last` (a page of them, by name).
    pub fn recent_between(
        &self,
        from_ms: i64,
        first: &str,
        last: &str,
    ) -> Result<RecentCounts, HistoryError> {
        self.run(
            |c| summary::recent_between(c, from_ms, first, last),
            |c| pg::summary::recent_between(c, from_ms, first, last),
        )
    }

    /// Refusals since `from_ms`, per election.
    pub fn refusals_since(&self, from_ms: i64) -> Result<HashMap<String, u64>, HistoryError> {
        self.run(
            |c| summary::refusals_since(c, from_ms),
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
        self.run(|c| cluster::baseline(c), pg::cluster_baseline)
    }
}
