//! The `tenure` binary against a real etcd: exit codes, output, and the
//! split-brain story t0..t4 replayed with real processes.
// Tests, benches and their harness assert with unwrap/expect, spawn bare tasks
// and read the wall clock: the lints of Cargo.toml and clippy.toml hold src/.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::disallowed_methods)]

mod support;

use std::path::Path;
use std::process::Stdio;
use std::time::{Duration, Instant};

use nix::sys::signal::{kill, Signal};
use nix::unistd::Pid;
use support::fixtures::{run, tenure, text};
use support::{tenure_bin, Etcd};
use tenure::election::{CampaignOptions, Client, ElectionName, Ttl};
use tokio::io::{AsyncBufReadExt, BufReader, Lines};
use tokio::process::{Child, ChildStderr, Command};

/// Starts `tenure campaign` and waits for its "leads ... with token N" line.
async fn start_campaign(etcd: &Etcd, args: &[&str]) -> (Child, Lines<BufReader<ChildStderr>>, i64) {
    let mut child = tenure(etcd)
        .arg("campaign")
        .args(args)
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawn tenure campaign");
    let mut lines = BufReader::new(child.stderr.take().expect("stderr")).lines();
    let token = loop {
        let line = tokio::time::timeout(Duration::from_secs(15), lines.next_line())
            .await
            .expect("campaign announced leadership in time")
            .expect("read stderr")
            .expect("tenure campaign exited before leading");
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

fn alive(pid: i32) -> bool {
    kill(Pid::from_raw(pid), None).is_ok()
}

async fn read_pid(path: &Path) -> i32 {
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        if let Ok(s) = std::fs::read_to_string(path) {
            if let Ok(pid) = s.trim().parse() {
                return pid;
            }
        }
        assert!(
            Instant::now() < deadline,
            "child never wrote {}",
            path.display()
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

// t0..t4: scene-01 leads; its process freezes past its TTL (t1); the lease
// expires and scene-02 takes over (t2); scene-01 resumes (t3): it must stop
// its child and exit, and its token must be refused by the fence while the
// new token is accepted (so t4, two writers, cannot happen).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn split_brain_story_t0_to_t4() {
    let etcd = Etcd::start().await;
    let dir = tempfile::tempdir().expect("tempdir");
    let pidfile = dir.path().join("child.pid");
    let script = format!("echo $$ > {}; exec sleep 600", pidfile.display());

    // t0
    let (mut scene1, mut scene1_err, t_old) = start_campaign(
        &etcd,
        &[
            "story", "--id", "scene-01", "--ttl", "2", "--", "sh", "-c", &script,
        ],
    )
    .await;
    let child_pid = read_pid(&pidfile).await;
    assert!(alive(child_pid));
    let accepted = run(
        &etcd,
        &["fence", "story", "db", "--token", &t_old.to_string()],
    )
    .await;
    assert_eq!(
        accepted.status.code(),
        Some(0),
        "{}",
        text(&accepted.stdout)
    );

    // t1: scene-01 freezes (a GC pause, a partition it cannot see).
    let scene1_pid = Pid::from_raw(scene1.id().expect("pid") as i32);
    kill(scene1_pid, Signal::SIGSTOP).expect("SIGSTOP");
    let frozen = Instant::now();

    // t2: its lease expires; scene-02 takes over.
    let c = Client::connect(&[etcd.endpoint()], "")
        .await
        .expect("connect");
    let n = ElectionName::new("story").expect("name");
    let scene2 = c
        .campaign_wait(
            &n,
            "scene-02",
            &CampaignOptions::new(Ttl::from_secs(10).expect("ttl")),
            Some(Duration::from_secs(20)),
        )
        .await
        .expect("scene-02 takes over");
    println!(
        "scene-02 took over {:?} after scene-01 froze (ttl 2 s)",
        frozen.elapsed()
    );
    let t_new = scene2.token();
    assert!(t_new > t_old);
    assert!(scene2.fence("db").await.expect("fence").accepted);

    // t3: scene-01 resumes and must notice before doing anything else.
    kill(scene1_pid, Signal::SIGCONT).expect("SIGCONT");
    let status = tokio::time::timeout(Duration::from_secs(10), scene1.wait())
        .await
        .expect("scene-01 exited after resuming")
        .expect("wait");
    assert_eq!(status.code(), Some(4), "exit code 4 means leadership lost");
    let mut rest = String::new();
    while let Ok(Ok(Some(line))) =
        tokio::time::timeout(Duration::from_secs(1), scene1_err.next_line()).await
    {
        rest.push_str(&line);
        rest.push('\n');
    }
    assert!(
        rest.contains("lost"),
        "scene-01 said why it stopped: {rest}"
    );
    assert!(!alive(child_pid), "scene-01's command was stopped");

    // t4 cannot happen: the old token is refused, the new one accepted twice.
    let refused = run(
        &etcd,
        &["fence", "story", "db", "--token", &t_old.to_string()],
    )
    .await;
    assert_eq!(refused.status.code(), Some(3), "{}", text(&refused.stdout));
    assert!(
        text(&refused.stdout).contains("stale_token"),
        "{}",
        text(&refused.stdout)
    );
    let fresh = run(
        &etcd,
        &[
            "fence",
            "story",
            "orders",
            "--token",
            &t_old.to_string(),
            "--json",
        ],
    )
    .await;
    assert_eq!(fresh.status.code(), Some(3));
    let fresh: serde_json::Value = serde_json::from_slice(&fresh.stdout).expect("json");
    assert_eq!(fresh["reason"], "term_ended");
    for _ in 0..2 {
        let ok = run(
            &etcd,
            &["fence", "story", "db", "--token", &t_new.to_string()],
        )
        .await;
        assert_eq!(ok.status.code(), Some(0), "{}", text(&ok.stdout));
    }
    drop(scene2);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn campaign_runs_command_with_token_and_exits_with_its_status() {
    let etcd = Etcd::start().await;
    let out = run(
        &etcd,
        &[
            "campaign",
            "jobs",
            "--id",
            "worker-1",
            "--ttl",
            "5",
            "--",
            "sh",
            "-c",
            "echo $TENURE_ELECTION $TENURE_HOLDER $TENURE_TOKEN; exit 7",
        ],
    )
    .await;
    assert_eq!(out.status.code(), Some(7), "{}", text(&out.stderr));
    let stdout = text(&out.stdout);
    let fields: Vec<&str> = stdout.split_whitespace().collect();
    assert_eq!(fields[..2], ["jobs", "worker-1"]);
    assert!(fields[2].parse::<i64>().expect("token") > 0);
    // It resigned when the command exited.
    let leader = run(&etcd, &["leader", "jobs"]).await;
    assert_eq!(leader.status.code(), Some(1));
    assert!(text(&leader.stderr).contains("nobody leads jobs"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sigterm_stops_the_command_and_resigns() {
    let etcd = Etcd::start().await;
    let dir = tempfile::tempdir().expect("tempdir");
    let pidfile = dir.path().join("child.pid");
    let script = format!("echo $$ > {}; exec sleep 600", pidfile.display());
    let (mut campaign, _err, _token) = start_campaign(
        &etcd,
        &["svc", "--id", "a", "--ttl", "30", "--", "sh", "-c", &script],
    )
    .await;
    let child_pid = read_pid(&pidfile).await;
    kill(
        Pid::from_raw(campaign.id().expect("pid") as i32),
        Signal::SIGTERM,
    )
    .expect("SIGTERM");
    let status = tokio::time::timeout(Duration::from_secs(10), campaign.wait())
        .await
        .expect("exited")
        .expect("wait");
    assert_eq!(status.code(), Some(143));
    assert!(!alive(child_pid), "command stopped");
    // Resigned at once, long before the 30 s TTL.
    assert_eq!(run(&etcd, &["leader", "svc"]).await.status.code(), Some(1));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn leader_resign_depose_and_wait() {
    let etcd = Etcd::start().await;
    let (mut holder, _err, token) = start_campaign(
        &etcd,
        &["db", "--id", "alpha", "--ttl", "30", "--", "sleep", "600"],
    )
    .await;

    let out = run(&etcd, &["leader", "db", "--json"]).await;
    assert_eq!(out.status.code(), Some(0));
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).expect("json");
    assert_eq!(v["name"], "db");
    assert_eq!(v["holder"], "alpha");
    assert_eq!(v["token"], token);
    assert!(v["lease_id"].as_i64().is_some_and(|l| l > 0));
    assert!(v["ttl_remaining_seconds"]
        .as_i64()
        .is_some_and(|t| t > 0 && t <= 30));

    // A second candidate without --wait is refused and told who holds it.
    let held = run(
        &etcd,
        &["campaign", "db", "--id", "beta", "--ttl", "5", "--", "true"],
    )
    .await;
    assert_eq!(held.status.code(), Some(3));
    assert!(
        text(&held.stderr).contains("alpha"),
        "{}",
        text(&held.stderr)
    );

    // With --wait it takes over once alpha's term ends.
    let (mut beta, _beta_err) = {
        let mut c = tenure(&etcd)
            .args([
                "campaign", "db", "--id", "beta", "--ttl", "5", "--wait", "--", "sleep", "600",
            ])
            .stderr(Stdio::piped())
            .spawn()
            .expect("spawn");
        let err = BufReader::new(c.stderr.take().expect("stderr")).lines();
        (c, err)
    };

    let wrong = run(
        &etcd,
        &["resign", "db", "--token", &(token + 1000).to_string()],
    )
    .await;
    assert_eq!(wrong.status.code(), Some(3), "{}", text(&wrong.stderr));
    assert!(text(&wrong.stderr).contains("alpha"));
    let right = run(&etcd, &["resign", "db", "--token", &token.to_string()]).await;
    assert_eq!(right.status.code(), Some(0), "{}", text(&right.stderr));
    assert!(text(&right.stdout).contains("alpha"));
    let status = tokio::time::timeout(Duration::from_secs(10), holder.wait())
        .await
        .expect("alpha exits")
        .expect("wait");
    assert_eq!(status.code(), Some(4), "alpha's term ended under it");

    let deadline = Instant::now() + Duration::from_secs(10);
    let v = loop {
        let out = run(&etcd, &["leader", "db", "--json"]).await;
        if out.status.success() {
            let v: serde_json::Value = serde_json::from_slice(&out.stdout).expect("json");
            if v["holder"] == "beta" {
                break v;
            }
        }
        assert!(Instant::now() < deadline, "beta never led");
        tokio::time::sleep(Duration::from_millis(50)).await;
    };
    assert!(v["token"].as_i64().expect("token") > token);

    let deposed = run(&etcd, &["depose", "db"]).await;
    assert_eq!(deposed.status.code(), Some(0));
    assert!(text(&deposed.stdout).contains("beta"));
    let status = tokio::time::timeout(Duration::from_secs(10), beta.wait())
        .await
        .expect("beta exits")
        .expect("wait");
    assert_eq!(status.code(), Some(4));
    assert_eq!(run(&etcd, &["depose", "db"]).await.status.code(), Some(1));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bad_input_gets_a_clear_error() {
    let etcd = Etcd::start().await;
    for (args, needle) in [
        (vec!["leader", ""], "must not be empty"),
        (vec!["leader", "../x"], "'..'"),
        (
            vec!["campaign", "x", "--ttl", "0", "--", "true"],
            "etcd's minimum is 2 s",
        ),
        (
            vec!["campaign", "x", "--ttl", "1.5", "--", "true"],
            "whole number of seconds",
        ),
        (vec!["fence", "x", "a/b", "--token", "3"], "no '/'"),
        (vec!["fence", "x", "db", "--token", "0"], "start at 1"),
    ] {
        let out = run(&etcd, &args).await;
        assert!(!out.status.success(), "{args:?} succeeded");
        let err = text(&out.stderr);
        assert!(err.contains(needle), "{args:?}: {err}");
    }
    // etcd down: a clear error naming the endpoint, not a hang.
    let down = Command::new(tenure_bin())
        .env(
            "TENURE_ENDPOINTS",
            format!("http://127.0.0.1:{}", support::free_port()),
        )
        .env("TENURE_TIMEOUT", "1")
        .args(["leader", "x"])
        .output()
        .await
        .expect("run");
    assert_eq!(down.status.code(), Some(1));
    assert!(
        text(&down.stderr).contains("etcd"),
        "{}",
        text(&down.stderr)
    );
}

/// A holder with NUL, ESC (a terminal obeys `ESC[2J`) and U+202E (it
/// reverses what follows as displayed), written into a real leader key:
/// `tenure leader` and `depose` print each as its escape, never raw; with
/// `--json` the value is given as it is.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_holders_controls_and_bidi_characters_are_printed_escaped() {
    const HOLDER: &str = "adm\0in\u{1b}[2J\u{202e}evil";
    let etcd = Etcd::start().await;
    let mut raw = etcd.client().await;
    let lease = raw.lease_grant(60, None).await.expect("grant").id();
    raw.put(
        "election/ctl",
        HOLDER,
        Some(etcd_client::PutOptions::new().with_lease(lease)),
    )
    .await
    .expect("put");
    let raw_hidden = |s: &str| s.chars().any(|c| matches!(c, '\0' | '\u{1b}' | '\u{202e}'));
    let escaped = "adm\\u{0}in\\u{1b}[2J\\u{202e}evil";
    let out = run(&etcd, &["leader", "ctl"]).await;
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    let said = text(&out.stdout);
    assert!(said.contains(escaped) && !raw_hidden(&said), "{said:?}");
    let json = run(&etcd, &["leader", "ctl", "--json"]).await;
    let v: serde_json::Value = serde_json::from_slice(&json.stdout).expect("json");
    assert_eq!(v["holder"], HOLDER);
    let out = run(&etcd, &["depose", "ctl"]).await;
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    let said = text(&out.stdout);
    assert!(said.contains(escaped) && !raw_hidden(&said), "{said:?}");
}
