//! tenure's own layout: `P election/<name>` (a single key, tenure's
//! campaign), `P election/<name>/<lease-hex>` (etcd's `concurrency.Election`
//! queue, tenure's `--queue`), the end marker `P election/~end/<name>` (and
//! the legacy `P election/<name>/~end`) as the hint, `P fence/…` and the
//! token floor. Read through `election::keys`, the schema the election core
//! writes: one parser, not two.

use super::{EndHint, Layout, Role};
use crate::election::keys::{lease_hex, EndMarker, EndMarkerCause, Keys, NotSchema, SchemaKey};
use crate::events::EndCause;

/// The name of this layout in `--source tenure:PREFIX`.
pub const NAME: &str = "tenure";

#[derive(Debug, Clone)]
pub struct Tenure {
    keys: Keys,
    /// Two ranges, `P election/` and `P fence/` exactly, instead of the one
    /// between them.
    exact: bool,
}

impl Tenure {
    pub fn new(prefix: &str) -> Self {
        Self {
            keys: Keys::new(prefix),
            exact: false,
        }
    }

    /// Reads `P election/` and `P fence/` as two ranges, nothing between
    /// them: what a role granted read on exactly those prefixes may watch.
    /// Used beside other sources, whose ranges are merged anyway.
    pub fn exact(prefix: &str) -> Self {
        Self {
            keys: Keys::new(prefix),
            exact: true,
        }
    }
}

impl Layout for Tenure {
    fn name(&self) -> &'static str {
        NAME
    }

    /// One range for both `P election/` and `P fence/` (one stream keeps
    /// their events in revision order), or, [`Tenure::exact`], the two.
    fn ranges(&self) -> Vec<(Vec<u8>, Vec<u8>)> {
        if self.exact {
            return [self.keys.elections_root(), self.keys.fences_root()]
                .iter()
                .filter_map(|root| super::path::prefix_range(root.as_bytes()))
                .collect();
        }
        let (start, end) = self.keys.watch_range();
        vec![(start.into_bytes(), end.into_bytes())]
    }

    /// The last segment of a key, read as a lease in lower-case hex as etcd's
    /// queue layout writes it (and only as it writes it: `lease_hex` of the
    /// value gives the segment back).
    fn lease_named(&self, key: &[u8]) -> Option<i64> {
        let last = std::str::from_utf8(key).ok()?.rsplit_once('/')?.1;
        // As `lease_hex` writes it: a negative lease in two's complement.
        let lease = u64::from_str_radix(last, 16).ok()? as i64;
        (lease != 0 && lease_hex(lease) == last).then_some(lease)
    }

    fn classify(&self, key: &[u8], lease: i64) -> Role {
        match self.keys.parse(key, lease) {
            Ok(SchemaKey::Leader { name, layout }) => Role::Candidate {
                election: name.to_string(),
                kind: layout,
            },
            Ok(SchemaKey::EndMarker { name }) => Role::Hint {
                election: name.to_string(),
            },
            Ok(SchemaKey::Fence { name, resource }) => Role::Fence {
                election: name.to_string(),
                resource,
            },
            Ok(SchemaKey::Refusal { name, resource }) => Role::Refusal {
                election: name.to_string(),
                resource,
            },
            Ok(SchemaKey::Acting { name }) => Role::Acting {
                election: name.to_string(),
            },
            // tenure's token floor: not an election's.
            Ok(SchemaKey::Floor) | Err(NotSchema::Outside) => Role::Ignored,
            Err(NotSchema::Invalid) => Role::Invalid,
        }
    }

    /// The end marker `{"token":T,"cause":"resigned|deleted"}`, written by
    /// resign and depose in the txn that deletes the leader key.
    fn read_hint(&self, value: &[u8]) -> Option<EndHint> {
        let m = serde_json::from_slice::<EndMarker>(value).ok()?;
        Some(EndHint {
            token: m.token,
            cause: match m.cause {
                EndMarkerCause::Resigned => EndCause::Resigned,
                EndMarkerCause::Deleted => EndCause::Deleted,
            },
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::election::KeyLayout;

    #[test]
    fn each_key_of_the_schema_has_its_role() {
        let t = Tenure::new("p/");
        let cand = |e: &str, kind| Role::Candidate {
            election: e.into(),
            kind,
        };
        assert_eq!(t.classify(b"p/election/a", 0), cand("a", KeyLayout::Single));
        assert_eq!(
            t.classify(b"p/election/a/1f", 0x1f),
            cand("a", KeyLayout::Queue)
        );
        // Not the key's own lease: the single key of `a/1f`.
        assert_eq!(
            t.classify(b"p/election/a/1f", 0x2f),
            cand("a/1f", KeyLayout::Single)
        );
        let hint = Role::Hint {
            election: "a".into(),
        };
        assert_eq!(t.classify(b"p/election/~end/a", 0), hint);
        assert_eq!(t.classify(b"p/election/a/~end", 0), hint);
        assert_eq!(
            t.classify(b"p/fence/a/db", 0),
            Role::Fence {
                election: "a".into(),
                resource: "db".into()
            }
        );
        assert_eq!(
            t.classify(b"p/fence/a/db/~refusal", 0),
            Role::Refusal {
                election: "a".into(),
                resource: "db".into()
            }
        );
        assert_eq!(t.classify(b"p/election/~floor", 0), Role::Ignored);
        assert_eq!(
            t.classify(b"p/election/~acting/a/b", 0),
            Role::Acting {
                election: "a/b".into()
            }
        );
        assert_eq!(t.classify(b"q/election/a", 0), Role::Ignored);
        assert_eq!(t.classify(b"p/election/a\xff", 0), Role::Invalid);
        assert_eq!(t.classify(b"p/election/../x", 0), Role::Invalid);
    }

    #[test]
    fn exactly_the_two_prefixes_or_the_range_between() {
        let one = Tenure::new("p/").ranges();
        assert_eq!(one, vec![(b"p/election/".to_vec(), b"p/fence0".to_vec())]);
        let two = Tenure::exact("p/").ranges();
        assert_eq!(
            two,
            vec![
                (b"p/election/".to_vec(), b"p/election0".to_vec()),
                (b"p/fence/".to_vec(), b"p/fence0".to_vec())
            ]
        );
    }

    #[test]
    fn the_end_marker_is_the_hint() {
        let t = Tenure::new("");
        assert_eq!(
            t.read_hint(br#"{"token":7,"cause":"resigned"}"#),
            Some(EndHint {
                token: 7,
                cause: EndCause::Resigned
            })
        );
        assert_eq!(
            t.read_hint(br#"{"token":8,"cause":"deleted"}"#),
            Some(EndHint {
                token: 8,
                cause: EndCause::Deleted
            })
        );
        assert_eq!(t.read_hint(b"not json"), None);
    }
}
