//! Acting records: what a holder says about when it actually acted as
//! leader in one term. etcd knows when a term began and ended;
//! only the holder knows when its program started acting, was told to stop
//! and had stopped. The difference is the split-brain window.
//!
//! A record is the value of `P election/~acting/<name>` (no lease, one key
//! per election, overwritten by each publication; the watcher keeps every
//! version it sees). Its times are milliseconds on the holder's boot clock
//! (CLOCK_BOOTTIME: it counts a suspended host and a frozen process, and
//! never jumps with the wall clock), counted from the term's *base*: the
//! moment the holder learned it had won. The commit that began the term is
//! in `[base − window_ms, base]`. A reader places the record on etcd's
//! time by aligning the base with the term's recorded start; comparisons
//! within one record (acting ended against the lease's earliest end) need
//! no alignment at all.
//!
//! Deliberately absent: any wall-clock time (hosts' clocks disagree), and
//! any write to a key tenure did not create.

use std::time::Duration;

use serde::{Deserialize, Serialize};

use super::deadline::{Deadline, Stamp};

/// A record sent after an attempt that failed is late; so is a record of
/// acting's end sent after the lease's earliest expiry, and any other
/// record sent more than this long after the last moment it reports.
pub const LATE_AFTER: Duration = Duration::from_secs(1);

/// Version of the record's format.
pub const VERSION: u32 = 1;

/// One term's acting, as its holder reports it (see the module
/// documentation for the time base). `None`: not (yet) known.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ActingRecord {
    pub v: u32,
    pub token: i64,
    pub holder: String,
    /// The commit of the term's start lies at most this long before the
    /// base (the round trip of the request that won). `None`: not known (a
    /// queued candidate learns of its win from a watch event, which may
    /// come late); the record cannot then be placed on etcd's time.
    pub window_ms: Option<i64>,
    /// Acting began: the command started, the leadership handed over.
    #[serde(default)]
    pub began_ms: Option<i64>,
    /// Stopping began: the loss seen, a signal, the command's own exit.
    #[serde(default)]
    pub stopping_ms: Option<i64>,
    /// Acting ended: the command's process group dead, the leadership
    /// dropped.
    #[serde(default)]
    pub ended_ms: Option<i64>,
    /// When `ended_ms` is not known: acting ended at the latest here (the
    /// guard's kill-at deadline).
    #[serde(default)]
    pub ended_by_ms: Option<i64>,
    /// The earliest moment etcd could have ended the term's lease, as the
    /// holder knows it: its last confirmed renewal's send time plus the
    /// TTL, or the moment it sent the request ending the term itself.
    #[serde(default)]
    pub lease_end_ms: Option<i64>,
    /// A guard kills the holder's process group by the lease's earliest
    /// expiry minus this many ms, even if the holder dies or freezes
    /// (`tenure campaign`); `None`: nothing bounds the acting but the
    /// holder's own word.
    #[serde(default)]
    pub guard_slack_ms: Option<i64>,
    /// When this version was sent.
    pub sent_ms: i64,
    /// Sent late (see [`LATE_AFTER`]): after a failed attempt (the holder
    /// was cut off from etcd), or its end after the lease's earliest expiry
    /// (the holder was frozen).
    #[serde(default)]
    pub late: bool,
}

impl ActingRecord {
    /// Parses a record from etcd; `None` for anything else (a foreign or
    /// newer writer: never guessed at).
    pub fn parse(value: &[u8]) -> Option<Self> {
        let r: Self = serde_json::from_slice(value).ok()?;
        (r.v == VERSION && r.token > 0).then_some(r)
    }

    /// Whether it says acting ended (exactly or by a bound).
    pub fn has_end(&self) -> bool {
        self.ended_ms.is_some() || self.ended_by_ms.is_some()
    }

    /// The latest moment the record reports.
    pub fn last_reported_ms(&self) -> Option<i64> {
        [
            self.began_ms,
            self.stopping_ms,
            self.ended_ms,
            self.ended_by_ms,
        ]
        .into_iter()
        .flatten()
        .max()
    }
}

/// A term's acting, kept by its holder: the base, and the record so far.
#[derive(Debug, Clone)]
pub struct Acting {
    base: Stamp,
    record: ActingRecord,
    /// An attempt to publish failed: what follows is late.
    failed: bool,
    /// Counts changes; `published` is the last one etcd has (so that a
    /// publication of an older version does not hide a newer change).
    version: u64,
    published: u64,
    /// The lease's earliest expiry when acting ended (offset): a record of
    /// the end sent after it came when another holder may already have
    /// been acting.
    expiry_ms: Option<i64>,
}

impl Acting {
    /// A term won by the request sent at `sent` (`None`: learned from a
    /// watch event), whose answer arrived at `base`.
    pub(crate) fn new(token: i64, holder: &str, sent: Option<Stamp>, base: Stamp) -> Self {
        Self {
            base,
            record: ActingRecord {
                v: VERSION,
                token,
                holder: holder.to_owned(),
                window_ms: sent.map(|s| ms(base.boot.saturating_sub(s.boot))),
                began_ms: None,
                stopping_ms: None,
                ended_ms: None,
                ended_by_ms: None,
                lease_end_ms: None,
                guard_slack_ms: None,
                sent_ms: 0,
                late: false,
            },
            failed: false,
            version: 0,
            published: 0,
            expiry_ms: None,
        }
    }

    /// Milliseconds from the base to `boot` (boot clock), negative before it.
    fn offset(&self, boot: Duration) -> i64 {
        if boot >= self.base.boot {
            ms(boot - self.base.boot)
        } else {
            -ms(self.base.boot - boot)
        }
    }

