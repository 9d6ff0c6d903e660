//! A watch on one key range that resumes by itself.
//!
//! etcd-client does not re-establish a broken watch stream; this does, from
//! the revision after the last event it handed out, so no event is missed or
//! repeated. When etcd has compacted that revision away it says so instead of
//! guessing, and the caller re-reads the state. A stream that goes silent is
//! probed with a progress request and reopened when even that is not
//! answered: a watch on a dead member can hang without an error. etcd
//! answers no progress request of a watch that starts past its revision
//! (etcd PR 20229, in 3.5.31 and 3.6.17: `rev < w.startRev` in
//! `progressIfSync`), as a caught-up watch of a quiet etcd does: such a
//! watch is probed with a read of etcd's revision instead, which, short of
//! the start, is its progress.
//!
//! A stream that ends before it was of use (cancelled by etcd, refused, or
//! broken within [`HEALTHY_AFTER`] of opening) is reopened only after a
//! backoff, 50 ms doubling to 2 s: etcd cancels a watch it does not permit
//! at once, and reopening at once made tens of thousands of streams a
//! minute. A cancellation for want of permission or authentication is
//! handed to the caller ([`WatchItem::Denied`], [`Watched::Denied`]): a
//! holder must treat its key as unseen, a waiter must stop.
//!
//! Used by the election core (waiting campaigns, the leader's own key,
//! observe) and by the watcher, which also reads the progress and
//! reconnection items.

use std::time::Duration;

use etcd_client::{
    Client as EtcdClient, Event, GetOptions, WatchOptions, WatchResponse, WatchStream,
};
use tokio::time::Instant;

use super::Error;

/// How long a watch stream may stay silent before it is probed.
pub const DEFAULT_PROBE_AFTER: Duration = Duration::from_secs(5);

/// The first wait before reopening a stream that ended before it was of use.
const BACKOFF_MIN: Duration = Duration::from_millis(50);
/// The longest wait between two reopens.
const BACKOFF_MAX: Duration = Duration::from_secs(2);
/// A stream that lived this long (and was not cancelled) was of use: the
/// next reopen is immediate and the backoff starts over.
pub const HEALTHY_AFTER: Duration = Duration::from_secs(1);
/// A message that repeats (a watch refused again and again) is logged at
/// most once per this interval, with a count.
pub const REPEAT_LOG_EVERY: Duration = Duration::from_secs(10);

/// Why the stream was reopened.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Reopened {
    /// The stream ended or failed.
    StreamError,
    /// The stream was silent and did not answer a progress request.
    Stalled,
    /// etcd cancelled the watch (not for compaction).
    Cancelled,
}

pub enum WatchItem {
    /// Events of complete revisions, in order, none at or below an earlier
    /// item's. etcd never splits a revision across responses unless asked to
    /// fragment, which this watch does not.
    Events(Vec<Event>),
    /// etcd says every event up to `revision` has been sent (on etcd before
    /// 3.4.25 / 3.5.8 events up to it may still follow: see `next_item`).
    Progress { revision: i64 },
    /// The next revision was compacted; re-read the state, then call
    /// [`RangeWatch::resume_after`] with the read's revision.
    Compacted { compact_revision: i64 },
    /// The stream broke and is being reopened from the next revision.
    Reopening(Reopened),
    /// A stream was created (the first, or one reopened): etcd member
    /// `member_id` of cluster `cluster_id` serves it (0: its header did
    /// not say).
    Opened { member_id: u64, cluster_id: u64 },
    /// Opening the stream failed (etcd unreachable); retrying with backoff.
    Unavailable(String),
    /// etcd cancelled the watch for want of permission or authentication
    /// (its role lost the grant, the user is gone). Calling on reopens it
    /// after a backoff; etcd may grant it again.
    Denied(Error),
}

/// What [`RangeWatch::next`] returns: events, "re-read the state", or
/// "etcd does not let you watch this".
pub enum Watched {
    Events(Vec<Event>),
    Compacted,
    /// etcd refused the watch (permission or authentication): nothing that
    /// happens to the range is seen until that changes.
    Denied(Error),
}

/// A message that can repeat fast (a watch refused again and again): the
/// first occurrence is logged, then at most one per interval, with how many
/// there were since the last one logged.
#[derive(Debug)]
pub struct Repeats {
    every: Duration,
    last: Option<Instant>,
    count: u64,
}

impl Repeats {
    pub fn new(every: Duration) -> Self {
        Self {
            every,
            last: None,
            count: 0,
        }
    }

    /// Counts one occurrence; `Some(n)` when it is to be logged now: `n`
    /// occurrences since the last one logged, this one included.
    pub fn hit(&mut self) -> Option<u64> {
        self.hit_at(Instant::now())
    }

