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
//! # Silence
//!
//! A watcher silent for [`DEFAULT_PROBE_AFTER`] (lease renewals do not
//! count) is probed as `RangeWatch` probes: a read of etcd's revision while
//! etcd has not reached the start (it drops progress requests then), else a
//! progress request; no answer, a broken stream, a cancelled watch or a
//! compaction: [`Woken::Lost`], and the caller reads the election again.

use etcd_client::{Event, EventType, GetOptions, WatchOptions, WatchResponse, WatchStream};
use tokio::time::Instant;

use crate::election::keywatch::DEFAULT_PROBE_AFTER;
use crate::election::lease::Session;
use crate::election::Client;

/// What ended the wait.
#[derive(Debug, PartialEq, Eq)]
pub(super) enum Woken {
    /// The predecessor was deleted, the own key still standing then.
    PredecessorGone,
    /// The own key was deleted, the lease is no longer valid, or the watch
    /// could not go on: the caller reads the election again.
    Lost,
}

/// Waits, watching from `revision + 1` (a deletion since the read is
/// replayed, never missed), until `pred` is deleted, the own key `own` is,
/// or the session's lease is no longer valid.
pub(super) async fn wait(
    client: &Client,
    session: &Session,
    own: &str,
    pred: &str,
    revision: i64,
) -> Woken {
    let start = revision.saturating_add(1);
    let Some(mut stream) = open(client, own, pred, start).await else {
        return Woken::Lost;
    };
    let mut lease_state = session.state.subscribe();
    let mut silent_until = Instant::now() + DEFAULT_PROBE_AFTER;
    loop {
        let message = tokio::select! {
            biased;
            changed = lease_state.changed() => {
                if changed.is_err() || !session.is_valid() {
                    return Woken::Lost;
                }
                continue;
            }
            m = tokio::time::timeout_at(silent_until, stream.message()) => m,
        };
        let resp = match message {
            Ok(Ok(Some(resp))) => resp,
            Ok(_) => return Woken::Lost,
            Err(_) => match probe(client, &mut stream, own, start).await {
                Probe::Short => {
                    silent_until = Instant::now() + DEFAULT_PROBE_AFTER;
                    continue;
                }
                Probe::Answer(resp) => resp,
                Probe::Stalled => return Woken::Lost,
            },
        };
        silent_until = Instant::now() + DEFAULT_PROBE_AFTER;
        if let Some(woken) = take(&resp, own.as_bytes(), pred.as_bytes()) {
            return woken;
        }
    }
}

/// The stream, one watcher over `[min(own, pred), max(own, pred)]`.
async fn open(client: &Client, own: &str, pred: &str, start: i64) -> Option<WatchStream> {
    let (low, high) = if own < pred { (own, pred) } else { (pred, own) };
    let mut end = high.as_bytes().to_vec();
    end.push(0);
    let opts = WatchOptions::new()
        .with_start_revision(start)
        .with_range(end);
    let mut watch = client.etcd().watch_client();
    let opening = watch.watch(low, Some(opts));
    tokio::time::timeout(DEFAULT_PROBE_AFTER, opening)
        .await
        .ok()?
        .ok()
}

/// One response: `Some` when it ends the wait. The own key's deletion wins
/// over the predecessor's in the same response (one revision, or a replay
/// of several: either way the own key did not stand).
fn take(resp: &WatchResponse, own: &[u8], pred: &[u8]) -> Option<Woken> {
    if resp.canceled() {
        return Some(Woken::Lost);
    }
    if deletes(resp.events(), own) {
        return Some(Woken::Lost);
    }
    deletes(resp.events(), pred).then_some(Woken::PredecessorGone)
}

/// Whether `events` delete `key`.
fn deletes(events: &[Event], key: &[u8]) -> bool {
    events
        .iter()
        .any(|e| e.event_type() == EventType::Delete && e.kv().is_some_and(|kv| kv.key() == key))
}

/// What a probe of the silent stream found.
enum Probe {
    /// etcd has not reached the start: nothing can be pending.
    Short,
    /// A message, the requested progress notification or another.
    Answer(WatchResponse),
    /// No answer.
    Stalled,
}

/// A silent stream probed: while etcd is short of the start it drops
/// progress requests (etcd PR 20229), so its revision is read first; then a
/// progress request, answered within the probe interval or not at all.
async fn probe(client: &Client, stream: &mut WatchStream, own: &str, start: i64) -> Probe {
    let within = DEFAULT_PROBE_AFTER;
    let mut kv = client.etcd().kv_client();
    let read = kv.get(own, Some(GetOptions::new().with_count_only()));
    match tokio::time::timeout(within, read).await {
        Ok(Ok(resp)) if resp.header().is_some_and(|h| h.revision() < start) => return Probe::Short,
        Ok(_) => {}
        Err(_) => return Probe::Stalled,
    }
    if stream.request_progress().await.is_err() {
        return Probe::Stalled;
    }
    match tokio::time::timeout(within, stream.message()).await {
        Ok(Ok(Some(resp))) => Probe::Answer(resp),
        _ => Probe::Stalled,
    }
}
