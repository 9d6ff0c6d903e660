//! `GET /api/v1/elections` a page at a time (issue 23): `limit`, `cursor`,
//! `total`, `next_cursor`; elections appearing and disappearing (retention)
//! between two pages neither shift nor repeat the others.

use std::collections::BTreeSet;
use std::time::Duration;

use tenure::events::{now_ms, Batch, EndCause};
use tenure::history::Store;

use crate::common::*;
use crate::seeded;

/// Walks the list from `cursor` with `limit`, at most `pages` pages; returns
/// the names, the totals seen, and the cursor to go on from (`None`: done).
async fn walk(
    base: &str,
    limit: usize,
    mut cursor: Option<String>,
    pages: usize,
) -> (Vec<String>, Vec<u64>, Option<String>) {
    let (mut names, mut totals) = (Vec::new(), Vec::new());
    for _ in 0..pages {
        let url = match &cursor {
            Some(c) => format!("{base}/api/v1/elections?limit={limit}&cursor={c}"),
            None => format!("{base}/api/v1/elections?limit={limit}"),
        };
        let doc = get_json(&url).await;
        let page: Vec<String> = doc["elections"]
            .as_array()
            .expect("elections")
            .iter()
            .map(|e| e["name"].as_str().expect("name").to_owned())
            .collect();
        assert!(page.len() <= limit, "{url}: {} names", page.len());
        assert_eq!(doc["limit"].as_u64(), Some(limit as u64));
        totals.push(doc["total"].as_u64().expect("total"));
        names.extend(page);
        match doc["next_cursor"].as_str() {
            Some(c) => cursor = Some(c.to_owned()),
            None => return (names, totals, None),
        }
    }
    (names, totals, cursor)
}

#[tokio::test]
async fn the_list_pages_by_cursor_while_elections_come_and_go() {
    let dir = tempfile::tempdir().expect("tempdir");
    let path = dir.path().join("h.db");
    let store = Store::open(&path, Duration::ZERO).expect("store");
    let now = now_ms();
    let two_hours_ago = now - 7_200_000;
    let mut events = Vec::new();
    let mut rev = 1;
    // 60 elections leading now, and between them 30 whose only term ended
    // two hours ago (retention of an hour forgets them).
    for i in 0..60i64 {
        let e = format!("e-{i:03}");
        events.push(seeded::ev(rev, now - 60_000, &e, seeded::started(rev, "n")));
        rev += 1;
        if i % 2 == 1 {
            let old = format!("e-{i:03}-old");
            let t = rev;
            events.push(seeded::ev(
                rev,
                two_hours_ago,
                &old,
                seeded::started(t, "n"),
            ));
            rev += 1;
            events.push(seeded::ev(
                rev,
                two_hours_ago + 1000,
                &old,
                seeded::ended(t, "n", EndCause::Resigned, two_hours_ago),
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

    // Whole walks, by several page sizes: every election once, by name.
    let everything: Vec<String> = {
        let (names, totals, rest) = walk(&base, 10_000, None, 1).await;
        assert_eq!((totals, rest), (vec![90], None));
        names
    };
    let mut sorted = everything.clone();
    sorted.sort();
    assert_eq!(everything, sorted, "by name");
    assert_eq!(everything.len(), 90);
    for limit in [1, 7, 30, 89, 90, 91] {
        let (names, totals, rest) = walk(&base, limit, None, 200).await;
        assert_eq!(
            rest, None,
            "limit {limit}: the last page has no next_cursor"
        );
        assert_eq!(names, everything, "limit {limit}");
        assert!(totals.iter().all(|&t| t == 90), "limit {limit}: {totals:?}");
    }
    // The default page and the bounds.
    let doc = get_json(&format!("{base}/api/v1/elections")).await;
    assert_eq!(doc["limit"].as_u64(), Some(1000));
    for bad in [
        "limit=0",
        "limit=10001",
        "limit=ten",
        "cursor=xyz",
        "cursor=7a",
        "cursor=61",
    ] {
        let r = http()
            .get(format!("{base}/api/v1/elections?{bad}"))
            .send()
            .await
            .expect("GET");
        assert_eq!(r.status(), 400, "{bad}");
    }

    // Two pages of 7, then elections come (before and after the cursor)
    // and go (retention drops the old ones), then the rest of the walk.
    let (first, _, cursor) = walk(&base, 7, None, 2).await;
    let cursor = cursor.expect("more pages");
    let last_seen = first.last().expect("names").clone();
    let mut more = Vec::new();
    for (k, e) in ["e-000a", "e-0305", "e-999"].iter().enumerate() {
        more.push(seeded::ev(
            rev + k as i64,
            now,
            e,
            seeded::started(rev + k as i64, "m"),
        ));
    }
    seeded::write(
        &store,
        vec![Batch {
            revision: rev + 3,
            events: more,
        }],
    )
    .await;
    // A second writer on the file, keeping an hour: it prunes on start.
    let pruner = Store::open(&path, Duration::from_secs(3600)).expect("pruner");
    pruner.flush().await.expect("flush");
    pruner.close().await.expect("close");
    let (rest, totals, end) = walk(&base, 7, Some(cursor), 200).await;
    assert_eq!(end, None);
    assert_eq!(
        totals.last(),
        Some(&63),
        "60 leading and 3 new; the old ones forgotten"
    );
    let walked: Vec<&String> = first.iter().chain(&rest).collect();
    assert!(
        walked.windows(2).all(|w| w[0] < w[1]),
        "strictly by name, nothing repeated: {walked:?}"
    );
    let walked: BTreeSet<&str> = walked.iter().map(|s| s.as_str()).collect();
    for i in 0..60 {
        let e = format!("e-{i:03}");
        assert!(
            walked.contains(e.as_str()),
            "{e} was there all along: skipped"
        );
    }
    for e in ["e-0305", "e-999"] {
        assert!(walked.contains(e), "{e} came after the cursor: listed");
    }
    assert!(
        !walked.contains("e-000a"),
        "e-000a came before the cursor ({last_seen}): not listed"
    );
    assert!(
        rest.iter().all(|n| !n.ends_with("-old")),
        "forgotten elections are not listed after the prune: {rest:?}"
    );
}
