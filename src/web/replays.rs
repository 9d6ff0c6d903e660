//! Which recorded changes were replayed (reached the watcher after the
//! fact: a reconnect, a restart, a gap's or a reset's reload) and what
//! their recorded times are then worth. Pure.
//!
//! A replayed change carries the replay's arrival time: it happened at or
//! before it, after the `since` of its mark (`None`: unknown). Views show
//! such a time as a bound (`≤ 12:00:03`, with the range in a title) and a
//! duration that depends on it as a range, never as a confident figure.

use crate::events::{Event, EventKind};
use crate::history::{format_duration_ms, short_time};

/// Changes of `from_revision..=to_revision` recorded at `at_ms` were
/// replayed: they happened after `since_ms` (`None`: unknown when).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ReplayMark {
    pub at_ms: i64,
    pub from_revision: i64,
    pub to_revision: i64,
    pub since_ms: Option<i64>,
}

/// The marks among `events` (the fleet-wide ones: gaps, resets and
/// `unobserved`), in their order.
pub fn marks<'a>(events: impl IntoIterator<Item = &'a Event>) -> Vec<ReplayMark> {
    events
        .into_iter()
        .filter_map(|e| {
            let (from_revision, to_revision, since_ms) = match e.kind {
                // What a gap's or a reset's reload recorded happened at some
                // unknown point before it.
                EventKind::Gap {
                    from_revision,
                    to_revision,
                } => (from_revision, to_revision, None),
                EventKind::Reset { from_revision, .. } => (from_revision, from_revision, None),
                EventKind::Unobserved {
                    from_revision,
                    to_revision,
                    since_ms,
                } => (from_revision, to_revision, since_ms),
                _ => return None,
            };
            Some(ReplayMark {
                at_ms: e.at_ms,
                from_revision,
                to_revision,
                since_ms,
            })
        })
        .collect()
}

/// When a change recorded at (`revision`, `at_ms`) may really have
/// happened: `None` if it was seen as it happened; else the earliest moment
/// (`Some(None)`: unknown). A replay's changes carry the replay's arrival
/// time, so both must match.
pub fn replayed_since(marks: &[ReplayMark], revision: i64, at_ms: i64) -> Option<Option<i64>> {
    marks
        .iter()
        .find(|r| r.at_ms == at_ms && (r.from_revision..=r.to_revision).contains(&revision))
        .map(|r| r.since_ms)
}

/// The part of `[lo, hi)` that was not watched: from `unwatched_since`
/// (the last moment a watcher recording this history is known to have
/// been live, when none is live now) on. What happened in it reaches the
/// history only when a watcher replays it, so whether an election had a
/// leader there is unknown: leaderless time in it is a bound, never a
/// figure. `None` when everything was watched.
pub fn not_watched(unwatched_since: Option<i64>, lo: i64, hi: i64) -> Option<(i64, i64)> {
    unwatched_since
        .map(|since| (since.max(lo), hi))
        .filter(|(a, b)| b > a)
}

/// Leaderless time in `[lo, hi)`, least and most, from `spans` (a term's
/// earliest possible start to its latest possible end, and its latest start
/// to its earliest end), with the part not watched counted as led in the
/// least and as leaderless in the most; open terms (`open[i]`) are taken to
/// end where watching stopped in the most.
pub fn leaderless_range(
    least: &[(i64, i64)],
    most: &[(i64, i64)],
    lo: i64,
    hi: i64,
    unwatched_since: Option<i64>,
) -> (i64, i64) {
    let tail = not_watched(unwatched_since, lo, hi);
    let total = |mut v: Vec<(i64, i64)>| -> i64 {
        for s in &mut v {
            s.1 = s.1.max(s.0);
        }
        v.sort();
        crate::web::timeline::uncovered(&v, lo, hi)
            .iter()
            .map(|(a, b)| b - a)
            .sum()
    };
    let mut least = least.to_vec();
    least.extend(tail);
    let most: Vec<(i64, i64)> = match tail {
        // Nothing is known after watching stopped: a term is known to have
        // led only until then.
        Some((from, _)) => most.iter().map(|&(a, b)| (a, b.min(from.max(a)))).collect(),
        None => most.to_vec(),
    };
    (total(least), total(most))
}

/// A recorded moment: exact, or only bounded (replayed).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Moment {
    /// The recorded time: the moment itself, or its upper bound.
    pub at_ms: i64,
    /// `None`: seen as it happened. `Some(lo)`: replayed, it happened in
    /// `lo..=at_ms` (`lo` `None`: at some unknown point before `at_ms`).
    pub replayed: Option<Option<i64>>,
}

impl Moment {
    pub fn of(marks: &[ReplayMark], revision: i64, at_ms: i64) -> Self {
        Self {
            at_ms,
            replayed: replayed_since(marks, revision, at_ms),
        }
    }

    /// Seen as it happened.
    pub fn exact(at_ms: i64) -> Self {
        Self {
            at_ms,
            replayed: None,
        }
    }

    /// The earliest it can have been (`None`: unknown).
    fn earliest(&self) -> Option<i64> {
        match self.replayed {
            None => Some(self.at_ms),
            Some(lo) => lo.map(|lo| lo.min(self.at_ms)),
        }
    }