    fn hit_at(&mut self, now: Instant) -> Option<u64> {
        self.count += 1;
        match self.last {
            Some(t) if now.saturating_duration_since(t) < self.every => None,
            _ => {
                self.last = Some(now);
                Some(std::mem::take(&mut self.count))
            }
        }
    }
}

pub struct RangeWatch {
    client: EtcdClient,
    start: Vec<u8>,
    end: Option<Vec<u8>>,
    next_rev: i64,
    stream: Option<WatchStream>,
    probe_after: Duration,
    /// The wait before the next reopen of a stream that was of no use.
    backoff: Duration,
    /// Not before this instant is a stream opened again.
    reopen_at: Option<Instant>,
    /// When the current stream was created.
    opened: Option<Instant>,
    /// Reopens logged by [`RangeWatch::next`], at most once per interval.
    repeats: Repeats,
    /// The largest watch response accepted (`None`: etcd-client's 4 MiB).
    max_message_bytes: Option<usize>,
    /// etcd's revision when the current stream was created (its `created`
    /// response's header): events at or below it were already history
    /// then, replayed rather than seen as they happened.
    opened_at: Option<i64>,
    /// Notified by whoever needs a progress notification now (the merge of
    /// several ranges, waiting to release a revision): one is requested.
    asks: Option<std::sync::Arc<tokio::sync::Notify>>,
    /// The current stream's start revision while etcd is not known to have
    /// reached it: until it has, etcd drops every progress request of the
    /// watch, so an unanswered probe proves nothing.
    unreached: Option<i64>,
}

/// What a probe of a silent stream found.
enum Probed {
    /// A message (the requested progress notification, or any other).
    Message(Result<Option<WatchResponse>, etcd_client::Error>),
    /// etcd, read directly, is at this revision, short of the stream's
    /// start: it could not answer, and nothing is pending. Not a stall.
    Short(i64),
    /// No answer.
    Stalled,
}

impl RangeWatch {
    /// Watches `[start, end)` (or the single key `start`) from `from_rev`.
    pub fn new(
        client: &EtcdClient,
        start: impl Into<Vec<u8>>,
        end: Option<Vec<u8>>,
        from_rev: i64,
    ) -> Self {
        Self {
            client: client.clone(),
            start: start.into(),
            end,
            next_rev: from_rev,
            stream: None,
            probe_after: DEFAULT_PROBE_AFTER,
            backoff: BACKOFF_MIN,
            reopen_at: None,
            opened: None,
            repeats: Repeats::new(REPEAT_LOG_EVERY),
            max_message_bytes: None,
            opened_at: None,
            asks: None,
            unreached: None,
        }
    }

    /// Requests a progress notification whenever `asks` is notified.
    pub fn with_progress_asks(mut self, asks: std::sync::Arc<tokio::sync::Notify>) -> Self {
        self.asks = Some(asks);
        self
    }

    /// Accepts watch responses up to `bytes` (gRPC's default is 4 MiB: one
    /// larger revision would fail to decode, and the stream, reopened at the
    /// same revision, would fail again forever).
    pub fn with_max_message_bytes(mut self, bytes: usize) -> Self {
        self.max_message_bytes = Some(bytes);
        self
    }

    pub fn with_probe_after(mut self, probe_after: Duration) -> Self {
        self.probe_after = probe_after;
        self
    }

    /// The revision the next event will be at or after.
    pub fn next_revision(&self) -> i64 {
        self.next_rev
    }

    /// etcd's revision when the current stream was created; `None` before
    /// its `created` response arrived. Events at or below it were replayed
    /// from etcd's history, not delivered as they happened.
    pub fn opened_at(&self) -> Option<i64> {
        self.opened_at
    }

    /// Reopen on another connection (the stream is reopened from the next
    /// revision on the next call).
    pub fn set_client(&mut self, client: &EtcdClient) {
        self.client = client.clone();
        self.stream = None;
    }

    /// The caller knows nothing is pending up to `revision` (a progress
    /// notification it trusts): a reopen starts after it. The stream stays.
    pub fn advance_to(&mut self, revision: i64) {
        self.next_rev = self.next_rev.max(revision + 1);
    }

    /// Continue after `revision` (a snapshot read at that revision).
    pub fn resume_after(&mut self, revision: i64) {
        self.next_rev = revision + 1;
        self.stream = None;
    }

    /// The stream ended: reopen at once if it was of use (lived
    /// [`HEALTHY_AFTER`], not cancelled), else after the backoff, which
    /// doubles up to 2 s.
    fn ended(&mut self, of_use: bool) {
        self.stream = None;
        let lived = self
            .opened
            .take()
            .is_some_and(|t| t.elapsed() >= HEALTHY_AFTER);
        if of_use && lived {
            self.backoff = BACKOFF_MIN;
        } else {
            self.reopen_at = Some(Instant::now() + self.backoff);
            self.backoff = (self.backoff * 2).min(BACKOFF_MAX);
        }
    }

