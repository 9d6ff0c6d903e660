//! Fault suite, beliefs (issue 10): what each holder *believed* against
//! what etcd did, on one clock.
//!
//! A holder is a real `tenure campaign` whose command ignores SIGTERM and
//! has a grandchild, both logging every act (support/holder.rs). A holder
//! believes it leads from its term's creation until its command's process
//! group is confirmed dead: the test itself polls `/proc` for any member of
//! the group that can still run (a stopped process counts as alive: it acts
//! the moment it is resumed). A term starts, for the checker, the moment
//! the test's own watch on the leader key sees etcd create it.
//!
//! Per takeover the checker reports the overlap: how long the old holder's
//! belief went on after the new term started (0 when it ended first), and
//! how many acts the old command made after the new term started. The
//! faults: expiry (tenure frozen alone: its guard must act), a partition
//! between holder and etcd, depose, SIGSTOP of the whole holder, and a
//! frozen etcd leader. For every expiry-based takeover the overlap must be
//! 0; for depose it is bounded by detection + grace; for a whole holder
//! frozen past its TTL it is, by construction, the time it stays frozen
//! (the fence refuses what it writes on resuming: fault suite s02).
//!
//! Figures are `[figure]` lines (`--nocapture`); RELIABILITY.md has them.
//! Full runs: `cargo test --test belief -- --ignored --nocapture`.
// Tests, benches and their harness assert with unwrap/expect, spawn bare tasks
// and read the wall clock: the lints of Cargo.toml and clippy.toml hold src/.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::disallowed_methods)]

mod support;

use std::time::Duration;

use nix::sys::signal::{kill, killpg, Signal};
use nix::unistd::Pid;
use support::holder::{dead_at, ms, spawn, Holder, KeyLog};
use support::proxy::Proxy;
use support::{Etcd, EtcdCluster};
use tenure::election::{Client, ElectionName};

/// TTL of every holder: margin 0.75 s, grace 0.5 s.
const TTL: &str = "3";
const WAIT: Duration = Duration::from_secs(30);

/// One takeover as the checker saw it.
struct Takeover {
    /// How long the old holder's belief outlasted the new term's start
    /// (ns, 0 when it ended first).
    overlap: i128,
    /// The old term's end of belief relative to the new term's start (ns;
    /// negative: it ended that long before).
    margin: i128,
    /// Acts of the old command after the new term started.
    acts_after: usize,
}

fn report(scenario: &str, takeovers: &[Takeover]) {
    let max = takeovers.iter().map(|t| t.overlap).max().unwrap_or(0);
    let lead = takeovers.iter().map(|t| t.margin).max().unwrap_or(0);
    let acts: usize = takeovers.iter().map(|t| t.acts_after).sum();
    println!(
        "[figure] beliefs, {scenario}: {} takeovers; overlap max {:.0} ms (per takeover: {}); \
         old belief ended at the latest {:.0} ms {} the new term; old acts after the new term: {acts}",
        takeovers.len(),
        ms(max),
        takeovers
            .iter()
            .map(|t| format!("{:.0}", ms(t.overlap)))
            .collect::<Vec<_>>()
            .join(", "),
        ms(lead.abs()),
        if lead <= 0 { "before" } else { "after" },
    );
}

/// Watches the old holder's group from the moment of the fault on, so the
/// moment it died is known even if it died before anyone asked.
fn watch_death(old: &Holder) -> tokio::task::JoinHandle<i128> {
    tokio::spawn(dead_at(old.pgid, WAIT))
}

/// The old holder's belief against the new term's start.
async fn judge(old: &Holder, death: tokio::task::JoinHandle<i128>, new_term_at: i128) -> Takeover {
    let end = death.await.expect("death watch");
    let acts_after = std::fs::read_to_string(&old.acts)
        .unwrap_or_default()
        .lines()
        .filter_map(|l| l.trim().parse::<i128>().ok())
        .filter(|&t| t > new_term_at)
        .count();
    Takeover {
        overlap: (end - new_term_at).max(0),
        margin: end - new_term_at,
        acts_after,
    }
}

