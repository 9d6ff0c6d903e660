//! One cluster's writer SIGKILLed or cut off from its etcd: another replica
//! takes that cluster over, the other cluster's writer, fence row and history
//! untouched; until the takeover, `/readyz` names the dead writer only as
//! the last commit.

use std::time::{Duration, Instant};

use tenure::election::Client;

use crate::support::fixtures::name;
use crate::support::postgres::Postgres;
use crate::support::proxy::Proxy;
use crate::support::{Etcd, Serve};
use crate::{
    etcd_terms, eventually, fence, fence_stays, gaps, history_equals_etcd, readyz_of, replica,
    replica_ttl, revision, which, writer_of, Load,
};

/// The writer term's TTL the replicas run with.
const WRITER_TTL: Duration = Duration::from_secs(2);
/// What a takeover may add to the TTL: the new writer opens the database,
/// claims its fence row and resumes (3 s in `feed/writer.rs`), plus 3 s
/// for a machine shared with other builds.
const TAKEOVER_SLACK: Duration = Duration::from_secs(6);

/// The fence row of `c` names a term etcd itself recorded in its
/// `tenure/history-writer` election, with that holder.
async fn fence_is_an_etcd_term(pg: &Postgres, db: &str, c: &str, etcd: &Etcd) {
    let (token, holder) = fence(pg, db, c).expect("a writer");
    let terms = etcd_terms(etcd, revision(etcd).await).await;
    let term = terms.get(&("tenure/history-writer".to_owned(), token));
    assert_eq!(
        term.map(|t| t.0.as_str()),
        Some(holder.as_str()),
        "cluster {c}: fence token {token} is a writer term of its own etcd"
    );
}

