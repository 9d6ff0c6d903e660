//! Other systems' elections recorded exactly across a `kill -9` of serve:
//! `etcdctl elect` and a service's own key, and random writes to three
//! sources at once checked against an independent model of etcd's log.

use std::time::Duration;

use etcd_client::Client as EtcdClient;
use serde_json::Value;

use crate::support::fixtures::{merges_several_ranges, text};
use crate::support::{Etcd, Serve};
use crate::{created, get_json, now_revision, terms, Elect, WAIT};

#[tokio::test]
async fn other_systems_elections_are_recorded_exactly_across_a_crash() {
    let etcd = Etcd::start().await;
    let mut raw = etcd.client().await;
    let dir = tempfile::tempdir().expect("tempdir");
    let db = dir.path().join("history.db");
    let several = merges_several_ranges(&mut raw).await;
    let args = vec!["--source", "concurrency:/app/", "--source", "key:/svc/"];
    let serve = Serve::start(&[etcd.endpoint()], &db, &args, &[]).await;
    serve.ready().await;
    // An etcd that cannot merge ranges is read by one covering watch.
    assert_eq!(
        serve.log_text().contains("one covering watch"),
        !several,
        "{}",
        serve.log_text()
    );

    // etcd's own election under the application's prefix: A leads, B waits.
    let mut a = Elect::start(&etcd, "/app/jobs", "A");
    a.elected().await;
    let mut b = Elect::start(&etcd, "/app/jobs", "B");
    let deadline = tokio::time::Instant::now() + WAIT;
    let keys = loop {
        let keys = created(&mut raw, "/app/jobs/").await;
        if keys.len() == 2 {
            break keys;
        }
        assert!(tokio::time::Instant::now() < deadline, "B never queued");
        tokio::time::sleep(Duration::from_millis(20)).await;
    };
    let mut tokens: Vec<i64> = keys.iter().map(|(_, r)| *r).collect();
    tokens.sort_unstable();
    // A service's own key, lease-less: its deletion can only be a delete.
    {
        raw.put("/svc/leader", "node-1", None).await.expect("put");
    }
    let k1 = created(&mut raw, "/svc/leader").await;
    a.resign().await;
    b.elected().await;
    let rev = now_revision(&mut raw).await;
    serve.caught_up(rev).await;

    // serve dies; the elections go on without it.
    serve.crash().await;
    b.resign().await;
    {
        raw.delete("/svc/leader", None).await.expect("delete");
        raw.put("/svc/leader", "node-2", None).await.expect("put");
    }
    let k2 = created(&mut raw, "/svc/leader").await;
    let rev = now_revision(&mut raw).await;

    let serve = Serve::start(&[etcd.endpoint()], &db, &args, &[]).await;
    serve.ready().await;
    serve.caught_up(rev).await;

    let jobs = terms(&serve, "/app/jobs").await;
    let got: Vec<(i64, &str)> = jobs.iter().map(|(t, h, _)| (*t, h.as_str())).collect();
    assert_eq!(
        got,
        vec![(tokens[0], "A"), (tokens[1], "B")],
        "one term each, with etcd's CreateRevision as the token"
    );
    assert!(jobs.iter().all(|(_, _, end)| end.is_some()), "{jobs:?}");
    {
        let svc = terms(&serve, "/svc/leader").await;
        assert_eq!(
            svc,
            vec![
                (k1[0].1, "node-1".to_owned(), Some("deleted".to_owned())),
                (k2[0].1, "node-2".to_owned(), None),
            ]
        );
        // tenure's own elections are still watched beside them.
        let (status, _) = get_json(&serve, "/api/v1/elections").await;
        assert_eq!(status, 200);
    }
    let logs = serve.log_text();
    assert!(!logs.contains("recording a reset"), "{logs}");

    // The page and the detail of another system's election: from history,
    // never read live, and saying so.
    let page = reqwest::get(serve.url("/elections/%2Fapp%2Fjobs"))
        .await
        .expect("page");
    assert_eq!(page.status().as_u16(), 200);
    let html = page.text().await.expect("html");
    assert!(html.contains("/app/jobs"), "{html}");
    assert!(html.contains("not read live"), "{html}");
    let (status, detail) = get_json(&serve, "/api/v1/elections/%2Fapp%2Fjobs").await;
    assert_eq!(status, 200, "{detail}");
    assert_eq!(detail["etcd_reachable"], Value::Null);
    assert_eq!(
        detail["holder"],
        Value::Null,
        "nobody leads after B resigned"
    );
    serve.stop().await;
}

