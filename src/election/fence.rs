//! Fencing: the shared, term-aware fence in etcd, and an in-process
//! [`Fencer`] for writes that never leave one process.
//!
//! The shared fence decides in **one** etcd txn (nested txns pick the
//! reason) and writes both outcomes to etcd. The common case (the current
//! term writing again to a resource it already wrote to) is first tried
//! with the accepted branch alone, a flat txn of its compares and the put,
//! which writes nothing when its compares fail and reads nothing else (it
//! costs what a raw compare-and-put costs, BENCHMARKS.md 4); only then is
//! the full nested txn sent (after etcd was given a token floor, the fast
//! path carries the floor's branch too):
//!
//! - accepted: the leader key of the election has `CreateRevision == token`
//!   and the resource's stored token is not higher. `P fence/<name>/<resource>`
//!   is set to the token, zero-padded to 20 digits. Equal is accepted: a
//!   leader's second write in its own term must pass.
//! - refused: `P fence/<name>/<resource>/~refusal` is set to
//!   `{"token":T,"reason":"stale_token|term_ended|no_leader"}`, so every
//!   watcher of the prefix sees each refusal as a PUT event (one key per
//!   resource, overwritten: etcd holds the latest, the watch stream and
//!   tenure's history hold them all).
//!
//! Reasons, first match wins: `stale_token` (the resource already accepted a
//! higher token), `no_leader` (no leader key), `term_ended` (the leader key
//! belongs to another term). A deposed leader is refused even at a resource
//! that has not yet seen the newer token, because the leader key is checked.
//!
//! Before any of that, the same txn compares the token with tenure's token
//! floor (`P election/~floor`, see `floor.rs`): a token at or below it
//! dates from before etcd was restored from a snapshot and may repeat one
//! handed out before; it is refused with [`Error::BelowFloor`], writing
//! nothing (no refusal record: it says nothing about the resource, and the
//! fence keys of a restored etcd hold values of the old timeline).

use crate::task::Locked;
use std::collections::HashMap;
use std::sync::Mutex;

use etcd_client::{Compare, CompareOp, PutOptions, Txn, TxnOp, TxnOpResponse, TxnResponse};
use serde::Serialize;

use super::campaign::header_revision;
use super::floor::floor_value;
use super::keys::{self, pad_token, parse_padded_token};
use super::{Client, ElectionName, Error};

/// Why the fence refused a token.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, serde::Deserialize)]
#[cfg_attr(feature = "server", derive(utoipa::ToSchema))]
#[serde(rename_all = "snake_case")]
pub enum FenceReason {
    /// The resource already accepted a higher token: a newer term wrote.
    StaleToken,
    /// The election's leader key belongs to another term now.
    TermEnded,
    /// Nobody leads the election.
    NoLeader,
}

impl FenceReason {
    pub fn as_str(self) -> &'static str {
        match self {
            FenceReason::StaleToken => "stale_token",
            FenceReason::TermEnded => "term_ended",
            FenceReason::NoLeader => "no_leader",
        }
    }
}

impl std::fmt::Display for FenceReason {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// The value of a refusal record.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, serde::Deserialize)]
pub struct RefusalRecord {
    pub token: i64,
    pub reason: FenceReason,
}

/// What the shared fence decided, and what it saw when it decided.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[cfg_attr(feature = "server", derive(utoipa::ToSchema))]
pub struct FenceDecision {
    pub accepted: bool,
    /// Set when refused.
    pub reason: Option<FenceReason>,
    pub election: String,
    pub resource: String,
    pub token: i64,
    /// The current term's token (leader key CreateRevision), if anyone leads.
    pub current_token: Option<i64>,
    /// Its holder (the leader key's value) where the fence read it: on a
    /// refusal always; on the accepted path, whose holder is the token's own
    /// term, `None` (not read: one read less in the common case) unless
    /// etcd has a token floor.
    pub current_holder: Option<String>,
    /// The highest token the resource had accepted before this check.
    pub stored_token: Option<i64>,
    /// The etcd revision of the decision (of the write it made).
    pub revision: i64,
}

impl Client {
    /// Checks `token` against the shared fence of `resource` in election
    /// `name`, in one etcd txn; see the module documentation. Works for
    /// terms of both layouts: a queue-layout term's token is its key's
    /// CreateRevision, and its key is found by one read of the election.
    pub async fn fence(
        &self,
        name: &ElectionName,
        resource: &str,
        token: i64,
    ) -> Result<FenceDecision, Error> {
        keys::validate_resource(resource)?;
        keys::validate_token(token)?;
        // The fast path compares the single key, so it must also know that
        // no key under `election/<name>/` (a queue candidate, possibly older)
        // exists; otherwise the read below finds who really leads.
        let single = self.keys.leader_key(name);
        let no_queue = Compare::version(format!("{single}/"), CompareOp::Equal, 0)
            .with_range(format!("{single}0"));
        if let Some(decision) = self
            .fence_fast(name, &single, Some(no_queue), resource, token)
            .await?
        {
            return Ok(decision);
        }
        let subject = self.fence_subject(name).await?;
        let decision = self.fence_full(name, &subject, resource, token).await?;
        // (A queue leader fails the fast path by its layout, not a floor.)
        if subject == single {
            self.note_floor(&decision);
        }
        Ok(decision)
    }

