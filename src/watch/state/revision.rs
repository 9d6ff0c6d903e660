//! One complete revision through the state machine: its key changes read
//! through the sources' layouts, then each touched election's leader picked
//! again, then the events of the queue and the fence.

use std::collections::{HashMap, HashSet};

use super::{
    candidate, ended, event, handed, pick, started, unreadable, Candidate, Change, Claimed,
    Election, Kv, Pending, State, Term,
};
use crate::election::acting::ActingRecord;
use crate::election::{fence::RefusalRecord, keys::parse_padded_token, KeyLayout};
use crate::events::{EndCause, EventKind, OpenTerm, TermRenewals, WatchStatus};
use crate::layout::{Claim, EndHint, Reading, Role};

/// A candidate key's layout, and whether a rewrite of it changes hands
/// (`Layout::rewrite_changes_hands`).
#[derive(Debug, Clone, Copy)]
struct Kind {
    layout: KeyLayout,
    rewrites_change_hands: bool,
}

/// What the changes of one revision said, before leaders are picked.
#[derive(Default)]
struct Said {
    /// Elections whose candidates changed, in the order of their first change.
    touched: Vec<String>,
    /// The same, to tell a first change from another in constant time (a
    /// request deleting 100,000 elections is one revision).
    touched_set: HashSet<String>,
    /// How a term ended, by election (tenure's end marker).
    hints: HashMap<String, EndHint>,
    /// A Kubernetes Lease term's renewals, by election, with the term's
    /// token: recorded with its end.
    renewals: HashMap<String, (i64, TermRenewals)>,
    /// The events that follow the revision's terms: the fence's and the
    /// holders' acting records, in key order; a refusal's leader is filled
    /// in at the end.
    after: Vec<(String, EventKind)>,
    /// Queue-layout keys that came (whether they wait is known once the
    /// revision's leader is) and waiting ones that went.
    came: Vec<(String, Vec<u8>)>,
    left: Vec<(String, Candidate)>,
    /// Elections whose members (`Role::Member`) changed.
    members: Vec<String>,
    /// Elections whose key's value says terms passed unseen between two
    /// revisions (`claims.rs`).
    unseen: HashMap<String, (i64, i64)>,
}

impl Said {
    /// Election `name`'s candidates changed.
    fn touch(&mut self, name: String) {
        if !self.touched_set.contains(&name) {
            self.touched_set.insert(name.clone());
            self.touched.push(name);
        }
    }
}

impl State {
    /// Applies every change of one complete revision and returns its
    /// transitions, in key order within the revision: for each election a
    /// term end comes before the next term's start.
    pub fn apply(
        &mut self,
        revision: i64,
        changes: &[Change],
        at_ms: i64,
    ) -> (Vec<Pending>, Vec<WatchStatus>) {
        let mut statuses = Vec::new();
        let mut said = Said::default();
        for change in changes {
            self.read_change(change, at_ms, &mut said, &mut statuses);
        }
        let collisions = self.update_collisions(&said.touched, revision, at_ms);
        self.dirty.extend(said.touched.iter().cloned());
        let mut out = Vec::new();
        for name in &said.touched {
            if let Some(&(from_revision, to_revision)) = said.unseen.get(name) {
                let gap = EventKind::Gap {
                    from_revision,
                    to_revision,
                };
                out.push(Pending::done(event(revision, at_ms, name, gap)));
            }
            out.extend(self.pick_again(name, &said, revision, at_ms));
        }
        out.extend(collisions.into_iter().map(Pending::done));
        // Only where some member says it is a primary, or did (Patroni's
        // sources): nothing is looked up for any other revision.
        if !self.primaries.is_empty() || !self.reported_primaries.is_empty() {
            let mut checked = std::collections::HashSet::new();
            for name in said.touched.iter().chain(&said.members) {
                if checked.insert(name.as_str()) {
                    out.extend(self.two_primaries(name, revision, at_ms));
                }
            }
        }
        out.extend(self.queue_events(said.left, said.came, revision, at_ms));
        out.extend(self.after_events(said.after, revision, at_ms, &mut statuses));
        (out, statuses)
    }

