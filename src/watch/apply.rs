//! Applying a batch of watch events: whole revisions through the state
//! machine, end causes looked up (bounded), one batch sent.

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
        let mut i = 0;
        while i < events.len() {
            let rev = events[i]
                .kv()
                .map(|kv| kv.mod_revision())
                .unwrap_or_default();
            let mut changes = Vec::new();
            while i < events.len()
                && events[i]
                    .kv()
                    .map(|kv| kv.mod_revision())
                    .unwrap_or_default()
                    == rev
            {
                if let Some(c) = change_of(&events[i]) {
                    changes.push(c);
                }
                i += 1;
            }
            let (pending, statuses) = state.apply(rev, &changes, at_ms);
            self.report(statuses, tx).await?;
            out.extend(pending);
            revision = rev;
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
        // Causes are looked up concurrently (bounded), each judged at the
        // time the deletion arrived, not when its lookup runs; all of them
        // within one budget, so a slow etcd holds a batch back by at most
        // that long (an unanswered lookup is `unknown`).
        use futures_util::stream::{self, StreamExt};
        let budget = Instant::now() + CAUSE_LOOKUP_BUDGET;
        let resolved: Vec<Event> = stream::iter(out)
            .map(|p| async move {
                let mut event = p.event;
                if let (Some(lease), EventKind::TermEnded { cause, .. }) =
                    (p.cause_lookup, &mut event.kind)
                {
                    let looked_up =
                        tokio::time::timeout_at(budget, self.cause_of_lease_end(lease, received));
                    *cause = looked_up.await.unwrap_or(EndCause::Unknown);
                }
                event
            })
            .buffered(CAUSE_LOOKUPS_IN_FLIGHT)
            .collect()
            .await;
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
}

fn change_of(e: &etcd_client::Event) -> Option<Change> {
    let kv = e.kv()?;
    Some(match e.event_type() {
        EventType::Put => Change::Put(kv_of(kv)),
        EventType::Delete => Change::Delete {
            key: kv.key().to_vec(),
            revision: kv.mod_revision(),
            lease: e.prev_kv().map(|p| p.lease()).unwrap_or_default(),
        },
    })
}
