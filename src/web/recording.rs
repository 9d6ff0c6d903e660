//! Whether a shared history is being recorded, as one replica
//! can tell: its own watcher saw etcd reach a revision, and the database
//! has not stored it for longer than a writer takeover takes. Then no
//! replica records (the writer's watcher is stuck, the database refuses its
//! commits, no replica can become the writer), whatever this replica's own
//! watcher says, and `/readyz` says so on every replica, with why. Pure:
//! the serve loop's poller hands it what the database says.
//!
//! Only revisions that carried events of the watched range count: a
//! progress revision is persisted late on some etcd versions (see
//! ARCHITECTURE.md) and would look like a lag.

use std::time::{Duration, Instant};

use crate::history::{format_duration_ms, short_time, WriterStatus};

#[derive(Debug)]
pub struct Recording {
    /// How long a revision may stay unrecorded: the writer TTL (a dead
    /// writer is replaced within it) plus the new writer's start.
    stale_after: Duration,
    /// The first revision this replica saw that the database had not
    /// stored: which, since when (monotonic, and unix ms for the message).
    behind: Option<(i64, Instant, i64)>,
    /// What the database said last.
    last: Option<WriterStatus>,
    /// Why the last read of the database failed.
    read_error: Option<String>,
}

impl Recording {
    pub fn new(stale_after: Duration) -> Self {
        Self {
            stale_after,
            behind: None,
            last: None,
            read_error: None,
        }
    }

    /// One look at the database (`status`, or why it could not be read),
    /// when this replica's watcher had seen events up to revision `seen`.
    pub fn observe(
        &mut self,
        status: Result<WriterStatus, String>,
        seen: i64,
        now: Instant,
        now_ms: i64,
    ) {
        match status {
            Ok(s) => {
                self.read_error = None;
                self.last = Some(s);
            }
            Err(e) => self.read_error = Some(e),
        }
        let recorded = self.recorded();
        if self.behind.is_some_and(|(rev, _, _)| recorded >= rev) {
            self.behind = None;
        }
        if self.behind.is_none() && seen > recorded {
            self.behind = Some((seen, now, now_ms));
        }
    }

    /// What the database said last (`None`: not read yet).
    pub fn last(&self) -> Option<&WriterStatus> {
        self.last.as_ref()
    }

    /// The revision the database has stored, as last read.
    fn recorded(&self) -> i64 {
        self.last.as_ref().and_then(|s| s.revision).unwrap_or(0)
    }

    /// Why the history is not being recorded, when a revision this replica
    /// saw has stayed unrecorded for longer than `stale_after`.
    pub fn stale(&self, now: Instant) -> Option<String> {
        let (revision, since, since_ms) = self.behind?;
        let waited = now.saturating_duration_since(since);
        if waited <= self.stale_after {
            return None;
        }
        let mut why = format!(
            "not ready: no replica has recorded the shared history for {} (longer than the \
             writer TTL and a takeover): etcd reached revision {revision} (seen here at {} UTC) \
             and the database holds up to revision {}",
            format_duration_ms(waited.as_millis() as i64),
            short_time(since_ms),
            self.recorded()
        );
        if let Some(s) = &self.last {
            if let Some(at) = s.watched_at_ms {
                why.push_str(&format!(
                    "; its writer was last live at {} UTC",
                    short_time(at)
                ));
            }
            match &s.writer {
                Some((token, holder)) => why.push_str(&format!(
                    "; the writer fence holds {holder} (token {token})"
                )),
                None => why.push_str("; no writer has ever written"),
            }
            match &s.last_error {
                Some(e) => why.push_str(&format!(
                    "; the last writer error, from {} at {} UTC: {}",
                    e.holder,
                    short_time(e.at_ms),
                    e.error
                )),
                None => why.push_str("; no writer error recorded"),
            }
        }
        if let Some(e) = &self.read_error {
            why.push_str(&format!("; the database cannot be read: {e}"));
        }
        why.push_str(". See the writer replica's log (tenure_history_writer = 1).\n");
        Some(why)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::history::WriterError;

    fn status(revision: i64) -> Result<WriterStatus, String> {
        Ok(WriterStatus {
            revision: Some(revision),
            watched_at_ms: Some(1_000),
            writer: Some((7, "replica-a".into())),
            writer_since_ms: None,
            last_error: Some(WriterError {
                holder: "replica-a".into(),
                at_ms: 2_000,
                error: "check constraint".into(),
            }),
        })
    }

    #[test]
    fn stale_only_after_a_revision_stays_unrecorded_past_the_limit() {
        let t0 = Instant::now();
        let s = |secs| t0 + Duration::from_secs(secs);
        let mut r = Recording::new(Duration::from_secs(5));
        r.observe(status(10), 10, t0, 0);
        assert_eq!(r.stale(s(100)), None, "everything seen is recorded");
        // etcd moved on to 12; recorded within the limit: never stale.
        r.observe(status(10), 12, s(1), 0);
        r.observe(status(12), 14, s(4), 0);
        assert_eq!(
            r.stale(s(8)),
            None,
            "12 recorded at 4 s: 14 counts from then"
        );
        r.observe(status(12), 14, s(9), 0);
        assert_eq!(r.stale(s(9)), None);
        let why = r.stale(s(10)).expect("14 unrecorded for 6 s");
        assert!(why.contains("revision 14"), "{why}");
        assert!(why.contains("replica-a (token 7)"), "{why}");
        assert!(why.contains("check constraint"), "{why}");
        // Recorded: ready again.
        r.observe(status(14), 14, s(11), 0);
        assert_eq!(r.stale(s(20)), None);
        // The database cannot be read: what was seen stays unrecorded.
        r.observe(Err("connection refused".into()), 15, s(21), 0);
        let why = r.stale(s(30)).expect("stale");
        assert!(why.contains("connection refused"), "{why}");
    }
}
