//! The read side: row types and the queries, written once against a
//! read-only connection and used by both [`Store`](super::Store) and
//! [`Reader`](super::Reader).

use rusqlite::types::Type;
use rusqlite::{params, Connection, OptionalExtension, Row};
use serde::de::DeserializeOwned;
use serde::Serialize;

use super::meta::{scoped, CLUSTER_KEY, RESUME_KEY, WATCHED_KEY};
use super::time::format_ms;
use super::HistoryError;
use crate::election::{FenceReason, KeyLayout};
use crate::events::acting::ActingView;
use crate::events::{EndCause, Event, Witness, WITNESSES};
pub use crate::events::{OpenTerm, ResumePoint};

/// Rows returned when a [`Query`] names no limit.
pub const DEFAULT_LIMIT: usize = 1000;
/// The most rows one query returns, whatever its limit says.
pub const MAX_LIMIT: usize = 100_000;

/// A time window (unix ms, both ends inclusive, open when `None`) and a row
/// limit ([`DEFAULT_LIMIT`] when `None`, capped at [`MAX_LIMIT`]).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Query {
    pub from_ms: Option<i64>,
    pub to_ms: Option<i64>,
    pub limit: Option<usize>,
}

impl Query {
    /// The limit actually applied.
    pub fn effective_limit(&self) -> usize {
        self.limit.unwrap_or(DEFAULT_LIMIT).min(MAX_LIMIT)
    }

    fn from(&self) -> i64 {
        self.from_ms.unwrap_or(i64::MIN)
    }

    fn to(&self) -> i64 {
        self.to_ms.unwrap_or(i64::MAX)
    }

    fn sql_limit(&self) -> i64 {
        self.effective_limit() as i64
    }
}

/// One term, for display and export.
#[derive(Debug, Clone, PartialEq, Serialize, utoipa::ToSchema)]
pub struct TermRow {
    pub election: String,
    pub token: i64,
    /// The holder when the term started (a later proclaim is in the events).
    pub holder: String,
    pub lease_id: i64,
    /// `None` when the history saw only the term's end.
    pub layout: Option<KeyLayout>,
    /// RFC 3339, UTC, milliseconds.
    pub started_at: String,
    pub ended_at: Option<String>,
    pub started_at_ms: i64,
    pub ended_at_ms: Option<i64>,
    pub started_revision: i64,
    pub ended_revision: Option<i64>,
    pub end_cause: Option<EndCause>,
    /// The start was not observed: `started_at_ms` is when the term was
    /// first seen (a snapshot), or what the end event reported.
    pub from_snapshot: bool,
    /// `None` while the term is open. Exact only when
    /// `duration_bounds_seconds` is `None`.
    pub duration_seconds: Option<f64>,
    /// A start or an end that was replayed (recorded after the fact: a
    /// reconnect, a restart, a gap's reload) makes the duration a range:
    /// `[least, most]`, `most` `None` where the start's earliest moment is
    /// not known. `None`: both ends were seen as they happened.
    #[schema(value_type = Option<Vec<Option<f64>>>, min_items = 2, max_items = 2)]
    pub duration_bounds_seconds: Option<[Option<f64>; 2]>,
    /// When its holder acted as leader, and the margin; filled
    /// by [`crate::history::Reader::terms`] from the holders' records.
    #[serde(flatten)]
    pub acting: ActingView,
}

/// One refusal by the shared fence.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct RefusalRow {
    pub election: String,
    pub resource: String,
    pub token: i64,
    pub reason: FenceReason,
    pub revision: i64,
    pub at_ms: i64,
    /// RFC 3339, UTC, milliseconds.
    pub at: String,
    pub current_token: Option<i64>,
    pub current_holder: Option<String>,
}

