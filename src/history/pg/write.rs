//! A cluster's writer: its session, the fence (that cluster's row) every
//! write transaction takes first, and the event inserts (the write path's
//! prepared statements).

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use postgres::{Statement, Transaction};

use super::rows::{Pending, RowStmts};
use super::schema::migrate;
use super::summary;
use super::{connect, redact, with_url, Conn};
use crate::events::cluster::ClusterEvent;
use crate::events::Event;
use crate::history::summary::Deltas;
use crate::history::writer::{WriteConn, WriteTx};
use crate::history::{HistoryError, RevisionSource};

/// The writer's transactions: a paused writer holding the fence row is
/// disconnected by PostgreSQL after this, so it cannot block its successor.
const WRITER_IDLE_IN_TXN: &str = "3s";
/// A statement waiting this long for the fence row fails (and is retried).
const WRITER_LOCK_TIMEOUT: &str = "5s";

/// The statements of the write path, prepared once per connection.
struct Stmts {
    /// The cluster's fence row, locked: the first statement of every transaction
    /// (prepared once per session: as a string it would be parsed at
    /// every commit, one more round trip).
    fence: Statement,
    read_state: Statement,
    /// The epoch row, shared and exclusive (`WriteTx::lock_epoch`).
    epoch_shared: Statement,
    epoch_exclusive: Statement,
    set_state: Statement,
    raise_state: Statement,
    /// The rows of events, terms, refusals and the `elections` table.
    rows: RowStmts,
    cluster_event: Statement,
}

/// One cluster's writer connection, fenced by its election token in that
/// cluster's row of `history_writer`.
pub(in crate::history) struct PgWriter {
    conn: Conn,
    url: String,
    /// The fence row's key: the cluster's name, `""` for the unnamed one.
    cluster: String,
    token: i64,
    /// The fence's generation this writer claimed under.
    generation: i64,
    holder: String,
    stmts: Stmts,
    refused: Arc<AtomicU64>,
}

impl PgWriter {
    /// Connects, migrates, and claims the fence for `token` (see
    /// [`PgWriter::claim`]): from now on no writer with a lower token, or of
    /// an older generation, can commit. [`HistoryError::Fenced`] when this
    /// writer may not write. Returns the writer and, when the claim reset
    /// the fence for a new etcd timeline, the token that was stored and the
    /// new generation.
    pub(in crate::history) fn connect(
        url: &str,
        cluster: &str,
        token: i64,
        holder: &str,
        refused: Arc<AtomicU64>,
        mut revision: RevisionSource,
    ) -> Result<(PgWriter, Option<(i64, i64)>), HistoryError> {
        let (mut conn, stmts) = Self::open(url, true)?;
        let client = conn.get()?;
        let claimed = (|| {
            let mut tx = client.transaction()?;
            let claimed = Self::claim(&mut tx, cluster, token, holder, &refused, &mut revision)?;
            tx.commit()?;
            Ok(claimed)
        })()
        .map_err(|e| with_url(e, url))?;
        let (generation, reset) = claimed;
        tracing::info!(db = %redact(url), cluster, token, generation, "history: writer fence claimed");
        if let Some((stored, generation)) = reset {
            tracing::warn!(
                db = %redact(url), stored, token, generation,
                "history: writer fence reset: etcd's revision is below the stored token"
            );
        }
        let writer = PgWriter {
            conn,
            url: url.to_owned(),
            cluster: cluster.to_owned(),
            token,
            generation,
            holder: holder.to_owned(),
            stmts,
            refused,
        };
        Ok((writer, reset))
    }

