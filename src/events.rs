//! The one event type that flows from the watcher to every sink (metrics,
//! traces, history, and the web's live feed). Events flow one way: sinks
//! never talk to etcd, and the watcher never renders or stores.

pub mod acting;
pub mod cluster;

use serde::{Deserialize, Serialize};

use crate::election::acting::ActingRecord;
use crate::election::{FenceReason, KeyLayout};

/// Why a term ended. How each is told apart, and how sure it is, is in
/// ARCHITECTURE.md ("Telling end causes apart").
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[cfg_attr(feature = "server", derive(utoipa::ToSchema))]
#[serde(rename_all = "snake_case")]
pub enum EndCause {
    /// The holder gave it up: its lease was revoked, or it wrote itself
    /// out of a Kubernetes Lease.
    Resigned,
    /// The holder's lease ran out.
    Expired,
    /// The key was deleted while its lease lived: a client's resign
    /// without tenure's marker (etcd's own `Election.Resign`), or an
    /// operator (`tenure depose`, a manual `etcdctl del`).
    Deleted,
    /// Another key became leader while the old key still existed.
    Superseded,
    /// The holder handed over on request: it deleted its key while its
    /// lease lived, while a switchover naming it stood (Patroni's
    /// `failover` key).
    Switchover,
    /// Another holder was written into a lease kept in a key's value (a
    /// Kubernetes Lease) while the old holder's last renewal, by the times
    /// written there, still held it: an early or forced takeover.
    TakenOver,
    /// tenure cannot tell: the term ended while it was not watching, in a
    /// compacted gap or an etcd reset, or its lease was gone unsampled.
    Unknown,
}

impl EndCause {
    pub const ALL: [EndCause; 7] = [
        EndCause::Resigned,
        EndCause::Expired,
        EndCause::Deleted,
        EndCause::Superseded,
        EndCause::Switchover,
        EndCause::TakenOver,
        EndCause::Unknown,
    ];

    pub fn as_str(self) -> &'static str {
        match self {
            EndCause::Resigned => "resigned",
            EndCause::Expired => "expired",
            EndCause::Deleted => "deleted",
            EndCause::Superseded => "superseded",
            EndCause::Switchover => "switchover",
            EndCause::TakenOver => "taken_over",
            EndCause::Unknown => "unknown",
        }
    }

    pub fn parse(s: &str) -> Option<Self> {
        Self::ALL.into_iter().find(|c| c.as_str() == s)
    }

    /// What the cause tells, in the words every view uses (the election
    /// page, the report, the metric's help; grafana/ and docs/ quote it,
    /// checked by tests/docs/causes.rs): only what tenure knows, not a guess at
    /// who did it.
    pub fn description(self) -> &'static str {
        match self {
            EndCause::Resigned => {
                "the holder gave the term up: tenure's resign marker; its lease revoked before \
                 it could expire, at its key's deletion or just after it, within 0.1 s (etcd's \
                 Election.Resign then Session.Close, a lock's release, or a holder closing its \
                 session at once when another client deleted its key); or an empty holder \
                 written into its Kubernetes Lease"
            }
            EndCause::Expired => {
                "the lease ran out: its holder stopped renewing (crash, freeze, partition); a \
                 frozen or cut-off holder may still have believed it led until it woke, which \
                 etcd cannot show"
            }
            EndCause::Deleted => {
                "the key was deleted while its lease lived on (30 ms later still): a client's \
                 resign that kept its session (etcd's Election.Resign), or an operator \
                 (tenure depose, etcdctl del)"
            }
            EndCause::Superseded => "another key became leader while this one still existed",
            EndCause::Switchover => {
                "the holder handed over on request: it deleted its key while its lease lived, \
                 with a switchover naming it standing (Patroni's failover key)"
            }
            EndCause::TakenOver => {
                "another holder was written into the lease while the old holder's last renewal \
                 still held it, by the times written in the lease, or over a `key`-layout key \
                 under another lease while the old one lived: an early or forced takeover (the \
                 old holder may still have believed it led)"
            }
            EndCause::Unknown => {
                "tenure cannot tell: the term ended while it was not watching, in a compacted \
                 gap or an etcd reset, or its lease was gone before it was sampled"
            }
        }
    }
}

