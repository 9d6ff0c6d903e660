//! The events of a seeded history, and the story the page tests read.

use tenure::election::{FenceReason, KeyLayout};
use tenure::events::{Batch, EndCause, Event, EventKind};
use tenure::history::{format_ms, TermRow};

use crate::html::*;

pub const MIN: i64 = 60_000;
pub const HOUR: i64 = 3_600_000;

pub fn ev(revision: i64, at_ms: i64, election: &str, kind: EventKind) -> Event {
    Event {
        revision,
        at_ms,
        election: election.to_owned(),
        kind,
    }
}

pub fn started(token: i64, holder: &str, previous: Option<&str>) -> EventKind {
    EventKind::TermStarted {
        token,
        holder: holder.to_owned(),
        lease_id: token * 7 + 0x1000,
        layout: KeyLayout::Single,
        previous_holder: previous.map(str::to_owned),
        from_snapshot: false,
    }
}

pub fn ended(token: i64, holder: &str, cause: EndCause, started_at_ms: i64) -> EventKind {
    EventKind::TermEnded {
        token,
        holder: holder.to_owned(),
        lease_id: token * 7 + 0x1000,
        cause,
        started_revision: token,
        started_at_ms,
        renewals: None,
    }
}

pub fn refused(resource: &str, token: i64, current: Option<(i64, &str)>) -> EventKind {
    EventKind::FenceRefused {
        resource: resource.to_owned(),
        token,
        reason: FenceReason::StaleToken,
        current_token: current.map(|c| c.0),
        current_holder: current.map(|c| c.1.to_owned()),
    }
}

/// The split-brain story in `team/db` (times relative to `now`), a quiet
/// leaderless `cache`, an election led by an XSS attempt, and a watcher gap.
pub fn story(now: i64) -> Vec<Batch> {
    let t = |m: i64| now - m * MIN;
    let e = |rev: i64, at: i64, name: &str, kind| Batch {
        revision: rev,
        events: vec![ev(rev, at, name, kind)],
    };
    vec![
        e(50, t(180), "cache", started(50, "dave", None)),
        e(
            60,
            t(120),
            "cache",
            ended(50, "dave", EndCause::Deleted, t(180)),
        ),
        e(100, t(50), "team/db", started(100, "scene-01", None)),
        e(
            101,
            t(49),
            "team/db",
            EventKind::FenceAccepted {
                resource: "orders".into(),
                token: 100,
            },
        ),
        e(
            104,
            t(40),
            "team/db",
            ended(100, "scene-01", EndCause::Expired, t(50)),
        ),
        e(
            105,
            t(39),
            "team/db",
            started(105, "scene-02", Some("scene-01")),
        ),
        e(
            106,
            t(38),
            "team/db",
            refused("orders", 100, Some((105, "scene-02"))),
        ),
        e(
            110,
            t(30),
            "",
            EventKind::Gap {
                from_revision: 107,
                to_revision: 109,
            },
        ),
        e(
            120,
            t(20),
            "team/db",
            ended(105, "scene-02", EndCause::Resigned, t(39)),
        ),
        e(
            130,
            t(19),
            "team/db",
            started(130, "scene-03", Some("scene-02")),
        ),
        e(140, t(10), "xss", started(140, XSS, None)),
    ]
}

pub fn synthetic_terms(n: i64, from: i64, to: i64) -> Vec<TermRow> {
    let step = (to - from) / n;
    (0..n)
        .map(|i| {
            let start = from + i * step;
            let end = (i < n - 1).then_some(start + step * 9 / 10);
            TermRow {
                election: "load".into(),
                token: 1000 + i,
                holder: format!("worker-{:02}", i % 7),
                lease_id: i,
                layout: Some(KeyLayout::Single),
                started_at: format_ms(start),
                ended_at: end.map(format_ms),
                started_at_ms: start,
                ended_at_ms: end,
                started_revision: 1000 + i,
                ended_revision: end.map(|_| 1000 + i),
                end_cause: end.map(|_| EndCause::Expired),
                from_snapshot: false,
                duration_seconds: end.map(|e| (e - start) as f64 / 1000.0),
                duration_bounds_seconds: None,
                acting: Default::default(),
            }
        })
        .collect()
}
