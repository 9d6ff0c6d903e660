//! A feed's live state, as its watcher and its writer term report it and
//! the web reads it (`/readyz`, the overview, the election page): whether
//! its source answered, how far its watcher has loaded, the cap on tracked
//! elections, whether its shared history is recorded (`recording.rs`) and
//! its Kubernetes Leases' renewals (`renewing.rs`).
//!
//! Invariant: written only by the feed's pipeline, its writer term and the
//! serve loop; the web only reads it.

pub mod recording;
pub mod renewing;

use crate::task::Locked;
use std::sync::atomic::{AtomicBool, AtomicI64, AtomicU64, AtomicUsize, Ordering};
use std::sync::Arc;

use crate::events::{Update, WatchStatus};
use crate::history::Reader;

/// What `/readyz` reports: etcd answered the watcher last time, and the
/// watcher has loaded its snapshot and is streaming; and whether the cap on
/// tracked elections was hit (the overview shows it too).
#[derive(Debug, Default)]
pub struct Readiness {
    etcd_up: AtomicBool,
    loaded: AtomicBool,
    revision: AtomicI64,
    /// The watch keeps breaking at one revision (`WatchStatus::Stuck`):
    /// nothing is recorded, so not ready, until it delivers again.
    stuck: AtomicBool,
    /// `--max-elections` (0: not said).
    max_elections: AtomicUsize,
    /// Changes of elections the watcher did not track (the cap was full).
    overflows: AtomicU64,
    /// When the last of them was reported (unix ms).
    last_overflow_ms: AtomicI64,
    /// The last moment (unix ms) this process's watcher was live: a batch
    /// or a caught-up notice arrived (0: never).
    live_at_ms: AtomicI64,
    /// The highest revision of a batch with events (progress excluded).
    event_revision: AtomicI64,
    /// A shared history: whether it is being recorded.
    recording: std::sync::Mutex<Option<recording::Recording>>,
    /// Why tenure's token floor could not be raised after a reset (not
    /// ready until it is: tokens of the restored range are not refused).
    floor_problem: std::sync::Mutex<Option<String>>,
    /// Why serve could not connect to this cluster yet (one of
    /// several, unreachable at start; tried again until it answers), or
    /// why its source refuses it (the Kubernetes API: a 403, a 401).
    /// Since when it has said so (one problem after another counts from
    /// the first).
    connect_problem: std::sync::Mutex<Option<(String, std::time::Instant)>>,
    /// What the watcher reads, for the messages: `etcd` unless set.
    source: std::sync::OnceLock<&'static str>,
    /// The cluster's name, for the messages (unset: the one, unnamed).
    cluster: std::sync::OnceLock<Arc<str>>,
    /// Another etcd than the recorded one answers at the cluster's
    /// endpoints (`WatchStatus::NotTheRecordedEtcd`: recorded, found):
    /// refused, not ready, until a batch is loaded again.
    not_recorded_etcd: std::sync::Mutex<Option<(u64, u64)>>,
    /// The watcher's live word on its Kubernetes Leases (the election
    /// page's renewals).
    pub leases: renewing::LeaseBoard,
}

/// The cap on tracked elections was hit: changes of elections beyond it
/// were ignored (no metrics, no history).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CapReached {
    /// `--max-elections` (0 when not known).
    pub max_elections: usize,
    /// Keys or changes of untracked elections ignored since start.
    pub ignored: u64,
    /// When the last one was ignored (unix ms).
    pub last_ms: i64,
}

impl CapReached {
    /// One line for people: what happened and what to do.
    pub fn sentence(&self) -> String {
        format!(
            "the cap on tracked elections (--max-elections {}) is reached: {} changes of \
             elections beyond it were ignored (no metrics, no history), the last at {}; \
             raise --max-elections (TENURE_MAX_ELECTIONS)",
            self.max_elections,
            self.ignored,
            crate::history::format_ms(self.last_ms)
        )
    }
}

impl Readiness {
    /// Readiness of a watcher that tracks at most `max_elections` elections.
    pub fn with_max_elections(max_elections: usize) -> Readiness {
        let r = Readiness::default();
        r.max_elections.store(max_elections, Ordering::Relaxed);
        r
    }

