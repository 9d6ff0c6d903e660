//! The watcher's live word on Kubernetes Leases ([`Update::Renewing`]):
//! per election, its holder, its renewals and whether it lapsed, for the
//! election page. Not persisted: a restarted serve knows a Lease again
//! from its snapshot (its holder and lease, not when it was last written)
//! and, from its next write, all of it.
//!
//! Invariant: an entry speaks only for the term it was read in. A term's
//! end removes the entry of that term's token, so a Lease deleted (no
//! more reports) or forgotten leaves nothing behind to be shown as current.

use std::collections::HashMap;
use std::sync::Mutex;

use crate::events::{EventKind, LeaseNow, Update};
use crate::task::Locked;

/// Each Lease-held election's latest report, by its name in its cluster.
#[derive(Debug, Default)]
pub struct LeaseBoard {
    leases: Mutex<HashMap<String, LeaseNow>>,
}

impl LeaseBoard {
    pub fn apply(&self, update: &Update) {
        match update {
            Update::Renewing { changed, .. } => {
                let mut leases = self.leases.locked();
                for l in changed {
                    match l.held {
                        Some(_) => leases.insert(l.election.clone(), l.clone()),
                        None => leases.remove(&l.election),
                    };
                }
            }
            Update::Batch(b) => {
                let mut leases = self.leases.locked();
                // Most feeds hold no Lease: their batches cost nothing here.
                if leases.is_empty() {
                    return;
                }
                for e in &b.events {
                    let EventKind::TermEnded { token, .. } = &e.kind else {
                        continue;
                    };
                    let ended = leases
                        .get(&e.election)
                        .is_some_and(|l| l.held.as_ref().is_some_and(|(_, t)| t == token));
                    if ended {
                        leases.remove(&e.election);
                    }
                }
            }
            Update::Forgotten { election } => {
                self.leases.locked().remove(election);
            }
            _ => {}
        }
    }

    /// The latest report of `election` (its name in its cluster), while
    /// someone holds its Lease.
    pub fn get(&self, election: &str) -> Option<LeaseNow> {
        self.leases.locked().get(election).cloned()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::events::{Batch, EndCause, Event};

    fn now(election: &str, holder: &str, token: i64) -> LeaseNow {
        LeaseNow {
            election: election.into(),
            held: Some((holder.into(), token)),
            renewals: 3,
            partial: false,
            every_us: Some(2_000_000),
            duration_s: Some(15),
            renewed_us: None,
            acquired_us: None,
            transitions: None,
            written_at_ms: 1,
            written_seen: true,
            lapsed: false,
        }
    }

    fn ended(election: &str, token: i64) -> Update {
        Update::Batch(Batch {
            revision: 9,
            events: vec![Event {
                revision: 9,
                at_ms: 0,
                election: election.into(),
                kind: EventKind::TermEnded {
                    token,
                    holder: "a".into(),
                    lease_id: 0,
                    cause: EndCause::Deleted,
                    started_revision: token,
                    started_at_ms: 0,
                    renewals: None,
                },
            }],
        })
    }

    #[test]
    fn an_entry_speaks_for_its_term_only() {
        let b = LeaseBoard::default();
        let report = |l: LeaseNow| Update::Renewing {
            lapsed: 0,
            changed: vec![l],
        };
        b.apply(&report(now("kcm", "a", 5)));
        assert_eq!(b.get("kcm").map(|l| l.held), Some(Some(("a".into(), 5))));
        // The end of an older term leaves the current one.
        b.apply(&ended("kcm", 4));
        assert!(b.get("kcm").is_some());
        // Its own term's end (a deleted Lease: no report follows) removes it.
        b.apply(&ended("kcm", 5));
        assert_eq!(b.get("kcm"), None);
        // Nobody holding it: nothing to show.
        b.apply(&report(now("kcm", "b", 7)));
        b.apply(&report(LeaseNow {
            held: None,
            ..now("kcm", "", 0)
        }));
        assert_eq!(b.get("kcm"), None);
        b.apply(&report(now("kcm", "b", 7)));
        b.apply(&Update::Forgotten {
            election: "kcm".into(),
        });
        assert_eq!(b.get("kcm"), None);
    }
}
