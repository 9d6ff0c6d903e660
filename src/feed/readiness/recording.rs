//! Whether a shared history is being recorded, as one replica
//! can tell: its own watcher saw etcd reach a revision, and the database
//! has not stored it for longer than a writer takeover takes. Then no
//! replica records (the writer's watcher is stuck, the database refuses its
//! commits, no replica can become the writer), whatever this replica's own
//! watcher says, and `/readyz` says so on every replica, with why. Pure:
//! the serve loop's poller hands it what the database says.
//!
//! It also words the writer lines of `/readyz`: what the database says of
//! the last writer (its last commit, never "who writes now": a writer
//! killed an instant ago still holds the fence row), and this replica's own
//! part, as its writer task knows it for sure (writing, standing by, or
//! refused by etcd).
//!
//! Only revisions that carried events of the watched range count: a
//! progress revision is persisted late on some etcd versions (see
//! ARCHITECTURE.md) and would look like a lag.

use std::time::{Duration, Instant};

use crate::history::{format_duration_ms, short_time, WriterStatus};

/// A heartbeat unchanged for less than this is not worth a word.
const HEARTBEAT_QUIET: Duration = Duration::from_secs(2);

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
    /// The writer's last heartbeat this replica read, and since when
    /// (monotonic) it has read that same one: the heartbeat is at least
    /// that old, whatever the machines' clocks say.
    heartbeat_seen: Option<(i64, Instant)>,
    /// This replica's own part (`None`: its writer task has not campaigned
    /// yet, its etcd not answered since start).
    role: Option<Role>,
}

/// This replica's own part in writing its feed, as its writer task knows it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Role {
    /// Campaigning; `elected`: etcd's writer election as this replica last
    /// read it (`None`: not read, or no leader).
    StandingBy { elected: Option<Elected> },
    /// It holds the writer term `token`, won at `since_ms`.
    Writing { token: i64, since_ms: i64 },
    /// etcd refused its last campaign (at `at_ms`): `why` says what to do;
    /// `permanent`: no retry fixes it (TLS, authentication, a missing
    /// grant), so this replica can never take over as it is.
    Refused {
        at_ms: i64,
        why: String,
        permanent: bool,
    },
}

/// The leader of etcd's writer election, as read by a standby.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Elected {
    pub token: i64,
    pub holder: String,
    /// Its lease's remaining seconds when read (`None`: not known): a dead
    /// writer's counts down to its loss.
    pub lease_left_s: Option<i64>,
    /// When it was read (unix ms).
    pub read_at_ms: i64,
}

impl Recording {
    pub fn new(stale_after: Duration) -> Self {
        Self {
            stale_after,
            behind: None,
            last: None,
            read_error: None,
            heartbeat_seen: None,
            role: None,
        }
    }

    /// What this replica's writer task knows of its own part.
    pub fn set_role(&mut self, role: Role) {
        self.role = Some(role);
    }

    pub fn role(&self) -> Option<&Role> {
        self.role.as_ref()
    }

    /// Why this replica can never take over writing, when etcd refused its
    /// campaign for good (`/readyz` answers 503 with it).
    pub fn refused(&self) -> Option<&str> {
        match &self.role {
            Some(Role::Refused {
                why,
                permanent: true,
                ..
            }) => Some(why),
            _ => None,
        }
    }

    /// `/readyz`'s two writer lines: what the database says of the last
    /// writer, and this replica's own part.
    pub fn lines(&self, now: Instant) -> [String; 2] {
        [self.history_line(now), self.role_line()]
    }

    /// The fence row names who last claimed it and committed with the
    /// highest token, not who writes now; the heartbeat's age is what this
    /// replica itself has seen of it (a lower bound, with no clock of
    /// another machine in it).
    fn history_line(&self, now: Instant) -> String {
        let Some(s) = &self.last else {
            return "history writer: not read from the database yet".to_owned();
        };
        let mut line = match (&s.writer, s.writer_since_ms) {
            (Some((token, holder)), Some(since)) => format!(
                "history writer: last commit by {holder} (token {token}, fence claimed at {} UTC)",
                short_time(since)
            ),
            (Some((token, holder)), None) => {
                format!("history writer: last commit by {holder} (token {token})")
            }
            (None, _) => "history writer: none has written yet".to_owned(),
        };
        if let Some(at) = s.watched_at_ms {
            line.push_str(&format!("; last heartbeat at {} UTC", short_time(at)));
            let unchanged = self
                .heartbeat_seen
                .filter(|(seen, _)| *seen == at)
                .map(|(_, since)| now.saturating_duration_since(since));
            if let Some(d) = unchanged.filter(|d| *d >= HEARTBEAT_QUIET) {
                line.push_str(&format!(
                    ", none newer read here for {}",
                    format_duration_ms(d.as_millis() as i64)
                ));
            }
        }
        line
    }

