//! Reads: the pool of read-only sessions and every query of the history.

use crate::task::Locked;
use std::collections::HashMap;
use std::sync::Mutex;

use postgres::{Client, Row, Transaction};

use super::schema::check_version;
use super::{connect, redact, Conn};
use crate::events::cluster::{ClusterBaseline, ClusterEvent};
use crate::events::{Event, Witness, WITNESSES};
use crate::history::meta::scoped;
use crate::history::query::{OpenTerm, Query, RefusalRow, ResumePoint, TermRow};
use crate::history::schema::{CLUSTER_KEY, RESUME_KEY, WATCHED_KEY};
use crate::history::time::format_ms;
use crate::history::window::{Activity, MAX_ACTIVE};
use crate::history::HistoryError;

/// Idle read connections kept for reuse.
const MAX_IDLE: usize = 4;

/// Read connections to one database, shared by clones of a `Reader`.
pub(in crate::history) struct PgPool {
    url: String,
    idle: Mutex<Vec<Conn>>,
}

impl PgPool {
    /// Connects once and checks the schema.
    pub(in crate::history) fn open(url: &str) -> Result<PgPool, HistoryError> {
        let mut conn = connect(url, "SET default_transaction_read_only = on")?;
        check_version(conn.get()?, url)?;
        Ok(PgPool {
            url: url.to_owned(),
            idle: Mutex::new(vec![conn]),
        })
    }

    pub(in crate::history) fn display(&self) -> String {
        redact(&self.url)
    }

    /// `f` on an idle connection or a new one. An idle one the server
    /// closed meanwhile (a restart, a failover, a terminated backend) is
    /// only found closed by using it: then `f` runs again once on a new
    /// one (every read is read-only), so a restart costs no failed read.
    pub(in crate::history) fn with<T>(
        &self,
        mut f: impl FnMut(&mut Client) -> Result<T, HistoryError>,
    ) -> Result<T, HistoryError> {
        let idle = || self.idle.locked();
        let fresh = || connect(&self.url, "SET default_transaction_read_only = on");
        let pooled = idle().pop();
        let was_idle = pooled.is_some();
        let mut conn = match pooled {
            Some(c) => c,
            None => fresh()?,
        };
        let mut result = f(conn.get()?);
        let closed = |c: &Conn| c.0.as_ref().is_none_or(|c| c.is_closed());
        if result.is_err() && was_idle && closed(&conn) {
            conn = fresh()?;
            result = f(conn.get()?);
        }
        // A broken connection is not kept.
        if !closed(&conn) {
            let mut idle = idle();
            if idle.len() < MAX_IDLE {
                idle.push(conn);
            }
        }
        result.map_err(|e| match e {
            HistoryError::Postgres { error, .. } => HistoryError::Postgres {
                db: redact(&self.url),
                error,
            },
            e => e,
        })
    }
}

pub(super) fn snapshot(client: &mut Client) -> Result<Transaction<'_>, HistoryError> {
    Ok(client
        .build_transaction()
        .isolation_level(postgres::IsolationLevel::RepeatableRead)
        .read_only(true)
        .start()?)
}

fn state(tx: &mut Transaction<'_>, key: &str) -> Result<Option<i64>, HistoryError> {
    Ok(tx
        .query_opt("SELECT value FROM watcher_state WHERE key = $1", &[&key])?
        .map(|r| r.try_get(0))
        .transpose()?)
}

/// See `Reader::watched_until`.
/// See `Reader::scopes`.
pub(in crate::history) fn scopes(client: &mut Client) -> Result<Vec<Option<String>>, HistoryError> {
    client
        .query(crate::history::meta::SCOPES_SQL, &[])?
        .iter()
        .map(|r| {
            Ok(crate::history::meta::scope_of_key(
                &r.try_get::<_, String>(0)?,
            ))
        })
        .collect()
}

pub(in crate::history) fn watched_until(
    client: &mut Client,
    scope: Option<&str>,
) -> Result<Option<i64>, HistoryError> {
    let mut tx = snapshot(client)?;
    let heartbeat = state(&mut tx, &scoped(WATCHED_KEY, scope))?;
    if scope.is_some() {
        // A named cluster's every commit raised its own key: no arrival
        // of its is later.
        tx.commit()?;
        return Ok(heartbeat);
    }
    let arrival = newest_arrival(&mut tx, scope)?;
    tx.commit()?;
    Ok(heartbeat.max(arrival))
}

