//! The watcher: a snapshot of every election under `P election/` and the
//! fence keys under `P fence/`, then one watch over both from the snapshot's
//! revision + 1, turned into [`Update`]s by the state machine in [`state`].
//!
//! - Resumes from the revision history committed last (read at exactly that
//!   revision, so nothing is missed or repeated); where etcd compacted it,
//!   resyncs from a fresh snapshot and reports an explicit gap.
//! - Reopens a broken or silently stalled watch (progress probes) from the
//!   next revision, on whichever endpoint answers.
//! - Asks etcd about a lease only where a term ended without tenure's end
//!   marker, and samples current leaders' leases (bounded rate) for
//!   `tenure_election_lease_remaining_seconds` and to tell expiry apart.
//!
//! The watcher never stores or renders: it sends updates down one channel.

pub mod state;

use std::collections::{HashMap, VecDeque};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use etcd_client::{EventType, GetOptions, KeyValue};
use tokio::sync::mpsc;
use tokio::time::Instant;

use crate::election::keywatch::{RangeWatch, Reopened, WatchItem};
use crate::election::{Client, Error};
use crate::events::{
    now_ms, Batch, EndCause, Event, EventKind, RestartReason, Update, WatchStatus,
};
pub use crate::events::{OpenTerm, ResumePoint as Resume};
pub use state::{Change, Kv, State};

#[derive(Debug, Clone)]
pub struct WatchConfig {
    /// At most this many elections are tracked (memory, label cardinality).
    pub max_elections: usize,
    /// Silence after which the watch stream is probed.
    pub probe_after: Duration,
    /// How often current leaders' leases are sampled.
    pub lease_sample_interval: Duration,
    /// At most this many lease samples per interval (oldest first).
    pub lease_samples_per_interval: usize,
    /// An election with no keys and no change for this long is forgotten.
    pub forget_after: Duration,
}

impl Default for WatchConfig {
    fn default() -> Self {
        Self {
            max_elections: 10_000,
            probe_after: Duration::from_secs(5),
            lease_sample_interval: Duration::from_secs(1),
            lease_samples_per_interval: 200,
            forget_after: Duration::from_secs(3600),
        }
    }
}

/// The receiving side went away: the watcher stops.
#[derive(Debug, thiserror::Error)]
#[error("the watcher's consumer is gone")]
pub struct Closed;

#[derive(Debug, Clone, Copy)]
struct Sample {
    at: Instant,
    remaining: i64,
    /// etcd's raft term when sampled: a leader change since then makes
    /// the prediction unreliable (see `cause_of_lease_end`).
    raft_term: u64,
}

/// What the lease sampler and the cause lookup share.
#[derive(Default)]
struct Leases {
    /// election → lease of its current leader.
    current: HashMap<String, i64>,
    samples: HashMap<i64, Sample>,
    /// Elections whose lease changed: sampled first, each once (`in_fresh`).
    fresh: VecDeque<String>,
    in_fresh: std::collections::HashSet<String>,
    /// Round-robin order of leading elections, each once (`queued`).
    queue: VecDeque<String>,
    queued: std::collections::HashSet<String>,
}

impl Leases {
    fn leads(&mut self, election: &str, lease: i64) {
        self.current.insert(election.to_owned(), lease);
        if self.in_fresh.insert(election.to_owned()) {
            self.fresh.push_back(election.to_owned());
        }
        if self.queued.insert(election.to_owned()) {
            self.queue.push_back(election.to_owned());
        }
    }

    fn ended(&mut self, election: &str) {
        if let Some(lease) = self.current.remove(election) {
            self.samples.remove(&lease);
        }
    }

