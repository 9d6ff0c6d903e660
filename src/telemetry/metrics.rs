//! Prometheus metrics, updated only from the watcher's [`Update`]s.
//!
//! [`Metrics`] owns its own [`prometheus::Registry`] (never the global one),
//! so two instances (tests, two watchers) never collide. It is `Send + Sync`
//! and every method takes `&self`.
//!
//! # Cost per update
//!
//! `apply` is on the watcher's hot path. It takes one mutex, looks the
//! election up in a map keyed by name (no allocation), and then touches
//! metric handles cached per election (atomic operations, no label hashing).
//! Label lookups happen only for `leader_info` (its holder label changes)
//! and `lease_remaining_seconds` (its series comes and goes). Allocation
//! happens only the first time an election is seen.
//!
//! # Cardinality
//!
//! Every per-election family has at most one series per tracked election
//! (times a fixed enum: cause, reason, result); `leader_info` has one series
//! per election (the *current* holder only). Election cardinality is bounded
//! by the watcher, which tracks at most `--max-elections` elections and
//! reports the rest as [`WatchStatus::Overflow`] (counted here, never given
//! series). [`Update::Forgotten`] removes every series of an election.
//! Fence resources never become labels.
//!
//! # Hostile label values
//!
//! Holders come from etcd values, which anyone with write access can set:
//! the `holder` label is capped at [`MAX_HOLDER_LABEL_BYTES`] bytes, cut on a
//! char boundary (two holders sharing such a prefix share a label value).
//! Election names are validated by the watcher; they are capped at
//! [`MAX_ELECTION_LABEL_BYTES`] as well, which never changes a valid name.
//! The text encoder escapes `\`, `"` and newlines; nothing here panics on
//! any string.

use std::collections::HashMap;
use std::sync::{Mutex, MutexGuard};

use prometheus::core::Collector;
use prometheus::{
    Counter, CounterVec, Gauge, GaugeVec, Histogram, HistogramOpts, HistogramVec, IntCounter,
    IntCounterVec, IntGauge, IntGaugeVec, Opts, Registry, TextEncoder,
};

use crate::election::FenceReason;
use crate::events::{EndCause, Event, EventKind, RestartReason, Update, WatchStatus};

use super::TelemetryError;

/// The `Content-Type` of [`Metrics::render`]'s output: the Prometheus text
/// exposition format, version 0.0.4.
pub const CONTENT_TYPE: &str = prometheus::TEXT_FORMAT;

/// Longest `holder` label value, in bytes.
pub const MAX_HOLDER_LABEL_BYTES: usize = 128;
/// Longest `election` label value, in bytes (the longest valid name).
pub const MAX_ELECTION_LABEL_BYTES: usize = crate::election::keys::MAX_NAME_LEN;

/// Buckets of `tenure_election_term_duration_seconds`: 1 s to a week.
pub const TERM_DURATION_BUCKETS: &[f64] = &[
    1.0, 5.0, 15.0, 30.0, 60.0, 300.0, 900.0, 1800.0, 3600.0, 10_800.0, 21_600.0, 43_200.0,
    86_400.0, 172_800.0, 604_800.0,
];

/// Every metric family [`Metrics`] exposes, by name.
pub const METRIC_NAMES: &[&str] = &[
    "tenure_build_info",
    "tenure_election_fencing_token",
    "tenure_election_has_leader",
    "tenure_election_leader_changes_total",
    "tenure_election_leader_info",
    "tenure_election_leaderless_seconds_total",
    "tenure_election_lease_remaining_seconds",
    "tenure_election_term_duration_seconds",
    "tenure_election_term_ends_total",
    "tenure_election_term_start_timestamp_seconds",
    "tenure_etcd_up",
    "tenure_fencing_checks_total",
    "tenure_fencing_refusals_total",
    "tenure_history_gaps_total",
    "tenure_watch_elections",
    "tenure_watch_elections_overflow_total",
    "tenure_watch_events_total",
    "tenure_watch_ignored_keys_total",
    "tenure_watch_restarts_total",
    "tenure_watch_revision",
];

