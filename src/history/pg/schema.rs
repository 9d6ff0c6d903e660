//! The PostgreSQL schema: its migrations, run once at start-up under an
//! advisory lock, and the version check of a reader.

use postgres::Client;

use super::{connect, redact};
use crate::history::HistoryError;

/// Version 1: the SQLite schema as of its version 3 (terms per epoch,
/// cluster events), in PostgreSQL's types, plus the writer fence.
const V1: &str = r#"
CREATE TABLE terms (
    election         TEXT    NOT NULL,
    epoch            BIGINT  NOT NULL DEFAULT 0,
    token            BIGINT  NOT NULL,
    holder           TEXT    NOT NULL,
    lease_id         BIGINT  NOT NULL,
    layout           TEXT,
    started_at_ms    BIGINT  NOT NULL,
    started_revision BIGINT  NOT NULL,
    from_snapshot    BOOLEAN NOT NULL,
    ended_at_ms      BIGINT,
    ended_revision   BIGINT,
    end_cause        TEXT,
    UNIQUE (election, epoch, token)
);
CREATE INDEX terms_by_start ON terms (election, started_revision);
CREATE INDEX terms_ended ON terms (ended_at_ms) WHERE ended_at_ms IS NOT NULL;
CREATE INDEX terms_open ON terms (election, started_revision) WHERE ended_at_ms IS NULL;

CREATE TABLE events (
    id       BIGINT GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    revision BIGINT NOT NULL,
    at_ms    BIGINT NOT NULL,
    election TEXT   NOT NULL,
    type     TEXT   NOT NULL,
    token    BIGINT,
    holder   TEXT,
    json     TEXT   NOT NULL
);
CREATE INDEX events_by_election ON events (election, at_ms);
CREATE INDEX events_by_time ON events (at_ms);

CREATE TABLE refusals (
    id             BIGINT GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    election       TEXT   NOT NULL,
    resource       TEXT   NOT NULL,
    token          BIGINT NOT NULL,
    reason         TEXT   NOT NULL,
    revision       BIGINT NOT NULL,
    at_ms          BIGINT NOT NULL,
    current_token  BIGINT,
    current_holder TEXT
);
CREATE INDEX refusals_by_election ON refusals (election, at_ms);
CREATE INDEX refusals_by_time ON refusals (at_ms);

CREATE TABLE watcher_state (
    key   TEXT PRIMARY KEY,
    value BIGINT NOT NULL
);

CREATE TABLE cluster_events (
    id     BIGINT GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    at_ms  BIGINT NOT NULL,
    type   TEXT   NOT NULL,
    dedupe TEXT   UNIQUE,
    json   TEXT   NOT NULL
);
CREATE INDEX cluster_events_by_time ON cluster_events (at_ms);

-- The writer fence: the highest token of the `tenure/history-writer`
-- election that has written. One row, locked by every write transaction.
CREATE TABLE history_writer (
    id       INTEGER PRIMARY KEY CHECK (id = 1),
    token    BIGINT  NOT NULL,
    holder   TEXT    NOT NULL,
    since_ms BIGINT  NOT NULL
);
INSERT INTO history_writer (id, token, holder, since_ms) VALUES (1, 0, '', 0);
"#;

/// Version 2: the writer fence gets a generation. A commit must carry the
/// generation its writer claimed: resetting the fence after etcd was
/// restored (tokens started over) starts a new one, which every writer of
/// the old timeline fails, whatever its token.
const V2: &str = r#"
ALTER TABLE history_writer ADD COLUMN generation BIGINT NOT NULL DEFAULT 0;
"#;

/// Version 3: the writer's last failure, so that every replica's `/readyz`
/// can say why nothing is being recorded: which replica, when,
/// and its error.
const V3: &str = r#"
ALTER TABLE history_writer ADD COLUMN IF NOT EXISTS last_error TEXT;
ALTER TABLE history_writer ADD COLUMN IF NOT EXISTS last_error_holder TEXT;
ALTER TABLE history_writer ADD COLUMN IF NOT EXISTS last_error_at_ms BIGINT;
"#;

/// Version 4: the per-election summary table (`summary.rs` keeps it), filled from what is stored (names in byte order,
/// `COLLATE "C"`, as the SQLite history and the pages sort them), and an
/// index for "terms seen starting since".
const V4: &str = r#"
CREATE TABLE elections (
    election      TEXT COLLATE "C" PRIMARY KEY,
    terms         BIGINT NOT NULL DEFAULT 0,
    refusals      BIGINT NOT NULL DEFAULT 0,
    last_event_ms BIGINT
);
INSERT INTO elections (election, terms, refusals, last_event_ms)
SELECT n,
       (SELECT COUNT(*) FROM terms WHERE election = n),
       (SELECT COUNT(*) FROM refusals WHERE election = n),
       (SELECT MAX(at_ms) FROM events WHERE election = n)
