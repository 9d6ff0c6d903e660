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

use std::collections::{HashMap, HashSet};

use rusqlite::{params, Connection, OptionalExtension, Transaction};

use super::pending::{Folded, Overlay, Snapshot};
use super::query::{open_terms_of, open_terms_within, ElectionSummary, OpenTerm};
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
        queued_end_ms: None,
    })
}

const COLUMNS: &str = "SELECT election, terms, refusals, last_event_ms FROM elections";

/// Runs `read` in one read transaction, with the writer's batches in
/// `queued` that it does not hold: the rows and the overlay are one moment.
fn overlaid<T>(
    conn: &mut Connection,
    queued: &Snapshot,
    read: impl FnOnce(&Transaction<'_>, &Overlay<'_>) -> Result<T, HistoryError>,
) -> Result<T, HistoryError> {
    let tx = conn.transaction()?;
    let out = read(&tx, &Overlay::within(&tx, queued)?)?;
    tx.finish()?;
    Ok(out)
}

/// Every election, by name, with its open term; `queued`, the writer's
/// batches beyond the commits, overlaid.
pub(super) fn elections(
    conn: &mut Connection,
    queued: &Snapshot,
) -> Result<Vec<ElectionSummary>, HistoryError> {
    overlaid(conn, queued, |tx, overlay| {
        let mut summaries: Vec<ElectionSummary> = {
            let mut stmt = tx.prepare_cached(&format!("{COLUMNS} ORDER BY election"))?;
            let rows = stmt.query_map([], summary_row)?;
            rows.collect::<Result<_, _>>()?
        };
        attach_overlaid(&mut summaries, super::query::open_terms(tx)?, overlay)?;
        Ok(summaries)
    })
}

/// Open terms come ordered by election then start: the last one wins.
pub(super) fn attach_open_terms(summaries: &mut [ElectionSummary], open: Vec<OpenTerm>) {
    for term in open {
        if let Ok(i) = summaries.binary_search_by(|s| s.election.as_str().cmp(&term.election)) {
            summaries[i].current = Some(term);
        }
    }
}

/// [`attach_open_terms`] with `overlay`'s queued batches applied to the
/// summaries they change (`summaries` by name; `open` by election, then
/// start).
fn attach_overlaid(
    summaries: &mut [ElectionSummary],
    open: Vec<OpenTerm>,
    overlay: &Overlay<'_>,
) -> Result<(), HistoryError> {
    if overlay.is_empty() {
        attach_open_terms(summaries, open);
        return Ok(());
    }
    let mut open_of: Vec<Vec<OpenTerm>> = summaries.iter().map(|_| Vec::new()).collect();
    for term in open {
        if let Ok(i) = summaries.binary_search_by(|s| s.election.as_str().cmp(&term.election)) {
            open_of[i].push(term);
        }
    }
    for (summary, open) in summaries.iter_mut().zip(open_of) {
        if overlay.touches(&summary.election) {
            overlay.apply(summary, open)?;
        } else {
            summary.current = open.into_iter().last();
        }
    }
    Ok(())
}

/// One election's summary, `None` when the history does not know it;
/// `queued` overlaid.
pub(super) fn election(
    conn: &mut Connection,
    name: &str,
    queued: &Snapshot,
) -> Result<Option<ElectionSummary>, HistoryError> {
    overlaid(conn, queued, |tx, overlay| {
        let summary = tx
            .prepare_cached(&format!("{COLUMNS} WHERE election = ?1"))?
            .query_row([name], summary_row)
            .optional()?;
        let summary = match summary {
            Some(mut s) => {
                let open = open_terms_of(tx, name)?;
                attach_overlaid(std::slice::from_mut(&mut s), open, overlay)?;
                Some(s)
            }
            None => None,
        };
        Ok(summary)
    })
}

