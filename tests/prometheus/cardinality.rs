//! Series per election in a real scrape (issue 16): at most
//! [`MAX_SERIES_PER_ELECTION`] by default, the term durations and term ends
//! fleet-wide; `--per-election-detail` (or its environment variable) brings
//! the per-election histogram and term ends back.

use std::collections::{BTreeMap, BTreeSet};

use crate::support::{Etcd, Serve};
use crate::{lead, name};
use tenure::election::Client;

/// The most series one election may have by default.
pub(crate) const MAX_SERIES_PER_ELECTION: usize = 12;

/// Every series of a scrape that has an `election` label, by election:
/// `name{labels}` as rendered (labels in name order, election included).
fn series_per_election(text: &str) -> BTreeMap<String, BTreeSet<String>> {
    let mut out: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
    for line in text
        .lines()
        .filter(|l| !l.starts_with('#') && !l.is_empty())
    {
        let (series, _value) = line.rsplit_once(' ').expect("a sample line");
        let Some(labels) = series.split_once('{').map(|(_, l)| l) else {
            continue;
        };
        let election = labels
            .split("election=\"")
            .nth(1)
            .and_then(|rest| rest.split('"').next());
        if let Some(e) = election {
            out.entry(e.to_owned())
                .or_default()
                .insert(series.to_owned());
        }
    }
    out
}

async fn revision(etcd: &Etcd) -> i64 {
    let mut raw = etcd.client().await;
    raw.get("any", None)
        .await
        .expect("get")
        .header()
        .expect("header")
        .revision()
}

