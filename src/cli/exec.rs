//! `tenure __exec PPID PROGRAM [ARGS...]`: the step between `tenure
//! campaign` and the command it supervises. It arms the command's switch
//! of last resort, then becomes the command (execvp: same process, same
//! pid, same process group):
//!
//! - PR_SET_PDEATHSIG(SIGKILL): the kernel SIGKILLs the command when the
//!   *thread* that forked it exits. tenure forks it from a thread that
//!   lasts as long as the command's group (`group.rs`), so this fires when
//!   tenure dies, however (kill -9 included), and never because one of its
//!   runtime threads ended. It survives execve, except into a set-user-ID
//!   or file-capability program (the kernel clears it there). It is the
//!   second line: the guard kills the whole group, this only the command
//!   (its own children do not inherit it).
//! - tenure may have died before the switch was armed: then this process's
//!   parent is no longer PPID, and the command is not started.
//! - SIGPIPE back to its default: Rust's runtime ignores it, and an
//!   ignored signal stays ignored across execve, while a caught one is
//!   reset. So it is caught here, and the command starts as if tenure had
//!   spawned it directly.
//!
//! Why a step of its own: the library forbids `unsafe`, and anything done
//! in a child between fork and exec (`pre_exec`) is unsafe. Here it runs as
//! a process of its own, in safe code, before the exec.

use std::ffi::CString;
use std::os::unix::ffi::OsStringExt;

use nix::errno::Errno;
use nix::sys::signal::Signal;

/// The hidden subcommand `tenure campaign` starts the command through.
pub const ARG: &str = "__exec";

pub fn main() -> i32 {
    let mut args = std::env::args_os().skip(2);
    let parent = args
        .next()
        .and_then(|p| p.to_str().and_then(|p| p.parse::<i32>().ok()));
    let argv: Result<Vec<CString>, _> = args.map(|a| CString::new(a.into_vec())).collect();
    let (Some(parent), Ok(argv)) = (parent, argv) else {
        eprintln!("tenure: usage: tenure {ARG} PPID PROGRAM [ARGS...]");
        return 2;
    };
    let Some(program) = argv.first() else {
        eprintln!("tenure: usage: tenure {ARG} PPID PROGRAM [ARGS...]");
        return 2;
    };
    if let Err(e) = nix::sys::prctl::set_pdeathsig(Signal::SIGKILL) {
        eprintln!("tenure: cannot arm the command's parent-death signal: {e}");
        return 126;
    }
    if nix::unistd::getppid().as_raw() != parent {
        // tenure died before the switch was armed: nobody supervises this.
        return 1;
    }
    restore_sigpipe();
    let e = match nix::unistd::execvp(program, &argv) {
        Err(e) => e,
        Ok(never) => match never {},
    };
    eprintln!("tenure: cannot run {program:?}: {e}");
    if e == Errno::ENOENT {
        127
    } else {
        126
    }
}

/// Catches SIGPIPE (tokio's handler, installed for good), so that execve
/// resets it to its default instead of keeping it ignored.
fn restore_sigpipe() {
    let Ok(rt) = tokio::runtime::Builder::new_current_thread()
        .enable_io()
        .build()
    else {
        return;
    };
    let _ = rt.block_on(async {
        tokio::signal::unix::signal(tokio::signal::unix::SignalKind::pipe()).map(drop)
    });
}