/// A key's election under the test's three sources, as an independent
/// model says (not tenure's layouts): tenure's single key `election/N`,
/// `concurrency:/app/` (the parent path), `key:/svc/` (the key).
fn model_election(key: &str) -> Option<String> {
    if let Some(name) = key.strip_prefix("election/") {
        return Some(name.to_owned());
    }
    if key.starts_with("/app/") {
        return key.rsplit_once('/').map(|(parent, _)| parent.to_owned());
    }
    key.starts_with("/svc/").then(|| key.to_owned())
}

/// Every term etcd's own log implies, per election: (token, holder), the
/// lowest CreateRevision among an election's keys leading.
async fn terms_in_etcds_log(
    raw: &mut EtcdClient,
    to: i64,
) -> std::collections::BTreeMap<String, Vec<(i64, String)>> {
    use std::collections::BTreeMap;
    let opts = etcd_client::WatchOptions::new()
        .with_all_keys()
        .with_start_revision(1);
    let mut stream = raw.watch("\0", Some(opts)).await.expect("watch the log");
    // key -> (token, value, lease), per election
    let mut keys: BTreeMap<String, BTreeMap<String, (i64, String, i64)>> = BTreeMap::new();
    let mut leading: BTreeMap<String, Option<i64>> = BTreeMap::new();
    let mut terms: BTreeMap<String, Vec<(i64, String)>> = BTreeMap::new();
    let mut last = 0;
    while last < to {
        let msg = tokio::time::timeout(WAIT, stream.message())
            .await
            .expect("etcd replayed its log")
            .expect("log")
            .expect("open");
        // One revision at a time: leaders are compared after each.
        let mut i = 0;
        let events = msg.events();
        while i < events.len() {
            let rev = events[i].kv().expect("kv").mod_revision();
            let mut touched = std::collections::BTreeSet::new();
            while i < events.len() && events[i].kv().expect("kv").mod_revision() == rev {
                let kv = events[i].kv().expect("kv");
                let key = text(kv.key());
                // etcd's `concurrency` puts candidates under a lease: a key
                // put without one is none (a deletion carries no lease).
                let put = events[i].event_type() == etcd_client::EventType::Put;
                let candidate = !(key.starts_with("/app/") && put && kv.lease() == 0);
                if let Some(e) = model_election(&key).filter(|_| candidate) {
                    let m = keys.entry(e.clone()).or_default();
                    if events[i].event_type() == etcd_client::EventType::Put {
                        let value = text(kv.value());
                        // A `key:` source's key written over under another
                        // lease changed hands at that write.
                        let token = match m.get(&key) {
                            Some((t, _, l)) if key.starts_with("/svc/") => {
                                if *l == kv.lease() {
                                    *t
                                } else {
                                    kv.mod_revision()
                                }
                            }
                            _ => kv.create_revision(),
                        };
                        m.insert(key, (token, value, kv.lease()));
                    } else {
                        m.remove(&key);
                    }
                    touched.insert(e);
                }
                i += 1;
            }
            for e in touched {
                let leader = keys[&e]
                    .values()
                    .min_by_key(|(c, _, _)| *c)
                    .map(|(c, v, _)| (*c, v.clone()));
                let was = leading.entry(e.clone()).or_default();
                if *was != leader.as_ref().map(|(c, _)| *c) {
                    *was = leader.as_ref().map(|(c, _)| *c);
                    if let Some(l) = leader {
                        terms.entry(e).or_default().push(l);
                    }
                }
            }
            last = rev;
        }
    }
    terms
}

