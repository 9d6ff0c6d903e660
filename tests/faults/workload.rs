//! Random campaign / resign / expire / depose / proclaim / fence operations,
//! in both layouts, with what each term's end should be called.

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use crate::common::*;
use crate::oracle::*;
use etcd_client::{Client as EtcdClient, Compare, CompareOp, GetOptions, PutOptions, Txn, TxnOp};
use tenure::election::keys::SchemaKey;
use tenure::election::{Client, ElectionName, Error};
use tenure::events::EndCause;

// ---------------------------------------------------------------------------
// Workload: random campaign / resign / expire / depose / proclaim / fence
// operations, in both layouts, with what each term's end should be called.
// ---------------------------------------------------------------------------

/// How the workload ended a term without a marker.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Intent {
    /// Never renewed: etcd expires it.
    Expire,
    /// Lease revoked without tenure's marker (a Go session closing).
    Revoke,
    /// Key deleted while its lease lives (`etcdctl del`).
    Delete,
}

pub(crate) type Intents = Arc<Mutex<HashMap<(String, i64), Intent>>>;

pub(crate) fn cause_from(intents: &Intents) -> impl Fn(&LogTerm) -> Option<EndCause> + '_ {
    move |t: &LogTerm| {
        let i = intents.lock().unwrap_or_else(|p| p.into_inner());
        match i.get(&(t.election.clone(), t.token)) {
            Some(Intent::Expire) => Some(EndCause::Expired),
            Some(Intent::Revoke) => Some(EndCause::Resigned),
            Some(Intent::Delete) => Some(EndCause::Deleted),
            None => Some(EndCause::Unknown),
        }
    }
}

/// A worker's own view of the elections it drives.
pub(crate) struct Single {
    pub(crate) token: i64,
    pub(crate) lease: i64,
    pub(crate) expiring_at: Option<Instant>,
}

pub(crate) struct QueueCandidate {
    pub(crate) key: String,
    pub(crate) lease: i64,
    pub(crate) token: i64,
    pub(crate) expiring_at: Option<Instant>,
}

pub(crate) struct Workload {
    pub(crate) client: Client,
    pub(crate) raw: EtcdClient,
    pub(crate) intents: Intents,
    pub(crate) tally: Tally,
    /// Violations the workload itself observes (a wrong token accepted).
    pub(crate) violations: Arc<Mutex<Vec<String>>>,
    pub(crate) ops: Arc<AtomicU64>,
}

impl Workload {
    /// Panics with what the workload itself saw go wrong, if anything.
    pub(crate) fn assert_no_violations(&self) {
        let violations = self
            .violations
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .clone();
        assert!(violations.is_empty(), "{violations:?}");
    }

    pub(crate) async fn new(endpoints: &[String]) -> Workload {
        Workload {
            client: tenure_client(endpoints).await,
            raw: raw_client(endpoints).await,
            intents: Arc::default(),
            tally: Tally::default(),
            violations: Arc::default(),
            ops: Arc::default(),
        }
    }

    pub(crate) fn violation(&self, s: String) {
        self.violations
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .push(s);
    }

    /// Runs `ops` random operations spread over `workers` concurrent
    /// workers, each owning its own elections (`<tag>/w<i>/…`).
    pub(crate) async fn run(&self, tag: &str, workers: usize, ops: u64, rng: &mut Rng) {
        let mut tasks = Vec::new();
        for w in 0..workers {
            // Spread `ops` exactly: the first `ops % workers` do one more.
            let per = ops / workers as u64 + u64::from((w as u64) < ops % workers as u64);
            let me = Workload {
                client: self.client.clone(),
                raw: self.raw.clone(),
                intents: self.intents.clone(),
                tally: self.tally.clone(),
                violations: self.violations.clone(),
                ops: self.ops.clone(),
            };
            let mut rng = rng.fork(w as u64);
            let tag = format!("{tag}/w{w}");
            tasks.push(tokio::spawn(
                async move { me.worker(&tag, per, &mut rng).await },
            ));
        }
        for t in tasks {
            t.await.expect("worker");
        }
    }