    pub fn began(&mut self, at: Stamp) {
        self.changed();
        self.record.began_ms = Some(self.offset(at.boot));
    }

    /// A guard kills the group `slack` before the lease's earliest expiry.
    pub fn guarded(&mut self, slack: Duration) {
        self.changed();
        self.record.guard_slack_ms = Some(ms(slack));
    }

    pub fn stopping(&mut self, at: Stamp) {
        if self.record.stopping_ms.is_none() {
            self.changed();
            self.record.stopping_ms = Some(self.offset(at.boot));
        }
    }

    /// Acting ended at `at`; etcd could have expired the lease at `expiry`
    /// at the earliest.
    pub fn ended(&mut self, at: Stamp, expiry: Deadline) {
        self.changed();
        self.record.ended_ms = Some(self.offset(at.boot));
        self.record.ended_by_ms = None;
        self.expiry_ms = Some(self.offset(expiry.boot));
        self.lease_end(expiry);
    }

    /// Acting ended at an unknown moment, at the latest `by`.
    pub fn ended_by(&mut self, by: Deadline, expiry: Deadline) {
        self.changed();
        self.record.ended_ms = None;
        self.record.ended_by_ms = Some(self.offset(by.boot));
        self.expiry_ms = Some(self.offset(expiry.boot));
        self.lease_end(expiry);
    }

    /// The lease could have ended no earlier than `at` (the earlier of what
    /// is already known and this): its earliest expiry, or a request of the
    /// holder's own that etcd confirmed.
    pub fn lease_end(&mut self, at: Deadline) {
        let at = self.offset(at.boot);
        let end = Some(self.record.lease_end_ms.map_or(at, |l| l.min(at)));
        if end != self.record.lease_end_ms {
            self.changed();
        }
        self.record.lease_end_ms = end;
    }

    /// The lease's end is not known: the key went without it (a depose),
    /// and the holder's own revoke, which ends it, was not confirmed; it
    /// may have ended any time after.
    pub fn lease_end_unknown(&mut self) {
        if self.record.lease_end_ms.is_some() {
            self.changed();
        }
        self.record.lease_end_ms = None;
    }

    pub fn has_ended(&self) -> bool {
        self.record.ended_ms.is_some() || self.record.ended_by_ms.is_some()
    }

    /// The record as it would be sent now.
    pub fn to_send(&self) -> ActingRecord {
        let mut r = self.record.clone();
        r.sent_ms = self.offset(Stamp::now().boot);
        r.late = self.failed
            || match (r.has_end(), self.expiry_ms) {
                // The end's word after the lease's earliest expiry: another
                // holder may have been acting before it came.
                (true, Some(expiry)) => r.sent_ms > expiry,
                _ => r.sent_ms - r.last_reported_ms().unwrap_or(0) > ms(LATE_AFTER),
            };
        r
    }

    /// Whether it changed since it was last published.
    pub fn unsent(&self) -> bool {
        self.version != self.published
    }

    fn changed(&mut self) {
        self.version += 1;
    }

    /// The current version (see [`Acting::sent_version`]).
    pub fn version(&self) -> u64 {
        self.version
    }

    /// Version `version` was published (what follows is on time): unsent
    /// only if it changed since.
    pub fn sent(&mut self, version: u64) {
        self.failed = false;
        self.published = self.published.max(version);
    }

    /// An attempt to publish failed: later versions are late.
    pub fn failed(&mut self) {
        self.failed = true;
    }
}

fn ms(d: Duration) -> i64 {
    i64::try_from(d.as_millis()).unwrap_or(i64::MAX)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn stamp(boot_ms: u64) -> Stamp {
        Stamp {
            mono: tokio::time::Instant::now(),
            boot: Duration::from_millis(boot_ms),
        }
    }

    #[test]
    fn times_are_offsets_from_the_base_on_the_boot_clock() {
        let mut a = Acting::new(7, "h", Some(stamp(1_000)), stamp(1_004));
        a.began(stamp(1_010));
        a.stopping(stamp(3_000));
        a.stopping(stamp(3_500));
        a.ended(stamp(3_200), stamp(5_004).after(Duration::ZERO));
        a.lease_end(stamp(6_000).after(Duration::ZERO));
        let r = a.record.clone();
        assert_eq!(r.window_ms, Some(4));
        assert_eq!(r.began_ms, Some(6));
        assert_eq!(r.stopping_ms, Some(1_996), "the first stop counts");
        assert_eq!(r.ended_ms, Some(2_196));
        assert_eq!(r.lease_end_ms, Some(4_000), "the earlier lease end stays");
        let back = ActingRecord::parse(&serde_json::to_vec(&r).unwrap());
        assert_eq!(back, Some(r));
    }

    #[test]
    fn a_foreign_or_newer_value_is_not_a_record() {
        assert_eq!(ActingRecord::parse(b"not json"), None);
        assert_eq!(
            ActingRecord::parse(br#"{"v":2,"token":1,"holder":"h","window_ms":0,"sent_ms":0}"#),
            None
        );
        assert!(ActingRecord::parse(
            br#"{"v":1,"token":1,"holder":"h","window_ms":0,"sent_ms":0}"#
        )
        .is_some());
    }

    #[test]
    fn a_record_sent_long_after_what_it_reports_or_after_a_failure_is_late() {
        let now = Stamp::now();
        let mut a = Acting::new(7, "h", Some(now), now);
        a.began(now);
        assert!(!a.to_send().late);
        a.failed();
        assert!(a.to_send().late);
        let mut old = Acting::new(7, "h", Some(now), now);
        old.began(Stamp {
            mono: now.mono,
            boot: now.boot.saturating_sub(Duration::from_secs(5)),
        });
        assert!(old.to_send().late);
    }
}