/// A page of elections by name (with their open terms) and the total.
/// `queued` overlaid on the page's elections.
pub(super) fn page(
    conn: &mut Connection,
    from: PageFrom<'_>,
    limit: usize,
    queued: &Snapshot,
) -> Result<ElectionsPage, HistoryError> {
    overlaid(conn, queued, |tx, overlay| {
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
            let open = open_terms_within(tx, &first.election, &last.election)?;
            attach_overlaid(&mut elections, open, overlay)?;
        }
        Ok(ElectionsPage {
            total: total.max(0) as u64,
            elections,
        })
    })
}

/// Elections with an open term in the current timeline; `queued`
/// overlaid on the elections the history knows.
pub(super) fn leading(conn: &mut Connection, queued: &Snapshot) -> Result<u64, HistoryError> {
    overlaid(conn, queued, |tx, overlay| {
        let n: i64 = tx.query_row(
            "SELECT COUNT(DISTINCT election) FROM terms WHERE ended_at_ms IS NULL
           AND epoch = COALESCE((SELECT value FROM watcher_state WHERE key = 'epoch'), 0)",
            [],
            |r| r.get(0),
        )?;
        let mut n = n.max(0);
        let names: Vec<&str> = overlay.touched().collect();
        for (_, led, f) in folded(tx, overlay, names)? {
            n += i64::from(f.leads()) - i64::from(led);
        }
        Ok(n.max(0) as u64)
    })
}

/// Past this many elections changed by the queue, their open terms and
/// names are read in one scan each rather than one lookup each.
const LOOKUPS: usize = 1000;

/// The elections of `names` the history knows, each with whether it
/// has an open term and what the queued batches do to it (one lookup
/// each, or past [`LOOKUPS`] one scan of the open terms and the names).
fn folded<'a>(
    tx: &Transaction<'_>,
    overlay: &Overlay<'a>,
    names: Vec<&'a str>,
) -> Result<Vec<(&'a str, bool, Folded<'a>)>, HistoryError> {
    let open_sql = "SELECT election, token FROM terms WHERE ended_at_ms IS NULL
           AND epoch = COALESCE((SELECT value FROM watcher_state WHERE key = 'epoch'), 0)";
    let mut out = Vec::new();
    if names.len() > LOOKUPS {
        let mut open: HashMap<String, Vec<i64>> = HashMap::new();
        let mut stmt = tx.prepare_cached(open_sql)?;
        let rows = stmt.query_map([], |r| Ok((r.get::<_, String>(0)?, r.get::<_, i64>(1)?)))?;
        for row in rows {
            let (name, token) = row?;
            open.entry(name).or_default().push(token);
        }
        let mut stmt = tx.prepare_cached("SELECT election FROM elections")?;
        let known: HashSet<String> = stmt
            .query_map([], |r| r.get::<_, String>(0))?
            .collect::<Result<_, _>>()?;
        for name in names.into_iter().filter(|n| known.contains(*n)) {
            let tokens = open.remove(name).unwrap_or_default();
            out.push((name, !tokens.is_empty(), overlay.fold(name, &tokens)?));
        }
        return Ok(out);
    }
    let mut exists = tx.prepare_cached("SELECT 1 FROM elections WHERE election = ?1")?;
    let mut open = tx.prepare_cached(&format!("{open_sql} AND election = ?1"))?;
    for name in names {
        if !exists.exists([name])? {
            continue;
        }
        let tokens: Vec<i64> = open
            .query_map([name], |r| r.get::<_, i64>(1))?
            .collect::<Result<_, _>>()?;
        out.push((name, !tokens.is_empty(), overlay.fold(name, &tokens)?));
    }
    Ok(out)
}