impl std::fmt::Display for EndCause {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// A Kubernetes Lease holder's renewals in one term and how the term
/// handed over, by the times its writers wrote in the Lease (their clocks,
/// microseconds since the epoch; never tenure's clock).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct TermRenewals {
    /// Renewals read in the term (writes of the same holder and
    /// acquisition after the first one tenure read).
    pub count: u64,
    /// The term was first read in a snapshot (tenure started or reloaded
    /// while it ran): renewals before were not counted, `count` is a floor.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub partial: bool,
    /// The time between its last two renewals read: its cadence (client-go's
    /// `RetryPeriod` while all is well). `None`: fewer than two read.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub every_us: Option<i64>,
    /// Its last renewal (`renewTime`, or `acquireTime` when it never renewed).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_us: Option<i64>,
    /// How long one renewal held it (`leaseDurationSeconds`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub duration_s: Option<i64>,
    /// From its last renewal to the next holder's acquisition (`acquireTime`
    /// of the write that ended the term): the leaderless time as client-go's
    /// candidates saw it. Longer than the duration: it lapsed, then was
    /// taken; shorter: taken over early. Negative: the writers' clocks
    /// disagree. `None`: nobody acquired it in that write (released,
    /// deleted) or a time is missing.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub handover_us: Option<i64>,
}

/// One transition, as the watcher saw it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Event {
    /// The etcd revision of the change. For a gap: the revision of the
    /// snapshot the watcher resynced from.
    pub revision: i64,
    /// When the watcher observed it, in unix milliseconds.
    pub at_ms: i64,
    /// The election's name; empty for a gap, which concerns every election.
    pub election: String,
    #[serde(flatten)]
    pub kind: EventKind,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "type", rename_all = "snake_case")]
pub enum EventKind {
    TermStarted {
        /// The fencing token: the leader key's CreateRevision.
        token: i64,
        holder: String,
        lease_id: i64,
        layout: KeyLayout,
        previous_holder: Option<String>,
        /// True when the term was already running when the watcher first saw
        /// it (a snapshot): `at_ms` is then when it was seen, not when it began.
        from_snapshot: bool,
    },
    TermEnded {
        token: i64,
        holder: String,
        lease_id: i64,
        cause: EndCause,
        started_revision: i64,
        started_at_ms: i64,
        /// A Kubernetes Lease's term: its holder's renewals and how it
        /// handed over, by the times written in the Lease. Absent for
        /// every other layout, and for a term whose end tenure did not see.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        renewals: Option<TermRenewals>,
    },
    /// A candidate queued behind the leader (queue layout: its own key
    /// `election/<name>/<lease-hex>`, not the lowest). `token` is its key's
    /// CreateRevision: its place in the queue, and its token should it lead.
    CandidateQueued {
        token: i64,
        holder: String,
        lease_id: i64,
    },
    /// A queued candidate's key went before it led (it gave up, was stopped,
    /// or its lease ended). One that leads ends its wait with `TermStarted`
    /// of the same token instead.
    CandidateLeft {
        token: i64,
        holder: String,
        lease_id: i64,
    },
    /// The leader key's value changed within a term (a proclaim).
    LeaderValueChanged {
        token: i64,
        holder: String,
        previous: String,
    },
    FenceAccepted {
        resource: String,
        token: i64,
    },
    FenceRefused {
        resource: String,
        token: i64,
        reason: FenceReason,
        /// The term that led when the refusal was recorded, as the watcher knew it.
        current_token: Option<i64>,
        current_holder: Option<String>,
    },
    /// etcd compacted revisions `from_revision..=to_revision` before the
    /// watcher saw them: transitions in between are not known one by one.
    /// With an election named: that election's lease (a key whose value
    /// defines its terms) counts more handovers between the writes of those
    /// two revisions than tenure saw (or fewer than before: its count went
    /// back, which contradicts it), or its `key`-layout key was written
    /// up to `to_revision` under its term's lease while those revisions
    /// were compacted (it may have changed hands and back); the terms
    /// between are not known.
    Gap {
        from_revision: i64,
        to_revision: i64,
    },
    /// The changes of revisions `from_revision..=to_revision` (the events of
    /// this batch that follow, or those of a gap's or reset's reload) were
    /// not seen as they happened: the watch was reconnecting, tenure was not
    /// running, or they were compacted. Each happened after `since_ms` and
    /// before this event's `at_ms`, which is also theirs; `since_ms` is
    /// `None` when even that is unknown. Times inside are arrival times, not
    /// when etcd made the change: a reader must not compute durations from
    /// them as if they were.
    Unobserved {
        from_revision: i64,
        to_revision: i64,
        since_ms: Option<i64>,
    },
    /// This election and `other` both hold keys while one's name is a
    /// proper path prefix of the other's (`orders`, `orders/primary`):
    /// etcd's own `Election` of the shorter (`etcdctl elect`, Go's
    /// `concurrency.Election`) takes the longer one's keys for its
    /// candidates, so its etcd clients queue behind a key that never goes,
    /// and tenure may name a leader etcd's clients do not. Recorded once per
    /// election when the collision arises (tenure refuses new campaigns of
    /// either name meanwhile).
    NameCollision {
        other: String,
    },
    /// A member of this election (Patroni's `members/NAME`) says it is a
    /// primary while `leader` holds the leader key (term `token`): two
    /// primaries, as far as etcd shows them. Recorded when it arises, once
    /// per member until it stops saying so.
    TwoPrimaries {
        member: String,
        leader: String,
        token: i64,
    },
    /// etcd's timeline was replaced: its revision went behind the stored one
    /// (a restore from `etcdctl snapshot save`, a new cluster) or its cluster
    /// id changed. History up to `from_revision` belongs to the old timeline
    /// and stays; terms still open there ended at an unknown point; recording
    /// goes on in the new one from `to_revision` (the snapshot read). Tokens
    /// of the new timeline may repeat old ones: history keeps each timeline's
    /// terms apart (`epoch`).
    Reset {
        from_revision: i64,
        to_revision: i64,
        previous_cluster_id: Option<u64>,
        cluster_id: u64,
    },
    /// A holder's acting record for its term `record.token`
    /// (when it acted as leader, on its own clock; `events::acting` places
    /// it on etcd's time). Each version written is one event; a reader
    /// merges a term's versions.
    Acting {
        #[serde(flatten)]
        record: ActingRecord,
    },
}

