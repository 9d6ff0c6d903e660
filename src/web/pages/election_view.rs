//! What one election's timeline page shows, built from what
//! [`super::election`] loaded: the leader (etcd's view, else the
//! history's), the drawing (wide and narrow), the range controls and the
//! tables.

use std::collections::HashMap;
use std::time::Duration;

use askama::Template;

use super::election_input::{EtcdAnswer, History, PageInput, Params, Window, MAX_ROWS, STALE_PAD};
use super::urls::{election_href, encode_component};
use super::{ago, Head};
use crate::events::{EndCause, Event, EventKind, OpenTerm};
use crate::history::{self, format_duration_ms, format_ms, short_time, TermRow};
use crate::web::replays::{duration_text, Moment, ReplayMark};
use crate::web::shared::marks;
use crate::web::timeline::{self, Input, Timeline};

impl PageInput<'_> {
    pub(super) fn build(&self) -> TimelinePage<'_> {
        let (name, params, now, h) = (self.name, self.params, self.now, &self.history);
        let href = election_href(name.as_str());
        let w = h.window;
        let span = w.to_ms - w.from_ms;
        let open = h.summary.as_ref().and_then(|s| s.current.as_ref());

        let (tl, svg, svg_narrow) = self.drawings();
        // Tables and the summary use the lanes' colours (a holder's hash
        // colour, unless two lanes of this drawing collided).
        let lane_hues: HashMap<&str, u16> = tl
            .lanes
            .iter()
            .filter_map(|l| match &l.kind {
                timeline::LaneKind::Holder(h) => Some((h.as_str(), l.hue)),
                _ => None,
            })
            .collect();
        let hue = |holder: &str| {
            lane_hues
                .get(holder)
                .copied()
                .unwrap_or_else(|| timeline::hue_of(holder))
        };
        let mut leader = leader_view(&self.etcd, open, now);
        if let Some(l) = &mut leader {
            l.hue = hue(&l.holder);
        }
        let leaderless_since = leader.is_none().then(|| leaderless_since(h, now));
        let quiet_note = w.quiet.then(|| {
            let last = w.to_ms - STALE_PAD;
            format!(
                "Nothing happened in the last hour: showing the hour around the last event ({}, {}).",
                short_time(last),
                ago(now, last)
            )
        });
        let tables = self.tables(&href, hue);

        TimelinePage {
            head: Head::new(self.state, format!("{name} · tenure"), now),
            name: name.to_string(),
            href: href.clone(),
            leader,
            disagree: disagreement(&self.etcd, open),
            leaderless_since,
            etcd_note: self.etcd.note.clone(),
            live: live_mode(params, &w, now),
            window_label: format!(
                "{} → {} UTC",
                &short_time(w.from_ms)[..19],
                &short_time(w.to_ms)[..19]
            ),
            span_label: format_duration_ms(span),
            quiet_note,
            from_value: params.from.clone().unwrap_or_default(),
            to_value: params.to.clone().unwrap_or_default(),
            links: RangeLinks::new(name, &href, params, &w, now),
            svg,
            svg_narrow,
            terms_drawn: tl.terms_drawn,
            terms_merged: tl.terms_merged,
            leaderless_total: match &tl.not_watched {
                Some(nw) => marks::not_watched_text(tl.leaderless_ms, nw.from_ms),
                None => format_duration_ms(tl.leaderless_ms),
            },
            leaderless_count: tl.leaderless.iter().map(|s| s.count).sum(),
            refusal_count: h.refusals.len(),
            gap_count: h.gaps.len(),
            terms: tables.terms,
            terms_info: tables.terms_info,
            events: tables.events,
            events_info: tables.events_info,
            waits: tables.waits,
            members: self.members.as_ref(),
        }
    }

    /// The drawing twice: wide, and narrow for phones (the stylesheet
    /// shows one; the wide one comes first in the document). The wide
    /// layout is returned too: its lanes' colours and counts are the
    /// page's.
    fn drawings(&self) -> (Timeline, String, String) {
        let h = &self.history;
        let w = h.window;
        let input = Input {
            terms: &h.terms,
            refusals: &h.refusals,
            gaps: &h.gaps,
            from_ms: w.from_ms,
            to_ms: w.to_ms,
            now_ms: self.now,
            known_since_ms: h.known_since_ms,
            unwatched_since_ms: h.unwatched_since,
            width: timeline::WIDTH,
        };
        let mut tl = timeline::layout(&input);
        tl.cluster = marks::cluster_markers(&tl, &h.cluster, w.from_ms, w.to_ms);
        let title = format!(
            "Leadership of {} from {} to {} UTC",
            self.name,
            short_time(w.from_ms),
            short_time(w.to_ms)
        );
        let svg = render_svg(&tl, &title);
        let mut narrow = timeline::layout(&Input {
            width: timeline::NARROW_WIDTH,
            ..input
        });
        narrow.cluster = marks::cluster_markers(&narrow, &h.cluster, w.from_ms, w.to_ms);
        let svg_narrow = render_svg(&narrow, &title);
        (tl, svg, svg_narrow)
    }

    /// The terms and events tables, newest first, at most `limit` rows
    /// each, with a link to ten times as many when there are more.
    fn tables(&self, href: &str, hue: impl Fn(&str) -> u16) -> Tables {
        let (h, params, limit, now) = (&self.history, self.params, self.limit, self.now);
        let more = |more_rows: bool| {
            (more_rows && limit < MAX_ROWS).then(|| {
                let mut q = String::new();
                if let Some(f) = &params.from {
                    q.push_str(&format!("from={}&", encode_component(f)));
                }
                if let Some(t) = &params.to {
                    q.push_str(&format!("to={}&", encode_component(t)));
                }
                format!("{href}?{q}limit={}", (limit * 10).min(MAX_ROWS))
            })
        };
        let terms: Vec<TermView> = h
            .terms
            .iter()
            .rev()
            .take(limit)
            .map(|t| term_view(t, hue(&t.holder), &h.replays, now))
            .collect();
        let terms_info = TableInfo {
            shown: terms.len(),
            total: Some(h.terms.len()),
            capped: h.terms.len() >= history::MAX_LIMIT,
            more_href: more(h.terms.len() > limit),
        };
        let events: Vec<EventView> = h
            .events
            .iter()
            .rev()
            .take(limit)
            .map(|e| event_view(e, &h.replays))
            .collect();
        let events_info = TableInfo {
            shown: events.len(),
            total: h.events_complete.then_some(h.events.len()),
            capped: false,
            more_href: more(!h.events_complete || h.events.len() > limit),
        };
        Tables {
            terms,
            terms_info,
            events,
            events_info,
            waits: wait_views(&h.events, &h.replays, now, hue),
        }
    }
}

