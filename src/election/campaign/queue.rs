//! The queue layout (etcd's own): a candidate's key named by its lease,
//! its place among the older keys, and the wait for its predecessor.

use etcd_client::KeyValue;

use super::queue_watch::{self, Woken};
use super::Attempt;
use crate::election::lease::Session;
use crate::election::{keys, pick_leader, Client, ElectionName, Error};

/// A queued key and every older key of the election as read at the
/// attempt's revision, oldest first. The set of older keys can only shrink:
/// a key created later is younger. So once every one of them is gone (seen
/// as a DELETE on a watch from that revision on), the key leads, if it is
/// still there (one read of its own key: see `wait_in_queue`).
pub(super) struct Queued {
    pub(super) key: String,
    pub(super) token: i64,
    pub(super) older: Vec<String>,
}

impl Client {
    /// One queue-layout attempt, as etcd's own `Election.Campaign` makes
    /// it: `If(CreateRevision(k) == 0) Then(Put(k, id, lease))` with `k =
    /// election/<name>/<lease-hex>`, reading the election in both branches.
    /// The key is named by the lease, so a retry after a lost answer finds
    /// its own key. It leads when no key of the election (either layout)
    /// is older; otherwise it waits for the next older one only.
    pub(super) async fn try_queue(
        &self,
        name: &ElectionName,
        candidate: &str,
        lease_id: i64,
    ) -> Result<Attempt, Error> {
        let key = self.keys.queue_key(name, lease_id);
        let placed = self
            .create_and_read(name, &key, candidate, lease_id)
            .await?;
        let own = placed
            .kvs
            .iter()
            .find(|kv| kv.key() == key.as_bytes())
            .map(|kv| kv.create_revision());
        self.refuse(name, &placed, own.map(|t| (key.as_str(), t)))
            .await?;
        match queue_place(&self.keys, name, key, &placed.kvs, placed.revision) {
            Some(attempt) => Ok(attempt),
            None => Err(Error::Protocol(
                "the queued key is missing from the txn's read".into(),
            )),
        }
    }

    /// Where a queued candidate stands, by one linearizable read (no write,
    /// no raft proposal: what etcd's own `waitDeletes` does after its
    /// predecessor goes). `None` when its key is gone (its lease ended, or
    /// someone deleted it): the caller queues again.
    pub(super) async fn queue_recheck(
        &self,
        name: &ElectionName,
        lease_id: i64,
    ) -> Result<Option<Attempt>, Error> {
        let key = self.keys.queue_key(name, lease_id);
        let (kvs, revision) = self.read_election(name).await?;
        Ok(queue_place(&self.keys, name, key, &kvs, revision))
    }
}

/// A queued key's standing among the election's keys read at `revision`:
/// it leads when no key of the election (either layout) is older, else it
/// waits for the next older one only. `None` when `key` is not among them.
fn queue_place(
    keys: &keys::Keys,
    name: &ElectionName,
    key: String,
    kvs: &[KeyValue],
    revision: i64,
) -> Option<Attempt> {
    let mine = kvs
        .iter()
        .find(|kv| kv.key() == key.as_bytes())?
        .create_revision();
    let mut older: Vec<&KeyValue> = kvs
        .iter()
        .filter(|kv| {
            kv.create_revision() < mine
                && keys::classify(keys, name, kv.key(), kv.lease()).is_some()
        })
        .collect();
    if older.is_empty() {
        return Some(Attempt::Won { token: mine, key });
    }
    older.sort_by_key(|kv| kv.create_revision());
    Some(Attempt::Held {
        leader: pick_leader(keys, name, kvs),
        revision,
        queued: Some(Queued {
            key,
            token: mine,
            older: older
                .iter()
                .map(|kv| String::from_utf8_lossy(kv.key()).into_owned())
                .collect(),
        }),
    })
}

/// Waits, watching the predecessor from the revision after `revision` (so
/// a deletion since the read is replayed, never missed), until it is gone:
/// then the key leads if it was the only older key; otherwise the caller
/// reads again (older keys in the list may be long gone). The
/// candidate's own key is watched all along, in the same watcher: if
/// someone deletes it (an operator's `etcdctl del`, a revoked lease), the
/// candidate is no longer queued and must not lead. `Some` once the queued
/// key leads; `None` when its own key went, a watch was compacted, or its
/// lease is in doubt (the caller reads again, and queues again if its key
/// is gone).
///
/// Only the predecessor is watched among the older keys. If older keys
/// remain in the list once it goes (most of them long gone: earlier terms),
/// watching each from the read's revision would replay its deletion through
/// etcd's catch-up path, up to 100 ms a key; one read says at once who is
/// still there, so the caller reads again.
///
/// Winning needs the own key to have stood at the predecessor's deletion:
/// one watcher over both keys delivers their events in revision order
/// (`queue_watch`), so the predecessor's deletion, with no deletion of the
/// own key before or beside it, proves it without a read.
pub(super) async fn wait_in_queue(
    client: &Client,
    session: &Session,
    mut place: Queued,
    revision: i64,
) -> Option<Queued> {
    let pred = place.older.pop()?;
    match queue_watch::wait(client, session, &place.key, &pred, revision).await {
        Woken::PredecessorGone => {}
        Woken::Lost => return None,
    }
    if !place.older.is_empty() {
        return None;
    }
    session.is_valid().then_some(place)
}
