//! Kubernetes' Leases read through its API, for clusters whose etcd
//! nobody may reach (every managed Kubernetes): a list of every Lease,
//! then one watch of them all from the list's resourceVersion, turned into
//! the changes etcd's watch of `PREFIX leases/` would give (`lease.rs`),
//! through the same state machine and the same `kubernetes` layout. A
//! Lease read this way or from etcd has the same name, terms, tokens and
//! end causes: a resourceVersion is etcd's revision of the write.
//!
//! - **Resume**: the history's revision is a resourceVersion; the state
//!   is listed exactly there (`resourceVersionMatch=Exact`) and watched
//!   from it. The rules of what a load records are the etcd watcher's own
//!   (`load::Loading`, `load::contradicted`).
//! - **Refusals** (401, 403) and an unreachable server are retried, each
//!   said to [`Problems`] (serve's `/readyz`) until a read succeeds; a
//!   resourceVersion that is not an integer is no revision: the watcher
//!   stops ([`Stopped::Api`]), saying what to read instead.
//! - **Gap**: a resourceVersion the API no longer has (410 Gone, or an
//!   ERROR event of code 410) is a fresh list and a `Gap` event, as a
//!   compaction is.
//! - **Progress**: bookmarks persist their revision (an empty batch) and
//!   say the watch caught up. Each watch is asked to end after
//!   [`WATCH_SECONDS`] (the server bookmarks it 2 s before): one silent
//!   past [`STALL`] is stalled, reopened on a new connection, and the API
//!   is said unreadable until the new one proves live.
//! - **Replays**: what a new watch delivers up to the revision the API
//!   had when it opened happened while nobody watched (`Unobserved`).
//! - **Not here**: etcd's lease sampling (a Lease has no etcd lease: its
//!   ends come from its values), its cluster id, its progress requests and
//!   restore witnesses. A restore is caught where a list contradicts the
//!   open terms, or where its revision is behind the stored one; the API
//!   answers a list at a revision it has not reached with an error, not an
//!   older list, so a restore behind the stored revision is retried until
//!   its new timeline passes it (docs/layouts.md, a known limit).
//!
//! - **Untrusted sizes**: a list is read piece by piece, one object at a
//!   time (`list.rs`, `split.rs`), holders cut as the layout cuts them; an
//!   object or a watch event that cannot be read (too big, malformed) is
//!   named in the log and counted (`tenure_watch_ignored_keys_total`), an
//!   unreadable write at its key when its first bytes name it: what one
//!   namespace holds never stops the record of another.
//!
//! By job: `config` the kubeconfig and the pod's service account, `http`
//! the requests, `list` and `split` a list read piece by piece, `lease`
//! the API's objects as keys and values.

pub mod config;
mod exec;
mod http;
mod lease;
mod list;
mod split;

use std::time::Duration;

use tokio::sync::mpsc;
use tokio::time::Instant;

use super::load::{contradicted, open_terms, Loading};
use super::replay::{coalesced, Replay};
use super::{report_waiting, send, state, Change, Closed, Kv, RenewReports, Resume, State};
use crate::events::{
    now_ms, Batch, EndCause, Event, EventKind, RestartReason, Update, WatchStatus,
};
use crate::layout::{Source, SourceError, Sources};
pub use config::{ApiConfig, ConfigError};
pub use http::ApiError;
use lease::{Keys, Watched};

/// Every Lease of every namespace.
const LEASES: &str = "/apis/coordination.k8s.io/v1/leases";

/// Leases per list page (a list is one revision, whatever its pages).
const PAGE: usize = 500;

/// The server ends each watch after this long (it is reopened at once),
/// and bookmarks it 2 s before (kube-apiserver's watch cache sends a
/// watch's bookmark at the sooner of a minute and its end less 2 s): a
/// live watch says something at least this often.
const WATCH_SECONDS: u64 = 10;

/// A watch with nothing at all for this long (no event, no bookmark, not
/// ended at its [`WATCH_SECONDS`]) is stalled: a connection that stopped
/// forwarding. It is reopened on a new one, and the API said to be
/// unreadable (`/readyz`) until the new watch bookmarks or ends as asked.
pub const STALL: Duration = Duration::from_secs(WATCH_SECONDS + 2);