/// What the history knows about one election.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct ElectionSummary {
    pub election: String,
    /// The open term (the latest, should the history hold several).
    pub current: Option<OpenTerm>,
    pub terms: u64,
    pub refusals: u64,
    pub last_event_ms: Option<i64>,
    pub last_event_at: Option<String>,
    /// When a term of it ended in a batch the writer has queued and not
    /// committed (the terms read do not show that end yet). `None` where
    /// nothing queued ends one.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub queued_end_ms: Option<i64>,
}

pub(super) fn resume_point(
    conn: &mut Connection,
    scope: Option<&str>,
) -> Result<Option<ResumePoint>, HistoryError> {
    // One read transaction: the revision and the open terms are one snapshot.
    let tx = conn.transaction()?;
    let Some(revision) = read_state(&tx, &scoped(RESUME_KEY, scope))? else {
        return Ok(None);
    };
    let mut open_terms = open_terms(&tx)?;
    if let Some(cluster) = scope {
        // The cluster's own, by the names its watcher gives them.
        let own = crate::events::qualify(cluster, "");
        open_terms.retain_mut(|t| match t.election.strip_prefix(&own) {
            Some(name) => {
                t.election = name.to_owned();
                true
            }
            None => false,
        });
    }
    let cluster_id = read_state(&tx, &scoped(CLUSTER_KEY, scope))?.map(|c| c as u64);
    // The newest arrival stored: what came after `revision` came after it
    // (committed with the resume revision, so never later than it).
    let live_at_ms = newest_arrival(&tx, scope)?;
    let witnesses = witnesses(&tx, revision, scope)?;
    tx.finish()?;
    Ok(Some(ResumePoint {
        revision,
        open_terms,
        cluster_id,
        live_at_ms,
        witnesses,
    }))
}

/// [`ResumePoint::witnesses`]: the newest terms of the current timeline
/// (of the cluster `scope`, by its names, given unqualified) whose token is
/// at or below `revision`. One scan of the terms at start.
fn witnesses(
    conn: &Connection,
    revision: i64,
    scope: Option<&str>,
) -> Result<Vec<Witness>, HistoryError> {
    let own = scope
        .map(|c| crate::events::qualify(c, ""))
        .unwrap_or_default();
    let mut stmt = conn.prepare_cached(
        "SELECT election, token, lease_id FROM terms
         WHERE epoch = COALESCE((SELECT value FROM watcher_state WHERE key = 'epoch'), 0)
           AND token <= ?1 AND substr(election, 1, length(?2)) = ?2
           AND from_snapshot = 0 AND layout IS NOT NULL
         ORDER BY token DESC LIMIT ?3",
    )?;
    let rows = stmt.query_map(params![revision, own, WITNESSES as i64], |row| {
        Ok(Witness {
            election: row.get(0)?,
            token: row.get(1)?,
            lease_id: row.get(2)?,
        })
    })?;
    let mut out: Vec<Witness> = rows.collect::<Result<_, _>>()?;
    for w in &mut out {
        w.election = w.election[own.len()..].to_owned();
    }
    Ok(out)
}

/// The newest arrival stored (of the cluster `scope` names: its names are
/// `CLUSTER/...`, the range `[CLUSTER/, CLUSTER0)`).
fn newest_arrival(conn: &Connection, scope: Option<&str>) -> Result<Option<i64>, HistoryError> {
    Ok(match scope {
        None => conn.query_row("SELECT max(at_ms) FROM events", [], |row| row.get(0))?,
        Some(cluster) => conn.query_row(
            "SELECT max(at_ms) FROM events WHERE election >= ?1 AND election < ?2",
            params![format!("{cluster}/"), format!("{cluster}0")],
            |row| row.get(0),
        )?,
    })
}

/// See `Reader::scopes`.
pub(super) fn scopes(conn: &mut Connection) -> Result<Vec<Option<String>>, HistoryError> {
    let mut stmt = conn.prepare_cached(super::meta::SCOPES_SQL)?;
    let keys = stmt.query_map([], |row| row.get::<_, String>(0))?;
    keys.map(|k| Ok(super::meta::scope_of_key(&k?))).collect()
}

