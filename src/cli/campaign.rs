//! `tenure campaign NAME -- CMD`: run a program while leader.
//!
//! The program gets `TENURE_ELECTION`, `TENURE_HOLDER`, `TENURE_TOKEN` and
//! `TENURE_LEASE_ID` in its environment, none of tenure's credentials
//! (`secrets.rs`), and runs in a guarded process group (`group.rs`,
//! `guard.rs`, `exec.rs`). A guard that dies is a loss: the group is
//! stopped at once. The safety promise: when leadership is lost,
//! the whole group gets SIGTERM, and SIGKILL after `--grace` but in any
//! case [`KILL_SLACK`] before the earliest moment etcd can expire the
//! term's lease; so for a loss by expiry the command is dead before another
//! candidate can be granted the key. The guard enforces the same deadline
//! if this process freezes or dies. When the command exits by itself, its
//! group is killed, tenure resigns and exits with its status. On SIGTERM or
//! SIGINT the group is stopped the same way and tenure resigns before it
//! exits.

use std::process::ExitStatus;
use std::time::Duration;

use std::os::unix::process::ExitStatusExt;

use anyhow::Context;
use clap::Args;
use futures_util::FutureExt;
use nix::sys::signal::Signal as Sig;
use tokio::signal::unix::{signal, Signal, SignalKind};

use super::group::{Ended, Group, Stopped};
use super::stderr::say;
use super::{parse_seconds, EXIT_LOST, EXIT_REFUSED, EXIT_USAGE};
use crate::election::deadline::{Deadline, Stamp};
use crate::election::lease::default_margin;
use crate::election::{
    ActingReports, CampaignOptions, Campaigned, Client, ElectionName, Error, Leadership,
    LossReason, ShutdownSignal, Ttl,
};

/// SIGKILL is sent at least this long before the earliest moment etcd can
/// expire the term's lease: time for the kernel to end the group and for
/// tenure to be scheduled, on a loaded host.
pub const KILL_SLACK: Duration = Duration::from_millis(250);

/// How long a holder that lost its key asks etcd whether the deletion was
/// an operator's depose (which gets the grace) before killing at once.
const MARKER_READ: Duration = Duration::from_millis(100);
/// How long a loss already due (the guard's deadline passed) is waited for
/// when the command's end is seen first.
const LOSS_DUE: Duration = Duration::from_secs(1);

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

    /// Queue in etcd's own layout (`election/NAME/<lease-hex>`, as Go's
    /// concurrency.Election and `etcdctl elect` do): candidates lead in
    /// the order they queued, each waiter wakes once, when its predecessor
    /// goes. Default: the single-key layout.
    #[arg(long)]
    pub queue: bool,

    /// Give up waiting after this many seconds (exit 3).
    #[arg(long, value_name = "SECONDS", value_parser = parse_seconds, requires = "wait")]
    pub wait_timeout: Option<Duration>,

    /// Seconds between SIGTERM and SIGKILL when the command must stop. At
    /// most the safety margin (a quarter of the TTL) minus 0.25 s, which is
    /// also the default: the command must be dead before etcd can expire
    /// the lease.
    #[arg(long, value_name = "SECONDS", value_parser = parse_seconds)]
    pub grace: Option<Duration>,

    /// The command to run while leader.
    #[arg(last = true, required = true, value_name = "CMD")]
    pub command: Vec<String>,
}

/// The longest grace a TTL allows: the margin minus [`KILL_SLACK`].
pub fn max_grace(ttl: Ttl) -> Duration {
    default_margin(ttl.as_duration()).saturating_sub(KILL_SLACK)
}

/// The grace to use, or the message that says why the one asked for breaks
/// the safety promise.
fn grace(asked: Option<Duration>, ttl: Ttl) -> Result<Duration, String> {
    let max = max_grace(ttl);
    match asked {
        None => Ok(max),
        Some(g) if g <= max => Ok(g),
        Some(g) => Err(format!(
            "--grace {g:?} is too long for --ttl {}: the command must be dead {KILL_SLACK:?} \
             before etcd can expire the lease, which leaves at most {max:?} between SIGTERM and \
             SIGKILL (the safety margin {:?}, a quarter of the TTL, minus {KILL_SLACK:?}); \
             use --grace {:.2} or less, or a longer --ttl",
            ttl.secs(),
            default_margin(ttl.as_duration()),
            max.as_secs_f64()
        )),
    }
}

