//! The election core: campaign, leadership, resign, leader, observe, and the
//! shared fence. It knows etcd and nothing else: no HTTP, no metrics, no
//! storage. Every key it touches is built by [`keys::Keys`].
//!
//! The fencing token of a term is the CreateRevision of its leader key (the
//! header revision of the winning txn). Revisions only grow, so a later term
//! always has a larger token. ModRevision is never used as a token: it moves
//! when the value changes (proclaim).

pub mod acting;
mod campaign;
mod connect;
pub mod deadline;
mod error;
pub mod fence;
mod floor;
pub mod keys;
pub mod keywatch;
pub mod lease;
mod observe;

use std::future::Future;
use std::time::Duration;

use etcd_client::{
    Client as EtcdClient, Compare, CompareOp, GetOptions, KeyValue, Txn, TxnOp, TxnResponse,
};
use serde::Serialize;

pub use campaign::{Acquired, ActingReports, CampaignOptions, Campaigned, Leadership};
pub use connect::{ConnectConfig, Credentials, TlsFiles};
pub use error::Error;
pub use fence::{FenceDecision, FenceReason, Fencer};
pub use keys::{ElectionName, EndMarker, EndMarkerCause, KeyLayout, Keys};
pub use lease::{LossReason, Ttl};
pub use observe::{Observed, Observer};

/// How long one etcd request may take before it is reported as
/// [`Error::EtcdTimeout`], unless the client is told otherwise.
pub const DEFAULT_OP_TIMEOUT: Duration = Duration::from_secs(5);

/// The current term of an election, as etcd holds it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Leader {
    pub name: String,
    /// The leader key's value, decoded as UTF-8 (invalid bytes replaced).
    pub holder: String,
    /// The fencing token: the leader key's CreateRevision.
    pub token: i64,
    pub lease_id: i64,
    pub key: String,
    pub layout: KeyLayout,
    /// Revision of the last change to the value (a proclaim moves it).
    pub mod_revision: i64,
}

impl Leader {
    fn from_kv(name: &ElectionName, kv: &KeyValue, layout: KeyLayout) -> Self {
        Self {
            name: name.to_string(),
            holder: String::from_utf8_lossy(kv.value()).into_owned(),
            token: kv.create_revision(),
            lease_id: kv.lease(),
            key: String::from_utf8_lossy(kv.key()).into_owned(),
            layout,
            mod_revision: kv.mod_revision(),
        }
    }
}

/// [`Leader`] plus what `tenure leader` shows: the lease's remaining TTL.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct LeaderStatus {
    #[serde(flatten)]
    pub leader: Leader,
    /// `None` when the key has no lease or the lease just ended.
    pub ttl_remaining_seconds: Option<i64>,
    /// The etcd revision this answer was read at.
    pub revision: i64,
    /// Candidates queued behind the leader (queue layout), next first.
    pub waiting: Vec<Leader>,
    /// tenure's token floor, when the leader's token is at or below it: a
    /// term from before etcd was restored from a snapshot, whose fences
    /// are refused (see `floor.rs`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub below_floor: Option<i64>,
}

/// Picks the leader among the keys of one election's range: the key with the
/// lowest CreateRevision among the single key and the queue candidates.
pub(crate) fn pick_leader(keys: &Keys, name: &ElectionName, kvs: &[KeyValue]) -> Option<Leader> {
    queue_of(keys, name, kvs).into_iter().next()
}

/// Every candidate key of one election (both layouts), oldest first: the
/// first leads, the rest wait in this order.
pub(crate) fn queue_of(keys: &Keys, name: &ElectionName, kvs: &[KeyValue]) -> Vec<Leader> {
    let mut all: Vec<Leader> = kvs
        .iter()
        .filter_map(|kv| {
            keys::classify(keys, name, kv.key(), kv.lease())
                .map(|layout| Leader::from_kv(name, kv, layout))
        })
        .collect();
    all.sort_by_key(|l| l.token);
    all
}

