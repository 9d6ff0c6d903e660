//! One feed's writer on the shared PostgreSQL history: campaigns for the
//! election `tenure/history-writer` in the feed's own etcd (under its
//! prefix), and while it holds that term opens the history with the term's
//! token, which claims the feed's own fence row (`history::pg`: every commit
//! locks that row and is refused if a higher token of the feed has
//! written), reads the feed's stored resume point, and has the feed's
//! watcher start again from there (`tap.rs`: the cluster is still watched
//! once), so a new writer records exactly what the previous one did not.
//! When its term ends (lease lost, paused past its TTL, partitioned from
//! that etcd) it lets go of that watcher and closes its store;
//! the other feeds' writers, in other etcds and on other rows, go on.
//! Standby replicas wait on the election (a watch: they take over as soon
//! as the key goes, at most the TTL after the writer died).

use std::sync::Arc;
use std::time::{Duration, Instant};

use tokio::sync::{mpsc, oneshot};
use tokio::task::JoinHandle;

use super::readiness::recording::{Elected, Role};
use super::readiness::Readiness;
use super::{Feed, FeedParts, WriterCtx};
use crate::election::{CampaignOptions, Client, ElectionName, Leadership};
use crate::events::cluster::ClusterEvent;
use crate::events::{now_ms, Update, WatchStatus};
use crate::history::{HistoryError, Reader, RevisionSource, Scope, Store};
use crate::watch::cluster::PollConfig;

/// The election each feed's replicas campaign for, in the feed's etcd.
pub const WRITER_ELECTION: &str = "tenure/history-writer";

/// A stuck writer notes its error in the database at most this often.
const NOTE_EVERY: Duration = Duration::from_secs(5);
/// How often a replica reads whether a feed's history is being recorded.
const RECORDING_POLL: Duration = Duration::from_secs(1);
/// A term's end when the feed's watcher stopped.
pub const WATCHER_GONE: &str = "the feed's watcher stopped";
/// A writer takeover takes the TTL (the dead writer's lease runs out) plus
/// this, to open the database, claim the fence and resume.
const TAKEOVER: Duration = Duration::from_secs(3);

/// A feed's running writer task and its recording poller.
pub struct FeedWriter {
    pub scope: Scope,
    /// etcd's own events of this feed, recorded while it writes.
    pub cluster: mpsc::Sender<ClusterEvent>,
    stop: Option<oneshot::Sender<()>>,
    task: JoinHandle<()>,
    poller: JoinHandle<()>,
}

/// Everything one feed's writer term needs.
pub struct Term {
    pub feed: Feed,
    pub ctx: WriterCtx,
    pub parts: FeedParts,
    pub reader: Reader,
}

/// How a standby's campaign ends.
enum Won {
    Term(Box<Leadership>),
    /// Serve stopped first.
    Stopped,
    /// The feed's endpoints now answer as another etcd than its history
    /// recorded: not campaigned in.
    Moved,
}

pub enum Ended {
    Stop,
    Lost(String),
    Failed(String),
    /// Won in an etcd that is not the one the feed's history recorded:
    /// nothing claimed or written (`identity.rs`).
    Refused(String),
}

impl FeedWriter {
    /// Starts campaigning for the feed's writer term, and polling whether
    /// its history is being recorded (for `/readyz`).
    pub fn start(feed: Feed, ctx: WriterCtx, parts: FeedParts, reader: Reader) -> FeedWriter {
        parts
            .readiness
            .check_recording(ctx.ttl.as_duration() + TAKEOVER);
        let scope = feed.scope().clone();
        let poller = crate::task::spawn(
            "recording poller",
            poll_recording(reader.clone(), scope.clone(), parts.readiness.clone()),
        );
        let (cluster, cluster_rx) = mpsc::channel(256);
        let (stop, stop_rx) = oneshot::channel();
        let term = Term {
            feed,
            ctx,
            parts,
            reader,
        };
        // A feed with no etcd (Leases through the Kubernetes API) elects
        // its writer in the database (`in_database.rs`).
        let task = if term.feed.watched.api.is_some() {
            crate::task::spawn("history writer", term.run_in_database(cluster_rx, stop_rx))
        } else {
            crate::task::spawn("history writer", term.run(cluster_rx, stop_rx))
        };
        FeedWriter {
            scope,
            cluster,
            stop: Some(stop),
            task,
            poller,
        }
    }