fn default_id() -> String {
    let host = std::fs::read_to_string("/proc/sys/kernel/hostname")
        .map(|h| h.trim().to_owned())
        .unwrap_or_else(|_| "host".to_owned());
    format!("{host}-{}", std::process::id())
}

/// SIGTERM and SIGINT, listened for from the start so that none is lost
/// while a campaign runs.
struct Shutdown {
    term: Signal,
    int: Signal,
}

impl Shutdown {
    fn new() -> std::io::Result<Self> {
        Ok(Self {
            term: signal(SignalKind::terminate())?,
            int: signal(SignalKind::interrupt())?,
        })
    }

    async fn recv(&mut self) -> ShutdownSignal {
        tokio::select! {
            _ = self.term.recv() => ShutdownSignal::Term,
            _ = self.int.recv() => ShutdownSignal::Int,
        }
    }

    /// A signal that arrived while nobody was waiting for one.
    fn pending(&mut self) -> Option<ShutdownSignal> {
        self.recv().now_or_never()
    }
}

enum Outcome {
    Exited(std::io::Result<ExitStatus>),
    Lost(LossReason),
    Signal(ShutdownSignal),
    /// The guard exited: the command has no dead man's switch any more.
    GuardDied(std::io::Result<ExitStatus>),
}

pub async fn run(client: &Client, args: CampaignArgs) -> anyhow::Result<i32> {
    let grace = match grace(args.grace, args.ttl) {
        Ok(g) => g,
        Err(message) => {
            say(message);
            return Ok(EXIT_USAGE);
        }
    };
    let id = args.id.clone().unwrap_or_else(default_id);
    let name = &args.name;
    let mut shutdown = Shutdown::new().context("installing signal handlers")?;
    let leadership = match acquire(client, &args, &id, &mut shutdown).await? {
        Ok(l) => l,
        Err(code) => return Ok(code),
    };
    if let Some(sig) = shutdown.pending() {
        resign_quietly(leadership).await;
        return Ok(sig.exit_code());
    }
    say(format_args!(
        "{id} leads {name} with token {} (lease {:x}, ttl {:?}, grace {grace:?})",
        leadership.token(),
        leadership.lease_id(),
        leadership.ttl()
    ));
    // An answer that came late may already be past its deadline: then the
    // command must not start at all.
    if let Some(why) = not_startable(&leadership) {
        say(format_args!(
            "leadership of {name} (token {}) {why}",
            leadership.token()
        ));
        resign_quietly(leadership).await;
        return Ok(EXIT_LOST);
    }
    let env = command_env(name, &id, &leadership);
    // Acting begins as the command is started (a moment early, never late).
    leadership.acting_began(Stamp::now(), Some(KILL_SLACK));
    let mut group = match Group::spawn(&args.command, &env, hard_deadline(&leadership)) {
        Ok(g) => g,
        Err(e) => {
            // Nothing started: acting ended as it began.
            leadership.acting_ended(Stamp::now());
            resign_quietly(leadership).await;
            return Err(e);
        }
    };
    tracing::info!(
        pid = group.pid(),
        pgid = group.pgid(),
        "the command runs in its own guarded process group"
    );
    leadership.publish_acting_in_background(leadership.ttl());
    match lead(&leadership, &mut group, &mut shutdown).await {
        Outcome::Lost(reason) => on_loss(reason, name, grace, group, leadership).await,
        Outcome::Exited(status) => on_exit(status, group, leadership).await,
        Outcome::Signal(sig) => on_signal(sig, grace, group, leadership).await,
        Outcome::GuardDied(status) => on_guard_died(status, name, group, leadership).await,
    }
}

/// The command exited on its own: whatever it left in its group goes too,
/// before the term ends; then the term is resigned and its status is the
/// exit code.
async fn on_exit(
    status: std::io::Result<ExitStatus>,
    mut group: Group,
    leadership: Leadership,
) -> anyhow::Result<i32> {
    leadership.acting_stopping(Stamp::now());
    let stopped = group.finish(false).await;
    acting_ended(&leadership, &stopped);
    if !stopped.survivors.is_empty() {
        say(format_args!(
            "processes {:?} of the command's group survived SIGKILL",
            stopped.survivors
        ));
    }
    let status = status.context("waiting for the command")?;
    leadership.resign().await.context("resigning")?;
    Ok(exit_code(status))
}