/// One recorded wait in the queue, as the page shows it.
struct WaitView {
    holder: String,
    hue: u16,
    token: i64,
    queued: String,
    /// The arrival was replayed: what is known of it (a title).
    queued_bound: Option<String>,
    until: String,
    until_bound: Option<String>,
    /// A range when the arrival or the end was replayed.
    waited: String,
    outcome: &'static str,
}

/// The queue's waits recorded in the window, newest first.
fn wait_views(
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

/// The current leader: etcd's when it answered, else the history's open
/// term.
fn leader_view(etcd: &EtcdAnswer, open: Option<&OpenTerm>, now: i64) -> Option<LeaderView> {
    match (&etcd.leader, open) {
        (Some(st), _) => {
            let l = &st.leader;
            let since_ms = open.filter(|o| o.token == l.token).map(|o| o.started_at_ms);
            Some(LeaderView {
                holder: l.holder.clone(),
                hue: timeline::hue_of(&l.holder),
                token: l.token,
                lease_hex: format!("{:x}", l.lease_id),
                layout: l.layout.to_string(),
                since_ms,
                since: since_ms.map(short_time),
                leading_for: since_ms.map(|t| format_duration_ms(now - t)),
                ttl: st.ttl_remaining_seconds,
                source: "etcd",
                waiting: st
                    .waiting
                    .iter()
                    .map(|w| WaiterView {
                        holder: w.holder.clone(),
                        hue: timeline::hue_of(&w.holder),
                        token: w.token,
                    })
                    .collect(),
            })
        }
        (None, Some(o)) if !etcd.answered() => Some(LeaderView {
            holder: o.holder.clone(),
            hue: timeline::hue_of(&o.holder),
            token: o.token,
            lease_hex: format!("{:x}", o.lease_id),
            layout: o.layout.to_string(),
            since_ms: Some(o.started_at_ms),
            since: Some(short_time(o.started_at_ms)),
            leading_for: Some(format_duration_ms(now - o.started_at_ms)),
            ttl: None,
            source: "history",
            waiting: Vec::new(),
        }),
        _ => None,
    }
}

/// What the page says when etcd's leader and the history's open term
/// differ (the history is behind).
fn disagreement(etcd: &EtcdAnswer, open: Option<&OpenTerm>) -> Option<String> {
    match (&etcd.leader, open) {
        (Some(st), Some(o)) if st.leader.token != o.token => Some(format!(
            "The history still has token {} ({}) open; it has not caught up with etcd yet.",
            o.token, o.holder
        )),
        (Some(st), None) => Some(format!(
            "The history has not recorded token {} yet.",
            st.leader.token
        )),
        (None, Some(o)) if etcd.answered() => Some(format!(
            "etcd has no leader, but the history still has token {} ({}) open; it has not caught up yet.",
            o.token, o.holder
        )),
        _ => None,
    }
}

/// "no leader since …" for a leaderless election: when its last term
/// ended, else its last event.
fn leaderless_since(h: &History, now: i64) -> String {
    h.terms
        .iter()
        .filter_map(|t| t.ended_at_ms)
        .max()
        .or(h.summary.as_ref().and_then(|s| s.last_event_ms))
        .map_or_else(
            || "no leader".to_owned(),
            |t| format!("no leader since {} ({})", short_time(t), ago(now, t)),
        )
}

/// The range controls and the links that carry the window.
struct RangeLinks {
    presets: Vec<Preset>,
    earlier_href: String,
    later_href: Option<String>,
    export_csv: String,
    export_json: String,
    /// The postmortem report of this election and window.
    report_md: String,
    /// Every election over the same window.
    all_href: String,
}

impl RangeLinks {
    fn new(name: &crate::web::Target, href: &str, params: &Params, w: &Window, now: i64) -> Self {
        let span = w.to_ms - w.from_ms;
        let with = |from: &str, to: Option<&str>| -> String {
            let mut q = format!("{href}?from={}", encode_component(from));
            if let Some(to) = to {
                q.push_str("&to=");
                q.push_str(&encode_component(to));
            }
            q
        };
        let presets = ["15m", "1h", "6h", "24h", "7d"]
            .into_iter()
            .map(|p| Preset {
                label: p,
                href: with(p, None),
                active: (params.to.is_none() && params.from.as_deref() == Some(p))
                    || (p == "1h"
                        && params.from.is_none()
                        && params.to.is_none()
                        && !w.quiet
                        && !w.young),
            })
            .collect();
        let earlier_href = with(&format_ms(w.from_ms - span), Some(&format_ms(w.from_ms)));
        let later_href = (w.to_ms < now - 1000).then(|| {
            let to = w.to_ms + span;
            if to >= now {
                with(
                    &humantime::format_duration(Duration::from_secs((span / 1000).max(1) as u64))
                        .to_string(),
                    None,
                )
            } else {
                with(&format_ms(w.to_ms), Some(&format_ms(to)))
            }
        });
        let from = encode_component(&format_ms(w.from_ms));
        let to = encode_component(&format_ms(w.to_ms));
        let export =
            |format: &str| format!("/api/v1{href}/export?format={format}&from={from}&to={to}");
        RangeLinks {
            presets,
            earlier_href,
            later_href,
            export_csv: export("csv"),
            export_json: export("json"),
            report_md: format!(
                "/api/v1/report?from={from}&to={to}&match={}&format=md",
                encode_component(name.as_str())
            ),
            all_href: format!("/timeline?from={from}&to={to}"),
        }
    }
}

/// The page's two tables and what their footers say.
struct Tables {
    terms: Vec<TermView>,
    terms_info: TableInfo,
    events: Vec<EventView>,
    events_info: TableInfo,
    waits: Vec<WaitView>,
}

/// What live updates do on this page (`data-live` for the script).
fn live_mode(p: &Params, w: &Window, now: i64) -> &'static str {
    if w.quiet {
        "reload"
    } else if p.to.is_none() || w.to_ms >= now - 1000 {
        "swap"
    } else {
        "off"
    }
}