    /// The claim, with the fence row locked. etcd's current revision is
    /// read *after* the lock (`revision`, a linearizable read): whichever
    /// writer stored the fence's token had created its key before, so in one
    /// etcd timeline the revision is at or above every stored token and at
    /// or above this writer's own. Hence:
    /// - this writer's token above the revision: its term belongs to a
    ///   timeline etcd no longer has (etcd restored or replaced while it
    ///   was paused): refused;
    /// - a higher stored token that is also above the revision: etcd started
    ///   over (a restore, a new cluster), so the fence starts a new
    ///   generation with this token; every writer of the old timeline then
    ///   fails the generation check whatever its token;
    /// - a higher stored token otherwise: a newer writer of this timeline
    ///   has written: refused.
    ///
    /// A writer paused between the read and the commit of the claim is cut
    /// off by `idle_in_transaction_session_timeout` and claims nothing.
    fn claim(
        tx: &mut Transaction<'_>,
        cluster: &str,
        token: i64,
        holder: &str,
        refused: &AtomicU64,
        revision: &mut RevisionSource,
    ) -> Result<(i64, Option<(i64, i64)>), HistoryError> {
        // A cluster's first writer makes its row (no token yet).
        tx.execute(
            "INSERT INTO history_writer (cluster, token, holder, since_ms) VALUES ($1, 0, '', 0)
             ON CONFLICT (cluster) DO NOTHING",
            &[&cluster],
        )?;
        let row = tx.query_one(
            "SELECT token, generation, holder FROM history_writer WHERE cluster = $1 FOR UPDATE",
            &[&cluster],
        )?;
        let (stored, generation): (i64, i64) = (row.try_get(0)?, row.try_get(1)?);
        if generation == super::schema::RENAMED_GENERATION {
            let renamed: String = row.try_get(2)?;
            refused.fetch_add(1, Ordering::Relaxed);
            return Err(HistoryError::WriterFailed(format!(
                "this history's one unnamed cluster was {renamed} by a replica started with \
                 --cluster: a replica without --cluster may no longer write it; restart this one \
                 with the same --cluster options as the others"
            )));
        }
        let current = revision().map_err(|e| {
            HistoryError::WriterFailed(format!(
                "reading etcd's revision to claim the writer fence: {e}"
            ))
        })?;
        let set =
            |tx: &mut Transaction<'_>, generation: i64| {
                tx.execute(
                "UPDATE history_writer SET token = $1, holder = $2, since_ms = $3, generation = $4
                 WHERE cluster = $5",
                &[&token, &holder, &crate::events::now_ms(), &generation, &cluster],
            )
            };
        if token > current || (stored > token && stored <= current) {
            refused.fetch_add(1, Ordering::Relaxed);
            return Err(HistoryError::Fenced { token, stored });
        }
        if stored > token {
            set(tx, generation + 1)?;
            return Ok((generation + 1, Some((stored, generation + 1))));
        }
        if stored < token {
            set(tx, generation)?;
        }
        Ok((generation, None))
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
            fence: client.prepare(
                "SELECT token, generation FROM history_writer WHERE cluster = $1 FOR UPDATE",
            )?,
            read_state: client.prepare("SELECT value FROM watcher_state WHERE key = $1")?,
            epoch_shared: client
                .prepare("SELECT value FROM watcher_state WHERE key = 'epoch' FOR SHARE")?,
            epoch_exclusive: client
                .prepare("SELECT value FROM watcher_state WHERE key = 'epoch' FOR UPDATE")?,
            set_state: client.prepare(
                "INSERT INTO watcher_state (key, value) VALUES ($1, $2)
                 ON CONFLICT (key) DO UPDATE SET value = EXCLUDED.value",
            )?,
            raise_state: client.prepare(
                "INSERT INTO watcher_state (key, value) VALUES ($1, $2)
                 ON CONFLICT (key) DO UPDATE
                 SET value = GREATEST(watcher_state.value, EXCLUDED.value)",
            )?,
            // A few multi-row statements per transaction, not a round trip
            // per event (`rows.rs`).
            rows: RowStmts::prepare(client)?,
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

    /// Every commit: locks the fence row; refuses when a newer writer has
    /// written (a higher token) or the fence was reset since this writer
    /// claimed it (another generation), else stores this writer's token (a
    /// no-op when it is already there).
    fn fence(
        tx: &mut Transaction<'_>,
        read: &Statement,
        me: (&str, i64, i64),
        holder: &str,
        refused: &AtomicU64,
    ) -> Result<(), HistoryError> {
        let (cluster, token, generation) = me;
        let row = tx.query_one(read, &[&cluster])?;
        let (stored, current): (i64, i64) = (row.try_get(0)?, row.try_get(1)?);
        if stored > token || generation != current {
            refused.fetch_add(1, Ordering::Relaxed);
            return Err(HistoryError::Fenced { token, stored });
        }
        if stored < token {
            tx.execute(
                "UPDATE history_writer SET token = $1, holder = $2, since_ms = $3 WHERE cluster = $4",
                &[&token, &holder, &crate::events::now_ms(), &cluster],
            )?;
        }
        Ok(())
    }
}

impl PgWriter {
    /// One fenced write transaction: the session replaced if PostgreSQL
    /// ended it, the fence row locked and checked first, `body`, then the
    /// commit. Every write of the history goes through here.
    fn fenced<T>(
        &mut self,
        body: impl FnOnce(&mut Transaction<'_>, &Stmts) -> Result<T, HistoryError>,
    ) -> Result<T, HistoryError> {
        self.reconnect_if_closed()?;
        let me = (self.cluster.as_str(), self.token, self.generation);
        let (holder, refused, url) = (&self.holder, &self.refused, &self.url);
        let stmts = &self.stmts;
        let client = self.conn.get()?;
        let result = (|| {
            let mut tx = client.transaction()?;
            Self::fence(&mut tx, &stmts.fence, me, holder, refused)?;
            let out = body(&mut tx, stmts)?;
            tx.commit()?;
            Ok(out)
        })();
        result.map_err(|e| with_url(e, url))
    }
}

impl WriteConn for PgWriter {
    fn transact(
        &mut self,
        f: &mut dyn FnMut(&mut dyn WriteTx) -> Result<i64, HistoryError>,
    ) -> Result<i64, HistoryError> {
        self.fenced(|tx, stmts| {
            f(&mut PgTx {
                tx,
                stmts,
                pending: Pending::default(),
                deltas: Deltas::default(),
            })
        })
    }