/// Makes a and b written by two different replicas: while one replica
/// writes both, its b term is deposed (in b's etcd), so the next in b's
/// queue takes b. Returns (writer of a, writer of b).
async fn split_writers(
    pg: &Postgres,
    db: &str,
    b: &Etcd,
    replicas: &[Option<Serve>],
) -> (usize, usize) {
    let wa = writer_of(pg, db, "a", replicas).await;
    let wb = writer_of(pg, db, "b", replicas).await;
    if wa != wb {
        return (wa, wb);
    }
    let c = Client::connect(&[b.endpoint()], "").await.expect("connect");
    c.depose(&name("tenure/history-writer"))
        .await
        .expect("depose b's writer");
    let wb = eventually(
        Duration::from_secs(30),
        "b written by another",
        async || which(replicas, &fence(pg, db, "b")?.1).filter(|&w| w != wa),
    )
    .await;
    (writer_of(pg, db, "a", replicas).await, wb)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_writer_of_one_cluster_killed_another_takes_it_the_other_cluster_undisturbed() {
    let (ea, eb) = (Etcd::start().await, Etcd::start().await);
    let pg = Postgres::start();
    let db = "killed";
    let url = pg.create_database(db);
    let mut replicas: Vec<Option<Serve>> = Vec::new();
    for _ in 0..3 {
        replicas.push(Some(replica(&ea.endpoint(), &eb.endpoint(), &url).await));
    }
    for r in replicas.iter().flatten() {
        r.ready().await;
    }
    let (wa, wb) = split_writers(&pg, db, &eb, &replicas).await;
    assert_ne!(wa, wb);
    // Each replica says, per cluster, who writes it and since when; the
    // writer's gauge is per cluster.
    let (token_a, holder_a) = fence(&pg, db, "a").expect("a's writer");
    for r in replicas.iter().flatten() {
        let said = format!("history writer: last commit by {holder_a} (token {token_a}, ");
        eventually(
            Duration::from_secs(10),
            "/readyz names a's writer",
            async || {
                let text = reqwest::get(r.url("/readyz"))
                    .await
                    .ok()?
                    .text()
                    .await
                    .ok()?;
                let a_lines = text.split("cluster b:").next()?.to_owned();
                a_lines.contains(&said).then_some(())
            },
        )
        .await;
    }
    let gauge = |c: &str| format!("tenure_history_writer{{cluster=\"{c}\"}}");
    let writer = replicas[wa].as_ref().expect("a's writer");
    assert_eq!(writer.metric(&gauge("a")).await, Some(1.0));
    assert_eq!(writer.metric(&gauge("b")).await, Some(0.0));
    let load = Load::start(&[&ea, &eb]).await;
    tokio::time::sleep(Duration::from_millis(1500)).await;
    let (old_a, _) = fence(&pg, db, "a").expect("a's writer");
    let b_before = fence(&pg, db, "b").expect("b's writer");

    let killed = Instant::now();
    replicas[wa].take().expect("a's writer").crash().await;
    let (new_a, holder) = eventually(Duration::from_secs(30), "a new writer of a", async || {
        fence(&pg, db, "a").filter(|(t, _)| *t > old_a)
    })
    .await;
    let takeover = killed.elapsed();
    println!(
        "[figure] cluster a's writer SIGKILLed: replica {:?} took a over after {} ms \
         (writer TTL 2 s; fence token {old_a} -> {new_a}); cluster b's writer unchanged",
        which(&replicas, &holder),
        takeover.as_millis()
    );
    assert!(
        which(&replicas, &holder).is_some(),
        "a live replica writes a"
    );
    assert!(
        takeover < WRITER_TTL + TAKEOVER_SLACK,
        "takeover took {takeover:?}"
    );
    // b: the same writer, the same term, all along.
    fence_stays(&pg, db, "b", &b_before, Duration::from_secs(2)).await;
    load.stop().await;
    let na = history_equals_etcd(&pg, db, "a", &ea).await;
    let nb = history_equals_etcd(&pg, db, "b", &eb).await;
    assert_eq!(fence(&pg, db, "b").as_ref(), Some(&b_before));
    assert_eq!((gaps(&pg, db, "a"), gaps(&pg, db, "b")), (0, 0), "no gap");
    fence_is_an_etcd_term(&pg, db, "a", &ea).await;
    fence_is_an_etcd_term(&pg, db, "b", &eb).await;
    println!("[figure] SIGKILL: {na} terms of a and {nb} of b recorded exactly once");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_replica_cut_from_one_cluster_gives_it_up_and_keeps_writing_the_other() {
    let (ea, eb) = (Etcd::start().await, Etcd::start().await);
    let pg = Postgres::start();
    let db = "partition";
    let url = pg.create_database(db);
    // Replica 0 reaches a through a proxy the test can cut; it starts first
    // and so writes both clusters.
    let proxy = Proxy::start(ea.client_addr()).await;
    let mut replicas: Vec<Option<Serve>> =
        vec![Some(replica(&proxy.endpoint(), &eb.endpoint(), &url).await)];
    replicas[0].as_ref().expect("replica 0").ready().await;
    for c in ["a", "b"] {
        eventually(Duration::from_secs(30), "replica 0 writes", async || {
            (which(&replicas, &fence(&pg, db, c)?.1) == Some(0)).then_some(())
        })
        .await;
    }
    for _ in 0..2 {
        replicas.push(Some(replica(&ea.endpoint(), &eb.endpoint(), &url).await));
    }
    for r in replicas.iter().flatten() {
        r.ready().await;
    }
    let load = Load::start(&[&ea, &eb]).await;
    tokio::time::sleep(Duration::from_millis(1500)).await;
    let (old_a, _) = fence(&pg, db, "a").expect("a's writer");
    let b_before = fence(&pg, db, "b").expect("b's writer");

    let cut = Instant::now();
    proxy.partition();
    let (new_a, holder) = eventually(Duration::from_secs(30), "a new writer of a", async || {
        fence(&pg, db, "a").filter(|(t, _)| *t > old_a)
    })
    .await;
    let takeover = cut.elapsed();
    let new_writer = which(&replicas, &holder);
    println!(
        "[figure] replica 0 cut from cluster a: replica {new_writer:?} took a over after {} ms \
         (writer TTL 2 s; fence token {old_a} -> {new_a}); replica 0 still writes b",
        takeover.as_millis()
    );
    assert!(
        matches!(new_writer, Some(1 | 2)),
        "another replica writes a"
    );
    assert!(
        takeover < WRITER_TTL + TAKEOVER_SLACK,
        "takeover took {takeover:?}"
    );
    let cut_off = replicas[0].as_ref().expect("replica 0");
    eventually(Duration::from_secs(10), "replica 0 says so", async || {
        cut_off
            .log_text()
            .contains("history writer of cluster a: lost the writer term")
            .then_some(())
    })
    .await;
    // b goes on with replica 0, in the same term, through the partition.
    fence_stays(&pg, db, "b", &b_before, Duration::from_secs(4)).await;
    proxy.heal();
    tokio::time::sleep(Duration::from_secs(3)).await;
    load.stop().await;
    let na = history_equals_etcd(&pg, db, "a", &ea).await;
    let nb = history_equals_etcd(&pg, db, "b", &eb).await;
    assert_eq!(fence(&pg, db, "b").as_ref(), Some(&b_before));
    assert_eq!(
        fence(&pg, db, "a").map(|f| f.0),
        Some(new_a),
        "replica 0, back, stands by"
    );
    fence_is_an_etcd_term(&pg, db, "a", &ea).await;
    fence_is_an_etcd_term(&pg, db, "b", &eb).await;
    println!("[figure] partition: {na} terms of a and {nb} of b recorded exactly once");
}

/// The writer of cluster a SIGKILLed, with a writer TTL of 10 s: until its
/// lease runs out nobody writes a, and a standby's `/readyz` must not name
/// the dead replica as a's writer (the fence row only says it made the last
/// commit), nor claim to write; after the takeover, it names the new
/// writer's commits and its own term. The independent record: the test's
/// own kill (its pid, its time) and the fence row read with psql.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_killed_writer_is_named_only_as_the_last_commit_until_another_takes_over() {
    let (ea, eb) = (Etcd::start().await, Etcd::start().await);
    let pg = Postgres::start();
    let db = "dead";
    let url = pg.create_database(db);
    let mut replicas: Vec<Option<Serve>> = Vec::new();
    for _ in 0..2 {
        let r = replica_ttl(&ea.endpoint(), &eb.endpoint(), &url, "10s").await;
        replicas.push(Some(r));
    }
    for r in replicas.iter().flatten() {
        r.ready().await;
    }
    let wa = writer_of(&pg, db, "a", &replicas).await;
    let standby = 1 - wa;
    let (token, dead) = fence(&pg, db, "a").expect("a's writer");
    let last_commit = format!("history writer: last commit by {dead} (token {token}, ");
    let writer = replicas[wa].as_ref().expect("a's writer");
    eventually(Duration::from_secs(10), "the writer says so", async || {
        let (_, a) = readyz_of(writer, "a").await?;
        let own = format!("this replica: writing (term token {token} since ");
        (a.contains(&own) && a.contains(&last_commit)).then_some(())
    })
    .await;
    // The standby has read that fence row too (it reads every second).
    let s = replicas[standby].as_ref().expect("standby");
    eventually(Duration::from_secs(10), "the standby says so", async || {
        let (_, a) = readyz_of(s, "a").await?;
        (a.contains(&last_commit) && a.contains("this replica: standing by")).then_some(())
    })
    .await;
    let pid = writer.pid();
    let killed = Instant::now();
    replicas[wa].take().expect("a's writer").crash().await;
    println!("[figure] killed a's writer (pid {pid}, token {token}) at {killed:?}");
    let s = replicas[standby].as_ref().expect("standby");
    let (mut looked, mut named) = (0, 0);
    // Only while the fence still holds the dead writer's token and well
    // within its TTL: the window in which nobody writes a.
    while killed.elapsed() < Duration::from_secs(6) {
        let (status, a) = readyz_of(s, "a").await.expect("/readyz");
        let fenced = fence(&pg, db, "a");
        if fenced.as_ref().map(|f| f.0) != Some(token) {
            break;
        }
        assert!(a.contains(&last_commit), "{a}");
        assert!(
            !a.contains(&format!("history writer: {dead}")),
            "/readyz presents the dead writer as a's writer: {a}"
        );
        assert!(a.contains("this replica: standing by"), "{a}");
        assert!(!a.contains("this replica: writing"), "{a}");
        if let Some(line) = a.lines().find(|l| l.contains("this replica:")) {
            // etcd's election still names it until its lease runs out:
            // said as such, with the lease counting down.
            if line.contains(&dead) {
                assert!(line.contains("from running out"), "{line}");
                named += 1;
            }
        }
        assert_eq!(status, 200, "a standby that can take over: {a}");
        if looked == 0 {
            println!("[figure] a standby's /readyz after the kill, before the takeover:\n{a}");
        }
        looked += 1;
        tokio::time::sleep(Duration::from_millis(300)).await;
    }
    assert!(looked >= 5, "the window was seen ({looked} looks)");
    assert!(named > 0, "the standby read etcd's election in the window");
    let (new, holder) = eventually(Duration::from_secs(30), "a new writer", async || {
        fence(&pg, db, "a").filter(|(t, _)| *t > token)
    })
    .await;
    println!(
        "[figure] writer TTL 10 s: a taken over after {} ms; {looked} looks at /readyz in \
         the window named the dead writer only as the last commit",
        killed.elapsed().as_millis()
    );
    assert_eq!(which(&replicas, &holder), Some(standby));
    eventually(
        Duration::from_secs(10),
        "/readyz names the new writer",
        async || {
            let (_, a) = readyz_of(s, "a").await?;
            let said = format!("history writer: last commit by {holder} (token {new}, ");
            let own = format!("this replica: writing (term token {new} since ");
            (a.contains(&said) && a.contains(&own)).then_some(())
        },
    )
    .await;
}
