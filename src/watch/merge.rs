//! The watch of every source's key ranges, as one stream in revision order.
//!
//! One range (tenure's own layout alone, the default) is one
//! [`RangeWatch`], passed through unchanged. Several ranges (`--source`)
//! are one `RangeWatch` each, merged: a revision is handed on only once
//! every range is known to be complete up to it, by an event of its own at
//! or after it, or by a progress notification. Events wait in a buffer
//! meanwhile, and the ranges behind are asked for progress at once (then
//! once a second). The history stays one revision, consistent across
//! sources: a restart resumes every range from it, exactly.
//!
//! Invariant: nothing is handed on above the lowest range's mark, so no
//! later answer can carry an event at or below a revision handed on.
//! That needs etcd to send a requested progress notification after every
//! event it covers (3.4.25+, 3.5.8+: etcd issue 15220) and to answer a
//! request made once a watch caught up (3.4.31+, 3.5.13+: etcd issue 17507,
//! or an idle range would hold every other back); before those the watcher
//! refuses several ranges (`Watcher::sources`) rather than merge them wrong.
//! etcd drops, rather than defers, a request made while a watch catches up
//! or before etcd reached the watch's start revision (etcd PR 20229): a
//! range behind is asked again after [`ASK_AGAIN`], and its watch hears an
//! ask at once, also while it probes a silent stream, never only after a
//! stall.
//!
//! Deliberately absent: one gRPC stream for all ranges. etcd replays an
//! unsynced watcher's backlog per watcher, so ranges on one stream are no
//! more ordered than on several, and one range's failure would take the
//! others down with it.

use crate::task::Locked;
use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use etcd_client::{Client as EtcdClient, Event};
use futures_util::future::BoxFuture;
use futures_util::stream::{FuturesUnordered, StreamExt};
use tokio::sync::Notify;
use tokio::time::Instant;

use crate::election::keywatch::{RangeWatch, WatchItem};

/// How often ranges behind a buffered event are asked again for progress.
const ASK_AGAIN: Duration = Duration::from_secs(1);

/// How each range's watch is made.
#[derive(Clone)]
pub(super) struct Opening {
    pub probe_after: Duration,
    pub max_message_bytes: usize,
}

pub(super) enum Watch {
    One(Box<RangeWatch>),
    Many(Box<Many>),
}

type Next = BoxFuture<'static, (usize, RangeWatch, WatchItem)>;

pub(super) struct Many {
    client: EtcdClient,
    ranges: Vec<(Vec<u8>, Vec<u8>)>,
    opening: Opening,
    /// Events with the instant their answer arrived.
    merge: Merge<(Instant, Event)>,
    /// Per range: etcd's revision when its current stream was created.
    opened: Vec<Option<i64>>,
    asks: Vec<Arc<Notify>>,
    /// Per range: when progress was last asked and not yet answered.
    asked: Vec<Option<Instant>>,
    /// Per range: reopens in a row without an answer.
    fails: Vec<u32>,
    /// When the answers of the events last handed on arrived (the
    /// earliest): what they happened before.
    received: Option<Instant>,
    /// The watches, each waiting for its next answer. In a mutex only to be
    /// `Sync` (the loop holds `&self` across awaits); never contended.
    running: Mutex<FuturesUnordered<Next>>,
}

impl Watch {
    pub fn new(
        client: &EtcdClient,
        ranges: Vec<(Vec<u8>, Vec<u8>)>,
        from_rev: i64,
        opening: Opening,
    ) -> Self {
        match <[_; 1]>::try_from(ranges) {
            Ok([(start, end)]) => {
                Watch::One(Box::new(open(client, start, end, from_rev, &opening)))
            }
            Err(ranges) => {
                let n = ranges.len();
                let mut many = Many {
                    client: client.clone(),
                    merge: Merge::new(n, from_rev - 1),
                    opened: vec![None; n],
                    asks: (0..n).map(|_| Arc::new(Notify::new())).collect(),
                    asked: vec![None; n],
                    fails: vec![0; n],
                    received: None,
                    ranges,
                    opening,
                    running: Mutex::default(),
                };
                many.restart();
                Watch::Many(Box::new(many))
            }
        }
    }

