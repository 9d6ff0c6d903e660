use std::sync::atomic::Ordering;
use std::sync::Arc;

use crate::common::*;
use crate::oracle::*;
use crate::support::{Etcd, Serve};
use crate::workload::*;
use tenure::history::Reader;

// ---------------------------------------------------------------------------
// 7. tenure killed with kill -9 during heavy ingest: after each restart it
//    resumes from the revision committed with the last events.
// ---------------------------------------------------------------------------

async fn kill9_during_ingest(scenario: &str, ops: u64, kills: usize) {
    let etcd = Etcd::start().await;
    let eps = vec![etcd.endpoint()];
    let dir = tempfile::tempdir().expect("tempdir");
    let db = dir.path().join("history.db");
    let mut raw = etcd.client().await;
    let start_rev = head_revision(&mut raw).await;
    let mut serve = Some(Serve::start(&eps, &db, &[], &[]).await);
    serve.as_ref().expect("running").caught_up(start_rev).await;
    let work = Arc::new(Workload::new(&eps).await);
    let mut rng = seeded_rng(scenario);
    let mut wrng = rng.fork(1);
    let w = work.clone();
    let ingest = tokio::spawn(async move { w.run("ingest", 4, ops, &mut wrng).await });
    let mut crashes = Vec::new();
    for k in 0..kills {
        // Every other crash lands while the restarted process is still
        // replaying what it missed.
        let uptime = if k % 2 == 1 {
            rng.millis(20, 250)
        } else {
            rng.millis(300, 1200)
        };
        tokio::time::sleep(uptime).await;
        let s = serve.take().expect("running");
        let committed_before = Reader::open(&db)
            .ok()
            .and_then(|r| r.resume_point().ok().flatten())
            .map(|r| r.revision)
            .unwrap_or(0);
        s.crash().await;
        let head = head_revision(&mut raw).await;
        let after = Reader::open(&db)
            .expect("reader")
            .resume_point()
            .expect("resume")
            .map(|r| r.revision)
            .unwrap_or(0);
        crashes.push((
            head,
            committed_before,
            after,
            work.ops.load(Ordering::Relaxed),
        ));
        tokio::time::sleep(rng.millis(200, 1500)).await;
        serve = Some(Serve::start(&eps, &db, &[], &[]).await);
    }
    ingest.await.expect("ingest");
    // Until every never-renewed lease (2 s TTL) has expired.
    short_leases_expired(&mut raw, 2).await;
    let head = head_revision(&mut raw).await;
    let s = serve.take().expect("running");
    s.caught_up(head).await;
    assert_eq!(s.stop().await, Some(0));
    let cause = cause_from(&work.intents);
    let v = verify_history(&mut raw, &db, start_rev, &cause, 0, true).await;
    for (i, (head, _, after, done)) in crashes.iter().enumerate() {
        figure(
            scenario,
            format!(
                "kill -9 #{}: after {done} operations, etcd at revision {head}, history had committed \
                 revision {after} ({} behind); the restart resumed from {}",
                i + 1,
                head - after,
                after + 1
            ),
        );
    }
    figure(scenario, format!("operations: {}", work.tally.summary()));
    figure(scenario, v.summary());
    work.assert_no_violations();
    v.assert_none(scenario);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn s07_kill9_during_ingest_nothing_missed_or_duplicated() {
    kill9_during_ingest("7 kill -9 during ingest", 3_000, 4).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "full run (20,000 operations, 12 kills): cargo test --test faults -- --ignored --nocapture"]
async fn s07_full_kill9_during_ingest_12_kills() {
    kill9_during_ingest("7 kill -9 during ingest (full)", 20_000, 12).await;
}
