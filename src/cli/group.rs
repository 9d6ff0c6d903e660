//! The command `tenure campaign` runs, as a guarded process group.
//!
//! The group's leader is the guard (`tenure __guard`, see `guard.rs`); the
//! command joins its group, and so does everything the command starts
//! unless it leaves the group on purpose (`setsid`, `setpgid`: a daemon
//! that does so is out of tenure's reach, as it is out of any supervisor's
//! that does not use cgroups). Every stop signals the whole group, so a
//! grandchild (`sh -c 'worker & wait'`) stops with the command.
//!
//! "Dead" means no process of the group is left that can run: the command
//! is reaped and every other member is gone or a zombie (a zombie cannot
//! act; reaping it is its new parent's business).

use std::io::Write;
use std::os::fd::AsFd;
use std::os::unix::process::CommandExt;
use std::process::{ExitStatus, Stdio};
use std::time::Duration;

use anyhow::Context;
use nix::sys::signal::{killpg, Signal};
use nix::unistd::Pid;
use tokio::process::{Child, Command};

use crate::election::deadline::{Deadline, Stamp};

/// How often the group is looked at while waiting for it to die.
const POLL: Duration = Duration::from_millis(5);
/// How long to wait for the processes of a SIGKILLed group to disappear
/// before saying which are left (a process stuck in the kernel, state D,
/// dies only when its system call returns).
const KILL_SETTLE: Duration = Duration::from_secs(2);

pub struct Group {
    command: Child,
    pid: u32,
    pgid: Pid,
    guard: std::process::Child,
    to_guard: std::fs::File,
    exited: Option<ExitStatus>,
}

/// How a stop went, for the log and for tests.
pub struct Stopped {
    /// True when SIGKILL had to be sent before the command exited.
    pub killed: bool,
    /// Group members still alive after the SIGKILL settled (normally none).
    pub survivors: Vec<i32>,
}

impl Group {
    /// Starts the guard, tells it `kill_at`, then starts `argv` in the
    /// guard's process group: the command never runs without a deadline.
    pub fn spawn(
        argv: &[String],
        env: &[(&str, String)],
        kill_at: Deadline,
    ) -> anyhow::Result<Self> {
        // /proc/self/exe, not the path: a package upgrade may have replaced
        // the file since tenure started (hours ago, for a waiting
        // candidate); the running binary's inode is still there.
        let exe = std::path::PathBuf::from("/proc/self/exe");
        // Close-on-exec: the command must not hold the write end, or the
        // pipe would not close when tenure dies.
        let (from_tenure, to_guard) = nix::unistd::pipe2(nix::fcntl::OFlag::O_CLOEXEC)
            .context("creating the guard's pipe")?;
        let to_guard = std::fs::File::from(to_guard);
        // A frozen guard must not block tenure: writes that would block
        // are dropped (the guard then acts on the deadline it has).
        nix::fcntl::fcntl(
            to_guard.as_fd(),
            nix::fcntl::FcntlArg::F_SETFL(nix::fcntl::OFlag::O_NONBLOCK),
        )
        .context("making the guard's pipe non-blocking")?;
        let guard = std::process::Command::new(&exe)
            .arg(super::guard::ARG)
            .stdin(Stdio::from(from_tenure))
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .process_group(0)
            .spawn()
            .with_context(|| format!("starting the guard process ({})", exe.display()))?;
        let guard_pid = i32::try_from(guard.id()).context("guard pid out of range")?;
        let mut to_guard = to_guard;
        if let Err(e) = to_guard.write_all(format!("{}\n", kill_at.boot.as_nanos()).as_bytes()) {
            let mut guard = guard;
            let _ = guard.kill();
            let _ = guard.wait();
            return Err(e).context("telling the guard its first deadline");
        }
        let mut cmd = Command::new(&argv[0]);
        cmd.args(&argv[1..]).process_group(guard_pid);
        for (k, v) in env {
            cmd.env(k, v);
        }
        let command = match cmd.spawn() {
            Ok(c) => c,
            Err(e) => {
                // Dropping the pipe makes the guard kill its (empty) group.
                drop(to_guard);
                let mut guard = guard;
                let _ = guard.wait();
                return Err(e).with_context(|| format!("starting {:?}", argv[0]));
            }
        };
        let pid = command
            .id()
            .context("the command exited before its pid was read")?;
        Ok(Self {
            command,
            pid,
            pgid: Pid::from_raw(guard_pid),
            guard,
            to_guard,
            exited: None,
        })
    }

    pub fn pid(&self) -> u32 {
        self.pid
    }

    pub fn pgid(&self) -> i32 {
        self.pgid.as_raw()
    }

    /// Tells the guard to kill the group at `at` unless told a new time.
    pub fn kill_at(&mut self, at: Deadline) {
        let line = format!("{}\n", at.boot.as_nanos());
        if let Err(e) = self.to_guard.write_all(line.as_bytes()) {
            if e.kind() != std::io::ErrorKind::WouldBlock {
                super::stderr::say(format_args!(
                    "the guard of the command's group is gone ({e}); tenure still stops the command itself"
                ));
            }
        }
    }

    /// Waits for the command to exit (its status is kept for `stop`).
    pub async fn wait(&mut self) -> std::io::Result<ExitStatus> {
        if let Some(s) = self.exited {
            return Ok(s);
        }
        let s = self.command.wait().await?;
        self.exited = Some(s);
        Ok(s)
    }

    /// SIGTERM to the group; SIGKILL to the group when the command has not
    /// exited by `kill_at`, or right after it exits (its stragglers get no
    /// grace of their own); then waits until nothing of the group can run.
    /// The guard is told `kill_at` first, so the schedule holds even if
    /// this process freezes halfway.
    pub async fn stop(&mut self, kill_at: Deadline) -> Stopped {
        self.kill_at(kill_at);
        let _ = killpg(self.pgid, Signal::SIGTERM);
        let killed = if self.exited.is_some() {
            false
        } else {
            tokio::select! {
                _ = self.wait() => false,
                _ = kill_at.wait() => true,
            }
        };
        self.finish(killed).await
    }

    /// SIGKILL to the whole group (stragglers and the guard), reaps the
    /// command, and waits until no member can run.
    pub async fn finish(&mut self, killed: bool) -> Stopped {
        let _ = killpg(self.pgid, Signal::SIGKILL);
        let _ = self.wait().await;
        let _ = tokio::task::block_in_place(|| self.guard.wait());
        let settle = Stamp::now().after(KILL_SETTLE);
        let mut survivors = live_members(self.pgid.as_raw());
        while !survivors.is_empty() && !settle.has_passed() {
            tokio::time::sleep(POLL).await;
            survivors = live_members(self.pgid.as_raw());
        }
        Stopped { killed, survivors }
    }
}

impl Drop for Group {
    fn drop(&mut self) {
        // Whatever path left the group running: nothing of it outlives us.
        let _ = killpg(self.pgid, Signal::SIGKILL);
    }
}

/// Processes of process group `pgid` that can still run (not zombies),
/// read from /proc.
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
            // "pid (comm) S ppid pgrp ...": comm may hold spaces and ')'.
            let Some(rest) = stat.rfind(')').map(|i| &stat[i + 1..]) else {
                return false;
            };
            let mut fields = rest.split_whitespace();
            let state = fields.next();
            let _ppid = fields.next();
            let pgrp = fields.next().and_then(|p| p.parse::<i32>().ok());
            pgrp == Some(pgid) && !matches!(state, Some("Z") | Some("X"))
        })
        .collect()
}
