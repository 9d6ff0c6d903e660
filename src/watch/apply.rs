//! Applying a batch of watch events: whole revisions through the state
//! machine, end causes looked up (bounded), one batch sent.

use std::collections::HashMap;
use std::time::Duration;

use etcd_client::EventType;
use tokio::sync::mpsc;
use tokio::time::Instant;

use super::load::kv_of;
use super::replay::coalesced;
use super::{report_waiting, send, state, Change, Closed, State, Watcher};
use crate::events::{now_ms, Batch, EndCause, Event, EventKind, Update};

/// How long the end-cause lookups of one batch may take, all together.
const CAUSE_LOOKUP_BUDGET: Duration = Duration::from_secs(2);

/// At most this many end-cause lookups (one `LeaseTimeToLive` each) at once.
const CAUSE_LOOKUPS_IN_FLIGHT: usize = 16;

impl Watcher {
    /// Applies a batch of watch events (complete revisions), resolves end
    /// causes that need etcd's word, and sends one batch. Returns the last
    /// revision applied.
    pub(super) async fn apply(
        &self,
        state: &mut State,
        events: &[etcd_client::Event],
        received: Instant,
        replayed: Option<EventKind>,
        previous_arrival_ms: i64,
        tx: &mpsc::Sender<Update>,
    ) -> Result<i64, Closed> {
        let at_ms = now_ms();
        let mut out = Vec::new();
        let mut revision = 0;
        for one in events.chunk_by(|a, b| revision_of(a) == revision_of(b)) {
            revision = one.first().map(revision_of).unwrap_or_default();
            let mut changes: Vec<Change> = one.iter().filter_map(change_of).collect();
            state.known_leases(&mut changes);
            let explicit = explicit_deletion(&changes);
            let (mut pending, statuses) = state.apply(revision, &changes, at_ms);
            self.report(statuses, tx).await?;
            if explicit {
                ends_deleted(&mut pending);
            }
            out.extend(pending);
        }
        // Changes that arrive together share one arrival time. Replayed
        // ones happened while nobody watched; and when one election changed
        // at two revisions of one response (etcd sent a backlog: a lagging
        // member catching up), the time between them is not known either:
        // both happened after the previous response.
        let unobserved = replayed.or_else(|| {
            coalesced(&out).map(|(from_revision, to_revision)| EventKind::Unobserved {
                from_revision,
                to_revision,
                since_ms: Some(previous_arrival_ms),
            })
        });
        if let Some(kind @ EventKind::Unobserved { from_revision, .. }) = unobserved {
            out.insert(
                0,
                state::Pending::done(Event {
                    revision: from_revision,
                    at_ms,
                    election: String::new(),
                    kind,
                }),
            );
        }
        let resolved = self.resolve_causes(out, received).await;
        self.track_leases(&resolved);
        send(
            tx,
            Update::Batch(Batch {
                revision,
                events: resolved,
            }),
        )
        .await?;
        report_waiting(state, tx).await?;
        Ok(revision)
    }

    /// The events, each term end's cause looked up where it needs etcd's
    /// word. Causes are looked up concurrently (bounded), each judged at the
    /// time the deletion arrived (`received`), not when its lookup runs; all
    /// of them within one budget, so a slow etcd holds a batch back by at
    /// most that long (an unanswered lookup is `unknown`). One lookup per
    /// lease: terms sharing a lease (a session holding many elections) get
    /// the same answer, judged from the same sample at the same arrival.
    async fn resolve_causes(&self, out: Vec<state::Pending>, received: Instant) -> Vec<Event> {
        use futures_util::stream::{self, StreamExt};
        let budget = Instant::now() + CAUSE_LOOKUP_BUDGET;
        let mut leases: Vec<i64> = out.iter().filter_map(|p| p.cause_lookup).collect();
        leases.sort_unstable();
        leases.dedup();
        let causes: HashMap<i64, EndCause> = stream::iter(leases)
            .map(|lease| async move {
                let looked_up =
                    tokio::time::timeout_at(budget, self.cause_of_lease_end(lease, received));
                (lease, looked_up.await.unwrap_or(EndCause::Unknown))
            })
            .buffer_unordered(CAUSE_LOOKUPS_IN_FLIGHT)
            .collect()
            .await;
        out.into_iter()
            .map(|p| {
                let mut event = p.event;
                if let (Some(lease), EventKind::TermEnded { cause, .. }) =
                    (p.cause_lookup, &mut event.kind)
                {
                    *cause = match causes.get(&lease).copied() {
                        Some(EndCause::Deleted) => p.deleted_as.unwrap_or(EndCause::Deleted),
                        looked_up => looked_up.unwrap_or(EndCause::Unknown),
                    };
                }
                event
            })
            .collect()
    }
}

/// The revision an event's key changed at (0 when etcd sent no key).
fn revision_of(e: &etcd_client::Event) -> i64 {
    e.kv().map(|kv| kv.mod_revision()).unwrap_or_default()
}

/// Every end of `pending` that awaited a lookup is `deleted`, certain: its
/// revision was an explicit deletion ([`explicit_deletion`]).
fn ends_deleted(pending: &mut [state::Pending]) {
    for p in pending {
        if let (Some(_), EventKind::TermEnded { cause, .. }) = (p.cause_lookup, &mut p.event.kind) {
            *cause = p.deleted_as.unwrap_or(EndCause::Deleted);
            p.cause_lookup = None;
        }
    }
}

/// Whether the events of one revision can only be a delete request (a
/// DeleteRange, or a txn): a lease's revocation or expiry deletes the keys
/// of that one lease, in a revision of its own, and puts nothing. So a
/// revision that also puts, or deletes keys of two leases (no lease
/// counting as one), deleted every one of its keys while their leases
/// lived: `deleted` for each, certain, with no lookup (otherwise
/// 10,000 leader keys deleted by one request are 10,000 lookups). The leases are
/// the ones the state held ([`State::known_leases`]); a deletion of a key
/// it did not hold says nothing.
fn explicit_deletion(revision: &[Change]) -> bool {
    let mut seen = None;
    for change in revision {
        match change {
            Change::Put(_) => return true,
            Change::Delete {
                lease: Some(lease), ..
            } => match seen {
                None => seen = Some(*lease),
                Some(l) if l != *lease => return true,
                Some(_) => {}
            },
            Change::Delete { lease: None, .. } => {}
        }
    }
    false
}

fn change_of(e: &etcd_client::Event) -> Option<Change> {
    let kv = e.kv()?;
    Some(match e.event_type() {
        EventType::Put => Change::Put(kv_of(kv)),
        EventType::Delete => Change::Delete {
            key: kv.key().to_vec(),
            revision: kv.mod_revision(),
            lease: None,
        },
    })
}
