//! The leadership handle: one term, its deadlines, its loss signal, and
//! what a holder does with it (resign, proclaim, guarded txn, fence).

use crate::task::Locked;
use std::time::Duration;

use etcd_client::{GetOptions, PutOptions, Txn, TxnOp, TxnResponse};
use tokio::task::JoinHandle;
use tokio::time::Instant;

use super::term_watch::{watch_leader_key, Pace};
use super::{ActingReports, CampaignOptions};
use crate::election::acting::Acting;
use crate::election::deadline::{Deadline, Stamp};
use crate::election::lease::{deadline_reason, mark_lost, wait_lost, LossReason, Session};
use crate::election::{keys, Client, ElectionName, EndMarkerCause, Error, FenceDecision};

/// A term of leadership. Its loss signal, [`Leadership::lost`], fires when
/// keepalive fails, when etcd says the lease is gone, when the key is deleted
/// or taken over, or when no renewal was confirmed within TTL minus the
/// safety margin — before etcd can have expired the lease.
///
/// Dropping it resigns (revokes the lease) in the background.
pub struct Leadership {
    client: Client,
    name: ElectionName,
    holder: String,
    token: i64,
    /// The term's leader key: `election/<name>`, or the queued
    /// `election/<name>/<lease-hex>`.
    key: String,
    session: Session,
    key_watch: JoinHandle<()>,
    signals: Option<JoinHandle<()>>,
    acquired_at: Instant,
    /// What this term's holder reports about its acting.
    acting: std::sync::Arc<std::sync::Mutex<Acting>>,
    reports: ActingReports,
}

/// How long a publication of the acting record is retried, at most.
const ACTING_RETRY: Duration = Duration::from_millis(250);

/// A won campaign: the term's token, its leader key, and when the request
/// that won was sent (its commit came no earlier).
pub(super) struct Won {
    pub token: i64,
    pub key: String,
    /// `None`: learned from a watch event (a queued candidate's turn).
    pub sent: Option<Stamp>,
}

impl Leadership {
    pub(super) fn start(
        client: &Client,
        name: &ElectionName,
        holder: &str,
        won: Won,
        session: Session,
        opts: &CampaignOptions,
    ) -> Self {
        let Won { token, key, sent } = won;
        let base = Stamp::now();
        let mut acting = Acting::new(token, holder, sent, base);
        if opts.acting == ActingReports::Automatic {
            acting.began(base);
        }
        let key_watch = crate::task::spawn(
            "leader key watch",
            watch_leader_key(
                client.clone(),
                key.clone(),
                token,
                Pace {
                    ttl: session.ttl,
                    margin: session.margin,
                },
                session.state.clone(),
            ),
        );
        let signals = opts.resign_on_signal.then(|| {
            let state = session.state.clone();
            let mut etcd = client.etcd();
            let lease = session.lease_id;
            crate::task::spawn("resign on signal", async move {
                if crate::election::shutdown_signal().await.is_ok() {
                    mark_lost(&state, LossReason::Signal);
                    let _ = tokio::time::timeout(Duration::from_secs(5), etcd.lease_revoke(lease))
                        .await;
                }
            })
        });
        Self {
            client: client.clone(),
            name: name.clone(),
            holder: holder.to_owned(),
            token,
            key,
            session,
            key_watch,
            signals,
            acquired_at: base.mono,
            acting: std::sync::Arc::new(std::sync::Mutex::new(acting)),
            reports: opts.acting,
        }
    }

    pub fn name(&self) -> &ElectionName {
        &self.name
    }

    pub fn holder(&self) -> &str {
        &self.holder
    }

    /// The fencing token: the leader key's CreateRevision.
    pub fn token(&self) -> i64 {
        self.token
    }

    /// The term's leader key (either layout).
    pub fn key(&self) -> &str {
        &self.key
    }

    pub fn lease_id(&self) -> i64 {
        self.session.lease_id
    }

    /// The TTL etcd granted (it may raise a short request to its minimum).
    pub fn ttl(&self) -> Duration {
        self.session.ttl
    }

    pub fn margin(&self) -> Duration {
        self.session.margin
    }

    pub fn acquired_at(&self) -> std::time::Instant {
        self.acquired_at.into_std()
    }

    /// Until this instant the holder may act as leader (if not lost).
    pub fn valid_until(&self) -> std::time::Instant {
        self.session.state.borrow().valid_until.mono.into_std()
    }