/// At most this many watch events in one batch (the objects of one
/// revision are never split for it).
const GROUP: usize = 1000;

/// Events are applied once the watch said nothing more for this long:
/// the objects of one revision (one etcd transaction may write several
/// Leases) arrive one by one, and the history takes one batch per
/// revision.
const HOLD: Duration = Duration::from_millis(50);

/// [`HOLD`] once the last revision held has several objects: an etcd
/// transaction written past kube-apiserver (kube-apiserver itself writes
/// one Lease per revision), whose objects its watch cache may hand out
/// with pauses on a busy machine. A revision whose batch went out cannot
/// take more objects (they wait for the next revision's batch), so such a
/// revision is held longer; one object alone, the common case, is not.
const MULTI_HOLD: Duration = Duration::from_secs(1);

/// The longest pause between two tries.
const MAX_BACKOFF: Duration = Duration::from_secs(5);

/// What the watcher reads and how.
#[derive(Debug, Clone)]
pub struct KubeConfig {
    pub api: ApiConfig,
    /// The etcd prefix its Leases' keys are made under (`/registry/`), as
    /// `--source kubernetes:/registry/` reads them: one name
    /// (`NAMESPACE/NAME`) whichever way a Lease is read.
    pub prefix: String,
    /// Read heartbeat leases as elections too.
    pub heartbeats: bool,
    pub max_elections: usize,
    /// An election with no keys and no change for this long is forgotten.
    pub forget_after: Duration,
}

impl KubeConfig {
    /// The source its names and values are read with.
    pub fn sources(&self) -> Result<Sources, SourceError> {
        let layout = if self.heartbeats {
            crate::layout::kubernetes::NAME_WITH_HEARTBEATS
        } else {
            crate::layout::kubernetes::NAME
        };
        let source = Source::parse(&format!("{layout}:{}", self.prefix))?;
        Ok(Sources::new(vec![source]))
    }
}

/// Where the watcher says why it cannot read the API (`Some`: each
/// failed try) and that it reads it again (`None`): serve's `/readyz`.
pub type Problems = std::sync::Arc<dyn Fn(Option<&ApiError>) + Send + Sync>;

/// Why the watcher stopped.
#[derive(Debug, thiserror::Error)]
pub enum Stopped {
    /// The receiver of its updates is gone (serve is stopping).
    #[error("the watcher's updates have no receiver")]
    Closed,
    /// An answer no retry can change ([`ApiError::is_permanent`]).
    #[error(transparent)]
    Api(ApiError),
}

impl From<Closed> for Stopped {
    fn from(_: Closed) -> Self {
        Stopped::Closed
    }
}

/// Watches every Lease through the API.
pub struct KubeWatcher {
    cfg: KubeConfig,
    sources: Sources,
    prefix: String,
    problems: Option<Problems>,
}

impl KubeWatcher {
    pub fn new(cfg: KubeConfig) -> Result<Self, SourceError> {
        let sources = cfg.sources()?;
        let prefix = crate::layout::kubernetes::Kubernetes::prefix_of(&cfg.prefix);
        Ok(Self {
            cfg,
            sources,
            prefix,
            problems: None,
        })
    }

    /// Tells `problems` why the API cannot be read, and when it can again.
    pub fn with_problems(mut self, problems: Problems) -> Self {
        self.problems = Some(problems);
        self
    }

    fn said(&self, problem: Option<&ApiError>) {
        if let Some(p) = &self.problems {
            p(problem);
        }
    }

