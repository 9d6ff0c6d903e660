//! Seeded fleets: the overview's 10,000 elections, `/timeline`'s 1,000
//! lanes a page.

use std::time::{Duration, Instant};

use crate::common::*;
use tenure::events::now_ms;

use crate::seeded;

#[tokio::test]
async fn overview_filters_sorts_and_pages_10000_elections() {
    use tenure::events::Batch;
    let dir = tempfile::tempdir().expect("tempdir");
    let store =
        tenure::history::Store::open(&dir.path().join("h.db"), Duration::ZERO).expect("store");
    let now = now_ms();
    let mut events = Vec::new();
    for i in 0..10_000i64 {
        let e = format!("svc-{i:05}/leader");
        events.push(seeded::ev(
            i + 1,
            now - 60_000,
            &e,
            seeded::started(i + 1, "node"),
        ));
    }
    // One busy election: three more terms.
    let busy = "svc-04242/leader";
    let mut rev = 20_000;
    for k in 0..3 {
        events.push(seeded::ev(
            rev,
            now - 50_000 + k * 1000,
            busy,
            seeded::ended(
                if k == 0 { 4243 } else { rev - 1 },
                "node",
                tenure::events::EndCause::Resigned,
                now - 60_000,
            ),
        ));
        rev += 1;
        events.push(seeded::ev(
            rev,
            now - 50_000 + k * 1000 + 10,
            busy,
            seeded::started(rev, "node-2"),
        ));
        rev += 1;
    }
    seeded::write(
        &store,
        vec![Batch {
            revision: rev,
            events,
        }],
    )
    .await;
    let (base, _server) = seeded::serve(&store).await;

    let t = Instant::now();
    let page = get_text(&format!("{base}/")).await;
    let took = t.elapsed();
    assert!(page.contains("id=\"known-count\">10000<"), "known count");
    assert!(page.contains("showing 1–200 of <b class=\"num\" id=\"matching-count\">10000</b>"));
    assert_eq!(page.matches("<tr class=").count(), 200);
    assert!(page.contains("rel=\"next\""));
    println!("overview of 10,000 elections: {took:?}");

    let f = get_text(&format!("{base}/?match={}", enc("svc-0001*"))).await;
    assert!(
        f.contains("id=\"matching-count\">10<"),
        "10 match svc-0001*"
    );
    assert_eq!(f.matches("data-election=\"svc-0001").count(), 10);

    let s = get_text(&format!("{base}/?sort=changes&order=desc")).await;
    let first = s.split("data-election=\"").nth(1).expect("a row");
    assert!(first.starts_with(busy), "busiest first: {}", &first[..40]);
    assert!(s.contains("aria-sort=\"descending\""));

    let p2 = get_text(&format!("{base}/?page=50")).await;
    assert!(p2.contains("showing 9801–10000 of"));
    assert!(!p2.contains("rel=\"next\""));
}

/// 1,050 active elections: one page draws 1,000 lanes (busiest first), the
/// next the other 50; the default page is 100 lanes.
#[tokio::test]
async fn timeline_pages_1000_lanes_busiest_first() {
    use tenure::events::{Batch, EndCause};
    let dir = tempfile::tempdir().expect("tempdir");
    let store =
        tenure::history::Store::open(&dir.path().join("h.db"), Duration::ZERO).expect("store");
    let now = now_ms();
    let mut events = Vec::new();
    let mut rev = 1;
    for i in 0..1050i64 {
        let e = format!("fleet/{i:04}");
        // Election i has 1 + i % 4 terms in the window.
        for k in 0..(1 + i % 4) {
            let at = now - 1_200_000 + k * 60_000 + i;
            events.push(seeded::ev(rev, at, &e, seeded::started(rev, "n")));
            rev += 1;
            events.push(seeded::ev(
                rev,
                at + 30_000,
                &e,
                seeded::ended(rev - 1, "n", EndCause::Expired, at),
            ));
            rev += 1;
        }
    }
    seeded::write(
        &store,
        vec![Batch {
            revision: rev,
            events,
        }],
    )
    .await;
    let (base, _server) = seeded::serve(&store).await;
    let lanes = |page: &str| -> Vec<(String, u64)> {
        page.split("<g class=\"lane\" data-election=\"")
            .skip(1)
            .map(|s| {
                let name = s.split('"').next().unwrap_or_default().to_owned();
                let changes = s
                    .split("data-changes=\"")
                    .nth(1)
                    .and_then(|c| c.split('"').next())
                    .and_then(|c| c.parse().ok())
                    .unwrap_or(0);
                (name, changes)
            })
            .collect()
    };
    let first = get_text(&format!("{base}/timeline?from=1h&per_page=1000")).await;
    let l1 = lanes(&first);
    assert_eq!(l1.len(), 1000);
    assert!(first.contains("id=\"lanes-total\">1050<"));
    assert!(l1.windows(2).all(|w| w[0].1 >= w[1].1), "busiest first");
    assert_eq!(l1[0].1, 4);
    assert!(first.contains("rel=\"next\""));
    let second = get_text(&format!("{base}/timeline?from=1h&per_page=1000&page=2")).await;
    let l2 = lanes(&second);
    assert_eq!(l2.len(), 50);
    let mut all: Vec<String> = l1.into_iter().chain(l2).map(|l| l.0).collect();
    all.sort();
    all.dedup();
    assert_eq!(all.len(), 1050, "every election on exactly one page");
    let default = get_text(&format!("{base}/timeline?from=1h")).await;
    assert_eq!(lanes(&default).len(), 100);
    // Bounded: a page is at most 1000 lanes whatever is asked.
    let big = get_text(&format!("{base}/timeline?from=1h&per_page=5000")).await;
    assert_eq!(lanes(&big).len(), 1000);
}
