//! The report written as Markdown: its heading, the summary table, what the
//! end causes tell, who acted when, etcd's events, and a section per
//! election with its terms and refusals; every cell escaped so that no
//! holder's text can break a table or become HTML.

use super::{Report, ReportElection, ReportTerm};
use crate::events::EndCause;
use crate::history::format_ms;
use crate::web::timeline;

/// Every term whose holder reported when it acted (tenure campaign, the
/// library), overlaps first: who acted when, and by how much each stopped
/// before another could have acted.
fn who_acted_when(o: &mut String, r: &Report) {
    use std::fmt::Write;
    let mut rows: Vec<(&str, &ReportTerm)> = r
        .elections
        .iter()
        .flat_map(|e| e.terms.iter().map(move |t| (e.election.as_str(), t)))
        .filter(|(_, t)| t.acting.acting_started_ms.is_some())
        .collect();
    let _ = writeln!(o, "\n## Who acted when\n");
    if rows.is_empty() {
        let _ = writeln!(
            o,
            "No holder in the window reported when it acted (tenure campaign and the library \
             do; other clients cannot)."
        );
        return;
    }
    rows.sort_by_key(|(_, t)| {
        (
            std::cmp::Reverse(t.acting.overlap_ms.unwrap_or(0)),
            t.acting.acting_started_ms,
        )
    });
    let overlaps = rows
        .iter()
        .filter(|(_, t)| t.acting.overlap_ms.unwrap_or(0) > 0)
        .count();
    let _ = writeln!(
        o,
        "{overlaps} overlap(s): a holder acting on after the next term began. Margin: the earliest \
         moment another holder could have acted, minus when this one stopped (negative: it acted \
         past it).\n"
    );
    let _ = writeln!(
        o,
        "| election | holder | token | acted from | stopped | margin | two holders at once |"
    );
    let _ = writeln!(o, "|---|---|---:|---|---|---:|---:|");
    let late = |l: bool| if l { " (reported late)" } else { "" };
    for (election, t) in rows {
        let a = &t.acting;
        let stopped = a.stopped_text(t.end_ms.is_some(), format_ms);
        let margin = timeline::margin_text(a);
        let _ = writeln!(
            o,
            "| {} | {} | {} | {}{} | {} | {} | {} |",
            cell(election),
            cell(&t.holder),
            t.token,
            a.acting_started_ms.map(format_ms).unwrap_or_default(),
            late(a.acting_started_late),
            stopped,
            margin,
            match a.overlap_ms {
                Some(o) if o > 0 => format!("**{o} ms**"),
                Some(_) => "no".to_owned(),
                None => "unknown".to_owned(),
            }
        );
    }
}

/// Markdown table cells: pipes and newlines would break the table, and a
/// holder's `<…>` must stay text, not become HTML where the report is pasted;
/// controls (a newline too) and bidirectional characters are shown as their
/// escapes (`crate::text::visible`: `\u{1b}`), whose backslash Markdown
/// keeps by its own escape.
pub(super) fn cell(s: &str) -> String {
    crate::text::visible(s)
        .replace('\\', "\\\\")
        .replace('|', "\\|")
        .replace('<', "\\<")
        .replace('>', "\\>")
        .replace('`', "'")
}

fn ms_or_unknown(v: Option<i64>) -> String {
    v.map_or_else(|| "unknown".to_owned(), |ms| format!("{ms} ms"))
}

/// The leaderless total, or its bounds when replayed times leave it open.
fn leaderless_total(e: &ReportElection) -> String {
    match (e.leaderless_ms, e.leaderless_min_ms, e.leaderless_max_ms) {
        (Some(ms), _, _) => format!("{ms} ms"),
        (None, Some(lo), Some(hi)) => format!("unknown ({lo}–{hi} ms)"),
        _ => "unknown".to_owned(),
    }
}

/// What each end cause of the report's terms tells, in the one wording
/// every view uses (`EndCause::description`).
fn end_causes(o: &mut String, r: &Report) {
    use std::fmt::Write;
    let seen: std::collections::BTreeSet<EndCause> = r
        .elections
        .iter()
        .flat_map(|e| &e.terms)
        .filter_map(|t| t.cause.as_deref().and_then(EndCause::parse))
        .collect();
    if seen.is_empty() {
        return;
    }
    let _ = writeln!(o, "\n## End causes\n");
    for c in seen {
        let _ = writeln!(o, "- `{c}`: {}", c.description());
    }
}

/// A start or end time; a replayed one says what is known of it.
fn boundary(at: &str, replayed: bool, not_before: Option<&str>) -> String {
    match (replayed, not_before) {
        (false, _) => at.to_owned(),
        (true, Some(nb)) => format!("{at} (replayed: between {nb} and then)"),
        (true, None) => format!("{at} (replayed: at an unknown time before)"),
    }
}

pub fn report_markdown(r: &Report) -> String {
    let mut o = String::new();
    heading(&mut o, r);
    summary(&mut o, r);
    end_causes(&mut o, r);
    who_acted_when(&mut o, r);
    etcd_events(&mut o, r);
    for e in &r.elections {
        election_section(&mut o, e);
    }
    o
}

