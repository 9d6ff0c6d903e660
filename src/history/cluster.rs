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
    // Each cluster's own rows: a busy cluster's must not push a
    // quiet one's out of the window.
    let mut stmt = conn.prepare_cached(
        "SELECT json FROM (SELECT id, json FROM cluster_events \
         WHERE type IN ('member_added', 'member_removed', 'alarm_raised', 'alarm_cleared', 'reset') \
           AND json_extract(json, '$.cluster') IS ?2 \
         ORDER BY id DESC LIMIT ?1) ORDER BY id",
    )?;
    let mut events: Vec<ClusterEvent> = stmt
        .query_map(params![BASELINE_ROWS, scope], |r| r.get::<_, String>(0))?
        .map(|r| r.map_err(HistoryError::from).and_then(parse))
        .collect::<Result<_, _>>()?;
    let leader: Option<String> = conn
        .query_row(
            "SELECT json FROM cluster_events WHERE type = 'leader_changed' \
               AND json_extract(json, '$.cluster') IS ?1 ORDER BY id DESC LIMIT 1",
            [scope],
            |r| r.get(0),
        )
        .map(Some)
        .or_else(|e| match e {
            rusqlite::Error::QueryReturnedNoRows => Ok(None),
            e => Err(e),
        })?;
    if let Some(l) = leader {
        events.push(parse(l)?);
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