    /// Reads one key change through the layout of its source into `said`.
    fn read_change(
        &mut self,
        change: &Change,
        at_ms: i64,
        said: &mut Said,
        statuses: &mut Vec<WatchStatus>,
    ) {
        let (key, lease) = match change {
            Change::Put(kv) => (&kv.key, kv.lease),
            Change::Delete { key, lease, .. } => (key, lease.unwrap_or_default()),
        };
        let (source, role, hands) = self.role_of(key, lease);
        // A value is read by the layout that gave the key its role.
        let reading = match change {
            Change::Put(kv) => source.and_then(|s| s.read(&role, &kv.value)),
            Change::Delete { .. } => None,
        };
        match (role, change) {
            (Role::Candidate { election, .. }, Change::Put(kv))
                if matches!(reading, Some(Reading::Claim(_))) =>
            {
                if let Some(Reading::Claim(claim)) = reading {
                    self.claim_changed(election, kv, claim, at_ms, said, statuses);
                }
            }
            (Role::Candidate { election, kind }, _) => {
                let kind = Kind {
                    layout: kind,
                    rewrites_change_hands: hands,
                };
                self.candidate_read(election, kind, change, at_ms, said, statuses)
            }
            (Role::Hint { election }, Change::Put(_)) => match reading {
                Some(Reading::Hint(h)) => {
                    said.hints.insert(election, h);
                }
                _ => statuses.push(WatchStatus::IgnoredKey),
            },
            (Role::Fence { election, resource }, Change::Put(kv)) => {
                match parse_padded_token(&kv.value) {
                    Some(token) => said
                        .after
                        .push((election, EventKind::FenceAccepted { resource, token })),
                    None => statuses.push(WatchStatus::IgnoredKey),
                }
            }
            (Role::Refusal { election, resource }, Change::Put(kv)) => {
                match serde_json::from_slice::<RefusalRecord>(&kv.value) {
                    Ok(r) => said.after.push((
                        election,
                        EventKind::FenceRefused {
                            resource,
                            token: r.token,
                            reason: r.reason,
                            current_token: None,
                            current_holder: None,
                        },
                    )),
                    Err(_) => statuses.push(WatchStatus::IgnoredKey),
                }
            }
            (Role::Acting { election }, Change::Put(kv)) => match ActingRecord::parse(&kv.value) {
                Some(record) => said.after.push((election, EventKind::Acting { record })),
                None => statuses.push(WatchStatus::IgnoredKey),
            },
            // Deleted or malformed: no request stands.
            (Role::Standing { election }, _) => match reading {
                Some(Reading::Standing(s)) => self.stand(election, Some(s)),
                _ => self.stand(election, None),
            },
            (Role::Member { election, member }, _) => {
                self.member_says(&election, member, reading == Some(Reading::Primary(true)));
                said.members.push(election);
            }
            (Role::Invalid, _) => self.invalid_read(change, lease, said, statuses),
            // Not an election's, or deleted hints, fence keys and refusal
            // records: nothing happened.
            (Role::Ignored, _) | (_, Change::Delete { .. }) => {}
        }
    }

    /// A candidate key's change, read: where a put reads it as another
    /// election's than before, it leaves that one first.
    fn candidate_read(
        &mut self,
        election: String,
        kind: Kind,
        change: &Change,
        at_ms: i64,
        said: &mut Said,
        statuses: &mut Vec<WatchStatus>,
    ) {
        if let Change::Put(kv) = change {
            self.leave_other_reading(kv, &election, at_ms, said, statuses);
        }
        self.candidate_changed(election, kind, change, at_ms, said, statuses)
    }

    /// A key put again with a lease that reads it as another election's
    /// candidate (etcd's queue layout names a candidate's lease in its key:
    /// `a/1f` under lease 0x1f is `a`'s, under any other lease its own
    /// election) leaves the election its earlier reading held it in, in
    /// the same revision: one key, one election.
    fn leave_other_reading(
        &mut self,
        kv: &Kv,
        election: &str,
        at_ms: i64,
        said: &mut Said,
        statuses: &mut Vec<WatchStatus>,
    ) {
        // Only a key whose path names a lease reads two ways: every other
        // put (the watch loop's common case) has nothing to look up.
        if self.sources.lease_named(&kv.key).is_none() {
            return;
        }
        for (other, lease, layout) in self.holders(&kv.key) {
            if other == election {
                continue;
            }
            let gone = Change::Delete {
                key: kv.key.clone(),
                revision: kv.mod_revision,
                lease: Some(lease),
            };
            let kind = Kind {
                layout,
                rewrites_change_hands: false,
            };
            self.candidate_changed(other, kind, &gone, at_ms, said, statuses);
        }
    }

