//! `tenure` against a real etcd that serves clients over TLS only and
//! requires client certificates (`--cert-file --key-file --client-cert-auth
//! --trusted-ca-file`), with certificates made by `openssl` for the test.
//! Every subcommand works; every misconfiguration is one line, exit 1,
//! within seconds.
// Tests, benches and their harness assert with unwrap/expect, spawn bare tasks
// and read the wall clock: the lints of Cargo.toml and clippy.toml hold src/.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::disallowed_methods)]

mod support;

use std::process::Stdio;
use std::time::Duration;

use serde_json::{json, Value};
use support::fixtures::{tenure_at as tenure, text};
use support::secure::{api, fails_fast, recorded, timed, Pki};
use support::{Etcd, Serve};
use tokio::io::{AsyncBufReadExt, BufReader};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_subcommand_works_over_mutual_tls() {
    let pki = Pki::generate();
    let etcd = Etcd::start_with(pki.etcd_flags("server")).await;
    let ep = etcd.endpoint();
    assert!(ep.starts_with("https://"), "{ep}");
    let tls = pki.client_args();
    let tls: Vec<&str> = tls.iter().map(String::as_str).collect();

    // serve: flags after the subcommand (they are global).
    let dir = tempfile::tempdir().expect("tempdir");
    let mut serve_args = vec!["--no-auth"];
    serve_args.extend(&tls);
    let s = Serve::start(
        std::slice::from_ref(&ep),
        &dir.path().join("h.db"),
        &serve_args,
        &[],
    )
    .await;
    s.ready().await;

    // campaign: the TLS files from TENURE_* variables.
    let mut campaign = tenure(&ep);
    campaign
        .env("TENURE_CACERT", pki.path("ca.crt"))
        .env("TENURE_CERT", pki.path("client.crt"))
        .env("TENURE_KEY", pki.path("client.key"))
        .args(["campaign", "tls/demo", "--ttl", "5", "--", "sleep", "60"])
        .stderr(Stdio::piped());
    let mut campaign = campaign.spawn().expect("spawn campaign");
    let mut lines = BufReader::new(campaign.stderr.take().expect("stderr")).lines();
    let token: i64 = loop {
        let line = tokio::time::timeout(Duration::from_secs(15), lines.next_line())
            .await
            .expect("campaign led in time")
            .expect("stderr")
            .expect("campaign exited before leading");
        if let Some(rest) = line.split(" with token ").nth(1) {
            break rest
                .split_whitespace()
                .next()
                .and_then(|t| t.parse().ok())
                .expect("token");
        }
    };
    recorded(&s, "tls/demo", token).await;

    // leader: the TLS files from etcdctl's variables.
    let mut leader = tenure(&ep);
    leader
        .env("ETCDCTL_CACERT", pki.path("ca.crt"))
        .env("ETCDCTL_CERT", pki.path("client.crt"))
        .env("ETCDCTL_KEY", pki.path("client.key"))
        .args(["leader", "tls/demo", "--json"]);
    let (out, _) = timed(leader).await;
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    let v: Value = serde_json::from_slice(&out.stdout).expect("leader --json");
    assert_eq!(v["token"].as_i64(), Some(token), "{v}");

    // fence: flags.
    let mut fence = tenure(&ep);
    fence
        .args(&tls)
        .args(["fence", "tls/demo", "db", "--token", &token.to_string()]);
    let (out, _) = timed(fence).await;
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    assert!(
        text(&out.stdout).starts_with("accepted"),
        "{}",
        text(&out.stdout)
    );

    // observe: its first line is the current leader.
    let mut observe = tenure(&ep);
    observe
        .args(&tls)
        .args(["observe", "tls/demo"])
        .stdout(Stdio::piped());
    let mut observe = observe.spawn().expect("spawn observe");
    let mut out = BufReader::new(observe.stdout.take().expect("stdout")).lines();
    let first = tokio::time::timeout(Duration::from_secs(10), out.next_line())
        .await
        .expect("observe printed in time")
        .expect("stdout")
        .expect("a line");
    assert!(first.contains(&format!("(token {token})")), "{first}");
    let _ = observe.start_kill();

    // The HTTP API: a live read and a campaign, both through serve's TLS client.
    let (st, v) = api(&s, "GET", "/api/v1/elections/tls%2Fdemo", None).await;
    assert_eq!(st, 200, "{v}");
    assert_eq!(v["token"].as_i64(), Some(token), "{v}");
    let (st, v) = api(
        &s,
        "POST",
        "/api/v1/elections/tls%2Fapi/campaign",
        Some(json!({"candidate": "http", "ttl_seconds": 5})),
    )
    .await;
    assert_eq!(st, 200, "{v}");
    let api_token = v["token"].as_i64().expect("token");
    recorded(&s, "tls/api", api_token).await;

    let _ = campaign.start_kill();
    let _ = campaign.wait().await;
    let _ = s.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tls_misconfigurations_fail_fast_with_one_line() {
    let pki = Pki::generate();
    let etcd = Etcd::start_with(pki.etcd_flags("server")).await;
    let ep = etcd.endpoint();
    let p = |f: &str| pki.arg(f);

    let mut cmd = tenure(&ep);
    cmd.args(["--cacert", &p("other-ca.crt"), "--cert", &p("client.crt")])
        .args(["--key", &p("client.key"), "leader", "x"]);
    fails_fast("unknown CA", cmd, "not signed by a CA in --cacert").await;

    let mut cmd = tenure(&ep);
    cmd.args(["--cacert", &p("ca.crt"), "leader", "x"]);
    fails_fast(
        "no client certificate",
        cmd,
        "requires a client certificate",
    )
    .await;

    // A client certificate of a CA etcd does not trust.
    let mut cmd = tenure(&ep);
    cmd.args(["--cacert", &p("ca.crt"), "--cert", &p("other-ca.crt")])
        .args(["--key", &p("other-ca.key"), "leader", "x"]);
    fails_fast(
        "untrusted client certificate",
        cmd,
        "refused the client certificate",
    )
    .await;

    let mut cmd = tenure(&ep);
    cmd.args(["--cacert", &p("missing.crt"), "leader", "x"]);
    fails_fast("missing CA file", cmd, "cannot read --cacert file").await;

    let mut cmd = tenure(&ep);
    cmd.args([
        "--cacert",
        &p("ca.crt"),
        "--cert",
        &p("client.crt"),
        "leader",
        "x",
    ]);
    fails_fast("cert without key", cmd, "--cert needs --key").await;

    let mut cmd = tenure(&ep.replace("https://", "http://"));
    cmd.args(["--cacert", &p("ca.crt"), "leader", "x"]);
    fails_fast(
        "http endpoint with TLS files",
        cmd,
        "need https:// endpoints",
    )
    .await;

    // serve too: not a watcher retrying forever.
    let dir = tempfile::tempdir().expect("tempdir");
    let mut cmd = tenure(&ep);
    cmd.args(["--cacert", &p("other-ca.crt"), "--cert", &p("client.crt")])
        .args([
            "--key",
            &p("client.key"),
            "serve",
            "--listen",
            "127.0.0.1:0",
            "--db",
        ])
        .arg(dir.path().join("h.db"));
    fails_fast("serve, unknown CA", cmd, "unknown CA").await;
    drop(etcd);

    // etcd's certificate names another host.
    let etcd = Etcd::start_with(pki.etcd_flags("wrong-name")).await;
    let mut cmd = tenure(&etcd.endpoint());
    cmd.args(pki.client_args()).args(["leader", "x"]);
    fails_fast("server name mismatch", cmd, "server name mismatch").await;
    drop(etcd);

    // etcd's certificate expired (notAfter was when it was made).
    pki.until_expired().await;
    let etcd = Etcd::start_with(pki.etcd_flags("expired")).await;
    let mut cmd = tenure(&etcd.endpoint());
    cmd.args(pki.client_args())
        .args(["campaign", "x", "--", "true"]);
    fails_fast("expired server certificate", cmd, "certificate has expired").await;
}

/// The watcher reopens a stalled watch on a new connection
/// (`Client::reconnect`): that connection must use the same TLS files, or
/// serve would never see another change.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn serve_reconnects_over_tls_after_a_stall() {
    let pki = Pki::generate();
    let etcd = Etcd::start_with(pki.etcd_flags("server")).await;
    let proxy = support::proxy::Proxy::start(etcd.client_addr()).await;
    let via_proxy = proxy.endpoint().replace("http://", "https://");
    let tls = pki.client_args();
    let mut serve_args: Vec<&str> = vec!["--no-auth"];
    serve_args.extend(tls.iter().map(String::as_str));
    let dir = tempfile::tempdir().expect("tempdir");
    let s = Serve::start(
        std::slice::from_ref(&via_proxy),
        &dir.path().join("h.db"),
        &serve_args,
        &[],
    )
    .await;
    s.ready().await;
    let accepted = proxy.accepted();
    assert!(proxy.blackhole_existing() > 0, "serve had a connection");

    // A term begun while serve's connection is half-open (direct to etcd).
    let mut cmd = tenure(&etcd.endpoint());
    cmd.args(&tls)
        .args(["campaign", "stall", "--ttl", "30", "--", "sleep", "60"])
        .stderr(Stdio::piped());
    let mut holder = cmd.spawn().expect("spawn campaign");
    let mut lines = BufReader::new(holder.stderr.take().expect("stderr")).lines();
    let token: i64 = loop {
        let line = tokio::time::timeout(Duration::from_secs(15), lines.next_line())
            .await
            .expect("campaign led in time")
            .expect("stderr")
            .expect("campaign exited before leading");
        if let Some(rest) = line.split(" with token ").nth(1) {
            break rest
                .split_whitespace()
                .next()
                .and_then(|t| t.parse().ok())
                .expect("token");
        }
    };
    // Probe after 5 s of silence, reopen 5 s later on a new TLS connection.
    recorded(&s, "stall", token).await;
    assert!(proxy.accepted() > accepted, "serve reconnected");
    let _ = holder.start_kill();
    let _ = holder.wait().await;
    let _ = s.stop().await;
}