    pub async fn next_item(&mut self) -> WatchItem {
        match self {
            Watch::One(w) => w.next_item().await,
            Watch::Many(m) => m.next_item().await,
        }
    }

    /// etcd's revision when the stream was created (of every range: the
    /// latest); `None` until every range's stream answered.
    pub fn opened_at(&self) -> Option<i64> {
        match self {
            Watch::One(w) => w.opened_at(),
            Watch::Many(m) => m.opened.iter().try_fold(0, |a, o| o.map(|o| a.max(o))),
        }
    }

    /// When the events last handed on arrived (several ranges: the
    /// earliest answer of them, which may have waited for the others);
    /// `None`: as they are handed on.
    pub fn received(&self) -> Option<Instant> {
        match self {
            Watch::One(_) => None,
            Watch::Many(m) => m.received,
        }
    }

    /// The revision the next event handed on will be at or after.
    pub fn next_revision(&self) -> i64 {
        match self {
            Watch::One(w) => w.next_revision(),
            Watch::Many(m) => m.merge.released + 1,
        }
    }

    /// Reopen on another connection, each range from where it is.
    pub fn set_client(&mut self, client: &EtcdClient) {
        match self {
            Watch::One(w) => w.set_client(client),
            Watch::Many(m) => {
                m.client = client.clone();
                m.restart();
            }
        }
    }

    /// Nothing is pending up to `revision` (a progress notification
    /// trusted): a reopen starts after it.
    pub fn advance_to(&mut self, revision: i64) {
        match self {
            Watch::One(w) => w.advance_to(revision),
            // Only ever what this merge handed on: every mark is there.
            Watch::Many(_) => {}
        }
    }

    /// Continue after `revision` (a snapshot read at that revision).
    pub fn resume_after(&mut self, revision: i64) {
        match self {
            Watch::One(w) => w.resume_after(revision),
            Watch::Many(m) => {
                m.merge = Merge::new(m.ranges.len(), revision);
                m.restart();
            }
        }
    }
}

fn open(
    client: &EtcdClient,
    start: Vec<u8>,
    end: Vec<u8>,
    from_rev: i64,
    opening: &Opening,
) -> RangeWatch {
    RangeWatch::new(client, start, Some(end), from_rev)
        .with_probe_after(opening.probe_after)
        .with_max_message_bytes(opening.max_message_bytes)
}

fn next(i: usize, mut watch: RangeWatch) -> Next {
    Box::pin(async move {
        let item = watch.next_item().await;
        (i, watch, item)
    })
}

impl Many {
    /// Every range's watch anew, from after its mark (what was received is
    /// buffered, not asked for again).
    fn restart(&mut self) {
        let running = self.running.locked_mut();
        *running = FuturesUnordered::new();
        for (i, (start, end)) in self.ranges.iter().enumerate() {
            let watch = open(
                &self.client,
                start.clone(),
                end.clone(),
                self.merge.marks[i] + 1,
                &self.opening,
            )
            .with_progress_asks(self.asks[i].clone());
            running.push(next(i, watch));
            self.opened[i] = None;
            self.asked[i] = None;
        }
    }

    /// Asks the ranges behind the oldest buffered event for progress: one
    /// request outstanding per range, asked again after [`ASK_AGAIN`].
    fn ask_behind(&mut self) {
        for i in self.merge.behind() {
            if self.asked[i].is_none_or(|at| at.elapsed() >= ASK_AGAIN) {
                self.asked[i] = Some(Instant::now());
                self.asks[i].notify_one();
            }
        }
    }