    /// A new value of a key whose terms its value defines (`claims.rs`):
    /// read over the last one, the end of the term before as a hint of this
    /// revision, the key a candidate while someone holds it.
    fn claim_changed(
        &mut self,
        name: String,
        kv: &Kv,
        claim: Claim,
        at_ms: i64,
        said: &mut Said,
        statuses: &mut Vec<WatchStatus>,
    ) {
        if let Claim::Unreadable(why) = claim {
            statuses.push(unreadable(why));
            if let Some(c) = self.elections.get_mut(&name).and_then(|e| e.claim.as_mut()) {
                c.written_unreadable(kv.mod_revision, at_ms);
            }
            return;
        }
        let e = match self.track(&name, at_ms) {
            Ok(e) => e,
            Err(s) => {
                statuses.push(s);
                return;
            }
        };
        let now = match e.claim.take() {
            Some(before) => {
                let step = before.next(claim, kv.mod_revision, at_ms);
                if let Some(hint) = step.ended {
                    said.hints.insert(name.clone(), hint);
                    if let Some(r) = step.renewals {
                        said.renewals.insert(name.clone(), (hint.token, r));
                    }
                }
                if let Some(unseen) = step.unseen {
                    said.unseen.insert(name.clone(), unseen);
                }
                step.now
            }
            None => Claimed::first(claim, kv.mod_revision, at_ms),
        };
        e.hold(kv, now);
        said.touch(name);
    }

    /// A key that is nothing to its layout, counted as an ignored key. One
    /// without a lease where candidates hold leases (`blockers.rs`): put,
    /// it blocks the candidates created after it; deleted, the lowest of
    /// them may lead from this revision (when etcd's `Campaign` returns).
    fn invalid_read(
        &mut self,
        change: &Change,
        lease: i64,
        said: &mut Said,
        statuses: &mut Vec<WatchStatus>,
    ) {
        statuses.push(WatchStatus::IgnoredKey);
        let (key, created) = match change {
            Change::Put(kv) => (&kv.key, Some(kv.create_revision)),
            Change::Delete { key, .. } => (key, None),
        };
        let Some(election) = self.lease_less(key, lease) else {
            return;
        };
        let changed = match created {
            Some(rev) => match self.blockers.put(&election, key, rev, self.max_elections) {
                Ok(()) => true,
                Err(s) => {
                    statuses.push(s);
                    false
                }
            },
            None => self.blockers.remove(&election, key),
        };
        // A lease-less key alone makes no election.
        if changed && self.elections.contains_key(&election) {
            said.touch(election);
        }
    }

    /// A candidate of election `name` came, changed or went.
    fn candidate_changed(
        &mut self,
        name: String,
        kind: Kind,
        change: &Change,
        at_ms: i64,
        said: &mut Said,
        statuses: &mut Vec<WatchStatus>,
    ) {
        if matches!(change, Change::Delete { .. }) && !self.elections.contains_key(&name) {
            // A key the state never held (its election untracked, or its
            // lease unknown and the key read as another election's): the
            // deletion changes nothing here, and must not start tracking.
            return;
        }
        if !self.blockers.is_empty() {
            // Put again under a lease, or deleted: no longer lease-less.
            let key = match change {
                Change::Put(kv) => &kv.key,
                Change::Delete { key, .. } => key,
            };
            self.blockers.remove(&name, key);
        }
        let e = match self.track(&name, at_ms) {
            Ok(e) => e,
            Err(s) => {
                statuses.push(s);
                return;
            }
        };
        match change {
            Change::Put(kv) => {
                let c = if kind.rewrites_change_hands {
                    handed(kv, kind.layout, e.candidates.get(&kv.key))
                } else {
                    candidate(kv, kind.layout)
                };
                let new = e.candidates.insert(kv.key.clone(), c).is_none();
                if new && kind.layout == KeyLayout::Queue {
                    said.came.push((name.clone(), kv.key.clone()));
                }
            }
            Change::Delete { key, .. } => {
                // A Lease deleted: its term's renewals, nobody acquiring it.
                let gone = e
                    .claim
                    .take()
                    .and_then(|c| c.term_renewals(None).map(|r| (c.since, r)));
                if let Some(r) = gone {
                    said.renewals.insert(name.clone(), r);
                }
                let was_leader = e.leader.as_ref().is_some_and(|l| &l.key == key);
                if let Some(c) = e.candidates.remove(key) {
                    if c.layout == KeyLayout::Queue && !was_leader {
                        said.left.push((name.clone(), c));
                    }
                }
            }
        }
        said.touch(name);
    }

