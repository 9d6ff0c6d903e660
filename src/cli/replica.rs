//! `tenure serve` replicas sharing one PostgreSQL history.
//!
//! Every replica runs its own watcher for metrics, readiness and the live
//! feed, and reads pages and API from the shared database. Exactly one
//! replica records: the holder of the election `tenure/history-writer`
//! (under `--prefix`, with tenure's own election core). The writer opens the
//! history with its token, which claims the database's writer fence
//! (`history::pg`: every commit locks the fence row and is refused if a
//! higher token has written), reads the stored resume point, and runs a
//! watcher of its own from there, so a new writer records exactly what the
//! previous one did not, whatever it had seen. When its term ends (lease
//! lost, paused past its TTL, partitioned) it stops that watcher and closes
//! its store: whatever it still tries to commit after a newer writer has
//! written is refused by the database, counted and logged. Standby replicas
//! wait on the election (a watch: they take over as soon as the key goes,
//! at most the TTL after the writer died).

use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::Context;
use tokio::sync::{mpsc, oneshot};
use tokio::task::JoinHandle;

use crate::election::{CampaignOptions, Client, ElectionName, Leadership, Ttl};
use crate::events::cluster::ClusterEvent;
use crate::events::{now_ms, Batch, Update, WatchStatus};
use crate::history::{HistoryError, Reader, RevisionSource, Scope, Store};
use crate::telemetry::writer::HistoryWriterMetrics;
use crate::watch::{WatchConfig, Watcher};
use crate::web::Readiness;

/// The election the replicas campaign for.
pub const WRITER_ELECTION: &str = "tenure/history-writer";

/// Where `serve` sends what it records: a SQLite file of its own, or the
/// shared database (only while this replica is the writer).
pub enum History {
    Local(Store),
    Shared(Shared),
}

impl History {
    /// A batch of the serve loop's watcher: stored by a local store; the
    /// shared history's writer records from a watcher of its own.
    /// With several clusters (`scope`: the batch's), its names
    /// are already `CLUSTER/NAME`.
    pub async fn write(&self, scope: &Scope, batch: Batch) -> Result<(), HistoryError> {
        match self {
            History::Local(store) => store.write_in(scope.clone(), batch).await,
            History::Shared(_) => Ok(()),
        }
    }

    /// The serve loop's watcher caught up with etcd: a local history
    /// records that it watched until now (time after the last
    /// such moment, until a watcher is live again, was not watched). The
    /// shared history's writer records its own watcher's.
    /// Waits until what this serve queued is committed (a local store);
    /// the shared history's writer commits on its own.
    pub async fn flush(&self) -> Result<(), HistoryError> {
        match self {
            History::Local(store) => store.flush().await.map(|_| ()),
            History::Shared(_) => Ok(()),
        }
    }

    pub async fn heartbeat(&self, scope: &Scope, update: &Update) -> Result<(), HistoryError> {
        match update {
            Update::Watch(WatchStatus::CaughtUp { .. }) => self.watched(scope, now_ms()).await,
            _ => Ok(()),
        }
    }

    /// The serve loop's watcher was live at `at_ms` (at a clean stop, say):
    /// recorded by a local history.
    pub async fn watched(&self, scope: &Scope, at_ms: i64) -> Result<(), HistoryError> {
        match self {
            History::Local(store) => store.watched_in(scope.clone(), at_ms).await,
            History::Shared(_) => Ok(()),
        }
    }

    pub async fn set_cluster(&self, scope: &Scope, cluster_id: u64) -> Result<(), HistoryError> {
        match self {
            History::Local(store) => store.set_cluster_in(scope.clone(), cluster_id).await,
            History::Shared(_) => Ok(()),
        }
    }

    /// One of etcd's own events: stored locally, or handed to the writer
    /// task (recorded only while this replica writes; dropped on a standby,
    /// whose writer polls etcd itself).
    pub async fn cluster_event(&self, event: ClusterEvent) -> Result<(), HistoryError> {
        match self {
            History::Local(store) => store.cluster_event(event).await,
            History::Shared(shared) => {
                let _ = shared.cluster.try_send(event);
                Ok(())
            }
        }
    }

    pub fn reader(&self) -> Reader {
        match self {
            History::Local(store) => store.reader(),
            History::Shared(shared) => shared.reader.clone(),
        }
    }

