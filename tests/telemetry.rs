//! Metrics and traces, fed scripted watcher updates (no etcd needed).

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tenure::election::{FenceReason, Layout};
use tenure::events::*;
use tenure::telemetry::*;

use opentelemetry_sdk::trace::{InMemorySpanExporter, SpanData};
use tracing_subscriber::layer::SubscriberExt;
use tracing_subscriber::Registry;

// ---------------------------------------------------------------------------
// Exposition-format parsing.

/// One sample: name, labels (sorted), value.
#[derive(Debug, Clone)]
struct Sample {
    name: String,
    labels: BTreeMap<String, String>,
    value: f64,
}

/// Parses the text exposition format strictly enough to catch escaping bugs.
fn parse(text: &str) -> Vec<Sample> {
    let mut out = Vec::new();
    for line in text.lines() {
        if line.is_empty() || line.starts_with('#') {
            continue;
        }
        let name_end = line
            .find(['{', ' '])
            .unwrap_or_else(|| panic!("no value: {line:?}"));
        let name = line[..name_end].to_owned();
        let mut labels = BTreeMap::new();
        let mut rest = &line[name_end..];
        if let Some(r) = rest.strip_prefix('{') {
            let mut chars = r.char_indices();
            let end = loop {
                let (i, c) = chars.next().unwrap_or_else(|| panic!("unclosed: {line:?}"));
                if c == '}' {
                    break i + 1;
                }
                if c == ',' {
                    continue;
                }
                let key_start = i;
                let mut key_end = i;
                for (j, c) in chars.by_ref() {
                    if c == '=' {
                        key_end = j;
                        break;
                    }
                }
                let key = r[key_start..key_end].to_owned();
                assert_eq!(chars.next().map(|x| x.1), Some('"'), "{line:?}");
                let mut value = String::new();
                loop {
                    let (_, c) = chars
                        .next()
                        .unwrap_or_else(|| panic!("bad value: {line:?}"));
                    match c {
                        '"' => break,
                        '\\' => match chars.next().map(|x| x.1) {
                            Some('\\') => value.push('\\'),
                            Some('"') => value.push('"'),
                            Some('n') => value.push('\n'),
                            other => panic!("bad escape {other:?} in {line:?}"),
                        },
                        '\n' => panic!("raw newline in {line:?}"),
                        c => value.push(c),
                    }
                }
                labels.insert(key, value);
            };
            rest = &r[end..];
        }
        let value = rest.split_whitespace().next().expect("value");
        let value = match value {
            "+Inf" => f64::INFINITY,
            "-Inf" => f64::NEG_INFINITY,
            v => v.parse().unwrap_or_else(|_| panic!("bad value {v:?}")),
        };
        out.push(Sample {
            name,
            labels,
            value,
        });
    }
    out
}

struct Exposition {
    text: String,
    samples: Vec<Sample>,
}

impl Exposition {
    fn new(text: String) -> Self {
        let samples = parse(&text);
        Self { text, samples }
    }

    /// The samples of `name` whose labels include `labels`.
    fn matching(&self, name: &str, labels: &[(&str, &str)]) -> Vec<&Sample> {
        self.samples
            .iter()
            .filter(|s| {
                s.name == name
                    && labels
                        .iter()
                        .all(|(k, v)| s.labels.get(*k).map(String::as_str) == Some(*v))
            })
            .collect()
    }

    /// The value of the one sample of `name` with exactly `labels`.
    fn get(&self, name: &str, labels: &[(&str, &str)]) -> Option<f64> {
        let found: Vec<_> = self
            .matching(name, labels)
            .into_iter()
            .filter(|s| s.labels.len() == labels.len())
            .collect();
        assert!(found.len() <= 1, "{name} {labels:?}: {found:?}");
        found.first().map(|s| s.value)
    }

