//! A name bound to its etcd: a replica started with the cluster names swapped
//! is refused, and an endpoint that leads to another etcd is refused until
//! adopted (`--adopt-etcd`); neither writes anything anywhere.

use std::path::Path;
use std::time::{Duration, Instant};

use tenure::election::Client;

use crate::support::fixtures::lead;
use crate::support::postgres::Postgres;
use crate::support::proxy::Proxy;
use crate::support::{Etcd, Serve};
use crate::{
    etcd_terms, eventually, fence_row, history_equals_etcd, readyz_of, refused, replica, resets,
    revision, writer_of, Load,
};

/// etcd's cluster id, from a read's header.
async fn cluster_id(etcd: &Etcd) -> u64 {
    let mut raw = etcd.client().await;
    raw.get("any", None)
        .await
        .expect("get")
        .header()
        .expect("header")
        .cluster_id()
}

/// The writer terms etcd's own log holds (tenure/history-writer).
async fn writer_terms(etcd: &Etcd) -> usize {
    etcd_terms(etcd, revision(etcd).await)
        .await
        .keys()
        .filter(|(e, _)| e == "tenure/history-writer")
        .count()
}

/// Config drift (issue 43.1): a second replica of a shared history started
/// with the two cluster names the other way round (`a=Y b=X` after
/// `a=X b=Y`) is refused at start, naming both etcd cluster ids, and
/// writes nothing anywhere: no token floor in either etcd, no writer
/// campaign in either, both fence rows as they were, no reset recorded.
/// Before: it said ready, recorded both etcds as restored and raised X's
/// floor to Y's revision.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_replica_with_the_cluster_names_swapped_is_refused_and_writes_nothing() {
    let (ex, ey) = (Etcd::start().await, Etcd::start().await);
    {
        // Y well ahead of X: a floor of Y's revision in X would refuse
        // every campaign there.
        let mut raw = ey.client().await;
        for i in 0..100 {
            raw.put(format!("filler/{i}"), "x", None)
                .await
                .expect("put");
        }
    }
    let pg = Postgres::start();
    let db = "drift";
    let url = pg.create_database(db);
    let replicas = vec![Some(replica(&ex.endpoint(), &ey.endpoint(), &url).await)];
    for r in replicas.iter().flatten() {
        r.ready().await;
    }
    writer_of(&pg, db, "a", &replicas).await;
    writer_of(&pg, db, "b", &replicas).await;
    let load = Load::start(&[&ex, &ey]).await;
    tokio::time::sleep(Duration::from_secs(1)).await;
    let before = (fence_row(&pg, db, "a"), fence_row(&pg, db, "b"));
    let writers = (writer_terms(&ex).await, writer_terms(&ey).await);

    let (a, b) = (
        format!("a={}", ey.endpoint()),
        format!("b={}", ex.endpoint()),
    );
    let err = refused(
        &url,
        &["--cluster", &a, "--cluster", &b, "--writer-ttl", "2s"],
    )
    .await;
    let (x, y) = (cluster_id(&ex).await, cluster_id(&ey).await);
    assert!(
        err.contains(&format!("{x:x}")) && err.contains(&format!("{y:x}")),
        "the refusal names both cluster ids ({x:x}, {y:x}): {err}"
    );
    assert!(err.contains("--adopt-etcd"), "{err}");
    println!("[figure] swapped names refused: {}", err.trim());

    load.stop().await;
    for (e, c) in [(&ex, "X"), (&ey, "Y")] {
        let client = Client::connect(&[e.endpoint()], "").await.expect("connect");
        assert_eq!(client.floor().await.expect("floor"), None, "{c}'s floor");
    }
    assert_eq!(
        (writer_terms(&ex).await, writer_terms(&ey).await),
        writers,
        "no writer campaign in either etcd"
    );
    assert_eq!(
        (fence_row(&pg, db, "a"), fence_row(&pg, db, "b")),
        before,
        "both fence rows as they were"
    );
    assert_eq!(resets(&pg, db), "0", "no reset recorded");
    // And the replica that is right records both exactly.
    history_equals_etcd(&pg, db, "a", &ex).await;
    history_equals_etcd(&pg, db, "b", &ey).await;
}

