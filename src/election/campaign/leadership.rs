//! The leadership handle: one term, its deadlines, its loss signal, and
//! what a holder does with it (resign, proclaim, guarded txn, fence).

use std::time::Duration;

use etcd_client::{GetOptions, PutOptions, TxnOp, TxnResponse};
use tokio::task::JoinHandle;
use tokio::time::Instant;

use super::term_watch::{watch_leader_key, Pace};
use super::CampaignOptions;
use crate::election::deadline::Deadline;
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
}

impl Leadership {
    pub(super) fn start(
        client: &Client,
        name: &ElectionName,
        holder: &str,
        token: i64,
        key: String,
        session: Session,
        opts: &CampaignOptions,
    ) -> Self {
        let key_watch = tokio::spawn(watch_leader_key(
            client.clone(),
            key.clone(),
            token,
            Pace {
                ttl: session.ttl,
                margin: session.margin,
            },
            session.state.clone(),
        ));
        let signals = opts.resign_on_signal.then(|| {
            let state = session.state.clone();
            let mut etcd = client.etcd();
            let lease = session.lease_id;
            tokio::spawn(async move {
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
            acquired_at: Instant::now(),
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
        if self.session.lost().is_none() {
            let ended = self
                .client
                .end_term(
                    &self.name,
                    &self.key,
                    self.token,
                    self.session.lease_id,
                    EndMarkerCause::Resigned,
                )
                .await;
            // NotHolder: the term had already ended; the lease still goes.
            if let Err(e) = ended {
                if !matches!(e, Error::NotHolder { .. }) {
                    let _ = self.session.revoke(LossReason::Resigned).await;
                    return Err(e);
                }
            }
        }
        self.session.revoke(LossReason::Resigned).await
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

impl Drop for Leadership {
    fn drop(&mut self) {
        self.key_watch.abort();
        if let Some(s) = &self.signals {
            s.abort();
        }
        // `Session`'s own drop revokes the lease.
    }
}