    /// Until when the holder may act as leader, on both the monotonic and
    /// the boot clock (see [`crate::election::deadline`]).
    pub fn valid_until_deadline(&self) -> Deadline {
        self.session.state.borrow().valid_until
    }

    /// The earliest moment etcd can have expired this term's lease:
    /// [`Leadership::valid_until_deadline`] plus the margin. Whatever the
    /// holder runs must have stopped by then; after it, another candidate
    /// may be granted the key.
    pub fn expiry_earliest(&self) -> Deadline {
        self.session
            .state
            .borrow()
            .expiry_earliest(self.session.margin)
    }

    /// The lease's state, updated on every confirmed renewal and on loss:
    /// for a caller that must act when the deadlines move (e.g. hand the
    /// new [`Leadership::expiry_earliest`] to a watchdog process).
    pub fn subscribe(&self) -> tokio::sync::watch::Receiver<crate::election::lease::LeaseState> {
        self.session.state.subscribe()
    }

    /// `Some(reason)` once leadership is lost.
    pub fn is_lost(&self) -> Option<LossReason> {
        if let Some(r) = self.session.lost() {
            return Some(r);
        }
        let valid_until = self.session.state.borrow().valid_until;
        valid_until.has_passed().then(|| {
            mark_lost(
                &self.session.state,
                deadline_reason(&valid_until, self.session.ttl, self.session.margin),
            );
            self.session.lost().unwrap_or(LossReason::Resigned)
        })
    }

    /// Resolves when leadership is lost, with the reason. Await it beside
    /// the leader's work and stop working when it fires.
    pub async fn lost(&self) -> LossReason {
        wait_lost(&self.session.state, self.session.ttl, self.session.margin).await
    }

    /// Ends this term: the leader key is deleted with an end marker saying
    /// "resigned", and the lease is revoked. A term already lost gets no
    /// marker: only the lease is revoked (which deletes a key it still has).
    pub async fn resign(mut self) -> Result<(), Error> {
        self.key_watch.abort();
        let now = Stamp::now();
        let news = self.acting_stops(now);
        if self.session.lost().is_none() {
            // The record rides in the resign's own txn, saying the lease
            // ends by the holder's request, sent after `now`; true once the
            // txn succeeds.
            let extra = news
                .then(|| self.acting_json(Some(now)))
                .flatten()
                .map(|json| TxnOp::put(self.client.keys.acting_key(&self.name), json, None));
            let ended = self
                .client
                .end_term(
                    &self.name,
                    &self.key,
                    self.token,
                    EndMarkerCause::Resigned,
                    extra,
                )
                .await;
            match ended {
                Ok(()) => {
                    if news {
                        let mut acting = self.acting_lock();
                        acting.lease_end(now.after(Duration::ZERO));
                        let version = acting.version();
                        acting.sent(version);
                    }
                    self.reports = ActingReports::Off;
                    return self.session.revoke(LossReason::Resigned).await;
                }
                // NotHolder: the term had already ended; the lease still goes.
                Err(Error::NotHolder { .. }) => {}
                Err(e) => {
                    let _ = self.session.revoke(LossReason::Resigned).await;
                    return Err(e);
                }
            }
        }
        // A lost term: the lease goes first. Its end is the holder's only
        // if etcd confirmed the revoke; otherwise it ended by expiry (or
        // someone else's hand, which the watcher sees), no earlier than
        // the holder's deadline says.
        let sent = Stamp::now();
        let key_went = self.key_went_first();
        let revoked = self.session.revoke_confirmed(LossReason::Resigned).await;
        if news {
            match revoked {
                Ok(true) => self.acting_lock().lease_end(sent.after(Duration::ZERO)),
                // Already gone: expired (no earlier than its deadline) or
                // revoked by another, with its key, which the watcher sees.
                Ok(false) => {}
                // Not confirmed: it may have ended at this revoke, which
                // nothing else shows when its key had gone before.
                Err(_) if key_went => self.acting_lock().lease_end_unknown(),
                Err(_) => {}
            }
            // Retried while etcd does not answer (a holder cut off from
            // it), for twice the TTL.
            if let Err(e) = self.publish_acting(self.ttl() * 2).await {
                tracing::warn!(
                    error = %e,
                    "could not publish the term's acting record: its end shows as unknown"
                );
            }
        }
        self.reports = ActingReports::Off;
        revoked.map(|_| ())
    }

