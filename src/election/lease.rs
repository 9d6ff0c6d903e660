//! Leases: TTL validation, and a session that keeps one lease alive and
//! knows, at every moment, until when it can be *sure* the lease lives.
//!
//! The session's keepalive task records the instant each keepalive request
//! was *sent*; etcd extends the lease no earlier than that, so
//! `sent + ttl - margin` is a deadline the holder can trust without reading
//! anyone's wall clock (only this process's monotonic clock is used). When no
//! renewal has been confirmed by then, the session is lost, before etcd can
//! have expired the lease. Loss is sticky: a late confirmation never revives
//! a lost session.

use std::time::Duration;

use tokio::sync::watch;
use tokio::task::JoinHandle;
use tokio::time::{sleep_until, timeout, Instant};

use super::deadline::{Deadline, Stamp};
use super::{Client, Error};

/// etcd's smallest lease: `ceil(1.5 × election-timeout)`, 2 s with etcd's
/// default 1000 ms election timeout. etcd silently raises shorter requests.
pub const ETCD_MIN_TTL_SECS: u64 = 2;
/// etcd's largest lease TTL (`MaxLeaseTTL`, 9,000,000,000 s).
pub const ETCD_MAX_TTL_SECS: u64 = 9_000_000_000;

/// A lease TTL in whole seconds, validated against etcd's limits.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub struct Ttl(u64);

impl Ttl {
    pub fn from_secs(secs: u64) -> Result<Self, Error> {
        if secs == 0 {
            return Err(Error::InvalidTtl(format!(
                "0 s is not a lease; etcd's minimum is {ETCD_MIN_TTL_SECS} s"
            )));
        }
        if secs < ETCD_MIN_TTL_SECS {
            return Err(Error::InvalidTtl(format!(
                "{secs} s is below etcd's minimum lease TTL of {ETCD_MIN_TTL_SECS} s \
                 (1.5 × its 1000 ms election timeout); etcd would silently grant {ETCD_MIN_TTL_SECS} s"
            )));
        }
        if secs > ETCD_MAX_TTL_SECS {
            return Err(Error::InvalidTtl(format!(
                "{secs} s is above etcd's maximum lease TTL of {ETCD_MAX_TTL_SECS} s"
            )));
        }
        Ok(Self(secs))
    }

    /// Refuses fractions instead of truncating them: `1.5 s` is an error,
    /// not a 1 s (or, as in the reference code, a 0 s) lease.
    pub fn from_duration(d: Duration) -> Result<Self, Error> {
        if d.subsec_nanos() != 0 {
            return Err(Error::InvalidTtl(format!(
                "{d:?} is not a whole number of seconds; etcd leases have 1 s resolution"
            )));
        }
        Self::from_secs(d.as_secs())
    }

    pub fn secs(self) -> u64 {
        self.0
    }

    pub fn as_duration(self) -> Duration {
        Duration::from_secs(self.0)
    }
}

impl std::str::FromStr for Ttl {
    type Err = Error;
    fn from_str(s: &str) -> Result<Self, Error> {
        let secs: u64 = s.trim().trim_end_matches('s').parse().map_err(|_| {
            Error::InvalidTtl(format!(
                "{s:?} is not a whole number of seconds (etcd's minimum is {ETCD_MIN_TTL_SECS})"
            ))
        })?;
        Self::from_secs(secs)
    }
}

/// The default safety margin: a quarter of the TTL, at least 500 ms, so the
/// holder stops before etcd can expire its lease even if one renewal is late.
pub fn default_margin(ttl: Duration) -> Duration {
    (ttl / 4).max(Duration::from_millis(500)).min(ttl / 2)
}