/// See `Reader::watched_until`.
pub(super) fn watched_until(
    conn: &mut Connection,
    scope: Option<&str>,
) -> Result<Option<i64>, HistoryError> {
    let heartbeat = read_state(conn, &scoped(WATCHED_KEY, scope))?;
    if scope.is_some() {
        // A named cluster's history is recent: every commit of
        // its batches raised its own key, so no arrival is later than it.
        // (The arrivals are a scan of the cluster's names; the pages ask
        // this for every lane while the cluster is down.)
        return Ok(heartbeat);
    }
    let arrival = newest_arrival(conn, scope)?;
    Ok(heartbeat.max(arrival))
}

pub(super) fn read_state(conn: &Connection, key: &str) -> Result<Option<i64>, HistoryError> {
    Ok(conn
        .query_row(
            "SELECT value FROM watcher_state WHERE key = ?1",
            [key],
            |row| row.get(0),
        )
        .optional()?)
}

/// The columns of an open term, and the timeline condition (the current
/// epoch) every open-term query has.
const OPEN_TERM: &str =
    "SELECT election, token, holder, lease_id, layout, started_revision, started_at_ms
         FROM terms WHERE ended_at_ms IS NULL
           AND epoch = COALESCE((SELECT value FROM watcher_state WHERE key = 'epoch'), 0)";

fn open_term(row: &Row<'_>) -> rusqlite::Result<OpenTerm> {
    Ok(OpenTerm {
        election: row.get(0)?,
        token: row.get(1)?,
        holder: row.get(2)?,
        lease_id: row.get(3)?,
        layout: tag(row, 4)?,
        started_revision: row.get(5)?,
        started_at_ms: row.get(6)?,
    })
}

/// Every open term, by election then start.
pub(super) fn open_terms(conn: &Connection) -> Result<Vec<OpenTerm>, HistoryError> {
    let mut stmt = conn.prepare_cached(&format!(
        "{OPEN_TERM} ORDER BY election, started_revision, token"
    ))?;
    let rows = stmt.query_map([], open_term)?;
    Ok(rows.collect::<Result<_, _>>()?)
}

/// The open terms of one election, by start (the last is its current one).
pub(super) fn open_terms_of(conn: &Connection, name: &str) -> Result<Vec<OpenTerm>, HistoryError> {
    let mut stmt = conn.prepare_cached(&format!(
        "{OPEN_TERM} AND election = ?1 ORDER BY started_revision, token"
    ))?;
    let rows = stmt.query_map([name], open_term)?;
    Ok(rows.collect::<Result<_, _>>()?)
}

/// The open terms of the elections named `first..=last`, by election then
/// start.
pub(super) fn open_terms_within(
    conn: &Connection,
    first: &str,
    last: &str,
) -> Result<Vec<OpenTerm>, HistoryError> {
    let mut stmt = conn.prepare_cached(&format!(
        "{OPEN_TERM} AND election BETWEEN ?1 AND ?2 ORDER BY election, started_revision, token"
    ))?;
    let rows = stmt.query_map([first, last], open_term)?;
    Ok(rows.collect::<Result<_, _>>()?)
}

