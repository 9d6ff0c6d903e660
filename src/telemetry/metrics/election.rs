//! The state behind one election's series: plain numbers, updated from the
//! election's events (pure: no registry, no text, no clock).

use crate::election::FenceReason;
use crate::events::{EndCause, Event, EventKind, OpenTerm};

use super::families::TERM_DURATION_BUCKETS;
use super::{cap_label, MAX_HOLDER_LABEL_BYTES};

/// Index of a cause in [`Detail::term_ends`].
pub(super) fn cause_index(cause: EndCause) -> usize {
    match cause {
        EndCause::Resigned => 0,
        EndCause::Expired => 1,
        EndCause::Deleted => 2,
        EndCause::Superseded => 3,
        EndCause::Unknown => 4,
        EndCause::Switchover => 5,
        EndCause::TakenOver => 6,
    }
}

/// Index of a reason in [`Series::refusals`].
pub(super) fn fence_reason_index(reason: FenceReason) -> usize {
    match reason {
        FenceReason::StaleToken => 0,
        FenceReason::TermEnded => 1,
        FenceReason::NoLeader => 2,
    }
}

/// A term-duration histogram's values.
#[derive(Debug, Default, Clone)]
pub(super) struct Hist {
    /// Observations per bucket (not cumulative); above the last bound:
    /// only in `count`.
    pub counts: [u64; TERM_DURATION_BUCKETS.len()],
    pub sum: f64,
    pub count: u64,
}

impl Hist {
    pub fn observe(&mut self, v: f64) {
        if let Some(i) = TERM_DURATION_BUCKETS.iter().position(|b| v <= *b) {
            self.counts[i] += 1;
        }
        self.sum += v;
        self.count += 1;
    }
}

/// The values of one election's always-present series (created, at zero,
/// when the election is first seen).
#[derive(Debug, Default, Clone)]
pub(super) struct Series {
    pub has_leader: i64,
    pub leader_changes: u64,
    pub fencing_token: i64,
    pub term_start: f64,
    /// Milliseconds, summed as integers: a sum of f64 seconds depends on
    /// when it was accrued (3510.002 vs 3510.0020000000004 for the same
    /// time), and a counter must not.
    pub leaderless_ms: i64,
    pub refusals: [u64; 3],
    pub accepted: u64,
    pub refused: u64,
}

/// The opt-in per-election families: term durations and term ends by cause.
#[derive(Debug, Default, Clone)]
pub(super) struct Detail {
    pub term_duration: Hist,
    pub term_ends: [u64; EndCause::ALL.len()],
}

pub(super) struct Term {
    pub token: i64,
    pub lease_id: i64,
    /// The `holder` label of its `leader_info` series (already capped).
    pub holder_label: String,
    /// Seen first in a snapshot: its real start is unknown.
    pub from_snapshot: bool,
}

pub(super) struct Election {
    pub series: Series,
    /// Only with per-election detail.
    pub detail: Option<Box<Detail>>,
    /// The current term; its holder is the one `leader_info` series.
    pub term: Option<Term>,
    /// `lease_remaining_seconds`, while it has a series.
    pub lease_remaining: Option<i64>,
    /// Held by a Kubernetes Lease: lapsed, and the renew interval in
    /// seconds (`lease_lapsed`, `lease_renew_interval_seconds`).
    pub renewing: Option<(bool, Option<f64>)>,
    /// Candidates queued behind the leader (the watcher's count).
    pub waiting: usize,
    /// Start (unix ms) of leaderless time not yet added to
    /// `leaderless_seconds_total`; `None` while someone leads, or before the
    /// first term end this process saw.
    leaderless_since_ms: Option<i64>,
    /// Leaderless when the watcher stopped being live: the time until it
    /// is live again is not counted (nobody watched), and counting resumes
    /// then if still leaderless.
    leaderless_paused: bool,
    /// This process saw a term of it end (its current term, or the last
    /// one): from then on `leaderless_seconds_total` has a series.
    lost_leader: bool,
    /// Its holders' values are not labels (another system's election,
    /// without `--source-holder-labels`): `leader_info{holder=""}`.
    hide_holder: bool,
}