/// The newest arrival stored (of the cluster `scope` names, by its names).
fn newest_arrival(
    tx: &mut Transaction<'_>,
    scope: Option<&str>,
) -> Result<Option<i64>, HistoryError> {
    Ok(match scope {
        None => tx
            .query_one("SELECT max(at_ms) FROM events", &[])?
            .try_get(0)?,
        Some(c) => tx
            .query_one(
                // By prefix, not by a range: the column's collation need
                // not order names bytewise (a range could be another set).
                "SELECT max(at_ms) FROM events WHERE left(election, length($1)) = $1",
                &[&format!("{c}/")],
            )?
            .try_get(0)?,
    })
}

/// See `Reader::resume_point_of`: the cluster's own revision, cluster id
/// and open terms (by the names its watcher gives them).
pub(in crate::history) fn resume_point(
    client: &mut Client,
    scope: Option<&str>,
) -> Result<Option<ResumePoint>, HistoryError> {
    let mut tx = snapshot(client)?;
    let Some(revision) = state(&mut tx, &scoped(RESUME_KEY, scope))? else {
        return Ok(None);
    };
    let mut open_terms = open_terms(&mut tx)?;
    if let Some(cluster) = scope {
        let own = crate::events::qualify(cluster, "");
        open_terms.retain_mut(|t| match t.election.strip_prefix(&own) {
            Some(name) => {
                t.election = name.to_owned();
                true
            }
            None => false,
        });
    }
    let cluster_id = state(&mut tx, &scoped(CLUSTER_KEY, scope))?.map(|c| c as u64);
    let live_at_ms = newest_arrival(&mut tx, scope)?;
    let witnesses = witnesses(&mut tx, revision, scope)?;
    tx.commit()?;
    Ok(Some(ResumePoint {
        revision,
        open_terms,
        cluster_id,
        live_at_ms,
        witnesses,
    }))
}

/// [`ResumePoint::witnesses`]: the newest terms of the current timeline
/// whose token is at or below `revision`.
fn witnesses(
    tx: &mut Transaction<'_>,
    revision: i64,
    scope: Option<&str>,
) -> Result<Vec<Witness>, HistoryError> {
    let own = scope
        .map(|c| crate::events::qualify(c, ""))
        .unwrap_or_default();
    let rows = tx.query(
        "SELECT election, token, lease_id FROM terms
         WHERE epoch = COALESCE((SELECT value FROM watcher_state WHERE key = 'epoch'), 0)
           AND token <= $1 AND left(election, length($3)) = $3
           AND NOT from_snapshot AND layout IS NOT NULL
         ORDER BY token DESC LIMIT $2",
        &[&revision, &(WITNESSES as i64), &own],
    )?;
    // By the names the cluster's watcher gives them (`CLUSTER/` taken off).
    rows.iter()
        .map(|r| {
            let election: String = r.try_get(0)?;
            Ok(Witness {
                election: election.get(own.len()..).unwrap_or_default().to_owned(),
                token: r.try_get(1)?,
                lease_id: r.try_get(2)?,
            })
        })
        .collect()
}

/// The columns of an open term and the timeline condition (the current
/// epoch); `$1` and on are left to the caller.
pub(super) const OPEN_TERM: &str =
    "SELECT election, token, holder, lease_id, layout, started_revision, started_at_ms
     FROM terms WHERE ended_at_ms IS NULL
       AND epoch = COALESCE((SELECT value FROM watcher_state WHERE key = 'epoch'), 0)";

pub(super) fn open_term(row: &Row) -> Result<OpenTerm, HistoryError> {
    Ok(OpenTerm {
        election: row.try_get(0)?,
        token: row.try_get(1)?,
        holder: row.try_get(2)?,
        lease_id: row.try_get(3)?,
        layout: tag(row, 4)?,
        started_revision: row.try_get(5)?,
        started_at_ms: row.try_get(6)?,
    })
}

pub(super) fn open_terms(tx: &mut Transaction<'_>) -> Result<Vec<OpenTerm>, HistoryError> {
    let rows = tx.query(
        &format!("{OPEN_TERM} ORDER BY election COLLATE \"C\", started_revision, token"),
        &[],
    )?;
    rows.iter().map(open_term).collect()
}

