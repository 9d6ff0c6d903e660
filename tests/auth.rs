//! `tenure` against a real etcd with authentication enabled (set up with
//! `etcdctl user`/`role`) and `--auth-token-ttl 2`: a simple token expires
//! after two seconds without a request (a restart does not drop them: etcd
//! 3.4 replays the authentications from its WAL); JWT tokens (RS256, keys
//! from openssl) two seconds after they were issued. serve (read-only role), campaign, fence, leader,
//! observe and the HTTP API keep working, terms are recorded once, the
//! holder keeps its term; wrong credentials and missing permissions are
//! one line, exit 1, within seconds.
// Tests, benches and their harness assert with unwrap/expect, spawn bare tasks
// and read the wall clock: the lints of Cargo.toml and clippy.toml hold src/.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::disallowed_methods)]

mod support;

use std::process::Stdio;
use std::time::{Duration, Instant};

use serde_json::{json, Value};
use support::fixtures::{tenure_at as tenure, text};
use support::proxy::Proxy;
use support::secure::Pki;
use support::secure::{
    api, enable_auth, etcdctl, fails_fast, jwt_tokens, recorded, timed, with_token_ttl,
};
use support::{Etcd, EtcdFlags, Serve};
use tokio::io::{AsyncBufReadExt, BufReader, Lines};
use tokio::process::{Child, ChildStderr};

const TOKEN_TTL: u32 = 2;

async fn auth_etcd() -> Etcd {
    auth_etcd_with(with_token_ttl(EtcdFlags::default(), TOKEN_TTL)).await
}

async fn auth_etcd_with(flags: EtcdFlags) -> Etcd {
    let etcd = Etcd::start_with(flags).await;
    enable_auth(
        &etcd.endpoint(),
        &[],
        &[
            ("writer", "writer-pw", "tenure-rw", "readwrite"),
            ("reader", "reader-pw", "tenure-ro", "read"),
            ("nobody", "nobody-pw", "", ""),
        ],
    );
    etcd
}

