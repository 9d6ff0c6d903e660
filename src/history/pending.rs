//! What a SQLite store's writer was handed and has not committed yet, as
//! the elections list reads it: the list, one election's summary, the
//! count of those led and the recent counts answer from the committed rows
//! *and* the queued batches beyond them, so that a mass change (one
//! deletion ending 100,000 terms, whose commit takes a second or more) is
//! shown as soon as the watcher has delivered it, and every page reading
//! these answers shows the same moment.
//!
//! Invariants:
//! - **Exact boundary.** A queued batch is overlaid only when its revision
//!   is above its cluster's resume revision as the writer will find it: the
//!   one the read transaction holds, raised by each queued batch before it
//!   (the writer ignores a batch at or below it). The rows read and the
//!   overlay are one moment, never a batch twice, never a committed batch
//!   lost between them (the queue is read before the transaction starts,
//!   and a batch leaves it only after its commit).
//! - **Never across a reset.** A batch with a `reset` starts a new timeline
//!   whose revisions compare with nothing stored: from it on, that
//!   cluster's queued batches are not overlaid until it is committed (late,
//!   never wrong).
//! - **The writer's own rules** (`sqlite_write.rs`), on the open terms read
//!   in the same transaction: a start inserts a row unless one of its
//!   token is there (`INSERT OR IGNORE`); an end closes the open row, else
//!   inserts an ended one unless a row is there (the first end stands); a
//!   refusal counts; any event moves the last event's time. A row is
//!   looked up only for a token at or below the stored resume revision (no
//!   row above it is written yet), so a mass change looks up none.
//! - **Not overlaid:** elections the history does not know yet (their row,
//!   the total and the pages' offsets wait for the commit), the `terms`
//!   count, and the terms and events tables themselves; a summary names
//!   the end its queue holds (`queued_end_ms`), so a page dating "no leader
//!   since" from the terms it read never shows an older end.
//! - **Cheap when idle.** The queue holds an `Arc` of each batch; its index
//!   by election is built by the first read that needs it, one batch's is
//!   used as it is (several are merged by election per read), and the store
//!   of a PostgreSQL history keeps no queue (its pages read the shared
//!   database).

use std::collections::{HashMap, VecDeque};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, OnceLock};

use rusqlite::Connection;

use super::meta::{scoped, Scope, RESUME_KEY};
use super::query::{read_state, ElectionSummary, OpenTerm};
use super::time::format_ms;
use super::HistoryError;
use crate::events::{Batch, EventKind};
use crate::task::Locked;

/// The batches queued for the writer and not yet committed, oldest first.
#[derive(Default)]
pub(super) struct Pending {
    queue: Mutex<VecDeque<Arc<Queued>>>,
    next: AtomicU64,
}

/// One queued batch.
pub(super) struct Queued {
    seq: u64,
    scope: Scope,
    batch: Arc<Batch>,
    index: OnceLock<Index>,
}

/// A batch's events by election, built on first read.
struct Index {
    reset: bool,
    changes: HashMap<String, Change>,
}

/// What one batch does to one election's summary.
#[derive(Default)]
struct Change {
    /// Terms started and ended, in the batch's order.
    ops: Vec<Op>,
    /// When each refusal arrived.
    refusals: Vec<i64>,
    last_event_ms: Option<i64>,
}

enum Op {
    Started { term: OpenTerm, observed: bool },
    Ended { token: i64, at_ms: i64 },
}

impl Pending {
    /// Queues `batch` of `scope`; its sequence number, which the writer
    /// hands back to [`Pending::committed`] once it is committed.
    pub fn push(&self, scope: &Scope, batch: &Arc<Batch>) -> u64 {
        let seq = self.next.fetch_add(1, Ordering::Relaxed) + 1;
        self.queue.locked().push_back(Arc::new(Queued {
            seq,
            scope: scope.clone(),
            batch: batch.clone(),
            index: OnceLock::new(),
        }));
        seq
    }

    /// Every batch up to `seq` is committed.
    pub fn committed(&self, seq: u64) {
        let mut queue = self.queue.locked();
        while queue.front().is_some_and(|q| q.seq <= seq) {
            queue.pop_front();
        }
    }

    /// The writer stopped: nothing queued will be committed.
    pub fn clear(&self) {
        self.queue.locked().clear();
    }