    /// Commits what is queued (local), or stops writing and resigns the
    /// writer term (shared). Returns the committed resume revision.
    pub async fn close(self) -> anyhow::Result<i64> {
        match self {
            History::Local(store) => Ok(store.close().await?),
            History::Shared(mut shared) => {
                shared.poller.abort();
                if let Some(stop) = shared.stop.take() {
                    let _ = stop.send(());
                }
                let _ = (&mut shared.task).await;
                let reader = shared.reader.clone();
                let resume = tokio::task::spawn_blocking(move || reader.resume_point())
                    .await?
                    .context("reading the shared history's resume revision")?;
                Ok(resume.map_or(0, |r| r.revision))
            }
        }
    }
}

/// The writer task of a replica: campaigns, writes while it holds the
/// term, stands by otherwise.
pub struct Shared {
    reader: Reader,
    cluster: mpsc::Sender<ClusterEvent>,
    stop: Option<oneshot::Sender<()>>,
    task: JoinHandle<()>,
    /// Reads the database's recording status for `/readyz`.
    poller: JoinHandle<()>,
}

/// How a replica takes part.
pub struct SharedConfig {
    pub url: String,
    pub retention: Duration,
    pub watch: WatchConfig,
    /// TTL of the writer's term: a dead writer is replaced within it.
    pub ttl: Ttl,
    /// This replica's candidate id (shown as the writer's holder).
    pub id: String,
    pub metrics: HistoryWriterMetrics,
    /// This replica's readiness: told whether the history is being
    /// recorded.
    pub readiness: Arc<Readiness>,
}

/// A stuck writer notes its error in the database at most this often.
const NOTE_EVERY: Duration = Duration::from_secs(5);
/// How often a replica reads whether the shared history is being recorded.
const RECORDING_POLL: Duration = Duration::from_secs(1);
/// A writer takeover takes the TTL (the dead writer's lease runs out) plus
/// this, to open the database, claim the fence and resume.
const TAKEOVER: Duration = Duration::from_secs(3);

impl Shared {
    /// Starts campaigning. `reader` reads the shared database.
    pub fn start(client: Client, reader: Reader, cfg: SharedConfig) -> anyhow::Result<Shared> {
        let name = ElectionName::new(WRITER_ELECTION)?;
        cfg.readiness
            .check_recording(cfg.ttl.as_duration() + TAKEOVER);
        let poller = crate::task::spawn(
            "recording poller",
            poll_recording(reader.clone(), cfg.readiness.clone()),
        );
        let (cluster, cluster_rx) = mpsc::channel(256);
        let (stop, stop_rx) = oneshot::channel();
        let task = crate::task::spawn(
            "history writer",
            writer_loop(client, name, reader.clone(), cfg, cluster_rx, stop_rx),
        );
        Ok(Shared {
            reader,
            cluster,
            stop: Some(stop),
            task,
            poller,
        })
    }
}

enum Ended {
    Stop,
    Lost(String),
    Failed(String),
}

async fn writer_loop(
    client: Client,
    name: ElectionName,
    reader: Reader,
    cfg: SharedConfig,
    mut cluster: mpsc::Receiver<ClusterEvent>,
    mut stop: oneshot::Receiver<()>,
) {
    let opts = CampaignOptions::new(cfg.ttl);
    loop {
        // Standby: wait for the term (a watch on the key), draining etcd's
        // events, which the writer records. Stopping ends the wait cleanly
        // (its lease revoked).
        let leadership = {
            let stopped = async {
                let _ = (&mut stop).await;
            };
            // The writer's token fences only the database, whose fence
            // starts a new generation when etcd starts over: not refused
            // by tenure's token floor (else no writer after a restore).
            let writer = client.clone().without_token_floor();
            let campaign = writer.campaign_wait_until(&name, &cfg.id, &opts, None, stopped);
            tokio::pin!(campaign);
            loop {
                tokio::select! {
                    l = &mut campaign => break l,
                    Some(_) = cluster.recv() => {}
                }
            }
        };
        let leadership = match leadership {
            Ok(Some(l)) => Ok(l),
            Ok(None) => return,
            Err(e) => Err(e),
        };
        let leadership = match leadership {
            Ok(l) => l,
            Err(e) => {
                eprintln!(
                    "tenure: history writer: campaign for {WRITER_ELECTION} failed: {e}; retrying"
                );
                tokio::select! {
                    _ = tokio::time::sleep(Duration::from_secs(1)) => continue,
                    _ = &mut stop => return,
                }
            }
        };
        let ended = write_term(&client, &reader, &cfg, &leadership, &mut cluster, &mut stop).await;
        cfg.metrics.writer.set(0);
        match ended {
            Ended::Stop => {
                let _ = leadership.resign().await;
                return;
            }
            Ended::Lost(reason) => {
                eprintln!(
                    "tenure: history writer: lost the writer term (token {}): {reason}; standing by",
                    leadership.token()
                );
                drop(leadership);
            }
            Ended::Failed(e) => {
                eprintln!(
                    "tenure: history writer: stopped writing (token {}): {e}; resigning and standing by",
                    leadership.token()
                );
                note_error(
                    &cfg,
                    format!("stopped writing (token {}): {e}", leadership.token()),
                )
                .await;
                let _ = leadership.resign().await;
                tokio::select! {
                    _ = tokio::time::sleep(Duration::from_secs(1)) => {}
                    _ = &mut stop => return,
                }
            }
        }
    }
}