/// Changes and refusals since `from_ms` of the elections named
/// `first..=last`; `queued` overlaid.
pub(super) fn recent_between(
    conn: &mut Connection,
    from_ms: i64,
    first: &str,
    last: &str,
    queued: &Snapshot,
) -> Result<RecentCounts, HistoryError> {
    overlaid(conn, queued, |tx, overlay| {
        let grouped = |sql: &str| -> Result<HashMap<String, u64>, HistoryError> {
            let mut stmt = tx.prepare_cached(sql)?;
            let rows = stmt.query_map(params![from_ms, first, last], |r| {
                Ok((r.get::<_, String>(0)?, r.get::<_, i64>(1)?.max(0) as u64))
            })?;
            Ok(rows.collect::<Result<_, _>>()?)
        };
        let mut counts = RecentCounts {
            changes: grouped(
                "SELECT election, COUNT(*) FROM terms
             WHERE election BETWEEN ?2 AND ?3 AND started_at_ms >= ?1 AND from_snapshot = 0
             GROUP BY election",
            )?,
            refusals: grouped(
                "SELECT election, COUNT(*) FROM refusals
             WHERE election BETWEEN ?2 AND ?3 AND at_ms >= ?1 GROUP BY election",
            )?,
        };
        // One election (the API's detail): no walk over what the queue touches.
        let within: Vec<&str> = if first == last {
            overlay.name(first).into_iter().collect()
        } else {
            overlay
                .touched()
                .filter(|n| (first..=last).contains(n))
                .collect()
        };
        for (name, _, f) in folded(tx, overlay, within)? {
            let (started, refused) = f.recent(from_ms);
            add(&mut counts.changes, name, started);
            add(&mut counts.refusals, name, refused);
        }
        Ok(counts)
    })
}

/// `n` more for `name` (no entry for none).
fn add(counts: &mut HashMap<String, u64>, name: &str, n: u64) {
    if n > 0 {
        *counts.entry(name.to_owned()).or_default() += n;
    }
}

/// Refusals since `from_ms`, per election (one grouped query); `queued`
/// overlaid on the elections the history knows.
pub(super) fn refusals_since(
    conn: &mut Connection,
    from_ms: i64,
    queued: &Snapshot,
) -> Result<HashMap<String, u64>, HistoryError> {
    overlaid(conn, queued, |tx, overlay| {
        let mut by: HashMap<String, u64> = {
            let mut stmt = tx.prepare_cached(
                "SELECT election, COUNT(*) FROM refusals WHERE at_ms >= ?1 GROUP BY election",
            )?;
            let rows = stmt.query_map([from_ms], |r| {
                Ok((r.get::<_, String>(0)?, r.get::<_, i64>(1)?.max(0) as u64))
            })?;
            rows.collect::<Result<_, _>>()?
        };
        let refusing: Vec<&str> = overlay
            .touched()
            .filter(|name| overlay.refused(name, from_ms) > 0)
            .collect();
        if !refusing.is_empty() {
            let mut exists = tx.prepare_cached("SELECT 1 FROM elections WHERE election = ?1")?;
            for name in refusing {
                if exists.exists([name])? {
                    add(&mut by, name, overlay.refused(name, from_ms));
                }
            }
        }
        Ok(by)
    })
}

/// Per election, terms seen starting at or after `from_ms` (at most `max`
/// elections, the first by name); `queued` overlaid on the elections the
/// history knows.
pub(super) fn changes_since(
    conn: &mut Connection,
    from_ms: i64,
    max: i64,
    queued: &Snapshot,
) -> Result<HashMap<String, u64>, HistoryError> {
    overlaid(conn, queued, |tx, overlay| {
        let mut by = super::query::changes_since(tx, from_ms, max)?;
        let names: Vec<&str> = overlay.touched().collect();
        for (name, _, f) in folded(tx, overlay, names)? {
            add(&mut by, name, f.recent(from_ms).0);
        }
        if by.len() as i64 > max {
            let mut names: Vec<String> = by.keys().cloned().collect();
            names.sort();
            for name in names.into_iter().skip(max.max(0) as usize) {
                by.remove(&name);
            }
        }
        Ok(by)
    })
}