    /// Stops writing: the term resigned, the last commit tried.
    pub async fn stop(mut self) {
        self.poller.abort();
        if let Some(stop) = self.stop.take() {
            let _ = stop.send(());
        }
        let _ = (&mut self.task).await;
    }
}

impl Term {
    /// "history writer of cluster NAME: " (or of the one cluster).
    pub fn who(&self) -> String {
        match self.feed.scope() {
            Some(n) => format!("history writer of cluster {n}"),
            None => "history writer".to_owned(),
        }
    }

    async fn run(self, mut cluster: mpsc::Receiver<ClusterEvent>, mut stop: oneshot::Receiver<()>) {
        let Ok(name) = ElectionName::new(WRITER_ELECTION) else {
            return;
        };
        let Some(client) = self.connected(&mut cluster, &mut stop).await else {
            return;
        };
        loop {
            if self.watcher_ended() {
                return;
            }
            let Some(etcd) = self.identified(&client, &mut stop).await else {
                return;
            };
            let pinned = client.clone().only_in_cluster(etcd);
            let won = self.campaign(&pinned, &name, &mut cluster, &mut stop).await;
            let leadership = match won {
                Ok(Won::Term(l)) => *l,
                Ok(Won::Stopped) => {
                    self.watcher_ended();
                    return;
                }
                // Another etcd answers now: the campaign is dropped (its
                // lease there is not kept alive) until the recorded one is
                // back.
                Ok(Won::Moved) | Err(crate::election::Error::OtherCluster { .. }) => continue,
                Err(e) => {
                    eprintln!(
                        "tenure: {}: campaign for {WRITER_ELECTION} failed: {e}; retrying",
                        self.who()
                    );
                    self.refused(&client, &name, &e);
                    if paused(&mut stop).await {
                        return;
                    }
                    continue;
                }
            };
            let ended = self
                .write_term(&client, &leadership, &mut cluster, &mut stop)
                .await;
            self.parts.metrics.writer.set(0);
            self.parts
                .readiness
                .set_writer_role(Role::StandingBy { elected: None });
            if self.ended(ended, leadership, &mut stop).await {
                return;
            }
        }
    }

    /// Tells `/readyz` that etcd refused this replica's campaign, why, and
    /// what to grant; `permanent` when no retry fixes it (TLS, login or a
    /// missing grant: this replica can never take over as it is).
    fn refused(&self, client: &Client, name: &ElectionName, e: &crate::election::Error) {
        let mut why = e.to_string();
        if matches!(e, crate::election::Error::PermissionDenied { .. }) {
            let keys = client.keys();
            let (key, end) = (keys.leader_key(name), keys.end_marker_key(name));
            why.push_str(&format!(
                ". The writer campaign writes {key} (and {end} when it resigns): grant its role \
                 e.g. `etcdctl role grant-permission ROLE --prefix=true readwrite {key}`, and \
                 the same for {end}"
            ));
        }
        self.parts.readiness.set_writer_role(Role::Refused {
            at_ms: now_ms(),
            why,
            // Only what an operator must fix (TLS, login, a missing
            // grant) says "never": a full disk or a refused request may
            // pass, and every standby would read 503 at once.
            permanent: e.is_access_denied(),
        });
    }

    /// Reads etcd's writer election for `/readyz` while standing by: its
    /// leader, and how long its lease has left (a dead writer's runs out).
    /// An unreadable election names none.
    async fn look(&self, client: &Client, name: &ElectionName) {
        let elected = match client.leader(name).await {
            Ok(Some(s)) if s.leader.holder != self.ctx.id => Some(Elected {
                token: s.leader.token,
                holder: s.leader.holder,
                lease_left_s: s.ttl_remaining_seconds,
                read_at_ms: now_ms(),
            }),
            _ => None,
        };
        self.parts
            .readiness
            .set_writer_role(Role::StandingBy { elected });
    }