pub(in crate::history) fn terms(
    client: &mut Client,
    election: &str,
    q: &Query,
) -> Result<Vec<TermRow>, HistoryError> {
    let rows = client.query(
        "SELECT election, token, holder, lease_id, layout, started_at_ms, started_revision,
                from_snapshot, ended_at_ms, ended_revision, end_cause
         FROM terms
         WHERE election = $1 AND started_at_ms <= $3
           AND (ended_at_ms IS NULL OR ended_at_ms >= $2)
         ORDER BY epoch, started_revision, token
         LIMIT $4",
        &[&election, &from(q), &to(q), &limit(q)],
    )?;
    rows.iter()
        .map(|row| {
            let started_at_ms: i64 = row.try_get(5)?;
            let ended_at_ms: Option<i64> = row.try_get(8)?;
            Ok(TermRow {
                election: row.try_get(0)?,
                token: row.try_get(1)?,
                holder: row.try_get(2)?,
                lease_id: row.try_get(3)?,
                layout: opt_tag(row, 4)?,
                started_at: format_ms(started_at_ms),
                ended_at: ended_at_ms.map(format_ms),
                started_at_ms,
                ended_at_ms,
                started_revision: row.try_get(6)?,
                ended_revision: row.try_get(9)?,
                end_cause: opt_tag(row, 10)?,
                from_snapshot: row.try_get(7)?,
                duration_seconds: ended_at_ms
                    .map(|end| end.saturating_sub(started_at_ms) as f64 / 1000.0),
                duration_bounds_seconds: None,
                acting: Default::default(),
            })
        })
        .collect()
}

/// See `query::acting`.
pub(in crate::history) fn acting(
    client: &mut Client,
    election: &str,
    (from_ms, to_ms, lo, hi): (i64, i64, i64, i64),
    limit: i64,
) -> Result<Vec<Event>, HistoryError> {
    let rows = client.query(
        "SELECT id, json FROM events
         WHERE (election = $1 AND at_ms BETWEEN $2 AND $6 AND type = 'acting'
                AND token BETWEEN $3 AND $4)
            OR (election IN ('', $7) AND at_ms BETWEEN $2 AND $6
                AND type IN ('gap', 'reset', 'unobserved'))
         ORDER BY id LIMIT $5",
        &[
            &election,
            &from_ms,
            &lo,
            &hi,
            &limit,
            &to_ms,
            &crate::events::fleet_name_of(election),
        ],
    )?;
    event_rows(&rows)
}

/// Rows of `(id, json)` from `events`, as events.
fn event_rows(rows: &[postgres::Row]) -> Result<Vec<Event>, HistoryError> {
    rows.iter()
        .map(|row| {
            let id: i64 = row.try_get(0)?;
            let json: String = row.try_get(1)?;
            serde_json::from_str(&json).map_err(|source| HistoryError::Json {
                what: format!("event row {id}"),
                source,
            })
        })
        .collect()
}

pub(in crate::history) fn events(
    client: &mut Client,
    election: Option<&str>,
    q: &Query,
) -> Result<Vec<Event>, HistoryError> {
    let rows = match election {
        Some(e) => client.query(
            "SELECT id, json FROM events
             WHERE election IN ($1, '', $5) AND at_ms BETWEEN $2 AND $3
             ORDER BY id LIMIT $4",
            &[
                &e,
                &from(q),
                &to(q),
                &limit(q),
                &crate::events::fleet_name_of(e),
            ],
        )?,
        None => client.query(
            "SELECT id, json FROM events WHERE at_ms BETWEEN $1 AND $2 ORDER BY id LIMIT $3",
            &[&from(q), &to(q), &limit(q)],
        )?,
    };
    event_rows(&rows)
}

