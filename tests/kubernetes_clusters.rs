//! A cluster read through the Kubernetes API beside an etcd cluster, in
//! one `tenure serve --config` (`[[cluster]] kubeconfig = …` and
//! `endpoints = …`), with the real parts: kube-apiserver v1.37 over its
//! own etcd (a Lease renewed client-go's way), a second etcd with a tenure
//! election. Each is recorded as its own cluster (`CLUSTER/…` names,
//! `/readyz` lines, the metrics' `cluster` label), the kubeconfig's
//! context chosen by the table (its current context names nothing), and
//! the API going away stops only its own cluster. The reference is what
//! the test wrote itself: the Lease's holder, the tenure term's token.
//!
//! Also: a table that names both etcd endpoints and a kubeconfig, or an
//! etcd setting beside a kubeconfig, is refused at start, saying which.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::disallowed_methods)]

mod support;

use std::path::Path;
use std::time::{Duration, Instant};

use serde_json::Value;
use support::fixtures::lead;
use support::kube::{self, JsonRenewer, KubeApiserver, RENEWED};
use support::{Etcd, Serve};
use tenure::election::Client;

/// No etcd of the serve's own: the endpoints given are never used.
fn nowhere() -> [String; 1] {
    ["http://127.0.0.1:9".to_owned()]
}

/// The terms serve recorded of `name`: (holder, token, ended).
async fn terms(serve: &Serve, name: &str) -> Vec<(String, i64, bool)> {
    let url = serve.url(&format!(
        "/api/v1/elections/{}/terms",
        name.replace('/', "%2F")
    ));
    let v: Value = reqwest::get(url)
        .await
        .expect("terms")
        .json()
        .await
        .expect("json");
    v["terms"]
        .as_array()
        .map(|ts| {
            ts.iter()
                .map(|t| {
                    (
                        t["holder"].as_str().unwrap_or_default().to_owned(),
                        t["token"].as_i64().unwrap_or_default(),
                        !t["ended_at_ms"].is_null(),
                    )
                })
                .collect()
        })
        .unwrap_or_default()
}

