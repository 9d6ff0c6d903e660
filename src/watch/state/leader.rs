//! Keys into candidates, and the leader picked among them: a key read as a
//! candidate (its token, by its layout's rules: its creation, the write that
//! gave it to its holder, or its value's claim), a value that cannot be
//! read, a candidate without the lease its layout's candidates hold, and
//! the lowest token leading unless a lease-less key blocks it.

use super::{Candidate, Candidates, Claimed, Election, Kv, Term};
use crate::election::keys::holder_of;
use crate::election::KeyLayout;
use crate::events::WatchStatus;
use crate::layout::{Role, Source, Unreadable};

impl Election {
    /// Its key's value `claimed`, read at a write of `kv`: the key is a
    /// candidate while someone holds it, with the term's token.
    pub(super) fn hold(&mut self, kv: &Kv, claimed: Claimed) {
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
}

/// The status a value that cannot be read is counted as.
pub(super) fn unreadable(why: Unreadable) -> WatchStatus {
    match why {
        Unreadable::Encrypted => WatchStatus::EncryptedValue,
        Unreadable::Malformed => WatchStatus::IgnoredKey,
    }
}

/// A candidate of a layout whose candidates hold leases, without one (a
/// put under none, or the deletion of a key the state did not hold): no
/// candidate, counted as an ignored key (`Layout::candidates_hold_leases`).
pub(super) fn leased(source: Option<&Source>, role: Role, lease: i64) -> Role {
    match source.and_then(|s| s.lease_less(&role, lease)) {
        Some(_) => Role::Invalid,
        None => role,
    }
}

pub(super) fn candidate(kv: &Kv, layout: KeyLayout) -> Candidate {
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
pub(super) fn handed(kv: &Kv, layout: KeyLayout, before: Option<&Candidate>) -> Candidate {
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
pub(super) fn pick(
    candidates: &Candidates,
    blocked: Option<i64>,
    revision: i64,
    at_ms: i64,
) -> Option<Term> {
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
