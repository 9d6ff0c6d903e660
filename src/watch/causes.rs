//! Why a term ended when its key went without tenure's end marker: asks
//! etcd about the lease, then judges from the lease's last sample.

use crate::task::Locked;
use std::time::Duration;

use tokio::time::Instant;

use super::leases::Sample;
use super::Watcher;
use crate::events::EndCause;

/// How long after the latest possible expiry a sample predicts a deletion
/// may still be etcd's expiry (its ~0.5 s expiry check, scheduling).
const EXPIRY_CHECK_SLACK: Duration = Duration::from_millis(1500);

/// For `resigned`, the deletion must arrive at least this long before the
/// earliest expiry the last sample allows.
const RESIGNED_MARGIN: Duration = Duration::from_millis(500);

/// For `expired`, the last sample of a lapsing lease must be this recent
/// when its deletion arrives.
const RECENT_SAMPLE: Duration = Duration::from_millis(1000);

/// A key deleted while its lease lived, and that lease revoked just after
/// (etcd's `Election.Resign` then `Session.Close`, a Vault unlock: 1–3 ms
/// apart), is one act, `resigned`. Asked once, etcd answered `deleted` or
/// `resigned` by whether the revoke had landed yet; so a lease found alive
/// is asked about again this long after the deletion arrived: alive then,
/// `deleted`. Its cost: a batch with such a deletion is recorded this much
/// later.
const RESIGN_THEN_CLOSE: Duration = Duration::from_millis(30);

/// A lease found gone by the second ask is `resigned` only if that answer
/// came within this long of the deletion's arrival (the revoke landed
/// before it): a slow etcd must not stretch "just after" into a word that
/// a fast one would not give. Later: `unknown`.
const RESIGN_THEN_CLOSE_AT_MOST: Duration = Duration::from_millis(100);

/// A lease found alive after its key's deletion: asked at `asked`, with
/// `ttl` whole seconds left, in raft term `term`.
struct Lived {
    asked: Instant,
    ttl: i64,
    term: Option<u64>,
}

impl Watcher {
    /// A leader key went without tenure's end marker; its deletion arrived
    /// at `deleted_by` (it happened before). If its lease still lives, the
    /// key was deleted, unless the lease is revoked right after
    /// ([`RESIGN_THEN_CLOSE`]). If not, the lease was revoked or ran out,
    /// and the last sample (`remaining` r, rounded down, between `sent` and
    /// `at`) decides only where it is certain (see [`judge`]); else
    /// `unknown`.
    pub(super) async fn cause_of_lease_end(&self, lease: i64, deleted_by: Instant) -> EndCause {
        let asked = Instant::now();
        let Some((ttl, raft_term)) = self.lease_ttl(lease).await else {
            return EndCause::Unknown;
        };
        // etcd answers -1 for a lease it no longer knows; 0 is a lease
        // alive with less than a second left.
        if ttl >= 0 {
            let lived = Lived {
                asked,
                ttl,
                term: raft_term,
            };
            return self.deleted_or_closed(lease, lived, deleted_by).await;
        }
        let sample = self.leases.locked().samples.get(&lease).copied();
        let Some(s) = sample else {
            // Never sampled: the term ended before the sampler looked at its
            // lease, or while tenure was down (a restart replays it). etcd
            // no longer knows the lease, so nothing tells expiry from
            // revocation: say so instead of guessing.
            return EndCause::Unknown;
        };
        // A leader change since the sample voids its prediction either way:
        // the new leader extends every lease, and the old one, resuming, can
        // still revoke a lease that ran out by its own clock (seen: a 5 s
        // lease deleted 7.1 s after its grant, 2.4 s before the extended
        // expiry the sample predicted).
        let term = match raft_term {
            Some(t) => Some(t),
            None => self.raft_term().await,
        };
        verdict(&s, term, deleted_by)
    }

    /// The lease's remaining seconds (-1: etcd no longer knows it) and the
    /// raft term of the answer; `None` when etcd did not answer.
    async fn lease_ttl(&self, lease: i64) -> Option<(i64, Option<u64>)> {
        match self
            .client
            .op(self.client.etcd().lease_time_to_live(lease, None))
            .await
        {
            Ok(resp) => Some((resp.ttl(), resp.header().map(|h| h.raft_term()))),
            Err(e) if e.is_lease_not_found() => Some((-1, None)),
            Err(e) => {
                tracing::warn!(error = %e, lease, "cannot ask etcd about an ended term's lease");
                None
            }
        }
    }

    /// The key was deleted while its lease lived (`lived`): `deleted` if
    /// the lease still lives [`RESIGN_THEN_CLOSE`] after the deletion
    /// arrived; `resigned` if it was revoked by then: gone before the
    /// seconds it had left could run out, with no leader change (a resuming
    /// leader can end a lease early), answered within
    /// [`RESIGN_THEN_CLOSE_AT_MOST`]; otherwise `unknown`.
    async fn deleted_or_closed(&self, lease: i64, lived: Lived, deleted_by: Instant) -> EndCause {
        tokio::time::sleep_until(deleted_by + RESIGN_THEN_CLOSE).await;
        let later = self.lease_ttl(lease).await;
        let before_expiry = lived.asked.elapsed() < Duration::from_secs(lived.ttl.unsigned_abs());
        let just_after = Instant::now() <= deleted_by + RESIGN_THEN_CLOSE_AT_MOST;
        match later {
            Some((ttl, _)) if ttl >= 0 => EndCause::Deleted,
            Some(_)
                if before_expiry
                    && just_after
                    && lived.term.is_some()
                    && self.raft_term().await == lived.term =>
            {
                EndCause::Resigned
            }
            _ => EndCause::Unknown,
        }
    }

