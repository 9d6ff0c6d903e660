//! The watcher: a snapshot of every election under `P election/` and the
//! fence keys under `P fence/`, then one watch over both from the snapshot's
//! revision + 1, turned into [`Update`]s by the state machine in [`state`].
//!
//! - Resumes from the revision history committed last (read at exactly that
//!   revision, so nothing is missed or repeated); where etcd compacted it,
//!   resyncs from a fresh snapshot and reports an explicit gap.
//! - Reopens a broken or silently stalled watch (progress probes) from the
//!   next revision, on whichever endpoint answers.
//! - Asks etcd about a lease only where a term ended without tenure's end
//!   marker, and samples current leaders' leases (bounded rate) for
//!   `tenure_election_lease_remaining_seconds` and to tell expiry apart.
//!
//! The watcher never stores or renders: it sends updates down one channel.
//!
//! By job: this file holds the watch loop; `load` the snapshot, resume and
//! reset, `contradiction` whether etcd's state contradicts the history
//! (a restore under the same cluster id), `apply` a batch of watch events, `causes` the end-cause lookup,
//! `leases` the lease sampler, `replay` what a new stream replays.

pub mod cluster;
pub mod state;

mod apply;
mod causes;
mod contradiction;
mod leases;
mod load;
mod replay;

use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::sync::mpsc;
use tokio::time::Instant;

use crate::election::keywatch::{RangeWatch, Reopened, Repeats, WatchItem, REPEAT_LOG_EVERY};
use crate::election::Client;
use crate::events::{now_ms, Batch, RestartReason, Update, WatchStatus};
pub use crate::events::{OpenTerm, ResumePoint as Resume};
pub use state::{Change, Kv, State};

use leases::{sample_leases, Leases};
use load::open_terms;
use replay::Replay;

/// The largest watch or range response accepted. gRPC's default of 4 MiB is
/// less than one revision etcd may send: up to `--max-txn-ops` (128) keys of
/// up to `--max-request-bytes` (1.5 MiB) each, twice with `prev_kv` (384 MiB).
/// A response over the limit fails to decode, and the watch, reopened at the
/// same revision, would fail again forever.
pub const MAX_MESSAGE_BYTES: usize = 512 * 1024 * 1024;

/// Keys per range request of a snapshot: pages of one revision. etcd 3.4
/// walks every key left in the range for each page (to count them), so
/// fewer, larger pages read 100,000 keys in 2 pages' walks (150,000 keys)
/// instead of 10 (550,000 keys): issue 23.
pub const SNAPSHOT_PAGE_KEYS: i64 = 50_000;

/// How long the check for a replaced etcd after a broken stream may delay
/// reopening it (no answer: not replaced, as far as anyone can tell).
const REPLACED_CHECK_TIMEOUT: Duration = Duration::from_secs(1);

/// A watch that breaks this many times in a row at one revision without
/// delivering anything is reported stuck (readiness says so).
const STUCK_AFTER_ATTEMPTS: u32 = 3;

#[derive(Debug, Clone)]
pub struct WatchConfig {
    /// At most this many elections are tracked (memory, label cardinality).
    pub max_elections: usize,
    /// Silence after which the watch stream is probed.
    pub probe_after: Duration,
    /// How often current leaders' leases are sampled.
    pub lease_sample_interval: Duration,
    /// At most this many lease samples per interval (oldest first).
    pub lease_samples_per_interval: usize,
    /// An election with no keys and no change for this long is forgotten.
    pub forget_after: Duration,
}

impl Default for WatchConfig {
    fn default() -> Self {
        Self {
            max_elections: 100_000,
            probe_after: Duration::from_secs(5),
            lease_sample_interval: Duration::from_secs(1),
            lease_samples_per_interval: 200,
            forget_after: Duration::from_secs(3600),
        }
    }
}

/// The receiving side went away: the watcher stops.
#[derive(Debug, thiserror::Error)]
#[error("the watcher's consumer is gone")]
pub struct Closed;

/// Sends the waiting counts that changed (after the batch that changed them).
async fn report_waiting(state: &mut State, tx: &mpsc::Sender<Update>) -> Result<(), Closed> {
    for (election, count) in state.waiting_changes() {
        send(tx, Update::Waiting { election, count }).await?;
    }
    Ok(())
}

pub struct Watcher {
    /// Whether etcd's requested progress notifications come after every
    /// pending event (fixed in etcd 3.4.25 and 3.5.8, etcd issue 15220).
    progress_ordered: std::sync::atomic::AtomicBool,
    client: Client,
    cfg: WatchConfig,
    leases: Arc<Mutex<Leases>>,
    overflows: std::sync::atomic::AtomicU64,
}

