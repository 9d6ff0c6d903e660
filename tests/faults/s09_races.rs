use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use crate::common::*;
use crate::oracle::*;
use crate::support::Etcd;
use tenure::election::{CampaignOptions, Error, Keys};
use tenure::events::EndCause;

// ---------------------------------------------------------------------------
// 9. elect/resign races with random pauses.
// ---------------------------------------------------------------------------

/// A library holder's belief that it leads (wall clock, ns).
#[derive(Clone)]
struct Belief {
    token: i64,
    end: i128,
    paused: bool,
}

async fn races(scenario: &str, run_for: Duration) {
    let etcd = Etcd::start().await;
    let eps = vec![etcd.endpoint()];
    let mut raw = etcd.client().await;
    // Every term below starts after the watcher's first snapshot.
    let (serve, db, start_rev, _dir) = record(&eps, &mut raw).await;
    let client = tenure_client(&eps).await;
    let tally = Tally::default();
    let violations: Arc<Mutex<Vec<String>>> = Arc::default();
    let mut rng = seeded_rng(scenario);
    let until = Instant::now() + run_for;
    let mut tasks = Vec::new();
    // Candidates that keep their own lease (the HTTP API's model): they
    // renew, pause at random (sometimes past the TTL), write through the
    // fence, resign with a wrong token, then with their own.
    for c in 0..6 {
        let (client, tally, violations) = (client.clone(), tally.clone(), violations.clone());
        let mut rng = rng.fork(c);
        let n = name(if c % 3 == 0 { "race/two" } else { "race/one" });
        tasks.push(tokio::spawn(async move {
            let me = format!("detached-{c}");
            while Instant::now() < until {
                let wait = Some(rng.millis(0, 1500));
                let won = match client.acquire_detached(&n, &me, ttl(2), wait).await {
                    Ok(Ok(won)) => won,
                    Ok(Err(_)) => {
                        tally.add("campaign_held");
                        continue;
                    }
                    Err(e) => panic!("campaign: {e}"),
                };
                tally.add("campaign_won");
                for _ in 0..rng.below(4) {
                    tokio::time::sleep(rng.millis(0, 1200)).await;
                    if rng.chance(60) {
                        match client.renew(&n, won.token, won.lease_id).await {
                            Ok(_) => tally.add("renewed"),
                            Err(Error::NotHolder { .. }) => tally.add("renew_refused_term_over"),
                            Err(e) => panic!("renew: {e}"),
                        }
                    }
                    match client.fence(&n, "db", won.token).await {
                        Ok(d) if d.accepted => tally.add("fence_accepted"),
                        Ok(_) => tally.add("fence_refused"),
                        Err(e) => panic!("fence: {e}"),
                    }
                }
                match client.resign(&n, won.token - 1).await {
                    Err(Error::NotHolder { .. }) => tally.add("resign_wrong_token_refused"),
                    Ok(l) => violations
                        .lock()
                        .unwrap_or_else(|p| p.into_inner())
                        .push(format!("resign with token {} ended {l:?}", won.token - 1)),
                    Err(e) => panic!("resign: {e}"),
                }
                match client.resign(&n, won.token).await {
                    Ok(l) => {
                        if l.token != won.token {
                            violations
                                .lock()
                                .unwrap_or_else(|p| p.into_inner())
                                .push(format!("resign({}) ended term {}", won.token, l.token));
                        }
                        tally.add("resigned")
                    }
                    Err(Error::NotHolder { .. }) => tally.add("resign_refused_term_over"),
                    Err(e) => panic!("resign: {e}"),
                }
            }
        }));
    }
    // Library holders with a loss signal: check it, then stall the whole
    // runtime thread (a GC pause) before writing; the fence decides. Each
    // records its belief: from the win until it saw the loss or called
    // resign (wall clock, the clock the key log below uses too).
    let beliefs: Arc<Mutex<Vec<Belief>>> = Arc::default();
    let keylog =
        crate::support::holder::KeyLog::start(etcd.client().await, "election/race/one").await;
    for c in 0..2 {
        let (client, tally, beliefs) = (client.clone(), tally.clone(), beliefs.clone());
        let mut rng = rng.fork(100 + c);
        let n = name("race/one");
        tasks.push(tokio::spawn(async move {
            let me = format!("library-{c}");
            let opts = CampaignOptions::new(ttl(2));
            while Instant::now() < until {
                let l = match client
                    .campaign_wait(&n, &me, &opts, Some(Duration::from_secs(3)))
                    .await
                {
                    Ok(l) => l,
                    Err(Error::Timeout { .. }) => continue,
                    Err(e) => panic!("campaign_wait: {e}"),
                };
                let mut belief = Belief {
                    token: l.token(),
                    end: 0,
                    paused: false,
                };
                tally.add("library_won");
                for _ in 0..3 {
                    if l.is_lost().is_some() {
                        tally.add("library_noticed_loss");
                        break;
                    }
                    if rng.chance(30) {
                        // Blocks this runtime thread: keepalives on it stall too.
                        std::thread::sleep(rng.millis(500, 2500));
                        tally.add("library_paused");
                        belief.paused = true;
                    }
                    match l.fence("db").await {
                        Ok(d) if d.accepted => tally.add("fence_accepted"),
                        Ok(_) => tally.add("fence_refused"),
                        Err(e) => panic!("fence: {e}"),
                    }
                    tokio::time::sleep(rng.millis(0, 300)).await;
                }
                belief.end = crate::support::holder::now_ns();
                beliefs
                    .lock()
                    .unwrap_or_else(|p| p.into_inner())
                    .push(belief);
                let _ = l.resign().await;
            }
        }));
    }
    for t in tasks {
        t.await.expect("candidate");
    }
    // Until every never-renewed lease (2 s TTL) has expired.
    short_leases_expired(&mut raw, 2).await;
    let head = head_revision(&mut raw).await;
    serve.caught_up(head).await;
    assert_eq!(serve.stop().await, Some(0));

    // Detached HTTP terms are never revoked: without a marker they expired.
    // A library holder whose loss signal fired (a pause past its deadline)
    // resigns by revoking its lease, no marker: it may have expired or been
    // revoked, and the scenario cannot tell which, so any cause is accepted
    // (found by full local runs: library terms revoked 1.4 s into a 2 s lease,
    // rightly recorded `resigned`, was counted as a difference).
    let expired = |t: &LogTerm| (!t.holder.starts_with("library-")).then_some(EndCause::Expired);
    let v = verify_history(&mut raw, &db, start_rev, &expired, 0, false).await;
    let log = etcd_log(&mut raw, start_rev, v.resume_revision).await;
    let keys = Keys::new("");
    let terms = oracle(&keys, &log);
    let audit = audit_fences(&log, &terms, &keys);
    // Beliefs against etcd: how long each library holder went on believing
    // after etcd created the next term of its election. Without a pause
    // the loss signal (or its own resign) must end the belief first; a
    // pause past the TTL (a GC pause it cannot see) is what the fence is
    // for, and is reported.
    let changes = keylog.changes();
    let beliefs = beliefs.lock().unwrap_or_else(|p| p.into_inner()).clone();
    let mut overlaps = 0;
    let (mut paused_overlaps, mut paused_max) = (0, 0i128);
    for b in &beliefs {
        let Some(next) = changes
            .iter()
            .find(|c| !c.deleted && c.create_revision > b.token)
        else {
            continue;
        };
        let over = b.end - next.at;
        if over > 0 && b.paused {
            paused_overlaps += 1;
            paused_max = paused_max.max(over);
        } else if over > 0 {
            overlaps += 1;
        }
    }
    figure(
        scenario,
        format!("{:?} of races: {}", run_for, tally.summary()),
    );
    figure(
        scenario,
        format!(
            "fence: {} accepted / {} refused in etcd; stale accepted {}; stored token went down {} times; \
             library beliefs {}: overlapping the next term without a pause {overlaps}, after a pause \
             {paused_overlaps} (max {} ms, their writes refused by the fence); wrong-token resigns accepted {}",
            audit.accepted,
            audit.refused,
            audit.stale_accepted.len(),
            audit.regressions.len(),
            beliefs.len(),
            paused_max / 1_000_000,
            violations.lock().unwrap_or_else(|p| p.into_inner()).len()
        ),
    );
    figure(scenario, v.summary());
    audit.assert_clean();
    assert_eq!(overlaps, 0);
    let violations = violations.lock().unwrap_or_else(|p| p.into_inner()).clone();
    assert!(violations.is_empty(), "{violations:?}");
    if run_for >= Duration::from_secs(60) {
        assert!(
            tally.get("fence_refused") + tally.get("renew_refused_term_over") > 0,
            "the races produced stale holders"
        );
    }
    v.assert_none(scenario);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn s09_elect_resign_races_with_pauses() {
    races("9 races", Duration::from_secs(10)).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "full run (2 minutes of races): cargo test --test faults -- --ignored --nocapture"]
async fn s09_full_elect_resign_races_2_minutes() {
    races("9 races (full)", Duration::from_secs(120)).await;
}
