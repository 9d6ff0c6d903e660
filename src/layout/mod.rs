//! Layouts: how an election is written in etcd, read by the watcher.
//!
//! A layout says, of one key, whose election it is and what it is to it
//! ([`Role`]); the state machine (`watch::state`) keeps every rule that does
//! not depend on the layout: the lowest CreateRevision among an election's
//! candidates leads, its CreateRevision is the token, a term whose key
//! still exists when another leads was `superseded`, a lease-less key can
//! only have been deleted, otherwise the layout's hint of the same
//! revision, otherwise etcd is asked about the lease. Adding a layout is a
//! file here and a line in [`by_name`]; the watcher, history, metrics and
//! pages are unchanged. The contract is written out in ARCHITECTURE.md
//! ("Layouts").
//!
//! A layout file imports `crate::election` (the key schema) and
//! `crate::events` only (tests/layering.rs holds it to that).
//!
//! Layouts: `tenure` (its own, under `--prefix`), and other systems' under
//! a prefix of the operator's (`--source LAYOUT:PREFIX`): `concurrency`
//! (etcd's `concurrency` package), `key` (one key, one election),
//! `patroni` (Patroni's PostgreSQL leader, one election per scope),
//! `kubernetes` (Kubernetes' Leases in kube-apiserver's etcd). Their
//! elections are named by key path (`path.rs`).
//!
//! Two kinds of term. Most layouts' terms are their keys': a candidate key
//! leads from its creation to its deletion. A layout whose keys are
//! rewritten in place by whoever holds them (a Kubernetes Lease) has terms
//! defined by the value instead: it says what one value claims
//! ([`Layout::read_claim`], a [`Claim`]), and the state machine keeps the
//! rule once: a term is a run of writes with one holder and one
//! acquisition ([`Hold::same_term`]), its token the revision of the first,
//! and how it ended is read from the value that ended it
//! ([`Hold::ended_by`]).

pub mod concurrency;
pub mod key;
pub mod kubernetes;
pub mod path;
pub mod patroni;
pub mod tenure;

use std::sync::Arc;

use crate::election::KeyLayout;
use crate::events::EndCause;

/// One way of writing elections into etcd. Object-safe: a watcher holds
/// its sources as `dyn Layout`.
pub trait Layout: Send + Sync + std::fmt::Debug {
    /// As written in `--source LAYOUT:PREFIX` and shown on pages.
    fn name(&self) -> &'static str;
    /// The key ranges this layout reads, each `[start, end)`.
    fn ranges(&self) -> Vec<(Vec<u8>, Vec<u8>)>;
    /// What one key (with its lease) is to this layout. Keys come from etcd
    /// and are untrusted: anything malformed is [`Role::Invalid`], never a
    /// panic.
    fn classify(&self, key: &[u8], lease: i64) -> Role;
    /// The lease a key's own path names, for a layout whose [`classify`]
    /// reads the lease (etcd's queue layout ends a candidate's key with its
    /// lease in hex). A deletion comes without the key's lease: the state
    /// finds the key where it put it by trying this lease, then none.
    /// (Default: none; the lease does not change what a key is.)
    ///
    /// [`classify`]: Layout::classify
    fn lease_named(&self, _key: &[u8]) -> Option<i64> {
        None
    }
    /// Whether every candidate of this layout is put under a lease (etcd's
    /// `concurrency` package): a [`Role::Candidate`] key put without one is
    /// none, counted as an ignored key, and so is the deletion of a key
    /// the state did not hold; with the lowest CreateRevision of its
    /// election it blocks it (nobody leads), as etcd's `Campaign` waits
    /// for it. (Default: no; a lease-less key leads too.)
    fn candidates_hold_leases(&self) -> bool {
        false
    }
    /// Whether a candidate key rewritten in place under another lease (or
    /// none where it had one) changed hands: a new term from that write's
    /// revision, the old one `taken_over` (the `key` layout, whose keys
    /// anyone may write). A rewrite under the same lease stays the holder's
    /// own update of its value. (Default: no; every rewrite is the same
    /// term.)
    fn rewrite_changes_hands(&self) -> bool {
        false
    }
    /// What the value of a [`Role::Hint`] key says: which term ended, and
    /// how. `None` when the value is malformed (counted as an ignored key).
    /// (Default: no hints, for layouts whose writers leave none.)
    fn read_hint(&self, _value: &[u8]) -> Option<EndHint> {
        None
    }
    /// What the current value of a [`Role::Standing`] key says about how
    /// the next term of its election ends. `None`: nothing (or malformed).
    fn read_standing(&self, _value: &[u8]) -> Option<Standing> {
        None
    }
    /// Whether the value of a [`Role::Member`] key says that member is a
    /// primary. `None`: malformed.
    fn read_member(&self, _value: &[u8]) -> Option<bool> {
        None
    }
    /// For a layout whose terms are defined by its keys' values, not by
    /// their creation: what one value of a [`Role::Candidate`] key claims.
    /// `None` (the default): this layout's terms are its keys', and the
    /// value is the holder.
    fn read_claim(&self, _value: &[u8]) -> Option<Claim> {
        None
    }
}

