//! Campaigning (once, or waiting by watching) and the leadership handle.
//!
//! By job: this file holds the options and the campaign itself (once, or
//! waiting); `attempt` one campaign txn (the single-key layout, its retries),
//! `queue` the queue layout (place, wait for the predecessor), `detached`
//! candidates that keep their own lease alive (`acquire_detached`, `renew`),
//! `leadership` the term's handle, `term_watch` the watch on its key.

mod attempt;
mod detached;
mod leadership;
mod queue;
mod queue_watch;
mod term_watch;

use std::time::Duration;

use etcd_client::{EventType, TxnResponse};
use tokio::time::Instant;

use super::deadline::Stamp;
use super::keywatch::{RangeWatch, Watched};
use super::lease::{LossReason, Session, Ttl};
use super::{keys, Client, ElectionName, Error, KeyLayout, Leader};

pub use detached::Acquired;
pub use leadership::Leadership;
use leadership::Won;
use queue::{wait_in_queue, Queued};

/// How to campaign.
#[derive(Debug, Clone)]
pub struct CampaignOptions {
    pub ttl: Ttl,
    /// How long before the lease could expire the holder is told to stop.
    /// Default: a quarter of the TTL, at least 500 ms, at most half the TTL.
    pub margin: Option<Duration>,
    /// Resign and raise the loss signal on SIGTERM or SIGINT. Off by default:
    /// a library does not take over a process's signals unasked.
    pub resign_on_signal: bool,
    /// [`KeyLayout::Single`] (default): one leader key, created by a
    /// compare-and-create txn; waiters retry when it goes.
    /// [`KeyLayout::Queue`]: etcd's own layout, `election/<name>/<lease-hex>`:
    /// candidates queue by CreateRevision (together with Go
    /// `concurrency.Election` and `etcdctl elect` candidates) and each
    /// waiter watches only its predecessor.
    pub layout: KeyLayout,
    /// Who says when the holder acted as leader (the term's acting record,
    /// `election::acting`): see [`ActingReports`].
    pub acting: ActingReports,
}

/// Who reports a term's acting (`P election/~acting/<name>`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ActingReports {
    /// The library (default): acting began when the leadership was handed
    /// over, and ended when it was resigned or dropped. Nothing is written
    /// while the term runs; at its end the record rides in the resign's own
    /// txn (a dropped or lost term: one put).
    Automatic,
    /// The caller says when acting began and ended
    /// ([`Leadership::acting_began`], [`Leadership::acting_ended`], …) and
    /// publishes ([`Leadership::publish_acting`]); a resign after an end
    /// carries the record in its txn. `tenure campaign` does: CMD started,
    /// its group dead.
    ByCaller,
    /// Nothing is written.
    Off,
}

impl CampaignOptions {
    pub fn new(ttl: Ttl) -> Self {
        Self {
            ttl,
            margin: None,
            resign_on_signal: false,
            layout: KeyLayout::Single,
            acting: ActingReports::Automatic,
        }
    }

    /// The same options, queueing in etcd's own layout.
    pub fn queued(mut self) -> Self {
        self.layout = KeyLayout::Queue;
        self
    }
}

/// The outcome of one campaign attempt. Returned once per attempt and
/// matched at once, so the size difference between the variants costs
/// nothing worth a box in the public API.
#[allow(clippy::large_enum_variant)]
pub enum Campaigned {
    Leader(Leadership),
    /// Someone else holds the election.
    Held(Leader),
}

enum Attempt {
    Won {
        token: i64,
        key: String,
    },
    Held {
        leader: Option<Leader>,
        revision: i64,
        /// The queue layout: where the candidate's key stands. `None`: the
        /// single-key layout (wait for any deletion in the election).
        queued: Option<Queued>,
    },
}

impl Client {
    /// One attempt: `If(CreateRevision(key) == 0) Then(Put(key, id, lease))`.
    pub async fn campaign(
        &self,
        name: &ElectionName,
        candidate: &str,
        opts: &CampaignOptions,
    ) -> Result<Campaigned, Error> {
        keys::validate_candidate(candidate)?;
        let mut session = Session::grant(self, opts.ttl, opts.margin, 0).await?;
        let sent = Stamp::now();
        let attempt = match self
            .acquire_resolved(name, candidate, session.lease_id, opts.layout)
            .await
        {
            Ok(a) => a,
            Err(e) => {
                // The outcome is unknown: the txn may have committed. Revoking
                // the lease deletes the key if it did; nobody leads by it.
                let _ = session.revoke(LossReason::Resigned).await;
                return Err(e);
            }
        };
        match attempt {
            Attempt::Won { token, key } => Ok(Campaigned::Leader(Leadership::start(
                self,
                name,
                candidate,
                Won {
                    token,
                    key,
                    sent: Some(sent),
                },
                session,
                opts,
            ))),
            Attempt::Held { leader, .. } => {
                let _ = session.revoke(LossReason::Resigned).await;
                match leader {
                    Some(l) => Ok(Campaigned::Held(l)),
                    // Held by a queue-layout candidate only, or the key went
                    // away between txn and read: report what was read.
                    None => Err(Error::Protocol("leader key held but unreadable".into())),
                }
            }
        }
    }

