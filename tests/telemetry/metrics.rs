//! Metrics: exact values from the script, families, leaderless time,
//! leader info, lease series; by default and with per-election detail.

use tenure::election::KeyLayout;
use tenure::events::*;
use tenure::telemetry::*;

use crate::exposition::Exposition;
use crate::script::*;

#[test]
fn scripted_updates_give_exact_values() {
    let base = now_ms() - 3600 * S;
    let (m, events, db_end) = scripted_metrics(base);
    let before = now_ms();
    let x = Exposition::new(m.render());
    let db = [("election", "db")];
    let web = [("election", "web")];

    assert_eq!(x.value("tenure_election_has_leader", &db), 0.0);
    assert_eq!(x.value("tenure_election_has_leader", &web), 1.0);
    // web's Lease: lapsed, renewed every 2 s; db has no Lease series.
    assert_eq!(x.value("tenure_election_lease_lapsed", &web), 1.0);
    assert_eq!(
        x.value("tenure_election_lease_renew_interval_seconds", &web),
        2.0
    );
    assert_eq!(x.value("tenure_leases_lapsed", &[]), 1.0);
    assert_eq!(x.value("tenure_election_leader_changes_total", &db), 2.0);
    assert_eq!(x.value("tenure_election_leader_changes_total", &web), 2.0);
    // leaderless: the last token stays
    assert_eq!(x.value("tenure_election_fencing_token", &db), 15.0);
    assert_eq!(x.value("tenure_election_fencing_token", &web), 8.0);
    assert_eq!(
        x.value("tenure_election_term_start_timestamp_seconds", &db),
        (base + 90 * S) as f64 / 1000.0
    );
    assert_eq!(
        x.value("tenure_election_term_start_timestamp_seconds", &web),
        (base + 10 * S) as f64 / 1000.0
    );

    // 30 s between alice and bob, then everything since bob's lease expired.
    let leaderless = x.value("tenure_election_leaderless_seconds_total", &db);
    let (lo, hi) = (
        30.0 + (before - db_end) as f64 / 1000.0,
        30.0 + (now_ms() - db_end) as f64 / 1000.0,
    );
    assert!(lo >= 30.0 + 3480.0, "{lo}");
    assert!(
        (lo - 0.001..=hi + 0.001).contains(&leaderless),
        "leaderless {leaderless}, expected within [{lo}, {hi}]"
    );
    assert_eq!(
        x.value("tenure_election_leaderless_seconds_total", &web),
        0.0
    );

    // Durations and ends are fleet-wide by default (issue 16; until then
    // these were the per-election values, now in
    // `per_election_detail_adds_the_histogram_and_term_ends_per_election`):
    // 60 s and 30 s of db, 1 s of tmp (forgotten since: counters keep it);
    // web's snapshot term is not observed.
    let h = "tenure_term_duration_seconds";
    assert_eq!(x.value(&format!("{h}_count"), &[]), 3.0);
    assert_eq!(x.value(&format!("{h}_sum"), &[]), 91.0);
    for (le, n) in [
        ("1", 1.0),
        ("15", 1.0),
        ("30", 2.0),
        ("60", 3.0),
        ("+Inf", 3.0),
    ] {
        assert_eq!(x.value(&format!("{h}_bucket"), &[("le", le)]), n, "{le}");
    }
    let ends = "tenure_term_ends_total";
    for (cause, n) in [
        ("resigned", 1.0),
        ("expired", 1.0),
        ("deleted", 1.0),
        ("superseded", 1.0),
        ("unknown", 0.0),
    ] {
        assert_eq!(x.value(ends, &[("cause", cause)]), n, "{cause}");
    }
    // No per-election histogram or term ends by default.
    for name in DETAIL_METRIC_NAMES {
        assert!(!x.text.contains(name), "{name} is exposed by default");
    }

    // leader_info: only web's current holder; alice, alice-v2, bob, w1 gone.
    let info = x.matching("tenure_election_leader_info", &[]);
    assert_eq!(info.len(), 1, "{info:?}");
    assert_eq!(
        x.value(
            "tenure_election_leader_info",
            &[("election", "web"), ("holder", "w2")]
        ),
        1.0
    );

    // lease: none for leaderless db, web's last sample.
    assert_eq!(x.get("tenure_election_lease_remaining_seconds", &db), None);
    assert_eq!(
        x.value("tenure_election_lease_remaining_seconds", &web),
        9.0
    );

    let refusals = "tenure_fencing_refusals_total";
    assert_eq!(
        x.value(refusals, &[("election", "db"), ("reason", "no_leader")]),
        1.0
    );
    assert_eq!(
        x.value(refusals, &[("election", "db"), ("reason", "stale_token")]),
        0.0
    );
    assert_eq!(
        x.value(refusals, &[("election", "db"), ("reason", "term_ended")]),
        0.0
    );
    let checks = "tenure_fencing_checks_total";
    assert_eq!(
        x.value(checks, &[("election", "db"), ("result", "accepted")]),
        2.0
    );
    // web never used the fence: no fence series at all (issue 23).
    assert!(x.matching(checks, &web).is_empty());
    assert!(x.matching(refusals, &web).is_empty());
    assert_eq!(
        x.value(checks, &[("election", "db"), ("result", "refused")]),
        1.0
    );

    assert_eq!(x.value("tenure_watch_events_total", &[]), events as f64);
    let restarts = "tenure_watch_restarts_total";
    for (reason, n) in [
        ("compacted", 1.0),
        ("stream_error", 2.0),
        ("stalled", 0.0),
        ("cancelled", 0.0),
    ] {
        assert_eq!(x.value(restarts, &[("reason", reason)]), n, "{reason}");
    }
    assert_eq!(x.value("tenure_watch_revision", &[]), 22.0);
    assert_eq!(x.value("tenure_etcd_up", &[]), 1.0);
    assert_eq!(x.value("tenure_history_gaps_total", &[]), 1.0);
    assert_eq!(x.value("tenure_watch_elections_overflow_total", &[]), 1.0);
    assert_eq!(x.value("tenure_watch_ignored_keys_total", &[]), 2.0);
    assert_eq!(x.value("tenure_watch_elections", &[]), 2.0);
    assert_eq!(
        x.value(
            "tenure_build_info",
            &[("version", env!("CARGO_PKG_VERSION"))]
        ),
        1.0
    );

    // Forgotten, overflowed and unknown elections have no series at all;
    // the gap (election "") made none either.
    for s in &x.samples {
        let e = s.labels.get("election").map(String::as_str);
        assert!(
            matches!(e, None | Some("db") | Some("web")),
            "unexpected series {s:?}"
        );
    }
    assert!(!x.text.contains("tmp"), "{}", x.text);
    assert!(!x.text.contains("nobody-knows-me"));
}

