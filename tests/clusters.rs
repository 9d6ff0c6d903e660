//! One `tenure serve` over two real etcd clusters (issue 25): etcd 3.4
//! under mutual TLS and etcd 3.5 under authentication, each with its own
//! elections (the same name in both), watched through `--config`. What
//! each cluster's history must hold is the test's own record: the tokens
//! and holders etcd answered to the test's campaigns, and etcd's own
//! revisions, never what serve computed. One cluster is compacted while
//! serve is down (its gap is its own), serve restarts (each resumes at its
//! own revision), one cluster is killed (`/readyz` names it, its lanes
//! are not watched, the other keeps recording), and one report spans both.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::disallowed_methods)]

mod support;

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use serde_json::{json, Value};
use support::secure::{api, enable_auth, etcdctl, Pki};
use support::{Etcd, EtcdFlags, Serve};
use tenure::election::{
    CampaignOptions, Campaigned, Client, ConnectConfig, Credentials, ElectionName, Leadership,
    TlsFiles, Ttl,
};

/// etcd 3.5's server (setup.sh fetches it; TENURE_ETCD35_DIR overrides).
fn etcd35_bin() -> PathBuf {
    let dir = std::env::var_os("TENURE_ETCD35_DIR")
        .map_or_else(|| PathBuf::from("/opt/tenure-etcd-3.5.30"), PathBuf::from);
    let bin = dir.join("bin/etcd");
    assert!(
        bin.exists(),
        "{} is missing: run scripts/setup.sh --test",
        bin.display()
    );
    bin
}

struct Clusters {
    _pki: Pki,
    a: Etcd,
    b: Etcd,
    /// The test's own clients: A with its certificate, B as root.
    ca: Client,
    cb: Client,
    tls: Vec<String>,
    root: Vec<String>,
    config: PathBuf,
}

async fn two_clusters(dir: &Path) -> Clusters {
    let pki = Pki::generate();
    let a = Etcd::start_with(pki.etcd_flags("server")).await;
    let b = Etcd::start_with(EtcdFlags {
        bin: Some(etcd35_bin()),
        ..EtcdFlags::default()
    })
    .await;
    // B: authentication, serve's user may only read.
    enable_auth(
        &b.endpoint(),
        &[],
        &[("watcher", "watch-pw", "reader", "read")],
    );
    let ca = Client::connect_with(
        &[a.endpoint()],
        "",
        ConnectConfig {
            tls: TlsFiles {
                ca: Some(pki.path("ca.crt")),
                cert: Some(pki.path("client.crt")),
                key: Some(pki.path("client.key")),
            },
            credentials: None,
        },
    )
    .await
    .expect("connect to A over mTLS");
    let cb = as_root(&b).await;
    let password = dir.join("watcher.pw");
    std::fs::write(&password, "watch-pw\n").unwrap();
    let config = dir.join("clusters.toml");
    std::fs::write(
        &config,
        format!(
            "[[cluster]]\nname = \"a\"\nendpoints = [\"{}\"]\ncacert = \"{}\"\ncert = \"{}\"\n\
             key = \"{}\"\n\n[[cluster]]\nname = \"b\"\nendpoints = \"{}\"\nuser = \"watcher\"\n\
             password-file = \"watcher.pw\"\n",
            a.endpoint(),
            pki.arg("ca.crt"),
            pki.arg("client.crt"),
            pki.arg("client.key"),
            b.endpoint()
        ),
    )
    .unwrap();
    let tls = pki.client_args();
    Clusters {
        _pki: pki,
        a,
        b,
        ca,
        cb,
        tls,
        root: vec!["--user".into(), "root:root-pw".into()],
        config,
    }
}

async fn lead(c: &Client, name: &str, id: &str) -> Leadership {
    let opts = CampaignOptions::new(Ttl::from_secs(30).unwrap());
    match c
        .campaign(&ElectionName::new(name).unwrap(), id, &opts)
        .await
        .expect("campaign")
    {
        Campaigned::Leader(l) => l,
        Campaigned::Held(h) => panic!("{id} expected to lead {name}, held by {h:?}"),
    }
}