/// SIGTERM or SIGINT: the command is stopped within the grace (killed by
/// the term's deadline at the latest), then the term is resigned.
async fn on_signal(
    sig: ShutdownSignal,
    grace: Duration,
    mut group: Group,
    leadership: Leadership,
) -> anyhow::Result<i32> {
    let at = Stamp::now();
    leadership.acting_stopping(at);
    let stopped = group
        .stop(kill_deadline(at, grace, hard_deadline(&leadership)))
        .await;
    acting_ended(&leadership, &stopped);
    let sig_name = match sig {
        ShutdownSignal::Term => "SIGTERM",
        ShutdownSignal::Int => "SIGINT",
    };
    report_stop(format_args!("stopping on {sig_name}"), at, grace, &stopped);
    resign_quietly(leadership).await;
    Ok(sig.exit_code())
}

/// Campaigns once, or waits (`--wait`, until `--wait-timeout` or a signal);
/// `Err(code)`: the exit code when leadership was not won.
async fn acquire(
    client: &Client,
    args: &CampaignArgs,
    id: &str,
    shutdown: &mut Shutdown,
) -> anyhow::Result<Result<Leadership, i32>> {
    let name = &args.name;
    let mut opts = CampaignOptions::new(args.ttl);
    // Acting is the command's: started, and its group dead.
    opts.acting = ActingReports::ByCaller;
    if args.queue {
        opts = opts.queued();
    }
    if args.wait {
        let mut got = None;
        let stop = async {
            got = Some(shutdown.recv().await);
        };
        // On a signal or a timeout the candidate's lease is revoked (and
        // etcd has answered) before this returns.
        return match client
            .campaign_wait_until(name, id, &opts, args.wait_timeout, stop)
            .await
        {
            Ok(Some(l)) => Ok(Ok(l)),
            Ok(None) => Ok(Err(got.map(|s| s.exit_code()).unwrap_or(1))),
            Err(e @ Error::Timeout { .. }) => {
                say(&e);
                Ok(Err(EXIT_REFUSED))
            }
            Err(e) => Err(e).with_context(|| format!("campaigning for {name}")),
        };
    }
    // Not cancelled by a signal: an attempt whose outcome is unknown is
    // resolved (or its lease revoked) before this returns.
    match client
        .campaign(name, id, &opts)
        .await
        .with_context(|| format!("campaigning for {name}"))?
    {
        Campaigned::Leader(l) => Ok(Ok(l)),
        Campaigned::Held(holder) => {
            say(format_args!(
                "{name} is held by {:?} (token {}); use --wait to wait for it",
                holder.holder, holder.token
            ));
            Ok(Err(EXIT_REFUSED))
        }
    }
}

/// The latest the command's group may live: [`KILL_SLACK`] before the
/// earliest moment etcd can expire the term's lease.
fn hard_deadline(l: &Leadership) -> Deadline {
    l.expiry_earliest().before(KILL_SLACK)
}

/// Why the command must not start (the rest of a sentence), if it must not:
/// the term already lost, or too close to its lease's expiry.
fn not_startable(leadership: &Leadership) -> Option<String> {
    if let Some(reason) = leadership.is_lost() {
        return Some(format!("lost before the command started: {reason}"));
    }
    hard_deadline(leadership)
        .has_passed()
        .then(|| "is too close to its lease's expiry to start the command".to_owned())
}

/// CMD's environment: without tenure's credentials, with the term's
/// `TENURE_*` variables.
fn command_env(
    name: &ElectionName,
    id: &str,
    leadership: &Leadership,
) -> Vec<(String, Option<std::ffi::OsString>)> {
    let mut env = super::secrets::scrub(|k| std::env::var_os(k));
    env.extend(
        [
            ("TENURE_ELECTION", name.to_string()),
            ("TENURE_HOLDER", id.to_owned()),
            ("TENURE_TOKEN", leadership.token().to_string()),
            ("TENURE_LEASE_ID", leadership.lease_id().to_string()),
        ]
        .map(|(k, v)| (k.to_owned(), Some(v.into()))),
    );
    env
}

/// Leads while the command runs: until the term is lost, the command or
/// its guard ends, or a signal comes. Each confirmed renewal moves the
/// guard's deadline on.
async fn lead(leadership: &Leadership, group: &mut Group, shutdown: &mut Shutdown) -> Outcome {
    let mut validity = leadership.subscribe();
    loop {
        tokio::select! {
            biased;
            reason = leadership.lost() => return Outcome::Lost(reason),
            end = group.ended() => return match end {
                Ended::Guard(status) => Outcome::GuardDied(status),
                Ended::Command(status) => ended_or_lost(leadership, status).await,
            },
            sig = shutdown.recv() => return Outcome::Signal(sig),
            _ = validity.changed() => group.kill_at(hard_deadline(leadership)),
        }
    }
}

