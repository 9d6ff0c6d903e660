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
//!
//! The guard shows in `ps` as `tenure-guard` (its argv[0] and its kernel
//! name). tenure waits on it like on the command: a guard that dies leaves
//! the command without its switch, which `tenure campaign` treats as a loss.
//! The command is started through `tenure __exec` (`exec.rs`), which arms
//! PR_SET_PDEATHSIG, from a thread of tenure's that lasts as long as the
//! group (the signal follows the forking thread, not the process). Its
//! environment is tenure's without the credentials (`secrets.rs`).

use std::ffi::{OsStr, OsString};
use std::io::Write;
use std::os::fd::AsFd;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
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
    guard: Child,
    to_guard: std::fs::File,
    /// The guard's stdout: `killed <ns>` when it killed the group.
    from_guard: std::fs::File,
    exited: Option<ExitStatus>,
    guard_exited: Option<ExitStatus>,
    /// Keeps the thread that forked the command alive (see `spawn_kept`);
    /// dropped with the group.
    _keeper: std::sync::mpsc::Sender<()>,
}

/// What [`Group::ended`] saw end, with its wait status.
pub enum Ended {
    Guard(std::io::Result<ExitStatus>),
    Command(std::io::Result<ExitStatus>),
}

/// How a stop went, as the kernel reported it: for the message and tests.
pub struct Stopped {
    /// How the command ended (`None`: it could not be reaped).
    pub status: Option<ExitStatus>,
    /// The command had ended before the stop began (before SIGTERM).
    pub before: bool,
    /// The command's end was seen at or after the kill deadline: the
    /// SIGKILL of the schedule (tenure's, or its guard's) ended it.
    pub at_deadline: bool,
    /// Other processes of the group still running when the group got its
    /// final SIGKILL (a grandchild that outlived the command).
    pub stragglers: usize,
    /// Group members still alive after the SIGKILL settled (normally none).
    pub survivors: Vec<i32>,
    /// When the guard killed the group (CLOCK_BOOTTIME), if it did.
    pub guard_killed_at: Option<Duration>,
}