struct Preset {
    label: &'static str,
    href: String,
    active: bool,
}

struct LeaderView {
    holder: String,
    hue: u16,
    token: i64,
    lease_hex: String,
    layout: String,
    since_ms: Option<i64>,
    since: Option<String>,
    leading_for: Option<String>,
    ttl: Option<i64>,
    /// "etcd" or "history".
    source: &'static str,
    /// Candidates queued behind the leader (queue layout), next first; only
    /// etcd knows them.
    waiting: Vec<WaiterView>,
}

struct WaiterView {
    holder: String,
    hue: u16,
    token: i64,
}

struct TermView {
    token: i64,
    holder: String,
    hue: u16,
    start: String,
    /// The start was replayed: what is known of it (a title).
    start_bound: Option<String>,
    end: String,
    end_bound: Option<String>,
    open: bool,
    /// A range when a boundary was replayed.
    duration: String,
    cause: String,
    cause_class: &'static str,
    /// What the cause tells (`EndCause::description`), as the cell's title.
    cause_title: &'static str,
    revisions: String,
    from_snapshot: bool,
    /// The acting margin: text, whether it is an overlap, and
    /// what it says in full (a title); "—" when its holder reported nothing.
    margin: String,
    overlap: bool,
    margin_title: String,
}

struct EventView {
    revision: i64,
    time: String,
    kind: &'static str,
    details: String,
    bad: bool,
}