const FENCE_REASONS: [FenceReason; 3] = [
    FenceReason::StaleToken,
    FenceReason::TermEnded,
    FenceReason::NoLeader,
];

fn fence_reason_index(reason: FenceReason) -> usize {
    match reason {
        FenceReason::StaleToken => 0,
        FenceReason::TermEnded => 1,
        FenceReason::NoLeader => 2,
    }
}

fn cause_index(cause: EndCause) -> usize {
    match cause {
        EndCause::Resigned => 0,
        EndCause::Expired => 1,
        EndCause::Deleted => 2,
        EndCause::Superseded => 3,
        EndCause::Unknown => 4,
    }
}

/// `s` cut to at most `max` bytes, on a char boundary.
pub fn cap_label(s: &str, max: usize) -> &str {
    if s.len() <= max {
        return s;
    }
    let mut end = max;
    while !s.is_char_boundary(end) {
        end -= 1;
    }
    &s[..end]
}

/// The families, registered once.
struct Families {
    has_leader: IntGaugeVec,
    leader_changes: IntCounterVec,
    fencing_token: IntGaugeVec,
    term_start: GaugeVec,
    leaderless: CounterVec,
    term_duration: HistogramVec,
    term_ends: IntCounterVec,
    leader_info: IntGaugeVec,
    lease_remaining: IntGaugeVec,
    refusals: IntCounterVec,
    checks: IntCounterVec,
    events: IntCounter,
    restarts: IntCounterVec,
    revision: IntGauge,
    etcd_up: IntGauge,
    gaps: IntCounter,
    overflow: IntCounter,
    ignored_keys: IntCounter,
    elections: IntGauge,
}

/// The series of one election, looked up once when it is first seen.
struct Series {
    has_leader: IntGauge,
    leader_changes: IntCounter,
    fencing_token: IntGauge,
    term_start: Gauge,
    leaderless: Counter,
    term_duration: Histogram,
    term_ends: [IntCounter; EndCause::ALL.len()],
    refusals: [IntCounter; FENCE_REASONS.len()],
    accepted: IntCounter,
    refused: IntCounter,
}

struct Term {
    token: i64,
    lease_id: i64,
    /// The `holder` label of its `leader_info` series (already capped).
    holder_label: String,
    /// Seen first in a snapshot: its real start is unknown.
    from_snapshot: bool,
}

struct Election {
    series: Series,
    term: Option<Term>,
    /// Whether a `lease_remaining_seconds` series exists.
    lease_series: bool,
    /// Start (unix ms) of leaderless time not yet added to
    /// `leaderless_seconds_total`; `None` while someone leads, or before the
    /// first term end this process saw.
    leaderless_since_ms: Option<i64>,
}

/// Prometheus metrics of elections, fencing and the watcher; see the module
/// documentation for cost, cardinality and label handling.
pub struct Metrics {
    registry: Registry,
    f: Families,
    elections: Mutex<HashMap<String, Election>>,
}

impl std::fmt::Debug for Metrics {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Metrics").finish_non_exhaustive()
    }
}

fn reg<C: Collector + Clone + 'static>(registry: &Registry, c: C) -> Result<C, TelemetryError> {
    registry.register(Box::new(c.clone()))?;
    Ok(c)
}

