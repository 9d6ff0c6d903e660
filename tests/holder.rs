//! Holder-side safety of `tenure campaign` (issue 10), against a real etcd.
//!
//! The command under test is the hard case: it ignores SIGTERM and starts a
//! grandchild that ignores it too, and both record every moment they act
//! (`date +%s%N`, the wall clock this test also reads: one clock). Each
//! test compares what the processes did with what etcd did, observed
//! directly by the test (a watch on the leader key, `/proc` for liveness),
//! never with what tenure says about itself.
// Tests, benches and their harness assert with unwrap/expect, spawn bare tasks
// and read the wall clock: the lints of Cargo.toml and clippy.toml hold src/.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::disallowed_methods)]

mod support;

use std::path::PathBuf;
use std::process::Stdio;
use std::time::{Duration, Instant};

use nix::sys::signal::{kill, killpg, Signal};
use nix::unistd::Pid;
use support::holder::{dead_at, ms, now_ns, pgid_of, spawn, Holder, KeyLog};
use support::proxy::Proxy;
use support::{tenure_bin, Etcd};
use tenure::election::{CampaignOptions, Client, ElectionName, Ttl};
use tokio::process::Command;

async fn tenure_client(etcd: &Etcd) -> Client {
    Client::connect(&[etcd.endpoint()], "")
        .await
        .expect("connect")
}

