//! Standing requests and members' own word (`Role::Standing`,
//! `Role::Member`: Patroni's): the request a layout read for each election,
//! the members that say they are primaries, and `two_primaries` when one
//! says so beside the leader.

use super::{event, Pending, State};
use crate::events::EventKind;

impl State {
    /// The standing request of `election` as its layout read it, or none
    /// (deleted, malformed).
    pub(super) fn stand(&mut self, election: String, read: Option<crate::layout::Standing>) {
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
    pub(super) fn member_says(&mut self, election: &str, member: String, primary: bool) {
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
    pub(super) fn two_primaries(&mut self, name: &str, revision: i64, at_ms: i64) -> Vec<Pending> {
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
}