impl Metrics {
    /// Creates the metrics in a new registry of their own.
    pub fn new() -> Result<Self, TelemetryError> {
        let r = Registry::new();
        let el = &["election"];
        let f = Families {
            has_leader: reg(
                &r,
                IntGaugeVec::new(
                    Opts::new(
                        "tenure_election_has_leader",
                        "1 while the election has a leader, 0 while it has none.",
                    ),
                    el,
                )?,
            )?,
            leader_changes: reg(
                &r,
                IntCounterVec::new(
                    Opts::new(
                        "tenure_election_leader_changes_total",
                        "Terms started, as seen by this process (a term already running \
                         when first seen counts once).",
                    ),
                    el,
                )?,
            )?,
            fencing_token: reg(
                &r,
                IntGaugeVec::new(
                    Opts::new(
                        "tenure_election_fencing_token",
                        "Fencing token (leader key CreateRevision) of the current term; \
                         while leaderless, of the last term.",
                    ),
                    el,
                )?,
            )?,
            term_start: reg(
                &r,
                GaugeVec::new(
                    Opts::new(
                        "tenure_election_term_start_timestamp_seconds",
                        "Unix time the current term (while leaderless: the last term) was \
                         seen to start; for a term first seen in a snapshot, when it was seen.",
                    ),
                    el,
                )?,
            )?,
            leaderless: reg(
                &r,
                CounterVec::new(
                    Opts::new(
                        "tenure_election_leaderless_seconds_total",
                        "Seconds the election had no leader since a term end seen by this \
                         process; grows while it is leaderless.",
                    ),
                    el,
                )?,
            )?,
            term_duration: reg(
                &r,
                HistogramVec::new(
                    HistogramOpts::new(
                        "tenure_election_term_duration_seconds",
                        "Duration of ended terms whose start and end were both seen (terms \
                         first seen in a snapshot, or ended in compacted history, are not \
                         observed).",
                    )
                    .buckets(TERM_DURATION_BUCKETS.to_vec()),
                    el,
                )?,
            )?,
            term_ends: reg(
                &r,
                IntCounterVec::new(
                    Opts::new(
                        "tenure_election_term_ends_total",
                        "Terms ended, by cause: resigned, expired, deleted, superseded, \
                         unknown (ended in compacted history).",
                    ),
                    &["election", "cause"],
                )?,
            )?,
            leader_info: reg(
                &r,
                IntGaugeVec::new(
                    Opts::new(
                        "tenure_election_leader_info",
                        "1 for the current leader's identity (holder, at most 128 bytes); \
                         no series while leaderless.",
                    ),
                    &["election", "holder"],
                )?,
            )?,
            lease_remaining: reg(
                &r,
                IntGaugeVec::new(
                    Opts::new(
                        "tenure_election_lease_remaining_seconds",
                        "Seconds left on the current leader's lease when last sampled; no \
                         series while leaderless or when etcd no longer knows the lease.",
                    ),
                    el,
                )?,
            )?,
            refusals: reg(
                &r,
                IntCounterVec::new(
                    Opts::new(
                        "tenure_fencing_refusals_total",
                        "Tokens refused by the shared fence, by reason: stale_token, \
                         term_ended, no_leader.",
                    ),
                    &["election", "reason"],
                )?,
            )?,
            checks: reg(
                &r,
                IntCounterVec::new(
                    Opts::new(
                        "tenure_fencing_checks_total",
                        "Shared fence checks recorded in etcd, by result: accepted, refused.",
                    ),
                    &["election", "result"],
                )?,
            )?,
            events: reg(
                &r,
                IntCounter::new(
                    "tenure_watch_events_total",
                    "Events (transitions, fence checks, gaps) the watcher produced.",
                )?,
            )?,
            restarts: reg(
                &r,
                IntCounterVec::new(
                    Opts::new(
                        "tenure_watch_restarts_total",
                        "Times the watcher re-established its etcd watch, by reason: \
                         compacted, stream_error, stalled, cancelled.",
                    ),
                    &["reason"],
                )?,
            )?,
            revision: reg(
                &r,
                IntGauge::new(
                    "tenure_watch_revision",
                    "etcd revision up to which the watcher has processed everything.",
                )?,
            )?,
            etcd_up: reg(
                &r,
                IntGauge::new(
                    "tenure_etcd_up",
                    "1 if etcd answered the watcher's last request, else 0.",
                )?,
            )?,
            gaps: reg(
                &r,
                IntCounter::new(
                    "tenure_history_gaps_total",
                    "Times etcd compacted revisions before the watcher saw them (history \
                     gaps: transitions in between are not known one by one).",
                )?,
            )?,
            overflow: reg(
                &r,
                IntCounter::new(
                    "tenure_watch_elections_overflow_total",
                    "New elections ignored because --max-elections elections are tracked.",
                )?,
            )?,
            ignored_keys: reg(
                &r,
                IntCounter::new(
                    "tenure_watch_ignored_keys_total",
                    "Keys under the prefix that are neither a valid election nor a fence key.",
                )?,
            )?,
            elections: reg(
                &r,
                IntGauge::new(
                    "tenure_watch_elections",
                    "Elections that currently have series here (tracked by the watcher).",
                )?,
            )?,
        };
        let build_info = reg(
            &r,
            IntGaugeVec::new(
                Opts::new(
                    "tenure_build_info",
                    "Always 1; the version label is the running tenure version.",
                ),
                &["version"],
            )?,
        )?;
        build_info
            .get_metric_with_label_values(&[env!("CARGO_PKG_VERSION")])?
            .set(1);
        for reason in RestartReason::ALL {
            f.restarts
                .get_metric_with_label_values(&[reason.as_str()])?;
        }
        Ok(Self {
            registry: r,
            f,
            elections: Mutex::new(HashMap::new()),
        })
    }

