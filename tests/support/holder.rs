//! `tenure campaign` holders whose every act is recorded, for the holder
//! safety tests and the fault suite's belief checker.
//!
//! The command is the hard case: it ignores SIGTERM and starts a grandchild
//! that ignores it too; both append `date +%s%N` (the wall clock, which
//! the tests read as well: one clock) to an acts file every 20 ms. What the
//! tests compare it with comes from etcd (a [`KeyLog`] watching the key)
//! and from `/proc`, never from tenure's own word.

use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use etcd_client::{EventType, WatchOptions};
use nix::sys::signal::{kill, killpg, Signal};
use nix::unistd::Pid;
use tokio::io::{AsyncBufReadExt, BufReader, Lines};
use tokio::process::{Child, ChildStderr, Command};

use super::tenure_bin;

/// A command that ignores SIGTERM, starts a grandchild that ignores it
/// too, and appends a timestamp to `$ACTS` every 20 ms from both.
pub const STUBBORN: &str = r#"
echo $$ > "$ACTS.pid"
trap '' TERM
( while :; do date +%s%N >> "$ACTS"; sleep 0.02; done ) &
while :; do date +%s%N >> "$ACTS"; sleep 0.02; done
"#;

pub fn now_ns() -> i128 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_nanos() as i128)
        .unwrap_or(0)
}

pub fn ms(ns: i128) -> f64 {
    ns as f64 / 1e6
}

/// Processes of group `pgid` that can still run (not zombies).
pub fn live_members(pgid: i32) -> Vec<i32> {
    let Ok(dir) = std::fs::read_dir("/proc") else {
        return Vec::new();
    };
    dir.filter_map(|e| e.ok())
        .filter_map(|e| e.file_name().to_str()?.parse::<i32>().ok())
        .filter(|&pid| {
            let Ok(stat) = std::fs::read_to_string(format!("/proc/{pid}/stat")) else {
                return false;
            };
            let Some(rest) = stat.rfind(')').map(|i| &stat[i + 1..]) else {
                return false;
            };
            let f: Vec<&str> = rest.split_whitespace().collect();
            f.get(2).and_then(|p| p.parse::<i32>().ok()) == Some(pgid)
                && !matches!(f.first(), Some(&"Z") | Some(&"X"))
        })
        .collect()
}

/// The process group of `pid`; `None` once the process is gone.
pub fn pgid_of(pid: i32) -> Option<i32> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    let rest = &stat[stat.rfind(')')? + 1..];
    rest.split_whitespace().nth(2)?.parse().ok()
}

/// Polls until no process of `pgid` can run; returns when (wall clock, ns).
pub async fn dead_at(pgid: i32, within: Duration) -> i128 {
    match dead_within(pgid, within).await {
        Some(at) => at,
        None => panic!(
            "group {pgid} still alive after {within:?}: {:?}",
            live_members(pgid)
        ),
    }
}

/// [`dead_at`], or `None` when the group still runs after `within`.
pub async fn dead_within(pgid: i32, within: Duration) -> Option<i128> {
    // Scanning /proc is blocking work: on a thread of its own it never
    // starves the test's runtime (which also runs the fault proxies).
    tokio::task::spawn_blocking(move || {
        let deadline = Instant::now() + within;
        loop {
            if live_members(pgid).is_empty() {
                return Some(now_ns());
            }
            if Instant::now() >= deadline {
                return None;
            }
            std::thread::sleep(Duration::from_millis(3));
        }
    })
    .await
    .expect("the /proc scan panicked")
}

/// The lines tenure wrote to stderr after what was read so far, until it
/// closed it (exited) or `within` passed.
pub async fn rest_of(lines: &mut Lines<BufReader<ChildStderr>>, within: Duration) -> Vec<String> {
    let deadline = tokio::time::Instant::now() + within;
    let mut rest = Vec::new();
    while let Ok(Ok(Some(line))) = tokio::time::timeout_at(deadline, lines.next_line()).await {
        rest.push(line);
    }
    rest
}

