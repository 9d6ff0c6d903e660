//! Each stored term's acting and margin, from the holders'
//! records among the stored events: which events to read for a page of
//! terms ([`Span`]), and the terms filled from them ([`Found::fill`]).
//! Pure; `Reader` runs the queries, `events::acting` computes each view.

use std::collections::HashMap;

use super::query::TermRow;
use crate::election::acting::ActingRecord;
use crate::events::acting::{self, Merged, Next, TermFacts, LATE_MS};
use crate::events::{Event, EventKind};

/// The events to read for a page of terms: recorded in `from..=to`, of
/// tokens `lo..=hi`, at most `limit`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) struct Span {
    pub from: i64,
    pub to: i64,
    pub lo: i64,
    pub hi: i64,
    pub limit: i64,
}

impl Span {
    pub fn of(rows: &[TermRow]) -> Option<Span> {
        let from = rows.iter().map(|r| r.started_at_ms).min()?;
        let lo = rows.iter().map(|r| r.token).min()?;
        let hi = rows.iter().map(|r| r.token).max()?;
        // An open term's record may come any time.
        let to = rows
            .iter()
            .map(|r| {
                r.ended_at_ms
                    .map_or(i64::MAX, |e| e.saturating_add(LATE_MS))
            })
            .max()?;
        let limit = i64::try_from(rows.len() * 8 + 64).unwrap_or(i64::MAX);
        Some(Span {
            from,
            to,
            lo,
            hi,
            limit,
        })
    }

    /// As the queries take it.
    pub fn range(&self) -> (i64, i64, i64, i64) {
        (self.from, self.to, self.lo, self.hi)
    }
}

/// The records (when each was recorded, at which revision) by token, and
/// the replays' marks.
#[derive(Debug, Default)]
pub(super) struct Found {
    records: HashMap<i64, Vec<(i64, i64, ActingRecord)>>,
    /// (recorded at, from revision, to revision, since) of gaps, resets
    /// and `unobserved`: a start recorded by a replay carries the replay's
    /// arrival time, and cannot be aligned; it happened after `since`
    /// (`None`: not known).
    replayed: Vec<(i64, i64, i64, Option<i64>)>,
}

impl Found {
    pub fn from_events(events: &[Event]) -> Found {
        let mut f = Found::default();
        for e in events {
            match &e.kind {
                EventKind::Acting { record } => f.records.entry(record.token).or_default().push((
                    e.at_ms,
                    e.revision,
                    record.clone(),
                )),
                EventKind::Gap {
                    from_revision,
                    to_revision,
                } => f
                    .replayed
                    .push((e.at_ms, *from_revision, *to_revision, None)),
                EventKind::Unobserved {
                    from_revision,
                    to_revision,
                    since_ms,
                } => f
                    .replayed
                    .push((e.at_ms, *from_revision, *to_revision, *since_ms)),
                EventKind::Reset { from_revision, .. } => {
                    f.replayed
                        .push((e.at_ms, *from_revision, *from_revision, None))
                }
                _ => {}
            }
        }
        f
    }

    /// No holder reported anything.
    pub fn is_empty(&self) -> bool {
        self.records.is_empty()
    }

    fn replayed_at(&self, revision: i64, at_ms: i64) -> bool {
        self.replayed_since(revision, at_ms).is_some()
    }

    /// `None`: seen as it happened; `Some(since)`: replayed, it happened
    /// after `since` (`None`: not known when).
    fn replayed_since(&self, revision: i64, at_ms: i64) -> Option<Option<i64>> {
        self.replayed
            .iter()
            .find(|(at, lo, hi, _)| *at == at_ms && (*lo..=*hi).contains(&revision))
            .map(|r| r.3)
    }

    fn seen_live(&self, row: &TermRow) -> bool {
        !row.from_snapshot && !self.replayed_at(row.started_revision, row.started_at_ms)
    }

    /// The start of `next`, if it can be compared with times of etcd's
    /// (seen live).
    fn next_start(&self, next: Option<&TermRow>) -> Next {
        match next {
            None => Next::Known(None),
            Some(n) if self.seen_live(n) => Next::Known(Some(n.started_at_ms)),
            Some(_) => Next::Unknown,
        }
    }

    /// Each ended term whose start or end was replayed gets its duration's
    /// bounds ([`TermRow::duration_bounds_seconds`]), as the pages draw
    /// them: a replayed moment happened at or before its recorded time and
    /// after its mark's `since` (not known: a gap's, a reset's, or a start
    /// first seen in a snapshot). Least: the latest start to the earliest
    /// end (never below 0); most: the earliest start to the latest end.
    pub fn bound_durations(&self, rows: &mut [TermRow]) {
        for row in rows {
            let (Some(end_rev), Some(end_at)) = (row.ended_revision, row.ended_at_ms) else {
                continue;
            };
            let start = match (
                row.from_snapshot,
                self.replayed_since(row.started_revision, row.started_at_ms),
            ) {
                (true, _) => Some(None),
                (false, s) => s,
            };
            let end = self.replayed_since(end_rev, end_at);
            if start.is_none() && end.is_none() {
                continue;
            }
            let earliest = |at: i64, r: Option<Option<i64>>| match r {
                None => Some(at),
                Some(since) => since.map(|s| s.min(at)),
            };
            let secs = |ms: i64| ms as f64 / 1000.0;
            let least = earliest(end_at, end).map(|e| secs((e - row.started_at_ms).max(0)));
            let most = earliest(row.started_at_ms, start).map(|s| secs(end_at - s));
            row.duration_bounds_seconds = Some([least, most]);
        }
    }

    /// Fills each term's acting; `rows` in start order, the last one
    /// followed by `after_last` (`Err(())`: not known).
    pub fn fill(&self, rows: &mut [TermRow], after_last: Result<Option<TermRow>, ()>) {
        let views: Vec<_> = (0..rows.len())
            .map(|i| {
                let row = &rows[i];
                let next = match (rows.get(i + 1), &after_last) {
                    (Some(n), _) => self.next_start(Some(n)),
                    (None, Ok(n)) => self.next_start(n.as_ref()),
                    (None, Err(())) => Next::Unknown,
                };
                self.view(row, rows[i + 1..].iter(), next)
            })
            .collect();
        for (row, view) in rows.iter_mut().zip(views) {
            if let Some(v) = view {
                row.acting = v;
            }
        }
    }

    /// One term's view, from the records its holder wrote after it began
    /// and before any later term of the same token began (tokens repeat
    /// across etcd timelines: a restore).
    fn view<'a>(
        &self,
        row: &TermRow,
        later: impl Iterator<Item = &'a TermRow>,
        next: Next,
    ) -> Option<acting::ActingView> {
        let until = later
            .filter(|t| t.token == row.token)
            .map(|t| t.started_at_ms)
            .min()
            .unwrap_or(i64::MAX);
        let mut m = Merged::default();
        for (at, revision, r) in self.records.get(&row.token).into_iter().flatten() {
            if r.holder == row.holder && *at >= row.started_at_ms && *at < until {
                m.add(r, *revision, *at);
            }
        }
        m.record.as_ref()?;
        let end_seen_live = match (row.ended_revision, row.ended_at_ms) {
            (Some(rev), Some(at)) => !self.replayed_at(rev, at),
            _ => true,
        };
        let facts = TermFacts {
            started_at_ms: self.seen_live(row).then_some(row.started_at_ms),
            ended_at_ms: row.ended_at_ms,
            ended_revision: row.ended_revision,
            end_seen_live,
            end_cause: row.end_cause,
            next_started_at_ms: next,
        };
        Some(acting::view(&facts, &m))
    }
}
