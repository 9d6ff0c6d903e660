//! The election core against a real etcd (started by tests/support).
// Tests, benches and their harness assert with unwrap/expect, spawn bare tasks
// and read the wall clock: the lints of Cargo.toml and clippy.toml hold src/.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::disallowed_methods)]

mod support;

use std::time::{Duration, Instant};

use etcd_client::{Compare, CompareOp, GetOptions, PutOptions, Txn, TxnOp};
use support::fixtures::{lead, name};
use support::prom::etcd_watchers;
use support::wait::wait_until_async;
use support::Etcd;
use tenure::election::{
    CampaignOptions, Campaigned, Client, ElectionName, Error, FenceReason, KeyLayout, LossReason,
    Ttl,
};
use tokio::io::{AsyncBufReadExt, BufReader};

fn opts(ttl: u64) -> CampaignOptions {
    CampaignOptions::new(Ttl::from_secs(ttl).expect("valid ttl"))
}

async fn client(etcd: &Etcd) -> Client {
    Client::connect(&[etcd.endpoint()], "")
        .await
        .expect("connect")
}

/// All keys in etcd, to show that a refused or invalid call wrote nothing.
async fn all_keys(etcd: &Etcd) -> Vec<String> {
    let mut c = etcd.client().await;
    let resp = c
        .get("", Some(GetOptions::new().with_all_keys().with_keys_only()))
        .await
        .expect("get all");
    resp.kvs()
        .iter()
        .map(|kv| String::from_utf8_lossy(kv.key()).into_owned())
        .collect()
}

// The seeds' TestEtcdLeaderElectionSingleLeader: many candidates race, one
// wins, the others are told who holds it; after a resign another takes over
// with a larger token.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn single_leader_among_racing_candidates() {
    let etcd = Etcd::start().await;
    let c = client(&etcd).await;
    let n = name("race");
    let mut tasks = Vec::new();
    for i in 0..16 {
        let c = c.clone();
        let n = n.clone();
        tasks.push(tokio::spawn(async move {
            let id = format!("candidate-{i}");
            (
                id.clone(),
                c.campaign(&n, &id, &opts(10)).await.expect("campaign"),
            )
        }));
    }
    let mut leaders = Vec::new();
    let mut told = Vec::new();
    for t in tasks {
        match t.await.expect("task") {
            (id, Campaigned::Leader(l)) => leaders.push((id, l)),
            (id, Campaigned::Held(h)) => told.push((id, h)),
        }
    }
    assert_eq!(leaders.len(), 1, "exactly one winner");
    let (winner_id, winner) = leaders.pop().expect("one leader");
    assert_eq!(told.len(), 15);
    for (id, h) in &told {
        assert_eq!(h.holder, winner_id, "{id} was told the wrong holder");
        assert_eq!(h.token, winner.token(), "{id} was told the wrong token");
    }
    let status = c.leader(&n).await.expect("leader").expect("someone leads");
    assert_eq!(status.leader.holder, winner_id);
    assert_eq!(status.leader.token, winner.token());
    assert_eq!(status.leader.layout, KeyLayout::Single);
    assert!(status
        .ttl_remaining_seconds
        .is_some_and(|t| t > 0 && t <= 10));

    let first_token = winner.token();
    winner.resign().await.expect("resign");
    let next = lead(&c, n.as_str(), "candidate-next", 10).await;
    assert!(
        next.token() > first_token,
        "tokens only grow: {} then {}",
        first_token,
        next.token()
    );
}

