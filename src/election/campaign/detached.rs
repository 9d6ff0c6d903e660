//! Candidates that keep their own lease alive (the HTTP API): a detached
//! acquisition in either layout, and the renewal of its lease.

use std::time::Duration;

use etcd_client::EventType;
use tokio::time::Instant;

use super::{wait_in_queue, Attempt};
use crate::election::keywatch::Watched;
use crate::election::lease::{LossReason, Session, Ttl};
use crate::election::{keys, pick_leader, Client, ElectionName, Error, KeyLayout, Leader};

/// A term won by [`Client::acquire_detached`]: nobody keeps its lease alive
/// but the candidate, through [`Client::renew`].
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct Acquired {
    pub name: String,
    pub holder: String,
    pub token: i64,
    pub lease_id: i64,
    /// The TTL etcd granted.
    pub ttl_seconds: i64,
}

impl Client {
    /// Campaigns for a candidate that keeps its own lease alive (the HTTP
    /// API: the server does not keep candidates alive on their behalf).
    /// Each attempt grants a fresh lease and runs the campaign txn; a lost
    /// attempt revokes its lease. With `wait`, waits for the holder's key to
    /// go by watching it (no polling), up to `wait`. Returns `Ok(Err(leader))`
    /// when held and not waiting (or the wait ran out).
    pub async fn acquire_detached(
        &self,
        name: &ElectionName,
        candidate: &str,
        ttl: Ttl,
        wait: Option<Duration>,
    ) -> Result<Result<Acquired, Leader>, Error> {
        self.acquire_detached_in(name, candidate, ttl, wait, KeyLayout::Single)
            .await
    }

    /// [`Client::acquire_detached`] in either layout. In the queue layout
    /// the candidate's key must stay queued while it waits, so its lease is
    /// kept alive for the duration of the wait (and only then); on a win
    /// the keepalive stops and the candidate renews the lease itself. A
    /// candidate that does not win within `wait` leaves the queue (its
    /// lease is revoked) before this returns.
    pub async fn acquire_detached_in(
        &self,
        name: &ElectionName,
        candidate: &str,
        ttl: Ttl,
        wait: Option<Duration>,
        layout: KeyLayout,
    ) -> Result<Result<Acquired, Leader>, Error> {
        keys::validate_candidate(candidate)?;
        let deadline = wait.map(|w| Instant::now() + w);
        if layout == KeyLayout::Queue {
            return self.queue_detached(name, candidate, ttl, deadline).await;
        }
        loop {
            let grant = self
                .op(self.etcd().lease_grant(ttl.secs() as i64, None))
                .await?;
            // If the caller goes away mid-attempt (an HTTP client hangs up),
            // the lease and any key it wrote go at once, not after the TTL.
            let guard = RevokeOnDrop::new(self, grant.id());
            let attempt = self
                .acquire_resolved(name, candidate, grant.id(), KeyLayout::Single)
                .await;
            let (leader, revision) = match attempt {
                Ok(Attempt::Won { token, .. }) => {
                    guard.disarm();
                    return Ok(Ok(Acquired {
                        name: name.to_string(),
                        holder: candidate.to_owned(),
                        token,
                        lease_id: grant.id(),
                        ttl_seconds: grant.ttl(),
                    }));
                }
                Ok(Attempt::Held {
                    leader, revision, ..
                }) => (leader, revision),
                Err(e) => {
                    guard.revoke().await;
                    return Err(e);
                }
            };
            guard.revoke().await;
            let leader =
                leader.ok_or_else(|| Error::Protocol("leader key held but unreadable".into()))?;
            let Some(deadline) = deadline else {
                return Ok(Err(leader));
            };
            let mut watch = self.watch_for_leader_end(name, Some(&leader), revision);
            let deleted = async {
                loop {
                    match watch.next().await {
                        Watched::Events(events)
                            if events.iter().any(|e| e.event_type() == EventType::Delete) =>
                        {
                            break
                        }
                        Watched::Events(_) => {}
                        // Refused: the next attempt's request says why.
                        Watched::Compacted | Watched::Denied(_) => break,
                    }
                }
            };
            if tokio::time::timeout_at(deadline, deleted).await.is_err() {
                return Ok(Err(leader));
            }
        }
    }

    /// A queued detached candidate won: stop keeping its lease alive and
    /// hand it over, renewed once now, with the TTL etcd then reports (not
    /// the one granted: renewals run every TTL/3). Never a term whose lease
    /// is in doubt: it is revoked and reported as etcd being unavailable.
    async fn hand_over(
        &self,
        mut session: Session,
        name: &ElectionName,
        candidate: &str,
        token: i64,
    ) -> Result<Result<Acquired, Leader>, Error> {
        if !session.is_valid() {
            let _ = session.revoke(LossReason::Resigned).await;
            return Err(Error::EtcdTimeout(self.op_timeout));
        }
        let (lease_id, _) = session.detach();
        let guard = RevokeOnDrop::new(self, lease_id);
        match self.renew(name, token, lease_id).await {
            Ok(ttl_seconds) => {
                guard.disarm();
                Ok(Ok(Acquired {
                    name: name.to_string(),
                    holder: candidate.to_owned(),
                    token,
                    lease_id,
                    ttl_seconds,
                }))
            }
            Err(e) => {
                guard.revoke().await;
                Err(e)
            }
        }
    }

