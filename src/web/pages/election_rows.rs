//! The rows of one election's page tables, built from the history: its
//! terms (with each holder's acting margin), its events, and the queue's
//! waits. A time or duration that was replayed is shown as the range it is
//! known to lie in.

use crate::events::{EndCause, Event, EventKind};
use crate::history::{format_duration_ms, short_time, TermRow};
use crate::web::replays::{duration_text, Moment, ReplayMark};

/// One recorded wait in the queue, as the page shows it.
pub(super) struct WaitView {
    pub(super) holder: String,
    pub(super) hue: u16,
    pub(super) token: i64,
    pub(super) queued: String,
    /// The arrival was replayed: what is known of it (a title).
    pub(super) queued_bound: Option<String>,
    pub(super) until: String,
    pub(super) until_bound: Option<String>,
    /// A range when the arrival or the end was replayed.
    pub(super) waited: String,
    pub(super) outcome: &'static str,
}

/// The queue's waits recorded in the window, newest first.
pub(super) fn wait_views(
    events: &[crate::events::Event],
    replays: &[ReplayMark],
    now: i64,
    hue: impl Fn(&str) -> u16,
) -> Vec<WaitView> {
    crate::web::queue::waits(events)
        .into_iter()
        .rev()
        .map(|w| {
            let queued = Moment::of(replays, w.queued_revision, w.queued_at_ms);
            let until = w.until.map(|(rev, at)| Moment::of(replays, rev, at));
            let (q, u) = (queued.cell(), until.map(|u| u.cell()));
            WaitView {
                hue: hue(&w.holder),
                token: w.token,
                queued: q.text,
                queued_bound: q.bound,
                until: u
                    .as_ref()
                    .map_or_else(|| "—".to_owned(), |c| c.text.clone()),
                until_bound: u.and_then(|c| c.bound),
                waited: duration_text(queued, until, now),
                outcome: w.outcome.as_str(),
                holder: w.holder,
            }
        })
        .collect()
}

pub(super) struct TermView {
    pub(super) token: i64,
    pub(super) holder: String,
    pub(super) hue: u16,
    pub(super) start: String,
    /// The start was replayed: what is known of it (a title).
    pub(super) start_bound: Option<String>,
    pub(super) end: String,
    pub(super) end_bound: Option<String>,
    pub(super) open: bool,
    /// A range when a boundary was replayed.
    pub(super) duration: String,
    pub(super) cause: String,
    pub(super) cause_class: &'static str,
    /// What the cause tells (`EndCause::description`), as the cell's title.
    pub(super) cause_title: &'static str,
    pub(super) revisions: String,
    pub(super) from_snapshot: bool,
    /// The acting margin: text, whether it is an overlap, and
    /// what it says in full (a title); "—" when its holder reported nothing.
    pub(super) margin: String,
    pub(super) overlap: bool,
    pub(super) margin_title: String,
}

pub(super) struct EventView {
    pub(super) revision: i64,
    pub(super) time: String,
    pub(super) kind: &'static str,
    pub(super) details: String,
    pub(super) bad: bool,
}

pub(super) struct TableInfo {
    pub(super) shown: usize,
    /// `None`: not counted (there are more than shown).
    pub(super) total: Option<usize>,
    /// The query hit the history's row cap: there may be more.
    pub(super) capped: bool,
    pub(super) more_href: Option<String>,
}

