//! One write transaction's rows, sent to PostgreSQL as a few multi-row
//! statements (columns as arrays, `unnest`) instead of a round trip per
//! event (which holds ingestion to 0.6–0.8 of a bare watch). Per flush,
//! at most five statements whatever the number
//! of events: the events (in order: their ids keep it), the terms started,
//! the terms ended (inserted when their start was never stored, then ended
//! where still open: the first end recorded stands), the refusals. A term
//! that starts and ends in one flush (most of them, when the watcher
//! catches up) is inserted once, ended: no conflict probe, no update;
//! its end is sent on its own only when its row was not inserted (the
//! term was stored before). The `elections` table's deltas follow once,
//! at the end of the transaction.
//!
//! The meaning is the one-statement-per-event path's, event by event: a
//! term's start buffered after its end (never seen from the watcher, but
//! possible in principle) flushes what is pending first, so the two keep
//! their order; a second start or end of one term does nothing, as it did.

use std::collections::{HashMap, HashSet};

use postgres::types::ToSql;
use postgres::{Client, Statement, Transaction};

use super::summary;
use crate::events::{Event, EventKind};
use crate::history::query::tag_of;
use crate::history::summary::Deltas;
use crate::history::writer::event_row;
use crate::history::HistoryError;

/// The statements, prepared once per session.
pub(super) struct RowStmts {
    events: Statement,
    started: Statement,
    ended_insert: Statement,
    ended_update: Statement,
    refusals: Statement,
    summary: Statement,
}

impl RowStmts {
    pub(super) fn prepare(client: &mut Client) -> Result<RowStmts, HistoryError> {
        Ok(RowStmts {
            events: client.prepare(
                "INSERT INTO events (revision, at_ms, election, type, token, holder, json)
                 SELECT r, a, e, t, k, h, j
                 FROM unnest($1::int8[], $2::int8[], $3::text[], $4::text[], $5::int8[],
                             $6::text[], $7::text[])
                      WITH ORDINALITY AS u(r, a, e, t, k, h, j, o)
                 ORDER BY o",
            )?,
            // A term that also ends in this flush is inserted ended: one
            // row written once, not inserted, probed and updated.
            started: client.prepare(
                "INSERT INTO terms (election, token, holder, lease_id, layout,
                     started_at_ms, started_revision, from_snapshot, epoch,
                     ended_at_ms, ended_revision, end_cause)
                 SELECT * FROM unnest($1::text[], $2::int8[], $3::text[], $4::int8[], $5::text[],
                                      $6::int8[], $7::int8[], $8::bool[], $9::int8[],
                                      $10::int8[], $11::int8[], $12::text[])
                 ON CONFLICT DO NOTHING
                 RETURNING election, epoch, token",
            )?,
            // A term whose start the history never saw: recorded from its
            // end (layout unknown, start as the watcher reported it).
            ended_insert: client.prepare(
                "INSERT INTO terms (election, token, holder, lease_id, layout,
                     started_at_ms, started_revision, from_snapshot,
                     ended_at_ms, ended_revision, end_cause, epoch)
                 SELECT e, k, h, l, NULL, sa, sr, TRUE, ea, er, c, ep
                 FROM unnest($1::text[], $2::int8[], $3::text[], $4::int8[], $5::int8[],
                             $6::int8[], $7::int8[], $8::int8[], $9::text[], $10::int8[])
                      AS u(e, k, h, l, sa, sr, ea, er, c, ep)
                 ON CONFLICT DO NOTHING
                 RETURNING election, epoch, token",
            )?,
            // The first end recorded stands.
            ended_update: client.prepare(
                "UPDATE terms SET ended_at_ms = u.ea, ended_revision = u.er, end_cause = u.c
                 FROM unnest($1::text[], $2::int8[], $3::int8[], $4::int8[], $5::text[],
                             $6::int8[]) AS u(e, k, ea, er, c, ep)
                 WHERE terms.election = u.e AND terms.token = u.k AND terms.epoch = u.ep
                   AND terms.ended_at_ms IS NULL",
            )?,
            refusals: client.prepare(
                "INSERT INTO refusals (election, resource, token, reason, revision, at_ms,
                     current_token, current_holder)
                 SELECT e, rs, k, rn, r, a, ct, ch
                 FROM unnest($1::text[], $2::text[], $3::int8[], $4::text[], $5::int8[],
                             $6::int8[], $7::int8[], $8::text[])
                      WITH ORDINALITY AS u(e, rs, k, rn, r, a, ct, ch, o)
                 ORDER BY o",
            )?,
            summary: client.prepare(summary::UPSERT)?,
        })
    }
}