    /// The registry the metrics live in (to add collectors, or to gather
    /// without the text encoder).
    pub fn registry(&self) -> &Registry {
        &self.registry
    }

    fn lock(&self) -> MutexGuard<'_, HashMap<String, Election>> {
        self.elections.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Updates the metrics from one watcher update.
    pub fn apply(&self, update: &Update) {
        match update {
            Update::Batch(batch) => {
                let mut elections = self.lock();
                for event in &batch.events {
                    self.apply_event(&mut elections, event);
                }
                self.f.events.inc_by(batch.events.len() as u64);
                self.f.revision.set(batch.revision);
            }
            Update::LeaseSampled {
                election,
                lease_id,
                remaining_seconds,
            } => {
                let name = cap_label(election, MAX_ELECTION_LABEL_BYTES);
                let mut elections = self.lock();
                let Some(e) = elections.get_mut(name) else {
                    return;
                };
                // A sample of an earlier term's lease says nothing about now.
                if e.term.as_ref().map(|t| t.lease_id) != Some(*lease_id) {
                    return;
                }
                match remaining_seconds {
                    Some(secs) => {
                        if let Ok(g) = self.f.lease_remaining.get_metric_with_label_values(&[name])
                        {
                            g.set(*secs);
                            e.lease_series = true;
                        }
                    }
                    None => self.remove_lease_series(name, e),
                }
            }
            Update::Forgotten { election } => {
                let name = cap_label(election, MAX_ELECTION_LABEL_BYTES);
                let mut elections = self.lock();
                if let Some(e) = elections.remove(name) {
                    self.remove_series(name, &e);
                }
                self.f.elections.set(elections.len() as i64);
            }
            Update::Watch(status) => match status {
                WatchStatus::EtcdUp(up) => self.f.etcd_up.set(i64::from(*up)),
                WatchStatus::Restarted(reason) => {
                    if let Ok(c) = self
                        .f
                        .restarts
                        .get_metric_with_label_values(&[reason.as_str()])
                    {
                        c.inc();
                    }
                }
                WatchStatus::CaughtUp { revision } => self.f.revision.set(*revision),
                WatchStatus::Overflow { .. } => self.f.overflow.inc(),
                WatchStatus::IgnoredKey => self.f.ignored_keys.inc(),
            },
        }
    }

