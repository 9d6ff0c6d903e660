//! Every metric family, declared once: name, help, type, labels, buckets,
//! and where its values live. The registry ([`super::registry`]), the
//! hand-written exposition ([`super::exposition`]) and [`METRIC_NAMES`]
//! read these declarations; no family name is written anywhere else.

use crate::election::FenceReason;
use crate::events::EndCause;

/// The Prometheus type of a family.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    Counter,
    Gauge,
    Histogram,
}

impl Kind {
    /// As the `# TYPE` line writes it.
    pub const fn as_str(self) -> &'static str {
        match self {
            Kind::Counter => "counter",
            Kind::Gauge => "gauge",
            Kind::Histogram => "histogram",
        }
    }
}

/// Where a family's values live, and so how many series it has.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SeriesScope {
    /// The process (or the whole fleet of elections): a fixed number of
    /// series, whatever the number of elections. Registry metrics.
    Process,
    /// Series per election, always. Written by the exposition.
    Election,
    /// Series per election, only with
    /// [`MetricsOptions::per_election_detail`](super::MetricsOptions).
    ElectionDetail,
}

/// Which family (what the registry and the exposition match on).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Id {
    ActingMargin,
    BuildInfo,
    CandidatesWaiting,
    ElectionCandidatesWaiting,
    FencingToken,
    HasLeader,
    LeaderChanges,
    LeaderInfo,
    Leaderless,
    LeaseRemaining,
    LeaseLapsed,
    LeaseRenewInterval,
    LeaseHandover,
    ElectionTermDuration,
    ElectionTermEnds,
    TermStart,
    EtcdUp,
    FencingChecks,
    FencingRefusals,
    HistoryGaps,
    TermDuration,
    TermEnds,
    WatchElections,
    WatchOverflow,
    WatchEvents,
    WatchIgnoredKeys,
    WatchEncryptedValues,
    LeasesLapsed,
    WatchRestarts,
    WatchRevision,
    TwoPrimaries,
    Overlap,
}

/// One metric family.
#[derive(Debug, Clone, Copy)]
pub struct Family {
    pub id: Id,
    pub name: &'static str,
    pub help: &'static str,
    pub kind: Kind,
    /// Label names, in name order (`le` of a histogram not included).
    pub labels: &'static [&'static str],
    /// Upper bounds of a histogram's buckets (`+Inf` not included).
    pub buckets: &'static [f64],
    pub scope: SeriesScope,
}

/// Buckets of the margin histogram (seconds; negative: two holders acted at
/// once for that long).
pub const MARGIN_BUCKETS: &[f64] = &[
    -10.0, -1.0, -0.1, 0.0, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0,
];

/// Buckets of both term-duration histograms: 1 s to a week.
pub const TERM_DURATION_BUCKETS: &[f64] = &[
    1.0, 5.0, 15.0, 30.0, 60.0, 300.0, 900.0, 1800.0, 3600.0, 10_800.0, 21_600.0, 43_200.0,
    86_400.0, 172_800.0, 604_800.0,
];

/// Buckets of the handover histogram: from a Lease holder's last renewal
/// to the next holder's acquisition (client-go's defaults: renewals every
/// 2 s, a 15 s lease).
pub const HANDOVER_BUCKETS: &[f64] = &[
    0.5, 1.0, 2.0, 5.0, 10.0, 15.0, 17.0, 20.0, 30.0, 60.0, 120.0, 300.0,
];

const TERM_DURATION_HELP: &str = "Duration of ended terms whose start and end were both seen \
    (terms first seen in a snapshot, or ended in compacted history, are not observed).";
const TERM_ENDS_HELP: &str = "Terms ended, by cause: resigned (given up), expired (lease ran \
    out), deleted (key deleted while its lease lived), superseded, unknown (tenure cannot tell).";

const fn family(
    id: Id,
    name: &'static str,
    help: &'static str,
    kind: Kind,
    labels: &'static [&'static str],
    scope: SeriesScope,
) -> Family {
    Family {
        id,
        name,
        help,
        kind,
        labels,
        buckets: &[],
        scope,
    }
}

use Kind::{Counter, Gauge, Histogram};
use SeriesScope::{Election, ElectionDetail, Process};