/// Waits until `serve`'s scrape shows `series` (the current lease is
/// sampled about every second).
async fn await_series(serve: &Serve, series: &str) -> String {
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(20);
    loop {
        let text = serve.metrics().await;
        if text.lines().any(|l| l.starts_with(series)) {
            return text;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "no {series} in:\n{text}"
        );
        tokio::time::sleep(std::time::Duration::from_millis(100)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn at_most_12_series_per_election_by_default_and_the_detail_flag_adds_the_histogram() {
    let etcd = Etcd::start().await;
    let dir = tempfile::tempdir().expect("tempdir");
    let endpoints = [etcd.endpoint()];
    let lean = Serve::start(&endpoints, &dir.path().join("lean.db"), &[], &[]).await;
    let flag = Serve::start(
        &endpoints,
        &dir.path().join("flag.db"),
        &["--per-election-detail"],
        &[],
    )
    .await;
    let env = Serve::start(
        &endpoints,
        &dir.path().join("env.db"),
        &[],
        &[("TENURE_PER_ELECTION_DETAIL", "true")],
    )
    .await;
    // Snapshots loaded: every term below is seen start to end (and so has
    // a duration).
    for serve in [&lean, &flag, &env] {
        serve.ready().await;
    }
    let c = Client::connect(&endpoints, "").await.expect("connect");

    // `busy` gets every kind of series: terms that end resigned and
    // deleted (and so durations), fence checks accepted and refused, a
    // current leader with a sampled lease. `quiet` leads once and resigns.
    let a = lead(&c, "busy", "a").await;
    let t_a = a.token();
    assert!(a.fence("db").await.expect("fence").accepted);
    a.resign().await.expect("resign a");
    let b = lead(&c, "busy", "b").await;
    assert!(b.fence("db").await.expect("fence").accepted);
    let refused = c.fence(&name("busy"), "db", t_a).await.expect("fence");
    assert!(!refused.accepted, "a's token is stale: {refused:?}");
    c.depose(&name("busy")).await.expect("depose b");
    drop(b);
    let _d = lead(&c, "busy", "d").await;
    lead(&c, "quiet", "q")
        .await
        .resign()
        .await
        .expect("resign q");
    // `steady` leads and does nothing else.
    let _s = lead(&c, "steady", "s").await;
    let rev = revision(&etcd).await;

    let lease = r#"tenure_election_lease_remaining_seconds{election="busy"}"#;
    let steady_lease = r#"tenure_election_lease_remaining_seconds{election="steady"}"#;
    let mut scrapes = Vec::new();
    for serve in [&lean, &flag, &env] {
        serve.caught_up(rev).await;
        await_series(serve, steady_lease).await;
        scrapes.push(await_series(serve, lease).await);
    }

    // Default: every election at most 12 series, `busy` exactly these 12.
    let per = series_per_election(&scrapes[0]);
    assert_eq!(per.keys().collect::<Vec<_>>(), ["busy", "quiet", "steady"]);
    for (election, series) in &per {
        assert!(
            series.len() <= MAX_SERIES_PER_ELECTION,
            "{election} has {} series by default (at most {MAX_SERIES_PER_ELECTION}):\n{series:#?}",
            series.len()
        );
    }
    let busy: BTreeSet<&str> = per["busy"].iter().map(String::as_str).collect();
    let expected = BTreeSet::from([
        r#"tenure_election_fencing_token{election="busy"}"#,
        r#"tenure_election_has_leader{election="busy"}"#,
        r#"tenure_election_leader_changes_total{election="busy"}"#,
        r#"tenure_election_leader_info{election="busy",holder="d"}"#,
        r#"tenure_election_leaderless_seconds_total{election="busy"}"#,
        r#"tenure_election_lease_remaining_seconds{election="busy"}"#,
        r#"tenure_election_term_start_timestamp_seconds{election="busy"}"#,
        r#"tenure_fencing_checks_total{election="busy",result="accepted"}"#,
        r#"tenure_fencing_checks_total{election="busy",result="refused"}"#,
        r#"tenure_fencing_refusals_total{election="busy",reason="no_leader"}"#,
        r#"tenure_fencing_refusals_total{election="busy",reason="stale_token"}"#,
        r#"tenure_fencing_refusals_total{election="busy",reason="term_ended"}"#,
    ]);
    assert_eq!(busy, expected, "the series of busy by default");
    assert_eq!(expected.len(), MAX_SERIES_PER_ELECTION);
    // Only series that say something (issue 23): `quiet` never fenced (no
    // fence series) and has no leader (no leader_info, no lease);
    // `steady` never fenced and never lost a leader (no leaderless time).
    let series = |e: &str| -> BTreeSet<String> {
        per[e]
            .iter()
            .map(|s| s.split('{').next().unwrap_or_default().to_owned())
            .collect()
    };
    assert_eq!(
        series("quiet"),
        BTreeSet::from(
            [
                "tenure_election_fencing_token",
                "tenure_election_has_leader",
                "tenure_election_leader_changes_total",
                "tenure_election_leaderless_seconds_total",
                "tenure_election_term_start_timestamp_seconds",
            ]
            .map(String::from)
        ),
        "the series of quiet"
    );
    assert_eq!(
        series("steady"),
        BTreeSet::from(
            [
                "tenure_election_fencing_token",
                "tenure_election_has_leader",
                "tenure_election_leader_changes_total",
                "tenure_election_leader_info",
                "tenure_election_lease_remaining_seconds",
                "tenure_election_term_start_timestamp_seconds",
            ]
            .map(String::from)
        ),
        "the series of steady"
    );

    // Part of a scrape: the fleet-wide families alone, or some elections.
    let get = |path: &str| {
        let url = lean.url(path);
        async move {
            let r = reqwest::get(url).await.expect("GET");
            (r.status().as_u16(), r.text().await.expect("body"))
        }
    };
    let (status, fleet) = get("/metrics?scope=fleet").await;
    assert_eq!(status, 200);
    assert!(series_per_election(&fleet).is_empty(), "{fleet}");
    assert_eq!(
        crate::support::metric_value(&fleet, "tenure_watch_elections"),
        Some(3.0)
    );
    assert_eq!(
        crate::support::metric_value(&fleet, r#"tenure_term_ends_total{cause="resigned"}"#),
        Some(2.0)
    );
    let (status, some) = get("/metrics?match=bu%2A").await;
    assert_eq!(status, 200);
    assert_eq!(
        series_per_election(&some).keys().collect::<Vec<_>>(),
        ["busy"]
    );
    assert_eq!(series_per_election(&some)["busy"], per["busy"]);
    assert!(some.contains("tenure_watch_elections 3"), "{some}");
    let (status, bad) = get("/metrics?scope=everything").await;
    assert_eq!(status, 400, "{bad}");
    assert!(bad.contains("scope=fleet"), "{bad}");

    // The term durations and ends are fleet-wide: a, b and q ended (three
    // terms watched whole, so three durations).
    let v = |text: &str, s: &str| crate::support::metric_value(text, s);
    let lean_text = &scrapes[0];
    assert_eq!(
        v(lean_text, "tenure_term_duration_seconds_count"),
        Some(3.0)
    );
    assert_eq!(
        v(lean_text, r#"tenure_term_ends_total{cause="resigned"}"#),
        Some(2.0)
    );
    assert_eq!(
        v(lean_text, r#"tenure_term_ends_total{cause="deleted"}"#),
        Some(1.0)
    );
    assert!(!lean_text.contains("tenure_election_term_duration_seconds"));
    assert!(!lean_text.contains("tenure_election_term_ends_total"));

    // The flag, and its environment variable: the per-election histogram
    // (15 buckets, +Inf, sum, count), term ends by cause (7) and the
    // waiting candidates (1) are back.
    for (how, text) in [("--per-election-detail", &scrapes[1]), ("env", &scrapes[2])] {
        let per = series_per_election(text);
        let busy = &per["busy"];
        assert_eq!(
            busy.len(),
            MAX_SERIES_PER_ELECTION + 18 + 7 + 1,
            "{how}: {busy:#?}"
        );
        assert!(
            busy.contains(r#"tenure_election_candidates_waiting{election="busy"}"#),
            "{how}: {busy:#?}"
        );
        let hist: Vec<&String> = busy
            .iter()
            .filter(|s| s.starts_with("tenure_election_term_duration_seconds"))
            .collect();
        assert_eq!(hist.len(), 18, "{how}: {hist:#?}");
        assert_eq!(
            v(
                text,
                r#"tenure_election_term_duration_seconds_count{election="busy"}"#
            ),
            Some(2.0),
            "{how}"
        );
        assert_eq!(
            v(
                text,
                r#"tenure_election_term_ends_total{cause="deleted",election="busy"}"#
            ),
            Some(1.0),
            "{how}"
        );
        // The fleet-wide families stay.
        assert_eq!(v(text, "tenure_term_duration_seconds_count"), Some(3.0));
        // Every default series is there too, unchanged in name.
        for s in &expected {
            assert!(busy.contains(*s), "{how}: no {s}");
        }
    }

    for serve in [lean, flag, env] {
        assert_eq!(serve.stop().await, Some(0));
    }
}

#[test]
fn the_scrape_parser_finds_elections_in_any_label_position() {
    let text = "# HELP x y\n\
        tenure_a{election=\"e1\"} 1\n\
        tenure_b{cause=\"resigned\",election=\"e1\"} 0\n\
        tenure_c 3\n\
        tenure_d{election=\"e2\",holder=\"h\"} 1\n";
    let per = series_per_election(text);
    assert_eq!(per["e1"].len(), 2);
    assert_eq!(per["e2"].len(), 1);
    assert_eq!(per.len(), 2);
}