/// Why a session (and with it, a leadership) ended. The first reason wins.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum LossReason {
    /// No renewal was confirmed within TTL minus the safety margin.
    RenewalDeadline { ttl: Duration, margin: Duration },
    /// The deadline passed while the host was suspended: CLOCK_BOOTTIME
    /// ran on while CLOCK_MONOTONIC stood still. etcd may have expired the
    /// lease meanwhile.
    HostSuspended,
    /// etcd answered that the lease does not exist any more.
    LeaseGone,
    /// The leader key was deleted (revision of the deletion).
    KeyDeleted { revision: i64 },
    /// The leader key now belongs to another term.
    TakenOver {
        holder: String,
        token: i64,
        revision: i64,
    },
    /// etcd refused to let the holder read or watch its own leader key
    /// (permission or authentication: its role lost the grant, its user is
    /// gone). It can no longer see its term end; the lease may well be
    /// renewed still, since etcd does not check keepalives against roles.
    AccessDenied { reason: String },
    /// The leader key was not read back with this term's token for a TTL
    /// (reads failed or went unanswered while keepalives passed): the
    /// holder cannot tell whether the term was ended.
    KeyUnconfirmed { ttl: Duration },
    /// The holder resigned.
    Resigned,
    /// The process received SIGTERM or SIGINT and resigned.
    Signal,
}

impl std::fmt::Display for LossReason {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            LossReason::RenewalDeadline { ttl, margin } => write!(
                f,
                "no lease renewal confirmed within the TTL ({ttl:?}) minus the safety margin ({margin:?})"
            ),
            LossReason::HostSuspended => f.write_str(
                "the host was suspended past the renewal deadline; etcd may have expired the lease",
            ),
            LossReason::LeaseGone => f.write_str("etcd reports the lease is gone (expired or revoked)"),
            LossReason::KeyDeleted { revision } => {
                write!(f, "the leader key was deleted at revision {revision}")
            }
            LossReason::TakenOver {
                holder,
                token,
                revision,
            } => write!(
                f,
                "the leader key was taken over by {holder:?} (token {token}) at revision {revision}"
            ),
            LossReason::AccessDenied { reason } => write!(
                f,
                "etcd refused this holder its own leader key, so it cannot see its term end: {reason}"
            ),
            LossReason::KeyUnconfirmed { ttl } => write!(
                f,
                "the leader key was not confirmed for the TTL ({ttl:?}) though the lease was \
                 renewed: this holder cannot tell whether its term was ended"
            ),
            LossReason::Resigned => f.write_str("resigned"),
            LossReason::Signal => f.write_str("resigned on SIGTERM/SIGINT"),
        }
    }
}

/// What a session knows about its lease.
#[derive(Debug, Clone)]
pub struct LeaseState {
    /// Until this deadline the lease certainly lives (if not `lost`):
    /// the last confirmed renewal's send time + TTL − margin, on both the
    /// monotonic and the boot clock.
    pub valid_until: Deadline,
    pub lost: Option<LossReason>,
}

impl LeaseState {
    /// The earliest moment etcd can have expired the lease: `valid_until`
    /// plus the margin.
    pub fn expiry_earliest(&self, margin: Duration) -> Deadline {
        Deadline {
            mono: self.valid_until.mono + margin,
            boot: self.valid_until.boot + margin,
        }
    }
}

/// The reason for a loss by deadline: a suspend, or a late renewal.
pub(crate) fn deadline_reason(deadline: &Deadline, ttl: Duration, margin: Duration) -> LossReason {
    if deadline.passed_by_suspend() {
        LossReason::HostSuspended
    } else {
        LossReason::RenewalDeadline { ttl, margin }
    }
}

pub(crate) fn mark_lost(state: &watch::Sender<LeaseState>, reason: LossReason) {
    state.send_if_modified(|s| {
        if s.lost.is_none() {
            s.lost = Some(reason);
            true
        } else {
            false
        }
    });
}

/// Waits until the state reports a loss, enforcing the deadline itself so
/// that the answer never depends on the keepalive task being scheduled.
pub(crate) async fn wait_lost(
    state: &watch::Sender<LeaseState>,
    ttl: Duration,
    margin: Duration,
) -> LossReason {
    let mut rx = state.subscribe();
    loop {
        let (lost, valid_until) = {
            let s = rx.borrow_and_update();
            (s.lost.clone(), s.valid_until)
        };
        if let Some(reason) = lost {
            return reason;
        }
        tokio::select! {
            biased;
            _ = valid_until.wait() => {
                state.send_if_modified(|s| {
                    if s.lost.is_none() && s.valid_until.has_passed() {
                        s.lost = Some(deadline_reason(&s.valid_until, ttl, margin));
                        true
                    } else {
                        false
                    }
                });
            }
            _ = rx.changed() => {}
        }
    }
}

