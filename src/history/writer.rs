//! The one writer: a dedicated OS thread that owns the write connection,
//! drains the queue and commits each drained group, with the resume
//! revision, in one transaction.

use crate::task::Locked;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use tokio::sync::{mpsc, oneshot};

use super::meta::{scoped, Scope, CLUSTER_KEY, EPOCH_KEY, RESUME_KEY, WATCHED_KEY};
use super::pending::Pending;
use super::HistoryError;
use crate::events::cluster::ClusterEvent;
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
    /// A batch of the cluster `Scope` names (its names already qualified),
    /// and its place in the store's [`Pending`] queue (0: not queued there).
    Batch(Scope, Arc<Batch>, u64),
    /// Answered with the committed resume revision once everything queued
    /// before it is committed.
    Flush(oneshot::Sender<i64>),
    /// The etcd cluster id the watcher reads from (after the batch it
    /// loaded): stored so a restart can tell a replaced cluster.
    Cluster(Scope, u64),
    /// One of etcd's own events: stored in order, once.
    ClusterEvent(crate::events::cluster::ClusterEvent),
    /// The watcher was live (caught up with etcd) at this moment, unix ms.
    Watched(Scope, i64),
}

/// Why the writer stopped, for the callers that find the queue closed.
pub(super) type Failure = Arc<Mutex<Option<String>>>;

/// One write transaction, whatever the backend: the few statements the
/// writer's logic (resume revision, epochs, resets) needs. The logic itself
/// ([`Writer::commit`]) is written once, above both backends.
pub(super) trait WriteTx {
    fn read_state(&mut self, key: &str) -> Result<Option<i64>, HistoryError>;
    /// The current epoch, held until the commit: shared by every commit,
    /// exclusive (`reset`) by one that starts a new epoch. On a history
    /// that several clusters' writers share, a reset then waits for every
    /// commit that read the old epoch, so its carry of the open terms sees
    /// theirs, and no commit writes terms into an epoch a reset has closed.
    /// One writer (SQLite): a plain read.
    fn lock_epoch(&mut self, reset: bool) -> Result<i64, HistoryError> {
        let _ = reset;
        Ok(self.read_state(EPOCH_KEY)?.unwrap_or(0))
    }
    fn set_state(&mut self, key: &str, value: i64) -> Result<(), HistoryError>;
    /// Stores `value` under `key` unless as high a value is stored: never
    /// backwards, in one statement.
    fn raise_state(&mut self, key: &str, value: i64) -> Result<(), HistoryError>;
    /// Stores one event (its row, and what it means for terms and refusals).
    fn apply(&mut self, event: &Event, epoch: i64) -> Result<(), HistoryError>;
    /// A reset of one cluster started timeline `to`: the open
    /// terms of timeline `from` whose election is not under `except` (the
    /// cluster that reset) belong to clusters that did not, and go on in
    /// timeline `to`.
    fn carry_open_terms(&mut self, from: i64, to: i64, except: &str) -> Result<(), HistoryError>;
    fn cluster_event(&mut self, event: &ClusterEvent) -> Result<(), HistoryError>;
    /// Writes what [`WriteTx::apply`] left pending (the `elections` table's
    /// deltas; PostgreSQL: every row), before the commit.
    fn finish(&mut self) -> Result<(), HistoryError>;
}

/// The writer's connection: runs `f` in one write transaction (fenced, on a
/// shared database) and commits it; deletes what retention drops.
pub(super) trait WriteConn: Send + 'static {
    fn transact(
        &mut self,
        f: &mut dyn FnMut(&mut dyn WriteTx) -> Result<i64, HistoryError>,
    ) -> Result<i64, HistoryError>;
    /// Deletes events, refusals, cluster events and ended terms older than
    /// `cutoff_ms`: `[events, refusals, terms]` deleted.
    fn prune(&mut self, cutoff_ms: i64) -> Result<[usize; 3], HistoryError>;
    /// Called once when the queue has ended and everything is committed:
    /// leaves the store whole in its own file (nothing to do by default).
    fn close(&mut self) -> Result<(), HistoryError> {
        Ok(())
    }
}

pub(super) struct Writer<C: WriteConn> {
    pub(super) conn: C,
    /// `None`: keep everything.
    pub(super) retention_ms: Option<i64>,
    pub(super) failure: Failure,
    /// What the pages read beyond the commits (a SQLite store's).
    pub(super) pending: Option<Arc<Pending>>,
}

impl<C: WriteConn> Writer<C> {
    /// The thread's body: returns when every sender is gone and the queue
    /// is drained, or when a commit fails for good.
    pub(super) fn run(mut self, rx: mpsc::Receiver<Msg>) {
        // However the thread ends (a panic too), nothing queued is
        // committed any more: the pages read the commits alone.
        let _cleared = self.pending.clone().map(ClearOnDrop);
        let whole = self.drain(rx);
        if whole {
            if let Err(e) = self.conn.close() {
                tracing::warn!(error = %e, "history: closing the store failed");
            }
        }
    }

