//! The queue's recorded history for one election: who waited behind the
//! leader (queue layout), from when, until when, and how it ended. Pure:
//! built from the election's recorded events, in order.
//!
//! A wait whose arrival is outside the events given is not shown (nothing
//! is invented); one cut by a gap or a reset ends `unknown` there.

use std::collections::BTreeMap;

use crate::events::{Event, EventKind};

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Outcome {
    /// It led: a term with its token started.
    Led,
    /// Its key went before it led.
    Left,
    /// Still queued at the end of the events.
    Waiting,
    /// A gap or a reset came first: how it ended was not seen.
    Unknown,
}

impl Outcome {
    pub fn as_str(self) -> &'static str {
        match self {
            Outcome::Led => "led",
            Outcome::Left => "left",
            Outcome::Waiting => "waiting",
            Outcome::Unknown => "unknown",
        }
    }
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Wait {
    pub holder: String,
    /// Its key's CreateRevision: its place in the queue.
    pub token: i64,
    /// When it queued: the revision and the recorded time.
    pub queued_revision: i64,
    pub queued_at_ms: i64,
    /// When the wait ended, revision and time (`None` while waiting).
    pub until: Option<(i64, i64)>,
    pub outcome: Outcome,
}

/// Every wait that began in `events` (oldest first), with how it ended.
pub fn waits(events: &[Event]) -> Vec<Wait> {
    let mut out: Vec<Wait> = Vec::new();
    // token → index into `out`, for waits still open.
    let mut open: BTreeMap<i64, usize> = BTreeMap::new();
    let close = |out: &mut Vec<Wait>, i: usize, e: &Event, how: Outcome| {
        out[i].until = Some((e.revision, e.at_ms));
        out[i].outcome = how;
    };
    for e in events {
        match &e.kind {
            EventKind::CandidateQueued { token, holder, .. } => {
                open.insert(*token, out.len());
                out.push(Wait {
                    holder: holder.clone(),
                    token: *token,
                    queued_revision: e.revision,
                    queued_at_ms: e.at_ms,
                    until: None,
                    outcome: Outcome::Waiting,
                });
            }
            EventKind::CandidateLeft { token, .. } => {
                if let Some(i) = open.remove(token) {
                    close(&mut out, i, e, Outcome::Left);
                }
            }
            EventKind::TermStarted { token, .. } => {
                if let Some(i) = open.remove(token) {
                    close(&mut out, i, e, Outcome::Led);
                }
            }
            EventKind::Gap { .. } | EventKind::Reset { .. } => {
                for (_, i) in std::mem::take(&mut open) {
                    close(&mut out, i, e, Outcome::Unknown);
                }
            }
            _ => {}
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::election::KeyLayout;

    fn ev(at_ms: i64, kind: EventKind) -> Event {
        Event {
            revision: at_ms,
            at_ms,
            election: "q".into(),
            kind,
        }
    }

    fn queued(at: i64, token: i64, holder: &str) -> Event {
        ev(
            at,
            EventKind::CandidateQueued {
                token,
                holder: holder.into(),
                lease_id: 1,
            },
        )
    }

    #[test]
    fn each_wait_ends_as_recorded_and_nothing_is_invented() {
        let events = vec![
            queued(10, 4, "bob"),
            queued(11, 5, "carol"),
            queued(12, 6, "dave"),
            ev(
                20,
                EventKind::CandidateLeft {
                    token: 4,
                    holder: "bob".into(),
                    lease_id: 1,
                },
            ),
            ev(
                30,
                EventKind::TermStarted {
                    token: 5,
                    holder: "carol".into(),
                    lease_id: 1,
                    layout: KeyLayout::Queue,
                    previous_holder: None,
                    from_snapshot: false,
                },
            ),
            // A departure whose arrival is not in the events: not shown.
            ev(
                31,
                EventKind::CandidateLeft {
                    token: 2,
                    holder: "zed".into(),
                    lease_id: 1,
                },
            ),
            queued(40, 9, "erin"),
        ];
        let w = waits(&events);
        let got: Vec<(&str, i64, Option<i64>, Outcome)> = w
            .iter()
            .map(|w| {
                (
                    w.holder.as_str(),
                    w.queued_at_ms,
                    w.until.map(|u| u.1),
                    w.outcome,
                )
            })
            .collect();
        assert_eq!(
            got,
            vec![
                ("bob", 10, Some(20), Outcome::Left),
                ("carol", 11, Some(30), Outcome::Led),
                ("dave", 12, None, Outcome::Waiting),
                ("erin", 40, None, Outcome::Waiting),
            ]
        );
        // A gap ends every open wait as unknown.
        let mut cut = events.clone();
        cut.push(ev(
            50,
            EventKind::Gap {
                from_revision: 41,
                to_revision: 49,
            },
        ));
        let w = waits(&cut);
        assert_eq!(w[2].outcome, Outcome::Unknown);
        assert_eq!(w[2].until, Some((50, 50)));
        assert_eq!(w[3].outcome, Outcome::Unknown);
    }
}
