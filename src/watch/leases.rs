//! Lease sampling: current leaders' leases asked about at a bounded rate,
//! lapsing ones near their expiry every 100 ms; what the cause lookup
//! judges from.

use crate::task::Locked;
use std::collections::{HashMap, VecDeque};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::sync::mpsc;
use tokio::time::Instant;

use super::{State, WatchConfig, Watcher};
use crate::election::Client;
use crate::events::{Event, EventKind, Update};

#[derive(Debug, Clone, Copy)]
pub(super) struct Sample {
    /// When the request was sent and its answer received: etcd computed
    /// `remaining` in between.
    pub(super) sent: Instant,
    pub(super) at: Instant,
    /// Whole seconds, rounded down by etcd: the lease has at least this
    /// long left, and less than one second more.
    pub(super) remaining: i64,
    pub(super) granted: i64,
    /// Bounds on the lease's expiry: at or after `lower` (this sample's
    /// own), and, if not renewed since, before `upper` (the tightest of the
    /// samples since the last renewal: successive samples of a lapsing lease
    /// narrow it to the sampling cadence, finer than etcd's whole seconds).
    pub(super) lower: Instant,
    pub(super) upper: Instant,
    /// etcd's raft term when sampled: a leader change since then makes
    /// the prediction unreliable (see `cause_of_lease_end`).
    pub(super) raft_term: u64,
    /// etcd's raft term at the lease's first sample. A lease that lived
    /// through a leader change can be revoked early by the old leader when
    /// it resumes (etcd issue 15247, in 3.4.23 and 3.5.1): an end before its
    /// expiry then tells nothing of who revoked it.
    pub(super) first_term: u64,
}

/// What the lease sampler and the cause lookup share.
#[derive(Default)]
pub(super) struct Leases {
    /// election → lease of its current leader. Each name is allocated once
    /// and shared by the tables below (five copies
    /// of 100,000 names would be a fifth of the start-up).
    current: HashMap<Arc<str>, i64>,
    pub(super) samples: HashMap<i64, Sample>,
    /// Leases whose last sample shows them near their expiry (lapsing:
    /// less than half their TTL left, or less than 2 s): re-sampled every
    /// 100 ms, so the moment etcd's whole seconds tick down is caught.
    lapsing: HashMap<i64, String>,
    /// Elections whose lease changed: sampled first, each once (`in_fresh`).
    fresh: VecDeque<Arc<str>>,
    in_fresh: std::collections::HashSet<Arc<str>>,
    /// Round-robin order of leading elections, each once (`queued`).
    queue: VecDeque<Arc<str>>,
    queued: std::collections::HashSet<Arc<str>>,
    /// Wakes the sampler when a lease starts leading, so a new term's lease
    /// is sampled when the term starts, not at the next round (a term of
    /// 100 ms would end unsampled, its cause `unknown`).
    pub(super) wake: Arc<tokio::sync::Notify>,
}

impl Leases {
    fn leads(&mut self, election: &str, lease: i64) {
        let name: Arc<str> = match self.current.get_key_value(election) {
            Some((known, _)) => known.clone(),
            None => Arc::from(election),
        };
        self.current.insert(name.clone(), lease);
        if self.in_fresh.insert(name.clone()) {
            self.fresh.push_back(name.clone());
        }
        self.wake.notify_one();
        if self.queued.insert(name.clone()) {
            self.queue.push_back(name);
        }
    }

    /// Room for `n` leading elections at once: a snapshot's 100,000
    /// would otherwise grow (and rehash) every table many times.
    fn reserve(&mut self, n: usize) {
        self.current.reserve(n);
        self.in_fresh.reserve(n);
        self.fresh.reserve(n);
        self.queued.reserve(n);
        self.queue.reserve(n);
    }

