//! The fleet's margins (issue 22): each term's margin observed once, when
//! it is final, into `tenure_acting_margin_seconds`, and the time its
//! holder acted on after the next term began added to
//! `tenure_overlap_seconds_total`. Computed by
//! `events::acting`, as the API computes it.
//!
//! A margin is final once the holder reported acting's end, the term ended
//! in etcd, and either the next term started or the time when a next term
//! could still have lowered it has passed (its start would now come after
//! the margin's reference). Kept per election: the last few terms only.

use std::collections::HashMap;

use crate::election::acting::ActingRecord;
use crate::events::acting::{self, ActingView, Merged, Next, TermFacts};
use crate::events::{EndCause, Event, EventKind};

/// Terms kept per election while their margin is not final.
const KEPT: usize = 4;

#[derive(Debug, Default)]
struct Term {
    token: i64,
    holder: String,
    started_at_ms: Option<i64>,
    ended_at_ms: Option<i64>,
    end_cause: Option<EndCause>,
    next_started_at_ms: Option<i64>,
    /// The end, or the next term's start, came in a replay: its time is an
    /// arrival, and the margin unknown.
    replayed: bool,
    merged: Merged,
    observed: bool,
}

/// A term's final margin and overlap (ms), and whether it ended by a
/// resign (its margin is then the holder's own round trip).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) struct Final {
    pub margin_ms: i64,
    pub overlap_ms: i64,
    pub resigned: bool,
}

/// Pending terms by election.
#[derive(Debug, Default)]
pub(super) struct Margins {
    elections: HashMap<String, Vec<Term>>,
}

impl Margins {
    /// Reads one batch's events; `live` is false for a batch replayed
    /// (its times are arrival times: a start in it cannot be aligned).
    /// Returns each term whose margin became final.
    pub fn apply(&mut self, events: &[Event], now_ms: i64) -> Vec<Final> {
        let replayed = events
            .iter()
            .any(|e| matches!(e.kind, EventKind::Unobserved { .. } | EventKind::Gap { .. }));
        for e in events {
            match &e.kind {
                EventKind::TermStarted {
                    token,
                    holder,
                    from_snapshot,
                    ..
                } => {
                    let terms = self.elections.entry(e.election.clone()).or_default();
                    if let Some(prev) = terms.last_mut() {
                        prev.next_started_at_ms.get_or_insert(e.at_ms);
                        prev.replayed |= replayed;
                    }
                    terms.push(Term {
                        token: *token,
                        holder: holder.clone(),
                        started_at_ms: (!from_snapshot && !replayed).then_some(e.at_ms),
                        ..Term::default()
                    });
                    if terms.len() > KEPT {
                        terms.remove(0);
                    }
                }
                EventKind::TermEnded { token, cause, .. } => {
                    if let Some(t) = self.term(&e.election, *token) {
                        t.ended_at_ms = Some(e.at_ms);
                        t.end_cause = Some(*cause);
                        t.replayed |= replayed;
                    }
                }
                EventKind::Acting { record } => self.record(&e.election, record),
                _ => {}
            }
        }
        self.finals(now_ms)
    }

    fn term(&mut self, election: &str, token: i64) -> Option<&mut Term> {
        self.elections
            .get_mut(election)?
            .iter_mut()
            .find(|t| t.token == token)
    }

    fn record(&mut self, election: &str, record: &ActingRecord) {
        if let Some(t) = self.term(election, record.token) {
            // Tokens repeat across etcd timelines: the holder must match.
            if t.holder == record.holder {
                t.merged.add(record);
            }
        }
    }

    /// The margins that are final now, each observed once.
    fn finals(&mut self, now_ms: i64) -> Vec<Final> {
        let mut out = Vec::new();
        for terms in self.elections.values_mut() {
            for t in terms.iter_mut().filter(|t| !t.observed) {
                if let Some(m) = final_margin(t, now_ms) {
                    t.observed = true;
                    out.push(m);
                }
            }
            // Observed, or never to be (replayed): kept only as the latest
            // term, whose successor's start is still to come.
            terms.retain(|t| !(t.observed || t.replayed) || t.next_started_at_ms.is_none());
        }
        self.elections.retain(|_, terms| !terms.is_empty());
        out
    }
}

fn final_margin(t: &Term, now_ms: i64) -> Option<Final> {
    let record = t.merged.record.as_ref()?;
    record.ended_ms?;
    t.ended_at_ms?;
    if t.replayed {
        return None;
    }
    let facts = TermFacts {
        started_at_ms: t.started_at_ms,
        ended_at_ms: t.ended_at_ms,
        end_seen_live: true,
        end_cause: t.end_cause,
        next_started_at_ms: Next::Known(t.next_started_at_ms),
    };
    let v: ActingView = acting::view(&facts, &t.merged);
    let margin = v.margin_ms?;
    let stopped = v.acting_stopped_ms?;
    // A next term starting later than this would not lower the margin.
    let settled = t.next_started_at_ms.is_some() || now_ms >= stopped.saturating_add(margin);
    settled.then_some(Final {
        margin_ms: margin,
        overlap_ms: v.overlap_ms.unwrap_or(0),
        resigned: t.end_cause == Some(EndCause::Resigned),
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::election::Layout;

    fn event(at_ms: i64, kind: EventKind) -> Event {
        Event {
            revision: 1,
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
                layout: Layout::Single,
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
                margin_ms: 500,
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
        assert_eq!(f[0].margin_ms, 2_100);
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
                margin_ms: -800,
                overlap_ms: 690,
                resigned: false
            }]
        );
    }
}