pub(super) fn terms(
    conn: &Connection,
    election: &str,
    q: &Query,
) -> Result<Vec<TermRow>, HistoryError> {
    let mut stmt = conn.prepare_cached(
        "SELECT election, token, holder, lease_id, layout, started_at_ms, started_revision,
                from_snapshot, ended_at_ms, ended_revision, end_cause
         FROM terms
         WHERE election = ?1 AND started_at_ms <= ?3
           AND (ended_at_ms IS NULL OR ended_at_ms >= ?2)
         ORDER BY epoch, started_revision, token
         LIMIT ?4",
    )?;
    let rows = stmt.query_map(params![election, q.from(), q.to(), q.sql_limit()], |row| {
        let started_at_ms: i64 = row.get(5)?;
        let ended_at_ms: Option<i64> = row.get(8)?;
        Ok(TermRow {
            election: row.get(0)?,
            token: row.get(1)?,
            holder: row.get(2)?,
            lease_id: row.get(3)?,
            layout: opt_tag(row, 4)?,
            started_at: format_ms(started_at_ms),
            ended_at: ended_at_ms.map(format_ms),
            started_at_ms,
            ended_at_ms,
            started_revision: row.get(6)?,
            ended_revision: row.get(9)?,
            end_cause: opt_tag(row, 10)?,
            from_snapshot: row.get(7)?,
            duration_seconds: ended_at_ms
                .map(|end| end.saturating_sub(started_at_ms) as f64 / 1000.0),
            duration_bounds_seconds: None,
            acting: Default::default(),
        })
    })?;
    Ok(rows.collect::<Result<_, _>>()?)
}

/// Events of `election` (and the gaps, which concern every election), or
/// of all elections, in the order they were recorded (revision order within
/// a timeline; a reset starts a new one at lower revisions).
pub(super) fn events(
    conn: &Connection,
    election: Option<&str>,
    q: &Query,
) -> Result<Vec<Event>, HistoryError> {
    let mut stmt;
    let rows = match election {
        Some(e) => {
            stmt = conn.prepare_cached(
                "SELECT id, json FROM events
                 WHERE election IN (?1, '', ?5) AND at_ms BETWEEN ?2 AND ?3
                 ORDER BY id LIMIT ?4",
            )?;
            let fleet = crate::events::fleet_name_of(e);
            stmt.query_map(params![e, q.from(), q.to(), q.sql_limit(), fleet], id_json)?
        }
        None => {
            stmt = conn.prepare_cached(
                "SELECT id, json FROM events WHERE at_ms BETWEEN ?1 AND ?2
                 ORDER BY id LIMIT ?3",
            )?;
            stmt.query_map(params![q.from(), q.to(), q.sql_limit()], id_json)?
        }
    };
    event_rows(rows)
}

/// The time of the earliest recorded event (one probe of `events_by_time`).
pub(super) fn first_event_ms(conn: &Connection) -> Result<Option<i64>, HistoryError> {
    Ok(conn
        .prepare_cached("SELECT MIN(at_ms) FROM events")?
        .query_row([], |r| r.get(0))?)
}

/// Rows of `(id, json)` from `events`, as events.
fn event_rows(
    rows: impl Iterator<Item = rusqlite::Result<(i64, String)>>,
) -> Result<Vec<Event>, HistoryError> {
    rows.map(|row| {
        let (id, json) = row?;
        serde_json::from_str(&json).map_err(|source| HistoryError::Json {
            what: format!("event row {id}"),
            source,
        })
    })
    .collect()
}

/// The acting records of `election` for tokens `lo..=hi`, and the marks of
/// replayed changes (gaps, resets, `unobserved`), recorded at or after
/// `from_ms`, in the order they were recorded (at most `limit`).
pub(super) fn acting(
    conn: &Connection,
    election: &str,
    (from_ms, to_ms, lo, hi): (i64, i64, i64, i64),
    limit: i64,
) -> Result<Vec<Event>, HistoryError> {
    let mut stmt = conn.prepare_cached(
        "SELECT id, json FROM events
         WHERE (election = ?1 AND at_ms BETWEEN ?2 AND ?6 AND type = 'acting'
                AND token BETWEEN ?3 AND ?4)
            OR (election IN ('', ?7) AND at_ms BETWEEN ?2 AND ?6
                AND type IN ('gap', 'reset', 'unobserved'))
         ORDER BY id LIMIT ?5",
    )?;
    let fleet = crate::events::fleet_name_of(election);
    let rows = stmt.query_map(
        params![election, from_ms, lo, hi, limit, to_ms, fleet],
        id_json,
    )?;
    event_rows(rows)
}

