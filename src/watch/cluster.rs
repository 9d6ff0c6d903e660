//! The cluster poller: every few seconds, one member list and one alarm list
//! through the watcher's client, and one maintenance `Status` from each
//! member on its own connection (at most [`MAX_MEMBERS`]). Transitions
//! become [`ClusterEvent`]s: a new raft term with a leader, members added or
//! removed, a member unreachable or back, alarms raised or cleared. Each is
//! sent once; the history's dedupe keys make a restart's repeats no-ops.
//!
//! Cost: `2 + members` small requests per interval, each with a timeout.
//! Timing: an event is seen within one interval of happening; its
//! `not_before_ms` is the previous poll's time (or `None` for what changed
//! while tenure was not looking: the first poll compares with history).

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::time::Duration;

use etcd_client::{AlarmAction, AlarmType, Client as EtcdClient, ConnectOptions};
use tokio::sync::mpsc;

use crate::events::cluster::{member_hex, ClusterBaseline, ClusterEvent, ClusterEventKind};
use crate::events::now_ms;

/// Members whose status is polled; a larger cluster's others are skipped.
pub const MAX_MEMBERS: usize = 16;

#[derive(Debug, Clone)]
pub struct PollConfig {
    pub interval: Duration,
    pub timeout: Duration,
}

impl PollConfig {
    /// Polls every `interval` (`None`: zero, not polled), each request
    /// within the client's operation timeout, at most the interval (at
    /// least a second).
    pub fn every(interval: Duration, op_timeout: Duration) -> Option<PollConfig> {
        (!interval.is_zero()).then(|| PollConfig {
            interval,
            timeout: op_timeout.min(interval.max(Duration::from_secs(1))),
        })
    }
}

impl Default for PollConfig {
    fn default() -> Self {
        Self {
            interval: Duration::from_secs(2),
            timeout: Duration::from_secs(2),
        }
    }
}

struct MemberInfo {
    name: String,
    endpoint: Option<String>,
}

/// Polls until the receiver is gone.
pub async fn poll(
    etcd: EtcdClient,
    baseline: ClusterBaseline,
    cfg: PollConfig,
    tx: mpsc::Sender<ClusterEvent>,
) {
    let mut p = Poller {
        etcd,
        cfg,
        leader: baseline.leader,
        members: baseline.members,
        alarms: baseline.alarms,
        unreachable: BTreeSet::new(),
        conns: HashMap::new(),
        last_poll: None,
        known: BTreeMap::new(),
        cluster_id: 0,
    };
    let mut tick = tokio::time::interval(p.cfg.interval);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        tick.tick().await;
        for e in p.round().await {
            if tx.send(e).await.is_err() {
                return;
            }
        }
    }
}

struct Poller {
    etcd: EtcdClient,
    cfg: PollConfig,
    leader: Option<(u64, u64, String)>,
    members: BTreeMap<String, String>,
    alarms: BTreeSet<(String, String)>,
    unreachable: BTreeSet<String>,
    conns: HashMap<String, EtcdClient>,
    /// When the previous successful poll was (bounds the next event's time).
    last_poll: Option<i64>,
    /// The members of the last successful list, and its cluster id.
    known: BTreeMap<String, MemberInfo>,
    cluster_id: u64,
}

/// What one member's status request gave: its id and endpoint, and the
/// connection and status, or the error (`Err(_)`: no answer in time).
type StatusAnswer = (
    String,
    String,
    Result<
        Result<(EtcdClient, etcd_client::StatusResponse), etcd_client::Error>,
        tokio::time::error::Elapsed,
    >,
);