    /// What the term's end means: `true` when serve stops.
    async fn ended(
        &self,
        ended: Ended,
        leadership: Leadership,
        stop: &mut oneshot::Receiver<()>,
    ) -> bool {
        let token = leadership.token();
        match ended {
            Ended::Stop => {
                let _ = leadership.resign().await;
                true
            }
            Ended::Lost(reason) => {
                eprintln!(
                    "tenure: {}: lost the writer term (token {token}): {reason}; standing by",
                    self.who()
                );
                drop(leadership);
                false
            }
            Ended::Refused(why) => {
                eprintln!("tenure: {}: resigning the writer term: {why}", self.who());
                let _ = leadership.resign().await;
                paused(stop).await
            }
            Ended::Failed(e) => {
                eprintln!(
                    "tenure: {}: stopped writing (token {token}): {e}; resigning and standing by",
                    self.who()
                );
                self.note_error(format!("stopped writing (token {token}): {e}"))
                    .await;
                let _ = leadership.resign().await;
                paused(stop).await
            }
        }
    }

    /// Waits while the feed's etcd is not the one its history recorded (or
    /// adopted): a writer never campaigns in another (`None`: serve
    /// stopped first). Its watcher says why in `/readyz`; a change of the
    /// reason is logged.
    async fn identified(&self, client: &Client, stop: &mut oneshot::Receiver<()>) -> Option<u64> {
        let mut said = String::new();
        loop {
            match super::identity::verify(&self.feed.watched, client, &self.reader).await {
                Ok(id) => return Some(id),
                Err(e) => {
                    let why = e.to_string();
                    if why != said {
                        eprintln!("tenure: {}: not campaigning: {why}", self.who());
                        said = why;
                    }
                }
            }
            if paused(stop).await {
                return None;
            }
        }
    }

    /// The feed's client: at once when serve connected at start, else once
    /// its pipeline has connected (draining etcd's events meanwhile).
    /// `None`: serve stopped first.
    async fn connected(
        &self,
        cluster: &mut mpsc::Receiver<ClusterEvent>,
        stop: &mut oneshot::Receiver<()>,
    ) -> Option<Client> {
        loop {
            if let Some(client) = self.parts.client.get() {
                return Some(client.clone());
            }
            tokio::select! {
                _ = tokio::time::sleep(Duration::from_secs(1)) => {}
                Some(_) = cluster.recv() => {}
                _ = &mut *stop => return None,
            }
        }
    }

    /// Standby: waits for the term (a watch on the key), draining etcd's
    /// events, which the writer records. Stopping ends the wait cleanly
    /// (its lease revoked): `Won::Stopped`; another etcd answering ends it
    /// too (`Won::Moved`: asked every poll, so a campaign may reach it
    /// within one poll's time).
    async fn campaign(
        &self,
        client: &Client,
        name: &ElectionName,
        cluster: &mut mpsc::Receiver<ClusterEvent>,
        stop: &mut oneshot::Receiver<()>,
    ) -> Result<Won, crate::election::Error> {
        let opts = CampaignOptions::new(self.ctx.ttl);
        // Serve's stop, or the feed's watcher gone: the wait ends cleanly.
        let taps = self.parts.taps.clone();
        let stopped = async move {
            tokio::select! {
                _ = stop => {}
                _ = taps.closed() => {}
            }
        };
        // The writer's token fences only the database, whose fence starts a
        // new generation when etcd starts over: not refused by tenure's
        // token floor (else no writer after a restore).
        let writer = client.clone().without_token_floor();
        let campaign = writer.campaign_wait_until(name, &self.ctx.id, &opts, None, stopped);
        tokio::pin!(campaign);
        // A refused campaign fails at its first request: one still waiting
        // after a poll's time was not refused, and stands by. A refusal
        // said before stays until then (retries every second would flap).
        let first = tokio::time::Instant::now() + RECORDING_POLL;
        let mut look = tokio::time::interval_at(first, RECORDING_POLL);
        if self.parts.readiness.writer_role().is_none() {
            self.parts
                .readiness
                .set_writer_role(Role::StandingBy { elected: None });
        }
        loop {
            tokio::select! {
                l = &mut campaign => {
                    return l.map(|l| l.map_or(Won::Stopped, |l| Won::Term(Box::new(l))));
                }
                Some(_) = cluster.recv() => {}
                _ = look.tick() => {
                    // A standby waits long: its etcd is asked again each
                    // poll (a campaign in another would queue there).
                    let asked = super::identity::verify(&self.feed.watched, client, &self.reader);
                    if let Err(super::identity::Refused::NotRecorded(_)) = asked.await {
                        return Ok(Won::Moved);
                    }
                    self.look(client, name).await;
                }
            }
        }
    }

