use super::ticks::DAY;
use super::*;
use crate::election::{FenceReason, KeyLayout};
use crate::events::EndCause;
use crate::history::{format_duration_ms, format_ms, short_time};

const T0: i64 = 1_796_220_000_000; // 2026-12-02T14:00:00Z
const MIN: i64 = 60_000;
const HOUR: i64 = 3_600_000;

fn term(token: i64, holder: &str, start: i64, end: Option<i64>) -> TermRow {
    TermRow {
        election: "db".into(),
        token,
        holder: holder.into(),
        lease_id: token,
        layout: Some(KeyLayout::Single),
        started_at: format_ms(start),
        ended_at: end.map(format_ms),
        started_at_ms: start,
        ended_at_ms: end,
        started_revision: token,
        ended_revision: end.map(|_| token + 1),
        end_cause: end.map(|_| EndCause::Expired),
        from_snapshot: false,
        duration_seconds: end.map(|e| (e - start) as f64 / 1000.0),
        duration_bounds_seconds: None,
        acting: Default::default(),
    }
}

fn refusal(token: i64, at: i64) -> RefusalRow {
    RefusalRow {
        election: "db".into(),
        resource: "orders".into(),
        token,
        reason: FenceReason::StaleToken,
        revision: token + 100,
        at_ms: at,
        at: format_ms(at),
        current_token: Some(token + 2),
        current_holder: Some("b".into()),
    }
}

fn input<'a>(terms: &'a [TermRow], from: i64, to: i64, now: i64) -> Input<'a> {
    Input {
        terms,
        refusals: &[],
        gaps: &[],
        from_ms: from,
        to_ms: to,
        now_ms: now,
        known_since_ms: terms.iter().map(|t| t.started_at_ms).min(),
        unwatched_since_ms: None,
        width: WIDTH,
    }
}

fn assert_inside(t: &Timeline) {
    for b in &t.bars {
        assert!(b.x.0 >= t.plot_left.0 - 1e-9, "{b:?}");
        assert!(b.x.0 + b.w.0 <= t.plot_right.0 + 2.0 + 1e-9, "{b:?}");
        assert!(b.w.0 > 0.0, "{b:?}");
    }
    for m in t.refusals.iter().chain(&t.gaps) {
        assert!(m.x.0 >= t.plot_left.0 && m.x.0 <= t.plot_right.0, "{m:?}");
    }
    for s in &t.leaderless {
        assert!(
            s.x.0 >= t.plot_left.0 && s.x.0 + s.w.0 <= t.plot_right.0 + MIN_BAR,
            "{s:?}"
        );
    }
}

#[test]
fn bars_lanes_and_leaderless_gaps() {
    let terms = [
        term(10, "a", T0, Some(T0 + 10 * MIN)),
        term(12, "b", T0 + 12 * MIN, Some(T0 + 30 * MIN)),
        term(20, "a", T0 + 30 * MIN, Some(T0 + 40 * MIN)),
        term(25, "c", T0 + 45 * MIN, None),
    ];
    let t = layout(&input(&terms, T0, T0 + HOUR, T0 + 50 * MIN));
    assert_inside(&t);
    assert_eq!(t.lanes.len(), 3);
    let names: Vec<_> = t.lanes.iter().map(|l| l.label.as_str()).collect();
    assert_eq!(names, ["a", "b", "c"]);
    assert_eq!(t.bars.len(), 4);
    assert!(t.bars.iter().all(Bar::is_term));
    assert_eq!(t.bars.iter().filter(|b| b.lane == 0).count(), 2);
    // The window's first 10 min are a's: x from the plot's left edge,
    // a sixth of the plot wide.
    let plot = t.plot_right.0 - t.plot_left.0;
    let a = &t.bars[0];
    assert_eq!((a.token, a.lane), (10, 0));
    assert!((a.x.0 - t.plot_left.0).abs() < 1e-6);
    assert!((a.w.0 - plot / 6.0).abs() < 1e-6);
    // Open term: from 45 min to now (50 min), and no further.
    let open = t.bars.iter().find(|b| b.token == 25).expect("open bar");
    assert_eq!(open.kind, BarKind::Open);
    assert!((open.x.0 + open.w.0 - t.now_x.expect("now inside").0).abs() < 1e-6);
    assert!(open.title.contains("still leading"), "{}", open.title);
    // Leaderless: 10..12, 40..45 min; nothing after now is leaderless.
    let gaps: Vec<(i64, i64)> = t
        .leaderless
        .iter()
        .map(|s| (s.from_ms - T0, s.to_ms - T0))
        .collect();
    assert_eq!(gaps, [(10 * MIN, 12 * MIN), (40 * MIN, 45 * MIN)]);
    assert_eq!(t.leaderless_ms, 7 * MIN);
    assert!(
        t.leaderless[0].title.contains("no leader for 2m 00s"),
        "{}",
        t.leaderless[0].title
    );
    // Labels: token and cause on wide bars.
    assert_eq!(t.bars[0].label.as_deref(), Some("#10 · expired"));
    assert!(t.bars[0].title.contains("token 10 · expired"));
    assert!(t.no_data.is_none());
}