struct TableInfo {
    shown: usize,
    /// `None`: not counted (there are more than shown).
    total: Option<usize>,
    /// The query hit the history's row cap: there may be more.
    capped: bool,
    more_href: Option<String>,
}

#[derive(Template)]
#[template(path = "timeline.html")]
pub(super) struct TimelinePage<'a> {
    head: Head,
    name: String,
    href: String,
    leader: Option<LeaderView>,
    /// The history's open term and etcd's leader disagree (history behind).
    disagree: Option<String>,
    leaderless_since: Option<String>,
    etcd_note: Option<String>,
    live: &'static str,
    window_label: String,
    span_label: String,
    quiet_note: Option<String>,
    from_value: String,
    to_value: String,
    links: RangeLinks,
    svg: String,
    svg_narrow: String,
    terms_drawn: usize,
    terms_merged: usize,
    leaderless_total: String,
    leaderless_count: usize,
    refusal_count: usize,
    gap_count: usize,
    terms: Vec<TermView>,
    terms_info: TableInfo,
    events: Vec<EventView>,
    events_info: TableInfo,
    /// Who waited in the queue (queue layout), newest first.
    waits: Vec<WaitView>,
    /// Patroni's members, read live.
    members: Option<&'a super::members::MembersView>,
}

#[derive(Template)]
#[template(path = "timeline.svg")]
struct SvgTemplate<'a> {
    t: &'a Timeline,
    title: &'a str,
    narrow: bool,
}

/// Renders a laid-out timeline as SVG markup (every string escaped).
pub fn render_svg(t: &Timeline, title: &str) -> String {
    SvgTemplate {
        t,
        title,
        narrow: t.width.0 < timeline::NARROW,
    }
    .render()
    .unwrap_or_else(|e| {
        format!(
            "<!-- timeline rendering failed: {} -->",
            e.to_string().replace("--", "- -")
        )
    })
}