fn name(s: &str) -> ElectionName {
    ElectionName::new(s).expect("name")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn depose_kills_a_sigterm_ignoring_command_and_its_grandchild_within_the_bound() {
    let etcd = Etcd::start().await;
    let dir = tempfile::tempdir().expect("tempdir");
    // TTL 4: margin 1 s, grace 0.75 s.
    let mut h = Holder::start(&etcd.endpoint(), "depose-me", dir.path(), &["--ttl", "4"]).await;
    let c = tenure_client(&etcd).await;
    let before = now_ns();
    c.depose(&name("depose-me"))
        .await
        .expect("depose")
        .expect("deposed");
    let deposed = now_ns();
    let dead = dead_at(h.pgid, Duration::from_secs(5)).await;
    let last = h.last_act();
    println!(
        "[figure] depose at TTL 4 s (grace 0.75 s): command group dead {:.0} ms after the deposition; last act {:.0} ms after it",
        ms(dead - before),
        ms(last - before)
    );
    // Detection over the key watch (milliseconds) + the 0.75 s grace +
    // scheduling; the periodic key read bounds it at TTL/3 + grace.
    assert!(
        dead - deposed < 1_500_000_000,
        "dead {:.0} ms after the deposition",
        ms(dead - deposed)
    );
    // The command ignored SIGTERM and kept acting through the grace: it
    // was the SIGKILL that ended it, on schedule.
    assert!(
        last - deposed > 400_000_000,
        "last act {:.0} ms after the deposition: did the command ignore SIGTERM?",
        ms(last - deposed)
    );
    assert_eq!(h.exit_code(Duration::from_secs(10)).await, Some(4));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cut_off_from_etcd_the_group_is_dead_before_etcd_expires_the_lease() {
    let etcd = Etcd::start().await;
    let target = etcd.client_addr();
    let proxy = Proxy::start(target).await;
    let dir = tempfile::tempdir().expect("tempdir");
    let mut h = Holder::start(&proxy.endpoint(), "cut-off", dir.path(), &["--ttl", "3"]).await;
    let keylog = KeyLog::start(etcd.client().await, "election/cut-off").await;
    let cut = now_ns();
    proxy.partition();
    let dead = dead_at(h.pgid, Duration::from_secs(10)).await;
    let expired = keylog.deleted(Duration::from_secs(10)).await;
    let last = h.last_act();
    println!(
        "[figure] partition at TTL 3 s: command group dead {:.0} ms after the cut, {:.0} ms before etcd expired the lease; last act {:.0} ms before the expiry",
        ms(dead - cut),
        ms(expired - dead),
        ms(expired - last)
    );
    assert!(dead < expired, "the command outlived the lease");
    assert!(last < expired, "the command acted after the lease expired");
    assert_eq!(h.exit_code(Duration::from_secs(10)).await, Some(4));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tenure_frozen_alone_its_guard_kills_the_group_before_expiry() {
    let etcd = Etcd::start().await;
    let dir = tempfile::tempdir().expect("tempdir");
    let mut h = Holder::start(&etcd.endpoint(), "frozen", dir.path(), &["--ttl", "3"]).await;
    let keylog = KeyLog::start(etcd.client().await, "election/frozen").await;
    kill(h.tenure_pid(), Signal::SIGSTOP).expect("SIGSTOP tenure");
    let frozen = now_ns();
    let dead = dead_at(h.pgid, Duration::from_secs(10)).await;
    let expired = keylog.deleted(Duration::from_secs(10)).await;
    println!(
        "[figure] tenure SIGSTOPped at TTL 3 s: its guard killed the command group {:.0} ms after the freeze, {:.0} ms before etcd expired the lease",
        ms(dead - frozen),
        ms(expired - dead)
    );
    assert!(dead < expired, "the command outlived the lease");
    assert!(h.last_act() < expired);
    kill(h.tenure_pid(), Signal::SIGCONT).expect("SIGCONT tenure");
    assert_eq!(h.exit_code(Duration::from_secs(10)).await, Some(4));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn whole_holder_frozen_past_its_ttl_dies_at_once_when_resumed() {
    let etcd = Etcd::start().await;
    let dir = tempfile::tempdir().expect("tempdir");
    let mut h = Holder::start(&etcd.endpoint(), "paused", dir.path(), &["--ttl", "2"]).await;
    let keylog = KeyLog::start(etcd.client().await, "election/paused").await;
    // The guard's group (guard, command, grandchild) first, then tenure.
    killpg(Pid::from_raw(h.pgid), Signal::SIGSTOP).expect("SIGSTOP group");
    kill(h.tenure_pid(), Signal::SIGSTOP).expect("SIGSTOP tenure");
    keylog.deleted(Duration::from_secs(10)).await;
    tokio::time::sleep(Duration::from_millis(500)).await;
    kill(h.tenure_pid(), Signal::SIGCONT).expect("SIGCONT tenure");
    killpg(Pid::from_raw(h.pgid), Signal::SIGCONT).expect("SIGCONT group");
    let resumed = now_ns();
    let dead = dead_at(h.pgid, Duration::from_secs(5)).await;
    println!(
        "[figure] whole holder frozen past its TTL (2 s): command group dead {:.0} ms after SIGCONT",
        ms(dead - resumed)
    );
    // Killed at once on waking (no grace, no wait for a renewal round);
    // 800 ms leaves room for a loaded machine's scheduling.
    assert!(
        dead - resumed < 800_000_000,
        "dead {:.0} ms after resuming",
        ms(dead - resumed)
    );
    assert_eq!(h.exit_code(Duration::from_secs(10)).await, Some(4));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kill_9_of_tenure_takes_the_whole_group_down() {
    let etcd = Etcd::start().await;
    let dir = tempfile::tempdir().expect("tempdir");
    let h = Holder::start(&etcd.endpoint(), "killed", dir.path(), &["--ttl", "10"]).await;
    kill(h.tenure_pid(), Signal::SIGKILL).expect("SIGKILL tenure");
    let killed = now_ns();
    let dead = dead_at(h.pgid, Duration::from_secs(5)).await;
    println!(
        "[figure] kill -9 of tenure campaign: command group dead {:.0} ms later",
        ms(dead - killed)
    );
    // Without the guard's parent-death signal the group would run on until
    // the lease (10 s) expired; 1 s leaves room for a loaded machine.
    assert!(
        dead - killed < 1_000_000_000,
        "dead {:.0} ms after kill -9",
        ms(dead - killed)
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_command_flooding_an_unread_stderr_is_still_stopped_on_time() {
    let etcd = Etcd::start().await;
    let dir = tempfile::tempdir().expect("tempdir");
    let acts = dir.path().join("acts");
    // The command fills the stderr pipe it shares with tenure (nobody reads
    // it), then acts on; tenure's own messages then cannot be written.
    let script = format!(
        r#"echo $$ > "{acts}.pid"; trap '' TERM; head -c 1000000 /dev/zero >&2 &
           while :; do date +%s%N >> "{acts}"; sleep 0.02; done"#,
        acts = acts.display()
    );
    let mut child = Command::new(tenure_bin())
        .args(["campaign", "flood", "--ttl", "4", "--", "sh", "-c", &script])
        .env("TENURE_ENDPOINTS", etcd.endpoint())
        .env_remove("TENURE_PREFIX")
        .env("TENURE_LOG", "debug")
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .kill_on_drop(true)
        .spawn()
        .expect("spawn");
    // Hold the pipe, never read it.
    let _unread = child.stderr.take();
    let c = tenure_client(&etcd).await;
    let n = name("flood");
    let deadline = Instant::now() + Duration::from_secs(15);
    while c.leader(&n).await.expect("leader").is_none() {
        assert!(Instant::now() < deadline, "never led");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let pidfile = PathBuf::from(format!("{}.pid", acts.display()));
    let deadline = Instant::now() + Duration::from_secs(10);
    let cmd_pid: i32 = loop {
        if let Some(p) = std::fs::read_to_string(&pidfile)
            .ok()
            .and_then(|s| s.trim().parse().ok())
        {
            break p;
        }
        assert!(Instant::now() < deadline, "the command never started");
        tokio::time::sleep(Duration::from_millis(10)).await;
    };
    let pgid = pgid_of(cmd_pid).expect("the command runs");
    // Let the flood fill the pipe.
    tokio::time::sleep(Duration::from_millis(500)).await;
    let before = now_ns();
    c.depose(&n).await.expect("depose").expect("deposed");
    let dead = dead_at(pgid, Duration::from_secs(5)).await;
    println!(
        "[figure] stderr full: command group dead {:.0} ms after the deposition",
        ms(dead - before)
    );
    // A full stderr would block tenure for good; 3 s is a loaded machine.
    assert!(dead - before < 3_000_000_000);
    let code = tokio::time::timeout(Duration::from_secs(10), child.wait())
        .await
        .expect("tenure exits though its stderr is full")
        .expect("wait")
        .code();
    assert_eq!(code, Some(4));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_campaign_that_timed_out_but_committed_leads_and_is_no_phantom() {
    let etcd = Etcd::start().await;
    let target = etcd.client_addr();
    let proxy = Proxy::start(target).await;
    let dir = tempfile::tempdir().expect("tempdir");
    let c = tenure_client(&etcd).await;
    let n = name("phantom");
    let opts = CampaignOptions::new(Ttl::from_secs(10).expect("ttl"));
    let a = c
        .campaign_wait(&n, "a", &opts, None)
        .await
        .expect("a leads");

    // b waits through the proxy, with a 1 s request timeout.
    let b = spawn(
        &proxy.endpoint(),
        "phantom",
        dir.path(),
        &["--wait", "--ttl", "10", "--id", "b"],
    );
    let mut b = Holder::attach(b, dir.path());
    let mut raw = c.etcd();
    let deadline = Instant::now() + Duration::from_secs(10);
    while raw.leases().await.expect("leases").leases().len() < 2 {
        assert!(Instant::now() < deadline, "b never granted its lease");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    // Requests now arrive 1.2 s late: b's campaign txn commits after b
    // gave up waiting for its answer.
    proxy.set_delay_up(Duration::from_millis(1200));
    tokio::time::sleep(Duration::from_millis(200)).await;
    a.resign().await.expect("a resigns");
    let deadline = Instant::now() + Duration::from_secs(10);
    let key = loop {
        let resp = raw.get("election/phantom", None).await.expect("get");
        if let Some(kv) = resp.kvs().first() {
            break kv.clone();
        }
        assert!(Instant::now() < deadline, "b's txn never committed");
        tokio::time::sleep(Duration::from_millis(20)).await;
    };
    assert_eq!(key.value(), b"b");
    // While requests stay slow, b cannot confirm anything; a third
    // candidate must not take the key meanwhile (it is a term).
    let c3 = c.clone();
    let n3 = n.clone();
    let third = tokio::spawn(async move {
        let opts = CampaignOptions::new(Ttl::from_secs(10).expect("ttl"));
        c3.campaign_wait(&n3, "c", &opts, None).await
    });
    tokio::time::sleep(Duration::from_secs(3)).await;
    assert!(!third.is_finished(), "c took a key that b holds");
    proxy.set_delay_up(Duration::ZERO);
    // The proxy recovered: b finds its own key and leads with its token.
    let token = b.leads(Duration::from_secs(10)).await;
    assert_eq!(
        token,
        key.create_revision(),
        "b leads with the key's CreateRevision"
    );
    b.find_group().await;
    // b's term ends (its command is stopped by a signal to tenure); c takes
    // over at once: nothing of b is left behind.
    kill(b.tenure_pid(), Signal::SIGTERM).expect("SIGTERM b");
    assert_eq!(b.exit_code(Duration::from_secs(10)).await, Some(143));
    let c_term = tokio::time::timeout(Duration::from_secs(5), third)
        .await
        .expect("c took over after b")
        .expect("task")
        .expect("c leads");
    assert!(c_term.token() > token);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sigterm_while_waiting_revokes_the_candidates_lease_before_exit() {
    let etcd = Etcd::start().await;
    let dir = tempfile::tempdir().expect("tempdir");
    let c = tenure_client(&etcd).await;
    let n = name("busy");
    let opts = CampaignOptions::new(Ttl::from_secs(30).expect("ttl"));
    let a = c
        .campaign_wait(&n, "a", &opts, None)
        .await
        .expect("a leads");
    let mut raw = c.etcd();
    let child = spawn(
        &etcd.endpoint(),
        "busy",
        dir.path(),
        &["--wait", "--ttl", "30"],
    );
    let mut b = Holder::attach(child, dir.path());
    let deadline = Instant::now() + Duration::from_secs(10);
    while raw.leases().await.expect("leases").leases().len() < 2 {
        assert!(Instant::now() < deadline, "b never granted its lease");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    kill(b.tenure_pid(), Signal::SIGTERM).expect("SIGTERM");
    assert_eq!(b.exit_code(Duration::from_secs(10)).await, Some(143));
    let leases: Vec<i64> = raw
        .leases()
        .await
        .expect("leases")
        .leases()
        .iter()
        .map(|l| l.id())
        .collect();
    assert_eq!(
        leases,
        vec![a.lease_id()],
        "b's lease was revoked before b exited, not left to expire in 30 s"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn permanent_errors_fail_fast_with_exit_1() {
    let etcd = Etcd::start().await;
    let dir = tempfile::tempdir().expect("tempdir");
    // etcd with authentication on: tenure without credentials is refused
    // for good, however often it tries.
    let etcdctl = |args: &[&str]| {
        let out = std::process::Command::new("etcdctl")
            .env("ETCDCTL_API", "3")
            .arg(format!("--endpoints={}", etcd.endpoint()))
            .args(args)
            .output()
            .expect("etcdctl");
        assert!(
            out.status.success(),
            "etcdctl {args:?}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
    };
    etcdctl(&["user", "add", "root:rootpw"]);
    etcdctl(&["auth", "enable"]);
    for wait in [true, false] {
        let mut args = vec!["--ttl", "5"];
        if wait {
            args.push("--wait");
        }
        let started = Instant::now();
        let child = spawn(&etcd.endpoint(), "locked", dir.path(), &args);
        let out = tokio::time::timeout(Duration::from_secs(10), child.wait_with_output())
            .await
            .expect("a permanent error ends the campaign within 10 s")
            .expect("output");
        let stderr = String::from_utf8_lossy(&out.stderr);
        println!(
            "[figure] permanent error (auth enabled, no credentials, --wait {wait}): exit {:?} after {:?}: {}",
            out.status.code(),
            started.elapsed(),
            stderr.trim()
        );
        assert_eq!(out.status.code(), Some(1), "{stderr}");
        assert_eq!(
            stderr.trim().lines().count(),
            1,
            "one line says what is wrong: {stderr}"
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_deletion_without_tenures_marker_kills_at_once() {
    let etcd = Etcd::start().await;
    let dir = tempfile::tempdir().expect("tempdir");
    // TTL 10: the grace would be 2.25 s. A foreign client (or etcd itself)
    // ends the term without tenure's end marker: no grace, another
    // candidate may lead already.
    let mut h = Holder::start(&etcd.endpoint(), "foreign", dir.path(), &["--ttl", "10"]).await;
    let mut raw = etcd.client().await;
    let before = now_ns();
    raw.delete("election/foreign", None).await.expect("delete");
    let dead = dead_at(h.pgid, Duration::from_secs(5)).await;
    println!(
        "[figure] a deletion without tenure's marker (TTL 10 s, grace 2.25 s): command group dead {:.0} ms later",
        ms(dead - before)
    );
    // Given the grace, the group would live 2.25 s more.
    assert!(
        dead - before < 1_200_000_000,
        "dead {:.0} ms after the deletion: the grace was given",
        ms(dead - before)
    );
    assert_eq!(h.exit_code(Duration::from_secs(10)).await, Some(4));
}

/// A term whose key cannot be read is lost after a TTL, though its
/// lease is renewed (issue 20.3). etcd here serves at most two streams per
/// connection: the holder's keepalive and its key watch take both, and its
/// key reads wait for a slot that never comes. etcd's own record (a watch
/// of the key) shows the term alive when the command died.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_holder_that_cannot_read_its_key_stops_within_ttl_minus_margin() {
    let flags = support::EtcdFlags {
        https: false,
        args: vec!["--max-concurrent-streams".into(), "2".into()],
        bin: None,
    };
    let etcd = Etcd::start_with(flags).await;
    let dir = tempfile::tempdir().expect("tempdir");
    let keylog = KeyLog::start(etcd.client().await, "election/unread").await;
    // TTL 6: margin 1.5 s; the key read every 2 s.
    let mut h = Holder::start(&etcd.endpoint(), "unread", dir.path(), &["--ttl", "6"]).await;
    let led = now_ns();
    let dead = support::holder::dead_within(h.pgid, Duration::from_secs(15)).await;
    println!(
        "[figure] key reads unanswered, lease renewed (TTL 6 s): command group dead {}",
        dead.map_or("never (15 s)".to_owned(), |d| format!(
            "{:.0} ms after leading",
            ms(d - led)
        ))
    );
    let dead = dead.expect("the holder ran on with its key unconfirmed for 15 s");
    // The last confirmed read was at the earliest when the term began: the
    // loss comes a TTL (6 s) after it; the command, which ignores SIGTERM,
    // gets the 1.25 s grace (the lease lives on: nobody else can have the
    // key for want of an answer), then SIGKILL.
    assert!(
        dead - led < 8_000_000_000,
        "dead {:.0} ms after leading",
        ms(dead - led)
    );
    // etcd still held the term when the command last acted: the lease
    // was renewed all along, only the key went unconfirmed.
    let last = h.last_act();
    let ended = keylog.changes().iter().find(|c| c.deleted).map(|c| c.at);
    assert!(
        ended.is_none_or(|e| e > last),
        "etcd ended the term {:.0} ms before the command's last act: not the case under test",
        ms(last - ended.unwrap_or(last))
    );
    assert_eq!(h.exit_code(Duration::from_secs(10)).await, Some(4));
    let said = support::holder::rest_of(&mut h.lines, Duration::from_secs(5))
        .await
        .join("\n");
    assert!(said.contains("not confirmed"), "tenure says why: {said}");
}

/// What tenure wrote to stderr from here until it exited.
async fn rest(h: &mut Holder) -> String {
    support::holder::rest_of(&mut h.lines, Duration::from_secs(10))
        .await
        .join("\n")
}

/// `tenure campaign` on `command` (sh -c) as the holder of `name`; returns
/// the child once it leads, with its stderr lines.
async fn holding(etcd: &Etcd, name: &str, script: &str) -> Holder {
    let child = Command::new(tenure_bin())
        .args(["campaign", name, "--ttl", "4", "--", "sh", "-c", script])
        .env("TENURE_ENDPOINTS", etcd.endpoint())
        .env_remove("TENURE_PREFIX")
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .kill_on_drop(true)
        .spawn()
        .expect("spawn tenure campaign");
    let dir = std::env::temp_dir();
    let mut h = Holder::attach(child, &dir);
    h.token = h.leads(Duration::from_secs(20)).await;
    h
}

/// What tenure says about a stop is what happened (issue 20.12), checked
/// against what the processes did: a command that acted on through
/// SIGTERM was ended by SIGKILL, whoever sent it; one that trapped SIGTERM
/// and exited 3 was not.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_stop_message_says_how_the_command_ended() {
    let etcd = Etcd::start().await;
    let c = tenure_client(&etcd).await;

    // 1. Ignores SIGTERM, deposed: killed at the end of the 0.75 s grace.
    let dir = tempfile::tempdir().expect("tempdir");
    let mut h = Holder::start(&etcd.endpoint(), "ends-1", dir.path(), &["--ttl", "4"]).await;
    c.depose(&name("ends-1"))
        .await
        .expect("depose")
        .expect("deposed");
    let deposed = now_ns();
    dead_at(h.pgid, Duration::from_secs(5)).await;
    let acted = h.last_act() - deposed;
    let said = rest(&mut h).await;
    println!(
        "[figure] ignores SIGTERM, acted {:.0} ms after the deposition: {said}",
        ms(acted)
    );
    assert!(acted > 400_000_000, "SIGTERM did not end it: it acted on");
    assert!(said.contains("killed by SIGKILL"), "{said}");

    // 2. Ignores SIGTERM; tenure frozen through the deposition: its guard
    //    SIGKILLs the group at the lease's deadline, before tenure can send
    //    anything.
    let dir = tempfile::tempdir().expect("tempdir");
    let mut h = Holder::start(&etcd.endpoint(), "ends-2", dir.path(), &["--ttl", "4"]).await;
    kill(h.tenure_pid(), Signal::SIGSTOP).expect("SIGSTOP tenure");
    c.depose(&name("ends-2"))
        .await
        .expect("depose")
        .expect("deposed");
    let deposed = now_ns();
    dead_at(h.pgid, Duration::from_secs(10)).await;
    let frozen = support::proc_state(h.tenure_pid().as_raw() as u32) == Some('T');
    kill(h.tenure_pid(), Signal::SIGCONT).expect("SIGCONT tenure");
    let acted = h.last_act() - deposed;
    let said = rest(&mut h).await;
    println!("[figure] guard killed the group while tenure was frozen ({acted:?} ns of acts after the deposition): {said}");
    assert!(frozen, "tenure stayed frozen until the group was dead");
    assert!(said.contains("killed by SIGKILL"), "{said}");
    assert!(!said.contains("group was stopped"), "{said}");

    // 3. Traps SIGTERM and exits 3: no SIGKILL was needed.
    let dir = tempfile::tempdir().expect("tempdir");
    let trapped = dir.path().join("trapped");
    let armed = dir.path().join("armed");
    let script = format!(
        r#"trap 'echo term > "{t}"; exit 3' TERM; : > "{a}"; while :; do sleep 0.05; done"#,
        t = trapped.display(),
        a = armed.display()
    );
    let mut h = holding(&etcd, "ends-3", &script).await;
    // Deposed only once the trap is set: a SIGTERM before it is the
    // shell's default death, which the message then rightly reports.
    let armed_by = Instant::now() + Duration::from_secs(10);
    while !armed.exists() {
        assert!(Instant::now() < armed_by, "the command never set its trap");
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    c.depose(&name("ends-3"))
        .await
        .expect("depose")
        .expect("deposed");
    assert_eq!(h.exit_code(Duration::from_secs(10)).await, Some(4));
    let said = rest(&mut h).await;
    println!("[figure] traps SIGTERM and exits 3: {said}");
    assert!(trapped.exists(), "the trap ran");
    assert!(said.contains("exited with status 3"), "{said}");
    assert!(!said.contains("SIGKILL"), "{said}");
}

/// A revoke whose answer came late still reached etcd: the message must not
/// say it failed (issue 20.12). etcd's lease list is the record.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_late_answered_revoke_is_not_reported_as_failed() {
    let etcd = Etcd::start().await;
    let proxy = Proxy::start(etcd.client_addr()).await;
    let dir = tempfile::tempdir().expect("tempdir");
    let c = tenure_client(&etcd).await;
    let n = name("late-revoke");
    let opts = CampaignOptions::new(Ttl::from_secs(30).expect("ttl"));
    // Counted before a leads: a's own term watch may open after
    // `campaign_wait` returns, and must not pass for b's.
    let watchers = support::prom::etcd_watchers(&etcd.endpoint())
        .await
        .unwrap_or(0.0);
    let a = c
        .campaign_wait(&n, "a", &opts, None)
        .await
        .expect("a leads");
    let mut raw = c.etcd();
    // b waits through the proxy, with a 1 s request timeout.
    let child = spawn(
        &proxy.endpoint(),
        "late-revoke",
        dir.path(),
        &["--wait", "--ttl", "30"],
    );
    let mut b = Holder::attach(child, dir.path());
    let deadline = Instant::now() + Duration::from_secs(10);
    while raw.leases().await.expect("leases").leases().len() < 2 {
        assert!(Instant::now() < deadline, "b never granted its lease");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    // And b waits: its campaign was answered and it watches the key (two
    // watches more than before a led: a's on its term, b's). A SIGTERM
    // while b's campaign is still in flight (a loaded CI run) is another
    // path, which this test is not about.
    while support::prom::etcd_watchers(&etcd.endpoint())
        .await
        .unwrap_or(0.0)
        < watchers + 2.0
    {
        assert!(Instant::now() < deadline, "b never waited");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    // Requests now arrive 1.5 s late: b's revoke times out, then lands.
    proxy.set_delay_up(Duration::from_millis(1500));
    kill(b.tenure_pid(), Signal::SIGTERM).expect("SIGTERM b");
    let deadline = Instant::now() + Duration::from_secs(10);
    while raw.leases().await.expect("leases").leases().len() > 1 {
        assert!(Instant::now() < deadline, "b's revoke never reached etcd");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    proxy.set_delay_up(Duration::ZERO);
    assert_eq!(b.exit_code(Duration::from_secs(15)).await, Some(143));
    let said = support::holder::rest_of(&mut b.lines, Duration::from_secs(5))
        .await
        .join("\n");
    println!("[figure] b's revoke answered late, etcd holds only a's lease; b said: {said:?}");
    assert!(
        !said.contains("could not revoke") && !said.contains("refused"),
        "etcd shows the lease revoked, tenure says: {said}"
    );
    // Certain (nothing to say) or unknown, never a failure.
    assert!(
        said.is_empty() || said.contains("may have been revoked"),
        "{said}"
    );
    drop(a);
}
