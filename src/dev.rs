//! The demo fleet of `tenure dev`: elections whose candidates campaign,
//! renew, resign, crash, get deposed and proclaim, one in etcd's own queue
//! layout, one of another system (`etcdctl elect`), and one that replays the
//! split-brain story t0..t4 every few minutes with two `tenure campaign`
//! processes, the first frozen past its TTL: its acting outlasts its term
//! (an overlap) and its writes are refused. It uses the election core, the
//! CLI and etcdctl exactly as a user's service would.

mod processes;

pub use processes::{Programs, ELECT_PREFIX};

use std::time::Duration;

use etcd_client::PutOptions;
use tokio::task::JoinHandle;
use tokio::time::sleep;

use crate::election::keys::lease_hex;
use crate::election::{CampaignOptions, Client, ElectionName, Ttl};

/// The running fleet; dropping it stops every candidate.
pub struct Fleet {
    tasks: Vec<JoinHandle<()>>,
}

impl Drop for Fleet {
    fn drop(&mut self) {
        for t in &self.tasks {
            t.abort();
        }
    }
}

/// A small deterministic generator (xorshift), so the fleet needs no
/// randomness crate.
struct Dice(u64);

impl Dice {
    fn new(seed: &str) -> Self {
        let mut h = 0xcbf2_9ce4_8422_2325_u64;
        for b in seed.bytes() {
            h = (h ^ u64::from(b)).wrapping_mul(0x0100_0000_01b3);
        }
        let t = crate::events::now_ms() as u64;
        Dice((h ^ t) | 1)
    }

    fn secs(&mut self, lo: u64, hi: u64) -> Duration {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        let span = (hi - lo).max(1) * 1000;
        Duration::from_millis(lo * 1000 + self.0 % span)
    }
}

fn name(s: &str) -> ElectionName {
    // The fleet's names are constants and valid.
    ElectionName::new(s).unwrap_or_else(|_| panic!("invalid demo election name {s}"))
}

fn ttl(secs: u64) -> Ttl {
    Ttl::from_secs(secs).unwrap_or_else(|_| panic!("invalid demo ttl {secs}"))
}

/// Starts the fleet; the story replays every `story_every`.
pub fn start(client: Client, programs: Programs, story_every: Duration) -> Fleet {
    let mut tasks = Vec::new();
    for id in ["pay-a", "pay-b", "pay-c"] {
        tasks.push(crate::task::spawn(
            "demo resigner",
            resigner(client.clone(), "payments/primary", id),
        ));
    }
    for id in ["indexer-1", "indexer-2"] {
        tasks.push(crate::task::spawn(
            "demo crasher",
            crasher(client.clone(), "search/indexer", id),
        ));
    }
    tasks.push(crate::task::spawn(
        "demo proclaimer",
        proclaimer(client.clone(), "billing/reconciler", "reconciler-1"),
    ));
    tasks.push(crate::task::spawn(
        "demo proclaimer",
        proclaimer(client.clone(), "billing/reconciler", "reconciler-2"),
    ));
    tasks.push(crate::task::spawn(
        "demo operator",
        operator(client.clone(), "billing/reconciler"),
    ));
    for id in ["sched-a", "sched-b", "sched-c"] {
        tasks.push(crate::task::spawn(
            "demo queue candidate",
            queue_candidate(client.clone(), "orders/scheduler", id),
        ));
    }
    for id in ["cron-1", "cron-2"] {
        tasks.push(crate::task::spawn(
            "demo etcdctl elect",
            processes::elect_candidate(programs.clone(), id),
        ));
    }
    tasks.push(crate::task::spawn(
        "demo story",
        story(client, programs, story_every),
    ));
    Fleet { tasks }
}

/// Waits for leadership, holds it for a while, resigns, rests.
async fn resigner(client: Client, election: &'static str, id: &'static str) {
    let mut dice = Dice::new(id);
    let opts = CampaignOptions::new(ttl(5));
    loop {
        match client.campaign_wait(&name(election), id, &opts, None).await {
            Ok(l) => {
                tokio::select! {
                    _ = sleep(dice.secs(8, 30)) => {}
                    _ = l.lost() => {}
                }
                let _ = l.resign().await;
            }
            Err(e) => tracing::debug!(error = %e, id, "demo campaign failed"),
        }
        sleep(dice.secs(1, 6)).await;
    }
}