    #[track_caller]
    fn value(&self, name: &str, labels: &[(&str, &str)]) -> f64 {
        self.get(name, labels)
            .unwrap_or_else(|| panic!("no sample {name} {labels:?} in\n{}", self.text))
    }

    /// Family name → HELP text.
    fn help(&self) -> BTreeMap<String, String> {
        self.text
            .lines()
            .filter_map(|l| l.strip_prefix("# HELP "))
            .filter_map(|l| l.split_once(' '))
            .map(|(n, h)| (n.to_owned(), h.to_owned()))
            .collect()
    }

    fn types(&self) -> BTreeMap<String, String> {
        self.text
            .lines()
            .filter_map(|l| l.strip_prefix("# TYPE "))
            .filter_map(|l| l.split_once(' '))
            .map(|(n, h)| (n.to_owned(), h.to_owned()))
            .collect()
    }
}

// ---------------------------------------------------------------------------
// Scripted updates.

fn ev(revision: i64, at_ms: i64, election: &str, kind: EventKind) -> Event {
    Event {
        revision,
        at_ms,
        election: election.to_owned(),
        kind,
    }
}

fn batch(revision: i64, events: Vec<Event>) -> Update {
    Update::Batch(Batch { revision, events })
}

fn started(token: i64, holder: &str, lease_id: i64, previous: Option<&str>) -> EventKind {
    EventKind::TermStarted {
        token,
        holder: holder.to_owned(),
        lease_id,
        layout: Layout::Single,
        previous_holder: previous.map(str::to_owned),
        from_snapshot: false,
    }
}

fn ended(
    token: i64,
    holder: &str,
    lease_id: i64,
    cause: EndCause,
    started_at_ms: i64,
) -> EventKind {
    EventKind::TermEnded {
        token,
        holder: holder.to_owned(),
        lease_id,
        cause,
        started_revision: token,
        started_at_ms,
    }
}

fn sampled(election: &str, lease_id: i64, remaining: Option<i64>) -> Update {
    Update::LeaseSampled {
        election: election.to_owned(),
        lease_id,
        remaining_seconds: remaining,
    }
}

const S: i64 = 1000;