/// One writer term: claim the fence, resume from the stored revision,
/// record until the term ends.
async fn write_term(
    client: &Client,
    reader: &Reader,
    cfg: &SharedConfig,
    leadership: &Leadership,
    cluster: &mut mpsc::Receiver<ClusterEvent>,
    stop: &mut oneshot::Receiver<()>,
) -> Ended {
    let token = leadership.token();
    let won = Instant::now();
    // etcd's current revision, for the claim: read with the fence row
    // locked (a reset for a new etcd timeline, or a term of a timeline etcd
    // no longer has; see `history::pg`).
    let revision: RevisionSource = {
        let (c, key) = (client.clone(), leadership.key().to_owned());
        let runtime = tokio::runtime::Handle::current();
        Box::new(move || {
            let answer = runtime
                .block_on(c.op(c.etcd().get(key.as_str(), None)))
                .map_err(|e| e.to_string())?;
            answer
                .header()
                .map(|h| h.revision())
                .ok_or_else(|| "etcd's answer had no header".to_owned())
        })
    };
    let (url, retention, id) = (cfg.url.clone(), cfg.retention, cfg.id.clone());
    let opened = tokio::task::spawn_blocking(move || {
        Store::open_postgres(&url, retention, token, &id, revision)
    })
    .await;
    let store = match opened {
        Ok(Ok(s)) => {
            if let Some((stored, generation)) = s.fence_reset() {
                eprintln!(
                    "tenure: history writer: etcd's revision is below the writer token {stored} \
                     stored in the database: etcd was restored from a snapshot or replaced. The \
                     writer fence starts over (generation {generation}, token {token}); writers \
                     of the old timeline stay refused"
                );
            }
            s
        }
        Ok(Err(e)) => {
            if e.is_fenced() {
                cfg.metrics.refused.inc();
            }
            return Ended::Failed(e.to_string());
        }
        Err(e) => return Ended::Failed(e.to_string()),
    };
    let r = reader.clone();
    let resume = match tokio::task::spawn_blocking(move || r.resume_point()).await {
        Ok(Ok(resume)) => resume,
        Ok(Err(e)) => return close(store, cfg, Ended::Failed(e.to_string())).await,
        Err(e) => return close(store, cfg, Ended::Failed(e.to_string())).await,
    };
    cfg.metrics.writer.set(1);
    eprintln!(
        "tenure: history writer: this replica writes (token {token}), resuming after revision {} ({} ms after winning)",
        resume.as_ref().map_or(0, |r| r.revision),
        won.elapsed().as_millis()
    );
    let (tx, mut rx) = mpsc::channel::<Update>(4096);
    let watcher = crate::task::spawn(
        "history watcher",
        Watcher::new(client.clone(), cfg.watch.clone()).run(resume, tx),
    );
    let mut noted: Option<Instant> = None;
    let ended = loop {
        tokio::select! {
            reason = leadership.lost() => break Ended::Lost(format!("{reason:?}")),
            _ = &mut *stop => break Ended::Stop,
            u = rx.recv() => {
                let written = match u {
                    Some(Update::Batch(b)) => store.write(b).await,
                    Some(Update::Cluster { cluster_id }) => store.set_cluster(cluster_id).await,
                    Some(Update::Watch(WatchStatus::CaughtUp { .. })) => {
                        store.watched(now_ms()).await
                    }
                    Some(Update::Watch(WatchStatus::Stuck { next_revision, attempts }))
                        if noted.is_none_or(|at: Instant| at.elapsed() >= NOTE_EVERY) =>
                    {
                        // Recording nothing until it delivers: say why, for
                        // every replica's /readyz (at most every few seconds).
                        noted = Some(Instant::now());
                        note_error(
                            cfg,
                            format!(
                                "the writer's watch keeps failing at revision {next_revision} \
                                 ({attempts} attempts); nothing is recorded"
                            ),
                        )
                        .await;
                        Ok(())
                    }
                    Some(_) => Ok(()),
                    None => break Ended::Failed("the history watcher stopped".into()),
                };
                if let Err(e) = written {
                    break write_failed(&store, e);
                }
            }
            Some(e) = cluster.recv() => {
                if let Err(e) = store.cluster_event(e).await {
                    break write_failed(&store, e);
                }
            }
        }
    };
    watcher.abort();
    close(store, cfg, ended).await
}

