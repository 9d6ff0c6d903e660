//! etcd's own events, as tenure saw them: leader changes, members, alarms,
//! compactions, watch reconnects, gaps, resets, and `tenure serve` itself.
//! They explain the elections' changes during an incident; they are stored
//! beside the elections' history (`cluster_events`) and drawn on every
//! timeline.
//!
//! Time: `at_ms` is when tenure saw the event. `not_before_ms`, when known,
//! bounds when it happened: in `(not_before_ms, at_ms]` (the previous poll
//! that saw otherwise). `None` means unknown: it happened while tenure was
//! not looking (before it started, or while it was down).

use serde::{Deserialize, Serialize};

use super::{Event, EventKind, RestartReason, Update, WatchStatus};

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ClusterEvent {
    /// When tenure saw it, unix ms.
    pub at_ms: i64,
    /// It happened after this (unix ms); `None`: unknown how long before
    /// `at_ms`.
    pub not_before_ms: Option<i64>,
    /// The cluster it happened in, when serve watches several
    /// (`--cluster NAME=...`); absent for the one cluster of a serve without.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cluster: Option<String>,
    #[serde(flatten)]
    pub kind: ClusterEventKind,
}

impl ClusterEvent {
    /// What makes it the same fact as one already stored: the kind's key
    /// ([`ClusterEventKind::dedupe_key_at`]) within its cluster.
    pub fn dedupe_key(&self) -> Option<String> {
        let key = self.kind.dedupe_key_at(self.at_ms)?;
        Some(match &self.cluster {
            None => key,
            Some(c) => format!("{c}@{key}"),
        })
    }
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "type", rename_all = "snake_case")]
pub enum ClusterEventKind {
    /// etcd's raft term rose and a member leads it.
    LeaderChanged {
        raft_term: u64,
        /// Member id, hex (as `etcdctl member list` prints it).
        leader_id: String,
        leader_name: Option<String>,
        /// The previous term tenure recorded; `None`: none recorded.
        previous_raft_term: Option<u64>,
        previous_leader_id: Option<String>,
        cluster_id: u64,
    },
    MemberAdded {
        member_id: String,
        name: String,
        client_urls: Vec<String>,
    },
    MemberRemoved {
        member_id: String,
        name: String,
    },
    /// A member stopped answering tenure's status request.
    MemberUnreachable {
        member_id: String,
        name: String,
        endpoint: String,
        error: String,
    },
    MemberReachable {
        member_id: String,
        name: String,
        endpoint: String,
    },
    AlarmRaised {
        member_id: String,
        /// `nospace`, `corrupt`.
        alarm: String,
    },
    AlarmCleared {
        member_id: String,
        alarm: String,
    },
    /// The watch's start revision had been compacted.
    CompactionSeen,
    /// The watcher re-established its watch (recorded when the new stream
    /// was created, not when the old one broke).
    WatchReconnected {
        reason: RestartReason,
        /// Not known to the watcher: the client balances across the
        /// configured endpoints (kept for history recorded before
        /// `member_id`).
        endpoint: Option<String>,
        /// The etcd member serving the new stream, hex (as `etcdctl member
        /// list` prints it), from the stream's `created` response; `None`:
        /// not known.
        #[serde(default)]
        member_id: Option<String>,
    },
    /// Revisions compacted before the watcher saw them (see `events`).
    Gap {
        from_revision: i64,
        to_revision: i64,
    },
    /// Changes of these revisions were replayed (after a reconnect, a
    /// restart, a gap or a reset), not seen as they happened: their times
    /// are only known to lie between `not_before_ms` and `at_ms`.
    Replayed {
        from_revision: i64,
        to_revision: i64,
    },
    /// etcd's timeline was replaced (restore, new cluster).
    Reset {
        from_revision: i64,
        to_revision: i64,
        cluster_id: u64,
    },
    ServeStarted {
        version: String,
        pid: u32,
    },
    ServeStopped {
        pid: u32,
    },
}