pub(in crate::history) fn refusals(
    client: &mut Client,
    election: Option<&str>,
    q: &Query,
) -> Result<Vec<RefusalRow>, HistoryError> {
    const COLUMNS: &str = "SELECT election, resource, token, reason, revision, at_ms,
                                  current_token, current_holder FROM refusals";
    let rows = match election {
        Some(e) => client.query(
            &format!(
                "{COLUMNS} WHERE election = $1 AND at_ms BETWEEN $2 AND $3 ORDER BY id LIMIT $4"
            ),
            &[&e, &from(q), &to(q), &limit(q)],
        )?,
        None => client.query(
            &format!("{COLUMNS} WHERE at_ms BETWEEN $1 AND $2 ORDER BY id LIMIT $3"),
            &[&from(q), &to(q), &limit(q)],
        )?,
    };
    rows.iter()
        .map(|row| {
            let at_ms: i64 = row.try_get(5)?;
            Ok(RefusalRow {
                election: row.try_get(0)?,
                resource: row.try_get(1)?,
                token: row.try_get(2)?,
                reason: tag(row, 3)?,
                revision: row.try_get(4)?,
                at_ms,
                at: format_ms(at_ms),
                current_token: row.try_get(6)?,
                current_holder: row.try_get(7)?,
            })
        })
        .collect()
}

/// Per election, terms seen starting at or after `from_ms` (at most `max`
/// elections).
pub(in crate::history) fn changes_since(
    client: &mut Client,
    from_ms: i64,
    max: i64,
) -> Result<HashMap<String, u64>, HistoryError> {
    let rows = client.query(
        "SELECT election, COUNT(*) FROM terms
         WHERE started_at_ms >= $1 AND NOT from_snapshot
         GROUP BY election LIMIT $2",
        &[&from_ms, &max],
    )?;
    rows.iter()
        .map(|r| Ok((r.try_get(0)?, r.try_get::<_, i64>(1)?.max(0) as u64)))
        .collect()
}

/// The time of the earliest recorded event (one index probe).
pub(in crate::history) fn first_event_ms(client: &mut Client) -> Result<Option<i64>, HistoryError> {
    let row = client.query_one("SELECT MIN(at_ms) FROM events", &[])?;
    Ok(row.try_get(0)?)
}

pub(in crate::history) fn activity(
    client: &mut Client,
    q: &Query,
) -> Result<Vec<Activity>, HistoryError> {
    let (from, to) = (from(q), to(q));
    let mut out: std::collections::BTreeMap<String, Activity> = Default::default();
    let max = MAX_ACTIVE as i64;
    for r in client.query(
        "SELECT election, COUNT(*), COUNT(*) FILTER (WHERE started_at_ms >= $1) FROM terms
         WHERE started_at_ms <= $2 AND (ended_at_ms IS NULL OR ended_at_ms >= $1)
         GROUP BY election LIMIT $3",
        &[&from, &to, &max],
    )? {
        let e: String = r.try_get(0)?;
        let a = out.entry(e.clone()).or_insert_with(|| Activity {
            election: e,
            ..Activity::default()
        });
        a.terms = r.try_get::<_, i64>(1)?.max(0) as u64;
        a.started = r.try_get::<_, i64>(2)?.max(0) as u64;
    }
    for r in client.query(
        "SELECT election, COUNT(*) FROM refusals WHERE at_ms BETWEEN $1 AND $2
         GROUP BY election LIMIT $3",
        &[&from, &to, &max],
    )? {
        let e: String = r.try_get(0)?;
        let a = out.entry(e.clone()).or_insert_with(|| Activity {
            election: e,
            ..Activity::default()
        });
        a.refusals = r.try_get::<_, i64>(1)?.max(0) as u64;
    }
    Ok(out.into_values().collect())
}

fn parse_cluster(json: &str) -> Result<ClusterEvent, HistoryError> {
    serde_json::from_str(json).map_err(|source| HistoryError::Json {
        what: "cluster_events.json".into(),
        source,
    })
}

pub(in crate::history) fn cluster_events(
    client: &mut Client,
    q: &Query,
) -> Result<Vec<ClusterEvent>, HistoryError> {
    client
        .query(
            "SELECT json FROM cluster_events WHERE at_ms >= $1 AND at_ms <= $2
             ORDER BY at_ms, id LIMIT $3",
            &[&from(q), &to(q), &limit(q)],
        )?
        .iter()
        .map(|r| parse_cluster(&r.try_get::<_, String>(0)?))
        .collect()
}