    /// Campaigns until elected, waiting by watching the leader key and
    /// retrying on its deletion: no polling. `wait` bounds the whole wait
    /// (`None`: forever). When the wait runs out the candidate's lease is
    /// revoked before this returns; dropping the future revokes it in the
    /// background (use [`Client::campaign_wait_until`] to stop a campaign
    /// and know the revoke reached etcd).
    pub async fn campaign_wait(
        &self,
        name: &ElectionName,
        candidate: &str,
        opts: &CampaignOptions,
        wait: Option<Duration>,
    ) -> Result<Leadership, Error> {
        match self
            .campaign_wait_until(name, candidate, opts, wait, std::future::pending::<()>())
            .await?
        {
            Some(l) => Ok(l),
            None => Err(Error::Protocol(
                "a campaign that cannot be stopped stopped".into(),
            )),
        }
    }

    /// [`Client::campaign_wait`] that gives up when `stop` resolves: then
    /// the candidate's lease is revoked (its key, if the last attempt's
    /// outcome was unknown, goes with it) before this returns `Ok(None)`,
    /// so a process may exit right after without leaving a key behind.
    pub async fn campaign_wait_until(
        &self,
        name: &ElectionName,
        candidate: &str,
        opts: &CampaignOptions,
        wait: Option<Duration>,
        stop: impl std::future::Future<Output = ()>,
    ) -> Result<Option<Leadership>, Error> {
        keys::validate_candidate(candidate)?;
        let lease = std::sync::atomic::AtomicI64::new(0);
        let deadline = wait.map(|w| Instant::now() + w);
        let outcome = tokio::select! {
            r = self.campaign_loop(name, candidate, opts, &lease) => match r {
                Ok(l) => return Ok(Some(l)),
                // A permanent error: the last attempt's outcome may be
                // unknown, so its lease goes (awaited) before we report.
                Err(e) => Some(Err(e)),
            },
            _ = stop => None,
            _ = async {
                match deadline {
                    Some(d) => tokio::time::sleep_until(d).await,
                    None => std::future::pending().await,
                }
            } => wait.map(Ok),
        };
        // The loop was dropped: its session's drop revokes in the
        // background, which a process about to exit may never send. Revoke
        // here and wait for etcd's answer.
        let id = lease.load(std::sync::atomic::Ordering::SeqCst);
        if id != 0 {
            self.revoke_candidate(id, opts.ttl).await;
        }
        match outcome {
            None => Ok(None),
            Some(Ok(w)) => Err(Error::Timeout {
                name: name.to_string(),
                waited: w,
            }),
            Some(Err(e)) => Err(e),
        }
    }

    /// Revokes a candidate's lease before the process may exit, and says
    /// what etcd did: a revoke that got no answer may still have been
    /// applied, so it is sent once more (a lease already gone answers "not
    /// found"); only etcd's own refusal is a failure.
    async fn revoke_candidate(&self, id: i64, ttl: Ttl) {
        let mut unanswered = None;
        for _ in 0..2 {
            match self.op(self.etcd().lease_revoke(id)).await {
                Ok(_) => return,
                Err(e) if e.is_lease_not_found() => return,
                Err(e) if e.is_retryable() => unanswered = Some(e),
                Err(e) => {
                    tracing::warn!(
                        lease = id, error = %e,
                        "etcd refused to revoke the candidate's lease; it expires within its \
                         TTL ({} s)", ttl.secs()
                    );
                    return;
                }
            }
        }
        if let Some(e) = unanswered {
            tracing::warn!(
                lease = id, error = %e,
                "no answer from etcd to revoking the candidate's lease: it may have been \
                 revoked; if not, it expires within its TTL ({} s)", ttl.secs()
            );
        }
    }