/// `tenure campaign NAME --ttl TTL -- sleep 120` as the writer (user and
/// password from TENURE_USER / TENURE_PASSWORD); returns it once it leads.
async fn campaign(ep: &str, name: &str, ttl: &str) -> (Child, Lines<BufReader<ChildStderr>>, i64) {
    let mut cmd = tenure(ep);
    cmd.env("TENURE_USER", "writer")
        .env("TENURE_PASSWORD", "writer-pw")
        .args(["campaign", name, "--ttl", ttl, "--", "sleep", "120"])
        .stderr(Stdio::piped());
    let mut child = cmd.spawn().expect("spawn campaign");
    let mut lines = BufReader::new(child.stderr.take().expect("stderr")).lines();
    let token = loop {
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
    (child, lines, token)
}

/// `tenure leader NAME --json` as the writer: the token.
/// The leader's token as `tenure leader --json` says it; `None` when it
/// names no leader. A command that fails (no answer in its 3 s, a loaded
/// machine just after an etcd restart) is asked again, twice at most, and
/// its error printed: a failure is not read as "no leader".
async fn leader_token(ep: &str, name: &str) -> Option<i64> {
    for attempt in 1..=3 {
        let mut cmd = tenure(ep);
        cmd.args(["--user", "writer:writer-pw", "leader", name, "--json"]);
        let (out, _) = timed(cmd).await;
        if let Ok(v) = serde_json::from_slice::<Value>(&out.stdout) {
            return v["token"].as_i64();
        }
        eprintln!(
            "tenure leader {name}, attempt {attempt}: {:?} {}",
            out.status.code(),
            text(&out.stderr)
        );
    }
    panic!("tenure leader {name} failed three times");
}

async fn terms(s: &Serve, name: &str) -> Vec<Value> {
    let (_, v) = api(s, "GET", &format!("/api/v1/elections/{name}/terms"), None).await;
    v["terms"].as_array().cloned().unwrap_or_default()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn everything_keeps_working_across_token_expiry_and_a_restart() {
    let mut etcd = auth_etcd().await;
    let ep = etcd.endpoint();
    let dir = tempfile::tempdir().expect("tempdir");
    let pw = dir.path().join("reader.pw");
    std::fs::write(&pw, "reader-pw\n").expect("password file");
    let pw = pw.display().to_string();

    // serve with a read-only role, its password in a file.
    let s = Serve::start(
        std::slice::from_ref(&ep),
        &dir.path().join("h.db"),
        &["--no-auth", "--user", "reader", "--password-file", &pw],
        &[],
    )
    .await;
    s.ready().await;

    // A TTL longer than an etcd restart takes on a loaded machine: a holder
    // that cannot renew within it gives its term up (and revokes its lease),
    // which is its promise, not what this test is about. With 4 s, a restart
    // under the whole suite's load on 3.5.30 outlasted it.
    let (mut holder, _holder_err, t1) = campaign(&ep, "long", "10").await;
    recorded(&s, "long", t1).await;

    // Several token lifetimes with nothing but keepalives and watches.
    tokio::time::sleep(Duration::from_secs(4 * TOKEN_TTL as u64)).await;
    assert!(
        holder.try_wait().expect("try_wait").is_none(),
        "the holder lost its term"
    );
    assert_eq!(leader_token(&ep, "long").await, Some(t1));

    // A term made after several token lifetimes is recorded.
    let (mut later, _later_err, t2) = campaign(&ep, "later", "5").await;
    recorded(&s, "later", t2).await;

    // observe as the reader (user and password in one flag).
    let mut observe = tenure(&ep);
    observe
        .args(["--user", "reader:reader-pw", "observe", "later"])
        .stdout(Stdio::piped());
    let mut observe = observe.spawn().expect("spawn observe");
    let mut out = BufReader::new(observe.stdout.take().expect("stdout")).lines();
    let first = tokio::time::timeout(Duration::from_secs(10), out.next_line())
        .await
        .expect("observe printed in time")
        .expect("stdout")
        .expect("a line");
    assert!(first.contains(&format!("(token {t2})")), "{first}");
    let _ = observe.start_kill();

    // fence as the writer, with --password.
    let mut fence = tenure(&ep);
    fence
        .args(["--user", "writer", "--password", "writer-pw"])
        .args(["fence", "later", "db", "--token", &t2.to_string()]);
    let (out, _) = timed(fence).await;
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));

    // The read-only serve: reads work, the mutating API says why it cannot.
    let (st, v) = api(&s, "GET", "/api/v1/elections/later", None).await;
    assert_eq!((st, v["token"].as_i64()), (200, Some(t2)), "{v}");
    let (st, v) = api(
        &s,
        "POST",
        "/api/v1/elections/viahttp/campaign",
        Some(json!({"candidate": "http", "ttl_seconds": 5})),
    )
    .await;
    assert_eq!(st, 403, "{v}");
    assert_eq!(v["error"]["code"], "etcd_permission_denied", "{v}");
    let msg = v["error"]["message"].as_str().unwrap_or("");
    assert!(
        msg.contains("\"reader\"") && msg.contains("lacks write"),
        "{msg}"
    );

    // etcd restarts: the watches and keepalives are reopened, the holder
    // keeps its term, an observer sees the next term.
    let mut watcher = tenure(&ep);
    watcher
        .args(["--user", "reader:reader-pw", "observe", "after-restart"])
        .stdout(Stdio::piped());
    let mut watcher = watcher.spawn().expect("spawn observe");
    let mut seen = BufReader::new(watcher.stdout.take().expect("stdout")).lines();
    let line = tokio::time::timeout(Duration::from_secs(10), seen.next_line()).await;
    assert!(
        matches!(&line, Ok(Ok(Some(l))) if l.contains("nobody leads")),
        "{line:?}"
    );
    etcd.restart().await;
    let (mut after, _after_err, t3) = campaign(&ep, "after-restart", "5").await;
    recorded(&s, "after-restart", t3).await;
    let line = tokio::time::timeout(Duration::from_secs(10), seen.next_line()).await;
    assert!(
        matches!(&line, Ok(Ok(Some(l))) if l.contains(&format!("(token {t3})"))),
        "observe after the restart: {line:?}"
    );
    let _ = watcher.start_kill();
    assert!(
        holder.try_wait().expect("try_wait").is_none(),
        "the holder lost its term"
    );
    assert_eq!(leader_token(&ep, "long").await, Some(t1));

    // The holder resigns (its first request in a long time): serve records
    // the end, once.
    let _ = nix::sys::signal::kill(
        nix::unistd::Pid::from_raw(holder.id().expect("pid") as i32),
        nix::sys::signal::Signal::SIGTERM,
    );
    let status = tokio::time::timeout(Duration::from_secs(20), holder.wait())
        .await
        .expect("holder stopped")
        .expect("wait");
    assert_eq!(status.code(), Some(143), "resigned and exited 128+15");
    let deadline = Instant::now() + Duration::from_secs(20);
    let long = loop {
        let t = terms(&s, "long").await;
        if t.iter().any(|t| !t["ended_at"].is_null()) {
            break t;
        }
        assert!(Instant::now() < deadline, "serve never saw the end: {t:?}");
        tokio::time::sleep(Duration::from_millis(100)).await;
    };
    assert_eq!(long.len(), 1, "one term, recorded once: {long:?}");
    assert_eq!(long[0]["token"].as_i64(), Some(t1));
    assert_eq!(long[0]["end_cause"], "resigned", "{long:?}");

    for c in [&mut later, &mut after] {
        let _ = c.start_kill();
        let _ = c.wait().await;
    }
    let _ = s.stop().await;
}