    /// Runs until the receiver of `tx` is dropped, or the API answers what
    /// no retry can change.
    pub async fn run(
        self,
        resume: Option<Resume>,
        tx: mpsc::Sender<Update>,
    ) -> Result<(), Stopped> {
        let mut state = State::new(self.sources.clone(), self.cfg.max_elections);
        let stored = resume.as_ref().map(|r| (r.revision, r.live_at_ms));
        let applied = self.load(&mut state, resume, &tx, false).await?;
        let live_at_ms = now_ms();
        let replay = Replay::after_load(stored, applied, live_at_ms);
        let mut run = Run {
            w: &self,
            tx: &tx,
            state,
            applied,
            live_at_ms,
            replay,
            up: true,
            last_forget: Instant::now(),
            renew_reports: RenewReports::new(),
            backoff: Duration::from_millis(100),
            proving: false,
            applied_keys: Vec::new(),
            complete: true,
            carried: Vec::new(),
            from: applied,
        };
        run.watch().await
    }

    fn keys(&self) -> Keys<'_> {
        Keys {
            prefix: &self.prefix,
        }
    }

    /// Loads the state: at the resume revision when the API still has it
    /// (`gone`: it does not, the watch said so), else from a fresh list
    /// with a gap first; a list behind the stored revision, or
    /// contradicting its open terms, is a reset. The rules are the etcd
    /// watcher's (`load::Loading`). Retries until the API answers, unless
    /// its answer is one no retry changes.
    async fn load(
        &self,
        state: &mut State,
        resume: Option<Resume>,
        tx: &mpsc::Sender<Update>,
        gone: bool,
    ) -> Result<i64, Stopped> {
        let mut loading = Loading::new(resume.as_ref(), gone, false);
        loop {
            match list::list(&self.cfg.api, &self.keys(), &self.sources, loading.asked()).await {
                Ok(listed) => {
                    self.said(None);
                    unreadable_listed(&listed, tx).await?;
                    let (kvs, revision) = (listed.kvs, listed.revision);
                    let max = self.cfg.max_elections;
                    let why = loading.to_check().and_then(|r| {
                        contradicted(&self.sources, r, loading.at_resume(), &kvs, revision, max)
                    });
                    if let Some(why) = &why {
                        tracing::warn!(
                            revision,
                            %why,
                            "the Kubernetes API's Leases are another timeline: a reset"
                        );
                    }
                    let Some((events, statuses)) =
                        loading.loaded(state, &kvs, revision, 0, why.is_some())
                    else {
                        continue;
                    };
                    for s in statuses {
                        send(tx, Update::Watch(s)).await?;
                    }
                    send(tx, Update::Watch(WatchStatus::EtcdUp(true))).await?;
                    send(tx, Update::Batch(Batch { revision, events })).await?;
                    report_waiting(state, tx).await?;
                    return Ok(revision);
                }
                Err(ApiError::Gone { body, .. }) if loading.at_resume() => {
                    tracing::warn!(%body, "the resume resourceVersion is gone; listing afresh (a gap)");
                    loading.gone();
                }
                Err(e) if e.is_permanent() => return Err(Stopped::Api(e)),
                Err(e) => {
                    tracing::warn!(error = %e, "cannot list Leases from the Kubernetes API; retrying");
                    self.said(Some(&e));
                    send(tx, Update::Watch(WatchStatus::EtcdUp(false))).await?;
                    loading.pause().await;
                }
            }
        }
    }
}

/// What the watch loop carries from one answer to the next.
struct Run<'w> {
    w: &'w KubeWatcher,
    tx: &'w mpsc::Sender<Update>,
    state: State,
    /// The last revision applied (events, or a bookmark).
    applied: i64,
    /// When the watch last said something.
    live_at_ms: i64,
    replay: Replay,
    up: bool,
    last_forget: Instant,
    renew_reports: RenewReports,
    backoff: Duration,
    /// A watch stalled: the API is said unreadable until a new one
    /// bookmarks or ends at its timeout.
    proving: bool,
    /// The keys the watch applied at `applied`: several objects may share
    /// one revision (one etcd transaction), and may arrive apart.
    applied_keys: Vec<Vec<u8>>,
    /// Whether every object of `applied` is known applied (a list at it;
    /// a bookmark may come between two objects of its revision): else the
    /// next watch starts one revision before it and passes by
    /// `applied_keys`.
    complete: bool,
    /// Events of objects that came after their revision's batch was sent,
    /// sent with the next batch.
    carried: Vec<Event>,
    /// The resourceVersion the current watch started after.
    from: i64,
}