    /// Whether (and how far) the cap on tracked elections was hit.
    pub fn cap_reached(&self) -> Option<CapReached> {
        let ignored = self.overflows.load(Ordering::Relaxed);
        (ignored > 0).then(|| CapReached {
            max_elections: self.max_elections.load(Ordering::Relaxed),
            ignored,
            last_ms: self.last_overflow_ms.load(Ordering::Relaxed),
        })
    }

    pub fn apply(&self, update: &Update) {
        self.leases.apply(update);
        match update {
            Update::Batch(b) => {
                self.live_at_ms
                    .fetch_max(crate::events::now_ms(), Ordering::Relaxed);
                self.loaded.store(true, Ordering::Relaxed);
                self.stuck.store(false, Ordering::Relaxed);
                *self.not_recorded_etcd.locked() = None;
                if b.has_reset() {
                    // A new timeline: its revisions start lower.
                    self.revision.store(b.revision, Ordering::Relaxed);
                    self.event_revision.store(b.revision, Ordering::Relaxed);
                } else {
                    self.revision.fetch_max(b.revision, Ordering::Relaxed);
                    if !b.events.is_empty() {
                        self.event_revision.fetch_max(b.revision, Ordering::Relaxed);
                    }
                }
            }
            Update::Watch(WatchStatus::EtcdUp(up)) => self.etcd_up.store(*up, Ordering::Relaxed),
            Update::Watch(WatchStatus::Stuck { .. }) => self.stuck.store(true, Ordering::Relaxed),
            Update::Watch(WatchStatus::NotTheRecordedEtcd { recorded, found }) => {
                *self.not_recorded_etcd.locked() = Some((*recorded, *found));
            }
            Update::Watch(WatchStatus::Overflow { .. }) => {
                self.overflows.fetch_add(1, Ordering::Relaxed);
                self.last_overflow_ms
                    .store(crate::events::now_ms(), Ordering::Relaxed);
            }
            Update::Watch(WatchStatus::CaughtUp { revision }) => {
                self.live_at_ms
                    .fetch_max(crate::events::now_ms(), Ordering::Relaxed);
                self.stuck.store(false, Ordering::Relaxed);
                self.etcd_up.store(true, Ordering::Relaxed);
                self.revision.fetch_max(*revision, Ordering::Relaxed);
            }
            _ => {}
        }
    }

    /// Whether a batch was applied: the watcher loaded its snapshot.
    pub fn is_loaded(&self) -> bool {
        self.loaded.load(Ordering::Relaxed)
    }

    pub fn is_ready(&self) -> bool {
        self.watching() && self.not_recording().is_none()
    }

    /// This process's watcher is live: etcd answers, the snapshot is
    /// loaded, the watch is not stuck.
    pub fn watching(&self) -> bool {
        self.etcd_up.load(Ordering::Relaxed)
            && self.loaded.load(Ordering::Relaxed)
            && !self.stuck.load(Ordering::Relaxed)
            && self.floor_problem().is_none()
            && self.not_recorded_etcd.locked().is_none()
    }

    /// Names the cluster in the messages (`None`: the one, unnamed). The
    /// first name said stays.
    pub fn set_cluster(&self, name: Option<&Arc<str>>) {
        if let Some(n) = name {
            let _ = self.cluster.set(n.clone());
        }
    }

    /// Why the etcd at the cluster's endpoints is refused: another than
    /// the one its history recorded (`None`: it is not).
    pub fn etcd_refused(&self) -> Option<String> {
        let (recorded, found) = (*self.not_recorded_etcd.locked())?;
        let name = self.cluster.get().map(|n| &**n);
        Some(crate::events::not_the_recorded_etcd(name, recorded, found))
    }

    /// Says why the token floor could not be raised (`None`: it was).
    pub fn set_floor_problem(&self, problem: Option<String>) {
        *self.floor_problem.locked() = problem;
    }

    /// Names what the watcher reads (`the Kubernetes API`), for the
    /// messages; `etcd` unless said. The first name said stays.
    pub fn set_source(&self, name: &'static str) {
        let _ = self.source.set(name);
    }

