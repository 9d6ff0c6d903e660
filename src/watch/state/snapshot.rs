//! A snapshot loaded: the state replaced by what etcd holds at a revision,
//! each election's leader reconciled with the term history holds open
//! (adopted, or ended `unknown` and the snapshot's started), and a term of a
//! key whose rewrites change hands adopted only where nothing unseen may
//! have changed hands between.

use std::collections::HashMap;

use super::{
    candidate, ended, event, handed, pick, started, unreadable, Candidate, Claimed, Election, Kv,
    Seen, State, Term,
};
use crate::election::KeyLayout;
use crate::events::{EndCause, Event, EventKind, OpenTerm, WatchStatus};
use crate::layout::{Claim, Reading, Role};

impl State {
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
}

impl Election {
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