/// A waiting candidate, started before the fault.
async fn candidate(endpoint: &str, election: &str, dir: &std::path::Path) -> Holder {
    Holder::attach(
        spawn(endpoint, election, dir, &["--wait", "--ttl", TTL]),
        dir,
    )
}

/// The new holder took over: it announces it, and its command runs.
async fn took_over(new: &mut Holder) {
    new.token = new.leads(WAIT).await;
    new.find_group().await;
}

fn tempdir() -> tempfile::TempDir {
    tempfile::tempdir().expect("tempdir")
}

async fn tenure_client(endpoints: &[String]) -> Client {
    Client::connect(endpoints, "").await.expect("connect")
}

// ---------------------------------------------------------------------------

async fn expiry_tenure_frozen(rounds: usize) -> Vec<Takeover> {
    let etcd = Etcd::start().await;
    let ep = etcd.endpoint();
    let election = "beliefs/expiry";
    let mut dirs = vec![tempdir()];
    let mut old = Holder::start(&ep, election, dirs[0].path(), &["--ttl", TTL]).await;
    let mut out = Vec::new();
    for _ in 0..rounds {
        dirs.push(tempdir());
        let mut new = candidate(&ep, election, dirs[dirs.len() - 1].path()).await;
        let log = KeyLog::start(etcd.client().await, &format!("election/{election}")).await;
        // tenure freezes; its command runs on; only the guard can stop it.
        let death = watch_death(&old);
        kill(old.tenure_pid(), Signal::SIGSTOP).expect("SIGSTOP");
        let start = log.created_after(old.token, WAIT).await;
        took_over(&mut new).await;
        out.push(judge(&old, death, start.at).await);
        kill(old.tenure_pid(), Signal::SIGCONT).expect("SIGCONT");
        assert_eq!(old.exit_code(WAIT).await, Some(4));
        old = new;
    }
    out
}

async fn partition(rounds: usize) -> Vec<Takeover> {
    let etcd = Etcd::start().await;
    let ep = etcd.endpoint();
    let target = etcd.client_addr();
    let election = "beliefs/partition";
    let mut dirs = vec![tempdir()];
    let mut proxy = Proxy::start(target).await;
    let mut old = Holder::start(&proxy.endpoint(), election, dirs[0].path(), &["--ttl", TTL]).await;
    let mut out = Vec::new();
    for _ in 0..rounds {
        dirs.push(tempdir());
        // Each holder reaches etcd through a proxy of its own.
        let next_proxy = Proxy::start(target).await;
        let mut new = candidate(
            &next_proxy.endpoint(),
            election,
            dirs[dirs.len() - 1].path(),
        )
        .await;
        let log = KeyLog::start(etcd.client().await, &format!("election/{election}")).await;
        let death = watch_death(&old);
        proxy.partition();
        let start = log.created_after(old.token, WAIT).await;
        took_over(&mut new).await;
        out.push(judge(&old, death, start.at).await);
        assert_eq!(old.exit_code(WAIT).await, Some(4));
        old = new;
        proxy = next_proxy;
    }
    drop(ep);
    out
}

async fn depose(rounds: usize) -> Vec<Takeover> {
    let etcd = Etcd::start().await;
    let ep = etcd.endpoint();
    let c = tenure_client(std::slice::from_ref(&ep)).await;
    let election = "beliefs/depose";
    let n = ElectionName::new(election).expect("name");
    let mut dirs = vec![tempdir()];
    let mut old = Holder::start(&ep, election, dirs[0].path(), &["--ttl", TTL]).await;
    let mut out = Vec::new();
    for _ in 0..rounds {
        dirs.push(tempdir());
        let mut new = candidate(&ep, election, dirs[dirs.len() - 1].path()).await;
        let log = KeyLog::start(etcd.client().await, &format!("election/{election}")).await;
        let death = watch_death(&old);
        c.depose(&n).await.expect("depose").expect("deposed");
        let start = log.created_after(old.token, WAIT).await;
        took_over(&mut new).await;
        out.push(judge(&old, death, start.at).await);
        assert_eq!(old.exit_code(WAIT).await, Some(4));
        old = new;
    }
    out
}