/// A `tenure campaign` running [`STUBBORN`].
pub struct Holder {
    pub child: Child,
    pub lines: Lines<BufReader<ChildStderr>>,
    pub acts: PathBuf,
    pub token: i64,
    /// The command's process group (the guard leads it).
    pub pgid: i32,
    pub cmd_pid: i32,
}

impl Holder {
    pub async fn start(endpoint: &str, election: &str, dir: &Path, args: &[&str]) -> Holder {
        Holder::start_env(endpoint, election, dir, args, &[]).await
    }

    /// [`Holder::start`] with extra environment (an etcd user, its password).
    pub async fn start_env(
        endpoint: &str,
        election: &str,
        dir: &Path,
        args: &[&str],
        env: &[(&str, &str)],
    ) -> Holder {
        let child = spawn_env(endpoint, election, dir, args, env);
        let mut h = Holder::attach(child, dir);
        h.token = h.leads(Duration::from_secs(20)).await;
        h.find_group().await;
        h
    }

    pub fn attach(mut child: Child, dir: &Path) -> Holder {
        let lines = BufReader::new(child.stderr.take().expect("stderr")).lines();
        Holder {
            child,
            lines,
            acts: dir.join("acts"),
            token: 0,
            pgid: 0,
            cmd_pid: 0,
        }
    }

    pub async fn leads(&mut self, within: Duration) -> i64 {
        loop {
            let line = tokio::time::timeout(within, self.lines.next_line())
                .await
                .expect("tenure campaign announced leadership in time")
                .expect("read stderr")
                .expect("tenure campaign exited before leading");
            if let Some(rest) = line.split(" with token ").nth(1) {
                return rest
                    .split_whitespace()
                    .next()
                    .and_then(|t| t.parse().ok())
                    .expect("token");
            }
        }
    }

    /// Finds the command's group and waits until command and grandchild
    /// both run. Panics if the command ended before it could be seen: use
    /// [`Holder::try_find_group`] where a term may legitimately end at once.
    pub async fn find_group(&mut self) {
        if let Err(e) = self.try_find_group().await {
            panic!("{e}");
        }
    }