    /// What is queued now, oldest first: read it before the transaction
    /// whose rows it overlays.
    pub fn queued(&self) -> Vec<Arc<Queued>> {
        self.queue.locked().iter().cloned().collect()
    }
}

/// A reader's queued batches: none for a reader without a writer, or of a
/// PostgreSQL history.
pub(super) type Snapshot = Vec<Arc<Queued>>;

/// One queued batch's change of an election, with its cluster's stored
/// resume revision in the read transaction (a term whose token is above it
/// has no row yet: rows are written by batches at or below it).
type Entry<'a> = (&'a Change, Option<i64>);

/// The queued batches beyond what one read transaction holds, in order,
/// by election.
pub(super) struct Overlay<'a> {
    tx: &'a Connection,
    by: By<'a>,
}

/// One batch's index as it is (the common case: no merge), or several
/// merged by election.
enum By<'a> {
    One(&'a HashMap<String, Change>, Option<i64>),
    Many(HashMap<&'a str, Vec<Entry<'a>>>),
}

/// What the queued batches do to one election, by the writer's rules.
#[derive(Default)]
pub(super) struct Folded<'a> {
    /// The open terms read that stay open.
    pub kept: Vec<i64>,
    /// Terms the queue opens that stay open.
    pub opened: Vec<&'a OpenTerm>,
    /// Term rows the queue inserts by their start, and whether each start
    /// was seen (not read in a snapshot).
    pub inserted: Vec<(&'a OpenTerm, bool)>,
    /// When the refusals arrived.
    pub refusals: Vec<i64>,
    pub last_event_ms: Option<i64>,
    /// The latest end the queue records (of an open term, or a row
    /// inserted by its end).
    pub last_end_ms: Option<i64>,
}

impl<'a> Overlay<'a> {
    /// The batches of `queued` that `tx` (a read transaction, already
    /// begun) does not hold, as the writer will apply them: above their
    /// cluster's resume revision as it stands before each (stored, then
    /// raised by the batches before it: the writer ignores a batch at or
    /// below it), up to the first reset of each cluster.
    pub fn within(tx: &'a Connection, queued: &'a [Arc<Queued>]) -> Result<Self, HistoryError> {
        // Per cluster: (stored, running) resume revisions.
        let mut stands: HashMap<Scope, (Option<i64>, Option<i64>)> = HashMap::new();
        let mut stopped: Vec<Scope> = Vec::new();
        let mut taken: Vec<(&'a HashMap<String, Change>, Option<i64>)> = Vec::new();
        for q in queued {
            if stopped.contains(&q.scope) {
                continue;
            }
            let (stored, running) = match stands.get_mut(&q.scope) {
                Some(s) => s,
                None => {
                    let r = read_state(tx, &scoped(RESUME_KEY, q.scope.as_deref()))?;
                    stands.entry(q.scope.clone()).or_insert((r, r))
                }
            };
            let index = q.index.get_or_init(|| Index::of(&q.batch));
            if index.reset {
                // Its revision compares with nothing stored: committed or
                // not, what follows it waits for the commits.
                stopped.push(q.scope.clone());
                continue;
            }
            if running.is_some_and(|r| q.batch.revision <= r) {
                continue;
            }
            *running = Some(q.batch.revision);
            if !index.changes.is_empty() {
                taken.push((&index.changes, *stored));
            }
        }
        let by = match taken.as_slice() {
            [] => By::Many(HashMap::new()),
            [(one, stored)] => By::One(one, *stored),
            _ => {
                let mut merged: HashMap<&'a str, Vec<Entry<'a>>> = HashMap::new();
                for (changes, stored) in taken {
                    for (name, change) in changes {
                        merged
                            .entry(name.as_str())
                            .or_default()
                            .push((change, stored));
                    }
                }
                By::Many(merged)
            }
        };
        Ok(Overlay { tx, by })
    }

    pub fn is_empty(&self) -> bool {
        match &self.by {
            By::One(..) => false,
            By::Many(m) => m.is_empty(),
        }
    }

    /// Every election a queued batch changes.
    pub fn touched(&self) -> Box<dyn Iterator<Item = &'a str> + '_> {
        match &self.by {
            By::One(m, _) => Box::new(m.keys().map(String::as_str)),
            By::Many(m) => Box::new(m.keys().copied()),
        }
    }

    /// `name` as the queue holds it, if a queued batch changes it.
    pub fn name(&self, name: &str) -> Option<&'a str> {
        match &self.by {
            By::One(m, _) => m.get_key_value(name).map(|(k, _)| k.as_str()),
            By::Many(m) => m.get_key_value(name).map(|(k, _)| *k),
        }
    }