/// A handle on etcd for election work. Cheap to clone.
#[derive(Clone)]
pub struct Client {
    etcd: std::sync::Arc<EtcdClient>,
    keys: Keys,
    op_timeout: Duration,
    /// What [`Client::connect`] was given, for [`Client::reconnect`].
    endpoints: std::sync::Arc<[String]>,
    /// TLS files and etcd user, for [`Client::reconnect`] and error messages.
    config: std::sync::Arc<ConnectConfig>,
    /// Campaigns refuse a token at or below tenure's token floor (see
    /// `floor.rs`); off only for terms whose token fences nothing.
    token_floor: bool,
    /// `Some`: campaigns run only in the etcd cluster of this id (asked
    /// before each attempt; see [`Client::only_in_cluster`]).
    pinned_cluster: Option<u64>,
    /// The shared fence met a token floor in this etcd (`fence.rs`): its
    /// accepted path then carries the floor's branch, instead of trying
    /// the flat txn first and falling back at every check.
    floor_seen: std::sync::Arc<std::sync::atomic::AtomicBool>,
}

impl Client {
    /// Connects to a plain (http://, no authentication) etcd. Lazily: an
    /// unreachable etcd shows up as an error of the first operation, within
    /// the operation timeout.
    pub async fn connect(endpoints: &[String], prefix: &str) -> Result<Self, Error> {
        Self::connect_with(endpoints, prefix, ConnectConfig::plain()).await
    }

    /// Connects with TLS files and an etcd user (see [`ConnectConfig`]).
    /// Over TLS or with a user, one request is made now, so a certificate,
    /// user or password problem is an error of this call, not a retry loop
    /// later. With a user, an unreachable etcd is an error too (etcd-client
    /// authenticates when connecting); without one the connection stays lazy.
    pub async fn connect_with(
        endpoints: &[String],
        prefix: &str,
        config: ConnectConfig,
    ) -> Result<Self, Error> {
        if endpoints.is_empty() {
            return Err(Error::NoEndpoints);
        }
        let etcd = config.connect(endpoints, true).await?;
        let mut client = Self::new(etcd, prefix);
        client.endpoints = endpoints.into();
        client.config = std::sync::Arc::new(config);
        Ok(client)
    }

    /// A new connection to the same endpoints, with the same TLS files and
    /// user, sharing nothing with this one: for a watch whose connection
    /// went silent (half-open), where reopening the stream on the old
    /// connection would hang again until the HTTP/2 keepalive gives up on
    /// it. `None` for a client built with [`Client::new`] or when
    /// connecting fails.
    pub async fn reconnect(&self) -> Option<EtcdClient> {
        if self.endpoints.is_empty() {
            return None;
        }
        self.config.connect(&self.endpoints, false).await.ok()
    }

    /// The endpoints this client connected to (empty for [`Client::new`]).
    pub fn endpoints(&self) -> &[String] {
        &self.endpoints
    }

    /// The TLS files and etcd user this client connected with.
    pub fn connect_config(&self) -> &ConnectConfig {
        &self.config
    }

    /// The roles of this client's etcd user, as etcd lists them (a user may
    /// read its own entry). `None` without a user or when etcd does not say.
    pub async fn user_roles(&self) -> Option<Vec<String>> {
        let user = self.config.user()?.to_owned();
        let resp = self.op(self.etcd().user_get(user)).await.ok()?;
        Some(resp.roles().to_vec())
    }

    pub fn new(etcd: EtcdClient, prefix: &str) -> Self {
        Self {
            etcd: std::sync::Arc::new(etcd),
            keys: Keys::new(prefix),
            op_timeout: DEFAULT_OP_TIMEOUT,
            token_floor: true,
            pinned_cluster: None,
            floor_seen: std::sync::Arc::default(),
            endpoints: std::sync::Arc::from(Vec::new()),
            config: std::sync::Arc::new(ConnectConfig::plain()),
        }
    }