/// How one watch ended.
enum Ended {
    /// Closed by the server at its timeout: the next watch goes on.
    Closed,
    /// Stalled, broken or ended by an error: reopen from `applied`.
    Reopen(RestartReason),
    /// The revision is gone: list afresh (a gap).
    Gone,
    /// An answer no retry changes: the watcher stops.
    Stop(ApiError),
}

impl Run<'_> {
    async fn watch(&mut self) -> Result<(), Stopped> {
        loop {
            let began = Instant::now();
            let ended = match self.open().await {
                Ok((answer, opened_at)) => {
                    if !self.proving {
                        self.w.said(None);
                        self.set_up(true).await?;
                    }
                    self.stream(answer, opened_at).await?
                }
                Err(ApiError::Gone { .. }) => Ended::Gone,
                Err(e) if e.is_permanent() => Ended::Stop(e),
                Err(e) => {
                    tracing::warn!(error = %e, "cannot watch Leases; retrying");
                    self.w.said(Some(&e));
                    // No answer at all (a connection that stopped
                    // forwarding, as a stalled watch): said until a
                    // watch proves live, not at the next one's opening.
                    self.proving |= matches!(e, ApiError::Timeout { .. });
                    self.set_up(false).await?;
                    Ended::Reopen(RestartReason::StreamError)
                }
            };
            // A watch of no use (refused, or ended within a second) is
            // opened again after a pause that doubles up to 5 s.
            if began.elapsed() < Duration::from_secs(1) {
                tokio::time::sleep(self.backoff).await;
                self.backoff = (self.backoff * 2).min(MAX_BACKOFF);
            } else {
                self.backoff = Duration::from_millis(100);
            }
            match ended {
                Ended::Stop(e) => return Err(Stopped::Api(e)),
                Ended::Gone => {
                    self.relist().await?;
                    continue;
                }
                // The server's own end of a watch (`timeoutSeconds`): the
                // next one goes on from the same revision, unannounced.
                Ended::Closed => self.proven().await?,
                Ended::Reopen(reason) => {
                    if reason != RestartReason::StreamError || self.up {
                        self.send(Update::Watch(WatchStatus::Restarted(reason)))
                            .await?;
                    }
                }
            }
            // What the next watch delivers up to the revision the API has
            // when it opens happened while nobody watched.
            if !self.replay.active {
                self.replay = Replay::since(self.live_at_ms);
            }
        }
    }

    /// A watch from the revision after `applied`, and the revision the API
    /// had before it opened (what it delivers up to there is a replay).
    async fn open(&mut self) -> Result<(http::Answer, i64), ApiError> {
        let api = &self.w.cfg.api;
        // Unreadable, it is no revision to bound the replay by: the watch
        // is not opened (retried) rather than every change of it marked
        // replayed for good.
        let opened_at = list::revision_now(api, &self.w.keys()).await?;
        // The last revision may have more objects than those applied.
        self.from = if self.complete {
            self.applied
        } else {
            self.applied - 1
        };
        let path = format!(
            "{LEASES}?watch=1&allowWatchBookmarks=true&resourceVersion={}&timeoutSeconds={WATCH_SECONDS}",
            self.from
        );
        Ok((http::get(api, &path).await?, opened_at))
    }

    /// Reads one watch until it ends. Lines that arrived together (up to
    /// [`GROUP`]) are applied as one batch, as one etcd watch response is.
    async fn stream(&mut self, mut answer: http::Answer, opened_at: i64) -> Result<Ended, Closed> {
        let mut silent_since = Instant::now();
        let mut group: Vec<(i64, Change)> = Vec::new();
        loop {
            let wait = match group.as_slice() {
                [] => Duration::from_secs(1),
                [.., (a, _), (b, _)] if a == b => MULTI_HOLD,
                _ => HOLD,
            };
            let line = tokio::time::timeout(wait, answer.line()).await;
            if !matches!(line, Ok(Ok(Some(_)))) {
                self.apply(std::mem::take(&mut group), opened_at).await?;
            } else if group.len() >= GROUP {
                // Whole revisions only: the last one may have more.
                let last = group.last().map_or(0, |g| g.0);
                let rest = group.split_off(group.partition_point(|g| g.0 < last));
                self.apply(std::mem::replace(&mut group, rest), opened_at)
                    .await?;
            }
            self.forget_idle().await?;
            self.report_renewing().await?;
            let line = match line {
                Err(_) if silent_since.elapsed() > STALL => {
                    self.stalled().await?;
                    return Ok(Ended::Reopen(RestartReason::Stalled));
                }
                Err(_) => continue,
                Ok(Ok(None)) => return Ok(Ended::Closed),
                Ok(Err(e)) => {
                    tracing::warn!(error = %e, "the Lease watch broke; reopening");
                    return Ok(Ended::Reopen(RestartReason::StreamError));
                }
                Ok(Ok(Some(line))) => line,
            };
            silent_since = Instant::now();
            let event = match line {
                http::Line::Whole(line) => self.w.keys().event(&line),
                http::Line::TooBig { head, len } => Ok(self.w.keys().too_big_event(&head, len)),
            };
            if let Some(ended) = self.on_event(event, &mut group, opened_at).await? {
                return Ok(ended);
            }
        }
    }

    /// One watch event: a change joins `group`; anything else applies it
    /// first. How the watch ends, if it does.
    async fn on_event(
        &mut self,
        event: Result<Watched, lease::Unreadable>,
        group: &mut Vec<(i64, Change)>,
        opened_at: i64,
    ) -> Result<Option<Ended>, Closed> {
        let event = match event {
            Ok(Watched::Unreadable(change, what)) => {
                tracing::warn!(%what, "a Lease the watch gave cannot be read; counted in tenure_watch_ignored_keys_total, the watch goes on");
                match change {
                    Some((revision, change)) => Ok(Watched::Change(revision, change)),
                    None => {
                        self.send(Update::Watch(WatchStatus::IgnoredKey)).await?;
                        return Ok(None);
                    }
                }
            }
            other => other,
        };
        if !matches!(event, Ok(Watched::Change(..))) {
            self.apply(std::mem::take(group), opened_at).await?;
        }
        let ended = match event {
            Ok(Watched::Change(revision, change)) => {
                if let Some(what) = lease::unreadable_value_of(&self.w.sources, &change) {
                    tracing::warn!(%what, "a Lease the watch gave cannot be read; counted in tenure_watch_ignored_keys_total");
                }
                if !self.known(revision, &change) {
                    group.push((revision, change));
                }
                return Ok(None);
            }
            Ok(Watched::Bookmark(revision)) => {
                self.on_bookmark(revision, opened_at).await?;
                return Ok(None);
            }
            Ok(Watched::Unreadable(..)) => return Ok(None),
            Ok(Watched::Error(410, message)) => {
                tracing::warn!(%message, "the Lease watch's resourceVersion is gone");
                Ended::Gone
            }
            Ok(Watched::Error(code, message)) => {
                tracing::warn!(code, %message, "the Lease watch ended with an error; reopening");
                Ended::Reopen(RestartReason::Cancelled)
            }
            Err(e) => {
                let e = e.answer_to(LEASES);
                if e.is_permanent() {
                    return Ok(Some(Ended::Stop(e)));
                }
                tracing::warn!(error = %e, "an unreadable watch event; reopening");
                Ended::Reopen(RestartReason::StreamError)
            }
        };
        Ok(Some(ended))
    }

    /// Whether a change was applied already: at or before where the watch
    /// started, or one of the objects applied at `applied` (a watch
    /// started one revision before it).
    fn known(&self, revision: i64, change: &Change) -> bool {
        let key = match change {
            Change::Put(kv) => &kv.key,
            Change::Delete { key, .. } => key,
        };
        revision <= self.from || (revision == self.applied && self.applied_keys.contains(key))
    }

    /// The keys of `group` at `revision`, as applied there.
    fn note_applied(&mut self, group: &[(i64, Change)], revision: i64) {
        if revision > self.applied {
            self.applied_keys.clear();
        }
        for (_, change) in group.iter().filter(|g| g.0 == revision) {
            let key = match change {
                Change::Put(kv) => kv.key.clone(),
                Change::Delete { key, .. } => key.clone(),
            };
            self.applied_keys.push(key);
        }
        self.complete = false;
    }

    /// Leases written or deleted (in revision order, several objects of
    /// one revision apart): through the state machine, one batch. Objects
    /// of a revision whose batch was sent already are carried into the
    /// next one (the history takes one batch per revision).
    async fn apply(&mut self, group: Vec<(i64, Change)>, opened_at: i64) -> Result<(), Closed> {
        let Some(&(revision, _)) = group.last() else {
            return Ok(());
        };
        let at_ms = now_ms();
        let revisions: Vec<i64> = group.iter().map(|g| g.0).collect();
        self.note_applied(&group, revision);
        let mut pending = Vec::new();
        for (rev, change) in group {
            let mut changes = vec![change];
            self.state.known_leases(&mut changes);
            let (p, statuses) = self.state.apply(rev, &changes, at_ms);
            for s in statuses {
                self.send(Update::Watch(s)).await?;
            }
            pending.extend(p);
        }
        // As etcd's watcher marks them (`apply.rs`): a replay happened
        // while nobody watched; one election changing at two revisions of
        // one group, at some time since the previous arrival.
        let previous_arrival = self.live_at_ms;
        let unobserved = self
            .replay
            .take_revisions(&revisions, Some(opened_at))
            .or_else(|| {
                coalesced(&pending).map(|(from_revision, to_revision)| EventKind::Unobserved {
                    from_revision,
                    to_revision,
                    since_ms: Some(previous_arrival),
                })
            });
        let mut events = std::mem::take(&mut self.carried);
        if let Some(kind @ EventKind::Unobserved { from_revision, .. }) = unobserved {
            if !pending.is_empty() {
                events.push(Event {
                    revision: from_revision,
                    at_ms,
                    election: String::new(),
                    kind,
                });
            }
        }
        events.extend(pending.into_iter().map(final_event));
        self.live_at_ms = at_ms;
        if revision <= self.applied {
            self.carried = events;
            return Ok(());
        }
        self.applied = revision;
        self.send(Update::Batch(Batch { revision, events })).await?;
        report_waiting(&mut self.state, self.tx).await
    }

    /// The watch said nothing for [`STALL`]: said to serve (`/readyz`)
    /// until a new one proves live.
    async fn stalled(&mut self) -> Result<(), Closed> {
        let e = ApiError::Stalled {
            seconds: STALL.as_secs(),
            revision: self.applied,
        };
        tracing::warn!(error = %e, "reopening the Lease watch on a new connection");
        self.w.said(Some(&e));
        self.proving = true;
        self.set_up(false).await
    }

    /// A watch after a stalled one bookmarked or ended as asked: live.
    async fn proven(&mut self) -> Result<(), Closed> {
        if self.proving {
            self.proving = false;
            self.w.said(None);
            self.set_up(true).await?;
        }
        Ok(())
    }

    /// Everything up to `revision` was sent: persisted, and caught up.
    async fn on_bookmark(&mut self, revision: i64, opened_at: i64) -> Result<(), Closed> {
        self.proven().await?;
        self.live_at_ms = now_ms();
        if revision >= opened_at {
            self.replay.active = false;
        }
        if revision > self.applied {
            self.applied = revision;
            self.applied_keys.clear();
            let events = std::mem::take(&mut self.carried);
            self.send(Update::Batch(Batch { revision, events })).await?;
        }
        // Not `complete`: kube-apiserver's watch cache bookmarks at the
        // last revision it dispatched, which may be between two objects
        // of that revision; only a list is whole at its revision.
        self.send(Update::Watch(WatchStatus::CaughtUp { revision }))
            .await
    }

    /// The revision is gone: a fresh list, recorded as a gap.
    async fn relist(&mut self) -> Result<(), Stopped> {
        tracing::warn!(applied = self.applied, "listing Leases afresh: a gap");
        self.send(Update::Watch(WatchStatus::Restarted(
            RestartReason::Compacted,
        )))
        .await?;
        let resume = Resume {
            revision: self.applied,
            open_terms: open_terms(&self.state),
            cluster_id: None,
            live_at_ms: Some(self.live_at_ms),
            witnesses: Vec::new(),
        };
        // Listed at the present: the watch no longer has the stored
        // revision, though a list may still read it from etcd.
        self.applied = self
            .w
            .load(&mut self.state, Some(resume), self.tx, true)
            .await?;
        // A list is whole at its revision.
        (self.complete, self.applied_keys) = (true, Vec::new());
        self.live_at_ms = now_ms();
        self.replay = Replay::since(self.live_at_ms);
        Ok(())
    }

    async fn set_up(&mut self, up: bool) -> Result<(), Closed> {
        if up != self.up {
            self.up = up;
            self.send(Update::Watch(WatchStatus::EtcdUp(up))).await?;
        }
        Ok(())
    }

    /// Once a minute, elections idle past `forget_after` are forgotten.
    async fn forget_idle(&mut self) -> Result<(), Closed> {
        if self.last_forget.elapsed() < Duration::from_secs(60) {
            return Ok(());
        }
        self.last_forget = Instant::now();
        let idle_before = now_ms() - self.w.cfg.forget_after.as_millis() as i64;
        for election in self.state.forget_idle(idle_before) {
            self.send(Update::Forgotten { election }).await?;
        }
        Ok(())
    }

    /// Leases' renewals, when due ([`RenewReports`](super::RenewReports)).
    async fn report_renewing(&mut self) -> Result<(), Closed> {
        if let Some(u) = self.renew_reports.due(&mut self.state, self.live_at_ms) {
            self.send(u).await?;
        }
        Ok(())
    }

    async fn send(&self, u: Update) -> Result<(), Closed> {
        send(self.tx, u).await
    }
}

