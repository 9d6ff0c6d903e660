//! The scripted watcher updates the metrics and trace tests replay.

use tenure::election::{FenceReason, KeyLayout};
use tenure::events::*;
use tenure::telemetry::{Metrics, MetricsOptions};

pub fn ev(revision: i64, at_ms: i64, election: &str, kind: EventKind) -> Event {
    Event {
        revision,
        at_ms,
        election: election.to_owned(),
        kind,
    }
}

pub fn batch(revision: i64, events: Vec<Event>) -> Update {
    Update::Batch(Batch { revision, events })
}

pub fn started(token: i64, holder: &str, lease_id: i64, previous: Option<&str>) -> EventKind {
    EventKind::TermStarted {
        token,
        holder: holder.to_owned(),
        lease_id,
        layout: KeyLayout::Single,
        previous_holder: previous.map(str::to_owned),
        from_snapshot: false,
    }
}

pub fn ended(
    token: i64,
    holder: &str,
    lease_id: i64,
    cause: EndCause,
    started_at_ms: i64,
) -> EventKind {
    EventKind::TermEnded {
        token,
        holder: holder.to_owned(),
        lease_id,
        cause,
        started_revision: token,
        started_at_ms,
        renewals: None,
    }
}

pub fn sampled(election: &str, lease_id: i64, remaining: Option<i64>) -> Update {
    Update::LeaseSampled {
        election: election.to_owned(),
        lease_id,
        remaining_seconds: remaining,
    }
}

pub const S: i64 = 1000;

/// The story the scripted tests replay; returns (updates, number of events,
/// the time election "db" became leaderless for good).
pub fn script(base: i64) -> (Vec<Update>, u64, i64) {
    let db_end = base + 120 * S;
    let updates = vec![
        Update::Watch(WatchStatus::EtcdUp(true)),
        // db: alice leads (token 10, lease 0xa), her lease is sampled.
        batch(
            10,
            vec![ev(10, base, "db", started(10, "alice", 0xa, None))],
        ),
        sampled("db", 0xa, Some(7)),
        // proclaim: alice → alice-v2 within the same term.
        batch(
            11,
            vec![ev(
                11,
                base + 10 * S,
                "db",
                EventKind::LeaderValueChanged {
                    token: 10,
                    holder: "alice-v2".into(),
                    previous: "alice".into(),
                },
            )],
        ),
        // two accepted fence checks
        batch(
            12,
            vec![
                ev(
                    12,
                    base + 20 * S,
                    "db",
                    EventKind::FenceAccepted {
                        resource: "orders".into(),
                        token: 10,
                    },
                ),
                ev(
                    12,
                    base + 20 * S,
                    "db",
                    EventKind::FenceAccepted {
                        resource: "ledger".into(),
                        token: 10,
                    },
                ),
            ],
        ),
        // alice resigns after 60 s.
        batch(
            13,
            vec![ev(
                13,
                base + 60 * S,
                "db",
                ended(10, "alice-v2", 0xa, EndCause::Resigned, base),
            )],
        ),
        // a refusal while nobody leads
        batch(
            14,
            vec![ev(
                14,
                base + 70 * S,
                "db",
                EventKind::FenceRefused {
                    resource: "orders".into(),
                    token: 10,
                    reason: FenceReason::NoLeader,
                    current_token: None,
                    current_holder: None,
                },
            )],
        ),
        // bob leads 30 s after alice resigned.
        batch(
            15,
            vec![ev(
                15,
                base + 90 * S,
                "db",
                started(15, "bob", 0xb, Some("alice-v2")),
            )],
        ),
        sampled("db", 0xa, Some(3)), // alice's old lease: ignored
        sampled("db", 0xb, Some(5)),
        // bob's lease expires after 30 s: db stays leaderless.
        batch(
            16,
            vec![ev(
                16,
                db_end,
                "db",
                ended(15, "bob", 0xb, EndCause::Expired, base + 90 * S),
            )],
        ),
        Update::Watch(WatchStatus::Restarted(RestartReason::Compacted)),
        Update::Watch(WatchStatus::Restarted(RestartReason::StreamError)),
        Update::Watch(WatchStatus::Restarted(RestartReason::StreamError)),
        Update::Watch(WatchStatus::CaughtUp { revision: 17 }),
        Update::Watch(WatchStatus::Overflow {
            election: "other".into(),
        }),
        Update::Watch(WatchStatus::IgnoredKey),
        Update::Watch(WatchStatus::IgnoredKey),
        batch(
            18,
            vec![ev(
                18,
                base + 130 * S,
                "",
                EventKind::Gap {
                    from_revision: 16,
                    to_revision: 17,
                },
            )],
        ),
        // web: a term already running when first seen, superseded by w2.
        batch(
            19,
            vec![ev(
                19,
                base,
                "web",
                EventKind::TermStarted {
                    token: 5,
                    holder: "w1".into(),
                    lease_id: 0x5,
                    layout: KeyLayout::Queue,
                    previous_holder: None,
                    from_snapshot: true,
                },
            )],
        ),
        batch(
            20,
            vec![
                ev(
                    20,
                    base + 10 * S,
                    "web",
                    ended(5, "w1", 0x5, EndCause::Superseded, base),
                ),
                ev(20, base + 10 * S, "web", started(8, "w2", 0x8, Some("w1"))),
            ],
        ),
        sampled("web", 0x8, Some(9)),
        sampled("nobody-knows-me", 0x8, Some(9)),
        // tmp: comes and is forgotten.
        batch(21, vec![ev(21, base, "tmp", started(21, "t", 0x21, None))]),
        sampled("tmp", 0x21, Some(4)),
        batch(
            22,
            vec![ev(
                22,
                base + S,
                "tmp",
                ended(21, "t", 0x21, EndCause::Deleted, base),
            )],
        ),
        Update::Forgotten {
            election: "tmp".into(),
        },
        // web's holder renews as a Kubernetes Lease would, and lapsed.
        Update::Renewing {
            lapsed: 1,
            changed: vec![tenure::events::LeaseNow {
                election: "web".into(),
                held: Some(("w2".into(), 8)),
                renewals: 3,
                partial: false,
                every_us: Some(2_000_000),
                duration_s: Some(15),
                renewed_us: None,
                acquired_us: None,
                transitions: None,
                written_at_ms: base,
                written_seen: true,
                lapsed: true,
            }],
        },
    ];
    let events = updates
        .iter()
        .map(|u| match u {
            Update::Batch(b) => b.events.len() as u64,
            _ => 0,
        })
        .sum();
    (updates, events, db_end)
}

pub fn scripted_metrics(base: i64) -> (Metrics, u64, i64) {
    scripted_metrics_with(base, MetricsOptions::default())
}

pub fn scripted_metrics_with(base: i64, options: MetricsOptions) -> (Metrics, u64, i64) {
    let m = Metrics::with_options(options).expect("metrics");
    let (updates, events, db_end) = script(base);
    for u in &updates {
        m.apply(u);
    }
    (m, events, db_end)
}