pub(super) fn term_view(t: &TermRow, hue: u16, replays: &[ReplayMark], now: i64) -> TermView {
    let open = t.ended_at_ms.is_none();
    let (cause, cause_class) = match (open, t.end_cause) {
        (true, _) => ("leading".to_owned(), "open"),
        (false, Some(c)) => (
            c.as_str().to_owned(),
            match c {
                EndCause::Resigned => "ok",
                EndCause::Unknown => "warn",
                _ => "bad",
            },
        ),
        (false, None) => ("ended".to_owned(), "warn"),
    };
    let cause_title = match (open, t.end_cause) {
        (false, Some(c)) => c.description(),
        _ => "",
    };
    // A term already running when tenure first saw it began at some unknown
    // moment before: its duration is a lower bound.
    let start = if t.from_snapshot {
        Moment {
            at_ms: t.started_at_ms,
            replayed: Some(None),
        }
    } else {
        Moment::of(replays, t.started_revision, t.started_at_ms)
    };
    let end = match (t.ended_revision, t.ended_at_ms) {
        (Some(rev), Some(at)) => Some(Moment::of(replays, rev, at)),
        (None, Some(at)) => Some(Moment::exact(at)),
        (_, None) => None,
    };
    let (start_cell, end_cell) = (start.cell(), end.map(|e| e.cell()));
    TermView {
        token: t.token,
        holder: t.holder.clone(),
        hue,
        start: start_cell.text,
        start_bound: start_cell.bound,
        end: end_cell
            .as_ref()
            .map_or_else(|| "—".to_owned(), |c| c.text.clone()),
        end_bound: end_cell.and_then(|c| c.bound),
        open,
        duration: match end {
            Some(_) => duration_text(start, end, now),
            None => format!("{} so far", duration_text(start, None, now)),
        },
        cause,
        cause_class,
        cause_title,
        revisions: match t.ended_revision {
            Some(e) => format!("{} → {e}", t.started_revision),
            None => format!("{} →", t.started_revision),
        },
        from_snapshot: t.from_snapshot,
        margin: margin_cell(&t.acting),
        overlap: t.acting.overlap_ms.is_some_and(|o| o > 0),
        margin_title: margin_title(t),
    }
}

/// The margin cell: the margin in words, or `—` when its holder reported
/// nothing.
fn margin_cell(a: &crate::events::acting::ActingView) -> String {
    match a.acting_started_ms {
        Some(_) => crate::web::timeline::margin_text(a),
        None => "—".to_owned(),
    }
}

fn margin_title(t: &TermRow) -> String {
    let a = &t.acting;
    if a.acting_started_ms.is_none() {
        return "its holder reported nothing of when it acted (or it could not be placed on \
                etcd's time)"
            .to_owned();
    }
    let mut s = format!(
        "acted from {} to {}",
        a.acting_started_ms.map(short_time).unwrap_or_default(),
        a.stopped_text(t.ended_at_ms.is_some(), short_time)
    );
    if let (Some(against), Some(bound)) = (a.margin_against, a.margin_bound_ms) {
        s.push_str(&format!("; margin against {against}, ±{bound} ms"));
    }
    if let Some(o) = a.overlap_ms.filter(|o| *o > 0) {
        s.push_str(&format!(
            "; acted {} into the next term: two holders at once",
            format_duration_ms(o)
        ));
    }
    s
}

/// One row of the events table; a duration whose ends were replayed is
/// shown as the range it is known to lie in (`replays`).
pub(super) fn event_view(e: &Event, replays: &[ReplayMark]) -> EventView {
    let (details, bad) = match &e.kind {
        EventKind::TermStarted { .. } => (started_details(&e.kind), false),
        EventKind::TermEnded {
            token,
            holder,
            cause,
            started_at_ms,
            started_revision,
            renewals,
            ..
        } => (
            format!(
                "{holder}'s term {token} ended: {cause}, after {}{}",
                duration_text(
                    Moment::of(replays, *started_revision, *started_at_ms),
                    Some(Moment::of(replays, e.revision, e.at_ms)),
                    e.at_ms
                ),
                renewals
                    .as_ref()
                    .map(|r| format!("; {}", super::renewals::term_renewals_text(r)))
                    .unwrap_or_default()
            ),
            false,
        ),
        EventKind::LeaderValueChanged {
            token,
            holder,
            previous,
        } => (format!("token {token}: value {previous} → {holder}"), false),
        EventKind::FenceAccepted { resource, token } => {
            (format!("{resource} accepted token {token}"), false)
        }
        EventKind::FenceRefused { .. } => (refused_details(&e.kind), true),
        EventKind::CandidateQueued { token, holder, .. } => (
            format!("{holder} queued (token {token} should it lead)"),
            false,
        ),
        EventKind::CandidateLeft { token, holder, .. } => (
            format!("{holder} left the queue without leading (token {token})"),
            false,
        ),
        EventKind::Acting { record } => (
            format!(
                "{} reported its acting in term {}{}{}",
                record.holder,
                record.token,
                if record.has_end() {
                    ": stopped"
                } else {
                    ": acting"
                },
                if record.late { " (reported late)" } else { "" }
            ),
            false,
        ),
        EventKind::Gap { .. }
        | EventKind::Reset { .. }
        | EventKind::TwoPrimaries { .. }
        | EventKind::NameCollision { .. }
        | EventKind::Unobserved { .. } => (watch_details(&e.kind), true),
    };
    EventView {
        revision: e.revision,
        time: short_time(e.at_ms),
        kind: e.kind.name(),
        details,
        bad,
    }
}