    /// As [`Holder::find_group`], but a command that already ended (its
    /// term lost again before it was looked at) is an `Err`, not a panic.
    pub async fn try_find_group(&mut self) -> Result<(), String> {
        let pidfile = PathBuf::from(format!("{}.pid", self.acts.display()));
        let deadline = Instant::now() + Duration::from_secs(10);
        self.cmd_pid = loop {
            if let Some(pid) = std::fs::read_to_string(&pidfile)
                .ok()
                .and_then(|s| s.trim().parse().ok())
            {
                break pid;
            }
            assert!(Instant::now() < deadline, "the command never started");
            tokio::time::sleep(Duration::from_millis(10)).await;
        };
        let Some(pgid) = pgid_of(self.cmd_pid) else {
            return Err(format!("the command (pid {}) already ended", self.cmd_pid));
        };
        self.pgid = pgid;
        let tenure_pid = self.child.id().expect("pid") as i32;
        assert_ne!(self.pgid, tenure_pid, "the command has a group of its own");
        // Both the command and its grandchild act.
        let deadline = Instant::now() + Duration::from_secs(10);
        loop {
            let live = live_members(self.pgid).len();
            if live >= 3 {
                return Ok(());
            }
            if live == 0 {
                return Err(format!("the command's group {pgid} already ended"));
            }
            assert!(Instant::now() < deadline, "the grandchild never started");
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    }

    pub fn tenure_pid(&self) -> Pid {
        Pid::from_raw(self.child.id().expect("pid") as i32)
    }

    /// The last moment the command or its grandchild acted.
    pub fn last_act(&self) -> i128 {
        std::fs::read_to_string(&self.acts)
            .unwrap_or_default()
            .lines()
            .filter_map(|l| l.trim().parse::<i128>().ok())
            .max()
            .unwrap_or(0)
    }

    pub async fn exit_code(&mut self, within: Duration) -> Option<i32> {
        tokio::time::timeout(within, self.child.wait())
            .await
            .expect("tenure campaign exited in time")
            .expect("wait")
            .code()
    }
}

impl Drop for Holder {
    fn drop(&mut self) {
        if self.pgid > 0 {
            let _ = killpg(Pid::from_raw(self.pgid), Signal::SIGCONT);
            let _ = killpg(Pid::from_raw(self.pgid), Signal::SIGKILL);
        }
        if let Some(pid) = self.child.id() {
            let _ = kill(Pid::from_raw(pid as i32), Signal::SIGCONT);
        }
    }
}

pub fn spawn(endpoint: &str, election: &str, dir: &Path, args: &[&str]) -> Child {
    spawn_env(endpoint, election, dir, args, &[])
}

/// [`spawn`] with extra environment variables.
pub fn spawn_env(
    endpoint: &str,
    election: &str,
    dir: &Path,
    args: &[&str],
    env: &[(&str, &str)],
) -> Child {
    Command::new(tenure_bin())
        .arg("campaign")
        .arg(election)
        .args(args)
        .args(["--", "sh", "-c", STUBBORN])
        .env("TENURE_ENDPOINTS", endpoint)
        .env_remove("TENURE_PREFIX")
        .env("TENURE_TIMEOUT", "1")
        .env("ACTS", dir.join("acts"))
        .envs(env.iter().copied())
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .kill_on_drop(true)
        .spawn()
        .expect("spawn tenure campaign")
}

/// One change of a key as the test saw it arrive from etcd.
#[derive(Debug, Clone, Copy)]
pub struct KeyChange {
    /// Wall clock, ns, when the test received the event.
    pub at: i128,
    pub deleted: bool,
    /// The key's CreateRevision (0 for a deletion).
    pub create_revision: i64,
    pub revision: i64,
}

/// Every change of one key, recorded by the test's own watch straight to
/// etcd (independent of tenure), with the moment each arrived.
pub struct KeyLog {
    changes: Arc<Mutex<Vec<KeyChange>>>,
    task: tokio::task::JoinHandle<()>,
}

impl KeyLog {
    /// Starts watching `key`; every change after this returns is recorded.
    pub async fn start(mut raw: etcd_client::Client, key: &str) -> KeyLog {
        let mut stream = raw
            .watch(key, Some(WatchOptions::new()))
            .await
            .expect("watch");
        let first = stream.message().await.expect("watch").expect("created");
        assert!(first.created());
        let changes = Arc::new(Mutex::new(Vec::new()));
        let sink = changes.clone();
        let task = tokio::spawn(async move {
            let _raw = raw;
            while let Ok(Some(resp)) = stream.message().await {
                let at = now_ns();
                let mut c = sink.lock().unwrap_or_else(|p| p.into_inner());
                for e in resp.events() {
                    let Some(kv) = e.kv() else { continue };
                    c.push(KeyChange {
                        at,
                        deleted: e.event_type() == EventType::Delete,
                        create_revision: kv.create_revision(),
                        revision: kv.mod_revision(),
                    });
                }
            }
        });
        KeyLog { changes, task }
    }

    pub fn changes(&self) -> Vec<KeyChange> {
        self.changes
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .clone()
    }

    /// Waits for the first change matching `f`; returns it.
    pub async fn wait_for(
        &self,
        what: &str,
        within: Duration,
        f: impl Fn(&KeyChange) -> bool,
    ) -> KeyChange {
        let deadline = Instant::now() + within;
        loop {
            if let Some(c) = self.changes().into_iter().find(|c| f(c)) {
                return c;
            }
            assert!(Instant::now() < deadline, "{what} within {within:?}");
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
    }

    /// When etcd deleted the key (first deletion seen).
    pub async fn deleted(&self, within: Duration) -> i128 {
        self.wait_for("etcd deleted the key", within, |c| c.deleted)
            .await
            .at
    }

    /// When a term newer than `token` was created.
    pub async fn created_after(&self, token: i64, within: Duration) -> KeyChange {
        self.wait_for("a newer term", within, |c| {
            !c.deleted && c.create_revision > token
        })
        .await
    }
}

impl Drop for KeyLog {
    fn drop(&mut self) {
        self.task.abort();
    }
}
