//! A queued waiter's watch: its own key and its predecessor in one watcher
//! (the key range from the lower of the two to the higher), so that the
//! predecessor's deletion proves, without a read, that the own key still
//! stood.
//!
//! # Why one watcher proves it
//!
//! etcd orders the events of one watcher by revision, and never posts an
//! event that precedes one it already posted (its watch API's "ordered"
//! guarantee): whether the watcher is caught up, catching up, set aside for
//! a full channel, or replaying after its member restored a snapshot. So a
//! deletion of the own key at a lower revision than the predecessor's
//! arrives first, or in the same response. Two watchers, even on one
//! stream, give no such order: a member that restores a snapshot replays
//! each watcher's events apart, in no fixed order. The range may hold other
//! keys (the queue's keys are named by lease ids, which mostly grow with
//! time, so usually none); their events are ignored.
//!
//! The watcher is a [`RangeWatch`]: it resumes a broken stream from the
//! revision after the last event it handed out (so the order holds across
//! streams) and probes a silent one. Lease renewals do not interrupt it:
//! the wait ends on the lease's loss only. A compaction or a refusal:
//! [`Woken::Lost`], and the caller reads the election again.

use etcd_client::{Event, EventType};

use crate::election::keywatch::{RangeWatch, Watched};
use crate::election::lease::{wait_lost, Session};
use crate::election::Client;

/// What ended the wait.
#[derive(Debug, PartialEq, Eq)]
pub(super) enum Woken {
    /// The predecessor was deleted, the own key still standing then.
    PredecessorGone,
    /// The own key was deleted, the lease was lost, or the watch could not
    /// go on: the caller reads the election again.
    Lost,
}

/// Waits, watching from `revision + 1` (a deletion since the read is
/// replayed, never missed), until `pred` is deleted, the own key `own` is,
/// or the session's lease is lost.
pub(super) async fn wait(
    client: &Client,
    session: &Session,
    own: &str,
    pred: &str,
    revision: i64,
) -> Woken {
    let (low, high) = if own < pred { (own, pred) } else { (pred, own) };
    let mut end = high.as_bytes().to_vec();
    end.push(0);
    let mut watch = RangeWatch::new(&client.etcd(), low, Some(end), revision.saturating_add(1));
    // Pinned once: a renewal must not cancel the watch's own probe timer.
    let lost = wait_lost(&session.state, session.ttl, session.margin);
    tokio::pin!(lost);
    loop {
        tokio::select! {
            biased;
            _ = &mut lost => return Woken::Lost,
            item = watch.next() => match item {
                Watched::Events(events) => {
                    if let Some(woken) = take(&events, own.as_bytes(), pred.as_bytes()) {
                        return woken;
                    }
                }
                Watched::Compacted | Watched::Denied(_) => return Woken::Lost,
            },
        }
    }
}

/// Events of whole revisions: `Some` when they end the wait. The own key's
/// deletion wins over the predecessor's among them (one revision, or a
/// replay of several: either way the own key did not stand).
fn take(events: &[Event], own: &[u8], pred: &[u8]) -> Option<Woken> {
    if deletes(events, own) {
        return Some(Woken::Lost);
    }
    deletes(events, pred).then_some(Woken::PredecessorGone)
}

/// Whether `events` delete `key`.
fn deletes(events: &[Event], key: &[u8]) -> bool {
    events
        .iter()
        .any(|e| e.event_type() == EventType::Delete && e.kv().is_some_and(|kv| kv.key() == key))
}
