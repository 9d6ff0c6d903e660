//! The watch loop as explicit states: what the loop knows between two
//! answers of the stream ([`Stream`]), and one step per kind of answer.
//!
//! - **Streaming**: events are applied; progress notifications persist the
//!   revision (once confirmed where etcd may send them early) and say the
//!   watcher caught up.
//! - **Replaying**: a new stream first delivers what happened while nobody
//!   watched (`Replay`), until it passes what etcd had when it was created.
//! - **Reopening**: the stream broke, stalled or was refused; it reopens
//!   from the next revision, and etcd is asked whether it is another
//!   timeline now (a restore, a new cluster), again once the new stream
//!   exists if it did not answer.
//! - **Starting over**: compacted past the applied revision, or etcd behind
//!   it: a snapshot (and a reset where etcd is another timeline), then
//!   streaming from the snapshot's revision.

use tokio::sync::mpsc;
use tokio::time::Instant;

use super::merge::{Opening, Watch};
use super::replay::Replay;
use super::{
    open_terms, send, Closed, RenewReports, Replaced, Resume, State, Watcher, STUCK_AFTER_ATTEMPTS,
};
use crate::election::keywatch::{Reopened, Repeats, WatchItem, REPEAT_LOG_EVERY};
use crate::events::{now_ms, Batch, RestartReason, Update, WatchStatus};

/// Everything the watch loop carries from one answer to the next.
pub(super) struct Stream<'w> {
    w: &'w Watcher,
    tx: &'w mpsc::Sender<Update>,
    state: State,
    watch: Watch,
    /// The last revision applied: events, or a progress notification
    /// persisted.
    applied: i64,
    cluster: u64,
    /// When the stream last said something: what a new stream replays
    /// happened after it.
    live_at_ms: i64,
    replay: Replay,
    /// Whether etcd answered the stream last time (reported on change).
    up: bool,
    /// Reopens in a row at one next revision with nothing delivered.
    failing: (i64, u32),
    /// On etcd that may send a progress notification ahead of pending
    /// events, a progress revision is persisted only once the next progress
    /// notification (a probe interval later) arrived with no event between.
    unconfirmed: Option<i64>,
    /// Why the stream is being reopened, until a new one is created (the
    /// reconnect is recorded then, with the member that serves it).
    reconnecting: Option<RestartReason>,
    /// A broken stream's check for a replaced etcd got no answer.
    ask_replaced: bool,
    /// The connection that asks whether etcd is another timeline: the
    /// watch's own after a stall (the old one may be half-open, and a check
    /// on it would only time out).
    asker: etcd_client::Client,
    last_forget: Instant,
    /// Leases' renewals, reported at most once a second.
    renew_reports: RenewReports,
    /// Repeated trouble (a role revoked: every reopen refused) is logged
    /// once per interval, with a count; RangeWatch paces the reopens.
    denied_log: Repeats,
    reopen_log: Repeats,
    stuck_log: Repeats,
}