/// A term end, as the fleet-wide families count it.
#[derive(Debug, Clone, Copy)]
pub(super) struct Ended {
    pub cause: EndCause,
    /// Seconds, when the term's start and end were both seen.
    pub duration: Option<f64>,
}

impl Election {
    /// `hide_holder`: see the field.
    pub fn new(detail: bool, hide_holder: bool) -> Self {
        Self {
            hide_holder,
            series: Series::default(),
            detail: detail.then(Box::default),
            term: None,
            lease_remaining: None,
            renewing: None,
            waiting: 0,
            leaderless_since_ms: None,
            leaderless_paused: false,
            lost_leader: false,
        }
    }

    /// A term history holds as open, adopted at start-up.
    pub fn adopt(&mut self, t: &OpenTerm) {
        self.series.has_leader = 1;
        self.series.fencing_token = self.series.fencing_token.max(t.token);
        self.series.term_start = t.started_at_ms as f64 / 1000.0;
        self.term = Some(Term {
            token: t.token,
            lease_id: t.lease_id,
            holder_label: holder_label(self.hide_holder, &t.holder).to_owned(),
            // Its duration was not watched whole by this process.
            from_snapshot: true,
        });
    }

    /// A lease sample; one of an earlier term's lease says nothing about now.
    pub fn sample_lease(&mut self, lease_id: i64, remaining_seconds: Option<i64>) {
        if self.term.as_ref().map(|t| t.lease_id) == Some(lease_id) {
            self.lease_remaining = remaining_seconds;
        }
    }

    /// Applies one event of this election; says whether a term ended.
    pub fn apply(&mut self, event: &Event) -> Option<Ended> {
        match &event.kind {
            EventKind::TermStarted {
                token,
                holder,
                lease_id,
                from_snapshot,
                ..
            } => self.started(event, *token, holder, *lease_id, *from_snapshot),
            EventKind::TermEnded {
                token,
                cause,
                started_at_ms,
                ..
            } => self.ended(event, *token, *cause, *started_at_ms),
            EventKind::LeaderValueChanged { token, holder, .. } => {
                let label = holder_label(self.hide_holder, holder);
                if let Some(t) = self.term.as_mut().filter(|t| t.token == *token) {
                    set_holder(t, label);
                }
                None
            }
            EventKind::FenceAccepted { .. } => {
                self.series.accepted += 1;
                None
            }
            EventKind::FenceRefused { reason, .. } => {
                self.series.refused += 1;
                self.series.refusals[fence_reason_index(*reason)] += 1;
                None
            }
            EventKind::Gap { .. }
            | EventKind::Reset { .. }
            | EventKind::Unobserved { .. }
            | EventKind::CandidateQueued { .. }
            | EventKind::CandidateLeft { .. }
            | EventKind::NameCollision { .. }
            | EventKind::TwoPrimaries { .. }
            | EventKind::Acting { .. } => None,
        }
    }

    /// A term started (or the same one again, from a resync).
    fn started(
        &mut self,
        event: &Event,
        token: i64,
        holder: &str,
        lease_id: i64,
        from_snapshot: bool,
    ) -> Option<Ended> {
        if let Some(mut old) = self.term.take() {
            if old.token == token {
                // The same term again (a resync): nothing started,
                // but a proclaim may have been missed.
                set_holder(&mut old, holder_label(self.hide_holder, holder));
                self.term = Some(old);
                return None;
            }
            self.lease_remaining = None;
        }
        self.accrue_leaderless(event.at_ms);
        self.leaderless_since_ms = None;
        self.leaderless_paused = false;
        let s = &mut self.series;
        s.has_leader = 1;
        s.leader_changes += 1;
        s.fencing_token = token;
        s.term_start = event.at_ms as f64 / 1000.0;
        self.term = Some(Term {
            token,
            lease_id,
            holder_label: holder_label(self.hide_holder, holder).to_owned(),
            from_snapshot,
        });
        None
    }