impl EventKind {
    /// The `type` tag as serialized.
    pub fn name(&self) -> &'static str {
        match self {
            EventKind::TermStarted { .. } => "term_started",
            EventKind::TermEnded { .. } => "term_ended",
            EventKind::LeaderValueChanged { .. } => "leader_value_changed",
            EventKind::FenceAccepted { .. } => "fence_accepted",
            EventKind::FenceRefused { .. } => "fence_refused",
            EventKind::Gap { .. } => "gap",
            EventKind::Reset { .. } => "reset",
            EventKind::Unobserved { .. } => "unobserved",
            EventKind::CandidateQueued { .. } => "candidate_queued",
            EventKind::CandidateLeft { .. } => "candidate_left",
            EventKind::NameCollision { .. } => "name_collision",
            EventKind::TwoPrimaries { .. } => "two_primaries",
            EventKind::Acting { .. } => "acting",
        }
    }
}

/// The events of one or more complete etcd revisions, and the revision up
/// to which everything has been processed. A sink that persists must store
/// `events` and `revision` in one transaction: that is what makes a restart
/// resume without missing or repeating a transition.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Batch {
    pub revision: i64,
    pub events: Vec<Event>,
}

impl Batch {
    /// It records a reset: what follows is a new timeline of etcd.
    pub fn has_reset(&self) -> bool {
        self.events
            .iter()
            .any(|e| matches!(e.kind, EventKind::Reset { .. }))
    }
}

/// Why the watcher re-established its watch.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum RestartReason {
    /// The start revision was compacted: resynced from a snapshot (a gap).
    Compacted,
    /// The stream ended or failed (etcd restarted, a member died).
    StreamError,
    /// The stream went silent and did not answer a progress request.
    Stalled,
    /// etcd cancelled the watch for another reason.
    Cancelled,
}

impl RestartReason {
    pub const ALL: [RestartReason; 4] = [
        RestartReason::Compacted,
        RestartReason::StreamError,
        RestartReason::Stalled,
        RestartReason::Cancelled,
    ];

    pub fn as_str(self) -> &'static str {
        match self {
            RestartReason::Compacted => "compacted",
            RestartReason::StreamError => "stream_error",
            RestartReason::Stalled => "stalled",
            RestartReason::Cancelled => "cancelled",
        }
    }
}

