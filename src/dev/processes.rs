//! The demo's actors that are processes, run as a user would run them:
//!
//! - the split-brain story: two `tenure campaign` holders of `boss-fight`,
//!   each writing the `scores` resource through the fence. scene-01 (TTL
//!   2 s) is frozen whole with SIGSTOP (tenure, its guard and its command)
//!   until its lease expires and scene-02 leads; woken, its writer writes
//!   once more and is refused, and its holder reports its acting end late.
//!   Both publish acting records, so the pages show scene-01's acting bar
//!   running on past its term beside scene-02's, the overlap in red;
//! - another system's election: `etcdctl elect` candidates under
//!   [`ELECT_PREFIX`] (etcd's `concurrency` layout, read by serve through
//!   `--source concurrency:/jobs/`), taking turns.
//!
//! Every child is killed when its task ends or is aborted (a frozen one is
//! woken first, so that its guard can end its command).

use std::path::PathBuf;
use std::process::Stdio;
use std::time::Duration;

use nix::sys::signal::{kill, killpg, Signal};
use nix::unistd::{getpgid, Pid};
use tokio::io::{AsyncBufReadExt, BufReader};
use tokio::process::{Child, Command};
use tokio::time::{sleep, timeout, Instant};

use crate::election::{Client, ElectionName};

/// The prefix of the other system's elections (`--source
/// concurrency:/jobs/`); its one election is `/jobs/cron/leader`.
pub const ELECT_PREFIX: &str = "/jobs/";
const ELECT_NAME: &str = "/jobs/cron/leader";

/// The programs the fleet's processes run, and where etcd is.
#[derive(Debug, Clone)]
pub struct Programs {
    /// This tenure binary.
    pub tenure: PathBuf,
    /// etcd's `etcdctl`; `None`: the other system's election is left out.
    pub etcdctl: Option<PathBuf>,
    pub endpoint: String,
}

/// A holder's command: prints its pid (so that its group can be frozen),
/// then writes `scores` through the fence twice a second.
const WRITER: &str = r#"echo $$
while :; do
  "$TENURE_BIN" fence boss-fight scores --token "$TENURE_TOKEN" >/dev/null 2>&1
  sleep 0.5
done"#;

/// One `tenure campaign` process and its command's process group.
struct Holder {
    child: Child,
    /// The command's group (its guard leads it); 0 until the command ran.
    pgid: i32,
}

impl Holder {
    fn spawn(p: &Programs, id: &str, ttl: &str, wait: bool) -> std::io::Result<Holder> {
        let mut cmd = Command::new(&p.tenure);
        cmd.args(["campaign", "boss-fight", "--id", id, "--ttl", ttl]);
        if wait {
            cmd.arg("--wait");
        }
        let child = cmd
            .args(["--", "sh", "-c", WRITER])
            .env("TENURE_ENDPOINTS", &p.endpoint)
            .env("TENURE_BIN", &p.tenure)
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .kill_on_drop(true)
            .spawn()?;
        Ok(Holder { child, pgid: 0 })
    }

    /// Waits until its command runs (it leads), within `within`.
    async fn leads(&mut self, within: Duration) -> bool {
        let Some(out) = self.child.stdout.take() else {
            return false;
        };
        let mut lines = BufReader::new(out).lines();
        let Ok(Ok(Some(line))) = timeout(within, lines.next_line()).await else {
            return false;
        };
        // The rest of the command's output is not read: keep the pipe open.
        crate::task::spawn("demo writer output", async move {
            while let Ok(Some(_)) = lines.next_line().await {}
        });
        let Ok(pid) = line.trim().parse::<i32>() else {
            return false;
        };
        self.pgid = getpgid(Some(Pid::from_raw(pid))).map_or(0, Pid::as_raw);
        self.pgid > 0
    }

    fn pid(&self) -> Option<Pid> {
        self.child
            .id()
            .and_then(|p| i32::try_from(p).ok())
            .map(Pid::from_raw)
    }

    /// Freezes the whole holder: its command's group and tenure.
    fn freeze(&self) {
        if self.pgid > 0 {
            let _ = killpg(Pid::from_raw(self.pgid), Signal::SIGSTOP);
        }
        if let Some(pid) = self.pid() {
            let _ = kill(pid, Signal::SIGSTOP);
        }
    }

    /// Wakes the command first (its writer acts on, as an application
    /// does after a pause), then, `after` later, its guard and tenure.
    async fn wake(&self, after: Duration) {
        for pid in group_members(self.pgid) {
            if pid != self.pgid {
                let _ = kill(Pid::from_raw(pid), Signal::SIGCONT);
            }
        }
        sleep(after).await;
        self.wake_all();
    }