/// JWT tokens expire `ttl` after they were issued, however busy the client:
/// serve (read-only) and a holder keep working across several lifetimes, a
/// later term is recorded, the holder's resignation too.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn jwt_tokens_expire_and_nothing_notices() {
    let pki = Pki::generate();
    let etcd = auth_etcd_with(jwt_tokens(&pki, TOKEN_TTL)).await;
    let ep = etcd.endpoint();
    let dir = tempfile::tempdir().expect("tempdir");
    let s = Serve::start(
        std::slice::from_ref(&ep),
        &dir.path().join("h.db"),
        &["--no-auth", "--user", "reader:reader-pw"],
        &[],
    )
    .await;
    s.ready().await;
    let (mut holder, _err, t1) = campaign(&ep, "jwt", "4").await;
    recorded(&s, "jwt", t1).await;
    tokio::time::sleep(Duration::from_secs(3 * TOKEN_TTL as u64 + 1)).await;
    assert!(
        holder.try_wait().expect("try_wait").is_none(),
        "the holder lost its term"
    );
    let (mut later, _later_err, t2) = campaign(&ep, "jwt-later", "5").await;
    recorded(&s, "jwt-later", t2).await;
    let (st, v) = api(&s, "GET", "/api/v1/elections/jwt", None).await;
    assert_eq!((st, v["token"].as_i64()), (200, Some(t1)), "{v}");
    let _ = nix::sys::signal::kill(
        nix::unistd::Pid::from_raw(holder.id().expect("pid") as i32),
        nix::sys::signal::Signal::SIGTERM,
    );
    let status = tokio::time::timeout(Duration::from_secs(20), holder.wait())
        .await
        .expect("holder stopped")
        .expect("wait");
    assert_eq!(status.code(), Some(143), "resigned and exited 128+15");
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        let t = terms(&s, "jwt").await;
        if t.iter().any(|t| t["end_cause"] == "resigned") {
            assert_eq!(t.len(), 1, "{t:?}");
            break;
        }
        assert!(Instant::now() < deadline, "serve never saw the end: {t:?}");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let _ = later.start_kill();
    let _ = later.wait().await;
    let _ = s.stop().await;
}

