use std::time::{Duration, Instant};

use crate::actors::*;
use crate::common::*;
use crate::oracle::*;
use crate::support::wait::wait_until_async;
use crate::support::Etcd;
use tenure::election::Keys;
use tenure::events::EndCause;
use tenure::history::{Query, Reader, MAX_LIMIT};

// ---------------------------------------------------------------------------
// 2. Holder pause (t0..t4): SIGSTOP a leader past its TTL, another takes
//    over, SIGCONT: every write it makes with its old token is refused and
//    recorded; no stale write is ever accepted.
// ---------------------------------------------------------------------------

/// Runs `rounds` t0..t4 rounds; `env` is added to each holder's (and its
/// command's) environment, e.g. libfaketime. Returns (stale accepted,
/// refused after resume).
pub(crate) async fn holder_pause(
    scenario: &str,
    rounds: usize,
    env: &[(&str, &str)],
    hold_first: Duration,
) -> (usize, usize) {
    const TTL: u64 = 3;
    let etcd = Etcd::start().await;
    let eps = vec![etcd.endpoint()];
    let mut raw = etcd.client().await;
    // Every term below starts after the watcher's first snapshot.
    let (serve, db, start_rev, dir) = record(&eps, &mut raw).await;
    let election = "pause/story";

    let mut cur = Holder::spawn(&eps, election, "holder-0", dir.path(), TTL, false, env);
    cur.leads(Duration::from_secs(15)).await;
    if !hold_first.is_zero() {
        // Renewals alone keep it leader, whatever its clock says.
        tokio::time::sleep(hold_first).await;
        assert!(
            cur.child.try_wait().expect("try_wait").is_none(),
            "the holder lost its term"
        );
        let d = cur.decisions();
        assert!(
            d.last().is_some_and(|d| d["accepted"] == true),
            "still writing as leader"
        );
        assert!(
            d.iter().all(|d| d["accepted"] == true),
            "no write refused while it led"
        );
        figure(
            scenario,
            format!(
                "held the term for {hold_first:?} ({:.1} x the TTL) on renewals alone: {} writes, all accepted",
                hold_first.as_secs_f64() / TTL as f64,
                d.len()
            ),
        );
    }
    let (mut takeovers, mut stops, mut refused_after_resume) = (Vec::new(), Vec::new(), 0);
    for k in 0..rounds {
        // t0: cur leads and writes.
        let before = cur.decisions().len();
        wait_until("the holder writes", Duration::from_secs(10), || {
            cur.decisions().len() >= before + 2
        })
        .await;
        let leases = lease_ids(&mut raw).await;
        let mut next = Holder::spawn(
            &eps,
            election,
            &format!("holder-{}", k + 1),
            dir.path(),
            TTL,
            true,
            env,
        );
        // Until the next holder campaigns (its lease comes first).
        wait_until_async("the next holder's lease", Duration::from_secs(10), || {
            let mut raw = raw.clone();
            let leases = &leases;
            async move {
                lease_ids(&mut raw)
                    .await
                    .difference(leases)
                    .next()
                    .is_some()
            }
        })
        .await;
        // t1: the whole holder freezes (a paused VM: tenure, its guard and
        // the command alike).
        cur.freeze();
        let frozen = Instant::now();
        // t2: its lease expires; the waiting candidate takes over.
        let t_new = next.leads(Duration::from_secs(20)).await;
        takeovers.push(frozen.elapsed());
        assert!(t_new > cur.token);
        wait_until(
            "the new holder's write is accepted",
            Duration::from_secs(10),
            || next.decisions().iter().any(|d| d["accepted"] == true),
        )
        .await;
        // t3: the old holder wakes up, believing it leads, and writes: its
        // command first, before tenure and the guard can stop it.
        cur.resume_command_first(t_new).await;
        let resumed = Instant::now();
        let code = cur.exit_code(Duration::from_secs(15)).await;
        stops.push(resumed.elapsed());
        let said = cur.rest_of_stderr().await;
        assert_eq!(
            code,
            Some(4),
            "{} exits 4 (leadership lost): {said}",
            cur.id
        );
        // t4 cannot happen: every write it made after the takeover was refused.
        let after: Vec<serde_json::Value> = cur
            .decisions()
            .into_iter()
            .filter(|d| d["revision"].as_i64().unwrap_or(0) > t_new)
            .collect();
        assert!(!after.is_empty(), "the deposed holder wrote after resuming");
        for d in &after {
            assert_eq!(d["accepted"], false, "stale write accepted: {d}");
            assert_eq!(d["token"].as_i64(), Some(cur.token));
            assert_eq!(d["current_token"].as_i64(), Some(t_new), "{d}");
        }
        refused_after_resume += after.len();
        cur = next;
    }
    cur.signal(nix::sys::signal::Signal::SIGTERM);
    let last = cur.exit_code(Duration::from_secs(15)).await;
    assert_eq!(last, Some(143), "SIGTERM: stop, resign, exit 128+15");
    let head = head_revision(&mut raw).await;
    serve.caught_up(head).await;
    assert_eq!(serve.stop().await, Some(0));

    // Every deposed holder's term ended by expiry; the last one resigned.
    // Detached (HTTP) holders that did not resign let their lease expire.
    // A library holder whose loss signal fired (its deadline is before
    // etcd's expiry) then resigns by revoking its lease: either cause.
    let expired = |t: &LogTerm| (!t.holder.starts_with("library-")).then_some(EndCause::Expired);
    let v = verify_history(&mut raw, &db, start_rev, &expired, 0, false).await;
    let log = etcd_log(&mut raw, start_rev, v.resume_revision).await;
    let keys = Keys::new("");
    let audit = audit_fences(&log, &oracle(&keys, &log), &keys);
    let reader = Reader::open(&db).expect("reader");
    let refusals = reader
        .refusals(
            Some(election),
            &Query {
                limit: Some(MAX_LIMIT),
                ..Query::default()
            },
        )
        .expect("refusals");
    let stale_recorded = refusals
        .iter()
        .filter(|r| r.current_token.is_some_and(|c| c > r.token))
        .count();
    let ms = |d: &[Duration]| {
        let mut v: Vec<u128> = d.iter().map(|d| d.as_millis()).collect();
        v.sort_unstable();
        format!(
            "min {} / median {} / max {} ms",
            v[0],
            v[v.len() / 2],
            v[v.len() - 1]
        )
    };
    figure(
        scenario,
        format!(
            "{rounds} rounds (ttl {TTL} s): takeover after SIGSTOP {}; deposed holder stopped after SIGCONT {}",
            ms(&takeovers),
            ms(&stops)
        ),
    );
    figure(
        scenario,
        format!(
            "fence writes: {} accepted, {} refused in etcd; {refused_after_resume} writes by deposed \
             holders after resuming, all refused; {} refusals in history ({stale_recorded} with a newer \
             current term); stale writes accepted: {}",
            audit.accepted,
            audit.refused,
            refusals.len(),
            audit.stale_accepted.len()
        ),
    );
    figure(scenario, v.summary());
    audit.assert_clean();
    assert_eq!(
        refusals.len(),
        audit.refused,
        "every refusal recorded, once"
    );
    assert!(refused_after_resume >= rounds);
    v.assert_none(scenario);
    (audit.stale_accepted.len(), refused_after_resume)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn s02_holder_pause_3_rounds_stale_writes_refused_and_recorded() {
    holder_pause("2 holder pause", 3, &[], Duration::ZERO).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "full run (25 rounds): cargo test --test faults -- --ignored --nocapture"]
async fn s02_full_holder_pause_25_rounds() {
    holder_pause("2 holder pause (full)", 25, &[], Duration::from_secs(10)).await;
}
