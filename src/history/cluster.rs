//! etcd's own events in the history (`cluster_events`): written by the one
//! writer (in the same queue as the batches), read like everything else.
//! A fact with a dedupe key (a raft term, a member, a gap) is stored once
//! whatever restarts; see [`ClusterEventKind::dedupe_key`].

use rusqlite::{params, Connection};

use super::query::Query;
use super::writer::Msg;
use super::{HistoryError, Store};
use crate::events::cluster::{ClusterBaseline, ClusterEvent};

/// Most membership and alarm events read to rebuild the baseline.
const BASELINE_ROWS: i64 = 10_000;

fn parse(json: String) -> Result<ClusterEvent, HistoryError> {
    serde_json::from_str(&json).map_err(|source| HistoryError::Json {
        what: "cluster_events.json".into(),
        source,
    })
}

pub(super) fn events(conn: &Connection, q: &Query) -> Result<Vec<ClusterEvent>, HistoryError> {
    let mut stmt = conn.prepare_cached(
        "SELECT json FROM cluster_events WHERE at_ms >= ?1 AND at_ms <= ?2 \
         ORDER BY at_ms, id LIMIT ?3",
    )?;
    let rows = stmt.query_map(
        params![
            q.from_ms.unwrap_or(i64::MIN),
            q.to_ms.unwrap_or(i64::MAX),
            q.effective_limit() as i64
        ],
        |r| r.get::<_, String>(0),
    )?;
    rows.map(|r| parse(r?)).collect()
}

/// The state etcd's recorded events leave, of the cluster `scope` names
/// (the events of a serve without `--cluster` name none).
pub(super) fn baseline(
    conn: &Connection,
    scope: Option<&str>,
) -> Result<ClusterBaseline, HistoryError> {
    let ours = |e: &ClusterEvent| e.cluster.as_deref() == scope;
    let mut stmt = conn.prepare_cached(
        "SELECT json FROM (SELECT id, json FROM cluster_events \
         WHERE type IN ('member_added', 'member_removed', 'alarm_raised', 'alarm_cleared', 'reset') \
         ORDER BY id DESC LIMIT ?1) ORDER BY id",
    )?;
    let mut events: Vec<ClusterEvent> = stmt
        .query_map([BASELINE_ROWS], |r| r.get::<_, String>(0))?
        .map(|r| r.map_err(HistoryError::from).and_then(parse))
        .filter(|e| e.as_ref().map_or(true, ours))
        .collect::<Result<_, _>>()?;
    // The newest leader change of this cluster: among the newest of all.
    let mut stmt = conn.prepare_cached(
        "SELECT json FROM cluster_events WHERE type = 'leader_changed' ORDER BY id DESC LIMIT ?1",
    )?;
    let leaders = stmt.query_map([BASELINE_ROWS], |r| r.get::<_, String>(0))?;
    for json in leaders {
        let e = parse(json?)?;
        if ours(&e) {
            events.push(e);
            break;
        }
    }
    Ok(ClusterBaseline::fold(&events))
}

impl Store {
    /// Queues one cluster event for the writer (stored after the batches
    /// queued before it; once only, when it has a dedupe key).
    pub async fn cluster_event(&self, event: ClusterEvent) -> Result<(), HistoryError> {
        let queue = self.queue.as_ref().ok_or(HistoryError::Closed)?;
        queue
            .send(Msg::ClusterEvent(event))
            .await
            .map_err(|_| self.stopped())
    }
}