    /// What the watcher reads: `etcd` unless [`Readiness::set_source`] said.
    pub fn source(&self) -> &'static str {
        self.source.get().copied().unwrap_or("etcd")
    }

    /// Says why serve could not connect to this cluster (`None`: it did).
    pub fn set_connect_problem(&self, problem: Option<String>) {
        let mut said = self.connect_problem.locked();
        *said = problem.map(|p| {
            let since = said
                .as_ref()
                .map_or_else(std::time::Instant::now, |(_, s)| *s);
            (p, since)
        });
    }

    pub fn connect_problem(&self) -> Option<String> {
        self.connect_problem
            .locked()
            .as_ref()
            .map(|(p, _)| p.clone())
    }

    /// The problem, and how long it has been said without a break.
    pub fn connect_problem_for(&self) -> Option<(String, std::time::Duration)> {
        let said = self.connect_problem.locked();
        said.as_ref().map(|(p, since)| (p.clone(), since.elapsed()))
    }

    pub fn floor_problem(&self) -> Option<String> {
        self.floor_problem.locked().clone()
    }

    /// A shared history: checks from now on that it is being recorded,
    /// allowing a revision to stay unrecorded for `stale_after`.
    pub fn check_recording(&self, stale_after: std::time::Duration) {
        *self.recording.locked() = Some(recording::Recording::new(stale_after));
    }

    /// What the shared history's database says now (or why it could not
    /// be read), compared with what this replica's watcher has seen.
    pub fn observe_recording(&self, status: Result<crate::history::WriterStatus, String>) {
        let seen = self.event_revision.load(Ordering::Relaxed);
        if let Some(r) = self.recording.locked().as_mut() {
            r.observe(
                status,
                seen,
                std::time::Instant::now(),
                crate::events::now_ms(),
            );
        }
    }

    /// This replica's own part in writing its feed (a shared history).
    pub fn set_writer_role(&self, role: recording::Role) {
        if let Some(r) = self.recording.locked().as_mut() {
            r.set_role(role);
        }
    }

    /// What [`Readiness::set_writer_role`] said last.
    pub fn writer_role(&self) -> Option<recording::Role> {
        self.recording
            .locked()
            .as_ref()
            .and_then(|r| r.role().cloned())
    }

    /// Why etcd refuses this replica's writer campaign for good.
    pub fn writer_refused(&self) -> Option<String> {
        self.recording
            .locked()
            .as_ref()
            .and_then(|r| r.refused().map(str::to_owned))
    }

    /// `/readyz`'s writer lines (a shared history; none on a history of
    /// one's own): the last writer, as the database says, and this
    /// replica's own part.
    pub fn writer_lines(&self) -> Option<[String; 2]> {
        self.recording
            .locked()
            .as_ref()
            .map(|r| r.lines(std::time::Instant::now()))
    }

    /// Why the shared history is not being recorded, if it is not.
    pub fn not_recording(&self) -> Option<String> {
        self.recording
            .locked()
            .as_ref()
            .and_then(|r| r.stale(std::time::Instant::now()))
    }

    /// Since when nothing has been watched: `None` while the
    /// watcher is live (ready); else the last moment a watcher is known to
    /// have been live, by this process or as the history records (a
    /// heartbeat, or the newest arrival; the previous run's, after a
    /// restart). Reads the history when not ready: blocking.
    pub fn unwatched_since(&self, history: &Reader) -> Option<i64> {
        self.unwatched_since_in(history, None)
    }

    /// [`Readiness::unwatched_since`] of the cluster `scope` names (its
    /// own watched-until in the history).
    pub fn unwatched_since_in(&self, history: &Reader, scope: Option<&str>) -> Option<i64> {
        if self.is_ready() {
            return None;
        }
        let recorded = history.watched_until_of(scope).ok().flatten();
        let here = Some(self.live_at_ms.load(Ordering::Relaxed)).filter(|&t| t > 0);
        Some(recorded.max(here).unwrap_or(0))
    }

    /// Whether the watch keeps breaking at one revision.
    pub fn stuck(&self) -> bool {
        self.stuck.load(Ordering::Relaxed)
    }

    pub fn etcd_up(&self) -> bool {
        self.etcd_up.load(Ordering::Relaxed)
    }

    pub fn revision(&self) -> i64 {
        self.revision.load(Ordering::Relaxed)
    }
}