    /// What a table cell shows: the time; for a replayed one, a `≤` mark
    /// and the title saying what is known.
    pub fn cell(&self) -> TimeCell {
        TimeCell {
            text: short_time(self.at_ms),
            bound: self.replayed.map(|lo| match lo {
                Some(lo) => format!(
                    "replayed, not seen as it happened: between {} and {}",
                    short_time(lo.min(self.at_ms)),
                    short_time(self.at_ms)
                ),
                None => format!(
                    "replayed, not seen as it happened: at some unknown moment before {}",
                    short_time(self.at_ms)
                ),
            }),
        }
    }
}

/// A time as a table shows it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TimeCell {
    pub text: String,
    /// `Some(why)`: the time is only an upper bound; `why` says which range.
    pub bound: Option<String>,
}

/// The time from `start` to `end` (`None`: still running at `now`): exact
/// when both were seen as they happened, else the range they allow
/// (`1.2s–3.4s`, or `≤ 3.4s` when the end's lower bound is unknown).
pub fn duration_text(start: Moment, end: Option<Moment>, now: i64) -> String {
    let end = end.unwrap_or(Moment::exact(now));
    if start.replayed.is_none() && end.replayed.is_none() {
        return format_duration_ms(end.at_ms - start.at_ms);
    }
    // Longest: the earliest start to the latest end; shortest: the latest
    // start to the earliest end (never below 0: an end follows its start).
    let most = start.earliest().map(|s| end.at_ms - s);
    let least = end.earliest().map(|e| (e - start.at_ms).max(0));
    match (least, most) {
        (Some(l), Some(m)) if l == m => format_duration_ms(l),
        (Some(l), Some(m)) => format!("{}–{}", format_duration_ms(l), format_duration_ms(m)),
        (Some(l), None) => format!("≥ {}", format_duration_ms(l)),
        (None, Some(m)) => format!("≤ {}", format_duration_ms(m)),
        (None, None) => "unknown".to_owned(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn unobserved(at_ms: i64, from: i64, to: i64, since: Option<i64>) -> Event {
        Event {
            revision: from,
            at_ms,
            election: String::new(),
            kind: EventKind::Unobserved {
                from_revision: from,
                to_revision: to,
                since_ms: since,
            },
        }
    }

    #[test]
    fn a_change_is_replayed_only_inside_its_marks_range_and_arrival() {
        let events = [
            unobserved(10_000, 5, 7, Some(4_000)),
            Event {
                revision: 9,
                at_ms: 20_000,
                election: String::new(),
                kind: EventKind::Gap {
                    from_revision: 8,
                    to_revision: 9,
                },
            },
        ];
        let m = marks(&events);
        assert_eq!(m.len(), 2);
        assert_eq!(replayed_since(&m, 6, 10_000), Some(Some(4_000)));
        // Another arrival time: seen live.
        assert_eq!(replayed_since(&m, 6, 10_001), None);
        // Outside the range.
        assert_eq!(replayed_since(&m, 8, 10_000), None);
        // A gap's reload: unknown since when.
        assert_eq!(replayed_since(&m, 9, 20_000), Some(None));
    }

    #[test]
    fn time_not_watched_is_a_bound_not_leaderless() {
        // A term 0..1,000, leaderless after; watched until 3,000, the
        // report at 10,000: 2,000 certain, 7,000 unknown.
        let spans = [(0, 1_000)];
        assert_eq!(
            leaderless_range(&spans, &spans, 0, 10_000, Some(3_000)),
            (2_000, 9_000)
        );
        assert_eq!(
            leaderless_range(&spans, &spans, 0, 10_000, None),
            (9_000, 9_000)
        );
        // An open term (to 10,000): it may have ended when watching stopped.
        let open = [(0, 10_000)];
        assert_eq!(
            leaderless_range(&open, &open, 0, 10_000, Some(3_000)),
            (0, 7_000)
        );
        assert_eq!(not_watched(Some(3_000), 0, 2_000), None);
        assert_eq!(not_watched(Some(3_000), 4_000, 9_000), Some((4_000, 9_000)));
    }

    #[test]
    fn durations_are_ranges_when_a_boundary_was_replayed() {
        let live = |at| Moment::exact(at);
        let replayed = |at, lo| Moment {
            at_ms: at,
            replayed: Some(lo),
        };
        assert_eq!(duration_text(live(1_000), Some(live(3_500)), 0), "2.5s");
        // The end replayed, known to lie in 2,000..=3,500.
        assert_eq!(
            duration_text(live(1_000), Some(replayed(3_500, Some(2_000))), 0),
            "1.0s–2.5s"
        );
        // The start replayed in 0..=1,000, still running at 4,000.
        assert_eq!(
            duration_text(replayed(1_000, Some(0)), None, 4_000),
            "3.0s–4.0s"
        );
        // The end's lower bound unknown: only the longest is known.
        assert_eq!(
            duration_text(live(1_000), Some(replayed(3_500, None)), 0),
            "≤ 2.5s"
        );
        // The start's lower bound unknown: only the shortest.
        assert_eq!(
            duration_text(replayed(1_000, None), Some(live(3_500)), 0),
            "≥ 2.5s"
        );
        let c = replayed(1_000, Some(400)).cell();
        assert!(c.bound.as_deref().is_some_and(|b| b.contains("between")));
        assert_eq!(live(1_000).cell().bound, None);
    }
}
