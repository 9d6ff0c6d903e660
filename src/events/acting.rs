//! A term's acting, placed on etcd's time, and its margin. Pure:
//! the history's readers (API, pages, report) and the metrics use it alike.
//!
//! The holder's record (`election::acting`) counts from its base, the
//! moment it learned it won; the term's recorded start is when the watcher
//! learned it. Both follow the same commit, so the base is aligned with
//! the recorded start, within the record's `window_ms` (the commit lies at
//! most that long before the base). A term whose start was not seen live
//! (a snapshot, a replay) cannot be aligned: its times are unknown.
//!
//! The margin is (the earliest moment another holder could have acted) −
//! (acting ended), where the first is the earliest of:
//! - the lease's earliest end as the holder knew it (its last confirmed
//!   renewal plus the TTL, or its own request ending the term): on the
//!   holder's clock, exact, no alignment;
//! - the term's end in etcd, when the lease ended with it (`expired`,
//!   `resigned`: a revoke by anyone);
//! - the next term's start.
//!
//! Negative: the holder acted past the moment another could have; against
//! the next term's start, two holders acted at once for that long (the
//! view's `overlap_ms`). When acting's end is
//! only bounded (a guard's deadline) or not reported, the margin is
//! unknown, never guessed.

use serde::Serialize;

use super::EndCause;
use crate::election::acting::ActingRecord;

/// How much later than its own arrival a version may place acting's end
/// (the alignment's error beside the watcher's latency): a claim past that
/// is of a moment that had not come when it was written, and is not taken.
pub const ARRIVAL_SLACK_MS: i64 = 1_000;

/// How long after its term's end a version of the holder's record is still
/// taken (a holder cut off from etcd retries for twice its TTL): the
/// history reads versions that late, and the metrics keep a term that long
/// for them, so both take the same versions and the same end.
pub const LATE_MS: i64 = 10 * 60 * 1000;

/// The versions of one term's record, merged: later versions fill in what
/// earlier ones did not say. `late` per part: as the version that first
/// said it. Every version that says acting ended is kept as a claim: the
/// view takes the latest end no claim's own arrival contradicts, so an
/// early end written by anyone during the term (the record's key may be
/// written by any client that may write `election/`) never hides a later
/// true one, and a late one cannot reach past the moment it arrived.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Merged {
    pub record: Option<ActingRecord>,
    pub began_late: bool,
    pub ended_late: bool,
    /// The etcd revision of the version that first said acting ended.
    pub end_revision: Option<i64>,
    /// Each version's end claim.
    pub ends: Vec<EndClaim>,
}

/// One version's claim that acting ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct EndClaim {
    /// On the holder's clock, from its base.
    pub ended_ms: i64,
    /// The etcd revision that wrote it.
    pub revision: i64,
    /// When the watcher received it (unix ms).
    pub arrived_ms: i64,
    pub late: bool,
}

impl Merged {
    /// Adds the version written at etcd revision `revision`, received at
    /// `arrived_ms`.
    pub fn add(&mut self, r: &ActingRecord, revision: i64, arrived_ms: i64) {
        if let Some(ended_ms) = r.ended_ms {
            self.ends.push(EndClaim {
                ended_ms,
                revision,
                arrived_ms,
                late: r.late,
            });
        }
        if r.has_end() && !self.record.as_ref().is_some_and(ActingRecord::has_end) {
            self.end_revision = Some(revision);
        }
        let Some(m) = &mut self.record else {
            self.began_late = r.began_ms.is_some() && r.late;
            self.ended_late = r.has_end() && r.late;
            self.record = Some(r.clone());
            return;
        };
        if m.began_ms.is_none() && r.began_ms.is_some() {
            self.began_late = r.late;
        }
        if !m.has_end() && r.has_end() {
            self.ended_late = r.late;
        }
        m.began_ms = m.began_ms.or(r.began_ms);
        m.stopping_ms = m.stopping_ms.or(r.stopping_ms);
        if r.ended_ms.is_some() {
            m.ended_ms = r.ended_ms;
            m.ended_by_ms = None;
        } else if m.ended_ms.is_none() && r.ended_by_ms.is_some() {
            m.ended_by_ms = r.ended_by_ms;
        }
        m.lease_end_ms = match (m.lease_end_ms, r.lease_end_ms) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, b) => a.or(b),
        };
        m.guard_slack_ms = m.guard_slack_ms.or(r.guard_slack_ms);
        m.late |= r.late;
    }
}