    pub fn with_op_timeout(mut self, op_timeout: Duration) -> Self {
        self.op_timeout = op_timeout;
        self
    }

    /// The same client, whose campaigns do not refuse a token at or below
    /// tenure's token floor. Only for a term whose token fences nothing in
    /// etcd's keyspace or outside: `tenure serve`'s history writer, whose
    /// database fence starts a new generation when etcd starts over. Its
    /// fences still refuse such tokens.
    pub fn without_token_floor(mut self) -> Self {
        self.token_floor = false;
        self
    }

    /// The same client, whose campaigns ask etcd's cluster id before each
    /// attempt (one count-only read) and fail with [`Error::OtherCluster`]
    /// when the endpoints answer as another etcd cluster than `id`: no key
    /// is written there (a lease granted for the attempt runs out). For a caller that knows
    /// which etcd its election belongs in (`tenure serve`'s history
    /// writer, by its history's record). Between that read and the txn the
    /// endpoints may still change (one round trip).
    pub fn only_in_cluster(mut self, id: u64) -> Self {
        self.pinned_cluster = Some(id);
        self
    }

    /// Fails with [`Error::OtherCluster`] when the client is pinned to an
    /// etcd cluster and its endpoints answer as another.
    pub(crate) async fn check_pinned_cluster(&self, name: &ElectionName) -> Result<(), Error> {
        let Some(expected) = self.pinned_cluster else {
            return Ok(());
        };
        let count = etcd_client::GetOptions::new().with_count_only();
        let key = self.keys.leader_key(name);
        let answer = match self.op(self.etcd().clone().get(key, Some(count))).await {
            Ok(a) => a,
            // Not answering: the session's grant retries (and this asks
            // again before the attempt after it).
            Err(e) if e.is_retryable() => return Ok(()),
            Err(e) => return Err(e),
        };
        let found = answer.header().map_or(0, |h| h.cluster_id());
        if found == expected {
            Ok(())
        } else {
            Err(Error::OtherCluster { expected, found })
        }
    }

    pub fn keys(&self) -> &Keys {
        &self.keys
    }

    pub fn op_timeout(&self) -> Duration {
        self.op_timeout
    }

    /// The underlying etcd client, for the caller's own guarded writes.
    pub fn etcd(&self) -> EtcdClient {
        EtcdClient::clone(&self.etcd)
    }

    /// Runs one etcd request with the operation timeout.
    pub(crate) async fn op<T>(
        &self,
        fut: impl Future<Output = Result<T, etcd_client::Error>>,
    ) -> Result<T, Error> {
        match tokio::time::timeout(self.op_timeout, fut).await {
            Ok(r) => r.map_err(|e| Error::from(e).with_user(self.config.user())),
            Err(_) => Err(Error::EtcdTimeout(self.op_timeout)),
        }
    }

    /// Reads every key of one election (both layouts) at one revision.
    pub(crate) async fn read_election(
        &self,
        name: &ElectionName,
    ) -> Result<(Vec<KeyValue>, i64), Error> {
        let (start, end) = self.keys.election_range(name);
        let resp = self
            .op(self
                .etcd()
                .get(start, Some(GetOptions::new().with_range(end))))
            .await?;
        let revision = resp.header().map(|h| h.revision()).unwrap_or_default();
        Ok((resp.kvs().to_vec(), revision))
    }