/// The watcher's own health, for metrics and readiness; never persisted.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum WatchStatus {
    /// Whether etcd answered the watcher's last request.
    EtcdUp(bool),
    /// The watch stream broke (or its revision was compacted) and is being
    /// reopened.
    Restarted(RestartReason),
    /// After a `Restarted`, a new stream was created: etcd member
    /// `member_id` serves it (the `created` response's header; 0 when the
    /// header was missing).
    Reconnected {
        reason: RestartReason,
        member_id: u64,
    },
    /// Everything up to `revision` (etcd's current revision when the
    /// watcher last asked) has been processed.
    CaughtUp { revision: i64 },
    /// A new election was ignored because `--max-elections` are tracked.
    Overflow { election: String },
    /// A key under the prefix that is not a valid election or fence key.
    IgnoredKey,
    /// A value its writer encrypted at rest (Kubernetes' `k8s:enc:`): only
    /// the writer's key reads it, so its key is ignored, never guessed at.
    EncryptedValue,
    /// The watch stream broke this many times in a row at the same next
    /// revision without delivering anything: recording is stalled (until an
    /// event or a progress notification arrives).
    Stuck { next_revision: i64, attempts: u32 },
    /// The etcd answering at the cluster's endpoints is another etcd
    /// cluster (`found`) than the one the history recorded under the
    /// cluster's name (`recorded`), and the operator has not adopted it
    /// (`serve --adopt-etcd`): nothing is loaded, recorded or written until
    /// the recorded one answers again ([`not_the_recorded_etcd`] says so).
    NotTheRecordedEtcd { recorded: u64, found: u64 },
}

/// Why a cluster is refused when the etcd at its endpoints is not the one
/// its history recorded under its name (`cluster`: `None` for the one
/// unnamed cluster), and what to do: one sentence for the log, the start
/// refusal and `/readyz`.
pub fn not_the_recorded_etcd(cluster: Option<&str>, recorded: u64, found: u64) -> String {
    let (name, adopt) = match cluster {
        Some(c) => (format!("cluster {c:?}"), format!("{c}={found:x}")),
        None => ("the etcd cluster".to_owned(), format!("{found:x}")),
    };
    format!(
        "{name}'s endpoints answer as etcd cluster id {found:x}, but the history records \
         etcd cluster id {recorded:x} under that name: refused, nothing of it is recorded or \
         written (no token floor, no writer fence, no history). Check --cluster/--config (two \
         names swapped? an endpoint moved?); if this etcd deliberately replaced the recorded \
         one (a new cluster, or a restore under another cluster token), adopt it once with \
         `--adopt-etcd {adopt}` (docs/operations.md, Replacing etcd)"
    )
}

/// Everything the watcher reports, in order.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Update {
    Batch(Batch),
    /// The current leader's lease, sampled: remaining seconds, or `None`
    /// when etcd no longer knows the lease.
    LeaseSampled {
        election: String,
        lease_id: i64,
        remaining_seconds: Option<i64>,
    },
    /// How many candidates wait behind the election's leader (queue layout
    /// keys), after it changed or after a (re)load. Not persisted.
    Waiting {
        election: String,
        count: usize,
    },
    /// Kubernetes Leases (keys whose value defines their terms), at most
    /// once a second: how many have lapsed (held, with no write for longer
    /// than their duration, as the watch saw writes arrive), and each one
    /// written or lapsed since the last such update. Sent when either
    /// changed. Not persisted.
    Renewing {
        lapsed: usize,
        changed: Vec<LeaseNow>,
    },
    /// An election (and its series) is no longer tracked: no keys left and
    /// nothing happened for a while.
    Forgotten {
        election: String,
    },
    Watch(WatchStatus),
    /// The etcd cluster id the watcher reads from, after every (re)load: a
    /// persisting sink stores it (after the batch that precedes it) so a
    /// restart can tell a replaced cluster.
    Cluster {
        cluster_id: u64,
    },
}

