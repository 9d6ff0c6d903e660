//! CSV export of terms (RFC 4180 quoting, safe to open in a spreadsheet).

use super::TermRow;

const HEADER: [&str; 14] = [
    "election",
    "token",
    "holder",
    "lease_id",
    "layout",
    "started_at",
    "ended_at",
    "started_at_ms",
    "ended_at_ms",
    "started_revision",
    "ended_revision",
    "end_cause",
    "from_snapshot",
    "duration_seconds",
];

/// Renders terms as CSV: a header line, then one line per term, `\n`
/// terminated. Text cells are quoted when they contain a comma, a quote, CR
/// or LF (quotes doubled), and a text cell starting with `=`, `+`, `-`, `@`,
/// tab or CR is prefixed with `'` so a spreadsheet does not run it as a
/// formula. Numbers and timestamps are written as they are.
pub fn terms_to_csv(rows: &[TermRow]) -> String {
    let mut out = String::with_capacity(64 * (rows.len() + 1));
    out.push_str(&HEADER.join(","));
    out.push('\n');
    for r in rows {
        let opt = |v: Option<i64>| v.map(|v| v.to_string()).unwrap_or_default();
        let cells = [
            text(&r.election),
            r.token.to_string(),
            text(&r.holder),
            r.lease_id.to_string(),
            r.layout
                .map(|l| text(&super::query::tag_of(&l)))
                .unwrap_or_default(),
            r.started_at.clone(),
            r.ended_at.clone().unwrap_or_default(),
            r.started_at_ms.to_string(),
            opt(r.ended_at_ms),
            r.started_revision.to_string(),
            opt(r.ended_revision),
            r.end_cause
                .map(|c| c.as_str().to_owned())
                .unwrap_or_default(),
            r.from_snapshot.to_string(),
            r.duration_seconds
                .map(|d| format!("{d:.3}"))
                .unwrap_or_default(),
        ];
        out.push_str(&cells.join(","));
        out.push('\n');
    }
    out
}

/// One text cell: formula-neutralised, then quoted if needed.
fn text(s: &str) -> String {
    let neutral;
    let s = if s.starts_with(['=', '+', '-', '@', '\t', '\r']) {
        neutral = format!("'{s}");
        neutral.as_str()
    } else {
        s
    };
    if s.contains([',', '"', '\r', '\n']) {
        format!("\"{}\"", s.replace('"', "\"\""))
    } else {
        s.to_owned()
    }
}
