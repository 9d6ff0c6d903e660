//! The `elections` table on PostgreSQL (schema 3; see `history/summary.rs`
//! for what it holds): its migration, what the writer adds to it, the
//! retention that keeps it in step, and its reads.

use std::collections::HashMap;

use postgres::{Client, Row, Statement, Transaction};

use super::read::{open_term, open_terms, snapshot, OPEN_TERM};
use crate::history::query::ElectionSummary;
use crate::history::summary::{attach_open_terms, Deltas, ElectionsPage, PageFrom, RecentCounts};
use crate::history::time::format_ms;
use crate::history::HistoryError;

/// Adds one transaction's deltas to the table (rows created as needed):
/// `$1` names, `$2` terms, `$3` refusals, `$4` last event times.
pub(super) const UPSERT: &str = "INSERT INTO elections (election, terms, refusals, last_event_ms)
     SELECT * FROM unnest($1::text[], $2::int8[], $3::int8[], $4::int8[])
     ON CONFLICT (election) DO UPDATE SET
         terms = elections.terms + EXCLUDED.terms,
         refusals = elections.refusals + EXCLUDED.refusals,
         last_event_ms = GREATEST(elections.last_event_ms, EXCLUDED.last_event_ms)";

/// Adds `deltas` to the table in one statement ([`UPSERT`], prepared).
pub(super) fn write(
    tx: &mut Transaction<'_>,
    upsert: &Statement,
    deltas: &mut Deltas,
) -> Result<(), HistoryError> {
    if deltas.is_empty() {
        return Ok(());
    }
    let (mut names, mut terms, mut refusals, mut last) = (vec![], vec![], vec![], vec![]);
    for (name, d) in deltas.drain() {
        names.push(name);
        terms.push(d.terms);
        refusals.push(d.refusals);
        last.push(d.last_event_ms);
    }
    tx.execute(upsert, &[&names, &terms, &refusals, &last])?;
    Ok(())
}

/// Retention's part: run in the prune's transaction *before* its deletes
/// (`cutoff` as they use it), and [`after_prune`] after them.
pub(super) fn before_prune(
    tx: &mut Transaction<'_>,
    cutoff: i64,
    own: &str,
) -> Result<(), HistoryError> {
    tx.execute(
        "UPDATE elections e SET terms = e.terms - g.n
         FROM (SELECT election, COUNT(*) AS n FROM terms
               WHERE ended_at_ms IS NOT NULL AND ended_at_ms < $1
                 AND left(election, length($2)) = $2 GROUP BY election) g
         WHERE e.election = g.election",
        &[&cutoff, &own],
    )?;
    tx.execute(
        "UPDATE elections e SET refusals = e.refusals - g.n
         FROM (SELECT election, COUNT(*) AS n FROM refusals
               WHERE at_ms < $1 AND left(election, length($2)) = $2 GROUP BY election) g
         WHERE e.election = g.election",
        &[&cutoff, &own],
    )?;
    Ok(())
}

/// Retention's part after its deletes: an election whose newest event was
/// older than the cutoff has none left; one with nothing left is
/// forgotten.
pub(super) fn after_prune(
    tx: &mut Transaction<'_>,
    cutoff: i64,
    own: &str,
) -> Result<(), HistoryError> {
    tx.execute(
        "UPDATE elections SET last_event_ms = NULL
         WHERE last_event_ms < $1 AND left(election, length($2)) = $2",
        &[&cutoff, &own],
    )?;
    tx.execute(
        "DELETE FROM elections WHERE terms <= 0 AND refusals <= 0 AND last_event_ms IS NULL
           AND left(election, length($1)) = $1",
        &[&own],
    )?;
    Ok(())
}

const COLUMNS: &str = "SELECT election, terms, refusals, last_event_ms FROM elections";

fn summary_row(row: &Row) -> Result<ElectionSummary, HistoryError> {
    let last_event_ms: Option<i64> = row.try_get(3)?;
    Ok(ElectionSummary {
        election: row.try_get(0)?,
        current: None,
        terms: row.try_get::<_, i64>(1)?.max(0) as u64,
        refusals: row.try_get::<_, i64>(2)?.max(0) as u64,
        last_event_ms,
        last_event_at: last_event_ms.map(format_ms),
        queued_end_ms: None,
    })
}

pub(in crate::history) fn elections(
    client: &mut Client,
) -> Result<Vec<ElectionSummary>, HistoryError> {
    let mut tx = snapshot(client)?;
    let mut summaries: Vec<ElectionSummary> = tx
        .query(&format!("{COLUMNS} ORDER BY election"), &[])?
        .iter()
        .map(summary_row)
        .collect::<Result<_, _>>()?;
    attach_open_terms(&mut summaries, open_terms(&mut tx)?);
    tx.commit()?;
    Ok(summaries)
}