    /// The fence for a holder that knows its own leader key (a
    /// [`super::Leadership`]): no read to find it.
    pub(crate) async fn fence_on(
        &self,
        name: &ElectionName,
        leader_key: &str,
        resource: &str,
        token: i64,
    ) -> Result<FenceDecision, Error> {
        keys::validate_resource(resource)?;
        keys::validate_token(token)?;
        if let Some(decision) = self
            .fence_fast(name, leader_key, None, resource, token)
            .await?
        {
            return Ok(decision);
        }
        let decision = self.fence_full(name, leader_key, resource, token).await?;
        self.note_floor(&decision);
        Ok(decision)
    }

    /// The key whose CreateRevision the fence compares: the current
    /// leader's key in either layout (the term `token`'s own key if it
    /// leads; another's, and the txn refuses with the right reason), else
    /// the single key.
    ///
    /// Why one compare on that key suffices in the txn that follows: if the
    /// key with CreateRevision == token led at this read (no key of the
    /// election was older), it still leads at any later revision where it
    /// still exists with that CreateRevision, because a key created later
    /// has a higher CreateRevision and cannot precede it.
    async fn fence_subject(&self, name: &ElectionName) -> Result<String, Error> {
        let (kvs, _) = self.read_election(name).await?;
        Ok(match super::pick_leader(&self.keys, name, &kvs) {
            Some(l) => l.key,
            None => self.keys.leader_key(name),
        })
    }

