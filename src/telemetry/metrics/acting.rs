//! The fleet's margins: each term's margin observed once, when
//! it is final, into `tenure_acting_margin_seconds`, and the time its
//! holder acted on after the next term began added to
//! `tenure_overlap_seconds_total`. Computed by
//! `events::acting`, as the API computes it.
//!
//! A margin is final once the holder reported acting's end, the term ended
//! in etcd, and either the next term started or the time when a next term
//! could still have lowered it has passed (its start would now come after
//! the margin's reference). Kept per election: the last few terms only.
//!
//! One rule with the history: both take every version of a term's record
//! and read it through `events::acting::view`, which takes the latest end
//! no version's own arrival contradicts. So a version arriving after the
//! margin was observed (the holder's true end, later than an early end
//! someone wrote into the record during the term) still counts: an
//! observed term is kept for [`LATE_MS`] after its end, as long as the
//! history looks for its versions, and its overlap is read again at each
//! version; what it grew by is added to `tenure_overlap_seconds_total`.
//! It can only grow: a version arriving after the term's end is never
//! written before it, so it can only move the end later. The margin's
//! histogram is observed once (a histogram takes nothing back): a margin
//! lowered by such a version afterwards is not observed again, the
//! overlap is.

use std::collections::{HashMap, HashSet};

use crate::election::acting::ActingRecord;
use crate::events::acting::{self, ActingView, Merged, Next, TermFacts, LATE_MS};
use crate::events::{EndCause, Event, EventKind};

/// Terms kept per election while their margin is not final.
const KEPT: usize = 4;

#[derive(Debug, Default)]
struct Term {
    token: i64,
    holder: String,
    started_at_ms: Option<i64>,
    ended_at_ms: Option<i64>,
    ended_revision: Option<i64>,
    end_cause: Option<EndCause>,
    next_started_at_ms: Option<i64>,
    /// The end, or the next term's start, came in a replay: its time is an
    /// arrival, and the margin unknown.
    replayed: bool,
    merged: Merged,
    observed: bool,
    /// The overlap already added to the counter (ms).
    counted_overlap_ms: i64,
}

/// What to add to the metrics for one term: its margin once final (ms;
/// `None`: observed before, only its overlap grew), the overlap (ms) not
/// counted yet, and whether it ended by a resign (its margin is then the
/// holder's own round trip).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) struct Final {
    pub margin_ms: Option<i64>,
    pub overlap_ms: i64,
    pub resigned: bool,
}

/// Pending terms by election: only terms whose start was seen live (no
/// other can be placed on etcd's time), so a snapshot of 100,000 running
/// terms costs nothing here.
#[derive(Debug, Default)]
pub(super) struct Margins {
    elections: HashMap<String, Vec<Term>>,
    /// Elections with a margin that waits for time to settle it (no
    /// successor yet): looked at on every batch, beside those it touches.
    waiting: HashSet<String>,
}

impl Margins {
    /// Reads one batch's events (a batch with a gap, a reset or
    /// `unobserved` was replayed: its times are arrival times, and cannot
    /// be aligned). Returns each term whose margin became final.
    pub fn apply(&mut self, events: &[Event], now_ms: i64) -> Vec<Final> {
        let replayed = events.iter().any(|e| {
            matches!(
                e.kind,
                EventKind::Unobserved { .. } | EventKind::Gap { .. } | EventKind::Reset { .. }
            )
        });
        let mut touched: HashSet<&str> = HashSet::new();
        for e in events {
            match &e.kind {
                EventKind::TermStarted {
                    token,
                    holder,
                    from_snapshot,
                    ..
                } => {
                    if let Some(prev) = self
                        .elections
                        .get_mut(&e.election)
                        .and_then(|t| t.last_mut())
                    {
                        prev.next_started_at_ms.get_or_insert(e.at_ms);
                        prev.replayed |= replayed;
                    }
                    if !from_snapshot && !replayed {
                        let terms = self.elections.entry(e.election.clone()).or_default();
                        terms.push(Term {
                            token: *token,
                            holder: holder.clone(),
                            started_at_ms: Some(e.at_ms),
                            ..Term::default()
                        });
                        if terms.len() > KEPT {
                            terms.remove(0);
                        }
                    }
                }
                EventKind::TermEnded { token, cause, .. } => {
                    if let Some(t) = self.term(&e.election, *token) {
                        t.ended_at_ms = Some(e.at_ms);
                        t.ended_revision = Some(e.revision);
                        t.end_cause = Some(*cause);
                        t.replayed |= replayed;
                    }
                }
                EventKind::Acting { record } => {
                    self.record(&e.election, record, e.revision, e.at_ms)
                }
                _ => continue,
            }
            touched.insert(&e.election);
        }
        let mut names: Vec<String> = touched.into_iter().map(str::to_owned).collect();
        names.extend(self.waiting.drain());
        self.finals(names, now_ms)
    }