/// Leads with a lease it renews itself, then "crashes": stops renewing, so
/// the lease expires and the other candidate takes over.
async fn crasher(client: Client, election: &'static str, id: &'static str) {
    let mut dice = Dice::new(id);
    let n = name(election);
    loop {
        match client
            .acquire_detached(&n, id, ttl(3), Some(Duration::from_secs(120)))
            .await
        {
            Ok(Ok(won)) => {
                let crash_after = tokio::time::Instant::now() + dice.secs(15, 45);
                while tokio::time::Instant::now() < crash_after {
                    sleep(Duration::from_secs(1)).await;
                    if client.renew(&n, won.token, won.lease_id).await.is_err() {
                        break;
                    }
                }
                // Crashed: no resign, no renewal. Come back later.
                sleep(dice.secs(8, 20)).await;
            }
            Ok(Err(_held)) => {}
            Err(e) => {
                tracing::debug!(error = %e, id, "demo campaign failed");
                sleep(Duration::from_secs(2)).await;
            }
        }
    }
}

/// Leads for long stretches and proclaims progress in its value.
async fn proclaimer(client: Client, election: &'static str, id: &'static str) {
    let mut dice = Dice::new(id);
    let opts = CampaignOptions::new(ttl(10));
    loop {
        match client.campaign_wait(&name(election), id, &opts, None).await {
            Ok(l) => {
                let mut batch = 0;
                loop {
                    tokio::select! {
                        _ = sleep(dice.secs(10, 25)) => {}
                        _ = l.lost() => break,
                    }
                    batch += 1;
                    if l.proclaim(&format!("{id} (batch {batch})")).await.is_err() {
                        break;
                    }
                }
                let _ = l.resign().await;
            }
            Err(e) => tracing::debug!(error = %e, id, "demo campaign failed"),
        }
        sleep(dice.secs(1, 4)).await;
    }
}

/// An operator who deposes the leader now and then.
async fn operator(client: Client, election: &'static str) {
    let mut dice = Dice::new("operator");
    loop {
        sleep(dice.secs(60, 120)).await;
        let _ = client.depose(&name(election)).await;
    }
}

/// A candidate in etcd's own queue layout (`concurrency.Election`): a key
/// `election/<name>/<lease-hex>` on its own lease; the lowest CreateRevision
/// leads. It leaves the queue after a while and rejoins at the back.
async fn queue_candidate(client: Client, election: &'static str, id: &'static str) {
    let mut dice = Dice::new(id);
    let mut etcd = client.etcd();
    loop {
        let Ok(lease) = etcd.lease_grant(10, None).await else {
            sleep(Duration::from_secs(2)).await;
            continue;
        };
        let key = format!(
            "{}/{}",
            client.keys().leader_key(&name(election)),
            lease_hex(lease.id())
        );
        if etcd
            .put(key, id, Some(PutOptions::new().with_lease(lease.id())))
            .await
            .is_ok()
        {
            if let Ok((mut keeper, mut stream)) = etcd.lease_keep_alive(lease.id()).await {
                let leave_at = tokio::time::Instant::now() + dice.secs(20, 60);
                while tokio::time::Instant::now() < leave_at {
                    sleep(Duration::from_secs(3)).await;
                    if keeper.keep_alive().await.is_err() || stream.message().await.is_err() {
                        break;
                    }
                }
            }
        }
        let _ = etcd.lease_revoke(lease.id()).await;
        sleep(dice.secs(2, 8)).await;
    }
}

/// The split-brain story, replayed every `every` by real `tenure campaign`
/// processes ([`processes::story`]).
async fn story(client: Client, programs: Programs, every: Duration) {
    sleep(Duration::from_secs(10)).await;
    loop {
        if let Err(e) = processes::story(&client, &programs).await {
            tracing::warn!(error = %e, "demo story: a holder did not start");
        }
        sleep(every).await;
    }
}