/// The story the scripted tests replay; returns (updates, number of events,
/// the time election "db" became leaderless for good).
fn script(base: i64) -> (Vec<Update>, u64, i64) {
    let db_end = base + 120 * S;
    let updates = vec![
        Update::Watch(WatchStatus::EtcdUp(true)),
        // db: alice leads (token 10, lease 0xa), her lease is sampled.
        batch(
            10,
            vec![ev(10, base, "db", started(10, "alice", 0xa, None))],
        ),
        sampled("db", 0xa, Some(7)),
        // proclaim: alice → alice-v2 within the same term.
        batch(
            11,
            vec![ev(
                11,
                base + 10 * S,
                "db",
                EventKind::LeaderValueChanged {
                    token: 10,
                    holder: "alice-v2".into(),
                    previous: "alice".into(),
                },
            )],
        ),
        // two accepted fence checks
        batch(
            12,
            vec![
                ev(
                    12,
                    base + 20 * S,
                    "db",
                    EventKind::FenceAccepted {
                        resource: "orders".into(),
                        token: 10,
                    },
                ),
                ev(
                    12,
                    base + 20 * S,
                    "db",
                    EventKind::FenceAccepted {
                        resource: "ledger".into(),
                        token: 10,
                    },
                ),
            ],
        ),
        // alice resigns after 60 s.
        batch(
            13,
            vec![ev(
                13,
                base + 60 * S,
                "db",
                ended(10, "alice-v2", 0xa, EndCause::Resigned, base),
            )],
        ),
        // a refusal while nobody leads
        batch(
            14,
            vec![ev(
                14,
                base + 70 * S,
                "db",
                EventKind::FenceRefused {
                    resource: "orders".into(),
                    token: 10,
                    reason: FenceReason::NoLeader,
                    current_token: None,
                    current_holder: None,
                },
            )],
        ),
        // bob leads 30 s after alice resigned.
        batch(
            15,
            vec![ev(
                15,
                base + 90 * S,
                "db",
                started(15, "bob", 0xb, Some("alice-v2")),
            )],
        ),
        sampled("db", 0xa, Some(3)), // alice's old lease: ignored
        sampled("db", 0xb, Some(5)),
        // bob's lease expires after 30 s: db stays leaderless.
        batch(
            16,
            vec![ev(
                16,
                db_end,
                "db",
                ended(15, "bob", 0xb, EndCause::Expired, base + 90 * S),
            )],
        ),
        Update::Watch(WatchStatus::Restarted(RestartReason::Compacted)),
        Update::Watch(WatchStatus::Restarted(RestartReason::StreamError)),
        Update::Watch(WatchStatus::Restarted(RestartReason::StreamError)),
        Update::Watch(WatchStatus::CaughtUp { revision: 17 }),
        Update::Watch(WatchStatus::Overflow {
            election: "other".into(),
        }),
        Update::Watch(WatchStatus::IgnoredKey),
        Update::Watch(WatchStatus::IgnoredKey),
        batch(
            18,
            vec![ev(
                18,
                base + 130 * S,
                "",
                EventKind::Gap {
                    from_revision: 16,
                    to_revision: 17,
                },
            )],
        ),
        // web: a term already running when first seen, superseded by w2.
        batch(
            19,
            vec![ev(
                19,
                base,
                "web",
                EventKind::TermStarted {
                    token: 5,
                    holder: "w1".into(),
                    lease_id: 0x5,
                    layout: Layout::Queue,
                    previous_holder: None,
                    from_snapshot: true,
                },
            )],
        ),
        batch(
            20,
            vec![
                ev(
                    20,
                    base + 10 * S,
                    "web",
                    ended(5, "w1", 0x5, EndCause::Superseded, base),
                ),
                ev(20, base + 10 * S, "web", started(8, "w2", 0x8, Some("w1"))),
            ],
        ),
        sampled("web", 0x8, Some(9)),
        sampled("nobody-knows-me", 0x8, Some(9)),
        // tmp: comes and is forgotten.
        batch(21, vec![ev(21, base, "tmp", started(21, "t", 0x21, None))]),
        sampled("tmp", 0x21, Some(4)),
        batch(
            22,
            vec![ev(
                22,
                base + S,
                "tmp",
                ended(21, "t", 0x21, EndCause::Deleted, base),
            )],
        ),
        Update::Forgotten {
            election: "tmp".into(),
        },
    ];
    let events = updates
        .iter()
        .map(|u| match u {
            Update::Batch(b) => b.events.len() as u64,
            _ => 0,
        })
        .sum();
    (updates, events, db_end)
}

fn scripted_metrics(base: i64) -> (Metrics, u64, i64) {
    let m = Metrics::new().expect("metrics");
    let (updates, events, db_end) = script(base);
    for u in &updates {
        m.apply(u);
    }
    (m, events, db_end)
}

// ---------------------------------------------------------------------------
// Metrics.

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
    assert_eq!(
        ty("tenure_election_term_duration_seconds"),
        Some("histogram")
    );
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
                layout: Layout::Single,
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
    let capped = cap_label(&long_name, MAX_ELECTION_LABEL_BYTES);
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

// ---------------------------------------------------------------------------
// Traces.

