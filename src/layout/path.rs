//! What other systems' layouts share: the range of a prefix, and the name
//! an election read from someone else's key is shown by.
//!
//! Their elections are named by their key path, always beginning with `/`
//! (`/service/pg/leader`, `/_ld/job` for a key `_ld/job`): tenure's own
//! names never do (`ElectionName`), so the two cannot collide. Kubernetes'
//! Leases are the one exception: they are named as Kubernetes names them,
//! `NAMESPACE/NAME` ([`lease_name`]), which tenure's own
//! names could also be; so a cluster reads one of the two, never both
//! (`Source::overlaps`), and a name is read as that cluster's
//! ([`WatchedName::parse_in`]).

use super::Role;
use crate::election::ElectionName;

/// The longest election path accepted from etcd (a longer one is counted
/// as an ignored key): history, labels and pages stay bounded.
pub const MAX_PATH_BYTES: usize = 512;

/// `[prefix, end)`: every key that begins with `prefix` (etcd's own rule:
/// the last byte below 0xff incremented, what follows dropped). `None` for
/// an empty prefix or one of 0xff bytes only: the whole keyspace, which a
/// source may not claim.
pub fn prefix_range(prefix: &[u8]) -> Option<(Vec<u8>, Vec<u8>)> {
    let last = prefix.iter().rposition(|b| *b != 0xff)?;
    let mut end = prefix[..=last].to_vec();
    end[last] += 1;
    Some((prefix.to_vec(), end))
}

/// The name of the election at key path `path`: UTF-8 without control
/// characters, at most [`MAX_PATH_BYTES`], with a leading `/` added where
/// it has none. `None`: malformed (an ignored key).
pub fn watched_path(path: &[u8]) -> Option<String> {
    let s = std::str::from_utf8(path).ok()?;
    if s.is_empty() || s.len() >= MAX_PATH_BYTES || s.chars().any(char::is_control) {
        return None;
    }
    Some(if s.starts_with('/') {
        s.to_owned()
    } else {
        format!("/{s}")
    })
}

/// The name of the Lease `namespace`/`name`: `NAMESPACE/NAME`, each part
/// UTF-8 without control characters or `/`, shorter than
/// [`MAX_PATH_BYTES`] together. kube-apiserver allows far less (DNS
/// labels and subdomains); a key written past it is shown by the same
/// rule, never guessed. `None`: an invalid key.
pub fn lease_name(namespace: &[u8], name: &[u8]) -> Option<String> {
    let (ns, n) = (
        std::str::from_utf8(namespace).ok()?,
        std::str::from_utf8(name).ok()?,
    );
    let full = format!("{ns}/{n}");
    is_lease_name(&full).then_some(full)
}

/// The name a Lease has now that an earlier tenure named by its etcd path,
/// `/PREFIX…/NAMESPACE/NAME` (its last two segments; the prefix may be `/`
/// alone); `None` for a name of no such shape. For a history's rename
/// (`history::lease_names`) and the hints that old names get.
pub fn lease_name_of_path(old: &str) -> Option<String> {
    let path = old.strip_prefix('/')?;
    let mut parts = path.rsplitn(3, '/');
    let (name, namespace) = (parts.next()?, parts.next()?);
    let full = format!("{namespace}/{name}");
    is_lease_name(&full).then_some(full)
}

/// Whether `name` is a Lease's name as [`lease_name`] makes them.
pub fn is_lease_name(name: &str) -> bool {
    let Some((ns, n)) = name.split_once('/') else {
        return false;
    };
    let part = |p: &str| !p.is_empty() && !p.contains('/') && !p.chars().any(char::is_control);
    name.len() < MAX_PATH_BYTES && part(ns) && part(n)
}

/// A prefix and the one key range it claims (never the whole keyspace):
/// what other systems' layouts read.
#[derive(Debug, Clone)]
pub struct Prefix {
    bytes: Vec<u8>,
    range: (Vec<u8>, Vec<u8>),
}

impl Prefix {
    /// `None` for a prefix that would claim the whole keyspace.
    pub fn new(prefix: &str) -> Option<Self> {
        Some(Self {
            range: prefix_range(prefix.as_bytes())?,
            bytes: prefix.as_bytes().to_vec(),
        })
    }

    pub fn bytes(&self) -> &[u8] {
        &self.bytes
    }

    /// Its range, as `Layout::ranges` gives it.
    pub fn ranges(&self) -> Vec<(Vec<u8>, Vec<u8>)> {
        vec![self.range.clone()]
    }
}

/// A candidate of the election at key path `path`, or `Invalid` where the
/// path cannot name one ([`watched_path`]).
pub fn candidate(path: &[u8], kind: crate::election::KeyLayout) -> Role {
    match watched_path(path) {
        Some(election) => Role::Candidate { election, kind },
        None => Role::Invalid,
    }
}

