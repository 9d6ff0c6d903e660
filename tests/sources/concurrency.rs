//! Keys without a lease under a `concurrency` prefix: a config key is no
//! candidate; one below the candidates blocks the election as etcd's
//! `Campaign` waits for it.

use std::time::Duration;

use etcd_client::{Client as EtcdClient, GetOptions};

use crate::support::fixtures::{tenure, text};
use crate::support::{Etcd, Serve};
use crate::{created, etcdctl, events_of, get_json, now_revision, terms, Elect, WAIT};

/// etcd's `concurrency` puts every candidate under its session's lease: a
/// config key put without one under the prefix (`etcdctl put`) is no
/// election and no candidate, its value never a holder or a label in the
/// unauthenticated `/metrics`, counted as an ignored key, and so is its
/// deletion; a real `etcdctl elect` beside it is unaffected.
#[tokio::test]
async fn a_config_key_under_a_concurrency_prefix_is_no_candidate() {
    let etcd = Etcd::start().await;
    let mut raw = etcd.client().await;
    let dir = tempfile::tempdir().expect("tempdir");
    let db = dir.path().join("history.db");
    // One config key before serve starts (read in its snapshot), one after.
    etcdctl(
        &etcd,
        &["put", "/app/cfg/url", "postgres://snapshot-secret"],
    )
    .await;
    // Holders shown as labels, as an operator may ask: the config values
    // must not be among them.
    let args = ["--source", "concurrency:/app/", "--source-holder-labels"];
    let serve = Serve::start(&[etcd.endpoint()], &db, &args, &[]).await;
    serve.ready().await;
    let mut a = Elect::start(&etcd, "/app/jobs", "A");
    a.elected().await;
    etcdctl(&etcd, &["put", "/app/jobs/db", "postgres://live-secret"]).await;
    let rev = now_revision(&mut raw).await;
    serve.caught_up(rev).await;
    let ignored = "tenure_watch_ignored_keys_total";
    assert_eq!(serve.metric(ignored).await, Some(2.0));

    let (status, list) = get_json(&serve, "/api/v1/elections").await;
    assert_eq!(status, 200);
    let names: Vec<&str> = list["elections"]
        .as_array()
        .expect("elections")
        .iter()
        .map(|e| e["name"].as_str().expect("name"))
        .collect();
    assert_eq!(names, ["/app/jobs"], "{list}");
    let (_, detail) = get_json(&serve, "/api/v1/elections/%2Fapp%2Fjobs").await;
    assert_eq!(detail["holder"], "A", "{detail}");
    // The one term etcd's own key implies: the elect candidate's.
    let keys = created(&mut raw, "/app/jobs/").await;
    let elect_key: Vec<_> = keys.iter().filter(|(k, _)| k != "/app/jobs/db").collect();
    let jobs = terms(&serve, "/app/jobs").await;
    assert_eq!(jobs, vec![(elect_key[0].1, "A".to_owned(), None)]);
    let scrape = serve.metrics().await;
    assert!(!scrape.contains("postgres://"), "{scrape}");
    assert!(scrape.contains("holder=\"A\""), "{scrape}");

    // The config keys' deletion: ignored too, the election unaffected.
    etcdctl(&etcd, &["del", "/app/jobs/db"]).await;
    etcdctl(&etcd, &["del", "/app/cfg/url"]).await;
    let rev = now_revision(&mut raw).await;
    serve.caught_up(rev).await;
    assert_eq!(serve.metric(ignored).await, Some(4.0));
    let (_, detail) = get_json(&serve, "/api/v1/elections/%2Fapp%2Fjobs").await;
    assert_eq!(detail["holder"], "A", "{detail}");
    assert_eq!(terms(&serve, "/app/jobs").await, jobs);
    a.resign().await;
    serve.stop().await;
}

