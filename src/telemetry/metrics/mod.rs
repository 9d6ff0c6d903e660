//! Prometheus metrics, updated only from the watcher's [`Update`]s.
//!
//! [`Metrics`] owns its own [`prometheus::Registry`] (never the global one),
//! so two instances (tests, two watchers) never collide. It is `Send + Sync`
//! and every method takes `&self`.
//!
//! # Files, one job each
//!
//! - [`families`]: every family declared once (name, help, type, labels,
//!   buckets, scope); [`METRIC_NAMES`] is derived from it.
//! - `registry`: the families whose series do not multiply with elections
//!   (the process's, and the fleet-wide term durations and term ends), as
//!   ordinary registry metrics.
//! - `election`: one election's state, plain numbers updated from its
//!   events.
//! - `exposition`: the text format: registry families through its encoder,
//!   per-election families written by hand in the same text.
//! - this file: [`Metrics`], which routes updates to them under one lock.
//!
//! # Where the values live
//!
//! The per-election families are plain numbers in one struct per election,
//! kept under the same mutex as the rest of the election's state. The
//! `prometheus` crate keeps a full copy of a family's descriptor (name,
//! help, label names) in every series and copies every series into a
//! protobuf structure on each gather: that is ~12 KB per election at rest
//! and ~9 KB more per election during a scrape, while a plain struct is a
//! few hundred bytes and rendering it is a few writes per sample.
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
//! By default an election has at most 12 series, and only those that say
//! something: always `has_leader`, `leader_changes_total`, `fencing_token`
//! and `term_start_timestamp_seconds`; while it has a leader `leader_info`
//! (the *current* holder only) and `lease_remaining_seconds`;
//! `leaderless_seconds_total` once this process saw it lose a leader; and
//! the fence's `fencing_checks_total` (accepted, refused) and
//! `fencing_refusals_total` (three reasons) once it used the fence. An
//! election that keeps its leader and never fences has 6 (a
//! scrape of 10,000 such elections is under 4 MB). Term durations and term
//! ends by cause are fleet-wide
//! (`tenure_term_duration_seconds`, `tenure_term_ends_total`: 25 series in
//! all, whatever the number of elections). [`MetricsOptions::per_election_detail`]
//! adds them per election as well (`tenure_election_term_duration_seconds`,
//! `tenure_election_term_ends_total`: 25 more series per election, 37 in
//! all). Election cardinality is bounded by the watcher, which tracks at
//! most `--max-elections` elections and reports the rest as
//! [`WatchStatus::Overflow`] (counted here, never given series).
//! [`Update::Forgotten`] removes every series of an election. Fence
//! resources never become labels. [`Metrics::render_matching`] writes the
//! per-election series of some elections only (or none: the fleet-wide
//! families alone), for a scrape of a very large fleet.
//!
//! # Hostile label values
//!
//! Holders come from etcd values, which anyone with write access can set:
//! the `holder` label is capped at [`MAX_HOLDER_LABEL_BYTES`] bytes, cut on a
//! char boundary (two holders sharing such a prefix share a label value).
//! Election names are validated by the watcher; a name over
//! [`MAX_ELECTION_LABEL_BYTES`] (a `--source`'s, up to 511 bytes) is
//! labelled by its first bytes, `~` and a 64-bit hash of the whole name
//! ([`election_label`]), so no series speaks for two elections.
//! Label values are escaped as the text format requires (`\`, `"` and
//! newlines); nothing here panics on any string.

mod acting;
mod clusters;
mod election;
mod exposition;
pub mod families;
mod registry;

use crate::task::Locked;
use std::collections::BTreeMap;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Mutex, MutexGuard};

use prometheus::Registry;

use crate::events::{Event, EventKind, OpenTerm, Update, WatchStatus};

use super::TelemetryError;
pub use clusters::merge as merge_clusters;
use election::Election;
pub use families::{DETAIL_METRIC_NAMES, METRIC_NAMES, TERM_DURATION_BUCKETS};
use registry::Process;

