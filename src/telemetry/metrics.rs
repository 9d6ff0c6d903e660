//! Prometheus metrics, updated only from the watcher's [`Update`]s.
//!
//! [`Metrics`] owns its own [`prometheus::Registry`] (never the global one),
//! so two instances (tests, two watchers) never collide. It is `Send + Sync`
//! and every method takes `&self`.
//!
//! # Where the values live
//!
//! The process-wide families (`tenure_watch_*`, `tenure_etcd_up`,
//! `tenure_history_gaps_total`, `tenure_build_info`) are ordinary metrics of
//! the registry. The per-election families are plain numbers in one struct
//! per election, kept under the same mutex as the rest of the election's
//! state, and written out by [`Metrics::render`] in exactly the text the
//! registry's encoder would produce (families by name, series by label
//! values, `# HELP`/`# TYPE` headers, empty families left out). The
//! `prometheus` crate keeps a full copy of a family's descriptor (name,
//! help, label names) in every series and copies every series into a
//! protobuf structure on each gather: with ~35 series per election that is
//! ~12 KB per election at rest and ~9 KB more per election during a scrape,
//! while a plain struct is a few hundred bytes and rendering it is a few
//! writes per sample.
//!
//! # Cost per update
//!
//! `apply` is on the watcher's hot path. It takes one mutex, looks the
//! election up in a map keyed by name (no allocation), and updates plain
//! fields. Allocation happens only the first time an election is seen and
//! when a holder label changes.
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
//! Label values are escaped as the text format requires (`\`, `"` and
//! newlines); nothing here panics on any string.

use std::collections::HashMap;
use std::fmt::Write as _;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Mutex, MutexGuard};

use prometheus::core::Collector;
use prometheus::proto::MetricFamily;
use prometheus::{IntCounter, IntCounterVec, IntGauge, IntGaugeVec, Opts, Registry, TextEncoder};

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
const BUCKETS: usize = 15;

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

/// The process-wide families, registered once.
struct Families {
    events: IntCounter,
    restarts: IntCounterVec,
    revision: IntGauge,
    etcd_up: IntGauge,
    gaps: IntCounter,
    overflow: IntCounter,
    ignored_keys: IntCounter,
    elections: IntGauge,
}

/// A per-election family, written by [`Metrics::render_at`].
#[derive(Clone, Copy)]
struct Family {
    name: &'static str,
    help: &'static str,
    kind: &'static str,
}

const FENCING_TOKEN: Family = Family {
    name: "tenure_election_fencing_token",
    help: "Fencing token (leader key CreateRevision) of the current term; \
           while leaderless, of the last term.",
    kind: "gauge",
};
const HAS_LEADER: Family = Family {
    name: "tenure_election_has_leader",
    help: "1 while the election has a leader, 0 while it has none.",
    kind: "gauge",
};
const LEADER_CHANGES: Family = Family {
    name: "tenure_election_leader_changes_total",
    help: "Terms started, as seen by this process (a term already running \
           when first seen counts once).",
    kind: "counter",
};
const LEADER_INFO: Family = Family {
    name: "tenure_election_leader_info",
    help: "1 for the current leader's identity (holder, at most 128 bytes); \
           no series while leaderless.",
    kind: "gauge",
};
const LEADERLESS: Family = Family {
    name: "tenure_election_leaderless_seconds_total",
    help: "Seconds the election had no leader since a term end seen by this \
           process; grows while it is leaderless.",
    kind: "counter",
};
const LEASE_REMAINING: Family = Family {
    name: "tenure_election_lease_remaining_seconds",
    help: "Seconds left on the current leader's lease when last sampled; no \
           series while leaderless or when etcd no longer knows the lease.",
    kind: "gauge",
};
const TERM_DURATION: Family = Family {
    name: "tenure_election_term_duration_seconds",
    help: "Duration of ended terms whose start and end were both seen (terms \
           first seen in a snapshot, or ended in compacted history, are not \
           observed).",
    kind: "histogram",
};
const TERM_ENDS: Family = Family {
    name: "tenure_election_term_ends_total",
    help: "Terms ended, by cause: resigned, expired, deleted, superseded, \
           unknown (ended in compacted history).",
    kind: "counter",
};
const TERM_START: Family = Family {
    name: "tenure_election_term_start_timestamp_seconds",
    help: "Unix time the current term (while leaderless: the last term) was \
           seen to start; for a term first seen in a snapshot, when it was seen.",
    kind: "gauge",
};
const CHECKS: Family = Family {
    name: "tenure_fencing_checks_total",
    help: "Shared fence checks recorded in etcd, by result: accepted, refused.",
    kind: "counter",
};
const REFUSALS: Family = Family {
    name: "tenure_fencing_refusals_total",
    help: "Tokens refused by the shared fence, by reason: stale_token, \
           term_ended, no_leader.",
    kind: "counter",
};