    /// Opens the history as the feed's writer with the term's token:
    /// claims its fence row (reading etcd's revision with the row locked: a
    /// reset for a new etcd timeline, or a term of a timeline etcd no longer
    /// has; see `history::pg`).
    async fn open(&self, client: &Client, leadership: &Leadership) -> Result<Store, String> {
        let token = leadership.token();
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
        let (url, retention, id) = (
            self.ctx.url.clone(),
            self.ctx.retention,
            self.ctx.id.clone(),
        );
        let fence = self.feed.fence_key().to_owned();
        let opened = tokio::task::spawn_blocking(move || {
            Store::open_postgres_for(&url, &fence, retention, token, &id, revision)
        })
        .await
        .map_err(|e| e.to_string())?;
        let store = opened.map_err(|e| {
            if e.is_fenced() {
                self.parts.metrics.refused.inc();
            }
            e.to_string()
        })?;
        if let Some((stored, generation)) = store.fence_reset() {
            eprintln!(
                "tenure: {}: etcd's revision is below the writer token {stored} stored in \
                 the database: etcd was restored from a snapshot or replaced. The writer fence \
                 starts over (generation {generation}, token {token}); writers of the old \
                 timeline stay refused",
                self.who()
            );
        }
        Ok(store)
    }

    /// The term's start: the recorded etcd checked, the fence claimed, the
    /// resume point read (`Err`: how the term ended instead).
    async fn begin_term(
        &self,
        client: &Client,
        leadership: &Leadership,
    ) -> Result<(Store, Option<crate::events::ResumePoint>), Ended> {
        let won = Instant::now();
        // Won meanwhile in another etcd than the recorded one: its fence
        // row is not claimed.
        if let Err(e) = super::identity::verify(&self.feed.watched, client, &self.reader).await {
            return Err(Ended::Refused(e.to_string()));
        }
        let store = self.open(client, leadership).await.map_err(Ended::Failed)?;
        let resume = match self.feed.resume(&self.reader).await {
            Ok(resume) => resume,
            Err(e) => return Err(self.close(store, Ended::Failed(e.to_string())).await),
        };
        self.parts.metrics.writer.set(1);
        self.parts.readiness.set_writer_role(Role::Writing {
            token: leadership.token(),
            since_ms: now_ms(),
        });
        eprintln!(
            "tenure: {}: this replica writes (token {}), resuming after revision {} ({} ms after winning)",
            self.who(),
            leadership.token(),
            resume.as_ref().map_or(0, |r| r.revision),
            won.elapsed().as_millis()
        );
        Ok((store, resume))
    }