#[test]
fn terms_outside_the_window_are_clipped_or_skipped() {
    let terms = [
        term(1, "old", T0 - 3 * HOUR, Some(T0 - 2 * HOUR)),
        term(2, "a", T0 - HOUR, Some(T0 + 10 * MIN)),
        term(3, "b", T0 + 50 * MIN, Some(T0 + 2 * HOUR)),
        term(4, "late", T0 + 3 * HOUR, None),
    ];
    let t = layout(&input(&terms, T0, T0 + HOUR, T0 + 4 * HOUR));
    assert_inside(&t);
    let tokens: Vec<i64> = t.bars.iter().map(|b| b.token).collect();
    assert_eq!(tokens, [2, 3]);
    assert_eq!(t.lanes.len(), 2);
    let (a, b) = (&t.bars[0], &t.bars[1]);
    assert!(a.clipped_left && !a.clipped_right);
    assert!(!b.clipped_left && b.clipped_right);
    assert!((a.x.0 - t.plot_left.0).abs() < 1e-6);
    assert!((b.x.0 + b.w.0 - t.plot_right.0).abs() < 1e-6);
    // The window is past: no now line.
    assert!(t.now_x.is_none());
    assert_eq!(t.terms_drawn, 2);
}

#[test]
fn open_term_runs_to_now_or_to_the_window_end() {
    let terms = [term(7, "a", T0 + 10 * MIN, None)];
    let t = layout(&input(&terms, T0, T0 + HOUR, T0 + 30 * MIN));
    let bar = &t.bars[0];
    let plot = t.plot_right.0 - t.plot_left.0;
    assert!((bar.x.0 + bar.w.0 - (t.plot_left.0 + plot / 2.0)).abs() < 1e-6);
    // Window ended before now: the bar reaches the right edge, clipped.
    let t = layout(&input(&terms, T0, T0 + 20 * MIN, T0 + 5 * HOUR));
    let bar = &t.bars[0];
    assert!((bar.x.0 + bar.w.0 - t.plot_right.0).abs() < 1e-6);
    assert!(bar.clipped_right);
    // A term that started just now is still visible.
    let t = layout(&input(&terms, T0, T0 + HOUR, T0 + 10 * MIN));
    assert_eq!(t.bars.len(), 1);
    assert!(t.bars[0].w.0 >= 2.0);
}

#[test]
fn no_data_before_the_first_term_is_not_leaderless() {
    let terms = [term(5, "a", T0 + 20 * MIN, Some(T0 + 30 * MIN))];
    let t = layout(&input(&terms, T0, T0 + HOUR, T0 + HOUR));
    let nd = t.no_data.as_ref().expect("no-data shade");
    assert_eq!((nd.from_ms, nd.to_ms), (T0, T0 + 20 * MIN));
    let gaps: Vec<(i64, i64)> = t
        .leaderless
        .iter()
        .map(|s| (s.from_ms - T0, s.to_ms - T0))
        .collect();
    assert_eq!(gaps, [(30 * MIN, 60 * MIN)]);
    // An election without terms: nothing is called leaderless.
    let t = layout(&input(&[], T0, T0 + HOUR, T0 + HOUR));
    assert!(t.leaderless.is_empty() && t.no_data.is_none() && t.bars.is_empty());
    assert_eq!(t.lanes.len(), 0);
    assert!(t.height.0 > 0.0);
}

#[test]
fn overlapping_terms_leave_no_false_gap() {
    // A superseded term overlapping its successor (queue layout).
    let terms = [
        term(1, "a", T0, Some(T0 + 20 * MIN)),
        term(2, "b", T0 + 10 * MIN, Some(T0 + 15 * MIN)),
        term(3, "c", T0 + 18 * MIN, Some(T0 + 40 * MIN)),
    ];
    let t = layout(&input(&terms, T0, T0 + HOUR, T0 + HOUR));
    let gaps: Vec<(i64, i64)> = t
        .leaderless
        .iter()
        .map(|s| (s.from_ms - T0, s.to_ms - T0))
        .collect();
    assert_eq!(gaps, [(40 * MIN, 60 * MIN)]);
}