/// The same on a reconnect (issue 43.1): cluster b's endpoint (a proxy)
/// now leads to another etcd Z. The running replicas (b's writer and a
/// standby) record nothing of Z and write nothing into it (no floor, no
/// writer campaign, b's fence row kept, no reset), and `/readyz` names both ids within 20 s; when the
/// endpoint leads back to b's etcd, b is recorded again without a reset.
/// Z is taken for b only by the operator's step: served again with
/// `--adopt-etcd b=Z`, its first load is a reset, and b's token floor is
/// raised in Z.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_endpoint_that_leads_to_another_etcd_is_refused_until_adopted() {
    let (ea, eb, ez) = (
        Etcd::start().await,
        Etcd::start().await,
        Etcd::start().await,
    );
    let proxy = Proxy::start(eb.client_addr()).await;
    let pg = Postgres::start();
    let db = "moved";
    let url = pg.create_database(db);
    // Two replicas: one writes b, the other stands by in b's election.
    let mut replicas = Vec::new();
    for _ in 0..2 {
        replicas.push(Some(replica(&ea.endpoint(), &proxy.endpoint(), &url).await));
    }
    let r = replicas[0].as_ref().expect("replica");
    for r in replicas.iter().flatten() {
        r.ready().await;
    }
    writer_of(&pg, db, "a", &replicas).await;
    writer_of(&pg, db, "b", &replicas).await;
    let cb = Client::connect(&[eb.endpoint()], "")
        .await
        .expect("connect");
    let first = lead(&cb, "load-0", "before", 30).await;
    history_equals_etcd(&pg, db, "b", &eb).await;
    let b_fence = fence_row(&pg, db, "b");
    let (b, z) = (cluster_id(&eb).await, cluster_id(&ez).await);

    proxy.retarget(ez.client_addr());
    proxy.close_existing();
    let moved = Instant::now();
    let (status, text) = eventually(Duration::from_secs(20), "b refused", async || {
        readyz_of(r, "b")
            .await
            .filter(|(s, t)| *s == 503 && t.contains(&format!("{z:x}")))
    })
    .await;
    println!(
        "[figure] b's endpoint led to another etcd: /readyz {status} after {} ms: {}",
        moved.elapsed().as_millis(),
        text.trim()
    );
    assert!(text.contains(&format!("{b:x}")), "{text}");
    // Meanwhile b's etcd goes on: a handover the history must get.
    first.resign().await.expect("resign");
    let second = lead(&cb, "load-0", "meanwhile", 30).await;
    tokio::time::sleep(Duration::from_secs(4)).await;
    let cz = Client::connect(&[ez.endpoint()], "")
        .await
        .expect("connect");
    assert_eq!(cz.floor().await.expect("floor"), None, "no floor in Z");
    assert_eq!(writer_terms(&ez).await, 0, "no writer campaign in Z");
    assert_eq!(fence_row(&pg, db, "b"), b_fence, "b's fence row kept");
    assert_eq!(resets(&pg, db), "0", "no reset recorded");

    // Back to b's etcd: recorded again, the handover too, no reset.
    proxy.retarget(eb.client_addr());
    proxy.close_existing();
    eventually(Duration::from_secs(30), "b ready again", async || {
        readyz_of(r, "b").await.filter(|(s, _)| *s == 200)
    })
    .await;
    history_equals_etcd(&pg, db, "b", &eb).await;
    assert_eq!(resets(&pg, db), "0", "no reset once b's etcd is back");

    // Z again, and the operator adopts it: a reset, the floor raised in Z.
    proxy.retarget(ez.client_addr());
    proxy.close_existing();
    eventually(Duration::from_secs(20), "b refused again", async || {
        readyz_of(r, "b").await.filter(|(s, _)| *s == 503)
    })
    .await;
    let replicas = replicas;
    for r in replicas.into_iter().flatten() {
        r.stop().await;
    }
    let (a, b_flag, adopt) = (
        format!("a={}", ea.endpoint()),
        format!("b={}", proxy.endpoint()),
        format!("b={z:x}"),
    );
    let adopted = Serve::start(
        &[proxy.endpoint()],
        Path::new(&url),
        &[
            "--cluster",
            &a,
            "--cluster",
            &b_flag,
            "--writer-ttl",
            "2s",
            "--cluster-poll",
            "0",
            "--adopt-etcd",
            &adopt,
        ],
        &[],
    )
    .await;
    adopted.ready().await;
    eventually(
        Duration::from_secs(30),
        "the adoption's reset",
        async || (resets(&pg, db) == "1").then_some(()),
    )
    .await;
    let floor = eventually(Duration::from_secs(20), "b's floor in Z", async || {
        cz.floor().await.ok().flatten()
    })
    .await;
    assert!(
        floor >= second.token(),
        "Z's floor {floor} covers b's old timeline's tokens ({})",
        second.token()
    );
    drop(second);
    adopted.stop().await;
}