/// Every family, in name order (the order of the exposition).
pub const FAMILIES: [Family; 32] = [
    Family {
        buckets: MARGIN_BUCKETS,
        ..family(
            Id::ActingMargin,
            "tenure_acting_margin_seconds",
            "Per term whose holder reported when it stopped acting (tenure campaign, the \
             library): the earliest moment another holder could have acted (the lease's \
             earliest end, the term's end with its lease, the next term's start) minus when \
             acting ended. Negative: the holder acted past it. ended: resigned (the holder \
             ended the term itself: the margin is its round trip) or lost (expiry, depose, \
             takeover: the margin is how close it came). All elections together.",
            Histogram,
            &["ended"],
            Process,
        )
    },
    family(
        Id::BuildInfo,
        "tenure_build_info",
        "Always 1; the version label is the running tenure version.",
        Gauge,
        &["version"],
        Process,
    ),
    family(
        Id::CandidatesWaiting,
        "tenure_candidates_waiting",
        "Candidates queued behind a leader (queue layout keys), over all elections; \
         single-key waiters hold no key and are not counted.",
        Gauge,
        &[],
        Process,
    ),
    family(
        Id::ElectionCandidatesWaiting,
        "tenure_election_candidates_waiting",
        "Candidates queued behind the election's leader (queue layout keys).",
        Gauge,
        &["election"],
        ElectionDetail,
    ),
    family(
        Id::FencingToken,
        "tenure_election_fencing_token",
        "Fencing token (leader key CreateRevision) of the current term; \
         while leaderless, of the last term.",
        Gauge,
        &["election"],
        Election,
    ),
    family(
        Id::HasLeader,
        "tenure_election_has_leader",
        "1 while the election has a leader, 0 while it has none.",
        Gauge,
        &["election"],
        Election,
    ),
    family(
        Id::LeaderChanges,
        "tenure_election_leader_changes_total",
        "Terms started, as seen by this process (a term already running \
         when first seen counts once).",
        Counter,
        &["election"],
        Election,
    ),
    family(
        Id::LeaderInfo,
        "tenure_election_leader_info",
        "1 for the current leader's identity (holder, at most 128 bytes); \
         no series while leaderless.",
        Gauge,
        &["election", "holder"],
        Election,
    ),
    family(
        Id::Leaderless,
        "tenure_election_leaderless_seconds_total",
        "Seconds the election had no leader since a term end seen by this \
         process; grows while it is leaderless and the watcher is live (not \
         while etcd is unreachable: that time is not known).",
        Counter,
        &["election"],
        Election,
    ),
    family(
        Id::LeaseLapsed,
        "tenure_election_lease_lapsed",
        "1 while the election's Kubernetes Lease has lapsed: held, with no write for longer \
         than its leaseDurationSeconds as the watch saw writes arrive (renewals stopped, \
         nobody took over yet), else 0. Series only for elections held by a Lease.",
        Gauge,
        &["election"],
        Election,
    ),
    family(
        Id::LeaseRemaining,
        "tenure_election_lease_remaining_seconds",
        "Seconds left on the current leader's lease when last sampled; no \
         series while leaderless or when etcd no longer knows the lease.",
        Gauge,
        &["election"],
        Election,
    ),
    family(
        Id::LeaseRenewInterval,
        "tenure_election_lease_renew_interval_seconds",
        "Time between the current Lease holder's last two renewals, by the renewTime its \
         holder wrote (client-go's RetryPeriod while all is well). Series only for \
         elections held by a Lease whose holder renewed twice.",
        Gauge,
        &["election"],
        Election,
    ),
    Family {
        buckets: TERM_DURATION_BUCKETS,
        ..family(
            Id::ElectionTermDuration,
            "tenure_election_term_duration_seconds",
            TERM_DURATION_HELP,
            Histogram,
            &["election"],
            ElectionDetail,
        )
    },
    family(
        Id::ElectionTermEnds,
        "tenure_election_term_ends_total",
        TERM_ENDS_HELP,
        Counter,
        &["cause", "election"],
        ElectionDetail,
    ),
    family(
        Id::TermStart,
        "tenure_election_term_start_timestamp_seconds",
        "Unix time the current term (while leaderless: the last term) was \
         seen to start; for a term first seen in a snapshot, when it was seen.",
        Gauge,
        &["election"],
        Election,
    ),
    family(
        Id::EtcdUp,
        "tenure_etcd_up",
        "1 if etcd answered the watcher's last request, else 0.",
        Gauge,
        &[],
        Process,
    ),
    family(
        Id::FencingChecks,
        "tenure_fencing_checks_total",
        "Shared fence checks recorded in etcd, by result: accepted, refused.",
        Counter,
        &["election", "result"],
        Election,
    ),
    family(
        Id::FencingRefusals,
        "tenure_fencing_refusals_total",
        "Tokens refused by the shared fence, by reason: stale_token, \
         term_ended, no_leader.",
        Counter,
        &["election", "reason"],
        Election,
    ),
    family(
        Id::HistoryGaps,
        "tenure_history_gaps_total",
        "Times etcd compacted revisions before the watcher saw them, or replaced \
         its timeline (a restore, a new cluster: an event of type reset) (history \
         gaps: transitions in between are not known one by one).",
        Counter,
        &[],
        Process,
    ),
    Family {
        buckets: HANDOVER_BUCKETS,
        ..family(
            Id::LeaseHandover,
            "tenure_lease_handover_seconds",
            "Kubernetes Lease terms ended by another holder's acquisition: the time from \
             the old holder's last renewal to the new holder's acquireTime, by the times its \
             writers wrote (leaderless time as client-go's candidates saw it), by cause: \
             expired (longer than the lease), taken_over (shorter: an early or forced \
             takeover), unknown. All elections together.",
            Histogram,
            &["cause"],
            Process,
        )
    },
    family(
        Id::LeasesLapsed,
        "tenure_leases_lapsed",
        "Kubernetes Leases held with no write for longer than their leaseDurationSeconds, as the \
         watch saw writes arrive: renewals stopped and nobody took over yet.",
        Gauge,
        &[],
        Process,
    ),
    family(
        Id::Overlap,
        "tenure_overlap_seconds_total",
        "Seconds two holders acted as leader at once: how long each holder that reported \
         when it stopped acting acted on after the next term began, all elections together.",
        Counter,
        &[],
        Process,
    ),
    Family {
        buckets: TERM_DURATION_BUCKETS,
        ..family(
            Id::TermDuration,
            "tenure_term_duration_seconds",
            TERM_DURATION_HELP,
            Histogram,
            &[],
            Process,
        )
    },
    family(
        Id::TermEnds,
        "tenure_term_ends_total",
        TERM_ENDS_HELP,
        Counter,
        &["cause"],
        Process,
    ),
    family(
        Id::TwoPrimaries,
        "tenure_two_primaries_total",
        "Times a member said it is a primary while another held the leader key \
         (Patroni's members/NAME): the two_primaries events, all elections together.",
        Counter,
        &[],
        Process,
    ),
    family(
        Id::WatchElections,
        "tenure_watch_elections",
        "Elections that currently have series here (tracked by the watcher).",
        Gauge,
        &[],
        Process,
    ),
    family(
        Id::WatchOverflow,
        "tenure_watch_elections_overflow_total",
        "New elections ignored because --max-elections elections are tracked.",
        Counter,
        &[],
        Process,
    ),
    family(
        Id::WatchEncryptedValues,
        "tenure_watch_encrypted_values_total",
        "Values encrypted at rest by their writer (Kubernetes' k8s:enc:), which tenure cannot \
         read from etcd: their keys are ignored.",
        Counter,
        &[],
        Process,
    ),
    family(
        Id::WatchEvents,
        "tenure_watch_events_total",
        "Events (transitions, fence checks, gaps) the watcher produced.",
        Counter,
        &[],
        Process,
    ),
    family(
        Id::WatchIgnoredKeys,
        "tenure_watch_ignored_keys_total",
        "Keys under the prefix that are neither a valid election nor a fence key.",
        Counter,
        &[],
        Process,
    ),
    family(
        Id::WatchRestarts,
        "tenure_watch_restarts_total",
        "Times the watcher re-established its etcd watch, by reason: \
         compacted, stream_error, stalled, cancelled.",
        Counter,
        &["reason"],
        Process,
    ),
    family(
        Id::WatchRevision,
        "tenure_watch_revision",
        "etcd revision up to which the watcher has processed everything.",
        Gauge,
        &[],
        Process,
    ),
];