/// etcd's `Campaign` (`etcdctl elect`) waits until every key of its
/// election's prefix created before its own is deleted, with a lease or
/// without: a lease-less key below the candidates blocks the election.
/// Read in serve's snapshot (`/app/one`) or live (`/app/two`), tenure names
/// no leader while etcdctl itself prints nothing; once the key is deleted,
/// etcdctl prints its key and tenure names it, its token that key's
/// CreateRevision. The lease-less key's value is shown nowhere.
#[tokio::test]
async fn a_lease_less_key_before_the_candidates_blocks_the_election() {
    let etcd = Etcd::start().await;
    let mut raw = etcd.client().await;
    let dir = tempfile::tempdir().expect("tempdir");
    let db = dir.path().join("history.db");
    etcdctl(
        &etcd,
        &["put", "/app/one/cfg", "postgres://snapshot-secret"],
    )
    .await;
    let args = ["--source", "concurrency:/app/", "--source-holder-labels"];
    let serve = Serve::start(&[etcd.endpoint()], &db, &args, &[]).await;
    serve.ready().await;
    etcdctl(&etcd, &["put", "/app/two/cfg", "postgres://live-secret"]).await;
    let mut one = Elect::start(&etcd, "/app/one", "A");
    let mut two = Elect::start(&etcd, "/app/two", "B");
    let one_key = campaigning(&mut raw, "/app/one/").await;
    let two_key = campaigning(&mut raw, "/app/two/").await;
    serve.caught_up(now_revision(&mut raw).await).await;
    // etcdctl's own record: not elected (it prints its key once it is).
    for elect in [&mut one, &mut two] {
        let line = tokio::time::timeout(Duration::from_secs(2), elect.lines.next_line()).await;
        assert!(line.is_err(), "elected behind a lease-less key: {line:?}");
    }
    for name in ["/app/one", "/app/two"] {
        let (_, detail) = get_json(
            &serve,
            &format!("/api/v1/elections/{}", name.replace('/', "%2F")),
        )
        .await;
        assert!(
            detail["holder"].is_null() && detail["token"].is_null(),
            "{detail}"
        );
        assert_eq!(terms(&serve, name).await, vec![], "{name}");
    }
    // `tenure leader`, read live, says so too, naming the key, not its value.
    let out = tenure(&etcd)
        .args(["leader", "/app/one", "--source", "concurrency:/app/"])
        .output()
        .await
        .expect("run");
    let err = text(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{}{err}", text(&out.stdout));
    assert!(
        err.contains("/app/one/cfg") && !err.contains("secret"),
        "{err}"
    );
    // A restart while both are blocked, a config key alone beside them:
    // history holds no open term there, which is no other timeline (no
    // reset, no term ended, no floor raised).
    etcdctl(&etcd, &["put", "/app/solo/cfg", "x"]).await;
    serve.caught_up(now_revision(&mut raw).await).await;
    assert_eq!(serve.stop().await, Some(0));
    let serve = Serve::start(&[etcd.endpoint()], &db, &args, &[]).await;
    serve.ready().await;
    serve.caught_up(now_revision(&mut raw).await).await;
    let kinds: Vec<String> = events_of(&serve, "/app/one")
        .await
        .into_iter()
        .map(|e| e.1)
        .collect();
    assert!(
        !kinds.iter().any(|k| k == "reset" || k == "term_ended"),
        "{kinds:?}\n{}",
        serve.log_text()
    );
    for (elect, key, cfg) in [
        (&mut one, &one_key, "/app/one/cfg"),
        (&mut two, &two_key, "/app/two/cfg"),
    ] {
        etcdctl(&etcd, &["del", cfg]).await;
        assert_eq!(&elect.elected().await, &key.0, "etcdctl's own elected line");
    }
    serve.caught_up(now_revision(&mut raw).await).await;
    for (name, key, holder) in [("/app/one", &one_key, "A"), ("/app/two", &two_key, "B")] {
        let (_, detail) = get_json(
            &serve,
            &format!("/api/v1/elections/{}", name.replace('/', "%2F")),
        )
        .await;
        assert_eq!(detail["holder"], holder, "{detail}");
        assert_eq!(detail["token"], key.1, "{detail}");
        assert_eq!(
            terms(&serve, name).await,
            vec![(key.1, holder.to_owned(), None)]
        );
        let path = format!("/api/v1/elections/{}/events", name.replace('/', "%2F"));
        let (status, events) = get_json(&serve, &path).await;
        assert_eq!(status, 200);
        assert!(!events.to_string().contains("secret"), "{events}");
    }
    let scrape = serve.metrics().await;
    assert!(!scrape.contains("secret"), "{scrape}");
    assert!(scrape.contains("holder=\"A\""), "{scrape}");
    one.resign().await;
    two.resign().await;
    serve.stop().await;
}

/// The candidate key etcdctl put under `prefix` (with a lease: the one
/// key beside the lease-less one), with its CreateRevision, once etcd
/// holds it.
async fn campaigning(raw: &mut EtcdClient, prefix: &str) -> (String, i64) {
    let deadline = tokio::time::Instant::now() + WAIT;
    loop {
        let resp = raw
            .get(prefix, Some(GetOptions::new().with_prefix()))
            .await
            .expect("get");
        if let Some(kv) = resp.kvs().iter().find(|kv| kv.lease() != 0) {
            return (text(kv.key()), kv.create_revision());
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "no candidate under {prefix}"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}