    /// Retention of this writer's cluster only (its names `CLUSTER/…`, its
    /// etcd events and serve's; everything for the unnamed cluster): two
    /// clusters' writers never prune, nor count down, each other's rows.
    fn prune(&mut self, cutoff: i64) -> Result<[usize; 3], HistoryError> {
        let own = match self.cluster.as_str() {
            "" => String::new(),
            c => crate::events::qualify(c, ""),
        };
        let cluster = (!self.cluster.is_empty()).then(|| self.cluster.clone());
        self.fenced(|tx, _| {
            summary::before_prune(tx, cutoff, &own)?;
            let mine = "left(election, length($2)) = $2";
            let events = tx.execute(
                &format!("DELETE FROM events WHERE at_ms < $1 AND {mine}"),
                &[&cutoff, &own],
            )?;
            let refusals = tx.execute(
                &format!("DELETE FROM refusals WHERE at_ms < $1 AND {mine}"),
                &[&cutoff, &own],
            )?;
            tx.execute(
                "DELETE FROM cluster_events WHERE at_ms < $1 AND ($2::text IS NULL
                   OR coalesce(json::jsonb ->> 'cluster', $2::text) = $2::text)",
                &[&cutoff, &cluster],
            )?;
            let terms = tx.execute(
                &format!(
                    "DELETE FROM terms WHERE ended_at_ms IS NOT NULL AND ended_at_ms < $1 \
                     AND {mine}"
                ),
                &[&cutoff, &own],
            )?;
            summary::after_prune(tx, cutoff, &own)?;
            Ok([events as usize, refusals as usize, terms as usize])
        })
    }
}

struct PgTx<'a, 'b> {
    tx: &'a mut Transaction<'b>,
    stmts: &'a Stmts,
    /// Rows buffered until [`WriteTx::finish`] (or a flush that keeps two
    /// of one term's rows in order).
    pending: Pending,
    deltas: Deltas,
}

impl WriteTx for PgTx<'_, '_> {
    fn read_state(&mut self, key: &str) -> Result<Option<i64>, HistoryError> {
        Ok(self
            .tx
            .query_opt(&self.stmts.read_state, &[&key])?
            .map(|r| r.try_get(0))
            .transpose()?)
    }

    fn lock_epoch(&mut self, reset: bool) -> Result<i64, HistoryError> {
        let stmt = if reset {
            &self.stmts.epoch_exclusive
        } else {
            &self.stmts.epoch_shared
        };
        Ok(self
            .tx
            .query_opt(stmt, &[])?
            .map(|r| r.try_get(0))
            .transpose()?
            .unwrap_or(0))
    }

    fn set_state(&mut self, key: &str, value: i64) -> Result<(), HistoryError> {
        self.tx.execute(&self.stmts.set_state, &[&key, &value])?;
        Ok(())
    }

    fn raise_state(&mut self, key: &str, value: i64) -> Result<(), HistoryError> {
        self.tx.execute(&self.stmts.raise_state, &[&key, &value])?;
        Ok(())
    }

    fn apply(&mut self, event: &Event, epoch: i64) -> Result<(), HistoryError> {
        self.pending
            .push(self.tx, &self.stmts.rows, event, epoch, &mut self.deltas)
    }

    fn finish(&mut self) -> Result<(), HistoryError> {
        self.pending
            .finish(self.tx, &self.stmts.rows, &mut self.deltas)
    }

    fn carry_open_terms(&mut self, from: i64, to: i64, except: &str) -> Result<(), HistoryError> {
        // The rows buffered so far first: they are terms of this commit.
        self.pending
            .finish(self.tx, &self.stmts.rows, &mut self.deltas)?;
        self.tx.execute(
            "UPDATE terms SET epoch = $2
             WHERE epoch = $1 AND ended_at_ms IS NULL AND left(election, length($3)) <> $3",
            &[&from, &to, &except],
        )?;
        Ok(())
    }

    fn cluster_event(&mut self, e: &ClusterEvent) -> Result<(), HistoryError> {
        let json = serde_json::to_string(e).map_err(|source| HistoryError::Json {
            what: "a cluster event".into(),
            source,
        })?;
        self.tx.execute(
            &self.stmts.cluster_event,
            &[&e.at_ms, &e.kind.name(), &e.dedupe_key(), &json],
        )?;
        Ok(())
    }
}

/// Records why the writer `holder` of `cluster` (`""`: the unnamed one)
/// stopped recording (its commit refused, its watch stuck), on a connection
/// of its own, so that every replica's `/readyz` can say it. Not fenced: it
/// is a note, not history. Blocking.
pub fn record_writer_error(
    url: &str,
    cluster: &str,
    holder: &str,
    message: &str,
) -> Result<(), HistoryError> {
    let mut conn = connect(url, "")?;
    let now = crate::events::now_ms();
    conn.get()?
        .execute(
            "INSERT INTO history_writer \
             (cluster, token, holder, since_ms, last_error, last_error_holder, last_error_at_ms) \
             VALUES ($4, 0, '', 0, $1, $2, $3) ON CONFLICT (cluster) DO UPDATE \
             SET last_error = $1, last_error_holder = $2, last_error_at_ms = $3",
            &[&message, &holder, &now, &cluster],
        )
        .map_err(|e| with_url(e.into(), url))?;
    Ok(())
}