/// The `Content-Type` of [`Metrics::render`]'s output: the Prometheus text
/// exposition format, version 0.0.4.
pub const CONTENT_TYPE: &str = prometheus::TEXT_FORMAT;

/// Longest `holder` label value, in bytes.
pub const MAX_HOLDER_LABEL_BYTES: usize = 128;
/// Longest `election` label value, in bytes (the longest valid name).
pub const MAX_ELECTION_LABEL_BYTES: usize = crate::election::keys::MAX_NAME_LEN;

/// `s` cut to at most `max` bytes, on a char boundary.
pub use crate::text::cut as cap_label;

/// The `election` label of `name`: the name itself up to
/// [`MAX_ELECTION_LABEL_BYTES`]; a longer one (a `--source` may name
/// elections up to 511 bytes) is cut and tagged with its hash, so each
/// name keeps series of its own (`crate::text::label_of`).
pub fn election_label(name: &str) -> std::borrow::Cow<'_, str> {
    crate::text::label_of(name, MAX_ELECTION_LABEL_BYTES)
}

/// What [`Metrics`] exposes beyond its default families.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct MetricsOptions {
    /// Also expose, per election, the term-duration histogram
    /// (`tenure_election_term_duration_seconds`, 18 series) and term ends by
    /// cause (`tenure_election_term_ends_total`, 7 series): 37 series per
    /// election instead of at most 12. The fleet-wide families stay.
    pub per_election_detail: bool,
    /// Label other systems' elections' leaders by their holder value too
    /// (`serve --source-holder-labels`); by default their
    /// `leader_info{holder}` is empty: a foreign source's values are not
    /// tenure's to publish on an unauthenticated `/metrics`.
    pub source_holder_labels: bool,
    /// The elections are Kubernetes' Leases where their names are no paths
    /// (`NAMESPACE/NAME`): their holders stay out of the label as every
    /// other system's do.
    pub lease_names: bool,
}

/// Prometheus metrics of elections, fencing and the watcher; see the module
/// documentation for cost, cardinality and label handling.
pub struct Metrics {
    registry: Registry,
    p: Process,
    options: MetricsOptions,
    /// By name, so a render needs no sort; boxed, so a tree node (eleven
    /// slots) holds pointers, not eleven elections.
    elections: Mutex<BTreeMap<String, Box<Election>>>,
    /// Length of the last render, to size the next one's buffer.
    last_len: AtomicUsize,
    /// The watcher is not live (etcd unreachable, the stream broken or
    /// stuck): leaderless time does not grow until it is.
    paused: AtomicBool,
    /// Terms whose acting margin is not final yet.
    margins: Mutex<acting::Margins>,
}

impl std::fmt::Debug for Metrics {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Metrics")
            .field("options", &self.options)
            .finish_non_exhaustive()
    }
}

impl Metrics {
    /// Creates the metrics, with the default families, in a new registry of
    /// their own.
    pub fn new() -> Result<Self, TelemetryError> {
        Self::with_options(MetricsOptions::default())
    }

    /// Creates the metrics with `options`, in a new registry of their own.
    pub fn with_options(options: MetricsOptions) -> Result<Self, TelemetryError> {
        let registry = Registry::new();
        let p = Process::register(&registry)?;
        Ok(Self {
            registry,
            p,
            options,
            elections: Mutex::new(BTreeMap::new()),
            last_len: AtomicUsize::new(0),
            paused: AtomicBool::new(false),
            margins: Mutex::new(acting::Margins::default()),
        })
    }

    /// The options these metrics were created with.
    pub fn options(&self) -> MetricsOptions {
        self.options
    }

    /// The registry of the process-wide and fleet-wide families (to add
    /// collectors, or to gather those without the text encoder). The
    /// per-election families are not in it: [`Metrics::render`] writes them.
    pub fn registry(&self) -> &Registry {
        &self.registry
    }