impl ClusterEventKind {
    /// The `type` tag as serialized.
    pub fn name(&self) -> &'static str {
        match self {
            ClusterEventKind::LeaderChanged { .. } => "leader_changed",
            ClusterEventKind::MemberAdded { .. } => "member_added",
            ClusterEventKind::MemberRemoved { .. } => "member_removed",
            ClusterEventKind::MemberUnreachable { .. } => "member_unreachable",
            ClusterEventKind::MemberReachable { .. } => "member_reachable",
            ClusterEventKind::AlarmRaised { .. } => "alarm_raised",
            ClusterEventKind::AlarmCleared { .. } => "alarm_cleared",
            ClusterEventKind::CompactionSeen => "compaction_seen",
            ClusterEventKind::WatchReconnected { .. } => "watch_reconnected",
            ClusterEventKind::Gap { .. } => "gap",
            ClusterEventKind::Reset { .. } => "reset",
            ClusterEventKind::Replayed { .. } => "replayed",
            ClusterEventKind::ServeStarted { .. } => "serve_started",
            ClusterEventKind::ServeStopped { .. } => "serve_stopped",
        }
    }

    /// What the cluster poller (`watch::cluster`) finds: etcd's leader,
    /// members and alarms (each writer of a shared history polls its own).
    pub fn is_polled(&self) -> bool {
        matches!(
            self,
            ClusterEventKind::LeaderChanged { .. }
                | ClusterEventKind::MemberAdded { .. }
                | ClusterEventKind::MemberRemoved { .. }
                | ClusterEventKind::MemberUnreachable { .. }
                | ClusterEventKind::MemberReachable { .. }
                | ClusterEventKind::AlarmRaised { .. }
                | ClusterEventKind::AlarmCleared { .. }
        )
    }

    /// A key that makes recording the same fact twice a no-op (`None`: every
    /// occurrence is its own event).
    pub fn dedupe_key(&self) -> Option<String> {
        match self {
            ClusterEventKind::LeaderChanged {
                raft_term,
                cluster_id,
                ..
            } => Some(format!("leader:{cluster_id:x}:{raft_term}")),
            ClusterEventKind::MemberAdded { member_id, .. } => {
                Some(format!("member_added:{member_id}"))
            }
            ClusterEventKind::MemberRemoved { member_id, .. } => {
                Some(format!("member_removed:{member_id}"))
            }
            ClusterEventKind::Gap { to_revision, .. } => Some(format!("gap:{to_revision}")),
            ClusterEventKind::Reset {
                to_revision,
                cluster_id,
                ..
            } => Some(format!("reset:{cluster_id:x}:{to_revision}")),
            ClusterEventKind::Replayed {
                from_revision,
                to_revision,
            } => Some(format!("replayed:{from_revision}:{to_revision}")),
            _ => None,
        }
    }

    /// Like [`Self::dedupe_key`], for kinds that may repeat quickly: a
    /// stream that keeps breaking is recorded at most once a minute per
    /// reason (the metrics count every restart).
    pub fn dedupe_key_at(&self, at_ms: i64) -> Option<String> {
        match self {
            ClusterEventKind::WatchReconnected { reason, .. } => Some(format!(
                "watch_reconnected:{}:{}",
                reason.as_str(),
                at_ms.div_euclid(60_000)
            )),
            ClusterEventKind::CompactionSeen => {
                Some(format!("compaction_seen:{}", at_ms.div_euclid(60_000)))
            }
            other => other.dedupe_key(),
        }
    }

    /// One line for people: the timeline's hover text, the report.
    pub fn describe(&self) -> String {
        match self {
            ClusterEventKind::LeaderChanged {
                raft_term,
                leader_id,
                leader_name,
                previous_leader_id,
                ..
            } => {
                let who = leader_name
                    .as_deref()
                    .filter(|n| !n.is_empty())
                    .map_or_else(|| leader_id.clone(), |n| format!("{n} ({leader_id})"));
                match previous_leader_id {
                    Some(p) => format!("etcd leader changed to {who}, raft term {raft_term} (was {p})"),
                    None => format!("etcd leader {who}, raft term {raft_term}"),
                }
            }
            ClusterEventKind::MemberAdded { member_id, name, .. } => {
                format!("etcd member {name} ({member_id}) added")
            }
            ClusterEventKind::MemberRemoved { member_id, name } => {
                format!("etcd member {name} ({member_id}) removed")
            }
            ClusterEventKind::MemberUnreachable {
                name,
                endpoint,
                error,
                ..
            } => format!("etcd member {name} unreachable at {endpoint}: {error}"),
            ClusterEventKind::MemberReachable { name, endpoint, .. } => {
                format!("etcd member {name} reachable again at {endpoint}")
            }
            ClusterEventKind::AlarmRaised { member_id, alarm } => {
                format!("etcd alarm {alarm} raised on member {member_id}")
            }
            ClusterEventKind::AlarmCleared { member_id, alarm } => {
                format!("etcd alarm {alarm} cleared on member {member_id}")
            }
            ClusterEventKind::CompactionSeen => {
                "etcd had compacted the revisions the watch needed".to_owned()
            }
            ClusterEventKind::WatchReconnected {
                reason,
                endpoint,
                member_id,
            } => match (member_id, endpoint) {
                (Some(m), _) => format!(
                    "watch reconnected ({}) via etcd member {m}",
                    reason.as_str()
                ),
                (None, Some(e)) => format!("watch reconnected ({}) via {e}", reason.as_str()),
                (None, None) => format!(
                    "watch reconnected ({}) via an unknown member",
                    reason.as_str()
                ),
            },
            ClusterEventKind::Gap {
                from_revision,
                to_revision,
            } => format!("watcher gap: revisions {from_revision}..={to_revision} compacted unseen"),
            ClusterEventKind::Reset {
                from_revision,
                to_revision,
                cluster_id,
            } => format!(
                "etcd timeline reset: revision {from_revision} → {to_revision}, cluster {cluster_id:x}"
            ),
            ClusterEventKind::Replayed {
                from_revision,
                to_revision,
            } => format!(
                "changes of revisions {from_revision}..={to_revision} replayed, not seen as they happened: their times are bounds"
            ),
            ClusterEventKind::ServeStarted { version, pid } => {
                format!("tenure serve {version} started (pid {pid})")
            }
            ClusterEventKind::ServeStopped { pid } => format!("tenure serve stopped (pid {pid})"),
        }
    }
}