/// What is known of a term, from etcd's side.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TermFacts {
    /// When the watcher saw it start; `None` when that was not seen live.
    pub started_at_ms: Option<i64>,
    pub ended_at_ms: Option<i64>,
    /// The etcd revision of the term's end.
    pub ended_revision: Option<i64>,
    /// The end was seen as it happened (not replayed): its time counts.
    pub end_seen_live: bool,
    pub end_cause: Option<EndCause>,
    /// The next term's start; `Known(None)`: none (yet).
    pub next_started_at_ms: Next,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Next {
    Known(Option<i64>),
    Unknown,
}

/// A term's acting on etcd's time (unix ms), as the API gives it. `None`:
/// unknown (not reported, or the term's start not seen live).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
#[cfg_attr(feature = "server", derive(utoipa::ToSchema))]
pub struct ActingView {
    pub acting_started_ms: Option<i64>,
    pub acting_started_late: bool,
    /// Stopping began (the loss seen, a signal, the program's own exit).
    pub acting_stopping_ms: Option<i64>,
    /// Acting ended (the program's group dead).
    pub acting_stopped_ms: Option<i64>,
    /// Acting's end not reported exactly: it ended by here at the latest
    /// (the guard's deadline, or when the holder last looked).
    pub acting_stopped_by_ms: Option<i64>,
    pub acting_stopped_late: bool,
    /// See the module documentation; `None`: unknown.
    pub margin_ms: Option<i64>,
    /// How far the margin and the times may be off (the alignment's
    /// window); 0 when the margin came from the holder's clock alone.
    pub margin_bound_ms: Option<i64>,
    /// What the margin was measured against: `lease`, `term_end`,
    /// `next_term`.
    #[cfg_attr(feature = "server", schema(value_type = Option<String>))]
    pub margin_against: Option<&'static str>,
    /// How long this holder acted on after the next term began: two
    /// holders acting at once (0: it had stopped; `None`: unknown). A
    /// negative margin against the lease alone is a risk (the lease could
    /// have ended), this is what happened.
    pub overlap_ms: Option<i64>,
}

impl ActingView {
    /// When acting stopped, in words, with times written by `time`; its
    /// term ended in etcd (`term_ended`) or not.
    pub fn stopped_text(&self, term_ended: bool, time: impl Fn(i64) -> String) -> String {
        match (self.acting_stopped_ms, self.acting_stopped_by_ms) {
            (Some(s), _) if self.acting_stopped_late => format!("{} (reported late)", time(s)),
            (Some(s), _) => time(s),
            (None, Some(by)) => format!("by {} at the latest (its guard's deadline)", time(by)),
            (None, None) if term_ended => "not reported: unknown".to_owned(),
            (None, None) => "still acting".to_owned(),
        }
    }
}

/// The term's acting on etcd's time, and its margin.
pub fn view(term: &TermFacts, merged: &Merged) -> ActingView {
    // Not placeable on etcd's time: the start not seen live, or the
    // holder's win learned from a watch event at an unknown delay.
    let (Some(r), Some(start)) = (&merged.record, term.started_at_ms) else {
        return ActingView::default();
    };
    if r.window_ms.is_none() {
        return ActingView::default();
    }
    let at = |offset: Option<i64>| offset.map(|o| start.saturating_add(o));
    let less = i64::saturating_sub;
    let (ended_ms, ended_late, end_revision) = reported_end(merged, r, start);
    let mut v = ActingView {
        acting_started_ms: at(r.began_ms),
        acting_started_late: merged.began_late,
        acting_stopping_ms: at(r.stopping_ms),
        acting_stopped_ms: at(ended_ms),
        acting_stopped_by_ms: at(r.ended_by_ms),
        acting_stopped_late: ended_late,
        ..ActingView::default()
    };
    let Some(ended) = ended_ms else {
        // Not reported: a guard kills the group `slack` before the lease's
        // earliest expiry, which is no later than etcd's expiry.
        if let (None, Some(slack), Some(EndCause::Expired), Some(end)) = (
            r.ended_by_ms,
            r.guard_slack_ms,
            term.end_cause,
            term.ended_at_ms,
        ) {
            v.acting_stopped_by_ms = Some(less(end, slack));
        }
        return v;
    };
    let Some(candidates) = margin_candidates(term, r, start, ended, end_revision, &mut v) else {
        return v;
    };
    if let Some((margin, bound, against)) = smallest(&candidates) {
        v.margin_ms = Some(margin);
        v.margin_bound_ms = Some(bound);
        v.margin_against = Some(against);
    }
    v
}

