//! The schema, its migrations, and how connections are opened.
//!
//! `PRAGMA user_version` is the number of migrations applied. A new schema
//! change is a new entry at the end of [`MIGRATIONS`], never an edit of an
//! old one: each runs once, in its own transaction, on the writer's
//! connection when a [`Store`](super::Store) opens the file.

use std::path::Path;
use std::time::Duration;

use rusqlite::{Connection, OpenFlags};

use super::HistoryError;

/// How long a connection waits for a lock held by another connection.
const BUSY_TIMEOUT: Duration = Duration::from_secs(5);

// The meta keys live in `meta.rs`; named here too, where pg/ reads them.
pub(super) use super::meta::{CLUSTER_KEY, RESUME_KEY, WATCHED_KEY};

const V1: &str = "
CREATE TABLE terms (
    election         TEXT    NOT NULL,
    token            INTEGER NOT NULL,
    holder           TEXT    NOT NULL,
    lease_id         INTEGER NOT NULL,
    -- 'single' | 'queue'; NULL when the history saw only the term's end
    layout           TEXT,
    started_at_ms    INTEGER NOT NULL,
    started_revision INTEGER NOT NULL,
    from_snapshot    INTEGER NOT NULL,
    ended_at_ms      INTEGER,
    ended_revision   INTEGER,
    end_cause        TEXT,
    UNIQUE (election, token)
);
CREATE INDEX terms_by_start ON terms (election, started_revision);
CREATE INDEX terms_ended ON terms (ended_at_ms) WHERE ended_at_ms IS NOT NULL;
CREATE INDEX terms_open ON terms (election, started_revision) WHERE ended_at_ms IS NULL;

CREATE TABLE events (
    id       INTEGER PRIMARY KEY,
    revision INTEGER NOT NULL,
    at_ms    INTEGER NOT NULL,
    election TEXT    NOT NULL,
    type     TEXT    NOT NULL,
    token    INTEGER,
    holder   TEXT,
    json     TEXT    NOT NULL
);
CREATE INDEX events_by_election ON events (election, at_ms);
CREATE INDEX events_by_time ON events (at_ms);

CREATE TABLE refusals (
    id             INTEGER PRIMARY KEY,
    election       TEXT    NOT NULL,
    resource       TEXT    NOT NULL,
    token          INTEGER NOT NULL,
    reason         TEXT    NOT NULL,
    revision       INTEGER NOT NULL,
    at_ms          INTEGER NOT NULL,
    current_token  INTEGER,
    current_holder TEXT
);
CREATE INDEX refusals_by_election ON refusals (election, at_ms);
CREATE INDEX refusals_by_time ON refusals (at_ms);

CREATE TABLE watcher_state (
    key   TEXT PRIMARY KEY,
    value INTEGER NOT NULL
) WITHOUT ROWID;
";

/// Timelines: after an etcd restore or a new cluster, tokens start over, so a
/// term is `(election, epoch, token)`. Existing terms are epoch 0.
const V2: &str = "
CREATE TABLE terms_v2 (
    election         TEXT    NOT NULL,
    epoch            INTEGER NOT NULL DEFAULT 0,
    token            INTEGER NOT NULL,
    holder           TEXT    NOT NULL,
    lease_id         INTEGER NOT NULL,
    layout           TEXT,
    started_at_ms    INTEGER NOT NULL,
    started_revision INTEGER NOT NULL,
    from_snapshot    INTEGER NOT NULL,
    ended_at_ms      INTEGER,
    ended_revision   INTEGER,
    end_cause        TEXT,
    UNIQUE (election, epoch, token)
);
INSERT INTO terms_v2 (election, epoch, token, holder, lease_id, layout, started_at_ms,
    started_revision, from_snapshot, ended_at_ms, ended_revision, end_cause)
SELECT election, 0, token, holder, lease_id, layout, started_at_ms,
    started_revision, from_snapshot, ended_at_ms, ended_revision, end_cause FROM terms;
DROP TABLE terms;
ALTER TABLE terms_v2 RENAME TO terms;
CREATE INDEX terms_by_start ON terms (election, started_revision);
CREATE INDEX terms_ended ON terms (ended_at_ms) WHERE ended_at_ms IS NOT NULL;
CREATE INDEX terms_open ON terms (election, started_revision) WHERE ended_at_ms IS NULL;
";

/// etcd's own events (`cluster.rs`).
const V3: &str = "
CREATE TABLE cluster_events (
    id     INTEGER PRIMARY KEY,
    at_ms  INTEGER NOT NULL,
    type   TEXT    NOT NULL,
    dedupe TEXT    UNIQUE,
    json   TEXT    NOT NULL
);
CREATE INDEX cluster_events_by_time ON cluster_events (at_ms);
";