    /// One writer term: claim the fence, resume from the stored revision,
    /// record until the term ends.
    async fn write_term(
        &self,
        client: &Client,
        leadership: &Leadership,
        cluster: &mut mpsc::Receiver<ClusterEvent>,
        stop: &mut oneshot::Receiver<()>,
    ) -> Ended {
        let (store, resume) = match self.begin_term(client, leadership).await {
            Ok(begun) => begun,
            Err(ended) => return ended,
        };
        // etcd's own events, compared with what the history holds now that
        // no earlier term can add to it: what changed while no replica
        // wrote is recorded at once (a standby's poller is not recorded).
        let (mut polled, poller) = match self.poller(client).await {
            Ok(p) => p,
            Err(e) => return self.close(store, Ended::Failed(e)).await,
        };
        // No pipeline any more: read as a watcher that ended (at serve's
        // stop, the term still waits for its own).
        let mut rx = self.tap(resume).await.unwrap_or_else(|| mpsc::channel(1).1);
        let mut noted: Option<Instant> = None;
        // The feed's watcher ended because serve is stopping: the term
        // records serve's last events and ends at its own stop.
        let mut watching = true;
        let ended = loop {
            tokio::select! {
                reason = leadership.lost() => break Ended::Lost(format!("{reason:?}")),
                _ = &mut *stop => break stopping(&store, cluster).await,
                u = rx.recv(), if watching => {
                    let Some(u) = u else {
                        if *self.parts.stopping.borrow() {
                            watching = false;
                            continue;
                        }
                        break Ended::Failed(WATCHER_GONE.into());
                    };
                    if let Err(e) = self.record(&store, u, &mut noted).await {
                        break write_failed(&store, e);
                    }
                }
                Some(e) = cluster.recv() => {
                    if let Err(e) = store.cluster_event(e).await {
                        break write_failed(&store, e);
                    }
                }
                Some(mut e) = polled.recv() => {
                    e.cluster = self.feed.scope().as_deref().map(str::to_owned);
                    if let Err(e) = store.cluster_event(e).await {
                        break write_failed(&store, e);
                    }
                }
            }
        };
        // Let go of the feed's watcher before the last commit, which may
        // wait on the database: the serve loop is never held up by it.
        drop(rx);
        if let Some(p) = poller {
            p.abort();
        }
        self.close(store, ended).await
    }

    /// The feed's watcher has ended for good (its pipeline is gone): this
    /// replica stops standing for the feed's writer (said once).
    pub(super) fn watcher_ended(&self) -> bool {
        let ended = self.parts.taps.is_closed() && !*self.parts.stopping.borrow();
        if ended {
            let why = "the feed's watcher stopped: this replica no longer stands for writing it";
            eprintln!("tenure: {}: {why}", self.who());
            self.parts.readiness.set_writer_role(Role::Refused {
                at_ms: now_ms(),
                why: why.to_owned(),
                permanent: true,
            });
        }
        ended || self.parts.taps.is_closed()
    }

    /// The feed's watcher from `resume` on, for this term (`None`: the
    /// feed's pipeline is gone).
    pub async fn tap(
        &self,
        resume: Option<crate::events::ResumePoint>,
    ) -> Option<mpsc::Receiver<Update>> {
        let (tx, rx) = mpsc::channel::<Update>(4096);
        let tap = super::tap::Tap { resume, tx };
        self.parts.taps.send(tap).await.ok().map(|()| rx)
    }

    /// The term's own poller of etcd's events, from the history's
    /// baseline of the feed (none with `--cluster-poll 0`: its receiver
    /// never yields).
    async fn poller(
        &self,
        client: &Client,
    ) -> Result<(mpsc::Receiver<ClusterEvent>, Option<JoinHandle<()>>), String> {
        let (tx, rx) = mpsc::channel(256);
        let Some(cfg) = PollConfig::every(self.ctx.cluster_poll, client.op_timeout()) else {
            return Ok((rx, None));
        };
        let (reader, scope) = (self.reader.clone(), self.feed.scope().clone());
        let baseline =
            tokio::task::spawn_blocking(move || reader.cluster_baseline_of(scope.as_deref()))
                .await
                .map_err(|e| e.to_string())?
                .map_err(|e| format!("reading the recorded etcd cluster events: {e}"))?;
        let poll = crate::watch::cluster::poll(client.etcd(), baseline, cfg, tx);
        Ok((
            rx,
            Some(crate::task::spawn("history writer's poller", poll)),
        ))
    }

