//! One key, one election: each key under the prefix is an election of its
//! own, led by whoever's value sits on it while it exists (hand-written
//! leases, Milvus-style session keys, a service's `…/leader`). Its token is
//! the key's CreateRevision; a key written again without being deleted,
//! with the same value and lease, is the same term. Anyone may write it:
//! a put with another value (holder) or another lease changed hands
//! ([`Layout::rewrite_changes_hands`]), a new term whose token is that
//! put's revision, the old one `taken_over`.

use super::path::{candidate, Prefix};
use super::{Layout, Role};
use crate::election::KeyLayout;

/// The name of this layout in `--source key:PREFIX`.
pub const NAME: &str = "key";

#[derive(Debug, Clone)]
pub struct Key {
    prefix: Prefix,
}

impl Key {
    /// `None` for a prefix that would claim the whole keyspace.
    pub fn new(prefix: &str) -> Option<Self> {
        Prefix::new(prefix).map(|prefix| Self { prefix })
    }
}

impl Layout for Key {
    fn name(&self) -> &'static str {
        NAME
    }

    fn ranges(&self) -> Vec<(Vec<u8>, Vec<u8>)> {
        self.prefix.ranges()
    }

    fn classify(&self, key: &[u8], _lease: i64) -> Role {
        if !key.starts_with(self.prefix.bytes()) {
            return Role::Ignored;
        }
        candidate(key, KeyLayout::Single)
    }

    fn rewrite_changes_hands(&self) -> bool {
        true
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_key_is_its_own_election() {
        let k = Key::new("by-dev/session/").expect("a prefix");
        let cand = |e: &str| Role::Candidate {
            election: e.into(),
            kind: KeyLayout::Single,
        };
        assert_eq!(
            k.classify(b"by-dev/session/rootcoord", 5),
            cand("/by-dev/session/rootcoord")
        );
        assert_eq!(
            k.classify(b"by-dev/session/a/b", 0),
            cand("/by-dev/session/a/b")
        );
        assert_eq!(k.classify(b"by-dev/session/\x01", 0), Role::Invalid);
        assert_eq!(k.classify(b"by-dev/other", 0), Role::Ignored);
    }
}