/// A watch reopened after its token expired is cancelled by etcd (not
/// refused with an error, so etcd-client does not re-authenticate):
/// `RangeWatch` must re-authenticate, or observe (and a waiting or leading
/// campaign) would reopen it forever and never see a change again.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_watch_reopened_with_an_expired_token_reauthenticates() {
    let etcd = auth_etcd().await;
    let ep = etcd.endpoint();
    let proxy = Proxy::start(etcd.client_addr()).await;
    let mut observe = tenure(&proxy.endpoint());
    observe
        .args(["--user", "reader:reader-pw", "observe", "quiet"])
        .stdout(Stdio::piped());
    let mut observe = observe.spawn().expect("spawn observe");
    let mut seen = BufReader::new(observe.stdout.take().expect("stdout")).lines();
    let line = tokio::time::timeout(Duration::from_secs(10), seen.next_line()).await;
    assert!(
        matches!(&line, Ok(Ok(Some(l))) if l.contains("nobody leads")),
        "{line:?}"
    );
    // The token expires while the watch stream is open (that is fine)...
    tokio::time::sleep(Duration::from_secs(2 * TOKEN_TTL as u64 + 1)).await;
    // ...then the connection breaks and the watch is reopened.
    proxy.close_existing();
    tokio::time::sleep(Duration::from_secs(1)).await;
    let (mut leader, _err, token) = campaign(&ep, "quiet", "5").await;
    let line = tokio::time::timeout(Duration::from_secs(10), seen.next_line()).await;
    assert!(
        matches!(&line, Ok(Ok(Some(l))) if l.contains(&format!("(token {token})"))),
        "observe after its token expired and its watch was reopened: {line:?}"
    );
    let _ = observe.start_kill();
    let _ = leader.start_kill();
    let _ = leader.wait().await;
}

/// serve with both roles (read on its watch range, readwrite on the
/// prefixes): its mutating API works after the token expired in a quiet
/// period (nobody leads, so serve sent no request).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn http_api_campaigns_and_fences_after_the_token_expired() {
    let etcd = auth_etcd().await;
    let ep = etcd.endpoint();
    let root = ["--user".to_owned(), "root:root-pw".to_owned()];
    etcdctl(&ep, &root, &["user", "grant-role", "writer", "tenure-ro"]);
    let dir = tempfile::tempdir().expect("tempdir");
    let s = Serve::start(
        std::slice::from_ref(&ep),
        &dir.path().join("h.db"),
        &["--no-auth"],
        &[("TENURE_USER", "writer"), ("TENURE_PASSWORD", "writer-pw")],
    )
    .await;
    s.ready().await;
    tokio::time::sleep(Duration::from_secs(2 * TOKEN_TTL as u64 + 1)).await;
    let (st, v) = api(
        &s,
        "POST",
        "/api/v1/elections/viahttp/campaign",
        Some(json!({"candidate": "http", "ttl_seconds": 5})),
    )
    .await;
    assert_eq!(st, 200, "{v}");
    let token = v["token"].as_i64().expect("token");
    recorded(&s, "viahttp", token).await;
    let (st, v) = api(
        &s,
        "POST",
        "/api/v1/elections/viahttp/fence",
        Some(json!({"resource": "db", "token": token})),
    )
    .await;
    assert_eq!((st, &v["accepted"]), (200, &json!(true)), "{v}");
    let _ = s.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn auth_misconfigurations_fail_fast_with_one_line() {
    let etcd = auth_etcd().await;
    let ep = etcd.endpoint();

    let mut cmd = tenure(&ep);
    cmd.args(["--user", "writer:wrong", "leader", "x"]);
    fails_fast("wrong password", cmd, "wrong user or password").await;

    let mut cmd = tenure(&ep);
    cmd.args(["--user", "nosuchuser:pw", "campaign", "x", "--", "true"]);
    fails_fast("unknown user", cmd, "wrong user or password").await;

    let mut cmd = tenure(&ep);
    cmd.args(["leader", "x"]);
    fails_fast("no user", cmd, "authentication enabled: give --user NAME").await;

    let mut cmd = tenure(&ep);
    cmd.args(["--user", "writer", "leader", "x"]);
    fails_fast("no password", cmd, "no password for etcd user \"writer\"").await;

    // A read-only role cannot campaign: the message names the user, its
    // role, the key and the command that grants it.
    let mut cmd = tenure(&ep);
    cmd.env("TENURE_USER", "reader")
        .env("TENURE_PASSWORD", "reader-pw")
        .args(["campaign", "team/db", "--", "true"]);
    fails_fast(
        "read-only campaign",
        cmd,
        "etcd denied user \"reader\" (roles tenure-ro) readwrite access to \"election/team/db\": \
         grant it with `etcdctl role grant-permission tenure-ro --prefix=true readwrite",
    )
    .await;

    let mut cmd = tenure(&ep);
    cmd.args([
        "--user",
        "reader:reader-pw",
        "fence",
        "team/db",
        "db",
        "--token",
        "5",
    ]);
    fails_fast("read-only fence", cmd, "readwrite access to").await;

    // serve without even read permission stops at once.
    let dir = tempfile::tempdir().expect("tempdir");
    let mut cmd = tenure(&ep);
    cmd.args([
        "--user",
        "nobody:nobody-pw",
        "serve",
        "--listen",
        "127.0.0.1:0",
        "--db",
    ])
    .arg(dir.path().join("h.db"));
    fails_fast(
        "serve without read",
        cmd,
        "etcd denied user \"nobody\" (no role) read access to \"election/..fence0\": grant it \
         with `etcdctl role grant-permission ROLE read 'election/' 'fence0'`",
    )
    .await;

    // etcdctl's variables are read too.
    let mut cmd = tenure(&ep);
    cmd.env("ETCDCTL_USER", "writer:writer-pw")
        .args(["leader", "x"]);
    let (out, _) = timed(cmd).await;
    assert_eq!(out.status.code(), Some(1), "{}", text(&out.stderr));
    assert!(
        text(&out.stderr).contains("nobody leads x"),
        "{}",
        text(&out.stderr)
    );
}

