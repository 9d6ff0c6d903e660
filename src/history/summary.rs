//! The `elections` table (SQLite schema 4, PostgreSQL schema 3):
//! one row per election the history knows, with its terms and refusals
//! counted and its last event's time. The writer keeps it in the very
//! transaction that stores the events (and retention in the one that
//! deletes them), so listing, counting and paging elections, and one
//! election's summary, read this table, never every row of the others.
//! An election is known while any of `events`, `terms` or `refusals` has a
//! row of it.
//!
//! This file: the SQLite statements and what both backends share (the
//! per-transaction [`Deltas`], the page types). PostgreSQL's are in
//! `pg/summary.rs`.

use std::collections::HashMap;

use rusqlite::{params, Connection, OptionalExtension, Transaction};

use super::query::{open_terms_of, open_terms_within, ElectionSummary};
use super::time::format_ms;
use super::HistoryError;

/// What one transaction adds to one election's row.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub(super) struct Delta {
    pub terms: i64,
    pub refusals: i64,
    pub last_event_ms: Option<i64>,
}

/// What one transaction adds to the `elections` table, per election.
#[derive(Debug, Default)]
pub(super) struct Deltas(HashMap<String, Delta>);

impl Deltas {
    fn of(&mut self, election: &str) -> &mut Delta {
        self.0.entry(election.to_owned()).or_default()
    }

    /// An event of `election` stored (fleet-wide events, with an empty
    /// name, belong to no election).
    pub fn event(&mut self, election: &str, at_ms: i64) {
        if crate::events::is_fleet_name(election) {
            return;
        }
        let d = self.of(election);
        d.last_event_ms = Some(d.last_event_ms.map_or(at_ms, |l| l.max(at_ms)));
    }

    /// `n` term rows of `election` inserted.
    pub fn terms(&mut self, election: &str, n: i64) {
        if n != 0 {
            self.of(election).terms += n;
        }
    }

    /// A refusal row of `election` inserted.
    pub fn refusal(&mut self, election: &str) {
        self.of(election).refusals += 1;
    }

    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }

    /// Every election's delta, the table emptied.
    pub fn drain(&mut self) -> impl Iterator<Item = (String, Delta)> + '_ {
        self.0.drain()
    }
}

/// Adds `deltas` to the table (creating rows), inside the writer's
/// transaction.
pub(super) fn write(tx: &Transaction<'_>, deltas: &mut Deltas) -> Result<(), HistoryError> {
    let mut stmt = tx.prepare_cached(
        "INSERT INTO elections (election, terms, refusals, last_event_ms)
         VALUES (?1, ?2, ?3, ?4)
         ON CONFLICT (election) DO UPDATE SET
             terms = terms + excluded.terms,
             refusals = refusals + excluded.refusals,
             last_event_ms = COALESCE(MAX(last_event_ms, excluded.last_event_ms),
                                      last_event_ms, excluded.last_event_ms)",
    )?;
    for (election, d) in deltas.drain() {
        stmt.execute(params![election, d.terms, d.refusals, d.last_event_ms])?;
    }
    Ok(())
}