    fn wake_all(&self) {
        if let Some(pid) = self.pid() {
            let _ = kill(pid, Signal::SIGCONT);
        }
        if self.pgid > 0 {
            let _ = killpg(Pid::from_raw(self.pgid), Signal::SIGCONT);
        }
    }

    /// SIGTERM: tenure stops its command and resigns; waits for its exit.
    async fn resign(&mut self, within: Duration) {
        if let Some(pid) = self.pid() {
            let _ = kill(pid, Signal::SIGTERM);
        }
        let _ = timeout(within, self.child.wait()).await;
    }
}

impl Drop for Holder {
    fn drop(&mut self) {
        // Once tenure exited its group is gone (its ids may be reused).
        if !matches!(self.child.try_wait(), Ok(None)) {
            return;
        }
        // A frozen guard could not end the command once tenure is gone.
        self.wake_all();
        let _ = self.child.start_kill();
    }
}

/// The processes of group `pgid` (from /proc).
fn group_members(pgid: i32) -> Vec<i32> {
    let Ok(dir) = std::fs::read_dir("/proc") else {
        return Vec::new();
    };
    dir.filter_map(|e| e.ok()?.file_name().to_str()?.parse::<i32>().ok())
        .filter(|pid| {
            let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap_or_default();
            // The fields after the command's name: state, ppid, pgrp.
            let rest = stat.rfind(')').map_or("", |i| &stat[i + 1..]);
            rest.split_whitespace().nth(2).and_then(|g| g.parse().ok()) == Some(pgid)
        })
        .collect()
}

/// Polls etcd until `holder` leads `n`, within `within`.
async fn until_leads(client: &Client, n: &ElectionName, holder: &str, within: Duration) -> bool {
    let deadline = Instant::now() + within;
    while Instant::now() < deadline {
        if let Ok(Some(l)) = client.leader(n).await {
            if l.leader.holder == holder {
                return true;
            }
        }
        sleep(Duration::from_millis(100)).await;
    }
    false
}

/// One replay of the split-brain story, t0..t4 (see the module doc).
pub(super) async fn story(client: &Client, p: &Programs) -> std::io::Result<()> {
    let n = super::name("boss-fight");
    // t0: scene-01 leads; scene-02 waits, watching the key.
    let mut one = Holder::spawn(p, "scene-01", "2", false)?;
    if !one.leads(Duration::from_secs(10)).await {
        return Ok(());
    }
    let mut two = Holder::spawn(p, "scene-02", "5", true)?;
    sleep(Duration::from_secs(3)).await;
    let old = client
        .leader(&n)
        .await
        .ok()
        .flatten()
        .map(|l| l.leader.token);
    // t1: scene-01 freezes whole, a long pause; t2: its lease expires and
    // scene-02 leads while scene-01's program still believes it does.
    one.freeze();
    if until_leads(client, &n, "scene-02", Duration::from_secs(15)).await {
        sleep(Duration::from_secs(3)).await;
    }
    // t3: scene-01 wakes: its writer writes once more (refused), then its
    // guard and tenure end it and report its acting end, late.
    one.wake(Duration::from_millis(1200)).await;
    let _ = timeout(Duration::from_secs(10), one.child.wait()).await;
    // t4: scene-01's token is refused by the fence, recorded for all.
    if let Some(old) = old {
        let _ = client.fence(&n, "scores", old).await;
    }
    sleep(Duration::from_secs(15)).await;
    two.resign(Duration::from_secs(10)).await;
    Ok(())
}

/// An `etcdctl elect` candidate of another system: campaigns, holds the
/// election a while, resigns (SIGINT), rests, again.
pub(super) async fn elect_candidate(p: Programs, id: &'static str) {
    let Some(etcdctl) = p.etcdctl.clone() else {
        return;
    };
    let mut dice = super::Dice::new(id);
    loop {
        let child = Command::new(&etcdctl)
            .args(["--endpoints", &p.endpoint, "elect", ELECT_NAME, id])
            .env("ETCDCTL_API", "3")
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .kill_on_drop(true)
            .spawn();
        let Ok(mut child) = child else {
            tracing::debug!(id, "demo etcdctl elect did not start");
            return;
        };
        sleep(dice.secs(20, 50)).await;
        if let Some(pid) = child.id().and_then(|p| i32::try_from(p).ok()) {
            let _ = kill(Pid::from_raw(pid), Signal::SIGINT);
        }
        let _ = timeout(Duration::from_secs(5), child.wait()).await;
        sleep(dice.secs(2, 8)).await;
    }
}