fn id_json(row: &Row<'_>) -> rusqlite::Result<(i64, String)> {
    Ok((row.get(0)?, row.get(1)?))
}

pub(super) fn refusals(
    conn: &Connection,
    election: Option<&str>,
    q: &Query,
) -> Result<Vec<RefusalRow>, HistoryError> {
    const COLUMNS: &str = "SELECT election, resource, token, reason, revision, at_ms,
                                  current_token, current_holder FROM refusals";
    let mut stmt;
    let rows = match election {
        Some(e) => {
            stmt = conn.prepare_cached(&format!(
                "{COLUMNS} WHERE election = ?1 AND at_ms BETWEEN ?2 AND ?3
                 ORDER BY id LIMIT ?4"
            ))?;
            stmt.query_map(params![e, q.from(), q.to(), q.sql_limit()], refusal_row)?
        }
        None => {
            stmt = conn.prepare_cached(&format!(
                "{COLUMNS} WHERE at_ms BETWEEN ?1 AND ?2 ORDER BY id LIMIT ?3"
            ))?;
            stmt.query_map(params![q.from(), q.to(), q.sql_limit()], refusal_row)?
        }
    };
    Ok(rows.collect::<Result<_, _>>()?)
}

fn refusal_row(row: &Row<'_>) -> rusqlite::Result<RefusalRow> {
    let at_ms = row.get(5)?;
    Ok(RefusalRow {
        election: row.get(0)?,
        resource: row.get(1)?,
        token: row.get(2)?,
        reason: tag(row, 3)?,
        revision: row.get(4)?,
        at_ms,
        at: format_ms(at_ms),
        current_token: row.get(6)?,
        current_holder: row.get(7)?,
    })
}

/// Per election, the terms that started at or after `from_ms` and were seen
/// starting (not found in a snapshot): one grouped query for every election.
/// At most `max` elections.
pub(super) fn changes_since(
    conn: &Connection,
    from_ms: i64,
    max: i64,
) -> Result<std::collections::HashMap<String, u64>, HistoryError> {
    let mut stmt = conn.prepare_cached(
        "SELECT election, COUNT(*) FROM terms
         WHERE started_at_ms >= ?1 AND from_snapshot = 0
         GROUP BY election LIMIT ?2",
    )?;
    let rows = stmt.query_map(params![from_ms, max], |row| {
        Ok((
            row.get::<_, String>(0)?,
            row.get::<_, i64>(1)?.max(0) as u64,
        ))
    })?;
    Ok(rows.collect::<Result<_, _>>()?)
}

/// How an enum is written in a text column: its serde name, so the
/// database, the JSON and the API agree (`"single"`, `"expired"`, ...).
pub(super) fn tag_of<T: Serialize>(value: &T) -> String {
    match serde_json::to_value(value) {
        Ok(serde_json::Value::String(s)) => s,
        _ => String::new(),
    }
}

pub(super) fn from_tag<T: DeserializeOwned>(s: &str) -> Option<T> {
    serde_json::from_value(serde_json::Value::String(s.to_owned())).ok()
}

fn tag<T: DeserializeOwned>(row: &Row<'_>, idx: usize) -> rusqlite::Result<T> {
    let s: String = row.get(idx)?;
    from_tag(&s).ok_or_else(|| bad_tag(idx, &s))
}

fn opt_tag<T: DeserializeOwned>(row: &Row<'_>, idx: usize) -> rusqlite::Result<Option<T>> {
    match row.get::<_, Option<String>>(idx)? {
        None => Ok(None),
        Some(s) => from_tag(&s).map(Some).ok_or_else(|| bad_tag(idx, &s)),
    }
}

fn bad_tag(idx: usize, s: &str) -> rusqlite::Error {
    rusqlite::Error::FromSqlConversionFailure(
        idx,
        Type::Text,
        format!("unknown value {s:?} in the history database").into(),
    )
}