/// A family `tenure serve` registers beside [`FAMILIES`], as an ordinary
/// registry metric of its own (the history writer's, `telemetry/writer.rs`):
/// its name and help.
#[derive(Debug, Clone, Copy)]
pub struct ServeFamily {
    pub name: &'static str,
    pub help: &'static str,
}

/// 1 while this replica records the history.
pub const HISTORY_WRITER: ServeFamily = ServeFamily {
    name: "tenure_history_writer",
    help: "1 while this replica records the history (it holds tenure/history-writer, or \
           its history is a SQLite file of its own), else 0.",
};

/// Commits the writer fence refused.
pub const HISTORY_COMMITS_REFUSED: ServeFamily = ServeFamily {
    name: "tenure_history_commits_refused_total",
    help: "History commits refused by the database's writer fence: a newer writer had \
           already written.",
};

/// The declaration of `id`.
pub const fn get(id: Id) -> &'static Family {
    let mut i = 0;
    while i < FAMILIES.len() {
        if FAMILIES[i].id as usize == id as usize {
            return &FAMILIES[i];
        }
        i += 1;
    }
    panic!("every Id is declared in FAMILIES")
}

const fn count(detail: bool) -> usize {
    let mut n = 0;
    let mut i = 0;
    while i < FAMILIES.len() {
        if matches!(FAMILIES[i].scope, ElectionDetail) == detail {
            n += 1;
        }
        i += 1;
    }
    n
}