/// Polls `f` until it holds, for at most 30 s.
async fn until(what: &str, mut f: impl AsyncFnMut() -> bool) {
    let deadline = Instant::now() + Duration::from_secs(30);
    while !f().await {
        assert!(Instant::now() < deadline, "timed out waiting for {what}");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// `tenure serve --config` of `tables` (written into `dir`), ready.
async fn serve_config(dir: &Path, tables: &str) -> Serve {
    let config = dir.join("clusters.toml");
    std::fs::write(&config, tables).expect("config");
    let cfg = config.display().to_string();
    let serve = Serve::start(
        &nowhere(),
        &dir.join("history.db"),
        &["--config", &cfg, "--cluster-poll", "0", "--no-auth"],
        &[],
    )
    .await;
    serve.ready().await;
    serve
}

/// `/readyz`: status and text.
async fn readyz(serve: &Serve) -> (u16, String) {
    let r = reqwest::get(serve.url("/readyz")).await.expect("readyz");
    (r.status().as_u16(), r.text().await.expect("text"))
}

/// A kubeconfig for tenure's lease-reading account whose current context
/// names nothing: only a table's `context = "reader"` makes it usable.
async fn kubeconfig(api: &KubeApiserver, dir: &Path) -> String {
    let path = api.reader_kubeconfig(dir).await;
    let text = std::fs::read_to_string(&path).expect("kubeconfig");
    let text = text.replace("current-context: reader", "current-context: elsewhere");
    std::fs::write(&path, text).expect("kubeconfig");
    path.display().to_string()
}

/// What `/api/v1/events` (for `election`, or all) says within `within`,
/// or until it said a Lease's renewal.
async fn sse_for(serve: &Serve, election: Option<&str>, within: Duration) -> String {
    let url = match election {
        Some(e) => serve.url(&format!(
            "/api/v1/events?election={}",
            e.replace('/', "%2F")
        )),
        None => serve.url("/api/v1/events"),
    };
    let mut resp = reqwest::get(url).await.expect("GET /api/v1/events");
    let mut said = String::new();
    let deadline = tokio::time::Instant::now() + within;
    while let Ok(Ok(Some(chunk))) = tokio::time::timeout_at(deadline, resp.chunk()).await {
        said.push_str(&String::from_utf8_lossy(&chunk));
        if said.contains("event: lease\ndata:") && said.ends_with('\n') {
            break;
        }
    }
    said
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_api_cluster_and_an_etcd_cluster_in_one_serve_each_its_own() {
    if !kube::available() {
        return;
    }
    let kube_etcd = Etcd::start().await;
    let api = KubeApiserver::start(&kube_etcd.endpoint()).await;
    let plain = Etcd::start().await;
    let dir = tempfile::tempdir().expect("tempdir");
    let kubeconfig = kubeconfig(&api, dir.path()).await;
    let renewer = JsonRenewer::start(&kube_etcd).await;
    let tables = format!(
        "[[cluster]]\nname = \"k8s\"\nkubeconfig = {kubeconfig:?}\ncontext = \"reader\"\n\n\
         [[cluster]]\nname = \"plain\"\nendpoints = {:?}\n",
        plain.endpoint()
    );
    let serve = serve_config(dir.path(), &tables).await;
    let c = Client::connect(&[plain.endpoint()], "")
        .await
        .expect("connect");
    let p1 = lead(&c, "jobs", "p1", 30).await;

    // Each recorded under its own cluster's name. The Lease's token is the
    // revision of its acquiring write: the renewer's first, its key's
    // create revision in kube-apiserver's etcd.
    let acquired = kube_etcd
        .client()
        .await
        .get("/registry/leases/kube-system/kcm", None)
        .await
        .expect("get")
        .kvs()
        .first()
        .expect("the Lease")
        .create_revision();
    let lease = format!("k8s/{RENEWED}");
    until("both clusters' terms", async || {
        terms(&serve, &lease).await == [(kube::RENEWER.to_owned(), acquired, false)]
            && terms(&serve, "plain/jobs").await == [("p1".to_owned(), p1.token(), false)]
    })
    .await;
    let (status, text) = readyz(&serve).await;
    assert_eq!(status, 200, "{text}");
    assert!(
        text.contains("cluster k8s: ready") && text.contains("cluster plain: ready"),
        "{text}"
    );
    // The Lease's renewals on the live feed, named as the pages name it,
    // to its own subscribers only.
    let said = sse_for(&serve, Some(&lease), Duration::from_secs(10)).await;
    let data = said
        .lines()
        .skip_while(|l| *l != "event: lease")
        .nth(1)
        .unwrap_or_else(|| panic!("no lease event for {lease}: {said}"));
    let v: serde_json::Value =
        serde_json::from_str(data.trim_start_matches("data:").trim()).expect("json");
    assert_eq!(v["election"], lease.as_str(), "{v}");
    assert_eq!(v["held"][0], kube::RENEWER, "{v}");
    assert_eq!(v["duration_s"], 2, "{v}");
    let unfiltered = sse_for(&serve, None, Duration::from_secs(3)).await;
    assert!(!unfiltered.contains("event: lease"), "{unfiltered}");
    // A Lease is read, never written: no campaign in its name (it would
    // be a key of tenure's own in kube-apiserver's etcd, recorded by nobody).
    let campaign = reqwest::Client::new()
        .post(serve.url(&format!(
            "/api/v1/elections/{}/campaign",
            lease.replace('/', "%2F")
        )))
        .json(&serde_json::json!({"candidate": "intruder", "ttl_seconds": 10}))
        .send()
        .await
        .expect("POST campaign");
    let status = campaign.status().as_u16();
    let body: Value = campaign.json().await.expect("json");
    assert_eq!(
        (status, body["error"]["code"].as_str()),
        (400, Some("invalid_name")),
        "{body}"
    );
    let metrics = serve.metrics().await;
    for c in ["k8s", "plain"] {
        assert!(
            metrics.contains(&format!("cluster=\"{c}\"")),
            "metrics label cluster {c}"
        );
    }

    // The API gone: its cluster only is not ready; the etcd cluster goes
    // on being recorded.
    renewer.stop().await;
    drop(api);
    p1.resign().await.expect("resign");
    let p2 = lead(&c, "jobs", "p2", 30).await;
    until("p2's term through the API's outage", async || {
        terms(&serve, "plain/jobs")
            .await
            .iter()
            .any(|t| t.0 == "p2" && t.1 == p2.token())
    })
    .await;
    until("the API cluster said not ready", async || {
        let (status, text) = readyz(&serve).await;
        status == 503
            && text.contains("cluster k8s: not ready")
            && text.contains("cluster plain: ready")
    })
    .await;
    assert_eq!(serve.stop().await, Some(0));
}

/// `tenure serve --config FILE` fails at once: its stderr.
async fn refused(config: &Path) -> String {
    let out = tokio::time::timeout(
        Duration::from_secs(30),
        tokio::process::Command::new(support::tenure_bin())
            .args(["serve", "--listen", "127.0.0.1:0", "--db"])
            .arg(config.with_extension("db"))
            .arg("--config")
            .arg(config)
            .kill_on_drop(true)
            .output(),
    )
    .await
    .expect("refused at once")
    .expect("run tenure serve");
    assert!(!out.status.success(), "refused: {out:?}");
    String::from_utf8_lossy(&out.stderr).into_owned()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_table_that_mixes_etcd_and_the_api_is_refused_saying_which() {
    let dir = tempfile::tempdir().expect("tempdir");
    let path = dir.path().join("c.toml");
    for (table, says) in [
        (
            "endpoints = \"http://127.0.0.1:9\"\nkubeconfig = \"k\"",
            "endpoints and kubeconfig",
        ),
        (
            "kubeconfig = \"k\"\nprefix = \"p/\"",
            "prefix set for a cluster read through the Kubernetes API",
        ),
        (
            "context = \"c\"\nendpoints = \"http://127.0.0.1:9\"",
            "context and kube-heartbeats need kubeconfig",
        ),
        (
            "in-cluster = true\nkubeconfig = \"k\"",
            "kubeconfig and in-cluster",
        ),
        ("name2 = 1", "expected [[cluster]] tables"),
        ("", "give endpoints (etcd), or kubeconfig"),
    ] {
        std::fs::write(&path, format!("[[cluster]]\nname = \"x\"\n{table}\n")).expect("write");
        let err = refused(&path).await;
        assert!(err.contains(says), "{table:?}: {err}");
    }
}

/// A kubeconfig whose user is an exec plugin (a relative command, run from
/// the kubeconfig's folder) keeps an API cluster recorded past several
/// expiries of its token, and runs it again after a 401.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_exec_plugins_token_is_fetched_again_as_it_expires_and_after_a_401() {
    if !kube::available() {
        return;
    }
    let kube_etcd = Etcd::start().await;
    let api = KubeApiserver::start(&kube_etcd.endpoint()).await;
    let dir = tempfile::tempdir().expect("tempdir");
    let kubeconfig = api.exec_kubeconfig(dir.path()).await;
    let renewer = JsonRenewer::start(&kube_etcd).await;
    let tables =
        format!("[[cluster]]\nname = \"k8s\"\nkubeconfig = {kubeconfig:?}\ncontext = \"reader\"\n");
    let serve = serve_config(dir.path(), &tables).await;
    let runs = || kube::exec_runs(dir.path());
    assert!(runs() >= 2, "the refused token was followed by a new run");
    let info = std::fs::read_to_string(dir.path().join("info")).expect("info");
    assert!(info.contains(r#""interactive":false"#), "{info}");
    let lease = format!("k8s/{RENEWED}");
    let ready_at = Instant::now();
    // Past two expiries (20 s each, fetched again 10 s before): the Lease
    // is still read, its renewals arriving.
    tokio::time::sleep(Duration::from_secs(35)).await;
    let (status, text) = readyz(&serve).await;
    assert_eq!(status, 200, "{text}");
    assert!(
        runs() >= 4,
        "the plugin ran {} times in {:?}",
        runs(),
        ready_at.elapsed()
    );
    assert_eq!(terms(&serve, &lease).await.len(), 1);
    let lapsed = format!("tenure_election_lease_lapsed{{cluster=\"k8s\",election=\"{RENEWED}\"}}");
    assert_eq!(
        serve.metric(&lapsed).await,
        Some(0.0),
        "renewing, read live"
    );
    println!(
        "[figure] exec plugin: {} runs, serve ready throughout 35 s",
        runs()
    );
    renewer.stop().await;
    assert_eq!(serve.stop().await, Some(0));
}