/// The per-election values of the opt-in families, exactly as the default
/// exposition had them before issue 16.
fn assert_per_election_detail(x: &Exposition) {
    let db = [("election", "db")];
    let web = [("election", "web")];
    // durations: 60 s and 30 s; web's snapshot term is not observed.
    let h = "tenure_election_term_duration_seconds";
    assert_eq!(x.value(&format!("{h}_count"), &db), 2.0);
    assert_eq!(x.value(&format!("{h}_sum"), &db), 90.0);
    assert_eq!(
        x.value(&format!("{h}_bucket"), &[("election", "db"), ("le", "15")]),
        0.0
    );
    assert_eq!(
        x.value(&format!("{h}_bucket"), &[("election", "db"), ("le", "30")]),
        1.0
    );
    assert_eq!(
        x.value(&format!("{h}_bucket"), &[("election", "db"), ("le", "60")]),
        2.0
    );
    assert_eq!(
        x.value(
            &format!("{h}_bucket"),
            &[("election", "db"), ("le", "+Inf")]
        ),
        2.0
    );
    assert_eq!(x.value(&format!("{h}_count"), &web), 0.0);

    let ends = "tenure_election_term_ends_total";
    for (cause, n) in [
        ("resigned", 1.0),
        ("expired", 1.0),
        ("deleted", 0.0),
        ("superseded", 0.0),
        ("unknown", 0.0),
    ] {
        assert_eq!(
            x.value(ends, &[("election", "db"), ("cause", cause)]),
            n,
            "{cause}"
        );
    }
    assert_eq!(
        x.value(ends, &[("election", "web"), ("cause", "superseded")]),
        1.0
    );
}

