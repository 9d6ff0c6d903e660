//! Campaigning (once, or waiting by watching) and the leadership handle.

use std::time::Duration;

use etcd_client::{
    Compare, CompareOp, EventType, GetOptions, KeyValue, PutOptions, Txn, TxnOp, TxnOpResponse,
    TxnResponse,
};
use tokio::task::JoinHandle;
use tokio::time::Instant;

use super::keywatch::{RangeWatch, Watched};
use super::lease::{mark_lost, wait_lost, LossReason, Session, Ttl};
use super::{
    keys, pick_leader, Client, ElectionName, EndMarkerCause, Error, FenceDecision, Layout, Leader,
};

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
}

impl CampaignOptions {
    pub fn new(ttl: Ttl) -> Self {
        Self {
            ttl,
            margin: None,
            resign_on_signal: false,
        }
    }
}

/// The outcome of one campaign attempt.
pub enum Campaigned {
    Leader(Leadership),
    /// Someone else holds the election.
    Held(Leader),
}

enum Attempt {
    Won {
        token: i64,
    },
    Held {
        leader: Option<Leader>,
        revision: i64,
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
        let mut session = Session::grant(self, opts.ttl, opts.margin).await?;
        match self.try_acquire(name, candidate, session.lease_id).await? {
            Attempt::Won { token } => Ok(Campaigned::Leader(Leadership::start(
                self, name, candidate, token, session, opts,
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
    /// (`None`: forever); dropping the future cancels it and revokes the
    /// candidate's lease.
    pub async fn campaign_wait(
        &self,
        name: &ElectionName,
        candidate: &str,
        opts: &CampaignOptions,
        wait: Option<Duration>,
    ) -> Result<Leadership, Error> {
        keys::validate_candidate(candidate)?;
        let work = self.campaign_loop(name, candidate, opts);
        match wait {
            None => work.await,
            Some(w) => tokio::time::timeout(w, work)
                .await
                .map_err(|_| Error::Timeout {
                    name: name.to_string(),
                    waited: w,
                })?,
        }
    }

    async fn campaign_loop(
        &self,
        name: &ElectionName,
        candidate: &str,
        opts: &CampaignOptions,
    ) -> Result<Leadership, Error> {
        let mut session: Option<Session> = None;
        let mut backoff = Duration::from_millis(100);
        loop {
            // The candidate's lease is kept alive while it waits, so that a
            // takeover costs one round trip after the deletion is seen.
            let s = match session.take() {
                Some(s) if s.is_valid() => s,
                _ => match Session::grant(self, opts.ttl, opts.margin).await {
                    Ok(s) => s,
                    Err(e) if e.is_unavailable() => {
                        tracing::warn!(error = %e, "cannot reach etcd to campaign; retrying");
                        tokio::time::sleep(backoff).await;
                        backoff = (backoff * 2).min(Duration::from_secs(2));
                        continue;
                    }
                    Err(e) => return Err(e),
                },
            };
            let attempt = match self.try_acquire(name, candidate, s.lease_id).await {
                Ok(a) => a,
                Err(e) if e.is_unavailable() => {
                    session = Some(s);
                    tokio::time::sleep(backoff).await;
                    backoff = (backoff * 2).min(Duration::from_secs(2));
                    continue;
                }
                Err(e) => return Err(e),
            };
            backoff = Duration::from_millis(100);
            let revision = match attempt {
                Attempt::Won { token } => {
                    return Ok(Leadership::start(self, name, candidate, token, s, opts))
                }
                Attempt::Held { revision, .. } => revision,
            };
            // Wait for a key of the election to go (the holder's single key,
            // or the queue candidate that leads), from the revision after the
            // one our attempt ended at, so a deletion in between is not missed.
            let (start, end) = self.keys.election_range(name);
            let mut watch =
                RangeWatch::new(&self.etcd(), start, Some(end.into_bytes()), revision + 1);
            let mut lease_state = s.state.subscribe();
            loop {
                tokio::select! {
                    item = watch.next() => match item {
                        Watched::Events(events) if events.iter().any(|e| e.event_type() == EventType::Delete) => break,
                        Watched::Events(_) => {}
                        // Can't know what happened: just try again.
                        Watched::Compacted => break,
                    },
                    _ = lease_state.changed() => {
                        if !s.is_valid() {
                            break;
                        }
                    }
                }
            }
            session = Some(s);
        }
    }

    async fn try_acquire(
        &self,
        name: &ElectionName,
        candidate: &str,
        lease_id: i64,
    ) -> Result<Attempt, Error> {
        let key = self.keys.leader_key(name);
        let (start, end) = self.keys.election_range(name);
        let txn = Txn::new()
            .when([Compare::create_revision(
                key.as_bytes(),
                CompareOp::Equal,
                0,
            )])
            .and_then([
                TxnOp::put(
                    key.as_bytes(),
                    candidate,
                    Some(PutOptions::new().with_lease(lease_id)),
                ),
                // The whole election as of this txn: a queue-layout
                // candidate (etcd's own Election) may already lead it.
                TxnOp::get(start, Some(GetOptions::new().with_range(end))),
            ])
            .or_else([TxnOp::get(key.as_bytes(), None)]);
        let resp = self.op(self.etcd().txn(txn)).await?;
        let revision = header_revision(&resp)?;
        if resp.succeeded() {
            let kvs: Vec<KeyValue> = resp
                .op_responses()
                .into_iter()
                .filter_map(|r| match r {
                    TxnOpResponse::Get(g) => Some(g.kvs().to_vec()),
                    _ => None,
                })
                .flatten()
                .collect();
            match pick_leader(&self.keys, name, &kvs) {
                // An older queue candidate leads by the key schema: the
                // single key was free, but this is not a term. Take the
                // key back and wait like any candidate.
                Some(leader) if leader.token != revision => {
                    let undo = Txn::new()
                        .when([Compare::create_revision(
                            key.as_bytes(),
                            CompareOp::Equal,
                            revision,
                        )])
                        .and_then([TxnOp::delete(key.as_bytes(), None)]);
                    let undone = self.op(self.etcd().txn(undo)).await?;
                    return Ok(Attempt::Held {
                        leader: Some(leader),
                        revision: header_revision(&undone)?,
                    });
                }
                // The put happened at the txn's revision: that is the key's
                // CreateRevision, the term's token.
                _ => return Ok(Attempt::Won { token: revision }),
            }
        }
        let leader = resp.op_responses().into_iter().find_map(|r| match r {
            TxnOpResponse::Get(g) => g
                .kvs()
                .first()
                .map(|kv| Leader::from_kv(name, kv, Layout::Single)),
            _ => None,
        });
        Ok(Attempt::Held { leader, revision })
    }
}

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
        keys::validate_candidate(candidate)?;
        let deadline = wait.map(|w| Instant::now() + w);
        loop {
            let grant = self
                .op(self.etcd().lease_grant(ttl.secs() as i64, None))
                .await?;
            let attempt = self.try_acquire(name, candidate, grant.id()).await;
            let (leader, revision) = match attempt {
                Ok(Attempt::Won { token }) => {
                    return Ok(Ok(Acquired {
                        name: name.to_string(),
                        holder: candidate.to_owned(),
                        token,
                        lease_id: grant.id(),
                        ttl_seconds: grant.ttl(),
                    }))
                }
                Ok(Attempt::Held { leader, revision }) => (leader, revision),
                Err(e) => {
                    let _ = self.op(self.etcd().lease_revoke(grant.id())).await;
                    return Err(e);
                }
            };
            let _ = self.op(self.etcd().lease_revoke(grant.id())).await;
            let leader =
                leader.ok_or_else(|| Error::Protocol("leader key held but unreadable".into()))?;
            let Some(deadline) = deadline else {
                return Ok(Err(leader));
            };
            let (start, end) = self.keys.election_range(name);
            let mut watch =
                RangeWatch::new(&self.etcd(), start, Some(end.into_bytes()), revision + 1);
            let deleted = async {
                loop {
                    match watch.next().await {
                        Watched::Events(events)
                            if events.iter().any(|e| e.event_type() == EventType::Delete) =>
                        {
                            break
                        }
                        Watched::Events(_) => {}
                        Watched::Compacted => break,
                    }
                }
            };
            if tokio::time::timeout_at(deadline, deleted).await.is_err() {
                return Ok(Err(leader));
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
        let key = self.keys.leader_key(name);
        let resp = self.op(self.etcd().get(key.as_bytes(), None)).await?;
        let current = resp
            .kvs()
            .first()
            .map(|kv| Leader::from_kv(name, kv, Layout::Single));
        let holds = current
            .as_ref()
            .is_some_and(|l| l.token == token && l.lease_id == lease_id);
        if !holds {
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

pub(crate) fn header_revision(resp: &TxnResponse) -> Result<i64, Error> {
    resp.header()
        .map(|h| h.revision())
        .ok_or_else(|| Error::Protocol("txn response without header".into()))
}

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
    session: Session,
    key_watch: JoinHandle<()>,
    signals: Option<JoinHandle<()>>,
    acquired_at: Instant,
}

impl Leadership {
    fn start(
        client: &Client,
        name: &ElectionName,
        holder: &str,
        token: i64,
        session: Session,
        opts: &CampaignOptions,
    ) -> Self {
        let key = client.keys.leader_key(name);
        let key_watch = tokio::spawn(watch_leader_key(
            client.clone(),
            name.clone(),
            key,
            token,
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
        self.session.state.borrow().valid_until.into_std()
    }

    /// `Some(reason)` once leadership is lost.
    pub fn is_lost(&self) -> Option<LossReason> {
        if let Some(r) = self.session.lost() {
            return Some(r);
        }
        (Instant::now() >= self.session.state.borrow().valid_until).then(|| {
            mark_lost(
                &self.session.state,
                LossReason::RenewalDeadline {
                    ttl: self.session.ttl,
                    margin: self.session.margin,
                },
            );
            self.session.lost().unwrap_or(LossReason::Resigned)
        })
    }

    /// Resolves when leadership is lost, with the reason. Await it beside
    /// the leader's work and stop working when it fires.
    pub async fn lost(&self) -> LossReason {
        wait_lost(&self.session.state, self.session.ttl, self.session.margin).await
    }

    /// Ends this term: the lease is revoked, which deletes the leader key.
    /// Ends this term: the leader key is deleted with an end marker saying
    /// "resigned", and the lease is revoked.
    pub async fn resign(mut self) -> Result<(), Error> {
        self.key_watch.abort();
        if self.session.lost().is_none() {
            let key = self.client.keys.leader_key(&self.name);
            let ended = self
                .client
                .end_term(
                    &self.name,
                    &key,
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
        let key = self.client.keys.leader_key(&self.name);
        let put = TxnOp::put(
            key.as_bytes(),
            value,
            Some(PutOptions::new().with_lease(self.session.lease_id)),
        );
        self.client
            .guarded_txn(&self.name, self.token, vec![put])
            .await
            .map(|_| ())
    }

    /// Applies `ops` only while this term holds the leader key.
    pub async fn guarded_txn(&self, ops: Vec<TxnOp>) -> Result<TxnResponse, Error> {
        self.client.guarded_txn(&self.name, self.token, ops).await
    }

    /// Passes `resource` through the shared fence with this term's token.
    pub async fn fence(&self, resource: &str) -> Result<FenceDecision, Error> {
        self.client.fence(&self.name, resource, self.token).await
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

/// Watches the leader key for as long as the term lasts; a deletion or a key
/// of another term ends it.
async fn watch_leader_key(
    client: Client,
    name: ElectionName,
    key: String,
    token: i64,
    state: tokio::sync::watch::Sender<super::lease::LeaseState>,
) {
    let mut watch = RangeWatch::new(&client.etcd(), key.clone(), None, token);
    loop {
        match watch.next().await {
            Watched::Events(events) => {
                for e in events {
                    let Some(kv) = e.kv() else { continue };
                    match e.event_type() {
                        EventType::Delete => {
                            mark_lost(
                                &state,
                                LossReason::KeyDeleted {
                                    revision: kv.mod_revision(),
                                },
                            );
                            return;
                        }
                        EventType::Put if kv.create_revision() != token => {
                            mark_lost(
                                &state,
                                LossReason::TakenOver {
                                    holder: String::from_utf8_lossy(kv.value()).into_owned(),
                                    token: kv.create_revision(),
                                    revision: kv.mod_revision(),
                                },
                            );
                            return;
                        }
                        EventType::Put => {}
                    }
                }
            }
            Watched::Compacted => loop {
                match client.read_election(&name).await {
                    Ok((kvs, revision)) => {
                        let ours = kvs.iter().find(|kv| kv.key() == key.as_bytes());
                        match ours {
                            Some(kv) if kv.create_revision() == token => {}
                            Some(kv) => {
                                mark_lost(
                                    &state,
                                    LossReason::TakenOver {
                                        holder: String::from_utf8_lossy(kv.value()).into_owned(),
                                        token: kv.create_revision(),
                                        revision,
                                    },
                                );
                                return;
                            }
                            None => {
                                mark_lost(&state, LossReason::KeyDeleted { revision });
                                return;
                            }
                        }
                        watch.resume_after(revision);
                        break;
                    }
                    Err(_) => tokio::time::sleep(Duration::from_millis(200)).await,
                }
            },
        }
    }
}