    /// The term was lost by its key going while its lease lived (a depose,
    /// a takeover): the lease then ends by the holder's revoke, whenever
    /// that lands, not with the key.
    fn key_went_first(&self) -> bool {
        matches!(
            self.session.lost(),
            Some(LossReason::KeyDeleted { .. } | LossReason::TakenOver { .. })
        )
    }

    /// Acting stops as the term ends at `now`: with
    /// [`ActingReports::Automatic`] the application lets go now; a caller's
    /// record stays as the caller left it. Whether there is news to publish.
    fn acting_stops(&self, now: Stamp) -> bool {
        let expiry = self.expiry_earliest();
        let mut acting = self.acting_lock();
        match self.reports {
            ActingReports::Off => return false,
            ActingReports::Automatic => {
                acting.stopping(now);
                if !acting.has_ended() {
                    acting.ended(now, expiry);
                }
            }
            ActingReports::ByCaller => {}
        }
        acting.lease_end(expiry);
        acting.unsent()
    }

    /// The record as it stands, or as it would read if the lease ended by
    /// the holder's own request sent at `own_end` (not yet confirmed: the
    /// shared record is not changed).
    fn acting_json(&self, own_end: Option<Stamp>) -> Option<String> {
        let mut acting = self.acting_lock().clone();
        if let Some(at) = own_end {
            acting.lease_end(at.after(Duration::ZERO));
        }
        serde_json::to_string(&acting.to_send()).ok()
    }

    fn acting_lock(&self) -> std::sync::MutexGuard<'_, Acting> {
        lock(&self.acting)
    }

    /// Acting began at `at` ([`ActingReports::ByCaller`]): the program that
    /// acts for this term started. A guarded program (one a watchdog kills
    /// `slack` before the lease's earliest expiry) says so with `guard`.
    pub fn acting_began(&self, at: Stamp, guard: Option<Duration>) {
        let mut acting = self.acting_lock();
        acting.began(at);
        if let Some(slack) = guard {
            acting.guarded(slack);
        }
    }

    /// Stopping began at `at`: the loss was seen, a signal came, the
    /// program exited by itself.
    pub fn acting_stopping(&self, at: Stamp) {
        self.acting_lock().stopping(at);
    }

    /// Acting ended at `at`: nothing of the program can run any more.
    pub fn acting_ended(&self, at: Stamp) {
        let lease_end = self.expiry_earliest();
        self.acting_lock().ended(at, lease_end);
    }

    /// Acting ended at an unknown moment, at the latest `by` (a watchdog's
    /// deadline).
    pub fn acting_ended_by(&self, by: Deadline) {
        let lease_end = self.expiry_earliest();
        self.acting_lock().ended_by(by, lease_end);
    }

    /// Writes the acting record as it stands (`P election/~acting/<name>`,
    /// no lease), retrying what got no answer for up to `limit`: a holder
    /// cut off from etcd publishes when it can, and the record says it was
    /// late. One put per call that succeeds.
    pub async fn publish_acting(&self, limit: Duration) -> Result<(), Error> {
        publish(
            &self.client,
            self.client.keys.acting_key(&self.name),
            &self.acting,
            limit,
        )
        .await
    }

    /// [`Leadership::publish_acting`] in the background.
    pub fn publish_acting_in_background(&self, limit: Duration) {
        let (client, acting) = (self.client.clone(), self.acting.clone());
        let key = self.client.keys.acting_key(&self.name);
        crate::task::spawn("acting record", async move {
            if let Err(e) = publish(&client, key, &acting, limit).await {
                tracing::warn!(error = %e, "could not publish the term's acting record");
            }
        });
    }

    /// Replaces the leader key's value, only while this term holds it.
    pub async fn proclaim(&self, value: &str) -> Result<(), Error> {
        keys::validate_candidate(value)?;
        let put = TxnOp::put(
            self.key.as_bytes(),
            value,
            Some(PutOptions::new().with_lease(self.session.lease_id)),
        );
        self.guarded_txn(vec![put]).await.map(|_| ())
    }

    /// Applies `ops` only while this term holds the leader key.
    pub async fn guarded_txn(&self, ops: Vec<TxnOp>) -> Result<TxnResponse, Error> {
        self.client
            .guarded_txn_on(&self.name, &self.key, self.token, ops)
            .await
    }

    /// Whether this term was ended by an operator's `depose` (or a
    /// resign by token): tenure's end marker, written in the same revision
    /// as the deletion of the key, names this term. `Some(false)`: the key
    /// went without such a marker (etcd ended the term by itself, e.g. a
    /// lease revoked early across an etcd leader change, or a foreign
    /// client deleted it); `None`: not known (etcd did not answer within
    /// `limit`, or the loss was not a deletion).
    pub async fn ended_by_tenure(&self, reason: &LossReason, limit: Duration) -> Option<bool> {
        let LossReason::KeyDeleted { revision } = reason else {
            return None;
        };
        let key = self.client.keys.end_marker_key(&self.name);
        let mut etcd = self.client.etcd();
        let read = etcd.get(
            key.as_bytes(),
            Some(GetOptions::new().with_revision(*revision)),
        );
        let resp = tokio::time::timeout(limit, read).await.ok()?.ok()?;
        Some(resp.kvs().first().is_some_and(|kv| {
            kv.mod_revision() == *revision
                && serde_json::from_slice::<crate::election::EndMarker>(kv.value())
                    .is_ok_and(|m| m.token == self.token)
        }))
    }

    /// Passes `resource` through the shared fence with this term's token.
    pub async fn fence(&self, resource: &str) -> Result<FenceDecision, Error> {
        self.client
            .fence_on(&self.name, &self.key, resource, self.token)
            .await
    }
}

