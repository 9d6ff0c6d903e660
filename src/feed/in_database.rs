//! The writer of a feed that has no etcd to elect in (Leases read through
//! the Kubernetes API) on the shared PostgreSQL history: its term is
//! elected in the database, on the feed's own fence row
//! (`history::TermSeat`: the stored token plus one, leased on the
//! database's clock), so the election and the fence are one row and no
//! write reaches the Kubernetes cluster (tenure needs only to list and
//! watch its Leases; see ARCHITECTURE.md, "A writer elected in the
//! database"). A standby tries to claim every third of the TTL; the
//! writer renews as often and gives the term up once a TTL has passed
//! since the last renewal it sent that was answered, or when the renewal
//! finds another token. Whatever it believes, a stale writer's commit is
//! refused by the higher token a standby claimed. A term records the
//! feed's one watcher, started again from the history's resume point
//! (`tap.rs`).

use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::sync::{mpsc, oneshot};
use tokio::time::Instant;

use super::readiness::recording::{Elected, Role};
use super::writer::{paused, stopping, write_failed, Ended, Term, WATCHER_GONE};
use crate::events::cluster::ClusterEvent;
use crate::events::{now_ms, Update};
use crate::history::{HistoryError, RevisionSource, Seat, Store, TermSeat};
use crate::task::Locked;

type Shared = Arc<Mutex<TermSeat>>;

/// A writer whose watcher cannot read the API this long (or three TTLs)
/// gives its term up.
const UNREADABLE: Duration = Duration::from_secs(10);

/// What woke a writing term.
enum Next {
    Renew,
    Update(Option<Update>),
    Cluster(ClusterEvent),
}

impl Term {
    /// Claims, writes, stands by, until serve stops.
    pub async fn run_in_database(
        self,
        mut cluster: mpsc::Receiver<ClusterEvent>,
        mut stop: oneshot::Receiver<()>,
    ) {
        let Some(seat) = self.seat(&mut stop).await else {
            return;
        };
        loop {
            let Some((token, claimed)) = self.stand_by(&seat, &mut cluster, &mut stop).await else {
                return;
            };
            let ended = self
                .write_api_term(&seat, (token, claimed), &mut cluster, &mut stop)
                .await;
            self.parts.metrics.writer.set(0);
            self.parts
                .readiness
                .set_writer_role(Role::StandingBy { elected: None });
            let release = |why: &str| {
                eprintln!(
                    "tenure: {}: {why} (token {token}); releasing the term",
                    self.who()
                );
                blocking(&seat, move |s| s.release(token))
            };
            match ended {
                Ended::Stop => {
                    let _ = blocking(&seat, move |s| s.release(token)).await;
                    return;
                }
                Ended::Lost(why) => eprintln!(
                    "tenure: {}: lost the writer term (token {token}): {why}; standing by",
                    self.who()
                ),
                Ended::Failed(e) | Ended::Refused(e) => {
                    let _ = release(&format!("stopped writing: {e}")).await;
                    self.note_error(format!("stopped writing (token {token}): {e}"))
                        .await;
                    if paused(&mut stop).await {
                        return;
                    }
                }
            }
        }
    }

    /// A session for the feed's election, retried each second until the
    /// database answers (`None`: serve stopped first).
    async fn seat(&self, stop: &mut oneshot::Receiver<()>) -> Option<Shared> {
        let mut said = String::new();
        loop {
            let (url, fence, id) = (
                self.ctx.url.clone(),
                self.feed.fence_key().to_owned(),
                self.ctx.id.clone(),
            );
            let ttl = self.ctx.ttl.as_duration();
            let opened =
                tokio::task::spawn_blocking(move || TermSeat::connect(&url, &fence, &id, ttl))
                    .await;
            match opened {
                Ok(Ok(seat)) => return Some(Arc::new(Mutex::new(seat))),
                Ok(Err(e)) => {
                    let why = e.to_string();
                    if why != said {
                        eprintln!("tenure: {}: cannot stand for writer: {why}", self.who());
                        said = why;
                    }
                }
                Err(_) => return None,
            }
            if paused(stop).await {
                return None;
            }
        }
    }