/// The title and what the window holds.
fn heading(o: &mut String, r: &Report) {
    use std::fmt::Write;
    let _ = writeln!(o, "# Leader elections: {} → {}\n", r.from, r.to);
    let _ = writeln!(
        o,
        "Generated by tenure at {}{}. {} election(s) in the window{}.\n",
        r.generated_at,
        r.glob
            .as_deref()
            .map(|g| format!(" for elections matching `{}`", cell(g)))
            .unwrap_or_default(),
        r.elections_total,
        if r.elections_omitted > 0 {
            format!(
                "; the {} quietest are left out (narrow the window or the match)",
                r.elections_omitted
            )
        } else {
            String::new()
        }
    );
}

/// One line per election: changes, leaderless time, refusals.
fn summary(o: &mut String, r: &Report) {
    use std::fmt::Write;
    let _ = writeln!(o, "## Summary\n");
    let _ = writeln!(
        o,
        "| election | changes | leaderless total | longest leaderless | stretches | refusals |"
    );
    let _ = writeln!(o, "|---|---:|---:|---:|---:|---:|");
    for e in &r.elections {
        let _ = writeln!(
            o,
            "| {} | {} | {} | {} | {} | {}{} |",
            cell(&e.election),
            e.changes,
            leaderless_total(e),
            ms_or_unknown(e.longest_leaderless_ms),
            e.leaderless_stretches
                .map_or_else(|| "unknown".to_owned(), |n| n.to_string()),
            e.refusals.len(),
            if e.truncated { "+" } else { "" }
        );
    }
}

/// etcd's own events in the window.
fn etcd_events(o: &mut String, r: &Report) {
    use std::fmt::Write;
    let _ = writeln!(o, "\n## etcd events\n");
    if r.etcd_events.is_empty() {
        let _ = writeln!(o, "None recorded in the window.");
        return;
    }
    let _ = writeln!(o, "| seen at | happened after | type | what |");
    let _ = writeln!(o, "|---|---|---|---|");
    for e in &r.etcd_events {
        let _ = writeln!(
            o,
            "| {} | {} | {} | {} |",
            e.at,
            e.not_before.as_deref().unwrap_or("unknown"),
            e.kind,
            cell(&e.description)
        );
    }
}

/// One election's section: its leaderless time, terms and refusals.
fn election_section(o: &mut String, e: &ReportElection) {
    use std::fmt::Write;
    let _ = writeln!(o, "\n## {}\n", cell(&e.election));
    let _ = writeln!(
        o,
        "Changes: {}. Leaderless: {} in total, longest {}, {} stretch(es){}{}.\n",
        e.changes,
        leaderless_total(e),
        ms_or_unknown(e.longest_leaderless_ms),
        e.leaderless_stretches
            .map_or_else(|| "unknown".to_owned(), |n| n.to_string()),
        if e.replayed_boundaries > 0 {
            format!(
                " ({} start(s) and end(s) were replayed after a reconnect or a restart, \
                 not seen as they happened: their times are bounds)",
                e.replayed_boundaries
            )
        } else {
            String::new()
        },
        match (&e.known_since, e.truncated) {
            (_, true) => " (too many rows for one report: only the window's first terms \
                          and refusals are listed; narrow the window or the match)"
                .to_owned(),
            (Some(k), false) => format!(" (counted from {k}, the history's first term)"),
            (None, false) => " (no term known)".to_owned(),
        }
    );
    terms_table(o, e);
    refusals_table(o, e);
}

fn terms_table(o: &mut String, e: &ReportElection) {
    use std::fmt::Write;
    let _ = writeln!(o, "| holder | token | start | end | cause |");
    let _ = writeln!(o, "|---|---:|---|---|---|");
    for t in &e.terms {
        let _ = writeln!(
            o,
            "| {} | {} | {}{} | {} | {} |",
            cell(&t.holder),
            t.token,
            boundary(&t.start, t.start_replayed, t.start_not_before.as_deref()),
            if t.start_not_observed {
                " (or earlier)"
            } else {
                ""
            },
            t.end.as_deref().map_or_else(
                || "leading".to_owned(),
                |end| boundary(end, t.end_replayed, t.end_not_before.as_deref())
            ),
            t.cause.as_deref().unwrap_or("—")
        );
    }
}

fn refusals_table(o: &mut String, e: &ReportElection) {
    use std::fmt::Write;
    if e.refusals.is_empty() {
        return;
    }
    let _ = writeln!(
        o,
        "\n| refused at | resource | refused token | its holder | reason | after its term ended |"
    );
    let _ = writeln!(o, "|---|---|---:|---|---|---:|");
    for f in &e.refusals {
        let _ = writeln!(
            o,
            "| {} | {} | {} | {} | {} | {} |",
            f.at,
            cell(&f.resource),
            f.refused_token,
            f.refused_holder
                .as_deref()
                .map_or_else(|| "unknown".to_owned(), cell),
            f.reason,
            ms_or_unknown(f.after_term_end_ms)
        );
    }
}