    /// The full nested txn, comparing `leader_key`.
    async fn fence_full(
        &self,
        name: &ElectionName,
        leader_key: &str,
        resource: &str,
        token: i64,
    ) -> Result<FenceDecision, Error> {
        let fence = self.keys.fence_key(name, resource);
        let refusal = self.keys.refusal_key(name, resource);
        let floor_key = self.keys.floor_key();
        let txn = full_txn(&floor_key, leader_key, &fence, &refusal, token);
        let resp = self.op(self.etcd().txn(txn)).await?;
        let revision = header_revision(&resp)?;
        let resp = below_floor(resp, token, revision)?;
        let decision = FenceDecision {
            accepted: false,
            reason: None,
            election: name.to_string(),
            resource: resource.to_owned(),
            token,
            current_token: None,
            current_holder: None,
            stored_token: None,
            revision,
        };
        branch_taken(resp, leader_key.as_bytes(), decision)
    }
}

/// The full fence txn: the floor first (a token at or below it decides
/// nothing; a value compare on a missing floor is false: no floor, no
/// refusal), then the nested decision: accept (the fence key written, the
/// leader key read), else refuse with the first reason that matches (the
/// refusal record written, the leader and fence keys read).
fn full_txn(floor_key: &str, leader_key: &str, fence: &str, refusal: &str, token: i64) -> Txn {
    let (leader, fence) = (leader_key.as_bytes(), fence.as_bytes());
    let accept = |prev: bool| {
        let opts = if prev {
            Some(PutOptions::new().with_prev_key())
        } else {
            None
        };
        [
            TxnOp::put(fence, pad_token(token), opts),
            TxnOp::get(leader, None),
        ]
    };
    let refuse = |reason: FenceReason| {
        let record = serde_json::to_string(&RefusalRecord { token, reason }).unwrap_or_default();
        [
            TxnOp::put(refusal.as_bytes(), record, None),
            TxnOp::get(leader, None),
            TxnOp::get(fence, None),
        ]
    };
    let is_current = Compare::create_revision(leader, CompareOp::Equal, token);
    let decide = Txn::new()
        .when([
            is_current.clone(),
            // A value compare on a missing key is false: the first write
            // to a resource takes the next branch.
            Compare::value(fence, CompareOp::Less, pad_token(token.saturating_add(1))),
        ])
        .and_then(accept(true))
        .or_else([TxnOp::txn(
            Txn::new()
                .when([is_current, Compare::version(fence, CompareOp::Equal, 0)])
                .and_then(accept(false))
                .or_else([TxnOp::txn(
                    Txn::new()
                        .when([Compare::value(fence, CompareOp::Greater, pad_token(token))])
                        .and_then(refuse(FenceReason::StaleToken))
                        .or_else([TxnOp::txn(
                            Txn::new()
                                .when([Compare::version(leader, CompareOp::Equal, 0)])
                                .and_then(refuse(FenceReason::NoLeader))
                                .or_else(refuse(FenceReason::TermEnded)),
                        )]),
                )]),
        )]);
    Txn::new()
        .when([Compare::value(
            floor_key.as_bytes(),
            CompareOp::Greater,
            pad_token(token.saturating_sub(1)),
        )])
        .and_then([TxnOp::get(floor_key.as_bytes(), None)])
        .or_else([TxnOp::txn(decide)])
}

/// Walks down the branches the full txn took (below the floor's) and
/// fills `decision` from the one that ran.
fn branch_taken(
    resp: TxnResponse,
    leader: &[u8],
    mut decision: FenceDecision,
) -> Result<FenceDecision, Error> {
    let reasons = [
        None,
        None,
        Some(FenceReason::StaleToken),
        Some(FenceReason::NoLeader),
    ];
    let mut level = resp;
    for (depth, reason_if_taken) in reasons.iter().enumerate() {
        let ops = level.op_responses();
        if level.succeeded() || depth == reasons.len() - 1 {
            decision.accepted = depth < 2;
            decision.reason = if level.succeeded() {
                *reason_if_taken
            } else {
                Some(FenceReason::TermEnded)
            };
            read_branch(&ops, leader, &mut decision);
            return Ok(decision);
        }
        level = match ops.into_iter().next() {
            Some(TxnOpResponse::Txn(t)) => t,
            _ => {
                return Err(Error::Protocol(
                    "fence txn: nested txn response missing".into(),
                ))
            }
        };
    }
    Err(Error::Protocol("fence txn: no branch taken".into()))
}

impl Client {
    /// The common case in one flat txn: the token is the current term's and
    /// the resource has already accepted it or a lower one. Only the
    /// accepted branch is sent (the same compares and ops as the first
    /// branch of the full txn); when its compares fail it writes nothing and
    /// `None` sends the caller to the full txn, which decides the first
    /// write to a resource and every refusal.
    async fn fence_fast(
        &self,
        name: &ElectionName,
        leader_key: &str,
        extra: Option<Compare>,
        resource: &str,
        token: i64,
    ) -> Result<Option<FenceDecision>, Error> {
        let fence = self.keys.fence_key(name, resource);
        let (leader, fence) = (leader_key.as_bytes(), fence.as_bytes());
        let floor_key = self.keys.floor_key();
        let mut compares = vec![
            Compare::create_revision(leader, CompareOp::Equal, token),
            Compare::value(fence, CompareOp::Less, pad_token(token.saturating_add(1))),
        ];
        compares.extend(extra);
        let put = || {
            TxnOp::put(
                fence,
                pad_token(token),
                Some(PutOptions::new().with_prev_key()),
            )
        };
        let mut no_floor = compares.clone();
        no_floor.push(Compare::version(floor_key.as_bytes(), CompareOp::Equal, 0));
        let floor_seen = self.floor_seen.load(std::sync::atomic::Ordering::Relaxed);
        let txn = if floor_seen {
            // A floor below the token: a second branch (a value compare on
            // a missing key is false), and the leader key read (its holder named).
            let mut above_floor = compares;
            above_floor.push(Compare::value(
                floor_key.as_bytes(),
                CompareOp::Less,
                pad_token(token),
            ));
            let accept = || [put(), TxnOp::get(leader, None)];
            Txn::new()
                .when(no_floor)
                .and_then(accept())
                .or_else([TxnOp::txn(Txn::new().when(above_floor).and_then(accept()))])
        } else {
            // The common case (etcd never restored), flat: the compares and
            // the put, no branch, no read of the leader key (each cost 3-10 %
            // of the check, BENCHMARKS.md 4g-4i).
            Txn::new().when(no_floor).and_then([put()])
        };
        let resp = self.op(self.etcd().txn(txn)).await?;
        let resp = if resp.succeeded() {
            resp
        } else {
            match resp.op_responses().into_iter().next() {
                Some(TxnOpResponse::Txn(inner)) if inner.succeeded() => inner,
                _ => return Ok(None),
            }
        };
        let mut decision = FenceDecision {
            accepted: true,
            reason: None,
            election: name.to_string(),
            resource: resource.to_owned(),
            token,
            // The compare proved it; its holder's value is read only where
            // a floor was seen (`current_holder` is `None` otherwise).
            current_token: Some(token),
            current_holder: None,
            stored_token: None,
            revision: header_revision(&resp)?,
        };
        read_branch(&resp.op_responses(), leader, &mut decision);
        Ok(Some(decision))
    }