/// What one value of a key whose terms its value defines says
/// ([`Layout::read_claim`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Claim {
    /// Someone holds it.
    Held(Hold),
    /// Written with nobody holding it (client-go's release writes an empty
    /// holder): the term before, if any, was given up.
    Free { transitions: Option<i64> },
    /// A value that cannot be read: no term is read from it, and none is
    /// ended by it.
    Unreadable(Unreadable),
}

/// Why a value cannot be read.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Unreadable {
    /// Encrypted at rest by its writer (Kubernetes' `k8s:enc:`): only the
    /// writer's key could read it; counted apart, never guessed at.
    Encrypted,
    /// Not what the layout's writer writes.
    Malformed,
}

/// A holder's claim as written in the value, on the writer's clocks
/// (microseconds since the epoch): never compared with tenure's clock.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Hold {
    pub holder: String,
    /// When this holder acquired it (Kubernetes' `acquireTime`).
    pub acquired_us: Option<i64>,
    /// Its last renewal (`renewTime`).
    pub renewed_us: Option<i64>,
    /// How long a renewal holds it (`leaseDurationSeconds`).
    pub duration_s: Option<i64>,
    /// How many times it changed hands, by its writers' count
    /// (`leaseTransitions`): a cross-check, not a truth.
    pub transitions: Option<i64>,
}

impl Hold {
    /// Whether `next` is the same term: the same holder, acquired at the
    /// same time (a holder that released and took it again has a new
    /// acquisition).
    pub fn same_term(&self, next: &Hold) -> bool {
        self.holder == next.holder && self.acquired_us == next.acquired_us
    }

    /// When this holder's claim ran out: its last renewal (or acquisition)
    /// plus its duration, on its own clock.
    pub fn runs_out_us(&self) -> Option<i64> {
        let renewed = self.renewed_us.or(self.acquired_us)?;
        renewed.checked_add(self.duration_s?.checked_mul(1_000_000)?)
    }

    /// How this term ended when `next` was written over it. Nobody holding
    /// it: `resigned`. Another term acquired at or after this one's claim
    /// ran out (the writers' own clocks, as their takers judge it):
    /// `expired`; before it: `taken_over`. Times missing from either value:
    /// `unknown`. A next value that cannot be read ends nothing.
    pub fn ended_by(&self, next: &Claim) -> EndCause {
        match next {
            Claim::Free { .. } => EndCause::Resigned,
            Claim::Held(n) => match (self.runs_out_us(), n.acquired_us.or(n.renewed_us)) {
                (Some(out), Some(acquired)) if acquired >= out => EndCause::Expired,
                (Some(_), Some(_)) => EndCause::TakenOver,
                _ => EndCause::Unknown,
            },
            Claim::Unreadable(_) => EndCause::Unknown,
        }
    }

