//! One key, one election: each key under the prefix is an election of its
//! own, led by whoever's value sits on it while it exists (hand-written
//! leases, Milvus-style session keys, a service's `…/leader`). Its token is
//! the key's CreateRevision: a key written again without being deleted is
//! the same term, as it is for tenure's own single key.

use super::path::{prefix_range, watched_path};
use super::{EndHint, Layout, Role};
use crate::election::Layout as KeyLayout;

/// The name of this layout in `--source key:PREFIX`.
pub const NAME: &str = "key";

#[derive(Debug, Clone)]
pub struct Key {
    prefix: Vec<u8>,
    range: (Vec<u8>, Vec<u8>),
}

impl Key {
    /// `None` for a prefix that would claim the whole keyspace.
    pub fn new(prefix: &str) -> Option<Self> {
        Some(Self {
            prefix: prefix.as_bytes().to_vec(),
            range: prefix_range(prefix.as_bytes())?,
        })
    }
}

impl Layout for Key {
    fn name(&self) -> &'static str {
        NAME
    }

    fn ranges(&self) -> Vec<(Vec<u8>, Vec<u8>)> {
        vec![self.range.clone()]
    }

    fn classify(&self, key: &[u8], _lease: i64) -> Role {
        if !key.starts_with(&self.prefix) {
            return Role::Ignored;
        }
        match watched_path(key) {
            Some(election) => Role::Candidate {
                election,
                kind: KeyLayout::Single,
            },
            None => Role::Invalid,
        }
    }

    fn read_hint(&self, _value: &[u8]) -> Option<EndHint> {
        None
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
