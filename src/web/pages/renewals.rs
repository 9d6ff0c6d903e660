//! How a Kubernetes Lease's renewals read on the election page: the live
//! line under its leader (the watcher's latest word, [`LeaseNow`]) and a
//! term end's renewals and handover in the events table
//! ([`TermRenewals`]). Renewal times are the holder's clock; when a write
//! arrived is tenure's: the text says which.

use super::ago;
use crate::events::{LeaseNow, TermRenewals};
use crate::history::format_duration_ms;

/// The live line under a Lease's leader, and a warning while it lapsed.
pub(super) struct RenewalLine {
    pub text: String,
    pub lapsed: Option<String>,
}

/// `l` as the page shows it at `now` (unix ms). Lapsed when the watcher
/// said so or when, by the page's own clock (the watcher's: one process),
/// no write came for longer than the lease since the last one.
pub(super) fn renewal_line(l: &LeaseNow, now: i64) -> RenewalLine {
    let every = match l.every_us {
        Some(us) => format!("every {} by its clock", format_duration_ms(us / 1000)),
        None => "cadence not known yet (fewer than two renewals read)".to_owned(),
    };
    let lease = l.duration_s.map_or_else(
        || "lease duration not written".to_owned(),
        |d| format!("lease {d}s"),
    );
    let silent_ms = now - l.written_at_ms;
    let lapsed = l.lapsed
        || l.duration_s
            .is_some_and(|d| silent_ms > d.saturating_mul(1000));
    RenewalLine {
        text: format!(
            "{every} · last write {} · {lease} · {} renewals read this term",
            ago(now, l.written_at_ms),
            l.renewals
        ),
        lapsed: lapsed.then(|| {
            format!(
                "Lapsed: no write for {}, longer than its lease. Its holder stopped renewing and \
                 nobody has taken over yet. The holder may still believe it leads (a frozen or \
                 cut-off process does until it notices), which etcd cannot show.",
                format_duration_ms(silent_ms)
            )
        }),
    }
}

/// A Lease term's renewals and handover, for its end's row.
pub(super) fn term_renewals_text(r: &TermRenewals) -> String {
    let mut out = match r.every_us {
        Some(us) => format!(
            "renewed {} times, every {} by its clock",
            r.count,
            format_duration_ms(us / 1000)
        ),
        None => format!("renewed {} times", r.count),
    };
    if let Some(us) = r.handover_us {
        let lease_ms = r.duration_s.map(|d| d.saturating_mul(1000));
        let ms = us / 1000;
        let verdict = match lease_ms {
            _ if ms < 0 => "before it: the writers' clocks disagree".to_owned(),
            Some(l) if ms >= l => format!("past its {}s lease: it lapsed first", l / 1000),
            Some(l) => format!("within its {}s lease: taken over early", l / 1000),
            None => "lease duration not written".to_owned(),
        };
        out.push_str(&format!(
            "; from its last renewal to the next acquisition {} ({verdict})",
            format_duration_ms(ms)
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
        assert!(term_renewals_text(&r(Some(-1_000_000))).contains("clocks disagree"));
        assert!(!term_renewals_text(&r(None)).contains("acquisition"));
    }

    #[test]
    fn a_lease_silent_past_its_duration_reads_lapsed() {
        let l = LeaseNow {
            election: "kcm".into(),
            held: Some(("a".into(), 5)),
            renewals: 3,
            every_us: Some(2_000_000),
            duration_s: Some(15),
            written_at_ms: 1_000,
            lapsed: false,
        };
        assert!(renewal_line(&l, 16_000).lapsed.is_none());
        let line = renewal_line(&l, 16_001);
        assert!(line.lapsed.is_some_and(|w| w.contains("15.0s")));
        assert!(line.text.contains("every 2.0s by its clock") && line.text.contains("lease 15s"));
    }
}
