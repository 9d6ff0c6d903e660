//! One campaign attempt: the compare-and-create txn that reads the whole
//! election, retried while its outcome is unknown.

use etcd_client::{
    Compare, CompareOp, GetOptions, KeyValue, PutOptions, Txn, TxnOp, TxnOpResponse,
};

use super::{header_revision, Attempt, Backoff};
use crate::election::floor::floor_value;
use crate::election::{
    keys, pick_leader, Client, ElectionName, EndMarkerCause, Error, KeyLayout, Leader,
};

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
        layout: KeyLayout,
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
        layout: KeyLayout,
    ) -> Result<Attempt, Error> {
        if layout == KeyLayout::Queue {
            return self.try_queue(name, candidate, lease_id).await;
        }
        let key = self.keys.leader_key(name);
        let placed = self
            .create_and_read(name, &key, candidate, lease_id)
            .await?;
        let (revision, kvs) = (placed.revision, &placed.kvs);
        let single = kvs.iter().find(|kv| kv.key() == key.as_bytes());
        let ours = if placed.created {
            // The put happened at the txn's revision: that is the key's
            // CreateRevision, the term's token.
            Some(revision)
        } else {
            single
                .filter(|kv| kv.lease() == lease_id)
                .map(|kv| kv.create_revision())
        };
        self.refuse(name, &placed, ours.map(|t| (key.as_str(), t)))
            .await?;
        let leader = pick_leader(&self.keys, name, kvs);
        let Some(token) = ours else {
            let holder = single
                .map(|kv| Leader::from_kv(name, kv, KeyLayout::Single))
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

    /// Refuses a campaign that must not go on, after deleting the key it
    /// wrote (`own`: the key and its CreateRevision, under which it is
    /// deleted, with an end marker saying `resigned`; its lease is the
    /// caller's to revoke):
    ///
    /// - its name collides with another election's keys in etcd's own
    ///   `Election` layout ([`keys::collides`]): [`Error::NameCollision`];
    /// - its token is at or below tenure's token floor, or, holding no key,
    ///   etcd's next revision is (any token it could get is):
    ///   [`Error::BelowFloor`]. [`Client::create_and_read`] writes no key
    ///   at or below the floor; one written before the floor was raised
    ///   (an earlier attempt whose answer was lost) is deleted here.
    pub(super) async fn refuse(
        &self,
        name: &ElectionName,
        placed: &Placed,
        own: Option<(&str, i64)>,
    ) -> Result<(), Error> {
        let refusal = if let Some(key) = &placed.collision {
            Some(Error::NameCollision {
                name: name.to_string(),
                key: key.clone(),
            })
        } else {
            // Its token, or the lowest it could get: the next revision.
            let at = own.map_or(placed.revision.saturating_add(1), |(_, token)| token);
            placed
                .floor
                .filter(|floor| self.token_floor && at <= *floor)
                .map(|floor| Error::BelowFloor {
                    token: at,
                    floor,
                    revision: placed.revision,
                })
        };
        let Some(refusal) = refusal else {
            return Ok(());
        };
        if let Some((key, token)) = own {
            match self
                .end_term(name, key, token, EndMarkerCause::Resigned, None)
                .await
            {
                Ok(()) | Err(Error::NotHolder { .. }) => {}
                Err(e) => {
                    tracing::warn!(%key, error = %e, "could not delete the refused campaign's key; it goes with its lease")
                }
            }
        }
        Err(refusal)
    }

    /// The campaign txn of both layouts: `If(CreateRevision(key) == 0)
    /// Then(Put(key, candidate, lease))`, reading in both branches the
    /// whole election (a candidate of the other layout may lead it),
    /// tenure's token floor, and the own keys of every election whose name
    /// is a proper path prefix of `name` (keys only): everything the
    /// campaign decides on, at the txn's revision, in one round trip.
    ///
    /// The put also requires that there is no token floor. Where there is
    /// one (after a restore) and the key was free, a second txn puts it if
    /// the floor is below the first one's revision + 1, which the token
    /// will be at least: a token at or below the floor is never written
    /// (the caller refuses when etcd's revision is not past the floor).
    pub(super) async fn create_and_read(
        &self,
        name: &ElectionName,
        key: &str,
        candidate: &str,
        lease_id: i64,
    ) -> Result<Placed, Error> {
        let mut placed = self
            .create_and_read_once(name, key, candidate, lease_id, None)
            .await?;
        for _ in 0..3 {
            let free = !placed.kvs.iter().any(|kv| kv.key() == key.as_bytes());
            match placed.floor {
                Some(floor)
                    if self.token_floor && free && !placed.created && placed.revision >= floor =>
                {
                    placed = self
                        .create_and_read_once(name, key, candidate, lease_id, Some(placed.revision))
                        .await?;
                }
                _ => break,
            }
        }
        Ok(placed)
    }

    /// One campaign txn; `past`: put only if the token floor is below
    /// `past + 1` (else only if there is none).
    async fn create_and_read_once(
        &self,
        name: &ElectionName,
        key: &str,
        candidate: &str,
        lease_id: i64,
        past: Option<i64>,
    ) -> Result<Placed, Error> {
        let mut then = vec![TxnOp::put(
            key.as_bytes(),
            candidate,
            Some(PutOptions::new().with_lease(lease_id)),
        )];
        then.extend(self.election_reads(name));
        let txn = Txn::new()
            .when([
                Compare::create_revision(key.as_bytes(), CompareOp::Equal, 0),
                self.floor_compare(key, past),
            ])
            .and_then(then)
            .or_else(self.election_reads(name));
        let resp = self.op(self.etcd().txn(txn)).await?;
        let revision = header_revision(&resp)?;
        let mut gets = resp.op_responses().into_iter().filter_map(|r| match r {
            TxnOpResponse::Get(g) => Some(g.kvs().to_vec()),
            _ => None,
        });
        let kvs = gets.next().unwrap_or_default();
        let floor = gets
            .next()
            .and_then(|f| f.first().map(|kv| floor_value(kv.value())));
        let collides = |kv: &&KeyValue| keys::collides(&self.keys, name, kv.key(), kv.lease());
        let collision = kvs
            .iter()
            .find(collides)
            .map(|kv| kv.key().to_vec())
            .or_else(|| {
                gets.flatten()
                    .find(|kv| keys::collides(&self.keys, name, kv.key(), kv.lease()))
                    .map(|kv| kv.key().to_vec())
            })
            .map(|k| String::from_utf8_lossy(&k).into_owned());
        Ok(Placed {
            created: resp.succeeded(),
            revision,
            kvs,
            collision,
            floor,
        })
    }

    /// What the campaign txn reads in either branch: the whole election,
    /// tenure's token floor, and (keys only) the own keys of every proper
    /// path prefix of the name, for collisions.
    fn election_reads(&self, name: &ElectionName) -> Vec<TxnOp> {
        let (start, end) = self.keys.election_range(name);
        let mut ops = vec![
            TxnOp::get(start, Some(GetOptions::new().with_range(end))),
            TxnOp::get(self.keys.floor_key(), None),
        ];
        // Not keys-only: etcd 3.7 answers a keys-only range from its index
        // without each key's lease, and the collision check needs it.
        ops.extend(name.ancestors().map(|m| {
            let (s, e) = self.keys.own_keys_range(&m);
            TxnOp::get(s, Some(GetOptions::new().with_range(e)))
        }));
        ops
    }

    /// The campaign txn's floor compare: none without tenure's floor check
    /// (`without_token_floor`: the key's own compare again); else no floor
    /// at all when `past` is `None`, a floor below `past + 1` otherwise.
    fn floor_compare(&self, key: &str, past: Option<i64>) -> Compare {
        let floor_key = self.keys.floor_key();
        match past {
            _ if !self.token_floor => Compare::create_revision(key.as_bytes(), CompareOp::Equal, 0),
            None => Compare::version(floor_key.as_bytes(), CompareOp::Equal, 0),
            Some(r) => Compare::value(
                floor_key.as_bytes(),
                CompareOp::Less,
                keys::pad_token(r.saturating_add(1)),
            ),
        }
    }
}

/// What one campaign txn did and read, at its revision.
pub(super) struct Placed {
    /// The candidate's key was created by this txn.
    pub(super) created: bool,
    /// The txn's revision (the key's CreateRevision when created).
    pub(super) revision: i64,
    /// Every key of the election, both layouts.
    pub(super) kvs: Vec<KeyValue>,
    /// A key that collides with the election's name
    /// ([`keys::collides`]), if any.
    pub(super) collision: Option<String>,
    /// tenure's token floor, if one was ever raised.
    pub(super) floor: Option<i64>,
}
