//! `tenure campaign NAME -- CMD`: run a program while leader.
//!
//! The program gets `TENURE_ELECTION`, `TENURE_HOLDER`, `TENURE_TOKEN` and
//! `TENURE_LEASE_ID` in its environment. When leadership is lost it gets
//! SIGTERM, then SIGKILL after the grace period, and tenure exits 4. When it
//! exits by itself, tenure resigns and exits with its status. On SIGTERM or
//! SIGINT tenure stops it, resigns, and exits 128+signal.

use std::process::ExitStatus;
use std::time::Duration;

use anyhow::Context;
use clap::Args;
use nix::sys::signal::{kill, Signal};
use nix::unistd::Pid;
use tokio::process::{Child, Command};

use super::{parse_seconds, EXIT_LOST, EXIT_REFUSED};
use crate::election::{
    shutdown_signal, CampaignOptions, Campaigned, Client, ElectionName, Error, Leadership, Ttl,
};

#[derive(Debug, Args)]
pub struct CampaignArgs {
    pub name: ElectionName,

    /// This candidate's identity, stored as the leader key's value.
    /// Default: HOSTNAME-PID.
    #[arg(long, env = "TENURE_ID")]
    pub id: Option<String>,

    /// Lease TTL in whole seconds (etcd's minimum is 2).
    #[arg(long, env = "TENURE_TTL", default_value = "10")]
    pub ttl: Ttl,

    /// Wait for leadership instead of giving up when someone else holds it.
    #[arg(long)]
    pub wait: bool,

    /// Give up waiting after this many seconds (exit 3).
    #[arg(long, value_name = "SECONDS", value_parser = parse_seconds, requires = "wait")]
    pub wait_timeout: Option<Duration>,

    /// Seconds between SIGTERM and SIGKILL when the command must stop.
    #[arg(long, value_name = "SECONDS", default_value = "10", value_parser = parse_seconds)]
    pub grace: Duration,

    /// The command to run while leader.
    #[arg(last = true, required = true, value_name = "CMD")]
    pub command: Vec<String>,
}

fn default_id() -> String {
    let host = std::fs::read_to_string("/proc/sys/kernel/hostname")
        .map(|h| h.trim().to_owned())
        .unwrap_or_else(|_| "host".to_owned());
    format!("{host}-{}", std::process::id())
}

enum Outcome {
    Exited(std::io::Result<ExitStatus>),
    Lost(crate::election::LossReason),
    Signal(crate::election::ShutdownSignal),
}

pub async fn run(client: &Client, args: CampaignArgs) -> anyhow::Result<i32> {
    let id = args.id.clone().unwrap_or_else(default_id);
    let name = &args.name;
    let opts = CampaignOptions::new(args.ttl);
    let signal = shutdown_signal();
    tokio::pin!(signal);

    let acquire = async {
        if args.wait {
            client
                .campaign_wait(name, &id, &opts, args.wait_timeout)
                .await
                .map(Some)
        } else {
            match client.campaign(name, &id, &opts).await? {
                Campaigned::Leader(l) => Ok(Some(l)),
                Campaigned::Held(holder) => {
                    eprintln!(
                        "tenure: {name} is held by {:?} (token {}); use --wait to wait for it",
                        holder.holder, holder.token
                    );
                    Ok(None)
                }
            }
        }
    };
    let leadership = tokio::select! {
        r = acquire => match r {
            Ok(Some(l)) => l,
            Ok(None) => return Ok(EXIT_REFUSED),
            Err(e @ Error::Timeout { .. }) => {
                eprintln!("tenure: {e}");
                return Ok(EXIT_REFUSED);
            }
            Err(e) => return Err(e).with_context(|| format!("campaigning for {name}")),
        },
        // Dropping the campaign revokes the candidate's lease.
        sig = &mut signal => return Ok(sig.map(|s| s.exit_code()).unwrap_or(1)),
    };
    eprintln!(
        "tenure: {id} leads {name} with token {} (lease {:x}, ttl {:?})",
        leadership.token(),
        leadership.lease_id(),
        leadership.ttl()
    );

    let mut child = match Command::new(&args.command[0])
        .args(&args.command[1..])
        .env("TENURE_ELECTION", name.as_str())
        .env("TENURE_HOLDER", &id)
        .env("TENURE_TOKEN", leadership.token().to_string())
        .env("TENURE_LEASE_ID", leadership.lease_id().to_string())
        .kill_on_drop(true)
        .spawn()
    {
        Ok(c) => c,
        Err(e) => {
            let _ = leadership.resign().await;
            return Err(e).with_context(|| format!("starting {:?}", args.command[0]));
        }
    };

    let outcome = tokio::select! {
        biased;
        reason = leadership.lost() => Outcome::Lost(reason),
        status = child.wait() => Outcome::Exited(status),
        sig = &mut signal => match sig {
            Ok(s) => Outcome::Signal(s),
            Err(e) => return Err(e).context("installing signal handlers"),
        },
    };
    match outcome {
        Outcome::Lost(reason) => {
            eprintln!(
                "tenure: leadership of {name} (token {}) lost: {reason}; stopping the command",
                leadership.token()
            );
            stop(&mut child, args.grace).await;
            let _ = leadership.resign().await;
            Ok(EXIT_LOST)
        }
        Outcome::Exited(status) => {
            let status = status.context("waiting for the command")?;
            leadership.resign().await.context("resigning")?;
            Ok(exit_code(status))
        }
        Outcome::Signal(sig) => {
            stop(&mut child, args.grace).await;
            resign_quietly(leadership).await;
            Ok(sig.exit_code())
        }
    }
}

async fn resign_quietly(leadership: Leadership) {
    if let Err(e) = leadership.resign().await {
        eprintln!("tenure: resigning failed ({e}); the lease will expire after its TTL");
    }
}

fn exit_code(status: ExitStatus) -> i32 {
    use std::os::unix::process::ExitStatusExt;
    status
        .code()
        .or_else(|| status.signal().map(|s| 128 + s))
        .unwrap_or(1)
}

/// SIGTERM, then SIGKILL after `grace`.
async fn stop(child: &mut Child, grace: Duration) {
    let Some(pid) = child.id() else { return };
    if let Ok(pid) = i32::try_from(pid) {
        let _ = kill(Pid::from_raw(pid), Signal::SIGTERM);
    }
    if tokio::time::timeout(grace, child.wait()).await.is_err() {
        eprintln!("tenure: the command did not stop within {grace:?}; sending SIGKILL");
        let _ = child.kill().await;
    }
}
