//! A watch on one key range that resumes by itself.
//!
//! etcd-client does not re-establish a broken watch stream; this does, from
//! the revision after the last event it handed out, so no event is missed or
//! repeated. When etcd has compacted that revision away it says so instead of
//! guessing, and the caller re-reads the state.

use std::time::Duration;

use etcd_client::{Client as EtcdClient, Event, WatchOptions, WatchStream};

/// How long a watch stream may stay silent before it is probed.
const PROBE_AFTER: Duration = Duration::from_secs(5);

pub(crate) enum WatchItem {
    /// Events in revision order, none at or below an earlier batch's.
    Events(Vec<Event>),
    /// The next revision was compacted; re-read the state, then call
    /// [`RangeWatch::resume_after`] with the read's revision.
    Compacted,
}

pub(crate) struct RangeWatch {
    client: EtcdClient,
    start: Vec<u8>,
    end: Option<Vec<u8>>,
    next_rev: i64,
    stream: Option<WatchStream>,
}

impl RangeWatch {
    /// Watches `[start, end)` (or the single key `start`) from `from_rev`.
    pub(crate) fn new(
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
        }
    }

    /// Continue after `revision` (a snapshot read at that revision).
    pub(crate) fn resume_after(&mut self, revision: i64) {
        self.next_rev = revision + 1;
        self.stream = None;
    }

    /// The next batch of events. Retries broken streams with backoff for as
    /// long as the caller waits; cancel it by dropping the future.
    pub(crate) async fn next(&mut self) -> WatchItem {
        let mut backoff = Duration::from_millis(50);
        loop {
            if self.stream.is_none() {
                let mut opts = WatchOptions::new()
                    .with_start_revision(self.next_rev)
                    .with_prev_key();
                if let Some(end) = &self.end {
                    opts = opts.with_range(end.clone());
                }
                match self.client.watch(self.start.clone(), Some(opts)).await {
                    Ok(s) => self.stream = Some(s),
                    Err(e) => {
                        tracing::debug!(error = %e, "watch could not be opened; retrying");
                        tokio::time::sleep(backoff).await;
                        backoff = (backoff * 2).min(Duration::from_secs(2));
                        continue;
                    }
                }
            }
            let Some(stream) = self.stream.as_mut() else {
                continue;
            };
            // A watch on a dead member can hang without an error: after a
            // quiet spell, ask for a progress notification, and reopen the
            // stream when even that gets no answer.
            let message = match tokio::time::timeout(PROBE_AFTER, stream.message()).await {
                Ok(m) => m,
                Err(_) => {
                    if stream.request_progress().await.is_err() {
                        self.stream = None;
                        continue;
                    }
                    match tokio::time::timeout(PROBE_AFTER, stream.message()).await {
                        Ok(m) => m,
                        Err(_) => {
                            tracing::warn!("watch stream silent and unresponsive to a progress request; reopening");
                            self.stream = None;
                            continue;
                        }
                    }
                }
            };
            match message {
                Ok(Some(resp)) => {
                    if resp.canceled() {
                        self.stream = None;
                        if resp.compact_revision() > 0 {
                            tracing::debug!(
                                compact_revision = resp.compact_revision(),
                                "watch start revision compacted"
                            );
                            return WatchItem::Compacted;
                        }
                        tracing::debug!(
                            reason = resp.cancel_reason(),
                            "watch cancelled by etcd; reopening"
                        );
                        continue;
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
                        return WatchItem::Events(events);
                    }
                }
                Ok(None) | Err(_) => {
                    self.stream = None;
                    tokio::time::sleep(backoff).await;
                    backoff = (backoff * 2).min(Duration::from_secs(2));
                }
            }
        }
    }
}