    /// The leader of election `name` picked again after its candidates
    /// changed: a new holder value of the same term, or the old term's end
    /// and the new one's start.
    fn pick_again(&mut self, name: &str, said: &Said, revision: i64, at_ms: i64) -> Vec<Pending> {
        // A standing request naming the holder whose term ends here.
        let standing = self.standing.get(name).cloned();
        let blocked = self.blockers.lowest(name);
        let Some(e) = self.elections.get_mut(name) else {
            return Vec::new();
        };
        let now = pick(&e.candidates, blocked, revision, at_ms);
        let before = e.leader.take();
        let mut out = Vec::new();
        match (before, now) {
            (Some(old), Some(new)) if old.token == new.token && old.key == new.key => {
                if old.holder != new.holder {
                    out.push(Pending::done(event(
                        revision,
                        at_ms,
                        name,
                        EventKind::LeaderValueChanged {
                            token: new.token,
                            holder: new.holder.clone(),
                            previous: old.holder.clone(),
                        },
                    )));
                    e.last_change_ms = at_ms;
                }
                e.leader = Some(Term {
                    started_revision: old.started_revision,
                    started_at_ms: old.started_at_ms,
                    ..new
                });
            }
            (None, None) => {}
            (before, now) => {
                e.last_change_ms = at_ms;
                let previous_holder = before.as_ref().map(|b| b.holder.clone());
                if let Some(old) = before {
                    let hint = said.hints.get(name).filter(|h| h.token == old.token);
                    let renewals = said
                        .renewals
                        .get(name)
                        .filter(|(token, _)| *token == old.token)
                        .map(|(_, r)| *r);
                    let (cause, lookup) = end_cause(e, &old, hint);
                    let open = OpenTerm {
                        election: name.to_owned(),
                        token: old.token,
                        holder: old.holder.clone(),
                        lease_id: old.lease_id,
                        layout: old.layout,
                        started_revision: old.started_revision,
                        started_at_ms: old.started_at_ms,
                    };
                    out.push(Pending {
                        event: ended(revision, at_ms, name, &open, cause, renewals),
                        cause_lookup: lookup,
                        deleted_as: standing.filter(|s| s.holder == old.holder).map(|s| s.cause),
                    });
                }
                if let Some(t) = &now {
                    out.push(Pending::done(started(
                        revision,
                        at_ms,
                        name,
                        t,
                        previous_holder,
                        false,
                    )));
                }
                e.leader = now;
            }
        }
        out
    }

    /// Queue candidates that left without leading, then the ones that came
    /// and wait (not the ones that lead at once).
    fn queue_events(
        &self,
        left: Vec<(String, Candidate)>,
        came: Vec<(String, Vec<u8>)>,
        revision: i64,
        at_ms: i64,
    ) -> Vec<Pending> {
        let mut out = Vec::new();
        for (name, c) in left {
            out.push(Pending::done(event(
                revision,
                at_ms,
                &name,
                EventKind::CandidateLeft {
                    token: c.token,
                    holder: c.value,
                    lease_id: c.lease,
                },
            )));
        }
        for (name, key) in came {
            let Some(e) = self.elections.get(&name) else {
                continue;
            };
            if e.leader.as_ref().is_some_and(|l| l.key == key) {
                continue;
            }
            if let Some(c) = e.candidates.get(&key) {
                out.push(Pending::done(event(
                    revision,
                    at_ms,
                    &name,
                    EventKind::CandidateQueued {
                        token: c.token,
                        holder: c.value.clone(),
                        lease_id: c.lease,
                    },
                )));
            }
        }
        out
    }

    /// The events after the terms' (the fence's, acting records), a
    /// refusal naming the leader as of the end of the revision.
    fn after_events(
        &mut self,
        after: Vec<(String, EventKind)>,
        revision: i64,
        at_ms: i64,
        statuses: &mut Vec<WatchStatus>,
    ) -> Vec<Pending> {
        let mut out = Vec::new();
        for (name, mut kind) in after {
            if let EventKind::FenceRefused {
                current_token,
                current_holder,
                ..
            } = &mut kind
            {
                if let Some(t) = self.leader(&name) {
                    *current_token = Some(t.token);
                    *current_holder = Some(t.holder.clone());
                }
            }
            if let Err(s) = self.track(&name, at_ms) {
                statuses.push(s);
                continue;
            }
            out.push(Pending::done(event(revision, at_ms, &name, kind)));
        }
        out
    }
}

/// How the term `old` of `e` ended, by the rules no layout repeats
/// (ARCHITECTURE.md, "Telling end causes apart"): its key still there
/// with its token is `superseded`; the layout's hint of this revision for
/// its token says (for a key whose value defines its terms, what the value
/// that ended it says); its key still there under another token changed
/// hands (`taken_over`: `Layout::rewrite_changes_hands`); a lease-less key
/// can only have been deleted; otherwise etcd is asked about the lease (the
/// lookup's lease id).
fn end_cause(e: &Election, old: &Term, hint: Option<&EndHint>) -> (EndCause, Option<i64>) {
    if e.candidates
        .get(&old.key)
        .is_some_and(|c| c.token == old.token)
    {
        (EndCause::Superseded, None)
    } else if let Some(h) = hint {
        (h.cause, None)
    } else if e.candidates.get(&old.key).is_some() {
        // Its key still there under another token: written over while it
        // stood (its lease alive), by another holder or under another lease.
        (EndCause::TakenOver, None)
    } else if old.lease_id == 0 {
        (EndCause::Deleted, None)
    } else {
        // Revoked, expired, or deleted by someone else.
        (EndCause::Unknown, Some(old.lease_id))
    }
}