impl Poller {
    async fn round(&mut self) -> Vec<ClusterEvent> {
        // Without a quorum the list fails (require-leader): the members last
        // seen are still asked for their status, so an outage is recorded.
        let list = self.member_list().await;
        let now = now_ms();
        let nb = self.last_poll;
        let ev = |kind| ClusterEvent {
            at_ms: now,
            not_before_ms: nb,
            cluster: None,
            kind,
        };
        let Some(members) = list else {
            if self.known.is_empty() {
                return Vec::new();
            }
            let known = std::mem::take(&mut self.known);
            let out = self.statuses(&known, self.cluster_id, ev).await;
            self.known = known;
            self.last_poll = Some(now);
            return out;
        };
        let cluster_id = members.header().map_or(0, |h| h.cluster_id());
        self.cluster_id = cluster_id;
        let seen: BTreeMap<String, MemberInfo> = members
            .members()
            .iter()
            .map(|m| {
                let info = MemberInfo {
                    name: m.name().to_owned(),
                    endpoint: m.client_urls().first().cloned(),
                };
                (member_hex(m.id()), info)
            })
            .collect();
        let mut out = self.membership(&seen, ev);
        out.extend(self.alarms(ev).await);
        out.extend(self.statuses(&seen, cluster_id, ev).await);
        self.known = seen;
        self.last_poll = Some(now);
        out
    }

    /// The member list, or `None` when it failed or timed out.
    async fn member_list(&self) -> Option<etcd_client::MemberListResponse> {
        let mut etcd = self.etcd.clone();
        match tokio::time::timeout(self.cfg.timeout, etcd.member_list()).await {
            Ok(Ok(r)) => Some(r),
            Ok(Err(e)) => {
                tracing::debug!(error = %e, "cluster poll: member list failed");
                None
            }
            Err(_) => {
                tracing::debug!("cluster poll: member list timed out");
                None
            }
        }
    }

    /// Members added and removed since the last list (`seen` is this one's).
    fn membership(
        &mut self,
        seen: &BTreeMap<String, MemberInfo>,
        ev: impl Fn(ClusterEventKind) -> ClusterEvent,
    ) -> Vec<ClusterEvent> {
        let mut out = Vec::new();
        for (id, info) in seen {
            if !self.members.contains_key(id) {
                out.push(ev(ClusterEventKind::MemberAdded {
                    member_id: id.clone(),
                    name: info.name.clone(),
                    client_urls: info.endpoint.iter().cloned().collect(),
                }));
                self.members.insert(id.clone(), info.name.clone());
            }
        }
        let gone: Vec<String> = self
            .members
            .keys()
            .filter(|id| !seen.contains_key(*id))
            .cloned()
            .collect();
        for id in gone {
            let name = self.members.remove(&id).unwrap_or_default();
            self.conns.remove(&id);
            self.unreachable.remove(&id);
            out.push(ev(ClusterEventKind::MemberRemoved {
                member_id: id,
                name,
            }));
        }
        out
    }

    /// Alarms raised and cleared since the last answer (none when the alarm
    /// list fails: nothing is known to have changed).
    async fn alarms(&mut self, ev: impl Fn(ClusterEventKind) -> ClusterEvent) -> Vec<ClusterEvent> {
        let mut etcd = self.etcd.clone();
        let asked = etcd.alarm(AlarmAction::Get, AlarmType::None, None);
        let Ok(Ok(r)) = tokio::time::timeout(self.cfg.timeout, asked).await else {
            return Vec::new();
        };
        let now_alarms: BTreeSet<(String, String)> = r
            .alarms()
            .iter()
            .filter_map(|a| {
                let kind = match a.alarm() {
                    AlarmType::Nospace => "nospace",
                    AlarmType::Corrupt => "corrupt",
                    AlarmType::None => return None,
                };
                Some((member_hex(a.member_id()), kind.to_owned()))
            })
            .collect();
        let mut out = Vec::new();
        for (m, a) in now_alarms.difference(&self.alarms) {
            out.push(ev(ClusterEventKind::AlarmRaised {
                member_id: m.clone(),
                alarm: a.clone(),
            }));
        }
        for (m, a) in self.alarms.difference(&now_alarms) {
            out.push(ev(ClusterEventKind::AlarmCleared {
                member_id: m.clone(),
                alarm: a.clone(),
            }));
        }
        self.alarms = now_alarms;
        out
    }