/// What history already knows of the cluster, so a restarted poller does not
/// record again what it recorded before it stopped.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ClusterBaseline {
    /// The last recorded leader: (cluster id, raft term, leader id hex).
    pub leader: Option<(u64, u64, String)>,
    /// Members recorded as added and not removed: id hex → name.
    pub members: std::collections::BTreeMap<String, String>,
    /// Alarms recorded as raised and not cleared: (member id hex, alarm).
    pub alarms: std::collections::BTreeSet<(String, String)>,
    /// The highest revision of a timeline etcd no longer has (the largest
    /// `from_revision` of the recorded resets): tenure's token floor must
    /// be at least this.
    pub floor: Option<i64>,
}

impl ClusterBaseline {
    /// Folds recorded events (oldest first) into the state they leave.
    pub fn fold<'a>(events: impl IntoIterator<Item = &'a ClusterEvent>) -> Self {
        let mut b = ClusterBaseline::default();
        for e in events {
            match &e.kind {
                ClusterEventKind::LeaderChanged {
                    raft_term,
                    leader_id,
                    cluster_id,
                    ..
                } => b.leader = Some((*cluster_id, *raft_term, leader_id.clone())),
                ClusterEventKind::MemberAdded {
                    member_id, name, ..
                } => {
                    b.members.insert(member_id.clone(), name.clone());
                }
                ClusterEventKind::MemberRemoved { member_id, .. } => {
                    b.members.remove(member_id);
                }
                ClusterEventKind::AlarmRaised { member_id, alarm } => {
                    b.alarms.insert((member_id.clone(), alarm.clone()));
                }
                ClusterEventKind::AlarmCleared { member_id, alarm } => {
                    b.alarms.remove(&(member_id.clone(), alarm.clone()));
                }
                ClusterEventKind::Reset { from_revision, .. } => {
                    b.floor = b.floor.max(Some(*from_revision));
                }
                _ => {}
            }
        }
        b
    }
}

