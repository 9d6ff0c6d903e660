//! What one election's timeline page shows, built from what
//! [`super::election`] loaded: the leader (etcd's view, else the
//! history's), the drawing (wide and narrow), the range controls and the
//! table frames (their rows are [`super::election_rows`]).

use std::collections::HashMap;
use std::time::Duration;

use askama::Template;

use super::election_input::{EtcdAnswer, History, PageInput, Params, Window, MAX_ROWS, STALE_PAD};
use super::election_rows::{
    event_view, term_view, wait_views, EventView, TableInfo, TermView, WaitView,
};
use super::renewals::{renewal_line, RenewalLine};
use super::urls::{election_href, encode_component};
use super::{ago, Head};
use crate::election::KeyLayout;
use crate::events::OpenTerm;
use crate::history::{self, format_duration_ms, format_ms, short_time};
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
        let renewals = self.renewals(leader.as_ref(), now);
        let etcd_note = self.etcd_note(renewals.as_ref());
        let quiet_note = w.quiet.then(|| quiet_note(w.to_ms, now));
        let tables = self.tables(&href, hue);

        TimelinePage {
            head: Head::new(self.state, format!("{name} · tenure"), now),
            name: name.to_string(),
            href: href.clone(),
            leader,
            renewals,
            lease_election: self.is_lease(),
            disagree: disagreement(&self.etcd, open),
            leaderless_since,
            etcd_note,
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

    /// Whether the election is a Kubernetes Lease: named as one in its
    /// cluster, or its open term is one.
    fn is_lease(&self) -> bool {
        let open = self
            .history
            .summary
            .as_ref()
            .and_then(|s| s.current.as_ref());
        matches!(self.name.name, crate::layout::path::WatchedName::Lease(_))
            || open.is_some_and(|o| o.layout == KeyLayout::Lease)
    }

    /// What the page says of etcd's answer: a Lease whose renewals the
    /// watcher reads live is not "not read live", though etcd is not asked
    /// of it.
    fn etcd_note(&self, renewals: Option<&RenewalLine>) -> Option<String> {
        let live = self.etcd.foreign && renewals.is_some();
        self.etcd.note.clone().filter(|_| !live)
    }

    /// A Lease's renewals, while the watcher's word is of `leader`'s term.
    fn renewals(&self, leader: Option<&LeaderView>, now: i64) -> Option<RenewalLine> {
        let term = leader.map(|v| (v.holder.as_str(), v.token));
        self.lease
            .as_ref()
            .filter(|l| l.held.as_ref().map(|(h, t)| (h.as_str(), *t)) == term)
            .map(|l| renewal_line(l, now))
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
                lease: l.layout == KeyLayout::Lease,
                pod: pod(l.layout, &l.holder),
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
            lease: o.layout == KeyLayout::Lease,
            pod: pod(o.layout, &o.holder),
            waiting: Vec::new(),
        }),
        _ => None,
    }
}

/// What the page says when nothing happened in the last hour (the window
/// ends at `to_ms`).
fn quiet_note(to_ms: i64, now: i64) -> String {
    let last = to_ms - STALE_PAD;
    format!(
        "Nothing happened in the last hour: showing the hour around the last event ({}, {}).",
        short_time(last),
        ago(now, last)
    )
}

/// The pod a Lease's holder identity names (`hostname_uuid`).
fn pod(layout: KeyLayout, holder: &str) -> Option<String> {
    (layout == KeyLayout::Lease)
        .then(|| crate::layout::kubernetes::pod_of(holder))
        .flatten()
        .map(str::to_owned)
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
/// ended (read, or queued for the history's writer), else its last event.
fn leaderless_since(h: &History, now: i64) -> String {
    let summary = h.summary.as_ref();
    // An end the history's writer holds queued is later than any read.
    h.terms
        .iter()
        .filter_map(|t| t.ended_at_ms)
        .max()
        .max(summary.and_then(|s| s.queued_end_ms))
        .or(summary.and_then(|s| s.last_event_ms))
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
    /// A Kubernetes Lease: no etcd lease, no TTL of etcd's.
    lease: bool,
    /// The pod a Lease holder's `hostname_uuid` identity names.
    pod: Option<String>,
    /// Candidates queued behind the leader (queue layout), next first; only
    /// etcd knows them.
    waiting: Vec<WaiterView>,
}

struct WaiterView {
    holder: String,
    hue: u16,
    token: i64,
}

#[derive(Template)]
#[template(path = "timeline.html")]
pub(super) struct TimelinePage<'a> {
    head: Head,
    name: String,
    href: String,
    leader: Option<LeaderView>,
    /// A Kubernetes Lease leader's renewals.
    renewals: Option<RenewalLine>,
    /// The election is a Kubernetes Lease: no acting margin to show.
    lease_election: bool,
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
