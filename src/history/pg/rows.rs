//! One write transaction's rows, sent to PostgreSQL as a few multi-row
//! statements (columns as arrays, `unnest`) instead of a round trip per
//! event (issue 23: ingestion went at 0.6–0.8 of a bare watch, one round
//! trip per event). Per flush, at most five statements whatever the number
//! of events: the events (in order: their ids keep it), the terms started,
//! the terms ended (inserted when their start was never stored, then ended
//! where still open: the first end recorded stands), the refusals. The
//! `elections` table's deltas follow once, at the end of the transaction.
//!
//! The meaning is the one-statement-per-event path's, event by event: a
//! term's start buffered after its end (never seen from the watcher, but
//! possible in principle) flushes what is pending first, so the two keep
//! their order; a second start or end of one term does nothing, as it did.

use std::collections::HashSet;

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
            started: client.prepare(
                "INSERT INTO terms (election, token, holder, lease_id, layout,
                     started_at_ms, started_revision, from_snapshot, epoch)
                 SELECT * FROM unnest($1::text[], $2::int8[], $3::text[], $4::int8[], $5::text[],
                                      $6::int8[], $7::int8[], $8::bool[], $9::int8[])
                 ON CONFLICT DO NOTHING
                 RETURNING election",
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
                 RETURNING election",
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

/// The rows buffered since the last flush, column by column.
#[derive(Default)]
pub(super) struct Pending {
    ev_revision: Vec<i64>,
    ev_at: Vec<i64>,
    ev_election: Vec<String>,
    ev_type: Vec<&'static str>,
    ev_token: Vec<Option<i64>>,
    ev_holder: Vec<Option<String>>,
    ev_json: Vec<String>,

    st_election: Vec<String>,
    st_token: Vec<i64>,
    st_holder: Vec<String>,
    st_lease: Vec<i64>,
    st_layout: Vec<String>,
    st_at: Vec<i64>,
    st_revision: Vec<i64>,
    st_snapshot: Vec<bool>,
    st_epoch: Vec<i64>,
    started: HashSet<TermKey>,

    en_election: Vec<String>,
    en_token: Vec<i64>,
    en_holder: Vec<String>,
    en_lease: Vec<i64>,
    en_started_at: Vec<i64>,
    en_started_rev: Vec<i64>,
    en_at: Vec<i64>,
    en_revision: Vec<i64>,
    en_cause: Vec<&'static str>,
    en_epoch: Vec<i64>,
    ended: HashSet<TermKey>,

    rf_election: Vec<String>,
    rf_resource: Vec<String>,
    rf_token: Vec<i64>,
    rf_reason: Vec<&'static str>,
    rf_revision: Vec<i64>,
    rf_at: Vec<i64>,
    rf_current_token: Vec<Option<i64>>,
    rf_current_holder: Vec<Option<String>>,
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
        let key = |token: i64| (event.election.clone(), epoch, token);
        if let EventKind::TermStarted { token, .. } = &event.kind {
            if self.ended.contains(&key(*token)) {
                self.flush(tx, stmts, deltas)?;
            }
        }
        let (json, token, holder) = event_row(event)?;
        deltas.event(&event.election, event.at_ms);
        self.ev_revision.push(event.revision);
        self.ev_at.push(event.at_ms);
        self.ev_election.push(event.election.clone());
        self.ev_type.push(event.kind.name());
        self.ev_token.push(token);
        self.ev_holder.push(holder.map(str::to_owned));
        self.ev_json.push(json);
        match &event.kind {
            EventKind::TermStarted {
                token,
                holder,
                lease_id,
                layout,
                from_snapshot,
                ..
            } => {
                if self.started.insert(key(*token)) {
                    self.st_election.push(event.election.clone());
                    self.st_token.push(*token);
                    self.st_holder.push(holder.clone());
                    self.st_lease.push(*lease_id);
                    self.st_layout.push(tag_of(layout));
                    self.st_at.push(event.at_ms);
                    self.st_revision.push(event.revision);
                    self.st_snapshot.push(*from_snapshot);
                    self.st_epoch.push(epoch);
                }
            }
            EventKind::TermEnded {
                token,
                holder,
                lease_id,
                cause,
                started_revision,
                started_at_ms,
            } => {
                if self.ended.insert(key(*token)) {
                    self.en_election.push(event.election.clone());
                    self.en_token.push(*token);
                    self.en_holder.push(holder.clone());
                    self.en_lease.push(*lease_id);
                    self.en_started_at.push(*started_at_ms);
                    self.en_started_rev.push(*started_revision);
                    self.en_at.push(event.at_ms);
                    self.en_revision.push(event.revision);
                    self.en_cause.push(cause.as_str());
                    self.en_epoch.push(epoch);
                }
            }
            EventKind::FenceRefused {
                resource,
                token,
                reason,
                current_token,
                current_holder,
            } => {
                self.rf_election.push(event.election.clone());
                self.rf_resource.push(resource.clone());
                self.rf_token.push(*token);
                self.rf_reason.push(reason.as_str());
                self.rf_revision.push(event.revision);
                self.rf_at.push(event.at_ms);
                self.rf_current_token.push(*current_token);
                self.rf_current_holder.push(current_holder.clone());
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
            | EventKind::TwoPrimaries { .. } => {}
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
        if !p.ev_revision.is_empty() {
            tx.execute(
                &s.events,
                &[
                    &p.ev_revision,
                    &p.ev_at,
                    &p.ev_election,
                    &p.ev_type,
                    &p.ev_token,
                    &p.ev_holder,
                    &p.ev_json,
                ],
            )?;
        }
        if !p.st_election.is_empty() {
            for row in tx.query(
                &s.started,
                &[
                    &p.st_election,
                    &p.st_token,
                    &p.st_holder,
                    &p.st_lease,
                    &p.st_layout,
                    &p.st_at,
                    &p.st_revision,
                    &p.st_snapshot,
                    &p.st_epoch,
                ],
            )? {
                deltas.terms(row.try_get::<_, &str>(0)?, 1);
            }
        }
        if !p.en_election.is_empty() {
            for row in tx.query(
                &s.ended_insert,
                &[
                    &p.en_election,
                    &p.en_token,
                    &p.en_holder,
                    &p.en_lease,
                    &p.en_started_at,
                    &p.en_started_rev,
                    &p.en_at,
                    &p.en_revision,
                    &p.en_cause,
                    &p.en_epoch,
                ],
            )? {
                deltas.terms(row.try_get::<_, &str>(0)?, 1);
            }
            tx.execute(
                &s.ended_update,
                &[
                    &p.en_election,
                    &p.en_token,
                    &p.en_at,
                    &p.en_revision,
                    &p.en_cause,
                    &p.en_epoch,
                ],
            )?;
        }
        if !p.rf_election.is_empty() {
            tx.execute(
                &s.refusals,
                &[
                    &p.rf_election,
                    &p.rf_resource,
                    &p.rf_token,
                    &p.rf_reason,
                    &p.rf_revision,
                    &p.rf_at,
                    &p.rf_current_token,
                    &p.rf_current_holder,
                ],
            )?;
        }
        Ok(())
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
