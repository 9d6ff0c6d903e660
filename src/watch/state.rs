//! The per-election state machine: key changes of complete etcd revisions
//! in, transitions out. Pure: no I/O, no clock (times are passed in), so it
//! is tested without etcd and replays the same way every time.

use std::collections::HashMap;
use std::ops::Bound;

use crate::election::keys::holder_of;
use crate::election::KeyLayout;
use crate::events::{EndCause, Event, EventKind, LeaseNow, OpenTerm, TermRenewals, WatchStatus};
use crate::layout::{Claim, Reading, Role, Source, Sources, Unreadable};

mod revision;

mod candidates;
use candidates::Candidates;

mod blockers;
use blockers::Blockers;

mod claims;
use claims::Claimed;

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

    /// The standing request of `election` as its layout read it, or none
    /// (deleted, malformed).
    fn stand(&mut self, election: String, read: Option<crate::layout::Standing>) {
        match read {
            Some(s)
                if self.standing.len() < self.max_elections
                    || self.standing.contains_key(&election) =>
            {
                self.standing.insert(election, s);
            }
            _ => {
                self.standing.remove(&election);
            }
        }
    }

    /// Member `member` of `election` says it is a primary, or not (or is
    /// gone). Bounded: at most `max_elections` elections, 64 members each.
    fn member_says(&mut self, election: &str, member: String, primary: bool) {
        if !primary {
            if let Some(p) = self.primaries.get_mut(election) {
                p.remove(&member);
                if p.is_empty() {
                    self.primaries.remove(election);
                }
            }
            return;
        }
        if self.primaries.len() >= self.max_elections && !self.primaries.contains_key(election) {
            return;
        }
        let p = self.primaries.entry(election.to_owned()).or_default();
        if p.len() < 64 {
            p.insert(member);
        }
    }

    /// `two_primaries` for each member of `name` that says it is a primary
    /// while another holds the leader key, once until it stops saying so.
    fn two_primaries(&mut self, name: &str, revision: i64, at_ms: i64) -> Vec<Pending> {
        let leader = self.elections.get(name).and_then(|e| e.leader.as_ref());
        let second: std::collections::BTreeSet<String> = match (leader, self.primaries.get(name)) {
            (Some(l), Some(p)) => p.iter().filter(|m| **m != l.holder).cloned().collect(),
            _ => Default::default(),
        };
        let (holder, token) = leader.map_or((String::new(), 0), |l| (l.holder.clone(), l.token));
        let before = self.reported_primaries.remove(name).unwrap_or_default();
        let out = second
            .difference(&before)
            .map(|member| {
                Pending::done(event(
                    revision,
                    at_ms,
                    name,
                    EventKind::TwoPrimaries {
                        member: member.clone(),
                        leader: holder.clone(),
                        token,
                    },
                ))
            })
            .collect();
        if !second.is_empty() {
            self.reported_primaries.insert(name.to_owned(), second);
        }
        out
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

    /// The election's entry, created if there is room. `Err` carries the
    /// overflow status to report.
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

    /// Replaces the state with a snapshot read at `revision`, reconciled with
    /// the terms history holds as open. Terms that match are adopted
    /// silently; an open term that is gone ended in history etcd no longer
    /// has (`EndCause::Unknown`); a leader history did not know started
    /// before the watcher saw it (`from_snapshot`).
    pub fn load(
        &mut self,
        revision: i64,
        kvs: &[Kv],
        open: &[OpenTerm],
        at_ms: i64,
    ) -> (Vec<Event>, Vec<WatchStatus>) {
        self.load_after(revision, kvs, open, None, at_ms)
    }

    /// [`State::load`] of a snapshot read past what history saw (`None`:
    /// at the revision history saw last), what came between not known (a
    /// gap): a term of a key whose rewrites change hands, written after
    /// it and not known to have kept its lease, is not adopted
    /// ([`Election::adopts_handed`]).
    pub fn load_after(
        &mut self,
        revision: i64,
        kvs: &[Kv],
        open: &[OpenTerm],
        seen_to: Option<&Seen>,
        at_ms: i64,
    ) -> (Vec<Event>, Vec<WatchStatus>) {
        // What was reported before stays known, so a count that dropped
        // to 0 during a gap is reported too.
        let reported: HashMap<String, usize> = self
            .elections
            .iter()
            .filter(|(_, e)| e.waiting_reported > 0)
            .map(|(n, e)| (n.clone(), e.waiting_reported))
            .collect();
        self.elections.clear();
        self.standing.clear();
        self.primaries.clear();
        self.blockers.clear();
        // Room for them all at once: growing by doubling would move every
        // election, and hold both tables, several times.
        self.elections.reserve(kvs.len().min(self.max_elections));
        let mut statuses = Vec::new();
        for kv in kvs {
            self.load_key(kv, at_ms, &mut statuses);
        }
        // Elections history knows but etcd no longer has keys for.
        for t in open {
            if !self.elections.contains_key(&t.election) {
                if let Err(s) = self.track(&t.election, at_ms) {
                    statuses.push(s);
                }
            }
        }
        for (name, count) in reported {
            if let Ok(e) = self.track(&name, at_ms) {
                e.waiting_reported = count;
            }
        }
        let mut events = self.reconcile(revision, open, seen_to, at_ms);
        // Dirty, now the leaders are known: only the elections whose
        // waiting count differs from the one last reported (all that
        // `waiting_changes` would hand out), not every election
        // (100,000 names cloned, then each looked up again, at start-up).
        self.dirty = self
            .elections
            .iter()
            .filter(|(_, e)| e.waiting() != e.waiting_reported)
            .map(|(n, _)| n.clone())
            .collect();
        events.extend(self.collisions_after_load(revision, at_ms));
        (events, statuses)
    }

    /// One key of a snapshot, read through its source's layout.
    fn load_key(&mut self, kv: &Kv, at_ms: i64, statuses: &mut Vec<WatchStatus>) {
        let (source, role, hands) = self.role_of(&kv.key, kv.lease);
        let reading = source.and_then(|s| s.read(&role, &kv.value));
        match role {
            // A value that cannot be read tracks nothing.
            Role::Candidate { .. }
                if matches!(reading, Some(Reading::Claim(Claim::Unreadable(_)))) =>
            {
                if let Some(Reading::Claim(Claim::Unreadable(why))) = reading {
                    statuses.push(unreadable(why));
                }
            }
            Role::Candidate { election, kind } => match self.track_owned(election, at_ms) {
                Ok(e) => match reading {
                    Some(Reading::Claim(c)) => {
                        e.hold(kv, Claimed::read_in_snapshot(c, kv.mod_revision, at_ms))
                    }
                    _ => {
                        let c = if hands {
                            handed(kv, kind, None)
                        } else {
                            candidate(kv, kind)
                        };
                        e.candidates.insert(kv.key.clone(), c);
                    }
                },
                Err(s) => statuses.push(s),
            },
            Role::Standing { election } => match reading {
                Some(Reading::Standing(s)) => self.stand(election, Some(s)),
                _ => self.stand(election, None),
            },
            Role::Member { election, member } => {
                self.member_says(&election, member, reading == Some(Reading::Primary(true)));
            }
            Role::Invalid => {
                statuses.push(WatchStatus::IgnoredKey);
                if let Some(election) = self.lease_less(&kv.key, kv.lease) {
                    let max = self.max_elections;
                    let put = self
                        .blockers
                        .put(&election, &kv.key, kv.create_revision, max);
                    statuses.extend(put.err());
                }
            }
            _ => {}
        }
    }

    /// Each election's leader in the snapshot against the term history
    /// holds open: the same token is adopted (its start kept; for a key
    /// whose value defines its terms, the same holder: [`Election::adopts`]),
    /// anything else ends the open term (`unknown`) and starts the
    /// snapshot's.
    fn reconcile(
        &mut self,
        revision: i64,
        open: &[OpenTerm],
        seen_to: Option<&Seen>,
        at_ms: i64,
    ) -> Vec<Event> {
        let open: HashMap<&str, &OpenTerm> =
            open.iter().map(|t| (t.election.as_str(), t)).collect();
        let mut events = Vec::new();
        // In name order, without a copy of each name.
        let mut elections: Vec<(&String, &mut Election)> = self.elections.iter_mut().collect();
        elections.sort_unstable_by(|a, b| a.0.cmp(b.0));
        for (name, e) in elections {
            let now = pick(&e.candidates, self.blockers.lowest(name), revision, at_ms);
            let known = open.get(name.as_str());
            match (known, now) {
                (Some(k), Some(mut t))
                    if k.token == t.token || e.adopts(k, &t) || e.adopts_handed(k, &t, seen_to) =>
                {
                    t.token = k.token;
                    t.started_revision = k.started_revision;
                    t.started_at_ms = k.started_at_ms;
                    e.leader = Some(t);
                }
                (k, now) => {
                    if let (Some(k), Some(t), Some(seen)) = (k, &now, seen_to) {
                        // The same lease, written while nobody watched:
                        // it may have changed hands and back.
                        if t.token > seen.to && e.same_handed(k, t) {
                            let gap = EventKind::Gap {
                                from_revision: seen.to + 1,
                                to_revision: t.token,
                            };
                            events.push(event(revision, at_ms, name, gap));
                        }
                    }
                    if let Some(k) = k {
                        events.push(ended(revision, at_ms, name, k, EndCause::Unknown, None));
                    }
                    if let Some(t) = &now {
                        events.push(started(
                            revision,
                            at_ms,
                            name,
                            t,
                            k.map(|k| k.holder.clone()),
                            true,
                        ));
                    }
                    e.leader = now;
                }
            }
        }
        events
    }

    /// The collisions a snapshot holds: each reported unless it was
    /// already known before the snapshot.
    fn collisions_after_load(&mut self, revision: i64, at_ms: i64) -> Vec<Event> {
        let mut events = Vec::new();
        let before = std::mem::take(&mut self.collisions);
        self.holding = self
            .elections
            .iter()
            .filter(|(_, e)| !e.candidates.is_empty())
            .map(|(n, _)| n.clone())
            .collect();
        // Every pair (ancestor, nested) is found from its nested side: one
        // look-up per `/` of each name, no range per name.
        let pairs: Vec<(String, String)> = self
            .holding
            .iter()
            .flat_map(|name| {
                name.match_indices('/')
                    .map(|(i, _)| &name[..i])
                    .filter(|a| self.holding.contains(*a))
                    .map(move |a| (a.to_owned(), name.clone()))
            })
            .collect();
        for pair in pairs {
            if self.collisions.insert(pair.clone()) && !before.contains(&pair) {
                events.extend(collision_events(revision, at_ms, &pair));
            }
        }
        events
    }

    /// The collisions election `name` takes part in now: with every
    /// election whose name is a proper path prefix of it, and every one
    /// nested under it, that holds keys while it does too.
    fn collisions_of(&self, name: &str) -> Vec<(String, String)> {
        if !self.holding.contains(name) {
            return Vec::new();
        }
        let mut pairs: Vec<(String, String)> = name
            .match_indices('/')
            .map(|(i, _)| &name[..i])
            .filter(|a| self.holding.contains(*a))
            .map(|a| (a.to_owned(), name.to_owned()))
            .collect();
        // Every name under `name/` follows `name`, after the ones that go on
        // with a byte below `/` (`name-x`): found without building the
        // bounds (two strings per election at every start-up).
        let nested = self
            .holding
            .range::<str, _>((Bound::Excluded(name), Bound::Unbounded))
            .map(|n| (n, n.strip_prefix(name).map(|rest| rest.bytes().next())))
            // `name-x`, `name.x`, …: below `name/`.
            .skip_while(|(_, next)| matches!(next, Some(Some(b)) if *b < b'/'))
            .take_while(|(_, next)| *next == Some(Some(b'/')))
            .map(|(n, _)| n);
        pairs.extend(nested.map(|n| (name.to_owned(), n.clone())));
        pairs
    }

    /// Records the collisions that arose or ended with the changes of
    /// the `touched` elections; returns an event per election of each
    /// collision that arose.
    fn update_collisions(&mut self, touched: &[String], revision: i64, at_ms: i64) -> Vec<Event> {
        for name in touched {
            let holds = self
                .elections
                .get(name)
                .is_some_and(|e| !e.candidates.is_empty());
            if holds {
                self.holding.insert(name.clone());
            } else {
                self.holding.remove(name);
            }
        }
        let holding = &self.holding;
        self.collisions
            .retain(|(a, d)| holding.contains(a) && holding.contains(d));
        let mut out = Vec::new();
        for name in touched {
            for pair in self.collisions_of(name) {
                if self.collisions.insert(pair.clone()) {
                    out.extend(collision_events(revision, at_ms, &pair));
                }
            }
        }
        out
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

impl Election {
    /// Its key's value `claimed`, read at a write of `kv`: the key is a
    /// candidate while someone holds it, with the term's token.
    fn hold(&mut self, kv: &Kv, claimed: Claimed) {
        match claimed.holder() {
            Some((holder, token)) => {
                let c = Candidate {
                    token,
                    lease: kv.lease,
                    layout: KeyLayout::Lease,
                    value: holder_of(holder.as_bytes()),
                    created: None,
                };
                self.candidates.insert(kv.key.clone(), c);
            }
            None => {
                self.candidates.remove(&kv.key);
            }
        }
        self.claim = Some(Box::new(claimed));
    }

    /// Whether a term history holds open is the one a snapshot shows under
    /// a later token, for a key whose rewrites change hands (`handed`): the
    /// same lease, its token a write of this key (at or after its creation)
    /// at or before the snapshot's ([`Election::same_handed`]), and not
    /// written after `seen_to` (the revision history saw last, where the
    /// snapshot was read past it after a gap). Not the same holder: a
    /// rewrite under the same lease is the holder's own update of the same
    /// term (`leader_value_changed`), and history's row keeps the value the
    /// term started with. The key keeps history's token.
    ///
    /// A snapshot shows only a key's latest write: another lease (or none)
    /// and back to the term's between two writes is not in it. Read at the
    /// revision history saw last, the watch that follows replays every
    /// write since, each change of hands with it. Read past it (the log
    /// between compacted), a key written since is adopted only where what
    /// etcd still keeps of its log shows every write since under the
    /// term's lease ([`Seen::kept`]); otherwise it may have changed hands
    /// and back: not known, so the term is not adopted (it ends `unknown`,
    /// the snapshot's starts) and a `Gap` of the election says terms may be
    /// missing up to that write.
    fn adopts_handed(&mut self, open: &OpenTerm, now: &Term, seen_to: Option<&Seen>) -> bool {
        let same = self.same_handed(open, now)
            && seen_to.is_none_or(|s| now.token <= s.to || s.kept.contains(&now.key));
        if same {
            if let Some(c) = self.candidates.remove(&now.key) {
                self.candidates.insert(
                    now.key.clone(),
                    Candidate {
                        token: open.token,
                        ..c
                    },
                );
            }
        }
        same
    }

    /// Whether a snapshot's term `now` of a key whose rewrites change hands
    /// holds the lease of the term history holds open, from a write at or
    /// after its key's creation up to the snapshot's token: the same term
    /// unless the key changed hands and back in between.
    fn same_handed(&self, open: &OpenTerm, now: &Term) -> bool {
        self.candidates.get(&now.key).is_some_and(|c| {
            c.created.is_some_and(|created| created <= open.token)
                && open.token <= now.token
                && open.lease_id == now.lease_id
                && open.layout == now.layout
        })
    }

    /// Whether a term history holds open is the one a snapshot shows under
    /// another token: a key whose terms its value defines, read in the
    /// snapshot with the token of its latest write (its term's first write
    /// is not in the value), held by the same holder since a write at or
    /// before it. The term keeps history's token.
    fn adopts(&mut self, open: &OpenTerm, now: &Term) -> bool {
        let same = now.layout == KeyLayout::Lease
            && open.holder == now.holder
            && open.token <= now.token
            && self.claim.is_some();
        if same {
            if let Some(c) = self.candidates.remove(&now.key) {
                self.candidates.insert(
                    now.key.clone(),
                    Candidate {
                        token: open.token,
                        ..c
                    },
                );
            }
            if let Some(claim) = &mut self.claim {
                claim.since = open.token;
            }
        }
        same
    }
}

/// The status a value that cannot be read is counted as.
fn unreadable(why: Unreadable) -> WatchStatus {
    match why {
        Unreadable::Encrypted => WatchStatus::EncryptedValue,
        Unreadable::Malformed => WatchStatus::IgnoredKey,
    }
}

/// A candidate of a layout whose candidates hold leases, without one (a
/// put under none, or the deletion of a key the state did not hold): no
/// candidate, counted as an ignored key (`Layout::candidates_hold_leases`).
fn leased(source: Option<&Source>, role: Role, lease: i64) -> Role {
    match source.and_then(|s| s.lease_less(&role, lease)) {
        Some(_) => Role::Invalid,
        None => role,
    }
}

fn candidate(kv: &Kv, layout: KeyLayout) -> Candidate {
    Candidate {
        token: kv.create_revision,
        lease: kv.lease,
        layout,
        value: holder_of(&kv.value),
        created: None,
    }
}

/// A candidate of a layout whose rewrites change hands, written over
/// `before` (its key as the state held it; `None`: a new key, or one read
/// in a snapshot, which shows only its latest write). The same lease
/// keeps the term's token (a value rewritten under it is the holder's own
/// update: `leader_value_changed`); another lease, or none where there was
/// one (a foreign put strips it), is a new term from this write. A
/// snapshot's rewritten key (ModRevision past its CreateRevision) may have
/// changed hands at any write up to its latest: its token is that write's
/// revision, never one that could be too early (history's own token is
/// adopted where it holds the term open: [`Election::adopts_handed`]).
fn handed(kv: &Kv, layout: KeyLayout, before: Option<&Candidate>) -> Candidate {
    let mut c = candidate(kv, layout);
    c.created = Some(kv.create_revision);
    c.token = match before.filter(|b| b.created == Some(kv.create_revision)) {
        Some(b) if b.lease == c.lease => b.token,
        _ => kv.mod_revision,
    };
    c
}

/// The leader among an election's keys (`layout::leader_of`: the lowest
/// token), unless a lease-less key created before it blocks it (`blocked`:
/// the lowest CreateRevision of those, `blockers.rs`): then nobody leads,
/// as etcd's own `Campaign` of every candidate waits for that key.
fn pick(candidates: &Candidates, blocked: Option<i64>, revision: i64, at_ms: i64) -> Option<Term> {
    let (key, c) = crate::layout::leader_of(candidates.iter(), |(_, c)| c.token)?;
    if blocked.is_some_and(|b| b < c.token) {
        return None;
    }
    Some(Term {
        token: c.token,
        holder: c.value.clone(),
        lease_id: c.lease,
        layout: c.layout,
        key: key.clone(),
        started_revision: revision,
        started_at_ms: at_ms,
    })
}

/// A collision between `ancestor` and `nested`, on the page of each.
fn collision_events(
    revision: i64,
    at_ms: i64,
    (ancestor, nested): &(String, String),
) -> [Event; 2] {
    [
        event(
            revision,
            at_ms,
            ancestor,
            EventKind::NameCollision {
                other: nested.clone(),
            },
        ),
        event(
            revision,
            at_ms,
            nested,
            EventKind::NameCollision {
                other: ancestor.clone(),
            },
        ),
    ]
}

fn event(revision: i64, at_ms: i64, election: &str, kind: EventKind) -> Event {
    Event {
        revision,
        at_ms,
        election: election.to_owned(),
        kind,
    }
}

fn started(
    revision: i64,
    at_ms: i64,
    election: &str,
    t: &Term,
    previous_holder: Option<String>,
    from_snapshot: bool,
) -> Event {
    event(
        revision,
        at_ms,
        election,
        EventKind::TermStarted {
            token: t.token,
            holder: t.holder.clone(),
            lease_id: t.lease_id,
            layout: t.layout,
            previous_holder,
            from_snapshot,
        },
    )
}

fn ended(
    revision: i64,
    at_ms: i64,
    election: &str,
    t: &OpenTerm,
    cause: EndCause,
    renewals: Option<TermRenewals>,
) -> Event {
    event(
        revision,
        at_ms,
        election,
        EventKind::TermEnded {
            token: t.token,
            holder: t.holder.clone(),
            lease_id: t.lease_id,
            cause,
            started_revision: t.started_revision,
            started_at_ms: t.started_at_ms,
            renewals,
        },
    )
}

#[cfg(test)]
mod tests;