fn term_view(t: &TermRow, hue: u16, replays: &[ReplayMark], now: i64) -> TermView {
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
fn event_view(e: &Event, replays: &[ReplayMark]) -> EventView {
    let (details, bad) = match &e.kind {
        EventKind::TermStarted {
            token,
            holder,
            previous_holder,
            from_snapshot,
            layout,
            ..
        } => {
            let mut d = format!("{holder} leads with token {token}");
            if let Some(p) = previous_holder {
                d.push_str(&format!(", after {p}"));
            }
            if *from_snapshot {
                d.push_str(" (already leading when first seen)");
            }
            if *layout == crate::election::Layout::Queue {
                d.push_str(" · queue layout");
            }
            (d, false)
        }
        EventKind::TermEnded {
            token,
            holder,
            cause,
            started_at_ms,
            started_revision,
            ..
        } => (
            format!(
                "{holder}'s term {token} ended: {cause}, after {}",
                duration_text(
                    Moment::of(replays, *started_revision, *started_at_ms),
                    Some(Moment::of(replays, e.revision, e.at_ms)),
                    e.at_ms
                )
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
        EventKind::FenceRefused {
            resource,
            token,
            reason,
            current_token,
            current_holder,
        } => {
            let mut d = format!("{resource} refused token {token}: {}", reason.as_str());
            match (current_holder, current_token) {
                (Some(h), Some(t)) => d.push_str(&format!(" (leader then: {h}, token {t})")),
                (None, Some(t)) => d.push_str(&format!(" (leader then: token {t})")),
                _ => {}
            }
            (d, true)
        }
        EventKind::Gap {
            from_revision,
            to_revision,
        } => (
            format!(
                "watcher gap: etcd compacted revisions {from_revision}..{to_revision} before they \
                 were seen; resynced from a snapshot"
            ),
            true,
        ),
        EventKind::Reset {
            from_revision,
            to_revision,
            previous_cluster_id,
            cluster_id,
        } => (
            format!(
                "etcd reset: history up to revision {from_revision} is an earlier timeline \
                 (cluster {}); recording goes on at revision {to_revision} of cluster {cluster_id:x} \
                 (a restore or a new cluster)",
                previous_cluster_id.map_or_else(|| "unknown".to_owned(), |c| format!("{c:x}"))
            ),
            true,
        ),
        EventKind::CandidateQueued { token, holder, .. } => (
            format!("{holder} queued (token {token} should it lead)"),
            false,
        ),
        EventKind::CandidateLeft { token, holder, .. } => (
            format!("{holder} left the queue without leading (token {token})"),
            false,
        ),
        EventKind::TwoPrimaries {
            member,
            leader,
            token,
        } => (
            format!(
                "two primaries: member {member} says it is a primary while {leader} holds the \
                 leader key (token {token}), as etcd shows them"
            ),
            true,
        ),
        EventKind::Acting { record } => (
            format!(
                "{} reported its acting in term {}{}{}",
                record.holder,
                record.token,
                if record.has_end() { ": stopped" } else { ": acting" },
                if record.late { " (reported late)" } else { "" }
            ),
            false,
        ),
        EventKind::NameCollision { other } => (
            format!(
                "name collision with election {other}: one name is a path prefix of the other, so \
                 etcd's own Election of the shorter (etcdctl elect, Go's concurrency.Election) \
                 takes the longer one's keys for its candidates; tenure refuses new campaigns of \
                 either until one is renamed"
            ),
            true,
        ),
        EventKind::Unobserved {
            from_revision,
            to_revision,
            since_ms,
        } => (
            format!(
                "not seen as they happened: the changes of revisions {from_revision}..{to_revision} \
                 were replayed (a reconnect, a restart, or a backlog); they happened {}, not at \
                 their recorded times",
                since_ms.map_or_else(
                    || "at unknown times before this".to_owned(),
                    |s| format!("between {} and this", short_time(s))
                )
            ),
            true,
        ),
    };
    EventView {
        revision: e.revision,
        time: short_time(e.at_ms),
        kind: e.kind.name(),
        details,
        bad,
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