    /// Who leads `name` now, with the lease's remaining TTL.
    pub async fn leader(&self, name: &ElectionName) -> Result<Option<LeaderStatus>, Error> {
        // The election and the floor, at one revision.
        let (start, end) = self.keys.election_range(name);
        let txn = Txn::new().and_then([
            TxnOp::get(start, Some(GetOptions::new().with_range(end))),
            TxnOp::get(self.keys.floor_key(), None),
        ]);
        let resp = self.op(self.etcd().txn(txn)).await?;
        let revision = campaign::header_revision(&resp)?;
        let mut gets = resp.op_responses().into_iter().filter_map(|r| match r {
            etcd_client::TxnOpResponse::Get(g) => Some(g.kvs().to_vec()),
            _ => None,
        });
        let kvs = gets.next().unwrap_or_default();
        let floor = gets
            .next()
            .and_then(|f| f.first().map(|kv| floor::floor_value(kv.value())));
        let Some(leader) = pick_leader(&self.keys, name, &kvs) else {
            return Ok(None);
        };
        let ttl_remaining_seconds = if leader.lease_id == 0 {
            None
        } else {
            let resp = self
                .op(self.etcd().lease_time_to_live(leader.lease_id, None))
                .await?;
            (resp.ttl() >= 0).then_some(resp.ttl())
        };
        let waiting = queue_of(&self.keys, name, &kvs)
            .into_iter()
            .filter(|c| c.token > leader.token)
            .collect();
        let below_floor = floor.filter(|f| leader.token <= *f);
        Ok(Some(LeaderStatus {
            leader,
            ttl_remaining_seconds,
            revision,
            waiting,
            below_floor,
        }))
    }

    /// Ends the term whose token is `token`, and no other: the leader key is
    /// deleted under a CreateRevision guard with an end marker saying
    /// "resigned". No lease is revoked: a queue-layout leader's lease is a Go
    /// `concurrency.Session`'s, shared by every election and lock of that
    /// process, and not ours to end. ([`Leadership::resign`] revokes its own
    /// lease itself: that one tenure granted for this term alone.)
    pub async fn resign(&self, name: &ElectionName, token: i64) -> Result<Leader, Error> {
        keys::validate_token(token)?;
        let (kvs, _) = self.read_election(name).await?;
        let current = pick_leader(&self.keys, name, &kvs);
        let Some(leader) = current.clone().filter(|l| l.token == token) else {
            return Err(Error::NotHolder {
                name: name.to_string(),
                token,
                current: current.map(Box::new),
            });
        };
        self.end_term(
            name,
            &leader.key,
            leader.token,
            EndMarkerCause::Resigned,
            None,
        )
        .await?;
        Ok(leader)
    }

    /// Operator action: deletes the current leader key, whoever holds it, and
    /// returns who was deposed. The end marker says "deleted", so watchers
    /// tell a deposition from a resignation; the holder's loss signal fires.
    /// Only that one key goes: the holder's lease and its other keys stay.
    pub async fn depose(&self, name: &ElectionName) -> Result<Option<Leader>, Error> {
        let (kvs, _) = self.read_election(name).await?;
        let Some(leader) = pick_leader(&self.keys, name, &kvs) else {
            return Ok(None);
        };
        self.end_term(
            name,
            &leader.key,
            leader.token,
            EndMarkerCause::Deleted,
            None,
        )
        .await?;
        Ok(Some(leader))
    }

    /// Ends the term `token` of `name`, whose leader key is `key`: in one
    /// txn guarded by `CreateRevision == token`, deletes that key (and no
    /// other of the holder's) and writes the end marker
    /// `P election/~end/<name>` so watchers know the cause for certain.
    ///
    /// The marker has no lease (a foreign client's lease is not ours to
    /// attach keys to; one small key per election, overwritten, is bounded)
    /// and lies outside the candidates' prefix, so etcd's own `Election`
    /// never sees it. The same txn deletes a legacy marker
    /// `P election/<name>/~end` an older tenure may have left there.
    /// Nothing is revoked: callers that own the lease revoke it themselves.
    pub(crate) async fn end_term(
        &self,
        name: &ElectionName,
        key: &str,
        token: i64,
        cause: EndMarkerCause,
        // The holder's acting record (its own key), written in the same txn.
        acting: Option<TxnOp>,
    ) -> Result<(), Error> {
        let marker = serde_json::to_string(&EndMarker { token, cause })
            .map_err(|e| Error::Protocol(e.to_string()))?;
        let txn = Txn::new()
            .when([Compare::create_revision(key, CompareOp::Equal, token)])
            .and_then(
                [
                    TxnOp::delete(key, None),
                    TxnOp::put(self.keys.end_marker_key(name), marker, None),
                    TxnOp::delete(self.keys.legacy_end_marker_key(name), None),
                ]
                .into_iter()
                .chain(acting)
                .collect::<Vec<_>>(),
            );
        let resp = self.op(self.etcd().txn(txn)).await?;
        if !resp.succeeded() {
            let (kvs, _) = self.read_election(name).await?;
            return Err(Error::NotHolder {
                name: name.to_string(),
                token,
                current: pick_leader(&self.keys, name, &kvs).map(Box::new),
            });
        }
        Ok(())
    }

