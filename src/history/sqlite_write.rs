//! Every statement of the SQLite writer: its transaction (`WriteConn` for
//! a SQLite connection), the rows of one event, etcd's own events, the
//! meta keys. The writer's logic (`writer.rs`) is written once above this
//! and `pg/write.rs`.

use rusqlite::{params, Connection, Transaction, TransactionBehavior};

use super::query::{read_state, tag_of};
use super::summary::Deltas;
use super::writer::{event_row, WriteConn, WriteTx};
use super::HistoryError;
use crate::events::cluster::ClusterEvent;
use crate::events::{Event, EventKind};

impl WriteConn for Connection {
    fn transact(
        &mut self,
        f: &mut dyn FnMut(&mut dyn WriteTx) -> Result<i64, HistoryError>,
    ) -> Result<i64, HistoryError> {
        let tx = self.transaction_with_behavior(TransactionBehavior::Immediate)?;
        let revision = f(&mut SqliteTx {
            tx: &tx,
            deltas: Deltas::default(),
        })?;
        tx.commit()?;
        Ok(revision)
    }

    fn prune(&mut self, cutoff: i64) -> Result<[usize; 3], HistoryError> {
        super::summary::prune(self, cutoff)
    }

    /// Copies the WAL into the main file and truncates it:
    /// otherwise a clean exit can leave every commit in `-wal` (a read-only
    /// reader closing last does not checkpoint), and a copy of the `.db`
    /// file alone, the naive backup, has no tables. Waits for readers by the
    /// busy timeout; `busy` means a reader still holds a snapshot.
    fn close(&mut self) -> Result<(), HistoryError> {
        let (busy, log, copied): (i64, i64, i64) =
            self.query_row("PRAGMA wal_checkpoint(TRUNCATE)", [], |r| {
                Ok((r.get(0)?, r.get(1)?, r.get(2)?))
            })?;
        if busy != 0 {
            tracing::warn!(log, copied, "history: a reader kept the final checkpoint from finishing; the -wal file still holds commits");
        }
        Ok(())
    }
}

struct SqliteTx<'a> {
    tx: &'a Transaction<'a>,
    deltas: Deltas,
}

impl WriteTx for SqliteTx<'_> {
    fn read_state(&mut self, key: &str) -> Result<Option<i64>, HistoryError> {
        read_state(self.tx, key)
    }

    fn set_state(&mut self, key: &str, value: i64) -> Result<(), HistoryError> {
        set_state(self.tx, key, value)
    }
    fn raise_state(&mut self, key: &str, value: i64) -> Result<(), HistoryError> {
        self.tx
            .prepare_cached(
                "INSERT INTO watcher_state (key, value) VALUES (?1, ?2)
                 ON CONFLICT (key) DO UPDATE
                 SET value = max(watcher_state.value, excluded.value)",
            )?
            .execute(params![key, value])?;
        Ok(())
    }
    fn apply(&mut self, event: &Event, epoch: i64) -> Result<(), HistoryError> {
        apply(self.tx, event, epoch, &mut self.deltas)
    }
    fn cluster_event(&mut self, event: &ClusterEvent) -> Result<(), HistoryError> {
        insert_cluster_event(self.tx, event)
    }
    fn carry_open_terms(&mut self, from: i64, to: i64, except: &str) -> Result<(), HistoryError> {
        self.tx
            .prepare_cached(
                "UPDATE terms SET epoch = ?2
                 WHERE epoch = ?1 AND ended_at_ms IS NULL
                   AND substr(election, 1, length(?3)) <> ?3",
            )?
            .execute(params![from, to, except])?;
        Ok(())
    }
    fn finish(&mut self) -> Result<(), HistoryError> {
        super::summary::write(self.tx, &mut self.deltas)
    }
}

fn set_state(tx: &Transaction<'_>, key: &str, value: i64) -> Result<(), HistoryError> {
    tx.prepare_cached(
        "INSERT INTO watcher_state (key, value) VALUES (?1, ?2)
         ON CONFLICT (key) DO UPDATE SET value = excluded.value",
    )?
    .execute(params![key, value])?;
    Ok(())
}

/// One of etcd's own events, once when it has a dedupe key.
fn insert_cluster_event(tx: &Transaction<'_>, e: &ClusterEvent) -> Result<(), HistoryError> {
    let json = serde_json::to_string(e).map_err(|source| HistoryError::Json {
        what: "a cluster event".into(),
        source,
    })?;
    tx.execute(
        "INSERT OR IGNORE INTO cluster_events (at_ms, type, dedupe, json) VALUES (?1, ?2, ?3, ?4)",
        params![e.at_ms, e.kind.name(), e.dedupe_key(), json],
    )?;
    Ok(())
}