/// The command ended. Past the guard's deadline (tenure frozen or
/// suspended past it: the guard woke first and killed the group), the term
/// was lost before the command ended, and that is the outcome: its loss is
/// waited for briefly (it is due), else the command's status stands.
async fn ended_or_lost(leadership: &Leadership, status: std::io::Result<ExitStatus>) -> Outcome {
    if hard_deadline(leadership).has_passed() {
        if let Some(reason) = leadership.is_lost() {
            return Outcome::Lost(reason);
        }
        if let Ok(reason) = tokio::time::timeout(LOSS_DUE, leadership.lost()).await {
            return Outcome::Lost(reason);
        }
    }
    Outcome::Exited(status)
}

/// The term lost: the group stopped (with the grace when the end is one
/// tenure knows about), then said, then resigned.
async fn on_loss(
    reason: LossReason,
    name: &ElectionName,
    grace: Duration,
    mut group: Group,
    leadership: Leadership,
) -> anyhow::Result<i32> {
    let lost_at = Stamp::now();
    leadership.acting_stopping(lost_at);
    // The grace is for an end tenure knows about: its own renewal
    // deadline (the lease still lives for the margin), its key
    // unconfirmed for as long (an outage, mostly: etcd cannot have
    // handed the key on for want of an answer, and a depose missed
    // meanwhile is at most a TTL old), or an operator's
    // depose (tenure's end marker). When etcd ended the term by
    // itself, the lease is gone, or etcd refuses the holder its
    // key, another candidate may lead already: no grace.
    let graceful = match &reason {
        LossReason::RenewalDeadline { .. }
        | LossReason::HostSuspended
        | LossReason::KeyUnconfirmed { .. } => true,
        LossReason::KeyDeleted { .. } => {
            leadership.ended_by_tenure(&reason, MARKER_READ).await == Some(true)
        }
        _ => false,
    };
    let grace = if graceful { grace } else { Duration::ZERO };
    // Stop first, talk after: a blocked stderr must not delay this.
    let stopped = group
        .stop(kill_deadline(lost_at, grace, hard_deadline(&leadership)))
        .await;
    acting_ended(&leadership, &stopped);
    report_stop(
        format_args!(
            "leadership of {name} (token {}) lost: {reason}",
            leadership.token()
        ),
        lost_at,
        grace,
        &stopped,
    );
    resign_quietly(leadership).await;
    Ok(EXIT_LOST)
}

/// Acting ended: when the guard killed the group (it says when), when the
/// stop found the group dead, or, when the command had ended before tenure
/// looked and the guard did not kill it, by now at the latest.
fn acting_ended(leadership: &Leadership, stopped: &Stopped) {
    let now = Stamp::now();
    match stopped.guard_killed_at {
        // The guard's SIGKILL ended the group: then (the kernel ends it
        // at once), whether tenure was frozen or the guard was too.
        Some(boot) if boot <= now.boot => leadership.acting_ended(Stamp {
            mono: now.mono.checked_sub(now.boot - boot).unwrap_or(now.mono),
            boot,
        }),
        // Ended before tenure looked, by its own exit or unknown hands:
        // by now, certainly.
        _ if stopped.before => leadership.acting_ended_by(now.after(Duration::ZERO)),
        _ => leadership.acting_ended(now),
    }
}

/// The guard exited: nothing would stop the command if tenure died now, and
/// a guard killed from outside may mean worse: the group stopped at once.
async fn on_guard_died(
    status: std::io::Result<ExitStatus>,
    name: &ElectionName,
    mut group: Group,
    leadership: Leadership,
) -> anyhow::Result<i32> {
    let at = Stamp::now();
    leadership.acting_stopping(at);
    let stopped = group.stop(at.after(Duration::ZERO)).await;
    acting_ended(&leadership, &stopped);
    let how = match &status {
        Ok(s) => ended(s),
        Err(e) => format!("could not be waited for ({e})"),
    };
    report_stop(
        format_args!(
            "the guard of the command's group (pid {}) {how}: the command had no dead \
             man's switch left; leadership of {name} (token {}) given up",
            group.pgid(),
            leadership.token()
        ),
        at,
        Duration::ZERO,
        &stopped,
    );
    resign_quietly(leadership).await;
    Ok(EXIT_LOST)
}

