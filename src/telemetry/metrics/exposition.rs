//! The text exposition format (version 0.0.4): the registry's families
//! through its encoder, the per-election families written here in exactly
//! the text that encoder would produce (families by name, series by label
//! values, `# HELP`/`# TYPE` headers, empty families left out).

use std::fmt::Write as _;

use prometheus::proto::MetricFamily;
use prometheus::TextEncoder;

use super::election::{cause_index, fence_reason_index, Election};
use super::families::{
    Family, Id, Scope, CAUSES_SORTED, CHECK_RESULTS, FAMILIES, FENCE_REASONS_SORTED,
    TERM_DURATION_BUCKETS,
};

/// Appends every family to `out`, in name order: `registry`'s (as
/// gathered) and the per-election ones of `elections` (sorted by name),
/// the opt-in ones only when `detail`.
pub(super) fn write_all(
    out: &mut String,
    registry: &[MetricFamily],
    elections: &[(&str, &Election)],
    detail: bool,
) {
    enum Part<'a> {
        Registry(&'a MetricFamily),
        Election(&'static Family),
    }
    let mut parts: Vec<(&str, Part)> = registry
        .iter()
        .map(|mf| (mf.name(), Part::Registry(mf)))
        .collect();
    parts.extend(
        FAMILIES
            .iter()
            .filter(|f| match f.scope {
                Scope::Process => false,
                Scope::Election => true,
                Scope::ElectionDetail => detail,
            })
            .map(|f| (f.name, Part::Election(f))),
    );
    parts.sort_by(|a, b| a.0.cmp(b.0));
    for (_, part) in parts {
        match part {
            // Encoding fails only for an empty family, which gather() prunes.
            Part::Registry(mf) => {
                let _ = TextEncoder::new().encode_utf8(std::slice::from_ref(mf), out);
            }
            Part::Election(f) => write_family(out, f, elections),
        }
    }
}

/// The text format's escaping: `\` → `\\`, newline → `\n`, and in label
/// values `"` → `\"`.
fn push_escaped(out: &mut String, v: &str, quotes: bool) {
    let needs = v
        .bytes()
        .any(|b| b == b'\\' || b == b'\n' || (quotes && b == b'"'));
    if !needs {
        out.push_str(v);
        return;
    }
    for c in v.chars() {
        match c {
            '\\' => out.push_str("\\\\"),
            '\n' => out.push_str("\\n"),
            '"' if quotes => out.push_str("\\\""),
            c => out.push(c),
        }
    }
}

/// One sample line of `f`: `name{l1="v1",...} value`, its labels named by
/// the family's declaration (`values` in that order), then `le` if given.
fn sample(out: &mut String, f: &Family, suffix: &str, values: &[&str], le: Option<&str>, v: f64) {
    out.push_str(f.name);
    out.push_str(suffix);
    let mut sep = '{';
    let le = le.map(|b| ("le", b));
    for (k, val) in f
        .labels
        .iter()
        .copied()
        .zip(values.iter().copied())
        .chain(le)
    {
        out.push(sep);
        out.push_str(k);
        out.push_str("=\"");
        push_escaped(out, val, true);
        out.push('"');
        sep = ',';
    }
    if sep != '{' {
        out.push('}');
    }
    let _ = writeln!(out, " {v}");
}

/// Writes one per-election family: its headers and its series sorted as
/// the registry sorts them (by label values, labels in name order), or
/// nothing when it has no series.
fn write_family(out: &mut String, f: &Family, elections: &[(&str, &Election)]) {
    let has_series = match f.id {
        Id::LeaderInfo => elections.iter().any(|(_, e)| e.term.is_some()),
        Id::LeaseRemaining => elections.iter().any(|(_, e)| e.lease_remaining.is_some()),
        Id::FencingChecks | Id::FencingRefusals => elections.iter().any(|(_, e)| e.used_fence()),
        Id::Leaderless => elections.iter().any(|(_, e)| e.shows_leaderless()),
        Id::ElectionTermDuration | Id::ElectionTermEnds | Id::ElectionCandidatesWaiting => {
            elections.iter().any(|(_, e)| e.detail.is_some())
        }
        _ => !elections.is_empty(),
    };
    if !has_series {
        return;
    }
    out.push_str("# HELP ");
    out.push_str(f.name);
    out.push(' ');
    push_escaped(out, f.help, false);
    out.push('\n');
    out.push_str("# TYPE ");
    out.push_str(f.name);
    out.push(' ');
    out.push_str(f.kind.as_str());
    out.push('\n');
    match f.id {
        Id::ElectionTermEnds => {
            // Labels `cause`, `election`: by cause, then election.
            for c in CAUSES_SORTED {
                for &(el, e) in elections {
                    if let Some(d) = &e.detail {
                        let v = d.term_ends[cause_index(c)] as f64;
                        sample(out, f, "", &[c.as_str(), el], None, v);
                    }
                }
            }
        }
        Id::FencingRefusals => {
            for &(el, e) in elections.iter().filter(|(_, e)| e.used_fence()) {
                for r in FENCE_REASONS_SORTED {
                    let v = e.series.refusals[fence_reason_index(r)] as f64;
                    sample(out, f, "", &[el, r.as_str()], None, v);
                }
            }
        }
        Id::FencingChecks => {
            for &(el, e) in elections.iter().filter(|(_, e)| e.used_fence()) {
                for (result, v) in CHECK_RESULTS
                    .iter()
                    .zip([e.series.accepted, e.series.refused])
                {
                    sample(out, f, "", &[el, result], None, v as f64);
                }
            }
        }
        Id::LeaderInfo => {
            for &(el, e) in elections {
                if let Some(t) = &e.term {
                    sample(out, f, "", &[el, &t.holder_label], None, 1.0);
                }
            }
        }
        Id::LeaseRemaining => {
            for &(el, e) in elections {
                if let Some(secs) = e.lease_remaining {
                    sample(out, f, "", &[el], None, secs as f64);
                }
            }
        }
        Id::ElectionCandidatesWaiting => {
            for &(el, e) in elections {
                if e.detail.is_some() {
                    sample(out, f, "", &[el], None, e.waiting as f64);
                }
            }
        }
        Id::ElectionTermDuration => {
            let mut le = String::new();
            for &(el, e) in elections {
                let Some(d) = &e.detail else { continue };
                let h = &d.term_duration;
                let mut cumulative = 0;
                for (bound, count) in TERM_DURATION_BUCKETS.iter().zip(h.counts) {
                    cumulative += count;
                    le.clear();
                    let _ = write!(le, "{bound}");
                    sample(out, f, "_bucket", &[el], Some(&le), cumulative as f64);
                }
                sample(out, f, "_bucket", &[el], Some("+Inf"), h.count as f64);
                sample(out, f, "_sum", &[el], None, h.sum);
                sample(out, f, "_count", &[el], None, h.count as f64);
            }
        }
        _ => {
            for &(el, e) in elections {
                let s = &e.series;
                let v = match f.id {
                    Id::FencingToken => s.fencing_token as f64,
                    Id::HasLeader => s.has_leader as f64,
                    Id::LeaderChanges => s.leader_changes as f64,
                    Id::Leaderless if e.shows_leaderless() => s.leaderless,
                    Id::TermStart => s.term_start,
                    _ => continue,
                };
                sample(out, f, "", &[el], None, v);
            }
        }
    }
}