/// One lease kept alive in the background.
pub(crate) struct Session {
    client: Client,
    pub(crate) lease_id: i64,
    pub(crate) ttl: Duration,
    pub(crate) margin: Duration,
    pub(crate) state: watch::Sender<LeaseState>,
    keepalive: JoinHandle<()>,
    released: bool,
}

/// A fresh lease id for [`Session::grant`]: positive, 62 random bits
/// (std's per-process random hash keys over the time and a counter), so
/// two clients choosing one alike is as unlikely as a collision of etcd's
/// own. etcd refuses an id in use (the grant fails and is retried with
/// another).
pub(crate) fn new_lease_id() -> i64 {
    use std::hash::{BuildHasher, Hasher};
    static COUNTER: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
    let mut h = std::collections::hash_map::RandomState::new().build_hasher();
    h.write_u64(COUNTER.fetch_add(1, std::sync::atomic::Ordering::Relaxed));
    h.write_u128(crate::election::deadline::boottime().as_nanos());
    let id = (h.finish() >> 2) as i64;
    id.max(1)
}

impl Session {
    /// Grants a lease and starts keeping it alive. `id`: the lease's id,
    /// chosen by the caller ([`new_lease_id`]) so that it can revoke a
    /// lease whose grant it gave up waiting for; 0: etcd chooses.
    pub(crate) async fn grant(
        client: &Client,
        ttl: Ttl,
        margin: Option<Duration>,
        id: i64,
    ) -> Result<Self, Error> {
        let sent = Stamp::now();
        let opts = (id != 0).then(|| etcd_client::LeaseGrantOptions::new().with_id(id));
        let resp = client
            .op(client.etcd().lease_grant(ttl.secs() as i64, opts))
            .await?;
        // etcd may raise a short TTL to its minimum: trust what it granted.
        let granted = Duration::from_secs(resp.ttl().max(1) as u64);
        let margin = margin
            .unwrap_or_else(|| default_margin(granted))
            .min(granted / 2);
        let (state, _) = watch::channel(LeaseState {
            valid_until: sent.after(granted - margin),
            lost: None,
        });
        let keepalive = crate::task::spawn(
            "keepalive",
            keepalive_task(client.etcd(), resp.id(), granted, margin, state.clone()),
        );
        Ok(Self {
            client: client.clone(),
            lease_id: resp.id(),
            ttl: granted,
            margin,
            state,
            keepalive,
            released: false,
        })
    }

    pub(crate) fn lost(&self) -> Option<LossReason> {
        self.state.borrow().lost.clone()
    }

    /// True while the lease certainly lives.
    pub(crate) fn is_valid(&self) -> bool {
        let s = self.state.borrow();
        s.lost.is_none() && !s.valid_until.has_passed()
    }

    /// Stops keeping the lease alive and hands it over: nothing is revoked,
    /// the caller renews it from now on. Returns the lease id and its TTL.
    pub(crate) fn detach(mut self) -> (i64, Duration) {
        self.keepalive.abort();
        self.released = true;
        (self.lease_id, self.ttl)
    }

    /// Stops the keepalive and revokes the lease, which deletes every key
    /// attached to it.
    pub(crate) async fn revoke(&mut self, reason: LossReason) -> Result<(), Error> {
        self.revoke_confirmed(reason).await.map(|_| ())
    }

    /// [`Session::revoke`], saying whether etcd revoked the lease now
    /// (`true`) or it was already gone (`false`: expired or revoked).
    pub(crate) async fn revoke_confirmed(&mut self, reason: LossReason) -> Result<bool, Error> {
        self.keepalive.abort();
        self.released = true;
        mark_lost(&self.state, reason);
        match self
            .client
            .op(self.client.etcd().lease_revoke(self.lease_id))
            .await
        {
            Ok(_) => Ok(true),
            // Already expired or revoked: the term is over either way.
            Err(e) if e.is_lease_not_found() => Ok(false),
            Err(e) => Err(e),
        }
    }
}

impl Drop for Session {
    fn drop(&mut self) {
        self.keepalive.abort();
        if self.released {
            return;
        }
        mark_lost(&self.state, LossReason::Resigned);
        // Best effort: without a runtime, etcd expires the lease after its TTL.
        if let Ok(rt) = tokio::runtime::Handle::try_current() {
            let mut client = self.client.etcd();
            let id = self.lease_id;
            crate::task::spawn_on(&rt, "lease revoke", async move {
                let _ = timeout(Duration::from_secs(5), client.lease_revoke(id)).await;
            });
        }
    }
}