    fn lock(&self) -> MutexGuard<'_, BTreeMap<String, Box<Election>>> {
        self.elections.locked()
    }

    /// The state of election `name` (capped), created when first seen
    /// (allocating only then).
    fn election<'a>(
        &self,
        elections: &'a mut BTreeMap<String, Box<Election>>,
        name: &str,
    ) -> Option<&'a mut Box<Election>> {
        let name = election_label(name);
        let name = &*name;
        if !elections.contains_key(name) {
            elections.insert(
                name.to_owned(),
                Box::new(Election::new(
                    self.options.per_election_detail,
                    self.hides_holder(name),
                )),
            );
            self.p.elections.set(elections.len() as i64);
        }
        elections.get_mut(name)
    }

    /// Whether `name`'s holders stay out of the `holder` label: another
    /// system's election (its names are paths, `/app/jobs`, or Leases'
    /// where [`MetricsOptions::lease_names`]: a `--source`'s values are that
    /// system's, a connection string as often as a host) unless
    /// [`MetricsOptions::source_holder_labels`].
    fn hides_holder(&self, name: &str) -> bool {
        !self.options.source_holder_labels && (name.starts_with('/') || self.options.lease_names)
    }

    /// Creates at once the elections of `events` not yet known, when they
    /// are many (a snapshot's: 100,000 at start-up): one build of the map
    /// from sorted names, instead of as many inserts (the
    /// snapshot's batch is applied before `/readyz` says ready). The same
    /// elections as [`Metrics::apply`]'s loop would create.
    fn create_many(&self, elections: &mut BTreeMap<String, Box<Election>>, events: &[Event]) {
        const MANY: usize = 1024;
        if events.len() < MANY {
            return;
        }
        let mut missing: Vec<std::borrow::Cow<'_, str>> = events
            .iter()
            .filter(|e| !matches!(e.kind, EventKind::Gap { .. } | EventKind::Reset { .. }))
            .filter(|e| !e.election.is_empty())
            .map(|e| election_label(&e.election))
            .filter(|n| !elections.contains_key(&**n))
            .collect();
        if missing.len() < MANY {
            return;
        }
        missing.sort_unstable();
        missing.dedup();
        let detail = self.options.per_election_detail;
        let known = std::mem::take(elections);
        let new = missing.into_iter().map(|n| {
            let hide = self.hides_holder(&n);
            (n.into_owned(), Box::new(Election::new(detail, hide)))
        });
        // Both sorted: the build sorts (stably, a merge of two runs) and
        // fills the tree in order.
        *elections = known.into_iter().chain(new).collect();
        self.p.elections.set(elections.len() as i64);
    }

    /// Gives the terms history holds as open (the resume point) their
    /// series at start-up: the watcher adopts them silently (no event), so
    /// without this an election leading across a restart of `serve` would
    /// have no `has_leader`, `fencing_token` or `leader_info` until its next
    /// change. Their real start is known (history), so `term_start` is it.
    pub fn adopt(&self, open_terms: &[OpenTerm]) {
        let mut elections = self.lock();
        for t in open_terms {
            if let Some(e) = self.election(&mut elections, &t.election) {
                e.adopt(t);
            }
        }
        self.p.elections.set(elections.len() as i64);
    }

    /// Updates the metrics from one watcher update.
    pub fn apply(&self, update: &Update) {
        self.apply_at(update, crate::events::now_ms())
    }

    /// [`apply`](Self::apply) as if the wall clock said `now_ms`.
    pub fn apply_at(&self, update: &Update, now_ms: i64) {
        self.leaderless_clock(update, now_ms);
        match update {
            Update::Batch(batch) => self.apply_batch(batch, now_ms),
            Update::LeaseSampled {
                election,
                lease_id,
                remaining_seconds,
            } => {
                let name = election_label(election);
                if let Some(e) = self.lock().get_mut(&*name) {
                    e.sample_lease(*lease_id, *remaining_seconds);
                }
            }
            Update::Waiting { election, count } => {
                let mut elections = self.lock();
                if let Some(e) = self.election(&mut elections, election) {
                    let before = std::mem::replace(&mut e.waiting, *count);
                    self.p.candidates_waiting.add(*count as i64 - before as i64);
                }
            }
            Update::Forgotten { election } => {
                let name = election_label(election);
                let mut elections = self.lock();
                if let Some(e) = elections.remove(&*name) {
                    self.p.candidates_waiting.sub(e.waiting as i64);
                }
                self.p.elections.set(elections.len() as i64);
            }
            Update::Watch(status) => match status {
                WatchStatus::EtcdUp(up) => self.p.etcd_up.set(i64::from(*up)),
                WatchStatus::Restarted(reason) => Process::inc(&self.p.restarts, reason.as_str()),
                WatchStatus::CaughtUp { revision } => self.p.revision.set(*revision),
                WatchStatus::Overflow { .. } => self.p.overflow.inc(),
                WatchStatus::IgnoredKey => self.p.ignored_keys.inc(),
                WatchStatus::EncryptedValue => self.p.encrypted_values.inc(),
                // Readiness reports it; restarts are counted already.
                WatchStatus::Stuck { .. }
                | WatchStatus::Reconnected { .. }
                | WatchStatus::NotTheRecordedEtcd { .. } => {}
            },
            Update::Renewing { lapsed, changed } => {
                self.p.leases_lapsed.set(*lapsed as i64);
                // Series only for elections whose terms made them: a
                // report never creates one.
                let mut elections = self.lock();
                for l in changed {
                    if let Some(e) = elections.get_mut(&*election_label(&l.election)) {
                        e.renewing = l
                            .held
                            .as_ref()
                            .map(|_| (l.lapsed, l.every_us.map(|us| us as f64 / 1e6)));
                    }
                }
            }
            Update::Cluster { .. } => {}
        }
    }

    /// Leaderless time counts only while the watcher is live: it pauses
    /// when etcd is unreachable or the stream broke or is stuck, and
    /// resumes with the next batch or caught-up notice.
    fn leaderless_clock(&self, update: &Update, now_ms: i64) {
        match update {
            Update::Watch(
                WatchStatus::EtcdUp(false)
                | WatchStatus::Stuck { .. }
                | WatchStatus::Restarted(_)
                | WatchStatus::NotTheRecordedEtcd { .. },
            ) if !self.paused.swap(true, Ordering::Relaxed) => {
                for e in self.lock().values_mut() {
                    e.pause_leaderless(now_ms);
                }
            }
            Update::Batch(_) | Update::Watch(WatchStatus::CaughtUp { .. })
                if self.paused.swap(false, Ordering::Relaxed) =>
            {
                for e in self.lock().values_mut() {
                    e.resume_leaderless(now_ms);
                }
            }
            _ => {}
        }
    }

    /// One batch: each election's events, the margins of the terms that
    /// ended, the event count and the revision.
    fn apply_batch(&self, batch: &crate::events::Batch, now_ms: i64) {
        let mut elections = self.lock();
        self.create_many(&mut elections, &batch.events);
        for event in &batch.events {
            if let EventKind::Gap { .. } | EventKind::Reset { .. } = event.kind {
                self.p.gaps.inc();
                continue;
            }
            if let EventKind::TwoPrimaries { .. } = event.kind {
                self.p.two_primaries.inc();
            }
            if event.election.is_empty() {
                continue;
            }
            let Some(e) = self.election(&mut elections, &event.election) else {
                continue;
            };
            if let EventKind::TermEnded {
                cause,
                renewals: Some(r),
                ..
            } = &event.kind
            {
                if let (Some(us), Ok(h)) = (
                    r.handover_us,
                    self.p
                        .lease_handover
                        .get_metric_with_label_values(&[cause.as_str()]),
                ) {
                    h.observe(us.max(0) as f64 / 1e6);
                }
            }
            if let Some(ended) = e.apply(event) {
                Process::inc(&self.p.term_ends, ended.cause.as_str());
                if let Some(secs) = ended.duration {
                    self.p.term_duration.observe(secs);
                }
            }
        }
        drop(elections);
        let finals = self.margins.locked().apply(&batch.events, now_ms);
        for f in finals {
            let ended = if f.resigned { "resigned" } else { "lost" };
            if let (Some(margin), Ok(h)) = (
                f.margin_ms,
                self.p.margin.get_metric_with_label_values(&[ended]),
            ) {
                h.observe(margin as f64 / 1000.0);
            }
            if f.overlap_ms > 0 {
                self.p.overlap.inc_by(f.overlap_ms as f64 / 1000.0);
            }
        }
        self.p.events.inc_by(batch.events.len() as u64);
        self.p.revision.set(batch.revision);
    }

    /// The metrics in the text exposition format ([`CONTENT_TYPE`]).
    /// Leaderless elections' `tenure_election_leaderless_seconds_total`
    /// first grows by the time since their last transition or render, by
    /// the wall clock.
    pub fn render(&self) -> String {
        self.render_at(crate::events::now_ms())
    }

    /// [`render`](Self::render) with the per-election series of only the
    /// elections `keep` accepts (`/metrics?match=GLOB`). `keep` runs
    /// outside the lock that every recorded batch takes: the names are
    /// copied under it (one clone each), matched without it, and the
    /// matching ones rendered under it again, so a costly filter delays
    /// no recording. An election gone in between is left out.
    pub fn render_matching(&self, keep: &dyn Fn(&str) -> bool) -> String {
        let names: Vec<String> = self.lock().keys().cloned().collect();
        let kept: Vec<String> = names.into_iter().filter(|n| keep(n)).collect();
        self.render_selected(crate::events::now_ms(), Some(&kept))
    }

    /// The process and fleet-wide families alone, no per-election series
    /// (`/metrics?scope=fleet`).
    pub fn render_fleet(&self) -> String {
        self.render_selected(crate::events::now_ms(), Some(&[]))
    }

    /// [`render`](Self::render) as if the wall clock said `now_ms` (unix
    /// milliseconds). A `now_ms` earlier than a previous one adds nothing:
    /// the counter never goes down.
    pub fn render_at(&self, now_ms: i64) -> String {
        self.render_selected(now_ms, None)
    }

    /// Renders at `now_ms` the elections named in `only` (sorted, as the
    /// map's keys are; all with `None`). Elections are kept in name order,
    /// so nothing is sorted here.
    fn render_selected(&self, now_ms: i64, only: Option<&[String]>) -> String {
        let mut elections = self.lock();
        if !self.paused.load(Ordering::Relaxed) {
            for e in elections.values_mut() {
                e.accrue_leaderless(now_ms);
            }
        }
        // Render while holding the lock, so the output is one consistent state.
        let registry = self.registry.gather();
        let selected: Vec<(&str, &Election)> = match only {
            None => elections.iter().map(|(n, e)| (n.as_str(), &**e)).collect(),
            Some(names) => names
                .iter()
                .filter_map(|n| elections.get_key_value(n.as_str()))
                .map(|(n, e)| (n.as_str(), &**e))
                .collect(),
        };
        let hint = if only.is_none() {
            self.last_len.load(Ordering::Relaxed)
        } else {
            0
        };
        let mut out = String::with_capacity(hint + 8 * 1024);
        exposition::write_all(
            &mut out,
            &registry,
            &selected,
            self.options.per_election_detail,
        );
        drop(selected);
        drop(elections);
        if only.is_none() {
            self.last_len.store(out.len(), Ordering::Relaxed);
        }
        out
    }
}

#[allow(dead_code)]
fn assert_send_sync() {
    fn is<T: Send + Sync>() {}
    is::<Metrics>();
}