/// Objects a list gave that cannot be read: named in the log (ten at
/// most, then how many), counted as ignored keys where the state does not
/// count them already (those it reads as unreadable writes).
async fn unreadable_listed(listed: &list::Listed, tx: &mpsc::Sender<Update>) -> Result<(), Closed> {
    for what in listed.unreadable.iter().take(10) {
        tracing::warn!(%what, "a Lease the list gave cannot be read; counted in tenure_watch_ignored_keys_total, the others are recorded");
    }
    if listed.unreadable.len() > 10 {
        tracing::warn!(
            more = listed.unreadable.len() - 10,
            "more Leases the list gave cannot be read"
        );
    }
    for _ in 0..listed.unnamed {
        send(tx, Update::Watch(WatchStatus::IgnoredKey)).await?;
    }
    Ok(())
}

/// A pending event as final: a Lease's ends come from its values, never
/// from an etcd lease; one that would need etcd's word is `unknown`.
fn final_event(p: state::Pending) -> Event {
    let mut event = p.event;
    if let (Some(_), EventKind::TermEnded { cause, .. }) = (p.cause_lookup, &mut event.kind) {
        *cause = p.deleted_as.unwrap_or(EndCause::Unknown);
    }
    event
}

/// One Lease, `namespace/name`, as etcd holds it under `prefix`
/// (`/registry/`): its key, its value as the `kubernetes` layout reads it,
/// its resourceVersion as the revision. `None`: there is no such Lease.
pub async fn read_lease(
    api: &ApiConfig,
    prefix: &str,
    namespace: &str,
    name: &str,
) -> Result<Option<Kv>, ApiError> {
    use crate::text::encode_component;
    let path = format!(
        "/apis/coordination.k8s.io/v1/namespaces/{}/leases/{}",
        encode_component(namespace),
        encode_component(name)
    );
    let body = match http::get(api, &path).await {
        Err(e) if e.is_not_found() => return Ok(None),
        other => other?.whole().await?,
    };
    let prefix = crate::layout::kubernetes::Kubernetes::prefix_of(prefix);
    Keys { prefix: &prefix }
        .lease(&body)
        .map(Some)
        .map_err(|e| e.answer_to(&path))
}