    fn term(&mut self, election: &str, token: i64) -> Option<&mut Term> {
        self.elections
            .get_mut(election)?
            .iter_mut()
            .find(|t| t.token == token)
    }

    fn record(&mut self, election: &str, record: &ActingRecord, revision: i64, arrived_ms: i64) {
        if let Some(t) = self.term(election, record.token) {
            // Tokens repeat across etcd timelines: the holder must match.
            if t.holder == record.holder {
                t.merged.add(record, revision, arrived_ms);
            }
        }
    }

    /// The margins of the elections `names` that are final now, each
    /// observed once.
    fn finals(&mut self, names: Vec<String>, now_ms: i64) -> Vec<Final> {
        let mut out = Vec::new();
        for name in names {
            let Some(terms) = self.elections.get_mut(&name) else {
                continue;
            };
            terms.retain(|t| kept(t, now_ms));
            for t in terms.iter_mut() {
                let found = if t.observed {
                    overlap_grown(t)
                } else {
                    final_margin(t, now_ms)
                };
                if let Some(f) = found {
                    t.observed = true;
                    t.counted_overlap_ms = t.counted_overlap_ms.saturating_add(f.overlap_ms);
                    out.push(f);
                }
            }
            if terms.is_empty() {
                self.elections.remove(&name);
            } else if terms.iter().any(waits_for_time) {
                self.waiting.insert(name);
            }
        }
        out
    }
}

/// Whether a term's margin is known but for a successor that may still
/// start before its moment (only time settles it).
fn waits_for_time(t: &Term) -> bool {
    !t.observed
        && !t.replayed
        && t.next_started_at_ms.is_none()
        && t.ended_at_ms.is_some()
        && t.merged
            .record
            .as_ref()
            .is_some_and(|r| r.ended_ms.is_some())
}

/// Whether a term is kept: the latest (its successor's start is still to
/// come); one whose margin is not final yet (not replayed: it never will
/// be); one observed, for the versions that may still come
/// ([`LATE_MS`] after its end, as the history reads them).
fn kept(t: &Term, now_ms: i64) -> bool {
    let late_versions_due = t
        .ended_at_ms
        .is_some_and(|end| now_ms < end.saturating_add(LATE_MS));
    t.next_started_at_ms.is_none()
        || (!t.observed && !t.replayed)
        || (t.observed && late_versions_due)
}

/// The term's acting as the history reads it: the same facts, the same
/// versions, the same function.
fn view(t: &Term) -> ActingView {
    let facts = TermFacts {
        started_at_ms: t.started_at_ms,
        ended_at_ms: t.ended_at_ms,
        ended_revision: t.ended_revision,
        end_seen_live: true,
        end_cause: t.end_cause,
        next_started_at_ms: Next::Known(t.next_started_at_ms),
    };
    acting::view(&facts, &t.merged)
}

fn final_margin(t: &Term, now_ms: i64) -> Option<Final> {
    let record = t.merged.record.as_ref()?;
    record.ended_ms?;
    t.ended_at_ms?;
    if t.replayed {
        return None;
    }
    let v = view(t);
    let margin = v.margin_ms?;
    let stopped = v.acting_stopped_ms?;
    // A next term starting later than this would not lower the margin.
    let settled = t.next_started_at_ms.is_some() || now_ms >= stopped.saturating_add(margin);
    settled.then_some(Final {
        margin_ms: Some(margin),
        overlap_ms: v.overlap_ms.unwrap_or(0).max(0),
        resigned: t.end_cause == Some(EndCause::Resigned),
    })
}