async fn whole_holder_sigstop(rounds: usize) -> Vec<Takeover> {
    let etcd = Etcd::start().await;
    let ep = etcd.endpoint();
    let election = "beliefs/sigstop";
    let mut dirs = vec![tempdir()];
    let mut old = Holder::start(&ep, election, dirs[0].path(), &["--ttl", TTL]).await;
    let mut out = Vec::new();
    for _ in 0..rounds {
        dirs.push(tempdir());
        let mut new = candidate(&ep, election, dirs[dirs.len() - 1].path()).await;
        let log = KeyLog::start(etcd.client().await, &format!("election/{election}")).await;
        let death = watch_death(&old);
        killpg(Pid::from_raw(old.pgid), Signal::SIGSTOP).expect("SIGSTOP group");
        kill(old.tenure_pid(), Signal::SIGSTOP).expect("SIGSTOP tenure");
        let start = log.created_after(old.token, WAIT).await;
        took_over(&mut new).await;
        tokio::time::sleep(Duration::from_millis(300)).await;
        kill(old.tenure_pid(), Signal::SIGCONT).expect("SIGCONT tenure");
        killpg(Pid::from_raw(old.pgid), Signal::SIGCONT).expect("SIGCONT group");
        let resumed = support::holder::now_ns();
        let t = judge(&old, death, start.at).await;
        // It believes for as long as it is frozen past the new term's start,
        // and no longer than 500 ms after it wakes.
        assert!(
            t.overlap - (resumed - start.at) < 800_000_000,
            "dead {:.0} ms after resuming",
            ms(t.overlap - (resumed - start.at))
        );
        out.push(t);
        assert_eq!(old.exit_code(WAIT).await, Some(4));
        old = new;
    }
    out
}

async fn frozen_etcd_leader(rounds: usize) -> (Vec<Takeover>, usize) {
    let cluster = EtcdCluster::start().await;
    let eps = cluster.endpoints().join(",");
    let election = "beliefs/etcd-leader";
    let mut dirs = vec![tempdir()];
    let mut old = Holder::start(&eps, election, dirs[0].path(), &["--ttl", TTL]).await;
    let (mut out, mut kept) = (Vec::new(), 0);
    for _ in 0..rounds {
        dirs.push(tempdir());
        let mut new = candidate(&eps, election, dirs[dirs.len() - 1].path()).await;
        let leader = cluster.leader_index().await;
        let others: Vec<usize> = (0..cluster.len()).filter(|&i| i != leader).collect();
        let log = KeyLog::start(
            tenure_client(&[cluster.endpoint(others[0])]).await.etcd(),
            &format!("election/{election}"),
        )
        .await;
        let death = watch_death(&old);
        cluster.stop(leader);
        // Frozen for twice the TTL: long enough for the lease to expire if
        // the holder cannot renew through the other members.
        tokio::time::sleep(Duration::from_secs(6)).await;
        cluster.cont(leader);
        let took = tokio::time::timeout(
            Duration::from_secs(15),
            log.created_after(old.token, Duration::from_secs(60)),
        )
        .await;
        match took {
            Ok(start) => {
                new.token = new.leads(WAIT).await;
                // The new term can end again at once (its own lease was
                // kept alive through the frozen member): the old term is
                // still judged, and a fresh holder starts the next round.
                let new_runs = new.try_find_group().await;
                let t = judge(&old, death, start.at).await;
                assert_eq!(old.exit_code(WAIT).await, Some(4));
                // What the old holder said about its loss: a key deleted
                // under a live keepalive is etcd ending the term early.
                let mut said = Vec::new();
                while let Ok(Ok(Some(l))) =
                    tokio::time::timeout(Duration::from_millis(200), old.lines.next_line()).await
                {
                    said.push(l);
                }
                println!(
                    "[figure] beliefs, frozen etcd leader: the old holder said: {}",
                    said.join(" | ")
                );
                out.push(t);
                match new_runs {
                    Ok(()) => old = new,
                    Err(why) => {
                        let code = new.exit_code(WAIT).await;
                        let mut said = Vec::new();
                        while let Ok(Ok(Some(l))) =
                            tokio::time::timeout(Duration::from_millis(200), new.lines.next_line())
                                .await
                        {
                            said.push(l);
                        }
                        println!(
                            "[figure] beliefs, frozen etcd leader: the new holder's term ended at once ({why}; exit {code:?}): {}",
                            said.join(" | ")
                        );
                        dirs.push(tempdir());
                        let dir = dirs[dirs.len() - 1].path();
                        // Waiting: the ended term's key may outlive it by
                        // its TTL (its resignation unanswered mid-turmoil).
                        let args = ["--wait", "--ttl", TTL];
                        old = Holder::start(&eps, election, dir, &args).await;
                    }
                }
            }
            Err(_) => {
                // The holder renewed through the other members and kept its
                // term: no takeover, nothing to judge.
                kept += 1;
                death.abort();
                drop(new);
            }
        }
    }
    (out, kept)
}