    /// Its writers' count of handovers.
    pub fn transitions(claim: &Claim) -> Option<i64> {
        match claim {
            Claim::Held(h) => h.transitions,
            Claim::Free { transitions } => *transitions,
            Claim::Unreadable(_) => None,
        }
    }
}

/// What a key is to a layout.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Role {
    /// A candidate of `election`: the lowest CreateRevision among an
    /// election's candidates leads; its token is that CreateRevision, its
    /// holder the key's value (cut to 256 bytes). `kind` is what events and
    /// pages call the key's layout; `Queue` candidates that do not lead are
    /// counted as waiting.
    Candidate { election: String, kind: KeyLayout },
    /// A key whose PUT, in the revision that ends a term of `election`,
    /// says how it ended ([`Layout::read_hint`]); its deletion means nothing.
    Hint { election: String },
    /// A key whose current value, while it stands, says how a term of
    /// `election` that ends by deletion (its lease alive) ended
    /// ([`Layout::read_standing`]): Patroni's `failover` request.
    Standing { election: String },
    /// A member of `election` that is not a candidate but says what it is
    /// ([`Layout::read_member`]): Patroni's `members/NAME`. One that says
    /// primary while another holds the leader key is `two_primaries`.
    Member { election: String, member: String },
    /// tenure's fence accepted a token for `resource` (value: the token).
    Fence { election: String, resource: String },
    /// tenure's fence refused one (value: the refusal record).
    Refusal { election: String, resource: String },
    /// A holder's acting record (`election::acting`), tenure's layout only.
    Acting { election: String },
    /// In the layout's ranges but none of its business (tenure's token
    /// floor), or outside them: nothing happened.
    Ignored,
    /// In the layout's ranges but malformed: counted as an ignored key.
    Invalid,
}

/// A hint's word on a term's end: the term of `token` ended by `cause`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct EndHint {
    pub token: i64,
    pub cause: EndCause,
}

/// A standing request's word: a term of `holder` deleted while its lease
/// lives ended by `cause` (a deletion by expiry or revocation is not it).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Standing {
    pub holder: String,
    pub cause: EndCause,
}

/// What a key's value says, read by the layout that gave the key its role.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Reading {
    Hint(EndHint),
    Standing(Standing),
    /// A member says it is a primary, or not.
    Primary(bool),
    /// A candidate of a layout whose terms its values define.
    Claim(Claim),
}

/// A layout and the prefix it was given: one source of elections.
#[derive(Debug, Clone)]
pub struct Source {
    layout: Arc<dyn Layout>,
    prefix: String,
    /// The layout's ranges, read once: every key of a revision is placed
    /// by them.
    ranges: Arc<[(Vec<u8>, Vec<u8>)]>,
}

/// A `--source` that cannot be read, or sources that cannot be read
/// together.
#[derive(Debug, thiserror::Error)]
pub enum SourceError {
    #[error("`{0}` is not LAYOUT:PREFIX (for example concurrency:/app/elections/); layouts: {layouts}", layouts = NAMES.join(", "))]
    Malformed(String),
    #[error("no layout is called `{0}`; layouts: {layouts}", layouts = NAMES.join(", "))]
    UnknownLayout(String),
    #[error("the {0} source needs a prefix: it may not claim the whole keyspace")]
    EmptyPrefix(String),
    #[error(
        "sources {0} and {1} overlap: every key must belong to one source; give prefixes \
         that are not prefixes of one another"
    )]
    Overlap(String, String),
    #[error(
        "sources {0} and {1} would name two elections alike: Kubernetes' Leases are named \
         NAMESPACE/NAME, as tenure's own elections and other Leases may be; read them in a \
         cluster of their own (serve --source kubernetes:PREFIX reads Leases without tenure's \
         own, or give each its own [[cluster]])"
    )]
    SameNames(String, String),
}

impl Source {
    pub fn new(layout: Arc<dyn Layout>, prefix: impl Into<String>) -> Self {
        Self {
            ranges: layout.ranges().into(),
            layout,
            prefix: prefix.into(),
        }
    }