    pub(crate) async fn worker(&self, tag: &str, ops: u64, rng: &mut Rng) {
        let singles: Vec<String> = (0..3)
            .map(|i| format!("{tag}/s{i}"))
            .chain([format!("{tag}/mix")])
            .collect();
        let queues: Vec<String> = vec![format!("{tag}/q"), format!("{tag}/mix")];
        let mut single: HashMap<String, Single> = HashMap::new();
        let mut queue: HashMap<String, Vec<QueueCandidate>> = HashMap::new();
        let mut seq = 0u64;
        for _ in 0..ops {
            self.ops.fetch_add(1, Ordering::Relaxed);
            seq += 1;
            let now = Instant::now();
            single.retain(|_, s| s.expiring_at.is_none_or(|t| t > now));
            for q in queue.values_mut() {
                q.retain(|c| c.expiring_at.is_none_or(|t| t > now));
            }
            if rng.chance(70) {
                let e = singles[rng.below(singles.len() as u64) as usize].clone();
                self.single_op(&e, &mut single, seq, rng).await;
            } else {
                let e = queues[rng.below(queues.len() as u64) as usize].clone();
                self.queue_op(&e, &mut queue, seq, rng).await;
            }
        }
    }

    /// `Some(leader's token)` when, at `revision`, the election's leader by
    /// the key schema is not the term whose token is `revision`.
    pub(crate) async fn leader_at(&self, n: &ElectionName, revision: i64) -> Option<i64> {
        let keys = self.client.keys();
        let (start, end) = keys.election_range(n);
        let resp = self
            .raw
            .clone()
            .get(
                start,
                Some(GetOptions::new().with_range(end).with_revision(revision)),
            )
            .await
            .expect("read the election at the campaign's revision");
        let leader = resp
            .kvs()
            .iter()
            .filter(|kv| {
                matches!(keys.parse(kv.key(), kv.lease()),
                    Ok(SchemaKey::Leader { name, .. }) if name == *n)
            })
            .map(|kv| kv.create_revision())
            .min();
        leader.filter(|&t| t != revision)
    }

    pub(crate) async fn single_op(
        &self,
        e: &str,
        model: &mut HashMap<String, Single>,
        seq: u64,
        rng: &mut Rng,
    ) {
        let n = name(e);
        let roll = rng.below(100);
        let held = model
            .get(e)
            .map(|s| (s.token, s.lease, s.expiring_at.is_some()));
        match (roll, held) {
            (0..=34, _) | (_, None) => {
                let expiring = rng.chance(25);
                let t = if expiring { ttl(2) } else { ttl(600) };
                let cand = format!("{}-c{seq}", e.replace('/', "."));
                match self.client.acquire_detached(&n, &cand, t, None).await {
                    Ok(Ok(won)) => {
                        // A term handed out is the election's leader by the
                        // key schema (both layouts) at the revision it began.
                        if let Some(other) = self.leader_at(&n, won.token).await {
                            self.violation(format!(
                                "{e}: campaign returned token {} while token {other} led \
                                 (two holders believe they lead)",
                                won.token
                            ));
                        }
                        self.tally.add(if expiring {
                            "campaign_expiring"
                        } else {
                            "campaign"
                        });
                        if expiring {
                            self.intents
                                .lock()
                                .unwrap_or_else(|p| p.into_inner())
                                .insert((e.to_owned(), won.token), Intent::Expire);
                        }
                        model.insert(
                            e.to_owned(),
                            Single {
                                token: won.token,
                                lease: won.lease_id,
                                expiring_at: expiring
                                    .then(|| Instant::now() + Duration::from_millis(1500)),
                            },
                        );
                    }
                    Ok(Err(_held)) => self.tally.add("campaign_held"),
                    Err(err) => panic!("campaign {e}: {err}"),
                }
            }
            (35..=54, Some((token, _, false))) => {
                // Resign with a wrong token first: must be refused. (Not in
                // the two-layout election, where token - 1 may be the queue
                // candidate that leads there: resigning it is right.)
                let wrong = if e.ends_with("/mix") {
                    None
                } else {
                    Some(token - 1)
                };
                match self.client.resign(&n, wrong.unwrap_or(0)).await {
                    Err(Error::InvalidToken(_)) if wrong.is_none() => {}
                    Err(Error::NotHolder { .. }) => self.tally.add("resign_wrong_token_refused"),
                    Ok(_) => {
                        self.violation(format!("{e}: resign with token {} accepted", token - 1))
                    }
                    Err(err) => panic!("resign {e}: {err}"),
                }
                match self.client.resign(&n, token).await {
                    Ok(_) => self.tally.add("resign"),
                    Err(Error::NotHolder { .. }) => self.tally.add("resign_not_holder"),
                    Err(err) => panic!("resign {e}: {err}"),
                }
                model.remove(e);
            }
            (55..=66, Some(_)) => {
                match self.client.depose(&n).await {
                    Ok(Some(_)) => self.tally.add("depose"),
                    Ok(None) => self.tally.add("depose_nobody"),
                    Err(Error::NotHolder { .. }) => self.tally.add("depose_raced"),
                    Err(err) => panic!("depose {e}: {err}"),
                }
                model.remove(e);
            }
            (67..=81, Some((token, lease, _))) => {
                let key = self.client.keys().leader_key(&n);
                let put = TxnOp::put(
                    key.as_str(),
                    format!("{}-p{seq}", e.replace('/', ".")),
                    Some(PutOptions::new().with_lease(lease)),
                );
                match self.client.guarded_txn(&n, token, vec![put]).await {
                    Ok(_) => self.tally.add("proclaim"),
                    Err(Error::NotHolder { .. }) => self.tally.add("proclaim_not_holder"),
                    Err(err) => panic!("proclaim {e}: {err}"),
                }
            }
            (_, Some((token, _, _))) if !e.ends_with("/mix") => {
                // (No fence for an election run in both layouts at once: the
                // fence compares the single key, as ARCHITECTURE.md says.)
                match self.client.fence(&n, "r", token).await {
                    Ok(d) if d.accepted => self.tally.add("fence_accepted"),
                    Ok(_) => self.tally.add("fence_refused"),
                    Err(err) => panic!("fence {e}: {err}"),
                }
                match self.client.fence(&n, "r", token - 1).await {
                    Ok(d) if d.accepted => self.violation(format!(
                        "{e}: stale token {} accepted by the fence",
                        token - 1
                    )),
                    Ok(_) => self.tally.add("fence_stale_refused"),
                    Err(err) => panic!("fence {e}: {err}"),
                }
            }
            _ => self.tally.add("noop"),
        }
    }