impl Group {
    /// Starts the guard, tells it `kill_at`, then starts `argv` in the
    /// guard's process group: the command never runs without a deadline.
    /// `env` changes the environment both inherit (`None`: removed).
    pub fn spawn(
        argv: &[String],
        env: &[(String, Option<OsString>)],
        kill_at: Deadline,
    ) -> anyhow::Result<Self> {
        let program = argv.first().context("no command to run")?;
        // Found before anything starts, so a typo is an error of its own
        // (the exec happens in `tenure __exec`, which could only exit 127).
        find_program(OsStr::new(program)).with_context(|| format!("starting {program:?}"))?;
        // /proc/self/exe, not the path: a package upgrade may have replaced
        // the file since tenure started (hours ago, for a waiting
        // candidate); the running binary's inode is still there.
        let exe = PathBuf::from("/proc/self/exe");
        // Close-on-exec: the command must not hold the write end, or the
        // pipe would not close when tenure dies.
        let (from_tenure, to_guard) = nix::unistd::pipe2(nix::fcntl::OFlag::O_CLOEXEC)
            .context("creating the guard's pipe")?;
        // A frozen guard must not block tenure: writes that would block
        // are dropped (the guard then acts on the deadline it has).
        let to_guard = nonblocking(to_guard)?;
        // The guard's word on when it killed the group (its stdout), read
        // once it is dead.
        let (from_guard, guard_out) = nix::unistd::pipe2(nix::fcntl::OFlag::O_CLOEXEC)
            .context("creating the guard's pipe")?;
        let from_guard = nonblocking(from_guard)?;
        let mut guard = Command::new(&exe);
        guard
            .arg0(super::guard::NAME)
            .arg(super::guard::ARG)
            .stdin(Stdio::from(from_tenure))
            .stdout(Stdio::from(guard_out))
            .stderr(Stdio::null())
            .process_group(0);
        with_env(&mut guard, env);
        let mut guard = guard
            .spawn()
            .with_context(|| format!("starting the guard process ({})", exe.display()))?;
        let guard_pid = guard
            .id()
            .and_then(|id| i32::try_from(id).ok())
            .context("the guard's pid")?;
        let mut to_guard = to_guard;
        if let Err(e) = to_guard.write_all(format!("{}\n", kill_at.boot.as_nanos()).as_bytes()) {
            let _ = guard.start_kill();
            return Err(e).context("telling the guard its first deadline");
        }
        let mut cmd = Command::new(&exe);
        cmd.arg(super::exec::ARG)
            .arg(std::process::id().to_string())
            .args(argv)
            .process_group(guard_pid);
        with_env(&mut cmd, env);
        let (command, keeper) = match spawn_kept(cmd) {
            Ok(c) => c,
            Err(e) => {
                // Dropping the pipe makes the guard kill its (empty) group.
                drop(to_guard);
                return Err(e).with_context(|| format!("starting {program:?}"));
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
            from_guard,
            exited: None,
            guard_exited: None,
            _keeper: keeper,
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
        if self.guard_exited.is_some() {
            // Known: `tenure campaign` stops the group itself.
            return;
        }
        let line = format!("{}\n", at.boot.as_nanos());
        if let Err(e) = self.to_guard.write_all(line.as_bytes()) {
            // Full: the guard acts on the deadline it has. Closed: the guard
            // is gone, which `ended` reports (a loss: the group is stopped).
            if !matches!(
                e.kind(),
                std::io::ErrorKind::WouldBlock | std::io::ErrorKind::BrokenPipe
            ) {
                super::stderr::say(format_args!(
                    "telling the guard of the command's group its deadline failed ({e}); it \
                     acts on the one it has"
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

    /// Resolves when the command or the guard has exited. The guard first
    /// when both have (it kills the group with itself at its deadline):
    /// without it nothing but tenure itself would stop the command.
    pub async fn ended(&mut self) -> Ended {
        if let Some(s) = self.guard_exited {
            return Ended::Guard(Ok(s));
        }
        if let Some(s) = self.exited {
            return Ended::Command(Ok(s));
        }
        tokio::select! {
            biased;
            s = self.guard.wait() => {
                if let Ok(s) = &s {
                    self.guard_exited = Some(*s);
                }
                Ended::Guard(s)
            }
            s = self.command.wait() => {
                if let Ok(s) = &s {
                    self.exited = Some(*s);
                }
                Ended::Command(s)
            }
        }
    }

    /// Resolves when the guard has exited.
    async fn guard_exited(&mut self) -> std::io::Result<ExitStatus> {
        if let Some(s) = self.guard_exited {
            return Ok(s);
        }
        let s = self.guard.wait().await?;
        self.guard_exited = Some(s);
        Ok(s)
    }

    /// SIGTERM to the group; SIGKILL to the group when the command has not
    /// exited by `kill_at`, or right after it exits (its stragglers get no
    /// grace of their own); then waits until nothing of the group can run.
    /// The guard is told `kill_at` first, so the schedule holds even if
    /// this process freezes halfway.
    pub async fn stop(&mut self, kill_at: Deadline) -> Stopped {
        if self.exited.is_none() {
            if let Ok(Some(s)) = self.command.try_wait() {
                self.exited = Some(s);
            }
        }
        let before = self.exited.is_some();
        self.kill_at(kill_at);
        let _ = killpg(self.pgid, Signal::SIGTERM);
        // Whoever sent the SIGKILL (tenure, or the guard told the same
        // deadline): the command's end was seen at or after the deadline.
        let at_deadline = if before {
            false
        } else {
            tokio::select! {
                biased;
                _ = self.wait() => kill_at.has_passed(),
                _ = kill_at.wait() => true,
            }
        };
        let mut stopped = self.finish(at_deadline).await;
        stopped.before = before;
        stopped
    }

    /// What the guard wrote before it killed the group: `killed <ns>`.
    fn guard_killed_at(&mut self) -> Option<Duration> {
        let mut said = String::new();
        let _ = std::io::Read::read_to_string(&mut self.from_guard, &mut said);
        let ns = said.lines().find_map(|l| l.strip_prefix("killed "))?;
        ns.trim().parse::<u64>().ok().map(Duration::from_nanos)
    }

    /// SIGKILL to the whole group (stragglers and the guard), reaps the
    /// command, and waits until no member can run.
    pub async fn finish(&mut self, at_deadline: bool) -> Stopped {
        let (guard, command) = (self.pgid.as_raw(), i32::try_from(self.pid).unwrap_or(0));
        let stragglers = live_members(self.pgid.as_raw())
            .into_iter()
            .filter(|p| *p != guard && *p != command)
            .count();
        let _ = killpg(self.pgid, Signal::SIGKILL);
        let status = self.wait().await.ok();
        let _ = self.guard_exited().await;
        let settle = Stamp::now().after(KILL_SETTLE);
        let mut survivors = live_members(self.pgid.as_raw());
        while !survivors.is_empty() && !settle.has_passed() {
            tokio::time::sleep(POLL).await;
            survivors = live_members(self.pgid.as_raw());
        }
        Stopped {
            status,
            before: false,
            at_deadline,
            stragglers,
            survivors,
            guard_killed_at: self.guard_killed_at(),
        }
    }
}

/// One end of a pipe to the guard, as a file that never blocks.
fn nonblocking(fd: std::os::fd::OwnedFd) -> anyhow::Result<std::fs::File> {
    let file = std::fs::File::from(fd);
    nix::fcntl::fcntl(
        file.as_fd(),
        nix::fcntl::FcntlArg::F_SETFL(nix::fcntl::OFlag::O_NONBLOCK),
    )
    .context("making the guard's pipe non-blocking")?;
    Ok(file)
}

fn with_env(cmd: &mut Command, env: &[(String, Option<OsString>)]) {
    for (k, v) in env {
        match v {
            Some(v) => cmd.env(k, v),
            None => cmd.env_remove(k),
        };
    }
}

/// Forks `cmd` from a thread of its own, which lasts until the returned
/// sender is dropped (with the group). PR_SET_PDEATHSIG, armed in the
/// command by `tenure __exec`, fires when the thread that forked it exits;
/// tokio's threads come and go (a blocking-pool thread ends after 10 s
/// idle, `block_in_place` hands a worker's place to another), and none of
/// that may kill the command.
fn spawn_kept(mut cmd: Command) -> std::io::Result<(Child, std::sync::mpsc::Sender<()>)> {
    let runtime = tokio::runtime::Handle::try_current().map_err(std::io::Error::other)?;
    let (child_tx, child_rx) = std::sync::mpsc::channel();
    let (keep_tx, keep_rx) = std::sync::mpsc::channel::<()>();
    std::thread::Builder::new()
        .name("tenure-command".into())
        .spawn(move || {
            let _runtime = runtime.enter();
            let spawned = cmd.spawn();
            let started = spawned.is_ok();
            if child_tx.send(spawned).is_err() || !started {
                return;
            }
            // Nothing is ever sent: this returns when the group is dropped.
            let _ = keep_rx.recv();
        })?;
    let child = child_rx.recv().map_err(|_| {
        std::io::Error::other("the thread starting the command ended before it could")
    })??;
    Ok((child, keep_tx))
}

/// Where `program` is, as execvp(3) will look for it: a path as given, a
/// bare name in `$PATH`; it must be an executable file.
fn find_program(program: &OsStr) -> std::io::Result<PathBuf> {
    let executable = |p: &Path| {
        std::fs::metadata(p).is_ok_and(|m| m.is_file() && m.permissions().mode() & 0o111 != 0)
    };
    // As the exec would say it: "No such file or directory (os error 2)".
    let not_found = || std::io::Error::from(nix::errno::Errno::ENOENT);
    if program.as_encoded_bytes().contains(&b'/') {
        let p = PathBuf::from(program);
        return if executable(&p) {
            Ok(p)
        } else if p.exists() {
            Err(std::io::Error::from(nix::errno::Errno::EACCES))
        } else {
            Err(not_found())
        };
    }
    let path = std::env::var_os("PATH").unwrap_or_else(|| "/usr/local/bin:/usr/bin:/bin".into());
    std::env::split_paths(&path)
        .map(|dir| dir.join(program))
        .find(|p| executable(p))
        .ok_or_else(not_found)
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