    /// tenure's own layout under `prefix` (`--prefix`).
    pub fn tenure(prefix: &str) -> Self {
        Self::new(Arc::new(tenure::Tenure::new(prefix)), prefix)
    }

    /// tenure's own layout under `prefix`, as exactly `P election/` and
    /// `P fence/` (beside other sources).
    pub fn tenure_exact(prefix: &str) -> Self {
        Self::new(Arc::new(tenure::Tenure::exact(prefix)), prefix)
    }

    /// `LAYOUT:PREFIX`, as `--source` takes it.
    pub fn parse(spec: &str) -> Result<Self, SourceError> {
        let (name, prefix) = spec
            .split_once(':')
            .ok_or_else(|| SourceError::Malformed(spec.to_owned()))?;
        by_name(name.trim(), prefix)
    }

    pub fn layout(&self) -> &dyn Layout {
        &*self.layout
    }

    pub fn prefix(&self) -> &str {
        &self.prefix
    }

    /// What `value` says to this source's layout, for a key of `role`
    /// (a hint, a standing request, a member); `None` for other roles, or
    /// a malformed value.
    pub fn read(&self, role: &Role, value: &[u8]) -> Option<Reading> {
        match role {
            Role::Hint { .. } => self.layout.read_hint(value).map(Reading::Hint),
            Role::Standing { .. } => self.layout.read_standing(value).map(Reading::Standing),
            Role::Member { .. } => self.layout.read_member(value).map(Reading::Primary),
            Role::Candidate { .. } => self.layout.read_claim(value).map(Reading::Claim),
            _ => None,
        }
    }

    /// The election of a key read as `role` under `lease` that is a
    /// candidate without the lease this layout's candidates hold
    /// ([`Layout::candidates_hold_leases`]): no candidate, but etcd's
    /// `Campaign` waits for it, so it may block that election. `None` for
    /// any other key.
    pub fn lease_less<'r>(&self, role: &'r Role, lease: i64) -> Option<&'r str> {
        match role {
            Role::Candidate { election, .. }
                if lease == 0 && self.layout.candidates_hold_leases() =>
            {
                Some(election)
            }
            _ => None,
        }
    }

    /// Whether `key` is in one of the layout's ranges.
    pub fn contains(&self, key: &[u8]) -> bool {
        self.ranges
            .iter()
            .any(|(start, end)| key >= start.as_slice() && key < end.as_slice())
    }

    /// How this source names its elections.
    fn names(&self) -> Names {
        if self.layout.name() == tenure::NAME {
            Names::Own
        } else if self.reads_leases() {
            Names::Leases
        } else if self.prefix.starts_with('/') {
            Names::Path(self.prefix.clone())
        } else {
            Names::Path(format!("/{}", self.prefix))
        }
    }

    /// Whether this source holds Kubernetes' Leases (named `NAMESPACE/NAME`).
    pub fn reads_leases(&self) -> bool {
        matches!(
            self.layout.name(),
            kubernetes::NAME | kubernetes::NAME_WITH_HEARTBEATS
        )
    }

    /// Whether an election called `name` could be this source's another
    /// system's: its names begin with the prefix as a path, or are Leases'.
    pub fn may_name(&self, name: &str) -> bool {
        let names = self.names();
        !matches!(names, Names::Own) && names.include(name)
    }

    /// The key path of this source's election `name`: the name less the
    /// leading `/` it was given where the prefix has none (`path.rs`).
    pub fn key_path<'a>(&self, name: &'a str) -> &'a str {
        if self.prefix.starts_with('/') {
            name
        } else {
            name.strip_prefix('/').unwrap_or(name)
        }
    }

    /// Whether two sources could both claim a key, or an election name.
    fn overlaps(&self, other: &Source) -> bool {
        let keys = self.layout.ranges().iter().any(|(s1, e1)| {
            other
                .layout
                .ranges()
                .iter()
                .any(|(s2, e2)| s1 < e2 && s2 < e1)
        });
        let names = match (self.names(), other.names()) {
            (Names::Path(a), Names::Path(b)) => a.starts_with(&b) || b.starts_with(&a),
            (Names::Path(_), _) | (_, Names::Path(_)) => false,
            // tenure's names and Leases' carry no prefix: two such sources
            // could both name an election `team/db`.
            _ => true,
        };
        keys || names
    }
}