/// Every per-election family, in any order (rendering sorts by name).
const PER_ELECTION: [Family; 11] = [
    FENCING_TOKEN,
    HAS_LEADER,
    LEADER_CHANGES,
    LEADER_INFO,
    LEADERLESS,
    LEASE_REMAINING,
    TERM_DURATION,
    TERM_ENDS,
    TERM_START,
    CHECKS,
    REFUSALS,
];

/// `tenure_election_term_duration_seconds` of one election.
#[derive(Debug, Default, Clone)]
struct Hist {
    /// Observations per bucket (not cumulative); above the last bound:
    /// only in `count`.
    counts: [u64; BUCKETS],
    sum: f64,
    count: u64,
}

impl Hist {
    fn observe(&mut self, v: f64) {
        if let Some(i) = TERM_DURATION_BUCKETS.iter().position(|b| v <= *b) {
            self.counts[i] += 1;
        }
        self.sum += v;
        self.count += 1;
    }
}

/// The values of one election's series (all created, at zero, when the
/// election is first seen).
#[derive(Debug, Default, Clone)]
struct Series {
    has_leader: i64,
    leader_changes: u64,
    fencing_token: i64,
    term_start: f64,
    leaderless: f64,
    term_duration: Hist,
    term_ends: [u64; EndCause::ALL.len()],
    refusals: [u64; FENCE_REASONS.len()],
    accepted: u64,
    refused: u64,
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
    /// The current term; its holder is the one `leader_info` series.
    term: Option<Term>,
    /// `lease_remaining_seconds`, while it has a series.
    lease_remaining: Option<i64>,
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
    /// Length of the last render, to size the next one's buffer.
    last_len: AtomicUsize,
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
        let f = Families {
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
            last_len: AtomicUsize::new(0),
        })
    }

    /// The registry of the process-wide families (to add collectors, or to
    /// gather those without the text encoder). The per-election families
    /// are not in it: [`Metrics::render`] writes them.
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
                e.lease_remaining = *remaining_seconds;
            }
            Update::Forgotten { election } => {
                let name = cap_label(election, MAX_ELECTION_LABEL_BYTES);
                let mut elections = self.lock();
                elections.remove(name);
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
            elections.insert(
                name.to_owned(),
                Election {
                    series: Series::default(),
                    term: None,
                    lease_remaining: None,
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
                        set_holder(&mut old, holder);
                        e.term = Some(old);
                        return;
                    }
                    e.lease_remaining = None;
                }
                Self::accrue_leaderless(e, event.at_ms);
                e.leaderless_since_ms = None;
                let s = &mut e.series;
                s.has_leader = 1;
                s.leader_changes += 1;
                s.fencing_token = *token;
                s.term_start = event.at_ms as f64 / 1000.0;
                e.term = Some(Term {
                    token: *token,
                    lease_id: *lease_id,
                    holder_label: cap_label(holder, MAX_HOLDER_LABEL_BYTES).to_owned(),
                    from_snapshot: *from_snapshot,
                });
            }
            EventKind::TermEnded {
                token,
                cause,
                started_at_ms,
                ..
            } => {
                e.series.term_ends[cause_index(*cause)] += 1;
                match e.term.take() {
                    Some(t) if t.token != *token => {
                        // The end of an older term, after a newer one began.
                        e.term = Some(t);
                    }
                    ended => {
                        if let Some(t) = &ended {
                            if !t.from_snapshot && *cause != EndCause::Unknown {
                                let ms = event.at_ms.saturating_sub(*started_at_ms).max(0);
                                e.series.term_duration.observe(ms as f64 / 1000.0);
                            }
                        }
                        e.lease_remaining = None;
                        e.series.has_leader = 0;
                        if e.leaderless_since_ms.is_none() {
                            e.leaderless_since_ms = Some(event.at_ms);
                        }
                    }
                }
            }
            EventKind::LeaderValueChanged { token, holder, .. } => {
                if let Some(t) = e.term.as_mut().filter(|t| t.token == *token) {
                    set_holder(t, holder);
                }
            }
            EventKind::FenceAccepted { .. } => e.series.accepted += 1,
            EventKind::FenceRefused { reason, .. } => {
                e.series.refused += 1;
                e.series.refusals[fence_reason_index(*reason)] += 1;
            }
            EventKind::Gap { .. } => {}
        }
    }

    /// Adds the leaderless time up to `until_ms` to the counter.
    fn accrue_leaderless(e: &mut Election, until_ms: i64) {
        if let Some(since) = e.leaderless_since_ms {
            if until_ms > since {
                let ms = until_ms.saturating_sub(since);
                e.series.leaderless += ms as f64 / 1000.0;
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
        enum Part<'a> {
            Registry(&'a MetricFamily),
            Election(Family),
        }
        let mut elections = self.lock();
        for e in elections.values_mut() {
            Self::accrue_leaderless(e, now_ms);
        }
        // Render while holding the lock, so the output is one consistent state.
        let global = self.registry.gather();
        let mut parts: Vec<(&str, Part)> = global
            .iter()
            .map(|mf| (mf.name(), Part::Registry(mf)))
            .collect();
        parts.extend(PER_ELECTION.iter().map(|f| (f.name, Part::Election(*f))));
        parts.sort_by(|a, b| a.0.cmp(b.0));
        let mut sorted: Vec<(&str, &Election)> =
            elections.iter().map(|(n, e)| (n.as_str(), e)).collect();
        sorted.sort_unstable_by(|a, b| a.0.cmp(b.0));
        let mut out = String::with_capacity(self.last_len.load(Ordering::Relaxed) + 8 * 1024);
        for (_, part) in parts {
            match part {
                // Encoding fails only for an empty family, which gather() prunes.
                Part::Registry(mf) => {
                    let _ = TextEncoder::new().encode_utf8(std::slice::from_ref(mf), &mut out);
                }
                Part::Election(f) => write_family(&mut out, f, &sorted),
            }
        }
        drop(elections);
        self.last_len.store(out.len(), Ordering::Relaxed);
        out
    }
}

/// Moves the term's `leader_info` series to `holder` (capped).
fn set_holder(t: &mut Term, holder: &str) {
    let label = cap_label(holder, MAX_HOLDER_LABEL_BYTES);
    if label != t.holder_label {
        t.holder_label.clear();
        t.holder_label.push_str(label);
    }
}

/// The text format's escaping: `\` → `\\`, newline → `\n`, and in label
/// values `"` → `\"`.
fn push_escaped(out: &mut String, v: &str, quotes: bool) {
    let needs = v
        .bytes()
        .any(|b| b == b'\\' || b == b'\n' || (quotes && b == b'"'));
    if !needs {
        out.push_str(v);
        return;
    }
    for c in v.chars() {
        match c {
            '\\' => out.push_str("\\\\"),
            '\n' => out.push_str("\\n"),
            '"' if quotes => out.push_str("\\\""),
            c => out.push(c),
        }
    }
}

/// One sample line: `name{l1="v1",...} value`.
fn sample(out: &mut String, name: &str, suffix: &str, labels: &[(&str, &str)], value: f64) {
    out.push_str(name);
    out.push_str(suffix);
    let mut sep = '{';
    for (k, v) in labels {
        out.push(sep);
        out.push_str(k);
        out.push_str("=\"");
        push_escaped(out, v, true);
        out.push('"');
        sep = ',';
    }
    if !labels.is_empty() {
        out.push('}');
    }
    let _ = writeln!(out, " {value}");
}

/// Writes one per-election family: its headers and its series sorted as
/// the registry sorts them (by label values, labels in name order), or
/// nothing when it has no series.
fn write_family(out: &mut String, f: Family, elections: &[(&str, &Election)]) {
    let has_series = match f.name {
        n if n == LEADER_INFO.name => elections.iter().any(|(_, e)| e.term.is_some()),
        n if n == LEASE_REMAINING.name => {
            elections.iter().any(|(_, e)| e.lease_remaining.is_some())
        }
        _ => !elections.is_empty(),
    };
    if !has_series {
        return;
    }
    out.push_str("# HELP ");
    out.push_str(f.name);
    out.push(' ');
    push_escaped(out, f.help, false);
    out.push('\n');
    out.push_str("# TYPE ");
    out.push_str(f.name);
    out.push(' ');
    out.push_str(f.kind);
    out.push('\n');
    let name = f.name;
    match name {
        n if n == TERM_ENDS.name => {
            // Labels `cause`, `election`: by cause, then election.
            let mut causes = EndCause::ALL;
            causes.sort_by_key(|c| c.as_str());
            for c in causes {
                for (el, e) in elections {
                    let v = e.series.term_ends[cause_index(c)] as f64;
                    sample(out, name, "", &[("cause", c.as_str()), ("election", el)], v);
                }
            }
        }
        n if n == REFUSALS.name => {
            let mut reasons = FENCE_REASONS;
            reasons.sort_by_key(|r| r.as_str());
            for (el, e) in elections {
                for r in reasons {
                    let v = e.series.refusals[fence_reason_index(r)] as f64;
                    sample(
                        out,
                        name,
                        "",
                        &[("election", el), ("reason", r.as_str())],
                        v,
                    );
                }
            }
        }
        n if n == CHECKS.name => {
            for (el, e) in elections {
                let s = &e.series;
                sample(
                    out,
                    name,
                    "",
                    &[("election", el), ("result", "accepted")],
                    s.accepted as f64,
                );
                sample(
                    out,
                    name,
                    "",
                    &[("election", el), ("result", "refused")],
                    s.refused as f64,
                );
            }
        }
        n if n == LEADER_INFO.name => {
            for (el, e) in elections {
                if let Some(t) = &e.term {
                    sample(
                        out,
                        name,
                        "",
                        &[("election", el), ("holder", &t.holder_label)],
                        1.0,
                    );
                }
            }
        }
        n if n == LEASE_REMAINING.name => {
            for (el, e) in elections {
                if let Some(secs) = e.lease_remaining {
                    sample(out, name, "", &[("election", el)], secs as f64);
                }
            }
        }
        n if n == TERM_DURATION.name => {
            let mut le = String::new();
            for (el, e) in elections {
                let h = &e.series.term_duration;
                let mut cumulative = 0;
                for (bound, count) in TERM_DURATION_BUCKETS.iter().zip(h.counts) {
                    cumulative += count;
                    le.clear();
                    let _ = write!(le, "{bound}");
                    sample(
                        out,
                        name,
                        "_bucket",
                        &[("election", el), ("le", &le)],
                        cumulative as f64,
                    );
                }
                sample(
                    out,
                    name,
                    "_bucket",
                    &[("election", el), ("le", "+Inf")],
                    h.count as f64,
                );
                sample(out, name, "_sum", &[("election", el)], h.sum);
                sample(out, name, "_count", &[("election", el)], h.count as f64);
            }
        }
        _ => {
            for (el, e) in elections {
                let s = &e.series;
                let v = match name {
                    n if n == FENCING_TOKEN.name => s.fencing_token as f64,
                    n if n == HAS_LEADER.name => s.has_leader as f64,
                    n if n == LEADER_CHANGES.name => s.leader_changes as f64,
                    n if n == LEADERLESS.name => s.leaderless,
                    n if n == TERM_START.name => s.term_start,
                    _ => continue,
                };
                sample(out, name, "", &[("election", el)], v);
            }
        }
    }
}

#[allow(dead_code)]
fn assert_send_sync() {
    fn is<T: Send + Sync>() {}
    is::<Metrics>();
}