FROM (SELECT election FROM events WHERE election <> ''
      UNION SELECT election FROM terms
      UNION SELECT election FROM refusals) AS names(n);
CREATE INDEX terms_seen_starting ON terms (started_at_ms) WHERE NOT from_snapshot;
"#;

/// Version 5: a writer fence per cluster. Each etcd cluster of a history
/// elects its own writer (in its own etcd), whose token fences only that
/// cluster's row: `cluster` is its name, `''` the one cluster of a serve
/// without `--cluster` (the row that was there keeps its token, holder,
/// generation and last error). The epoch row always exists: every commit
/// locks it, shared, and a reset exclusively (`WriteTx::lock_epoch`).
const V5: &str = r#"
ALTER TABLE history_writer ADD COLUMN cluster TEXT NOT NULL DEFAULT '';
ALTER TABLE history_writer DROP COLUMN id;
ALTER TABLE history_writer ADD PRIMARY KEY (cluster);
INSERT INTO watcher_state (key, value) VALUES ('epoch', 0) ON CONFLICT (key) DO NOTHING;
"#;

/// Version 6: the lease of each writer term elected in the database
/// itself (`term.rs`: a feed with no etcd to elect in), on the database's
/// clock. A table of its own: a renewal never waits for the fence row,
/// which every commit locks for its whole length.
const V6: &str = r#"
CREATE TABLE IF NOT EXISTS writer_lease (
    cluster    TEXT PRIMARY KEY,
    token      BIGINT NOT NULL,
    holder     TEXT NOT NULL,
    expires_at TIMESTAMPTZ
);
"#;

/// Version 7: Kubernetes' Leases named `NAMESPACE/NAME`
/// (`history/lease_names.rs`): no SQL of its own, the rename runs after it.
const V7: &str = "";

/// Every migration, in order; `tenure_schema.version` counts those applied.
const MIGRATIONS: &[&str] = &[V1, V2, V3, V4, V5, V6, V7];

/// The version whose migration renames Leases.
const LEASE_NAMES: usize = 7;

/// The PostgreSQL schema version this build writes and reads.
pub const PG_SCHEMA_VERSION: i64 = MIGRATIONS.len() as i64;

/// Key of the advisory lock migrations run under ("tenure" in ASCII).
const MIGRATION_LOCK: i64 = 0x7465_6e75_7265;

/// Creates the schema or brings it up to date (once, whatever the number of
/// replicas starting together).
pub(super) fn migrate(client: &mut Client, url: &str) -> Result<(), HistoryError> {
    let mut tx = client.transaction()?;
    tx.execute("SELECT pg_advisory_xact_lock($1)", &[&MIGRATION_LOCK])?;
    // Checked first: CREATE … IF NOT EXISTS needs the CREATE privilege even
    // when the table exists, and a role that only reads and writes tenure's
    // tables must be able to start.
    let exists: bool = tx
        .query_one("SELECT to_regclass('tenure_schema') IS NOT NULL", &[])?
        .try_get(0)?;
    if !exists {
        tx.batch_execute("CREATE TABLE tenure_schema (version BIGINT NOT NULL)")?;
    }
    let version: i64 = match tx.query_opt("SELECT version FROM tenure_schema", &[])? {
        Some(row) => row.try_get(0)?,
        None => {
            tx.execute("INSERT INTO tenure_schema (version) VALUES (0)", &[])?;
            0
        }
    };
    if version > PG_SCHEMA_VERSION {
        return Err(too_new(url, version));
    }
    for (i, sql) in MIGRATIONS.iter().enumerate().skip(version.max(0) as usize) {
        tx.batch_execute(sql)?;
        if i + 1 == LEASE_NAMES {
            crate::history::lease_names::postgres(&mut tx)?;
        }
        tx.execute("UPDATE tenure_schema SET version = $1", &[&(i as i64 + 1)])?;
        tracing::info!(db = %redact(url), version = i + 1, "history: schema migrated");
    }
    tx.commit()?;
    Ok(())
}

fn too_new(url: &str, version: i64) -> HistoryError {
    HistoryError::Schema {
        path: redact(url).into(),
        reason: format!(
            "has history schema version {version}, written by a newer tenure \
             (this one knows up to {PG_SCHEMA_VERSION})"
        ),
    }
}