impl std::fmt::Display for Source {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}:{}", self.layout.name(), self.prefix)
    }
}

/// How a source names its elections.
enum Names {
    /// tenure's own names (no prefix).
    Own,
    /// Kubernetes' `NAMESPACE/NAME` (no prefix).
    Leases,
    /// Paths beginning with this.
    Path(String),
}

impl Names {
    /// Whether `name` is one of these.
    fn include(&self, name: &str) -> bool {
        match self {
            Names::Own => !name.starts_with('/'),
            Names::Leases => path::is_lease_name(name),
            Names::Path(b) => name.starts_with(b.as_str()),
        }
    }
}

/// The sources one watcher reads: a key belongs to the first whose ranges
/// contain it.
#[derive(Debug, Clone)]
pub struct Sources(Vec<Source>);

impl Sources {
    pub fn new(sources: Vec<Source>) -> Self {
        Self(sources)
    }

    /// tenure's layout under `prefix`, alone (what `tenure serve` reads).
    pub fn tenure(prefix: &str) -> Self {
        Self(vec![Source::tenure(prefix)])
    }

    /// What `tenure serve` reads: tenure's own layout under `prefix` (its
    /// one range alone; beside other sources, exactly its two prefixes,
    /// which are merged anyway) and `more`; or `more` alone
    /// (`sources_only`, or a Kubernetes source among them: Leases are
    /// named as tenure's own elections are, so a cluster reads one of the
    /// two, and naming Leases says which). Refused where two overlap.
    pub fn for_serve(
        prefix: &str,
        more: Vec<Source>,
        sources_only: bool,
    ) -> Result<Self, SourceError> {
        let base = if sources_only || more.iter().any(Source::reads_leases) {
            Vec::new()
        } else if more.is_empty() {
            vec![Source::tenure(prefix)]
        } else {
            vec![Source::tenure_exact(prefix)]
        };
        Self(base).with(more)
    }

    /// These sources and `more`, refused where two overlap (a key or an
    /// election name both could claim).
    pub fn with(mut self, more: Vec<Source>) -> Result<Self, SourceError> {
        for source in more {
            if let Some(other) = self.0.iter().find(|s| s.overlaps(&source)) {
                let (a, b) = (other.to_string(), source.to_string());
                return Err(if other.reads_leases() || source.reads_leases() {
                    SourceError::SameNames(a, b)
                } else {
                    SourceError::Overlap(a, b)
                });
            }
            self.0.push(source);
        }
        Ok(self)
    }

    pub fn iter(&self) -> impl Iterator<Item = &Source> {
        self.0.iter()
    }

    /// Every key range of every source, in order.
    pub fn ranges(&self) -> Vec<(Vec<u8>, Vec<u8>)> {
        self.0.iter().flat_map(|s| s.layout.ranges()).collect()
    }

    /// The lease `key`'s path names, to its source's layout
    /// ([`Layout::lease_named`]).
    pub fn lease_named(&self, key: &[u8]) -> Option<i64> {
        self.0
            .iter()
            .find(|s| s.contains(key))
            .and_then(|s| s.layout.lease_named(key))
    }

    /// Whether an election called `name` is one these sources read: another
    /// system's whose names begin with its prefix, or tenure's own (names
    /// without a leading `/`) where tenure's layout is read.
    pub fn watches_name(&self, name: &str) -> bool {
        self.0.iter().any(|s| s.names().include(name))
    }

    /// Whether a term of `name` in `layout` could be one these sources
    /// read: a Lease's (`NAMESPACE/NAME`, the `lease` layout) where they
    /// read Leases, tenure's own (no path, not `lease`) where they read
    /// tenure's layout, a path under another system's prefix. A history's
    /// open term of a source no longer read (a `--source` dropped between
    /// two runs) is none of theirs: never a contradiction of their etcd.
    pub fn may_hold(&self, name: &str, layout: KeyLayout) -> bool {
        let lease = layout == KeyLayout::Lease;
        self.0.iter().any(|s| {
            let names = s.names();
            matches!(names, Names::Leases) == lease && names.include(name)
        })
    }