/// etcd's revision, as the test's own client reads it.
async fn revision(c: &Client) -> i64 {
    c.etcd()
        .get("any", None)
        .await
        .expect("get")
        .header()
        .expect("header")
        .revision()
}

async fn serve(dir: &Path, c: &Clusters) -> Serve {
    let config = c.config.display().to_string();
    Serve::start(
        &["http://127.0.0.1:1".to_owned()],
        &dir.join("history.db"),
        &["--config", &config, "--no-auth", "--cluster-poll", "1s"],
        &[],
    )
    .await
}

/// `(holder, token, end cause)` of every term serve's API gives `name`.
async fn terms(s: &Serve, name: &str) -> Vec<(String, i64, Value)> {
    let path = format!("/api/v1/elections/{}/terms", name.replace('/', "%2F"));
    let (status, body) = api(s, "GET", &path, None).await;
    assert_eq!(status, 200, "{path}: {body}");
    body["terms"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| {
            (
                t["holder"].as_str().unwrap().to_owned(),
                t["token"].as_i64().unwrap(),
                t["end_cause"].clone(),
            )
        })
        .collect()
}

/// How long a wait on serve may take: a cluster that was down is retried
/// with back-off up to 30 s between attempts (on a loaded machine its
/// restart can land just after one), then connected and configured.
const SETTLE: Duration = Duration::from_secs(45);