impl Watcher {
    pub fn new(client: Client, cfg: WatchConfig) -> Self {
        Self {
            progress_ordered: Default::default(),
            client,
            cfg,
            leases: Arc::default(),
            overflows: Default::default(),
        }
    }

    /// Runs until the receiver of `tx` is dropped.
    pub async fn run(self, resume: Option<Resume>, tx: mpsc::Sender<Update>) -> Result<(), Closed> {
        // Aborted on drop too: when the caller aborts `run`, the sampler
        // goes with it.
        struct AbortOnDrop(tokio::task::JoinHandle<()>);
        impl Drop for AbortOnDrop {
            fn drop(&mut self) {
                self.0.abort();
            }
        }
        let _sampler = AbortOnDrop(tokio::spawn(sample_leases(
            self.client.clone(),
            self.cfg.clone(),
            self.leases.clone(),
            tx.clone(),
        )));
        self.watch(resume, &tx).await
    }

    async fn watch(&self, resume: Option<Resume>, tx: &mpsc::Sender<Update>) -> Result<(), Closed> {
        let mut state = State::new(self.client.keys().clone(), self.cfg.max_elections);
        let stored = resume.as_ref().map(|r| (r.revision, r.live_at_ms));
        let (mut applied, mut cluster) = self.load(&mut state, resume, tx, false).await?;
        // What the watch replays (revisions at or below the revision etcd
        // had when the stream was created) was not seen as it happened: it
        // happened after `since`. After a restart at the stored revision,
        // since what history last saw; after a snapshot, since its read.
        let mut live_at_ms = now_ms();
        let mut replay = Replay {
            active: true,
            since_ms: match stored {
                Some((revision, since)) if revision == applied => since,
                _ => Some(live_at_ms),
            },
        };
        let (start, end) = self.client.keys().watch_range();
        let mut watch = RangeWatch::new(
            &self.client.etcd(),
            start,
            Some(end.into_bytes()),
            applied + 1,
        )
        .with_probe_after(self.cfg.probe_after)
        .with_max_message_bytes(MAX_MESSAGE_BYTES);
        let mut up = true;
        // Reopens in a row at one next revision with nothing delivered.
        let mut failing: (i64, u32) = (0, 0);
        // On etcd that may send a progress notification ahead of pending
        // events, a progress revision is persisted only once the next
        // progress notification (a probe interval later) arrived with no
        // event in between.
        let mut unconfirmed: Option<i64> = None;
        // Why the stream is being reopened, until a new one is created (the
        // reconnect is recorded then, with the member that serves it).
        let mut reconnecting: Option<RestartReason> = None;
        // A broken stream's check for a replaced etcd got no answer.
        let mut ask_replaced = false;
        // The connection that asks whether etcd is another timeline: the
        // watch's own after a stall (the old one may be half-open, and a
        // check on it would only time out).
        let mut asker = self.client.etcd();
        let mut last_forget = Instant::now();
        // Repeated trouble (a role revoked: every reopen refused) is logged
        // once per interval, with a count; RangeWatch paces the reopens.
        let (mut denied_log, mut reopen_log, mut stuck_log) = (
            Repeats::new(REPEAT_LOG_EVERY),
            Repeats::new(REPEAT_LOG_EVERY),
            Repeats::new(REPEAT_LOG_EVERY),
        );
        loop {
            let item = match watch.next_item().await {
                // A refusal is a reopen too, said once with its cause.
                WatchItem::Denied(e) => {
                    if let Some(times) = denied_log.hit() {
                        tracing::error!(
                            error = %e.with_user(self.client.connect_config().user()),
                            times,
                            "etcd refused the watch; retrying with backoff, nothing is recorded \
                             until it is granted again"
                        );
                    }
                    WatchItem::Reopening(Reopened::Cancelled)
                }
                other => other,
            };
            // When the events arrived: their deletions happened before it.
            let received = Instant::now();
            let now_up = !matches!(item, WatchItem::Unavailable(_));
            if now_up != up {
                up = now_up;
                send(tx, Update::Watch(WatchStatus::EtcdUp(up))).await?;
            }
            if matches!(item, WatchItem::Events(_) | WatchItem::Progress { .. }) {
                failing = (0, 0);
            }
            match item {
                WatchItem::Events(events) => {
                    if let Some(r) = unconfirmed.take() {
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
                    let unobserved = replay.take(&events, watch.opened_at());
                    let revision = self
                        .apply(&mut state, &events, received, unobserved, live_at_ms, tx)
                        .await?;
                    applied = revision;
                    live_at_ms = now_ms();
                }
                WatchItem::Progress { revision } if revision < applied => {
                    // etcd is behind what was applied: restored from a
                    // snapshot, or replaced, under the running watch.
                    (applied, cluster) = self
                        .reset(&mut state, applied, cluster, Some(live_at_ms), tx)
                        .await?;
                    watch.resume_after(applied);
                    live_at_ms = now_ms();
                    replay = Replay::since(live_at_ms);
                }
                WatchItem::Progress { revision } => {
                    live_at_ms = now_ms();
                    if watch.opened_at().is_some_and(|o| revision >= o) {
                        replay.active = false;
                    }
                    let safe = if self
                        .progress_ordered
                        .load(std::sync::atomic::Ordering::Relaxed)
                    {
                        Some(revision)
                    } else {
                        unconfirmed.replace(revision)
                    };
                    if let Some(revision) = safe.filter(|r| *r > applied) {
                        // Persist progress so a restart need not replay it.
                        applied = revision;
                        watch.advance_to(revision);
                        send(
                            tx,
                            Update::Batch(Batch {
                                revision,
                                events: vec![],
                            }),
                        )
                        .await?;
                    }
                    send(tx, Update::Watch(WatchStatus::CaughtUp { revision })).await?;
                }
                WatchItem::Compacted { compact_revision } => {
                    tracing::warn!(
                        applied,
                        compact_revision,
                        "watch revision compacted; resyncing from a snapshot"
                    );
                    send(
                        tx,
                        Update::Watch(WatchStatus::Restarted(RestartReason::Compacted)),
                    )
                    .await?;
                    reconnecting.get_or_insert(RestartReason::Compacted);
                    let open = open_terms(&state);
                    (applied, cluster) = self
                        .load(
                            &mut state,
                            Some(Resume {
                                revision: applied,
                                open_terms: open,
                                cluster_id: Some(cluster),
                                live_at_ms: Some(live_at_ms),
                            }),
                            tx,
                            false,
                        )
                        .await?;
                    watch.resume_after(applied);
                    live_at_ms = now_ms();
                    replay = Replay::since(live_at_ms);
                }
                WatchItem::Reopening(why) => {
                    let reason = match why {
                        Reopened::StreamError => RestartReason::StreamError,
                        Reopened::Stalled => RestartReason::Stalled,
                        Reopened::Cancelled => RestartReason::Cancelled,
                    };
                    if let Some(times) = reopen_log.hit() {
                        tracing::warn!(
                            reason = reason.as_str(),
                            next = watch.next_revision(),
                            times,
                            "watch stream lost; reopening"
                        );
                    }
                    let next = watch.next_revision();
                    failing = if failing.0 == next {
                        (next, failing.1 + 1)
                    } else {
                        (next, 1)
                    };
                    if failing.1 >= STUCK_AFTER_ATTEMPTS {
                        if stuck_log.hit().is_some() {
                            tracing::error!(
                                next_revision = next,
                                attempts = failing.1,
                                "the watch keeps failing at one revision; nothing is recorded"
                            );
                        }
                        send(
                            tx,
                            Update::Watch(WatchStatus::Stuck {
                                next_revision: next,
                                attempts: failing.1,
                            }),
                        )
                        .await?;
                    }
                    if why == Reopened::Stalled {
                        // Not even a progress request was answered: the
                        // connection may be half-open, and a stream reopened
                        // on it would hang again. Use a new one.
                        if let Some(fresh) = self.client.reconnect().await {
                            watch.set_client(&fresh);
                            asker = fresh;
                        }
                    }
                    send(tx, Update::Watch(WatchStatus::Restarted(reason))).await?;
                    reconnecting.get_or_insert(reason);
                    // Until the new stream is past what etcd had when it was
                    // created, what it delivers happened while nobody
                    // watched: after the last thing the old stream said.
                    if !replay.active {
                        replay = Replay::since(live_at_ms);
                    }
                    // The stream broke or stalled: etcd may have restarted as
                    // another timeline (a restore, a new cluster). A watch from
                    // a future revision just waits, and etcd that orders
                    // progress notifications (3.4.25+, 3.5.8+) never answers a
                    // progress request on it, so a stall asks too (after a
                    // stall the client is a fresh connection: the old one may
                    // be half-open; the check has its own timeout).
                    let replaced = self.replaced(&asker, applied, cluster).await;
                    // Not answered (etcd is restarting): asked again as
                    // soon as the new stream exists, not a probe later.
                    ask_replaced = replaced.is_none();
                    if replaced == Some(true) {
                        (applied, cluster) = self
                            .reset(&mut state, applied, cluster, replay.since_ms, tx)
                            .await?;
                        watch.resume_after(applied);
                        live_at_ms = now_ms();
                        replay = Replay::since(live_at_ms);
                    }
                }
                WatchItem::Unavailable(why) => {
                    tracing::debug!(%why, "etcd unavailable for the watch; retrying")
                }
                // Turned into a reopen above.
                WatchItem::Denied(_) => {}
                WatchItem::Opened { member_id } => {
                    if let Some(reason) = reconnecting.take() {
                        tracing::info!(
                            reason = reason.as_str(),
                            member_id = format_args!("{member_id:x}"),
                            "watch stream reopened"
                        );
                        send(
                            tx,
                            Update::Watch(WatchStatus::Reconnected { reason, member_id }),
                        )
                        .await?;
                    }
                    if std::mem::take(&mut ask_replaced)
                        && self.replaced(&asker, applied, cluster).await == Some(true)
                    {
                        (applied, cluster) = self
                            .reset(&mut state, applied, cluster, replay.since_ms, tx)
                            .await?;
                        watch.resume_after(applied);
                        live_at_ms = now_ms();
                        replay = Replay::since(live_at_ms);
                    }
                }
            }
            if last_forget.elapsed() >= Duration::from_secs(60) {
                last_forget = Instant::now();
                let idle_before = now_ms() - self.cfg.forget_after.as_millis() as i64;
                for election in state.forget_idle(idle_before) {
                    send(tx, Update::Forgotten { election }).await?;
                }
            }
        }
    }

    /// Asks etcd's version: requested progress notifications are ordered
    /// after pending events from etcd 3.4.25 and 3.5.8 on (etcd PRs 15697,
    /// 15695 for issue 15220). Unknown (no answer, unparsable) → untrusted.
    async fn check_progress_order(&self) {
        let version = match self.client.op(self.client.etcd().status()).await {
            Ok(s) => s.version().to_owned(),
            Err(_) => String::new(),
        };
        let ordered = progress_ordered(&version);
        self.progress_ordered
            .store(ordered, std::sync::atomic::Ordering::Relaxed);
        tracing::debug!(version, ordered, "etcd's progress notifications");
    }

    /// Whether etcd now is another timeline than the one applied so far:
    /// another cluster id, or a revision behind `applied`. `None` when etcd
    /// does not answer. Asked with a count of the watch range's first key
    /// (its header has both), not `Status`: etcd 3.5 with authentication
    /// answers `Status` to root only, and serve's role may only read.
    async fn replaced(
        &self,
        asker: &etcd_client::Client,
        applied: i64,
        cluster: u64,
    ) -> Option<bool> {
        let mut etcd = asker.clone();
        let (start, _) = self.client.keys().watch_range();
        let count = etcd_client::GetOptions::new().with_count_only();
        let asked =
            tokio::time::timeout(REPLACED_CHECK_TIMEOUT, etcd.get(start, Some(count))).await;
        let Ok(Ok(resp)) = asked else {
            return None;
        };
        Some(
            resp.header()
                .is_some_and(|h| h.cluster_id() != cluster || h.revision() < applied),
        )
    }

    /// Sends statuses on, logging overflows (the first ten, then every
    /// thousandth) so a full cap is noticed without flooding the log.
    async fn report(
        &self,
        statuses: Vec<WatchStatus>,
        tx: &mpsc::Sender<Update>,
    ) -> Result<(), Closed> {
        for s in statuses {
            if let WatchStatus::Overflow { election } = &s {
                let n = self
                    .overflows
                    .fetch_add(1, std::sync::atomic::Ordering::Relaxed)
                    + 1;
                if n <= 10 || n % 1000 == 0 {
                    tracing::warn!(
                        election = %election,
                        overflows = n,
                        max = self.cfg.max_elections,
                        "more elections than --max-elections: this one is not tracked"
                    );
                }
            }
            send(tx, Update::Watch(s)).await?;
        }
        Ok(())
    }
}

/// Whether etcd `version` orders requested progress notifications after
/// pending events: 3.4.25+, 3.5.8+, 3.6 and later.
fn progress_ordered(version: &str) -> bool {
    let mut parts = version
        .trim_start_matches('v')
        .split(['.', '-', '+'])
        .map(|p| p.parse::<u64>().ok());
    let (Some(Some(major)), Some(Some(minor)), Some(Some(patch))) =
        (parts.next(), parts.next(), parts.next())
    else {
        return false;
    };
    match (major, minor) {
        (3, 4) => patch >= 25,
        (3, 5) => patch >= 8,
        (3, m) => m >= 6,
        (m, _) => m > 3,
    }
}

async fn send(tx: &mpsc::Sender<Update>, u: Update) -> Result<(), Closed> {
    tx.send(u).await.map_err(|_| Closed)
}

#[cfg(test)]
mod tests {
    use super::progress_ordered;

    #[test]
    fn progress_is_trusted_only_where_etcd_fixed_its_order() {
        for v in ["3.4.23", "3.5.1", "3.5.7", "3.3.27", "", "garbage", "3.4"] {
            assert!(!progress_ordered(v), "{v}");
        }
        for v in ["3.4.25", "3.5.8", "3.5.21", "3.6.0", "v3.6.4", "4.0.0"] {
            assert!(progress_ordered(v), "{v}");
        }
    }
}