    /// Forgets every lease and tracks `leaders` (at most about `n`), e.g.
    /// after a load. The sampler keeps waiting on the same `wake`:
    /// replacing it left the sampler deaf to new terms after every load
    /// (their leases then sampled only at the next tick).
    fn reset_to<'a>(&mut self, n: usize, leaders: impl Iterator<Item = (&'a str, i64)>) {
        let wake = self.wake.clone();
        *self = Leases {
            wake,
            ..Leases::default()
        };
        self.reserve(n);
        for (name, lease) in leaders {
            self.leads(name, lease);
        }
    }

    fn ended(&mut self, election: &str) {
        if let Some(lease) = self.current.remove(election) {
            self.samples.remove(&lease);
            self.lapsing.remove(&lease);
        }
    }

    /// Up to `budget` (election, lease) pairs: changed leases first, then
    /// round-robin; each election at most once.
    fn pick(&mut self, budget: usize) -> Vec<(String, i64)> {
        let mut picked = self.pick_fresh(budget);
        let mut seen: std::collections::HashSet<String> =
            picked.iter().map(|p| p.0.clone()).collect();
        let mut turns = self.queue.len();
        while picked.len() < budget && turns > 0 {
            turns -= 1;
            let Some(name) = self.queue.pop_front() else {
                break;
            };
            match self.current.get(&name) {
                Some(&lease) => {
                    if seen.insert(name.to_string()) {
                        picked.push((name.to_string(), lease));
                    }
                    self.queue.push_back(name);
                }
                None => {
                    self.queued.remove(&name);
                }
            }
        }
        picked
    }

    /// Up to `budget` leases that started leading since they were last
    /// picked, each election at most once.
    fn pick_fresh(&mut self, budget: usize) -> Vec<(String, i64)> {
        let mut picked: Vec<(String, i64)> = Vec::new();
        let mut seen = std::collections::HashSet::new();
        while picked.len() < budget {
            let Some(name) = self.fresh.pop_front() else {
                break;
            };
            self.in_fresh.remove(&name);
            if let Some(&lease) = self.current.get(&name) {
                if seen.insert(name.clone()) {
                    picked.push((name.to_string(), lease));
                }
            }
        }
        picked
    }
}

/// How often lapsing leases near their expiry are re-sampled.
const LAPSING_SAMPLE_EVERY: Duration = Duration::from_millis(100);
/// Most leases near expiry re-sampled per [`LAPSING_SAMPLE_EVERY`] (at
/// most 500 requests per second to etcd, whatever the number of leases).
const LAPSING_SAMPLES_PER_TICK: usize = 50;
/// A lapsing lease is re-sampled from this long before its latest expiry.
const LAPSING_WINDOW: Duration = Duration::from_millis(2500);

impl Sample {
    pub(super) fn lapsing(&self) -> bool {
        (self.remaining.max(0) + 1) * 2 <= self.granted
    }

    /// This sample, narrowed by the previous one of the same lease when no
    /// renewal can lie between them: a renewal after `prev` was sent puts
    /// the expiry at or after `prev.sent + granted`, so a new window
    /// entirely below that proves none happened.
    pub(super) fn narrowed(self, prev: Option<&Sample>) -> Sample {
        match prev {
            Some(p)
                if self.granted > 0
                    && self.upper <= p.sent + Duration::from_secs(self.granted as u64) =>
            {
                // Only the latest expiry bound narrows. The earliest stays
                // the latest sample's own: in fault runs a lease went 0.7 s
                // after an earlier sample said at least 1 s was left, so an
                // older sample's lower bound is not trusted.
                Sample {
                    upper: self.upper.min(p.upper),
                    ..self
                }
            }
            _ => self,
        }
    }
}

/// Samples current leaders' leases, at most `lease_samples_per_interval`
/// per interval: a new term's lease as soon as the term is applied (woken
/// by [`Leases::leads`], so a term of 100 ms has a sample when it ends),
/// the others round-robin; and lapsing leases near their expiry every
/// 100 ms, so an expiry is bounded to the cadence rather than to etcd's
/// whole seconds.
pub(super) async fn sample_leases(
    client: Client,
    cfg: WatchConfig,
    leases: Arc<Mutex<Leases>>,
    tx: mpsc::Sender<Update>,
) {
    let every = cfg.lease_sample_interval.min(LAPSING_SAMPLE_EVERY);
    let mut tick = tokio::time::interval(every);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    let wake = leases.locked().wake.clone();
    let mut budget = Budget {
        interval: cfg.lease_sample_interval,
        per_interval: cfg.lease_samples_per_interval,
        last_round: Instant::now() - cfg.lease_sample_interval,
        spent: 0,
    };
    loop {
        let ticked = tokio::select! {
            _ = tick.tick() => true,
            _ = wake.notified() => false,
        };
        let now = Instant::now();
        let batch = {
            let mut l = leases.locked();
            if ticked {
                l.due_on_tick(now, &mut budget)
            } else {
                l.pick_fresh_within(&mut budget)
            }
        };
        for (election, lease) in batch {
            let sent = Instant::now();
            let Some(answer) = ask(&client, lease).await else {
                continue;
            };
            if answer.remaining.is_some() {
                leases.locked().record(&election, lease, sent, &answer);
            }
            let update = Update::LeaseSampled {
                election,
                lease_id: lease,
                remaining_seconds: answer.remaining,
            };
            if tx.send(update).await.is_err() {
                return;
            }
        }
    }
}