// A waiting candidate takes over within about one round trip of the
// deletion, because it watches the key instead of polling.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn waiting_candidate_takes_over_after_resign() {
    let etcd = Etcd::start().await;
    let c = client(&etcd).await;
    let n = name("takeover");
    let a = lead(&c, n.as_str(), "a", 10).await;
    let mut observer = c.observe(&n).await.expect("observe");
    assert_eq!(
        observer.next().await.flatten().map(|l| l.holder),
        Some("a".into())
    );

    let watchers = etcd_watchers(&etcd.endpoint()).await.unwrap_or(0.0);
    let waiter = {
        let (c, n) = (c.clone(), n.clone());
        tokio::spawn(async move {
            let l = c
                .campaign_wait(&n, "b", &opts(10), Some(Duration::from_secs(30)))
                .await;
            (Instant::now(), l)
        })
    };
    // Let the waiter fail its first attempt and start watching: its
    // lease shows up in etcd before its txn, its watch in etcd's count of
    // watchers after it.
    wait_for_leases(&etcd, 2).await;
    wait_until_async("the waiter watches", Duration::from_secs(10), || async {
        etcd_watchers(&etcd.endpoint()).await.unwrap_or(0.0) > watchers
    })
    .await;

    let a_token = a.token();
    a.resign().await.expect("resign");
    let deleted_seen = loop {
        match observer.next().await.expect("observer alive") {
            None => break Instant::now(),
            Some(l) if l.holder == "b" => panic!("b led before a's deletion was seen"),
            Some(_) => {}
        }
    };
    let (acquired_at, b) = waiter.await.expect("task");
    let b = b.expect("b leads");
    assert!(b.token() > a_token);
    let takeover = acquired_at.saturating_duration_since(deleted_seen);
    println!("takeover after resign: {takeover:?} after the observer saw the deletion");
    // client-go-style polling would take up to its 2 s retry period.
    // (1.5 s: a loaded machine, still short of the poller's 2 s.)
    assert!(
        takeover < Duration::from_millis(1_500),
        "takeover took {takeover:?}"
    );
}

