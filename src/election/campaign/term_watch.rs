//! The watch on a term's leader key, with a periodic read beside it: a
//! deletion or another term's key ends the term, and so does a key the
//! holder can no longer see (etcd refuses it, or no read has confirmed it
//! for a TTL).

use std::time::Duration;

use etcd_client::{EventType, KeyValue};

use crate::election::deadline::Deadline;
use crate::election::deadline::Stamp;
use crate::election::keywatch::{RangeWatch, Repeats, Watched, REPEAT_LOG_EVERY};
use crate::election::lease::{deadline_reason, mark_lost, LeaseState, LossReason};
use crate::election::{Client, Error};

/// The first wait before reading again after a failed read; it doubles up
/// to the read interval.
const RETRY_MIN: Duration = Duration::from_millis(200);

/// The term's TTL and safety margin: the key is read every TTL/3, and a
/// key not confirmed for a TTL is a loss.
#[derive(Debug, Clone, Copy)]
pub(super) struct Pace {
    pub ttl: Duration,
    pub margin: Duration,
}

impl Pace {
    fn every(self) -> Duration {
        (self.ttl / 3).max(Duration::from_millis(100))
    }

    fn limit(self) -> Duration {
        self.ttl
    }
}

/// Watches the leader key for as long as the term lasts; a deletion or a key
/// of another term ends it. A watch can stall without an error (a slow or
/// half-answering member: the probe gives up only after 5 s + 5 s), so the
/// key is also read after every renewal (the keepalive's own pace, TTL/3):
/// a deposition is noticed within TTL/3 plus one read even when no watch
/// event arrives.
///
/// A key the holder cannot see is a loss too: etcd refusing the read or the
/// watch (permission, authentication: etcd renews the lease of a user whose
/// role lost its grant, so nothing else would end the term), or no read
/// confirming the key for a TTL (reads failing or unanswered while
/// keepalives pass). Without that, a holder that went blind would run on
/// beside whoever leads after a depose, for as long as its lease lives.
pub(super) async fn watch_leader_key(
    client: Client,
    key: String,
    token: i64,
    pace: Pace,
    state: tokio::sync::watch::Sender<LeaseState>,
) {
    // The periodic read runs as a task of its own, so a slow read never
    // holds the watch back; it ends with this task, aborted or not.
    let checker = crate::task::AbortOnDrop(crate::task::spawn(
        "leader key check",
        check_leader_key(client.clone(), key.clone(), token, pace, state.clone()),
    ));
    let _checker = checker;
    let mut watch = RangeWatch::new(&client.etcd(), key.clone(), None, token);
    loop {
        let item = watch.next().await;
        match item {
            Watched::Events(events) => {
                for e in events {
                    let Some(kv) = e.kv() else { continue };
                    match e.event_type() {
                        EventType::Delete => {
                            mark_lost(
                                &state,
                                LossReason::KeyDeleted {
                                    revision: kv.mod_revision(),
                                },
                            );
                            return;
                        }
                        EventType::Put if kv.create_revision() != token => {
                            mark_lost(&state, taken_over(kv, kv.mod_revision()));
                            return;
                        }
                        EventType::Put => {}
                    }
                }
            }
            Watched::Denied(e) => {
                mark_lost(&state, denied(&client, e));
                return;
            }
            Watched::Compacted => loop {
                match client.op(client.etcd().get(key.as_bytes(), None)).await {
                    Ok(resp) => {
                        let revision = resp.header().map(|h| h.revision()).unwrap_or_default();
                        if let Some(reason) = judge_leader_key(resp.kvs().first(), token, revision)
                        {
                            mark_lost(&state, reason);
                            return;
                        }
                        watch.resume_after(revision);
                        break;
                    }
                    Err(e) if refused(&e) => {
                        mark_lost(&state, denied(&client, e));
                        return;
                    }
                    // The checker's deadline covers a key that stays unread.
                    Err(_) => tokio::time::sleep(RETRY_MIN).await,
                }
            },
        }
    }
}

