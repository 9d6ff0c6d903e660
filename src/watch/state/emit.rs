//! The events the state machine emits: any event of an election, and a
//! term's start and end, each built in one place.

use super::Term;
use crate::events::{EndCause, Event, EventKind, OpenTerm, TermRenewals};

pub(super) fn event(revision: i64, at_ms: i64, election: &str, kind: EventKind) -> Event {
    Event {
        revision,
        at_ms,
        election: election.to_owned(),
        kind,
    }
}

pub(super) fn started(
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

pub(super) fn ended(
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