/// The sampler's rate bound: when the last full round began, and the
/// samples of the current interval so far. New terms' leases, sampled as
/// they start, draw on the same `lease_samples_per_interval` as the round,
/// so the bound holds however fast terms change.
struct Budget {
    interval: Duration,
    per_interval: usize,
    last_round: Instant,
    spent: usize,
}

/// etcd's answer about one lease: `remaining` is `None` when the lease is
/// gone (not found, or a negative TTL).
struct Answer {
    remaining: Option<i64>,
    granted: i64,
    raft_term: Option<u64>,
}

/// Asks etcd about `lease`; `None` when the request failed (nothing known).
async fn ask(client: &Client, lease: i64) -> Option<Answer> {
    let gone = Answer {
        remaining: None,
        granted: 0,
        raft_term: None,
    };
    match client
        .op(client.etcd().lease_time_to_live(lease, None))
        .await
    {
        Ok(r) if r.ttl() >= 0 => Some(Answer {
            remaining: Some(r.ttl()),
            granted: r.granted_ttl(),
            raft_term: r.header().map(|h| h.raft_term()),
        }),
        Ok(_) => Some(gone),
        Err(e) if e.is_lease_not_found() => Some(gone),
        Err(_) => None,
    }
}

impl Leases {
    /// Woken by a new term: its lease (and any other fresh ones) within
    /// what is left of the interval's budget.
    fn pick_fresh_within(&mut self, budget: &mut Budget) -> Vec<(String, i64)> {
        let fresh = self.pick_fresh(budget.per_interval.saturating_sub(budget.spent));
        budget.spent += fresh.len();
        fresh
    }

    /// On a tick: the leases near their expiry, then a full round when an
    /// interval has passed (the fresh ones within budget otherwise), each
    /// lease once.
    fn due_on_tick(&mut self, now: Instant, budget: &mut Budget) -> Vec<(String, i64)> {
        let mut batch = self.near_expiry(now);
        let picked = if now >= budget.last_round + budget.interval {
            budget.last_round = now;
            self.pick(budget.per_interval)
        } else {
            self.pick_fresh(budget.per_interval.saturating_sub(budget.spent))
        };
        budget.spent = if budget.last_round == now {
            0
        } else {
            budget.spent
        } + picked.len();
        for p in picked {
            if !batch.iter().any(|b| b.1 == p.1) {
                batch.push(p);
            }
        }
        batch
    }

    /// Lapsing leases whose latest expiry is within [`LAPSING_WINDOW`], the
    /// soonest to expire first, at most [`LAPSING_SAMPLES_PER_TICK`].
    fn near_expiry(&self, now: Instant) -> Vec<(String, i64)> {
        let mut near: Vec<(Instant, i64, &String)> = self
            .lapsing
            .iter()
            .filter_map(|(lease, e)| {
                let s = self.samples.get(lease)?;
                (s.upper <= now + LAPSING_WINDOW).then_some((s.upper, *lease, e))
            })
            .collect();
        if near.len() > LAPSING_SAMPLES_PER_TICK {
            near.select_nth_unstable_by_key(LAPSING_SAMPLES_PER_TICK, |n| n.0);
            near.truncate(LAPSING_SAMPLES_PER_TICK);
        }
        near.into_iter()
            .map(|(_, lease, e)| (e.clone(), lease))
            .collect()
    }

