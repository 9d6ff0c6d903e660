//! The per-election state machine: key changes of complete etcd revisions
//! in, transitions out. Pure: no I/O, no clock (times are passed in), so it
//! is tested without etcd and replays the same way every time.
//!
//! This file holds its types and its bookkeeping: elections by name, with
//! their candidates, leaders and waiting counts, idle ones forgotten. Each
//! of its jobs is a file of its own: `revision.rs` (one revision applied),
//! `snapshot.rs` (a snapshot loaded, reconciled with the terms history holds
//! open), `leader.rs` (keys read into candidates, the leader picked among
//! them), `candidates.rs` (an election's keys), `claims.rs` (terms a key's
//! value defines), `blockers.rs` (lease-less keys that block a
//! `concurrency` election), `members.rs` (standing requests; members that
//! say they are primaries), `collisions.rs` (nested names that both hold
//! keys), `emit.rs` (the events it emits); `tests/` (its tests, by
//! scenario).

use std::collections::HashMap;

use crate::election::KeyLayout;
use crate::events::{EndCause, Event, LeaseNow, WatchStatus};
use crate::layout::{Role, Source, Sources};

mod blockers;
mod candidates;
mod claims;
mod collisions;
mod emit;
mod leader;
mod members;
mod revision;
mod snapshot;

use blockers::Blockers;
use candidates::Candidates;
use claims::Claimed;
use emit::{ended, event, started};
use leader::{candidate, handed, leased, pick, unreadable};

/// A key-value as etcd holds it (decoupled from etcd-client's type).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Kv {
    pub key: Vec<u8>,
    pub value: Vec<u8>,
    pub create_revision: i64,
    pub mod_revision: i64,
    pub lease: i64,
}

/// One key change of a revision.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Change {
    Put(Kv),
    /// etcd sends a deletion without the key's previous value (the watch
    /// asks for none: etcd 3.4 reads each one apart, a cost quadratic in a
    /// large delete). `lease` is the key's lease as the state held it
    /// ([`State::known_leases`]); `None` when the state did not hold the key.
    Delete {
        key: Vec<u8>,
        revision: i64,
        lease: Option<i64>,
    },
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Term {
    pub token: i64,
    pub holder: String,
    pub lease_id: i64,
    pub layout: KeyLayout,
    pub key: Vec<u8>,
    pub started_revision: i64,
    pub started_at_ms: i64,
}

#[derive(Debug, Clone)]
struct Candidate {
    /// The token it leads with: its key's CreateRevision, or, for a key
    /// whose terms its value defines, the revision of the write that gave
    /// it to its holder (`claims.rs`).
    token: i64,
    lease: i64,
    layout: KeyLayout,
    value: String,
    /// For a layout whose rewrites change hands
    /// (`Layout::rewrite_changes_hands`): the key's CreateRevision (its
    /// token is the write that gave it to its holder). `None` for others.
    created: Option<i64>,
}

#[derive(Debug, Default)]
struct Election {
    candidates: Candidates,
    leader: Option<Term>,
    last_change_ms: i64,
    /// The waiting count last handed out by [`State::waiting_changes`].
    waiting_reported: usize,
    /// The last value read of its key, where its layout's terms are
    /// defined by the value (`claims.rs`); one such key per election.
    claim: Option<Box<Claimed>>,
}

impl Election {
    /// Queue-layout keys other than the leader's.
    fn waiting(&self) -> usize {
        let leader = self.leader.as_ref().map(|l| &l.key);
        self.candidates
            .iter()
            .filter(|(k, c)| c.layout == KeyLayout::Queue && Some(*k) != leader)
            .count()
    }
}

/// A transition whose end cause still needs etcd's word on the lease
/// (`cause_lookup`); every other event is final.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Pending {
    pub event: Event,
    pub cause_lookup: Option<i64>,
    /// What a `deleted` end is instead, by a standing request of the
    /// layout's (`Layout::read_standing`): a Patroni switchover.
    pub deleted_as: Option<EndCause>,
}

impl Pending {
    pub fn done(event: Event) -> Self {
        Self {
            event,
            cause_lookup: None,
            deleted_as: None,
        }
    }
}