    fn role_line(&self) -> String {
        match &self.role {
            None => "this replica: not campaigning for the writer term yet (its cluster has \
                     not answered since start)"
                .to_owned(),
            Some(Role::Writing { token, since_ms }) => format!(
                "this replica: writing (term token {token} since {} UTC)",
                short_time(*since_ms)
            ),
            Some(Role::StandingBy { elected: None }) => "this replica: standing by".to_owned(),
            Some(Role::StandingBy { elected: Some(e) }) => {
                let lease = e
                    .lease_left_s
                    .map(|s| format!(", its lease {s} s from running out unless renewed"))
                    .unwrap_or_default();
                format!(
                    "this replica: standing by (the writer election held by {} with token \
                     {}{lease}, read at {} UTC)",
                    e.holder,
                    e.token,
                    short_time(e.read_at_ms)
                )
            }
            Some(Role::Refused {
                at_ms,
                why,
                permanent,
            }) => {
                let what = if *permanent {
                    "cannot take over writing"
                } else {
                    "standing by, retrying"
                };
                format!(
                    "this replica: {what}: its campaign was refused at {} UTC: {why}",
                    short_time(*at_ms)
                )
            }
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
                if let Some(at) = s.watched_at_ms {
                    if self.heartbeat_seen.is_none_or(|(seen, _)| seen != at) {
                        self.heartbeat_seen = Some((at, now));
                    }
                }
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

    #[test]
    fn the_writer_lines_name_the_last_commit_and_this_replicas_own_part() {
        let t0 = Instant::now();
        let mut r = Recording::new(Duration::from_secs(5));
        assert_eq!(
            r.lines(t0)[0],
            "history writer: not read from the database yet"
        );
        r.observe(status(10), 10, t0, 0);
        let [history, own] = r.lines(t0);
        assert!(
            history.starts_with("history writer: last commit by replica-a (token 7)"),
            "{history}"
        );
        assert!(!history.contains("none newer"), "{history}");
        assert!(own.starts_with("this replica: not campaigning"), "{own}");
        // The same heartbeat read for 3 s: at least that old.
        r.observe(status(10), 10, t0 + Duration::from_secs(3), 0);
        let [history, _] = r.lines(t0 + Duration::from_secs(3));
        assert!(
            history.contains("none newer read here for 3.0s"),
            "{history}"
        );
        r.set_role(Role::StandingBy {
            elected: Some(Elected {
                token: 7,
                holder: "replica-a".into(),
                lease_left_s: Some(4),
                read_at_ms: 0,
            }),
        });
        let [_, own] = r.lines(t0);
        assert!(own.contains("held by replica-a with token 7"), "{own}");
        assert!(own.contains("4 s from running out"), "{own}");
        assert_eq!(r.refused(), None);
        r.set_role(Role::Refused {
            at_ms: 0,
            why: "permission denied".into(),
            permanent: true,
        });
        assert_eq!(r.refused(), Some("permission denied"));
        let [_, own] = r.lines(t0);
        assert!(
            own.starts_with("this replica: cannot take over writing"),
            "{own}"
        );
        r.set_role(Role::Refused {
            at_ms: 0,
            why: "etcd unreachable".into(),
            permanent: false,
        });
        assert_eq!(r.refused(), None, "a passing failure holds nothing back");
        r.set_role(Role::Writing {
            token: 9,
            since_ms: 0,
        });
        let [_, own] = r.lines(t0);
        assert!(
            own.starts_with("this replica: writing (term token 9 since"),
            "{own}"
        );
    }
}