#[test]
fn per_election_detail_adds_the_histogram_and_term_ends_per_election() {
    let base = now_ms() - 3600 * S;
    let (lean, _, _) = scripted_metrics(base);
    let (detailed, _, _) = scripted_metrics_with(
        base,
        MetricsOptions {
            per_election_detail: true,
            ..MetricsOptions::default()
        },
    );
    assert!(detailed.options().per_election_detail);
    let at = now_ms();
    let x = Exposition::new(detailed.render_at(at));
    assert_per_election_detail(&x);
    // web, which never used the fence: 7 default series (12 but the 5 of
    // the fence) + 2 (its Lease: lapsed, renew interval) + 18 (histogram)
    // + 7 (term ends) + 1 (candidates waiting).
    let web: Vec<_> = x
        .samples
        .iter()
        .filter(|s| s.labels.get("election").map(String::as_str) == Some("web"))
        .collect();
    assert_eq!(web.len(), 35, "{web:#?}");
    // Everything else is the default exposition, line for line.
    let is_detail = |l: &&str| {
        DETAIL_METRIC_NAMES.iter().any(|n| {
            l.starts_with(n)
                || l.starts_with(&format!("# HELP {n} "))
                || l.starts_with(&format!("# TYPE {n} "))
        })
    };
    let rest: Vec<&str> = x.text.lines().filter(|l| !is_detail(l)).collect();
    let default = lean.render_at(at);
    assert_eq!(rest, default.lines().collect::<Vec<_>>());
}

#[test]
fn every_family_has_help_and_a_type() {
    let (m, _, _) = scripted_metrics(now_ms() - 3600 * S);
    let x = Exposition::new(m.render());
    let help = x.help();
    let types = x.types();
    let rendered: Vec<&String> = types.keys().collect();
    let expected: Vec<&str> = METRIC_NAMES.to_vec();
    assert_eq!(
        rendered.iter().map(|s| s.as_str()).collect::<Vec<_>>(),
        expected,
        "every family is rendered after the script, and nothing else"
    );
    for name in METRIC_NAMES {
        let h = help
            .get(*name)
            .unwrap_or_else(|| panic!("no HELP for {name}"));
        assert!(h.len() > 20, "HELP of {name} says little: {h:?}");
        assert!(name.starts_with("tenure_"));
    }
    let ty = |n: &str| types.get(n).map(String::as_str);
    // (The fleet-wide histogram since issue 16; the per-election one is
    // checked with detail below.)
    assert_eq!(ty("tenure_term_duration_seconds"), Some("histogram"));
    for counter in METRIC_NAMES.iter().filter(|n| n.ends_with("_total")) {
        assert_eq!(ty(counter), Some("counter"), "{counter}");
    }
    for gauge in [
        "tenure_election_has_leader",
        "tenure_election_fencing_token",
        "tenure_election_leader_info",
        "tenure_election_lease_remaining_seconds",
        "tenure_watch_revision",
        "tenure_etcd_up",
        "tenure_watch_elections",
        "tenure_build_info",
    ] {
        assert_eq!(ty(gauge), Some("gauge"), "{gauge}");
    }
    assert_eq!(CONTENT_TYPE, "text/plain; version=0.0.4");

    // With per-election detail: the opt-in families too, nothing else.
    let (m, _, _) = scripted_metrics_with(
        now_ms() - 3600 * S,
        MetricsOptions {
            per_election_detail: true,
            ..MetricsOptions::default()
        },
    );
    let x = Exposition::new(m.render());
    let types = x.types();
    let mut expected: Vec<&str> = METRIC_NAMES
        .iter()
        .chain(DETAIL_METRIC_NAMES)
        .copied()
        .collect();
    expected.sort_unstable();
    assert_eq!(
        types.keys().map(String::as_str).collect::<Vec<_>>(),
        expected
    );
    assert_eq!(
        types
            .get("tenure_election_term_duration_seconds")
            .map(String::as_str),
        Some("histogram")
    );
    assert_eq!(
        types
            .get("tenure_election_term_ends_total")
            .map(String::as_str),
        Some("counter")
    );
    for name in DETAIL_METRIC_NAMES {
        assert!(x.help().get(*name).is_some_and(|h| h.len() > 20), "{name}");
    }
}

