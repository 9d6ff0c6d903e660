//! Whether keys whose rewrites change hands (the `key` layout), written
//! after the revision history saw last while a snapshot was read past it
//! (the log between compacted), kept their lease at every write since:
//! read from what etcd still keeps of its log, one watch per source range.

use std::collections::{HashMap, HashSet};
use std::time::Duration;

use etcd_client::{EventType, GetOptions, WatchOptions};

use super::{Kv, Watcher};

/// The longest a read of the log kept since a revision may take: past it,
/// nothing is known (the keys are not said to have kept their leases).
const READ_FOR: Duration = Duration::from_secs(10);

/// A key written after the revision history saw: its latest write (the
/// snapshot's) and lease, and whether every write of it read so far kept
/// that lease.
struct Written {
    latest: i64,
    lease: i64,
    kept: bool,
    reached: bool,
}

impl Watcher {
    /// The keys of `kvs` (a snapshot read past `seen`, the revision
    /// history saw last) whose rewrites change hands, created at or before
    /// `seen` and written after it, of which etcd's log shows that every
    /// write after `seen` kept the lease the snapshot shows. A key written
    /// in the compacted part of the log, or whose log cannot be read, is
    /// not among them (not known). No request when no key was written.
    pub(super) async fn kept_leases(&self, seen: i64, kvs: &[Kv]) -> HashSet<Vec<u8>> {
        let mut written: HashMap<Vec<u8>, Written> = kvs
            .iter()
            .filter(|kv| kv.mod_revision > seen && kv.create_revision <= seen)
            .filter(|kv| {
                let (source, _) = self.sources.classify(&kv.key, kv.lease);
                source.is_some_and(|s| s.layout().rewrite_changes_hands())
            })
            .map(|kv| {
                let w = Written {
                    latest: kv.mod_revision,
                    lease: kv.lease,
                    kept: true,
                    reached: false,
                };
                (kv.key.clone(), w)
            })
            .collect();
        if written.is_empty() {
            return HashSet::new();
        }
        for (start, end) in self.sources.ranges() {
            let within = |k: &Vec<u8>| in_range(k, &start, &end);
            if !written.keys().any(within) {
                continue;
            }
            let read =
                tokio::time::timeout(READ_FOR, self.read_kept(seen, &start, &end, &mut written))
                    .await;
            if !matches!(read, Ok(Some(()))) {
                tracing::debug!(seen, "the log since the stored revision could not be read");
                written.retain(|k, _| !within(k));
            }
        }
        written
            .into_iter()
            .filter(|(_, w)| w.kept && w.reached)
            .map(|(k, _)| k)
            .collect()
    }

    /// Reads the writes of `start..end` after `seen` into `written`: from
    /// `seen + 1`, or where etcd compacted that, from its compact revision
    /// on, a key written up to it (in the compacted part) not kept.
    async fn read_kept(
        &self,
        seen: i64,
        start: &[u8],
        end: &[u8],
        written: &mut HashMap<Vec<u8>, Written>,
    ) -> Option<()> {
        let compacted = match self.watch_kept(seen + 1, start, end, written).await? {
            Watched::Compacted(c) => c,
            Watched::Read => return Some(()),
        };
        // Which keys were written in the compacted part: their state at the
        // compact revision, written after `seen`.
        let opts = GetOptions::new()
            .with_range(end.to_vec())
            .with_revision(compacted)
            .with_min_mod_revision(seen + 1)
            .with_keys_only();
        let mut kv = self
            .client
            .etcd()
            .kv_client()
            .max_decoding_message_size(super::MAX_MESSAGE_BYTES);
        let resp = self
            .client
            .op(kv.get(start.to_vec(), Some(opts)))
            .await
            .ok()?;
        for k in resp.kvs() {
            if let Some(w) = written.get_mut(k.key()) {
                w.kept = false;
            }
        }
        // A key whose latest write is compacted too was written there: all
        // that can be known of it is known.
        for w in written.values_mut().filter(|w| w.latest <= compacted) {
            w.kept = false;
            w.reached = true;
        }
        match self.watch_kept(compacted + 1, start, end, written).await? {
            Watched::Read => Some(()),
            // Compacted again meanwhile: not known.
            Watched::Compacted(_) => None,
        }
    }

    /// Watches `start..end` from `from` until every key of `written` in it
    /// was seen at its latest write, each write noted. `None`: the watch
    /// failed.
    async fn watch_kept(
        &self,
        from: i64,
        start: &[u8],
        end: &[u8],
        written: &mut HashMap<Vec<u8>, Written>,
    ) -> Option<Watched> {
        let within = |k: &Vec<u8>| in_range(k, start, end);
        let opts = WatchOptions::new()
            .with_range(end.to_vec())
            .with_start_revision(from);
        let mut client = self
            .client
            .etcd()
            .watch_client()
            .max_decoding_message_size(super::MAX_MESSAGE_BYTES);
        let mut stream = client.watch(start.to_vec(), Some(opts)).await.ok()?;
        let mut left: usize = written
            .iter()
            .filter(|(k, w)| within(k) && !w.reached)
            .count();
        while left > 0 {
            let resp = stream.message().await.ok()??;
            if resp.canceled() {
                return (resp.compact_revision() > 0)
                    .then(|| Watched::Compacted(resp.compact_revision()));
            }
            for e in resp.events() {
                let Some(kv) = e.kv() else { continue };
                let Some(w) = written.get_mut(kv.key()) else {
                    continue;
                };
                if w.reached {
                    continue;
                }
                let put = e.event_type() == EventType::Put;
                w.kept &= put && kv.lease() == w.lease;
                if kv.mod_revision() >= w.latest {
                    w.reached = true;
                    left -= 1;
                }
            }
        }
        // Dropped, the stream ends the watch.
        Some(Watched::Read)
    }
}

/// Whether `key` is in etcd's range `start..end` (`end` `\0`: every key
/// from `start` on).
fn in_range(key: &[u8], start: &[u8], end: &[u8]) -> bool {
    key >= start && (end == [0] || key < end)
}

/// What a watch of the log read: every key it waited for, or nothing (its
/// start revision was compacted: etcd's compact revision).
enum Watched {
    Read,
    Compacted(i64),
}