const fn names<const N: usize>(detail: bool) -> [&'static str; N] {
    let mut out = [""; N];
    let (mut i, mut j) = (0, 0);
    while i < FAMILIES.len() {
        if matches!(FAMILIES[i].scope, ElectionDetail) == detail {
            out[j] = FAMILIES[i].name;
            j += 1;
        }
        i += 1;
    }
    out
}

const DEFAULT_NAMES: [&str; count(false)] = names(false);
const DETAIL_NAMES: [&str; count(true)] = names(true);

/// Every family [`Metrics`](super::Metrics) exposes by default, in name
/// order.
pub const METRIC_NAMES: &[&str] = &DEFAULT_NAMES;

/// The families only exposed with
/// [`MetricsOptions::per_election_detail`](super::MetricsOptions), in name
/// order: the per-election term-duration histogram and term ends by cause.
pub const DETAIL_METRIC_NAMES: &[&str] = &DETAIL_NAMES;

/// The values of a `cause` label, in the exposition's (label value) order.
pub const CAUSES_SORTED: [EndCause; 7] = [
    EndCause::Deleted,
    EndCause::Expired,
    EndCause::Resigned,
    EndCause::Superseded,
    EndCause::Switchover,
    EndCause::TakenOver,
    EndCause::Unknown,
];

/// The values of a `reason` label of the fence, in label value order.
pub const FENCE_REASONS_SORTED: [FenceReason; 3] = [
    FenceReason::NoLeader,
    FenceReason::StaleToken,
    FenceReason::TermEnded,
];

/// The values of the fence checks' `result` label, in label value order.
pub const CHECK_RESULTS: [&str; 2] = ["accepted", "refused"];

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn declared_in_name_order_once_each_and_found_by_id() {
        for w in FAMILIES.windows(2) {
            assert!(w[0].name < w[1].name, "{} then {}", w[0].name, w[1].name);
        }
        for f in &FAMILIES {
            assert_eq!(get(f.id).name, f.name);
            assert!(f.name.starts_with("tenure_"));
            let mut sorted = f.labels.to_vec();
            sorted.sort_unstable();
            assert_eq!(sorted, f.labels, "{}: labels in name order", f.name);
            assert_eq!(f.kind == Histogram, !f.buckets.is_empty(), "{}", f.name);
            let per_election = f.labels.contains(&"election");
            assert_eq!(per_election, f.scope != Process, "{}", f.name);
        }
        assert_eq!(
            METRIC_NAMES.len() + DETAIL_METRIC_NAMES.len(),
            FAMILIES.len()
        );
        assert!(TERM_DURATION_BUCKETS.windows(2).all(|w| w[0] < w[1]));
    }

    #[test]
    fn label_values_are_complete_and_sorted() {
        let causes: Vec<&str> = CAUSES_SORTED.iter().map(|c| c.as_str()).collect();
        let mut all: Vec<&str> = EndCause::ALL.iter().map(|c| c.as_str()).collect();
        all.sort_unstable();
        assert_eq!(causes, all);
        let reasons: Vec<&str> = FENCE_REASONS_SORTED.iter().map(|r| r.as_str()).collect();
        let mut sorted = reasons.clone();
        sorted.sort_unstable();
        sorted.dedup();
        assert_eq!(reasons, sorted);
        assert_eq!(reasons.len(), 3);
    }
}