#[test]
fn refusals_go_to_the_refused_terms_lane_or_the_fence_lane() {
    let terms = [
        term(451, "scene-01", T0, Some(T0 + 10 * MIN)),
        term(453, "scene-02", T0 + 11 * MIN, None),
    ];
    let refusals = [
        refusal(451, T0 + 12 * MIN),
        refusal(99, T0 + 13 * MIN),
        refusal(451, T0 - HOUR),
    ];
    let mut inp = input(&terms, T0, T0 + HOUR, T0 + 30 * MIN);
    inp.refusals = &refusals;
    let t = layout(&inp);
    assert_inside(&t);
    assert_eq!(t.refusals.len(), 2);
    assert_eq!(t.refusals[0].lane, Some(0));
    assert!(t.refusals[0].title.contains("token 451"));
    assert!(t.refusals[0].title.contains("stale_token"));
    assert_eq!(t.lanes.len(), 3);
    assert_eq!(t.lanes[2].kind, LaneKind::Fence);
    assert_eq!(t.refusals[1].lane, Some(2));
    // Many refusals at one moment: one marker with a count.
    let many: Vec<RefusalRow> = (0..500).map(|i| refusal(451, T0 + 12 * MIN + i)).collect();
    inp.refusals = &many;
    let t = layout(&inp);
    assert_eq!(t.refusals.len(), 1);
    assert_eq!(t.refusals[0].count, 500);
}

#[test]
fn gaps_are_marked() {
    let terms = [term(1, "a", T0, None)];
    let gaps = [
        GapMark {
            at_ms: T0 + 5 * MIN,
            from_revision: 10,
            to_revision: 20,
        },
        GapMark {
            at_ms: T0 - 5 * MIN,
            from_revision: 1,
            to_revision: 2,
        },
    ];
    let mut inp = input(&terms, T0, T0 + HOUR, T0 + HOUR);
    inp.gaps = &gaps;
    let t = layout(&inp);
    assert_eq!(t.gaps.len(), 1);
    assert!(t.gaps[0].title.contains("10..20"));
}

#[test]
fn tick_labels_for_15_minutes_and_7_days() {
    let t = layout(&input(&[], T0 + 7 * MIN, T0 + 22 * MIN, T0 + 22 * MIN));
    let labels: Vec<&str> = t.ticks.iter().map(|t| t.label.as_str()).collect();
    assert_eq!(
        labels,
        ["14:08", "14:10", "14:12", "14:14", "14:16", "14:18", "14:20", "14:22"]
    );
    assert!(t.ticks.windows(2).all(|w| w[0].x < w[1].x));
    assert!(t
        .ticks
        .iter()
        .all(|k| k.x >= t.plot_left && k.x <= t.plot_right));

    let t = layout(&input(&[], T0 - 7 * DAY, T0, T0));
    let labels: Vec<&str> = t.ticks.iter().map(|t| t.label.as_str()).collect();
    assert_eq!(
        labels,
        ["11-26", "11-27", "11-28", "11-29", "11-30", "12-01", "12-02"]
    );

    // A day: hours, with the date at midnight.
    let t = layout(&input(&[], T0 - DAY, T0, T0));
    assert!(t.ticks.len() <= 10 && t.ticks.len() >= 4, "{:?}", t.ticks);
    let midnight = t.ticks.iter().find(|k| k.major).expect("midnight tick");
    assert_eq!(midnight.label, "12-02");
    // Seconds for a one-minute window; a year of data: months.
    let t = layout(&input(&[], T0, T0 + MIN, T0));
    assert_eq!(t.ticks[0].label, "14:00:00");
    let t = layout(&input(&[], T0 - 365 * DAY, T0, T0));
    assert!(
        t.ticks.len() <= 9 && t.ticks[0].label.len() == 7,
        "{:?}",
        t.ticks
    );
    // Ten years: still bounded.
    let t = layout(&input(&[], T0 - 3650 * DAY, T0, T0));
    assert!(t.ticks.len() <= 10, "{}", t.ticks.len());
}