/// Waits until serve's history of `name` holds exactly `want` (within
/// [`SETTLE`]).
async fn history_is(s: &Serve, name: &str, want: &[(String, i64, Value)]) {
    let deadline = Instant::now() + SETTLE;
    loop {
        let got = terms(s, name).await;
        if got == want {
            return;
        }
        assert!(
            Instant::now() < deadline,
            "{name}: history {got:?}, etcd's record {want:?}; {:?}",
            s.logs()
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

fn term(holder: &str, token: i64, cause: Value) -> (String, i64, Value) {
    (holder.to_owned(), token, cause)
}

/// `/readyz` once `ready(status, text)` holds (within [`SETTLE`]).
async fn readyz_when(s: &Serve, ready: impl Fn(u16, &str) -> bool) -> (u16, String) {
    let deadline = Instant::now() + SETTLE;
    loop {
        let (status, text) = readyz(s).await;
        if ready(status, &text) {
            return (status, text);
        }
        assert!(Instant::now() < deadline, "readyz: {status} {text}");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// The test's own client of an etcd with authentication, as root.
async fn as_root(etcd: &Etcd) -> Client {
    Client::connect_with(
        &[etcd.endpoint()],
        "",
        ConnectConfig {
            tls: TlsFiles::default(),
            credentials: Some(Credentials::new("root", "root-pw")),
        },
    )
    .await
    .expect("connect as root")
}

async fn readyz(s: &Serve) -> (u16, String) {
    let r = reqwest::get(s.url("/readyz")).await.expect("readyz");
    (r.status().as_u16(), r.text().await.expect("body"))
}

async fn gaps(s: &Serve, name: &str) -> usize {
    let path = format!("/api/v1/elections/{}/events", name.replace('/', "%2F"));
    let (_, body) = api(s, "GET", &path, None).await;
    body["events"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|e| e["type"] == "gap")
        .count()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_clusters_one_serve_each_history_its_own_log() {
    let dir = tempfile::tempdir().expect("tempdir");
    let mut c = two_clusters(dir.path()).await;
    let s = serve(dir.path(), &c).await;
    s.ready().await;
    let (status, text) = readyz(&s).await;
    assert_eq!(status, 200, "{text}");
    assert!(
        text.contains("cluster a: ready") && text.contains("cluster b: ready"),
        "{text}"
    );

    // The same name in both clusters, and one of each's own.
    let a1 = lead(&c.ca, "jobs", "a-one").await;
    let b1 = lead(&c.cb, "jobs", "b-one").await;
    let (ta1, tb1) = (a1.token(), b1.token());
    a1.resign().await.expect("resign");
    let a2 = lead(&c.ca, "jobs", "a-two").await;
    let bd = lead(&c.cb, "db", "b-db").await;
    let (ta2, tbd) = (a2.token(), bd.token());
    history_is(
        &s,
        "a/jobs",
        &[
            term("a-one", ta1, json!("resigned")),
            term("a-two", ta2, Value::Null),
        ],
    )
    .await;
    history_is(&s, "b/jobs", &[term("b-one", tb1, Value::Null)]).await;
    history_is(&s, "b/db", &[term("b-db", tbd, Value::Null)]).await;
    // Each cluster's own names only.
    assert!(terms(&s, "a/db").await.is_empty());

    // The cluster label, per cluster.
    let m = s.metrics().await;
    for (series, want) in [
        (
            r#"tenure_election_has_leader{cluster="a",election="jobs"}"#,
            1.0,
        ),
        (
            r#"tenure_election_has_leader{cluster="b",election="db"}"#,
            1.0,
        ),
        (r#"tenure_etcd_up{cluster="a"}"#, 1.0),
        (r#"tenure_etcd_up{cluster="b"}"#, 1.0),
    ] {
        assert_eq!(
            support::metric_value(&m, series),
            Some(want),
            "{series}\n{m}"
        );
    }
    assert_eq!(
        m.matches("# HELP tenure_etcd_up ").count(),
        1,
        "each family once"
    );
    let only_b = reqwest::get(s.url("/metrics?cluster=b"))
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
    assert!(only_b.contains(r#"cluster="b",election="db""#), "{only_b}");
    assert!(
        !only_b.contains(r#"cluster="a",election="jobs""#),
        "{only_b}"
    );

    // The mutating API reaches the election's own cluster.
    let (status, body) = api(
        &s,
        "POST",
        "/api/v1/elections/a%2Fhttp/campaign",
        Some(json!({"candidate": "via-api", "ttl_seconds": 30})),
    )
    .await;
    // A is TLS: the API campaigns with serve's certificate (may write).
    assert_eq!(status, 200, "{body}");
    let leader =
        c.ca.leader(&ElectionName::new("http").unwrap())
            .await
            .expect("leader");
    assert_eq!(
        leader.map(|l| l.leader.token),
        body["token"].as_i64(),
        "in A's etcd"
    );
    assert_eq!(body["name"], "a/http", "named as the pages name it");
    let (status, body) = api(
        &s,
        "POST",
        "/api/v1/elections/nope%2Fx/campaign",
        Some(json!({"candidate": "x", "ttl_seconds": 30})),
    )
    .await;
    assert_eq!(status, 400, "no such cluster: {body}");

    // Serve stops; B is compacted while it is down; each resumes at its own.
    let (rev_a, rev_b) = (revision(&c.ca).await, revision(&c.cb).await);
    assert_eq!(s.stop().await, Some(0));
    drop(bd);
    etcdctl(&c.b.endpoint(), &c.root, &["put", "filler", "x"]);
    let compact_at = revision(&c.cb).await;
    etcdctl(
        &c.b.endpoint(),
        &c.root,
        &["compact", &compact_at.to_string()],
    );
    let s = serve(dir.path(), &c).await;
    let logs = s.log_text();
    assert!(
        logs.contains(&format!("resuming after revision {rev_a} (cluster a)")),
        "A resumes at its own revision {rev_a}: {logs}"
    );
    assert!(
        logs.contains(&format!("resuming after revision {rev_b} (cluster b)")),
        "B resumes at its own revision {rev_b}: {logs}"
    );
    s.ready().await;
    // B's gap is B's: its lanes have it, A's do not.
    let deadline = Instant::now() + Duration::from_secs(20);
    while gaps(&s, "b/jobs").await == 0 {
        assert!(Instant::now() < deadline, "no gap in B: {:?}", s.logs());
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert_eq!(gaps(&s, "a/jobs").await, 0, "A was not compacted");
    // The election pages draw B's gap on B's elections only.
    let page = |path: &'static str| {
        let url = s.url(path);
        async move { reqwest::get(url).await.unwrap().text().await.unwrap() }
    };
    assert!(page("/elections/b/jobs")
        .await
        .contains("etcd compacted revisions"));
    assert!(!page("/elections/a/jobs")
        .await
        .contains("etcd compacted revisions"));
    let m = s.metrics().await;
    assert_eq!(
        support::metric_value(&m, r#"tenure_history_gaps_total{cluster="b"}"#),
        Some(1.0),
        "{m}"
    );
    assert_eq!(
        support::metric_value(&m, r#"tenure_history_gaps_total{cluster="a"}"#),
        Some(0.0),
        "{m}"
    );
    // b-db's term ended while serve was down, in the compacted range.
    history_is(&s, "b/db", &[term("b-db", tbd, json!("unknown"))]).await;

    // A dies: /readyz names it, its lanes go unknown, B keeps recording.
    c.a.kill().await;
    let (status, text) = readyz_when(&s, |status, _| status == 503).await;
    assert!(
        text.contains("cluster a") && text.contains("cluster b: ready"),
        "{status} {text}"
    );
    let b2 = lead(&c.cb, "db", "b-two").await;
    let b2_token = b2.token();
    history_is(
        &s,
        "b/db",
        &[
            term("b-db", tbd, json!("unknown")),
            term("b-two", b2.token(), Value::Null),
        ],
    )
    .await;
    let page = reqwest::get(s.url("/elections/a/jobs"))
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
    assert!(
        page.contains("not watched since"),
        "A's lane is not watched"
    );
    let page = reqwest::get(s.url("/elections/b/db"))
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
    assert!(!page.contains("not watched since"), "B's lane is watched");

    // One report over both clusters, and one of B alone.
    let from = "1h";
    let (status, report) = api(
        &s,
        "GET",
        &format!("/api/v1/report?from={from}&format=json"),
        None,
    )
    .await;
    assert_eq!(status, 200, "{report}");
    let names: Vec<&str> = report["elections"]
        .as_array()
        .unwrap()
        .iter()
        .map(|e| e["election"].as_str().unwrap())
        .collect();
    for n in ["a/jobs", "b/jobs", "b/db"] {
        assert!(names.contains(&n), "{n} in {names:?}");
    }
    let (_, report) = api(
        &s,
        "GET",
        &format!("/api/v1/report?from={from}&format=json&cluster=b"),
        None,
    )
    .await;
    let names: Vec<&str> = report["elections"]
        .as_array()
        .unwrap()
        .iter()
        .map(|e| e["election"].as_str().unwrap())
        .collect();
    assert!(names.iter().all(|n| n.starts_with("b/")), "{names:?}");
    assert_eq!(s.stop().await, Some(0));

    // This history records clusters a and b: one cluster without
    // --cluster is refused on it, with the reason, and it is left intact.
    let out = refused(
        &dir.path().join("history.db"),
        &["--endpoints", &c.b.endpoint(), "--user", "watcher:watch-pw"],
    )
    .await;
    assert!(out.contains("records the clusters a, b"), "{out}");
    // A flag meant for every cluster beside --config is refused too.
    let config = c.config.display().to_string();
    let out = refused(
        &dir.path().join("other.db"),
        &["--config", &config, "--prefix", "p/"],
    )
    .await;
    assert!(out.contains("--prefix given with --config"), "{out}");
    // Restarted while A is down: serve starts, says A is not watched, and
    // B's history is whole.
    let s = serve(dir.path(), &c).await;
    let (status, text) = readyz_when(&s, |_, t| t.contains("cluster b: ready")).await;
    assert_eq!(status, 503, "{text}");
    assert!(text.contains("not ready: cluster a not watched"), "{text}");
    history_is(
        &s,
        "b/db",
        &[
            term("b-db", tbd, json!("unknown")),
            term("b-two", b2_token, Value::Null),
        ],
    )
    .await;
    assert_eq!(s.stop().await, Some(0));
    drop((a2, b1, b2));
    let _ = &c.tls;
}

/// One etcd named twice (`--cluster a=E --cluster b=E`) is refused at
/// start with the reason: every election would be recorded twice, and a
/// campaign to `b/…` answered with `a/…`'s holder. The same etcd under two
/// names with disjoint prefixes is a configuration that works.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn one_etcd_under_two_names_is_refused() {
    let dir = tempfile::tempdir().expect("tempdir");
    let e = Etcd::start().await;
    let db = dir.path().join("history.db");
    let a = format!("a={}", e.endpoint());
    let b = format!("b={}", e.endpoint());
    let out = refused(&db, &["--cluster", &a, "--cluster", &b]).await;
    assert!(
        out.contains("--cluster a and --cluster b are the same etcd"),
        "{out}"
    );
    assert!(out.contains("--prefix"), "says what to do: {out}");
    let config = dir.path().join("two-prefixes.toml");
    std::fs::write(
        &config,
        format!(
            "[[cluster]]\nname = \"a\"\nendpoints = \"{0}\"\nprefix = \"one/\"\n\n\
             [[cluster]]\nname = \"b\"\nendpoints = \"{0}\"\nprefix = \"two/\"\n",
            e.endpoint()
        ),
    )
    .unwrap();
    let config = config.display().to_string();
    let s = Serve::start(
        &[e.endpoint()],
        &dir.path().join("other.db"),
        &["--config", &config, "--no-auth"],
        &[],
    )
    .await;
    s.ready().await;
    assert_eq!(s.stop().await, Some(0));
}

/// `tenure serve --db DB ARGS…` fails at once: its stderr.
async fn refused(db: &Path, args: &[&str]) -> String {
    let out = tokio::time::timeout(
        Duration::from_secs(20),
        tokio::process::Command::new(support::tenure_bin())
            .args(["serve", "--listen", "127.0.0.1:0", "--db"])
            .arg(db)
            .args(args)
            .env_remove("TENURE_PREFIX")
            .kill_on_drop(true)
            .output(),
    )
    .await
    .expect("serve refused at once")
    .expect("run tenure serve");
    assert!(!out.status.success(), "refused: {out:?}");
    String::from_utf8_lossy(&out.stderr).into_owned()
}

/// Other systems' elections (`source` in a cluster's table) are named
/// under their cluster too: `x//app/job` for the key `/app/job` of x, and
/// its page, terms and URL work like any other.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_clusters_sources_are_named_under_it() {
    let dir = tempfile::tempdir().expect("tempdir");
    let (x, y) = (Etcd::start().await, Etcd::start().await);
    let config = dir.path().join("clusters.toml");
    std::fs::write(
        &config,
        format!(
            "[[cluster]]\nname = \"x\"\nendpoints = \"{}\"\nsource = [\"key:/app/\"]\n\
             sources-only = true\n\n[[cluster]]\nname = \"y\"\nendpoints = \"{}\"\n",
            x.endpoint(),
            y.endpoint()
        ),
    )
    .unwrap();
    let config = config.display().to_string();
    let s = Serve::start(
        &[x.endpoint()],
        &dir.path().join("history.db"),
        &["--config", &config, "--no-auth"],
        &[],
    )
    .await;
    s.ready().await;
    // x: a key of another system's, with a lease, its value the holder.
    let mut raw = x.client().await;
    let lease = raw.lease_grant(30, None).await.unwrap().id();
    let put = raw
        .put(
            "/app/job",
            "worker-7",
            Some(etcd_client::PutOptions::new().with_lease(lease)),
        )
        .await
        .unwrap();
    let token = put.header().unwrap().revision();
    // y: one of tenure's own, of the same last segment.
    let cy = Client::connect(&[y.endpoint()], "").await.unwrap();
    let yl = lead(&cy, "job", "y-holder").await;
    history_is(&s, "x//app/job", &[term("worker-7", token, Value::Null)]).await;
    history_is(&s, "y/job", &[term("y-holder", yl.token(), Value::Null)]).await;
    let page = reqwest::get(s.url("/elections/x//app/job")).await.unwrap();
    assert_eq!(page.status(), 200);
    assert!(page.text().await.unwrap().contains("worker-7"));
    // x watches only its source: a tenure election written there is not
    // one of its elections.
    let cx = Client::connect(&[x.endpoint()], "").await.unwrap();
    let xl = lead(&cx, "own", "nobody-watches").await;
    // A later key of the source, once recorded, says serve is past it.
    let later = raw.put("/app/later", "w", None).await.unwrap();
    let later = later.header().unwrap().revision();
    history_is(&s, "x//app/later", &[term("w", later, Value::Null)]).await;
    let (_, list) = api(&s, "GET", "/api/v1/elections", None).await;
    let names: Vec<&str> = list["elections"]
        .as_array()
        .unwrap()
        .iter()
        .map(|e| e["name"].as_str().unwrap())
        .collect();
    assert_eq!(names, ["x//app/job", "x//app/later", "y/job"], "{list}");
    assert_eq!(s.stop().await, Some(0));
    drop((yl, xl));
}

/// A cluster whose etcd does not answer when serve starts, one with a
/// user (etcd hands out the token on connect): serve starts anyway, says
/// why on `/readyz`, records the other, refuses the cluster's API calls
/// with 503, and watches it once it answers.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cluster_down_at_start_is_watched_once_it_answers() {
    let dir = tempfile::tempdir().expect("tempdir");
    let x = Etcd::start().await;
    let mut y = Etcd::start().await;
    enable_auth(
        &y.endpoint(),
        &[],
        &[("watcher", "watch-pw", "reader", "read")],
    );
    // z: down at start too, and its user may read nothing.
    let mut z = Etcd::start().await;
    enable_auth(&z.endpoint(), &[], &[("nobody", "watch-pw", "none", "")]);
    std::fs::write(dir.path().join("pw"), "watch-pw\n").unwrap();
    let config = dir.path().join("clusters.toml");
    std::fs::write(
        &config,
        format!(
            "[[cluster]]\nname = \"x\"\nendpoints = \"{}\"\n\n[[cluster]]\nname = \"y\"\n\
             endpoints = \"{}\"\nuser = \"watcher\"\npassword-file = \"pw\"\n\n\
             [[cluster]]\nname = \"z\"\nendpoints = \"{}\"\nuser = \"nobody\"\n\
             password-file = \"pw\"\n",
            x.endpoint(),
            y.endpoint(),
            z.endpoint()
        ),
    )
    .unwrap();
    y.kill().await;
    z.kill().await;
    let config = config.display().to_string();
    let s = Serve::start(
        &[x.endpoint()],
        &dir.path().join("history.db"),
        &["--config", &config, "--no-auth"],
        &[],
    )
    .await;
    let (status, text) = readyz_when(&s, |_, t| t.contains("cluster x: ready")).await;
    assert_eq!(status, 503, "{text}");
    assert!(text.contains("cluster y: not ready: etcd at"), "{text}");
    assert!(
        text.contains("has not answered since serve started"),
        "{text}"
    );
    let cx = Client::connect(&[x.endpoint()], "").await.unwrap();
    let xl = lead(&cx, "jobs", "x-holder").await;
    history_is(&s, "x/jobs", &[term("x-holder", xl.token(), Value::Null)]).await;
    let (status, body) = api(
        &s,
        "POST",
        "/api/v1/elections/y%2Fjobs/campaign",
        Some(json!({"candidate": "c", "ttl_seconds": 30})),
    )
    .await;
    assert_eq!(status, 503, "{body}");
    assert_eq!(body["error"]["code"], "etcd_unavailable", "{body}");
    let page = reqwest::get(s.url("/elections/y/jobs"))
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
    assert!(page.contains("etcd could not be asked"), "{page}");

    // y answers: serve connects (its retries back off to 30 s at most;
    // here within a few), and records it.
    y.restart().await;
    let cy = as_root(&y).await;
    let yl = lead(&cy, "jobs", "y-holder").await;
    history_is(&s, "y/jobs", &[term("y-holder", yl.token(), Value::Null)]).await;
    readyz_when(&s, |_, t| t.contains("cluster y: ready")).await;
    assert!(s.log_text().contains("cluster \"y\": connected to etcd"));
    // z answers, but its user may not read what the watcher watches: said
    // in /readyz with what to do, never watched blind.
    z.restart().await;
    let (status, text) =
        readyz_when(&s, |_, t| t.contains("cluster z: not ready: etcd denied")).await;
    assert_eq!(status, 503, "{text}");
    assert!(text.contains("grant-permission"), "{text}");
    assert!(text.contains("cluster y: ready"), "{text}");
    assert_eq!(s.stop().await, Some(0));
    drop((xl, yl));
}