    /// One update of the writer's own watcher, to the history under the
    /// feed's scope (its names `CLUSTER/NAME` with several clusters).
    pub async fn record(
        &self,
        store: &Store,
        u: Update,
        noted: &mut Option<Instant>,
    ) -> Result<(), HistoryError> {
        let scope = self.feed.scope();
        match u {
            Update::Batch(b) => {
                let b = super::qualified(scope.as_deref(), &b);
                store.write_in(scope.clone(), b).await
            }
            Update::Cluster { cluster_id } => store.set_cluster_in(scope.clone(), cluster_id).await,
            Update::Watch(WatchStatus::CaughtUp { .. }) => {
                store.watched_in(scope.clone(), now_ms()).await
            }
            Update::Watch(WatchStatus::Stuck {
                next_revision,
                attempts,
            }) if noted.is_none_or(|at: Instant| at.elapsed() >= NOTE_EVERY) => {
                // Recording nothing until it delivers: say why, for every
                // replica's /readyz (at most every few seconds).
                *noted = Some(Instant::now());
                self.note_error(format!(
                    "the writer's watch keeps failing at revision {next_revision} \
                     ({attempts} attempts); nothing is recorded"
                ))
                .await;
                Ok(())
            }
            _ => Ok(()),
        }
    }

    /// Notes in the database why this replica, as the feed's writer,
    /// records nothing (every replica's `/readyz` says it); a database that
    /// cannot take even that is only logged.
    pub async fn note_error(&self, message: String) {
        let (url, id) = (self.ctx.url.clone(), self.ctx.id.clone());
        let fence = self.feed.fence_key().to_owned();
        let noted = tokio::task::spawn_blocking(move || {
            crate::history::record_writer_error(&url, &fence, &id, &message)
        })
        .await;
        if let Ok(Err(e)) = noted {
            eprintln!(
                "tenure: {}: cannot note its error in the database: {e}",
                self.who()
            );
        }
    }

    /// Commits (or tries to: a stale writer is refused) what is queued, and
    /// counts the refusals.
    pub async fn close(&self, store: Store, ended: Ended) -> Ended {
        let flushed = store.flush().await;
        let refused = store.refused_commits();
        if refused > 0 {
            self.parts.metrics.refused.inc_by(refused);
            eprintln!(
                "tenure: {}: {refused} commit(s) refused by the writer fence: a newer writer \
                 has written, or etcd started over and the fence was reset; nothing of this \
                 term's remainder was stored",
                self.who()
            );
        }
        let closed = store.close().await;
        match (ended, flushed.and(closed)) {
            // A failed final commit of a term that ended anyway changes
            // nothing: the next writer resumes from the stored revision.
            (Ended::Stop, Err(e)) => {
                eprintln!("tenure: {}: the last commit failed: {e}", self.who());
                Ended::Stop
            }
            (ended, _) => ended,
        }
    }
}

/// Waits a second before trying again, or until serve stops (`true`).
pub async fn paused(stop: &mut oneshot::Receiver<()>) -> bool {
    tokio::select! {
        _ = tokio::time::sleep(Duration::from_secs(1)) => false,
        _ = stop => true,
    }
}

/// The term's end at serve's stop: what serve sent before (its own stop
/// among it) recorded first.
pub async fn stopping(store: &Store, cluster: &mut mpsc::Receiver<ClusterEvent>) -> Ended {
    while let Ok(e) = cluster.try_recv() {
        if let Err(e) = store.cluster_event(e).await {
            return write_failed(store, e);
        }
    }
    Ended::Stop
}

/// How a term ends on a failed write: a commit refused by the fence means
/// a newer writer has written, so the term is lost (whichever of this and
/// the lease's loss is seen first); anything else is a failure.
pub fn write_failed(store: &Store, e: HistoryError) -> Ended {
    if store.refused_commits() > 0 {
        Ended::Lost("a newer writer has written (commit refused by the fence)".into())
    } else {
        Ended::Failed(e.to_string())
    }
}

/// Reads, every [`RECORDING_POLL`], how far the feed's history is recorded
/// and who writes it, and tells `readiness` (which compares it with what
/// this replica's own watcher has seen). A read that hangs counts as
/// failed.
async fn poll_recording(reader: Reader, scope: Scope, readiness: Arc<Readiness>) {
    loop {
        let (r, s) = (reader.clone(), scope.clone());
        let read = tokio::time::timeout(
            RECORDING_POLL * 2,
            tokio::task::spawn_blocking(move || r.writer_status_of(s.as_deref())),
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