/// A term: election, timeline, token.
type TermKey = (String, i64, i64);

/// The rows buffered since the last flush, a set of columns per table.
#[derive(Default)]
pub(super) struct Pending {
    events: EventCols,
    started: StartedCols,
    ended: EndedCols,
    refusals: RefusalCols,
}

/// `events` rows.
#[derive(Default)]
struct EventCols {
    revision: Vec<i64>,
    at: Vec<i64>,
    election: Vec<String>,
    kind: Vec<&'static str>,
    token: Vec<Option<i64>>,
    holder: Vec<Option<String>>,
    json: Vec<String>,
}

/// `terms` rows of terms started, each term once; with its end when the
/// same flush ends it.
#[derive(Default)]
struct StartedCols {
    election: Vec<String>,
    token: Vec<i64>,
    holder: Vec<String>,
    lease: Vec<i64>,
    layout: Vec<String>,
    at: Vec<i64>,
    revision: Vec<i64>,
    snapshot: Vec<bool>,
    epoch: Vec<i64>,
    ended_at: Vec<Option<i64>>,
    ended_rev: Vec<Option<i64>>,
    cause: Vec<Option<&'static str>>,
    /// Each term's row.
    seen: HashMap<TermKey, usize>,
}

/// Ends of terms, each term once: those whose start is in the same flush
/// are folded into its row (`folded`), the others sent on their own.
#[derive(Default)]
struct EndedCols {
    election: Vec<String>,
    token: Vec<i64>,
    holder: Vec<String>,
    lease: Vec<i64>,
    started_at: Vec<i64>,
    started_rev: Vec<i64>,
    at: Vec<i64>,
    revision: Vec<i64>,
    cause: Vec<&'static str>,
    epoch: Vec<i64>,
    seen: HashSet<TermKey>,
    /// Ends folded into their start's row, by term: sent on their own
    /// after all when that row was not inserted (the term was stored).
    folded: Vec<(TermKey, i64, i64, &'static str)>,
}

/// `refusals` rows.
#[derive(Default)]
struct RefusalCols {
    election: Vec<String>,
    resource: Vec<String>,
    token: Vec<i64>,
    reason: Vec<&'static str>,
    revision: Vec<i64>,
    at: Vec<i64>,
    current_token: Vec<Option<i64>>,
    current_holder: Vec<Option<String>>,
}

impl Pending {
    /// Buffers one event (of timeline `epoch`); flushes first when it
    /// starts a term whose end is pending.
    pub(super) fn push(
        &mut self,
        tx: &mut Transaction<'_>,
        stmts: &RowStmts,
        event: &Event,
        epoch: i64,
        deltas: &mut Deltas,
    ) -> Result<(), HistoryError> {
        if let EventKind::TermStarted { token, .. } = &event.kind {
            let key = (event.election.clone(), epoch, *token);
            if self.ended.seen.contains(&key) {
                self.flush(tx, stmts, deltas)?;
            }
        }
        self.events.push(event)?;
        deltas.event(&event.election, event.at_ms);
        match &event.kind {
            EventKind::TermStarted { .. } => self.started.push(event, epoch),
            EventKind::TermEnded { .. } => self.ended.push(event, epoch, &mut self.started),
            EventKind::FenceRefused { .. } => {
                self.refusals.push(event);
                deltas.refusal(&event.election);
            }
            EventKind::LeaderValueChanged { .. }
            | EventKind::FenceAccepted { .. }
            | EventKind::Gap { .. }
            | EventKind::Reset { .. }
            | EventKind::Unobserved { .. }
            | EventKind::CandidateQueued { .. }
            | EventKind::CandidateLeft { .. }
            | EventKind::NameCollision { .. }
            | EventKind::TwoPrimaries { .. }
            | EventKind::Acting { .. } => {}
        }
        Ok(())
    }

    /// Sends what is buffered (at most five statements) and empties it;
    /// counts the term rows inserted in `deltas`.
    pub(super) fn flush(
        &mut self,
        tx: &mut Transaction<'_>,
        s: &RowStmts,
        deltas: &mut Deltas,
    ) -> Result<(), HistoryError> {
        let p = std::mem::take(self);
        p.events.send(tx, s)?;
        let inserted = p.started.send(tx, s, deltas)?;
        p.ended.send(tx, s, deltas, &inserted)?;
        p.refusals.send(tx, s)
    }

