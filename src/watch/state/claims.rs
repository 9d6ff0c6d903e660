//! Terms defined by a key's value, not by its creation (a layout's
//! [`Layout::read_claim`]: Kubernetes' Leases). The key is created once and
//! rewritten in place by whoever holds it, so the state keeps the last
//! value read of each such key ([`Claimed`]) and reads each new one against
//! it:
//!
//! - the same holder, acquired at the same time ([`Hold::same_term`]): the
//!   same term, renewed; its token stays the revision of the write that
//!   gave it to that holder;
//! - another holder, or another acquisition: a new term from this write's
//!   revision (tokens only grow: it is a later revision), and the old term
//!   ended as [`Hold::ended_by`] reads it (a hint of this revision, so the
//!   state machine's one end rule applies);
//! - nobody holding it: the old term was given up (`resigned`), the key
//!   stays and is no candidate until someone holds it again;
//! - a value that cannot be read changes nothing (counted).
//!
//! The writers' count of handovers (`leaseTransitions`) is a cross-check:
//! a count that grew by more than one between two values read says terms
//! passed that tenure did not see, recorded as a gap of that election
//! between the two writes' revisions, never as terms. A count that went
//! back contradicts the one before (a writer that counts otherwise, or a
//! value put back): what happened between the two writes is not known,
//! recorded the same way, a gap, never a guess. Cost: one small box
//! per such key, none for any other layout.
//!
//! [`Layout::read_claim`]: crate::layout::Layout::read_claim

use crate::events::{LeaseNow, TermRenewals};
use crate::layout::{Claim, EndHint, Hold};

/// The last value read of a key whose terms its value defines.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) struct Claimed {
    /// Who holds it, as the last value said; `None`: nobody.
    pub hold: Option<Hold>,
    /// The token of the holder's term: the revision of the write that gave
    /// it the key (for a term first read in a snapshot, that read's value's
    /// revision, unless history knew the term).
    pub since: i64,
    /// The revision of the last write read.
    pub written: i64,
    /// When that write arrived (tenure's clock, unix ms): a holder whose
    /// writes stopped for longer than its duration has lapsed, by the rule
    /// client-go's candidates apply on their own clocks. For a value read
    /// in a snapshot, when it was read (`seen_written` false).
    pub written_at_ms: i64,
    /// Whether the last write was seen arriving (a watch), not read in a
    /// snapshot, whose write may be much older than the read.
    pub seen_written: bool,
    /// The writers' count of handovers, as the last value said.
    pub transitions: Option<i64>,
    /// The holder's renewals seen in this term.
    pub renewals: Renewals,
    /// What the last live update said of it (its last write's revision,
    /// lapsed): it is sent again when either changed.
    pub reported: Option<(i64, bool)>,
}

/// A holder's renewals within its term, on its own clock (µs).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Renewals {
    /// Renewals read since the term's first write.
    pub count: u64,
    /// The renewal time the last value carried.
    pub last_us: Option<i64>,
    /// The time between its last two renewals read: its cadence.
    pub every_us: Option<i64>,
    /// The term was first read in a snapshot (a start, a reload): renewals
    /// before it were not counted.
    pub partial: bool,
}

/// What one new value did: the key's claim now, the end of the term before
/// it (a hint for this revision, with that term's renewals), and terms the
/// count says were not seen (between two revisions).
#[derive(Debug, PartialEq, Eq)]
pub(super) struct Step {
    pub now: Claimed,
    pub ended: Option<EndHint>,
    pub renewals: Option<TermRenewals>,
    pub unseen: Option<(i64, i64)>,
}

impl Claimed {
    /// The first value read of a key (a snapshot, or the key's creation).
    pub fn first(claim: Claim, revision: i64, at_ms: i64) -> Self {
        let transitions = Hold::transitions(&claim);
        let hold = match claim {
            Claim::Held(h) => Some(h),
            Claim::Free { .. } | Claim::Unreadable(_) => None,
        };
        let renewals = Renewals {
            count: 0,
            last_us: hold.as_ref().and_then(|h| h.renewed_us),
            every_us: None,
            partial: false,
        };
        Self {
            hold,
            since: revision,
            written: revision,
            written_at_ms: at_ms,
            seen_written: true,
            transitions,
            renewals,
            reported: None,
        }
    }

    /// A value read in a snapshot at `at_ms`: when it was written, and how
    /// often its holder renewed before, are not known.
    pub fn read_in_snapshot(claim: Claim, revision: i64, at_ms: i64) -> Self {
        let mut c = Self::first(claim, revision, at_ms);
        c.seen_written = false;
        c.renewals.partial = true;
        c
    }

    /// A write arrived that cannot be read (encrypted, malformed): a write
    /// all the same, so no lapse; what it says is not known.
    pub fn written_unreadable(&mut self, revision: i64, at_ms: i64) {
        self.written = revision;
        self.written_at_ms = at_ms;
        self.seen_written = true;
    }