pub(super) fn check_version(client: &mut Client, url: &str) -> Result<(), HistoryError> {
    let exists: bool = client
        .query_one("SELECT to_regclass('tenure_schema') IS NOT NULL", &[])?
        .try_get(0)?;
    let version: i64 = if exists {
        client
            .query_opt("SELECT version FROM tenure_schema", &[])?
            .map(|r| r.try_get(0))
            .transpose()?
            .unwrap_or(0)
    } else {
        0
    };
    let reason = match version {
        v if v == PG_SCHEMA_VERSION => return Ok(()),
        0 => format!(
            "holds no tenure history (no schema): `tenure serve --db {}` creates it",
            redact(url)
        ),
        v if v > PG_SCHEMA_VERSION => return Err(too_new(url, v)),
        v => format!(
            "has history schema version {v}, older than this tenure's {PG_SCHEMA_VERSION}: \
             run `tenure serve --db {}` once to upgrade it",
            redact(url)
        ),
    };
    Err(HistoryError::Schema {
        path: redact(url).into(),
        reason,
    })
}

/// Creates the schema or migrates it (what a writer does when it opens), so
/// that readers can open before any replica has written. Blocking.
pub fn prepare(url: &str) -> Result<(), HistoryError> {
    let mut conn = connect(url, "")?;
    migrate(conn.get()?, url).map_err(|e| match e {
        HistoryError::Postgres { error, .. } => HistoryError::Postgres {
            db: redact(url),
            error,
        },
        e => e,
    })
}

/// Makes the history of the one cluster of a serve without `--cluster`
/// the history of the named cluster `name` (`serve --cluster`), in one
/// transaction under the migration lock: its state keys get `@name`, its
/// elections' names (rows, event JSON, summaries) `name/`, its etcd events
/// its name, and its writer fence row becomes that cluster's (the tokens
/// go on: the same etcd, the same election). `false` when there was no
/// unnamed cluster's history (another replica named it first). Blocking.
pub fn name_unnamed_cluster(url: &str, name: &str) -> Result<bool, HistoryError> {
    let mut conn = connect(url, "")?;
    let client = conn.get()?;
    let named = (|| {
        let mut tx = client.transaction()?;
        tx.execute("SELECT pg_advisory_xact_lock($1)", &[&MIGRATION_LOCK])?;
        let unnamed: bool = tx
            .query_one(
                "SELECT EXISTS (SELECT 1 FROM watcher_state WHERE key = 'resume_revision')",
                &[],
            )?
            .try_get(0)?;
        if !unnamed {
            return Ok(false);
        }
        tx.batch_execute(&name_sql(name))?;
        tx.commit()?;
        Ok(true)
    })();
    named.map_err(|e| match e {
        HistoryError::Postgres { error, .. } => HistoryError::Postgres {
            db: redact(url),
            error,
        },
        e => e,
    })
}

/// The unnamed cluster's fence row after it was named: a generation no
/// writer claims, so a replica still running without `--cluster` can
/// neither commit (its generation differs) nor claim the row again
/// (`claim` refuses it, naming the cluster), instead of writing unnamed
/// rows into a history of named clusters.
pub(super) const RENAMED_GENERATION: i64 = -1;
pub(super) const RENAMED_HOLDER: &str = "renamed to cluster ";

/// The statements of [`name_unnamed_cluster`]: `name` is a validated
/// cluster name (letters, digits, `-`, `_`, `.`), quoted as a literal.
fn name_sql(name: &str) -> String {
    use crate::history::meta::{CLUSTER_KEY, RESUME_KEY, WATCHED_KEY};
    let n = name.replace('\'', "''");
    format!(
        "UPDATE watcher_state SET key = key || '@{n}'
           WHERE key IN ('{RESUME_KEY}', '{CLUSTER_KEY}', '{WATCHED_KEY}');
         UPDATE terms SET election = '{n}/' || election;
         UPDATE refusals SET election = '{n}/' || election;
         UPDATE events SET election = '{n}/' || election,
           json = jsonb_set(json::jsonb, '{{election}}', to_jsonb('{n}/' || election))::text;
         UPDATE elections SET election = '{n}/' || election;
         UPDATE cluster_events
           SET json = jsonb_set(json::jsonb, '{{cluster}}', to_jsonb('{n}'::text))::text,
               dedupe = '{n}@' || dedupe
           WHERE type NOT IN ('serve_started', 'serve_stopped')
             AND (json::jsonb ->> 'cluster') IS NULL;
         UPDATE history_writer SET cluster = '{n}' WHERE cluster = '';
         INSERT INTO history_writer (cluster, token, holder, since_ms, generation)
           VALUES ('', 0, '{RENAMED_HOLDER}{n}', 0, {RENAMED_GENERATION});"
    )
}