    /// Tries to claim every third of the TTL, saying who holds the term
    /// meanwhile; drains etcd's events. The token won, and when its claim
    /// was sent (`None`: serve stopped first).
    async fn stand_by(
        &self,
        seat: &Shared,
        cluster: &mut mpsc::Receiver<ClusterEvent>,
        stop: &mut oneshot::Receiver<()>,
    ) -> Option<(i64, Instant)> {
        let mut tick = tokio::time::interval(self.every());
        tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            tokio::select! {
                _ = tick.tick() => {}
                Some(_) = cluster.recv() => continue,
                _ = &mut *stop => return None,
                _ = self.parts.taps.closed() => {}
            }
            if self.watcher_ended() {
                return None;
            }
            // A replica that cannot read the cluster would hold the term
            // and record nothing: it stands only while its own watcher
            // reads the API (its `/readyz` says why not).
            if self.parts.readiness.connect_problem().is_some() {
                continue;
            }
            let sent = Instant::now();
            let claim = tokio::select! {
                c = blocking(seat, TermSeat::claim) => c,
                _ = &mut *stop => return None,
            };
            match claim {
                Ok(Seat::Won { token }) => return Some((token, sent)),
                Ok(Seat::Held {
                    token,
                    holder,
                    left_ms,
                }) => self.parts.readiness.set_writer_role(Role::StandingBy {
                    elected: Some(Elected {
                        token,
                        holder,
                        lease_left_s: Some((left_ms + 999) / 1000),
                        read_at_ms: now_ms(),
                    }),
                }),
                Err(e) => self.parts.readiness.set_writer_role(Role::Refused {
                    at_ms: now_ms(),
                    why: format!("claiming the writer term in the database: {e}"),
                    permanent: false,
                }),
            }
        }
    }

    /// One term: the fence opened with its token, the feed's Leases read
    /// from the stored resume point by a watcher of its own, recorded until
    /// the term ends.
    async fn write_api_term(
        &self,
        seat: &Shared,
        (token, claimed): (i64, Instant),
        cluster: &mut mpsc::Receiver<ClusterEvent>,
        stop: &mut oneshot::Receiver<()>,
    ) -> Ended {
        // The database leased the term from a moment after the claim was
        // sent: counted from the sending, this replica never believes past
        // its lease.
        let mut renewed = claimed;
        let (store, mut rx) = match self.begin(token).await {
            Ok(w) => w,
            Err(ended) => return ended,
        };
        let mut renew = tokio::time::interval(self.every());
        renew.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        let ttl = self.ctx.ttl.as_duration();
        let mut noted = None;
        // The feed's watcher ended because serve is stopping: the term
        // records serve's last events and ends at its own stop.
        let mut watching = true;
        let ended = loop {
            let next = tokio::select! {
                _ = renew.tick() => Next::Renew,
                _ = &mut *stop => break stopping(&store, cluster).await,
                u = rx.recv(), if watching => Next::Update(u),
                Some(e) = cluster.recv() => Next::Cluster(e),
            };
            // Nothing is acted on past the term as this replica counts it
            // (a freeze ends in the select above, with updates waiting).
            if renewed.elapsed() >= ttl {
                break Ended::Lost(format!(
                    "not renewed within its TTL ({} ms)",
                    ttl.as_millis()
                ));
            }
            let done = match next {
                Next::Renew => match self.renew(seat, token, &mut renewed).await {
                    Ok(()) => Ok(()),
                    Err(ended) => break ended,
                },
                Next::Update(None) if *self.parts.stopping.borrow() => {
                    watching = false;
                    Ok(())
                }
                Next::Update(None) => break Ended::Failed(self.watcher_gone()),
                Next::Update(Some(u)) => self.record(&store, u, &mut noted).await,
                Next::Cluster(e) => store.cluster_event(e).await,
            };
            if let Err(e) = done {
                break write_failed(&store, e);
            }
        };
        // The feed's watcher let go of before the last commit.
        drop(rx);
        self.close(store, ended).await
    }

    /// One renewal of the term of `token`, never waited for past the term
    /// (a database that stopped answering ends it on time); `renewed` is
    /// when the last answered one was sent. `Err`: how the term ended.
    async fn renew(&self, seat: &Shared, token: i64, renewed: &mut Instant) -> Result<(), Ended> {
        if let Some(why) = self.cannot_read() {
            return Err(Ended::Failed(why));
        }
        let ttl = self.ctx.ttl.as_duration();
        let sent = Instant::now();
        let left = ttl.saturating_sub(renewed.elapsed());
        match tokio::time::timeout(left, blocking(seat, move |s| s.renew(token))).await {
            Ok(Ok(true)) => *renewed = sent,
            Ok(Ok(false)) => {
                return Err(Ended::Lost(
                    "its lease ran out or another replica claimed the term".into(),
                ))
            }
            // Tried again at the next tick, until the TTL.
            Ok(Err(e)) => tracing::warn!(error = %e, "renewing the writer term failed; retrying"),
            Err(_) => {
                return Err(Ended::Lost(format!(
                    "not renewed within its TTL ({} ms): the database did not answer",
                    ttl.as_millis()
                )))
            }
        }
        Ok(())
    }

    /// The term's start: its store opened, its resume point read, the
    /// feed's watcher started again from there (`Err`: how the term ended
    /// instead).
    async fn begin(&self, token: i64) -> Result<(Store, mpsc::Receiver<Update>), Ended> {
        let won = std::time::Instant::now();
        let store = self.open_with(token).await.map_err(Ended::Failed)?;
        let resume = match self.feed.resume(&self.reader).await {
            Ok(resume) => resume,
            Err(e) => return Err(self.close(store, Ended::Failed(e.to_string())).await),
        };
        self.parts.metrics.writer.set(1);
        self.parts.readiness.set_writer_role(Role::Writing {
            token,
            since_ms: now_ms(),
        });
        eprintln!(
            "tenure: {}: this replica writes (token {token}, elected in the database), resuming \
             after resourceVersion {} ({} ms after winning)",
            self.who(),
            resume.as_ref().map_or(0, |r| r.revision),
            won.elapsed().as_millis()
        );
        // No pipeline any more: read as a watcher that ended (at serve's
        // stop, the term still waits for its own).
        Ok((
            store,
            self.tap(resume).await.unwrap_or_else(|| mpsc::channel(1).1),
        ))
    }

    /// Why the feed's watcher stopped, as far as it said.
    fn watcher_gone(&self) -> String {
        match self.parts.readiness.connect_problem() {
            Some(why) => format!("{WATCHER_GONE}: {why}"),
            None => WATCHER_GONE.to_owned(),
        }
    }

    /// The history opened as the feed's writer with `token`, which the
    /// claim stored: a higher token stored since (this replica paused past
    /// its lease) refuses it. No etcd timeline to compare with: the
    /// database's counter is the only one, so a higher stored token is
    /// never taken for a restore.
    async fn open_with(&self, token: i64) -> Result<Store, String> {
        let (url, retention, id) = (
            self.ctx.url.clone(),
            self.ctx.retention,
            self.ctx.id.clone(),
        );
        let fence = self.feed.fence_key().to_owned();
        let no_timeline: RevisionSource = Box::new(|| Ok(i64::MAX));
        let opened = tokio::task::spawn_blocking(move || {
            Store::open_postgres_for(&url, &fence, retention, token, &id, no_timeline)
        })
        .await
        .map_err(|e| e.to_string())?;
        opened.map_err(|e| {
            if e.is_fenced() {
                self.parts.metrics.refused.inc();
            }
            e.to_string()
        })
    }

    /// Why the feed's watcher has not read the API for [`UNREADABLE`] or
    /// three TTLs, whichever is longer (`None`: it reads it): the term is
    /// given up for a replica that can.
    fn cannot_read(&self) -> Option<String> {
        let bound = UNREADABLE.max(self.ctx.ttl.as_duration() * 3);
        let (why, since) = self.parts.readiness.connect_problem_for()?;
        (since >= bound).then(|| {
            format!(
                "its watcher has not read the Kubernetes API for {} s: {why}",
                since.as_secs()
            )
        })
    }

    /// A third of the TTL: how often a standby claims and the writer renews.
    fn every(&self) -> Duration {
        (self.ctx.ttl.as_duration() / 3).max(Duration::from_millis(100))
    }
}

/// `f` on the seat's session, off the runtime.
async fn blocking<T: Send + 'static>(
    seat: &Shared,
    f: impl FnOnce(&mut TermSeat) -> Result<T, HistoryError> + Send + 'static,
) -> Result<T, HistoryError> {
    let seat = seat.clone();
    tokio::task::spawn_blocking(move || f(&mut seat.locked()))
        .await
        .map_err(|e| HistoryError::WriterFailed(e.to_string()))?
}