    /// The value `claim`, written at `revision`, read over this one.
    pub fn next(&self, claim: Claim, revision: i64, at_ms: i64) -> Step {
        let unseen = match (self.transitions, Hold::transitions(&claim)) {
            (Some(before), Some(now)) if now > before.saturating_add(1) || now < before => {
                Some((self.written, revision))
            }
            _ => None,
        };
        let ended = self.hold.as_ref().and_then(|old| {
            let same = matches!(&claim, Claim::Held(h) if old.same_term(h));
            (!same).then(|| EndHint {
                token: self.since,
                cause: old.ended_by(&claim),
            })
        });
        let renewals = ended.and(self.term_renewals(Some(&claim)));
        let mut now = Self::first(claim, revision, at_ms);
        if ended.is_none() && now.hold.is_some() && self.hold.is_some() {
            now.since = self.since;
            now.renewals = self.renewals.renewed(now.renewals.last_us);
        }
        Step {
            now,
            ended,
            renewals,
            unseen,
        }
    }

    /// Its holder's renewals in the term, and how it handed over when
    /// `next` (if any: `None` for a deletion) was written over it: from its
    /// last renewal to the next holder's acquisition, by the times written.
    pub fn term_renewals(&self, next: Option<&Claim>) -> Option<TermRenewals> {
        let old = self.hold.as_ref()?;
        let last_us = old.renewed_us.or(old.acquired_us);
        let handover_us = match next {
            Some(Claim::Held(n)) => n
                .acquired_us
                .or(n.renewed_us)
                .zip(last_us)
                .and_then(|(next, last)| next.checked_sub(last)),
            _ => None,
        };
        Some(TermRenewals {
            count: self.renewals.count,
            partial: self.renewals.partial,
            every_us: self.renewals.every_us,
            last_us,
            duration_s: old.duration_s,
            handover_us,
        })
    }

    /// What a live update says of it (`lapsed`: [`Claimed::lapsed`] now),
    /// when its last write or whether it lapsed changed since the last one
    /// (then marked sent).
    pub fn report(&mut self, election: &str, lapsed: bool) -> Option<LeaseNow> {
        let key = (self.written, lapsed);
        if self.reported == Some(key) {
            return None;
        }
        self.reported = Some(key);
        Some(LeaseNow {
            election: election.to_owned(),
            held: self.holder().map(|(h, t)| (h.to_owned(), t)),
            renewals: self.renewals.count,
            partial: self.renewals.partial,
            every_us: self.renewals.every_us,
            duration_s: self.hold.as_ref().and_then(|h| h.duration_s),
            renewed_us: self.hold.as_ref().and_then(|h| h.renewed_us),
            acquired_us: self.hold.as_ref().and_then(|h| h.acquired_us),
            transitions: self.hold.as_ref().and_then(|h| h.transitions),
            written_at_ms: self.written_at_ms,
            written_seen: self.seen_written,
            lapsed,
        })
    }

    /// Whether its holder's writes stopped for longer than its duration
    /// (nobody took over yet: a lapsed lease), judged by a watch known
    /// complete up to `live_at_ms` (an answer, events or progress, at that
    /// time): no write arrived between the last one and its duration's end
    /// although the watch was there to see it. While the watch is down or
    /// silent, nothing new is judged lapsed. No duration written: never.
    pub fn lapsed(&self, live_at_ms: i64) -> bool {
        let Some(h) = &self.hold else {
            return false;
        };
        h.duration_s
            .and_then(|d| d.checked_mul(1000))
            .and_then(|d| self.written_at_ms.checked_add(d))
            .is_some_and(|out| live_at_ms > out)
    }

    /// Its holder and token, while someone holds it.
    pub fn holder(&self) -> Option<(&str, i64)> {
        self.hold.as_ref().map(|h| (h.holder.as_str(), self.since))
    }
}