#[test]
fn hundreds_of_holders_share_an_other_lane() {
    let terms: Vec<TermRow> = (0..300)
        .map(|i| {
            let start = T0 + i * 10_000;
            // Holder 0 leads much longer than the rest.
            let end = if i == 0 { start + 9_000 } else { start + 5_000 };
            term(i + 1, &format!("h{i:03}"), start, Some(end))
        })
        .collect();
    let t = layout(&input(&terms, T0, T0 + HOUR, T0 + HOUR));
    assert_inside(&t);
    assert_eq!(t.lanes.len(), MAX_LANES);
    assert_eq!(
        t.lanes.last().map(|l| &l.kind),
        Some(&LaneKind::Other(300 - (MAX_LANES - 1)))
    );
    assert_eq!(t.other_holders, 300 - (MAX_LANES - 1));
    assert!(t.lanes.iter().any(|l| l.label == "h000"));
    assert_eq!(t.terms_drawn, 300);
    // Every term is drawn, alone or inside a dense bar.
    let drawn: usize = t.bars.iter().map(|b| b.count).sum();
    assert_eq!(drawn, 300);
    // Distinct colours for the holder lanes.
    let mut hues: Vec<u16> = t
        .lanes
        .iter()
        .filter(|l| matches!(l.kind, LaneKind::Holder(_)))
        .map(|l| l.hue)
        .collect();
    hues.sort_unstable();
    hues.dedup();
    assert_eq!(hues.len(), MAX_LANES - 1);
    // ...and apart from each other: at least two buckets (25°).
    for (i, a) in hues.iter().enumerate() {
        for b in &hues[i + 1..] {
            let d = (i32::from(*a) - i32::from(*b)).rem_euclid(i32::from(HUES));
            assert!(d.min(i32::from(HUES) - d) >= 2, "{hues:?}");
        }
    }
}

#[test]
fn sub_unit_terms_are_merged_into_dense_bars() {
    // 10,000 terms of 300 ms, one every 360 ms: an hour, 1 unit ≈ 3.4 s.
    let terms: Vec<TermRow> = (0..10_000)
        .map(|i| {
            let start = T0 + i * 360;
            term(
                i + 1,
                if i % 2 == 0 { "a" } else { "b" },
                start,
                Some(start + 300),
            )
        })
        .collect();
    let t = layout(&input(&terms, T0, T0 + HOUR, T0 + HOUR));
    assert_inside(&t);
    assert_eq!(t.terms_drawn, 10_000);
    assert!(t.bars.len() < 100, "{} bars", t.bars.len());
    let drawn: usize = t.bars.iter().map(|b| b.count).sum();
    assert_eq!(drawn, 10_000);
    assert_eq!(t.terms_merged, 10_000);
    assert!(t.bars.iter().all(|b| b.kind == BarKind::Dense));
    // The leaderless slivers (60 ms each) are merged too.
    assert!(t.leaderless.len() < 100, "{}", t.leaderless.len());
    // An isolated short term stays a term bar.
    let lone = [term(1, "a", T0, Some(T0 + 100))];
    let t = layout(&input(&lone, T0, T0 + HOUR, T0 + HOUR));
    assert_eq!(t.bars.len(), 1);
    assert_eq!(t.bars[0].kind, BarKind::Term);
    assert!(t.bars[0].w.0 >= MIN_BAR);
}

#[test]
fn narrow_drawings_keep_a_usable_plot() {
    let terms = [
        term(10, "a-rather-long-holder-name", T0, Some(T0 + 10 * MIN)),
        term(12, "b", T0 + 12 * MIN, None),
    ];
    let mut inp = input(&terms, T0, T0 + HOUR, T0 + 30 * MIN);
    inp.width = NARROW_WIDTH;
    let t = layout(&inp);
    assert_inside(&t);
    assert!(t.plot_right.0 - t.plot_left.0 > 300.0, "{t:?}");
    assert!(
        t.lanes[0].label.chars().count() <= 10,
        "{}",
        t.lanes[0].label
    );
    assert!(t.lanes[0].label.ends_with('…'));
    assert_eq!(t.lanes[0].title, "a-rather-long-holder-name");
    assert!(t.ticks.len() >= 2 && t.ticks.len() <= 4, "{:?}", t.ticks);
}

#[test]
fn durations_read_well() {
    assert_eq!(format_duration_ms(850), "850ms");
    assert_eq!(format_duration_ms(12_340), "12.3s");
    assert_eq!(format_duration_ms(192_000), "3m 12s");
    assert_eq!(format_duration_ms(2 * HOUR + 5 * MIN), "2h 05m");
    assert_eq!(format_duration_ms(3 * DAY + 4 * HOUR), "3d 04h");
    assert_eq!(format_duration_ms(-5), "0ms");
    assert_eq!(short_time(T0 + 123), "2026-12-02 14:00:00.123");
}

#[test]
fn degenerate_windows_do_not_panic() {
    let terms = [term(1, "a", T0, None)];
    for (from, to) in [(T0, T0), (T0 + 10, T0), (i64::MIN / 4, i64::MAX / 4)] {
        let t = layout(&input(&terms, from, to, T0));
        assert_inside(&t);
    }
}