    fn apply_event(&self, elections: &mut HashMap<String, Election>, event: &Event) {
        if let EventKind::Gap { .. } = event.kind {
            self.f.gaps.inc();
            return;
        }
        if event.election.is_empty() {
            return;
        }
        let name = cap_label(&event.election, MAX_ELECTION_LABEL_BYTES);
        if !elections.contains_key(name) {
            let Some(series) = self.series(name) else {
                return;
            };
            series.has_leader.set(0);
            elections.insert(
                name.to_owned(),
                Election {
                    series,
                    term: None,
                    lease_series: false,
                    leaderless_since_ms: None,
                },
            );
            self.f.elections.set(elections.len() as i64);
        }
        let Some(e) = elections.get_mut(name) else {
            return;
        };
        match &event.kind {
            EventKind::TermStarted {
                token,
                holder,
                lease_id,
                from_snapshot,
                ..
            } => {
                if let Some(mut old) = e.term.take() {
                    if old.token == *token {
                        // The same term again (a resync): nothing started,
                        // but a proclaim may have been missed.
                        self.set_holder(name, &mut old, holder);
                        e.term = Some(old);
                        return;
                    }
                    self.remove_leader_info(name, &old.holder_label);
                    self.remove_lease_series(name, e);
                }
                Self::accrue_leaderless(e, event.at_ms);
                e.leaderless_since_ms = None;
                let holder_label = cap_label(holder, MAX_HOLDER_LABEL_BYTES);
                if let Ok(g) = self
                    .f
                    .leader_info
                    .get_metric_with_label_values(&[name, holder_label])
                {
                    g.set(1);
                }
                let s = &e.series;
                s.has_leader.set(1);
                s.leader_changes.inc();
                s.fencing_token.set(*token);
                s.term_start.set(event.at_ms as f64 / 1000.0);
                e.term = Some(Term {
                    token: *token,
                    lease_id: *lease_id,
                    holder_label: holder_label.to_owned(),
                    from_snapshot: *from_snapshot,
                });
            }
            EventKind::TermEnded {
                token,
                cause,
                started_at_ms,
                ..
            } => {
                e.series.term_ends[cause_index(*cause)].inc();
                match e.term.take() {
                    Some(t) if t.token != *token => {
                        // The end of an older term, after a newer one began.
                        e.term = Some(t);
                    }
                    ended => {
                        if let Some(t) = &ended {
                            self.remove_leader_info(name, &t.holder_label);
                            if !t.from_snapshot && *cause != EndCause::Unknown {
                                let ms = event.at_ms.saturating_sub(*started_at_ms).max(0);
                                e.series.term_duration.observe(ms as f64 / 1000.0);
                            }
                        }
                        self.remove_lease_series(name, e);
                        e.series.has_leader.set(0);
                        if e.leaderless_since_ms.is_none() {
                            e.leaderless_since_ms = Some(event.at_ms);
                        }
                    }
                }
            }
            EventKind::LeaderValueChanged { token, holder, .. } => {
                if let Some(t) = e.term.as_mut().filter(|t| t.token == *token) {
                    self.set_holder(name, t, holder);
                }
            }
            EventKind::FenceAccepted { .. } => e.series.accepted.inc(),
            EventKind::FenceRefused { reason, .. } => {
                e.series.refused.inc();
                e.series.refusals[fence_reason_index(*reason)].inc();
            }
            EventKind::Gap { .. } => {}
        }
    }

    /// Creates (at their zero values) and caches the series of a new election.
    fn series(&self, name: &str) -> Option<Series> {
        let f = &self.f;
        let one = [name];
        let causes = EndCause::ALL.map(|c| {
            f.term_ends
                .get_metric_with_label_values(&[name, c.as_str()])
        });
        let reasons =
            FENCE_REASONS.map(|r| f.refusals.get_metric_with_label_values(&[name, r.as_str()]));
        let [c0, c1, c2, c3, c4] = causes;
        let [r0, r1, r2] = reasons;
        Some(Series {
            has_leader: f.has_leader.get_metric_with_label_values(&one).ok()?,
            leader_changes: f.leader_changes.get_metric_with_label_values(&one).ok()?,
            fencing_token: f.fencing_token.get_metric_with_label_values(&one).ok()?,
            term_start: f.term_start.get_metric_with_label_values(&one).ok()?,
            leaderless: f.leaderless.get_metric_with_label_values(&one).ok()?,
            term_duration: f.term_duration.get_metric_with_label_values(&one).ok()?,
            term_ends: [c0.ok()?, c1.ok()?, c2.ok()?, c3.ok()?, c4.ok()?],
            refusals: [r0.ok()?, r1.ok()?, r2.ok()?],
            accepted: f
                .checks
                .get_metric_with_label_values(&[name, "accepted"])
                .ok()?,
            refused: f
                .checks
                .get_metric_with_label_values(&[name, "refused"])
                .ok()?,
        })
    }