async fn wait_for_leases(etcd: &Etcd, n: usize) {
    let mut c = etcd.client().await;
    let deadline = Instant::now() + Duration::from_secs(10);
    while c.leases().await.expect("leases").leases().len() < n {
        assert!(Instant::now() < deadline, "never saw {n} leases");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

// A holder that stops renewing (its process died) loses the key when its
// lease runs out, and a waiting candidate takes over, not before the TTL.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn lease_expiry_takeover() {
    let etcd = Etcd::start().await;
    let c = client(&etcd).await;
    let n = name("expiry");
    // The dead holder: the reference Go Campaign's txn, on a lease nobody renews.
    let mut raw = etcd.client().await;
    let lease = raw.lease_grant(2, None).await.expect("grant");
    let key = c.keys().leader_key(&n);
    let granted = Instant::now();
    let txn = Txn::new()
        .when([Compare::create_revision(key.as_str(), CompareOp::Equal, 0)])
        .and_then([TxnOp::put(
            key.as_str(),
            "dead-holder",
            Some(PutOptions::new().with_lease(lease.id())),
        )]);
    assert!(raw.txn(txn).await.expect("txn").succeeded());
    let dead = c.leader(&n).await.expect("leader").expect("leads");

    let b = c
        .campaign_wait(&n, "b", &opts(5), Some(Duration::from_secs(20)))
        .await
        .expect("b takes over");
    let after = granted.elapsed();
    println!("takeover after expiry: {after:?} after a 2 s lease was granted and never renewed");
    assert!(b.token() > dead.leader.token);
    assert!(
        after >= Duration::from_millis(1900),
        "took over before the lease could expire: {after:?}"
    );
    assert!(
        after < Duration::from_secs(8),
        "takeover too slow: {after:?}"
    );
}

// When etcd stops answering, the loss signal fires before etcd could have
// expired the lease: at TTL minus the margin after the last confirmed renewal.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn loss_signal_fires_before_lease_expiry_when_etcd_is_unreachable() {
    let etcd = Etcd::start().await;
    let c = client(&etcd).await;
    let n = name("unreachable");
    let l = lead(&c, n.as_str(), "holder", 4).await;
    // Let at least one renewal be confirmed first.
    let first = l.valid_until();
    while l.valid_until() == first {
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    etcd.stop();
    let stopped = Instant::now();
    let reason = tokio::time::timeout(Duration::from_secs(10), l.lost())
        .await
        .expect("loss signal fired");
    let fired = Instant::now();
    etcd.cont();
    let valid_until = l.valid_until();
    let earliest_expiry = valid_until + l.margin();
    println!(
        "loss signal after etcd froze: {:?}; it fired {:?} before the lease's earliest expiry",
        fired - stopped,
        earliest_expiry.saturating_duration_since(fired)
    );
    // The renewal deadline, or (when etcd froze between a confirmed renewal
    // and the key read that follows it) the key's own bound: one TTL after
    // its last confirmed read, which is then up to TTL/3 older than the
    // renewal, so it can fire a little before the renewal deadline. Both are
    // losses before etcd could expire the lease.
    match reason {
        LossReason::RenewalDeadline { .. } => {
            assert!(fired >= valid_until, "fired before the deadline")
        }
        LossReason::KeyUnconfirmed { .. } => {}
        other => panic!("{other:?}"),
    }
    assert!(
        fired < earliest_expiry,
        "fired after the lease could have expired"
    );
    assert!(fired - stopped < l.ttl(), "loss took longer than the TTL");
    assert!(l.is_lost().is_some());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn loss_signal_fires_on_depose_and_drop_resigns() {
    let etcd = Etcd::start().await;
    let c = client(&etcd).await;
    let n = name("depose");
    let l = lead(&c, n.as_str(), "victim", 10).await;
    let deposed = c
        .depose(&n)
        .await
        .expect("depose")
        .expect("someone was deposed");
    let deposed_at = std::time::Instant::now();
    assert_eq!(deposed.holder, "victim");
    let reason = tokio::time::timeout(Duration::from_secs(5), l.lost())
        .await
        .expect("loss fired");
    // The key watch sees the deletion at once; the key read every TTL/3
    // (3.3 s here) bounds it if the watch stalls.
    let noticed = deposed_at.elapsed();
    println!("[figure] library loss signal {noticed:?} after depose returned");
    assert!(noticed < Duration::from_millis(3400), "{noticed:?}");
    assert!(
        matches!(reason, LossReason::KeyDeleted { .. }),
        "{reason:?}"
    );
    assert!(c.leader(&n).await.expect("leader").is_none());
    assert!(
        c.depose(&n).await.expect("depose").is_none(),
        "nothing left to depose"
    );

    // Dropping a leadership resigns it in the background.
    let n2 = name("dropped");
    let l2 = lead(&c, n2.as_str(), "dropper", 30).await;
    let mut observer = c.observe(&n2).await.expect("observe");
    assert!(observer.next().await.flatten().is_some());
    drop(l2);
    let next = tokio::time::timeout(Duration::from_secs(5), observer.next())
        .await
        .expect("deletion seen well before the 30 s TTL");
    assert_eq!(next, Some(None));
}

/// The fence's flat fast path requires no token floor; with one (etcd
/// restored), every check still decides as before: the first accepted
/// check falls back to the full txn, the client then carries the floor's
/// branch, and every refusal (below the floor, a stale token, an ended
/// term) stays one. A client that never met the floor decides the same.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_fence_decides_the_same_with_a_token_floor() {
    let etcd = Etcd::start().await;
    let c = client(&etcd).await;
    let n = name("floored");
    let a = lead(&c, n.as_str(), "a", 10).await;
    let t_a = a.token();
    // Before any floor: the flat path, no holder read.
    let d = a.fence("db").await.expect("fence");
    assert!(d.accepted && d.current_token == Some(t_a), "{d:?}");
    assert_eq!(c.raise_floor(t_a - 1).await.expect("floor"), t_a - 1);
    for i in 0..3 {
        let d = a.fence("db").await.expect("fence");
        assert!(d.accepted, "check {i} above the floor: {d:?}");
        assert_eq!((d.current_token, d.stored_token), (Some(t_a), Some(t_a)));
    }
    // Below the floor: refused, nothing written.
    match c.fence(&n, "db", t_a - 1).await {
        Err(Error::BelowFloor { floor, .. }) => assert_eq!(floor, t_a - 1),
        other => panic!("below the floor: {other:?}"),
    }
    c.depose(&n).await.expect("depose");
    let b = lead(&c, n.as_str(), "b", 10).await;
    // A client that has not met the floor yet: falls back, decides alike.
    let fresh = client(&etcd).await;
    let ended = fresh.fence(&n, "cache", t_a).await.expect("fence");
    assert_eq!(ended.reason, Some(FenceReason::TermEnded), "{ended:?}");
    for c in [&c, &fresh] {
        let d = c.fence(&n, "db", b.token()).await.expect("fence");
        assert!(d.accepted, "{d:?}");
        let stale = c.fence(&n, "db", t_a).await.expect("fence");
        assert_eq!(stale.reason, Some(FenceReason::StaleToken), "{stale:?}");
        assert_eq!(stale.current_holder.as_deref(), Some("b"));
    }
    // The floor raised to the current term's own token: refused by every
    // client, one that never met a floor too (its flat path compares it).
    assert_eq!(c.raise_floor(b.token()).await.expect("floor"), b.token());
    let never_met = client(&etcd).await;
    for c in [&c, &fresh, &never_met] {
        match c.fence(&n, "db", b.token()).await {
            Err(Error::BelowFloor { floor, .. }) => assert_eq!(floor, b.token()),
            other => panic!("the current token at the floor: {other:?}"),
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn shared_fence_refuses_deposed_leader_and_records_refusals() {
    let etcd = Etcd::start().await;
    let c = client(&etcd).await;
    let n = name("story");
    let nobody = c.fence(&n, "db", 1).await.expect("fence");
    assert!(!nobody.accepted);
    assert_eq!(nobody.reason, Some(FenceReason::NoLeader));

    let old = lead(&c, n.as_str(), "scene-01", 10).await;
    let t_old = old.token();
    for _ in 0..2 {
        let d = old.fence("db").await.expect("fence");
        assert!(d.accepted, "same term, repeated write: {d:?}");
        assert_eq!(d.current_token, Some(t_old));
    }
    // t2: the old term ends and a new one begins.
    c.depose(&n).await.expect("depose");
    let new = lead(&c, n.as_str(), "scene-02", 10).await;
    let t_new = new.token();
    assert!(t_new > t_old);

    // A resource that has not seen the new token yet still refuses the old one.
    let fresh = c.fence(&n, "cache", t_old).await.expect("fence");
    assert!(!fresh.accepted);
    assert_eq!(fresh.reason, Some(FenceReason::TermEnded));
    assert_eq!(fresh.current_token, Some(t_new));

    let d = new.fence("db").await.expect("fence");
    assert!(d.accepted);
    assert_eq!(d.stored_token, Some(t_old));
    let stale = c.fence(&n, "db", t_old).await.expect("fence");
    assert!(!stale.accepted);
    assert_eq!(stale.reason, Some(FenceReason::StaleToken));
    assert_eq!(stale.stored_token, Some(t_new));
    assert_eq!(stale.current_holder.as_deref(), Some("scene-02"));
    assert!(
        new.fence("db").await.expect("fence").accepted,
        "new token still accepted"
    );

    // The refusal is in etcd for every watcher.
    let mut raw = etcd.client().await;
    let rec = raw
        .get(c.keys().refusal_key(&n, "db"), None)
        .await
        .expect("get");
    let value: serde_json::Value = serde_json::from_slice(rec.kvs()[0].value()).expect("json");
    assert_eq!(value["token"], t_old);
    assert_eq!(value["reason"], "stale_token");
    let fence = raw
        .get(c.keys().fence_key(&n, "db"), None)
        .await
        .expect("get");
    assert_eq!(
        fence.kvs()[0].value_str().expect("utf8"),
        format!("{t_new:020}")
    );

    // Guarded writes follow the same rule.
    let put = |v: &str| vec![TxnOp::put("app/state", v, None)];
    assert!(new.guarded_txn(put("new")).await.is_ok());
    match c.guarded_txn(&n, t_old, put("old")).await {
        Err(Error::NotHolder {
            current: Some(cur), ..
        }) => assert_eq!(cur.token, t_new),
        other => panic!("stale guarded write not refused: {other:?}"),
    }
    let state = raw.get("app/state", None).await.expect("get");
    assert_eq!(state.kvs()[0].value(), b"new");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bad_input_is_refused_and_writes_nothing() {
    let etcd = Etcd::start().await;
    let c = client(&etcd).await;
    for bad in ["", "../x", "a//b", "a\0b", "<script>"] {
        assert!(
            matches!(ElectionName::new(bad), Err(Error::InvalidName { .. })),
            "{bad:?}"
        );
    }
    assert!(matches!(
        ElectionName::new(&"x".repeat(10_000)),
        Err(Error::InvalidName { .. })
    ));
    assert!(matches!(Ttl::from_secs(0), Err(Error::InvalidTtl(_))));
    assert!(matches!(Ttl::from_secs(1), Err(Error::InvalidTtl(_))));
    assert!(matches!(
        Ttl::from_duration(Duration::from_millis(1500)),
        Err(Error::InvalidTtl(_))
    ));
    assert!(matches!(
        Ttl::from_duration(Duration::from_millis(500)),
        Err(Error::InvalidTtl(_))
    ));

    let n = name("guarded");
    let before = all_keys(&etcd).await;
    assert!(matches!(
        c.campaign(&n, "", &opts(5)).await,
        Err(Error::InvalidCandidate(_))
    ));
    assert!(matches!(
        c.fence(&n, "../etc", 5).await,
        Err(Error::InvalidResource { .. })
    ));
    assert!(matches!(
        c.fence(&n, "db", 0).await,
        Err(Error::InvalidToken(0))
    ));
    assert!(matches!(
        c.resign(&n, 12345).await,
        Err(Error::NotHolder { current: None, .. })
    ));
    assert_eq!(all_keys(&etcd).await, before, "invalid calls wrote nothing");

    let l = lead(&c, n.as_str(), "holder", 10).await;
    match c.resign(&n, l.token() + 1).await {
        Err(Error::NotHolder {
            current: Some(cur),
            token,
            ..
        }) => {
            assert_eq!(cur.token, l.token());
            assert_eq!(token, l.token() + 1);
        }
        other => panic!("wrong token resigned: {other:?}"),
    }
    assert!(
        l.is_lost().is_none(),
        "a wrong-token resign must not end the term"
    );
    assert_eq!(
        c.leader(&n)
            .await
            .expect("leader")
            .expect("still leads")
            .leader
            .token,
        l.token()
    );
    let resigned = c.resign(&n, l.token()).await.expect("right token resigns");
    assert_eq!(resigned.holder, "holder");
    let reason = tokio::time::timeout(Duration::from_secs(5), l.lost())
        .await
        .expect("lost");
    assert!(
        matches!(
            reason,
            LossReason::KeyDeleted { .. } | LossReason::LeaseGone
        ),
        "{reason:?}"
    );
}

// `etcdctl elect` (etcd's own queue layout) is followed by leader/observe.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn follows_an_election_run_by_etcdctl_elect() {
    let etcd = Etcd::start().await;
    let c = client(&etcd).await;
    let n = name("interop");
    let key = c.keys().leader_key(&n);

    let mut alice = etcdctl_elect(&etcd, &key, "alice");
    let mut alice_out = BufReader::new(alice.stdout.take().expect("stdout")).lines();
    // etcdctl prints the leader key, then the value, once elected.
    let first = tokio::time::timeout(Duration::from_secs(10), alice_out.next_line())
        .await
        .expect("alice elected")
        .expect("read")
        .expect("line");
    assert!(first.starts_with(&format!("{key}/")), "{first}");

    let status = c.leader(&n).await.expect("leader").expect("alice leads");
    assert_eq!(status.leader.holder, "alice");
    assert_eq!(status.leader.layout, KeyLayout::Queue);
    assert_eq!(status.leader.key, first);
    let mut observer = c.observe(&n).await.expect("observe");
    assert_eq!(
        observer.next().await.flatten().map(|l| l.holder),
        Some("alice".into())
    );

    let mut bob = etcdctl_elect(&etcd, &key, "bob");
    wait_for_leases(&etcd, 2).await;
    // bob queues behind alice: still alice.
    assert_eq!(
        c.leader(&n)
            .await
            .expect("leader")
            .expect("leads")
            .leader
            .holder,
        "alice"
    );

    // alice resigns (etcdctl resigns on SIGINT).
    let pid = nix::unistd::Pid::from_raw(alice.id().expect("pid") as i32);
    nix::sys::signal::kill(pid, nix::sys::signal::Signal::SIGINT).expect("signal");
    let next = loop {
        let change = tokio::time::timeout(Duration::from_secs(10), observer.next())
            .await
            .expect("change seen")
            .expect("observer alive");
        if let Some(l) = change {
            break l;
        }
    };
    assert_eq!(next.holder, "bob");
    assert_eq!(next.layout, KeyLayout::Queue);
    assert!(next.token > status.leader.token);
    let _ = alice.wait().await;
    let _ = bob.kill().await;
}

fn etcdctl_elect(etcd: &Etcd, key: &str, value: &str) -> tokio::process::Child {
    etcd.etcdctl_elect(key, value)
}