    /// Flushes, then adds the transaction's deltas to the `elections`
    /// table: what a transaction does last before it commits.
    pub(super) fn finish(
        &mut self,
        tx: &mut Transaction<'_>,
        s: &RowStmts,
        deltas: &mut Deltas,
    ) -> Result<(), HistoryError> {
        self.flush(tx, s, deltas)?;
        summary::write(tx, &s.summary, deltas)
    }
}

/// Runs an insert of `terms` rows that returns each inserted row's
/// election, epoch and token, and counts those rows in `deltas` (a term
/// already stored is not counted again). Returns the terms inserted.
fn insert_terms(
    tx: &mut Transaction<'_>,
    insert: &Statement,
    params: &[&(dyn ToSql + Sync)],
    deltas: &mut Deltas,
) -> Result<HashSet<TermKey>, HistoryError> {
    let mut inserted = HashSet::new();
    for row in tx.query(insert, params)? {
        let election: String = row.try_get(0)?;
        deltas.terms(&election, 1);
        inserted.insert((election, row.try_get(1)?, row.try_get(2)?));
    }
    Ok(inserted)
}

impl EventCols {
    fn push(&mut self, event: &Event) -> Result<(), HistoryError> {
        let (json, token, holder) = event_row(event)?;
        self.revision.push(event.revision);
        self.at.push(event.at_ms);
        self.election.push(event.election.clone());
        self.kind.push(event.kind.name());
        self.token.push(token);
        self.holder.push(holder.map(str::to_owned));
        self.json.push(json);
        Ok(())
    }

    fn send(&self, tx: &mut Transaction<'_>, s: &RowStmts) -> Result<(), HistoryError> {
        if self.revision.is_empty() {
            return Ok(());
        }
        tx.execute(
            &s.events,
            &[
                &self.revision,
                &self.at,
                &self.election,
                &self.kind,
                &self.token,
                &self.holder,
                &self.json,
            ],
        )?;
        Ok(())
    }
}

impl StartedCols {
    /// A term's start, unless this flush has it already.
    fn push(&mut self, event: &Event, epoch: i64) {
        let EventKind::TermStarted {
            token,
            holder,
            lease_id,
            layout,
            from_snapshot,
            ..
        } = &event.kind
        else {
            return;
        };
        let key = (event.election.clone(), epoch, *token);
        if self.seen.contains_key(&key) {
            return;
        }
        self.seen.insert(key, self.election.len());
        self.election.push(event.election.clone());
        self.token.push(*token);
        self.holder.push(holder.clone());
        self.lease.push(*lease_id);
        self.layout.push(tag_of(layout));
        self.at.push(event.at_ms);
        self.revision.push(event.revision);
        self.snapshot.push(*from_snapshot);
        self.epoch.push(epoch);
        self.ended_at.push(None);
        self.ended_rev.push(None);
        self.cause.push(None);
    }

    /// Writes the end into the row of `key`'s start when this flush has
    /// it and it has no end yet: `false` when it has not.
    fn end(&mut self, key: &TermKey, at: i64, revision: i64, cause: &'static str) -> bool {
        let Some(&i) = self.seen.get(key) else {
            return false;
        };
        if self.ended_at[i].is_none() {
            self.ended_at[i] = Some(at);
            self.ended_rev[i] = Some(revision);
            self.cause[i] = Some(cause);
        }
        true
    }

    /// Inserts the starts (ended where the flush ends them); counts the
    /// rows inserted (a term already stored is not counted again) and
    /// returns their terms.
    fn send(
        &self,
        tx: &mut Transaction<'_>,
        s: &RowStmts,
        deltas: &mut Deltas,
    ) -> Result<HashSet<TermKey>, HistoryError> {
        if self.election.is_empty() {
            return Ok(HashSet::new());
        }
        insert_terms(
            tx,
            &s.started,
            &[
                &self.election,
                &self.token,
                &self.holder,
                &self.lease,
                &self.layout,
                &self.at,
                &self.revision,
                &self.snapshot,
                &self.epoch,
                &self.ended_at,
                &self.ended_rev,
                &self.cause,
            ],
            deltas,
        )
    }
}

impl EndedCols {
    /// A term's end, unless this flush has it already: folded into its
    /// start's row when `started` has it.
    fn push(&mut self, event: &Event, epoch: i64, started: &mut StartedCols) {
        let EventKind::TermEnded {
            token,
            holder,
            lease_id,
            cause,
            started_revision,
            started_at_ms,
            ..
        } = &event.kind
        else {
            return;
        };
        let key = (event.election.clone(), epoch, *token);
        if !self.seen.insert(key.clone()) {
            return;
        }
        if started.end(&key, event.at_ms, event.revision, cause.as_str()) {
            self.folded
                .push((key, event.at_ms, event.revision, cause.as_str()));
            return;
        }
        self.election.push(event.election.clone());
        self.token.push(*token);
        self.holder.push(holder.clone());
        self.lease.push(*lease_id);
        self.started_at.push(*started_at_ms);
        self.started_rev.push(*started_revision);
        self.at.push(event.at_ms);
        self.revision.push(event.revision);
        self.cause.push(cause.as_str());
        self.epoch.push(epoch);
    }

