//! etcd's `concurrency` layout (`Election`, `Mutex`, `etcdctl elect` and
//! `lock`) under any prefix: a candidate is a key `<election>/<id>` (the
//! id is a hex lease id for etcd's clients, any suffix for others); every
//! election found under the prefix, at any depth. The lowest CreateRevision
//! leads, its CreateRevision is the token (what `concurrency` itself calls
//! `Rev()`), its value the holder (etcd's `Mutex` writes an empty one).
//!
//! A candidate has a lease: `concurrency` puts every candidate key under
//! its session's lease ([`Layout::candidates_hold_leases`]). A key without
//! one under the prefix (a config key beside the elections) is no
//! candidate: counted as an ignored key, its value never read as a holder
//! (nor shown as a label), and so is its deletion. Yet `Campaign` waits
//! for every key of its election created before its own, leased or not:
//! such a key with the lowest CreateRevision of its election blocks it
//! (nobody leads until it is deleted; the state keeps its CreateRevision,
//! never its value).
//!
//! No hint: `concurrency` writes nothing about how a term ended, so the
//! end cause is what the state machine can tell (a lease-less key deleted,
//! a lease etcd no longer knows) or `unknown`.

use super::path::{candidate, Prefix};
use super::{Layout, Role};
use crate::election::KeyLayout;

/// The name of this layout in `--source concurrency:PREFIX`.
pub const NAME: &str = "concurrency";

#[derive(Debug, Clone)]
pub struct Concurrency {
    prefix: Prefix,
}

impl Concurrency {
    /// `None` for a prefix that would claim the whole keyspace.
    pub fn new(prefix: &str) -> Option<Self> {
        Prefix::new(prefix).map(|prefix| Self { prefix })
    }
}

impl Layout for Concurrency {
    fn name(&self) -> &'static str {
        NAME
    }

    fn ranges(&self) -> Vec<(Vec<u8>, Vec<u8>)> {
        self.prefix.ranges()
    }

    fn classify(&self, key: &[u8], _lease: i64) -> Role {
        let prefix = self.prefix.bytes();
        if !key.starts_with(prefix) {
            return Role::Ignored;
        }
        let Some(slash) = key.iter().rposition(|b| *b == b'/') else {
            return Role::Invalid;
        };
        // The election is the parent path; it holds what the prefix names
        // (a prefix `/app/el` does not make `/app/el1` a candidate of `/app`).
        let parent = &key[..slash];
        let named = prefix.strip_suffix(b"/").unwrap_or(prefix);
        if slash + 1 == key.len() || parent.is_empty() || parent.len() < named.len() {
            return Role::Invalid;
        }
        candidate(parent, KeyLayout::Queue)
    }

    fn candidates_hold_leases(&self) -> bool {
        true
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn cand(e: &str) -> Role {
        Role::Candidate {
            election: e.into(),
            kind: KeyLayout::Queue,
        }
    }

    #[test]
    fn a_candidate_belongs_to_its_parent_path_at_any_depth() {
        let c = Concurrency::new("/app/").expect("a prefix");
        assert_eq!(
            c.classify(b"/app/jobs/694d7a1b2c3d4e5f", 0x694d),
            cand("/app/jobs")
        );
        assert_eq!(c.classify(b"/app/a/b/c/12", 12), cand("/app/a/b/c"));
        assert_eq!(c.classify(b"/app/x", 0), cand("/app"), "the prefix's own");
        assert_eq!(c.classify(b"/app/jobs/", 0), Role::Invalid, "no id");
        assert_eq!(c.classify(b"/app/j\xff/1", 0), Role::Invalid);
        assert_eq!(c.classify(b"/other/x/1", 0), Role::Ignored);
    }

    #[test]
    fn a_prefix_without_a_slash_names_no_election_above_it() {
        let c = Concurrency::new("_ld/el").expect("a prefix");
        assert_eq!(c.classify(b"_ld/election/7", 7), cand("/_ld/election"));
        assert_eq!(c.classify(b"_ld/el1", 0), Role::Invalid);
        assert!(Concurrency::new("").is_none());
    }
}
