//! The one writer: a dedicated OS thread that owns the write connection,
//! drains the queue and commits each drained group, with the resume
//! revision, in one transaction.

use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use rusqlite::{params, Connection, Transaction, TransactionBehavior};
use tokio::sync::{mpsc, oneshot};

use super::query::{read_resume, tag_of};
use super::schema::RESUME_KEY;
use super::HistoryError;
use crate::events::{now_ms, Batch, Event, EventKind};

/// Most batches committed in one transaction.
const MAX_GROUP_BATCHES: usize = 1000;
/// Most events committed in one transaction (a few huge batches).
const MAX_GROUP_EVENTS: usize = 100_000;
/// Retention runs at most this often (and once when the writer starts).
pub(super) const PRUNE_EVERY: Duration = Duration::from_secs(60);
/// Pauses before retrying a failed commit; then the writer gives up.
const RETRY_DELAYS: [Duration; 3] = [
    Duration::from_millis(50),
    Duration::from_millis(250),
    Duration::from_secs(1),
];

pub(super) enum Msg {
    Batch(Batch),
    /// Answered with the committed resume revision once everything queued
    /// before it is committed.
    Flush(oneshot::Sender<i64>),
}

/// Why the writer stopped, for the callers that find the queue closed.
pub(super) type Failure = Arc<Mutex<Option<String>>>;

pub(super) struct Writer {
    pub(super) conn: Connection,
    /// `None`: keep everything.
    pub(super) retention_ms: Option<i64>,
    pub(super) failure: Failure,
}

impl Writer {
    /// The thread's body: returns when every sender is gone and the queue
    /// is drained, or when a commit fails for good.
    pub(super) fn run(mut self, mut rx: mpsc::Receiver<Msg>) {
        self.prune();
        let mut last_prune = Instant::now();
        let mut group: Vec<Msg> = Vec::new();
        while let Some(first) = rx.blocking_recv() {
            group.push(first);
            let (mut batches, mut events) = (0, 0);
            while batches < MAX_GROUP_BATCHES && events < MAX_GROUP_EVENTS {
                let Ok(msg) = rx.try_recv() else { break };
                if let Msg::Batch(b) = &msg {
                    batches += 1;
                    events += b.events.len();
                }
                group.push(msg);
            }
            match self.commit_with_retry(&group) {
                Ok(revision) => {
                    for msg in group.drain(..) {
                        if let Msg::Flush(done) = msg {
                            let _ = done.send(revision);
                        }
                    }
                }
                Err(e) => {
                    let message = e.to_string();
                    tracing::error!(error = %message, "history: writer stopped, nothing more will be stored");
                    *self.failure.lock().unwrap_or_else(|p| p.into_inner()) = Some(message);
                    // Dropping the queue (and the pending flushes) tells
                    // every caller.
                    return;
                }
            }
            if last_prune.elapsed() >= PRUNE_EVERY {
                self.prune();
                last_prune = Instant::now();
            }
        }
    }

    fn commit_with_retry(&mut self, group: &[Msg]) -> Result<i64, HistoryError> {
        let mut attempt = 0;
        loop {
            match self.commit(group) {
                Ok(revision) => return Ok(revision),
                Err(e) if attempt < RETRY_DELAYS.len() => {
                    tracing::warn!(error = %e, attempt = attempt + 1, "history: commit failed, retrying");
                    std::thread::sleep(RETRY_DELAYS[attempt]);
                    attempt += 1;
                }
                Err(e) => return Err(e),
            }
        }
    }

    /// Applies every batch of `group` newer than the stored resume revision
    /// and stores the new resume revision, in one transaction. Returns the
    /// committed resume revision (0 if none).
    fn commit(&mut self, group: &[Msg]) -> Result<i64, HistoryError> {
        let tx = self
            .conn
            .transaction_with_behavior(TransactionBehavior::Immediate)?;
        // Read inside the transaction, not cached: should a second writer
        // ever share the file, a replayed batch is still recognised.
        let stored = read_resume(&tx)?;
        let mut resume = stored;
        for msg in group {
            let Msg::Batch(batch) = msg else { continue };
            if resume.is_some_and(|r| batch.revision <= r) {
                tracing::debug!(
                    revision = batch.revision,
                    "history: batch at or below the resume revision ignored"
                );
                continue;
            }
            for event in &batch.events {
                apply(&tx, event)?;
            }
            resume = Some(batch.revision);
        }
        if resume != stored {
            tx.prepare_cached(
                "INSERT INTO watcher_state (key, value) VALUES (?1, ?2)
                 ON CONFLICT (key) DO UPDATE SET value = excluded.value",
            )?
            .execute(params![RESUME_KEY, resume])?;
        }
        tx.commit()?;
        Ok(resume.unwrap_or(0))
    }