/// What history saw of a snapshot read past the revision it saw last
/// (`to`): the keys whose rewrites change hands that etcd's log shows
/// written since only under the lease the snapshot shows (`kept`).
#[derive(Debug, Clone, Default)]
pub struct Seen {
    pub to: i64,
    pub kept: std::collections::HashSet<Vec<u8>>,
}

/// All elections under the prefix, as of the last applied revision.
pub struct State {
    /// Where elections are read from, and how (`crate::layout`).
    sources: Sources,
    max_elections: usize,
    elections: HashMap<String, Election>,
    /// Elections whose candidates changed since [`State::waiting_changes`].
    dirty: std::collections::HashSet<String>,
    /// Pairs of elections (ancestor, nested) that both hold keys: etcd's
    /// own `Election` of the ancestor takes the nested one's keys for its
    /// candidates. Reported once when they arise.
    collisions: std::collections::HashSet<(String, String)>,
    /// The elections that hold keys, in order: the ones nested under a
    /// name are one range of it (`name/` up to `name0`).
    holding: std::collections::BTreeSet<String>,
    /// Standing requests by election (`Role::Standing`), as their layout
    /// read them; at most one per election.
    standing: HashMap<String, crate::layout::Standing>,
    /// Members that say they are primaries, by election (`Role::Member`),
    /// and those already reported as a second primary.
    primaries: HashMap<String, std::collections::BTreeSet<String>>,
    reported_primaries: HashMap<String, std::collections::BTreeSet<String>>,
    /// Lease-less keys where candidates hold leases: the lowest blocks
    /// every candidate after it (`blockers.rs`).
    blockers: Blockers,
}

impl State {
    pub fn new(sources: Sources, max_elections: usize) -> Self {
        Self {
            sources,
            max_elections,
            elections: HashMap::new(),
            dirty: Default::default(),
            collisions: Default::default(),
            holding: Default::default(),
            standing: HashMap::new(),
            primaries: HashMap::new(),
            reported_primaries: HashMap::new(),
            blockers: Blockers::default(),
        }
    }

    pub fn len(&self) -> usize {
        self.elections.len()
    }

    pub fn is_empty(&self) -> bool {
        self.elections.is_empty()
    }

    /// Current leaders: election → (token, lease).
    pub fn leaders(&self) -> impl Iterator<Item = (&str, &Term)> {
        self.elections
            .iter()
            .filter_map(|(n, e)| e.leader.as_ref().map(|t| (n.as_str(), t)))
    }

    pub fn leader(&self, election: &str) -> Option<&Term> {
        self.elections.get(election).and_then(|e| e.leader.as_ref())
    }

    /// Elections whose key's value defines their terms (Kubernetes
    /// Leases), the watch known complete up to `live_at_ms`: how many have
    /// lapsed (held, with no write of their key arrived for longer than the
    /// duration the last one gave, while the watch was there to see one:
    /// renewals stopped, nobody took over yet), and each one whose last
    /// write or lapse changed since the last call. One pass over the
    /// elections.
    pub fn renewing(&mut self, live_at_ms: i64) -> (usize, Vec<LeaseNow>) {
        let mut lapsed = 0;
        let mut changed = Vec::new();
        for (name, e) in &mut self.elections {
            let Some(c) = e.claim.as_mut() else { continue };
            let now = c.lapsed(live_at_ms);
            lapsed += usize::from(now);
            changed.extend(c.report(name, now));
        }
        (lapsed, changed)
    }

    /// Fills in the lease of each deletion of `changes` that has none, from
    /// the candidate the state holds under that key. Call it before the
    /// revision is applied: the state still holds what was deleted.
    pub fn known_leases(&self, changes: &mut [Change]) {
        for change in changes {
            if let Change::Delete {
                key,
                lease: lease @ None,
                ..
            } = change
            {
                *lease = self.lease_of(key);
            }
        }
    }

    /// The lease of the candidate held under `key`; `None` when the state
    /// holds no such key (or, against its invariant, two: then the lease is
    /// not known).
    fn lease_of(&self, key: &[u8]) -> Option<i64> {
        match self.holders(key)[..] {
            [(_, lease, _)] => Some(lease),
            _ => None,
        }
    }