    /// Status of each member, concurrently, on its own connection:
    /// reachability changes and a new raft term with a leader.
    async fn statuses(
        &mut self,
        seen: &BTreeMap<String, MemberInfo>,
        cluster_id: u64,
        ev: impl Fn(ClusterEventKind) -> ClusterEvent,
    ) -> Vec<ClusterEvent> {
        let t = self.cfg.timeout;
        let mut out = Vec::new();
        let mut best: Option<(u64, u64)> = None; // (raft term, leader id)
        for (id, endpoint, r) in self.ask_statuses(seen).await {
            let name = seen.get(&id).map(|i| i.name.clone()).unwrap_or_default();
            match r {
                Ok(Ok((conn, status))) => {
                    self.conns.insert(id.clone(), conn);
                    if self.unreachable.remove(&id) {
                        out.push(ev(ClusterEventKind::MemberReachable {
                            member_id: id.clone(),
                            name,
                            endpoint,
                        }));
                    }
                    let term = status.raft_term();
                    if status.leader() != 0 && best.is_none_or(|(bt, _)| term > bt) {
                        best = Some((term, status.leader()));
                    }
                }
                other => {
                    let error = match other {
                        Ok(Err(e)) => e.to_string(),
                        _ => format!("no answer within {} ms", t.as_millis()),
                    };
                    // A fresh connection next time: this one may be dead.
                    self.conns.remove(&id);
                    if self.unreachable.insert(id.clone()) {
                        out.push(ev(ClusterEventKind::MemberUnreachable {
                            member_id: id,
                            name,
                            endpoint,
                            error,
                        }));
                    }
                }
            }
        }
        if let Some((term, leader)) = best {
            out.extend(self.leader_change(term, leader, cluster_id, seen).map(ev));
        }
        out
    }

    /// Each member's `Status` (at most [`MAX_MEMBERS`]), asked concurrently,
    /// on its kept connection or a new one, each within the timeout.
    async fn ask_statuses(&self, seen: &BTreeMap<String, MemberInfo>) -> Vec<StatusAnswer> {
        let t = self.cfg.timeout;
        let mut polls = Vec::new();
        for (id, info) in seen.iter().take(MAX_MEMBERS) {
            let Some(endpoint) = info.endpoint.clone() else {
                continue;
            };
            let conn = self.conns.get(id).cloned();
            let id = id.clone();
            polls.push(async move {
                let r = tokio::time::timeout(t, async {
                    let mut c = match conn {
                        Some(c) => c,
                        None => EtcdClient::connect([endpoint.as_str()], Some(options(t))).await?,
                    };
                    let s = c.status().await?;
                    Ok::<_, etcd_client::Error>((c, s))
                })
                .await;
                (id, endpoint, r)
            });
        }
        futures_util::future::join_all(polls).await
    }

    /// A leader change when the highest raft term any member reported with
    /// a leader is newer than the last one recorded (or of another cluster).
    fn leader_change(
        &mut self,
        term: u64,
        leader: u64,
        cluster_id: u64,
        seen: &BTreeMap<String, MemberInfo>,
    ) -> Option<ClusterEventKind> {
        let newer = match &self.leader {
            Some((cid, t0, _)) => *cid != cluster_id || term > *t0,
            None => true,
        };
        if !newer {
            return None;
        }
        let leader_id = member_hex(leader);
        let (previous_raft_term, previous_leader_id) = match &self.leader {
            Some((cid, t0, l)) if *cid == cluster_id => (Some(*t0), Some(l.clone())),
            _ => (None, None),
        };
        self.leader = Some((cluster_id, term, leader_id.clone()));
        Some(ClusterEventKind::LeaderChanged {
            raft_term: term,
            leader_name: seen.get(&leader_id).map(|i| i.name.clone()),
            leader_id,
            previous_raft_term,
            previous_leader_id,
            cluster_id,
        })
    }
}

/// Status needs no leader: a member cut off still says what it knows.
fn options(timeout: Duration) -> ConnectOptions {
    ConnectOptions::new()
        .with_connect_timeout(timeout)
        .with_timeout(timeout)
}
