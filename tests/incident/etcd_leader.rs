//! The etcd leader killed while several elections run: recorded once,
//! re-elections on one `/timeline`, the report equal to the history.

use std::time::{Duration, Instant};

use serde_json::Value;

use crate::common::*;
use crate::support::{EtcdCluster, Serve};
use tenure::election::{Campaigned, Client, Leadership};
use tenure::events::now_ms;
use tenure::history::{format_ms, Query, Reader, TermRow};

/// The leaderless stretches of `[lo, hi)`, computed here on their own.
fn gaps(terms: &[TermRow], lo: i64, hi: i64) -> Vec<i64> {
    let mut covered: Vec<(i64, i64)> = terms
        .iter()
        .map(|t| {
            (
                t.started_at_ms.clamp(lo, hi),
                t.ended_at_ms.unwrap_or(hi).clamp(lo, hi),
            )
        })
        .collect();
    covered.sort();
    let mut out = Vec::new();
    let mut at = lo;
    for (a, b) in covered {
        if a > at {
            out.push(a - at);
        }
        at = at.max(b);
    }
    if hi > at {
        out.push(hi - at);
    }
    out
}

fn leader_changes(events: &Value) -> Vec<Value> {
    events["events"]
        .as_array()
        .expect("events")
        .iter()
        .filter(|e| e["type"] == "leader_changed")
        .cloned()
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn etcd_leader_killed_recorded_once_reelections_on_one_timeline_report_matches_history() {
    let mut cluster = EtcdCluster::start().await;
    let dir = tempfile::tempdir().expect("tempdir");
    let db = dir.path().join("h.db");
    let started = now_ms() - 1000;
    let serve = Serve::start(&cluster.endpoints(), &db, &[], &[]).await;
    serve.ready().await;

    // The poller records the current etcd leader (when it began: unknown).
    let ev_url = serve.url(&format!(
        "/api/v1/cluster/events?from={}",
        enc(&format_ms(started))
    ));
    let deadline = Instant::now() + Duration::from_secs(20);
    let first = loop {
        let changes = leader_changes(&get_json(&ev_url).await);
        if let Some(c) = changes.first() {
            assert_eq!(changes.len(), 1, "{changes:?}");
            break c.clone();
        }
        assert!(
            Instant::now() < deadline,
            "no etcd leader recorded: {:?}",
            serve.logs()
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    };
    assert!(first["not_before_ms"].is_null(), "{first}");
    let leader = cluster.leader_index().await;
    assert_eq!(
        first["leader_id"].as_str(),
        Some(format!("{:x}", cluster.member_id(leader)).as_str()),
        "{first}"
    );
    let term_before = first["raft_term"].as_u64().expect("raft term");

    // Each election: the first holder talks only to the etcd leader, the
    // second waits on the other members.
    let on_leader = Client::connect(&[cluster.endpoint(leader)], "")
        .await
        .expect("client");
    let others = Client::connect(&cluster.endpoints_except(leader), "")
        .await
        .expect("client");
    let mut firsts: Vec<Leadership> = Vec::new();
    for e in ELECTIONS {
        match on_leader
            .campaign(&name(e), &format!("{}-a", &e[9..]), &opts())
            .await
        {
            Ok(Campaigned::Leader(l)) => firsts.push(l),
            Ok(Campaigned::Held(h)) => panic!("{e} held by {h:?}"),
            Err(err) => panic!("campaign {e}: {err}"),
        }
    }
    let mut waiting = Vec::new();
    for e in ELECTIONS {
        let c = others.clone();
        waiting.push(tokio::spawn(async move {
            c.campaign_wait(
                &name(e),
                &format!("{}-b", &e[9..]),
                &opts(),
                Some(Duration::from_secs(60)),
            )
            .await
        }));
    }
    serve
        .caught_up(firsts.iter().map(|l| l.token()).max().expect("tokens"))
        .await;
    tokio::time::sleep(Duration::from_millis(500)).await;

    let killed_at = now_ms();
    cluster.kill(leader).await;
    let mut seconds = Vec::new();
    for w in waiting {
        seconds.push(
            w.await
                .expect("join")
                .expect("re-elected on the surviving members"),
        );
    }
    drop(firsts);
    serve
        .caught_up(seconds.iter().map(|l| l.token()).max().expect("tokens"))
        .await;
    let new_leader = cluster.leader_index().await;
    assert_ne!(new_leader, leader);

    // The leader change: recorded once, with the new leader, after the kill.
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        let changes = leader_changes(&get_json(&ev_url).await);
        if changes.len() >= 2 {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "leader change not recorded: {changes:?}"
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    // A few more polls: nothing recorded twice.
    tokio::time::sleep(Duration::from_secs(5)).await;
    let all = get_json(&ev_url).await;
    let changes = leader_changes(&all);
    // Each change once: raft terms strictly rising. Usually exactly two
    // (the first seen, the kill's); a starved survivor on a loaded machine
    // can hold one more election, which is then recorded too.
    let terms: Vec<u64> = changes
        .iter()
        .map(|c| c["raft_term"].as_u64().expect("term"))
        .collect();
    assert!(terms.windows(2).all(|w| w[0] < w[1]), "{changes:#?}");
    let change = &changes[1];
    assert!(
        change["raft_term"].as_u64().expect("term") > term_before,
        "{change}"
    );
    assert_eq!(change["previous_raft_term"].as_u64(), Some(term_before));
    assert_eq!(
        changes[changes.len() - 1]["leader_id"].as_str(),
        Some(format!("{:x}", cluster.member_id(new_leader)).as_str()),
        "{changes:#?}"
    );
    assert!(change["at_ms"].as_i64().expect("at") >= killed_at);
    let nb = change["not_before_ms"]
        .as_i64()
        .expect("bounded: seen by the poller");
    assert!(nb <= change["at_ms"].as_i64().expect("at"));
    // The killed member is said unreachable once (a live member whose
    // status answer was late on a loaded machine may be said so too).
    let killed = format!("{:x}", cluster.member_id(leader));
    let unreachable: Vec<&Value> = all["events"]
        .as_array()
        .expect("events")
        .iter()
        .filter(|e| e["type"] == "member_unreachable")
        .filter(|e| e["member_id"].as_str() == Some(killed.as_str()))
        .collect();
    assert_eq!(unreachable.len(), 1, "{all:#?}");
    assert_eq!(
        all["events"]
            .as_array()
            .expect("events")
            .iter()
            .filter(|e| e["type"] == "serve_started")
            .count(),
        1
    );

    // One timeline: every election's lane, both terms each, the change marked.
    let to = now_ms();
    let window = format!(
        "from={}&to={}&match={}",
        enc(&format_ms(started)),
        enc(&format_ms(to)),
        enc("incident/*")
    );
    let page = get_text(&serve.url(&format!("/timeline?{window}"))).await;
    for e in ELECTIONS {
        assert!(
            page.contains(&format!("data-election=\"{e}\"")),
            "{e} lane missing"
        );
    }
    assert!(
        page.contains("data-type=\"leader_changed\""),
        "no etcd leader marker"
    );
    assert!(page.contains("id=\"lanes-total\">3<"), "three lanes");
    for l in &seconds {
        assert!(page.contains(&format!("data-token=\"{}\"", l.token())));
    }
    // The per-election page draws the etcd events too.
    let one = get_text(&serve.url(&format!(
        "/elections/incident%2Forders?from={}&to={}",
        enc(&format_ms(started)),
        enc(&format_ms(to))
    )))
    .await;
    assert!(one.contains("data-type=\"leader_changed\""));

    // The report, field by field against the history, read here directly.
    let reader = Reader::open(&db).expect("history");
    let q = Query {
        from_ms: Some(started),
        to_ms: Some(to),
        limit: None,
    };
    let report = get_json(&serve.url(&format!("/api/v1/report?{window}&format=json"))).await;
    let md = get_text(&serve.url(&format!("/api/v1/report?{window}&format=md"))).await;
    let elections = report["elections"].as_array().expect("elections");
    assert_eq!(elections.len(), 3);
    for e in ELECTIONS {
        let terms = reader.terms(e, &q).expect("terms");
        assert_eq!(terms.len(), 2, "{e}: {terms:?}");
        let known = reader
            .terms(
                e,
                &Query {
                    limit: Some(1),
                    ..Query::default()
                },
            )
            .expect("first")[0]
            .started_at_ms;
        let stretches = gaps(&terms, known.max(started), to);
        let total: i64 = stretches.iter().sum();
        let longest = stretches.iter().copied().max().unwrap_or(0);
        let r = elections
            .iter()
            .find(|x| x["election"] == e)
            .unwrap_or_else(|| panic!("{e} not in the report"));
        // About one run in four the watcher is reconnecting (it talked to
        // the killed member) when the handover happens: the old term's end
        // and the new term's start are then replayed with one arrival time.
        let rt = r["terms"].as_array().expect("terms");
        let replayed = rt[0]["end_replayed"] == true || rt[1]["start_replayed"] == true;
        println!("[figure] {e}: handover replayed: {replayed}");
        let handover = terms[1].started_at_ms - terms[0].ended_at_ms.expect("ended");
        if !replayed {
            // The re-election took a while: the first term's lease had to run out.
            assert!(handover > 0 && total >= handover, "{e}: {handover} {total}");
        }
        let cause = terms[0].end_cause.map(|c| c.to_string());
        assert!(
            matches!(cause.as_deref(), Some("expired" | "unknown")),
            "{e}: {terms:?}"
        );

        let (least, most) = (
            r["leaderless_min_ms"].as_i64().expect("least"),
            r["leaderless_max_ms"].as_i64().expect("most"),
        );
        assert!(
            least <= total && total <= most,
            "{e}: {least} {total} {most}"
        );
        if replayed {
            // Unknown, not a confident number.
            assert!(r["leaderless_ms"].is_null(), "{r:#}");
            assert!(r["longest_leaderless_ms"].is_null(), "{r:#}");
            assert!(r["leaderless_stretches"].is_null(), "{r:#}");
        } else {
            assert_eq!((least, most), (total, total), "{e}");
            assert_eq!(r["leaderless_ms"].as_i64(), Some(total), "{e}");
            assert_eq!(r["longest_leaderless_ms"].as_i64(), Some(longest), "{e}");
            assert_eq!(
                r["leaderless_stretches"].as_u64(),
                Some(stretches.len() as u64)
            );
        }
        assert_eq!(r["changes"].as_u64(), Some(2));
        assert_eq!(rt.len(), terms.len());
        for (a, b) in rt.iter().zip(&terms) {
            assert_eq!(a["holder"].as_str(), Some(b.holder.as_str()));
            assert_eq!(a["token"].as_i64(), Some(b.token));
            assert_eq!(a["start"].as_str(), Some(b.started_at.as_str()));
            assert_eq!(a["end"].as_str(), b.ended_at.as_deref());
            assert_eq!(
                a["cause"].as_str(),
                b.end_cause.map(|c| c.to_string()).as_deref()
            );
        }

        // Markdown: the summary row and the term rows, cell by cell.
        let summary = md
            .lines()
            .find(|l| l.starts_with(&format!("| {e} |")))
            .unwrap_or_else(|| panic!("{e}: no summary row in\n{md}"));
        let (total_cell, longest_cell, stretches_cell) = if replayed {
            (
                format!("unknown ({least}–{most} ms)"),
                "unknown".to_owned(),
                "unknown".to_owned(),
            )
        } else {
            (
                format!("{total} ms"),
                format!("{longest} ms"),
                stretches.len().to_string(),
            )
        };
        assert_eq!(
            cells(summary),
            vec![
                e.to_owned(),
                "2".to_owned(),
                total_cell.clone(),
                longest_cell.clone(),
                stretches_cell,
                "0".to_owned()
            ]
        );
        let section = md
            .split(&format!("\n## {e}\n"))
            .nth(1)
            .unwrap_or_else(|| panic!("{e}: no section"));
        let section = section.split("\n## ").next().unwrap_or_default();
        let rows: Vec<Vec<String>> = section
            .lines()
            .filter(|l| l.starts_with("| ") && !l.starts_with("| holder"))
            .map(cells)
            .collect();
        assert_eq!(rows.len(), terms.len(), "{section}");
        for (row, t) in rows.iter().zip(&terms) {
            assert_eq!(row[0], t.holder);
            assert_eq!(row[1], t.token.to_string());
            // A replayed time says so after the time itself.
            assert!(row[2].starts_with(&t.started_at), "{row:?}");
            assert!(
                row[3].starts_with(&t.ended_at.clone().unwrap_or_else(|| "leading".into())),
                "{row:?}"
            );
            assert_eq!(
                row[2].contains("(replayed: "),
                replayed && t.token == terms[1].token,
                "{row:?}"
            );
            assert_eq!(
                row[4],
                t.end_cause
                    .map_or_else(|| "—".to_owned(), |c| c.to_string())
            );
        }
        assert!(section.contains(&format!(
            "Leaderless: {total_cell} in total, longest {longest_cell}"
        )));
    }
    assert!(md.contains("| leader_changed |"), "{md}");
    let etcd = report["etcd_events"].as_array().expect("etcd events");
    assert_eq!(
        etcd.iter()
            .filter(|e| e["type"] == "leader_changed")
            .count(),
        2
    );

    drop(seconds);
    serve.stop().await;
}