/// SIGKILL `grace` after `from`, but never after `hard`.
fn kill_deadline(from: Stamp, grace: Duration, hard: Deadline) -> Deadline {
    from.after(grace).min(hard)
}

/// Says what was done and what the kernel reports: how the command ended
/// (its wait status, not what tenure meant to do: the guard may have
/// SIGKILLed it first, or it may have exited on SIGTERM), whether anything
/// of its group needed SIGKILL, and when it was all dead.
fn report_stop(what: std::fmt::Arguments<'_>, from: Stamp, grace: Duration, stopped: &Stopped) {
    let took = from.mono.elapsed();
    let sigkill = |s: &ExitStatus| s.signal() == Some(Sig::SIGKILL as i32);
    let command = match &stopped.status {
        None => "the command could not be reaped".to_owned(),
        Some(s) if stopped.before && sigkill(s) => "before tenure stopped it, the command was \
            killed by SIGKILL (by its guard at the lease's deadline, or by another process)"
            .to_owned(),
        Some(s) if stopped.before => format!("before tenure stopped it, the command {}", ended(s)),
        Some(s) if sigkill(s) && !stopped.at_deadline => "the command was killed by SIGKILL \
            before the grace ran out (not by tenure: by another process)"
            .to_owned(),
        Some(s) if sigkill(s) && grace.is_zero() => {
            "the command was killed by SIGKILL at once (no grace)".to_owned()
        }
        Some(s) if sigkill(s) => format!(
            "the command outlived SIGTERM and was killed by SIGKILL when the grace ({grace:?}) \
             ran out"
        ),
        Some(s) => format!("the command {}", ended(s)),
    };
    let stragglers = match stopped.stragglers {
        0 => String::new(),
        1 => "; SIGKILL ended 1 other process of its group".to_owned(),
        n => format!("; SIGKILL ended {n} other processes of its group"),
    };
    say(format_args!(
        "{what}; {command}{stragglers}; the group was dead {took:?} after that"
    ));
    if !stopped.survivors.is_empty() {
        say(format_args!(
            "processes {:?} of the command's group survived SIGKILL (stuck in the kernel?)",
            stopped.survivors
        ));
    }
}

/// "exited with status N", "was killed by SIGTERM", as a wait status says.
fn ended(status: &ExitStatus) -> String {
    match (status.code(), status.signal()) {
        (Some(code), _) => format!("exited with status {code}"),
        (_, Some(sig)) => match Sig::try_from(sig) {
            Ok(s) => format!("was killed by {}", s.as_str()),
            Err(_) => format!("was killed by signal {sig}"),
        },
        _ => format!("ended ({status})"),
    }
}

async fn resign_quietly(leadership: Leadership) {
    let ttl = leadership.ttl();
    match leadership.resign().await {
        Ok(()) => {}
        // A request that got no answer may have been applied.
        Err(e) if e.is_unavailable() => say(format_args!(
            "resigning got no answer from etcd ({e}): the term may have ended; if not, its \
             lease expires within its TTL ({ttl:?})"
        )),
        Err(e) => say(format_args!(
            "etcd refused the resignation ({e}); the lease expires within its TTL ({ttl:?})"
        )),
    }
}

fn exit_code(status: ExitStatus) -> i32 {
    status
        .code()
        .or_else(|| status.signal().map(|s| 128 + s))
        .unwrap_or(1)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ttl(s: u64) -> Ttl {
        Ttl::from_secs(s).expect("ttl")
    }

    #[test]
    fn grace_defaults_to_the_margin_minus_the_slack_and_longer_is_refused() {
        assert_eq!(grace(None, ttl(10)), Ok(Duration::from_millis(2250)));
        assert_eq!(grace(None, ttl(4)), Ok(Duration::from_millis(750)));
        assert_eq!(grace(None, ttl(2)), Ok(Duration::from_millis(250)));
        assert_eq!(
            grace(Some(Duration::from_millis(500)), ttl(4)),
            Ok(Duration::from_millis(500))
        );
        let e = grace(Some(Duration::from_secs(10)), ttl(4)).expect_err("10 s at TTL 4");
        assert!(e.contains("--grace 10s is too long for --ttl 4"), "{e}");
        assert!(e.contains("use --grace 0.75 or less"), "{e}");
    }
}