/// The `elections` table (`summary.rs`), filled from what is stored; and an
/// index for "terms seen starting since", which the overview and the list
/// API count.
const V4: &str = "
CREATE TABLE elections (
    election      TEXT    PRIMARY KEY,
    terms         INTEGER NOT NULL DEFAULT 0,
    refusals      INTEGER NOT NULL DEFAULT 0,
    last_event_ms INTEGER
) WITHOUT ROWID;
INSERT INTO elections (election, terms, refusals, last_event_ms)
SELECT n,
       (SELECT COUNT(*) FROM terms WHERE election = n),
       (SELECT COUNT(*) FROM refusals WHERE election = n),
       (SELECT MAX(at_ms) FROM events WHERE election = n)
FROM (SELECT election AS n FROM events WHERE election <> ''
      UNION SELECT election FROM terms
      UNION SELECT election FROM refusals);
CREATE INDEX terms_seen_starting ON terms (started_at_ms) WHERE from_snapshot = 0;
";

/// Kubernetes' Leases named `NAMESPACE/NAME` (`lease_names.rs`): no SQL of
/// its own, the rename runs after it.
const V5: &str = "";

/// Every migration, in order; `user_version` counts those applied.
const MIGRATIONS: &[&str] = &[V1, V2, V3, V4, V5];

/// The version whose migration renames Leases (`lease_names.rs`).
const LEASE_NAMES: usize = 5;

/// The schema version this build writes and reads.
pub const SCHEMA_VERSION: i64 = MIGRATIONS.len() as i64;

/// Opens (creating if missing) the writer's connection, switches it to WAL
/// and brings the schema up to date.
pub(super) fn open_write(path: &Path) -> Result<Connection, HistoryError> {
    if let Some(dir) = path.parent().filter(|d| !d.as_os_str().is_empty()) {
        std::fs::create_dir_all(dir).map_err(|source| HistoryError::Io {
            path: dir.to_owned(),
            source,
        })?;
    }
    let mut conn = Connection::open(path)?;
    conn.busy_timeout(BUSY_TIMEOUT)?;
    let mode: String =
        conn.pragma_update_and_check(None, "journal_mode", "WAL", |row| row.get(0))?;
    if !mode.eq_ignore_ascii_case("wal") {
        tracing::warn!(path = %path.display(), mode, "history: SQLite refused WAL mode; readers may wait for the writer");
    }
    // With WAL, NORMAL loses at most the last commits on power loss, never
    // consistency; the resume revision is committed with the events, so a
    // lost commit is replayed by the watcher.
    conn.pragma_update(None, "synchronous", "NORMAL")?;
    migrate(&mut conn, path)?;
    Ok(conn)
}

fn migrate(conn: &mut Connection, path: &Path) -> Result<(), HistoryError> {
    let version = user_version(conn)?;
    if version > SCHEMA_VERSION {
        return Err(too_new(path, version));
    }
    for (i, sql) in MIGRATIONS.iter().enumerate().skip(version.max(0) as usize) {
        let tx = conn.transaction_with_behavior(rusqlite::TransactionBehavior::Immediate)?;
        tx.execute_batch(sql)?;
        if i + 1 == LEASE_NAMES {
            super::lease_names::sqlite(&tx)?;
        }
        tx.pragma_update(None, "user_version", i as i64 + 1)?;
        tx.commit()?;
        tracing::info!(path = %path.display(), version = i + 1, "history: schema migrated");
    }
    Ok(())
}

/// Opens a read-only connection to an existing file whose schema is the
/// one this build knows.
pub(super) fn open_read(path: &Path) -> Result<Connection, HistoryError> {
    let conn = Connection::open_with_flags(
        path,
        OpenFlags::SQLITE_OPEN_READ_ONLY | OpenFlags::SQLITE_OPEN_NO_MUTEX,
    )?;
    conn.busy_timeout(BUSY_TIMEOUT)?;
    Ok(conn)
}

/// Checks, on a read connection, that the file holds this build's schema.
pub(super) fn check_version(conn: &Connection, path: &Path) -> Result<(), HistoryError> {
    let version = user_version(conn)?;
    let reason = match version {
        v if v == SCHEMA_VERSION => return Ok(()),
        0 => "is not a tenure history database (it has no schema)".to_owned(),
        v if v > SCHEMA_VERSION => return Err(too_new(path, v)),
        v => format!(
            "has history schema version {v}, older than this tenure's {SCHEMA_VERSION}: \
             run `tenure serve --db {}` once to upgrade it",
            path.display()
        ),
    };
    Err(HistoryError::Schema {
        path: path.to_owned(),
        reason,
    })
}

fn too_new(path: &Path, version: i64) -> HistoryError {
    HistoryError::Schema {
        path: path.to_owned(),
        reason: format!(
            "has history schema version {version}, written by a newer tenure \
             (this one knows up to {SCHEMA_VERSION})"
        ),
    }
}

fn user_version(conn: &Connection) -> Result<i64, HistoryError> {
    Ok(conn.pragma_query_value(None, "user_version", |row| row.get(0))?)
}