fn transitions(t: i64, hostile_holder: &str) -> Update {
    batch(
        460,
        vec![
            ev(451, t - 60 * S, "db", started(451, "alice", 0x1a, None)),
            ev(
                452,
                t - 50 * S,
                "db",
                EventKind::LeaderValueChanged {
                    token: 451,
                    holder: "alice-2".into(),
                    previous: "alice".into(),
                },
            ),
            ev(
                453,
                t - 40 * S,
                "db",
                EventKind::FenceAccepted {
                    resource: "orders".into(),
                    token: 451,
                },
            ),
            ev(
                454,
                t - 30 * S,
                "db",
                ended(451, "alice-2", 0x1a, EndCause::Expired, t - 60 * S),
            ),
            ev(
                455,
                t - 20 * S,
                "db",
                started(455, hostile_holder, 0x1b, Some("alice-2")),
            ),
            ev(
                456,
                t - 10 * S,
                "db",
                EventKind::FenceRefused {
                    resource: "orders".into(),
                    token: 451,
                    reason: FenceReason::TermEnded,
                    current_token: Some(455),
                    current_holder: Some(hostile_holder.into()),
                },
            ),
            ev(
                460,
                t,
                "",
                EventKind::Gap {
                    from_revision: 457,
                    to_revision: 459,
                },
            ),
        ],
    )
}

fn attr(span: &SpanData, key: &str) -> Option<opentelemetry::Value> {
    span.attributes
        .iter()
        .find(|kv| kv.key.as_str() == key)
        .map(|kv| kv.value.clone())
}

fn s(v: &str) -> Option<opentelemetry::Value> {
    Some(opentelemetry::Value::from(v.to_owned()))
}

fn i(v: i64) -> Option<opentelemetry::Value> {
    Some(opentelemetry::Value::I64(v))
}

#[test]
fn record_makes_one_span_per_transition_with_attributes() {
    let exporter = InMemorySpanExporter::default();
    let (layer, guard) = layer_with_exporter::<Registry, _>(exporter.clone(), "tenure-test");
    let subscriber = Registry::default().with(layer);
    let huge = "<b>".repeat(1000);
    tracing::subscriber::with_default(subscriber, || {
        record(&transitions(now_ms(), &huge));
        // Updates that are not transitions make no span.
        record(&sampled("db", 1, Some(3)));
        record(&Update::Watch(WatchStatus::EtcdUp(true)));
    });
    guard.force_flush().expect("flush");
    let spans = exporter.get_finished_spans().expect("spans");
    let names: Vec<&str> = spans.iter().map(|s| s.name.as_ref()).collect();
    assert_eq!(
        names,
        [
            "election.term_started",
            "election.leader_value_changed",
            "election.term_ended",
            "election.term_started",
            "election.fence_refused",
            "watch.gap",
        ]
    );

    let first = &spans[0];
    assert_eq!(attr(first, "election.name"), s("db"));
    assert_eq!(attr(first, "election.token"), i(451));
    assert_eq!(attr(first, "election.holder"), s("alice"));
    assert_eq!(attr(first, "election.previous_holder"), None);
    assert_eq!(attr(first, "election.lease_id"), i(0x1a));
    assert_eq!(attr(first, "election.layout"), s("single-key"));
    assert_eq!(
        attr(first, "election.from_snapshot"),
        Some(opentelemetry::Value::Bool(false))
    );
    assert_eq!(attr(first, "etcd.revision"), i(451));
    assert_eq!(first.instrumentation_scope.name(), TRACER_NAME);

    let proclaim = &spans[1];
    assert_eq!(attr(proclaim, "election.holder"), s("alice-2"));
    assert_eq!(attr(proclaim, "election.previous_holder"), s("alice"));
    assert_eq!(attr(proclaim, "etcd.revision"), i(452));

    let end = &spans[2];
    assert_eq!(attr(end, "election.end_cause"), s("expired"));
    assert_eq!(attr(end, "election.token"), i(451));
    assert_eq!(attr(end, "election.holder"), s("alice-2"));
    assert_eq!(
        attr(end, "election.term_seconds"),
        Some(opentelemetry::Value::F64(30.0))
    );

    let second = &spans[3];
    assert_eq!(attr(second, "election.token"), i(455));
    assert_eq!(attr(second, "election.previous_holder"), s("alice-2"));
    let capped = &huge[..MAX_HOLDER_ATTRIBUTE_BYTES - MAX_HOLDER_ATTRIBUTE_BYTES % 3];
    let holder = attr(second, "election.holder").expect("holder").to_string();
    assert!(holder.len() <= MAX_HOLDER_ATTRIBUTE_BYTES);
    assert!(huge.starts_with(&holder) && holder.starts_with(capped));

    let refused = &spans[4];
    assert_eq!(attr(refused, "fence.resource"), s("orders"));
    assert_eq!(attr(refused, "fence.reason"), s("term_ended"));
    assert_eq!(attr(refused, "election.token"), i(451));
    assert_eq!(attr(refused, "fence.current_token"), i(455));
    assert_eq!(attr(refused, "etcd.revision"), i(456));

    let gap = &spans[5];
    assert_eq!(attr(gap, "gap.from_revision"), i(457));
    assert_eq!(attr(gap, "gap.to_revision"), i(459));
    assert_eq!(attr(gap, "etcd.revision"), i(460));
    assert_eq!(attr(gap, "election.name"), None);
    drop(guard);
}