    /// Deletes what is older than the retention. Open terms and the resume
    /// revision are never deleted. A failure is logged, not fatal.
    fn prune(&mut self) {
        let Some(retention_ms) = self.retention_ms else {
            return;
        };
        let cutoff = now_ms().saturating_sub(retention_ms);
        let result = (|| -> Result<[usize; 3], HistoryError> {
            let tx = self.conn.transaction()?;
            let events = tx.execute("DELETE FROM events WHERE at_ms < ?1", [cutoff])?;
            let refusals = tx.execute("DELETE FROM refusals WHERE at_ms < ?1", [cutoff])?;
            let terms = tx.execute(
                "DELETE FROM terms WHERE ended_at_ms IS NOT NULL AND ended_at_ms < ?1",
                [cutoff],
            )?;
            tx.commit()?;
            Ok([events, refusals, terms])
        })();
        match result {
            Ok([0, 0, 0]) => {}
            Ok([events, refusals, terms]) => {
                tracing::info!(
                    events,
                    refusals,
                    terms,
                    "history: retention deleted old rows"
                )
            }
            Err(e) => tracing::warn!(error = %e, "history: retention failed"),
        }
    }
}

/// Stores one event: its row in `events`, and what it means for `terms`
/// and `refusals`.
fn apply(tx: &Transaction<'_>, event: &Event) -> Result<(), HistoryError> {
    let json = serde_json::to_string(event).map_err(|source| HistoryError::Json {
        what: format!("event at revision {}", event.revision),
        source,
    })?;
    let (token, holder) = match &event.kind {
        EventKind::TermStarted { token, holder, .. }
        | EventKind::TermEnded { token, holder, .. }
        | EventKind::LeaderValueChanged { token, holder, .. } => (Some(*token), Some(holder)),
        EventKind::FenceAccepted { token, .. } | EventKind::FenceRefused { token, .. } => {
            (Some(*token), None)
        }
        EventKind::Gap { .. } => (None, None),
    };
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
    match &event.kind {
        EventKind::TermStarted {
            token,
            holder,
            lease_id,
            layout,
            from_snapshot,
            ..
        } => {
            tx.prepare_cached(
                "INSERT OR IGNORE INTO terms (election, token, holder, lease_id, layout,
                     started_at_ms, started_revision, from_snapshot)
                 VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8)",
            )?
            .execute(params![
                event.election,
                token,
                holder,
                lease_id,
                tag_of(layout),
                event.at_ms,
                event.revision,
                from_snapshot
            ])?;
        }
        EventKind::TermEnded {
            token,
            holder,
            lease_id,
            cause,
            started_revision,
            started_at_ms,
        } => {
            // A term whose start the history never saw: recorded from its
            // end (layout unknown, start as the watcher reported it).
            tx.prepare_cached(
                "INSERT OR IGNORE INTO terms (election, token, holder, lease_id, layout,
                     started_at_ms, started_revision, from_snapshot,
                     ended_at_ms, ended_revision, end_cause)
                 VALUES (?1, ?2, ?3, ?4, NULL, ?5, ?6, 1, ?7, ?8, ?9)",
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
                cause.as_str()
            ])?;
            // The first end recorded stands.
            tx.prepare_cached(
                "UPDATE terms SET ended_at_ms = ?3, ended_revision = ?4, end_cause = ?5
                 WHERE election = ?1 AND token = ?2 AND ended_at_ms IS NULL",
            )?
            .execute(params![
                event.election,
                token,
                event.at_ms,
                event.revision,
                cause.as_str()
            ])?;
        }
        EventKind::FenceRefused {
            resource,
            token,
            reason,
            current_token,
            current_holder,
        } => {
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
        }
        EventKind::LeaderValueChanged { .. }
        | EventKind::FenceAccepted { .. }
        | EventKind::Gap { .. } => {}
    }
    Ok(())
}