    /// Whether these sources read Kubernetes' Leases: their names that are
    /// no paths are Leases' (`NAMESPACE/NAME`), not tenure's own.
    pub fn reads_leases(&self) -> bool {
        self.0.iter().any(Source::reads_leases)
    }

    /// The source `key` belongs to and what it is to it; `None` (and
    /// [`Role::Ignored`]) outside every source.
    pub fn classify(&self, key: &[u8], lease: i64) -> (Option<&Source>, Role) {
        match self.0.iter().find(|s| s.contains(key)) {
            Some(s) => (Some(s), s.layout.classify(key, lease)),
            None => (None, Role::Ignored),
        }
    }
}

/// The candidates of one election in the order they lead: the lowest
/// token first (a key's CreateRevision; where a write began the term,
/// that write's revision), the others waiting in that order. The one rule
/// of who leads, for every layout: the state machine and `tenure leader`
/// both order by it.
pub fn lead_order<T>(candidates: &mut [T], token: impl Fn(&T) -> i64) {
    candidates.sort_by_key(token);
}

/// The candidate that leads ([`lead_order`]'s first).
pub fn leader_of<T>(
    candidates: impl IntoIterator<Item = T>,
    token: impl Fn(&T) -> i64,
) -> Option<T> {
    candidates.into_iter().min_by_key(token)
}

/// The token of a candidate key read at rest (a snapshot, `tenure
/// leader`), which shows only its latest write: its CreateRevision; where
/// a rewrite changes hands ([`Layout::rewrite_changes_hands`]), the
/// revision of that latest write (it changed hands at a write up to it:
/// never too early).
pub fn token_at_rest(layout: &dyn Layout, create_revision: i64, mod_revision: i64) -> i64 {
    if layout.rewrite_changes_hands() {
        mod_revision
    } else {
        create_revision
    }
}

/// The registry: the layout called `name`, under `prefix`.
pub fn by_name(name: &str, prefix: &str) -> Result<Source, SourceError> {
    let empty = || SourceError::EmptyPrefix(name.to_owned());
    let layout: Arc<dyn Layout> = match name {
        tenure::NAME => return Ok(Source::tenure(prefix)),
        concurrency::NAME => Arc::new(concurrency::Concurrency::new(prefix).ok_or_else(empty)?),
        key::NAME => Arc::new(key::Key::new(prefix).ok_or_else(empty)?),
        patroni::NAME => {
            let layout = patroni::Patroni::new(prefix).ok_or_else(empty)?;
            let namespace = String::from_utf8_lossy(layout.namespace()).into_owned();
            return Ok(Source::new(Arc::new(layout), namespace));
        }
        kubernetes::NAME | kubernetes::NAME_WITH_HEARTBEATS => {
            let heartbeats = name == kubernetes::NAME_WITH_HEARTBEATS;
            let layout = kubernetes::Kubernetes::new(prefix, heartbeats).ok_or_else(empty)?;
            return Ok(Source::new(
                Arc::new(layout),
                kubernetes::Kubernetes::prefix_of(prefix),
            ));
        }
        _ => return Err(SourceError::UnknownLayout(name.to_owned())),
    };
    Ok(Source::new(layout, prefix))
}