/// Notes in the database why this replica, as the writer, records nothing
/// (every replica's `/readyz` says it); a database that cannot take even that is only logged.
async fn note_error(cfg: &SharedConfig, message: String) {
    let (url, id) = (cfg.url.clone(), cfg.id.clone());
    let noted = tokio::task::spawn_blocking(move || {
        crate::history::record_writer_error(&url, &id, &message)
    })
    .await;
    if let Ok(Err(e)) = noted {
        eprintln!("tenure: history writer: cannot note its error in the database: {e}");
    }
}

/// Reads, every [`RECORDING_POLL`], how far the shared history is recorded
/// and tells `readiness` (which compares it with what this replica's own
/// watcher has seen). A read that hangs counts as failed.
async fn poll_recording(reader: Reader, readiness: Arc<Readiness>) {
    loop {
        let r = reader.clone();
        let read = tokio::time::timeout(
            RECORDING_POLL * 2,
            tokio::task::spawn_blocking(move || r.writer_status()),
        )
        .await;
        let status = match read {
            Ok(Ok(Ok(Some(s)))) => Ok(s),
            Ok(Ok(Ok(None))) => return,
            Ok(Ok(Err(e))) => Err(e.to_string()),
            Ok(Err(e)) => Err(e.to_string()),
            Err(_) => Err(format!("no answer within {:?}", RECORDING_POLL * 2)),
        };
        readiness.observe_recording(status);
        tokio::time::sleep(RECORDING_POLL).await;
    }
}

/// How a term ends on a failed write: a commit refused by the fence means
/// a newer writer has written, so the term is lost (whichever of this and
/// the lease's loss is seen first); anything else is a failure.
fn write_failed(store: &Store, e: HistoryError) -> Ended {
    if store.refused_commits() > 0 {
        Ended::Lost("a newer writer has written (commit refused by the fence)".into())
    } else {
        Ended::Failed(e.to_string())
    }
}

/// Commits (or tries to: a stale writer is refused) what is queued, and
/// counts the refusals.
async fn close(store: Store, cfg: &SharedConfig, ended: Ended) -> Ended {
    let flushed = store.flush().await;
    let refused = store.refused_commits();
    if refused > 0 {
        cfg.metrics.refused.inc_by(refused);
        eprintln!(
            "tenure: history writer: {refused} commit(s) refused by the writer fence: \
             a newer writer has written, or etcd started over and the fence was reset; \
             nothing of this term's remainder was stored"
        );
    }
    let closed = store.close().await;
    match (ended, flushed.and(closed)) {
        // A failed final commit of a term that ended anyway changes
        // nothing: the next writer resumes from the stored revision.
        (Ended::Stop, Err(e)) => {
            eprintln!("tenure: history writer: the last commit failed: {e}");
            Ended::Stop
        }
        (ended, _) => ended,
    }
}

/// Opens the shared history for reading (creating its schema if no replica
/// has yet), off the runtime.
pub async fn open_reader(url: &str) -> anyhow::Result<Reader> {
    let url = url.to_owned();
    Ok(tokio::task::spawn_blocking(move || {
        crate::history::prepare_postgres(&url)?;
        Reader::open_postgres(&url)
    })
    .await??)
}

/// A candidate id for this replica: host, pid, HTTP address.
pub fn candidate_id(addr: std::net::SocketAddr) -> String {
    let host = std::fs::read_to_string("/proc/sys/kernel/hostname")
        .map(|h| h.trim().to_owned())
        .unwrap_or_default();
    format!("{host} pid {} http {addr}", std::process::id())
}