    pub(crate) async fn queue_op(
        &self,
        e: &str,
        model: &mut HashMap<String, Vec<QueueCandidate>>,
        seq: u64,
        rng: &mut Rng,
    ) {
        let mut raw = self.raw.clone();
        let cands = model.entry(e.to_owned()).or_default();
        let durable: Vec<usize> = (0..cands.len())
            .filter(|&i| cands[i].expiring_at.is_none())
            .collect();
        let roll = rng.below(100);
        if roll < 50 || durable.is_empty() {
            // etcd's concurrency.Election campaign: a key named after the lease.
            let expiring = rng.chance(30);
            let lease = raw
                .lease_grant(if expiring { 2 } else { 600 }, None)
                .await
                .expect("grant")
                .id();
            let key = format!("election/{e}/{lease:x}");
            let txn = Txn::new()
                .when([Compare::create_revision(key.as_str(), CompareOp::Equal, 0)])
                .and_then([TxnOp::put(
                    key.as_str(),
                    format!("{}-q{seq}", e.replace('/', ".")),
                    Some(PutOptions::new().with_lease(lease)),
                )]);
            let resp = raw.txn(txn).await.expect("queue campaign");
            assert!(resp.succeeded());
            let token = resp.header().expect("header").revision();
            if expiring {
                self.intents
                    .lock()
                    .unwrap_or_else(|p| p.into_inner())
                    .insert((e.to_owned(), token), Intent::Expire);
            }
            self.tally.add(if expiring {
                "queue_campaign_expiring"
            } else {
                "queue_campaign"
            });
            cands.push(QueueCandidate {
                key,
                lease,
                token,
                expiring_at: expiring.then(|| Instant::now() + Duration::from_millis(1500)),
            });
        } else {
            let i = durable[rng.below(durable.len() as u64) as usize];
            let c = cands.remove(i);
            let revoke = rng.chance(50);
            // Recorded before the write: the watcher may look it up any time.
            self.intents
                .lock()
                .unwrap_or_else(|p| p.into_inner())
                .insert(
                    (e.to_owned(), c.token),
                    if revoke {
                        Intent::Revoke
                    } else {
                        Intent::Delete
                    },
                );
            if revoke {
                raw.lease_revoke(c.lease).await.expect("revoke");
                self.tally.add("queue_resign_revoke");
            } else {
                raw.delete(c.key.as_str(), None).await.expect("delete");
                self.tally.add("queue_delete");
            }
        }
    }
}
