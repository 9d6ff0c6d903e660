//! The one writer: its session, the fence every write transaction takes
//! first, and the event inserts (the write path's prepared statements).

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use postgres::{Statement, Transaction};

use super::schema::migrate;
use super::{connect, redact, Conn};
use crate::events::cluster::ClusterEvent;
use crate::events::{Event, EventKind};
use crate::history::query::tag_of;
use crate::history::writer::{event_row, WriteConn, WriteTx};
use crate::history::HistoryError;

/// The writer's transactions: a paused writer holding the fence row is
/// disconnected by PostgreSQL after this, so it cannot block its successor.
const WRITER_IDLE_IN_TXN: &str = "3s";
/// A statement waiting this long for the fence row fails (and is retried).
const WRITER_LOCK_TIMEOUT: &str = "5s";

/// An event's row: `$1` revision, `$2` at_ms, `$3` election, `$4` type,
/// `$5` token, `$6` holder, `$7` JSON; the statements below add their own
/// parameters from `$8`.
const EVENT_ROW: &str = "INSERT INTO events (revision, at_ms, election, type, token, holder, json)
     VALUES ($1, $2, $3, $4, $5, $6, $7)";

/// The statements of the write path, prepared once per connection.
struct Stmts {
    read_state: Statement,
    set_state: Statement,
    event: Statement,
    term_started: Statement,
    term_ended: Statement,
    refusal: Statement,
    cluster_event: Statement,
}

/// The one writer's connection, fenced by its election token.
pub(in crate::history) struct PgWriter {
    conn: Conn,
    url: String,
    token: i64,
    /// The fence's generation this writer claimed under (`None` until its
    /// first transaction, which claims).
    generation: Option<i64>,
    holder: String,
    stmts: Stmts,
    refused: Arc<AtomicU64>,
}

impl PgWriter {
    /// Connects, migrates, and claims the fence for `token`: from now on no
    /// writer with a lower token can commit. [`HistoryError::Fenced`] when a
    /// higher token has already written.
    pub(in crate::history) fn connect(
        url: &str,
        token: i64,
        holder: &str,
        refused: Arc<AtomicU64>,
    ) -> Result<PgWriter, HistoryError> {
        let (conn, stmts) = Self::open(url, true)?;
        let mut writer = PgWriter {
            conn,
            url: url.to_owned(),
            token,
            generation: None,
            holder: holder.to_owned(),
            stmts,
            refused,
        };
        writer.transact(&mut |_| Ok(0))?;
        tracing::info!(db = %redact(url), token, generation = ?writer.generation, "history: writer fence claimed");
        Ok(writer)
    }

    /// After etcd was restored from a snapshot or replaced, its revisions,
    /// and so the writer tokens, start over below the token stored in the
    /// fence, and every new writer would be refused. That is the case, and
    /// only then, when the stored token is above etcd's current revision
    /// (`etcd_revision`, read after this writer won its term): in one etcd
    /// timeline a token is a CreateRevision, never above the current
    /// revision. The fence then starts a new generation with `token`: a
    /// writer of the old timeline, whatever its token, is refused from now
    /// on. Returns the stored token and the new generation when it reset.
    pub(in crate::history) fn reset_after_restore(
        url: &str,
        token: i64,
        holder: &str,
        etcd_revision: i64,
    ) -> Result<Option<(i64, i64)>, HistoryError> {
        let (mut conn, _) = Self::open(url, true)?;
        let client = conn.get()?;
        let mut tx = client.transaction()?;
        let row = tx.query_one(
            "SELECT token, generation FROM history_writer WHERE id = 1 FOR UPDATE",
            &[],
        )?;
        let (stored, generation): (i64, i64) = (row.try_get(0)?, row.try_get(1)?);
        if stored <= token || stored <= etcd_revision {
            return Ok(None);
        }
        let next = generation + 1;
        tx.execute(
            "UPDATE history_writer SET token = $1, holder = $2, since_ms = $3, generation = $4
             WHERE id = 1",
            &[&token, &holder, &crate::events::now_ms(), &next],
        )?;
        tx.commit()?;
        tracing::warn!(
            db = %redact(url), stored, token, etcd_revision, generation = next,
            "history: writer fence reset: etcd's revision is below the stored token"
        );
        Ok(Some((stored, next)))
    }