    async fn campaign_loop(
        &self,
        name: &ElectionName,
        candidate: &str,
        opts: &CampaignOptions,
        current_lease: &std::sync::atomic::AtomicI64,
    ) -> Result<Leadership, Error> {
        let mut session: Option<Session> = None;
        let mut backoff = Backoff::new();
        // The lease whose key is queued (queue layout), once it is.
        let mut queued: Option<i64> = None;
        // Since when the attempts' outcomes are unknown (a timeout: the
        // txn may have committed). Retries keep the lease, so a committed
        // key is found and taken up; but answers slower than the timeout
        // and faster than the keepalive would keep such a key alive, with
        // no term behind it and nobody able to take over, for as long as
        // the slowness lasts. After a TTL of not knowing the lease goes.
        let mut unknown_since: Option<Instant> = None;
        let mut doubt_sent: Option<Stamp> = None;
        let start = |token, key, sent, s: Session| {
            Leadership::start(self, name, candidate, Won { token, key, sent }, s, opts)
        };
        loop {
            let s = self
                .live_session(session.take(), opts, &mut backoff, current_lease)
                .await?;
            current_lease.store(s.lease_id, std::sync::atomic::Ordering::SeqCst);
            // A win commits no earlier than the first attempt in doubt; a
            // woken queued candidate's read finds one that began earlier.
            let sent =
                Some(*doubt_sent.get_or_insert_with(Stamp::now)).filter(|_| queued.is_none());
            let attempt = match self.attempt(name, candidate, &s, queued.take(), opts).await {
                Ok(a) => a,
                // The txn may have committed: the next attempt, with the
                // same lease, finds the key and knows it is ours.
                Err(e) if e.is_retryable() => {
                    session = keep_while_in_doubt(s, &e, &mut unknown_since, current_lease).await;
                    backoff.wait(&e, "campaigning").await;
                    continue;
                }
                // The candidate's lease was revoked under it (an operator,
                // or it expired while etcd was away): start with a new one.
                Err(e) if e.is_lease_not_found() => {
                    doubt_sent = None;
                    backoff
                        .wait(&e, "campaigning with a lease that is gone")
                        .await;
                    continue;
                }
                Err(e) => return Err(e),
            };
            backoff.reset();
            unknown_since = None;
            doubt_sent = None;
            let (revision, place, leader) = match attempt {
                Attempt::Won { token, key } => return Ok(start(token, key, sent, s)),
                Attempt::Held {
                    revision,
                    queued,
                    leader,
                } => (revision, queued, leader),
            };
            if let Some(place) = place {
                // Queue layout: one wake-up per handover, and one read of
                // the own key when the predecessor was the last older key.
                let Some(place) = wait_in_queue(self, &s, place, revision).await else {
                    // Compacted, or the lease is in doubt: read again.
                    queued = Some(s.lease_id);
                    session = Some(s);
                    continue;
                };
                // Won by a watch event, which may have come late: the
                // commit's moment is not known.
                return Ok(start(place.token, place.key, None, s));
            }
            self.wait_for_leader_end(name, leader.as_ref(), revision, &s)
                .await?;
            session = Some(s);
        }
    }

    /// The candidate's session: `kept` while its lease is valid, else a new
    /// lease, retried while the grant's failure is transient. The lease is
    /// kept alive while the candidate waits, so that a takeover costs one
    /// round trip after the deletion is seen.
    async fn live_session(
        &self,
        kept: Option<Session>,
        opts: &CampaignOptions,
        backoff: &mut Backoff,
        current_lease: &std::sync::atomic::AtomicI64,
    ) -> Result<Session, Error> {
        if let Some(s) = kept.filter(|s| s.is_valid()) {
            return Ok(s);
        }
        loop {
            // Named before it is asked for: a campaign cancelled while the
            // grant is on its way (a signal) revokes it all the same.
            let id = super::lease::new_lease_id();
            current_lease.store(id, std::sync::atomic::Ordering::SeqCst);
            match Session::grant(self, opts.ttl, opts.margin, id).await {
                Ok(s) => return Ok(s),
                Err(e) if e.is_retryable() => {
                    backoff.wait(&e, "granting a lease to campaign").await;
                }
                Err(e) => {
                    // etcd answered and refused: there is no lease to revoke.
                    current_lease.store(0, std::sync::atomic::Ordering::SeqCst);
                    return Err(e);
                }
            }
        }
    }

    /// One attempt with session `s`: a queued candidate (its key already
    /// there, `queued` its lease) woken by its predecessor's deletion only
    /// reads where it stands; otherwise the campaign txn.
    async fn attempt(
        &self,
        name: &ElectionName,
        candidate: &str,
        s: &Session,
        queued: Option<i64>,
        opts: &CampaignOptions,
    ) -> Result<Attempt, Error> {
        // Before any key: the etcd the election belongs in, if pinned.
        self.check_pinned_cluster(name).await?;
        if queued == Some(s.lease_id) {
            if let Some(a) = self.queue_recheck(name, s.lease_id).await? {
                return Ok(a);
            }
        }
        self.try_acquire(name, candidate, s.lease_id, opts.layout)
            .await
    }