    /// Whether a queued batch changes `name`.
    pub fn touches(&self, name: &str) -> bool {
        match &self.by {
            By::One(m, _) => m.contains_key(name),
            By::Many(m) => m.contains_key(name),
        }
    }

    fn entries(&self, name: &str) -> Vec<Entry<'a>> {
        match &self.by {
            By::One(m, stored) => m.get(name).map(|c| vec![(c, *stored)]).unwrap_or_default(),
            By::Many(m) => m.get(name).cloned().unwrap_or_default(),
        }
    }

    /// Refusals of `name` queued that arrived at or after `from_ms`.
    pub fn refused(&self, name: &str, from_ms: i64) -> u64 {
        self.entries(name)
            .iter()
            .map(|(c, _)| c.refusals.iter().filter(|at| **at >= from_ms).count() as u64)
            .sum()
    }

    /// Whether the history holds a row of `name`'s term `token` (in the
    /// current timeline).
    fn has_row(&self, name: &str, token: i64) -> Result<bool, HistoryError> {
        Ok(self
            .tx
            .prepare_cached(
                "SELECT 1 FROM terms WHERE election = ?1 AND token = ?2
                   AND epoch = COALESCE((SELECT value FROM watcher_state WHERE key = 'epoch'), 0)",
            )?
            .exists(rusqlite::params![name, token])?)
    }

    /// The queued batches' effect on `name`, whose open terms read are
    /// `open` (their tokens), by the writer's rules: a start inserts a row
    /// unless one of its token is there (`INSERT OR IGNORE`); an end closes
    /// the open row, else inserts an ended one unless a row is there (the
    /// first end recorded stands). A row is looked up only for a token at
    /// or below the stored resume revision: none above it is written yet.
    pub fn fold(&self, name: &str, open: &[i64]) -> Result<Folded<'a>, HistoryError> {
        let mut f = Folded {
            kept: open.to_vec(),
            ..Folded::default()
        };
        // Tokens whose row the queue writes before the op at hand.
        let mut written: Vec<i64> = Vec::new();
        for (change, stored) in self.entries(name) {
            let stored_row = |token: i64| -> Result<bool, HistoryError> {
                match stored {
                    Some(r) if token <= r => self.has_row(name, token),
                    _ => Ok(false),
                }
            };
            for op in &change.ops {
                match op {
                    Op::Started { term, observed } => {
                        let token = term.token;
                        if f.kept.contains(&token) || written.contains(&token) || stored_row(token)?
                        {
                            continue;
                        }
                        written.push(token);
                        f.opened.push(term);
                        f.inserted.push((term, *observed));
                    }
                    Op::Ended { token, at_ms } => {
                        let token = *token;
                        if let Some(i) = f.kept.iter().position(|t| *t == token) {
                            f.kept.remove(i);
                        } else if let Some(i) = f.opened.iter().position(|t| t.token == token) {
                            f.opened.remove(i);
                        } else if written.contains(&token) || stored_row(token)? {
                            // Ended already: the first end stands.
                            continue;
                        } else {
                            written.push(token);
                        }
                        f.last_end_ms = f.last_end_ms.max(Some(*at_ms));
                    }
                }
            }
            f.refusals.extend(&change.refusals);
            f.last_event_ms = f.last_event_ms.max(change.last_event_ms);
        }
        Ok(f)
    }

    /// `summary` (its open terms `open`, by start) once the queued batches
    /// are committed: its current term, refusals, last event and, where
    /// the queue ends a term, when.
    pub fn apply(
        &self,
        summary: &mut ElectionSummary,
        mut open: Vec<OpenTerm>,
    ) -> Result<(), HistoryError> {
        let tokens: Vec<i64> = open.iter().map(|t| t.token).collect();
        let f = self.fold(&summary.election, &tokens)?;
        open.retain(|t| f.kept.contains(&t.token));
        open.extend(f.opened.iter().map(|t| (*t).clone()));
        open.sort_by_key(|t| (t.started_revision, t.token));
        summary.current = open.pop();
        summary.refusals += f.refusals.len() as u64;
        summary.last_event_ms = summary.last_event_ms.max(f.last_event_ms);
        summary.last_event_at = summary.last_event_ms.map(format_ms);
        summary.queued_end_ms = f.last_end_ms;
        Ok(())
    }
}

