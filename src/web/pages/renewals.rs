//! How a Kubernetes Lease's renewals read on the election page: the live
//! line under its leader (the watcher's latest word, [`LeaseNow`]) and a
//! term end's renewals and handover in the events table
//! ([`TermRenewals`]). Renewal times are the holder's clock; when a write
//! arrived is tenure's: the text says which.

use super::ago;
use crate::events::{LeaseNow, TermRenewals};
use crate::history::{format_duration_ms, short_time};

/// The live line under a Lease's leader, and a warning while it lapsed.
pub(super) struct RenewalLine {
    pub text: String,
    pub lapsed: Option<String>,
    /// When the lease runs out, by tenure's clock: its duration after its
    /// last write arrived (`None`: no duration written, or no write seen).
    pub runs_out: Option<String>,
    /// The same moment (unix ms), for the page to count down to.
    pub runs_out_at_ms: Option<i64>,
    /// Its duration as written (`15 s`).
    pub duration: Option<String>,
    /// Its last renewal as written, on the holder's clock.
    pub last_renewal: Option<String>,
    /// When it runs out by the holder's clock (its last renewal plus its
    /// duration), and whether that moment passed on tenure's clock.
    pub runs_out_by_holder: Option<String>,
    /// `leaseTransitions` as its holders wrote it.
    pub transitions: Option<i64>,
}

/// `l` as the page shows it at `now` (unix ms). Lapsed as the watcher
/// judged it: by a watch that was there to see a write (while it is down,
/// a silent Lease is not called lapsed).
pub(super) fn renewal_line(l: &LeaseNow, now: i64) -> RenewalLine {
    let every = match l.every_us {
        Some(us) => format!("every {} by its clock", format_duration_ms(us / 1000)),
        None => "cadence not known yet (fewer than two renewals read)".to_owned(),
    };
    let lease = l.duration_s.map_or_else(
        || "lease duration not written".to_owned(),
        |d| format!("lease {d}s"),
    );
    let written = if l.written_seen {
        format!("last write {}", ago(now, l.written_at_ms))
    } else {
        format!(
            "no write seen since tenure read it {}",
            ago(now, l.written_at_ms)
        )
    };
    let counted = if l.partial {
        format!("{} renewals read since tenure read it", l.renewals)
    } else {
        format!("{} renewals read this term", l.renewals)
    };
    let runs_out_at_ms = l
        .duration_s
        .filter(|_| l.written_seen)
        .map(|d| l.written_at_ms.saturating_add(d.saturating_mul(1000)));
    let runs_out = runs_out_at_ms.map(|at| {
        if at > now {
            format!("in {}", format_duration_ms(at - now))
        } else {
            format!("ran out {}", ago(now, at))
        }
    });
    let ms = |us: i64| us.div_euclid(1000);
    let renewed_ms = l.renewed_us.map(ms);
    // client-go writes renewTime with acquireTime; a writer that wrote
    // only the latter is judged from it, as client-go's candidates do.
    let out_ms = renewed_ms
        .or(l.acquired_us.map(ms))
        .zip(l.duration_s)
        .map(|(r, d)| r.saturating_add(d.saturating_mul(1000)));
    let runs_out_by_holder = out_ms.map(|at| {
        let when = if at > now {
            format!(
                "{} from now on tenure's clock",
                format_duration_ms(at - now)
            )
        } else {
            format!("passed {} on tenure's clock", ago(now, at))
        };
        format!(
            "{} UTC by the holder's clock (its renewTime, else its acquireTime, plus its \
             duration): {when}",
            short_time(at)
        )
    });
    RenewalLine {
        text: format!("{every} · {written} · {lease} · {counted}"),
        runs_out,
        runs_out_at_ms,
        duration: l.duration_s.map(|d| format!("{d} s")),
        last_renewal: renewed_ms.map(|r| format!("{} UTC", short_time(r))),
        runs_out_by_holder,
        transitions: l.transitions,
        lapsed: l.lapsed.then(|| {
            format!(
                "Lapsed: no write for longer than its lease ({} since the last one tenure saw), \
                 while tenure's watch was there to see one. Its holder stopped renewing and \
                 nobody has taken over yet. The holder may still believe it leads (a frozen or \
                 cut-off process does until it notices), which etcd cannot show.",
                format_duration_ms(now - l.written_at_ms)
            )
        }),
    }
}