/// Reads the key right after each confirmed renewal of the lease (at the
/// keepalive's pace, TTL/3), at the latest TTL/2 after the last read, and
/// sooner again after a failed read (200 ms doubling up to TTL/3); each read
/// is bounded by the request timeout and by TTL/3. The term is lost when a
/// read finds the key gone or another term's, when etcd refuses the read, or
/// when no read has confirmed the key for a TTL since the last one that did
/// was *sent*.
///
/// Why a TTL and not the lease's TTL − margin: the margin keeps the holder
/// ahead of etcd's expiry timer, which the key does not have; and a read can
/// only confirm the key once a connection is back, after the keepalive, so
/// with the same deadline a brief etcd outage (a restart) that the lease
/// survives would end the term anyway (it did, in 4 of 5 runs of
/// tests/auth.rs's restart at TTL 4). Reading after each renewal keeps the
/// key's deadline behind the lease's: when etcd is away altogether the
/// lease's own deadline passes first and decides, as it did before the key
/// had one; the key's deadline ends a term only when keepalives pass and
/// reads do not. A blind holder then runs for at most a TTL (and the
/// grace) after its key was last seen.
async fn check_leader_key(
    client: Client,
    key: String,
    token: i64,
    pace: Pace,
    state: tokio::sync::watch::Sender<LeaseState>,
) {
    let every = pace.every();
    let fallback = every + every / 2;
    let per_read = client.op_timeout().min(every);
    let mut renewals = state.subscribe();
    let mut confirmed = Stamp::now();
    let mut retry = RETRY_MIN;
    let mut failures = Repeats::new(REPEAT_LOG_EVERY);
    loop {
        // A renewal from here on triggers the next read.
        renewals.borrow_and_update();
        let deadline = confirmed.after(pace.limit());
        let sent = Stamp::now();
        let outcome = tokio::select! {
            biased;
            _ = deadline.wait() => {
                mark_lost(&state, unconfirmed(&state, &deadline, pace));
                return;
            }
            r = read_own_key(&client, &key, token, per_read) => r,
        };
        let next = match outcome {
            KeyRead::Lost(reason) => {
                mark_lost(&state, reason);
                return;
            }
            KeyRead::Confirmed => {
                confirmed = sent;
                retry = RETRY_MIN;
                sent.mono + fallback
            }
            KeyRead::Failed(why) => {
                tracing::debug!(key, error = %why, "reading the term's own key failed");
                if let Some(times) = failures.hit() {
                    tracing::warn!(
                        key, error = %why, times,
                        "reading the term's own key failed; retrying (the term is lost if it \
                         stays unconfirmed for a TTL)"
                    );
                }
                let at = tokio::time::Instant::now() + retry;
                retry = (retry * 2).min(every);
                at
            }
        };
        let deadline = confirmed.after(pace.limit());
        tokio::select! {
            biased;
            _ = deadline.wait() => {
                mark_lost(&state, unconfirmed(&state, &deadline, pace));
                return;
            }
            changed = renewals.changed() => {
                // The session is gone (the term ended): nothing to check.
                if changed.is_err() || state.borrow().lost.is_some() {
                    return;
                }
            }
            _ = tokio::time::sleep_until(next) => {}
        }
    }
}

/// What one read of the term's own key told.
enum KeyRead {
    /// The key is the term's: confirmed as of when the read was sent.
    Confirmed,
    /// The key is gone or another's, or the read was refused.
    Lost(LossReason),
    /// No answer (in `per_read`) or an error: try again.
    Failed(String),
}

/// Reads the term's own key once, within `per_read`.
async fn read_own_key(client: &Client, key: &str, token: i64, per_read: Duration) -> KeyRead {
    let mut etcd = client.etcd();
    match tokio::time::timeout(per_read, etcd.get(key.as_bytes(), None)).await {
        Ok(Ok(resp)) => {
            let revision = resp.header().map(|h| h.revision()).unwrap_or_default();
            match judge_leader_key(resp.kvs().first(), token, revision) {
                Some(reason) => KeyRead::Lost(reason),
                None => KeyRead::Confirmed,
            }
        }
        Ok(Err(e)) => {
            let e = Error::from(e);
            if refused(&e) {
                KeyRead::Lost(denied(client, e))
            } else {
                KeyRead::Failed(e.to_string())
            }
        }
        Err(_) => KeyRead::Failed(format!("no answer within {per_read:?}")),
    }
}

/// Why a key that went unconfirmed past `deadline` ends the term: when the
/// lease's own deadline has passed too (a frozen process, a suspended
/// host), that is the reason, said as the lease would; otherwise the key.
fn unconfirmed(
    state: &tokio::sync::watch::Sender<LeaseState>,
    deadline: &Deadline,
    pace: Pace,
) -> LossReason {
    let lease = state.borrow().valid_until;
    if lease.has_passed() {
        deadline_reason(&lease, pace.ttl, pace.margin)
    } else if deadline.passed_by_suspend() {
        LossReason::HostSuspended
    } else {
        LossReason::KeyUnconfirmed { ttl: pace.ttl }
    }
}

/// etcd refused the request for want of permission or authentication: no
/// retry will show this holder its key.
fn refused(e: &Error) -> bool {
    matches!(e, Error::PermissionDenied { .. } | Error::Auth { .. })
}

fn denied(client: &Client, e: Error) -> LossReason {
    LossReason::AccessDenied {
        reason: e.with_user(client.connect_config().user()).to_string(),
    }
}

fn judge_leader_key(kv: Option<&KeyValue>, token: i64, revision: i64) -> Option<LossReason> {
    match kv {
        Some(kv) if kv.create_revision() == token => None,
        Some(kv) => Some(taken_over(kv, revision)),
        None => Some(LossReason::KeyDeleted { revision }),
    }
}

fn taken_over(kv: &KeyValue, revision: i64) -> LossReason {
    LossReason::TakenOver {
        holder: String::from_utf8_lossy(kv.value()).into_owned(),
        token: kv.create_revision(),
        revision,
    }
}
