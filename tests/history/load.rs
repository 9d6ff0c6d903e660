//! Under load: the writer never blocks the runtime; 100,000 events.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use crate::fixtures::*;
use tenure::events::*;
use tenure::history::*;

/// The writer runs on its own thread: a single-threaded runtime keeps
/// running its timers while 10,000 events are written.
#[test]
fn writes_do_not_block_the_runtime() {
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    rt.block_on(async {
        let dir = tempfile::tempdir().unwrap();
        let store = Store::open(&db(&dir), WEEK).unwrap();
        let ticks = Arc::new(AtomicU64::new(0));
        let ticker = {
            let ticks = ticks.clone();
            tokio::spawn(async move {
                let mut interval = tokio::time::interval(Duration::from_millis(1));
                // No catching up in bursts: a blocked runtime shows as few ticks.
                interval.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
                loop {
                    interval.tick().await;
                    ticks.fetch_add(1, Ordering::Relaxed);
                }
            })
        };
        tokio::task::yield_now().await;
        let before = ticks.load(Ordering::Relaxed);
        let begin = Instant::now();
        let t0 = now_ms();
        for b in 0..1_000_i64 {
            let events = (0..10)
                .map(|i| ev(b + 1, t0, &format!("e{i}"), started(b * 10 + i + 1, "h")))
                .collect();
            store.write(batch(b + 1, events)).await.unwrap();
        }
        assert_eq!(store.flush().await.unwrap(), 1_000);
        let elapsed = begin.elapsed();
        let during = ticks.load(Ordering::Relaxed) - before;
        ticker.abort();
        println!("10,000 events in {elapsed:?}; the runtime's timer ticked {during} times");
        // Were the writes done on this (the runtime's only) thread, the
        // timer could not have run until they were over.
        // Unblocked, it ticks about once a millisecond; allow a slow machine
        // a twentieth of that.
        let expected = (elapsed.as_millis() as u64 / 20).max(3);
        assert!(
            during >= expected,
            "the timer ticked {during} times in {elapsed:?}: the runtime was blocked"
        );
        let resume = store.resume_point().unwrap().unwrap();
        assert_eq!(resume.open_terms.len(), 10_000);
    });
}

#[tokio::test]
async fn throughput_100k_events() {
    let dir = tempfile::tempdir().unwrap();
    let path = db(&dir);
    let store = Store::open(&path, WEEK).unwrap();
    let t0 = now_ms();
    let batches: Vec<Batch> = (0..1_000_i64)
        .map(|b| {
            let revision = b + 1;
            let events = (0..100_i64)
                .map(|i| {
                    let kind = match i % 4 {
                        0 => started(revision * 1000 + i, "holder-1"),
                        1 => ended(
                            revision * 1000 + i - 1,
                            "holder-1",
                            EndCause::Expired,
                            revision,
                            t0,
                        ),
                        2 => EventKind::FenceAccepted {
                            resource: "orders".into(),
                            token: revision,
                        },
                        _ => refused("orders", revision - 1, Some((revision, "holder-1"))),
                    };
                    ev(revision, t0 + i, &format!("election-{}", i % 10), kind)
                })
                .collect();
            batch(revision, events)
        })
        .collect();
    let begin = Instant::now();
    write_all(&store, batches).await;
    assert_eq!(store.flush().await.unwrap(), 1_000);
    let elapsed = begin.elapsed();
    let rate = 100_000.0 / elapsed.as_secs_f64();
    println!(
        "history write throughput: 100,000 events in batches of 100 in {elapsed:.2?}: {rate:.0} events/s"
    );
    let count: i64 = rusqlite::Connection::open(&path)
        .unwrap()
        .query_row("SELECT COUNT(*) FROM events", [], |r| r.get(0))
        .unwrap();
    assert_eq!(count, 100_000);
    assert!(rate > 2_000.0, "{rate:.0} events/s is unreasonably slow");
}
