//! Clusters read through the Kubernetes API on the shared PostgreSQL
//! history (issue 42.2), with the real parts: two kube-apiservers, each
//! over its own etcd (client-go candidates on a Lease of one, a Lease
//! renewed client-go's way in the other, read with an exec plugin's
//! expiring tokens), an etcd cluster beside them in the same
//! `serve --config`, two replicas on one database. The API cluster's
//! writer is elected in the database (its fence row), the etcd cluster's
//! in its etcd. The writing replica of the API cluster is killed -9
//! midway, while a candidate is killed -9 too: the other replica takes
//! the API cluster over, and what either replica reads equals the Lease's
//! own etcd record (every holder once, tokens and causes), and the etcd
//! cluster's terms what the test did there.
//!
//! Wall time: about 40 s on 2 shared cores (kube-apiserver's start, two
//! 4 s Leases and a 2 s writer term running out).
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::disallowed_methods)]

mod support;

use std::path::Path;
use std::time::{Duration, Instant};

use nix::sys::signal::{kill, Signal};
use nix::unistd::Pid;
use support::fixtures::lead;
use support::kube::{
    self, Candidate, JsonRenewer, KubeApiserver, LeaseLog, Recorded, Write, RENEWED,
};
use support::postgres::Postgres;
use support::{Etcd, Serve};
use tenure::election::Client;

const KEY: &str = "/registry/leases/default/demo";
const NAME: &str = "k8s/default/demo";
const INTRUDER: &str = "intruder";
const DB: &str = "kube";

