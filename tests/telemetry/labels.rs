//! Hostile label values, and metrics shared across threads.

use std::sync::Arc;

use tenure::election::FenceReason;
use tenure::events::*;
use tenure::telemetry::*;

use crate::exposition::Exposition;
use crate::script::*;

#[test]
fn hostile_labels_do_not_panic_and_are_capped() {
    let m = Metrics::new().unwrap();
    let t = now_ms();
    let huge = "x".repeat(10 * 1024);
    let euro = format!("a{}", "€".repeat(100)); // 1 + 300 bytes
    let hostile: Vec<String> = vec![
        "<script>alert(1)</script>".into(),
        "a\"b\\c\nd} x=\"1".into(),
        "\0\r\t\u{1b}[31m".into(),
        "é".repeat(200),
        "🦀".repeat(40),
        euro.clone(),
        huge.clone(),
        String::new(),
    ];
    let info = "tenure_election_leader_info";
    for (i, h) in hostile.iter().enumerate() {
        let token = i as i64 + 1;
        let election = format!("e{i}");
        m.apply(&batch(
            token,
            vec![ev(token, t, &election, started(token, h, token, Some(h)))],
        ));
        let x = Exposition::new(m.render());
        let s = x.matching(info, &[("election", &election)]);
        assert_eq!(s.len(), 1, "{h:?}");
        let label = &s[0].labels["holder"];
        assert!(label.len() <= MAX_HOLDER_LABEL_BYTES, "{}", label.len());
        assert!(h.starts_with(label.as_str()), "{label:?} is not a prefix");
        if h.len() <= MAX_HOLDER_LABEL_BYTES {
            assert_eq!(label, h);
        } else {
            // cut at the last char boundary at or below the cap
            assert!(label.len() > MAX_HOLDER_LABEL_BYTES - 4, "{}", label.len());
        }
        // proclaim to something else hostile, then end the term
        m.apply(&batch(
            token,
            vec![ev(
                token,
                t,
                &election,
                EventKind::LeaderValueChanged {
                    token,
                    holder: format!("{h}{h}"),
                    previous: h.clone(),
                },
            )],
        ));
        m.apply(&batch(
            token,
            vec![ev(
                token,
                t,
                &election,
                ended(token, h, token, EndCause::Deleted, t),
            )],
        ));
        let x = Exposition::new(m.render());
        assert!(x.matching(info, &[("election", &election)]).is_empty());
    }
    assert_eq!(cap_label(&euro, 128).len(), 127);
    assert_eq!(cap_label(&huge, 128).len(), 128);
    assert_eq!(cap_label("é", 1), "");

    // The HTML holder is a label value, verbatim (the text format has no
    // HTML to escape), and the quote/newline one round-trips.
    m.apply(&batch(
        100,
        vec![ev(100, t, "html", started(100, &hostile[0], 100, None))],
    ));
    m.apply(&batch(
        101,
        vec![ev(101, t, "quote", started(101, &hostile[1], 101, None))],
    ));
    let x = Exposition::new(m.render());
    assert_eq!(
        x.value(
            info,
            &[
                ("election", "html"),
                ("holder", "<script>alert(1)</script>")
            ]
        ),
        1.0
    );
    assert_eq!(
        x.value(info, &[("election", "quote"), ("holder", &hostile[1])]),
        1.0
    );

    // Hostile election names (the watcher validates them; nothing panics
    // if it did not), hostile resources, and a hostile overflow name.
    let long_name = "ü".repeat(300);
    for name in [long_name.as_str(), "\"}\n# HELP x", "<b>"] {
        m.apply(&batch(
            200,
            vec![
                ev(200, t, name, started(200, &huge, 1, None)),
                ev(
                    200,
                    t,
                    name,
                    EventKind::FenceRefused {
                        resource: huge.clone(),
                        token: 1,
                        reason: FenceReason::StaleToken,
                        current_token: Some(200),
                        current_holder: Some(huge.clone()),
                    },
                ),
            ],
        ));
        m.apply(&sampled(name, 1, Some(i64::MAX)));
        m.apply(&Update::Watch(WatchStatus::Overflow {
            election: huge.clone(),
        }));
    }
    let x = Exposition::new(m.render());
    for s in &x.samples {
        if let Some(e) = s.labels.get("election") {
            assert!(e.len() <= MAX_ELECTION_LABEL_BYTES, "{}", e.len());
        }
        if let Some(h) = s.labels.get("holder") {
            assert!(h.len() <= MAX_HOLDER_LABEL_BYTES);
        }
    }
    let labelled = election_label(&long_name);
    let capped = labelled.as_ref();
    assert!(capped.len() <= MAX_ELECTION_LABEL_BYTES && capped.contains('~'));
    assert_eq!(
        x.value(
            "tenure_election_lease_remaining_seconds",
            &[("election", capped)]
        ),
        i64::MAX as f64
    );
    // Forgetting by the full (uncapped) name removes the capped series.
    m.apply(&Update::Forgotten {
        election: long_name.clone(),
    });
    let x = Exposition::new(m.render());
    assert!(x
        .matching("tenure_election_has_leader", &[("election", capped)])
        .is_empty());
    assert!(x.matching(info, &[("election", capped)]).is_empty());
}