    /// After the fast path failed and the full txn accepted a resource that
    /// had accepted a token before: a floor below the token is why (the
    /// flat txn requires none), and the fast path carries its branch from
    /// now on. A wrong guess (a race with the leader key) costs that
    /// branch and the read, never a decision.
    fn note_floor(&self, decision: &FenceDecision) {
        if decision.accepted && decision.stored_token.is_some() {
            self.floor_seen
                .store(true, std::sync::atomic::Ordering::Relaxed);
        }
    }
}

/// The fence txn's floor level: when its branch was taken (the floor is at
/// or above the token), the refusal; else the decision's nested txn.
fn below_floor(resp: TxnResponse, token: i64, revision: i64) -> Result<TxnResponse, Error> {
    let mut ops = resp.op_responses().into_iter();
    if resp.succeeded() {
        let floor = ops
            .find_map(|r| match r {
                TxnOpResponse::Get(g) => g.kvs().first().map(|kv| floor_value(kv.value())),
                _ => None,
            })
            .unwrap_or(i64::MAX);
        return Err(Error::BelowFloor {
            token,
            floor,
            revision,
        });
    }
    match ops.next() {
        Some(TxnOpResponse::Txn(t)) => Ok(t),
        _ => Err(Error::Protocol(
            "fence txn: nested txn response missing".into(),
        )),
    }
}

/// Reads the leader and fence values a fence branch returned.
fn read_branch(ops: &[TxnOpResponse], leader_key: &[u8], decision: &mut FenceDecision) {
    for op in ops {
        match op {
            TxnOpResponse::Put(p) => {
                if let Some(prev) = p.prev_key() {
                    decision.stored_token = parse_padded_token(prev.value());
                }
            }
            TxnOpResponse::Get(g) => {
                for kv in g.kvs() {
                    if kv.key() == leader_key {
                        decision.current_token = Some(kv.create_revision());
                        decision.current_holder =
                            Some(String::from_utf8_lossy(kv.value()).into_owned());
                    } else {
                        decision.stored_token = parse_padded_token(kv.value());
                    }
                }
            }
            _ => {}
        }
    }
}

/// An in-process fence for one process's own resources: it refuses only
/// tokens *lower* than the highest it has accepted (equal passes: a second
/// write in the same term). It forgets everything on restart and protects
/// one process only; the shared fence ([`Client::fence`]) is the one that
/// stops a deposed leader across processes.
#[derive(Debug, Default)]
pub struct Fencer {
    highest: Mutex<HashMap<String, i64>>,
}

/// A refusal by the in-process [`Fencer`].
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("token {token} is stale for {resource:?}: token {highest} was already accepted")]
pub struct StaleToken {
    pub resource: String,
    pub token: i64,
    pub highest: i64,
}

impl Fencer {
    pub fn new() -> Self {
        Self::default()
    }

    pub fn check(&self, resource: &str, token: i64) -> Result<(), StaleToken> {
        let mut highest = self.highest.locked();
        let seen = highest.entry(resource.to_owned()).or_insert(token);
        if token < *seen {
            return Err(StaleToken {
                resource: resource.to_owned(),
                token,
                highest: *seen,
            });
        }
        *seen = token;
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fencer_accepts_equal_and_refuses_lower() {
        let f = Fencer::new();
        assert!(f.check("db", 451).is_ok());
        assert!(f.check("db", 451).is_ok(), "second write in the same term");
        assert!(f.check("db", 453).is_ok());
        let err = f.check("db", 451).unwrap_err();
        assert_eq!(err.highest, 453);
        assert!(f.check("other", 1).is_ok(), "resources are independent");
    }
}