    /// A writer's session: its settings, the schema up to date (`migrate`),
    /// and the write path's statements prepared.
    fn open(url: &str, migrate_schema: bool) -> Result<(Conn, Stmts), HistoryError> {
        let mut conn = connect(
            url,
            &format!(
                "SET idle_in_transaction_session_timeout = '{WRITER_IDLE_IN_TXN}'; \
                 SET lock_timeout = '{WRITER_LOCK_TIMEOUT}'"
            ),
        )?;
        let client = conn.get()?;
        if migrate_schema {
            migrate(client, url)?;
        }
        let stmts = Stmts {
            read_state: client.prepare("SELECT value FROM watcher_state WHERE key = $1")?,
            set_state: client.prepare(
                "INSERT INTO watcher_state (key, value) VALUES ($1, $2)
                 ON CONFLICT (key) DO UPDATE SET value = EXCLUDED.value",
            )?,
            // One round trip per event: the event's row and what it means
            // for terms or refusals, in one statement (a data-modifying CTE).
            event: client.prepare(EVENT_ROW)?,
            term_started: client.prepare(&format!(
                "WITH ev AS ({EVENT_ROW} RETURNING 1)
                 INSERT INTO terms (election, token, holder, lease_id, layout,
                     started_at_ms, started_revision, from_snapshot, epoch)
                 VALUES ($3, $5, $6, $8, $9, $2, $1, $10, $11) ON CONFLICT DO NOTHING"
            ))?,
            // A term whose start the history never saw is recorded from its
            // end; an open one is ended; the first end recorded stands (what
            // SQLite does with INSERT OR IGNORE, then UPDATE … WHERE open).
            term_ended: client.prepare(&format!(
                "WITH ev AS ({EVENT_ROW} RETURNING 1)
                 INSERT INTO terms (election, token, holder, lease_id, layout,
                     started_at_ms, started_revision, from_snapshot,
                     ended_at_ms, ended_revision, end_cause, epoch)
                 VALUES ($3, $5, $6, $8, NULL, $9, $10, TRUE, $2, $1, $11, $12)
                 ON CONFLICT (election, epoch, token) DO UPDATE
                     SET ended_at_ms = EXCLUDED.ended_at_ms,
                         ended_revision = EXCLUDED.ended_revision,
                         end_cause = EXCLUDED.end_cause
                     WHERE terms.ended_at_ms IS NULL"
            ))?,
            refusal: client.prepare(&format!(
                "WITH ev AS ({EVENT_ROW} RETURNING 1)
                 INSERT INTO refusals (election, resource, token, reason, revision, at_ms,
                     current_token, current_holder)
                 VALUES ($3, $8, $5, $9, $1, $2, $10, $11)"
            ))?,
            cluster_event: client.prepare(
                "INSERT INTO cluster_events (at_ms, type, dedupe, json) VALUES ($1, $2, $3, $4)
                 ON CONFLICT DO NOTHING",
            )?,
        };
        Ok((conn, stmts))
    }

    /// A session PostgreSQL ended (a writer paused inside a transaction past
    /// `idle_in_transaction_session_timeout`, a restart) is replaced before
    /// the next attempt: the retry then meets the fence, not a dead socket.
    fn reconnect_if_closed(&mut self) -> Result<(), HistoryError> {
        if self.conn.0.as_ref().is_none_or(|c| c.is_closed()) {
            tracing::warn!(db = %redact(&self.url), "history: the writer's session was closed; reconnecting");
            let (conn, stmts) = Self::open(&self.url, false)?;
            self.conn = conn;
            self.stmts = stmts;
        }
        Ok(())
    }

    /// Locks the fence row; refuses when a newer writer has written (a
    /// higher token) or the fence was reset since this writer claimed it
    /// (another `generation`; `None`: claiming now), else stores this
    /// writer's token (a no-op when it is already there). Returns the
    /// fence's generation.
    fn fence(
        tx: &mut Transaction<'_>,
        token: i64,
        generation: Option<i64>,
        holder: &str,
        refused: &AtomicU64,
    ) -> Result<i64, HistoryError> {
        let row = tx.query_one(
            "SELECT token, generation FROM history_writer WHERE id = 1 FOR UPDATE",
            &[],
        )?;
        let (stored, current): (i64, i64) = (row.try_get(0)?, row.try_get(1)?);
        if stored > token || generation.is_some_and(|g| g != current) {
            refused.fetch_add(1, Ordering::Relaxed);
            return Err(HistoryError::Fenced { token, stored });
        }
        if stored < token {
            tx.execute(
                "UPDATE history_writer SET token = $1, holder = $2, since_ms = $3 WHERE id = 1",
                &[&token, &holder, &crate::events::now_ms()],
            )?;
        }
        Ok(current)
    }
}