/// An observed term's overlap, read again with the versions since: what
/// it grew by, if it did.
fn overlap_grown(t: &Term) -> Option<Final> {
    if t.replayed {
        return None;
    }
    let now = view(t).overlap_ms.unwrap_or(0);
    (now > t.counted_overlap_ms).then(|| Final {
        margin_ms: None,
        overlap_ms: now.saturating_sub(t.counted_overlap_ms),
        resigned: t.end_cause == Some(EndCause::Resigned),
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::election::KeyLayout;

    /// Revisions in the order of the times (one per millisecond).
    fn event(at_ms: i64, kind: EventKind) -> Event {
        Event {
            revision: at_ms,
            at_ms,
            election: "e".into(),
            kind,
        }
    }

    fn started(at_ms: i64, token: i64) -> Event {
        event(
            at_ms,
            EventKind::TermStarted {
                token,
                holder: "h".into(),
                lease_id: 1,
                layout: KeyLayout::Single,
                previous_holder: None,
                from_snapshot: false,
            },
        )
    }

    fn ended(at_ms: i64, token: i64, cause: EndCause) -> Event {
        event(
            at_ms,
            EventKind::TermEnded {
                token,
                holder: "h".into(),
                lease_id: 1,
                cause,
                started_revision: 1,
                started_at_ms: 0,
                renewals: None,
            },
        )
    }

    fn record(at_ms: i64, token: i64, ended_ms: i64, lease_end_ms: i64) -> Event {
        event(
            at_ms,
            EventKind::Acting {
                record: ActingRecord {
                    v: 1,
                    token,
                    holder: "h".into(),
                    window_ms: Some(0),
                    began_ms: Some(0),
                    stopping_ms: None,
                    ended_ms: Some(ended_ms),
                    ended_by_ms: None,
                    lease_end_ms: Some(lease_end_ms),
                    guard_slack_ms: None,
                    sent_ms: ended_ms,
                    late: false,
                },
            },
        )
    }

    #[test]
    fn a_margin_waits_until_no_next_term_could_lower_it_and_is_observed_once() {
        let mut m = Margins::default();
        assert!(m.apply(&[started(1_000, 5)], 1_000).is_empty());
        // Deposed at 2,000; acting ended at 2,500; the lease could have
        // ended at 4,000 (margin 1,500 unless a term starts before that).
        m.apply(&[ended(2_000, 5, EndCause::Deleted)], 2_000);
        assert!(m.apply(&[record(2_600, 5, 1_500, 3_000)], 2_600).is_empty());
        // A successor at 3,000: the margin is 500, final.
        let f = m.apply(&[started(3_000, 9)], 3_000);
        assert_eq!(
            f,
            [Final {
                margin_ms: Some(500),
                overlap_ms: 0,
                resigned: false
            }]
        );
        assert!(m.apply(&[], 10_000).is_empty(), "observed once");
    }

    #[test]
    fn with_no_successor_the_margin_is_final_once_its_moment_has_passed() {
        let mut m = Margins::default();
        // Deposed (the lease lives on): acting ended at 1,900, the lease
        // could have ended at 4,000 at the earliest.
        m.apply(
            &[started(1_000, 5), ended(2_000, 5, EndCause::Deleted)],
            2_000,
        );
        assert!(m.apply(&[record(2_600, 5, 900, 3_000)], 2_600).is_empty());
        assert!(
            m.apply(&[], 3_999).is_empty(),
            "a successor could still lower it"
        );
        let f = m.apply(&[], 4_000);
        assert_eq!(f.len(), 1);
        assert_eq!(f[0].margin_ms, Some(2_100));
    }

    #[test]
    fn a_holder_acting_into_the_next_term_is_an_overlap() {
        let mut m = Margins::default();
        m.apply(&[started(1_000, 5)], 1_000);
        m.apply(
            &[ended(2_000, 5, EndCause::Expired), started(2_010, 9)],
            2_010,
        );
        let f = m.apply(&[record(3_000, 5, 1_700, 900)], 3_000);
        assert_eq!(
            f,
            [Final {
                margin_ms: Some(-800),
                overlap_ms: 690,
                resigned: false
            }]
        );
    }

    #[test]
    fn an_end_recorded_in_the_resigns_own_revision_is_never_an_overlap() {
        let mut m = Margins::default();
        m.apply(&[started(1_000, 5)], 1_000);
        // The resign's txn (revision 2,000) carried the record; a queued
        // successor starts in the same revision. By the clocks, acting
        // ended 2 ms after it: jitter, not an overlap.
        let f = m.apply(
            &[
                ended(2_000, 5, EndCause::Resigned),
                started(2_000, 9),
                record(2_000, 5, 1_002, 1_002),
            ],
            2_000,
        );
        assert_eq!(
            f,
            [Final {
                margin_ms: Some(0),
                overlap_ms: 0,
                resigned: true
            }]
        );
    }

    #[test]
    fn an_early_end_written_during_the_term_does_not_hide_the_overlap_the_history_shows() {
        let mut m = Margins::default();
        m.apply(&[started(1_000, 5)], 1_000);
        // Someone writes "acting ended at 500" during the term (revision
        // 1,500); the term expires at 3,000 and the next begins then.
        m.apply(&[record(1_500, 5, 500, 2_000)], 1_500);
        let at_the_end = m.apply(
            &[ended(3_000, 5, EndCause::Expired), started(3_000, 9)],
            3_000,
        );
        // The holder's own record, after the end: it acted until 3,750.
        let later = m.apply(&[record(3_100, 5, 2_750, 2_000)], 3_100);
        // What the history shows: every version, through the same view.
        let mut every = Merged::default();
        for e in [record(1_500, 5, 500, 2_000), record(3_100, 5, 2_750, 2_000)] {
            if let EventKind::Acting { record } = &e.kind {
                every.add(record, e.revision, e.at_ms);
            }
        }
        let facts = TermFacts {
            started_at_ms: Some(1_000),
            ended_at_ms: Some(3_000),
            ended_revision: Some(3_000),
            end_seen_live: true,
            end_cause: Some(EndCause::Expired),
            next_started_at_ms: Next::Known(Some(3_000)),
        };
        assert_eq!(acting::view(&facts, &every).overlap_ms, Some(750));
        let counted: i64 = at_the_end.iter().chain(&later).map(|f| f.overlap_ms).sum();
        assert_eq!(counted, 750, "{at_the_end:?} then {later:?}");
        let margins = at_the_end
            .iter()
            .chain(&later)
            .filter(|f| f.margin_ms.is_some());
        assert_eq!(margins.count(), 1, "the margin is observed once");
        // A version no earlier end can hide changes nothing more; one
        // arriving past LATE_MS is not taken, as the history does not.
        assert!(m.apply(&[record(3_200, 5, 600, 2_000)], 3_200).is_empty());
        let too_late = 3_000 + LATE_MS;
        assert!(m
            .apply(&[record(too_late, 5, 9_000, 2_000)], too_late)
            .is_empty());
    }

    #[test]
    fn terms_first_seen_in_a_snapshot_are_not_kept_and_a_batch_looks_at_its_own_elections() {
        let mut m = Margins::default();
        let snap = event(
            1_000,
            EventKind::TermStarted {
                token: 5,
                holder: "h".into(),
                lease_id: 1,
                layout: KeyLayout::Single,
                previous_holder: None,
                from_snapshot: true,
            },
        );
        assert!(m.apply(&[snap], 1_000).is_empty());
        assert!(m.elections.is_empty(), "nothing of it could be placed");
        // A live term with its end reported waits for time; the next
        // batch, of another election, still settles it.
        m.apply(
            &[started(2_000, 7), ended(3_000, 7, EndCause::Deleted)],
            3_000,
        );
        m.apply(&[record(3_100, 7, 500, 1_500)], 3_100);
        assert!(m.waiting.contains("e"));
        let mut other = started(9_000, 1);
        other.election = "other".into();
        let f = m.apply(&[other], 9_000);
        assert_eq!(f.len(), 1);
        assert_eq!(f[0].margin_ms, Some(1_000));
        assert!(m.waiting.is_empty());
    }
}