    async fn next_item(&mut self) -> WatchItem {
        if self.ranges.is_empty() {
            // Nothing to watch (`Watcher::sources` refuses it): nothing comes.
            return std::future::pending().await;
        }
        loop {
            match self.merge.release() {
                Some(Released::Events(events)) => {
                    self.received = events.iter().map(|(at, _)| *at).min();
                    return WatchItem::Events(events.into_iter().map(|(_, e)| e).collect());
                }
                Some(Released::Progress(revision)) => return WatchItem::Progress { revision },
                None => {}
            }
            self.ask_behind();
            let running = self.running.locked_mut();
            let answered = if self.merge.waiting() {
                match tokio::time::timeout(ASK_AGAIN, running.next()).await {
                    Ok(answered) => answered,
                    Err(_) => continue,
                }
            } else {
                running.next().await
            };
            // Never empty: every answer pushes its watch back.
            let Some((i, mut watch, item)) = answered else {
                self.restart();
                continue;
            };
            let handed = self.take(i, item);
            self.opened[i] = watch.opened_at();
            // A reopen of this range starts after what it is known complete
            // up to (an idle range's progress too), never below.
            watch.advance_to(self.merge.marks[i]);
            let running = self.running.locked_mut();
            running.push(next(i, watch));
            if let Some(item) = handed {
                return item;
            }
        }
    }

    /// One answer of range `i`'s watch into the merge; what the loop must
    /// hear of it, if anything.
    fn take(&mut self, i: usize, item: WatchItem) -> Option<WatchItem> {
        let delivered = matches!(item, WatchItem::Events(_) | WatchItem::Progress { .. });
        if delivered {
            self.fails[i] = 0;
            self.asked[i] = None;
        }
        match item {
            WatchItem::Events(events) => {
                let at = Instant::now();
                let dropped = self.merge.events(
                    i,
                    events
                        .into_iter()
                        .map(|e| (e.kv().map_or(0, |kv| kv.mod_revision()), (at, e))),
                );
                if dropped > 0 {
                    tracing::warn!(
                        range = i,
                        dropped,
                        mark = self.merge.marks[i],
                        "events at or below a revision this range was complete up to; \
                         not applied out of order"
                    );
                }
                None
            }
            WatchItem::Progress { revision } => {
                // Behind what this range delivered: etcd restored or
                // replaced under the watch. Behind what was handed on, the
                // loop asks etcd; otherwise it is only not used.
                (!self.merge.progress(i, revision) && revision < self.merge.released)
                    .then_some(WatchItem::Progress { revision })
            }
            WatchItem::Reopening(why) => {
                self.opened[i] = None;
                // One blip reopens every range once: the loop hears of a
                // reopen only when one range has failed more often in a
                // row than any other, so its count of failures in a row is
                // a range's, not the number of ranges.
                self.fails[i] += 1;
                let most = self.fails.iter().enumerate().filter(|(j, _)| *j != i);
                (most.map(|(_, f)| *f).max().unwrap_or(0) < self.fails[i])
                    .then_some(WatchItem::Reopening(why))
            }
            other => {
                if matches!(
                    other,
                    WatchItem::Unavailable(_) | WatchItem::Compacted { .. }
                ) {
                    self.opened[i] = None;
                }
                Some(other)
            }
        }
    }
}

/// What the merge hands on.
#[derive(Debug, PartialEq, Eq)]
pub(super) enum Released<E> {
    /// Every buffered event at or below the revision all ranges are
    /// complete up to, in revision order (within one, as received).
    Events(Vec<E>),
    /// Every range is complete up to this revision, past the last handed on.
    Progress(i64),
}

/// The merge's bookkeeping, apart from etcd: which revisions every range
/// is complete up to, and what can be handed on.
#[derive(Debug)]
pub(super) struct Merge<E> {
    /// Per range: every event at or below it was received.
    marks: Vec<i64>,
    /// Received, not yet handed on, by revision.
    buffer: BTreeMap<i64, Vec<E>>,
    /// The last revision handed on (events or progress).
    released: i64,
}

impl<E> Merge<E> {
    /// `ranges` ranges, each complete up to `revision` (a snapshot's).
    pub fn new(ranges: usize, revision: i64) -> Self {
        Self {
            marks: vec![revision; ranges],
            buffer: BTreeMap::new(),
            released: revision,
        }
    }

    /// One answer of `range`'s watch: its events, in its revision order
    /// (etcd sends a watcher all of one revision's events at once).
    /// Returns how many were at or below what the range was already
    /// complete up to, and dropped: handed on, they would be out of order.
    pub fn events(&mut self, range: usize, events: impl IntoIterator<Item = (i64, E)>) -> usize {
        let floor = self.marks[range];
        let mut dropped = 0;
        for (revision, e) in events {
            if revision <= floor {
                dropped += 1;
                continue;
            }
            self.marks[range] = self.marks[range].max(revision);
            self.buffer.entry(revision).or_default().push(e);
        }
        dropped
    }

