//! Name collisions: an election nested under another's name (`a` and
//! `a/b`) while both hold keys, which etcd's own `Election` of the ancestor
//! would take for its candidates. Each reported once, on the page of each,
//! when it arises.

use std::ops::Bound;

use super::{event, State};
use crate::events::{Event, EventKind};

impl State {
    /// The collisions a snapshot holds: each reported unless it was
    /// already known before the snapshot.
    pub(super) fn collisions_after_load(&mut self, revision: i64, at_ms: i64) -> Vec<Event> {
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
    pub(super) fn update_collisions(
        &mut self,
        touched: &[String],
        revision: i64,
        at_ms: i64,
    ) -> Vec<Event> {
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
