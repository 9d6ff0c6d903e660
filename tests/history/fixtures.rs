//! Events, batches and a two-election story to write, and the store's paths.

use std::path::PathBuf;
use std::time::Duration;

use tenure::election::{FenceReason, KeyLayout};
use tenure::events::*;
use tenure::history::*;

pub(crate) const DAY_MS: i64 = 86_400_000;
pub(crate) const WEEK: Duration = Duration::from_secs(7 * 86_400);

pub(crate) fn db(dir: &tempfile::TempDir) -> PathBuf {
    dir.path().join("history.db")
}

pub(crate) fn ev(revision: i64, at_ms: i64, election: &str, kind: EventKind) -> Event {
    Event {
        revision,
        at_ms,
        election: election.to_owned(),
        kind,
    }
}

pub(crate) fn started(token: i64, holder: &str) -> EventKind {
    started_as(token, holder, false)
}

/// A start, seen (`from_snapshot` false) or first read in a snapshot.
pub(crate) fn started_as(token: i64, holder: &str, from_snapshot: bool) -> EventKind {
    EventKind::TermStarted {
        token,
        holder: holder.to_owned(),
        lease_id: token * 10,
        layout: KeyLayout::Single,
        previous_holder: None,
        from_snapshot,
    }
}

/// etcd started over: a new timeline from `from` to `to`.
pub(crate) fn reset(from: i64, to: i64, cluster_id: u64) -> EventKind {
    EventKind::Reset {
        from_revision: from,
        to_revision: to,
        previous_cluster_id: None,
        cluster_id,
    }
}

/// A small seeded generator (xorshift64*).
pub(crate) struct Rng(pub(crate) u64);

impl Rng {
    pub(crate) fn below(&mut self, n: u64) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_f491_4f6c_dd1d) % n
    }
}

pub(crate) fn ended(
    token: i64,
    holder: &str,
    cause: EndCause,
    started_revision: i64,
    at: i64,
) -> EventKind {
    EventKind::TermEnded {
        token,
        holder: holder.to_owned(),
        lease_id: token * 10,
        cause,
        started_revision,
        started_at_ms: at,
        renewals: None,
    }
}

pub(crate) fn refused(resource: &str, token: i64, current: Option<(i64, &str)>) -> EventKind {
    EventKind::FenceRefused {
        resource: resource.to_owned(),
        token,
        reason: FenceReason::StaleToken,
        current_token: current.map(|c| c.0),
        current_holder: current.map(|c| c.1.to_owned()),
    }
}

pub(crate) fn batch(revision: i64, events: Vec<Event>) -> Batch {
    Batch { revision, events }
}

pub(crate) fn all() -> Query {
    Query {
        limit: Some(MAX_LIMIT),
        ..Query::default()
    }
}

/// A story in two elections, times in the recent past.
pub(crate) fn story(t0: i64) -> Vec<Batch> {
    vec![
        batch(
            100,
            vec![
                ev(100, t0, "db", started(100, "alice")),
                ev(100, t0, "cache", {
                    let mut k = started(95, "carol");
                    if let EventKind::TermStarted {
                        layout,
                        from_snapshot,
                        ..
                    } = &mut k
                    {
                        *layout = KeyLayout::Queue;
                        *from_snapshot = true;
                    }
                    k
                }),
            ],
        ),
        batch(
            101,
            vec![ev(
                101,
                t0 + 1_000,
                "db",
                EventKind::LeaderValueChanged {
                    token: 100,
                    holder: "alice-2".into(),
                    previous: "alice".into(),
                },
            )],
        ),
        batch(
            102,
            vec![ev(
                102,
                t0 + 2_000,
                "db",
                EventKind::FenceAccepted {
                    resource: "orders".into(),
                    token: 100,
                },
            )],
        ),
        batch(
            105,
            vec![ev(
                105,
                t0 + 5_000,
                "db",
                ended(100, "alice-2", EndCause::Expired, 100, t0),
            )],
        ),
        batch(
            106,
            vec![ev(
                106,
                t0 + 6_000,
                "db",
                started(106, "bob, \"the builder\""),
            )],
        ),
        batch(
            107,
            vec![ev(
                107,
                t0 + 7_000,
                "db",
                refused("orders", 100, Some((106, "bob, \"the builder\""))),
            )],
        ),
        batch(
            120,
            vec![ev(
                120,
                t0 + 9_000,
                "",
                EventKind::Gap {
                    from_revision: 108,
                    to_revision: 119,
                },
            )],
        ),
        // A progress-only batch: nothing happened, the revision moves.
        batch(130, vec![]),
    ]
}

pub(crate) async fn write_all(store: &Store, batches: Vec<Batch>) {
    for b in batches {
        store.write(b).await.expect("write");
    }
}