async fn keepalive_task(
    mut client: etcd_client::Client,
    id: i64,
    ttl: Duration,
    margin: Duration,
    state: watch::Sender<LeaseState>,
) {
    let interval = ttl / 3;
    let mut stream = None;
    let mut next_send = Instant::now() + interval;
    let mut backoff = Duration::from_millis(50);
    loop {
        let valid_until = {
            let s = state.borrow();
            if s.lost.is_some() {
                return;
            }
            s.valid_until
        };
        tokio::select! {
            biased;
            _ = valid_until.wait() => {
                mark_lost(&state, deadline_reason(&valid_until, ttl, margin));
                return;
            }
            outcome = async {
                sleep_until(next_send).await;
                renew_once(&mut client, id, &mut stream, interval).await
            } => {
                let now = Instant::now();
                match outcome {
                    Renewal::Confirmed { sent, ttl: confirmed_ttl } => {
                        backoff = Duration::from_millis(50);
                        state.send_if_modified(|s| {
                            if s.lost.is_some() {
                                return false;
                            }
                            if s.valid_until.has_passed() {
                                // Too late: the holder may already have been
                                // told to stop. Loss stays final.
                                s.lost = Some(deadline_reason(&s.valid_until, ttl, margin));
                                return true;
                            }
                            let candidate = sent.after(confirmed_ttl.min(ttl).saturating_sub(margin));
                            let extended = s.valid_until.max(candidate);
                            if extended != s.valid_until {
                                s.valid_until = extended;
                                true
                            } else {
                                false
                            }
                        });
                        next_send = sent.mono + interval;
                    }
                    Renewal::Gone => {
                        mark_lost(&state, LossReason::LeaseGone);
                        return;
                    }
                    Renewal::Failed(why) => {
                        tracing::warn!(lease = id, %why, "lease keepalive failed; retrying");
                        stream = None;
                        next_send = now + backoff;
                        backoff = (backoff * 2).min(interval);
                    }
                }
            }
        }
    }
}

enum Renewal {
    Confirmed { sent: Stamp, ttl: Duration },
    Gone,
    Failed(String),
}

async fn renew_once(
    client: &mut etcd_client::Client,
    id: i64,
    stream: &mut Option<(etcd_client::LeaseKeeper, etcd_client::LeaseKeepAliveStream)>,
    wait: Duration,
) -> Renewal {
    let sent = Stamp::now();
    match stream {
        None => match timeout(wait, client.lease_keep_alive(id)).await {
            // Opening the stream sends one keepalive and reads its answer.
            Ok(Ok(pair)) => {
                *stream = Some(pair);
                Renewal::Confirmed {
                    sent,
                    ttl: Duration::MAX,
                }
            }
            Ok(Err(e)) => {
                let e = Error::from(e);
                if e.is_lease_not_found() {
                    Renewal::Gone
                } else {
                    Renewal::Failed(e.to_string())
                }
            }
            Err(_) => Renewal::Failed(format!("no keepalive answer within {wait:?}")),
        },
        Some((keeper, responses)) => {
            if let Err(e) = keeper.keep_alive().await {
                return Renewal::Failed(e.to_string());
            }
            match timeout(wait, responses.message()).await {
                Ok(Ok(Some(resp))) if resp.ttl() <= 0 => Renewal::Gone,
                Ok(Ok(Some(resp))) => Renewal::Confirmed {
                    sent,
                    ttl: Duration::from_secs(resp.ttl() as u64),
                },
                Ok(Ok(None)) => Renewal::Failed("keepalive stream closed".into()),
                Ok(Err(e)) => Renewal::Failed(e.to_string()),
                Err(_) => Renewal::Failed(format!("no keepalive answer within {wait:?}")),
            }
        }
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn chosen_lease_ids_are_positive_and_distinct() {
        let ids: std::collections::HashSet<i64> =
            (0..10_000).map(|_| super::new_lease_id()).collect();
        assert_eq!(ids.len(), 10_000);
        assert!(ids.iter().all(|&id| id > 0));
    }
}