    /// A term ended: what ended, and how long it ran when this process
    /// saw it start.
    fn ended(
        &mut self,
        event: &Event,
        token: i64,
        cause: EndCause,
        started_at_ms: i64,
    ) -> Option<Ended> {
        let mut ended = Ended {
            cause,
            duration: None,
        };
        // The last term's token stays, even for a term this process
        // never saw start.
        self.series.fencing_token = self.series.fencing_token.max(token);
        match self.term.take() {
            Some(t) if t.token != token => {
                // The end of an older term, after a newer one began.
                self.term = Some(t);
            }
            current => {
                if let Some(t) = &current {
                    if !t.from_snapshot && cause != EndCause::Unknown {
                        let ms = event.at_ms.saturating_sub(started_at_ms).max(0);
                        ended.duration = Some(ms as f64 / 1000.0);
                    }
                }
                self.lease_remaining = None;
                self.renewing = None;
                self.series.has_leader = 0;
                self.lost_leader = true;
                if self.leaderless_since_ms.is_none() {
                    self.leaderless_since_ms = Some(event.at_ms);
                }
            }
        }
        if let Some(d) = self.detail.as_deref_mut() {
            d.term_ends[cause_index(cause)] += 1;
            if let Some(secs) = ended.duration {
                d.term_duration.observe(secs);
            }
        }
        Some(ended)
    }

    /// Whether the election has used the shared fence (a check recorded,
    /// accepted or refused): only then are its fence series written, all
    /// five of them (an election that never fenced would show five zeros).
    pub fn used_fence(&self) -> bool {
        self.series.accepted + self.series.refused > 0
    }

    /// Whether `leaderless_seconds_total` has a series: once this process
    /// saw the election lose a leader (its term ended), never before (a
    /// counter that would stay at 0 for every election that keeps its
    /// leader).
    pub fn shows_leaderless(&self) -> bool {
        self.lost_leader
    }

    /// The watcher stopped being live at `at_ms`: leaderless time stops
    /// growing.
    pub fn pause_leaderless(&mut self, at_ms: i64) {
        self.accrue_leaderless(at_ms);
        if self.leaderless_since_ms.take().is_some() {
            self.leaderless_paused = true;
        }
    }

    /// The watcher is live again at `at_ms`: an election still without a
    /// leader counts leaderless time from then on (what it replays next
    /// moves that as it does for live events).
    pub fn resume_leaderless(&mut self, at_ms: i64) {
        if std::mem::take(&mut self.leaderless_paused) && self.term.is_none() {
            self.leaderless_since_ms = Some(at_ms);
        }
    }

    /// Adds the leaderless time up to `until_ms` to the counter.
    pub fn accrue_leaderless(&mut self, until_ms: i64) {
        if let Some(since) = self.leaderless_since_ms {
            if until_ms > since {
                let ms = until_ms.saturating_sub(since);
                self.series.leaderless_ms = self.series.leaderless_ms.saturating_add(ms);
                self.leaderless_since_ms = Some(until_ms);
            }
        }
    }
}

/// The `holder` label of `holder`: capped, or empty where hidden.
fn holder_label(hide: bool, holder: &str) -> &str {
    if hide {
        ""
    } else {
        cap_label(holder, MAX_HOLDER_LABEL_BYTES)
    }
}

/// Moves the term's `leader_info` series to `label`.
fn set_holder(t: &mut Term, label: &str) {
    if label != t.holder_label {
        t.holder_label.clear();
        t.holder_label.push_str(label);
    }
}

#[cfg(test)]
mod tests {
    use super::Election;

    /// The counter is the same however its time was accrued (at renders,
    /// pauses, term starts): summed as f64 seconds, 1 ms then 3,510,001 ms
    /// gave 3510.0020000000004, not 3510.002 (a flaky exposition test).
    #[test]
    fn leaderless_time_does_not_depend_on_when_it_was_accrued() {
        let total = |until: &[i64]| {
            let mut e = Election::new(false, false);
            e.leaderless_since_ms = Some(0);
            for &at in until {
                e.accrue_leaderless(at);
            }
            e.series.leaderless_ms as f64 / 1000.0
        };
        assert_eq!(total(&[3_510_002]), 3510.002);
        assert_eq!(total(&[1, 3_510_002]), 3510.002);
        assert_eq!(total(&[1_000, 2_000_001, 3_510_002]), 3510.002);
    }
}
