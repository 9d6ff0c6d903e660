//! The report built from a window: per election its terms, leaderless time
//! (exact, or bounded where starts and ends were replayed or time was not
//! watched) and refusals, and etcd's own events.

use super::{Report, ReportClusterEvent, ReportElection, ReportRefusal, ReportTerm};
use crate::events::cluster::ClusterEvent;
use crate::history::{format_ms, TermRow};
use crate::web::incident::window::{Lane, Window};
use crate::web::timeline;

/// The stretches of `[lo, hi)` no term covers (an open term runs to `now`),
/// by the timeline's own [`timeline::uncovered`].
pub fn leaderless_stretches(terms: &[TermRow], lo: i64, hi: i64, now: i64) -> Vec<(i64, i64)> {
    stretches_of(
        terms
            .iter()
            .map(|t| (t.started_at_ms, t.ended_at_ms.unwrap_or(now)))
            .collect(),
        lo,
        hi,
    )
}

fn stretches_of(mut spans: Vec<(i64, i64)>, lo: i64, hi: i64) -> Vec<(i64, i64)> {
    for s in &mut spans {
        s.1 = s.1.max(s.0);
    }
    spans.sort();
    timeline::uncovered(&spans, lo, hi)
}

/// Leaderless time, least and most, when replayed boundaries may have
/// happened anywhere in their bounds: least when every replayed start came
/// as early and every end as late as possible, most the other way round.
/// An unknown lower bound is taken as `lo` (nothing before is counted).
/// Time not watched (no watcher live since `w.unwatched_since`) is led in
/// the least and leaderless in the most.
fn leaderless_bounds(w: &Window, lane: &Lane, lo: i64, hi: i64, now: i64) -> (i64, i64) {
    let (terms, election) = (&lane.terms, lane.activity.election.as_str());
    let earliest = |rev: i64, at: i64| match w.replayed_since_in(election, rev, at) {
        Some(since) => since.unwrap_or(lo).min(at),
        None => at,
    };
    let least: Vec<(i64, i64)> = terms
        .iter()
        .map(|t| {
            (
                earliest(t.started_revision, t.started_at_ms),
                t.ended_at_ms.unwrap_or(now),
            )
        })
        .collect();
    let most: Vec<(i64, i64)> = terms
        .iter()
        .map(|t| {
            let end = match (t.ended_revision, t.ended_at_ms) {
                (Some(rev), Some(at)) => earliest(rev, at),
                (None, Some(at)) => at,
                (_, None) => now,
            };
            (t.started_at_ms, end)
        })
        .collect();
    crate::web::replays::leaderless_range(&least, &most, lo, hi, lane.unwatched_since)
}

pub fn build_report(w: &Window, now: i64) -> Report {
    Report {
        from: format_ms(w.sel.from_ms),
        to: format_ms(w.sel.to_ms),
        generated_at: format_ms(now),
        glob: w.sel.glob.clone(),
        elections_total: w.total,
        elections_omitted: w.total.saturating_sub(w.lanes.len()),
        elections: w.lanes.iter().map(|l| report_election(w, l, now)).collect(),
        etcd_events: w.cluster.iter().map(report_cluster_event).collect(),
    }
}

/// One election's part of the report: its terms, leaderless time (exact,
/// or bounded where boundaries were replayed), refusals.
fn report_election(w: &Window, lane: &Lane, now: i64) -> ReportElection {
    let lo = lane
        .known_since_ms
        .map_or(w.sel.to_ms, |k| k.max(w.sel.from_ms));
    let hi = w.sel.to_ms.min(now);
    let stretches = leaderless_stretches(&lane.terms, lo, hi, now);
    let known = lane.known_since_ms.is_some() && !lane.truncated;
    let (least, most) = leaderless_bounds(w, lane, lo, hi, now);
    let election = lane.activity.election.as_str();
    let replayed_boundaries = lane
        .terms
        .iter()
        .map(|t| {
            usize::from(
                replayed(w, election, Some(t.started_revision), Some(t.started_at_ms)).is_some(),
            ) + usize::from(replayed(w, election, t.ended_revision, t.ended_at_ms).is_some())
        })
        .sum();
    let certain = known && least == most;
    ReportElection {
        election: lane.activity.election.clone(),
        terms: lane
            .terms
            .iter()
            .map(|t| report_term(w, election, t))
            .collect(),
        changes: lane.activity.started,
        leaderless_ms: certain.then(|| stretches.iter().map(|(a, b)| b - a).sum()),
        longest_leaderless_ms: certain
            .then(|| stretches.iter().map(|(a, b)| b - a).max().unwrap_or(0)),
        leaderless_stretches: certain.then_some(stretches.len()),
        leaderless_min_ms: known.then_some(least),
        leaderless_max_ms: known.then_some(most),
        replayed_boundaries,
        truncated: lane.truncated,
        known_since: lane.known_since_ms.map(format_ms),
        refusals: report_refusals(lane),
    }
}

/// Whether `election`'s change at `rev` (seen at `at`) was replayed, and
/// since when it may have happened.
fn replayed(w: &Window, election: &str, rev: Option<i64>, at: Option<i64>) -> Option<Option<i64>> {
    match (rev, at) {
        (Some(rev), Some(at)) => w.replayed_since_in(election, rev, at),
        _ => None,
    }
}

fn report_term(w: &Window, election: &str, t: &TermRow) -> ReportTerm {
    let start = replayed(w, election, Some(t.started_revision), Some(t.started_at_ms));
    let end = replayed(w, election, t.ended_revision, t.ended_at_ms);
    ReportTerm {
        holder: t.holder.clone(),
        token: t.token,
        start: t.started_at.clone(),
        start_ms: t.started_at_ms,
        end: t.ended_at.clone(),
        end_ms: t.ended_at_ms,
        cause: t.end_cause.map(|c| c.to_string()),
        start_not_observed: t.from_snapshot,
        start_replayed: start.is_some(),
        start_not_before: start.flatten().map(format_ms),
        end_replayed: end.is_some(),
        end_not_before: end.flatten().map(format_ms),
        acting: t.acting.clone(),
    }
}

/// Each refusal with the term its token belonged to.
fn report_refusals(lane: &Lane) -> Vec<ReportRefusal> {
    lane.refusals
        .iter()
        .map(|r| {
            let term = lane.terms.iter().find(|t| t.token == r.token);
            ReportRefusal {
                at: r.at.clone(),
                at_ms: r.at_ms,
                resource: r.resource.clone(),
                refused_token: r.token,
                refused_holder: term.map(|t| t.holder.clone()),
                reason: r.reason.to_string(),
                after_term_end_ms: term.and_then(|t| t.ended_at_ms).map(|e| r.at_ms - e),
            }
        })
        .collect()
}

fn report_cluster_event(e: &ClusterEvent) -> ReportClusterEvent {
    ReportClusterEvent {
        at: format_ms(e.at_ms),
        at_ms: e.at_ms,
        not_before: e.not_before_ms.map(format_ms),
        kind: e.kind.name(),
        description: match &e.cluster {
            Some(c) => format!("cluster {c}: {}", e.kind.describe()),
            None => e.kind.describe(),
        },
        detail: e.clone(),
    }
}
