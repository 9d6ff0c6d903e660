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
//! By job: this file holds the watcher and its statuses; `stream` the watch
//! loop (its states, one step per answer); `load` the snapshot, resume and
//! reset, `contradiction` whether etcd's state contradicts the history
//! (a restore under the same cluster id), `kept` whether keys written past
//! the stored revision kept their leases, `apply` a batch of watch events, `causes` the end-cause lookup,
//! `leases` the lease sampler, `replay` what a new stream replays; `kube`
//! the same state machine fed by the Kubernetes API's Leases instead.

pub mod cluster;
#[cfg(feature = "server")]
pub mod kube;
pub mod state;

mod apply;
mod causes;
mod contradiction;
mod kept;
mod leases;
mod load;
mod merge;
mod replay;
mod stream;
mod version;

use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::sync::mpsc;

use crate::election::Client;
pub use crate::events::{OpenTerm, ResumePoint as Resume};
use crate::events::{Update, WatchStatus};
pub use state::{Change, Kv, State};

use leases::{sample_leases, Leases};
use load::open_terms;

/// The largest watch or range response accepted. gRPC's default of 4 MiB is
/// less than one revision etcd may send: up to `--max-txn-ops` (128) keys of
/// up to `--max-request-bytes` (1.5 MiB) each (192 MiB; twice that with
/// `prev_kv`, which the watch does not ask for).
/// A response over the limit fails to decode, and the watch, reopened at the
/// same revision, would fail again forever.
pub const MAX_MESSAGE_BYTES: usize = 512 * 1024 * 1024;

/// Keys per range request of a snapshot: pages of one revision. etcd 3.4
/// walks every key left in the range for each page (to count them), so
/// fewer, larger pages read 100,000 keys in 2 pages' walks (150,000 keys)
/// instead of 10 (550,000 keys).
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
    /// What is read ([`Watcher::sources`]); `None`: tenure's own layout
    /// under the client's prefix.
    pub sources: Option<crate::layout::Sources>,
    /// One watch of this range, covering every source's ranges, instead of
    /// a watch per range merged in revision order: for an etcd that cannot
    /// merge them ([`Plan::covering`]). Keys between the sources arrive
    /// and are ignored (`Sources::classify`).
    pub covering: Option<(Vec<u8>, Vec<u8>)>,
    /// The etcd cluster id the operator adopted (`serve --adopt-etcd`):
    /// an etcd of another cluster id than the resume point's is taken as
    /// a new timeline (a reset) only when it is this one; any other is
    /// refused ([`WatchStatus::NotTheRecordedEtcd`]), never recorded.
    pub adopt: Option<u64>,
}

/// What [`Watcher::replaced`] found of etcd now.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Replaced {
    /// The same cluster, not behind the applied revision.
    No,
    /// The same cluster id, its revision behind the applied one: a restore.
    Behind,
    /// Another cluster id.
    Another,
}

/// How a watcher reads its sources ([`Watcher::sources`]).
#[derive(Debug, Clone)]
pub struct Plan {
    pub sources: crate::layout::Sources,
    /// `Some`: one covering watch of this range (several ranges on an etcd
    /// that cannot merge them, and a role that may read the whole range);
    /// `None`: a watch per range (one range, or an etcd that merges them).
    pub covering: Option<(Vec<u8>, Vec<u8>)>,
}

impl Default for WatchConfig {
    fn default() -> Self {
        Self {
            max_elections: 100_000,
            probe_after: Duration::from_secs(5),
            lease_sample_interval: Duration::from_secs(1),
            lease_samples_per_interval: 200,
            forget_after: Duration::from_secs(3600),
            sources: None,
            covering: None,
            adopt: None,
        }
    }
}

