//! `tenure __guard`: the dead man's switch of a supervised command group.
//!
//! `tenure campaign` starts this process first, as the leader of a new
//! process group, and then starts the command *in that group*. The guard
//! reads kill-at deadlines (CLOCK_BOOTTIME nanoseconds, one per line) from
//! its stdin, a pipe whose only writer is `tenure campaign`. It sends
//! SIGKILL to its whole group (the command, every descendant that stayed in
//! the group, and itself) as soon as
//!
//! - the pipe closes: `tenure campaign` exited or was killed, even by
//!   SIGKILL, which no handler inside `tenure campaign` could catch; or
//! - the last deadline passes: `tenure campaign` is frozen (SIGSTOP, a
//!   starved host) or the host was suspended, and the term's lease may
//!   expire before it could stop the command itself.
//!
//! There is no window in which the command runs unguarded: the guard exists
//! before the command does. It blocks SIGTERM, SIGINT, SIGHUP and SIGQUIT,
//! so the SIGTERM that asks the command to finish does not end the guard.
//!
//! It names itself `tenure-guard` (PR_SET_NAME; tenure gives it that
//! argv[0] too), so `ps` says what it is, not `exe`. `tenure campaign`
//! waits on it: a guard that dies is a loss there, the group is stopped at
//! once.
//!
//! Just before the kill it writes `killed <CLOCK_BOOTTIME ns>` to its
//! stdout, a pipe `tenure campaign` reads once the group is dead: when a
//! frozen tenure's command was ended, for its acting record.
//!
//! Deliberately absent: the network, etcd, logging. It must stay small
//! enough to be right by reading it.

use std::io::{BufRead, Write};
use std::sync::mpsc;
use std::time::Duration;

use nix::sys::signal::{kill, SigSet, SigmaskHow, Signal};
use nix::unistd::Pid;

use crate::election::deadline::boottime;

/// The hidden subcommand `tenure campaign` starts the guard with.
pub const ARG: &str = "__guard";

/// The guard's name in `ps`: its argv[0] and its kernel name (PR_SET_NAME,
/// at most 15 bytes).
pub const NAME: &str = "tenure-guard";

/// How often the guard reads the clock while a deadline is pending.
const TICK: Duration = Duration::from_millis(20);

pub fn main() -> i32 {
    // What `ps` and /proc/PID/comm show (argv[0] is set by tenure).
    if let Ok(name) = std::ffi::CString::new(NAME) {
        let _ = nix::sys::prctl::set_name(&name);
    }
    let mut blocked = SigSet::empty();
    for s in [
        Signal::SIGTERM,
        Signal::SIGINT,
        Signal::SIGHUP,
        Signal::SIGQUIT,
    ] {
        blocked.add(s);
    }
    // Blocked, not handled: they stay pending and never end this process.
    let _ = nix::sys::signal::sigprocmask(SigmaskHow::SIG_BLOCK, Some(&blocked), None);

    let (tx, rx) = mpsc::channel::<Option<Duration>>();
    let reader = std::thread::Builder::new()
        .name("guard-stdin".into())
        .spawn(move || {
            for line in std::io::stdin().lock().lines() {
                let Ok(line) = line else { break };
                match line.trim().parse::<u64>() {
                    Ok(ns) => {
                        if tx.send(Some(Duration::from_nanos(ns))).is_err() {
                            return;
                        }
                    }
                    // Not ours to interpret: kill rather than guess.
                    Err(_) => break,
                }
            }
            let _ = tx.send(None);
        });
    if reader.is_ok() {
        watch(&rx);
    }
    // When the group is killed, on CLOCK_BOOTTIME, for tenure to read
    // afterwards (stdout is a pipe to it): the moment acting ended. A
    // closed pipe is only an error here (Rust ignores SIGPIPE); nothing
    // may keep the kill from coming.
    let _ = writeln!(std::io::stdout(), "killed {}", boottime().as_nanos());
    // Every process of this group, this one included.
    let _ = kill(Pid::from_raw(0), Signal::SIGKILL);
    1
}

fn watch(rx: &mpsc::Receiver<Option<Duration>>) {
    let mut kill_at: Option<Duration> = None;
    loop {
        let wait = match kill_at {
            Some(at) => at.saturating_sub(boottime()).min(TICK),
            None => Duration::from_secs(3600),
        };
        match rx.recv_timeout(wait) {
            Ok(Some(at)) => kill_at = Some(at),
            Ok(None) | Err(mpsc::RecvTimeoutError::Disconnected) => return,
            Err(mpsc::RecvTimeoutError::Timeout) => {}
        }
        if kill_at.is_some_and(|at| boottime() >= at) {
            return;
        }
    }
}