/// A Lease term's renewals and handover, for its end's row.
pub(super) fn term_renewals_text(r: &TermRenewals) -> String {
    let floor = if r.partial { "at least " } else { "" };
    let mut out = match r.every_us {
        Some(us) => format!(
            "renewed {floor}{} times, every {} by its clock",
            r.count,
            format_duration_ms(us / 1000)
        ),
        None => format!("renewed {floor}{} times", r.count),
    };
    if let Some(us) = r.handover_us {
        let lease_ms = r.duration_s.map(|d| d.saturating_mul(1000));
        let ms = us / 1000;
        let verdict = match lease_ms {
            _ if ms < 0 => "the next acquisition is written before it: the writers' clocks \
                            disagree"
                .to_owned(),
            Some(l) if ms >= l => format!("past its {}s lease: it lapsed first", l / 1000),
            Some(l) => format!("within its {}s lease: taken over early", l / 1000),
            None => "lease duration not written".to_owned(),
        };
        let sign = if ms < 0 { "-" } else { "" };
        out.push_str(&format!(
            "; from its last renewal to the next acquisition {sign}{} ({verdict})",
            format_duration_ms(ms.saturating_abs())
        ));
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_handover_says_whether_the_lease_had_run_out() {
        let r = |handover_us| TermRenewals {
            count: 7,
            partial: false,
            every_us: Some(2_000_000),
            last_us: Some(0),
            duration_s: Some(15),
            handover_us,
        };
        let late = term_renewals_text(&r(Some(16_200_000)));
        assert!(late.contains("every 2.0s") && late.contains("16.2s (past its 15s lease"));
        let early = term_renewals_text(&r(Some(3_000_000)));
        assert!(
            early.contains("3.0s (within its 15s lease: taken over early"),
            "{early}"
        );
        let skewed = term_renewals_text(&r(Some(-1_500_000)));
        assert!(
            skewed.contains("-1.5s") && skewed.contains("clocks disagree"),
            "{skewed}"
        );
        // First read mid-term: the count is a floor.
        let partial = TermRenewals {
            partial: true,
            ..r(None)
        };
        assert!(term_renewals_text(&partial).contains("renewed at least 7 times"));
        assert!(!term_renewals_text(&r(None)).contains("acquisition"));
    }

    #[test]
    fn lapsed_is_the_watchers_word_and_a_snapshot_read_is_no_write() {
        let l = LeaseNow {
            election: "kcm".into(),
            held: Some(("a".into(), 5)),
            renewals: 3,
            partial: false,
            every_us: Some(2_000_000),
            duration_s: Some(15),
            renewed_us: Some(900_000),
            acquired_us: Some(0),
            transitions: Some(2),
            written_at_ms: 1_000,
            written_seen: true,
            lapsed: false,
        };
        // Silent past its lease by the page's clock, but the watcher did not
        // say lapsed (its watch may be down): not called lapsed.
        let line = renewal_line(&l, 60_000);
        assert!(line.lapsed.is_none());
        assert!(line.text.contains("every 2.0s by its clock") && line.text.contains("lease 15s"));
        assert!(line.text.contains("last write 59.0s ago"), "{}", line.text);
        // By the holder's clock: renewed at 0.9 s, out at 15.9 s.
        assert_eq!(line.duration.as_deref(), Some("15 s"));
        assert_eq!(
            line.last_renewal.as_deref(),
            Some("1970-01-01 00:00:00.900 UTC")
        );
        let by_holder = line.runs_out_by_holder.clone().unwrap_or_default();
        assert!(
            by_holder.starts_with("1970-01-01 00:00:15.900 UTC by the holder's clock")
                && by_holder.ends_with("passed 44.1s ago on tenure's clock"),
            "{by_holder}"
        );
        assert!(renewal_line(&l, 10_000)
            .runs_out_by_holder
            .is_some_and(|s| s.ends_with("5.9s from now on tenure's clock")));
        assert_eq!(line.transitions, Some(2));
        let lapsed = LeaseNow {
            lapsed: true,
            ..l.clone()
        };
        assert!(renewal_line(&lapsed, 17_000)
            .lapsed
            .is_some_and(|w| w.contains("16.0s")));
        // Read in a snapshot: when it was written is not known.
        let read = LeaseNow {
            written_seen: false,
            partial: true,
            renewals: 0,
            ..l
        };
        let text = renewal_line(&read, 3_000).text;
        assert!(
            text.contains("no write seen since tenure read it 2.0s ago"),
            "{text}"
        );
        assert!(
            text.contains("0 renewals read since tenure read it"),
            "{text}"
        );
    }
}
