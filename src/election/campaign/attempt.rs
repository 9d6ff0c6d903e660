//! One campaign attempt: the compare-and-create txn that reads the whole
//! election, retried while its outcome is unknown.

use etcd_client::{
    Compare, CompareOp, GetOptions, KeyValue, PutOptions, Txn, TxnOp, TxnOpResponse,
};

use super::{header_revision, Attempt, Backoff};
use crate::election::{pick_leader, Client, ElectionName, Error, Layout, Leader};

impl Client {
    /// One attempt whose outcome is never left unknown: a retryable error
    /// (a timeout, a lost connection: the txn may have committed) is retried
    /// with the same lease, and the retry finds the key if the first one
    /// wrote it. Gives up after a few tries, leaving the caller to revoke.
    pub(super) async fn acquire_resolved(
        &self,
        name: &ElectionName,
        candidate: &str,
        lease_id: i64,
        layout: Layout,
    ) -> Result<Attempt, Error> {
        let mut backoff = Backoff::new();
        let mut tries = 0;
        loop {
            match self.try_acquire(name, candidate, lease_id, layout).await {
                // A lease that expired meanwhile makes the next put fail
                // with "lease not found": that ends the retries.
                Err(e) if e.is_retryable() && tries < 3 => {
                    tries += 1;
                    backoff.wait(&e, "campaigning").await;
                }
                other => return other,
            }
        }
    }

    /// One campaign txn: `If(CreateRevision(key) == 0) Then(Put(key, id,
    /// lease))`, reading the whole election in both branches. A key that
    /// already carries `lease_id` is this candidate's own, written by an
    /// earlier attempt whose answer was lost (it timed out but committed):
    /// that attempt won, and the term is taken up, never waited on.
    pub(super) async fn try_acquire(
        &self,
        name: &ElectionName,
        candidate: &str,
        lease_id: i64,
        layout: Layout,
    ) -> Result<Attempt, Error> {
        if layout == Layout::Queue {
            return self.try_queue(name, candidate, lease_id).await;
        }
        let key = self.keys.leader_key(name);
        let (created, revision, kvs) = self
            .create_and_read(name, &key, candidate, lease_id)
            .await?;
        let single = kvs.iter().find(|kv| kv.key() == key.as_bytes());
        let ours = if created {
            // The put happened at the txn's revision: that is the key's
            // CreateRevision, the term's token.
            Some(revision)
        } else {
            single
                .filter(|kv| kv.lease() == lease_id)
                .map(|kv| kv.create_revision())
        };
        let leader = pick_leader(&self.keys, name, &kvs);
        let Some(token) = ours else {
            let holder = single
                .map(|kv| Leader::from_kv(name, kv, Layout::Single))
                .or(leader);
            return Ok(Attempt::Held {
                leader: holder,
                revision,
                queued: None,
            });
        };
        match leader {
            // An older queue candidate leads by the key schema: the single
            // key was free, but this is not a term. Take the key back and
            // wait like any candidate.
            Some(leader) if leader.token != token => {
                let undo = Txn::new()
                    .when([Compare::create_revision(
                        key.as_bytes(),
                        CompareOp::Equal,
                        token,
                    )])
                    .and_then([TxnOp::delete(key.as_bytes(), None)]);
                let undone = self.op(self.etcd().txn(undo)).await?;
                Ok(Attempt::Held {
                    leader: Some(leader),
                    revision: header_revision(&undone)?,
                    queued: None,
                })
            }
            _ => Ok(Attempt::Won { token, key }),
        }
    }

    /// The campaign txn of both layouts: `If(CreateRevision(key) == 0)
    /// Then(Put(key, candidate, lease))`, reading the whole election in
    /// both branches (a candidate of the other layout may lead it). Returns
    /// whether the key was created, the txn's revision (the key's
    /// CreateRevision when created) and the election's keys.
    pub(super) async fn create_and_read(
        &self,
        name: &ElectionName,
        key: &str,
        candidate: &str,
        lease_id: i64,
    ) -> Result<(bool, i64, Vec<KeyValue>), Error> {
        let (start, end) = self.keys.election_range(name);
        let read = || {
            TxnOp::get(
                start.clone(),
                Some(GetOptions::new().with_range(end.clone())),
            )
        };
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
                read(),
            ])
            .or_else([read()]);
        let resp = self.op(self.etcd().txn(txn)).await?;
        let revision = header_revision(&resp)?;
        let kvs = resp
            .op_responses()
            .into_iter()
            .filter_map(|r| match r {
                TxnOpResponse::Get(g) => Some(g.kvs().to_vec()),
                _ => None,
            })
            .flatten()
            .collect();
        Ok((resp.succeeded(), revision, kvs))
    }
}