/// Retention on SQLite: deletes what is older than `cutoff` and keeps the
/// `elections` table in step, in one transaction. Returns `[events,
/// refusals, terms]` deleted.
pub(super) fn prune(conn: &mut Connection, cutoff: i64) -> Result<[usize; 3], HistoryError> {
    let tx = conn.transaction()?;
    let grouped = |sql: &str| -> Result<Vec<(String, i64)>, HistoryError> {
        let mut stmt = tx.prepare(sql)?;
        let rows = stmt.query_map([cutoff], |r| Ok((r.get(0)?, r.get(1)?)))?;
        Ok(rows.collect::<Result<_, _>>()?)
    };
    let gone_terms = grouped(
        "SELECT election, COUNT(*) FROM terms
         WHERE ended_at_ms IS NOT NULL AND ended_at_ms < ?1 GROUP BY election",
    )?;
    let gone_refusals =
        grouped("SELECT election, COUNT(*) FROM refusals WHERE at_ms < ?1 GROUP BY election")?;
    let events = tx.execute("DELETE FROM events WHERE at_ms < ?1", [cutoff])?;
    let refusals = tx.execute("DELETE FROM refusals WHERE at_ms < ?1", [cutoff])?;
    tx.execute("DELETE FROM cluster_events WHERE at_ms < ?1", [cutoff])?;
    let terms = tx.execute(
        "DELETE FROM terms WHERE ended_at_ms IS NOT NULL AND ended_at_ms < ?1",
        [cutoff],
    )?;
    {
        let mut t = tx.prepare("UPDATE elections SET terms = terms - ?2 WHERE election = ?1")?;
        for (e, n) in &gone_terms {
            t.execute(params![e, n])?;
        }
        let mut r =
            tx.prepare("UPDATE elections SET refusals = refusals - ?2 WHERE election = ?1")?;
        for (e, n) in &gone_refusals {
            r.execute(params![e, n])?;
        }
    }
    // The newest event older than the cutoff: every event of it is gone.
    tx.execute(
        "UPDATE elections SET last_event_ms = NULL WHERE last_event_ms < ?1",
        [cutoff],
    )?;
    tx.execute(
        "DELETE FROM elections WHERE terms <= 0 AND refusals <= 0 AND last_event_ms IS NULL",
        [],
    )?;
    tx.commit()?;
    Ok([events, refusals, terms])
}

/// Where a page of elections starts (by name).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PageFrom<'a> {
    /// After this many elections (the overview's `page`).
    Offset(usize),
    /// After this name (a cursor: an election added or removed between two
    /// pages moves nothing else).
    After(&'a str),
}

/// One page of elections, by name, and how many the history knows.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ElectionsPage {
    pub total: u64,
    pub elections: Vec<ElectionSummary>,
}

/// Counts of some elections (a page's) since a time.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct RecentCounts {
    /// Terms seen starting (not found in a snapshot).
    pub changes: HashMap<String, u64>,
    /// Fence refusals.
    pub refusals: HashMap<String, u64>,
}

fn summary_row(row: &rusqlite::Row<'_>) -> rusqlite::Result<ElectionSummary> {
    let last_event_ms: Option<i64> = row.get(3)?;
    Ok(ElectionSummary {
        election: row.get(0)?,
        current: None,
        terms: row.get::<_, i64>(1)?.max(0) as u64,
        refusals: row.get::<_, i64>(2)?.max(0) as u64,
        last_event_ms,
        last_event_at: last_event_ms.map(format_ms),
    })
}

const COLUMNS: &str = "SELECT election, terms, refusals, last_event_ms FROM elections";

/// Every election, by name, with its open term.
pub(super) fn elections(conn: &mut Connection) -> Result<Vec<ElectionSummary>, HistoryError> {
    let tx = conn.transaction()?;
    let mut summaries: Vec<ElectionSummary> = {
        let mut stmt = tx.prepare_cached(&format!("{COLUMNS} ORDER BY election"))?;
        let rows = stmt.query_map([], summary_row)?;
        rows.collect::<Result<_, _>>()?
    };
    attach_open_terms(&mut summaries, super::query::open_terms(&tx)?);
    tx.finish()?;
    Ok(summaries)
}

/// Open terms come ordered by election then start: the last one wins.
pub(super) fn attach_open_terms(
    summaries: &mut [ElectionSummary],
    open: Vec<super::query::OpenTerm>,
) {
    for term in open {
        if let Ok(i) = summaries.binary_search_by(|s| s.election.as_str().cmp(&term.election)) {
            summaries[i].current = Some(term);
        }
    }
}

/// One election's summary, `None` when the history does not know it.
pub(super) fn election(
    conn: &mut Connection,
    name: &str,
) -> Result<Option<ElectionSummary>, HistoryError> {
    let tx = conn.transaction()?;
    let summary = tx
        .prepare_cached(&format!("{COLUMNS} WHERE election = ?1"))?
        .query_row([name], summary_row)
        .optional()?;
    let summary = match summary {
        Some(mut s) => {
            s.current = open_terms_of(&tx, name)?.pop();
            Some(s)
        }
        None => None,
    };
    tx.finish()?;
    Ok(summary)
}

