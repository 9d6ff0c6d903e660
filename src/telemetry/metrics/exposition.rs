//! The text exposition format (version 0.0.4): the registry's families
//! through its encoder, the per-election families written here in exactly
//! the text that encoder would produce (families by name, series by label
//! values, `# HELP`/`# TYPE` headers, empty families left out).

use std::borrow::Cow;
use std::fmt::Write as _;

use prometheus::proto::MetricFamily;
use prometheus::TextEncoder;

use super::election::{cause_index, fence_reason_index, Election};
use super::families::{
    Family, Id, SeriesScope, CAUSES_SORTED, CHECK_RESULTS, FAMILIES, FENCE_REASONS_SORTED,
    TERM_DURATION_BUCKETS,
};

/// Appends every family to `out`, in name order: `registry`'s (as
/// gathered) and the per-election ones of `elections` (sorted by name,
/// names unescaped), the opt-in ones only when `detail`.
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
                SeriesScope::Process => false,
                SeriesScope::Election => true,
                SeriesScope::ElectionDetail => detail,
            })
            .map(|f| (f.name, Part::Election(f))),
    );
    parts.sort_by(|a, b| a.0.cmp(b.0));
    let names = escaped_names(elections);
    let elections: Vec<(&str, &Election)> = names.iter().map(|(n, e)| (n.as_ref(), *e)).collect();
    for (_, part) in parts {
        match part {
            // Encoding fails only for an empty family, which gather() prunes.
            Part::Registry(mf) => {
                let _ = TextEncoder::new().encode_utf8(std::slice::from_ref(mf), out);
            }
            Part::Election(f) => write_family(out, f, &elections),
        }
    }
}

/// `v` as a label value, escaped.
pub(super) fn push_label_value(out: &mut String, v: &str) {
    push_escaped(out, v, true);
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
/// the family's declaration (`values` in that order, already escaped), then
/// `le` if given.
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
        out.push_str(val);
        out.push('"');
        sep = ',';
    }
    if sep != '{' {
        out.push('}');
    }
    out.push(' ');
    push_value(out, v);
    out.push('\n');
}

/// `v` exactly as `{v}` (`Display`, what the registry's encoder writes)
/// would write it, without the formatting machinery (its float
/// formatting costs a third of a render): whole numbers by `itoa`; others by `ryu` when its
/// text is a plain decimal of at most 15 significant digits (then the only
/// shortest one: both give it); the rest (17-digit ties, which the two
/// round differently, exponents, infinities) by `Display`.
fn push_value(out: &mut String, v: f64) {
    const WHOLE: f64 = 1e15;
    if v.fract() == 0.0 && v.abs() < WHOLE && !(v == 0.0 && v.is_sign_negative()) {
        // Exact: a whole number below 2^53.
        out.push_str(itoa::Buffer::new().format(v as i64));
        return;
    }
    if v.is_finite() && (1e-4..WHOLE).contains(&v.abs()) {
        let mut b = ryu::Buffer::new();
        let text = b.format_finite(v);
        let significant = text
            .bytes()
            .filter(u8::is_ascii_digit)
            .skip_while(|&d| d == b'0')
            .count();
        if significant <= 15 {
            out.push_str(text);
            return;
        }
    }
    let _ = write!(out, "{v}");
}

/// The label values of election names, escaped once per render rather
/// than once per sample.
fn escaped_names<'a>(elections: &[(&'a str, &'a Election)]) -> Vec<(Cow<'a, str>, &'a Election)> {
    elections
        .iter()
        .map(|&(n, e)| (escape(n, true), e))
        .collect()
}

fn escape(v: &str, quotes: bool) -> Cow<'_, str> {
    let needs = v
        .bytes()
        .any(|b| b == b'\\' || b == b'\n' || (quotes && b == b'"'));
    if !needs {
        return Cow::Borrowed(v);
    }
    let mut out = String::with_capacity(v.len() + 8);
    push_escaped(&mut out, v, quotes);
    Cow::Owned(out)
}

/// Writes one per-election family: its headers and its series sorted as
/// the registry sorts them (by label values, labels in name order), or
/// nothing when it has no series.
fn write_family(out: &mut String, f: &Family, elections: &[(&str, &Election)]) {
    if !has_series(f, elections) {
        return;
    }
    write_headers(out, f);
    write_series(out, f, elections);
}