    /// Waits, from the revision after the one the attempt ended at (so a
    /// deletion in between is not missed), for the leader's key to go:
    /// nothing else can let this candidate win. (Waking on any deletion in
    /// the election would make two single-key waiters behind a queue-layout
    /// leader wake each other forever with their undone keys.) Also returns
    /// when the watch was compacted (can't know what happened: try again)
    /// or the candidate's lease is no longer valid; an error when the
    /// waiter may not see the election (its lease is revoked by the caller).
    async fn wait_for_leader_end(
        &self,
        name: &ElectionName,
        leader: Option<&Leader>,
        revision: i64,
        s: &Session,
    ) -> Result<(), Error> {
        let mut watch = self.watch_for_leader_end(name, leader, revision);
        let mut lease_state = s.state.subscribe();
        loop {
            tokio::select! {
                item = watch.next() => match item {
                    Watched::Events(events) if events.iter().any(|e| e.event_type() == EventType::Delete) => return Ok(()),
                    Watched::Events(_) => {}
                    Watched::Compacted => return Ok(()),
                    Watched::Denied(e) => {
                        return Err(e.with_user(self.connect_config().user()))
                    }
                },
                _ = lease_state.changed() => {
                    if !s.is_valid() {
                        return Ok(());
                    }
                }
            }
        }
    }

    /// A watch, from `revision + 1`, on the key whose deletion may let a
    /// single-key candidate win: the current leader's (either layout), or
    /// the whole election when the leader is not known.
    fn watch_for_leader_end(
        &self,
        name: &ElectionName,
        leader: Option<&Leader>,
        revision: i64,
    ) -> RangeWatch {
        match leader {
            Some(l) => RangeWatch::new(&self.etcd(), l.key.clone(), None, revision + 1),
            None => {
                let (start, end) = self.keys.election_range(name);
                RangeWatch::new(&self.etcd(), start, Some(end.into_bytes()), revision + 1)
            }
        }
    }
}

/// The session after an attempt whose outcome is unknown: kept for the
/// retry until the outcomes have been unknown for a TTL (`unknown_since`),
/// then its lease given up (revoked, and no longer the current lease).
async fn keep_while_in_doubt(
    s: Session,
    e: &Error,
    unknown_since: &mut Option<Instant>,
    current_lease: &std::sync::atomic::AtomicI64,
) -> Option<Session> {
    let since = *unknown_since.get_or_insert_with(Instant::now);
    if since.elapsed() < s.ttl {
        return Some(s);
    }
    give_up_lease(s, since.elapsed(), e).await;
    *unknown_since = None;
    current_lease.store(0, std::sync::atomic::Ordering::SeqCst);
    None
}

/// A campaign whose attempts' outcomes stayed unknown for `unknown` (at
/// least a TTL): its lease is revoked, which deletes the key an attempt may
/// have written, and the campaign starts again with a new one. If the
/// revoke's answer is lost too, the keepalive has stopped anyway: etcd
/// expires the lease within its TTL.
async fn give_up_lease(mut s: Session, unknown: std::time::Duration, last: &Error) {
    tracing::warn!(
        lease = s.lease_id,
        unknown_ms = unknown.as_millis() as u64,
        error = %last,
        "the campaign's outcome stayed unknown for a TTL: revoking its lease (and any key it \
         wrote) and campaigning again with a new one"
    );
    if let Err(e) = s.revoke(LossReason::Resigned).await {
        tracing::warn!(
            lease = s.lease_id, error = %e,
            "could not revoke the candidate's lease; it is no longer kept alive and expires \
             within its TTL"
        );
    }
}

/// Retry pacing for errors that may pass: 100 ms doubling to 2 s, each
/// retry logged with what failed.
struct Backoff(Duration);

impl Backoff {
    fn new() -> Self {
        Self(Duration::from_millis(100))
    }

    fn reset(&mut self) {
        self.0 = Duration::from_millis(100);
    }

    async fn wait(&mut self, error: &Error, doing: &str) {
        tracing::warn!(%error, retry_in = ?self.0, "{doing} failed; retrying");
        tokio::time::sleep(self.0).await;
        self.0 = (self.0 * 2).min(Duration::from_secs(2));
    }
}

pub(crate) fn header_revision(resp: &TxnResponse) -> Result<i64, Error> {
    resp.header()
        .map(|h| h.revision())
        .ok_or_else(|| Error::Protocol("txn response without header".into()))
}