/// Whether `name` is the name of an election read from another system's
/// keys (a path), not one of tenure's own.
pub fn is_watched_path(name: &str) -> bool {
    name.starts_with('/')
}

/// An election name as the read-only pages and API take it: one of
/// tenure's own ([`ElectionName`]), another system's key path, or a
/// Kubernetes Lease (`NAMESPACE/NAME`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum WatchedName {
    Own(ElectionName),
    Path(String),
    Lease(String),
}

impl WatchedName {
    /// A path (beginning with `/`) as [`watched_path`] names one, else
    /// tenure's own name rules.
    pub fn parse(raw: &str) -> Result<Self, crate::election::Error> {
        Self::parse_in(raw, false)
    }

    /// [`WatchedName::parse`] in a cluster that reads Kubernetes' Leases
    /// when `leases` (`Sources::reads_leases`): there a name that is no
    /// path is a Lease's, `NAMESPACE/NAME`, never tenure's own (a cluster
    /// reads one of the two).
    pub fn parse_in(raw: &str, leases: bool) -> Result<Self, crate::election::Error> {
        if leases && !is_watched_path(raw) {
            return if is_lease_name(raw) {
                Ok(Self::Lease(raw.to_owned()))
            } else {
                Err(crate::election::Error::InvalidName {
                    name: raw.chars().take(64).collect(),
                    reason: "this cluster reads Kubernetes' Leases: a Lease is named \
                             NAMESPACE/NAME (kubectl get lease -n NAMESPACE NAME), and any other \
                             system's election by a path beginning with /",
                })
            };
        }
        if !is_watched_path(raw) {
            return ElectionName::new(raw).map(Self::Own);
        }
        match watched_path(raw.as_bytes()) {
            Some(p) if p == raw => Ok(Self::Path(p)),
            _ => Err(crate::election::Error::InvalidName {
                name: raw.chars().take(64).collect(),
                reason: "a watched election's path is UTF-8 without control characters, \
                         shorter than 512 bytes",
            }),
        }
    }

    pub fn as_str(&self) -> &str {
        match self {
            Self::Own(n) => n.as_str(),
            Self::Path(p) | Self::Lease(p) => p,
        }
    }

    /// tenure's own name: its keys can be read and written live.
    pub fn own(&self) -> Option<&ElectionName> {
        match self {
            Self::Own(n) => Some(n),
            Self::Path(_) | Self::Lease(_) => None,
        }
    }
}

impl std::str::FromStr for WatchedName {
    type Err = crate::election::Error;

    fn from_str(raw: &str) -> Result<Self, Self::Err> {
        Self::parse(raw)
    }
}

impl std::fmt::Display for WatchedName {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_prefix_range_is_etcds() {
        assert_eq!(
            prefix_range(b"/app/"),
            Some((b"/app/".to_vec(), b"/app0".to_vec()))
        );
        assert_eq!(
            prefix_range(b"a\xff"),
            Some((b"a\xff".to_vec(), b"b".to_vec()))
        );
        assert_eq!(prefix_range(b""), None);
        assert_eq!(prefix_range(b"\xff\xff"), None);
    }

    #[test]
    fn a_path_is_named_with_a_leading_slash() {
        assert_eq!(watched_path(b"/service/pg").as_deref(), Some("/service/pg"));
        assert_eq!(watched_path(b"_ld/job").as_deref(), Some("/_ld/job"));
        assert_eq!(watched_path(b"a\xffb"), None, "not UTF-8");
        assert_eq!(watched_path(b"a\nb"), None, "a control character");
        assert_eq!(watched_path(b""), None);
        assert_eq!(watched_path(&[b'a'; MAX_PATH_BYTES]), None);
    }

    #[test]
    fn a_name_is_tenures_own_or_a_path() {
        let lease = WatchedName::parse_in("kube-system/x", true).expect("a Lease");
        assert_eq!((lease.own(), lease.as_str()), (None, "kube-system/x"));
        assert!(WatchedName::parse_in("kube-system/x/y", true).is_err());
        assert!(WatchedName::parse_in("/app/x", true).is_ok_and(|n| n.own().is_none()));
        let own = WatchedName::parse("team/db").expect("own");
        assert!(own.own().is_some());
        let path = WatchedName::parse("/app/jobs x").expect("a path");
        assert_eq!((path.own(), path.as_str()), (None, "/app/jobs x"));
        assert!(WatchedName::parse("/a\u{7}").is_err());
        assert!(WatchedName::parse("a b").is_err(), "tenure's rules");
    }
}