    /// The next events, or news about the stream. Retries for as long as
    /// the caller waits; cancel it by dropping the future.
    pub async fn next_item(&mut self) -> WatchItem {
        loop {
            if self.stream.is_none() {
                if let Err(item) = self.open().await {
                    return item;
                }
            }
            let Some(stream) = self.stream.as_mut() else {
                continue;
            };
            let asked = message_or_ask(stream, self.asks.as_deref());
            let message = match tokio::time::timeout(self.probe_after, asked).await {
                Ok(m) => m,
                Err(_) => match self.probe().await {
                    Probed::Message(m) => m,
                    Probed::Short(revision) => return WatchItem::Progress { revision },
                    Probed::Stalled => {
                        self.ended(true);
                        return WatchItem::Reopening(Reopened::Stalled);
                    }
                },
            };
            match message {
                Ok(Some(resp)) => {
                    if let Some(item) = self.take(&resp).await {
                        return item;
                    }
                }
                Ok(None) | Err(_) => {
                    self.ended(true);
                    return WatchItem::Reopening(Reopened::StreamError);
                }
            }
        }
    }

    /// Opens the stream from the next revision, after the backoff's pause
    /// if one is due. A failure (or no answer) is handed to the caller.
    async fn open(&mut self) -> Result<(), WatchItem> {
        // Cancel-safe: the pause is over only once it was slept.
        if let Some(at) = self.reopen_at {
            tokio::time::sleep_until(at).await;
            self.reopen_at = None;
        }
        // No previous values: nobody reads them (the watcher knows each
        // deleted key's lease from its state), and etcd 3.4 reads each one
        // apart, copying its write buffer, quadratic in a large delete
        // (a bare watch with them takes 16.7 s to see 10,000 keys deleted at
        // once on 3.4.23).
        let mut opts = WatchOptions::new().with_start_revision(self.next_rev);
        if let Some(end) = &self.end {
            opts = opts.with_range(end.clone());
        }
        let mut watch_client = self.client.watch_client();
        if let Some(bytes) = self.max_message_bytes {
            watch_client = watch_client.max_decoding_message_size(bytes);
        }
        let opened = tokio::time::timeout(
            self.probe_after,
            watch_client.watch(self.start.clone(), Some(opts)),
        )
        .await;
        let why = match opened {
            Ok(Ok(s)) => {
                self.stream = Some(s);
                self.unreached = Some(self.next_rev);
                self.opened_at = None;
                self.opened = Some(Instant::now());
                return Ok(());
            }
            Ok(Err(e)) => e.to_string(),
            Err(_) => {
                // etcd restored from a snapshot forgot its simple auth
                // tokens (they live in the WAL): a watch opened with one is
                // never answered. Authenticate again (a no-op without a
                // user) before the next try.
                let _ = tokio::time::timeout(self.probe_after, self.client.refresh_token()).await;
                format!("no answer within {:?}", self.probe_after)
            }
        };
        self.ended(false);
        Err(WatchItem::Unavailable(why))
    }

    /// What one message of the stream is for the caller: events (those not
    /// handed out yet), a progress notification, the stream's opening or
    /// its cancellation; `None` when it is nothing to hand on.
    async fn take(&mut self, resp: &WatchResponse) -> Option<WatchItem> {
        let revision = resp.header().map_or(0, |h| h.revision());
        if self.unreached.is_some_and(|start| revision >= start) {
            self.unreached = None;
        }
        if resp.canceled() {
            return Some(self.cancelled(resp).await);
        }
        if resp.created() {
            self.opened_at = resp.header().map(|h| h.revision());
            if resp.events().is_empty() {
                return Some(WatchItem::Opened {
                    member_id: resp.header().map_or(0, |h| h.member_id()),
                    cluster_id: resp.header().map_or(0, |h| h.cluster_id()),
                });
            }
        }
        let next_rev = self.next_rev;
        let events: Vec<Event> = resp
            .events()
            .iter()
            .filter(|e| e.kv().is_some_and(|kv| kv.mod_revision() >= next_rev))
            .cloned()
            .collect();
        if let Some(last) = events.last().and_then(|e| e.kv()) {
            self.next_rev = last.mod_revision() + 1;
            return Some(WatchItem::Events(events));
        }
        if resp.created() || !resp.events().is_empty() {
            return None;
        }
        // A progress notification. Not trusted to move the next revision:
        // etcd before 3.4.25 / 3.5.8 can send a requested one ahead of
        // events still pending for this watch (etcd issue 15220), which then
        // arrive after it and must not be filtered out, nor skipped on
        // reopen.
        resp.header().map(|h| WatchItem::Progress {
            revision: h.revision(),
        })
    }