pub(in crate::history) fn election(
    client: &mut Client,
    name: &str,
) -> Result<Option<ElectionSummary>, HistoryError> {
    let mut tx = snapshot(client)?;
    let summary = match tx.query_opt(&format!("{COLUMNS} WHERE election = $1"), &[&name])? {
        Some(row) => {
            let mut s = summary_row(&row)?;
            s.current = tx
                .query(
                    &format!("{OPEN_TERM} AND election = $1 ORDER BY started_revision, token"),
                    &[&name],
                )?
                .iter()
                .map(open_term)
                .collect::<Result<Vec<_>, _>>()?
                .pop();
            Some(s)
        }
        None => None,
    };
    tx.commit()?;
    Ok(summary)
}

pub(in crate::history) fn page(
    client: &mut Client,
    from: PageFrom<'_>,
    limit: usize,
) -> Result<ElectionsPage, HistoryError> {
    let mut tx = snapshot(client)?;
    let total: i64 = tx
        .query_one("SELECT COUNT(*) FROM elections", &[])?
        .try_get(0)?;
    let limit = limit.min(i64::MAX as usize) as i64;
    let rows = match from {
        PageFrom::Offset(skip) => tx.query(
            &format!("{COLUMNS} ORDER BY election LIMIT $1 OFFSET $2"),
            &[&limit, &(skip.min(i64::MAX as usize) as i64)],
        )?,
        PageFrom::After(name) => tx.query(
            &format!("{COLUMNS} WHERE election > $1 ORDER BY election LIMIT $2"),
            &[&name, &limit],
        )?,
    };
    let mut elections: Vec<ElectionSummary> =
        rows.iter().map(summary_row).collect::<Result<_, _>>()?;
    if !elections.is_empty() {
        let names: Vec<&str> = elections.iter().map(|e| e.election.as_str()).collect();
        let open = tx
            .query(
                &format!(
                    "{OPEN_TERM} AND election = ANY($1)
                     ORDER BY election COLLATE \"C\", started_revision, token"
                ),
                &[&names],
            )?
            .iter()
            .map(open_term)
            .collect::<Result<Vec<_>, _>>()?;
        attach_open_terms(&mut elections, open);
    }
    tx.commit()?;
    Ok(ElectionsPage {
        total: total.max(0) as u64,
        elections,
    })
}

pub(in crate::history) fn leading(client: &mut Client) -> Result<u64, HistoryError> {
    let n: i64 = client
        .query_one(
            "SELECT COUNT(DISTINCT election) FROM terms WHERE ended_at_ms IS NULL
               AND epoch = COALESCE((SELECT value FROM watcher_state WHERE key = 'epoch'), 0)",
            &[],
        )?
        .try_get(0)?;
    Ok(n.max(0) as u64)
}

/// Names `first..=last` in byte order: the page's names are asked for by
/// range on the `elections` table (whose names sort in byte order), then
/// counted by name (the other tables' names sort by the database's
/// collation, so a range there could be another set).
pub(in crate::history) fn recent_between(
    client: &mut Client,
    from_ms: i64,
    first: &str,
    last: &str,
) -> Result<RecentCounts, HistoryError> {
    let mut grouped = |sql: &str| -> Result<HashMap<String, u64>, HistoryError> {
        client
            .query(sql, &[&from_ms, &first, &last])?
            .iter()
            .map(|r| Ok((r.try_get(0)?, r.try_get::<_, i64>(1)?.max(0) as u64)))
            .collect()
    };
    Ok(RecentCounts {
        changes: grouped(
            "SELECT t.election, COUNT(*) FROM terms t
             WHERE t.election IN (SELECT election FROM elections
                                  WHERE election BETWEEN $2 AND $3)
               AND t.started_at_ms >= $1 AND NOT t.from_snapshot
             GROUP BY t.election",
        )?,
        refusals: grouped(
            "SELECT r.election, COUNT(*) FROM refusals r
             WHERE r.election IN (SELECT election FROM elections
                                  WHERE election BETWEEN $2 AND $3)
               AND r.at_ms >= $1
             GROUP BY r.election",
        )?,
    })
}

pub(in crate::history) fn refusals_since(
    client: &mut Client,
    from_ms: i64,
) -> Result<HashMap<String, u64>, HistoryError> {
    client
        .query(
            "SELECT election, COUNT(*) FROM refusals WHERE at_ms >= $1 GROUP BY election",
            &[&from_ms],
        )?
        .iter()
        .map(|r| Ok((r.try_get(0)?, r.try_get::<_, i64>(1)?.max(0) as u64)))
        .collect()
}