#[test]
fn spans_outside_tenure_are_not_exported() {
    let exporter = InMemorySpanExporter::default();
    let (layer, guard) = layer_with_exporter::<Registry, _>(exporter.clone(), "tenure-test");
    tracing::subscriber::with_default(Registry::default().with(layer), || {
        let _a = tracing::info_span!(target: "h2::proto", "noise").entered();
        let _b = tracing::info_span!(target: "reqwest::connect", "noise").entered();
        let _c = tracing::trace_span!("too_fine").entered(); // below DEBUG
    });
    guard.force_flush().unwrap();
    assert!(exporter.get_finished_spans().unwrap().is_empty());
}

/// A `MakeWriter` into a shared buffer.
#[derive(Clone, Default)]
struct Buf(Arc<Mutex<Vec<u8>>>);

impl std::io::Write for Buf {
    fn write(&mut self, b: &[u8]) -> std::io::Result<usize> {
        self.0.lock().unwrap().extend_from_slice(b);
        Ok(b.len())
    }
    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

impl<'a> tracing_subscriber::fmt::MakeWriter<'a> for Buf {
    type Writer = Buf;
    fn make_writer(&'a self) -> Buf {
        self.clone()
    }
}

#[test]
fn transitions_show_in_debug_logs_and_not_at_warn() {
    use tracing_subscriber::filter::LevelFilter;
    use tracing_subscriber::Layer as _;
    for (level, shown) in [(LevelFilter::DEBUG, true), (LevelFilter::WARN, false)] {
        let buf = Buf::default();
        let fmt = tracing_subscriber::fmt::layer()
            .with_writer(buf.clone())
            .with_ansi(false)
            .with_filter(level);
        tracing::subscriber::with_default(Registry::default().with(fmt), || {
            record(&transitions(now_ms(), "bob\n<evil>"));
        });
        let out = String::from_utf8(buf.0.lock().unwrap().clone()).unwrap();
        assert_eq!(out.contains("election.term_started"), shown, "{out}");
        assert_eq!(out.contains("election.holder=\"alice\""), shown, "{out}");
        assert_eq!(out.contains("fence.reason=\"term_ended\""), shown, "{out}");
        // A holder's newline does not forge a log line.
        assert!(!out.contains("\n<evil>"), "{out}");
    }
}

#[test]
fn config_from_environment_variables() {
    let cfg = |vars: &[(&str, &str)]| {
        let vars: Vec<(String, String)> = vars
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect();
        TracesConfig::from_lookup(move |k| {
            vars.iter().find(|(n, _)| n == k).map(|(_, v)| v.clone())
        })
    };
    assert_eq!(cfg(&[]).unwrap(), None);
    assert_eq!(cfg(&[("OTEL_SERVICE_NAME", "x")]).unwrap(), None);
    assert_eq!(cfg(&[("OTEL_EXPORTER_OTLP_ENDPOINT", "  ")]).unwrap(), None);

    let c = cfg(&[("OTEL_EXPORTER_OTLP_ENDPOINT", "http://127.0.0.1:4318/")])
        .unwrap()
        .unwrap();
    assert_eq!(c.endpoint, "http://127.0.0.1:4318/v1/traces");
    assert_eq!(c.service_name, DEFAULT_SERVICE_NAME);
    assert_eq!(c.service_name, "tenure");

    let c = cfg(&[
        ("OTEL_EXPORTER_OTLP_ENDPOINT", "http://127.0.0.1:1"),
        (
            "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT",
            "http://127.0.0.1:2/custom",
        ),
        ("OTEL_SERVICE_NAME", "svc"),
        ("OTEL_EXPORTER_OTLP_PROTOCOL", "http/protobuf"),
    ])
    .unwrap()
    .unwrap();
    assert_eq!(c.endpoint, "http://127.0.0.1:2/custom");
    assert_eq!(c.service_name, "svc");

    let c = cfg(&[
        ("OTEL_EXPORTER_OTLP_ENDPOINT", "http://127.0.0.1:1"),
        (
            "OTEL_RESOURCE_ATTRIBUTES",
            "a=b, service.name = from-attrs ,c=d",
        ),
    ])
    .unwrap()
    .unwrap();
    assert_eq!(c.service_name, "from-attrs");

    for off in [
        ("OTEL_SDK_DISABLED", "true"),
        ("OTEL_SDK_DISABLED", "TRUE"),
        ("OTEL_TRACES_EXPORTER", "none"),
    ] {
        assert_eq!(
            cfg(&[("OTEL_EXPORTER_OTLP_ENDPOINT", "http://127.0.0.1:1"), off]).unwrap(),
            None,
            "{off:?}"
        );
    }
    for (var, proto) in [
        ("OTEL_EXPORTER_OTLP_PROTOCOL", "grpc"),
        ("OTEL_EXPORTER_OTLP_TRACES_PROTOCOL", "http/json"),
    ] {
        let err = cfg(&[
            ("OTEL_EXPORTER_OTLP_ENDPOINT", "http://127.0.0.1:1"),
            (var, proto),
        ])
        .unwrap_err();
        assert!(
            matches!(&err, TelemetryError::UnsupportedProtocol(p) if p == proto),
            "{err}"
        );
    }
}

#[test]
fn layer_from_env_is_off_without_an_endpoint() {
    let set = |k: &str| std::env::var(k).is_ok_and(|v| !v.trim().is_empty());
    if set("OTEL_EXPORTER_OTLP_ENDPOINT") || set("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT") {
        eprintln!("skipped: an OTLP endpoint is set in this environment");
        return;
    }
    assert!(layer_from_env::<Registry>().unwrap().is_none());
}

#[test]
fn an_invalid_endpoint_is_an_error() {
    let config = TracesConfig {
        endpoint: "http://[::1".into(),
        service_name: "tenure".into(),
    };
    let err = layer_from_config::<Registry>(&config).err().expect("error");
    assert!(matches!(err, TelemetryError::Exporter(_)), "{err}");
}

/// What the loopback receiver got.
struct Received {
    path: String,
    content_type: String,
    body: Vec<u8>,
}

#[test]
fn otlp_http_export_reaches_a_loopback_receiver() {
    use axum::{body::Bytes, extract::OriginalUri, http::HeaderMap, http::StatusCode};
    use opentelemetry_proto::tonic::collector::trace::v1::ExportTraceServiceRequest;
    use opentelemetry_proto::tonic::common::v1::any_value::Value as Any;
    use prost::Message as _;

    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(1)
        .enable_all()
        .build()
        .unwrap();
    let (tx, rx) = std::sync::mpsc::channel::<Received>();
    let listener = rt
        .block_on(tokio::net::TcpListener::bind("127.0.0.1:0"))
        .unwrap();
    let addr = listener.local_addr().unwrap();
    assert!(addr.ip().is_loopback());
    let receive = move |uri: OriginalUri, headers: HeaderMap, body: Bytes| {
        let tx = tx.clone();
        async move {
            let _ = tx.send(Received {
                path: uri.path().to_owned(),
                content_type: headers
                    .get("content-type")
                    .and_then(|v| v.to_str().ok())
                    .unwrap_or_default()
                    .to_owned(),
                body: body.to_vec(),
            });
            StatusCode::OK
        }
    };
    let app = axum::Router::new().fallback(receive);
    rt.spawn(async move { axum::serve(listener, app).await });

    let base = format!("http://{addr}");
    let config = TracesConfig::from_lookup(|k| match k {
        "OTEL_EXPORTER_OTLP_ENDPOINT" => Some(base.clone()),
        "OTEL_SERVICE_NAME" => Some("tenure-otlp-test".into()),
        _ => None,
    })
    .unwrap()
    .unwrap();
    assert_eq!(config.endpoint, format!("http://{addr}/v1/traces"));
    let (layer, guard) = layer_from_config::<Registry>(&config).expect("layer");
    tracing::subscriber::with_default(Registry::default().with(layer), || {
        record(&transitions(now_ms(), "bob"));
    });
    guard.shutdown().expect("export and shut down");

    let mut spans = Vec::new();
    let mut service_names = Vec::new();
    while let Ok(r) = rx.recv_timeout(Duration::from_secs(if spans.is_empty() { 20 } else { 1 })) {
        assert_eq!(r.path, "/v1/traces");
        assert_eq!(r.content_type, "application/x-protobuf");
        let req = ExportTraceServiceRequest::decode(r.body.as_slice()).expect("protobuf");
        for rs in req.resource_spans {
            for kv in rs.resource.iter().flat_map(|r| r.attributes.iter()) {
                if kv.key == "service.name" {
                    service_names.push(kv.value.clone().and_then(|v| v.value));
                }
            }
            for ss in rs.scope_spans {
                spans.extend(ss.spans);
            }
        }
    }
    assert_eq!(
        service_names,
        [Some(Any::StringValue("tenure-otlp-test".into()))]
    );
    assert_eq!(
        spans.len(),
        6,
        "{:?}",
        spans.iter().map(|s| &s.name).collect::<Vec<_>>()
    );
    let get = |span: &opentelemetry_proto::tonic::trace::v1::Span, key: &str| {
        span.attributes
            .iter()
            .find(|kv| kv.key == key)
            .and_then(|kv| kv.value.clone())
            .and_then(|v| v.value)
    };
    let started = spans
        .iter()
        .find(|s| {
            s.name == "election.term_started"
                && get(s, "election.token") == Some(Any::IntValue(455))
        })
        .expect("term_started span");
    assert_eq!(
        get(started, "election.name"),
        Some(Any::StringValue("db".into()))
    );
    assert_eq!(
        get(started, "election.holder"),
        Some(Any::StringValue("bob".into()))
    );
    assert_eq!(
        get(started, "election.previous_holder"),
        Some(Any::StringValue("alice-2".into()))
    );
    assert_eq!(get(started, "etcd.revision"), Some(Any::IntValue(455)));
    let ended = spans
        .iter()
        .find(|s| s.name == "election.term_ended")
        .expect("term_ended span");
    assert_eq!(
        get(ended, "election.end_cause"),
        Some(Any::StringValue("expired".into()))
    );
    let refused = spans
        .iter()
        .find(|s| s.name == "election.fence_refused")
        .expect("fence_refused span");
    assert_eq!(
        get(refused, "fence.reason"),
        Some(Any::StringValue("term_ended".into()))
    );
    assert_eq!(
        get(refused, "fence.resource"),
        Some(Any::StringValue("orders".into()))
    );
    rt.shutdown_timeout(Duration::from_secs(1));
}