/// A page of elections by name (with their open terms) and the total.
pub(super) fn page(
    conn: &mut Connection,
    from: PageFrom<'_>,
    limit: usize,
) -> Result<ElectionsPage, HistoryError> {
    let tx = conn.transaction()?;
    let total: i64 = tx.query_row("SELECT COUNT(*) FROM elections", [], |r| r.get(0))?;
    let limit = limit.min(i64::MAX as usize) as i64;
    let mut elections: Vec<ElectionSummary> = match from {
        PageFrom::Offset(skip) => {
            let mut stmt =
                tx.prepare_cached(&format!("{COLUMNS} ORDER BY election LIMIT ?1 OFFSET ?2"))?;
            let rows = stmt.query_map(
                params![limit, skip.min(i64::MAX as usize) as i64],
                summary_row,
            )?;
            rows.collect::<Result<_, _>>()?
        }
        PageFrom::After(name) => {
            let mut stmt = tx.prepare_cached(&format!(
                "{COLUMNS} WHERE election > ?1 ORDER BY election LIMIT ?2"
            ))?;
            let rows = stmt.query_map(params![name, limit], summary_row)?;
            rows.collect::<Result<_, _>>()?
        }
    };
    if let (Some(first), Some(last)) = (elections.first(), elections.last()) {
        let open = open_terms_within(&tx, &first.election, &last.election)?;
        attach_open_terms(&mut elections, open);
    }
    tx.finish()?;
    Ok(ElectionsPage {
        total: total.max(0) as u64,
        elections,
    })
}

/// Elections with an open term in the current timeline.
pub(super) fn leading(conn: &mut Connection) -> Result<u64, HistoryError> {
    let n: i64 = conn.query_row(
        "SELECT COUNT(DISTINCT election) FROM terms WHERE ended_at_ms IS NULL
           AND epoch = COALESCE((SELECT value FROM watcher_state WHERE key = 'epoch'), 0)",
        [],
        |r| r.get(0),
    )?;
    Ok(n.max(0) as u64)
}

/// Changes and refusals since `from_ms` of the elections named
/// `first..=last`.
pub(super) fn recent_between(
    conn: &mut Connection,
    from_ms: i64,
    first: &str,
    last: &str,
) -> Result<RecentCounts, HistoryError> {
    let grouped = |sql: &str| -> Result<HashMap<String, u64>, HistoryError> {
        let mut stmt = conn.prepare_cached(sql)?;
        let rows = stmt.query_map(params![from_ms, first, last], |r| {
            Ok((r.get::<_, String>(0)?, r.get::<_, i64>(1)?.max(0) as u64))
        })?;
        Ok(rows.collect::<Result<_, _>>()?)
    };
    Ok(RecentCounts {
        changes: grouped(
            "SELECT election, COUNT(*) FROM terms
             WHERE election BETWEEN ?2 AND ?3 AND started_at_ms >= ?1 AND from_snapshot = 0
             GROUP BY election",
        )?,
        refusals: grouped(
            "SELECT election, COUNT(*) FROM refusals
             WHERE election BETWEEN ?2 AND ?3 AND at_ms >= ?1 GROUP BY election",
        )?,
    })
}

/// Refusals since `from_ms`, per election (one grouped query).
pub(super) fn refusals_since(
    conn: &mut Connection,
    from_ms: i64,
) -> Result<HashMap<String, u64>, HistoryError> {
    let mut stmt = conn.prepare_cached(
        "SELECT election, COUNT(*) FROM refusals WHERE at_ms >= ?1 GROUP BY election",
    )?;
    let rows = stmt.query_map([from_ms], |r| {
        Ok((r.get::<_, String>(0)?, r.get::<_, i64>(1)?.max(0) as u64))
    })?;
    Ok(rows.collect::<Result<_, _>>()?)
}