    /// A progress notification of `range`'s watch; `false` (and nothing
    /// changed) where it is behind what that range already delivered.
    pub fn progress(&mut self, range: usize, revision: i64) -> bool {
        if revision < self.marks[range] {
            return false;
        }
        self.marks[range] = revision;
        true
    }

    /// The revision every range is complete up to.
    fn complete(&self) -> i64 {
        self.marks.iter().copied().min().unwrap_or(self.released)
    }

    /// Whether events wait for a range behind.
    pub fn waiting(&self) -> bool {
        !self.buffer.is_empty()
    }

    /// The ranges behind the oldest buffered event: to be asked for
    /// progress.
    pub fn behind(&self) -> Vec<usize> {
        let Some((oldest, _)) = self.buffer.first_key_value() else {
            return Vec::new();
        };
        (0..self.marks.len())
            .filter(|i| self.marks[*i] < *oldest)
            .collect()
    }

    /// What can be handed on now, if anything.
    pub fn release(&mut self) -> Option<Released<E>> {
        let complete = self.complete();
        if self
            .buffer
            .first_key_value()
            .is_some_and(|(r, _)| *r <= complete)
        {
            let later = self.buffer.split_off(&(complete + 1));
            let ready = std::mem::replace(&mut self.buffer, later);
            self.released = complete;
            return Some(Released::Events(ready.into_values().flatten().collect()));
        }
        if complete > self.released {
            self.released = complete;
            return Some(Released::Progress(complete));
        }
        None
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn nothing_is_handed_on_above_a_range_behind() {
        let mut m = Merge::new(2, 10);
        m.events(0, [(12, "a12"), (14, "a14")]);
        assert_eq!(m.release(), None, "range 1 may still hold 11..14");
        assert_eq!(m.behind(), vec![1]);
        m.events(1, [(13, "b13")]);
        assert_eq!(m.release(), Some(Released::Events(vec!["a12", "b13"])));
        assert_eq!(m.release(), None, "a14: range 1 is complete up to 13 only");
        assert!(m.progress(1, 20));
        assert_eq!(m.release(), Some(Released::Events(vec!["a14"])));
        // Range 0 is complete up to 14 only: nothing past it.
        assert_eq!(m.release(), None);
        assert!(m.progress(0, 21));
        assert_eq!(m.release(), Some(Released::Progress(20)));
        assert_eq!(m.release(), None);
    }

    #[test]
    fn one_revision_across_ranges_stays_together_in_order() {
        let mut m = Merge::new(3, 0);
        m.events(2, [(5, "c5")]);
        m.events(0, [(5, "a5"), (6, "a6")]);
        m.events(1, [(7, "b7")]);
        // Every range is complete up to 5: its events, in range order.
        assert_eq!(m.release(), Some(Released::Events(vec!["c5", "a5"])));
        assert_eq!(m.release(), None, "range 2 may hold 6");
        assert!(m.progress(2, 7));
        assert_eq!(m.release(), Some(Released::Events(vec!["a6"])));
        assert!(m.progress(0, 7));
        assert_eq!(m.release(), Some(Released::Events(vec!["b7"])));
    }

    #[test]
    fn events_a_range_was_already_complete_up_to_are_dropped() {
        let mut m = Merge::new(2, 10);
        assert!(m.progress(0, 15));
        assert_eq!(m.events(0, [(14, "late"), (16, "a16"), (16, "a16b")]), 1);
        assert!(m.progress(1, 16));
        assert_eq!(m.release(), Some(Released::Events(vec!["a16", "a16b"])));
    }

    #[test]
    fn a_progress_behind_a_ranges_own_events_is_refused() {
        let mut m = Merge::new(2, 0);
        m.events(0, [(9, "a9")]);
        assert!(!m.progress(0, 8), "etcd went back under the watch");
        assert!(m.progress(1, 9));
        assert_eq!(m.release(), Some(Released::Events(vec!["a9"])));
        assert!(m.behind().is_empty());
        assert!(!m.waiting());
    }
}
