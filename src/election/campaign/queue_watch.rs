//! A queued waiter's watch: its own key and its predecessor on one watch
//! stream, so that the predecessor's deletion can prove, without a read,
//! that the own key still stood.
//!
//! # Why one stream proves it
//!
//! etcd hands every watcher of one stream to one channel (`chanBufLen`, 128
//! responses), in the order the revisions commit, and the stream sends that
//! channel's responses in order. So when the own key's watcher was caught up
//! from its start (its `created` header is below the start: etcd put it
//! among the synced watchers, which hear every revision as it commits),
//! every event of the own key at a revision below the predecessor's
//! deletion reaches the waiter before that deletion does. One exception: a
//! watcher whose channel is full is set aside (a "victim") and its events
//! come later, out of order. A full channel holds 128 responses, all of
//! which arrive before anything sent after them; so while fewer than
//! [`FEW_RESPONSES`] responses arrived on the stream, none of its watchers
//! can have been set aside. When either condition fails the caller reads the
//! own key once, as etcd's own `Campaign` does after every wake-up.
//!
//! # Silence
//!
//! A stream silent for [`DEFAULT_PROBE_AFTER`] is probed as `RangeWatch`
//! probes (a read of etcd's revision while etcd has not reached the start,
//! else a progress request); no answer, a broken stream, a cancelled watch
//! or a compaction: [`Woken::Lost`], and the caller reads the election again.

use etcd_client::{
    Event, EventType, GetOptions, KeyValue, WatchOptions, WatchResponse, WatchStream,
};

use crate::election::keywatch::DEFAULT_PROBE_AFTER;
use crate::election::lease::Session;
use crate::election::Client;

/// Fewer responses than etcd's per-stream channel holds (128), with room to
/// spare: while fewer arrived, no watcher of the stream was set aside.
const FEW_RESPONSES: u32 = 100;

/// What ended the wait.
#[derive(Debug, PartialEq, Eq)]
pub(super) enum Woken {
    /// The predecessor was deleted at `at`; `own_stood`: the stream proves
    /// the own key was not deleted before it (see the module doc), else the
    /// caller must read it.
    PredecessorGone { at: i64, own_stood: bool },
    /// The own key was deleted, the lease is no longer valid, or the watch
    /// could not go on: the caller reads the election again.
    Lost,
}

/// The two watchers' ids, in the order their `created` responses came (the
/// order they were asked for), and what the stream proved so far.
struct Pair {
    own: Option<i64>,
    pred: Option<i64>,
    /// The own key's watcher was synced when etcd created it.
    own_synced: bool,
    /// Responses other than `created` that arrived.
    responses: u32,
    start: i64,
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
    let mut pair = Pair {
        own: None,
        pred: None,
        own_synced: false,
        responses: 0,
        start,
    };
    let mut lease_state = session.state.subscribe();
    loop {
        let message = tokio::select! {
            biased;
            changed = lease_state.changed() => {
                if changed.is_err() || !session.is_valid() {
                    return Woken::Lost;
                }
                continue;
            }
            m = tokio::time::timeout(DEFAULT_PROBE_AFTER, stream.message()) => m,
        };
        let resp = match message {
            Ok(Ok(Some(resp))) => resp,
            Ok(_) => return Woken::Lost,
            Err(_) => match probe(client, &mut stream, own, start).await {
                Probe::Short => continue,
                Probe::Answer(resp) => resp,
                Probe::Stalled => return Woken::Lost,
            },
        };
        if let Some(woken) = pair.take(&resp) {
            return woken;
        }
    }
}

/// The stream, with the own key's watcher asked for first.
async fn open(client: &Client, own: &str, pred: &str, start: i64) -> Option<WatchStream> {
    let opts = || Some(WatchOptions::new().with_start_revision(start));
    let opening = async {
        let mut stream = client.etcd().watch_client().watch(own, opts()).await.ok()?;
        stream.watch(pred, opts()).await.ok()?;
        Some(stream)
    };
    tokio::time::timeout(DEFAULT_PROBE_AFTER, opening)
        .await
        .ok()
        .flatten()
}

impl Pair {
    /// One response: `Some` when it ends the wait.
    fn take(&mut self, resp: &WatchResponse) -> Option<Woken> {
        if resp.canceled() {
            return Some(Woken::Lost);
        }
        let id = resp.watch_id();
        if resp.created() {
            let at = resp.header().map_or(i64::MAX, |h| h.revision());
            if self.own.is_none() {
                self.own = Some(id);
                self.own_synced = at < self.start;
            } else if self.pred.is_none() {
                self.pred = Some(id);
            }
            if resp.events().is_empty() {
                return None;
            }
        }
        self.responses = self.responses.saturating_add(1);
        let deleted = deleted_at(resp.events());
        if Some(id) == self.own && deleted.is_some() {
            return Some(Woken::Lost);
        }
        if Some(id) == self.pred {
            if let Some(at) = deleted {
                return Some(Woken::PredecessorGone {
                    at,
                    own_stood: self.own_synced && self.responses < FEW_RESPONSES,
                });
            }
        }
        None
    }
}

/// The revision of the last deletion among `events`.
fn deleted_at(events: &[Event]) -> Option<i64> {
    events
        .iter()
        .filter(|e| e.event_type() == EventType::Delete)
        .filter_map(|e| e.kv().map(KeyValue::mod_revision))
        .max()
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
