//! The guard of `tenure campaign`'s command group (issue 20, item 5),
//! against a real etcd: what `ps` calls it, what a dead guard means, and
//! the command's own switch (PR_SET_PDEATHSIG) when both the guard and
//! tenure are gone. Liveness comes from `/proc`, never from tenure's word.
// Tests, benches and their harness assert with unwrap/expect, spawn bare tasks
// and read the wall clock: the lints of Cargo.toml and clippy.toml hold src/.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::disallowed_methods)]

mod support;

use std::process::Stdio;
use std::time::{Duration, Instant};

use nix::sys::signal::{kill, Signal};
use nix::unistd::Pid;
use support::holder::{dead_within, live_members, ms, now_ns, rest_of, Holder};
use support::procfs::proc_state;
use support::{tenure_bin, Etcd};

/// True while `pid` exists and is not a zombie.
fn runs(pid: i32) -> bool {
    proc_state(pid as u32).is_some_and(|s| s != 'Z' && s != 'X')
}

/// Polls until `pid` no longer runs; returns when (wall clock, ns).
async fn gone_at(pid: i32, within: Duration) -> Option<i128> {
    let deadline = Instant::now() + within;
    while runs(pid) {
        if Instant::now() >= deadline {
            return None;
        }
        tokio::time::sleep(Duration::from_millis(3)).await;
    }
    Some(now_ns())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ps_shows_the_guard_as_tenure_guard() {
    let etcd = Etcd::start().await;
    let dir = tempfile::tempdir().expect("tempdir");
    let h = Holder::start(&etcd.endpoint(), "named", dir.path(), &["--ttl", "10"]).await;
    // The guard leads the command's group.
    let out = std::process::Command::new("ps")
        .args(["-o", "comm=,args=", "-p", &h.pgid.to_string()])
        .output()
        .expect("ps");
    let shown = String::from_utf8_lossy(&out.stdout).trim().to_owned();
    println!("[figure] ps -o comm=,args= of the guard: {shown}");
    assert!(
        shown.starts_with("tenure-guard ") && shown.contains(" tenure-guard"),
        "ps shows the guard as {shown:?}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kill_9_of_the_guard_is_a_loss_the_group_stops_at_once() {
    let etcd = Etcd::start().await;
    let dir = tempfile::tempdir().expect("tempdir");
    // TTL 10: a grace of 2.25 s would show.
    let mut h = Holder::start(&etcd.endpoint(), "unguarded", dir.path(), &["--ttl", "10"]).await;
    kill(Pid::from_raw(h.pgid), Signal::SIGKILL).expect("SIGKILL the guard");
    let killed = now_ns();
    let dead = dead_within(h.pgid, Duration::from_secs(5)).await;
    println!(
        "[figure] kill -9 of the guard (TTL 10 s): command group dead {}",
        dead.map_or("never (5 s)".to_owned(), |d| format!(
            "{:.0} ms later",
            ms(d - killed)
        ))
    );
    let dead = dead.expect("the command runs on without its guard");
    assert!(
        dead - killed < 1_000_000_000,
        "dead {:.0} ms after the guard died",
        ms(dead - killed)
    );
    assert_eq!(h.exit_code(Duration::from_secs(10)).await, Some(4));
    let said = rest_of(&mut h.lines, Duration::from_secs(5))
        .await
        .join("\n");
    assert!(said.contains("guard"), "tenure says why: {said}");
}

/// The second line: tenure frozen (it cannot act on its guard's death),
/// the guard killed, then tenure killed. The command, tenure's child, dies
/// by PR_SET_PDEATHSIG. Its grandchild has no such switch: it runs on
/// (printed as a figure; killed by the test).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_command_dies_with_tenure_when_the_guard_died_first() {
    let etcd = Etcd::start().await;
    let dir = tempfile::tempdir().expect("tempdir");
    let h = Holder::start(&etcd.endpoint(), "orphan", dir.path(), &["--ttl", "10"]).await;
    kill(h.tenure_pid(), Signal::SIGSTOP).expect("SIGSTOP tenure");
    kill(Pid::from_raw(h.pgid), Signal::SIGKILL).expect("SIGKILL the guard");
    assert!(
        gone_at(h.pgid, Duration::from_secs(5)).await.is_some(),
        "the guard died"
    );
    kill(h.tenure_pid(), Signal::SIGKILL).expect("SIGKILL tenure");
    let killed = now_ns();
    let dead = gone_at(h.cmd_pid, Duration::from_secs(5)).await;
    let left = live_members(h.pgid);
    println!(
        "[figure] guard then tenure killed -9: the command dead {}; {} process(es) of its group \
         left (grandchildren have no PDEATHSIG)",
        dead.map_or("never (5 s)".to_owned(), |d| format!(
            "{:.0} ms after tenure",
            ms(d - killed)
        )),
        left.len()
    );
    let dead = dead.expect("the command runs on without guard and tenure");
    assert!(
        dead - killed < 1_000_000_000,
        "dead {:.0} ms after tenure",
        ms(dead - killed)
    );
}

/// PR_SET_PDEATHSIG fires when the *thread* that forked the child exits.
/// tenure's threads come and go (a blocking-pool thread resolving
/// `localhost` ends 10 s after its last job): none of that may touch the
/// command. Checked with a thread of tenure seen to exit while the command
/// runs on.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_command_outlives_the_exit_of_tenures_threads() {
    let etcd = Etcd::start().await;
    let dir = tempfile::tempdir().expect("tempdir");
    let endpoint = format!("http://localhost:{}", etcd.client_port());
    let h = Holder::start(&endpoint, "threads", dir.path(), &["--ttl", "10"]).await;
    let tasks = |pid: Pid| -> Vec<String> {
        std::fs::read_dir(format!("/proc/{pid}/task"))
            .map(|d| {
                d.filter_map(|e| e.ok())
                    .map(|e| e.file_name().to_string_lossy().into_owned())
                    .collect()
            })
            .unwrap_or_default()
    };
    let at_start = tasks(h.tenure_pid());
    let deadline = Instant::now() + Duration::from_secs(25);
    let exited = loop {
        let now = tasks(h.tenure_pid());
        if let Some(t) = at_start.iter().find(|t| !now.contains(t)) {
            break t.clone();
        }
        assert!(
            Instant::now() < deadline,
            "no thread of tenure exited within 25 s ({at_start:?}): the test proves nothing"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    };
    // Give a PDEATHSIG time to land, then look.
    tokio::time::sleep(Duration::from_millis(500)).await;
    let live = live_members(h.pgid).len();
    println!("[figure] tenure's thread {exited} exited; {live} processes of the group run on");
    assert!(
        runs(h.cmd_pid),
        "the command died with tenure's thread {exited}"
    );
    assert!(live >= 3, "guard, command and grandchild run on: {live}");
}

/// The switch itself, through tenure's own `__exec` step: a child forked by
/// a short-lived thread dies when that thread exits (which is why tenure
/// forks the command from a thread that lasts as long as its group).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pdeathsig_follows_the_thread_that_forked() {
    let spawn = || {
        std::process::Command::new(tenure_bin())
            .args(["__exec", &std::process::id().to_string(), "sleep", "30"])
            .stdin(Stdio::null())
            .spawn()
            .expect("spawn tenure __exec")
    };
    // Until the child runs `sleep`: the switch is set before the exec.
    let exec_done = |pid: u32| {
        let deadline = Instant::now() + Duration::from_secs(5);
        while std::fs::read_to_string(format!("/proc/{pid}/comm")).unwrap_or_default() != "sleep\n"
        {
            assert!(Instant::now() < deadline, "{pid} never ran sleep");
            std::thread::sleep(Duration::from_millis(5));
        }
    };
    let kept = Reaped(spawn());
    exec_done(kept.0.id());
    let mut short = Reaped(
        std::thread::spawn(move || {
            let child = spawn();
            exec_done(child.id());
            child
        })
        .join()
        .expect("the short thread"),
    );
    let (kept_pid, short_pid) = (kept.0.id() as i32, short.0.id() as i32);
    // The short-lived thread has exited: its child goes.
    let deadline = Instant::now() + Duration::from_secs(5);
    let status = loop {
        if let Some(s) = short.0.try_wait().expect("try_wait") {
            break s;
        }
        assert!(Instant::now() < deadline, "{short_pid} outlived its thread");
        tokio::time::sleep(Duration::from_millis(10)).await;
    };
    use std::os::unix::process::ExitStatusExt;
    assert_eq!(status.signal(), Some(9), "{status:?}");
    // Both were `sleep` by then: the switch survives the exec.
    assert!(runs(kept_pid), "the child of a living thread runs on");
}

/// A child of the test, SIGKILLed and reaped when dropped (the test fails
/// or not).
struct Reaped(std::process::Child);

impl Drop for Reaped {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// The command now starts through `tenure __exec`; a program that does not
/// exist is still tenure's own error, one line, exit 1, and the term it won
/// is ended before tenure exits (etcd holds no key).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_missing_program_is_an_error_and_leaves_no_term() {
    let etcd = Etcd::start().await;
    let out = tokio::process::Command::new(tenure_bin())
        .args(["campaign", "typo", "--", "no-such-program-for-tenure"])
        .env("TENURE_ENDPOINTS", etcd.endpoint())
        .env_remove("TENURE_PREFIX")
        .stdin(Stdio::null())
        .kill_on_drop(true)
        .output()
        .await
        .expect("run tenure campaign");
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{err}");
    assert!(
        err.contains("starting \"no-such-program-for-tenure\": No such file or directory"),
        "{err}"
    );
    let mut raw = etcd.client().await;
    let left = raw.get("election/typo", None).await.expect("get");
    assert!(left.kvs().is_empty(), "the term was left behind");
}
