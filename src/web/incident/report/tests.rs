//! The report's tests: leaderless time when a handover was replayed, when
//! not every term was read or none is known, and Markdown cells that cannot
//! break the table.

use super::markdown::cell;
use super::*;
use crate::history::window::Activity;
use crate::history::{format_ms, TermRow};
use crate::web::incident::window::{Lane, Selection, Window};
use crate::web::replays::ReplayMark;

fn term(token: i64, start: i64, end: Option<i64>) -> TermRow {
    TermRow {
        election: "e".into(),
        token,
        holder: format!("h{token}"),
        lease_id: 1,
        layout: None,
        started_at: format_ms(start),
        ended_at: end.map(format_ms),
        started_at_ms: start,
        ended_at_ms: end,
        started_revision: token,
        ended_revision: None,
        end_cause: None,
        from_snapshot: false,
        duration_seconds: None,
        duration_bounds_seconds: None,
        acting: Default::default(),
    }
}

fn window(lanes: Vec<Lane>) -> Window {
    Window {
        sel: Selection {
            from_ms: 0,
            to_ms: 100_000,
            glob: None,
        },
        total: lanes.len(),
        lanes,
        gaps: Vec::new(),
        replays: Vec::new(),
        cluster: Vec::new(),
        unwatched_since: None,
        clusters: Default::default(),
    }
}

#[test]
fn replayed_handover_makes_leaderless_time_a_range_not_zero() {
    // The old term's end (revision 5) and the new term's start
    // (revision 6) arrived in one replay at 30 s, with the same arrival
    // time; nobody watched since 21 s.
    let mut old = term(1, 10_000, Some(30_000));
    old.ended_revision = Some(5);
    let new = term(6, 30_000, None);
    let lane = Lane {
        activity: Activity {
            election: "e".into(),
            ..Activity::default()
        },
        terms: vec![old, new],
        refusals: Vec::new(),
        known_since_ms: Some(10_000),
        truncated: false,
        unwatched_since: None,
    };
    let mut w = window(vec![lane.clone()]);
    let seen_live = build_report(&w, 200_000);
    assert_eq!(seen_live.elections[0].leaderless_ms, Some(0));
    w.replays.push(ReplayMark {
        at_ms: 30_000,
        from_revision: 5,
        to_revision: 6,
        since_ms: Some(21_000),
    });
    let r = build_report(&w, 200_000);
    let e = &r.elections[0];
    assert_eq!(e.leaderless_ms, None, "not 0 ms: unknown");
    assert_eq!(e.longest_leaderless_ms, None);
    assert_eq!(
        (e.leaderless_min_ms, e.leaderless_max_ms),
        (Some(0), Some(9_000))
    );
    assert_eq!(e.replayed_boundaries, 2);
    assert!(e.terms[0].end_replayed && e.terms[1].start_replayed);
    assert!(!e.terms[0].start_replayed);
    let md = report_markdown(&r);
    assert!(
        md.contains("| e | 0 | unknown (0–9000 ms) | unknown | unknown | 0 |"),
        "{md}"
    );
    assert!(md.contains("(replayed: between "), "{md}");
    // A replay at another arrival time is another batch: not these.
    w.replays[0].at_ms = 29_999;
    assert_eq!(
        build_report(&w, 200_000).elections[0].leaderless_ms,
        Some(0)
    );
    // Unknown since when: counted from the history's first term.
    w.replays[0] = ReplayMark {
        at_ms: 30_000,
        from_revision: 6,
        to_revision: 6,
        since_ms: None,
    };
    let e = &build_report(&w, 200_000).elections[0];
    assert_eq!(
        (e.leaderless_min_ms, e.leaderless_max_ms),
        (Some(0), Some(0))
    );
    assert_eq!(
        e.leaderless_ms,
        Some(0),
        "a start replayed alone cannot add leaderless time"
    );
}

#[test]
fn leaderless_is_unknown_when_not_every_term_was_read_or_none_is_known() {
    let lane = |terms: Vec<TermRow>, known: Option<i64>, truncated: bool| Lane {
        activity: Activity {
            election: "e".into(),
            ..Activity::default()
        },
        terms,
        refusals: Vec::new(),
        known_since_ms: known,
        truncated,
        unwatched_since: None,
    };
    let terms = vec![term(1, 10_000, Some(20_000)), term(2, 25_000, None)];
    let full = build_report(
        &window(vec![lane(terms.clone(), Some(10_000), false)]),
        200_000,
    );
    let e = &full.elections[0];
    assert_eq!(e.leaderless_ms, Some(5_000));
    assert_eq!(e.longest_leaderless_ms, Some(5_000));
    assert_eq!(e.leaderless_stretches, Some(1));
    let cut = build_report(&window(vec![lane(terms, Some(10_000), true)]), 200_000);
    assert_eq!(cut.elections[0].leaderless_ms, None);
    let md = report_markdown(&cut);
    assert!(
        md.contains("| e | 0 | unknown | unknown | unknown | 0+ |"),
        "{md}"
    );
    let none = build_report(&window(vec![lane(Vec::new(), None, false)]), 200_000);
    assert_eq!(none.elections[0].leaderless_ms, None);
}

#[test]
fn markdown_cells_cannot_break_the_table() {
    assert_eq!(cell("a|b\nc"), "a\\|b\\\\u{a}c");
    assert_eq!(cell("<script>"), "\\<script\\>");
    // Shown as `\u{1b}` where the Markdown is rendered.
    assert_eq!(cell("\0\u{1b}\u{202e}"), "\\\\u{0}\\\\u{1b}\\\\u{202e}");
}