    /// Keeps the sample of a live lease sent at `sent`, narrowed by the
    /// previous one of the same raft term, and marks it lapsing or not.
    /// Only while it still leads: a sample of a lease whose term ended
    /// meanwhile must not outlive it.
    fn record(&mut self, election: &str, lease: i64, sent: Instant, answer: &Answer) {
        let Some(r) = answer.remaining else {
            return;
        };
        if self.current.get(election) != Some(&lease) {
            return;
        }
        let at = Instant::now();
        let secs = Duration::from_secs(r.max(0) as u64);
        let raft_term = answer.raft_term.unwrap_or(0);
        let sample = Sample {
            sent,
            at,
            remaining: r,
            granted: answer.granted,
            raft_term,
            first_term: self
                .samples
                .get(&lease)
                .map(|p| p.first_term)
                .unwrap_or(raft_term),
            lower: sent + secs,
            upper: at + secs + Duration::from_secs(1),
        };
        let prev = self
            .samples
            .get(&lease)
            .filter(|p| p.raft_term == sample.raft_term);
        let sample = sample.narrowed(prev);
        if sample.lapsing() || sample.remaining <= 1 {
            self.lapsing.insert(lease, election.to_owned());
        } else {
            self.lapsing.remove(&lease);
        }
        self.samples.insert(lease, sample);
    }
}

impl Watcher {
    /// Tells the sampler which leases lead now: all of them after a load,
    /// incrementally from a batch's term events otherwise (no work per
    /// election on the hot path).
    pub(super) fn track_all_leases(&self, state: &State) {
        let mut l = self.leases.locked();
        l.reset_to(
            state.len(),
            state
                .leaders()
                .filter(|(_, t)| t.lease_id != 0)
                .map(|(name, t)| (name, t.lease_id)),
        );
    }

    pub(super) fn track_leases(&self, events: &[Event]) {
        let mut l = self.leases.locked();
        for e in events {
            match &e.kind {
                EventKind::TermStarted { lease_id, .. } if *lease_id != 0 => {
                    l.leads(&e.election, *lease_id)
                }
                EventKind::TermStarted { .. } | EventKind::TermEnded { .. } => l.ended(&e.election),
                _ => {}
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::Leases;

    /// A load replaces what is tracked, not the sampler's `wake`: a term
    /// that starts after it still wakes the sampler at once.
    #[tokio::test]
    async fn a_new_term_after_a_load_still_wakes_the_sampler() {
        let mut l = Leases::default();
        let sampler_waits_on = l.wake.clone();
        l.reset_to(2, [("a", 1), ("b", 2)].into_iter());
        assert_eq!(l.current.len(), 2);
        // Drain the wake-ups of the load itself.
        let _ = tokio::time::timeout(
            std::time::Duration::from_millis(10),
            sampler_waits_on.notified(),
        )
        .await;
        let woken = sampler_waits_on.notified();
        l.leads("c", 3);
        tokio::time::timeout(std::time::Duration::from_secs(1), woken)
            .await
            .expect("the sampler is woken by a term started after the load");
    }

    #[test]
    fn churn_neither_grows_the_queue_nor_starves_other_elections() {
        let mut l = Leases::default();
        for i in 0..3 {
            l.leads(&format!("steady-{i}"), 100 + i);
        }
        // One election changes leader a thousand times between samples.
        for lease in 0..1000 {
            l.ended("churny");
            l.leads("churny", 1000 + lease);
        }
        assert_eq!(
            l.queue.len(),
            4,
            "each leading election once in the round robin"
        );
        assert_eq!(
            l.fresh.len(),
            4,
            "each changed election once in the fresh queue"
        );
        // Two rounds of two samples reach every election, churny once.
        let mut picked = l.pick(2);
        picked.extend(l.pick(2));
        let names: std::collections::HashSet<&str> =
            picked.iter().map(|(n, _)| n.as_str()).collect();
        assert_eq!(names.len(), 4, "{picked:?}");
        assert!(
            picked.contains(&("churny".to_owned(), 1999)),
            "the current lease is sampled: {picked:?}"
        );
        // An election that no longer leads leaves the round robin.
        l.ended("steady-0");
        for _ in 0..4 {
            l.pick(10);
        }
        assert!(!l.queued.contains("steady-0"));
    }
}