impl Renewals {
    /// After a write of the same term carrying renewal time `at`.
    fn renewed(self, at: Option<i64>) -> Self {
        match (self.last_us, at) {
            (Some(last), Some(now)) if now > last => Self {
                count: self.count + 1,
                last_us: Some(now),
                every_us: now.checked_sub(last),
                partial: self.partial,
            },
            _ => Self {
                last_us: at.or(self.last_us),
                ..self
            },
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::events::EndCause;

    fn held(holder: &str, acquired: i64, renewed: i64, transitions: i64) -> Claim {
        Claim::Held(Hold {
            holder: holder.into(),
            acquired_us: Some(acquired),
            renewed_us: Some(renewed),
            duration_s: Some(15),
            transitions: Some(transitions),
        })
    }

    const S: i64 = 1_000_000;

    #[test]
    fn a_term_is_a_run_of_one_holder_and_one_acquisition() {
        let c = Claimed::first(held("alpha", 0, 0, 0), 216, 0);
        let renewed = c.next(held("alpha", 0, 2 * S, 0), 218, 2000);
        // Lapsed once no write came for its 15 s.
        assert!(!renewed.now.lapsed(17_000) && renewed.now.lapsed(17_001));
        assert_eq!((renewed.ended, renewed.unseen), (None, None));
        assert_eq!(renewed.now.holder(), Some(("alpha", 216)));
        assert_eq!(renewed.now.renewals.count, 1);
        assert_eq!(renewed.now.renewals.every_us, Some(2 * S));
        // Released: resigned, and nobody holds it.
        let free = renewed.now.next(
            Claim::Free {
                transitions: Some(0),
            },
            226,
            3000,
        );
        assert_eq!(
            free.ended,
            Some(EndHint {
                token: 216,
                cause: EndCause::Resigned
            })
        );
        assert_eq!(free.now.holder(), None);
        // Its renewals: one, every 2 s; released, so nobody acquired it.
        let r = free
            .renewals
            .map(|r| (r.count, r.every_us, r.last_us, r.handover_us));
        assert_eq!(r, Some((1, Some(2 * S), Some(2 * S), None)));
        // The next holder's term begins at its own write.
        let beta = free.now.next(held("beta", 30 * S, 30 * S, 1), 229, 0);
        assert_eq!((beta.ended, beta.unseen), (None, None));
        assert_eq!(beta.now.holder(), Some(("beta", 229)));
        // The same holder acquiring again is a new term.
        let again = beta.now.next(held("beta", 31 * S, 31 * S, 2), 240, 0);
        assert_eq!(again.now.holder(), Some(("beta", 240)));
        assert_eq!(again.ended.map(|h| h.token), Some(229));
    }

    #[test]
    fn a_snapshot_read_is_no_write_and_an_unreadable_write_is_one() {
        let mut c = Claimed::read_in_snapshot(held("a", 0, 0, 0), 5, 1000);
        let lapsed = c.lapsed(1000);
        let n = c.report("e", lapsed).expect("reported");
        assert!(!n.written_seen && n.partial && !n.lapsed);
        // Its renewals after the read count from it: the term's are a floor.
        let next = c.next(held("a", 0, 2 * S, 0), 6, 3000);
        assert!(next.now.renewals.partial && next.now.seen_written);
        // An unreadable write at 10 s is a write: no lapse judged from 1 s.
        c.written_unreadable(7, 10_000);
        assert!(!c.lapsed(20_000) && c.lapsed(25_001));
    }

    #[test]
    fn a_takeover_is_an_expiry_or_early_by_the_written_clocks() {
        let c = Claimed::first(held("alpha", 0, 10 * S, 0), 10, 0);
        // Renewed at 10 s for 15 s: it ran out at 25 s.
        let late = c.next(held("beta", 25 * S, 25 * S, 1), 20, 0);
        assert_eq!(late.ended.map(|h| h.cause), Some(EndCause::Expired));
        let early = c.next(held("beta", 20 * S, 20 * S, 1), 20, 0);
        assert_eq!(early.ended.map(|h| h.cause), Some(EndCause::TakenOver));
        // From its last renewal to the next acquisition, by the written times.
        let handover = |s: &Step| s.renewals.and_then(|r| r.handover_us);
        assert_eq!(
            (handover(&late), handover(&early)),
            (Some(15 * S), Some(10 * S))
        );
        assert_eq!(late.renewals.and_then(|r| r.duration_s), Some(15));
        // A renewal is no end: no renewals to record.
        let same = c.next(held("alpha", 0, 12 * S, 0), 12, 0);
        assert_eq!(same.renewals, None);
        // Reported once per write, and again when it lapses.
        let mut now = same.now;
        let lapsed = now.lapsed(1);
        assert!(now
            .report("e", lapsed)
            .is_some_and(|n| !n.lapsed && n.renewals == 1));
        assert_eq!(now.report("e", now.lapsed(2)), None);
        let lapsed = now.lapsed(16_000);
        assert!(now.report("e", lapsed).is_some_and(|n| n.lapsed));
        // A count that went back: unknown between the two writes.
        let back = c.next(held("alpha", 0, 12 * S, 0), 12, 0);
        let back = back.now.next(held("delta", 14 * S, 14 * S, 0), 13, 0);
        assert_eq!(back.unseen, None, "0 to 0: nothing unseen");
        let c3 = Claimed::first(held("alpha", 0, 10 * S, 3), 10, 0);
        let back = c3.next(held("alpha", 0, 12 * S, 2), 12, 0);
        assert_eq!(back.unseen, Some((10, 12)));
        // A count that jumped: two terms passed unseen.
        let jumped = c.next(held("gamma", 90 * S, 90 * S, 3), 50, 0);
        assert_eq!(jumped.unseen, Some((10, 50)));
        assert_eq!(jumped.now.holder(), Some(("gamma", 50)));
        // No times written: unknown.
        let bare = Claim::Held(Hold {
            holder: "x".into(),
            acquired_us: None,
            renewed_us: None,
            duration_s: None,
            transitions: None,
        });
        assert_eq!(
            c.next(bare, 60, 0).ended.map(|h| h.cause),
            Some(EndCause::Unknown)
        );
    }
}