impl WriteConn for PgWriter {
    fn transact(
        &mut self,
        f: &mut dyn FnMut(&mut dyn WriteTx) -> Result<i64, HistoryError>,
    ) -> Result<i64, HistoryError> {
        self.reconnect_if_closed()?;
        let (token, claimed, refused) = (self.token, self.generation, self.refused.clone());
        let holder = self.holder.clone();
        let url = self.url.clone();
        let client = self.conn.get()?;
        let result = (|| {
            let mut tx = client.transaction()?;
            let generation = Self::fence(&mut tx, token, claimed, &holder, &refused)?;
            let revision = f(&mut PgTx {
                tx: &mut tx,
                stmts: &self.stmts,
            })?;
            tx.commit()?;
            Ok((revision, generation))
        })();
        result
            .map(|(revision, generation)| {
                self.generation = Some(generation);
                revision
            })
            .map_err(|e| match e {
                HistoryError::Postgres { error, .. } => HistoryError::Postgres {
                    db: redact(&url),
                    error,
                },
                e => e,
            })
    }

    fn prune(&mut self, cutoff: i64) -> Result<[usize; 3], HistoryError> {
        self.reconnect_if_closed()?;
        let (token, claimed, refused) = (self.token, self.generation, self.refused.clone());
        let holder = self.holder.clone();
        let client = self.conn.get()?;
        let mut tx = client.transaction()?;
        Self::fence(&mut tx, token, claimed, &holder, &refused)?;
        let events = tx.execute("DELETE FROM events WHERE at_ms < $1", &[&cutoff])?;
        let refusals = tx.execute("DELETE FROM refusals WHERE at_ms < $1", &[&cutoff])?;
        tx.execute("DELETE FROM cluster_events WHERE at_ms < $1", &[&cutoff])?;
        let terms = tx.execute(
            "DELETE FROM terms WHERE ended_at_ms IS NOT NULL AND ended_at_ms < $1",
            &[&cutoff],
        )?;
        tx.commit()?;
        Ok([events as usize, refusals as usize, terms as usize])
    }
}

struct PgTx<'a, 'b> {
    tx: &'a mut Transaction<'b>,
    stmts: &'a Stmts,
}

impl WriteTx for PgTx<'_, '_> {
    fn read_state(&mut self, key: &str) -> Result<Option<i64>, HistoryError> {
        Ok(self
            .tx
            .query_opt(&self.stmts.read_state, &[&key])?
            .map(|r| r.try_get(0))
            .transpose()?)
    }

    fn set_state(&mut self, key: &str, value: i64) -> Result<(), HistoryError> {
        self.tx.execute(&self.stmts.set_state, &[&key, &value])?;
        Ok(())
    }

    fn apply(&mut self, event: &Event, epoch: i64) -> Result<(), HistoryError> {
        let (json, token, holder) = event_row(event)?;
        let s = self.stmts;
        let name = event.kind.name();
        let row: [&(dyn postgres::types::ToSql + Sync); 7] = [
            &event.revision,
            &event.at_ms,
            &event.election,
            &name,
            &token,
            &holder,
            &json,
        ];
        match &event.kind {
            EventKind::TermStarted {
                lease_id,
                layout,
                from_snapshot,
                ..
            } => {
                let layout = tag_of(layout);
                let more: [&(dyn postgres::types::ToSql + Sync); 4] =
                    [lease_id, &layout, from_snapshot, &epoch];
                self.tx
                    .execute(&s.term_started, &[&row[..], &more[..]].concat())?;
            }
            EventKind::TermEnded {
                lease_id,
                cause,
                started_revision,
                started_at_ms,
                ..
            } => {
                let cause = cause.as_str();
                let more: [&(dyn postgres::types::ToSql + Sync); 5] =
                    [lease_id, started_at_ms, started_revision, &cause, &epoch];
                self.tx
                    .execute(&s.term_ended, &[&row[..], &more[..]].concat())?;
            }
            EventKind::FenceRefused {
                resource,
                reason,
                current_token,
                current_holder,
                ..
            } => {
                let reason = reason.as_str();
                let more: [&(dyn postgres::types::ToSql + Sync); 4] =
                    [resource, &reason, current_token, current_holder];
                self.tx
                    .execute(&s.refusal, &[&row[..], &more[..]].concat())?;
            }
            EventKind::LeaderValueChanged { .. }
            | EventKind::FenceAccepted { .. }
            | EventKind::Gap { .. }
            | EventKind::Reset { .. }
            | EventKind::Unobserved { .. }
            | EventKind::CandidateQueued { .. }
            | EventKind::CandidateLeft { .. } => {
                self.tx.execute(&s.event, &row)?;
            }
        }
        Ok(())
    }

    fn cluster_event(&mut self, e: &ClusterEvent) -> Result<(), HistoryError> {
        let json = serde_json::to_string(e).map_err(|source| HistoryError::Json {
            what: "a cluster event".into(),
            source,
        })?;
        self.tx.execute(
            &self.stmts.cluster_event,
            &[
                &e.at_ms,
                &e.kind.name(),
                &e.kind.dedupe_key_at(e.at_ms),
                &json,
            ],
        )?;
        Ok(())
    }
}