/// See `Reader::cluster_baseline_of`: a named cluster's own rows (a busy
/// cluster's must not push a quiet one's out of the window); every row for
/// the one unnamed cluster.
pub(in crate::history) fn cluster_baseline(
    client: &mut Client,
    scope: Option<&str>,
) -> Result<ClusterBaseline, HistoryError> {
    let own = "($1::text IS NULL OR (json::jsonb ->> 'cluster') = $1::text)";
    let mut events: Vec<ClusterEvent> = client
        .query(
            &format!(
                "SELECT json FROM (SELECT id, json FROM cluster_events
                 WHERE type IN ('member_added', 'member_removed', 'alarm_raised', 'alarm_cleared', 'reset')
                   AND {own}
                 ORDER BY id DESC LIMIT 10000) AS recent ORDER BY id"
            ),
            &[&scope],
        )?
        .iter()
        .map(|r| parse_cluster(&r.try_get::<_, String>(0)?))
        .collect::<Result<_, _>>()?;
    if let Some(r) = client.query_opt(
        &format!(
            "SELECT json FROM cluster_events WHERE type = 'leader_changed' AND {own}
             ORDER BY id DESC LIMIT 1"
        ),
        &[&scope],
    )? {
        events.push(parse_cluster(&r.try_get::<_, String>(0)?)?);
    }
    Ok(ClusterBaseline::fold(&events))
}

/// See `Reader::writer_status_of`: the cluster's resume revision and
/// heartbeat, and its fence row (`""`: the unnamed cluster's).
pub(in crate::history) fn writer_status(
    client: &mut Client,
    scope: Option<&str>,
) -> Result<crate::history::WriterStatus, HistoryError> {
    let mut tx = snapshot(client)?;
    let revision = state(&mut tx, &scoped(RESUME_KEY, scope))?;
    let watched_at_ms = state(&mut tx, &scoped(WATCHED_KEY, scope))?;
    let row = tx.query_opt(
        "SELECT token, holder, last_error, last_error_holder, last_error_at_ms, since_ms
         FROM history_writer WHERE cluster = $1",
        &[&scope.unwrap_or("")],
    )?;
    tx.commit()?;
    let mut status = crate::history::WriterStatus {
        revision,
        watched_at_ms,
        ..Default::default()
    };
    let Some(row) = row else {
        return Ok(status);
    };
    let token: i64 = row.try_get(0)?;
    let error: Option<String> = row.try_get(2)?;
    let error_holder: Option<String> = row.try_get(3)?;
    let error_at: Option<i64> = row.try_get(4)?;
    if token > 0 {
        status.writer = Some((token, row.try_get(1)?));
        status.writer_since_ms = Some(row.try_get(5)?);
    }
    if let (Some(error), Some(at_ms)) = (error, error_at) {
        status.last_error = Some(crate::history::WriterError {
            holder: error_holder.unwrap_or_default(),
            at_ms,
            error,
        });
    }
    Ok(status)
}

/// The fence row of `cluster` (`""`: the unnamed one): the highest writer
/// token that has written, and its holder (`None` before any writer).
pub(in crate::history) fn writer_fence(
    client: &mut Client,
    cluster: &str,
) -> Result<Option<(i64, String)>, HistoryError> {
    let Some(row) = client.query_opt(
        "SELECT token, holder FROM history_writer WHERE cluster = $1",
        &[&cluster],
    )?
    else {
        return Ok(None);
    };
    let token: i64 = row.try_get(0)?;
    Ok((token > 0).then_some((token, row.try_get(1)?)))
}

fn from(q: &Query) -> i64 {
    q.from_ms.unwrap_or(i64::MIN)
}

fn to(q: &Query) -> i64 {
    q.to_ms.unwrap_or(i64::MAX)
}

fn limit(q: &Query) -> i64 {
    q.effective_limit() as i64
}

fn tag<T: serde::de::DeserializeOwned>(row: &Row, idx: usize) -> Result<T, HistoryError> {
    let s: String = row.try_get(idx)?;
    crate::history::query::from_tag(&s).ok_or_else(|| bad_tag(&s))
}

fn opt_tag<T: serde::de::DeserializeOwned>(
    row: &Row,
    idx: usize,
) -> Result<Option<T>, HistoryError> {
    match row.try_get::<_, Option<String>>(idx)? {
        None => Ok(None),
        Some(s) => crate::history::query::from_tag(&s)
            .map(Some)
            .ok_or_else(|| bad_tag(&s)),
    }
}

fn bad_tag(s: &str) -> HistoryError {
    HistoryError::Schema {
        path: "postgres".into(),
        reason: format!("unknown value {s:?} in the history database"),
    }
}
