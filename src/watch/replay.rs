//! What a watch replays: changes not seen as they happened (a new stream's
//! backlog, or one election changing at two revisions of one response).

use std::collections::HashMap;

use super::state;
use crate::events::EventKind;

/// Whether the watch is replaying what happened while nobody watched (a
/// new stream, until it is past the revision etcd had when it was created).
#[derive(Debug, Clone, Copy)]
pub(super) struct Replay {
    pub(super) active: bool,
    /// What is replayed happened after this; `None`: unknown.
    pub(super) since_ms: Option<i64>,
}

impl Replay {
    pub(super) fn since(ms: i64) -> Self {
        Self {
            active: true,
            since_ms: Some(ms),
        }
    }

    /// What the first watch after a load at `applied`, done at
    /// `live_at_ms`, replays: it happened after `since`. After a restart
    /// at the stored revision (`stored`: its revision and when history last
    /// saw it live), since what history last saw; after a fresh read,
    /// since that read.
    pub(super) fn after_load(
        stored: Option<(i64, Option<i64>)>,
        applied: i64,
        live_at_ms: i64,
    ) -> Self {
        Self {
            active: true,
            since_ms: match stored {
                Some((revision, since)) if revision == applied => since,
                _ => Some(live_at_ms),
            },
        }
    }

    /// The `Unobserved` event for the replayed part of `events` (those at or
    /// below `opened_at`; all of them while it is unknown), if any. The
    /// replay is over once an event beyond `opened_at` arrived.
    pub(super) fn take(
        &mut self,
        events: &[etcd_client::Event],
        opened_at: Option<i64>,
    ) -> Option<EventKind> {
        if !self.active {
            return None;
        }
        let revs: Vec<i64> = events
            .iter()
            .filter_map(|e| e.kv().map(|kv| kv.mod_revision()))
            .collect();
        self.take_revisions(&revs, opened_at)
    }

    /// [`Replay::take`] for changes at `revs` (in order), whatever read
    /// them.
    pub(super) fn take_revisions(
        &mut self,
        revs: &[i64],
        opened_at: Option<i64>,
    ) -> Option<EventKind> {
        if !self.active {
            return None;
        }
        let bound = opened_at.unwrap_or(i64::MAX);
        if revs.last().is_some_and(|&r| r > bound) {
            self.active = false;
        }
        let replayed: Vec<i64> = revs.iter().copied().filter(|&r| r <= bound).collect();
        Some(EventKind::Unobserved {
            from_revision: *replayed.first()?,
            to_revision: *replayed.last()?,
            since_ms: self.since_ms,
        })
    }
}

/// The revisions of `events` when one election has events at two or more
/// of them (first, last); `None` otherwise.
pub(super) fn coalesced(events: &[state::Pending]) -> Option<(i64, i64)> {
    let mut first_of: HashMap<&str, i64> = HashMap::new();
    let mut twice = false;
    // A holder's acting record carries its own times: it says nothing of
    // when the election's changes happened.
    for p in events
        .iter()
        .filter(|p| !matches!(p.event.kind, EventKind::Acting { .. }))
    {
        let first = *first_of
            .entry(p.event.election.as_str())
            .or_insert(p.event.revision);
        twice |= first != p.event.revision;
    }
    let revs = events.iter().map(|p| p.event.revision);
    twice.then(|| (revs.clone().min().unwrap_or(0), revs.max().unwrap_or(0)))
}

#[cfg(test)]
mod tests {
    use super::{coalesced, state::Pending};
    use crate::events::{Event, EventKind};

    fn accepted(election: &str, revision: i64) -> Pending {
        Pending::done(Event {
            revision,
            at_ms: 0,
            election: election.into(),
            kind: EventKind::FenceAccepted {
                resource: "r".into(),
                token: 1,
            },
        })
    }

    #[test]
    fn one_election_changing_at_two_revisions_of_one_response_is_coalesced() {
        assert_eq!(coalesced(&[]), None);
        assert_eq!(coalesced(&[accepted("a", 5), accepted("a", 5)]), None);
        assert_eq!(coalesced(&[accepted("a", 5), accepted("b", 6)]), None);
        assert_eq!(
            coalesced(&[accepted("a", 5), accepted("b", 6), accepted("a", 7)]),
            Some((5, 7))
        );
    }
}