/// A term's start: who, with which token, after whom, how it was seen.
fn started_details(kind: &EventKind) -> String {
    let EventKind::TermStarted {
        token,
        holder,
        previous_holder,
        from_snapshot,
        layout,
        ..
    } = kind
    else {
        return String::new();
    };
    let mut d = format!("{holder} leads with token {token}");
    if let Some(p) = previous_holder {
        d.push_str(&format!(", after {p}"));
    }
    if *from_snapshot {
        d.push_str(" (already leading when first seen)");
    }
    if *layout == crate::election::KeyLayout::Queue {
        d.push_str(" · queue layout");
    }
    d
}

/// A refused fence: the resource, the token, why, and the leader then.
fn refused_details(kind: &EventKind) -> String {
    let EventKind::FenceRefused {
        resource,
        token,
        reason,
        current_token,
        current_holder,
    } = kind
    else {
        return String::new();
    };
    let mut d = format!("{resource} refused token {token}: {}", reason.as_str());
    match (current_holder, current_token) {
        (Some(h), Some(t)) => d.push_str(&format!(" (leader then: {h}, token {t})")),
        (None, Some(t)) => d.push_str(&format!(" (leader then: token {t})")),
        _ => {}
    }
    d
}

/// What the watch itself saw go wrong: a gap, a reset, two primaries, a
/// name collision, changes not seen as they happened.
fn watch_details(kind: &EventKind) -> String {
    match kind {
        EventKind::Gap {
            from_revision,
            to_revision,
        } => format!(
            "watcher gap: etcd compacted revisions {from_revision}..{to_revision} before they \
             were seen; resynced from a snapshot"
        ),
        EventKind::Reset {
            from_revision,
            to_revision,
            previous_cluster_id,
            cluster_id,
        } => format!(
            "etcd reset: history up to revision {from_revision} is an earlier timeline \
             (cluster {}); recording goes on at revision {to_revision} of cluster {cluster_id:x} \
             (a restore or a new cluster)",
            previous_cluster_id.map_or_else(|| "unknown".to_owned(), |c| format!("{c:x}"))
        ),
        EventKind::TwoPrimaries {
            member,
            leader,
            token,
        } => format!(
            "two primaries: member {member} says it is a primary while {leader} holds the \
             leader key (token {token}), as etcd shows them"
        ),
        EventKind::NameCollision { other } => format!(
            "name collision with election {other}: one name is a path prefix of the other, so \
             etcd's own Election of the shorter (etcdctl elect, Go's concurrency.Election) \
             takes the longer one's keys for its candidates; tenure refuses new campaigns of \
             either until one is renamed"
        ),
        EventKind::Unobserved {
            from_revision,
            to_revision,
            since_ms,
        } => format!(
            "not seen as they happened: the changes of revisions {from_revision}..{to_revision} \
             were replayed (a reconnect, a restart, or a backlog); they happened {}, not at \
             their recorded times",
            since_ms.map_or_else(
                || "at unknown times before this".to_owned(),
                |s| format!("between {} and this", short_time(s))
            )
        ),
        _ => String::new(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::web::replays::ReplayMark;

    fn row(from_snapshot: bool) -> TermRow {
        TermRow {
            election: "e".into(),
            token: 7,
            holder: "a".into(),
            lease_id: 1,
            layout: None,
            started_at: String::new(),
            ended_at: None,
            started_at_ms: 1_000,
            ended_at_ms: Some(3_500),
            started_revision: 7,
            ended_revision: Some(9),
            end_cause: Some(EndCause::Resigned),
            from_snapshot,
            duration_seconds: Some(2.5),
            duration_bounds_seconds: None,
            acting: Default::default(),
        }
    }

    #[test]
    fn a_duration_is_exact_only_when_both_ends_were_seen() {
        assert_eq!(term_view(&row(false), 0, &[], 0).duration, "2.5s");
        // Already running when first seen: it began earlier.
        assert_eq!(term_view(&row(true), 0, &[], 0).duration, "≥ 2.5s");
        // The end replayed, known to lie after 2,000.
        let replayed = [ReplayMark {
            at_ms: 3_500,
            from_revision: 9,
            to_revision: 9,
            since_ms: Some(2_000),
        }];
        let v = term_view(&row(false), 0, &replayed, 0);
        assert_eq!(v.duration, "1.0s–2.5s");
        assert!(v.end_bound.is_some() && v.start_bound.is_none());
    }
}