    /// etcd's current raft term (it changes with every leader election).
    async fn raft_term(&self) -> Option<u64> {
        let status = self.client.op(self.client.etcd().status()).await.ok()?;
        status.header().map(|h| h.raft_term())
    }
}

/// Revoked or expired, from the lease's samples and the time its deletion
/// arrived (`deleted_by`: the deletion happened at or before it).
///
/// - Every sample was answered while the lease lived, with at least
///   `remaining` whole seconds left, so it cannot expire before `lower`.
///   Gone before that → revoked (`resigned`). Certain.
/// - Expired only when the last sample shows the lease *lapsing* — less than
///   half its granted TTL left, which a client renewing every TTL/3 (Go's,
///   tenure's) never shows — taken at most [`RECENT_SAMPLE`] before the
///   deletion arrived (so no renewal fits in between, bar one in those few
///   hundred ms), and the deletion arrived after the latest expiry the
///   samples allow (`upper`) but within etcd's expiry check after it.
/// - Everything else → `unknown`: a kept-alive lease gone after its last
///   sample's horizon may have been revoked or have stopped being renewed.
fn judge(s: &Sample, deleted_by: Instant) -> EndCause {
    if deleted_by + RESIGNED_MARGIN < s.lower {
        return EndCause::Resigned;
    }
    if s.lapsing()
        && deleted_by >= s.upper
        && deleted_by <= s.upper + EXPIRY_CHECK_SLACK
        && deleted_by <= s.at + RECENT_SAMPLE
    {
        return EndCause::Expired;
    }
    EndCause::Unknown
}

/// The cause of a lease's end from its last sample, etcd's raft term when
/// the end was looked up, and when the deletion arrived. A leader change
/// since the sample voids its prediction; a leader change during the
/// lease's life (since its first sample) voids a `resigned`: the old
/// leader, resuming, can revoke a lease early (etcd issue 15247), which no
/// client did. Certain or `unknown`.
fn verdict(s: &Sample, term: Option<u64>, deleted_by: Instant) -> EndCause {
    if term != Some(s.raft_term) {
        return EndCause::Unknown;
    }
    match judge(s, deleted_by) {
        EndCause::Resigned if s.first_term != s.raft_term => EndCause::Unknown,
        other => other,
    }
}

#[cfg(test)]
mod tests {
    use super::{judge, EndCause, Instant, Sample};
    use std::time::Duration;

    fn sample(t0: Instant, at_ms: u64, remaining: i64, granted: i64) -> Sample {
        let sent = t0 + Duration::from_millis(at_ms);
        let at = sent + Duration::from_millis(2);
        let secs = Duration::from_secs(remaining as u64);
        Sample {
            sent,
            at,
            remaining,
            granted,
            raft_term: 1,
            first_term: 1,
            lower: sent + secs,
            upper: at + secs + Duration::from_secs(1),
        }
    }

    #[test]
    fn an_early_end_of_a_lease_that_lived_through_a_leader_change_is_unknown() {
        use super::verdict;
        let t0 = Instant::now();
        // A 10 s lease sampled with 8 s left, gone 1 s later: revoked.
        let s = sample(t0, 0, 8, 10);
        let gone = t0 + Duration::from_secs(1);
        assert_eq!(verdict(&s, Some(1), gone), EndCause::Resigned);
        // The same, but the lease was first sampled under another etcd
        // leader: the old one may have revoked it on resuming.
        let across = Sample { first_term: 0, ..s };
        assert_eq!(verdict(&across, Some(1), gone), EndCause::Unknown);
        // A leader change since the sample: unknown either way.
        assert_eq!(verdict(&s, Some(2), gone), EndCause::Unknown);
        assert_eq!(verdict(&s, None, gone), EndCause::Unknown);
    }

    #[test]
    fn causes_are_certain_or_unknown() {
        let t0 = Instant::now();
        let ms = |m: u64| t0 + Duration::from_millis(m);
        // Kept alive (2 of 2 s left), revoked 1.2 s later: before the
        // earliest expiry → resigned; later → unknown, never expired.
        let kept = sample(t0, 0, 1, 2);
        assert_eq!(judge(&kept, ms(400)), EndCause::Resigned);
        assert_eq!(
            judge(&kept, ms(900)),
            EndCause::Unknown,
            "within the margin"
        );
        assert_eq!(judge(&kept, ms(1200)), EndCause::Unknown);
        assert_eq!(judge(&kept, ms(2100)), EndCause::Unknown, "not lapsing");
        // Lapsing samples 100 ms apart (1 s, then 0 s left) narrow the
        // expiry to [1000, 1102) ms; later samples keep the bounds: a
        // deletion after that is expired.
        let a = sample(t0, 0, 1, 5);
        let b = sample(t0, 100, 0, 5).narrowed(Some(&a));
        assert!(b.upper <= ms(1102), "{b:?}");
        let c = sample(t0, 1000, 0, 5).narrowed(Some(&b));
        assert_eq!(c.upper, b.upper);
        assert_eq!(judge(&c, ms(1150)), EndCause::Expired);
        assert_eq!(judge(&c, ms(1050)), EndCause::Unknown, "maybe revoked");
        assert_eq!(judge(&c, ms(5000)), EndCause::Unknown, "too late");
        assert_eq!(judge(&b, ms(1150)), EndCause::Unknown, "no recent sample");
        // A renewal between two samples: the later one is not narrowed.
        let renewed = sample(t0, 900, 4, 5).narrowed(Some(&a));
        assert_eq!(renewed.lower, sample(t0, 900, 4, 5).lower);
    }
}