impl WatchConfig {
    /// What is read: [`WatchConfig::sources`], or tenure's own layout under
    /// `prefix`.
    pub fn sources_read(&self, prefix: &str) -> crate::layout::Sources {
        self.sources
            .clone()
            .unwrap_or_else(|| crate::layout::Sources::tenure(prefix))
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
    /// The layouts the watch ranges are read with: tenure's, under the
    /// client's prefix, and the operator's `--source`s.
    sources: crate::layout::Sources,
}

/// Sources a watcher cannot read together.
#[derive(Debug, thiserror::Error)]
pub enum SourcesError {
    #[error(transparent)]
    Source(#[from] crate::layout::SourceError),
    #[error(
        "watching several key ranges needs either etcd 3.4.31+ or 3.5.13+, whose progress \
         notifications follow the events they cover and come once a watch caught up (etcd \
         issues 15220 and 17507), or read access to the one range that covers them all; this \
         etcd is {version} and denies reading {covering}. Do one of: grant it \
         (`etcdctl role grant-permission ROLE read {start} {end}`; keys between the sources \
         are then read and ignored), upgrade etcd, or watch one source per `tenure serve` \
         (--sources-only)"
    )]
    Unordered {
        version: String,
        covering: String,
        start: String,
        end: String,
    },
    #[error("--sources-only needs at least one --source LAYOUT:PREFIX")]
    NoSource,
}

impl Watcher {
    pub fn new(client: Client, cfg: WatchConfig) -> Self {
        Self {
            progress_ordered: Default::default(),
            sources: cfg.sources_read(client.keys().prefix()),
            client,
            cfg,
            leases: Arc::default(),
            overflows: Default::default(),
        }
    }

    /// The sources to read: tenure's own under the client's prefix and
    /// `more` (or, `sources_only`, `more` alone), for
    /// [`WatchConfig::sources`], and how. Several key ranges are merged in
    /// revision order where etcd's progress notifications allow it (its
    /// version asked here); elsewhere, or where the version cannot be read,
    /// one watch covers them all if the role may read that range
    /// ([`Plan::covering`]); else they are refused, with what to do.
    pub async fn sources(
        client: &Client,
        more: Vec<crate::layout::Source>,
        sources_only: bool,
    ) -> Result<Plan, SourcesError> {
        if !sources_only && more.iter().any(|s| s.reads_leases()) {
            tracing::info!(
                prefix = client.keys().prefix(),
                "Kubernetes' Leases are read without tenure's own elections (both are named \
                 NAMESPACE/NAME-like): serve tenure's own elections in a cluster of their own"
            );
        }
        let sources =
            crate::layout::Sources::for_serve(client.keys().prefix(), more, sources_only)?;
        let ranges = sources.ranges();
        if ranges.is_empty() {
            return Err(SourcesError::NoSource);
        }
        if ranges.len() == 1 {
            return Ok(Plan {
                sources,
                covering: None,
            });
        }
        let version = version::etcd_version(client).await;
        if version
            .as_deref()
            .is_ok_and(version::progress_answered_when_synced)
        {
            return Ok(Plan {
                sources,
                covering: None,
            });
        }
        let covering = covering_range(&ranges);
        match client
            .check_read_access(std::slice::from_ref(&covering))
            .await
        {
            Ok(()) => {
                tracing::warn!(
                    version = version.as_deref().unwrap_or("unknown"),
                    start = %String::from_utf8_lossy(&covering.0),
                    end = %String::from_utf8_lossy(&covering.1),
                    "several key ranges on an etcd that cannot merge them: one covering watch, \
                     keys between the sources ignored"
                );
                Ok(Plan {
                    sources,
                    covering: Some(covering),
                })
            }
            Err(_) => {
                let (start, end) = (
                    String::from_utf8_lossy(&covering.0).into_owned(),
                    String::from_utf8_lossy(&covering.1).into_owned(),
                );
                Err(SourcesError::Unordered {
                    version: match version {
                        Ok(v) => v,
                        Err(e) => format!("of a version that could not be read ({e})"),
                    },
                    covering: format!("[{start}, {end})"),
                    start,
                    end,
                })
            }
        }
    }

    /// The key ranges the watch stream reads: the covering one, or every
    /// source's.
    fn watch_ranges(&self) -> Vec<(Vec<u8>, Vec<u8>)> {
        match &self.cfg.covering {
            Some(c) => vec![c.clone()],
            None => self.sources.ranges(),
        }
    }