    async fn queue_detached(
        &self,
        name: &ElectionName,
        candidate: &str,
        ttl: Ttl,
        deadline: Option<Instant>,
    ) -> Result<Result<Acquired, Leader>, Error> {
        // Dropped (the caller went away) before the win: its drop revokes.
        let mut session = Session::grant(self, ttl, None, 0).await?;
        loop {
            let attempt = match self
                .acquire_resolved(name, candidate, session.lease_id, KeyLayout::Queue)
                .await
            {
                Ok(a) => a,
                Err(e) => {
                    let _ = session.revoke(LossReason::Resigned).await;
                    return Err(e);
                }
            };
            let (leader, revision, place) = match attempt {
                Attempt::Won { token, .. } => {
                    return self.hand_over(session, name, candidate, token).await
                }
                Attempt::Held {
                    leader,
                    revision,
                    queued,
                } => (leader, revision, queued),
            };
            let held = leader
                .map(Err)
                .ok_or_else(|| Error::Protocol("queued behind a key that vanished".into()));
            let (Some(deadline), Some(place)) = (deadline, place) else {
                let _ = session.revoke(LossReason::Resigned).await;
                return held;
            };
            match tokio::time::timeout_at(deadline, wait_in_queue(self, &session, place, revision))
                .await
            {
                Ok(Some(place)) => {
                    return self.hand_over(session, name, candidate, place.token).await
                }
                // Compacted or in doubt: place the key again.
                Ok(None) => {}
                Err(_) => {
                    let _ = session.revoke(LossReason::Resigned).await;
                    return held;
                }
            }
        }
    }

    /// Renews the lease of term `token`, for a candidate that keeps its own
    /// lease alive: only if the leader key still has `CreateRevision ==
    /// token` and is bound to `lease_id`. Returns the TTL etcd restored.
    pub async fn renew(
        &self,
        name: &ElectionName,
        token: i64,
        lease_id: i64,
    ) -> Result<i64, Error> {
        keys::validate_token(token)?;
        // The term's key in either layout: the single key, or the queued
        // key named by the lease.
        let (kvs, _) = self.read_election(name).await?;
        let holds = kvs.iter().any(|kv| {
            kv.create_revision() == token
                && kv.lease() == lease_id
                && keys::classify(&self.keys, name, kv.key(), kv.lease()).is_some()
        });
        if !holds {
            let current = pick_leader(&self.keys, name, &kvs);
            return Err(Error::NotHolder {
                name: name.to_string(),
                token,
                current: current.map(Box::new),
            });
        }
        // One keepalive: opening the stream sends it and reads the answer.
        match self.op(self.etcd().lease_keep_alive(lease_id)).await {
            Ok(_) => {
                let ttl = self
                    .op(self.etcd().lease_time_to_live(lease_id, None))
                    .await?;
                Ok(ttl.ttl())
            }
            Err(e) if e.is_lease_not_found() => Err(Error::NotHolder {
                name: name.to_string(),
                token,
                current: None,
            }),
            Err(e) => Err(e),
        }
    }
}

/// Revokes a lease when dropped unless disarmed: a detached attempt's lease
/// must not outlive an attempt that was cancelled halfway.
struct RevokeOnDrop {
    client: Client,
    lease_id: i64,
    armed: bool,
}

impl RevokeOnDrop {
    fn new(client: &Client, lease_id: i64) -> Self {
        Self {
            client: client.clone(),
            lease_id,
            armed: true,
        }
    }

    fn disarm(mut self) {
        self.armed = false;
    }

    /// Revokes now and waits for etcd's answer (errors are logged: the
    /// lease then expires after its TTL, with nobody renewing it).
    async fn revoke(mut self) {
        self.armed = false;
        match self
            .client
            .op(self.client.etcd().lease_revoke(self.lease_id))
            .await
        {
            Ok(_) => {}
            Err(e) if e.is_lease_not_found() => {}
            Err(e) => {
                tracing::warn!(lease = self.lease_id, error = %e, "revoking a candidate's lease failed")
            }
        }
    }
}

impl Drop for RevokeOnDrop {
    fn drop(&mut self) {
        if !self.armed {
            return;
        }
        if let Ok(rt) = tokio::runtime::Handle::try_current() {
            let mut etcd = self.client.etcd();
            let id = self.lease_id;
            let limit = self.client.op_timeout();
            crate::task::spawn_on(&rt, "lease revoke", async move {
                let _ = tokio::time::timeout(limit, etcd.lease_revoke(id)).await;
            });
        }
    }
}