/// Two names longer than the label cap that share their first 128 bytes
/// (a `--source`'s names go up to 511 bytes) keep a series each: a metric
/// never speaks for the wrong election.
#[test]
fn long_names_that_share_a_prefix_keep_their_own_series() {
    let m = Metrics::with_options(MetricsOptions {
        source_holder_labels: true,
        ..MetricsOptions::default()
    })
    .unwrap();
    let t = now_ms();
    let base = format!("/svc/{}", "n".repeat(480));
    let names: Vec<String> = (0..20).map(|i| format!("{base}{i:02}")).collect();
    for (i, n) in names.iter().enumerate() {
        let token = i as i64 + 1;
        m.apply(&batch(
            token,
            vec![ev(
                token,
                t,
                n,
                started(token, &format!("h{i}"), token, None),
            )],
        ));
    }
    let x = Exposition::new(m.render());
    let labels: std::collections::BTreeSet<&String> = x
        .samples
        .iter()
        .filter(|s| s.name == "tenure_election_leader_info")
        .filter_map(|s| s.labels.get("election"))
        .collect();
    assert_eq!(labels.len(), 20, "{labels:?}");
    for (i, n) in names.iter().enumerate() {
        let label = election_label(n);
        assert!(label.len() <= MAX_ELECTION_LABEL_BYTES);
        assert_eq!(
            x.value(
                "tenure_election_leader_info",
                &[("election", &label), ("holder", &format!("h{i}"))]
            ),
            1.0
        );
    }
}

#[test]
fn metrics_are_shared_across_threads() {
    let m = Arc::new(Metrics::new().unwrap());
    let t = now_ms();
    let threads: Vec<_> = (0..4)
        .map(|i| {
            let m = m.clone();
            std::thread::spawn(move || {
                for j in 0..250 {
                    m.apply(&batch(
                        j,
                        vec![ev(
                            j,
                            t,
                            &format!("e{i}"),
                            EventKind::FenceAccepted {
                                resource: "r".into(),
                                token: 1,
                            },
                        )],
                    ));
                    if j % 50 == 0 {
                        let _ = m.render();
                    }
                }
            })
        })
        .collect();
    for th in threads {
        th.join().unwrap();
    }
    let x = Exposition::new(m.render());
    assert_eq!(x.value("tenure_watch_events_total", &[]), 1000.0);
    for i in 0..4 {
        assert_eq!(
            x.value(
                "tenure_fencing_checks_total",
                &[("election", &format!("e{i}")), ("result", "accepted")]
            ),
            250.0
        );
    }
    assert_eq!(x.value("tenure_watch_elections", &[]), 4.0);
}

/// Another system's election (`--source`: names are paths) keeps its
/// holder values out of the `holder` label unless the operator asks: a
/// Patroni member's value or an application's key may hold a connection
/// string, and `/metrics` needs no credentials.
#[test]
fn a_foreign_sources_holder_is_no_label_unless_asked() {
    let t = now_ms();
    let secret = "postgres://app:s3cret@db:5432/x";
    for (options, want) in [
        (MetricsOptions::default(), ""),
        (
            MetricsOptions {
                source_holder_labels: true,
                ..MetricsOptions::default()
            },
            secret,
        ),
    ] {
        let m = Metrics::with_options(options).unwrap();
        m.apply(&batch(
            7,
            vec![
                ev(7, t, "/app/config", started(7, secret, 7, None)),
                ev(7, t, "jobs", started(7, "worker-1", 7, None)),
            ],
        ));
        let x = Exposition::new(m.render());
        let info = "tenure_election_leader_info";
        assert_eq!(
            x.value(info, &[("election", "/app/config"), ("holder", want)]),
            1.0
        );
        assert!(!x.text.contains("s3cret") || !want.is_empty(), "{}", x.text);
        // tenure's own elections are labelled by their holder as always.
        assert_eq!(
            x.value(info, &[("election", "jobs"), ("holder", "worker-1")]),
            1.0
        );
    }
}