/// Random writes to three sources at once, some in one txn across them;
/// serve killed with -9 halfway and restarted. Every term history holds
/// equals what etcd's log implies (an independent model), none twice.
#[tokio::test]
async fn interleaved_sources_match_etcds_log_across_a_crash() {
    let etcd = Etcd::start().await;
    let mut raw = etcd.client().await;
    eprintln!(
        "several ranges {}",
        if merges_several_ranges(&mut raw).await {
            "merged"
        } else {
            "by one covering watch (etcd before 3.4.31 / 3.5.13)"
        }
    );
    let dir = tempfile::tempdir().expect("tempdir");
    let db = dir.path().join("history.db");
    let args = ["--source", "concurrency:/app/", "--source", "key:/svc/"];
    let mut serve = Some(Serve::start(&[etcd.endpoint()], &db, &args, &[]).await);
    serve.as_ref().expect("serve").ready().await;
    let seed = crate::support::rng::Rng::seed_from_env("TENURE_SOURCES_SEED");
    eprintln!("seed {seed} (TENURE_SOURCES_SEED)");
    let mut rng = crate::support::rng::Rng::new(seed);
    // etcd's `concurrency` candidates hold a lease; the other sources' keys
    // are put without one.
    let lease = raw.lease_grant(600, None).await.expect("lease").id();
    let leased = |key: &str| {
        key.starts_with("/app/")
            .then(|| etcd_client::PutOptions::new().with_lease(lease))
    };
    let mut live: Vec<String> = Vec::new();
    const OPS: u64 = 600;
    for n in 0..OPS {
        let key = match rng.below(3) {
            0 => format!("election/t{}", rng.below(3)),
            1 => format!("/app/e{}/{:x}", rng.below(3), 0x1000 + rng.below(6)),
            _ => format!("/svc/k{}", rng.below(3)),
        };
        if n == OPS / 2 {
            serve.take().expect("serve").crash().await;
        }
        if rng.chance(15) {
            // One revision across every source.
            let ops = vec![
                etcd_client::TxnOp::put(
                    format!("election/t{}", rng.below(3)),
                    format!("x{n}"),
                    None,
                ),
                etcd_client::TxnOp::put(
                    format!("/app/e{}/{:x}", rng.below(3), 0x2000 + n),
                    format!("x{n}"),
                    leased("/app/"),
                ),
                etcd_client::TxnOp::delete(format!("/svc/k{}", rng.below(3)), None),
            ];
            raw.txn(etcd_client::Txn::new().and_then(ops))
                .await
                .expect("txn");
        } else if rng.chance(40) && !live.is_empty() {
            let k = live.swap_remove(rng.below(live.len() as u64) as usize);
            raw.delete(k, None).await.expect("delete");
        } else {
            raw.put(key.clone(), format!("h{n}"), leased(&key))
                .await
                .expect("put");
            live.push(key);
        }
        if n == OPS / 2 + 50 {
            serve = Some(Serve::start(&[etcd.endpoint()], &db, &args, &[]).await);
        }
    }
    let last = now_revision(&mut raw).await;
    let serve = serve.expect("serve");
    serve.ready().await;
    serve.caught_up(last).await;
    let logs = serve.log_text();
    assert_eq!(serve.stop().await, Some(0));

    let expected = terms_in_etcds_log(&mut raw, last).await;
    let reader = tenure::history::Reader::open(&db).expect("history");
    let q = tenure::history::Query {
        from_ms: None,
        to_ms: None,
        limit: Some(tenure::history::MAX_LIMIT),
    };
    let mut compared = 0;
    for (election, want) in &expected {
        let got: Vec<(i64, String)> = reader
            .terms(election, &q)
            .expect("terms")
            .into_iter()
            .map(|t| (t.token, t.holder))
            .collect();
        if &got != want {
            // What was recorded of it, and what the restarted serve said.
            let events = reader.events(Some(election), &q).expect("events");
            let events: Vec<String> = events
                .iter()
                .map(|e| format!("{} {:?}", e.revision, e.kind))
                .collect();
            let all = reader.events(Some(""), &q).expect("events");
            panic!(
                "{election} (seed {seed}): got {got:?}\nwant {want:?}\n{}\nfleet: {all:?}\n{logs}",
                events.join("\n")
            );
        }
        compared += want.len();
    }
    let recorded: usize = reader
        .elections()
        .expect("elections")
        .iter()
        .map(|e| reader.terms(&e.election, &q).expect("terms").len())
        .sum();
    assert_eq!(
        recorded, compared,
        "no term recorded that etcd's log does not imply"
    );
    eprintln!(
        "{compared} terms in {} elections, equal to etcd's log",
        expected.len()
    );
}