    /// Commits what the queue brings until it ends (`true`) or a commit
    /// fails for good (`false`).
    fn drain(&mut self, mut rx: mpsc::Receiver<Msg>) -> bool {
        self.prune();
        let mut last_prune = Instant::now();
        let mut group: Vec<Msg> = Vec::new();
        while let Some(first) = rx.blocking_recv() {
            group.push(first);
            let (mut batches, mut events) = (0, 0);
            while batches < MAX_GROUP_BATCHES && events < MAX_GROUP_EVENTS {
                let Ok(msg) = rx.try_recv() else { break };
                if let Msg::Batch(_, b, _) = &msg {
                    batches += 1;
                    events += b.events.len();
                }
                group.push(msg);
            }
            match self.commit_with_retry(&group) {
                Ok(revision) => {
                    let last = group
                        .iter()
                        .filter_map(|m| match m {
                            Msg::Batch(_, _, seq) => Some(*seq),
                            _ => None,
                        })
                        .max();
                    if let (Some(pending), Some(seq)) = (&self.pending, last) {
                        pending.committed(seq);
                    }
                    for msg in group.drain(..) {
                        if let Msg::Flush(done) = msg {
                            let _ = done.send(revision);
                        }
                    }
                }
                Err(e) if e.is_fenced() => {
                    // Not retried, not the database's fault: a newer writer
                    // has committed. What is queued is dropped; that writer
                    // resumes from the stored revision and records it.
                    tracing::error!(error = %e, "history: commit refused (stale writer)");
                    *self.failure.locked() = Some(e.to_string());
                    return false;
                }
                Err(e) => {
                    let message = e.to_string();
                    tracing::error!(error = %message, "history: writer stopped, nothing more will be stored");
                    *self.failure.locked() = Some(message);
                    // Dropping the queue (and the pending flushes) tells
                    // every caller.
                    return false;
                }
            }
            if last_prune.elapsed() >= PRUNE_EVERY {
                self.prune();
                last_prune = Instant::now();
            }
        }
        true
    }