    /// A cancelled stream: compaction (not a failure: the caller re-reads
    /// and resumes), an expired token (authenticate again, then reopen),
    /// a refusal, or another cancellation.
    async fn cancelled(&mut self, resp: &WatchResponse) -> WatchItem {
        if resp.compact_revision() > 0 {
            self.stream = None;
            self.opened = None;
            return WatchItem::Compacted {
                compact_revision: resp.compact_revision(),
            };
        }
        // A cancelled watch was of no use, however long its stream lived:
        // back off before the next one.
        self.ended(false);
        let reason = resp.cancel_reason();
        if reason.contains("invalid auth token") || reason.contains("auth revision is old") {
            // An expired token cancels a new watch instead of failing the
            // call, so etcd-client does not re-authenticate: do it before
            // reopening.
            let _ = tokio::time::timeout(self.probe_after, self.client.refresh_token()).await;
            return WatchItem::Reopening(Reopened::Cancelled);
        }
        if let Some(denied) = Error::from_refusal(reason) {
            return WatchItem::Denied(denied);
        }
        WatchItem::Reopening(Reopened::Cancelled)
    }

    /// A silent stream probed: a progress request, then its answer (or any
    /// message) within the probe interval, meanwhile serving the asks (a
    /// merge waiting for this range hears of it at once, not after the
    /// probe). While etcd is not known to have reached the stream's start it
    /// would drop the request: its revision is read instead, and, still
    /// short of the start, is this watch's progress (nothing can be pending:
    /// what etcd before PR 20229 answered); no answer to the read is a stall.
    async fn probe(&mut self) -> Probed {
        if let Some(start) = self.unreached {
            let mut kv = self.client.kv_client();
            // A key of the watched range: readable wherever the watch is.
            let read = kv.get(
                self.start.clone(),
                Some(GetOptions::new().with_count_only()),
            );
            match tokio::time::timeout(self.probe_after, read).await {
                Err(_) => return Probed::Stalled,
                Ok(Ok(resp)) => match resp.header().map(|h| h.revision()) {
                    Some(revision) if revision < start => return Probed::Short(revision),
                    _ => self.unreached = None,
                },
                // Refused (a token etcd forgot): the probe decides.
                Ok(Err(_)) => {}
            }
        }
        let Some(stream) = self.stream.as_mut() else {
            return Probed::Stalled;
        };
        if stream.request_progress().await.is_err() {
            return Probed::Stalled;
        }
        let answer = message_or_ask(stream, self.asks.as_deref());
        match tokio::time::timeout(self.probe_after, answer).await {
            Ok(m) => Probed::Message(m),
            Err(_) => Probed::Stalled,
        }
    }

    /// Only events, compaction and refusal; the rest is handled here.
    pub async fn next(&mut self) -> Watched {
        loop {
            match self.next_item().await {
                WatchItem::Events(events) => return Watched::Events(events),
                WatchItem::Compacted { .. } => return Watched::Compacted,
                WatchItem::Denied(e) => return Watched::Denied(e),
                WatchItem::Reopening(why) => {
                    if let Some(times) = self.repeats.hit() {
                        tracing::debug!(?why, times, "watch reopening");
                    }
                }
                WatchItem::Unavailable(why) => {
                    if let Some(times) = self.repeats.hit() {
                        tracing::debug!(%why, times, "watch unavailable; retrying");
                    }
                }
                WatchItem::Progress { .. } | WatchItem::Opened { .. } => {}
            }
        }
    }
}

/// The stream's next message; meanwhile, each notification of `asks`
/// requests a progress notification (which arrives as a message).
async fn message_or_ask(
    stream: &mut WatchStream,
    asks: Option<&tokio::sync::Notify>,
) -> Result<Option<WatchResponse>, etcd_client::Error> {
    let Some(asks) = asks else {
        return stream.message().await;
    };
    loop {
        tokio::select! {
            m = stream.message() => return m,
            () = asks.notified() => {
                stream.request_progress().await?;
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_repeated_message_is_logged_once_per_interval_with_a_count() {
        let mut r = Repeats::new(Duration::from_secs(10));
        let t0 = Instant::now();
        assert_eq!(r.hit_at(t0), Some(1), "the first is logged");
        for i in 0..999 {
            assert_eq!(r.hit_at(t0 + Duration::from_millis(i * 10)), None);
        }
        let later = t0 + Duration::from_secs(10);
        assert_eq!(r.hit_at(later), Some(1000), "then one line says how many");
        assert_eq!(r.hit_at(later), None);
    }
}