    /// Inserts the terms whose start was never stored (counting them),
    /// then ends every term still open: the first end recorded stands.
    /// A folded end whose row was not inserted (`inserted`: the term was
    /// stored before) is one of them.
    fn send(
        mut self,
        tx: &mut Transaction<'_>,
        s: &RowStmts,
        deltas: &mut Deltas,
        inserted: &HashSet<TermKey>,
    ) -> Result<(), HistoryError> {
        let mut update = EndUpdate::default();
        for (key, at, revision, cause) in std::mem::take(&mut self.folded) {
            if !inserted.contains(&key) {
                update.push(key, at, revision, cause);
            }
        }
        if !self.election.is_empty() {
            self.insert(tx, s, deltas)?;
            for i in 0..self.election.len() {
                let key = (self.election[i].clone(), self.epoch[i], self.token[i]);
                update.push(key, self.at[i], self.revision[i], self.cause[i]);
            }
        }
        update.send(tx, s)
    }

    /// Inserts the terms whose start was never stored, ended.
    fn insert(
        &self,
        tx: &mut Transaction<'_>,
        s: &RowStmts,
        deltas: &mut Deltas,
    ) -> Result<(), HistoryError> {
        insert_terms(
            tx,
            &s.ended_insert,
            &[
                &self.election,
                &self.token,
                &self.holder,
                &self.lease,
                &self.started_at,
                &self.started_rev,
                &self.at,
                &self.revision,
                &self.cause,
                &self.epoch,
            ],
            deltas,
        )?;
        Ok(())
    }
}

/// Ends written onto stored rows still open: the first end recorded
/// stands.
#[derive(Default)]
struct EndUpdate {
    election: Vec<String>,
    token: Vec<i64>,
    at: Vec<i64>,
    revision: Vec<i64>,
    cause: Vec<&'static str>,
    epoch: Vec<i64>,
}

impl EndUpdate {
    fn push(
        &mut self,
        (election, epoch, token): TermKey,
        at: i64,
        revision: i64,
        cause: &'static str,
    ) {
        self.election.push(election);
        self.token.push(token);
        self.at.push(at);
        self.revision.push(revision);
        self.cause.push(cause);
        self.epoch.push(epoch);
    }

    fn send(&self, tx: &mut Transaction<'_>, s: &RowStmts) -> Result<(), HistoryError> {
        if self.election.is_empty() {
            return Ok(());
        }
        tx.execute(
            &s.ended_update,
            &[
                &self.election,
                &self.token,
                &self.at,
                &self.revision,
                &self.cause,
                &self.epoch,
            ],
        )?;
        Ok(())
    }
}

impl RefusalCols {
    fn push(&mut self, event: &Event) {
        let EventKind::FenceRefused {
            resource,
            token,
            reason,
            current_token,
            current_holder,
        } = &event.kind
        else {
            return;
        };
        self.election.push(event.election.clone());
        self.resource.push(resource.clone());
        self.token.push(*token);
        self.reason.push(reason.as_str());
        self.revision.push(event.revision);
        self.at.push(event.at_ms);
        self.current_token.push(*current_token);
        self.current_holder.push(current_holder.clone());
    }

    fn send(&self, tx: &mut Transaction<'_>, s: &RowStmts) -> Result<(), HistoryError> {
        if self.election.is_empty() {
            return Ok(());
        }
        tx.execute(
            &s.refusals,
            &[
                &self.election,
                &self.resource,
                &self.token,
                &self.reason,
                &self.revision,
                &self.at,
                &self.current_token,
                &self.current_holder,
            ],
        )?;
        Ok(())
    }
}