    fn commit_with_retry(&mut self, group: &[Msg]) -> Result<i64, HistoryError> {
        let mut attempt = 0;
        loop {
            match self.commit(group) {
                Ok(revision) => return Ok(revision),
                Err(e) if attempt < RETRY_DELAYS.len() && !e.is_fenced() => {
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
        self.conn.transact(&mut |tx| commit_in(tx, group))
    }

    /// Deletes what is older than the retention. Open terms and the resume
    /// revision are never deleted. A failure is logged, not fatal.
    fn prune(&mut self) {
        let Some(retention_ms) = self.retention_ms else {
            return;
        };
        let cutoff = now_ms().saturating_sub(retention_ms);
        let result = self.conn.prune(cutoff);
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

/// Empties the queue the pages overlay when dropped.
struct ClearOnDrop(Arc<Pending>);

impl Drop for ClearOnDrop {
    fn drop(&mut self) {
        self.0.clear();
    }
}

/// Where one cluster's history stands inside a commit.
struct Standing {
    scope: Scope,
    /// The resume revision stored before this commit.
    stored: Option<i64>,
    resume: Option<i64>,
    watched: Option<i64>,
}

/// The standing of `scope` in `all`, read from the transaction the first
/// time (with the epoch, in the same read).
fn standing<'a>(
    tx: &mut dyn WriteTx,
    all: &'a mut Vec<Standing>,
    scope: &Scope,
    epoch: &mut Option<i64>,
) -> Result<&'a mut Standing, HistoryError> {
    if let Some(i) = all.iter().position(|s| &s.scope == scope) {
        return Ok(&mut all[i]);
    }
    let key = scoped(RESUME_KEY, scope.as_deref());
    if epoch.is_none() {
        *epoch = Some(tx.lock_epoch(false)?);
    }
    let stored = tx.read_state(&key)?;
    all.push(Standing {
        scope: scope.clone(),
        stored,
        resume: stored,
        watched: None,
    });
    let last = all.len() - 1;
    Ok(&mut all[last])
}

/// Applies `batch` of the cluster `s` stands for unless it is at or below
/// where that cluster's history stands; a reset in it starts timeline
/// `epoch + 1` (and carries the other clusters' open terms into it).
fn apply_batch(
    tx: &mut dyn WriteTx,
    s: &mut Standing,
    epoch: &mut i64,
    batch: &Batch,
) -> Result<(), HistoryError> {
    // A batch is committed as it arrives: the watcher was live then.
    s.watched = s.watched.max(Some(now_ms()));
    // A reset starts a new timeline, whose revisions may be at or
    // below the stored one: it is taken when it resets from where
    // history stands (never twice).
    let reset = batch.events.iter().find_map(|e| match &e.kind {
        EventKind::Reset { from_revision, .. } => Some(*from_revision),
        _ => None,
    });
    let takes_reset = reset.is_some_and(|from| s.resume.is_none_or(|r| r == from));
    if !takes_reset && s.resume.is_some_and(|r| batch.revision <= r) {
        tracing::debug!(
            revision = batch.revision,
            "history: batch at or below the resume revision ignored"
        );
        return Ok(());
    }
    s.resume = Some(batch.revision);
    let scope = s.scope.as_deref();
    for event in &batch.events {
        if let EventKind::Reset { cluster_id, .. } = &event.kind {
            // The newest epoch, as another cluster's writer may have just
            // committed one (equal to `*epoch` with one writer).
            *epoch = tx.lock_epoch(true)?.max(*epoch) + 1;
            tx.set_state(EPOCH_KEY, *epoch)?;
            tx.set_state(&scoped(CLUSTER_KEY, scope), *cluster_id as i64)?;
            if let Some(name) = scope {
                tx.carry_open_terms(*epoch - 1, *epoch, &crate::events::qualify(name, ""))?;
            }
            tracing::warn!(
                epoch = *epoch,
                cluster = scope.unwrap_or(""),
                revision = batch.revision,
                "history: etcd timeline reset; a new epoch starts"
            );
        }
        tx.apply(event, *epoch)?;
    }
    Ok(())
}

/// Applies every batch of `group` newer than its cluster's stored resume
/// revision and stores the new resume revisions, inside one transaction.
/// Returns the committed resume revision of the first cluster the group
/// names (the one cluster's, without `--cluster`; 0 if none).
fn commit_in(tx: &mut dyn WriteTx, group: &[Msg]) -> Result<i64, HistoryError> {
    // Read inside the transaction, not cached: when another writer shares
    // the database (a replica that wrote before this one), a batch it
    // already stored is recognised and skipped.
    let mut all: Vec<Standing> = Vec::new();
    let mut epoch: Option<i64> = None;
    for msg in group {
        let (scope, batch) = match msg {
            Msg::Batch(scope, batch, _) => (scope, &**batch),
            Msg::Watched(scope, at) => {
                let s = standing(tx, &mut all, scope, &mut epoch)?;
                s.watched = s.watched.max(Some(*at));
                continue;
            }
            Msg::Cluster(scope, id) => {
                let (key, id) = (scoped(CLUSTER_KEY, scope.as_deref()), *id as i64);
                if tx.read_state(&key)? != Some(id) {
                    tx.set_state(&key, id)?;
                }
                continue;
            }
            Msg::Flush(_) => continue,
            Msg::ClusterEvent(e) => {
                tx.cluster_event(e)?;
                continue;
            }
        };
        let s = standing(tx, &mut all, scope, &mut epoch)?;
        let mut e = epoch.unwrap_or(0);
        apply_batch(tx, s, &mut e, batch)?;
        epoch = Some(e);
    }
    tx.finish()?;
    for s in &all {
        if let (Some(r), true) = (s.resume, s.resume != s.stored) {
            tx.set_state(&scoped(RESUME_KEY, s.scope.as_deref()), r)?;
        }
        if let Some(at) = s.watched {
            // Never backwards (a clock step back, or a standby's old news).
            tx.raise_state(&scoped(WATCHED_KEY, s.scope.as_deref()), at)?;
        }
    }
    match all.first() {
        Some(s) => Ok(s.resume.unwrap_or(0)),
        None => Ok(tx.read_state(RESUME_KEY)?.unwrap_or(0)),
    }
}

/// What an event's row in `events` holds besides its revision, time and
/// election: its JSON, and its token and holder when it has them.
pub(super) fn event_row(
    event: &Event,
) -> Result<(String, Option<i64>, Option<&str>), HistoryError> {
    let json = serde_json::to_string(event).map_err(|source| HistoryError::Json {
        what: format!("event at revision {}", event.revision),
        source,
    })?;
    let (token, holder) = match &event.kind {
        EventKind::TermStarted { token, holder, .. }
        | EventKind::TermEnded { token, holder, .. }
        | EventKind::LeaderValueChanged { token, holder, .. }
        | EventKind::CandidateQueued { token, holder, .. }
        | EventKind::CandidateLeft { token, holder, .. } => (Some(*token), Some(holder.as_str())),
        EventKind::FenceAccepted { token, .. } | EventKind::FenceRefused { token, .. } => {
            (Some(*token), None)
        }
        EventKind::TwoPrimaries { token, leader, .. } => (Some(*token), Some(leader.as_str())),
        EventKind::Acting { record } => (Some(record.token), Some(record.holder.as_str())),
        EventKind::Gap { .. }
        | EventKind::Reset { .. }
        | EventKind::Unobserved { .. }
        | EventKind::NameCollision { .. } => (None, None),
    };
    Ok((json, token, holder))
}