    /// The elections holding `key` as a candidate, with its lease and
    /// layout: where the key's layout put it with the lease its path names
    /// ([`Sources::lease_named`]: etcd's queue layout), and where it put it
    /// with none. One at most: a key put again under a lease that reads it
    /// as another election's leaves the first (`revision.rs`,
    /// `leave_other_reading`).
    pub(super) fn holders(&self, key: &[u8]) -> Vec<(String, i64, KeyLayout)> {
        let named = self.sources.lease_named(key);
        let mut found: Vec<(String, i64, KeyLayout)> = Vec::new();
        for lease in named.into_iter().chain([0]) {
            let (_, Role::Candidate { election, .. }) = self.sources.classify(key, lease) else {
                continue;
            };
            if found.iter().any(|(e, _, _)| *e == election) {
                continue;
            }
            let held = self
                .elections
                .get(&election)
                .and_then(|e| e.candidates.get(key));
            if let Some(c) = held.filter(|c| lease == 0 || c.lease == lease) {
                found.push((election, c.lease, c.layout));
            }
        }
        found
    }

    /// What `key` (under `lease`) is: its source, its role there (a
    /// candidate without the lease its layout's candidates hold is none:
    /// [`leased`]), and whether a rewrite of it changes hands.
    fn role_of(&self, key: &[u8], lease: i64) -> (Option<&Source>, Role, bool) {
        let (source, role) = self.sources.classify(key, lease);
        let hands = source.is_some_and(|s| s.layout().rewrite_changes_hands());
        (source, leased(source, role, lease), hands)
    }

    /// The election a key put without a lease would be a candidate of,
    /// where its layout's candidates hold leases (`blockers.rs`); `None`
    /// for any other key.
    fn lease_less(&self, key: &[u8], lease: i64) -> Option<String> {
        let (source, role) = self.sources.classify(key, lease);
        source?.lease_less(&role, lease).map(str::to_owned)
    }

    /// The election's entry, created if there is room. `Err` carries the
    /// overflow status to report.
    fn track(&mut self, name: &str, at_ms: i64) -> Result<&mut Election, WatchStatus> {
        if self.elections.contains_key(name) {
            return self.elections.get_mut(name).ok_or(WatchStatus::IgnoredKey);
        }
        self.track_owned(name.to_owned(), at_ms)
    }

    /// [`State::track`] for a name the caller owns: no copy of it is made.
    fn track_owned(&mut self, name: String, at_ms: i64) -> Result<&mut Election, WatchStatus> {
        use std::collections::hash_map::Entry;
        let full = self.elections.len() >= self.max_elections;
        match self.elections.entry(name) {
            Entry::Occupied(e) => Ok(e.into_mut()),
            Entry::Vacant(e) if full => Err(WatchStatus::Overflow {
                election: e.into_key(),
            }),
            Entry::Vacant(e) => Ok(e.insert(Election {
                last_change_ms: at_ms,
                ..Election::default()
            })),
        }
    }

    /// Elections whose waiting count changed since the last call: (name,
    /// count now).
    pub fn waiting_changes(&mut self) -> Vec<(String, usize)> {
        let mut out = Vec::new();
        for name in std::mem::take(&mut self.dirty) {
            let Some(e) = self.elections.get_mut(&name) else {
                continue;
            };
            let now = e.waiting();
            if now != e.waiting_reported {
                e.waiting_reported = now;
                out.push((name, now));
            }
        }
        out.sort();
        out
    }

    /// Forgets elections with no keys and no leader whose last change is
    /// older than `idle_before_ms`, so churn of names cannot fill the cap.
    pub fn forget_idle(&mut self, idle_before_ms: i64) -> Vec<String> {
        let gone: Vec<String> = self
            .elections
            .iter()
            .filter(|(_, e)| {
                e.candidates.is_empty() && e.leader.is_none() && e.last_change_ms < idle_before_ms
            })
            .map(|(n, _)| n.clone())
            .collect();
        for n in &gone {
            self.elections.remove(n);
        }
        gone
    }
}

#[cfg(test)]
mod tests;