/// The latest end that had come when its version arrived: (its offset on
/// the holder's clock, reported late, its revision); none known when only
/// impossible claims were made.
fn reported_end(merged: &Merged, r: &ActingRecord, start: i64) -> (Option<i64>, bool, Option<i64>) {
    let claim = merged
        .ends
        .iter()
        .filter(|c| {
            start.saturating_add(c.ended_ms) <= c.arrived_ms.saturating_add(ARRIVAL_SLACK_MS)
        })
        .max_by_key(|c| (c.ended_ms, c.revision));
    match (claim, merged.ends.is_empty()) {
        (Some(c), _) => (Some(c.ended_ms), c.late, Some(c.revision)),
        // Only impossible claims: acting's end is not known.
        (None, false) => (None, false, None),
        (None, true) => (r.ended_ms, merged.ended_late, merged.end_revision),
    }
}

/// What acting's end (`ended`, from `start`) is measured against: the
/// lease's end, the term's end, the next term's start (each with its
/// bound), and the overlap with the next term, set in `v`. `None`: the
/// margin is unknown (the lease ended at a moment not known, or another
/// term may have started before acting ended).
fn margin_candidates(
    term: &TermFacts,
    r: &ActingRecord,
    start: i64,
    ended: i64,
    end_revision: Option<i64>,
    v: &mut ActingView,
) -> Option<Vec<(i64, i64, &'static str)>> {
    let less = i64::saturating_sub;
    let window = r.window_ms?;
    let ended_at = start.saturating_add(ended);
    // The end's record was in etcd no later than the term's end (the
    // resign's own txn, or before it): acting ended before any successor
    // could start, whatever the clocks say. Revisions, not times.
    let ended_first = matches!(
        (end_revision, term.ended_revision),
        (Some(said), Some(end)) if said <= end
    );
    // A placed moment comes with its bound; where the revisions say
    // acting ended first, it cannot be before that end.
    let placed = |moment: i64| {
        let m = less(moment, ended_at);
        if ended_first {
            m.max(0)
        } else {
            m
        }
    };
    let mut candidates: Vec<(i64, i64, &'static str)> = Vec::new();
    if let Some(lease_end) = r.lease_end_ms {
        candidates.push((less(lease_end, ended), 0, "lease"));
    }
    let lease_went = matches!(
        term.end_cause,
        Some(EndCause::Expired) | Some(EndCause::Resigned)
    );
    match (lease_went, term.ended_at_ms) {
        (true, Some(end)) if term.end_seen_live => {
            candidates.push((placed(end), window, "term_end"))
        }
        // The lease ended with the key at a moment not known: so is the
        // margin.
        (true, Some(_)) => return None,
        _ => {}
    }
    match term.next_started_at_ms {
        Next::Known(Some(next)) => {
            candidates.push((placed(next), window, "next_term"));
            v.overlap_ms = Some(if ended_first {
                0
            } else {
                less(ended_at, next).max(0)
            });
        }
        Next::Known(None) => v.overlap_ms = Some(0),
        // Another term may have started before acting ended: unknown.
        Next::Unknown => return None,
    }
    Some(candidates)
}

/// The smallest candidate, where the exact one (`lease`: the holder's own
/// clock) gives way to a placed one only if that is lower by more than its
/// bound: within it, the two cannot be told apart, and the exact one is
/// kept (with the placed one's bound: the truth may be that much lower).
fn smallest(candidates: &[(i64, i64, &'static str)]) -> Option<(i64, i64, &'static str)> {
    let exact = candidates.iter().find(|c| c.2 == "lease").copied();
    let placed = candidates
        .iter()
        .filter(|c| c.2 != "lease")
        .min_by_key(|c| c.0)
        .copied();
    match (exact, placed) {
        (Some(e), Some(p)) if p.0 < e.0.saturating_sub(p.1) => Some(p),
        (Some(e), Some(p)) if p.0 < e.0.saturating_add(p.1) => Some((e.0, p.1, e.2)),
        (Some(e), _) => Some(e),
        (None, p) => p,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn record(began: i64, ended: Option<i64>, lease_end: Option<i64>) -> ActingRecord {
        ActingRecord {
            v: 1,
            token: 5,
            holder: "h".into(),
            window_ms: Some(3),
            began_ms: Some(began),
            stopping_ms: None,
            ended_ms: ended,
            ended_by_ms: None,
            lease_end_ms: lease_end,
            guard_slack_ms: None,
            sent_ms: 0,
            late: false,
        }
    }

    fn facts(end: Option<(i64, EndCause)>, next: Next) -> TermFacts {
        TermFacts {
            started_at_ms: Some(1_000),
            ended_at_ms: end.map(|e| e.0),
            ended_revision: end.map(|_| 100),
            end_seen_live: true,
            end_cause: end.map(|e| e.1),
            next_started_at_ms: next,
        }
    }

    fn merged(records: &[ActingRecord]) -> Merged {
        let mut m = Merged::default();
        // Written after the term's end (revision 100), unless a test
        // says otherwise.
        for r in records {
            m.add(r, 101, ARRIVED);
        }
        m
    }

    /// When the tests' records arrived: after every moment they report.
    const ARRIVED: i64 = 1_000_000;

    #[test]
    fn an_end_claimed_past_its_own_arrival_is_not_taken() {
        // Written seconds after the term ended, claiming acting ended an
        // hour after the term began: a moment that had not come.
        let mut m = Merged::default();
        m.add(&record(2, Some(3_600_000), Some(2_750)), 101, 5_000);
        let f = facts(Some((4_000, EndCause::Expired)), Next::Known(Some(4_000)));
        let v = view(&f, &m);
        assert_eq!(
            (v.acting_stopped_ms, v.overlap_ms, v.margin_ms),
            (None, None, None)
        );
        // A true end arriving with its slack is taken.
        let mut m = Merged::default();
        m.add(&record(2, Some(3_500), Some(2_750)), 101, 3_900);
        assert_eq!(view(&f, &m).acting_stopped_ms, Some(4_500));
    }

    #[test]
    fn an_early_end_written_during_the_term_does_not_hide_a_later_true_one() {
        // Someone writes "acting ended at 500" during the term (revision
        // 50, before the term's end at 100); the holder's true record
        // (after the end) says 2_750: the next term began at 3_000, so
        // 750 ms of overlap, whichever order the versions came in.
        let f = facts(Some((3_000, EndCause::Expired)), Next::Known(Some(3_000)));
        let forged = record(2, Some(500), Some(2_000));
        let true_one = record(2, Some(2_750), Some(2_000));
        for order in [
            [(&forged, 50), (&true_one, 101)],
            [(&true_one, 101), (&forged, 102)],
        ] {
            let mut m = Merged::default();
            for (r, rev) in order {
                m.add(r, rev, ARRIVED);
            }
            let v = view(&f, &m);
            assert_eq!(v.overlap_ms, Some(750), "{order:?}");
            assert_eq!(v.acting_stopped_ms, Some(3_750));
        }
    }

    #[test]
    fn an_expiry_is_measured_against_the_leases_earliest_end_on_the_holders_clock() {
        let m = merged(&[record(2, None, None), record(2, Some(2_000), Some(2_750))]);
        let v = view(
            &facts(Some((4_000, EndCause::Expired)), Next::Known(Some(4_010))),
            &m,
        );
        assert_eq!(v.acting_started_ms, Some(1_002));
        assert_eq!(v.acting_stopped_ms, Some(3_000));
        assert_eq!(v.margin_ms, Some(750));
        assert_eq!(v.margin_against, Some("lease"));
        assert_eq!(v.margin_bound_ms, Some(0));
        assert_eq!(v.overlap_ms, Some(0));
    }

    #[test]
    fn a_next_term_that_began_before_acting_ended_is_an_overlap() {
        // Deposed at 2,000, a waiter took over at 2,005; the holder's group
        // died at 2,800.
        let m = merged(&[record(2, Some(1_800), Some(9_000))]);
        let v = view(
            &facts(Some((2_000, EndCause::Deleted)), Next::Known(Some(2_005))),
            &m,
        );
        assert_eq!(v.margin_ms, Some(-795));
        assert_eq!(v.margin_against, Some("next_term"));
        assert_eq!(v.margin_bound_ms, Some(3));
        assert_eq!(v.overlap_ms, Some(795));
        // A depose's end is the key's, not the lease's: with nobody next,
        // only the lease counts.
        let alone = view(
            &facts(Some((2_000, EndCause::Deleted)), Next::Known(None)),
            &m,
        );
        assert_eq!(alone.margin_ms, Some(7_200));
    }

    #[test]
    fn unknown_when_the_end_is_only_bounded_the_start_unseen_or_the_next_term_unknown() {
        let mut bounded = record(2, None, Some(3_000));
        bounded.ended_by_ms = Some(2_750);
        let f = facts(Some((4_000, EndCause::Expired)), Next::Known(None));
        let v = view(&f, &merged(&[bounded]));
        assert_eq!(v.acting_stopped_by_ms, Some(3_750));
        assert_eq!(v.margin_ms, None);
        let exact = merged(&[record(2, Some(2_000), Some(2_750))]);
        let unseen = TermFacts {
            started_at_ms: None,
            ..f
        };
        assert_eq!(view(&unseen, &exact), ActingView::default());
        let v = view(
            &facts(Some((4_000, EndCause::Expired)), Next::Unknown),
            &exact,
        );
        assert_eq!(v.margin_ms, None);
        assert_eq!(v.acting_stopped_ms, Some(3_000));
    }

    #[test]
    fn a_placed_candidate_within_its_bound_of_the_exact_one_does_not_replace_it() {
        // A resign: acting ended as the resign was sent (lease 0 ms); the
        // term's end, placed within ±3 ms, reads 1 ms before.
        let m = merged(&[record(2, Some(2_000), Some(2_000))]);
        let v = view(
            &facts(Some((2_999, EndCause::Resigned)), Next::Known(None)),
            &m,
        );
        assert_eq!(
            (v.margin_ms, v.margin_bound_ms, v.margin_against),
            (Some(0), Some(3), Some("lease"))
        );
        // Beyond its bound it does.
        let v = view(
            &facts(Some((2_990, EndCause::Resigned)), Next::Known(None)),
            &m,
        );
        assert_eq!(
            (v.margin_ms, v.margin_against),
            (Some(-10), Some("term_end"))
        );
    }

    #[test]
    fn an_end_recorded_in_the_terms_own_end_revision_is_no_overlap_whatever_the_clocks() {
        // A resign whose txn carried the record (revision 100, the term's
        // end); a queued successor starts in that same revision, placed
        // 2 ms before acting ended by the clocks' jitter.
        let mut m = Merged::default();
        m.add(&record(2, Some(2_000), Some(2_000)), 100, ARRIVED);
        let f = facts(Some((3_001, EndCause::Resigned)), Next::Known(Some(2_998)));
        let v = view(&f, &m);
        assert_eq!(v.overlap_ms, Some(0));
        assert_eq!((v.margin_ms, v.margin_against), (Some(0), Some("lease")));
        // The same times with the record written after the end: an overlap.
        let v = view(&f, &merged(&[record(2, Some(2_000), Some(2_000))]));
        assert_eq!(v.overlap_ms, Some(2));
    }

    #[test]
    fn a_win_learned_from_a_watch_or_an_end_replayed_cannot_be_placed() {
        let mut r = record(2, Some(2_000), Some(2_750));
        r.window_ms = None;
        let f = facts(Some((4_000, EndCause::Expired)), Next::Known(None));
        assert_eq!(view(&f, &merged(&[r])), ActingView::default());
        let replayed_end = TermFacts {
            end_seen_live: false,
            ..f
        };
        let v = view(
            &replayed_end,
            &merged(&[record(2, Some(2_000), Some(2_750))]),
        );
        assert_eq!(v.margin_ms, None);
        assert_eq!(v.acting_stopped_ms, Some(3_000));
    }

    #[test]
    fn a_revoke_by_someone_else_ends_the_lease_before_the_holder_knew() {
        let m = merged(&[record(2, Some(2_000), Some(5_000))]);
        let v = view(
            &facts(Some((2_500, EndCause::Resigned)), Next::Known(None)),
            &m,
        );
        assert_eq!(v.margin_ms, Some(-500));
        assert_eq!(v.margin_against, Some("term_end"));
    }

    #[test]
    fn late_is_said_per_part_by_the_version_that_first_said_it() {
        let mut end = record(2, Some(2_000), Some(2_750));
        end.late = true;
        let m = merged(&[record(2, None, None), end]);
        assert!(!m.began_late);
        assert!(m.ended_late);
    }
}