    /// Up to `budget` (election, lease) pairs: changed leases first, then
    /// round-robin; each election at most once.
    fn pick(&mut self, budget: usize) -> Vec<(String, i64)> {
        let mut picked: Vec<(String, i64)> = Vec::new();
        let mut seen = std::collections::HashSet::new();
        while picked.len() < budget {
            let Some(name) = self.fresh.pop_front() else {
                break;
            };
            self.in_fresh.remove(&name);
            if let Some(&lease) = self.current.get(&name) {
                if seen.insert(name.clone()) {
                    picked.push((name, lease));
                }
            }
        }
        let mut turns = self.queue.len();
        while picked.len() < budget && turns > 0 {
            turns -= 1;
            let Some(name) = self.queue.pop_front() else {
                break;
            };
            match self.current.get(&name) {
                Some(&lease) => {
                    if seen.insert(name.clone()) {
                        picked.push((name.clone(), lease));
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
}

pub struct Watcher {
    client: Client,
    cfg: WatchConfig,
    leases: Arc<Mutex<Leases>>,
    overflows: std::sync::atomic::AtomicU64,
}

impl Watcher {
    pub fn new(client: Client, cfg: WatchConfig) -> Self {
        Self {
            client,
            cfg,
            leases: Arc::default(),
            overflows: Default::default(),
        }
    }

    /// Runs until the receiver of `tx` is dropped.
    pub async fn run(self, resume: Option<Resume>, tx: mpsc::Sender<Update>) -> Result<(), Closed> {
        // Aborted on drop too: when the caller aborts `run`, the sampler
        // goes with it.
        struct AbortOnDrop(tokio::task::JoinHandle<()>);
        impl Drop for AbortOnDrop {
            fn drop(&mut self) {
                self.0.abort();
            }
        }
        let _sampler = AbortOnDrop(tokio::spawn(sample_leases(
            self.client.clone(),
            self.cfg.clone(),
            self.leases.clone(),
            tx.clone(),
        )));
        self.watch(resume, &tx).await
    }

    async fn watch(&self, resume: Option<Resume>, tx: &mpsc::Sender<Update>) -> Result<(), Closed> {
        let mut state = State::new(self.client.keys().clone(), self.cfg.max_elections);
        let mut applied = self.load(&mut state, resume, tx).await?;
        let (start, end) = self.client.keys().watch_range();
        let mut watch = RangeWatch::new(
            &self.client.etcd(),
            start,
            Some(end.into_bytes()),
            applied + 1,
        )
        .with_probe_after(self.cfg.probe_after);
        let mut up = true;
        let mut last_forget = Instant::now();
        loop {
            let item = watch.next_item().await;
            let now_up = !matches!(item, WatchItem::Unavailable(_));
            if now_up != up {
                up = now_up;
                send(tx, Update::Watch(WatchStatus::EtcdUp(up))).await?;
            }
            match item {
                WatchItem::Events(events) => {
                    let revision = self.apply(&mut state, &events, tx).await?;
                    applied = revision;
                }
                WatchItem::Progress { revision } => {
                    if revision > applied {
                        // Persist progress so a restart need not replay it.
                        applied = revision;
                        send(
                            tx,
                            Update::Batch(Batch {
                                revision,
                                events: vec![],
                            }),
                        )
                        .await?;
                    }
                    send(tx, Update::Watch(WatchStatus::CaughtUp { revision })).await?;
                }
                WatchItem::Compacted { compact_revision } => {
                    tracing::warn!(
                        applied,
                        compact_revision,
                        "watch revision compacted; resyncing from a snapshot"
                    );
                    send(
                        tx,
                        Update::Watch(WatchStatus::Restarted(RestartReason::Compacted)),
                    )
                    .await?;
                    let open = open_terms(&state);
                    applied = self
                        .load(
                            &mut state,
                            Some(Resume {
                                revision: applied,
                                open_terms: open,
                            }),
                            tx,
                        )
                        .await?;
                    watch.resume_after(applied);
                }
                WatchItem::Reopening(why) => {
                    let reason = match why {
                        Reopened::StreamError => RestartReason::StreamError,
                        Reopened::Stalled => RestartReason::Stalled,
                        Reopened::Cancelled => RestartReason::Cancelled,
                    };
                    tracing::warn!(
                        reason = reason.as_str(),
                        next = watch.next_revision(),
                        "watch stream lost; reopening"
                    );
                    if why == Reopened::Stalled {
                        // Not even a progress request was answered: the
                        // connection may be half-open, and a stream reopened
                        // on it would hang again. Use a new one.
                        if let Some(fresh) = self.client.reconnect().await {
                            watch.set_client(&fresh);
                        }
                    }
                    send(tx, Update::Watch(WatchStatus::Restarted(reason))).await?;
                }
                WatchItem::Unavailable(why) => {
                    tracing::debug!(%why, "etcd unavailable for the watch; retrying")
                }
            }
            if last_forget.elapsed() >= Duration::from_secs(60) {
                last_forget = Instant::now();
                let idle_before = now_ms() - self.cfg.forget_after.as_millis() as i64;
                for election in state.forget_idle(idle_before) {
                    send(tx, Update::Forgotten { election }).await?;
                }
            }
        }
    }

    /// Loads the state: at the resume revision when etcd still has it (no
    /// events), else from a fresh snapshot with a gap event first. Retries
    /// until etcd answers. Returns the revision the state is at.
    async fn load(
        &self,
        state: &mut State,
        resume: Option<Resume>,
        tx: &mpsc::Sender<Update>,
    ) -> Result<i64, Closed> {
        let mut backoff = Duration::from_millis(100);
        let mut at_resume = resume.is_some();
        loop {
            let read = match (&resume, at_resume) {
                (Some(r), true) => self.snapshot(Some(r.revision)).await,
                _ => self.snapshot(None).await,
            };
            match read {
                Ok((kvs, revision)) => {
                    let at_ms = now_ms();
                    let open = resume
                        .as_ref()
                        .map(|r| r.open_terms.as_slice())
                        .unwrap_or(&[]);
                    let (events, statuses) = state.load(revision, &kvs, open, at_ms);
                    let mut batch = Vec::new();
                    if let (Some(r), false) = (&resume, at_resume) {
                        batch.push(Event {
                            revision,
                            at_ms,
                            election: String::new(),
                            kind: EventKind::Gap {
                                from_revision: r.revision + 1,
                                to_revision: revision,
                            },
                        });
                    }
                    batch.extend(events);
                    self.report(statuses, tx).await?;
                    self.track_all_leases(state);
                    send(tx, Update::Watch(WatchStatus::EtcdUp(true))).await?;
                    send(
                        tx,
                        Update::Batch(Batch {
                            revision,
                            events: batch,
                        }),
                    )
                    .await?;
                    return Ok(revision);
                }
                Err(e) if at_resume && is_gone_revision(&e) => {
                    tracing::warn!(error = %e, "the resume revision is no longer in etcd; resyncing with a gap");
                    at_resume = false;
                }
                Err(e) => {
                    tracing::warn!(error = %e, "cannot read the snapshot from etcd; retrying");
                    send(tx, Update::Watch(WatchStatus::EtcdUp(false))).await?;
                    tokio::time::sleep(backoff).await;
                    backoff = (backoff * 2).min(Duration::from_secs(5));
                }
            }
        }
    }

    /// Every key of the watch range, at `revision` (or now).
    async fn snapshot(&self, revision: Option<i64>) -> Result<(Vec<Kv>, i64), Error> {
        let (start, end) = self.client.keys().watch_range();
        let mut opts = GetOptions::new().with_range(end);
        if let Some(r) = revision {
            opts = opts.with_revision(r);
        }
        let resp = self
            .client
            .op(self.client.etcd().get(start, Some(opts)))
            .await?;
        let header = resp.header().map(|h| h.revision()).unwrap_or_default();
        let kvs = resp.kvs().iter().map(kv_of).collect();
        Ok((kvs, revision.unwrap_or(header)))
    }

    /// Applies a batch of watch events (complete revisions), resolves end
    /// causes that need etcd's word, and sends one batch. Returns the last
    /// revision applied.
    async fn apply(
        &self,
        state: &mut State,
        events: &[etcd_client::Event],
        tx: &mpsc::Sender<Update>,
    ) -> Result<i64, Closed> {
        let at_ms = now_ms();
        let mut out = Vec::new();
        let mut revision = 0;
        let mut i = 0;
        while i < events.len() {
            let rev = events[i]
                .kv()
                .map(|kv| kv.mod_revision())
                .unwrap_or_default();
            let mut changes = Vec::new();
            while i < events.len()
                && events[i]
                    .kv()
                    .map(|kv| kv.mod_revision())
                    .unwrap_or_default()
                    == rev
            {
                if let Some(c) = change_of(&events[i]) {
                    changes.push(c);
                }
                i += 1;
            }
            let (pending, statuses) = state.apply(rev, &changes, at_ms);
            self.report(statuses, tx).await?;
            out.extend(pending);
            revision = rev;
        }
        let mut resolved = Vec::with_capacity(out.len());
        for p in out {
            let mut event = p.event;
            if let (Some(lease), EventKind::TermEnded { cause, .. }) =
                (p.cause_lookup, &mut event.kind)
            {
                *cause = self.cause_of_lease_end(lease).await;
            }
            resolved.push(event);
        }
        self.track_leases(&resolved);
        send(
            tx,
            Update::Batch(Batch {
                revision,
                events: resolved,
            }),
        )
        .await?;
        Ok(revision)
    }

    /// A leader key went without tenure's end marker. If its lease still
    /// lives, the key was deleted; if not, the lease was revoked or ran out:
    /// the last sample tells which (expired when its predicted expiry has
    /// come, allowing etcd's ~0.5 s expiry check and 1 s TTL resolution).
    async fn cause_of_lease_end(&self, lease: i64) -> EndCause {
        let (ttl, raft_term) = match self
            .client
            .op(self.client.etcd().lease_time_to_live(lease, None))
            .await
        {
            Ok(resp) => (resp.ttl(), resp.header().map(|h| h.raft_term())),
            Err(e) if e.is_lease_not_found() => (-1, None),
            Err(e) => {
                tracing::warn!(error = %e, lease, "cannot ask etcd about an ended term's lease");
                return EndCause::Unknown;
            }
        };
        if ttl > 0 {
            return EndCause::Deleted;
        }
        let sample = self
            .leases
            .lock()
            .ok()
            .and_then(|l| l.samples.get(&lease).copied());
        match sample {
            Some(s)
                if Instant::now() + Duration::from_millis(1500)
                    >= s.at + Duration::from_secs(s.remaining.max(0) as u64) =>
            {
                EndCause::Expired
            }
            // Gone before its predicted expiry: revoked, unless etcd changed
            // leader since the sample. Then the prediction does not hold
            // either way: the new leader extends every lease, and the old
            // one, resuming, can still revoke a lease that ran out by its
            // own clock (seen: a 5 s lease deleted 7.1 s after its grant,
            // 2.4 s before the extended expiry the sample predicted).
            Some(s) => match raft_term {
                Some(t) if t == s.raft_term => EndCause::Resigned,
                None if self.raft_term().await == Some(s.raft_term) => EndCause::Resigned,
                _ => EndCause::Unknown,
            },
            // Never sampled: the term ended before the sampler looked at its
            // lease, or while tenure was down (a restart replays it). etcd
            // no longer knows the lease, so nothing tells expiry from
            // revocation: say so instead of guessing "resigned".
            None => EndCause::Unknown,
        }
    }

    /// etcd's current raft term (it changes with every leader election).
    async fn raft_term(&self) -> Option<u64> {
        let status = self.client.op(self.client.etcd().status()).await.ok()?;
        status.header().map(|h| h.raft_term())
    }

    /// Sends statuses on, logging overflows (the first ten, then every
    /// thousandth) so a full cap is noticed without flooding the log.
    async fn report(
        &self,
        statuses: Vec<WatchStatus>,
        tx: &mpsc::Sender<Update>,
    ) -> Result<(), Closed> {
        for s in statuses {
            if let WatchStatus::Overflow { election } = &s {
                let n = self
                    .overflows
                    .fetch_add(1, std::sync::atomic::Ordering::Relaxed)
                    + 1;
                if n <= 10 || n % 1000 == 0 {
                    tracing::warn!(
                        election = %election,
                        overflows = n,
                        max = self.cfg.max_elections,
                        "more elections than --max-elections: this one is not tracked"
                    );
                }
            }
            send(tx, Update::Watch(s)).await?;
        }
        Ok(())
    }

    /// Tells the sampler which leases lead now: all of them after a load,
    /// incrementally from a batch's term events otherwise (no work per
    /// election on the hot path).
    fn track_all_leases(&self, state: &State) {
        let Ok(mut l) = self.leases.lock() else {
            return;
        };
        *l = Leases::default();
        for (name, t) in state.leaders() {
            if t.lease_id != 0 {
                l.leads(name, t.lease_id);
            }
        }
    }

    fn track_leases(&self, events: &[Event]) {
        let Ok(mut l) = self.leases.lock() else {
            return;
        };
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

/// Samples current leaders' leases, at most `lease_samples_per_interval`
/// per interval, oldest first.
async fn sample_leases(
    client: Client,
    cfg: WatchConfig,
    leases: Arc<Mutex<Leases>>,
    tx: mpsc::Sender<Update>,
) {
    let mut tick = tokio::time::interval(cfg.lease_sample_interval);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        tick.tick().await;
        let batch = match leases.lock() {
            Ok(mut l) => l.pick(cfg.lease_samples_per_interval),
            Err(_) => return,
        };
        for (election, lease) in batch {
            let (remaining, raft_term) = match client
                .op(client.etcd().lease_time_to_live(lease, None))
                .await
            {
                Ok(r) if r.ttl() >= 0 => (Some(r.ttl()), r.header().map(|h| h.raft_term())),
                Ok(_) => (None, None),
                Err(e) if e.is_lease_not_found() => (None, None),
                Err(_) => continue,
            };
            if let (Some(r), Ok(mut l)) = (remaining, leases.lock()) {
                l.samples.insert(
                    lease,
                    Sample {
                        at: Instant::now(),
                        remaining: r,
                        raft_term: raft_term.unwrap_or(0),
                    },
                );
            }
            let update = Update::LeaseSampled {
                election,
                lease_id: lease,
                remaining_seconds: remaining,
            };
            if tx.send(update).await.is_err() {
                return;
            }
        }
    }
}

fn open_terms(state: &State) -> Vec<OpenTerm> {
    state
        .leaders()
        .map(|(name, t)| OpenTerm {
            election: name.to_owned(),
            token: t.token,
            holder: t.holder.clone(),
            lease_id: t.lease_id,
            layout: t.layout,
            started_revision: t.started_revision,
            started_at_ms: t.started_at_ms,
        })
        .collect()
}

fn is_gone_revision(e: &Error) -> bool {
    let s = e.to_string();
    s.contains("required revision has been compacted")
        || s.contains("required revision is a future revision")
}

fn kv_of(kv: &KeyValue) -> Kv {
    Kv {
        key: kv.key().to_vec(),
        value: kv.value().to_vec(),
        create_revision: kv.create_revision(),
        mod_revision: kv.mod_revision(),
        lease: kv.lease(),
    }
}

fn change_of(e: &etcd_client::Event) -> Option<Change> {
    let kv = e.kv()?;
    Some(match e.event_type() {
        EventType::Put => Change::Put(kv_of(kv)),
        EventType::Delete => Change::Delete {
            key: kv.key().to_vec(),
            revision: kv.mod_revision(),
            lease: e.prev_kv().map(|p| p.lease()).unwrap_or_default(),
        },
    })
}

async fn send(tx: &mpsc::Sender<Update>, u: Update) -> Result<(), Closed> {
    tx.send(u).await.map_err(|_| Closed)
}

#[cfg(test)]
mod tests {
    use super::Leases;

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
