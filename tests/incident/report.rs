//! The report of a seeded history: refusals and leaderless time, field by
//! field.

use std::time::Duration;

use serde_json::Value;

use crate::common::*;
use tenure::events::now_ms;
use tenure::history::format_ms;

use crate::seeded;

#[tokio::test]
async fn report_refusals_and_leaderless_field_by_field() {
    use tenure::election::FenceReason;
    use tenure::events::{Batch, EndCause};
    let dir = tempfile::tempdir().expect("tempdir");
    let db = dir.path().join("h.db");
    let store = tenure::history::Store::open(&db, Duration::ZERO).expect("store");
    let t0 = now_ms() - 600_000;
    let e = "billing/ledger";
    use seeded::*;
    write(
        &store,
        vec![
            Batch {
                revision: 10,
                events: vec![ev(10, t0, e, started(10, "ledger-a"))],
            },
            Batch {
                revision: 11,
                events: vec![ev(
                    11,
                    t0 + 60_000,
                    e,
                    ended(10, "ledger-a", EndCause::Expired, t0),
                )],
            },
            Batch {
                revision: 12,
                events: vec![ev(12, t0 + 64_500, e, started(12, "ledger-b"))],
            },
            Batch {
                revision: 13,
                events: vec![ev(
                    13,
                    t0 + 66_000,
                    e,
                    refused("accounts", 10, FenceReason::TermEnded, (12, "ledger-b")),
                )],
            },
            Batch {
                revision: 14,
                events: vec![ev(
                    14,
                    t0 + 120_000,
                    e,
                    ended(12, "ledger-b", EndCause::Resigned, t0 + 64_500),
                )],
            },
            Batch {
                revision: 15,
                events: vec![ev(15, t0 + 121_000, e, started(15, "ledger|c"))],
            },
            Batch {
                revision: 16,
                events: vec![ev(
                    16,
                    t0 + 122_000,
                    "billing/xss",
                    started(16, "<script>alert(1)</script>"),
                )],
            },
        ],
    )
    .await;
    let (base, _server) = seeded::serve(&store).await;
    let (from, to) = (t0 - 30_000, t0 + 300_000);
    let window = format!(
        "from={}&to={}&match={}",
        enc(&format_ms(from)),
        enc(&format_ms(to)),
        enc("billing/*")
    );
    let r = get_json(&format!("{base}/api/v1/report?{window}&format=json")).await;
    let x = &r["elections"][0];
    assert_eq!(x["election"], e);
    // Leaderless from the first term (t0): 4.5 s and 1 s.
    assert_eq!(x["leaderless_ms"].as_i64(), Some(5_500));
    assert_eq!(x["longest_leaderless_ms"].as_i64(), Some(4_500));
    assert_eq!(x["leaderless_stretches"].as_u64(), Some(2));
    assert_eq!(x["changes"].as_u64(), Some(3));
    let f = &x["refusals"][0];
    assert_eq!(f["resource"], "accounts");
    assert_eq!(f["refused_token"].as_i64(), Some(10));
    assert_eq!(f["refused_holder"], "ledger-a");
    assert_eq!(f["reason"], "term_ended");
    assert_eq!(f["after_term_end_ms"].as_i64(), Some(6_000));
    assert_eq!(x["terms"][2]["end"], serde_json::Value::Null);
    assert_eq!(x["terms"][0]["cause"], "expired");

    let md = get_text(&format!("{base}/api/v1/report?{window}&format=md")).await;
    println!("{md}");
    let row = md
        .lines()
        .find(|l| l.contains("| accounts |"))
        .unwrap_or_else(|| panic!("no refusal row:\n{md}"));
    assert_eq!(
        cells(row),
        vec![
            format_ms(t0 + 66_000),
            "accounts".into(),
            "10".into(),
            "ledger-a".into(),
            "term_ended".into(),
            "6000 ms".into()
        ]
    );
    // Holders are text: escaped in the page, inert in the Markdown.
    let page = get_text(&format!("{base}/timeline?{window}")).await;
    assert!(
        !page.contains("<script>alert(1)"),
        "holder unescaped in /timeline"
    );
    assert!(page.contains("data-election=\"billing/xss\""));
    assert!(md.contains("\\<script\\>alert(1)\\</script\\>"), "{md}");
    // Linked from the overview and from each election's page (with its
    // window), which also has a Report button for the election.
    let overview = get_text(&format!("{base}/")).await;
    assert!(
        overview.contains("id=\"all-timeline\" href=\"/timeline\"")
            || overview.contains("href=\"/timeline\" id=\"all-timeline\"")
    );
    let one = get_text(&format!(
        "{base}/elections/billing%2Fledger?from={}&to={}",
        enc(&format_ms(from)),
        enc(&format_ms(to))
    ))
    .await;
    assert!(
        one.contains(&format!("href=\"/timeline?from={}", enc(&format_ms(from)))),
        "{one}"
    );
    assert!(one.contains("id=\"report-md\""));
    assert!(
        one.contains("match=billing%2Fledger&amp;format=md")
            || one.contains("match=billing%2Fledger&#38;format=md"),
        "report link"
    );
    // The causes of the report's terms, in the one wording of every view.
    assert!(
        md.contains(&format!(
            "- `expired`: {}",
            tenure::events::EndCause::Expired.description()
        )),
        "{md}"
    );
    // A pipe in a holder cannot break the table.
    assert!(md.contains("| ledger\\|c | 15 |"), "{md}");
    assert!(
        md.contains(&format!("| {e} | 3 | 5500 ms | 4500 ms | 2 | 1 |")),
        "{md}"
    );

    // Bad input: typed errors that say what to do.
    let resp = http()
        .get(format!("{base}/api/v1/cluster/events?from=yesterday-ish"))
        .send()
        .await
        .expect("GET");
    assert_eq!(resp.status(), reqwest::StatusCode::BAD_REQUEST);
    let body: Value = resp.json().await.expect("json");
    assert_eq!(body["error"]["code"], "invalid_time");
    let resp = http()
        .get(format!("{base}/timeline?from=2h&to=3h"))
        .send()
        .await
        .expect("GET");
    assert_eq!(resp.status(), reqwest::StatusCode::BAD_REQUEST);
    assert!(resp.text().await.expect("body").contains("must be before"));
    let resp = http()
        .get(format!("{base}/api/v1/report?format=pdf"))
        .send()
        .await
        .expect("GET");
    assert_eq!(resp.status(), reqwest::StatusCode::BAD_REQUEST);
    // Bounded: a window over the limit is refused with what to do.
    let resp = http()
        .get(format!(
            "{base}/api/v1/report?from=2020-01-01T00:00:00Z&to=2026-01-01T00:00:00Z"
        ))
        .send()
        .await
        .expect("GET");
    assert_eq!(resp.status(), reqwest::StatusCode::BAD_REQUEST);
    assert!(resp.text().await.expect("body").contains("narrow from/to"));
}
