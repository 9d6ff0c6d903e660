//! Issue 20, the campaign's edges: a wait whose outcome stays unknown
//! (answers slower than the request timeout) gives its key up within about
//! a TTL; election names that nest collide with etcd's own `Election`
//! layout and are refused.

mod support;

use std::time::{Duration, Instant};

use support::fixtures::{lead, name, tenure_client};
use support::holder::{ms, KeyLog};
use support::proxy::Proxy;
use support::Etcd;
use tenure::election::{CampaignOptions, Client, Ttl};

fn opts(ttl: u64) -> CampaignOptions {
    CampaignOptions::new(Ttl::from_secs(ttl).expect("valid ttl"))
}

/// Issue 20.10: answers slower than `--timeout` but faster than TTL/3 keep
/// the candidate's lease alive while every campaign txn times out, though
/// the first one committed: before the fix the key stayed, with no term
/// behind it, for as long as the slowness lasted, and nobody could take
/// over. Now the candidate revokes after about one TTL of not knowing and
/// starts again with a new lease; a waiting candidate takes over.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_wait_whose_outcome_stays_unknown_gives_the_key_up_after_about_a_ttl() {
    const TTL: u64 = 6;
    let etcd = Etcd::start().await;
    let proxy = Proxy::start(etcd.client_addr()).await;
    let direct = tenure_client(&[etcd.endpoint()]).await;
    let slow = Client::connect(&[proxy.endpoint()], "")
        .await
        .expect("connect through the proxy")
        .with_op_timeout(Duration::from_secs(1));
    let n = name("unknown-outcome");
    let a = lead(&direct, n.as_str(), "a", 30).await;
    let a_token = a.token();
    let keylog = KeyLog::start(etcd.client().await, "election/unknown-outcome").await;

    let waiter = {
        let n = n.clone();
        tokio::spawn(async move { slow.campaign_wait(&n, "b", &opts(TTL), None).await })
    };
    let mut raw = etcd.client().await;
    let deadline = Instant::now() + Duration::from_secs(10);
    while raw.leases().await.expect("leases").leases().len() < 2 {
        assert!(Instant::now() < deadline, "b never granted its lease");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    // b waits (its first attempt found a's key). From now on b's requests
    // reach etcd 1.5 s late: after its 1 s timeout, before its keepalive
    // gives up (TTL/3 = 2 s).
    tokio::time::sleep(Duration::from_millis(300)).await;
    proxy.set_delay_up(Duration::from_millis(1500));
    tokio::time::sleep(Duration::from_millis(100)).await;
    a.resign().await.expect("a resigns");
    let put = keylog
        .wait_for("b's txn committed", Duration::from_secs(10), |c| {
            !c.deleted && c.create_revision > a_token
        })
        .await;

    // A third candidate waits, straight to etcd.
    let third = {
        let (c, n) = (direct.clone(), n.clone());
        tokio::spawn(async move {
            c.campaign_wait(&n, "c", &opts(10), Some(Duration::from_secs(60)))
                .await
        })
    };
    let gone = keylog
        .wait_for(
            "b's key went (revoked after about a TTL of unknown outcomes)",
            Duration::from_secs(4 * TTL),
            |c| c.deleted && c.revision > put.revision,
        )
        .await;
    let held = ms(gone.at - put.at);
    println!(
        "[figure] answers 1.5 s late, --timeout 1 s, TTL {TTL} s: b's committed key with no \
         term behind it held {held:.0} ms, then revoked"
    );
    assert!(
        held < 2.0 * (TTL as f64) * 1000.0,
        "the key was held {held:.0} ms"
    );
    let c = tokio::time::timeout(Duration::from_secs(10), third)
        .await
        .expect("c took over after b's key went")
        .expect("task")
        .expect("c leads");
    assert!(c.token() > put.create_revision);
    waiter.abort();
    proxy.set_delay_up(Duration::ZERO);
}
