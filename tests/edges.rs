//! Issue 20, the campaign's edges: a wait whose outcome stays unknown
//! (answers slower than the request timeout) gives its key up within about
//! a TTL; election names that nest collide with etcd's own `Election`
//! layout and are refused.

mod support;

use std::time::{Duration, Instant};

use support::fixtures::{lead, name, run, tenure_client, text};
use support::holder::{ms, KeyLog};
use support::proxy::Proxy;
use support::{Etcd, Serve};
use tenure::election::{CampaignOptions, Client, Error, Ttl};
use tenure::events::EventKind;
use tenure::history::{Query, Reader};

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

/// Every key in etcd, with its lease, to show what a refused campaign left.
async fn keys_and_leases(etcd: &Etcd) -> (Vec<String>, usize) {
    let mut raw = etcd.client().await;
    let all = raw
        .get(
            "",
            Some(
                etcd_client::GetOptions::new()
                    .with_all_keys()
                    .with_keys_only(),
            ),
        )
        .await
        .expect("get all");
    let keys = all
        .kvs()
        .iter()
        .map(|kv| String::from_utf8_lossy(kv.key()).into_owned())
        .filter(|k| !k.starts_with("election/~end/"))
        .collect();
    let leases = raw.leases().await.expect("leases").leases().len();
    (keys, leases)
}

/// Issue 20.6: `tenure campaign orders/primary` put its key under etcd's
/// own `Election` prefix of `orders`, where `etcdctl elect election/orders`
/// takes it for the oldest candidate and never wins, while `tenure leader
/// orders` names the etcdctl candidate. A campaign whose name is a path
/// prefix of another election's keys, or lies under one, in either layout,
/// is refused now: exit 2, one line naming the colliding key, nothing left
/// behind.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_campaign_whose_name_nests_with_another_election_is_refused() {
    let etcd = Etcd::start().await;
    let c = tenure_client(&[etcd.endpoint()]).await;
    let primary = lead(&c, "orders/primary", "p", 30).await;
    let before = keys_and_leases(&etcd).await;

    // `orders` is a path prefix of orders/primary's key, in both layouts,
    // waiting or not.
    for extra in [&[][..], &["--queue"], &["--wait", "--wait-timeout", "5"]] {
        let mut args = vec!["campaign", "orders", "--ttl", "5"];
        args.extend_from_slice(extra);
        args.extend(["--", "true"]);
        let out = run(&etcd, &args).await;
        let err = text(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{args:?}: {err}");
        assert_eq!(err.trim().lines().count(), 1, "{args:?}: one line: {err}");
        assert!(err.contains("\"election/orders/primary\""), "{err}");
        assert_eq!(
            keys_and_leases(&etcd).await,
            before,
            "{args:?} left nothing"
        );
    }

    // Under an election held in etcd's own layout (etcdctl elect), in
    // either of tenure's layouts: refused, naming etcdctl's key.
    primary.resign().await.expect("resign");
    let mut alice = etcd.etcdctl_elect("election/orders", "alice");
    let mut lines = tokio::io::AsyncBufReadExt::lines(tokio::io::BufReader::new(
        alice.stdout.take().expect("stdout"),
    ));
    let elected = tokio::time::timeout(Duration::from_secs(10), lines.next_line())
        .await
        .expect("alice elected")
        .expect("stdout")
        .expect("a line");
    assert!(elected.starts_with("election/orders/"), "{elected}");
    let before = keys_and_leases(&etcd).await;
    for extra in [&[][..], &["--queue"]] {
        let mut args = vec!["campaign", "orders/primary"];
        args.extend_from_slice(extra);
        args.extend(["--", "true"]);
        let out = run(&etcd, &args).await;
        let err = text(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{args:?}: {err}");
        assert!(err.contains(&format!("{elected:?}")), "{err}");
        assert_eq!(
            keys_and_leases(&etcd).await,
            before,
            "{args:?} left nothing"
        );
    }
    // The library says so, typed; a sibling or a longer name that shares
    // only a prefix of bytes is no collision.
    let refused = c
        .campaign_wait(
            &name("orders/x"),
            "x",
            &opts(5),
            Some(Duration::from_secs(5)),
        )
        .await;
    assert!(
        matches!(&refused, Err(Error::NameCollision { key, .. }) if *key == elected),
        "{:?}",
        refused.err()
    );
    lead(&c, "orders-primary", "ok", 5).await;
    let _ = alice.kill().await;
}

async fn page(serve: &Serve, election: &str) -> String {
    reqwest::get(serve.url(&format!("/elections/{}", election.replace('/', "%2F"))))
        .await
        .expect("page")
        .text()
        .await
        .expect("body")
}

fn collisions(db: &std::path::Path) -> Vec<(String, String)> {
    let reader = Reader::open(db).expect("reader");
    let mut found: Vec<(String, String)> = reader
        .events(None, &Query::default())
        .expect("events")
        .into_iter()
        .filter_map(|e| match e.kind {
            EventKind::NameCollision { other } => Some((e.election, other)),
            _ => None,
        })
        .collect();
    found.sort();
    found
}

/// Issue 20.6, the server's side: collisions tenure cannot refuse (keys
/// written by older tenure or by other clients) are recorded as an event
/// of each election, once, whether they were there when `serve` started
/// or arose while it ran, and the election pages show them.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn serve_records_and_shows_name_collisions() {
    let etcd = Etcd::start().await;
    let dir = tempfile::tempdir().expect("tempdir");
    let db = dir.path().join("history.db");
    let mut raw = etcd.client().await;
    // Before serve: an older tenure held jobs and jobs/nightly.
    raw.put("election/jobs", "old-a", None).await.expect("put");
    raw.put("election/jobs/nightly", "old-b", None)
        .await
        .expect("put");
    let serve = Serve::start(&[etcd.endpoint()], &db, &[], &[]).await;
    serve.ready().await;
    // While it runs: etcdctl elect leads reports, an older tenure's
    // reports/daily arrives.
    let mut alice = etcd.etcdctl_elect("election/reports", "alice");
    let mut lines = tokio::io::AsyncBufReadExt::lines(tokio::io::BufReader::new(
        alice.stdout.take().expect("stdout"),
    ));
    tokio::time::timeout(Duration::from_secs(10), lines.next_line())
        .await
        .expect("alice elected")
        .expect("stdout");
    let rev = raw
        .put("election/reports/daily", "old-c", None)
        .await
        .expect("put")
        .header()
        .expect("header")
        .revision();
    serve.caught_up(rev).await;
    for (election, other) in [
        ("jobs", "jobs/nightly"),
        ("jobs/nightly", "jobs"),
        ("reports", "reports/daily"),
        ("reports/daily", "reports"),
    ] {
        let body = page(&serve, election).await;
        assert!(
            body.contains("name_collision")
                && body.contains(&format!("name collision with election {other}:")),
            "the page of {election} shows its collision with {other}"
        );
    }
    assert_eq!(serve.stop().await, Some(0));
    // A restart records nothing twice.
    let serve = Serve::start(&[etcd.endpoint()], &db, &[], &[]).await;
    serve.ready().await;
    serve.caught_up(rev).await;
    assert_eq!(serve.stop().await, Some(0));
    assert_eq!(
        collisions(&db),
        [
            ("jobs".to_string(), "jobs/nightly".to_string()),
            ("jobs/nightly".to_string(), "jobs".to_string()),
            ("reports".to_string(), "reports/daily".to_string()),
            ("reports/daily".to_string(), "reports".to_string()),
        ]
    );
    let _ = alice.kill().await;
}