    /// Moves the term's `leader_info` series to `holder` (capped).
    fn set_holder(&self, name: &str, t: &mut Term, holder: &str) {
        let label = cap_label(holder, MAX_HOLDER_LABEL_BYTES);
        if label == t.holder_label {
            return;
        }
        self.remove_leader_info(name, &t.holder_label);
        if let Ok(g) = self
            .f
            .leader_info
            .get_metric_with_label_values(&[name, label])
        {
            g.set(1);
        }
        t.holder_label.clear();
        t.holder_label.push_str(label);
    }

    fn remove_leader_info(&self, name: &str, holder_label: &str) {
        let _ = self
            .f
            .leader_info
            .remove_label_values(&[name, holder_label]);
    }

    fn remove_lease_series(&self, name: &str, e: &mut Election) {
        if e.lease_series {
            let _ = self.f.lease_remaining.remove_label_values(&[name]);
            e.lease_series = false;
        }
    }

    fn remove_series(&self, name: &str, e: &Election) {
        let f = &self.f;
        let one = [name];
        let _ = f.has_leader.remove_label_values(&one);
        let _ = f.leader_changes.remove_label_values(&one);
        let _ = f.fencing_token.remove_label_values(&one);
        let _ = f.term_start.remove_label_values(&one);
        let _ = f.leaderless.remove_label_values(&one);
        let _ = f.term_duration.remove_label_values(&one);
        let _ = f.lease_remaining.remove_label_values(&one);
        for c in EndCause::ALL {
            let _ = f.term_ends.remove_label_values(&[name, c.as_str()]);
        }
        for r in FENCE_REASONS {
            let _ = f.refusals.remove_label_values(&[name, r.as_str()]);
        }
        for result in ["accepted", "refused"] {
            let _ = f.checks.remove_label_values(&[name, result]);
        }
        if let Some(t) = &e.term {
            self.remove_leader_info(name, &t.holder_label);
        }
    }

    /// Adds the leaderless time up to `until_ms` to the counter.
    fn accrue_leaderless(e: &mut Election, until_ms: i64) {
        if let Some(since) = e.leaderless_since_ms {
            if until_ms > since {
                let ms = until_ms.saturating_sub(since);
                e.series.leaderless.inc_by(ms as f64 / 1000.0);
                e.leaderless_since_ms = Some(until_ms);
            }
        }
    }

    /// The metrics in the text exposition format ([`CONTENT_TYPE`]).
    /// Leaderless elections' `tenure_election_leaderless_seconds_total`
    /// first grows by the time since their last transition or render, by
    /// the wall clock.
    pub fn render(&self) -> String {
        self.render_at(crate::events::now_ms())
    }

    /// [`render`](Self::render) as if the wall clock said `now_ms` (unix
    /// milliseconds). A `now_ms` earlier than a previous one adds nothing:
    /// the counter never goes down.
    pub fn render_at(&self, now_ms: i64) -> String {
        let mut elections = self.lock();
        for e in elections.values_mut() {
            Self::accrue_leaderless(e, now_ms);
        }
        // Gather while holding the lock, so the output is one consistent state.
        let families = self.registry.gather();
        drop(elections);
        let mut out = String::with_capacity(8 * 1024);
        // Encoding fails only for an empty family, which gather() prunes.
        let _ = TextEncoder::new().encode_utf8(&families, &mut out);
        out
    }
}

#[allow(dead_code)]
fn assert_send_sync() {
    fn is<T: Send + Sync>() {}
    is::<Metrics>();
}
