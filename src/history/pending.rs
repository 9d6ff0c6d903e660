//! What a SQLite store's writer was handed and has not committed yet, as
//! the elections list reads it: the list, one election's summary, the
//! count of those led and the recent counts answer from the committed rows
//! *and* the queued batches beyond them, so that a mass change (one
//! deletion ending 100,000 terms, whose commit takes a second or more) is
//! shown as soon as the watcher has delivered it, and every page reading
//! these answers shows the same moment.
//!
//! Invariants:
//! - **Exact boundary.** A queued batch is overlaid only when the read
//!   transaction's stored resume revision of its cluster is below the
//!   batch's revision: the rows read and the overlay are one moment, never
//!   a batch twice, never a committed batch lost between them (the queue is
//!   read before the transaction starts, and a batch leaves it only after
//!   its commit).
//! - **Never across a reset.** A batch with a `reset` starts a new timeline
//!   whose revisions compare with nothing stored: from it on, that
//!   cluster's queued batches are not overlaid until it is committed (late,
//!   never wrong).
//! - **Only what the writer will write.** A term's start opens it, its end
//!   closes it, a refusal counts, any event moves the last event's time:
//!   the writer's own rules (`sqlite_write.rs`) on the open terms read in
//!   the same transaction. Elections the history does not know yet are not
//!   added (their row, the total and the pages' offsets wait for the
//!   commit), the `terms` count is the committed one, and a start of a term
//!   the history already holds ended (which the writer ignores) would show
//!   it open until the commit.
//! - **Cheap when idle.** The queue holds an `Arc` of each batch; its index
//!   by election is built by the first read that needs it, and the store of
//!   a PostgreSQL history keeps no queue (its pages read the shared
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
    Ended(i64),
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

/// The queued batches beyond what one read transaction holds, in order.
pub(super) struct Overlay<'a> {
    changes: Vec<&'a HashMap<String, Change>>,
}

impl<'a> Overlay<'a> {
    /// The batches of `queued` that `tx` (a read transaction, already
    /// begun) does not hold: those above their cluster's stored resume
    /// revision, up to the first reset of each cluster.
    pub fn within(tx: &Connection, queued: &'a [Arc<Queued>]) -> Result<Self, HistoryError> {
        let mut stored: HashMap<Scope, Option<i64>> = HashMap::new();
        let mut stopped: Vec<Scope> = Vec::new();
        let mut changes = Vec::new();
        for q in queued {
            if stopped.contains(&q.scope) {
                continue;
            }
            let resume = match stored.get(&q.scope) {
                Some(r) => *r,
                None => {
                    let r = read_state(tx, &scoped(RESUME_KEY, q.scope.as_deref()))?;
                    stored.insert(q.scope.clone(), r);
                    r
                }
            };
            let index = q.index.get_or_init(|| Index::of(&q.batch));
            if index.reset {
                // Its revision compares with nothing stored: committed or
                // not, what follows it waits for the commits.
                stopped.push(q.scope.clone());
                continue;
            }
            if resume.is_some_and(|r| q.batch.revision <= r) {
                continue;
            }
            if !index.changes.is_empty() {
                changes.push(&index.changes);
            }
        }
        Ok(Overlay { changes })
    }

    pub fn is_empty(&self) -> bool {
        self.changes.is_empty()
    }

    /// Every election a queued batch changes.
    pub fn touched(&self) -> impl Iterator<Item = &'a str> + '_ {
        let mut seen = std::collections::HashSet::new();
        self.changes
            .iter()
            .flat_map(|c| c.keys())
            .filter(move |name| seen.insert(name.as_str()))
            .map(String::as_str)
    }

    /// Whether a queued batch changes `name`.
    pub fn touches(&self, name: &str) -> bool {
        self.changes.iter().any(|c| c.contains_key(name))
    }

    fn of<'s>(&'s self, name: &'s str) -> impl Iterator<Item = &'a Change> + 's {
        self.changes.iter().filter_map(move |c| c.get(name))
    }

    /// The open terms of `name` once the queued batches are committed,
    /// from `open` (the open terms read, by start): a start opens a term
    /// the history does not hold open, an end closes one.
    pub fn open_after(&self, name: &str, mut open: Vec<OpenTerm>) -> Vec<OpenTerm> {
        for change in self.of(name) {
            for op in &change.ops {
                match op {
                    Op::Started { term, .. } => {
                        if !open.iter().any(|t| t.token == term.token) {
                            open.push(term.clone());
                        }
                    }
                    Op::Ended(token) => open.retain(|t| t.token != *token),
                }
            }
        }
        open.sort_by_key(|t| (t.started_revision, t.token));
        open
    }

    /// `summary` (its open terms `open`, by start) once the queued batches
    /// are committed: its current term, refusals and last event.
    pub fn apply(&self, summary: &mut ElectionSummary, open: Vec<OpenTerm>) {
        summary.current = self.open_after(&summary.election, open).pop();
        for change in self.of(&summary.election) {
            summary.refusals += change.refusals.len() as u64;
            if change.last_event_ms > summary.last_event_ms {
                summary.last_event_ms = change.last_event_ms;
            }
        }
        summary.last_event_at = summary.last_event_ms.map(format_ms);
    }

    /// Terms of `name` seen starting (not first read in a snapshot) at or
    /// after `from_ms`, and refusals at or after it, in the queued batches.
    pub fn recent(&self, name: &str, from_ms: i64) -> (u64, u64) {
        let (mut started, mut refused) = (0u64, 0u64);
        for change in self.of(name) {
            started += change
                .ops
                .iter()
                .filter(|op| {
                    matches!(op, Op::Started { term, observed: true } if term.started_at_ms >= from_ms)
                })
                .count() as u64;
            refused += change.refusals.iter().filter(|at| **at >= from_ms).count() as u64;
        }
        (started, refused)
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
                EventKind::TermEnded { token, .. } => change.ops.push(Op::Ended(*token)),
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