/// Whether the family has a series of any election.
fn has_series(f: &Family, elections: &[(&str, &Election)]) -> bool {
    match f.id {
        Id::LeaderInfo => elections.iter().any(|(_, e)| e.term.is_some()),
        Id::LeaseRemaining => elections.iter().any(|(_, e)| e.lease_remaining.is_some()),
        Id::LeaseLapsed => elections.iter().any(|(_, e)| e.renewing.is_some()),
        Id::LeaseRenewInterval => elections
            .iter()
            .any(|(_, e)| e.renewing.is_some_and(|(_, every)| every.is_some())),
        Id::FencingChecks | Id::FencingRefusals => elections.iter().any(|(_, e)| e.used_fence()),
        Id::Leaderless => elections.iter().any(|(_, e)| e.shows_leaderless()),
        Id::ElectionTermDuration | Id::ElectionTermEnds | Id::ElectionCandidatesWaiting => {
            elections.iter().any(|(_, e)| e.detail.is_some())
        }
        _ => !elections.is_empty(),
    }
}

/// Its `# HELP` and `# TYPE` lines.
fn write_headers(out: &mut String, f: &Family) {
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
}

/// Its series, sorted as the registry sorts them.
fn write_series(out: &mut String, f: &Family, elections: &[(&str, &Election)]) {
    match f.id {
        Id::ElectionTermEnds | Id::FencingRefusals | Id::FencingChecks => {
            write_counts(out, f, elections)
        }
        Id::LeaderInfo
        | Id::LeaseRemaining
        | Id::LeaseLapsed
        | Id::LeaseRenewInterval
        | Id::ElectionCandidatesWaiting => write_held(out, f, elections),
        Id::ElectionTermDuration => write_term_duration(out, f, elections),
        _ => write_plain(out, f, elections),
    }
}

/// The counters by a second label: term ends by cause, fence checks by
/// result and refusals by reason.
fn write_counts(out: &mut String, f: &Family, elections: &[(&str, &Election)]) {
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
        _ => {}
    }
}

/// The series of what an election holds now: its leader, its lease, its
/// renewals, its waiting candidates.
fn write_held(out: &mut String, f: &Family, elections: &[(&str, &Election)]) {
    match f.id {
        Id::LeaderInfo => {
            for &(el, e) in elections {
                if let Some(t) = &e.term {
                    let holder = escape(&t.holder_label, true);
                    sample(out, f, "", &[el, &holder], None, 1.0);
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
        Id::LeaseLapsed => {
            for &(el, e) in elections {
                if let Some((lapsed, _)) = e.renewing {
                    sample(out, f, "", &[el], None, f64::from(u8::from(lapsed)));
                }
            }
        }
        Id::LeaseRenewInterval => {
            for &(el, e) in elections {
                if let Some((_, Some(secs))) = e.renewing {
                    sample(out, f, "", &[el], None, secs);
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
        _ => {}
    }
}

/// The term-duration histogram of each election with detail.
fn write_term_duration(out: &mut String, f: &Family, elections: &[(&str, &Election)]) {
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

/// One number per election, from its series.
fn write_plain(out: &mut String, f: &Family, elections: &[(&str, &Election)]) {
    for &(el, e) in elections {
        let s = &e.series;
        let v = match f.id {
            Id::FencingToken => s.fencing_token as f64,
            Id::HasLeader => s.has_leader as f64,
            Id::LeaderChanges => s.leader_changes as f64,
            Id::Leaderless if e.shows_leaderless() => s.leaderless_ms as f64 / 1000.0,
            Id::TermStart => s.term_start,
            _ => continue,
        };
        sample(out, f, "", &[el], None, v);
    }
}

#[cfg(test)]
mod tests {
    use super::push_value;

    /// `push_value` must write what `Display` writes (the registry's
    /// encoder's text), for every kind of value a series holds and for
    /// arbitrary bit patterns.
    #[test]
    fn values_are_written_exactly_as_display_writes_them() {
        let mut seed = 0x9e37_79b9_7f4a_7c15u64;
        let mut next = move || {
            seed ^= seed << 13;
            seed ^= seed >> 7;
            seed ^= seed << 17;
            seed
        };
        let mut values = vec![
            0.0,
            -0.0,
            1.0,
            -1.0,
            0.5,
            1e-4,
            9.99e-5,
            1e15,
            1e15 - 1.0,
            -1e15,
            1e16,
            1e21,
            f64::MAX,
            f64::MIN_POSITIVE,
            f64::NAN,
            f64::INFINITY,
            f64::NEG_INFINITY,
            (1u64 << 53) as f64,
        ];
        for _ in 0..200_000 {
            let r = next();
            values.push(f64::from_bits(r));
            // Unix times in seconds from milliseconds (term starts).
            values.push((r % 4_000_000_000_000) as f64 / 1000.0);
            // Counters and tokens.
            values.push((r % (1 << 40)) as f64);
            // Accrued seconds.
            values.push((r % 10_000_000) as f64 / 7.0);
        }
        let mut out = String::new();
        for v in values {
            out.clear();
            push_value(&mut out, v);
            assert_eq!(out, format!("{v}"), "bits {:#x}", v.to_bits());
        }
    }
}