/// Every layout's name, as [`by_name`] takes it.
pub const NAMES: &[&str] = &[
    tenure::NAME,
    concurrency::NAME,
    key::NAME,
    patroni::NAME,
    kubernetes::NAME,
    kubernetes::NAME_WITH_HEARTBEATS,
];

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_registered_name_builds_its_layout() {
        for name in NAMES {
            let source = by_name(name, "p/").expect("registered");
            assert_eq!(source.layout().name(), *name);
            assert_eq!(source.prefix(), "p/");
            assert_eq!(
                Source::parse(&format!("{name}:p/"))
                    .expect("parsed")
                    .to_string(),
                format!("{name}:p/")
            );
        }
        assert!(matches!(
            by_name("no-such-layout", "p/"),
            Err(SourceError::UnknownLayout(_))
        ));
        assert!(matches!(
            Source::parse("concurrency"),
            Err(SourceError::Malformed(_))
        ));
        assert!(matches!(
            Source::parse("key:"),
            Err(SourceError::EmptyPrefix(_))
        ));
    }

    #[test]
    fn overlapping_sources_are_refused() {
        let base = || Sources::tenure("");
        let src = |s: &str| Source::parse(s).expect("parsed");
        // Inside tenure's own range.
        assert!(base().with(vec![src("key:election/x")]).is_err());
        // One prefix of the other.
        assert!(base()
            .with(vec![src("concurrency:/app/"), src("key:/app/x/")])
            .is_err());
        // The same names: `app/x` is shown as `/app/x`.
        assert!(base()
            .with(vec![src("key:app/"), src("key:/app/")])
            .is_err());
        // A name back to its key path, and which source may name it.
        assert_eq!(src("key:app/").key_path("/app/x"), "app/x");
        assert_eq!(src("key:/app/").key_path("/app/x"), "/app/x");
        assert!(src("key:app/").may_name("/app/x") && !src("key:app/").may_name("/apps/x"));
        // A second tenure source: both would name elections `db`.
        assert!(base().with(vec![src("tenure:b/")]).is_err());
        let ok = base()
            .with(vec![src("concurrency:/app/"), src("key:/apps/")])
            .expect("disjoint");
        assert_eq!(ok.ranges().len(), 3);
        assert_eq!(
            ok.classify(b"/apps/leader", 1).1,
            Role::Candidate {
                election: "/apps/leader".into(),
                kind: KeyLayout::Single
            }
        );
    }

    /// Leases are named `NAMESPACE/NAME`, as tenure's own elections may
    /// be: a cluster reads one of the two, and serve reads the Leases alone
    /// when it is given them.
    #[test]
    fn leases_and_tenures_own_names_are_never_read_together() {
        let src = |s: &str| Source::parse(s).expect("parsed");
        let both = Sources::tenure("").with(vec![src("kubernetes:/registry/")]);
        assert!(matches!(both, Err(SourceError::SameNames(..))), "{both:?}");
        assert!(Sources::new(vec![src("kubernetes:/registry/")])
            .with(vec![src("kubernetes+heartbeats:/other/")])
            .is_err());
        let serve = Sources::for_serve("", vec![src("kubernetes:/registry/")], false)
            .expect("Leases alone");
        assert!(serve.reads_leases());
        assert!(serve.watches_name("kube-system/x") && !serve.watches_name("team/a/b"));
        assert_eq!(serve.iter().count(), 1, "no tenure source beside Leases");
        // Beside paths of other systems: both.
        let mixed = Sources::for_serve(
            "",
            vec![src("kubernetes:/registry/"), src("patroni:/service/")],
            false,
        )
        .expect("disjoint names");
        assert!(mixed.watches_name("/service/pg") && mixed.watches_name("ns/x"));
        assert!(!Sources::tenure("").reads_leases());
    }

    #[test]
    fn a_key_belongs_to_the_source_whose_range_holds_it() {
        let sources = Sources::new(vec![Source::tenure("a/"), Source::tenure("b/")]);
        let (s, role) = sources.classify(b"b/election/x", 0);
        assert_eq!(s.map(Source::prefix), Some("b/"));
        assert_eq!(
            role,
            Role::Candidate {
                election: "x".into(),
                kind: KeyLayout::Single
            }
        );
        assert_eq!(sources.classify(b"c/election/x", 0).1, Role::Ignored);
        // Between `P election/` and `P fence0` but neither: inside the
        // range, none of its business.
        assert!(sources.iter().next().is_some_and(|s| s.contains(b"a/f")));
        assert_eq!(sources.classify(b"a/f", 0).1, Role::Ignored);
    }
}