/// One publication of the acting record under `key`, retried while etcd
/// does not answer, for up to `limit`.
async fn publish(
    client: &Client,
    key: String,
    acting: &std::sync::Mutex<Acting>,
    limit: Duration,
) -> Result<(), Error> {
    let until = Instant::now() + limit;
    // After a request that got no answer, a connection of its own: the old
    // one may be half-open (a partition drops packets, it does not close
    // them), and would time out again long after etcd is reachable.
    let mut fresh: Option<etcd_client::Client> = None;
    loop {
        let (record, version) = {
            let a = lock(acting);
            (a.to_send(), a.version())
        };
        let json = serde_json::to_string(&record).map_err(|e| Error::Protocol(e.to_string()))?;
        let mut etcd = fresh.clone().unwrap_or_else(|| client.etcd());
        match client.op(etcd.put(key.as_str(), json, None)).await {
            Ok(_) => {
                lock(acting).sent(version);
                return Ok(());
            }
            Err(e) => {
                lock(acting).failed();
                if !e.is_retryable() || Instant::now() + ACTING_RETRY >= until {
                    return Err(e);
                }
                tokio::time::sleep(ACTING_RETRY).await;
                fresh = client.reconnect().await.or(fresh);
            }
        }
    }
}

fn lock(acting: &std::sync::Mutex<Acting>) -> std::sync::MutexGuard<'_, Acting> {
    acting.locked()
}

impl Drop for Leadership {
    fn drop(&mut self) {
        self.key_watch.abort();
        // Dropped without a resign: acting stops now (the lease's revoke,
        // in the background, comes after). One attempt, never retried: a
        // write retried in the background could land long after, even in
        // another etcd timeline (a restore). While the term holds its key,
        // only while it still does; a lost term's key is gone already.
        if self.reports == ActingReports::Automatic && self.acting_stops(Stamp::now()) {
            let lost = self.session.lost().is_some();
            if lost && self.key_went_first() {
                // Its revoke, in the background, is not confirmed.
                self.acting_lock().lease_end_unknown();
            }
            if let Some(json) = self.acting_json(None) {
                let put = TxnOp::put(self.client.keys.acting_key(&self.name), json, None);
                let (client, name, key, token) = (
                    self.client.clone(),
                    self.name.clone(),
                    self.key.clone(),
                    self.token,
                );
                // Without a runtime (dropped after it ended) nothing is sent.
                if let Ok(rt) = tokio::runtime::Handle::try_current() {
                    crate::task::spawn_on(&rt, "acting record", async move {
                        let _ = if lost {
                            client
                                .op(client.etcd().txn(Txn::new().and_then([put])))
                                .await
                                .map(|_| ())
                        } else {
                            client
                                .guarded_txn_on(&name, &key, token, vec![put])
                                .await
                                .map(|_| ())
                        };
                    });
                }
            }
        }
        if let Some(s) = &self.signals {
            s.abort();
        }
        // `Session`'s own drop revokes the lease.
    }
}