#[test]
fn restarts_are_zero_before_any_update() {
    let m = Metrics::new().unwrap();
    let x = Exposition::new(m.render());
    for reason in RestartReason::ALL {
        assert_eq!(
            x.value(
                "tenure_watch_restarts_total",
                &[("reason", reason.as_str())]
            ),
            0.0
        );
    }
    assert_eq!(x.value("tenure_watch_elections", &[]), 0.0);
    assert!(x.matching("tenure_election_has_leader", &[]).is_empty());
}

#[test]
fn leaderless_seconds_grow_while_leaderless_and_stop_when_a_term_starts() {
    let m = Metrics::new().unwrap();
    let now = now_ms();
    let end = now - 10 * S;
    m.apply(&batch(
        1,
        vec![ev(1, end - 50 * S, "db", started(1, "a", 1, None))],
    ));
    m.apply(&batch(
        2,
        vec![ev(
            2,
            end,
            "db",
            ended(1, "a", 1, EndCause::Expired, end - 50 * S),
        )],
    ));
    let name = "tenure_election_leaderless_seconds_total";
    let db = [("election", "db")];

    // The wall clock: a term ended 10 s ago.
    let first = Exposition::new(m.render()).value(name, &db);
    assert!(first >= 10.0, "{first}");
    assert!(first < 10.0 + 60.0, "{first}");
    let second = Exposition::new(m.render()).value(name, &db);
    assert!(second >= first, "{second} < {first}");

    // Deterministic clock from here on.
    let t = now + 100 * S;
    let at = |ms: i64| Exposition::new(m.render_at(ms)).value(name, &db);
    assert_eq!(at(t), (t - end) as f64 / 1000.0);
    assert_eq!(at(t + 15 * S), (t + 15 * S - end) as f64 / 1000.0);
    // A clock going back adds nothing and takes nothing away.
    assert_eq!(at(t + 5 * S), (t + 15 * S - end) as f64 / 1000.0);
    // Someone leads from t + 20 s: 5 more seconds, then no growth.
    m.apply(&batch(
        3,
        vec![ev(3, t + 20 * S, "db", started(3, "b", 3, None))],
    ));
    let frozen = (t + 20 * S - end) as f64 / 1000.0;
    assert_eq!(at(t + 30 * S), frozen);
    assert_eq!(at(t + 3600 * S), frozen);
    assert_eq!(
        Exposition::new(m.render_at(t + 3600 * S)).value("tenure_election_has_leader", &db),
        1.0
    );
}