/// The command never inherits a credential tenure was given (issue 20.9):
/// its environment, read from /proc/PID/environ while it runs, holds none
/// of the secrets, whichever way they came (password variables, `NAME:PASSWORD`
/// users, a password file, serve's API token, a PostgreSQL URL with a
/// password); the non-secret settings stay.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_command_inherits_no_credential() {
    let etcd = auth_etcd().await;
    let ep = etcd.endpoint();
    let dir = tempfile::tempdir().expect("tempdir");
    let pw = dir.path().join("writer.pw");
    std::fs::write(&pw, "writer-pw\n").expect("password file");
    let pw = pw.display().to_string();
    let secrets = ["writer-pw", "api-s3cret", "db-s3cret", pw.as_str()];
    let db = "postgres://tenure:db-s3cret@127.0.0.1/tenure";
    let cases: [Vec<(&str, &str)>; 3] = [
        vec![
            ("TENURE_USER", "writer"),
            ("TENURE_PASSWORD", "writer-pw"),
            ("ETCDCTL_PASSWORD", "writer-pw"),
            ("ETCDCTL_USER", "writer:writer-pw"),
            ("TENURE_API_TOKEN", "api-s3cret"),
            ("TENURE_DB", db),
        ],
        vec![("TENURE_USER", "writer:writer-pw")],
        vec![("ETCDCTL_USER", "writer"), ("TENURE_PASSWORD_FILE", &pw)],
    ];
    for (i, env) in cases.iter().enumerate() {
        let sub = dir.path().join(i.to_string());
        std::fs::create_dir(&sub).expect("dir");
        let election = format!("env-{i}");
        let h =
            support::holder::Holder::start_env(&ep, &election, &sub, &["--ttl", "5"], env).await;
        let environ = std::fs::read(format!("/proc/{}/environ", h.cmd_pid)).expect("environ");
        let vars: Vec<String> = environ
            .split(|b| *b == 0)
            .map(|v| String::from_utf8_lossy(v).into_owned())
            .collect();
        let leaked: Vec<&String> = vars
            .iter()
            .filter(|v| secrets.iter().any(|s| v.contains(s)))
            .collect();
        println!("[figure] case {i}: the command's credentials: {leaked:?}");
        assert!(
            leaked.is_empty(),
            "case {i}: the command inherits {leaked:?}"
        );
        let has = |want: &str| vars.iter().any(|v| v == want);
        assert!(has(&format!("TENURE_ENDPOINTS={ep}")), "case {i}: {vars:?}");
        assert!(
            has(&format!("TENURE_ELECTION={election}")),
            "case {i}: {vars:?}"
        );
        assert!(
            has(&format!("TENURE_TOKEN={}", h.token)),
            "case {i}: {vars:?}"
        );
        if i < 2 {
            assert!(
                has("TENURE_USER=writer"),
                "case {i}: the user name stays: {vars:?}"
            );
        } else {
            assert!(
                has("ETCDCTL_USER=writer"),
                "case {i}: the user name stays: {vars:?}"
            );
        }
        if i == 0 {
            assert!(
                vars.iter().all(|v| !v.starts_with("TENURE_DB=")),
                "a URL with a password goes: {vars:?}"
            );
        }
    }
}