impl<'w> Stream<'w> {
    /// The snapshot (or the resume at the stored revision), then a stream
    /// from the revision after it.
    pub(super) async fn start(
        w: &'w Watcher,
        resume: Option<Resume>,
        tx: &'w mpsc::Sender<Update>,
    ) -> Result<Stream<'w>, Closed> {
        let mut state = State::new(w.sources.clone(), w.cfg.max_elections);
        let stored = resume.as_ref().map(|r| (r.revision, r.live_at_ms));
        let (applied, cluster) = w.load(&mut state, resume, tx, false).await?;
        // What the watch replays (revisions at or below the revision etcd
        // had when the stream was created) was not seen as it happened.
        let live_at_ms = now_ms();
        let replay = Replay::after_load(stored, applied, live_at_ms);
        let opening = Opening {
            probe_after: w.cfg.probe_after,
            max_message_bytes: super::MAX_MESSAGE_BYTES,
        };
        let watch = Watch::new(&w.client.etcd(), w.watch_ranges(), applied + 1, opening);
        Ok(Stream {
            w,
            tx,
            state,
            watch,
            applied,
            cluster,
            live_at_ms,
            replay,
            up: true,
            failing: (0, 0),
            unconfirmed: None,
            reconnecting: None,
            ask_replaced: false,
            asker: w.client.etcd(),
            last_forget: Instant::now(),
            renew_reports: RenewReports::new(),
            denied_log: Repeats::new(REPEAT_LOG_EVERY),
            reopen_log: Repeats::new(REPEAT_LOG_EVERY),
            stuck_log: Repeats::new(REPEAT_LOG_EVERY),
        })
    }

    /// Runs until the receiver of the updates is dropped.
    pub(super) async fn run(mut self) -> Result<(), Closed> {
        loop {
            let item = self.next_item().await;
            // When the events arrived: their deletions happened before it.
            let received = self.watch.received().unwrap_or_else(Instant::now);
            let now_up = !matches!(item, WatchItem::Unavailable(_));
            if now_up != self.up {
                self.up = now_up;
                self.send(Update::Watch(WatchStatus::EtcdUp(now_up)))
                    .await?;
            }
            if matches!(item, WatchItem::Events(_) | WatchItem::Progress { .. }) {
                self.failing = (0, 0);
            }
            match item {
                WatchItem::Events(events) => self.on_events(&events, received).await?,
                WatchItem::Progress { revision }
                    if revision < self.applied.max(self.watch.next_revision() - 1) =>
                {
                    self.on_progress_behind(revision).await?
                }
                WatchItem::Progress { revision } => self.on_progress(revision).await?,
                WatchItem::Compacted { compact_revision } => {
                    self.on_compacted(compact_revision).await?
                }
                WatchItem::Reopening(why) => self.on_reopening(why).await?,
                WatchItem::Unavailable(why) => {
                    tracing::debug!(%why, "etcd unavailable for the watch; retrying")
                }
                // Turned into a reopen by `next_item`.
                WatchItem::Denied(_) => {}
                WatchItem::Opened {
                    member_id,
                    cluster_id,
                } => self.on_opened(member_id, cluster_id).await?,
            }
            self.forget_idle().await?;
            self.report_renewing().await?;
        }
    }

    /// The stream's next answer; a refusal is a reopen too, said once with
    /// its cause.
    async fn next_item(&mut self) -> WatchItem {
        match self.watch.next_item().await {
            WatchItem::Denied(e) => {
                if let Some(times) = self.denied_log.hit() {
                    tracing::error!(
                        error = %e.with_user(self.w.client.connect_config().user()),
                        times,
                        "etcd refused the watch; retrying with backoff, nothing is recorded \
                         until it is granted again"
                    );
                }
                WatchItem::Reopening(Reopened::Cancelled)
            }
            other => other,
        }
    }

    async fn on_events(
        &mut self,
        events: &[etcd_client::Event],
        received: Instant,
    ) -> Result<(), Closed> {
        if let Some(r) = self.unconfirmed.take() {
            let late = events
                .first()
                .and_then(|e| e.kv())
                .is_some_and(|kv| kv.mod_revision() <= r);
            if late {
                tracing::warn!(
                    progress = r,
                    "events arrived after a progress notification covering them \
                     (etcd issue 15220); applied, not skipped"
                );
            }
        }
        let unobserved = self.replay.take(events, self.watch.opened_at());
        let revision = self
            .w
            .apply(
                &mut self.state,
                events,
                received,
                unobserved,
                self.live_at_ms,
                self.tx,
            )
            .await?;
        self.applied = revision;
        self.live_at_ms = now_ms();
        Ok(())
    }

    async fn on_progress(&mut self, revision: i64) -> Result<(), Closed> {
        self.live_at_ms = now_ms();
        if self.watch.opened_at().is_some_and(|o| revision >= o) {
            self.replay.active = false;
        }
        let safe = if self
            .w
            .progress_ordered
            .load(std::sync::atomic::Ordering::Relaxed)
        {
            Some(revision)
        } else {
            self.unconfirmed.replace(revision)
        };
        if let Some(revision) = safe.filter(|r| *r > self.applied) {
            // Persist progress so a restart need not replay it.
            self.applied = revision;
            self.watch.advance_to(revision);
            self.send(Update::Batch(Batch {
                revision,
                events: vec![],
            }))
            .await?;
        }
        self.send(Update::Watch(WatchStatus::CaughtUp { revision }))
            .await
    }

    /// A progress notification behind the applied revision: etcd restored
    /// from a snapshot, or replaced, under the running watch; or, on etcd
    /// before 3.4.25 / 3.5.8, a requested notification whose revision was
    /// read before the events it overtook (etcd issue 15220: confirmed to
    /// happen). Asked (the header of a read), never assumed: a false reset
    /// would end every open term as unknown.
    async fn on_progress_behind(&mut self, revision: i64) -> Result<(), Closed> {
        match self
            .w
            .replaced(&self.asker, self.applied, self.cluster)
            .await
        {
            Some(Replaced::Behind) => self.reset(Some(self.live_at_ms)).await,
            Some(Replaced::Another) => self.reload().await,
            answer => {
                // Not behind, or no answer: a restored etcd's next progress
                // notification is behind again, and asks again.
                tracing::debug!(
                    revision,
                    applied = self.applied,
                    answered = answer.is_some(),
                    "a progress notification behind the applied revision; etcd is not \
                     known to be behind: ignored"
                );
                Ok(())
            }
        }
    }

    async fn on_compacted(&mut self, compact_revision: i64) -> Result<(), Closed> {
        tracing::warn!(
            applied = self.applied,
            compact_revision,
            "watch revision compacted; resyncing from a snapshot"
        );
        self.send(Update::Watch(WatchStatus::Restarted(
            RestartReason::Compacted,
        )))
        .await?;
        self.reconnecting.get_or_insert(RestartReason::Compacted);
        self.reload().await
    }

    /// Loads again from the applied revision, checked as a start's load is
    /// (the same timeline, another one, or another etcd: refused unless
    /// adopted), and streams on from what it loaded.
    async fn reload(&mut self) -> Result<(), Closed> {
        let resume = Resume {
            revision: self.applied,
            open_terms: open_terms(&self.state),
            cluster_id: Some(self.cluster),
            live_at_ms: Some(self.live_at_ms),
            witnesses: Vec::new(),
        };
        (self.applied, self.cluster) = self
            .w
            .load(&mut self.state, Some(resume), self.tx, false)
            .await?;
        self.streaming_from_snapshot();
        Ok(())
    }

    async fn on_reopening(&mut self, why: Reopened) -> Result<(), Closed> {
        let reason = match why {
            Reopened::StreamError => RestartReason::StreamError,
            Reopened::Stalled => RestartReason::Stalled,
            Reopened::Cancelled => RestartReason::Cancelled,
        };
        let next = self.watch.next_revision();
        if let Some(times) = self.reopen_log.hit() {
            tracing::warn!(
                reason = reason.as_str(),
                next,
                times,
                "watch stream lost; reopening"
            );
        }
        self.count_failure(next).await?;
        if why == Reopened::Stalled {
            // Not even a progress request was answered: the connection may
            // be half-open, and a stream reopened on it would hang again.
            // Use a new one.
            if let Some(fresh) = self.w.client.reconnect().await {
                self.watch.set_client(&fresh);
                self.asker = fresh;
            }
        }
        self.send(Update::Watch(WatchStatus::Restarted(reason)))
            .await?;
        self.reconnecting.get_or_insert(reason);
        // Until the new stream is past what etcd had when it was created,
        // what it delivers happened while nobody watched: after the last
        // thing the old stream said.
        if !self.replay.active {
            self.replay = Replay::since(self.live_at_ms);
        }
        // The stream broke or stalled: etcd may have restarted as another
        // timeline (a restore, a new cluster). A watch from a future
        // revision just waits, and etcd that orders progress notifications
        // (3.4.25+, 3.5.8+) never answers a progress request on it, so a
        // stall asks too (after a stall the client is a fresh connection:
        // the old one may be half-open; the check has its own timeout).
        let replaced = self
            .w
            .replaced(&self.asker, self.applied, self.cluster)
            .await;
        // Not answered (etcd is restarting): asked again as soon as the
        // new stream exists, not a probe later.
        self.ask_replaced = replaced.is_none();
        self.on_replaced(replaced).await
    }

    /// What a check for a replaced etcd found: a restore is a reset,
    /// another cluster id a checked reload.
    async fn on_replaced(&mut self, replaced: Option<Replaced>) -> Result<(), Closed> {
        match replaced {
            Some(Replaced::Behind) => self.reset(self.replay.since_ms).await,
            Some(Replaced::Another) => self.reload().await,
            Some(Replaced::No) | None => Ok(()),
        }
    }

    /// One more reopen at `next`: after [`STUCK_AFTER_ATTEMPTS`] in a row
    /// the watch is reported stuck there.
    async fn count_failure(&mut self, next: i64) -> Result<(), Closed> {
        self.failing = if self.failing.0 == next {
            (next, self.failing.1 + 1)
        } else {
            (next, 1)
        };
        let attempts = self.failing.1;
        if attempts < STUCK_AFTER_ATTEMPTS {
            return Ok(());
        }
        if self.stuck_log.hit().is_some() {
            tracing::error!(
                next_revision = next,
                attempts,
                "the watch keeps failing at one revision; nothing is recorded"
            );
        }
        self.send(Update::Watch(WatchStatus::Stuck {
            next_revision: next,
            attempts,
        }))
        .await
    }

    /// A new stream exists: the reconnect is recorded, and a check for a
    /// replaced etcd that went unanswered is asked again. A stream of
    /// another etcd cluster than the one applied so far (an endpoint of
    /// several that leads elsewhere, a check that got no answer) is that
    /// check's answer: reloaded, where another etcd is refused unless
    /// adopted.
    async fn on_opened(&mut self, member_id: u64, cluster_id: u64) -> Result<(), Closed> {
        if cluster_id != 0 && cluster_id != self.cluster {
            tracing::warn!(
                cluster = format_args!("{:x}", self.cluster),
                stream = format_args!("{cluster_id:x}"),
                "a watch stream of another etcd cluster: reloading from the applied revision"
            );
            self.ask_replaced = false;
            return self.reload().await;
        }
        if let Some(reason) = self.reconnecting.take() {
            tracing::info!(
                reason = reason.as_str(),
                member_id = format_args!("{member_id:x}"),
                "watch stream reopened"
            );
            self.send(Update::Watch(WatchStatus::Reconnected {
                reason,
                member_id,
            }))
            .await?;
        }
        if std::mem::take(&mut self.ask_replaced) {
            let replaced = self
                .w
                .replaced(&self.asker, self.applied, self.cluster)
                .await;
            self.on_replaced(replaced).await?;
        }
        Ok(())
    }

    /// etcd is another timeline: the state starts over from its snapshot.
    async fn reset(&mut self, live_at_ms: Option<i64>) -> Result<(), Closed> {
        (self.applied, self.cluster) = self
            .w
            .reset(
                &mut self.state,
                self.applied,
                self.cluster,
                live_at_ms,
                self.tx,
            )
            .await?;
        self.streaming_from_snapshot();
        Ok(())
    }

    /// After a snapshot at `applied`: the stream resumes after it, and what
    /// it replays happened since now.
    fn streaming_from_snapshot(&mut self) {
        self.watch.resume_after(self.applied);
        self.live_at_ms = now_ms();
        self.replay = Replay::since(self.live_at_ms);
    }

    /// Once a minute, elections idle past `forget_after` are forgotten.
    async fn forget_idle(&mut self) -> Result<(), Closed> {
        if self.last_forget.elapsed() < std::time::Duration::from_secs(60) {
            return Ok(());
        }
        self.last_forget = Instant::now();
        let idle_before = now_ms() - self.w.cfg.forget_after.as_millis() as i64;
        for election in self.state.forget_idle(idle_before) {
            send(self.tx, Update::Forgotten { election }).await?;
        }
        Ok(())
    }

    /// Leases' renewals, when due ([`RenewReports`](super::RenewReports)).
    async fn report_renewing(&mut self) -> Result<(), Closed> {
        if let Some(u) = self.renew_reports.due(&mut self.state, self.live_at_ms) {
            send(self.tx, u).await?;
        }
        Ok(())
    }

    async fn send(&self, u: Update) -> Result<(), Closed> {
        send(self.tx, u).await
    }
}
