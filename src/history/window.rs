//! Cross-election reads for the incident view: which elections were active
//! in a window, and how much.

use std::collections::BTreeMap;

use rusqlite::{params, Connection};

use super::query::Query;
use super::HistoryError;

/// How active one election was in a window.
#[derive(Debug, Clone, Default, PartialEq, Eq, serde::Serialize)]
pub struct Activity {
    pub election: String,
    /// Terms overlapping the window.
    pub terms: u64,
    /// Terms that started inside the window.
    pub started: u64,
    pub refusals: u64,
}

impl Activity {
    /// The busiest go on top: changes, then refusals, then terms.
    pub fn busyness(&self) -> (u64, u64, u64) {
        (self.started, self.refusals, self.terms)
    }
}

/// At most this many elections are counted per window read.
pub const MAX_ACTIVE: usize = 100_000;

pub(super) fn activity(conn: &Connection, q: &Query) -> Result<Vec<Activity>, HistoryError> {
    let (from, to) = (q.from_ms.unwrap_or(i64::MIN), q.to_ms.unwrap_or(i64::MAX));
    let mut out: BTreeMap<String, Activity> = BTreeMap::new();
    let mut stmt = conn.prepare_cached(
        "SELECT election, COUNT(*), SUM(started_at_ms >= ?1) FROM terms
         WHERE started_at_ms <= ?2 AND (ended_at_ms IS NULL OR ended_at_ms >= ?1)
         GROUP BY election LIMIT ?3",
    )?;
    let rows = stmt.query_map(params![from, to, MAX_ACTIVE as i64], |r| {
        Ok((
            r.get::<_, String>(0)?,
            r.get::<_, i64>(1)?,
            r.get::<_, i64>(2)?,
        ))
    })?;
    for row in rows {
        let (e, n, started) = row?;
        let a = out.entry(e.clone()).or_insert_with(|| Activity {
            election: e,
            ..Activity::default()
        });
        a.terms = n.max(0) as u64;
        a.started = started.max(0) as u64;
    }
    let mut stmt = conn.prepare_cached(
        "SELECT election, COUNT(*) FROM refusals WHERE at_ms BETWEEN ?1 AND ?2
         GROUP BY election LIMIT ?3",
    )?;
    let rows = stmt.query_map(params![from, to, MAX_ACTIVE as i64], |r| {
        Ok((r.get::<_, String>(0)?, r.get::<_, i64>(1)?))
    })?;
    for row in rows {
        let (e, n) = row?;
        let a = out.entry(e.clone()).or_insert_with(|| Activity {
            election: e,
            ..Activity::default()
        });
        a.refusals = n.max(0) as u64;
    }
    Ok(out.into_values().collect())
}
