//! The terms and handovers the test's record of a Lease says, in the form
//! serve's record is compared in.

use super::lease_log::Write;
use super::recorded::Recorded;

/// One term as the test's own record groups the writes: a run of one
/// holder and one acquisition; the token is its first write's revision.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Term {
    pub holder: String,
    pub token: i64,
    pub ended: Option<i64>,
    pub started_seen_us: i64,
    pub ended_seen_us: Option<i64>,
    /// How the write that ended it shows the end: an empty holder
    /// (`resigned`), the object deleted (`deleted`), `intruder` written
    /// over a live holder (`taken_over`), a candidate taking it
    /// (`expired`: client-go takes a Lease only once it ran out).
    pub ended_as: Option<&'static str>,
}

/// The terms of `writes` (a [`LeaseLog`]'s), `intruder` being the holder
/// a test writes over a live one.
pub fn terms_of(writes: &[Write], intruder: &str) -> Vec<Term> {
    let mut out: Vec<Term> = Vec::new();
    let mut open: Option<(String, Option<i64>)> = None;
    for w in writes {
        let now = (!w.deleted && !w.holder.is_empty()).then(|| (w.holder.clone(), w.acquire_us));
        if now == open {
            continue;
        }
        if open.is_some() {
            let last = out.last_mut().expect("open term");
            last.ended = Some(w.revision);
            last.ended_seen_us = Some(w.seen_us);
            last.ended_as = Some(if w.deleted {
                "deleted"
            } else if w.holder.is_empty() {
                "resigned"
            } else if w.holder == intruder {
                "taken_over"
            } else {
                "expired"
            });
        }
        if let Some((holder, _)) = &now {
            out.push(Term {
                holder: holder.clone(),
                token: w.revision,
                ended: None,
                started_seen_us: w.seen_us,
                ended_seen_us: None,
                ended_as: None,
            });
        }
        open = now;
    }
    out
}

/// What [`recorded`] should say of `truth`.
pub fn wanted(truth: &[Term]) -> Vec<Recorded> {
    truth
        .iter()
        .map(|t| {
            (
                t.holder.clone(),
                t.token,
                t.ended,
                t.ended_as.map(str::to_owned),
            )
        })
        .collect()
}

/// Each change of hands from one holder straight to another (no release or
/// deletion between), as the test's own watch read the Lease: the old
/// holder, and the new holder's acquireTime minus the old holder's last
/// renewTime (µs, the writers' clocks).
pub fn handovers(writes: &[Write]) -> Vec<(String, i64)> {
    let mut out = Vec::new();
    for pair in writes.windows(2) {
        let (old, new) = (&pair[0], &pair[1]);
        let held = |w: &Write| !w.deleted && !w.holder.is_empty();
        let new_term = new.holder != old.holder || new.acquire_us != old.acquire_us;
        if held(old) && held(new) && new_term {
            let last = old.renew_us.or(old.acquire_us).expect("renewed");
            let next = new.acquire_us.or(new.renew_us).expect("acquired");
            out.push((old.holder.clone(), next - last));
        }
    }
    out
}