/// A Kubernetes Lease's holder as the watch last read it (live, not
/// persisted): its term, its renewals, and whether it lapsed. Sent on the
/// live feed as `event: lease` (`web/live.rs`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct LeaseNow {
    pub election: String,
    /// Its holder and term's token; `None`: nobody holds it.
    pub held: Option<(String, i64)>,
    /// Renewals read in the term; the time between the last two (µs, by
    /// the holder's clock); how long one holds it.
    pub renewals: u64,
    /// The term was first read in a snapshot: `renewals` counts since.
    pub partial: bool,
    pub every_us: Option<i64>,
    pub duration_s: Option<i64>,
    /// Its `renewTime` and `acquireTime` as written (µs on the holder's
    /// clock), and its `leaseTransitions` as its holders wrote it.
    pub renewed_us: Option<i64>,
    pub acquired_us: Option<i64>,
    pub transitions: Option<i64>,
    /// When its last write arrived (tenure's clock, unix ms); when
    /// `written_seen` is false, when it was read in a snapshot instead
    /// (its write may be much older).
    pub written_at_ms: i64,
    pub written_seen: bool,
    /// Held with no write for longer than its duration, as a watch that
    /// was there to see one knows: renewals stopped and nobody took over
    /// yet.
    pub lapsed: bool,
}

/// A term that history holds as still running.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct OpenTerm {
    pub election: String,
    pub token: i64,
    pub holder: String,
    pub lease_id: i64,
    pub layout: KeyLayout,
    pub started_revision: i64,
    pub started_at_ms: i64,
}

/// Where a restarted watcher resumes: everything up to `revision` is
/// stored, and these terms were open at that revision. History produces it;
/// the watcher consumes it.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct ResumePoint {
    pub revision: i64,
    pub open_terms: Vec<OpenTerm>,
    /// The etcd cluster id history last recorded; `None` for history
    /// written before tenure recorded it.
    #[serde(default)]
    pub cluster_id: Option<u64>,
    /// The latest moment history knows the watcher was current (the newest
    /// recorded arrival): what happened after `revision` happened after
    /// it. `None`: not known.
    #[serde(default)]
    pub live_at_ms: Option<i64>,
    /// The newest terms of the current timeline that began at or below
    /// `revision`, ended or not, whose start was seen as it happened (its
    /// lease then is the key's at its creation; newest token first, a
    /// few): in the same
    /// timeline, etcd created each one's key at exactly its token, with its
    /// lease. What the watcher checks at a resume when no open term tells
    /// (a restore while serve was down, nothing open at `revision`).
    #[serde(default)]
    pub witnesses: Vec<Witness>,
}

/// A term history recorded: etcd created `election`'s key with lease
/// `lease_id` at revision `token` ([`ResumePoint::witnesses`]).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Witness {
    pub election: String,
    pub token: i64,
    pub lease_id: i64,
}

/// How many witnesses a resume point carries.
pub const WITNESSES: usize = 4;

/// `name` of the cluster `cluster`: `CLUSTER/NAME` in the
/// history, the pages, the API and the URLs of a serve with `--cluster`.
/// The empty name (a fleet-wide event: a gap, a reset) becomes `CLUSTER/`,
/// the cluster's own.
pub fn qualify(cluster: &str, name: &str) -> String {
    let mut q = String::with_capacity(cluster.len() + 1 + name.len());
    q.push_str(cluster);
    q.push('/');
    q.push_str(name);
    q
}

/// The name under which the fleet-wide events that concern `election` are
/// stored: its cluster's (`CLUSTER/`, see [`qualify`]) when it has one,
/// else the empty name. A name whose first `/` is not at its start may be
/// qualified; for one that is not, `CLUSTER/` names no cluster and matches
/// nothing, so reading both is always right.
pub fn fleet_name_of(election: &str) -> &str {
    match election.find('/') {
        Some(i) if i > 0 => &election[..=i],
        _ => "",
    }
}

/// Whether `election` names no election but a fleet's (or a cluster's)
/// events: the empty name, or `CLUSTER/`.
pub fn is_fleet_name(election: &str) -> bool {
    election.is_empty() || (election.ends_with('/') && fleet_name_of(election) == election)
}

/// Unix milliseconds now, from the wall clock (for display and history
/// only: no decision is made on it).
pub fn now_ms() -> i64 {
    // The one wall-clock read (clippy.toml): a time to record and show.
    #[allow(clippy::disallowed_methods)]
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_millis() as i64)
        .unwrap_or(0)
}
