//! Keys without a lease among the candidates of a layout whose candidates
//! hold leases (`Layout::candidates_hold_leases`: etcd's `concurrency`),
//! by election: no candidate, but etcd's own `Campaign` (and `Mutex.Lock`,
//! `etcdctl elect` and `lock`) waits until every key of the election's
//! prefix created before its own is deleted, whatever its lease. The
//! lowest of them blocks every candidate created after it: nobody leads
//! while it stands. Only its key and CreateRevision are kept, never its
//! value (a config key's value is no holder, nor a label).

use std::collections::{BTreeMap, HashMap};

use crate::events::WatchStatus;

#[derive(Debug, Default)]
pub(super) struct Blockers {
    /// Election → its lease-less keys → their CreateRevision.
    by_election: HashMap<String, BTreeMap<Vec<u8>, i64>>,
}

impl Blockers {
    /// A lease-less key of `election` put (created, or rewritten: its
    /// CreateRevision does not change). At most `max_elections` elections.
    pub fn put(
        &mut self,
        election: &str,
        key: &[u8],
        created: i64,
        max_elections: usize,
    ) -> Result<(), WatchStatus> {
        if let Some(keys) = self.by_election.get_mut(election) {
            keys.insert(key.to_vec(), created);
            return Ok(());
        }
        if self.by_election.len() >= max_elections {
            return Err(WatchStatus::Overflow {
                election: election.to_owned(),
            });
        }
        let keys = BTreeMap::from([(key.to_vec(), created)]);
        self.by_election.insert(election.to_owned(), keys);
        Ok(())
    }

    /// `key` of `election` deleted, or put again under a lease (a
    /// candidate then); whether it was held.
    pub fn remove(&mut self, election: &str, key: &[u8]) -> bool {
        let Some(keys) = self.by_election.get_mut(election) else {
            return false;
        };
        let held = keys.remove(key).is_some();
        if keys.is_empty() {
            self.by_election.remove(election);
        }
        held
    }

    /// The lowest CreateRevision among `election`'s lease-less keys.
    pub fn lowest(&self, election: &str) -> Option<i64> {
        self.by_election
            .get(election)
            .and_then(|keys| keys.values().min().copied())
    }

    pub fn is_empty(&self) -> bool {
        self.by_election.is_empty()
    }

    pub fn clear(&mut self) {
        self.by_election.clear();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_lowest_stands_until_every_key_below_is_gone() {
        let mut b = Blockers::default();
        assert_eq!(b.put("/a", b"/a/x", 7, 1), Ok(()));
        assert_eq!(b.put("/a", b"/a/y", 3, 1), Ok(()));
        assert!(b.put("/b", b"/b/x", 1, 1).is_err(), "bounded");
        assert_eq!(b.lowest("/a"), Some(3));
        assert!(b.remove("/a", b"/a/y"));
        assert_eq!(b.lowest("/a"), Some(7));
        assert!(!b.remove("/a", b"/a/y"));
        assert!(b.remove("/a", b"/a/x"));
        assert_eq!(b.lowest("/a"), None);
        assert!(b.is_empty());
    }
}