// ---------------------------------------------------------------------------

fn assert_no_overlap(scenario: &str, takeovers: &[Takeover]) {
    for (i, t) in takeovers.iter().enumerate() {
        assert_eq!(
            t.overlap,
            0,
            "{scenario}, takeover {i}: the old holder still believed {:.0} ms into the new term",
            ms(t.overlap)
        );
        assert_eq!(
            t.acts_after, 0,
            "{scenario}, takeover {i}: acts after the new term"
        );
    }
}

async fn run_all(rounds: usize) {
    let t = expiry_tenure_frozen(rounds).await;
    report("expiry (tenure frozen, guard acts)", &t);
    assert_no_overlap("expiry", &t);

    let t = partition(rounds).await;
    report("partition (holder cut off by a proxy)", &t);
    assert_no_overlap("partition", &t);

    let t = depose(rounds).await;
    report("depose", &t);
    // Detection (key watch, milliseconds; at worst the TTL/3 key read)
    // plus the 0.5 s grace, plus scheduling.
    for tk in &t {
        assert!(
            tk.overlap < 1_500_000_000,
            "depose overlap {:.0} ms",
            ms(tk.overlap)
        );
    }

    let t = whole_holder_sigstop(rounds).await;
    report("SIGSTOP of the whole holder past its TTL", &t);

    let (t, kept) = frozen_etcd_leader(rounds.div_ceil(2).max(2)).await;
    report(
        &format!("frozen etcd leader (6 s, 3 members; {kept} rounds the holder kept its term)"),
        &t,
    );
    // etcd 3.4.23 and 3.5.1 can end a kept-alive lease early across a
    // leader change (etcd issue 15247: the stalled leader revokes on
    // resuming, or answers keepalives it no longer may): the key goes
    // before the holder's deadline, with no end marker. No client-side
    // deadline can prevent that; the holder learns it from its key watch
    // and kills at once, without the grace. Bounded, and reported.
    for tk in &t {
        assert!(
            tk.overlap < 300_000_000,
            "frozen etcd leader: the old holder believed {:.0} ms into the new term",
            ms(tk.overlap)
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn beliefs_never_overlap_a_new_term_after_expiry_partition_or_frozen_etcd_leader() {
    run_all(2).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "full run (20 takeovers per fault): cargo test --test belief -- --ignored --nocapture"]
async fn full_beliefs_20_takeovers_per_fault() {
    run_all(20).await;
}