/// Polls `f` until it returns `Some`, for at most 40 s.
async fn until<T>(what: &str, mut f: impl AsyncFnMut() -> Option<T>) -> T {
    let deadline = Instant::now() + Duration::from_secs(40);
    loop {
        if let Some(v) = f().await {
            return v;
        }
        assert!(Instant::now() < deadline, "timed out waiting for {what}");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// A replica: `serve --config` on the database, a 2 s writer term.
async fn replica(config: &Path, url: &str) -> Serve {
    let cfg = config.display().to_string();
    // No etcd of the serve's own: the endpoints given are never used.
    let nowhere = ["http://127.0.0.1:9".to_owned()];
    Serve::start(
        &nowhere,
        Path::new(url),
        &[
            "--config",
            &cfg,
            "--writer-ttl",
            "2s",
            "--cluster-poll",
            "0",
        ],
        &[],
    )
    .await
}

/// Cluster `c`'s fence row: token and holder, once a writer claimed it.
fn fence(pg: &Postgres, c: &str) -> Option<(i64, String)> {
    let row = pg.psql(
        DB,
        &format!("SELECT token, holder FROM history_writer WHERE cluster = '{c}' AND token > 0"),
    );
    let (token, holder) = row.trim().split_once('|')?;
    Some((token.parse().ok()?, holder.to_owned()))
}

/// Which replica cluster `c`'s writer is, once it has committed.
async fn writer_of(pg: &Postgres, c: &str, replicas: &[Option<Serve>]) -> (usize, i64) {
    until("a writer", async || {
        let committed =
            format!("SELECT COUNT(*) FROM watcher_state WHERE key = 'resume_revision@{c}'");
        (pg.psql(DB, &committed) == "1").then_some(())?;
        let (token, holder) = fence(pg, c)?;
        let i = replicas.iter().position(|r| {
            r.as_ref()
                .is_some_and(|r| holder.ends_with(&format!("http {}", r.addr)))
        })?;
        Some((i, token))
    })
    .await
}

/// Waits until `serve` recorded `want` of `name`; asserts it did.
async fn settled(serve: &Serve, name: &str, want: &[Recorded]) {
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let got = kube::recorded(serve, name).await;
        if got == want {
            return;
        }
        assert!(
            Instant::now() < deadline,
            "{name} through {}: {got:?}, want {want:?}\n{}",
            serve.addr,
            serve.log_text()
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_api_cluster_on_postgres_survives_its_writer_killed_and_records_each_term_once() {
    if !kube::available() {
        return;
    }
    let kube_etcd = Etcd::start().await;
    let log = LeaseLog::start(kube_etcd.client().await, KEY).await;
    let api = KubeApiserver::start(&kube_etcd.endpoint()).await;
    let plain = Etcd::start().await;
    // A second API cluster whose user is an exec plugin (its first token
    // refused, each later one valid for 20 s).
    let kube_etcd2 = Etcd::start().await;
    let api2 = KubeApiserver::start(&kube_etcd2.endpoint()).await;
    let exec_dir = tempfile::tempdir().expect("tempdir");
    let exec_kubeconfig = api2.exec_kubeconfig(exec_dir.path()).await;
    let pg = Postgres::start();
    let url = pg.create_database(DB);
    let dir = tempfile::tempdir().expect("tempdir");
    let kubeconfig = api.reader_kubeconfig(dir.path()).await;
    let config = dir.path().join("clusters.toml");
    std::fs::write(
        &config,
        format!(
            "[[cluster]]\nname = \"k8s\"\nkubeconfig = {kubeconfig:?}\n\n\
             [[cluster]]\nname = \"k8s2\"\nkubeconfig = {exec_kubeconfig:?}\n\n\
             [[cluster]]\nname = \"plain\"\nendpoints = {:?}\n",
            plain.endpoint()
        ),
    )
    .expect("config");
    let mut replicas = vec![
        Some(replica(&config, &url).await),
        Some(replica(&config, &url).await),
    ];
    for r in replicas.iter().flatten() {
        r.ready().await;
    }
    let (first, first_token) = writer_of(&pg, "k8s", &replicas).await;
    writer_of(&pg, "k8s2", &replicas).await;
    // k8s2's Lease, renewed client-go's way from now on: its one term's
    // token is the revision that created it.
    let renewer = JsonRenewer::start(&kube_etcd2).await;
    let mut raw2 = kube_etcd2.client().await;
    let acquired = until("k8s2's Lease", async || {
        let got = raw2
            .get("/registry/leases/kube-system/kcm", None)
            .await
            .ok()?;
        got.kvs().first().map(|kv| kv.create_revision())
    })
    .await;
    let c = Client::connect(&[plain.endpoint()], "")
        .await
        .expect("connect");

    let mut cs = kube::candidates(&api, "default", "demo", &["a", "b", "c"]);
    let long = Duration::from_secs(30);
    let held = |w: &Write| !w.deleted && !w.holder.is_empty();
    let l1 = log.wait_for("a first holder", long, held).await.holder;
    let p1 = lead(&c, "jobs", "p1", 30).await;
    let t1 = p1.token();
    p1.resign().await.expect("resign");

    // A release (SIGTERM: client-go writes an empty holder).
    kube::by_id(&mut cs, &l1).signal(Signal::SIGTERM);
    assert_eq!(kube::by_id(&mut cs, &l1).wait(long).await, Some(0));
    let l2 = log
        .wait_for("a second holder", long, |w| held(w) && w.holder != l1)
        .await
        .holder;
    kube::by_id(&mut cs, &l2)
        .said_by_now("started-leading")
        .await;

    // The API cluster's writing replica and the Lease's leader, both
    // killed -9: the other replica takes the writer term once its 2 s run
    // out, the last candidate the Lease once its 4 s have.
    replicas[first].take().expect("the writer").crash().await;
    kube::by_id(&mut cs, &l2).signal(Signal::SIGKILL);
    let p2 = lead(&c, "jobs", "p2", 30).await;
    let l3_held = log
        .wait_for("a third holder", long, |w| {
            held(w) && w.holder != l1 && w.holder != l2
        })
        .await;
    let l3 = l3_held.holder;
    let (second, second_token) = writer_of(&pg, "k8s", &replicas).await;
    assert_ne!(second, first);
    assert!(second_token > first_token, "{second_token} {first_token}");
    kube::by_id(&mut cs, &l3).signal(Signal::SIGTERM);
    assert_eq!(kube::by_id(&mut cs, &l3).wait(long).await, Some(0));
    log.wait_for("l3's release", long, |w| {
        w.revision > l3_held.revision && !w.deleted && w.holder.is_empty()
    })
    .await;

    // The killed replica started again; then the writer frozen (SIGSTOP)
    // past its term while a fourth candidate takes the Lease: the other
    // replica takes the API cluster over from the stored resourceVersion,
    // and the frozen one, resumed, gives its term up and records nothing.
    replicas.push(Some(replica(&config, &url).await));
    for r in replicas.iter().flatten() {
        r.ready().await;
    }
    let pid = Pid::from_raw(replicas[second].as_ref().expect("writer").pid());
    kill(pid, Signal::SIGSTOP).expect("SIGSTOP the writer");
    cs.push(Candidate::start(&api, "default", "demo", "d"));
    let d_held = log.wait_for("d holding", long, |w| w.holder == "d").await;
    let third_token = until("a writer after the frozen one", async || {
        fence(&pg, "k8s").and_then(|(t, _)| (t > second_token).then_some(t))
    })
    .await;
    kill(pid, Signal::SIGCONT).expect("SIGCONT the old writer");
    let (third, _) = writer_of(&pg, "k8s", &replicas).await;
    assert_eq!(third, 2, "the restarted replica writes");
    let frozen = replicas[second].as_ref().expect("frozen");
    let gave_up = format!("lost the writer term (token {second_token})");
    until("the frozen writer gives its term up", async || {
        frozen.log_text().contains(&gave_up).then_some(())
    })
    .await;
    kube::by_id(&mut cs, "d").signal(Signal::SIGTERM);
    assert_eq!(kube::by_id(&mut cs, "d").wait(long).await, Some(0));
    log.wait_for("d's release", long, |w| {
        w.revision > d_held.revision && !w.deleted && w.holder.is_empty()
    })
    .await;

    // The Lease's own record, read through every replica.
    let truth = kube::terms_of(&log.writes(), INTRUDER);
    let holders: Vec<&str> = truth.iter().map(|t| t.holder.as_str()).collect();
    assert_eq!(holders, [&*l1, &*l2, &*l3, "d"], "{}", log.timeline());
    assert!(
        truth.iter().all(|t| t.ended.is_some()),
        "{}",
        log.timeline()
    );
    let want = kube::wanted(&truth);
    let causes: Vec<&str> = truth.iter().filter_map(|t| t.ended_as).collect();
    assert_eq!(causes[1], "expired", "{}", log.timeline());
    for r in replicas.iter().flatten() {
        settled(r, NAME, &want).await;
    }
    let doubled = pg.psql(
        DB,
        "SELECT COUNT(*) FROM (SELECT token FROM terms WHERE election = 'k8s/default/demo' \
         GROUP BY token HAVING COUNT(*) > 1) AS d",
    );
    assert_eq!(doubled, "0", "a term recorded twice");
    for r in replicas.iter().flatten() {
        let jobs = kube::recorded(r, "plain/jobs").await;
        let p1_term = ("p1".to_owned(), t1, Some("resigned".to_owned()));
        let p2_term = ("p2".to_owned(), p2.token(), None);
        let got: Vec<_> = jobs
            .iter()
            .map(|j| (j.0.clone(), j.1, j.3.clone()))
            .collect();
        assert_eq!(
            got,
            [p1_term, p2_term],
            "the etcd cluster through {}",
            r.addr
        );
        assert!(jobs[0].2 > Some(t1) && jobs[1].2.is_none(), "{jobs:?}");
    }
    // The exec plugin's cluster, through every replica, past the 20 s
    // expiry of its tokens: its one term, as the renewer wrote it.
    let kcm = format!("k8s2/{RENEWED}");
    let one = [(kube::RENEWER.to_owned(), acquired, None, None)];
    for r in replicas.iter().flatten() {
        settled(r, &kcm, &one).await;
    }
    assert!(
        kube::exec_runs(exec_dir.path()) >= 3,
        "the exec plugin ran {} times",
        kube::exec_runs(exec_dir.path())
    );
    renewer.stop().await;
    // The API cluster's fence row is the last takeover's.
    assert_eq!(fence(&pg, "k8s").map(|f| f.0), Some(third_token));
    drop(cs);
}

/// A writer that can reach the database but not the API would hold the
/// term and record nothing: once its watcher has not read the API for
/// 10 s it gives the term up, it does not stand again while it cannot
/// read, and a replica that can takes over from the stored
/// resourceVersion (the handover that happened meanwhile recorded).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_writer_that_cannot_read_the_api_gives_its_term_to_one_that_can() {
    if !kube::available() {
        return;
    }
    let kube_etcd = Etcd::start().await;
    let log = LeaseLog::start(kube_etcd.client().await, KEY).await;
    let api = KubeApiserver::start(&kube_etcd.endpoint()).await;
    let pg = Postgres::start();
    let url = pg.create_database(DB);
    let dir = tempfile::tempdir().expect("tempdir");
    let direct = api.reader_kubeconfig(dir.path()).await;
    let target = format!("127.0.0.1:{}", api.port).parse().expect("address");
    let proxy = support::proxy::Proxy::start(target).await;
    let through = dir.path().join("through-proxy");
    let text = std::fs::read_to_string(&direct).expect("kubeconfig");
    let text = text.replace(
        &format!("https://127.0.0.1:{}", api.port),
        &format!("https://{}", proxy.addr),
    );
    std::fs::write(&through, text).expect("kubeconfig");
    let start = |kubeconfig: &Path| {
        let cluster = format!("k8s=kubeconfig:{}", kubeconfig.display());
        let url = url.clone();
        async move {
            let nowhere = ["http://127.0.0.1:9".to_owned()];
            let args = ["--cluster", &cluster, "--writer-ttl", "2s"];
            let r = Serve::start(&nowhere, Path::new(&url), &args, &[]).await;
            r.ready().await;
            r
        }
    };
    // The replica through the proxy writes first (before the first term:
    // a term that began before the history has its token from the list,
    // the Lease's latest write); the direct one stands by.
    let mut replicas = vec![Some(start(&through).await)];
    let (writer, token) = writer_of(&pg, "k8s", &replicas).await;
    assert_eq!(writer, 0);
    let mut cs = kube::candidates(&api, "default", "demo", &["a", "b"]);
    let long = Duration::from_secs(30);
    let first = log
        .wait_for("a holder", long, |w| !w.deleted && !w.holder.is_empty())
        .await;
    replicas.push(Some(start(&direct).await));

    proxy.partition();
    let cut = Instant::now();
    kube::by_id(&mut cs, &first.holder).signal(Signal::SIGTERM);
    let second = log
        .wait_for("a second holder", long, |w| {
            w.revision > first.revision
                && !w.deleted
                && !w.holder.is_empty()
                && w.holder != first.holder
        })
        .await;
    let took = until("the direct replica writing", async || {
        let (t, holder) = fence(&pg, "k8s")?;
        let direct = replicas[1].as_ref()?;
        (t > token && holder.ends_with(&format!("http {}", direct.addr))).then_some(t)
    })
    .await;
    println!(
        "[figure] API writer cut from the API (not the database): the term handed over {} ms \
         after the cut (token {token} -> {took})",
        cut.elapsed().as_millis()
    );
    let cut_off = replicas[0].as_ref().expect("cut off");
    assert!(
        cut_off
            .log_text()
            .contains("its watcher has not read the Kubernetes API"),
        "{}",
        cut_off.log_text()
    );
    let truth = kube::terms_of(&log.writes(), INTRUDER);
    assert_eq!(truth.len(), 2, "{}", log.timeline());
    assert_eq!(truth[1].holder, second.holder);
    let want = kube::wanted(&truth);
    settled(replicas[1].as_ref().expect("writer"), NAME, &want).await;
    // The cut-off replica reads the shared history; healed, it stays a
    // standby (the term is held).
    proxy.heal();
    settled(cut_off, NAME, &want).await;
    assert_eq!(fence(&pg, "k8s").map(|f| f.0), Some(took));

    // Every session of tenure's cut by the database (as a restart or a
    // failover cuts them): the writer's election session and its store
    // open new ones, and the next handover is recorded.
    let cut = pg.psql(
        DB,
        "SELECT COUNT(pg_terminate_backend(pid)) FROM pg_stat_activity \
         WHERE application_name = 'tenure'",
    );
    assert_ne!(cut, "0", "no session of tenure's to cut");
    // Past the writer's 2 s term: only a term renewed or claimed again on
    // a new session records what follows.
    tokio::time::sleep(Duration::from_secs(3)).await;
    cs.push(Candidate::start(&api, "default", "demo", "c"));
    kube::by_id(&mut cs, &second.holder).signal(Signal::SIGTERM);
    log.wait_for("c holding", long, |w| w.holder == "c").await;
    let truth = kube::terms_of(&log.writes(), INTRUDER);
    assert_eq!(truth.len(), 3, "{}", log.timeline());
    let want = kube::wanted(&truth);
    for r in replicas.iter().flatten() {
        settled(r, NAME, &want).await;
    }
    drop(cs);
}
