//! End causes against a real etcd, with short TTLs: kept-alive leases revoked
//! by their holder at random moments must never be recorded `expired`, and
//! leases left to run out never `resigned` or `deleted`. A cause is right or
//! `unknown`. The figures (how many were right, how many unknown) are
//! printed and kept in RELIABILITY.md.

mod support;

use std::collections::HashMap;
use std::time::Duration;

use etcd_client::PutOptions;
use support::Etcd;
use tenure::election::Client;
use tenure::events::{EndCause, EventKind, Update};
use tenure::watch::{WatchConfig, Watcher};
use tokio::sync::mpsc;

const TTLS: [i64; 4] = [2, 3, 5, 10];
const REVOKED_PER_TTL: usize = 10;
const EXPIRED_PER_TTL: usize = 5;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Truth {
    Revoked,
    Expired,
}

/// A small deterministic generator (the seed is printed).
struct Rng(u64);
impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0
    }
    fn between_ms(&mut self, lo: u64, hi: u64) -> u64 {
        lo + self.next() % (hi - lo).max(1)
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn short_ttl_causes_are_right_or_unknown_never_wrong() {
    let etcd = Etcd::start().await;
    let c = Client::connect(&[etcd.endpoint()], "")
        .await
        .expect("connect");
    let (tx, mut rx) = mpsc::channel(4096);
    let watcher = Watcher::new(c.clone(), WatchConfig::default());
    let task = tokio::spawn(async move {
        let _ = watcher.run(None, tx).await;
    });
    let seed = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_nanos() as u64)
        .unwrap_or(1)
        | 1;
    println!("seed {seed}");
    let mut rng = Rng(seed);

    let mut truth: HashMap<String, (i64, Truth)> = HashMap::new();
    let mut holders = tokio::task::JoinSet::new();
    for ttl in TTLS {
        for i in 0..REVOKED_PER_TTL + EXPIRED_PER_TTL {
            let kind = if i < REVOKED_PER_TTL {
                Truth::Revoked
            } else {
                Truth::Expired
            };
            let name = format!("c{ttl}-{i}");
            truth.insert(name.clone(), (ttl, kind));
            // Revoked at a random moment between 0.3 s and 2.5 TTLs.
            let revoke_after = Duration::from_millis(rng.between_ms(300, ttl as u64 * 2500));
            let start_after = Duration::from_millis(rng.between_ms(0, 2000));
            let mut etcd_c = etcd.client().await;
            holders.spawn(async move {
                tokio::time::sleep(start_after).await;
                let lease = etcd_c.lease_grant(ttl, None).await.expect("grant").id();
                etcd_c
                    .put(
                        format!("election/{name}"),
                        "holder",
                        Some(PutOptions::new().with_lease(lease)),
                    )
                    .await
                    .expect("put");
                if kind == Truth::Expired {
                    return;
                }
                // Kept alive every TTL/3, as Go's client does, then revoked.
                let (mut keeper, mut stream) =
                    etcd_c.lease_keep_alive(lease).await.expect("keepalive");
                let until = tokio::time::Instant::now() + revoke_after;
                let every = Duration::from_millis(ttl as u64 * 1000 / 3);
                loop {
                    let next = tokio::time::Instant::now() + every;
                    if next >= until {
                        tokio::time::sleep_until(until).await;
                        break;
                    }
                    tokio::time::sleep_until(next).await;
                    keeper.keep_alive().await.expect("keepalive sent");
                    let _ = stream.message().await;
                }
                etcd_c.lease_revoke(lease).await.expect("revoke");
            });
        }
    }
    while let Some(r) = holders.join_next().await {
        r.expect("holder task");
    }

    let mut causes: HashMap<String, EndCause> = HashMap::new();
    let deadline = tokio::time::Instant::now() + Duration::from_secs(30);
    while causes.len() < truth.len() {
        let u = tokio::time::timeout_at(deadline, rx.recv())
            .await
            .unwrap_or_else(|_| panic!("ends seen: {} of {}", causes.len(), truth.len()))
            .expect("watcher alive");
        if let Update::Batch(b) = u {
            for e in b.events {
                if let EventKind::TermEnded { cause, .. } = e.kind {
                    causes.insert(e.election, cause);
                }
            }
        }
    }
    task.abort();

    let mut contradictions = Vec::new();
    println!("ttl  truth    right  unknown  wrong");
    for ttl in TTLS {
        for kind in [Truth::Revoked, Truth::Expired] {
            let (mut right, mut unknown, mut wrong) = (0, 0, 0);
            for (name, (t, k)) in &truth {
                if *t != ttl || *k != kind {
                    continue;
                }
                let cause = causes[name];
                match (kind, cause) {
                    (_, EndCause::Unknown) => unknown += 1,
                    (Truth::Revoked, EndCause::Resigned) | (Truth::Expired, EndCause::Expired) => {
                        right += 1
                    }
                    _ => {
                        wrong += 1;
                        contradictions.push((name.clone(), kind, cause));
                    }
                }
            }
            println!("{ttl:>3}  {kind:?}  {right:>5}  {unknown:>7}  {wrong:>5}");
        }
    }
    assert!(
        contradictions.is_empty(),
        "causes contradicting what happened (seed {seed}): {contradictions:?}"
    );
}