impl Folded<'_> {
    /// Terms seen starting at or after `from_ms`, and refusals at or after
    /// it.
    pub fn recent(&self, from_ms: i64) -> (u64, u64) {
        let started = self
            .inserted
            .iter()
            .filter(|(t, observed)| *observed && t.started_at_ms >= from_ms)
            .count() as u64;
        let refused = self.refusals.iter().filter(|at| **at >= from_ms).count() as u64;
        (started, refused)
    }

    /// Whether an open term remains.
    pub fn leads(&self) -> bool {
        !self.kept.is_empty() || !self.opened.is_empty()
    }
}

impl Index {
    fn of(batch: &Batch) -> Index {
        let mut changes: HashMap<String, Change> = HashMap::new();
        let mut reset = false;
        for event in &batch.events {
            if matches!(event.kind, EventKind::Reset { .. }) {
                reset = true;
            }
            if crate::events::is_fleet_name(&event.election) {
                continue;
            }
            let change = changes.entry(event.election.clone()).or_default();
            change.last_event_ms = change.last_event_ms.max(Some(event.at_ms));
            match &event.kind {
                EventKind::TermStarted {
                    token,
                    holder,
                    lease_id,
                    layout,
                    from_snapshot,
                    ..
                } => change.ops.push(Op::Started {
                    term: OpenTerm {
                        election: event.election.clone(),
                        token: *token,
                        holder: holder.clone(),
                        lease_id: *lease_id,
                        layout: *layout,
                        started_revision: event.revision,
                        started_at_ms: event.at_ms,
                    },
                    observed: !from_snapshot,
                }),
                EventKind::TermEnded { token, .. } => change.ops.push(Op::Ended {
                    token: *token,
                    at_ms: event.at_ms,
                }),
                EventKind::FenceRefused { .. } => change.refusals.push(event.at_ms),
                _ => {}
            }
        }
        Index { reset, changes }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::election::KeyLayout;
    use crate::events::Event;

    fn start(revision: i64, election: &str) -> Arc<Batch> {
        Arc::new(Batch {
            revision,
            events: vec![Event {
                revision,
                at_ms: revision,
                election: election.to_owned(),
                kind: EventKind::TermStarted {
                    token: revision,
                    holder: "h".into(),
                    lease_id: 1,
                    layout: KeyLayout::Single,
                    previous_holder: None,
                    from_snapshot: false,
                },
            }],
        })
    }

    #[test]
    fn only_batches_above_their_clusters_stored_revision_are_overlaid() {
        let conn = Connection::open_in_memory().unwrap();
        conn.execute_batch(
            "CREATE TABLE watcher_state (key TEXT PRIMARY KEY, value INTEGER);
             INSERT INTO watcher_state VALUES ('resume_revision', 20),
                                              ('resume_revision@b', 5);",
        )
        .unwrap();
        let pending = Pending::default();
        let b: Scope = Some("b".into());
        // Committed but not yet let go by the writer: 20 (at the stored
        // revision) and 19; above it: 21. Cluster b stands at 5: its 6 is
        // queued, and a cluster with nothing stored has everything queued.
        for (scope, rev, name) in [
            (&None, 19, "x"),
            (&None, 20, "y"),
            (&None, 21, "z"),
            (&b, 6, "b/w"),
            (&Some("c".into()), 1, "c/v"),
        ] {
            pending.push(scope, &start(rev, name));
        }
        let queued = pending.queued();
        let overlay = Overlay::within(&conn, &queued).unwrap();
        let mut touched: Vec<&str> = overlay.touched().collect();
        touched.sort();
        assert_eq!(touched, ["b/w", "c/v", "z"]);
        // Let go once committed: through 3, then all.
        pending.committed(3);
        assert_eq!(pending.queued().len(), 2);
        pending.clear();
        assert!(pending.queued().is_empty());
    }
}