/// The cluster events an update of the watcher stands for: compactions,
/// reconnects, gaps and resets. Pure.
pub fn from_update(u: &Update, now: i64) -> Vec<ClusterEvent> {
    let ev = |kind| ClusterEvent {
        at_ms: now,
        not_before_ms: Some(now),
        cluster: None,
        kind,
    };
    match u {
        Update::Watch(WatchStatus::Restarted(RestartReason::Compacted)) => {
            vec![ev(ClusterEventKind::CompactionSeen)]
        }
        Update::Watch(WatchStatus::Reconnected { reason, member_id }) => {
            vec![ev(ClusterEventKind::WatchReconnected {
                reason: *reason,
                endpoint: None,
                member_id: (*member_id != 0).then(|| format!("{member_id:x}")),
            })]
        }
        Update::Batch(b) => b.events.iter().filter_map(from_event).collect(),
        _ => Vec::new(),
    }
}

fn from_event(e: &Event) -> Option<ClusterEvent> {
    let kind = match &e.kind {
        EventKind::Gap {
            from_revision,
            to_revision,
        } => ClusterEventKind::Gap {
            from_revision: *from_revision,
            to_revision: *to_revision,
        },
        EventKind::Reset {
            from_revision,
            to_revision,
            cluster_id,
            ..
        } => ClusterEventKind::Reset {
            from_revision: *from_revision,
            to_revision: *to_revision,
            cluster_id: *cluster_id,
        },
        EventKind::Unobserved {
            from_revision,
            to_revision,
            since_ms,
        } => {
            return Some(ClusterEvent {
                at_ms: e.at_ms,
                not_before_ms: *since_ms,
                cluster: None,
                kind: ClusterEventKind::Replayed {
                    from_revision: *from_revision,
                    to_revision: *to_revision,
                },
            })
        }
        _ => return None,
    };
    Some(ClusterEvent {
        at_ms: e.at_ms,
        not_before_ms: None,
        cluster: None,
        kind,
    })
}

/// A member id as `etcdctl` prints it.
pub fn member_hex(id: u64) -> String {
    format!("{id:x}")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn facts_have_keys_and_reconnects_are_coalesced_per_minute() {
        let leader = |term| ClusterEventKind::LeaderChanged {
            raft_term: term,
            leader_id: "a".into(),
            leader_name: None,
            previous_raft_term: None,
            previous_leader_id: None,
            cluster_id: 7,
        };
        assert_eq!(leader(3).dedupe_key_at(1), leader(3).dedupe_key_at(999_999));
        assert_ne!(leader(3).dedupe_key(), leader(4).dedupe_key());
        let re = ClusterEventKind::WatchReconnected {
            reason: RestartReason::StreamError,
            endpoint: None,
            member_id: Some("8e9e05c52164694d".into()),
        };
        assert_eq!(re.dedupe_key_at(60_000), re.dedupe_key_at(119_999));
        assert_ne!(re.dedupe_key_at(60_000), re.dedupe_key_at(120_000));
        let up = ClusterEventKind::ServeStarted {
            version: "x".into(),
            pid: 1,
        };
        assert_eq!(up.dedupe_key_at(5), None);
    }

    #[test]
    fn descriptions_are_one_clean_line() {
        for k in [
            ClusterEventKind::Replayed {
                from_revision: 3,
                to_revision: 9,
            },
            ClusterEventKind::WatchReconnected {
                reason: RestartReason::Stalled,
                endpoint: None,
                member_id: Some("8e9e05c52164694d".into()),
            },
            ClusterEventKind::WatchReconnected {
                reason: RestartReason::StreamError,
                endpoint: None,
                member_id: None,
            },
        ] {
            let d = k.describe();
            assert!(!d.contains("  ") && !d.contains('\n'), "{d:?}");
        }
        let named = ClusterEventKind::WatchReconnected {
            reason: RestartReason::Stalled,
            endpoint: None,
            member_id: Some("8e9e05c52164694d".into()),
        };
        assert_eq!(
            named.describe(),
            "watch reconnected (stalled) via etcd member 8e9e05c52164694d"
        );
    }
}
