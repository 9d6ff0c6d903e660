//! A server to look at (not a test): TENURE_PAGES_DEMO=127.0.0.1:8099
//! cargo test --test pages demo_server -- --ignored --nocapture

use std::sync::Arc;
use std::time::Duration;

use tenure::election::Client;
use tenure::events::{now_ms, Batch, EndCause, Update, WatchStatus};
use tenure::feed::readiness::Readiness;
use tenure::web;

use crate::app::*;
use crate::story::*;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "serves synthetic data until killed, for screenshots"]
async fn demo_server() {
    let Ok(listen) = std::env::var("TENURE_PAGES_DEMO") else {
        return;
    };
    let dir = tempfile::tempdir().expect("tempdir");
    let (store, _) = open_store(&dir).await;
    let now = now_ms();
    write(&store, story(now)).await;
    // Busier elections for the overview.
    let mut rev = 1000;
    let mut batches = Vec::new();
    for (name, holders, every) in [
        ("orders/primary", 3, 7 * MIN),
        ("billing", 2, 23 * MIN),
        ("search/indexer", 5, 90_000),
    ] {
        let mut t = now - 6 * HOUR;
        let mut i = 0;
        let mut prev: Option<String> = None;
        while t < now - every {
            let holder = format!(
                "{}-{:02}",
                name.split('/').next().unwrap_or(name),
                i % holders + 1
            );
            let token = rev;
            let start = t;
            batches.push(Batch {
                revision: rev,
                events: vec![ev(rev, t, name, started(token, &holder, prev.as_deref()))],
            });
            rev += 1;
            t += every - 4_000;
            let cause =
                [EndCause::Expired, EndCause::Resigned, EndCause::Deleted][(i % 3) as usize];
            batches.push(Batch {
                revision: rev,
                events: vec![ev(rev, t, name, ended(token, &holder, cause, start))],
            });
            rev += 1;
            t += 4_000;
            prev = Some(holder);
            i += 1;
        }
        let holder = format!(
            "{}-{:02}",
            name.split('/').next().unwrap_or(name),
            i % holders + 1
        );
        batches.push(Batch {
            revision: rev,
            events: vec![ev(rev, t, name, started(rev, &holder, prev.as_deref()))],
        });
        rev += 1;
    }
    // 10,000 short terms in the last hour, for the dense drawing.
    for t in synthetic_terms(10_000, now - HOUR, now) {
        let mut events = vec![ev(
            rev,
            t.started_at_ms,
            "load/bursty",
            started(rev, &t.holder, None),
        )];
        if let Some(end) = t.ended_at_ms {
            events.push(ev(
                rev + 1,
                end,
                "load/bursty",
                ended(rev, &t.holder, EndCause::Expired, t.started_at_ms),
            ));
        }
        batches.push(Batch {
            revision: rev + 1,
            events,
        });
        rev += 2;
    }
    write(&store, batches).await;
    let client = Client::connect(&[dead_endpoint()], "")
        .await
        .expect("client")
        .with_op_timeout(Duration::from_millis(300));
    let readiness = Arc::new(Readiness::default());
    readiness.apply(&Update::Watch(WatchStatus::CaughtUp { revision: rev }));
    let state = app_state(&store, client, readiness);
    let listener = tokio::net::TcpListener::bind(&listen).await.expect("bind");
    eprintln!("demo pages on http://{listen}/");
    axum::serve(listener, web::router(state))
        .await
        .expect("serve");
}