    /// Runs until the receiver of `tx` is dropped.
    pub async fn run(self, resume: Option<Resume>, tx: mpsc::Sender<Update>) -> Result<(), Closed> {
        // Aborted on drop too: when the caller aborts `run`, the sampler
        // goes with it.
        let _sampler = crate::task::AbortOnDrop(crate::task::spawn(
            "lease sampler",
            sample_leases(
                self.client.clone(),
                self.cfg.clone(),
                self.leases.clone(),
                tx.clone(),
            ),
        ));
        self.watch(resume, &tx).await
    }

    /// The watch loop (`stream.rs`: its states, one step per answer).
    async fn watch(&self, resume: Option<Resume>, tx: &mpsc::Sender<Update>) -> Result<(), Closed> {
        stream::Stream::start(self, resume, tx).await?.run().await
    }

    /// Asks etcd's version: requested progress notifications are ordered
    /// after pending events from etcd 3.4.25 and 3.5.8 on (etcd PRs 15697,
    /// 15695 for etcd issue 15220). Unknown (no answer, unparsable) → untrusted.
    async fn check_progress_order(&self) {
        let version = version::etcd_version(&self.client)
            .await
            .unwrap_or_default();
        let ordered = version::progress_ordered(&version);
        self.progress_ordered
            .store(ordered, std::sync::atomic::Ordering::Relaxed);
        tracing::debug!(version, ordered, "etcd's progress notifications");
    }

    /// Whether etcd now is another timeline than the one applied so far:
    /// another cluster id, or a revision behind `applied`. `None` when etcd
    /// does not answer.
    ///
    /// Another cluster id is [`Replaced::Another`]: not a reset by itself
    /// (another etcd is refused unless adopted, and one endpoint of several
    /// may lead elsewhere), but a load checked as a start's is. Asked with a count of the watch range's first key
    /// (its header has both), not `Status`: etcd 3.5 with authentication
    /// answers `Status` to root only, and serve's role may only read.
    async fn replaced(
        &self,
        asker: &etcd_client::Client,
        applied: i64,
        cluster: u64,
    ) -> Option<Replaced> {
        let mut etcd = asker.clone();
        let start = self.sources.ranges().into_iter().next()?.0;
        let count = etcd_client::GetOptions::new().with_count_only();
        let asked =
            tokio::time::timeout(REPLACED_CHECK_TIMEOUT, etcd.get(start, Some(count))).await;
        let Ok(Ok(resp)) = asked else {
            return None;
        };
        let h = resp.header()?;
        Some(if h.cluster_id() != cluster {
            Replaced::Another
        } else if h.revision() < applied {
            Replaced::Behind
        } else {
            Replaced::No
        })
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

/// The one range `[lowest start, highest end)` that covers `ranges`.
fn covering_range(ranges: &[(Vec<u8>, Vec<u8>)]) -> (Vec<u8>, Vec<u8>) {
    let start = ranges.iter().map(|r| r.0.clone()).min().unwrap_or_default();
    let end = ranges.iter().map(|r| r.1.clone()).max().unwrap_or_default();
    (start, end)
}

/// Kubernetes Leases' renewals for the sinks ([`Update::Renewing`]): at
/// most once a second, and only when a Lease was written or lapsed, or the
/// count of lapsed ones changed. Called after each answer of the watch; an
/// idle watch answers a probe every few seconds, so a lapse is reported
/// that late at most.
pub(crate) struct RenewReports {
    last: std::time::Instant,
    lapsed: usize,
}

impl RenewReports {
    pub(crate) fn new() -> Self {
        Self {
            last: std::time::Instant::now(),
            lapsed: 0,
        }
    }

    /// The update due now, if any, the watch last known complete at
    /// `live_at_ms` (its last answer: events or progress).
    pub(crate) fn due(&mut self, state: &mut State, live_at_ms: i64) -> Option<Update> {
        if self.last.elapsed() < std::time::Duration::from_secs(1) {
            return None;
        }
        self.last = std::time::Instant::now();
        let (lapsed, changed) = state.renewing(live_at_ms);
        if lapsed == self.lapsed && changed.is_empty() {
            return None;
        }
        self.lapsed = lapsed;
        Some(Update::Renewing { lapsed, changed })
    }
}

async fn send(tx: &mpsc::Sender<Update>, u: Update) -> Result<(), Closed> {
    tx.send(u).await.map_err(|_| Closed)
}