#[test]
fn leader_info_follows_the_holder_and_is_removed_when_the_term_ends() {
    let m = Metrics::new().unwrap();
    let t = now_ms();
    let info = "tenure_election_leader_info";
    m.apply(&batch(1, vec![ev(1, t, "db", started(1, "a", 1, None))]));
    m.apply(&batch(
        2,
        vec![ev(
            2,
            t,
            "db",
            EventKind::LeaderValueChanged {
                token: 1,
                holder: "b".into(),
                previous: "a".into(),
            },
        )],
    ));
    // A proclaim of another term's token changes nothing.
    m.apply(&batch(
        3,
        vec![ev(
            3,
            t,
            "db",
            EventKind::LeaderValueChanged {
                token: 99,
                holder: "zzz".into(),
                previous: "b".into(),
            },
        )],
    ));
    let x = Exposition::new(m.render());
    assert_eq!(x.matching(info, &[]).len(), 1);
    assert_eq!(x.value(info, &[("election", "db"), ("holder", "b")]), 1.0);
    assert_eq!(
        x.value(
            "tenure_election_leader_changes_total",
            &[("election", "db")]
        ),
        1.0
    );

    // The same term seen again after a resync, its proclaim missed: the
    // holder moves, no new term is counted.
    m.apply(&batch(
        3,
        vec![ev(
            3,
            t,
            "db",
            EventKind::TermStarted {
                token: 1,
                holder: "b2".into(),
                lease_id: 1,
                layout: KeyLayout::Single,
                previous_holder: None,
                from_snapshot: true,
            },
        )],
    ));
    let x = Exposition::new(m.render());
    assert_eq!(x.matching(info, &[]).len(), 1, "{}", x.text);
    assert_eq!(x.value(info, &[("election", "db"), ("holder", "b2")]), 1.0);
    assert_eq!(
        x.value(
            "tenure_election_leader_changes_total",
            &[("election", "db")]
        ),
        1.0
    );

    // Superseded: the old term's end and the new start in one batch.
    m.apply(&batch(
        4,
        vec![
            ev(4, t, "db", ended(1, "b2", 1, EndCause::Superseded, t)),
            ev(4, t, "db", started(4, "c", 4, Some("b2"))),
        ],
    ));
    let x = Exposition::new(m.render());
    assert_eq!(x.matching(info, &[]).len(), 1);
    assert_eq!(x.value(info, &[("election", "db"), ("holder", "c")]), 1.0);

    // A stale end of an older term leaves the current one alone.
    m.apply(&batch(
        5,
        vec![ev(5, t, "db", ended(1, "b", 1, EndCause::Unknown, t))],
    ));
    let x = Exposition::new(m.render());
    assert_eq!(x.value(info, &[("election", "db"), ("holder", "c")]), 1.0);
    assert_eq!(
        x.value("tenure_election_has_leader", &[("election", "db")]),
        1.0
    );

    m.apply(&batch(
        6,
        vec![ev(6, t, "db", ended(4, "c", 4, EndCause::Deleted, t))],
    ));
    let x = Exposition::new(m.render());
    assert!(x.matching(info, &[]).is_empty(), "{}", x.text);
    assert_eq!(
        x.value("tenure_election_has_leader", &[("election", "db")]),
        0.0
    );
}

#[test]
fn lease_series_comes_and_goes() {
    let m = Metrics::new().unwrap();
    let t = now_ms();
    let lease = "tenure_election_lease_remaining_seconds";
    let db = [("election", "db")];
    m.apply(&batch(1, vec![ev(1, t, "db", started(1, "a", 7, None))]));
    m.apply(&sampled("db", 7, Some(4)));
    assert_eq!(Exposition::new(m.render()).value(lease, &db), 4.0);
    m.apply(&sampled("db", 7, None)); // etcd forgot the lease
    assert_eq!(Exposition::new(m.render()).get(lease, &db), None);
    m.apply(&sampled("db", 7, Some(2)));
    assert_eq!(Exposition::new(m.render()).value(lease, &db), 2.0);
    m.apply(&batch(
        2,
        vec![ev(2, t, "db", ended(1, "a", 7, EndCause::Expired, t))],
    ));
    assert_eq!(Exposition::new(m.render()).get(lease, &db), None);
    m.apply(&sampled("db", 7, Some(1))); // late sample of the ended term
    assert_eq!(Exposition::new(m.render()).get(lease, &db), None);
}