    /// Applies `ops` in one etcd txn only if the term `token` still holds
    /// `name` (its leader key, in either layout, still has CreateRevision ==
    /// `token`). Otherwise nothing is written and [`Error::NotHolder`] says
    /// who holds it now. A queue-layout term's key is found by one read.
    pub async fn guarded_txn(
        &self,
        name: &ElectionName,
        token: i64,
        ops: Vec<TxnOp>,
    ) -> Result<TxnResponse, Error> {
        keys::validate_token(token)?;
        // Who leads, in either layout: the single key alone does not say
        // (an older queue candidate may lead). One compare on the leader's
        // key then suffices, as for the fence.
        let (kvs, _) = self.read_election(name).await?;
        match pick_leader(&self.keys, name, &kvs) {
            Some(l) if l.token == token => self.guarded_txn_on(name, &l.key, token, ops).await,
            other => Err(Error::NotHolder {
                name: name.to_string(),
                token,
                current: other.map(Box::new),
            }),
        }
    }

    /// [`Client::guarded_txn`] on a known leader key.
    pub(crate) async fn guarded_txn_on(
        &self,
        name: &ElectionName,
        key: &str,
        token: i64,
        ops: Vec<TxnOp>,
    ) -> Result<TxnResponse, Error> {
        keys::validate_token(token)?;
        let txn = Txn::new()
            .when([Compare::create_revision(
                key.as_bytes(),
                CompareOp::Equal,
                token,
            )])
            .and_then(ops)
            .or_else([TxnOp::get(key.as_bytes(), None)]);
        let resp = self.op(self.etcd().txn(txn)).await?;
        if resp.succeeded() {
            return Ok(resp);
        }
        let current = resp.op_responses().into_iter().find_map(|r| match r {
            etcd_client::TxnOpResponse::Get(g) => g
                .kvs()
                .first()
                .map(|kv| Leader::from_kv(name, kv, KeyLayout::Single)),
            _ => None,
        });
        Err(Error::NotHolder {
            name: name.to_string(),
            token,
            current: current.map(Box::new),
        })
    }

    /// A stream of leader changes of `name`, starting with the current one.
    pub async fn observe(&self, name: &ElectionName) -> Result<Observer, Error> {
        Observer::start(self.clone(), name.clone()).await
    }
}

/// The shutdown signals tenure honours.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ShutdownSignal {
    Term,
    Int,
}

impl ShutdownSignal {
    /// The conventional exit status of a process ended by this signal.
    pub fn exit_code(self) -> i32 {
        match self {
            ShutdownSignal::Term => 128 + 15,
            ShutdownSignal::Int => 128 + 2,
        }
    }
}

/// Resolves on the first SIGTERM or SIGINT.
pub async fn shutdown_signal() -> std::io::Result<ShutdownSignal> {
    use tokio::signal::unix::{signal, SignalKind};
    let mut term = signal(SignalKind::terminate())?;
    let mut int = signal(SignalKind::interrupt())?;
    Ok(tokio::select! {
        _ = term.recv() => ShutdownSignal::Term,
        _ = int.recv() => ShutdownSignal::Int,
    })
}
