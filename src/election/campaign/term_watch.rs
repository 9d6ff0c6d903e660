//! The watch on a term's leader key, with a periodic read beside it: a
//! deletion or another term's key ends the term.

use std::time::Duration;

use etcd_client::{EventType, KeyValue};
use tokio::task::JoinHandle;

use crate::election::keywatch::{RangeWatch, Watched};
use crate::election::lease::{mark_lost, LossReason};
use crate::election::Client;

/// Watches the leader key for as long as the term lasts; a deletion or a key
/// of another term ends it. A watch can stall without an error (a slow or
/// half-answering member: the probe gives up only after 5 s + 5 s), so the
/// key is also read once every `check_every` (a third of the TTL, the
/// keepalive's own pace): a deposition is noticed within `check_every` plus
/// one read (at most the request timeout) even when no watch event arrives. When etcd cannot be
/// read at all, the renewal deadline ends the term instead.
pub(super) async fn watch_leader_key(
    client: Client,
    key: String,
    token: i64,
    check_every: Duration,
    state: tokio::sync::watch::Sender<crate::election::lease::LeaseState>,
) {
    // The periodic read runs as a task of its own, so a slow read (up to
    // the request timeout) never holds the watch back; it ends with this
    // task, aborted or not.
    let checker = AbortOnDrop(tokio::spawn({
        let (client, key, state) = (client.clone(), key.clone(), state.clone());
        async move {
            let mut check = tokio::time::interval(check_every.max(Duration::from_millis(100)));
            check.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
            loop {
                check.tick().await;
                if let Some(reason) = read_leader_key(&client, &key, token).await {
                    mark_lost(&state, reason);
                    return;
                }
            }
        }
    }));
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
                    Err(_) => tokio::time::sleep(Duration::from_millis(200)).await,
                }
            },
        }
    }
}

/// Aborts a task when dropped.
struct AbortOnDrop(JoinHandle<()>);

impl Drop for AbortOnDrop {
    fn drop(&mut self) {
        self.0.abort();
    }
}

/// Reads the leader key once; `Some(reason)` when the term is over. An
/// error says nothing about the term (the renewal deadline covers an
/// unreachable etcd).
async fn read_leader_key(client: &Client, key: &str, token: i64) -> Option<LossReason> {
    let resp = client.op(client.etcd().get(key, None)).await.ok()?;
    let revision = resp.header().map(|h| h.revision()).unwrap_or_default();
    judge_leader_key(resp.kvs().first(), token, revision)
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