/// Stores one event: its row in `events`, and what it means for `terms`
/// (of timeline `epoch`) and `refusals`; counts it in `deltas`.
fn apply(
    tx: &Transaction<'_>,
    event: &Event,
    epoch: i64,
    deltas: &mut Deltas,
) -> Result<(), HistoryError> {
    insert_event(tx, event)?;
    deltas.event(&event.election, event.at_ms);
    match &event.kind {
        EventKind::TermStarted { .. } => {
            let inserted = insert_started_term(tx, event, epoch)?;
            deltas.terms(&event.election, inserted as i64);
        }
        EventKind::TermEnded { .. } => {
            let inserted = end_term(tx, event, epoch)?;
            deltas.terms(&event.election, inserted as i64);
        }
        EventKind::FenceRefused { .. } => {
            insert_refusal(tx, event)?;
            deltas.refusal(&event.election);
        }
        EventKind::LeaderValueChanged { .. }
        | EventKind::FenceAccepted { .. }
        | EventKind::Gap { .. }
        | EventKind::Reset { .. }
        | EventKind::Unobserved { .. }
        | EventKind::CandidateQueued { .. }
        | EventKind::CandidateLeft { .. }
        | EventKind::NameCollision { .. }
        | EventKind::TwoPrimaries { .. }
        | EventKind::Acting { .. } => {}
    }
    Ok(())
}

/// The event's row in `events`.
fn insert_event(tx: &Transaction<'_>, event: &Event) -> Result<(), HistoryError> {
    let (json, token, holder) = event_row(event)?;
    tx.prepare_cached(
        "INSERT INTO events (revision, at_ms, election, type, token, holder, json)
         VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7)",
    )?
    .execute(params![
        event.revision,
        event.at_ms,
        event.election,
        event.kind.name(),
        token,
        holder,
        json
    ])?;
    Ok(())
}

/// A started term's row in `terms` (once: a term already there stays);
/// the rows inserted (0 or 1).
fn insert_started_term(
    tx: &Transaction<'_>,
    event: &Event,
    epoch: i64,
) -> Result<usize, HistoryError> {
    let EventKind::TermStarted {
        token,
        holder,
        lease_id,
        layout,
        from_snapshot,
        ..
    } = &event.kind
    else {
        return Ok(0);
    };
    Ok(tx
        .prepare_cached(
            "INSERT OR IGNORE INTO terms (election, token, holder, lease_id, layout,
                     started_at_ms, started_revision, from_snapshot, epoch)
                 VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9)",
        )?
        .execute(params![
            event.election,
            token,
            holder,
            lease_id,
            tag_of(layout),
            event.at_ms,
            event.revision,
            from_snapshot,
            epoch
        ])?)
}

/// A term's end: its row inserted from the end when the history never saw
/// its start (layout unknown, start as the watcher reported it), then the
/// end set, unless one is already recorded (the first end recorded
/// stands). The rows inserted (0 or 1).
fn end_term(tx: &Transaction<'_>, event: &Event, epoch: i64) -> Result<usize, HistoryError> {
    let EventKind::TermEnded {
        token,
        holder,
        lease_id,
        cause,
        started_revision,
        started_at_ms,
        ..
    } = &event.kind
    else {
        return Ok(0);
    };
    // The end set on the open row first: the common case is one
    // statement (a mass deletion ends 100,000 terms in one transaction).
    let ended = tx
        .prepare_cached(
            "UPDATE terms SET ended_at_ms = ?3, ended_revision = ?4, end_cause = ?5
                 WHERE election = ?1 AND token = ?2 AND epoch = ?6 AND ended_at_ms IS NULL",
        )?
        .execute(params![
            event.election,
            token,
            event.at_ms,
            event.revision,
            cause.as_str(),
            epoch
        ])?;
    if ended > 0 {
        return Ok(0);
    }
    // No open row: inserted from the end, unless one is there already ended.
    Ok(tx
        .prepare_cached(
            "INSERT OR IGNORE INTO terms (election, token, holder, lease_id, layout,
                     started_at_ms, started_revision, from_snapshot,
                     ended_at_ms, ended_revision, end_cause, epoch)
                 VALUES (?1, ?2, ?3, ?4, NULL, ?5, ?6, 1, ?7, ?8, ?9, ?10)",
        )?
        .execute(params![
            event.election,
            token,
            holder,
            lease_id,
            started_at_ms,
            started_revision,
            event.at_ms,
            event.revision,
            cause.as_str(),
            epoch
        ])?)
}

/// A fence refusal's row in `refusals`.
fn insert_refusal(tx: &Transaction<'_>, event: &Event) -> Result<(), HistoryError> {
    let EventKind::FenceRefused {
        resource,
        token,
        reason,
        current_token,
        current_holder,
    } = &event.kind
    else {
        return Ok(());
    };
    tx.prepare_cached(
        "INSERT INTO refusals (election, resource, token, reason, revision, at_ms,
                     current_token, current_holder)
                 VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8)",
    )?
    .execute(params![
        event.election,
        resource,
        token,
        reason.as_str(),
        event.revision,
        event.at_ms,
        current_token,
        current_holder
    ])?;
    Ok(())
}
